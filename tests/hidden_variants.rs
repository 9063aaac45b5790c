//! Hidden inputs drawn per submission (issue 28, `src/deliver_once/variant.rs`): a
//! variant keeps each hidden case's meaning (the reference does the same thing,
//! renamed and moved in time; every mistake the fixed case catches, its variant
//! catches), two variants share no task key, one variant is the same every time, and
//! no learner-facing report shows a hidden key, fixed or drawn.

mod common;

use common::mutants::{Mutant, CATALOGUE};
use common::variants::{ClaimFirst, KindFirst};
use delivery_lab::deliver_once::case::{Body, Case, Scripted};
use delivery_lab::deliver_once::check::run_reference;
use delivery_lab::deliver_once::reference::Reference;
use delivery_lab::deliver_once::suite::{new_world, run_case};
use delivery_lab::deliver_once::variant::{vary, vary_all, Renaming};
use delivery_lab::deliver_once::world::{Event, KvEntry, Op};
use delivery_lab::deliver_once::{self, cases, Solution};
use delivery_lab::lab::{lab_by_id, HiddenInputs, RunMode};
use delivery_lab::report::{
    hidden_aggregate_name, Audience, HiddenStatuses, Report, RunStatus, TestKind, TestStatus,
};
use delivery_lab::rng::SeededRng;
use delivery_lab::{LearnerError, Value};

/// Variant seeds, drawn: the tests hold every one of them.
fn variant_seeds(n: usize) -> Vec<u64> {
    let mut g = SeededRng::new(28);
    (0..n).map(|_| g.next_u64() >> 32).collect()
}

fn hidden_cases() -> impl Iterator<Item = (usize, &'static Case)> {
    cases()
        .iter()
        .enumerate()
        .filter(|(_, c)| c.kind == TestKind::Hidden)
}

fn scripted(case: &Case) -> Option<&Scripted> {
    match &case.body {
        Body::Scripted(s) => Some(s),
        Body::Differential { .. } => None,
    }
}

/// A value the fixed case's reference returned, as the variant's would say it.
fn value_in(r: &Renaming, v: &Value) -> Value {
    match v {
        Value::Str(s) => Value::Str(r.reason(&r.channel(s))),
        Value::Tuple(items) => Value::Tuple(items.iter().map(|x| value_in(r, x)).collect()),
        other => other.clone(),
    }
}

fn event_in(r: &Renaming, e: &Event) -> Event {
    let op = match &e.op {
        Op::KvGet { key, returned } => Op::KvGet {
            key: r.kv_key(key),
            returned: returned.clone(),
        },
        Op::KvSet {
            key,
            value,
            ttl_s,
            nx,
            returned,
        } => Op::KvSet {
            key: r.kv_key(key),
            value: value.clone(),
            ttl_s: *ttl_s,
            nx: *nx,
            returned: *returned,
        },
        Op::KvDelete { key, returned } => Op::KvDelete {
            key: r.kv_key(key),
            returned: *returned,
        },
        Op::Send { task_key, returned } => Op::Send {
            task_key: r.key(task_key),
            returned: r.result(returned),
        },
        uniform @ Op::Uniform { .. } => uniform.clone(),
    };
    Event {
        t_s: r.time(e.t_s),
        op,
    }
}

fn kv_in(r: &Renaming, entries: Vec<KvEntry>) -> Vec<KvEntry> {
    let mut out: Vec<KvEntry> = entries
        .into_iter()
        .map(|e| KvEntry {
            key: r.kv_key(&e.key),
            value: e.value,
            expires_at_s: e.expires_at_s.map(|t| r.time(t)),
        })
        .collect();
    out.sort_by(|a, b| a.key.cmp(&b.key));
    out
}

/// Everything the reference does through a scripted case, step by step: each
/// call's value, the rule it followed, every call it made on the world, and the kv.
type Played = Vec<(Value, String, Vec<Event>, Vec<KvEntry>)>;

fn play_reference(s: &Scripted) -> Played {
    let world = new_world(s);
    s.steps
        .iter()
        .map(|step| {
            world.advance_to(step.at_s);
            let e = run_reference(&world, &step.call);
            (
                e.value,
                e.decision.id().to_string(),
                e.events,
                world.kv_entries(),
            )
        })
        .collect()
}

