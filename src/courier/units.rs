//! Unit tests of the learner's pieces: a starting state of the tables, one call in a
//! scripted world (provider answers in order, maybe a kill), and a comparison with
//! the reference design run from the same state in the same world: the value
//! returned, the provider calls (keys, lookups before sends, the attempt committed
//! before the request left) and the tables after, column by column. Reads and
//! statement counts are free, so differently written correct pieces pass.

use super::provider::{LookupAnswer, SendAnswer, Status, Webhook};
use super::reference::RefBackend;
use super::rules::Rule;
use super::tables::Holder;
use super::sim::{
    ActionState, Call, Config, Backend, Op, OutboxState, RunStop, Script, StepWorld, StoreState,
    Tables,
};
use crate::report::{TestKind, TestReport, TestStatus, TraceEvent, TraceStep};
use crate::value::{LearnerError, Value};

#[derive(Clone, Debug)]
pub struct UnitCase {
    pub name: &'static str,
    pub kind: TestKind,
    /// The rule of lab.md this case checks, said to the learner when it fails.
    pub rule: Rule,
    pub setup: Tables,
    pub call: Call,
    pub script: Script,
    /// The numbers the pieces get as `cfg` (the lab's defaults unless a case or a
    /// differential world says otherwise).
    pub cfg: Config,
}

// Builders that keep the case lists short.
pub fn action(
    id: u64,
    store: &str,
    state: &str,
    owner: Option<&str>,
    epoch: i64,
    lease_until_ms: u64,
) -> ActionState {
    ActionState {
        id,
        store: store.into(),
        phone: format!("+1555{id:07}"),
        body: format!("Order {id} has shipped"),
        created_ms: id * 10,
        state: state.into(),
        owner: owner.map(Into::into),
        epoch,
        lease_until_ms,
    }
}

/// The same row, created at `created_ms` (a case's rows are created at `id * 10`
/// unless they say otherwise).
pub fn created(a: ActionState, created_ms: u64) -> ActionState {
    ActionState { created_ms, ..a }
}

pub fn outbox(action_id: u64, attempts: i64, status: &str) -> OutboxState {
    OutboxState {
        action_id,
        idem_key: format!("action-{action_id}"),
        attempts,
        status: status.into(),
        message_id: None,
        events_applied: 0,
    }
}

pub fn stores(list: &[(&str, u64)]) -> Vec<StoreState> {
    list.iter()
        .map(|(s, t)| StoreState {
            store: (*s).into(),
            last_served_ms: *t,
        })
        .collect()
}

pub fn accepted(id: &str) -> SendAnswer {
    SendAnswer::Accepted {
        message_id: id.into(),
    }
}

pub fn found(id: &str, status: Status) -> LookupAnswer {
    LookupAnswer::Found {
        message_id: id.into(),
        status,
    }
}

pub fn webhook(event_id: &str, action: u64, status: Status) -> Webhook {
    Webhook {
        event_id: event_id.into(),
        key: format!("action-{action}"),
        message_id: format!("msg-{action}"),
        status,
        due_s: 0.0,
    }
}

/// What one run of a case did.
pub struct Outcome {
    pub returned: Result<Value, LearnerError>,
    /// The script killed the worker during the call.
    pub killed: bool,
    /// The provider calls, in order (statements left out).
    pub provider: Vec<Op>,
    pub statements: usize,
    pub after: Tables,
}

/// What the reference design does in `case`: what a case file's `expect` table
/// states (`tests/courier_cases.rs` checks that they agree).
pub fn reference_outcome(case: &UnitCase) -> Result<Outcome, RunStop> {
    play(&mut RefBackend::new(None), case)
}

fn play(backend: &mut dyn Backend, case: &UnitCase) -> Result<Outcome, RunStop> {
    play_with(backend, case, case.script.clone())
}

