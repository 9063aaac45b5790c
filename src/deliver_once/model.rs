//! The contract's types. Field names carry their units (`expires_at_s`); the Python
//! bridge presents them under the contract's attribute names (`expires_at`).

use crate::value::{float_repr, opt_float_repr, opt_str_repr, str_repr, Value};
use serde::{Deserialize, Serialize};

/// How long a "done" marker lives: seven days.
pub const DONE_TTL_S: f64 = 604_800.0;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TaskKind {
    Critical,
    Normal,
    Bulk,
}

impl TaskKind {
    pub fn as_str(self) -> &'static str {
        match self {
            TaskKind::Critical => "critical",
            TaskKind::Normal => "normal",
            TaskKind::Bulk => "bulk",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Task {
    /// The dedup key, e.g. `order-1042:shipped`.
    pub key: String,
    pub kind: TaskKind,
    /// Sends already made before this one; the first send is attempt 0.
    pub attempt: u32,
    /// Lab-clock second after which the message is worthless.
    pub expires_at_s: f64,
    /// Another channel to use instead, e.g. `sms`.
    pub fallback: Option<String>,
}

impl Task {
    pub fn repr(&self) -> String {
        format!(
            "Task(key={}, kind={}, attempt={}, expires_at={}, fallback={})",
            str_repr(&self.key),
            str_repr(self.kind.as_str()),
            self.attempt,
            float_repr(self.expires_at_s),
            opt_str_repr(self.fallback.as_deref())
        )
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Policy {
    pub claim_ttl_s: f64,
    /// True for bulk traffic: a claim held elsewhere counts as sent.
    pub at_most_once: bool,
    pub min_delay_s: f64,
    pub base_delay_s: f64,
    pub max_attempts: u32,
}

impl Policy {
    pub fn repr(&self) -> String {
        format!(
            "Policy(claim_ttl_s={}, at_most_once={}, min_delay_s={}, base_delay_s={}, max_attempts={})",
            float_repr(self.claim_ttl_s),
            if self.at_most_once { "True" } else { "False" },
            float_repr(self.min_delay_s),
            float_repr(self.base_delay_s),
            self.max_attempts
        )
    }
}

/// The provider's answer to one send.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SendResult {
    pub ok: bool,
    pub permanent: bool,
    /// e.g. `410 Unregistered`, `503`.
    pub reason: String,
    /// The provider's Retry-After, when it sent one; 0 counts as sent.
    pub retry_after_s: Option<f64>,
}

impl SendResult {
    pub fn ok() -> Self {
        SendResult {
            ok: true,
            permanent: false,
            reason: "200 OK".into(),
            retry_after_s: None,
        }
    }

    pub fn transient(reason: &str, retry_after_s: Option<f64>) -> Self {
        SendResult {
            ok: false,
            permanent: false,
            reason: reason.into(),
            retry_after_s,
        }
    }

    pub fn permanent(reason: &str) -> Self {
        SendResult {
            ok: false,
            permanent: true,
            reason: reason.into(),
            retry_after_s: None,
        }
    }

    pub fn repr(&self) -> String {
        let b = |x: bool| if x { "True" } else { "False" };
        format!(
            "SendResult(ok={}, permanent={}, reason={}, retry_after_s={})",
            b(self.ok),
            b(self.permanent),
            str_repr(&self.reason),
            opt_float_repr(self.retry_after_s)
        )
    }
}

/// What `deliver_once` returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    Sent,
    DuplicateSkipped,
    RetryLater,
    Failed,
}

impl Status {
    pub const ALL: [Status; 4] = [
        Status::Sent,
        Status::DuplicateSkipped,
        Status::RetryLater,
        Status::Failed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Status::Sent => "sent",
            Status::DuplicateSkipped => "duplicate-skipped",
            Status::RetryLater => "retry-later",
            Status::Failed => "failed",
        }
    }

    pub fn to_value(self) -> Value {
        Value::str(self.as_str())
    }
}

/// What `next_step` returns: `(action, value)`.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    Retry { delay_s: f64 },
    Fallback { channel: String },
    Dlq { reason: String },
    Drop { reason: String },
}

/// The reason a bulk task is dropped.
pub const DROP_REASON: &str = "expired or out of attempts";
/// The dlq reason once retries are used up.
pub const EXHAUSTED_REASON: &str = "retries exhausted";

impl Action {
    pub const NAMES: [&'static str; 4] = ["retry", "fallback", "dlq", "drop"];

    pub fn to_value(&self) -> Value {
        let (name, v) = match self {
            Action::Retry { delay_s } => ("retry", Value::Float(*delay_s)),
            Action::Fallback { channel } => ("fallback", Value::str(channel)),
            Action::Dlq { reason } => ("dlq", Value::str(reason)),
            Action::Drop { reason } => ("drop", Value::str(reason)),
        };
        Value::Tuple(vec![Value::str(name), v])
    }
}
