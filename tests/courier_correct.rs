//! Issue 29, "what it fails that is correct": the courier grader with the Rust
//! reference backend, changed at one point each, through a wrapper backend.
//!
//! - a wait given as a float (`("wait", 1000.0)`) passes every test;
//! - a wait of the wrong length fails the units that fix it, naming the rule and
//!   showing expected and actual;
//! - a claim whose lease is a duration (`lease_until_ms = cfg.lease_ms`) fails the
//!   chaos run at its first takeover, naming the rule, in a few thousand steps;
//! - a call the store refuses (a transaction left open, SQL only SQLite takes)
//!   fails its unit by name and stops the chaos run there, naming the call;
//! - every test that does not pass says why, in the staff's view of the report.

use delivery_lab::courier::reference::{Mistake, RefBackend};
use delivery_lab::courier::sim::{
    chaos_run, ActionRow, Backend, Call, ChaosPlan, Config, RunStop, StepWorld, Tables,
    STEPS_PER_ACTION_CAP,
};
use delivery_lab::courier::{grade, CHAOS_TEST};
use delivery_lab::report::{Audience, Report, TestStatus};
use delivery_lab::value::{LearnerError, Value};

/// The reference, with `change` applied to what each call returns (and the
/// tables it can reach).
struct Changed<
    F: FnMut(&Call, Result<Value, LearnerError>, &mut RefBackend) -> Result<Value, LearnerError>,
> {
    inner: RefBackend,
    change: F,
}

impl<F> Backend for Changed<F>
where
    F: FnMut(&Call, Result<Value, LearnerError>, &mut RefBackend) -> Result<Value, LearnerError>,
{
    fn reset(&mut self, cfg: &Config, stores: &[String]) -> Result<(), RunStop> {
        self.inner.reset(cfg, stores)
    }
    fn enqueue(&mut self, action: &ActionRow) -> Result<(), RunStop> {
        self.inner.enqueue(action)
    }
    fn settle(&mut self, action_id: u64, now_ms: u64) -> Result<(), RunStop> {
        self.inner.settle(action_id, now_ms)
    }
    fn call(&mut self, call: &Call, world: &StepWorld) -> Result<Value, LearnerError> {
        let r = self.inner.call(call, world);
        (self.change)(call, r, &mut self.inner)
    }
    fn kill(&mut self, worker: &str) {
        self.inner.kill(worker)
    }
    fn restart_db(&mut self) {
        self.inner.restart_db()
    }
    fn dump(&mut self) -> Result<Tables, RunStop> {
        self.inner.dump()
    }
    fn load(&mut self, tables: &Tables) -> Result<(), RunStop> {
        self.inner.load(tables)
    }
}

fn changed<F>(change: F) -> Changed<F>
where
    F: FnMut(&Call, Result<Value, LearnerError>, &mut RefBackend) -> Result<Value, LearnerError>,
{
    Changed {
        inner: RefBackend::new(None),
        change,
    }
}

/// `("wait", ms)` with its ms replaced by `f(ms)`.
fn wait_as(
    f: impl Fn(i64) -> Value,
) -> impl FnMut(&Call, Result<Value, LearnerError>, &mut RefBackend) -> Result<Value, LearnerError>
{
    move |_, r, _| match r {
        Ok(Value::Tuple(t)) if t.len() == 2 && t[0] == Value::str("wait") => match t[1] {
            Value::Int(ms) => Ok(Value::Tuple(vec![Value::str("wait"), f(ms)])),
            _ => Ok(Value::Tuple(t)),
        },
        other => other,
    }
}

fn failing(r: &Report) -> Vec<(&str, TestStatus, &str)> {
    r.tests
        .iter()
        .filter(|t| t.status != TestStatus::Pass)
        .map(|t| {
            (
                t.name.as_str(),
                t.status,
                t.message.as_deref().unwrap_or(""),
            )
        })
        .collect()
}

/// Every test that does not pass carries a message that says something.
fn every_failure_says_why(r: &Report) {
    for (name, status, message) in failing(r) {
        assert!(
            !message.trim().is_empty(),
            "{name} is {status:?} with no message"
        );
    }
}

#[test]
fn a_float_wait_passes_every_test() {
    let r = grade(
        &mut changed(wait_as(|ms| Value::Float(ms as f64))),
        1042,
        Audience::Staff,
    );
    assert!(failing(&r).is_empty(), "{:#?}", failing(&r));
}

