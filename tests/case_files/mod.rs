//! The case files as the tests read them: with the parser `build.rs` compiles them
//! with (`src/deliver_once/case_format.rs`), and the check that the reference meets
//! every `expect` table they hold, which the engine itself no longer carries.

#![allow(dead_code)] // each test binary uses its own part of this module

#[path = "../../src/deliver_once/case_format.rs"]
pub mod case_format;

use case_format::{CaseError, FileCase};
use delivery_lab::deliver_once::model::{Policy, SendResult, Task, TaskKind};
use delivery_lab::deliver_once::rules::Rule;
use delivery_lab::deliver_once::world::Op;
use delivery_lab::deliver_once::{case, check, suite, ID};
use delivery_lab::report::TestKind;
use delivery_lab::value::{close, Value};
use std::collections::BTreeMap;
use std::path::Path;

/// Every case of the lab, read from disk: what the engine was built with.
pub fn load() -> Result<Vec<case_format::Case>, CaseError> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    case_format::load_lab(root, ID, cfg!(feature = "hidden"))
}

/// A parsed case as the engine's `Case`, the value `build.rs` writes the source of.
pub fn to_engine(c: &case_format::Case) -> case::Case {
    let body = match &c.body {
        case_format::Body::Differential { seed, spec } => case::Body::Differential {
            seed: *seed,
            spec: case::DifferentialSpec {
                next_step: spec.next_step,
                deliver_once: spec.deliver_once,
            },
        },
        case_format::Body::Scripted(s) => case::Body::Scripted(case::Scripted {
            seed: s.seed,
            kv: s
                .kv
                .iter()
                .map(|k| case::KvPreload {
                    key: k.key.clone(),
                    value: k.value.clone(),
                    ttl_s: k.ttl_s,
                    written_at_s: k.written_at_s,
                })
                .collect(),
            provider: s.provider.iter().map(send_result).collect(),
            steps: s
                .steps
                .iter()
                .map(|step| case::Step {
                    at_s: step.at_s,
                    call: call(&step.call),
                })
                .collect(),
        }),
    };
    case::Case {
        file: Box::leak(c.file.clone().into_boxed_str()),
        name: c.name.clone(),
        kind: if c.hidden {
            TestKind::Hidden
        } else {
            TestKind::Example
        },
        rules: c.rules.iter().map(|&r| rule(r)).collect(),
        section: c.section.name(),
        body,
    }
}

/// The engine's rule of the same name (`tests/reference.rs` checks the two lists agree).
pub fn rule(r: case_format::Rule) -> Rule {
    let name = format!("{r:?}");
    *Rule::ALL
        .iter()
        .find(|x| format!("{x:?}") == name)
        .unwrap_or_else(|| panic!("the engine has no rule {name}"))
}

pub fn task_kind(k: case_format::TaskKind) -> TaskKind {
    match k {
        case_format::TaskKind::Critical => TaskKind::Critical,
        case_format::TaskKind::Normal => TaskKind::Normal,
        case_format::TaskKind::Bulk => TaskKind::Bulk,
    }
}

fn task(t: &case_format::Task) -> Task {
    Task {
        key: t.key.clone(),
        kind: task_kind(t.kind),
        attempt: t.attempt,
        expires_at_s: t.expires_at_s,
        fallback: t.fallback.clone(),
    }
}

fn policy(p: &case_format::Policy) -> Policy {
    Policy {
        claim_ttl_s: p.claim_ttl_s,
        at_most_once: p.at_most_once,
        min_delay_s: p.min_delay_s,
        base_delay_s: p.base_delay_s,
        max_attempts: p.max_attempts,
    }
}

fn send_result(a: &case_format::Answer) -> SendResult {
    match a {
        case_format::Answer::Ok => SendResult::ok(),
        case_format::Answer::Transient {
            reason,
            retry_after_s,
        } => SendResult::transient(reason, *retry_after_s),
        case_format::Answer::Permanent { reason } => SendResult::permanent(reason),
    }
}

