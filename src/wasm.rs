//! The browser's boundary, and nothing more: one long-lived `Grader` handle, the
//! `JsWorld` object a learner call reaches its lab's world through (one type for every
//! lab: `op(name, ...args)`, checked against the lab's `world_ops`), and the host's
//! JS solution object as every lab's `LearnerHost` (its `call` for the learner's
//! calls, its `store` for the grader's operations on the run's database). Which
//! labs there are, and how each grades, is the registry's (`src/lab.rs`). Data
//! crosses as JSON strings of the serde types the native hosts use, so the page
//! reads the same reports as the CLI. Every failure reaches JS as an `Error` (made by `js_error`),
//! never as a panic.

use crate::lab::{
    lab_by_id, world_op, Arg, HiddenInputs, Lab, LabWorld, LearnerHost, OpValue, RunMode, StoreOp,
    WorldOp, OP_ARGS_MAX,
};
use crate::labs;
use crate::report::{Audience, HiddenStatuses, Report, TestKind};
use serde::Serialize;
use std::cell::RefCell;
use std::fmt::Display;
use std::rc::Rc;
use wasm_bindgen::prelude::*;

/// The one error helper: a JS `Error` with this message.
pub(crate) fn js_error(message: impl Display) -> JsError {
    JsError::new(&message.to_string())
}

pub(crate) fn to_json(value: &impl Serialize) -> Result<String, JsError> {
    serde_json::to_string(value).map_err(js_error)
}

fn find_lab(lab_id: &str) -> Result<&'static dyn Lab, JsError> {
    lab_by_id(lab_id).ok_or_else(|| {
        let known: Vec<_> = labs().iter().map(|l| l.info().id).collect();
        js_error(format!(
            "Unknown lab `{lab_id}`; the labs are: {}",
            known.join(", ")
        ))
    })
}

/// A report in the format a host asks for: `json` (the default, the project's own),
/// `text`, `exercism` (with the lab's test sheets), `gradescope` (hidden tests
/// visible after the due date), `gradescope-published` (hidden tests visible once
/// the grades are published), `gradescope-hidden` (hidden tests never shown to
/// students) or `prairielearn`.
fn render(report: &Report, format: Option<String>) -> Result<String, JsError> {
    match format.as_deref().unwrap_or("json") {
        "json" => Ok(report.to_json()),
        "text" => Ok(report.to_text()),
        "exercism" => Ok(report.to_exercism(&find_lab(&report.lab)?.test_sheets())),
        "gradescope" => Ok(report.to_gradescope("after_due_date")),
        "gradescope-published" => Ok(report.to_gradescope("after_published")),
        "gradescope-hidden" => Ok(report.to_gradescope("hidden")),
        "prairielearn" => Ok(report.to_prairielearn()),
        other => Err(js_error(format!(
            "Unknown report format `{other}`: use json, text, exercism, gradescope, gradescope-published, gradescope-hidden or prairielearn"
        ))),
    }
}

/// A host's `hidden_statuses` (`each`, the default, or `aggregate`).
fn hidden_statuses(name: Option<String>) -> Result<HiddenStatuses, JsError> {
    match name.as_deref() {
        None => Ok(HiddenStatuses::Each),
        Some(n) => HiddenStatuses::parse(n).ok_or_else(|| {
            js_error(format!(
                "Unknown hidden_statuses `{n}`: use {}",
                HiddenStatuses::NAMES.join(" or ")
            ))
        }),
    }
}

