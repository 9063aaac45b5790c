//! The case format of the courier lab: the TOML that people write (documented in
//! `hidden-tests/README.md`), parsed and checked, naming the file, the case and the
//! field of anything malformed.
//!
//! Not a module of the engine, like lab 1's: `build.rs` includes this file (`#[path]`)
//! and writes Rust source that builds the engine's `units::UnitCase`s, so a malformed
//! file fails the build; `tests/courier_cases.rs` includes it to read the files again
//! and check every `expect` table against the reference. It depends on std, serde
//! and toml only: the types below mirror the engine's (`sim.rs`, `provider.rs`).

#![allow(dead_code)] // build.rs and each test use their own part of it

use serde::Deserialize;
use std::path::Path;

#[path = "../case_files.rs"]
mod case_files;
// A test that includes this file may use only some of these.
#[allow(unused_imports)]
pub use case_files::{read_lab_files, unique_names, CaseError, FileCase};

/// The engine's own rules (`rules.rs` needs nothing but serde, so it is shared as is).
#[path = "rules.rs"]
mod rules;
pub use rules::Rule;

/// The lab these files belong to (`courier::ID`; the tests check they agree).
pub const LAB: &str = "courier";

// ---- The file format, as people write it -------------------------------------------

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileSpec {
    #[serde(default)]
    defaults: DefaultsSpec,
    case: Vec<CaseSpec>,
}

/// What every case of the file starts from unless it says otherwise.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct DefaultsSpec {
    stores: Option<Vec<Store>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CaseSpec {
    name: String,
    rule: Rule,
    stores: Option<Vec<Store>>,
    #[serde(default)]
    actions: Vec<Action>,
    #[serde(default)]
    outbox: Vec<Outbox>,
    #[serde(default)]
    webhook_events: Vec<String>,
    call: CallSpec,
    #[serde(default)]
    provider: Provider,
    #[serde(default)]
    world: CaseScript,
    #[serde(default)]
    all_or_nothing: bool,
    interleave: Option<Interleave>,
    #[serde(default)]
    cfg: CfgSpec,
    expect: Option<Expect>,
}

/// The numbers the pieces get as `cfg` (`tables::Config`): a field left out keeps the
/// lab's default, which lives in the engine only.
#[derive(Deserialize, Default, Clone, Copy, Debug, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CfgSpec {
    pub lease_ms: Option<u64>,
    pub in_flight_cap: Option<u32>,
    pub recheck_ms: Option<u64>,
}

/// One call to a learner's piece (the `fn` key names it).
#[derive(Deserialize, Clone, Debug, PartialEq)]
#[serde(tag = "fn", rename_all = "snake_case", deny_unknown_fields)]
pub enum CallSpec {
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
        event_id: String,
        key: String,
        message_id: String,
        status: Status,
    },
    Merge {
        current: OutboxStatus,
        reported: OutboxStatus,
    },
    Heartbeat {
        action_id: u64,
        worker: String,
        epoch: i64,
        now_ms: u64,
    },
}

// ---- Mirrors of the engine's types ---------------------------------------------------

/// A row of `stores` (`sim::StoreState`).
#[derive(Deserialize, Clone, Debug, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Store {
    pub store: String,
    pub last_served_ms: u64,
}

/// A row of `actions` (`sim::ActionState`); the phone, the body and `created_ms`
/// follow from the id (`units::action`).
#[derive(Deserialize, Clone, Debug, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Action {
    pub id: u64,
    pub store: String,
    pub state: ActionStateName,
    /// Absent: NULL.
    pub owner: Option<String>,
    #[serde(default)]
    pub epoch: i64,
    #[serde(default)]
    pub lease_until_ms: u64,
    /// Absent: `id * 10` (created in id order).
    pub created_ms: Option<u64>,
}

#[derive(Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ActionStateName {
    Pending,
    Claimed,
    Dispatched,
}

impl ActionStateName {
    pub fn as_str(self) -> &'static str {
        match self {
            ActionStateName::Pending => "pending",
            ActionStateName::Claimed => "claimed",
            ActionStateName::Dispatched => "dispatched",
        }
    }
}

/// A row of `outbox` (`sim::OutboxState`).
#[derive(Deserialize, Clone, Debug, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Outbox {
    pub action_id: u64,
    /// Absent: `action-<action_id>`, the key the lab asks for.
    pub idem_key: Option<String>,
    pub attempts: i64,
    pub status: OutboxStatus,
    /// Absent: NULL.
    pub message_id: Option<String>,
    #[serde(default)]
    pub events_applied: i64,
}