#[test]
fn in_every_variant_the_reference_does_what_it_does_in_the_fixed_case_renamed_and_moved() {
    let mut compared = 0;
    for v in variant_seeds(300) {
        for (i, case) in hidden_cases() {
            let Some(fixed) = scripted(case) else {
                continue;
            };
            let (varied, r) = vary(case, v, i);
            let varied = scripted(&varied).expect("a scripted case stays scripted");
            assert_eq!(varied.steps.len(), fixed.steps.len());
            let want: Played = play_reference(fixed)
                .into_iter()
                .map(|(value, rule, events, kv)| {
                    let events = events.iter().map(|e| event_in(&r, e)).collect();
                    (value_in(&r, &value), rule, events, kv_in(&r, kv))
                })
                .collect();
            let got: Played = play_reference(varied)
                .into_iter()
                .map(|(value, rule, events, kv)| {
                    let mut kv = kv;
                    kv.sort_by(|a, b| a.key.cmp(&b.key));
                    (value, rule, events, kv)
                })
                .collect();
            assert_eq!(got, want, "variant {v}: {}\n{r:#?}", case.name);
            compared += 1;
        }
    }
    assert!(compared >= 300 * 19, "only {compared} cases compared");
}

#[test]
fn a_variant_changes_every_hidden_task_key_and_moves_the_clock() {
    for v in variant_seeds(200) {
        for (i, case) in hidden_cases() {
            let Some(fixed) = scripted(case) else {
                continue;
            };
            let (_, r) = vary(case, v, i);
            assert!(!r.keys.is_empty(), "{}", case.name);
            for (original, fresh) in &r.keys {
                assert_ne!(original, fresh, "variant {v}: {}", case.name);
                assert!(
                    !fresh.contains(original.as_str()) && !original.contains(fresh.as_str()),
                    "variant {v}: {original} and {fresh}"
                );
            }
            // Distinct keys stay distinct.
            let mut fresh: Vec<_> = r.keys.iter().map(|(_, f)| f).collect();
            fresh.sort();
            fresh.dedup();
            assert_eq!(fresh.len(), r.keys.len(), "variant {v}: {}", case.name);
            assert_eq!(r.offset_s.fract(), 0.0);
            assert!(fixed.steps.iter().all(|st| st.at_s >= 0.0));
        }
    }
}

#[test]
fn examples_are_never_varied_and_no_variant_is_the_fixed_cases() {
    let fixed = cases();
    for v in variant_seeds(20) {
        let varied = vary_all(fixed, v);
        assert_eq!(varied.len(), fixed.len());
        for (a, b) in fixed.iter().zip(&varied) {
            assert_eq!(a.name, b.name);
            assert_eq!(a.kind, b.kind);
            let same = format!("{a:?}") == format!("{b:?}");
            assert_eq!(same, a.kind == TestKind::Example, "variant {v}: {}", a.name);
        }
    }
}

/// The keys of every hidden scripted case in variant `v`.
fn hidden_keys(v: u64) -> Vec<String> {
    hidden_cases()
        .filter(|(_, c)| scripted(c).is_some())
        .flat_map(|(i, c)| vary(c, v, i).1.keys.into_iter().map(|(_, f)| f))
        .collect()
}

fn fixed_hidden_keys() -> Vec<String> {
    hidden_cases()
        .filter(|(_, c)| scripted(c).is_some())
        .flat_map(|(i, c)| vary(c, 0, i).1.keys.into_iter().map(|(o, _)| o))
        .collect()
}

#[test]
fn two_submissions_share_no_hidden_key_and_one_submission_gets_the_same_keys_again() {
    // The attack's premise: a key learned from one submission's report is worth
    // something only if the next submission meets it again.
    let seeds = variant_seeds(50);
    let fixed = fixed_hidden_keys();
    assert!(fixed.len() >= 19, "{fixed:?}");
    for (n, &a) in seeds.iter().enumerate() {
        let keys = hidden_keys(a);
        assert_eq!(keys, hidden_keys(a), "variant {a} is not deterministic");
        assert_eq!(keys.len(), fixed.len());
        for k in &keys {
            assert!(!fixed.contains(k), "variant {a} kept the fixed key {k}");
        }
        for &b in &seeds[n + 1..] {
            let other = hidden_keys(b);
            for k in &keys {
                assert!(!other.contains(k), "variants {a} and {b} share {k}");
            }
        }
    }
}