/// A host's `only`: a run of these tests alone. Each must be one of the lab's tests,
/// named once, and none hidden when hidden statuses are `aggregate` (a run of one
/// hidden test would tell its status apart, which the aggregate is there to hide).
fn only_names(
    lab: &dyn Lab,
    names: Vec<String>,
    statuses: HiddenStatuses,
) -> Result<Vec<String>, JsError> {
    let tests = lab.tests();
    if names.is_empty() {
        return Err(js_error("only: name at least one test"));
    }
    for (i, name) in names.iter().enumerate() {
        let Some((_, kind)) = tests.iter().find(|(n, _)| n == name) else {
            return Err(js_error(format!(
                "only: lab `{}` has no test named `{}`",
                lab.info().id,
                crate::report::cap_chars(name, 200)
            )));
        };
        if names[..i].contains(name) {
            return Err(js_error(format!("only: `{name}` is named twice")));
        }
        if *kind == TestKind::Hidden && statuses == HiddenStatuses::Aggregate {
            return Err(js_error(format!(
                "only: `{name}` is a hidden test, and hidden statuses are aggregate here"
            )));
        }
    }
    Ok(names)
}

/// A host's `audience` (`learner`, the default, or `staff`).
fn audience(name: Option<String>) -> Result<Audience, JsError> {
    match name.as_deref() {
        None | Some("learner") => Ok(Audience::Learner),
        Some("staff") => Ok(Audience::Staff),
        Some(n) => Err(js_error(format!(
            "Unknown audience `{n}`: use learner or staff"
        ))),
    }
}

/// A host's `hidden_seed`: none, the hidden cases as written; a number, every hidden
/// case in that variant, for a lab that has variants (`LabInfo::hidden_variants`).
fn hidden_inputs(lab: &dyn Lab, hidden_seed: Option<u32>) -> Result<HiddenInputs, JsError> {
    match hidden_seed {
        None => Ok(HiddenInputs::Fixed),
        Some(_) if !lab.info().hidden_variants => Err(js_error(format!(
            "Lab `{}` draws no hidden inputs per submission: grade it without a hidden seed",
            lab.info().id
        ))),
        Some(s) => Ok(HiddenInputs::Variant(u64::from(s))),
    }
}

/// Labs carry no default seed of their own yet; deliver-once's is the course's.
fn seed_or_default(seed: Option<u32>) -> u64 {
    seed.map_or(crate::lab::COURSE_SEED, u64::from)
}

#[wasm_bindgen(typescript_custom_section)]
const TS_SOLUTION: &str = r#"
/** The host's learner code, as `Grader.grade` calls it. */
export interface LearnerSolution {
  /**
   * Runs the learner's function `fn_name` on the JSON arguments and answers
   * `{"ok": <Value>}` or `{"error": <LearnerError>}`. `world` reaches this call's
   * world only while the call runs (it throws at any other time); it is the same
   * object for every call of a run: do not `free()` it.
   */
  call(fn_name: string, args_json: string, world: JsWorld): string;
  /**
   * Runs the grader's operation `op` (reset, enqueue, settle, kill, restart, dump,
   * load) on the run's database that the host keeps for a lab with one (its
   * `store_py`), and answers `{"ok": ...}` or `{"error": ...}`. Never a learner
   * call: required for such a lab, never called for another.
   */
  store?(op: string, args_json: string): string;
  /** What the learner printed since the last call. */
  take_output?(): string | undefined;
}
"#;

#[wasm_bindgen]
extern "C" {
    /// The host's solution object (`LearnerSolution` in the .d.ts).
    #[wasm_bindgen(typescript_type = "LearnerSolution")]
    pub type SolutionObject;

    // Getters with `catch`: a throwing getter (a Proxy, say) must not unwind through
    // Rust, which would leave the `Grader` borrowed.
    #[wasm_bindgen(method, getter = call, catch)]
    fn call_prop(this: &SolutionObject) -> Result<JsValue, JsValue>;

    /// The learner call: `world` is the lab's world object for this call.
    #[wasm_bindgen(method, catch)]
    fn call(
        this: &SolutionObject,
        fn_name: &str,
        args_json: &str,
        world: JsValue,
    ) -> Result<JsValue, JsValue>;

    #[wasm_bindgen(method, getter = store, catch)]
    fn store_prop(this: &SolutionObject) -> Result<JsValue, JsValue>;

    /// The grader's operation on the run's database the host keeps.
    #[wasm_bindgen(method, catch, js_name = store)]
    fn store_call(this: &SolutionObject, op: &str, args_json: &str) -> Result<JsValue, JsValue>;

    #[wasm_bindgen(method, getter = take_output, catch)]
    fn take_output_prop(this: &SolutionObject) -> Result<JsValue, JsValue>;

    #[wasm_bindgen(method, catch, js_name = take_output)]
    fn take_output_call(this: &SolutionObject) -> Result<JsValue, JsValue>;

    /// Whatever a `call` threw, read as an `Error` when it is one.
    type Thrown;

    #[wasm_bindgen(method, getter, catch)]
    fn name(this: &Thrown) -> Result<JsValue, JsValue>;

    #[wasm_bindgen(method, getter, catch)]
    fn message(this: &Thrown) -> Result<JsValue, JsValue>;
}

