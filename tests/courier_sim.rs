//! The courier simulator, proved natively with the Rust reference backend: the
//! reference passes the chaos run and the fairness run; the big mistakes are each
//! caught by a row; a seed replays the same run.

use delivery_lab::courier::fairness::{fairness_run, FairPlan, Load};
use delivery_lab::courier::reference::{Mistake, RefBackend};
use delivery_lab::courier::sim::{chaos_run, ChaosPlan, ChaosReport};

fn chaos(mistake: Option<Mistake>, seed: u64) -> ChaosReport {
    chaos_run(&mut RefBackend::new(mistake), &ChaosPlan::full(seed)).expect("the run finishes")
}

#[test]
fn reference_passes_the_chaos_run() {
    for seed in [1, 2, 1042] {
        let r = chaos(None, seed);
        assert!(
            r.passed(),
            "seed {seed}: {:?} differ {} taken {} {:?}",
            r.tally,
            r.outcomes_differ,
            r.taken_from_healthy,
            r.failing.first().map(|f| &r.stories[&f.0])
        );
        assert_eq!(r.tally.actions, 2000);
        assert_eq!(r.kills_total(), 200, "seed {seed}: {:?}", r.kills);
        assert!(r.zombies > 0 && r.slow > 0, "{r:?}");
        // Only the restart makes the reference fail a step: no other crash.
        assert!(
            r.crash_messages.iter().all(|m| m.contains("restarting")),
            "{:?}",
            r.crash_messages
        );
    }
}

#[test]
fn a_seed_replays_the_same_run() {
    let a = serde_json::to_string(&chaos(None, 7)).unwrap();
    let b = serde_json::to_string(&chaos(None, 7)).unwrap();
    assert_eq!(a, b);
    assert_ne!(a, serde_json::to_string(&chaos(None, 8)).unwrap());
}

#[test]
fn resending_without_a_lookup_is_caught() {
    let r = chaos(Some(Mistake::ResendWithoutLookup), 1042);
    assert!(r.tally.resends_without_lookup > 0, "{:?}", r.tally);
    assert!(!r.passed());
}

#[test]
fn a_new_key_on_resend_sends_twice() {
    let r = chaos(Some(Mistake::NewKeyOnResend), 1042);
    assert!(r.tally.more_than_one_effect > 0, "{:?}", r.tally);
    let (a, why) = &r.failing[0];
    assert!(why.contains("messages went out"), "{why}");
    assert!(!r.stories[a].is_empty());
}

#[test]
fn a_timeout_taken_as_failure_is_caught() {
    let r = chaos(Some(Mistake::TimeoutIsFailure), 1042);
    assert!(
        r.outcomes_differ > 0 || r.tally.no_effect > 0,
        "{:?} {}",
        r.tally,
        r.outcomes_differ
    );
}

#[test]
fn no_heartbeat_loses_a_slow_workers_job() {
    let r = chaos(Some(Mistake::NoHeartbeat), 1042);
    assert!(r.taken_from_healthy > 0, "{r:?}");
}

#[test]
fn fair_claim_passes_and_fifo_fails_the_fairness_run() {
    let plan = FairPlan::full(1042);
    let fair = fairness_run(&mut RefBackend::new(None), &plan);
    assert!(fair.passed(), "{fair:?}");
    let fifo = fairness_run(&mut RefBackend::new(Some(Mistake::FifoClaim)), &plan);
    assert!(!fifo.passed(), "{fifo:?}");
    let bulk = fifo.rows.iter().find(|r| r.load == Load::Bulk10x).unwrap();
    assert!(bulk.ratio > 1.5, "{fifo:?}");
    println!("fair: {fair:?}\nfifo: {fifo:?}");
}

