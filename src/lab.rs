//! A lab is a unit: its world, its reference, its cases, its starter code and its
//! learner-facing text, and how it grades (`Lab::grade`, over the `LearnerHost` that
//! every host implements once). Adding one means a module like `deliver_once` and a
//! line in `labs!` (`src/lib.rs`; the README's "Adding a lab").

use crate::report::{Audience, Report, TestKind, TestReport, TestSheet, TestStatus};
use crate::value::{LearnerError, Value};
use serde::Serialize;

/// The type of one argument of a world operation, as a host checks what crosses
/// to it (the grading CLI refuses a sandbox's request whose arguments do not fit).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Arg {
    #[serde(rename = "string")]
    Str,
    /// A finite number.
    #[serde(rename = "number")]
    Number,
    /// A finite number, or null (Python's None).
    #[serde(rename = "number?")]
    NumberOrNull,
    #[serde(rename = "boolean")]
    Bool,
}

/// One operation a learner call reaches on its world, by name, with its arguments'
/// types: what the lab's `LabWorld::op` answers.
#[derive(Debug, Serialize)]
pub struct WorldOp {
    pub name: &'static str,
    pub args: &'static [Arg],
}

/// The most arguments a world operation takes (the WASM world object's `op`,
/// `JsWorld::op` in src/wasm.rs, has this many argument slots; `tests/labs.rs`
/// holds every lab to it).
pub const OP_ARGS_MAX: usize = 4;

/// An argument of a world operation, already of its `Arg` type, or an answer.
#[derive(Clone, Debug, PartialEq)]
pub enum OpValue {
    /// Python's None: an absent `NumberOrNull` argument, or an answer of nothing.
    Null,
    Bool(bool),
    /// Always finite.
    Number(f64),
    Str(String),
}

impl OpValue {
    pub fn str(&self) -> &str {
        match self {
            OpValue::Str(s) => s,
            _ => "",
        }
    }

    pub fn number(&self) -> Option<f64> {
        match self {
            OpValue::Number(x) => Some(*x),
            _ => None,
        }
    }

    pub fn bool(&self) -> bool {
        matches!(self, OpValue::Bool(true))
    }
}

/// Why a world operation was not run: the request did not fit the lab's protocol.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OpError {
    /// No operation of this name on this lab's world.
    Unknown { op: String },
    /// Argument `index` (from 0) is not of the operation's type, or missing, or extra.
    BadArgument {
        op: &'static str,
        index: usize,
        want: Arg,
    },
    /// More arguments than the operation takes.
    TooMany { op: &'static str, takes: usize },
}

impl std::fmt::Display for OpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OpError::Unknown { op } => write!(f, "the world has no operation `{op}`"),
            OpError::BadArgument { op, index, want } => {
                let want = match want {
                    Arg::Str => "a string",
                    Arg::Number => "a finite number",
                    Arg::NumberOrNull => "a finite number or None",
                    Arg::Bool => "True or False",
                };
                write!(f, "{op}: argument {} must be {want}", index + 1)
            }
            OpError::TooMany { op, takes: 1 } => write!(f, "{op} takes 1 argument"),
            OpError::TooMany { op, takes } => write!(f, "{op} takes {takes} arguments"),
        }
    }
}

/// The world of one learner call, as a host reaches it: each operation of the lab's
/// `LabInfo::world_ops` by name. A host never needs to know which lab's world it
/// holds (the WASM boundary has one world object, `JsWorld`, for every lab).
pub trait LabWorld {
    /// The operations this world answers (its lab's `LabInfo::world_ops`).
    fn ops(&self) -> &'static [WorldOp];
    /// Runs `op`, whose arguments `world_op` has checked against its `WorldOp`.
    fn run_op(&self, op: &WorldOp, args: &[OpValue]) -> OpValue;
    /// Another handle on the same world (worlds are shared handles).
    fn handle(&self) -> Box<dyn LabWorld>;
}

