//! The browser's boundary, and nothing more: one long-lived `Grader` handle, the
//! world objects a learner call reaches the fakes through (`World`, `CourierWorld`),
//! and the host's JS solution object as every lab's `LearnerHost`. Which labs there
//! are, and how each grades, is the registry's (`src/lab.rs`). Data crosses as JSON
//! strings of the serde types the native hosts use, so the page reads the same
//! reports as the CLI. Every failure reaches JS as an `Error` (made by `js_error`),
//! never as a panic.

#[cfg(feature = "courier")]
use crate::courier::sim::{Fault, Faults, StepWorld};
#[cfg(feature = "deliver-once")]
use crate::deliver_once::world;
use crate::lab::{lab_by_id, Lab, LearnerHost, RunMode, WorldOp};
use crate::labs;
use crate::report::{Audience, Report, TestKind};
use serde::Serialize;
use std::any::Any;
use std::cell::RefCell;
use std::fmt::Display;
use std::rc::Rc;
use wasm_bindgen::prelude::*;

/// The one error helper: a JS `Error` with this message.
fn js_error(message: impl Display) -> JsError {
    JsError::new(&message.to_string())
}

fn to_json(value: &impl Serialize) -> Result<String, JsError> {
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
   * `{"ok": <Value>}` or `{"error": <LearnerError>}`. `world` is valid only during
   * this call; call `world.free()` before returning (or leave it to the GC).
   */
  call(fn_name: string, args_json: string, world: World): string;
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

    /// The learner call (or, with `world` undefined, the host's own trusted
    /// operation): `world` is the lab's world object for this call.
    #[wasm_bindgen(method, catch)]
    fn call(
        this: &SolutionObject,
        fn_name: &str,
        args_json: &str,
        world: JsValue,
    ) -> Result<JsValue, JsValue>;

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
    default_seed: u64,
    tests: Vec<TestSummary>,
    world_ops: &'static [WorldOp],
    store: bool,
    /// The headings of lab.md's sections that are its tasks, in order (task 1 first).
    tasks: Vec<&'static str>,
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
            default_seed: seed_or_default(None),
            tests: lab
                .tests()
                .into_iter()
                .map(|(name, kind)| TestSummary { name, kind })
                .collect(),
            world_ops: i.world_ops,
            store: i.store,
            tasks: i.tasks.iter().map(|t| t.heading).collect(),
        })
    }

    /// Grades `solution` and returns the learner's report JSON (`Report::to_json`).
    pub fn grade(
        &self,
        lab_id: &str,
        solution: SolutionObject,
        seed: Option<u32>,
        format: Option<String>,
    ) -> Result<String, JsError> {
        render(
            &grade_report(lab_id, solution, seed, RunMode::Report)?,
            format,
        )
    }

    /// Grades `solution` until its first failed test (the later ones are reported
    /// "not run"): the pass or fail of `grade`, sooner. For mutation testing, where
    /// only that is asked; never for a learner's report.
    pub fn verdict(
        &self,
        lab_id: &str,
        solution: SolutionObject,
        seed: Option<u32>,
    ) -> Result<String, JsError> {
        render(
            &grade_report(lab_id, solution, seed, RunMode::Verdict)?,
            None,
        )
    }

    /// Grades `solution` once and renders the report in each of `formats`: JSON of
    /// `{format: text}`. The grading CLI asks for several formats of one run, which
    /// cannot be run twice (its learner code lives in a sandbox that is gone after it).
    pub fn grade_formats(
        &self,
        lab_id: &str,
        solution: SolutionObject,
        seed: Option<u32>,
        formats: Vec<String>,
    ) -> Result<String, JsError> {
        let report = grade_report(lab_id, solution, seed, RunMode::Report)?;
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
    ) -> Result<String, JsError> {
        let lab = find_lab(lab_id)?;
        render(
            &Report::error(lab_id, seed_or_default(seed), message, lab.tests()),
            format,
        )
    }

    /// The report for a run the worker stopped at the lab's time limit.
    pub fn timeout_report(
        &self,
        lab_id: &str,
        seed: Option<u32>,
        message: &str,
        format: Option<String>,
    ) -> Result<String, JsError> {
        let lab = find_lab(lab_id)?;
        render(
            &Report::timed_out(lab_id, seed_or_default(seed), message, lab.tests()),
            format,
        )
    }
}

/// Runs every test of the lab against `solution` (the learner's audience).
fn grade_report(
    lab_id: &str,
    solution: SolutionObject,
    seed: Option<u32>,
    mode: RunMode,
) -> Result<Report, JsError> {
    let lab = find_lab(lab_id)?;
    let has_call = !solution.is_null()
        && !solution.is_undefined()
        && solution.call_prop().is_ok_and(|f| f.is_function());
    if !has_call {
        return Err(js_error(
            "grade() needs a solution object with a call(fn_name, args_json, world) method",
        ));
    }
    Ok(lab.grade(
        &mut JsHost(solution),
        seed_or_default(seed),
        Audience::Learner,
        mode,
    ))
}