/// What the learner printed since the last call: `take_output` is optional on the
/// JS side, and one that throws only loses the output.
fn take_output(solution: &SolutionObject) -> Option<String> {
    if !solution.take_output_prop().is_ok_and(|f| f.is_function()) {
        return None;
    }
    solution.take_output_call().ok()?.as_string()
}

/// `TypeError: x is not a function` for an Error, the text for a thrown string.
fn describe_thrown(e: &JsValue) -> String {
    if let Some(s) = e.as_string() {
        return s;
    }
    if e.is_object() {
        let e: &Thrown = e.unchecked_ref();
        let get = |r: Result<JsValue, JsValue>| r.ok().and_then(|v| v.as_string());
        if let Some(message) = get(e.message()) {
            return match get(e.name()) {
                Some(name) => format!("{name}: {message}"),
                None => message,
            };
        }
    }
    format!("{e:?}")
}

/// The one long-lived handle the page's worker keeps.
#[wasm_bindgen]
#[derive(Default)]
pub struct Grader {}

#[derive(Serialize)]
struct LabSummary {
    id: &'static str,
    title: &'static str,
}

#[derive(Serialize)]
struct TestSummary {
    name: String,
    kind: TestKind,
    /// The task it belongs to, numbered from 1 (`LabInfo::tasks`; its test sheet's).
    task: u32,
}

#[derive(Serialize)]
struct LabDetails {
    id: &'static str,
    title: &'static str,
    level: &'static str,
    minutes: u32,
    xp: u32,
    time_limit_s: f64,
    functions: &'static [&'static str],
    starter_py: &'static str,
    reference_py: &'static str,
    instructions_md: &'static str,
    bridge_py: &'static str,
    store_py: Option<&'static str>,
    default_seed: u64,
    tests: Vec<TestSummary>,
    world_ops: &'static [WorldOp],
    /// Whether it has `store_py`.
    store: bool,
    /// The headings of lab.md's sections that are its tasks, in order (task 1 first).
    tasks: Vec<&'static str>,
    /// Each task's learner functions, in the same order (the page's "jump to the code").
    task_functions: Vec<&'static [&'static str]>,
    /// Whether its hidden inputs can be drawn per submission (a `hidden_seed`).
    hidden_variants: bool,
}

#[wasm_bindgen]
impl Grader {
    #[wasm_bindgen(constructor)]
    pub fn new() -> Grader {
        Grader {}
    }

    /// JSON `[{id, title}]`.
    pub fn labs(&self) -> Result<String, JsError> {
        let list: Vec<_> = labs()
            .iter()
            .map(|l| LabSummary {
                id: l.info().id,
                title: l.info().title,
            })
            .collect();
        to_json(&list)
    }

    /// JSON `[[first, last], ...]`: the code points a terminal must not get raw
    /// (report.rs `TERMINAL_UNSAFE`), for the CLI's own escapes of what it prints.
    pub fn terminal_unsafe(&self) -> Result<String, JsError> {
        let ranges: Vec<[u32; 2]> = crate::report::TERMINAL_UNSAFE
            .iter()
            .map(|&(lo, hi)| [lo as u32, hi as u32])
            .collect();
        to_json(&ranges)
    }