/// Runs the operation `name` of `world` on `args`: checked first against the lab's
/// protocol, so a world only ever sees the arguments its `WorldOp` promises.
/// `arg(i, want)` reads argument `i` as `want`'s type (`None` when it is not one).
pub fn world_op(
    world: &dyn LabWorld,
    name: &str,
    given: usize,
    mut arg: impl FnMut(usize, Arg) -> Option<OpValue>,
) -> Result<OpValue, OpError> {
    let op = world
        .ops()
        .iter()
        .find(|o| o.name == name)
        .ok_or_else(|| OpError::Unknown {
            op: crate::report::cap_chars(name, 40),
        })?;
    if given > op.args.len() {
        return Err(OpError::TooMany {
            op: op.name,
            takes: op.args.len(),
        });
    }
    let args = op
        .args
        .iter()
        .enumerate()
        .map(|(index, &want)| {
            arg(index, want).ok_or(OpError::BadArgument {
                op: op.name,
                index,
                want,
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(world.run_op(op, &args))
}

/// One task of a lab: a section of its `lab.md` that the learner works through.
/// Exercism numbers a lab's tasks from 1 in the order `LabInfo::tasks` lists them
/// (a test's `task_id`); every test belongs to exactly one task.
#[derive(Debug)]
pub struct LabTask {
    /// The section's heading, as `lab.md` writes it after its `#`s.
    pub heading: &'static str,
    /// The learner functions the section is about: a test of one of them belongs here.
    pub functions: &'static [&'static str],
    /// Tests that call no single function (a system run), by name.
    pub tests: &'static [&'static str],
}

/// What a host needs to know about a lab to present it.
#[derive(Debug)]
pub struct LabInfo {
    pub id: &'static str,
    pub title: &'static str,
    pub level: &'static str,
    pub minutes: u32,
    /// XP awarded once every test passes.
    pub xp: u32,
    /// Each run of the tests is stopped after this long (wall time, enforced by the host).
    pub time_limit_s: f64,
    /// The functions the learner writes, in the order the page lists them.
    pub functions: &'static [&'static str],
    pub starter_py: &'static str,
    /// The reference solution in Python, shown to a learner after a full pass.
    pub reference_py: &'static str,
    /// The lab's instructions (Markdown), in our own words.
    pub instructions_md: &'static str,
    /// The lab's Python side in the learner's interpreter (`src/deliver_once/bridge.py`,
    /// `src/courier/learner_side.py`): the objects the learner's functions receive,
    /// and how each is called. Every host that runs learner code imports it beside
    /// `www/host/solution_runner.py`, as the module `delivery_lab_<lab id with _>`.
    pub bridge_py: &'static str,
    /// What a learner call can do to its world, each operation once: the hosts
    /// learn the world's protocol from here (`tests/wasm_api.rs` holds the WASM
    /// world objects to it).
    pub world_ops: &'static [WorldOp],
    /// The run's database, when the learner's calls get one that the host keeps on
    /// its trusted side (`src/courier/db_store.py`): the store's Python module, which
    /// the host imports as `delivery_lab_<lab id with _>_store` where the store lives
    /// (the page's worker; the grading CLI's grading thread, never its sandbox). The
    /// learner's code reaches it through the world's operations; the grader's own
    /// operations on it go through `LearnerHost::store`.
    pub store_py: Option<&'static str>,
    /// The sections of `lab.md` that are its tasks, in order (see `LabTask`).
    pub tasks: &'static [LabTask],
    /// Whether its hidden tests' inputs can be drawn per submission
    /// (`HiddenInputs::Variant`); a host asks for a variant only of a lab that says so.
    pub hidden_variants: bool,
}

impl LabInfo {
    /// The task (numbered from 1) whose section is about `function`.
    pub fn task_of_function(&self, function: &str) -> Option<u32> {
        self.task_where(|t| t.functions.contains(&function))
    }

    /// The task (numbered from 1) that names the test `name` as its own.
    pub fn task_of_test(&self, name: &str) -> Option<u32> {
        self.task_where(|t| t.tests.contains(&name))
    }

    fn task_where(&self, pred: impl Fn(&LabTask) -> bool) -> Option<u32> {
        let i = self.tasks.iter().position(pred)?;
        Some(u32::try_from(i + 1).expect("a lab has few tasks"))
    }
}

pub trait Lab: Sync {
    fn info(&self) -> &'static LabInfo;
    /// Every test's name and kind, in report order, without running anything.
    fn tests(&self) -> Vec<(String, TestKind)>;
    /// What a learner may read of each test before it runs (its task; an example's
    /// code), in report order. A hidden test's sheet carries no code: nothing of its
    /// data is read to make it.
    fn test_sheets(&self) -> Vec<TestSheet>;
    /// Runs every test against the learner's code that `host` reaches, and reports.
    /// `hidden` says which inputs the hidden tests get; a lab whose
    /// `LabInfo::hidden_variants` is false grades its fixed cases whatever it says.
    fn grade(
        &self,
        host: &mut dyn LearnerHost,
        seed: u64,
        hidden: HiddenInputs,
        audience: Audience,
        mode: RunMode,
    ) -> Report;
}

/// Which inputs a run's hidden tests get (issue 28). Fixed hidden inputs are a secret
/// that any report with per-test statuses leaks a bit at a time, so a grader that
/// learners can submit to many times draws them per submission: a `Variant` is a
/// seeded transform of every hidden case that keeps the rule it tests (fresh task
/// keys, times, names), its expected behaviour computed by the reference at grading
/// time as always. The variant's seed is the trusted side's (`./lab grade` derives
/// it from a secret and the submission's hash) and no report shows it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum HiddenInputs {
    /// The hidden cases exactly as written: the regression cases, and every report
    /// and snapshot made without a variant.
    #[default]
    Fixed,
    /// Every hidden case transformed by this seed.
    Variant(u64),
}