/// The reference's chaos and fairness reports for one seed, committed: the WASM
/// build must produce the same bytes (`tests/wasm_api.rs`). After an intended
/// change: `UPDATE_SNAPSHOTS=1 cargo test --test courier_sim` and review the diff.
#[test]
fn the_runs_match_their_snapshot() {
    let actual = format!(
        "{}\n{}\n",
        serde_json::to_string(&chaos(None, 1042)).unwrap(),
        serde_json::to_string(&fairness_run(
            &mut RefBackend::new(None),
            &FairPlan::full(1042)
        ))
        .unwrap()
    );
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/snapshots/courier-reference-runs.json");
    if std::env::var_os("UPDATE_SNAPSHOTS").is_some() {
        std::fs::write(&path, &actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path)
        .expect("missing snapshot: run UPDATE_SNAPSHOTS=1 cargo test --test courier_sim");
    assert!(
        expected == actual,
        "the courier runs differ from their snapshot:\n{actual}"
    );
}

#[test]
fn the_reference_host_passes_every_test_of_the_lab() {
    use delivery_lab::courier::{grade, DEFAULT_SEED};
    use delivery_lab::report::{Audience, TestStatus};
    let report = grade(&mut RefBackend::new(None), DEFAULT_SEED, Audience::Staff);
    for t in &report.tests {
        assert_eq!(t.status, TestStatus::Pass, "{}: {:?}", t.name, t.message);
    }
    assert!(report.tests.len() >= 20, "{}", report.tests.len());
}

#[test]
fn each_system_mistake_fails_a_named_test() {
    use delivery_lab::courier::{grade, CHAOS_TEST, DEFAULT_SEED, FAIRNESS_TEST};
    use delivery_lab::report::{Audience, TestStatus};
    for (m, must_fail) in [
        (
            Mistake::ResendWithoutLookup,
            "after an unknown send, look the key up before sending again",
        ),
        (Mistake::NewKeyOnResend, CHAOS_TEST),
        (Mistake::FifoClaim, FAIRNESS_TEST),
        (
            Mistake::NoHeartbeat,
            "a fenced heartbeat says so and extends nothing",
        ),
        (
            Mistake::TimeoutIsFailure,
            "a send that times out means wait",
        ),
    ] {
        let report = grade(&mut RefBackend::new(Some(m)), DEFAULT_SEED, Audience::Staff);
        let t = report
            .tests
            .iter()
            .find(|t| t.name == must_fail)
            .unwrap_or_else(|| panic!("no test {must_fail}"));
        assert_ne!(t.status, TestStatus::Pass, "{m:?} passed {must_fail}");
    }
}

#[test]
#[ignore = "prints what a learner sees; run with --ignored --nocapture"]
fn peek() {
    use delivery_lab::courier::{grade, DEFAULT_SEED};
    use delivery_lab::report::Audience;
    for m in [
        None,
        Some(Mistake::NewKeyOnResend),
        Some(Mistake::FifoClaim),
    ] {
        let r = grade(&mut RefBackend::new(m), DEFAULT_SEED, Audience::Learner);
        println!("=== {m:?}\n{}", r.to_text());
    }
}

#[test]
fn tables_read_back_from_their_json() {
    use delivery_lab::courier::sim::{Backend, Tables};
    let mut backend = RefBackend::new(None);
    let _ = chaos_run(&mut backend, &ChaosPlan::full(3)).unwrap();
    let tables = backend.dump().unwrap();
    assert!(!tables.outbox.is_empty() && !tables.webhook_events.is_empty());
    let json = serde_json::to_value(&tables).unwrap();
    assert_eq!(Tables::from_json(&json).unwrap(), tables);
    let mut bad = json.clone();
    bad["outbox"][0]["attempts"] = serde_json::json!("two");
    assert!(Tables::from_json(&bad).unwrap_err().contains("attempts"));
}

/// A backend that notes, in order, when a unit case starts (`load`) and when a system
/// run adds an action (`enqueue`), and otherwise is the reference.
struct Recorder {
    inner: RefBackend,
    events: Vec<&'static str>,
    /// In a system run, from its first action past this many (the chaos run's 2,000
    /// come first, then the fairness run's), every claim ends with this error instead.
    claims_fail: Option<(usize, delivery_lab::value::LearnerError)>,
}

impl Recorder {
    fn new() -> Recorder {
        Recorder {
            inner: RefBackend::new(None),
            events: Vec::new(),
            claims_fail: None,
        }
    }
}

impl delivery_lab::courier::sim::Backend for Recorder {
    fn reset(
        &mut self,
        cfg: &delivery_lab::courier::sim::Config,
        stores: &[String],
    ) -> Result<(), delivery_lab::courier::sim::RunStop> {
        self.inner.reset(cfg, stores)
    }
    fn enqueue(
        &mut self,
        action: &delivery_lab::courier::sim::ActionRow,
    ) -> Result<(), delivery_lab::courier::sim::RunStop> {
        self.events.push("system");
        self.inner.enqueue(action)
    }
    fn settle(
        &mut self,
        action_id: u64,
        now_ms: u64,
    ) -> Result<(), delivery_lab::courier::sim::RunStop> {
        self.inner.settle(action_id, now_ms)
    }
    fn call(
        &mut self,
        call: &delivery_lab::courier::sim::Call,
        world: &delivery_lab::courier::sim::StepWorld,
    ) -> Result<delivery_lab::value::Value, delivery_lab::value::LearnerError> {
        if let (delivery_lab::courier::sim::Call::Claim { .. }, Some((after, e))) =
            (call, &self.claims_fail)
        {
            let in_system_run = self.events.last() == Some(&"system");
            if in_system_run && self.events.iter().filter(|e| **e == "system").count() > *after {
                return Err(e.clone());
            }
        }
        self.inner.call(call, world)
    }
    fn kill(&mut self, worker: &str) {
        self.inner.kill(worker)
    }
    fn restart_db(&mut self) {
        self.inner.restart_db()
    }
    fn dump(
        &mut self,
    ) -> Result<delivery_lab::courier::sim::Tables, delivery_lab::courier::sim::RunStop> {
        self.inner.dump()
    }
    fn load(
        &mut self,
        tables: &delivery_lab::courier::sim::Tables,
    ) -> Result<(), delivery_lab::courier::sim::RunStop> {
        self.events.push("unit");
        self.inner.load(tables)
    }
}

/// Issue 10: a learner's code sees a hidden case's inputs when it runs; whatever it
/// prints or raises can reach a shown message. So every shown test (the example
/// units, then the chaos and fairness runs) runs before the first hidden unit, and
/// the report still lists the tests in the lab's order.
#[test]
fn hidden_units_run_after_every_shown_test() {
    use delivery_lab::courier::{self, cases};
    use delivery_lab::report::{Audience, TestKind};
    let mut backend = Recorder::new();
    let report = courier::grade(&mut backend, 1042, Audience::Learner);
    assert!(
        report.all_passed(),
        "{:?}",
        report.tests.iter().find(|t| t.points == 0)
    );
    let all = cases();
    assert!(all.iter().any(|c| c.kind == TestKind::Hidden));
    // Each unit case loads its tables once: the example units, every system run's
    // actions, then the hidden units, and no unit in between.
    let first_system = backend.events.iter().position(|e| *e == "system").unwrap();
    let last_system = backend.events.iter().rposition(|e| *e == "system").unwrap();
    let units_before = backend.events[..first_system]
        .iter()
        .filter(|e| **e == "unit")
        .count();
    let units_between = backend.events[first_system..last_system]
        .iter()
        .filter(|e| **e == "unit")
        .count();
    let units_after = backend.events[last_system..]
        .iter()
        .filter(|e| **e == "unit")
        .count();
    // How many loads each kind of unit case makes (an all-or-nothing case loads once
    // per statement it kills at), counted case by case on a fresh recorder.
    let loads = |kind: TestKind| -> usize {
        all.iter()
            .filter(|c| c.kind == kind)
            .map(|c| {
                let mut r = Recorder::new();
                courier::units::run_case(&mut r, c);
                r.events.len()
            })
            .sum()
    };
    // The differential tests' worlds, run after the hidden units (on the worlds of
    // the run's seed, `HiddenInputs::Fixed`).
    let worlds_seed = courier::differential::seed_of(1042, None);
    let differential_loads: usize = courier::differential::pieces()
        .iter()
        .map(|p| {
            let mut r = Recorder::new();
            courier::differential::run(&mut r, p, worlds_seed, "");
            r.events.len()
        })
        .sum();
    assert!(differential_loads > 0);
    assert_eq!(units_before, loads(TestKind::Example));
    assert_eq!(units_between, 0);
    assert_eq!(units_after, loads(TestKind::Hidden) + differential_loads);
    // Listed in the lab's order: units (examples, then hidden), the differential
    // tests, then the system runs.
    let kinds: Vec<TestKind> = report.tests.iter().map(|t| t.kind).collect();
    let listed: Vec<&str> = report.tests.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(
        &listed[..all.len()],
        &all.iter().map(|c| c.name).collect::<Vec<_>>()[..]
    );
    let n = courier::differential::pieces().len();
    assert_eq!(
        &listed[all.len()..all.len() + n],
        &courier::differential::pieces()
            .iter()
            .map(|p| p.test_name())
            .collect::<Vec<_>>()[..]
    );
    assert!(kinds[all.len()..all.len() + n]
        .iter()
        .all(|k| *k == TestKind::Hidden));
    assert_eq!(
        kinds[all.len() + n..],
        [TestKind::Example, TestKind::Example]
    );
}

/// Issue 11: a stop is typed, not read from its words. A claim that raises an
/// exception whose message says "limit" fails the fairness run, and every test
/// after it still runs.
#[test]
fn an_exception_that_says_limit_is_not_a_timeout() {
    use delivery_lab::courier::{self, FAIRNESS_TEST};
    use delivery_lab::report::{Audience, TestStatus};
    use delivery_lab::value::LearnerError;
    let mut backend = Recorder::new();
    backend.claims_fail = Some((
        2000,
        LearnerError::Exception {
            message: "ValueError: over the rate limit; time limit too".into(),
        },
    ));
    let report = courier::grade(&mut backend, 1042, Audience::Learner);
    for t in &report.tests {
        let want = if t.name == FAIRNESS_TEST {
            TestStatus::Fail
        } else {
            TestStatus::Pass
        };
        assert_eq!(t.status, want, "{}: {:?}", t.name, t.message);
    }
    let fairness = report
        .tests
        .iter()
        .find(|t| t.name == FAIRNESS_TEST)
        .unwrap();
    let message = fairness.message.as_deref().unwrap();
    assert!(
        message.contains("Your claim could not finish the run: every store equal: Your code raised an exception:\nValueError: over the rate limit"),
        "{message}"
    );
}

/// The same place with a real timeout: the fairness run is a timeout, and the
/// hidden units after it are not run.
#[test]
fn a_timeout_in_the_fairness_run_stops_the_tests_after_it() {
    use delivery_lab::courier::{self, cases, CHAOS_TEST, FAIRNESS_TEST};
    use delivery_lab::report::{Audience, TestKind, TestStatus};
    use delivery_lab::value::LearnerError;
    let mut backend = Recorder::new();
    backend.claims_fail = Some((2000, LearnerError::Timeout { limit_s: 20.0 }));
    let report = courier::grade(&mut backend, 1042, Audience::Learner);
    let hidden: Vec<&str> = cases()
        .iter()
        .filter(|c| c.kind == TestKind::Hidden)
        .map(|c| c.name)
        .collect();
    assert!(!hidden.is_empty());
    for t in &report.tests {
        let want = if t.name == FAIRNESS_TEST
            || hidden.contains(&t.name.as_str())
            || t.name.starts_with(courier::differential::PREFIX)
        {
            TestStatus::Timeout
        } else {
            TestStatus::Pass
        };
        assert_eq!(t.status, want, "{}: {:?}", t.name, t.message);
    }
    let chaos = report.tests.iter().find(|t| t.name == CHAOS_TEST).unwrap();
    assert_eq!(chaos.status, TestStatus::Pass);
}

/// Every rule of the lab's text that a unit test can hold is held by at least one
/// hidden unit test (each case names its rule by type, so the other direction holds
/// by construction), and each is listed in hidden-tests/README.md's courier table.
#[test]
fn every_rule_is_held_by_a_hidden_unit_test_and_listed() {
    use delivery_lab::courier::{cases, rules::Rule};
    use delivery_lab::report::TestKind;
    let readme = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("hidden-tests/README.md"),
    )
    .unwrap();
    let all = cases();
    for rule in Rule::ALL {
        let holders: Vec<&str> = all
            .iter()
            .filter(|c| c.kind == TestKind::Hidden && c.rule == rule)
            .map(|c| c.name)
            .collect();
        assert!(
            !holders.is_empty(),
            "no hidden unit test holds {}",
            rule.id()
        );
        let row = readme
            .lines()
            .find(|l| l.starts_with(&format!("| `{}` |", rule.id())))
            .unwrap_or_else(|| panic!("hidden-tests/README.md has no row for {}", rule.id()));
        for name in holders {
            assert!(
                row.contains(name),
                "the row of {} does not name {name:?}",
                rule.id()
            );
        }
    }
}

