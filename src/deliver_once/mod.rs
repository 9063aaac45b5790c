//! Lab 1, "Deliver once, retry right": the learner writes `deliver_once` (claim,
//! send, mark done or release) and `next_step` (what to do after a failed send).
//! Contract: the course's `labs/deliver-once.md`.

pub mod case;
pub mod check;
pub mod differential;
pub mod model;
pub mod reference;
pub mod rules;
pub mod suite;
pub mod world;

use crate::lab::{Lab, LabInfo};
use crate::report::{Audience, Report, TestKind, TestStatus};
use crate::value::{LearnerError, Value};
use case::{Body, Case, CaseError};
use model::{Policy, SendResult, Task};
use std::sync::OnceLock;
use world::World;

pub const ID: &str = "deliver-once";
/// The seed a run uses unless the host asks for another.
pub const DEFAULT_SEED: u64 = 1042;

pub static INFO: LabInfo = LabInfo {
    id: ID,
    title: "Deliver once, retry right",
    level: "medium",
    minutes: 35,
    xp: 90,
    time_limit_s: 8.0,
    functions: &["deliver_once", "next_step"],
    starter_py: include_str!("starter.py"),
    reference_py: include_str!("reference.py"),
    instructions_md: include_str!("lab.md"),
};

/// The two learner functions as the engine sees them. The world is shared: the
/// learner's code reaches the kv, the provider and the rng through it, and every
/// call it makes is logged there.
pub trait Solution {
    fn deliver_once(
        &mut self,
        world: &World,
        task: &Task,
        policy: &Policy,
    ) -> Result<Value, LearnerError>;

    fn next_step(
        &mut self,
        world: &World,
        task: &Task,
        result: &SendResult,
        now_s: f64,
        policy: &Policy,
    ) -> Result<Value, LearnerError>;

    /// What the code printed since the last call, for hosts that capture it.
    fn take_output(&mut self) -> Option<String> {
        None
    }
}

pub struct DeliverOnce;

impl Lab for DeliverOnce {
    fn info(&self) -> &'static LabInfo {
        &INFO
    }

    fn tests(&self) -> Vec<(String, TestKind)> {
        match cases() {
            Ok(cases) => cases.iter().map(|c| (c.name.clone(), c.kind)).collect(),
            Err(_) => Vec::new(),
        }
    }
}

/// Every case of the lab, examples first, checked once: the format, unique names, and
/// that the reference meets every expectation written in the files.
pub fn cases() -> Result<&'static [Case], &'static CaseError> {
    static CASES: OnceLock<Result<Vec<Case>, CaseError>> = OnceLock::new();
    CASES.get_or_init(load_cases).as_ref().map(Vec::as_slice)
}

fn load_cases() -> Result<Vec<Case>, CaseError> {
    let mut all: Vec<Case> = Vec::new();
    for (hidden, kind) in [(false, TestKind::Example), (true, TestKind::Hidden)] {
        for (file, json) in crate::generated::case_files(ID, hidden) {
            for case in case::parse_file(file, json, kind)? {
                if all.iter().any(|c| c.name == case.name) {
                    return Err(CaseError {
                        file: file.to_string(),
                        case: Some((0, case.name.clone())),
                        field: "name".into(),
                        message: "another case already has this name".into(),
                    });
                }
                check_expectations(&case)?;
                all.push(case);
            }
        }
    }
    Ok(all)
}

/// Plays the reference through a case and checks it against what the file says must
/// hold, so a case can never demand something the contract does not.
pub fn check_expectations(case: &Case) -> Result<(), CaseError> {
    let Body::Scripted(s) = &case.body else {
        return Ok(());
    };
    let world = suite::new_world(s);
    let err = |field: String, message: String| CaseError {
        file: case.file.to_string(),
        case: Some((0, case.name.clone())),
        field,
        message: format!("the reference solution disagrees: {message}"),
    };
    for (i, step) in s.steps.iter().enumerate() {
        world.advance_to(step.at_s);
        let done = check::run_reference(&world, &step.call);
        let field = |f: &str| format!("step[{i}].expect.{f}");
        let e = &step.expect;
        if let Some(want) = &e.returns {
            let want = json_to_value(want);
            if !done.value.matches(&want) {
                return Err(err(
                    field("returns"),
                    format!("it returns {}, not {want}", done.value),
                ));
            }
        }
        let ops = || done.events.iter().map(|e| &e.op);
        if let Some(n) = e.sends {
            let got = ops()
                .filter(|o| matches!(o, world::Op::Send { .. }))
                .count();
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
                    world::Op::Uniform { a, b, .. } => Some([*a, *b]),
                    _ => None,
                })
                .collect();
            let same = got.len() == draws.len()
                && got.iter().zip(draws).all(|(g, w)| {
                    crate::value::close(g[0], w[0]) && crate::value::close(g[1], w[1])
                });
            if !same {
                return Err(err(
                    field("draws"),
                    format!("it draws {got:?}, not {draws:?}"),
                ));
            }
        }
        if let Some(writes) = &e.writes {
            let got: Vec<case::WriteSpec> = ops()
                .filter(|o| o.counts())
                .filter_map(|o| match o {
                    world::Op::KvSet {
                        key,
                        value,
                        ttl_s,
                        nx,
                        ..
                    } => Some(case::WriteSpec::Set {
                        key: key.clone(),
                        value: value.clone(),
                        ttl_s: *ttl_s,
                        nx: *nx,
                    }),
                    world::Op::KvDelete { key, .. } => {
                        Some(case::WriteSpec::Delete { key: key.clone() })
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
        let got: std::collections::BTreeMap<String, String> = world
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
fn json_to_value(v: &serde_json::Value) -> Value {
    match v {
        serde_json::Value::Null => Value::None,
        serde_json::Value::Bool(b) => Value::Bool(*b),
        serde_json::Value::Number(n) => n
            .as_i64()
            .map_or_else(|| Value::Float(n.as_f64().unwrap_or(f64::NAN)), Value::Int),
        serde_json::Value::String(s) => Value::Str(s.clone()),
        serde_json::Value::Array(a) => Value::Tuple(a.iter().map(json_to_value).collect()),
        serde_json::Value::Object(_) => Value::Other {
            type_name: "dict".into(),
            repr: v.to_string(),
        },
    }
}

/// Runs every test against `solution` and reports. Never panics on learner behaviour:
/// a learner error is confined to its test; a timeout ends the run, and the tests it
/// did not reach are reported as timed out.
pub fn grade(solution: &mut dyn Solution, seed: u64, audience: Audience) -> Report {
    let cases = match cases() {
        Ok(c) => c,
        Err(e) => {
            return Report::error(
                ID,
                seed,
                &format!("The lab's test cases are broken: {e}"),
                Vec::new(),
            )
        }
    };
    let mut tests = Vec::with_capacity(cases.len());
    let mut stopped = false;
    for case in cases {
        let outcome = if stopped {
            suite::Outcome {
                status: TestStatus::Timeout,
                mismatch: None,
                message: Some("Not run: the run had already reached its time limit.".into()),
                trace: Vec::new(),
            }
        } else {
            suite::run_case(case, solution, seed)
        };
        stopped |= outcome.status == TestStatus::Timeout;
        let output = solution.take_output();
        tests.push(outcome.report(case, output, audience));
    }
    Report::new(ID, seed, INFO.xp, tests)
}