fn play_with(backend: &mut dyn Backend, case: &UnitCase, script: Script) -> Result<Outcome, RunStop> {
    backend.reset(&case.cfg, &[])?;
    backend.load(&case.setup)?;
    let (now_ms, worker) = match &case.call {
        Call::Claim { worker, now_ms } => (*now_ms, worker.clone()),
        Call::DeliverStep { worker, now_ms, .. } | Call::Heartbeat { worker, now_ms, .. } => {
            (*now_ms, worker.clone())
        }
        Call::WriteIntent { worker, .. } => (0, worker.clone()),
        _ => (0, "webhooks".into()),
    };
    let world = StepWorld::scripted(script, now_ms, &worker, case.cfg.lease_ms);
    let returned = backend.call(&case.call, &world);
    if let Err(LearnerError::Timeout { .. }) = returned {
        // The backend answers nothing more once the limit is reached.
        return Ok(Outcome {
            returned,
            killed: false,
            provider: Vec::new(),
            statements: 0,
            after: Tables::default(),
        });
    }
    let killed = world.killed().is_some();
    if killed {
        backend.kill(&worker);
    }
    if let Some(other) = world.interleave_left() {
        // The other worker's claim waited for the call's transaction: it commits now.
        let mut t = backend.dump()?;
        other.apply(&mut t, case.cfg.lease_ms);
        backend.load(&t)?;
    }
    if let Some(w) = world.write_left() {
        let mut t = backend.dump()?;
        w.apply(&mut t);
        backend.load(&t)?;
    }
    let ops = world.ops();
    let statements = ops
        .iter()
        .filter(|o| matches!(o, Op::Statement { .. }))
        .count();
    let provider = ops
        .into_iter()
        .filter(|o| !matches!(o, Op::Statement { .. }))
        .collect();
    Ok(Outcome {
        returned,
        killed,
        provider,
        statements,
        after: backend.dump()?,
    })
}

/// What the reference design may do in `case`: one outcome, or, with another
/// worker's write during the call (`Script::interleave`), the two that a correct
/// call may end in: as if the other worker had gone first, and as if it had gone
/// right after (which of them happens depends on where a correct call's
/// transaction lets the other write in).
fn serial_outcomes(case: &UnitCase) -> Result<Vec<Outcome>, RunStop> {
    let Some(i) = &case.script.interleave else {
        return Ok(vec![play(&mut RefBackend::new(None), case)?]);
    };
    let lease_ms = case.cfg.lease_ms;
    let alone = Script {
        interleave: None,
        ..case.script.clone()
    };
    let mut first = UnitCase {
        name: case.name,
        kind: case.kind,
        rule: case.rule,
        setup: case.setup.clone(),
        call: case.call.clone(),
        script: alone.clone(),
        cfg: case.cfg,
    };
    i.claim.apply(&mut first.setup, lease_ms);
    let other_first = play(&mut RefBackend::new(None), &first)?;
    let mut other_after = play_with(&mut RefBackend::new(None), case, alone)?;
    i.claim.apply(&mut other_after.after, lease_ms);
    Ok(vec![other_first, other_after])
}

/// Of the outcomes a correct call may end in, the one whose tables are the
/// learner's (else the first): the one to compare with.
fn closest(mut wants: Vec<Outcome>, got: &Outcome) -> Outcome {
    let at = wants
        .iter()
        .position(|w| table_diffs(&w.after, &got.after).is_empty())
        .unwrap_or(0);
    wants.swap_remove(at)
}

/// An example's code as a learner reads it beside the test (Exercism's `test_code`):
/// the call in Python and what the reference design returns from the case's tables.
pub fn code_of(case: &UnitCase) -> String {
    let call = call_text(&case.call);
    match reference_outcome(case) {
        Ok(Outcome {
            returned: Ok(v),
            killed: false,
            ..
        }) => format!("assert {call} == {v}"),
        Ok(o) if o.killed => format!("{call}  # the worker is killed during this call"),
        Ok(Outcome {
            returned: Err(e), ..
        }) => format!("{call}  # raises: {e}"),
        Ok(_) | Err(_) => call,
    }
}

