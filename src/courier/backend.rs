//! What a courier run reaches the learner's code through: one call of a piece, the
//! backend that holds the database, and why a run stopped. The world's answer at each
//! statement and provider call is `faults.rs`'s.

pub use super::faults::{Fault, Faults, Killed};
use super::provider::Webhook;
use super::step_world::StepWorld;
use super::tables::{ActionRow, Config, Tables};
use crate::value::{LearnerError, Value};
use serde::Serialize;
use std::fmt;

/// One call of a learner piece, as the backend receives it.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "piece", rename_all = "snake_case")]
pub enum Call {
    Claim {
        worker: String,
        now_ms: u64,
    },
    WriteIntent {
        action_id: u64,
        worker: String,
        epoch: i64,
    },
    DeliverStep {
        action_id: u64,
        worker: String,
        epoch: i64,
        now_ms: u64,
    },
    OnWebhook {
        event: Webhook,
    },
    Merge {
        current: String,
        reported: String,
    },
    Heartbeat {
        action_id: u64,
        worker: String,
        epoch: i64,
        now_ms: u64,
    },
}

impl Call {
    pub fn function(&self) -> &'static str {
        match self {
            Call::Claim { .. } => "claim",
            Call::WriteIntent { .. } => "write_intent",
            Call::DeliverStep { .. } => "deliver_step",
            Call::OnWebhook { .. } => "on_webhook",
            Call::Heartbeat { .. } => "heartbeat",
            Call::Merge { .. } => "merge",
        }
    }
}

/// Why a run, or a trusted backend operation, ended before its end. Typed, so that no
/// decision reads a message's words (a learner's exception may say "limit").
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "stop", content = "message", rename_all = "kebab-case")]
pub enum RunStop {
    /// The learner's code reached the run's time limit: no later test runs.
    TimedOut(String),
    /// The run fails with this message; the later tests still run.
    Failed(String),
}

impl RunStop {
    pub fn is_timeout(&self) -> bool {
        matches!(self, RunStop::TimedOut(_))
    }

    /// The same stop, its message rewritten (a prefix saying where it happened).
    pub fn map(self, f: impl FnOnce(String) -> String) -> RunStop {
        match self {
            RunStop::TimedOut(m) => RunStop::TimedOut(f(m)),
            RunStop::Failed(m) => RunStop::Failed(f(m)),
        }
    }
}

impl fmt::Display for RunStop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RunStop::TimedOut(m) | RunStop::Failed(m) => f.write_str(m),
        }
    }
}

impl From<LearnerError> for RunStop {
    fn from(e: LearnerError) -> Self {
        match e {
            LearnerError::Timeout { .. } => RunStop::TimedOut(e.to_string()),
            _ => RunStop::Failed(e.to_string()),
        }
    }
}

/// The courier service under test, as the simulation sees it: the database, the
/// learner's pieces, and the trusted calls around them. The learner's is
/// `learner::LearnerBackend` (its database in the host's store), the reference's
/// `reference::RefBackend`.
pub trait Backend {
    /// A fresh database with the lab's schema and these stores.
    fn reset(&mut self, cfg: &Config, stores: &[String]) -> Result<(), RunStop>;
    /// Trusted: a new pending action.
    fn enqueue(&mut self, action: &ActionRow) -> Result<(), RunStop>;
    /// Trusted (fairness run only): the action's message went out; release it.
    fn settle(&mut self, action_id: u64, now_ms: u64) -> Result<(), RunStop>;
    /// Runs one learner piece; `faults` is asked at every statement and provider call.
    fn call(&mut self, call: &Call, world: &StepWorld) -> Result<Value, LearnerError>;
    /// The worker's process is gone: roll back and close its connection.
    fn kill(&mut self, worker: &str);
    /// The database restarts: every open transaction is lost.
    fn restart_db(&mut self);
    /// Trusted: every table's rows, as committed.
    fn dump(&mut self) -> Result<Tables, RunStop>;
    /// What the learner's code printed since the last time this was asked.
    fn take_output(&mut self) -> Option<String> {
        None
    }
    /// Trusted: replaces every table's rows (a unit case's starting state).
    fn load(&mut self, tables: &Tables) -> Result<(), RunStop>;
}