#[test]
fn a_wait_of_the_wrong_length_fails_naming_recheck_ms() {
    for (what, f) in [
        (
            "4000",
            Box::new(|_| Value::Int(4000)) as Box<dyn Fn(i64) -> Value>,
        ),
        ("1 (a second, in s)", Box::new(|_| Value::Int(1))),
        ("1000.5", Box::new(|_| Value::Float(1000.5))),
    ] {
        let r = grade(&mut changed(wait_as(f)), 1042, Audience::Staff);
        let fails = failing(&r);
        every_failure_says_why(&r);
        let names: Vec<&str> = fails.iter().map(|f| f.0).collect();
        assert!(
            names.contains(&"a send that times out means wait")
                && names.contains(&"a lookup that times out means wait, not send"),
            "a wait of {what}: {names:?}"
        );
        let unit = fails
            .iter()
            .find(|f| f.0 == "a lookup that times out means wait, not send")
            .unwrap();
        assert_eq!(unit.1, TestStatus::Fail);
        assert!(
            unit.2.contains("cfg.recheck_ms") && unit.2.contains("should return ('wait', 1000)"),
            "a wait of {what}: {}",
            unit.2
        );
        // The chaos run only needs waits that end: any length passes it.
        assert!(!names.contains(&CHAOS_TEST), "a wait of {what}: {names:?}");
    }
}

#[test]
fn a_wait_that_is_no_number_above_zero_fails_with_a_message() {
    for bad in [
        Value::Int(0),
        Value::Float(-1.0),
        Value::Float(f64::NAN),
        Value::Bool(true),
        Value::str("1000"),
    ] {
        let b = bad.clone();
        let r = grade(
            &mut changed(wait_as(move |_| b.clone())),
            1042,
            Audience::Staff,
        );
        every_failure_says_why(&r);
        let chaos = r.tests.iter().find(|t| t.name == CHAOS_TEST).unwrap();
        assert_eq!(chaos.status, TestStatus::Fail, "{bad}");
        assert!(
            chaos
                .message
                .as_deref()
                .unwrap()
                .contains("with ms a number above 0"),
            "{bad}: {:?}",
            chaos.message
        );
    }
}

/// `lease_until_ms = cfg.lease_ms` instead of `now_ms + cfg.lease_ms`, written into
/// the tables after each claim the reference makes.
fn lease_is_a_duration(
) -> impl FnMut(&Call, Result<Value, LearnerError>, &mut RefBackend) -> Result<Value, LearnerError>
{
    |call, r, backend| {
        if let (Call::Claim { .. }, Ok(Value::Tuple(t))) = (call, &r) {
            if let Value::Int(id) = t[0] {
                let mut tables = backend.dump().expect("tables");
                for a in tables.actions.iter_mut().filter(|a| a.id == id as u64) {
                    a.lease_until_ms = Config::default().lease_ms;
                }
                backend.load(&tables).expect("tables");
            }
        }
        r
    }
}

#[test]
fn a_lease_that_is_a_duration_fails_the_chaos_run_naming_the_rule() {
    let err = chaos_run(&mut changed(lease_is_a_duration()), &ChaosPlan::full(1042))
        .expect_err("the run stops");
    let RunStop::Failed(m) = &err else {
        panic!("{err:?}")
    };
    assert!(
        m.contains("A lease is a time, not a duration: lease_until_ms = now_ms + cfg.lease_ms")
            && m.contains("set its lease_until_ms to 30000"),
        "{m}"
    );
    let r = grade(&mut changed(lease_is_a_duration()), 1042, Audience::Staff);
    every_failure_says_why(&r);
    let chaos = r.tests.iter().find(|t| t.name == CHAOS_TEST).unwrap();
    assert_eq!(chaos.status, TestStatus::Fail);
    // The example unit that claims says which column is wrong.
    let unit = r
        .tests
        .iter()
        .find(|t| t.name == "claim serves the store that waited longest")
        .unwrap();
    assert!(
        unit.message
            .as_deref()
            .unwrap()
            .contains("lease_until_ms should be 40000, is 30000"),
        "{:?}",
        unit.message
    );
}