/// The host's JS solution object as every lab's `LearnerHost`. The world of a call
/// is handed to JS as the world object of its type (`World`, `CourierWorld`), and
/// emptied when the call returns, so a handle JS kept can no longer touch it.
struct JsHost(SolutionObject);

impl LearnerHost for JsHost {
    fn call(
        &mut self,
        fn_name: &str,
        args_json: &str,
        world: Option<&dyn Any>,
    ) -> Result<String, String> {
        let (js_world, release) = match world {
            None => (JsValue::UNDEFINED, None),
            Some(w) => js_world(w).ok_or("the lab's world has no object in this build")?,
        };
        let returned = self.0.call(fn_name, args_json, js_world);
        if let Some(release) = release {
            release();
        }
        let returned =
            returned.map_err(|e| format!("the host's call threw {}", describe_thrown(&e)))?;
        returned
            .as_string()
            .ok_or_else(|| format!("the host's call returned {returned:?}, not a JSON string"))
    }

    /// Optional on the JS side; a throwing `take_output` only loses the output.
    fn take_output(&mut self) -> Option<String> {
        take_output(&self.0)
    }
}

/// What empties a world's slot when its call returns.
type Release = Box<dyn FnOnce()>;

/// A world lent to JS for one call: its JS object over a slot of its own, and what
/// empties the slot afterwards.
fn lend<T: Clone + 'static>(
    w: &T,
    object: impl FnOnce(Rc<RefCell<Option<T>>>) -> JsValue,
) -> (JsValue, Option<Release>) {
    let slot = Rc::new(RefCell::new(Some(w.clone())));
    let js = object(slot.clone());
    (js, Some(Box::new(move || drop(slot.borrow_mut().take()))))
}

/// A world as its JS object, and what empties it after the call; `None` for a
/// world type this build has no object for.
fn js_world(w: &dyn Any) -> Option<(JsValue, Option<Release>)> {
    #[cfg(feature = "deliver-once")]
    if let Some(w) = w.downcast_ref::<world::World>() {
        return Some(lend(w, |slot| World { slot }.into()));
    }
    #[cfg(feature = "courier")]
    if let Some(w) = w.downcast_ref::<StepWorld>() {
        return Some(lend(w, |slot| CourierWorld { slot }.into()));
    }
    let _ = w;
    None
}

/// The first lab's boundary: its world and its solution adapter.
#[cfg(feature = "deliver-once")]
mod deliver_once_host {
    use super::*;

    /// The world of one learner call. Rust empties the slot when the call returns, so the
    /// engine's world is released at once and a handle JS kept (say, a learner who stored
    /// `kv` in a global) can no longer touch a finished test; it then throws. The small
    /// wrapper itself is JS-owned: the caller should `free()` it when `call` returns, and
    /// wasm-bindgen's FinalizationRegistry reclaims it otherwise.
    #[wasm_bindgen]
    pub struct World {
        pub(super) slot: Rc<RefCell<Option<world::World>>>,
    }

    impl World {
        /// A clone of the engine's handle, so no borrow is held while the world works.
        fn live(&self) -> Result<world::World, JsError> {
            self.slot.borrow().clone().ok_or_else(|| {
                js_error("This world belongs to a call that has already returned; use the one passed to the current call")
            })
        }
    }

    #[wasm_bindgen]
    impl World {
        pub fn now_s(&self) -> Result<f64, JsError> {
            Ok(self.live()?.now_s())
        }

        pub fn kv_get(&self, key: &str) -> Result<Option<String>, JsError> {
            Ok(self.live()?.kv_get(key))
        }

        /// `ttl_s`: seconds, or `undefined`/`null` for a key that never expires.
        pub fn kv_set(
            &self,
            key: &str,
            value: &str,
            ttl_s: Option<f64>,
            nx: bool,
        ) -> Result<bool, JsError> {
            let world = self.live()?;
            // The engine's world takes finite TTLs only; the bridge is where that is checked.
            if ttl_s.is_some_and(|t| !t.is_finite()) {
                return Err(js_error(
                    "kv.set: ttl must be a finite number of seconds, or None",
                ));
            }
            Ok(world.kv_set(key, value, ttl_s, nx))
        }

        pub fn kv_delete(&self, key: &str) -> Result<bool, JsError> {
            Ok(self.live()?.kv_delete(key))
        }

        /// The provider's answer, as JSON of `SendResult`.
        pub fn send(&self, task_key: &str) -> Result<String, JsError> {
            to_json(&self.live()?.send(task_key))
        }

        pub fn uniform(&self, a: f64, b: f64) -> Result<f64, JsError> {
            Ok(self.live()?.uniform(a, b))
        }
    }
}

