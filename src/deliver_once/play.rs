//! One case played in two identical worlds, the reference's and the learner's, call
//! by call until the first difference (`play`), and how it went (`Outcome`), with
//! the learner's message and trace. The runner (`suite.rs`) and the differential
//! test (`differential.rs`) both play through it.

use super::case::{Call, Case};
use super::check::{compare, run_learner, run_reference, Actual, Mismatch};
use super::world::{Event, World};
use super::Solution;
use crate::report::{Audience, TestReport, TestStatus, TraceStep};
use crate::value::{LearnerError, Value};

/// How one case went, before it is shaped for an audience.
#[derive(Debug)]
pub struct Outcome {
    pub status: TestStatus,
    pub mismatch: Option<Mismatch>,
    pub message: Option<String>,
    pub trace: Vec<TraceStep>,
}

impl Outcome {
    pub fn pass(trace: Vec<TraceStep>) -> Outcome {
        Outcome {
            status: TestStatus::Pass,
            mismatch: None,
            message: None,
            trace,
        }
    }

    pub fn error(err: &LearnerError, context: String, trace: Vec<TraceStep>) -> Outcome {
        let status = match err {
            LearnerError::Timeout { .. } => TestStatus::Timeout,
            _ => TestStatus::Error,
        };
        Outcome {
            status,
            mismatch: None,
            message: Some(format!("{context}\n{err}")),
            trace,
        }
    }

    pub fn report(self, case: &Case, output: Option<String>, audience: Audience) -> TestReport {
        let passed = self.status == TestStatus::Pass;
        TestReport {
            name: case.name.clone(),
            kind: case.kind,
            status: self.status,
            points: u32::from(passed),
            max_points: 1,
            rule: self.mismatch.as_ref().map(|m| m.rule.id().to_string()),
            message: self.message,
            expected: self.mismatch.as_ref().map(|m| m.expected.clone()),
            actual: self.mismatch.map(|m| m.actual),
            trace: self.trace,
            output: output.filter(|o| !o.is_empty()),
            figure: None,
        }
        .for_audience(audience)
    }
}

fn trace_step(t_s: f64, call: String, events: &[Event], returned: Option<String>) -> TraceStep {
    TraceStep {
        t_s,
        call,
        events: events.iter().map(Event::to_trace).collect(),
        returned,
    }
}

/// Plays `calls` (each at its clock time) in two identical worlds, the reference's and
/// the learner's, until the first difference or learner error. `where_` says, for a
/// message, which call went wrong: (its index, its time, the call).
pub fn play<'a>(
    solution: &mut dyn Solution,
    ref_world: &World,
    world: &World,
    calls: impl IntoIterator<Item = (f64, &'a Call)>,
    trace_on_pass: bool,
    where_: impl Fn(usize, f64, &Call) -> String,
) -> Outcome {
    // The steps as they happened; their text (the trace) is written only for a
    // report that shows it: a failure, or a pass when `trace_on_pass`. Writing it
    // for each of a differential test's hundreds of passing inputs was a fifth of
    // a warm run (measured in WASM).
    let mut played: Vec<Played> = Vec::new();
    for (i, (t_s, call)) in calls.into_iter().enumerate() {
        ref_world.advance_to(t_s);
        world.advance_to(t_s);
        let expected = run_reference(ref_world, call);
        let Actual { returned, events } = run_learner(solution, world, call);
        let value = match returned {
            Ok(v) => v,
            Err(e) => {
                played.push(Played { t_s, call, events, returned: None });
                return Outcome::error(&e, where_(i, t_s, call), traced(&played));
            }
        };
        let mismatch = compare(call, &expected, &events, &value);
        played.push(Played { t_s, call, events, returned: Some(value) });
        if let Some(m) = mismatch {
            let trace = traced(&played);
            let message = failure_message(&m, &where_(i, t_s, call), &trace);
            return Outcome {
                status: TestStatus::Fail,
                mismatch: Some(m),
                message: Some(message),
                trace,
            };
        }
    }
    Outcome::pass(if trace_on_pass { traced(&played) } else { Vec::new() })
}

/// One step of `play`, as it happened.
struct Played<'a> {
    t_s: f64,
    call: &'a Call,
    events: Vec<Event>,
    /// None: the call raised.
    returned: Option<Value>,
}

fn traced(played: &[Played]) -> Vec<TraceStep> {
    played
        .iter()
        .map(|p| trace_step(p.t_s, p.call.text(), &p.events, p.returned.as_ref().map(|v| v.to_string())))
        .collect()
}

/// The learner-facing explanation: the rule, expected against actual, what happened.
pub fn failure_message(m: &Mismatch, where_: &str, trace: &[TraceStep]) -> String {
    let mut out = format!(
        "Rule broken ({}): {}\n{where_}\n  expected: {}\n  actual:   {}\n\nWhat happened (lab clock):\n",
        m.rule.id(),
        m.rule.text(),
        m.expected,
        m.actual
    );
    out.push_str(&render_trace(trace));
    out
}

pub fn render_trace(trace: &[TraceStep]) -> String {
    let mut out = String::new();
    for step in trace {
        let t = format!("t={} s", crate::value::float_repr(step.t_s));
        out.push_str(&format!("  {t:<12} {}\n", step.call));
        for e in &step.events {
            out.push_str(&format!("  {:<12}   {}\n", "", e.text));
        }
        match &step.returned {
            Some(r) => out.push_str(&format!("  {:<12}   returned {r}\n", "")),
            None => out.push_str(&format!("  {:<12}   raised an exception\n", "")),
        }
    }
    out
}
