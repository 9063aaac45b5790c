//! The reference solution: the contract, line by line. The grader compares every
//! learner call with what this does in an identical world, and names the rule behind
//! the decision it took.

use super::model::{
    Action, Policy, SendResult, Status, Task, TaskKind, DONE_TTL_S, DROP_REASON, EXHAUSTED_REASON,
};
use super::rules::Rule;
use super::world::World;
use super::Solution;
use crate::value::{LearnerError, Value};

/// What a task's claim and done marker are stored under: this, then its key.
pub const CLAIM_PREFIX: &str = "sent:";

pub fn claim_key(task: &Task) -> String {
    format!("{CLAIM_PREFIX}{}", task.key)
}

/// `deliver_once`, and the rule of the row of the contract's table it followed.
pub fn deliver_once(world: &World, task: &Task, policy: &Policy) -> (Status, Rule) {
    let key = claim_key(task);
    if world.kv_get(&key).as_deref() == Some("done") {
        return (Status::DuplicateSkipped, Rule::DoneSkips);
    }
    if !world.kv_set(&key, "sending", Some(policy.claim_ttl_s), true) {
        let status = if policy.at_most_once {
            Status::DuplicateSkipped
        } else {
            Status::RetryLater
        };
        return (status, Rule::ClaimHeld);
    }
    if world.send(&task.key).ok {
        world.kv_set(&key, "done", Some(DONE_TTL_S), false);
        (Status::Sent, Rule::MarkDone)
    } else {
        world.kv_delete(&key);
        (Status::Failed, Rule::ReleaseOnFailure)
    }
}

/// `next_step`, and the rule that decided its answer.
pub fn next_step(
    world: &World,
    task: &Task,
    result: &SendResult,
    now_s: f64,
    policy: &Policy,
) -> (Action, Rule) {
    if result.permanent {
        let action = match &task.fallback {
            Some(channel) => Action::Fallback {
                channel: channel.clone(),
            },
            None => Action::Dlq {
                reason: result.reason.clone(),
            },
        };
        return (action, Rule::Permanent);
    }
    let (delay_s, rule) = match result.retry_after_s {
        Some(s) => (s, Rule::RetryAfter),
        None => {
            let cap_s = policy.base_delay_s * 2f64.powi(task.attempt as i32);
            (
                policy.min_delay_s.max(world.uniform(0.0, cap_s)),
                Rule::Jitter,
            )
        }
    };
    if task.attempt + 1 >= policy.max_attempts || now_s + delay_s >= task.expires_at_s {
        let action = match (task.kind, &task.fallback) {
            (TaskKind::Bulk, _) => Action::Drop {
                reason: DROP_REASON.into(),
            },
            (_, Some(channel)) => Action::Fallback {
                channel: channel.clone(),
            },
            (_, None) => Action::Dlq {
                reason: EXHAUSTED_REASON.into(),
            },
        };
        return (action, Rule::GiveUp);
    }
    (Action::Retry { delay_s }, rule)
}

/// The reference as a `Solution`, so it can be graded like any learner's code.
pub struct Reference;

impl Solution for Reference {
    fn deliver_once(
        &mut self,
        world: &World,
        task: &Task,
        policy: &Policy,
    ) -> Result<Value, LearnerError> {
        Ok(deliver_once(world, task, policy).0.to_value())
    }

    fn next_step(
        &mut self,
        world: &World,
        task: &Task,
        result: &SendResult,
        now_s: f64,
        policy: &Policy,
    ) -> Result<Value, LearnerError> {
        Ok(next_step(world, task, result, now_s, policy).0.to_value())
    }
}