#[test]
fn every_mutant_that_fails_a_fixed_hidden_case_fails_it_in_every_variant() {
    // Scripted cases, each on its own: the mutants' per-case verdicts.
    let fails = |case: &Case, m: &mut dyn Solution| {
        run_case(case, m, deliver_once::DEFAULT_SEED).status != TestStatus::Pass
    };
    let mut caught_fixed = 0;
    let mut caught_varied = 0;
    for (m, what, _) in CATALOGUE {
        let fixed: Vec<(usize, &Case)> = hidden_cases()
            .filter(|(_, c)| scripted(c).is_some() && fails(c, &mut Mutant(*m)))
            .collect();
        caught_fixed += fixed.len();
        for v in variant_seeds(40) {
            for &(i, case) in &fixed {
                let (varied, r) = vary(case, v, i);
                assert!(
                    fails(&varied, &mut Mutant(*m)),
                    "{m:?} ({what}) fails {:?} but not its variant {v}: {r:#?}",
                    case.name
                );
                caught_varied += 1;
            }
        }
    }
    assert!(caught_fixed >= CATALOGUE.len(), "{caught_fixed}");
    assert_eq!(caught_varied, caught_fixed * 40);
}

#[test]
fn in_every_variant_correct_solutions_pass_and_every_mutant_fails_the_differential_test_too() {
    let seeds = variant_seeds(6);
    let grade = |s: &mut dyn Solution, v: u64| {
        deliver_once::grade_run(
            s,
            deliver_once::DEFAULT_SEED,
            HiddenInputs::Variant(v),
            Audience::Staff,
            RunMode::Report,
        )
    };
    let differential = cases()
        .iter()
        .find(|c| matches!(c.body, Body::Differential { .. }))
        .expect("the lab has a differential test");
    for &v in &seeds {
        for (name, report) in [
            ("the reference", grade(&mut Reference, v)),
            ("ClaimFirst", grade(&mut ClaimFirst, v)),
            ("KindFirst", grade(&mut KindFirst, v)),
        ] {
            assert_eq!(report.status, RunStatus::Pass, "{name}, variant {v}");
            assert_eq!(report.score, report.max_score);
        }
        let i = cases()
            .iter()
            .position(|c| std::ptr::eq(c, differential))
            .unwrap();
        let (varied, _) = vary(differential, v, i);
        for (m, what, _) in CATALOGUE {
            let outcome = run_case(&varied, &mut Mutant(*m), deliver_once::DEFAULT_SEED);
            assert_ne!(
                outcome.status,
                TestStatus::Pass,
                "variant {v}: the differential test misses {m:?} ({what})"
            );
        }
    }
}

/// Says every input it is given, in what it raises and what it prints.
struct Teller {
    said: String,
}

impl Solution for Teller {
    fn deliver_once(
        &mut self,
        _w: &delivery_lab::deliver_once::world::World,
        t: &delivery_lab::deliver_once::model::Task,
        p: &delivery_lab::deliver_once::model::Policy,
    ) -> Result<Value, LearnerError> {
        self.said = format!("{} {}", t.repr(), p.repr());
        Err(LearnerError::Exception {
            message: format!("ValueError: {}", self.said),
        })
    }

    fn next_step(
        &mut self,
        _w: &delivery_lab::deliver_once::world::World,
        t: &delivery_lab::deliver_once::model::Task,
        r: &delivery_lab::deliver_once::model::SendResult,
        now_s: f64,
        p: &delivery_lab::deliver_once::model::Policy,
    ) -> Result<Value, LearnerError> {
        self.said = format!("{} {} {now_s} {}", t.repr(), r.repr(), p.repr());
        Err(LearnerError::Exception {
            message: format!("ValueError: {}", self.said),
        })
    }

    fn take_output(&mut self) -> Option<String> {
        Some(format!("printed: {}", self.said))
    }
}

/// Every format a learner reads, of one report.
fn learner_formats(report: &Report) -> Vec<(String, String)> {
    let sheets = lab_by_id(deliver_once::ID).unwrap().test_sheets();
    vec![
        ("json".into(), report.to_json()),
        ("text".into(), report.to_text()),
        ("exercism".into(), report.to_exercism(&sheets)),
        ("gradescope".into(), report.to_gradescope("after_due_date")),
        (
            "gradescope-published".into(),
            report.to_gradescope("after_published"),
        ),
        ("gradescope-hidden".into(), report.to_gradescope("hidden")),
        ("prairielearn".into(), report.to_prairielearn()),
    ]
}