fn call(c: &case_format::Call) -> case::Call {
    match c {
        case_format::Call::DeliverOnce { task: t, policy: p } => case::Call::DeliverOnce {
            task: task(t),
            policy: policy(p),
        },
        case_format::Call::NextStep {
            task: t,
            result,
            now_s,
            policy: p,
        } => case::Call::NextStep {
            task: task(t),
            result: send_result(result),
            now_s: *now_s,
            policy: policy(p),
        },
    }
}

/// Plays the reference through a case and checks it against what the file says must
/// hold, so a case can never demand something the contract does not.
pub fn check_expectations(c: &case_format::Case) -> Result<(), CaseError> {
    let case_format::Body::Scripted(s) = &c.body else {
        return Ok(());
    };
    let case::Body::Scripted(engine) = to_engine(c).body else {
        unreachable!("a scripted case stays scripted");
    };
    let world = suite::new_world(&engine);
    let err = |field: String, message: String| {
        c.error(
            &field,
            format!("the reference solution disagrees: {message}"),
        )
    };
    for (i, (step, engine_step)) in s.steps.iter().zip(&engine.steps).enumerate() {
        world.advance_to(step.at_s);
        let done = check::run_reference(&world, &engine_step.call);
        let field = |f: &str| format!("step[{i}].expect.{f}");
        let e = &step.expect;
        if let Some(want) = &e.returns {
            let want = toml_to_value(want);
            if !done.value.matches(&want) {
                return Err(err(
                    field("returns"),
                    format!("it returns {}, not {want}", done.value),
                ));
            }
        }
        let ops = || done.events.iter().map(|e| &e.op);
        if let Some(n) = e.sends {
            let got = ops().filter(|o| matches!(o, Op::Send { .. })).count();
            if got != n {
                return Err(err(
                    field("sends"),
                    format!("it sends {got} time(s), not {n}"),
                ));
            }
        }
        if let Some(draws) = &e.draws {
            let got: Vec<[f64; 2]> = ops()
                .filter_map(|o| match o {
                    Op::Uniform { a, b, .. } => Some([*a, *b]),
                    _ => None,
                })
                .collect();
            let same = got.len() == draws.len()
                && got
                    .iter()
                    .zip(draws)
                    .all(|(g, w)| close(g[0], w[0]) && close(g[1], w[1]));
            if !same {
                return Err(err(
                    field("draws"),
                    format!("it draws {got:?}, not {draws:?}"),
                ));
            }
        }
        if let Some(writes) = &e.writes {
            let got: Vec<case_format::WriteSpec> = ops()
                .filter(|o| o.counts())
                .filter_map(|o| match o {
                    Op::KvSet {
                        key,
                        value,
                        ttl_s,
                        nx,
                        ..
                    } => Some(case_format::WriteSpec::Set {
                        key: key.clone(),
                        value: value.clone(),
                        ttl_s: *ttl_s,
                        nx: *nx,
                    }),
                    Op::KvDelete { key, .. } => {
                        Some(case_format::WriteSpec::Delete { key: key.clone() })
                    }
                    _ => None,
                })
                .collect();
            if &got != writes {
                return Err(err(
                    field("writes"),
                    format!("its writes are {got:?}, not {writes:?}"),
                ));
            }
        }
    }
    if let Some(want) = &s.expect.kv {
        let got: BTreeMap<String, String> = world
            .kv_entries()
            .into_iter()
            .map(|e| (e.key, e.value))
            .collect();
        if &got != want {
            return Err(err(
                "expect.kv".into(),
                format!("the kv ends as {got:?}, not {want:?}"),
            ));
        }
    }
    Ok(())
}

/// An expected return value as written in a case file: arrays stand for tuples.
fn toml_to_value(v: &toml::Value) -> Value {
    match v {
        toml::Value::Boolean(b) => Value::Bool(*b),
        toml::Value::Integer(i) => Value::Int(*i),
        toml::Value::Float(f) => Value::Float(*f),
        toml::Value::String(s) => Value::Str(s.clone()),
        toml::Value::Array(a) => Value::Tuple(a.iter().map(toml_to_value).collect()),
        toml::Value::Table(_) => Value::Other {
            type_name: "dict".into(),
            repr: v.to_string(),
        },
        toml::Value::Datetime(d) => Value::Other {
            type_name: "datetime".into(),
            repr: d.to_string(),
        },
    }
}