    /// JSON of everything the page shows before a run; throws for an unknown lab.
    pub fn lab(&self, lab_id: &str) -> Result<String, JsError> {
        let lab = find_lab(lab_id)?;
        let i = lab.info();
        to_json(&LabDetails {
            id: i.id,
            title: i.title,
            level: i.level,
            minutes: i.minutes,
            xp: i.xp,
            time_limit_s: i.time_limit_s,
            functions: i.functions,
            starter_py: i.starter_py,
            reference_py: i.reference_py,
            instructions_md: i.instructions_md,
            bridge_py: i.bridge_py,
            store_py: i.store_py,
            default_seed: seed_or_default(None),
            // The sheets are in report order, as `tests()` is.
            tests: lab
                .tests()
                .into_iter()
                .zip(lab.test_sheets())
                .map(|((name, kind), sheet)| TestSummary {
                    name,
                    kind,
                    task: sheet.task_id,
                })
                .collect(),
            world_ops: i.world_ops,
            store: i.store_py.is_some(),
            tasks: i.tasks.iter().map(|t| t.heading).collect(),
            task_functions: i.tasks.iter().map(|t| t.functions).collect(),
            hidden_variants: i.hidden_variants,
        })
    }

    /// Grades `solution` and returns the learner's report JSON (`Report::to_json`).
    /// `hidden_seed`: the hidden tests' variant (none: the cases as written); no
    /// report shows it. `hidden_statuses`: `each` (the default) or `aggregate`.
    /// `only`: these tests alone, by name (the page's "run this test"); the report
    /// lists them alone and is `partial`.
    // The JS boundary: plain arguments, the last four optional (`undefined`).
    #[allow(clippy::too_many_arguments)]
    pub fn grade(
        &self,
        lab_id: &str,
        solution: SolutionObject,
        seed: Option<u32>,
        format: Option<String>,
        hidden_seed: Option<u32>,
        hidden_statuses: Option<String>,
        only: Option<Vec<String>>,
    ) -> Result<String, JsError> {
        let statuses = self::hidden_statuses(hidden_statuses)?;
        let mode = match only {
            None => RunMode::Report,
            Some(names) => RunMode::Only(only_names(find_lab(lab_id)?, names, statuses)?),
        };
        let report = grade_report(lab_id, solution, seed, hidden_seed, mode)?
            .for_audience(Audience::Learner);
        render(&report.with_hidden_statuses(statuses), format)
    }

    /// Grades `solution` until its first failed test (the later ones are reported
    /// "not run"): the pass or fail of `grade`, sooner. For mutation testing, where
    /// only that is asked; never for a learner's report.
    pub fn verdict(
        &self,
        lab_id: &str,
        solution: SolutionObject,
        seed: Option<u32>,
        hidden_seed: Option<u32>,
    ) -> Result<String, JsError> {
        let report = grade_report(lab_id, solution, seed, hidden_seed, RunMode::Verdict)?;
        render(&report.for_audience(Audience::Learner), None)
    }

    /// Grades `solution` once and renders the report in each of `formats`: JSON of
    /// `{format: text}`. The grading CLI asks for several formats of one run, which
    /// cannot be run twice (its learner code lives in a sandbox that is gone after it).
    /// `hidden_seed` and `hidden_statuses` as for `grade`. `audience`: `learner` (the
    /// default) or `staff`, whose `json` and `text` carry each hidden test's message
    /// (its counterexample, what the code did); a platform's format is the
    /// learner's whatever the audience (`Report::each_test`).
    // The JS boundary: plain arguments, the last three optional (`undefined`).
    #[allow(clippy::too_many_arguments)]
    pub fn grade_formats(
        &self,
        lab_id: &str,
        solution: SolutionObject,
        seed: Option<u32>,
        formats: Vec<String>,
        hidden_seed: Option<u32>,
        hidden_statuses: Option<String>,
        audience: Option<String>,
    ) -> Result<String, JsError> {
        let statuses = self::hidden_statuses(hidden_statuses)?;
        let audience = self::audience(audience)?;
        let report = grade_report(lab_id, solution, seed, hidden_seed, RunMode::Report)?
            .for_audience(audience)
            .with_hidden_statuses(statuses);
        let mut out = serde_json::Map::new();
        for f in formats {
            let text = render(&report, Some(f.clone()))?;
            out.insert(f, serde_json::Value::String(text));
        }
        to_json(&out)
    }