/// One of the grader's own operations on the run's database of a lab that has one
/// (`LabInfo::store_py`). Typed, and on a path of its own (`LearnerHost::store`):
/// no learner call can name one, and none goes through a learner call's path. Each
/// one's arguments are JSON of the lab's types (`courier::learner`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreOp {
    /// A fresh database: the lab's tables, its config and its stores.
    Reset,
    /// One more action row.
    Enqueue,
    /// An action marked dispatched, with its lease.
    Settle,
    /// A worker's connection closed, its transaction rolled back.
    Kill,
    /// Every connection's transaction rolled back (the database restarts).
    Restart,
    /// Every table, as committed: answers them.
    Dump,
    /// Every table replaced.
    Load,
}

impl StoreOp {
    /// Its name on the way to the host's store (the store module's `grader_op`).
    pub fn name(self) -> &'static str {
        match self {
            StoreOp::Reset => "reset",
            StoreOp::Enqueue => "enqueue",
            StoreOp::Settle => "settle",
            StoreOp::Kill => "kill",
            StoreOp::Restart => "restart",
            StoreOp::Dump => "dump",
            StoreOp::Load => "load",
        }
    }
}

/// The learner's code as a host (the page's worker, the grading CLI) runs it, for
/// every lab alike: each lab adapts it to its own `Solution` or `Backend` trait.
pub trait LearnerHost {
    /// Runs the learner's function `fn_name` on `args_json` with `world`, the lab's
    /// world for this call (its operations are `LabInfo::world_ops`). Answers the
    /// host's JSON text, `{"ok": ...}` or `{"error": ...}`, or why the host failed.
    fn call(
        &mut self,
        fn_name: &str,
        args_json: &str,
        world: &dyn LabWorld,
    ) -> Result<String, String>;
    /// Runs the grader's operation `op` on the run's database that the host keeps
    /// for a lab with one (`LabInfo::store_py`), on `args_json`. Answers the host's
    /// JSON text, `{"ok": ...}` or `{"error": ...}`, or why the host failed.
    fn store(&mut self, op: StoreOp, args_json: &str) -> Result<String, String>;
    /// What the learner's code printed since the last time this was asked.
    fn take_output(&mut self) -> Option<String> {
        None
    }
}

