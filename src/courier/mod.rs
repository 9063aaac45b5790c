//! Lab 2, the courier challenge: exactly one SMS per action through a provider that
//! misbehaves, with killed workers, a restarting database and fair claiming.
//! Contract: the course's `labs/courier.md`; the engineering spec is `DESIGN.md`.
//!
//! The learner's database is the host's (SQLite in Pyodide); the engine reaches it
//! through `sim::Backend`. Grading: unit tests per piece (`units.rs`, case files in
//! `examples/` and `hidden-tests/courier/`), then the chaos run and the fairness run.

pub mod chaos_plan;
pub mod chaos_report;
pub mod differential;
pub mod fairness;
pub mod faults;
pub mod backend;
pub mod learner;
pub mod provider;
pub mod reference;
pub mod rules;
pub mod sim;
pub mod step_world;
#[cfg(target_arch = "wasm32")]
pub mod provider_wasm;
pub mod tables;
pub mod units;
pub mod variant;

use crate::lab::{HiddenInputs, Lab, LabInfo, LabTask, LearnerHost, RunMode, TimeLimit};
use crate::report::{
    Audience, Figure, Report, TestKind, TestReport, TestSheet, TestStatus,
};
use fairness::{fairness_run, FairPlan};
use sim::{chaos_run, ChaosPlan, Backend, RunStop};
use units::{run_case, UnitCase};

pub const ID: &str = "courier";
/// The lab's tables (`schema.sql`): the store creates them from this at every reset.
pub const SCHEMA_SQL: &str = include_str!("schema.sql");

/// Each table of a schema like `SCHEMA_SQL` with its columns, in order: read for
/// the checks that the lab's text and the engine's rows agree with it.
pub fn lab_columns_of_schema(sql: &str) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    let mut open = false;
    for line in sql
        .lines()
        .map(|l| l.split("--").next().unwrap_or("").trim())
    {
        if let Some(rest) = line.strip_prefix("CREATE TABLE ") {
            out.push((rest.trim_end_matches('(').trim().to_string(), Vec::new()));
            open = true;
        } else if line.starts_with(')') {
            open = false;
        } else if open && !line.is_empty() {
            if let (Some(word), Some(last)) = (line.split_whitespace().next(), out.last_mut()) {
                last.1.push(word.to_string());
            }
        }
    }
    out
}
pub const DEFAULT_SEED: u64 = crate::lab::COURSE_SEED;

static INFO: LabInfo = LabInfo {
    id: ID,
    title: "The courier challenge",
    level: "Advanced",
    minutes: 90,
    xp: 250,
    time_limit_s: 20.0,
    functions: &[
        "claim",
        "write_intent",
        "deliver_step",
        "merge",
        "on_webhook",
        "heartbeat",
    ],
    starter_py: include_str!("starter.py"),
    reference_py: reference_py!("reference.py"),
    instructions_md: include_str!("lab.md"),
    bridge_py: include_str!("learner_side.py"),
    world_ops: step_world::OPS,
    store_py: Some(include_str!("db_store.py")),
    // A unit test belongs to the piece it calls; the fairness run measures claim;
    // the chaos run is what "What the simulator throws at you" describes.
    tasks: &[
        LabTask {
            heading: "`claim(db, worker, now_ms, cfg)`",
            functions: &["claim"],
            tests: &[FAIRNESS_TEST],
        },
        LabTask {
            heading: "`write_intent(db, action_id, worker, epoch)`",
            functions: &["write_intent"],
            tests: &[],
        },
        LabTask {
            heading: "`deliver_step(db, provider, action_id, worker, epoch, now_ms, cfg)`",
            functions: &["deliver_step"],
            tests: &[],
        },
        LabTask {
            heading: "`merge(current, reported)`",
            functions: &["merge"],
            tests: &[],
        },
        LabTask {
            heading: "`on_webhook(db, event)`",
            functions: &["on_webhook"],
            tests: &[],
        },
        LabTask {
            heading: "`heartbeat(db, action_id, worker, epoch, now_ms, cfg)`",
            functions: &["heartbeat"],
            tests: &[],
        },
        LabTask {
            heading: "What the simulator throws at you",
            functions: &[],
            tests: &[CHAOS_TEST],
        },
    ],
    // Each hidden unit case's tables, call and scripted provider (`variant.rs`); the
    // chaos and fairness runs are example tests, seeded by the run's seed.
    hidden_variants: true,
};

