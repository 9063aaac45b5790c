//! Plays one call against the reference and the learner in identical worlds and
//! finds the first place they differ, naming the rule that was broken.

use super::case::Call;
use super::model::Action;
use super::reference;
use super::rules::Rule;
use super::world::{Event, Op, World};
use super::Solution;
use crate::value::{close, LearnerError, Value};

/// The first difference between a learner's call and the contract.
#[derive(Clone, Debug, PartialEq)]
pub struct Mismatch {
    pub rule: Rule,
    /// What the contract does at this point, and what the learner's code did.
    pub expected: String,
    pub actual: String,
}

/// What the reference did for one call.
pub struct Expected {
    pub value: Value,
    /// The rule of the decision the reference took (its row in the contract).
    pub decision: Rule,
    pub events: Vec<Event>,
}

/// What the learner's code did for one call.
pub struct Actual {
    pub returned: Result<Value, LearnerError>,
    pub events: Vec<Event>,
}

pub fn run_reference(world: &World, call: &Call) -> Expected {
    let (value, decision) = match call {
        Call::DeliverOnce { task, policy } => {
            let (status, rule) = reference::deliver_once(world, task, policy);
            (status.to_value(), rule)
        }
        Call::NextStep {
            task,
            result,
            now_s,
            policy,
        } => {
            let (action, rule) = reference::next_step(world, task, result, *now_s, policy);
            (action.to_value(), rule)
        }
    };
    Expected {
        value,
        decision,
        events: world.take_log(),
    }
}

pub fn run_learner(solution: &mut dyn Solution, world: &World, call: &Call) -> Actual {
    let returned = match call {
        Call::DeliverOnce { task, policy } => solution.deliver_once(world, task, policy),
        Call::NextStep {
            task,
            result,
            now_s,
            policy,
        } => solution.next_step(world, task, result, *now_s, policy),
    };
    Actual {
        returned,
        events: world.take_log(),
    }
}

fn same_op(a: &Op, b: &Op) -> bool {
    let ttl_eq = |x: &Option<f64>, y: &Option<f64>| match (x, y) {
        (Some(x), Some(y)) => close(*x, *y),
        (None, None) => true,
        _ => false,
    };
    match (a, b) {
        (
            Op::KvSet {
                key: k1,
                value: v1,
                ttl_s: t1,
                nx: n1,
                ..
            },
            Op::KvSet {
                key: k2,
                value: v2,
                ttl_s: t2,
                nx: n2,
                ..
            },
        ) => k1 == k2 && v1 == v2 && n1 == n2 && ttl_eq(t1, t2),
        (Op::KvDelete { key: k1, .. }, Op::KvDelete { key: k2, .. }) => k1 == k2,
        (Op::Send { task_key: k1, .. }, Op::Send { task_key: k2, .. }) => k1 == k2,
        (Op::Uniform { a: a1, b: b1, .. }, Op::Uniform { a: a2, b: b2, .. }) => {
            close(*a1, *a2) && close(*b1, *b2)
        }
        _ => false,
    }
}

/// The rule that demands a call the reference made.
fn rule_of(op: &Op, decision: Rule) -> Rule {
    match op {
        Op::KvSet { value, .. } if value == "sending" => Rule::Claim,
        Op::KvSet { .. } => Rule::MarkDone,
        Op::KvDelete { .. } => Rule::ReleaseOnFailure,
        Op::Send { .. } => Rule::SendOnce,
        Op::Uniform { .. } => Rule::Jitter,
        Op::KvGet { .. } => decision,
    }
}

/// The rule that forbids a call the reference did not make.
fn rule_against(op: &Op, decision: Rule) -> Rule {
    match (op, decision) {
        (Op::Send { .. }, Rule::DoneSkips | Rule::ClaimHeld) => decision,
        (Op::Send { .. }, _) => Rule::SendOnce,
        (Op::Uniform { .. }, Rule::Permanent | Rule::RetryAfter) => decision,
        (Op::Uniform { .. }, _) => Rule::Jitter,
        _ => decision,
    }
}

/// Compares the effects that count (see `Op::counts`) in order, then the return value.
pub fn compare(
    call: &Call,
    expected: &Expected,
    actual: &[Event],
    returned: &Value,
) -> Option<Mismatch> {
    let want: Vec<&Op> = expected
        .events
        .iter()
        .map(|e| &e.op)
        .filter(|o| o.counts())
        .collect();
    let got: Vec<&Op> = actual
        .iter()
        .map(|e| &e.op)
        .filter(|o| o.counts())
        .collect();
    for i in 0..want.len().max(got.len()) {
        match (want.get(i), got.get(i)) {
            (Some(w), Some(g)) if same_op(w, g) => {}
            (Some(w), g) => {
                return Some(Mismatch {
                    rule: rule_of(w, expected.decision),
                    expected: w.call_text(),
                    actual: g.map_or_else(|| "no such call".into(), |g| g.call_text()),
                })
            }
            (None, Some(g)) => {
                let before = match want.last() {
                    Some(w) => format!("nothing after {}", w.call_text()),
                    None => "no call that writes, sends or draws".into(),
                };
                return Some(Mismatch {
                    rule: rule_against(g, expected.decision),
                    expected: before,
                    actual: g.call_text(),
                });
            }
            (None, None) => unreachable!(),
        }
    }
    compare_return(call, expected, returned)
}

fn compare_return(call: &Call, expected: &Expected, returned: &Value) -> Option<Mismatch> {
    if returned.matches(&expected.value) {
        return None;
    }
    let shown = |v: &Value| format!("return {v}  ({})", v.type_name());
    let mismatch = |rule| {
        Some(Mismatch {
            rule,
            expected: shown(&expected.value),
            actual: shown(returned),
        })
    };
    match call {
        Call::DeliverOnce { .. } => {
            let known = super::model::Status::ALL
                .iter()
                .any(|s| returned.as_str() == Some(s.as_str()));
            mismatch(if known {
                expected.decision
            } else {
                Rule::ReturnTypes
            })
        }
        Call::NextStep { .. } => {
            let Value::Tuple(items) = returned else {
                return mismatch(Rule::ReturnTypes);
            };
            let action = items.first().and_then(Value::as_str);
            if items.len() != 2 || !action.is_some_and(|a| Action::NAMES.contains(&a)) {
                return mismatch(Rule::ReturnTypes);
            }
            let want_retry =
                matches!(&expected.value, Value::Tuple(t) if t[0].as_str() == Some("retry"));
            // Retrying where the contract gives up, or the reverse, is a give-up mistake.
            if expected.decision != Rule::Permanent && want_retry != (action == Some("retry")) {
                mismatch(Rule::GiveUp)
            } else {
                mismatch(expected.decision)
            }
        }
    }
}