/// A learner call through `host`: the value returned or the learner's error. A
/// fault of the host itself (it threw, or answered something else) is the host
/// error `LearnerError::Host`, naming the function.
pub fn learner_call(
    host: &mut dyn LearnerHost,
    fn_name: &str,
    args: &impl Serialize,
    world: &dyn LabWorld,
) -> Result<Value, LearnerError> {
    let fault = |why: String| LearnerError::Host {
        message: format!("The page could not run `{fn_name}`: {why}"),
    };
    let args_json = serde_json::to_string(args)
        .map_err(|e| fault(format!("its arguments did not serialize ({e})")))?;
    let text = host.call(fn_name, &args_json, world).map_err(fault)?;
    if let Some(value) = crate::value::ok_answer(&text) {
        return Ok(value);
    }
    let answer = serde_json::from_str::<serde_json::Value>(&text)
        .map_err(|e| e.to_string())
        .and_then(|v| match (v.get("ok"), v.get("error")) {
            (Some(ok), None) => Value::from_json(ok).map(Ok),
            (None, Some(err)) => LearnerError::from_json(err).map(Err),
            _ => Err("it has neither or both".to_string()),
        });
    match answer {
        Ok(result) => result,
        Err(why) => Err(fault(format!(
            "the host's answer is not {{\"ok\": ...}} or {{\"error\": ...}} ({why}): {}",
            crate::report::cap_chars(&text, 200)
        ))),
    }
}

/// What a run is for: a learner's report runs every test; a verdict (mutation
/// testing asks only "does this fail?") may stop at the first test that fails; a
/// run of some tests only (the page's "run this test", the catalogue's "is this
/// mistake caught by the test it names?") runs those and reports those alone, its
/// report marked `partial`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum RunMode {
    #[default]
    Report,
    Verdict,
    /// These tests only, by name (each one of the lab's `tests()`: the boundary checks).
    Only(Vec<String>),
}

/// The rule every lab's run keeps: once a test reaches the lab's time limit (the
/// host stopped the learner's code), no later test runs; each is reported "not run".
/// In a verdict run, the same after the first test that does not pass. In a run of
/// some tests only, the others are not run and not reported.
#[derive(Default)]
pub struct TimeLimit {
    reached: bool,
    failed: bool,
    mode: RunMode,
}

impl TimeLimit {
    pub fn new(mode: RunMode) -> Self {
        TimeLimit {
            mode,
            ..TimeLimit::default()
        }
    }

    /// `test`'s report, or "not run" once the limit was reached (or, in a verdict
    /// run, once a test failed); `None`, without running it, for a test that a run
    /// of some tests only leaves out.
    pub fn run(
        &mut self,
        name: &str,
        kind: TestKind,
        test: impl FnOnce() -> TestReport,
    ) -> Option<TestReport> {
        if let RunMode::Only(names) = &self.mode {
            if !names.iter().any(|n| n == name) {
                return None;
            }
        }
        let t = if self.reached {
            TestReport::new(
                name,
                kind,
                TestStatus::Timeout,
                Some("Not run: the run had already reached its time limit.".into()),
            )
        } else if self.failed {
            TestReport::new(
                name,
                kind,
                TestStatus::Fail,
                Some("Not run: a verdict run stops at the first failed test.".into()),
            )
        } else {
            test()
        };
        self.reached |= t.status == TestStatus::Timeout;
        self.failed |= self.mode == RunMode::Verdict && t.status != TestStatus::Pass;
        Some(t)
    }

    /// The run's report of `tests`, the ones this run ran: every lab's run ends
    /// here. A run of some tests only is `partial` and earns no XP, whatever passed.
    pub fn report(self, lab: &str, seed: u64, xp_on_pass: u32, tests: Vec<TestReport>) -> Report {
        let report = Report::new(lab, seed, xp_on_pass, tests);
        if matches!(self.mode, RunMode::Only(_)) {
            report.into_partial()
        } else {
            report
        }
    }
}

/// The course's seed, every lab's default.
pub const COURSE_SEED: u64 = 1042;

pub fn lab_by_id(id: &str) -> Option<&'static dyn Lab> {
    crate::labs().iter().copied().find(|l| l.info().id == id)
}