/// The store's verdict on every on_webhook call from the `after`-th on.
fn webhooks_refused(
    rule: &'static str,
    after: usize,
) -> impl FnMut(&Call, Result<Value, LearnerError>, &mut RefBackend) -> Result<Value, LearnerError>
{
    let mut n = 0;
    move |call, r, _| {
        if let Call::OnWebhook { .. } = call {
            n += 1;
            if n > after {
                return Err(LearnerError::Refused {
                    function: "on_webhook".into(),
                    rule: rule.into(),
                    message: format!("on_webhook: refused ({rule})"),
                });
            }
        }
        r
    }
}

#[test]
fn a_refused_call_stops_the_chaos_run_naming_the_call() {
    let err = chaos_run(
        &mut changed(webhooks_refused("open-transaction", 3)),
        &ChaosPlan::full(1042),
    )
    .expect_err("the run stops");
    let RunStop::Failed(m) = &err else {
        panic!("{err:?}")
    };
    assert!(
        m.contains("`on_webhook(db, event(event_id=")
            && m.contains("on_webhook: refused (open-transaction)"),
        "{m}"
    );
    let r = grade(
        &mut changed(webhooks_refused("sqlite-only", 0)),
        1042,
        Audience::Staff,
    );
    every_failure_says_why(&r);
    for (name, status, message) in failing(&r) {
        if name.starts_with(delivery_lab::courier::differential::PREFIX) {
            // The differential's world, then the store's words.
            assert_eq!(status, TestStatus::Fail, "{name}");
            assert!(
                message.contains("on_webhook: refused (sqlite-only)"),
                "{name}: {message}"
            );
        } else if name != CHAOS_TEST {
            // The units of on_webhook: a fail (not an error), with the store's words.
            assert_eq!(status, TestStatus::Fail, "{name}");
            assert_eq!(message, "on_webhook: refused (sqlite-only)", "{name}");
        }
    }
    assert!(failing(&r)
        .iter()
        .any(|f| f.0 == "a duplicate webhook is a no-op"));
}

/// The budget of steps stops none of the runs that finish: the reference and every
/// mistake of the reference backend take well under it.
#[test]
fn the_step_budget_leaves_room_for_every_finishing_run() {
    for mistake in [
        None,
        Some(Mistake::ResendWithoutLookup),
        Some(Mistake::NewKeyOnResend),
        Some(Mistake::NoHeartbeat),
        Some(Mistake::TimeoutIsFailure),
    ] {
        let plan = ChaosPlan::full(1042);
        let r = chaos_run(&mut RefBackend::new(mistake), &plan).expect("the run finishes");
        assert!(
            r.steps * 2 < STEPS_PER_ACTION_CAP * plan.actions,
            "{mistake:?}: {} steps",
            r.steps
        );
    }
}

/// A webhook handler that fails at every delivery is delivered again every 100 ms
/// until the drain's end: the budget stops it, saying what it found.
#[test]
fn a_run_that_never_finishes_stops_at_its_budget_saying_why() {
    let mut backend = changed(|call, r, _| match call {
        Call::OnWebhook { .. } => Err(LearnerError::Exception {
            message: "IntegrityError: UNIQUE constraint failed: webhook_events.event_id".into(),
        }),
        _ => r,
    });
    let err = chaos_run(&mut backend, &ChaosPlan::full(1042)).expect_err("the run stops");
    let RunStop::Failed(m) = &err else {
        panic!("{err:?}")
    };
    assert!(
        m.starts_with("it took ")
            && m.contains(&format!(
                "steps, more than {STEPS_PER_ACTION_CAP} per action"
            ))
            && m.contains("steps failed while the database was up")
            && m.contains("UNIQUE constraint failed"),
        "{m}"
    );
}

/// A host's error that says nothing still gives its test a message.
#[test]
fn an_error_that_says_nothing_still_gets_a_message() {
    let mut backend = changed(|call, r, _| match call {
        Call::Merge { .. } => Err(LearnerError::Host {
            message: String::new(),
        }),
        _ => r,
    });
    let r = grade(&mut backend, 1042, Audience::Staff);
    every_failure_says_why(&r);
    let merge = r
        .tests
        .iter()
        .find(|t| t.name == "merge only moves forward")
        .unwrap();
    assert_eq!(merge.status, TestStatus::Error);
    assert!(
        merge
            .message
            .as_deref()
            .unwrap()
            .ends_with("ended with an error that says nothing more"),
        "{:?}",
        merge.message
    );
}