#[test]
fn no_learner_report_shows_a_hidden_key_or_the_variant_seed() {
    let fixed = fixed_hidden_keys();
    for v in variant_seeds(5) {
        let v = v | (1 << 31); // ten digits: no accident of a short number in a report
        let mut teller = Teller {
            said: String::new(),
        };
        let report = deliver_once::grade_run(
            &mut teller,
            deliver_once::DEFAULT_SEED,
            HiddenInputs::Variant(v),
            Audience::Learner,
            RunMode::Report,
        );
        // It told: the examples' messages carry what it was given.
        assert!(report.to_json().contains("order-1042:shipped"));
        let drawn = hidden_keys(v);
        for statuses in [HiddenStatuses::Each, HiddenStatuses::Aggregate] {
            let report = report.clone().with_hidden_statuses(statuses);
            for (format, text) in learner_formats(&report) {
                for k in fixed.iter().chain(&drawn) {
                    assert!(
                        !text.contains(k.as_str()),
                        "{format} shows the hidden key {k}"
                    );
                }
                assert!(
                    !text.contains(&v.to_string()),
                    "{format} shows the variant seed"
                );
            }
        }
    }
}

#[test]
fn an_aggregate_report_shows_how_many_hidden_tests_passed_and_nothing_else_of_them() {
    let (m, ..) = CATALOGUE[0];
    let each = deliver_once::grade(
        &mut Mutant(m),
        deliver_once::DEFAULT_SEED,
        Audience::Learner,
    );
    let hidden: Vec<_> = each
        .tests
        .iter()
        .filter(|t| t.kind == TestKind::Hidden)
        .collect();
    let passed = hidden
        .iter()
        .filter(|t| t.status == TestStatus::Pass)
        .count();
    assert!(passed > 0 && passed < hidden.len(), "{passed}");
    let aggregate = each.clone().with_hidden_statuses(HiddenStatuses::Aggregate);
    let name = hidden_aggregate_name(passed, hidden.len());
    assert_eq!(
        name,
        format!("hidden tests: {passed} of {} passed", hidden.len())
    );
    // The examples as they were, then one test for every hidden one.
    let shown: Vec<_> = aggregate
        .tests
        .iter()
        .map(|t| (t.name.as_str(), t.kind))
        .collect();
    let mut want: Vec<_> = each
        .tests
        .iter()
        .filter(|t| t.kind == TestKind::Example)
        .map(|t| (t.name.as_str(), t.kind))
        .collect();
    want.push((name.as_str(), TestKind::Hidden));
    assert_eq!(shown, want);
    let one = aggregate.tests.last().unwrap();
    assert_eq!(one.status, TestStatus::Fail);
    assert_eq!(
        (one.points, one.max_points),
        (passed as u32, hidden.len() as u32)
    );
    assert_eq!(one.message, None);
    for field in [
        each.passed,
        each.failed,
        each.total,
        each.score as usize,
        each.max_score as usize,
    ]
    .iter()
    .zip([
        aggregate.passed,
        aggregate.failed,
        aggregate.total,
        aggregate.score as usize,
        aggregate.max_score as usize,
    ]) {
        assert_eq!(*field.0, field.1);
    }
    assert_eq!(aggregate.hidden, each.hidden);
    for (format, text) in learner_formats(&aggregate) {
        for t in &hidden {
            assert!(
                !text.contains(&t.name),
                "{format} names the hidden test {:?}",
                t.name
            );
        }
        assert!(text.contains(&name), "{format}");
    }
    // All passed: one passing test; an error report: its one status.
    let pass = deliver_once::grade(&mut Reference, 1, Audience::Learner)
        .with_hidden_statuses(HiddenStatuses::Aggregate);
    let last = pass.tests.last().unwrap();
    assert_eq!(
        (last.status, last.points),
        (TestStatus::Pass, last.max_points)
    );
    let lab = lab_by_id(deliver_once::ID).unwrap();
    let error = Report::error(deliver_once::ID, 1, "SyntaxError", lab.tests())
        .with_hidden_statuses(HiddenStatuses::Aggregate);
    assert_eq!(error.tests.last().unwrap().status, TestStatus::Error);
    assert_eq!(error.tests.len(), 4);
    // Each: the report itself.
    assert_eq!(
        each.clone().with_hidden_statuses(HiddenStatuses::Each),
        each
    );
}

#[test]
fn without_a_variant_a_run_is_the_fixed_run() {
    for (m, ..) in CATALOGUE.iter().take(5) {
        let a = deliver_once::grade(&mut Mutant(*m), 7, Audience::Staff);
        let b = deliver_once::grade_run(
            &mut Mutant(*m),
            7,
            HiddenInputs::Fixed,
            Audience::Staff,
            RunMode::Report,
        );
        assert_eq!(a, b);
    }
}