impl Outbox {
    pub fn key(&self) -> String {
        self.idem_key
            .clone()
            .unwrap_or_else(|| format!("action-{}", self.action_id))
    }
}

/// `outbox.status`: the provider's statuses, and `sending` before any answer.
#[derive(Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum OutboxStatus {
    Sending,
    Accepted,
    Sent,
    Delivered,
    Failed,
}

impl OutboxStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            OutboxStatus::Sending => "sending",
            OutboxStatus::Accepted => "accepted",
            OutboxStatus::Sent => "sent",
            OutboxStatus::Delivered => "delivered",
            OutboxStatus::Failed => "failed",
        }
    }
}

/// The provider's statuses (`provider::Status`).
#[derive(Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Accepted,
    Sent,
    Delivered,
    Failed,
}

/// The provider's scripted answers, in order; the last one repeats.
#[derive(Deserialize, Default, Clone, Debug, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Provider {
    #[serde(default)]
    pub sends: Vec<SendAnswer>,
    #[serde(default)]
    pub lookups: Vec<LookupAnswer>,
}

/// `provider::SendAnswer`.
#[derive(Deserialize, Clone, Debug, PartialEq)]
#[serde(tag = "answer", rename_all = "kebab-case", deny_unknown_fields)]
pub enum SendAnswer {
    Accepted {
        message_id: String,
    },
    /// Unknown: the message may or may not have gone out.
    Timeout,
}

/// `provider::LookupAnswer`.
#[derive(Deserialize, Clone, Debug, PartialEq)]
#[serde(tag = "answer", rename_all = "kebab-case", deny_unknown_fields)]
pub enum LookupAnswer {
    Found { message_id: String, status: Status },
    NotFound,
    Timeout,
}

/// The scripted world of one case (its `world` table): what goes wrong during the
/// call (`sim::Script`).
#[derive(Deserialize, Default, Clone, Debug, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CaseScript {
    /// The worker is killed with its send on the wire (after the provider took it).
    #[serde(default)]
    pub kill_after_send: bool,
    /// The database is restarting: every statement fails.
    #[serde(default)]
    pub db_down: bool,
}

/// Real concurrency (`step_world::Interleave`): another worker's write commits on a
/// connection of its own while the call runs, once the caller has run
/// `after_statement` statements, at its first statement from then on with no
/// transaction open (else right after the call).
#[derive(Deserialize, Clone, Debug, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Interleave {
    pub after_statement: usize,
    pub claim: OtherClaim,
}

/// Another worker's claim of `action_id`: a compare-and-set on the epoch it read
/// (`epoch`), at `now_ms` (`step_world::OtherClaim`).
#[derive(Deserialize, Clone, Debug, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct OtherClaim {
    pub worker: String,
    pub action_id: u64,
    pub epoch: i64,
    pub now_ms: u64,
}

// ---- Expectations: checked against the reference by the tests, not compiled in ------

/// What the reference does in the case. Exactly one of `returns`, `raises` and
/// `killed`; the tables list only the rows the call changes or adds (each row whole),
/// and every other row must be as before.
#[derive(Deserialize, Default, Clone, Debug, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    /// The value returned, as Python's `repr` writes it: `"('wait', 1000)"`.
    pub returns: Option<String>,
    /// The call ends in an exception (the database failed under it).
    #[serde(default)]
    pub raises: bool,
    /// The script killed the worker during the call.
    #[serde(default)]
    pub killed: bool,
    /// Every provider call, in order.
    #[serde(default)]
    pub provider: Vec<ProviderCall>,
    #[serde(default)]
    pub actions: Vec<Action>,
    #[serde(default)]
    pub stores: Vec<Store>,
    #[serde(default)]
    pub outbox: Vec<Outbox>,
    /// The whole table after the call, when the call changes it.
    pub webhook_events: Option<Vec<String>>,
}

/// One provider call as the trusted side saw it (`sim::Op`).
#[derive(Deserialize, Clone, Debug, PartialEq)]
#[serde(tag = "op", rename_all = "kebab-case", deny_unknown_fields)]
pub enum ProviderCall {
    /// Absent `committed_attempts`: no committed outbox row had the key.
    Send {
        key: String,
        committed_attempts: Option<i64>,
    },
    Lookup {
        key: String,
    },
}

// ---- Checked cases ---------------------------------------------------------------------