/// The call as Python would write it.
pub fn call_text(call: &Call) -> String {
    match call {
        Call::Claim { worker, now_ms } => format!("claim(db, {worker:?}, {now_ms}, cfg)"),
        Call::WriteIntent {
            action_id,
            worker,
            epoch,
        } => format!("write_intent(db, {action_id}, {worker:?}, {epoch})"),
        Call::DeliverStep {
            action_id,
            worker,
            epoch,
            now_ms,
        } => format!("deliver_step(db, provider, {action_id}, {worker:?}, {epoch}, {now_ms}, cfg)"),
        Call::OnWebhook { event } => format!(
            "on_webhook(db, event(event_id={:?}, key={:?}, message_id={:?}, status={:?}))",
            event.event_id,
            event.key,
            event.message_id,
            super::sim::status_name(event.status)
        ),
        Call::Heartbeat {
            action_id,
            worker,
            epoch,
            now_ms,
        } => format!("heartbeat(db, {action_id}, {worker:?}, {epoch}, {now_ms}, cfg)"),
        Call::Merge { current, reported } => format!("merge({current:?}, {reported:?})"),
    }
}

fn op_text(op: &Op) -> String {
    match op {
        Op::Send {
            key,
            committed_attempts,
        } => format!(
            "provider.send({key:?}, ...) with attempts = {} committed",
            committed_attempts.map_or(
                "nothing (no committed outbox row with that key)".to_string(),
                |a| a.to_string()
            )
        ),
        Op::Lookup { key } => format!("provider.lookup({key:?})"),
        Op::Statement { .. } => "statement".into(),
    }
}

fn returned_text(r: &Result<Value, LearnerError>) -> String {
    match r {
        Ok(v) => v.to_string(),
        Err(e) => format!("an error: {e}"),
    }
}

/// What is wrong with the value a piece returned, or None when it is the one
/// expected. A wait, `("wait", ms)`, may give its ms as any finite number above 0
/// (an int or a float: lab.md asks for no type), and must give the wait lab.md sets
/// for the situation, which is the reference's: `cfg.recheck_ms` after an answer
/// that says nothing (a lookup or a send that timed out).
fn return_problem(expected: &Value, actual: &Value) -> Option<String> {
    let wait = |t: &[Value]| t.len() == 2 && t[0] == Value::str("wait");
    match (expected, actual) {
        (Value::Tuple(e), Value::Tuple(a)) if wait(e) && wait(a) => {
            let ms = match &a[1] {
                Value::Int(_) | Value::Float(_) => a[1].as_f64().filter(|ms| ms.is_finite()),
                _ => None,
            };
            match (ms, e[1].as_f64()) {
                (Some(ms), _) if ms <= 0.0 => Some(format!(
                    "returned {actual}, should return {expected}: a wait is a number of lab milliseconds above 0"
                )),
                (Some(ms), Some(want)) if crate::value::close(ms, want) => None,
                (Some(_), _) => Some(format!(
                    "returned {actual}, should return {expected}: lab.md sets the wait: after an answer that says nothing (a lookup or a send that timed out), it is (\"wait\", cfg.recheck_ms)"
                )),
                (None, _) => Some(format!(
                    "returned {actual}, should return {expected}: the wait's ms is a number (an int or a float), finite and above 0"
                )),
            }
        }
        _ => (!actual.matches(expected))
            .then(|| format!("returned {actual}, should return {expected}")),
    }
}

