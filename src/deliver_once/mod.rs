//! Lab 1, "Deliver once, retry right": the learner writes `deliver_once` (claim,
//! send, mark done or release) and `next_step` (what to do after a failed send).
//! Contract: the course's `labs/deliver-once.md`.

pub mod case;
// `case_format.rs` (the case files' parser) is no module of the engine: `build.rs` and
// the tests include it.
pub mod check;
pub mod differential;
pub mod learner;
pub mod model;
pub mod play;
pub mod reference;
pub mod rules;
pub mod suite;
pub mod variant;
pub mod world;

use crate::lab::{HiddenInputs, Lab, LabInfo, LabTask, LearnerHost, RunMode, TimeLimit};
use crate::report::{Audience, Report, TestKind, TestSheet};
use crate::value::{LearnerError, Value};
use case::Case;
use model::{Policy, SendResult, Task};
use std::sync::OnceLock;
use world::World;

pub const ID: &str = "deliver-once";
/// The seed a run uses unless the host asks for another.
pub const DEFAULT_SEED: u64 = crate::lab::COURSE_SEED;

pub static INFO: LabInfo = LabInfo {
    id: ID,
    title: "Deliver once, retry right",
    level: "medium",
    minutes: 35,
    xp: 90,
    time_limit_s: 8.0,
    functions: &["deliver_once", "next_step"],
    starter_py: include_str!("starter.py"),
    reference_py: reference_py!("reference.py"),
    instructions_md: include_str!("lab.md"),
    bridge_py: include_str!("bridge.py"),
    world_ops: world::OPS,
    store_py: None,
    // Each case names its function's section (`case::Case::section`).
    tasks: &[
        LabTask {
            heading: "`deliver_once(task, provider, kv, policy)`",
            functions: &["deliver_once"],
            tests: &[],
        },
        LabTask {
            heading: "`next_step(task, result, now, policy, rng)`",
            functions: &["next_step"],
            tests: &[],
        },
    ],
    hidden_variants: true,
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
        cases().iter().map(|c| (c.name.clone(), c.kind)).collect()
    }

    fn test_sheets(&self) -> Vec<TestSheet> {
        cases()
            .iter()
            .map(|c| TestSheet {
                name: c.name.clone(),
                task_id: INFO
                    .task_of_function(c.section)
                    .expect("every case's section is one of the lab's tasks (tests/labs.rs)"),
                code: (c.kind == TestKind::Example).then(|| suite::code_of(c)),
            })
            .collect()
    }

    fn grade(
        &self,
        host: &mut dyn LearnerHost,
        seed: u64,
        hidden: HiddenInputs,
        audience: Audience,
        mode: RunMode,
    ) -> Report {
        grade_run(&mut learner::Learner(host), seed, hidden, audience, mode)
    }
}

/// Every case of the lab, examples first, built once. The case files were parsed and
/// checked when the engine was built (`build.rs`), and their expectations are checked
/// against the reference by `cargo test`, so nothing here can fail.
pub fn cases() -> &'static [Case] {
    static CASES: OnceLock<Vec<Case>> = OnceLock::new();
    CASES.get_or_init(case::compiled)
}

/// Runs every test against `solution` and reports. Never panics on learner behaviour:
/// a learner error is confined to its test; a timeout ends the run, and the tests it
/// did not reach are reported as timed out.
pub fn grade(solution: &mut dyn Solution, seed: u64, audience: Audience) -> Report {
    grade_with(solution, seed, audience, RunMode::Report)
}

/// `grade`, in a given mode (`RunMode::Verdict` stops at the first failed test).
pub fn grade_with(
    solution: &mut dyn Solution,
    seed: u64,
    audience: Audience,
    mode: RunMode,
) -> Report {
    grade_run(solution, seed, HiddenInputs::Fixed, audience, mode)
}

/// `grade_with`, with the hidden tests' inputs `hidden` says (`variant.rs`).
pub fn grade_run(
    solution: &mut dyn Solution,
    seed: u64,
    hidden: HiddenInputs,
    audience: Audience,
    mode: RunMode,
) -> Report {
    let varied;
    let cases: &[Case] = match hidden {
        HiddenInputs::Fixed => cases(),
        HiddenInputs::Variant(v) => {
            varied = variant::vary_all(cases(), v);
            &varied
        }
    };
    let mut limit = TimeLimit::new(mode);
    let tests = cases
        .iter()
        .filter_map(|case| {
            limit.run(&case.name, case.kind, || {
                let outcome = suite::run_case(case, solution, seed);
                outcome.report(case, solution.take_output(), audience)
            })
        })
        .map(|t| t.for_audience(audience))
        .collect();
    limit.report(ID, seed, INFO.xp, tests)
}