pub const CHAOS_TEST: &str = "chaos run: 2,000 actions, 200 kills, a database restart";
pub const FAIRNESS_TEST: &str = "fairness run: one store at 10x among 100";

pub struct Courier;

impl Lab for Courier {
    fn info(&self) -> &'static LabInfo {
        &INFO
    }

    fn tests(&self) -> Vec<(String, TestKind)> {
        cases()
            .iter()
            .map(|c| (c.name.to_string(), c.kind))
            .chain(
                differential::pieces()
                    .iter()
                    .map(|p| (p.test_name(), TestKind::Hidden)),
            )
            .chain([CHAOS_TEST, FAIRNESS_TEST].map(|n| (n.to_string(), TestKind::Example)))
            .collect()
    }

    fn test_sheets(&self) -> Vec<TestSheet> {
        let task = |found: Option<u32>| found.expect("every test has a task (tests/labs.rs)");
        cases()
            .iter()
            .map(|c| TestSheet {
                name: c.name.to_string(),
                task_id: task(INFO.task_of_function(c.call.function())),
                code: (c.kind == TestKind::Example).then(|| units::code_of(c)),
            })
            .chain(differential::pieces().iter().map(|p| TestSheet {
                name: p.test_name(),
                task_id: task(INFO.task_of_function(p.function)),
                code: None,
            }))
            .chain(SYSTEM_RUNS.map(|(name, code)| TestSheet {
                name: name.to_string(),
                task_id: task(INFO.task_of_test(name)),
                code: Some(code.to_string()),
            }))
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
        grade_run(&mut learner::LearnerBackend(host), seed, hidden, audience, mode)
    }
}

/// The system runs, and what they do in a learner's words: they call no single piece,
/// so their code is a description.
const SYSTEM_RUNS: [(&str, &str); 2] = [
    (
        CHAOS_TEST,
        "# The simulator runs your six pieces as 8 workers over 2,000 actions for 100 stores,\n# with 200 kills, frozen workers and one database restart, then checks every row\n# of its table (\"How you are graded\", item 3).",
    ),
    (
        FAIRNESS_TEST,
        "# The simulator runs claim with one store sending ten times as much as the other 99,\n# spread out and in one burst: their p95 latency must stay within 10% of the run\n# where every store is equal (\"How you are graded\", item 4).",
    ),
];

/// Every unit case, examples first: compiled in from the case files
/// (`src/courier/examples/`, and with the `hidden` feature `hidden-tests/courier/`)
/// by `build.rs`.
pub fn cases() -> Vec<UnitCase> {
    include!(concat!(env!("OUT_DIR"), "/courier_cases.rs"))
}

fn system_test(name: &str, passed: bool, message: String) -> TestReport {
    let status = if passed {
        TestStatus::Pass
    } else {
        TestStatus::Fail
    };
    TestReport::new(name, TestKind::Example, status, Some(message))
}

/// Runs every test against the learner's backend and reports. A learner error is
/// confined to its test; a run past the time limit stops every test after it.
///
/// The order they run in: the example units, the two system runs, then the hidden
/// units. A learner's code sees a hidden case's inputs when it runs, and whatever
/// it prints or raises can end up in a shown message; running the hidden units last
/// means every shown test is final before that. The report lists them in the lab's
/// order (units, then the system runs).
pub fn grade(backend: &mut dyn Backend, seed: u64, audience: Audience) -> Report {
    grade_with(backend, seed, audience, RunMode::Report)
}