/// Column-by-column differences in the tables after the call.
fn table_diffs(expected: &Tables, actual: &Tables) -> Vec<String> {
    let mut d = Vec::new();
    let opt = |o: &Option<String>| o.as_ref().map_or("NULL".to_string(), |s| format!("{s:?}"));
    for e in &expected.actions {
        match actual.actions.iter().find(|a| a.id == e.id) {
            None => d.push(format!("actions row {} is gone", e.id)),
            Some(a) => {
                let cols = [
                    ("state", format!("{:?}", e.state), format!("{:?}", a.state)),
                    ("owner", opt(&e.owner), opt(&a.owner)),
                    ("epoch", e.epoch.to_string(), a.epoch.to_string()),
                    (
                        "lease_until_ms",
                        e.lease_until_ms.to_string(),
                        a.lease_until_ms.to_string(),
                    ),
                ];
                for (c, ev, av) in cols {
                    if ev != av {
                        d.push(format!("actions row {}: {c} should be {ev}, is {av}", e.id));
                    }
                }
            }
        }
    }
    for e in &expected.stores {
        let a = actual
            .stores
            .iter()
            .find(|a| a.store == e.store)
            .map_or(0, |a| a.last_served_ms);
        if a != e.last_served_ms {
            d.push(format!(
                "stores row {:?}: last_served_ms should be {}, is {a}",
                e.store, e.last_served_ms
            ));
        }
    }
    for e in &expected.outbox {
        match actual.outbox.iter().find(|a| a.action_id == e.action_id) {
            None => d.push(format!(
                "outbox should have a row for action {}, and has none",
                e.action_id
            )),
            Some(a) => {
                let cols = [
                    (
                        "idem_key",
                        format!("{:?}", e.idem_key),
                        format!("{:?}", a.idem_key),
                    ),
                    ("attempts", e.attempts.to_string(), a.attempts.to_string()),
                    (
                        "status",
                        format!("{:?}", e.status),
                        format!("{:?}", a.status),
                    ),
                    ("message_id", opt(&e.message_id), opt(&a.message_id)),
                    (
                        "events_applied",
                        e.events_applied.to_string(),
                        a.events_applied.to_string(),
                    ),
                ];
                for (c, ev, av) in cols {
                    if ev != av {
                        d.push(format!(
                            "outbox row {}: {c} should be {ev}, is {av}",
                            e.action_id
                        ));
                    }
                }
            }
        }
    }
    for a in &actual.outbox {
        if !expected.outbox.iter().any(|e| e.action_id == a.action_id) {
            d.push(format!(
                "outbox should have no row for action {}, and has one (key {:?})",
                a.action_id, a.idem_key
            ));
        }
    }
    for e in &expected.webhook_events {
        if !actual.webhook_events.contains(e) {
            d.push(format!("webhook_events should hold {e:?}"));
        }
    }
    for a in &actual.webhook_events {
        if !expected.webhook_events.contains(a) {
            d.push(format!("webhook_events should not hold {a:?}"));
        }
    }
    d
}

/// A fenced call's answer: `("fenced", None)`.
fn is_fenced(r: &Result<Value, LearnerError>) -> bool {
    matches!(r, Ok(Value::Tuple(t)) if t.len() == 2 && t[0] == Value::str("fenced") && t[1] == Value::None)
}

/// Whether the call is `deliver_step` by a worker that does not hold the claim (an
/// earlier epoch, or the action no longer claimed).
fn stale_step(case: &UnitCase) -> bool {
    let Call::DeliverStep {
        action_id,
        worker,
        epoch,
        ..
    } = &case.call
    else {
        return false;
    };
    !case
        .setup
        .actions
        .iter()
        .any(|a| a.id == *action_id && a.held_by(worker, *epoch))
}

/// What tells the learner's outcome apart from the one expected: the value returned,
/// the provider calls and the tables after (empty when they agree). A lookup changes
/// nothing anywhere, so the lookups of a call that ends fenced in both are free: a
/// worker may check its fence before asking the provider, or after. For the same
/// reason a `deliver_step` whose caller lost its claim (`stale`) may answer
/// `("fenced", None)` where the reference, asking the provider first, waits: it
/// learns of the fence one step sooner, and writes nothing either way.
fn differences(want: &Outcome, got: &Outcome, stale: bool) -> Vec<String> {
    let stale_fenced = stale
        && is_fenced(&got.returned)
        && !is_fenced(&want.returned)
        && matches!(&want.returned, Ok(Value::Tuple(t)) if t.first() == Some(&Value::str("wait")));
    let mut problems = Vec::new();
    if got.killed && got.returned.is_ok() {
        problems.push(format!(
            "the worker was killed during the call, and the call returned {}: a kill must escape your code (no bare `except:`, no `except BaseException`), so that the worker dies where it was",
            returned_text(&got.returned)
        ));
    }
    if want.returned.is_err() && !want.killed && got.returned.is_ok() && !got.killed {
        problems.push(format!(
            "returned {} although a statement raised sqlite3.OperationalError (the database restarting, the transaction rolled back): lab.md says let it escape (if you catch it to roll back, raise it again), so that the worker restarts and the call is made again",
            returned_text(&got.returned)
        ));
    }
    if !want.killed && !got.killed && !stale_fenced {
        if let (Ok(w), Ok(g)) = (&want.returned, &got.returned) {
            problems.extend(return_problem(w, g));
        }
    }
    let fenced = stale_fenced || (is_fenced(&want.returned) && is_fenced(&got.returned));
    let calls = |ops: &[Op]| -> Vec<Op> {
        ops.iter()
            .filter(|o| !(fenced && matches!(o, Op::Lookup { .. })))
            .cloned()
            .collect()
    };
    let (want_calls, got_calls) = (calls(&want.provider), calls(&got.provider));
    if want_calls != got_calls {
        let list = |ops: &[Op]| {
            if ops.is_empty() {
                "no provider calls".to_string()
            } else {
                ops.iter().map(op_text).collect::<Vec<_>>().join(", then ")
            }
        };
        problems.push(format!(
            "the provider calls should be: {}; they were: {}",
            list(&want_calls),
            list(&got_calls)
        ));
    }
    problems.extend(table_diffs(&want.after, &got.after));
    problems
}

