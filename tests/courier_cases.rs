//! The courier lab's case files (`src/courier/examples/`, `hidden-tests/courier/`):
//! the engine was built from exactly these cases, and the reference design does in
//! each what its `expect` table says. A malformed file names its file, case and field.

#[path = "../src/courier/case_format.rs"]
mod case_format;

use case_format::{Action, CaseError, Expect, Outbox, ProviderCall, Store};
use delivery_lab::courier::sim::{ActionState, Op, OutboxState, StoreState, Tables};
use delivery_lab::courier::units::{action, created, reference_outcome, UnitCase};
use delivery_lab::courier::{self, cases};
use delivery_lab::report::TestKind;
use std::path::Path;

fn load() -> Vec<case_format::Case> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    case_format::load_lab(root, cfg!(feature = "hidden")).unwrap_or_else(|e| panic!("{e}"))
}

fn action_row(a: &Action) -> ActionState {
    let row = action(
        a.id,
        &a.store,
        a.state.as_str(),
        a.owner.as_deref(),
        a.epoch,
        a.lease_until_ms,
    );
    match a.created_ms {
        Some(ms) => created(row, ms),
        None => row,
    }
}

fn outbox_row(o: &Outbox) -> OutboxState {
    OutboxState {
        action_id: o.action_id,
        idem_key: o.key(),
        attempts: o.attempts,
        status: o.status.as_str().into(),
        message_id: o.message_id.clone(),
        events_applied: o.events_applied,
    }
}

fn store_row(s: &Store) -> StoreState {
    StoreState {
        store: s.store.clone(),
        last_served_ms: s.last_served_ms,
    }
}

/// The tables after the call as `expect` states them: the case's own rows, with the
/// rows `expect` lists put in their place (or added), in key order like a dump.
fn expected_after(setup: &Tables, e: &Expect) -> Tables {
    let mut t = setup.clone();
    for a in e.actions.iter().map(action_row) {
        t.actions.retain(|r| r.id != a.id);
        t.actions.push(a);
    }
    for s in e.stores.iter().map(store_row) {
        t.stores.retain(|r| r.store != s.store);
        t.stores.push(s);
    }
    for o in e.outbox.iter().map(outbox_row) {
        t.outbox.retain(|r| r.action_id != o.action_id);
        t.outbox.push(o);
    }
    if let Some(events) = &e.webhook_events {
        t.webhook_events = events.clone();
    }
    sorted(t)
}

fn sorted(mut t: Tables) -> Tables {
    t.actions.sort_by_key(|r| r.id);
    t.stores.sort_by(|a, b| a.store.cmp(&b.store));
    t.outbox.sort_by_key(|r| r.action_id);
    t.webhook_events.sort();
    t
}

fn provider_calls(ops: &[Op]) -> Vec<ProviderCall> {
    ops.iter()
        .filter_map(|o| match o {
            Op::Send {
                key,
                committed_attempts,
            } => Some(ProviderCall::Send {
                key: key.clone(),
                committed_attempts: *committed_attempts,
            }),
            Op::Lookup { key } => Some(ProviderCall::Lookup { key: key.clone() }),
            Op::Statement { .. } => None,
        })
        .collect()
}

/// Where the reference and the case's `expect` disagree, field by field.
fn disagreements(file_case: &case_format::Case, engine_case: &UnitCase) -> Vec<String> {
    let e = &file_case.expect;
    let o = match reference_outcome(engine_case) {
        Ok(o) => o,
        Err(stop) => return vec![format!("the reference could not run: {stop:?}")],
    };
    let mut d = Vec::new();
    match (&o.returned, o.killed) {
        (_, true) if e.killed => {}
        (_, true) => {
            d.push("expect: the reference's worker was killed: expect.killed = true".into())
        }
        (Ok(v), false) => {
            if e.returns.as_deref() != Some(v.to_string().as_str()) {
                d.push(format!(
                    "expect.returns: the reference returns {:?}",
                    v.to_string()
                ));
            }
        }
        (Err(err), false) => {
            if !e.raises {
                d.push(format!(
                    "expect.raises: the reference's call ends in an error: {err}"
                ));
            }
        }
    }
    let calls = provider_calls(&o.provider);
    if calls != e.provider {
        d.push(format!("expect.provider: the reference made {calls:?}"));
    }
    let want = expected_after(&engine_case.setup, e);
    let got = sorted(o.after);
    if want != got {
        d.push(format!(
            "expect's tables: the reference leaves\n  actions {:?}\n  stores {:?}\n  outbox {:?}\n  webhook_events {:?}",
            got.actions, got.stores, got.outbox, got.webhook_events
        ));
    }
    d
}