/// `grade`, in a given mode (`RunMode::Verdict` stops at the first failed test).
pub fn grade_with(backend: &mut dyn Backend, seed: u64, audience: Audience, mode: RunMode) -> Report {
    grade_run(backend, seed, HiddenInputs::Fixed, audience, mode)
}

/// `grade_with`, with the hidden unit cases' inputs `hidden` says (`variant.rs`).
pub fn grade_run(
    backend: &mut dyn Backend,
    seed: u64,
    hidden: HiddenInputs,
    audience: Audience,
    mode: RunMode,
) -> Report {
    let (cases, worlds_seed) = match hidden {
        HiddenInputs::Fixed => (cases(), differential::seed_of(seed, None)),
        HiddenInputs::Variant(v) => (variant::vary_all(cases(), v), differential::seed_of(seed, Some(v))),
    };
    let (examples, hidden): (Vec<_>, Vec<_>) = cases
        .into_iter()
        .partition(|c| c.kind == TestKind::Example);
    let mut limit = TimeLimit::new(mode);
    let units = |backend: &mut dyn Backend, cases: Vec<UnitCase>, limit: &mut TimeLimit| {
        cases
            .iter()
            .filter_map(|case| limit.run(case.name, case.kind, || run_case(backend, case)))
            .map(|t| t.for_audience(audience))
            .collect::<Vec<_>>()
    };
    let mut tests = units(backend, examples, &mut limit);
    let chaos = limit.run(CHAOS_TEST, TestKind::Example, || chaos_test(backend, seed));
    let fairness = limit.run(FAIRNESS_TEST, TestKind::Example, || {
        fairness_test(backend, seed)
    });
    tests.extend(units(backend, hidden, &mut limit));
    // The differential tests draw their worlds from the run's seed and, per
    // submission, the hidden inputs' (`differential.rs`); hidden like the units.
    let replay = crate::report::replay_command(ID, seed);
    for piece in differential::pieces() {
        let name = piece.test_name();
        let t = limit.run(&name, TestKind::Hidden, || {
            backend.take_output();
            let t = differential::run(backend, piece, worlds_seed, &replay);
            backend.take_output();
            t
        });
        tests.extend(t.map(|t| t.for_audience(audience)));
    }
    tests.extend(chaos.into_iter().chain(fairness));
    limit.report(ID, seed, INFO.xp, tests)
}

fn chaos_test(backend: &mut dyn Backend, seed: u64) -> TestReport {
    // The system runs' prints are not shown: thousands of steps print.
    backend.take_output();
    let chaos = chaos_run(backend, &ChaosPlan::full(seed));
    backend.take_output();
    match chaos {
        Ok(r) => {
            let mut t = system_test(CHAOS_TEST, r.passed(), r.text(seed));
            t.figure = Some(Figure::Table { rows: r.rows() });
            t
        }
        Err(e) => {
            let mut t = system_test(CHAOS_TEST, false, format!("The chaos run stopped: {e}"));
            if e.is_timeout() {
                t.status = TestStatus::Timeout;
            }
            t
        }
    }
}

fn fairness_test(backend: &mut dyn Backend, seed: u64) -> TestReport {
    let plan = FairPlan::full(seed);
    let yours = fairness_run(backend, &plan);
    backend.take_output();
    let fifo = fairness_run(
        &mut reference::RefBackend::new(Some(reference::Mistake::FifoClaim)),
        &plan,
    );
    let mut t = system_test(FAIRNESS_TEST, yours.passed(), fairness::text(&yours, &fifo));
    t.figure = Some(fairness::bars(&yours, &fifo));
    if yours.error.as_ref().is_some_and(RunStop::is_timeout) {
        t.status = TestStatus::Timeout;
    }
    t
}