/// Runs one case against the learner's backend and reports it.
pub fn run_case(learner: &mut dyn Backend, case: &UnitCase) -> TestReport {
    let want = serial_outcomes(case);
    learner.take_output();
    let got = play(learner, case);
    let output = learner.take_output().filter(|o| !o.is_empty());
    let mut report = TestReport::new(case.name, case.kind, TestStatus::Pass, None);
    report.output = output;
    let (want, got) = match (want, got) {
        (Ok(w), Ok(g)) => (closest(w, &g), g),
        (Err(e), _) | (_, Err(e)) => {
            report.status = if e.is_timeout() {
                TestStatus::Timeout
            } else {
                TestStatus::Error
            };
            report.points = 0;
            report.message = Some(format!("The lab could not set this test up: {e}"));
            return report;
        }
    };
    let events: Vec<TraceEvent> = got
        .provider
        .iter()
        .map(|o| TraceEvent {
            t_s: 0.0,
            kind: "send".into(),
            text: op_text(o),
        })
        .collect();
    report.trace.push(TraceStep {
        t_s: 0.0,
        call: call_text(&case.call),
        events,
        returned: got.returned.as_ref().ok().map(|v| v.to_string()),
    });
    if let Err(e) = &got.returned {
        // A kill, or the database failing as the reference's did: the error is
        // the expected end of the call, and the tables say the rest.
        // The store's verdict (a transaction left open, SQL only SQLite takes) fails
        // the test by name, whatever the reference's call ended with.
        let refused = matches!(e, LearnerError::Refused { .. });
        if !got.killed && (want.returned.is_ok() || refused) {
            report.status = match e {
                LearnerError::Timeout { .. } => TestStatus::Timeout,
                LearnerError::Refused { .. } => TestStatus::Fail,
                _ => TestStatus::Error,
            };
            report.points = 0;
            // A host's error may say nothing (an empty message): the test still does.
            let said = e.to_string();
            report.message = Some(if said.trim().is_empty() {
                format!(
                    "`{}` ended with an error that says nothing more",
                    call_text(&case.call)
                )
            } else {
                said
            });
            return report;
        }
    }
    let mut problems = differences(&want, &got, stale_step(case));
    if problems.is_empty() && case.script.all_or_nothing {
        // Killed at each of the learner's own statements in turn, the tables
        // must be as before the call or as after it, never half-way.
        for k in 0..got.statements {
            let script = Script {
                kill_at_statement: Some(k),
                ..case.script.clone()
            };
            let Ok(o) = play_with(learner, case, script) else {
                break;
            };
            let half_done = table_diffs(&case.setup, &o.after);
            if !half_done.is_empty() && !table_diffs(&got.after, &o.after).is_empty() {
                problems.push(format!(
                    "killed at its statement {} of {}, it left the tables half-done (neither as before nor as after): {}",
                    k + 1,
                    got.statements,
                    half_done.join("; ")
                ));
                break;
            }
        }
    }
    if let (false, Some(i)) = (problems.is_empty(), &case.script.interleave) {
        problems.insert(
            0,
            format!(
                "another worker ({:?}) claimed action {} while the call ran, between two of its statements: the call must end as if one of the two had gone first, and ends as neither did; against the closer of the two:",
                i.claim.worker, i.claim.action_id
            ),
        );
    }
    if !problems.is_empty() {
        report.status = TestStatus::Fail;
        report.points = 0;
        report.rule = Some(case.rule.id().into());
        report.message = Some(format!(
            "Rule broken ({}): {}\nAfter `{}`:\n- {}",
            case.rule.id(),
            case.rule.text(),
            call_text(&case.call),
            problems.join("\n- ")
        ));
        report.expected = Some(returned_text(&want.returned));
        report.actual = Some(returned_text(&got.returned));
    }
    report
}

