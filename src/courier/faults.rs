//! The world's answer at each database statement and provider call of one step:
//! what the backend asks before it runs one (`backend.rs`), and what the step's world
//! decides (`step_world.rs`).

use super::provider::{LookupAnswer, SendAnswer};
use serde::Serialize;

/// The world's answer at a database statement.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Fault {
    Go,
    /// The worker dies here: the backend rolls its transaction back and stops the step.
    Kill,
    /// The database is restarting: the backend rolls back and the statement fails.
    DbDown,
}

/// The worker was killed at this provider call (before or after the request left).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Killed;

/// The world as one step sees it: every statement and provider call asks it first.
pub trait Faults {
    fn statement(&mut self, in_tx: bool) -> Fault;
    /// `committed_attempts`: the outbox row's `attempts` as committed when the request
    /// leaves (read by the backend outside the learner's transaction; None: no row).
    fn send(
        &mut self,
        key: &str,
        phone: &str,
        body: &str,
        committed_attempts: Option<i64>,
    ) -> Result<SendAnswer, Killed>;
    fn lookup(&mut self, key: &str) -> Result<LookupAnswer, Killed>;
}