#[cfg(feature = "deliver-once")]
use deliver_once_host::World;

/// The courier lab's boundary: its world and its host adapter.
#[cfg(feature = "courier")]
mod courier_host {
    use super::*;

    /// The courier lab's world for one step: every database statement and provider
    /// call of the learner's code asks it first (see `courier::sim::Faults`).
    #[wasm_bindgen]
    pub struct CourierWorld {
        pub(super) slot: Rc<RefCell<Option<StepWorld>>>,
    }

    impl CourierWorld {
        fn live(&self) -> Result<StepWorld, JsError> {
            self.slot.borrow().clone().ok_or_else(|| {
                js_error("This database or provider belongs to a step that has already returned; use the ones passed to the current call")
            })
        }
    }

    #[wasm_bindgen]
    impl CourierWorld {
        /// Before a statement: `go`, `kill` (the worker dies here) or `db-down`.
        pub fn statement(&self, in_tx: bool) -> Result<String, JsError> {
            Ok(match self.live()?.statement(in_tx) {
                Fault::Go => "go",
                Fault::Kill => "kill",
                Fault::DbDown => "db-down",
            }
            .into())
        }

        /// JSON of the answer (`{"answer": "accepted", "message_id": ...}` or
        /// `{"answer": "timeout"}`), or `{"answer": "killed"}`.
        pub fn send(
            &self,
            key: &str,
            phone: &str,
            body: &str,
            committed_attempts: Option<f64>,
        ) -> Result<String, JsError> {
            let committed = committed_attempts.map(|a| a as i64);
            match self.live()?.send(key, phone, body, committed) {
                Ok(a) => to_json(&a),
                Err(_) => Ok(r#"{"answer":"killed"}"#.into()),
            }
        }

        pub fn lookup(&self, key: &str) -> Result<String, JsError> {
            match self.live()?.lookup(key) {
                Ok(a) => to_json(&a),
                Err(_) => Ok(r#"{"answer":"killed"}"#.into()),
            }
        }
    }
}

#[cfg(feature = "courier")]
use courier_host::CourierWorld;

/// The courier lab's misbehaving provider on its own, for the real run's provider
/// server (`www/real/provider.mjs`): the simulation's provider, so its behaviour is
/// written once. Time is the caller's (seconds since the run began); answers and
/// logs are JSON of the engine's types.
#[cfg(feature = "courier")]
#[wasm_bindgen]
pub struct CourierProvider {
    inner: crate::courier::provider::Provider,
}

#[cfg(feature = "courier")]
#[wasm_bindgen]
impl CourierProvider {
    /// The provider with the lab's rates and timing, seeded.
    #[wasm_bindgen(constructor)]
    pub fn new(seed: u32) -> CourierProvider {
        use crate::courier::provider::{Provider, Rates, Timing};
        CourierProvider {
            inner: Provider::new(u64::from(seed), Rates::default(), Timing::default()),
        }
    }

    /// A send for `action` with idempotency key `key`: `{"answer": "accepted",
    /// "message_id"}` or `{"answer": "timeout"}`.
    pub fn send(&mut self, now_s: f64, action: f64, key: &str) -> Result<String, JsError> {
        if !(action.is_finite() && action >= 0.0 && action.fract() == 0.0) {
            return Err(js_error("send: the action must be a whole number"));
        }
        to_json(&self.inner.send(now_s, action as u64, key))
    }

    /// `{"answer": "found", "message_id", "status"}`, `{"answer": "not-found"}` or
    /// `{"answer": "timeout"}`.
    pub fn lookup(&mut self, now_s: f64, key: &str) -> Result<String, JsError> {
        to_json(&self.inner.lookup(now_s, key))
    }

    /// The webhooks due by `now_s`, in due order: `[{event_id, key, message_id, status, due_s}]`.
    pub fn due_webhooks(&mut self, now_s: f64) -> Result<String, JsError> {
        to_json(&self.inner.due_webhooks(now_s))
    }

    /// Webhooks made but not yet due.
    pub fn pending_webhooks(&self) -> u32 {
        self.inner.pending_webhooks() as u32
    }

    /// The provider's own log from entry `from` on (it only grows).
    pub fn log_since(&self, from: u32) -> Result<String, JsError> {
        let log = self.inner.log();
        to_json(&log.get(from as usize..).unwrap_or(&[]))
    }

    /// The chaos run's counts for these actions, read from the log alone.
    pub fn tally(&self, actions: Vec<f64>) -> Result<String, JsError> {
        let actions = actions.into_iter().map(|a| a as u64);
        to_json(&crate::courier::provider::tally(self.inner.log(), actions))
    }

    /// Each action's final status at the provider: `{action: status}`.
    pub fn final_statuses(&self) -> Result<String, JsError> {
        to_json(&self.inner.final_statuses())
    }
}