/// Another worker's claim (`other`) committed at each point of the call where it can
/// land in turn: before the call's first statement, after each of its statements
/// (at the first one from then on with no transaction open), and after the call.
/// Whatever the point, the call must end as the reference design's call can end
/// with the same claim landing at one of its own points: the same value, provider
/// calls and tables. A write that the other claim should have fenced, or a fence
/// read in one transaction and trusted in another, ends in none of them.
///
/// `claim` is held to what must hold whatever the order, not to the reference's
/// points: one read or several, a claim may read a store's count before the other
/// claim and its actions after it. Its claim and the other's must end as if one had
/// run after the other, each on an action claimable when it ran: no action is taken
/// from a live lease, and a claim that returns None changes nothing.
///
/// A database restart (`Racer::Restart`) lands at each of the call's statements in
/// turn, inside a transaction too: that statement raises and the open transaction is
/// rolled back; the statements after it find the database up. Whatever the point, the
/// call must let the error escape (lab.md: "Let it escape"), and end as the
/// reference's call ends with the restart at one of its own statements: the same
/// provider calls (no second send) and tables (nothing half-written, statuses only
/// forward). `claim` too: a restart rolls back its one transaction.
pub fn run_case_interleaved(learner: &mut dyn Backend, case: &UnitCase, racer: &Racer) -> TestReport {
    let plain = run_case(learner, case);
    if plain.status != TestStatus::Pass {
        return plain;
    }
    let at = |k: usize| UnitCase {
        script: match racer {
            Racer::Claim(other) => Script {
                interleave: Some(super::step_world::Interleave {
                    after_statement: k,
                    claim: other.clone(),
                }),
                ..case.script.clone()
            },
            Racer::Write(write) => Script {
                write_during: Some(super::step_world::WriteDuring {
                    after_statement: k,
                    write: write.clone(),
                }),
                ..case.script.clone()
            },
            Racer::Restart => Script {
                restart_at_statement: Some(k),
                ..case.script.clone()
            },
        },
        ..case.clone()
    };
    // Where the racer lands in a call of `n` statements: another connection's write
    // before the first, after each and after the call; a restart at each.
    let restart = matches!(racer, Racer::Restart);
    let points = |n: usize| if restart { 0..n } else { 0..n + 2 };
    let fail = |mut report: TestReport, status: TestStatus, message: String| {
        report.status = status;
        report.points = 0;
        report.message = Some(message);
        report
    };
    let setup_failed = |e: RunStop| {
        let status = if e.is_timeout() {
            TestStatus::Timeout
        } else {
            TestStatus::Error
        };
        fail(
            TestReport::new(case.name, case.kind, TestStatus::Pass, None),
            status,
            format!("The lab could not set this test up: {e}"),
        )
    };
    let mut wants = Vec::new();
    let claim_race = matches!(case.call, Call::Claim { .. }) && !restart;
    if !claim_race {
        let alone = match play(&mut RefBackend::new(None), case) {
            Ok(o) => o,
            Err(e) => return setup_failed(e),
        };
        for k in points(alone.statements) {
            match play(&mut RefBackend::new(None), &at(k)) {
                Ok(o) => wants.push(o),
                Err(e) => return setup_failed(e),
            }
        }
        if restart {
            wants = crash_instants(wants, alone);
        }
    }
    let n = match play(learner, case) {
        Ok(o) => o.statements,
        Err(e) => return setup_failed(e),
    };
    learner.take_output();
    for k in points(n) {
        let got = match play(learner, &at(k)) {
            Ok(g) => g,
            Err(e) => return setup_failed(e),
        };
        let point = if restart {
            format!("at its statement {} of {n} (that statement raised sqlite3.OperationalError and the open transaction was rolled back; the statements after it found the database up)", k + 1)
        } else if k == 0 {
            "before its first statement".to_string()
        } else if k > n {
            "after the call".to_string()
        } else {
            format!("after its statement {k} of {n}, at its first statement from there with no transaction open")
        };
        let head = format!(
            "Rule broken ({}): {}\nAfter `{}`, with {} {point}:",
            case.rule.id(),
            case.rule.text(),
            call_text(&case.call),
            racer.text()
        );
        if let Err(e) = &got.returned {
            // A restart's error escaping is the call's expected end.
            let escaped =
                restart && !matches!(e, LearnerError::Timeout { .. } | LearnerError::Refused { .. });
            if !got.killed && !escaped {
                let status = match e {
                    LearnerError::Timeout { .. } => TestStatus::Timeout,
                    LearnerError::Refused { .. } => TestStatus::Fail,
                    _ => TestStatus::Error,
                };
                return fail(plain, status, format!("{head}\n- {e}"));
            }
        }
        let problems = match (&case.call, racer) {
            (Call::Claim { worker, now_ms }, _) if claim_race => {
                claim_race_problems(case, racer, worker, *now_ms, &got)
            }
            _ => {
                let mut best: Option<Vec<String>> = None;
                for w in &wants {
                    // A claim racing the step leaves its caller fenced at some point.
                    let stale = stale_step(case) || matches!(racer, Racer::Claim(_));
                    let d = differences(w, &done_any_status(racer, w, &got), stale);
                    if best.as_ref().is_none_or(|b| d.len() < b.len()) {
                        best = Some(d);
                    }
                }
                let best = best.unwrap_or_default();
                if best.is_empty() {
                    best
                } else {
                    let mut p = vec![format!(
                        "the call ends as the reference design's call ends with the same race at none of its points; against the closest:"
                    )];
                    p.extend(best);
                    p
                }
            }
        };
        if !problems.is_empty() {
            let mut report = fail(
                plain,
                TestStatus::Fail,
                format!("{head}\n- {}", problems.join("\n- ")),
            );
            report.rule = Some(case.rule.id().into());
            report.actual = Some(returned_text(&got.returned));
            return report;
        }
    }
    plain
}