#[test]
fn the_engine_holds_exactly_the_case_files() {
    let files = load();
    let engine = cases();
    let names = |v: Vec<(&str, bool)>| {
        v.into_iter()
            .map(|(n, h)| (n.to_string(), h))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        names(
            engine
                .iter()
                .map(|c| (c.name, c.kind == TestKind::Hidden))
                .collect()
        ),
        names(files.iter().map(|c| (c.name.as_str(), c.hidden)).collect()),
    );
    assert_eq!(case_format::LAB, courier::ID);
    for (f, c) in files.iter().zip(&engine) {
        assert_eq!(f.rule.id(), c.rule.id(), "{}", f.name);
        assert_eq!(f.all_or_nothing, c.script.all_or_nothing, "{}", f.name);
        let d = courier::sim::Config::default();
        let cfg = courier::sim::Config {
            lease_ms: f.cfg.lease_ms.unwrap_or(d.lease_ms),
            in_flight_cap: f.cfg.in_flight_cap.unwrap_or(d.in_flight_cap),
            recheck_ms: f.cfg.recheck_ms.unwrap_or(d.recheck_ms),
        };
        assert_eq!(cfg, c.cfg, "{}", f.name);
        let mut setup = f.actions.iter().map(action_row).collect::<Vec<_>>();
        setup.sort_by_key(|r| r.id);
        let mut built = c.setup.actions.clone();
        built.sort_by_key(|r| r.id);
        assert_eq!(setup, built, "{}", f.name);
        assert_eq!(
            f.outbox.iter().map(outbox_row).collect::<Vec<_>>(),
            c.setup.outbox,
            "{}",
            f.name
        );
        assert_eq!(
            f.stores.iter().map(store_row).collect::<Vec<_>>(),
            c.setup.stores,
            "{}",
            f.name
        );
    }
}