    /// The report for code that could not be graded at all (e.g. a syntax error).
    pub fn error_report(
        &self,
        lab_id: &str,
        seed: Option<u32>,
        message: &str,
        format: Option<String>,
        hidden_statuses: Option<String>,
    ) -> Result<String, JsError> {
        let statuses = self::hidden_statuses(hidden_statuses)?;
        let lab = find_lab(lab_id)?;
        render(
            &Report::error(lab_id, seed_or_default(seed), message, lab.tests())
                .with_hidden_statuses(statuses),
            format,
        )
    }

    /// The report for a run the worker stopped at the lab's time limit. `only`: the
    /// run was of these tests alone (`grade`'s `only`, refused as it refuses them):
    /// the report lists them alone, in the lab's order, and is `partial`.
    pub fn timeout_report(
        &self,
        lab_id: &str,
        seed: Option<u32>,
        message: &str,
        format: Option<String>,
        hidden_statuses: Option<String>,
        only: Option<Vec<String>>,
    ) -> Result<String, JsError> {
        let statuses = self::hidden_statuses(hidden_statuses)?;
        let lab = find_lab(lab_id)?;
        let seed = seed_or_default(seed);
        let report = match only {
            None => Report::timed_out(lab_id, seed, message, lab.tests()),
            Some(names) => {
                let names = only_names(lab, names, statuses)?;
                let tests = lab
                    .tests()
                    .into_iter()
                    .filter(|(n, _)| names.contains(n))
                    .collect();
                Report::timed_out(lab_id, seed, message, tests).into_partial()
            }
        };
        render(&report.with_hidden_statuses(statuses), format)
    }
}

/// Runs every test of the lab against `solution`: the staff's report, every hidden
/// test's details in it. Each caller shows it to its audience (`Report::for_audience`).
fn grade_report(
    lab_id: &str,
    solution: SolutionObject,
    seed: Option<u32>,
    hidden_seed: Option<u32>,
    mode: RunMode,
) -> Result<Report, JsError> {
    let lab = find_lab(lab_id)?;
    let hidden = hidden_inputs(lab, hidden_seed)?;
    let has_call = !solution.is_null()
        && !solution.is_undefined()
        && solution.call_prop().is_ok_and(|f| f.is_function());
    if !has_call {
        return Err(js_error(
            "grade() needs a solution object with a call(fn_name, args_json, world) method",
        ));
    }
    if lab.info().store_py.is_some() && !solution.store_prop().is_ok_and(|f| f.is_function()) {
        return Err(js_error(format!(
            "grade() of lab `{lab_id}` needs a solution object with a store(op, args_json) method: the host keeps the lab's database"
        )));
    }
    Ok(lab.grade(
        &mut JsHost {
            solution,
            world: None,
        },
        seed_or_default(seed),
        hidden,
        Audience::Staff,
        mode,
    ))
}

/// The host's JS solution object as every lab's `LearnerHost`. Each call's world is
/// handed to JS through one `JsWorld` per run, whose slot holds that call's world while
/// the call runs and nothing at any other time, so a handle JS kept can no longer
/// touch a finished test. One wrapper for the run, not one per call: making and
/// freeing a wrapper (with its finalizer) for each of a run's hundreds of calls was
/// measured.
struct JsHost {
    solution: SolutionObject,
    /// The run's `JsWorld`, made at its first call that has a world: its slot, and the JS object.
    world: Option<(Slot, JsValue)>,
}

type Slot = Rc<RefCell<Option<Box<dyn LabWorld>>>>;