/// Every way a correct call can end when its worker crashes at an instant of it, from
/// the reference's call restarted at each of its statements (`restarted[j]`: at
/// statement `j`) and its call alone: what was committed by then, and the provider
/// calls made by then. Between two statements nothing commits, so a crash anywhere
/// between statement `j - 1` and statement `j` leaves the tables of a restart at `j`
/// (after the last statement: the call's own), with the provider calls up to any of
/// those made in between (a piece may read once more after its commit and before its
/// send: a crash there has counted the attempt and sent nothing).
fn crash_instants(restarted: Vec<Outcome>, alone: Outcome) -> Vec<Outcome> {
    let crashed = Err(LearnerError::Exception {
        message: "sqlite3.OperationalError: database is restarting".into(),
    });
    let mut out: Vec<Outcome> = Vec::new();
    let mut before = 0;
    for o in restarted.into_iter().chain([Outcome {
        returned: crashed,
        ..alone
    }]) {
        let made = o.provider.len();
        for p in before..made {
            out.push(Outcome {
                returned: o.returned.clone(),
                killed: o.killed,
                provider: o.provider[..p].to_vec(),
                statements: o.statements,
                after: o.after.clone(),
            });
        }
        before = made;
        out.push(o);
    }
    out
}

/// What races a call in `run_case_interleaved`.
#[derive(Clone, Debug, PartialEq)]
pub enum Racer {
    /// Another worker's claim, a compare-and-set on the epoch it read.
    Claim(super::step_world::OtherClaim),
    /// Another connection's write: a webhook.
    Write(super::step_world::OtherWrite),
    /// The database restarting at a statement of the call (`Script::restart_at_statement`).
    Restart,
}

impl Racer {
    fn text(&self) -> String {
        match self {
            Racer::Claim(o) => format!(
                "another worker ({:?}) claiming action {} at epoch {} (now_ms = {})",
                o.worker, o.action_id, o.epoch, o.now_ms
            ),
            Racer::Write(super::step_world::OtherWrite::Webhook(w)) => format!(
                "another connection handling webhook {:?} (key {:?}, status {:?})",
                w.event_id,
                w.key,
                super::sim::status_name(w.status)
            ),
            Racer::Restart => "the database restarting".into(),
        }
    }