#[test]
fn every_expect_table_holds_for_the_reference() {
    let engine = cases();
    let mut wrong = Vec::new();
    for f in load() {
        let c = engine
            .iter()
            .find(|c| c.name == f.name)
            .expect("compiled in");
        let d = disagreements(&f, c);
        if !d.is_empty() {
            wrong.push(format!("{}: {:?}:\n- {}", f.file, f.name, d.join("\n- ")));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n\n"));
}

/// The check can fail: a case whose expectation says otherwise is caught, field by field.
#[test]
fn a_wrong_expectation_is_caught() {
    let engine = cases();
    let files = load();
    let f = files
        .iter()
        .find(|f| f.expect.returns.is_some() && !f.expect.outbox.is_empty())
        .unwrap();
    let c = engine.iter().find(|c| c.name == f.name).unwrap();
    assert!(disagreements(f, c).is_empty());
    let mut wrong = f.clone();
    wrong.expect.returns = Some("None".into());
    wrong.expect.outbox[0].attempts += 1;
    wrong.expect.provider.push(ProviderCall::Lookup {
        key: "action-0".into(),
    });
    let d = disagreements(&wrong, c);
    assert_eq!(d.len(), 3, "{d:#?}");
    assert!(d[0].starts_with("expect.returns"));
    assert!(d[1].starts_with("expect.provider"));
    assert!(d[2].starts_with("expect's tables"));
}

const HEAD: &str = r#"
[[case]]
name = "a heartbeat extends its own lease"
rule = "heartbeat"
actions = [{ id = 7, store = "store-a", state = "claimed", owner = "w2", epoch = 3, lease_until_ms = 40000 }]
call = { fn = "heartbeat", action_id = 7, worker = "w2", epoch = 3, now_ms = 35000 }
"#;

fn parse(text: &str) -> Result<Vec<case_format::Case>, CaseError> {
    let cases = case_format::parse_file("hidden-tests/courier/broken.toml", text, true)?;
    case_format::unique_names(&cases)?;
    Ok(cases)
}

#[test]
fn a_good_case_parses() {
    let cases = parse(&format!("{HEAD}expect.returns = \"True\"\n")).unwrap();
    assert_eq!(cases[0].expect.returns.as_deref(), Some("True"));
    assert!(cases[0].stores.is_empty());
}

#[test]
fn malformed_case_files_name_the_file_case_and_field() {
    let err = |text: &str| parse(text).unwrap_err();
    let e = err(&HEAD.replace("\"heartbeat\"\nactions", "\"heart-beat\"\nactions"));
    assert_eq!(e.field, "case[0].rule");
    assert_eq!(
        e.case,
        Some((0, "a heartbeat extends its own lease".into()))
    );
    assert!(e.message.contains("unknown variant `heart-beat`"), "{e}");

    let e = err(&format!(
        "{HEAD}expect.returns = \"True\"\nexpect.raises = true\n"
    ));
    assert_eq!(e.field, "case[0].expect");
    assert_eq!(e.file, "hidden-tests/courier/broken.toml");

    let e = err(HEAD);
    assert_eq!(
        e.field, "case[0].expect",
        "a case without an expect table: {e}"
    );

    let e = err(&format!(
        "{HEAD}expect.returns = \"True\"\nexpect.sends = 1\n"
    ));
    assert_eq!(e.field, "case[0].expect.sends");
    assert!(e.message.contains("unknown field"), "{e}");

    let e = err(&HEAD.replace("state = \"claimed\"", "state = \"taken\""));
    assert_eq!(e.field, "case[0].actions[0].state");

    let e = err(&HEAD.replace("fn = \"heartbeat\"", "fn = \"beat\""));
    assert_eq!(e.field, "case[0].call.fn");

    let e = err(&format!("{HEAD}expect.killed = true\n"));
    assert_eq!(
        e.field, "case[0].expect.killed",
        "nothing kills the worker: {e}"
    );

    let e = err(&format!("{HEAD}expect.returns = \"True\"\nexpect.actions = [{{ id = 8, store = \"store-a\", state = \"pending\" }}]\n"));
    assert_eq!(e.field, "case[0].expect.actions[0].id");

    let twice = format!("{HEAD}expect.returns = \"True\"\n{HEAD}expect.returns = \"True\"\n");
    let e = err(&twice);
    assert_eq!(
        (e.field.as_str(), e.case.as_ref().map(|c| c.0)),
        ("case[1].name", Some(1))
    );

    let e = err("[[case]\nname = 1");
    assert_eq!(e.field, "");
    assert!(e.message.starts_with("not valid TOML"), "{e}");
}

/// Another worker's write during the call (`interleave`): a correct claim passes
/// whether the other claim lands between its read and its write (it loses the race)
/// or only after it (a claim whose transaction held the row wins it); the test
/// accepts either order, as a real database would produce either.
#[test]
fn a_race_passes_whichever_worker_wins_it() {
    use delivery_lab::courier::reference::RefBackend;
    use delivery_lab::courier::units::run_case;
    use delivery_lab::report::TestStatus;
    let engine = cases();
    let found = engine.iter().find(|c| c.script.interleave.is_some());
    // The one such case is hidden: a build without them has none.
    assert_eq!(found.is_some(), cfg!(feature = "hidden"));
    let Some(c) = found else {
        return;
    };
    for after_statement in [1, 2, 99] {
        let mut script = c.script.clone();
        script.interleave.as_mut().unwrap().after_statement = after_statement;
        let case = UnitCase {
            name: c.name,
            kind: c.kind,
            rule: c.rule,
            setup: c.setup.clone(),
            call: c.call.clone(),
            script,
            cfg: c.cfg,
        };
        let r = run_case(&mut RefBackend::new(None), &case);
        assert_eq!(
            r.status,
            TestStatus::Pass,
            "{after_statement}: {:?}",
            r.message
        );
    }
}