impl LearnerHost for JsHost {
    fn call(
        &mut self,
        fn_name: &str,
        args_json: &str,
        world: &dyn LabWorld,
    ) -> Result<String, String> {
        let (slot, js_world) = self.world.get_or_insert_with(|| {
            let slot = Slot::default();
            let js = JsValue::from(JsWorld { slot: slot.clone() });
            (slot, js)
        });
        *slot.borrow_mut() = Some(world.handle());
        let returned = self.solution.call(fn_name, args_json, js_world.clone());
        drop(slot.borrow_mut().take());
        json_text(returned, "call")
    }

    fn store(&mut self, op: StoreOp, args_json: &str) -> Result<String, String> {
        json_text(self.solution.store_call(op.name(), args_json), "store")
    }

    /// Optional on the JS side; a throwing `take_output` only loses the output.
    fn take_output(&mut self) -> Option<String> {
        take_output(&self.solution)
    }
}

/// What a solution object's method answered, as the JSON text it must be.
fn json_text(returned: Result<JsValue, JsValue>, method: &str) -> Result<String, String> {
    let returned =
        returned.map_err(|e| format!("the host's {method} threw {}", describe_thrown(&e)))?;
    returned
        .as_string()
        .ok_or_else(|| format!("the host's {method} returned {returned:?}, not a JSON string"))
}

/// The JS-facing handle of one learner call's world, for every lab: `op(name,
/// ...args)` runs one of the operations the lab's registry entry lists
/// (`world_ops`), with its arguments checked against their types. Rust empties the slot when the call returns, so the
/// engine's world is released at once and a handle JS kept (say, a learner who
/// stored `kv` in a global) can no longer touch a finished test; it then throws. The
/// wrapper is the run's (`JsHost`), and wasm-bindgen's FinalizationRegistry reclaims
/// it after the run.
#[wasm_bindgen]
pub struct JsWorld {
    slot: Slot,
}

/// An argument slot read as the type an operation wants (`undefined` is absent).
fn op_arg(v: &JsValue, want: Arg) -> Option<OpValue> {
    let finite = |v: &JsValue| v.as_f64().filter(|x| x.is_finite()).map(OpValue::Number);
    match want {
        Arg::Str => v.as_string().map(OpValue::Str),
        Arg::Number => finite(v),
        Arg::NumberOrNull if v.is_null() || v.is_undefined() => Some(OpValue::Null),
        Arg::NumberOrNull => finite(v),
        Arg::Bool => v.as_bool().map(OpValue::Bool),
    }
}

#[wasm_bindgen]
impl JsWorld {
    /// Runs the world's operation `name` on up to four arguments (`OP_ARGS_MAX`):
    /// a string, number or boolean, or `undefined` for "nothing" (null for a
    /// missing number). Throws for an operation this lab's world has not, for
    /// arguments of the wrong types, and once the call the world belongs to has
    /// returned.
    pub fn op(
        &self,
        name: &str,
        a: JsValue,
        b: JsValue,
        c: JsValue,
        d: JsValue,
    ) -> Result<JsValue, JsError> {
        let slot = self.slot.borrow();
        let world = slot.as_deref().ok_or_else(|| {
            js_error("This world belongs to a call that has already returned; use the one passed to the current call")
        })?;
        let args: [JsValue; OP_ARGS_MAX] = [a, b, c, d];
        let given = args
            .iter()
            .rposition(|v| !v.is_undefined())
            .map_or(0, |i| i + 1);
        // No operation calls back into JS, so the slot's borrow cannot be asked for again.
        let answer =
            world_op(world, name, given, |i, want| op_arg(&args[i], want)).map_err(js_error)?;
        Ok(match answer {
            OpValue::Null => JsValue::UNDEFINED,
            OpValue::Bool(b) => JsValue::from_bool(b),
            OpValue::Number(x) => JsValue::from_f64(x),
            OpValue::Str(s) => JsValue::from_str(&s),
        })
    }
}