/// The tables are defined once, in src/courier/schema.sql: lab.md's table of them
/// and the rows the engine reads and writes (`Tables`) have exactly its columns.
#[test]
fn lab_md_and_the_engine_s_rows_have_the_schema_s_columns() {
    use delivery_lab::courier::sim::{ActionState, OutboxState, StoreState, Tables};
    use delivery_lab::courier::{lab_columns_of_schema, SCHEMA_SQL};
    let schema = lab_columns_of_schema(SCHEMA_SQL);
    let names: Vec<&str> = schema.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(names, ["actions", "stores", "outbox", "webhook_events"]);

    // lab.md: "| `actions` | `id`, `store`, ... |", values in parentheses aside.
    let md = include_str!("../src/courier/lab.md");
    for (table, columns) in &schema {
        let row = md
            .lines()
            .find(|l| l.starts_with(&format!("| `{table}` |")))
            .unwrap_or_else(|| panic!("lab.md has no row for {table}"));
        let cell = row.split('|').nth(2).unwrap();
        let mut plain = String::new();
        let mut depth = 0;
        for ch in cell.chars() {
            match ch {
                '(' => depth += 1,
                ')' => depth -= 1,
                _ if depth == 0 => plain.push(ch),
                _ => {}
            }
        }
        let listed: Vec<&str> = plain.split('`').skip(1).step_by(2).collect();
        assert_eq!(&listed, columns, "lab.md's columns of {table}");
    }

    // The engine's rows, as JSON: their keys are the columns.
    let tables = Tables {
        actions: vec![ActionState {
            id: 1,
            store: "s".into(),
            phone: "p".into(),
            body: "b".into(),
            created_ms: 0,
            state: "pending".into(),
            owner: None,
            epoch: 0,
            lease_until_ms: 0,
        }],
        stores: vec![StoreState {
            store: "s".into(),
            last_served_ms: 0,
        }],
        outbox: vec![OutboxState {
            action_id: 1,
            idem_key: "k".into(),
            attempts: 0,
            status: "sending".into(),
            message_id: None,
            events_applied: 0,
        }],
        webhook_events: vec!["e".into()],
    };
    let json = serde_json::to_value(&tables).unwrap();
    for (table, columns) in &schema {
        let row = &json[table.as_str()][0];
        let keys: Vec<&str> = match row.as_object() {
            Some(o) => o.keys().map(String::as_str).collect(),
            // webhook_events: its one column, as a plain value.
            None => vec!["event_id"],
        };
        let mut want: Vec<&str> = columns.iter().map(String::as_str).collect();
        let mut got = keys;
        want.sort_unstable();
        got.sort_unstable();
        assert_eq!(got, want, "the engine's rows of {table}");
    }
}