    /// The racer's write on tables (a restart writes nothing).
    fn apply(&self, t: &mut Tables, lease_ms: u64) {
        match self {
            Racer::Claim(o) => o.apply(t, lease_ms),
            Racer::Write(w) => w.apply(t),
            Racer::Restart => {}
        }
    }
}

/// With a webhook racing a step that settles, the status a step returns may be the
/// one it merged in its own transaction or the one it read before the webhook came:
/// the outbox row is what must be right, and it is compared in full.
fn done_any_status(racer: &Racer, want: &Outcome, got: &Outcome) -> Outcome {
    let done = |r: &Result<Value, LearnerError>| match r {
        Ok(Value::Tuple(t)) if t.len() == 2 && t[0] == Value::str("done") => Some(t[1].clone()),
        _ => None,
    };
    let mut got = Outcome {
        returned: got.returned.clone(),
        killed: got.killed,
        provider: got.provider.clone(),
        statements: got.statements,
        after: got.after.clone(),
    };
    if let (Racer::Write(super::step_world::OtherWrite::Webhook(_)), Some(w), Some(_)) =
        (racer, done(&want.returned), done(&got.returned))
    {
        got.returned = Ok(Value::Tuple(vec![Value::str("done"), w]));
    }
    got
}

/// What must hold when another worker's claim races the learner's: see
/// `run_case_interleaved`.
fn claim_race_problems(
    case: &UnitCase,
    racer: &Racer,
    worker: &str,
    now_ms: u64,
    got: &Outcome,
) -> Vec<String> {
    let lease_ms = case.cfg.lease_ms;
    let mut other_first = case.setup.clone();
    racer.apply(&mut other_first, lease_ms);
    let mine = |t: &Tables, id: u64| -> Tables {
        let mut t = t.clone();
        if let Some(epoch) = t.actions.iter().find(|a| a.id == id).map(|a| a.epoch) {
            super::step_world::OtherClaim {
                worker: worker.to_string(),
                action_id: id,
                epoch,
                now_ms,
            }
            .apply(&mut t, lease_ms);
        }
        t
    };
    let returned = match &got.returned {
        Ok(Value::None) => None,
        Ok(Value::Tuple(t)) if t.len() == 2 => match (&t[0], &t[1]) {
            (Value::Int(id), Value::Int(epoch)) => Some((*id, *epoch)),
            _ => return vec![format!("returned {}, not (action_id, epoch) or None", returned_text(&got.returned))],
        },
        Ok(v) => return vec![format!("returned {v}, not (action_id, epoch) or None")],
        Err(_) => return Vec::new(),
    };
    let Some((id, epoch)) = returned else {
        let d = table_diffs(&other_first, &got.after);
        if d.is_empty() {
            return d;
        }
        let mut p = vec!["it returned None, so the tables must hold the other worker's claim and nothing else; they differ:".to_string()];
        p.extend(d);
        return p;
    };
    let Ok(id) = u64::try_from(id) else {
        return vec![format!("returned action id {id}, which no action has")];
    };
    // Either order, each claim a compare-and-set on what it found.
    let mut mine_first = mine(&case.setup, id);
    racer.apply(&mut mine_first, lease_ms);
    let orders = [mine(&other_first, id), mine_first];
    let claimed_at = |t: &Tables| t.actions.iter().find(|a| a.id == id).map(|a| a.epoch);
    for t in &orders {
        if table_diffs(t, &got.after).is_empty() && claimed_at(t) == Some(epoch) {
            return Vec::new();
        }
    }
    let live = |t: &Tables| {
        t.actions.iter().any(|a| {
            a.id == id && a.state == "claimed" && a.lease_until_ms > now_ms
        })
    };
    let mut p = vec![format!(
        "it returned ({id}, {epoch}): its claim and the other worker's must end as if one ran after the other, each a compare-and-set on an action claimable when it ran{}; against the closer order:",
        if live(&other_first) {
            " (after the other write the action's lease is live: a claim that lands after it must leave the action alone)"
        } else {
            ""
        }
    )];
    let d0 = table_diffs(&orders[0], &got.after);
    let d1 = table_diffs(&orders[1], &got.after);
    p.extend(if d1.len() < d0.len() { d1 } else { d0 });
    if p.len() == 1 {
        p.push(format!("the epoch it returned, {epoch}, is not the one its claim set"));
    }
    p
}