#[derive(Clone, Debug, PartialEq)]
pub struct Case {
    /// The file, relative to the project (`hidden-tests/courier/10-claim.toml`).
    pub file: String,
    /// The case's index in its file.
    pub index: usize,
    pub name: String,
    /// From `hidden-tests/` rather than the lab's examples.
    pub hidden: bool,
    pub rule: Rule,
    pub stores: Vec<Store>,
    pub actions: Vec<Action>,
    pub outbox: Vec<Outbox>,
    pub webhook_events: Vec<String>,
    pub call: CallSpec,
    pub provider: Provider,
    /// The case's `world` table.
    pub script: CaseScript,
    pub all_or_nothing: bool,
    pub interleave: Option<Interleave>,
    pub cfg: CfgSpec,
    pub expect: Expect,
}

impl FileCase for Case {
    fn place(&self) -> (&str, usize, &str) {
        (&self.file, self.index, &self.name)
    }
}

/// Reads and checks every case of the lab, examples first, and that no two share a name.
pub fn load_lab(root: &Path, hidden: bool) -> Result<Vec<Case>, CaseError> {
    case_files::load_lab(root, LAB, hidden, parse_file)
}

/// Parses one case file. `file` names it in errors; `hidden`: it is a hidden one.
pub fn parse_file(file: &str, text: &str, hidden: bool) -> Result<Vec<Case>, CaseError> {
    let spec: FileSpec = case_files::parse_toml(file, text)?;
    spec.case
        .into_iter()
        .enumerate()
        .map(|(i, c)| {
            let case = Case {
                file: file.into(),
                index: i,
                name: c.name,
                hidden,
                rule: c.rule,
                stores: c
                    .stores
                    .or_else(|| spec.defaults.stores.clone())
                    .unwrap_or_default(),
                actions: c.actions,
                outbox: c.outbox,
                webhook_events: c.webhook_events,
                call: c.call,
                provider: c.provider,
                script: c.world,
                all_or_nothing: c.all_or_nothing,
                interleave: c.interleave,
                cfg: c.cfg,
                expect: c.expect.unwrap_or_default(),
            };
            check(&case).map_err(|(field, message)| case.error(&field, message))?;
            Ok(case)
        })
        .collect()
}

/// What serde cannot say: the rows and the expectation make sense together.
fn check(c: &Case) -> Result<(), (String, String)> {
    let fail = |field: &str, message: &str| Err((field.to_string(), message.to_string()));
    if c.name.trim().is_empty() {
        return fail("name", "a case needs a name: it is what the learner sees");
    }
    for (i, a) in c.actions.iter().enumerate() {
        if c.actions[..i].iter().any(|b| b.id == a.id) {
            return fail(&format!("actions[{i}].id"), "two actions rows have this id");
        }
    }
    for (i, o) in c.outbox.iter().enumerate() {
        if c.outbox[..i].iter().any(|b| b.action_id == o.action_id) {
            return fail(
                &format!("outbox[{i}].action_id"),
                "two outbox rows are for this action",
            );
        }
    }
    for (i, s) in c.stores.iter().enumerate() {
        if c.stores[..i].iter().any(|b| b.store == s.store) {
            return fail(
                &format!("stores[{i}].store"),
                "two stores rows have this name",
            );
        }
    }
    if c.cfg.lease_ms == Some(0) || c.cfg.recheck_ms == Some(0) || c.cfg.in_flight_cap == Some(0) {
        return fail("cfg", "every number of cfg is at least 1");
    }
    let e = &c.expect;
    let ends = usize::from(e.returns.is_some()) + usize::from(e.raises) + usize::from(e.killed);
    if ends != 1 {
        return fail(
            "expect",
            "say how the call ends: exactly one of expect.returns, expect.raises = true, expect.killed = true",
        );
    }
    if e.killed && !c.script.kill_after_send {
        return fail(
            "expect.killed",
            "nothing in the case's world kills the worker",
        );
    }
    if let Some(i) = &c.interleave {
        if c.all_or_nothing || c.script.kill_after_send || c.script.db_down {
            return fail(
                "interleave",
                "another worker's write goes with a world where nothing else fails: no all_or_nothing, kill_after_send or db_down",
            );
        }
        if i.after_statement == 0 {
            return fail(
                "interleave.after_statement",
                "at least 1: the other write lands between two of the call's statements",
            );
        }
        if !c.actions.iter().any(|a| a.id == i.claim.action_id) {
            return fail(
                "interleave.claim.action_id",
                "name a row of the case's actions",
            );
        }
    }
    for (i, a) in e.actions.iter().enumerate() {
        if !c.actions.iter().any(|b| b.id == a.id) {
            return fail(
                &format!("expect.actions[{i}].id"),
                "no call adds an actions row: name a row of the case's actions",
            );
        }
    }
    Ok(())
}
