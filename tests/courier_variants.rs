//! The courier lab's hidden inputs drawn per submission (issue 28,
//! `src/courier/variant.rs`): a variant keeps each hidden unit case's meaning (the
//! reference does the same thing, renamed and moved in time, killed at any of its
//! statements too; each `Mistake` gets the same verdict), no input of any fixed
//! hidden case reaches what a variant shows, a seed gives the same variant every
//! time and two seeds different ones, and every hidden case is varied but the merge
//! cases, whose two statuses are all their input.

use delivery_lab::courier::reference::{Mistake, RefBackend};
use delivery_lab::courier::sim::{Backend, Call, Config, Op, RunStop, Script, StepWorld, Tables};
use delivery_lab::courier::step_world::{Interleave, OtherClaim};
use delivery_lab::courier::units::{reference_outcome, run_case, Outcome, UnitCase};
use delivery_lab::courier::variant::{inputs, vary, vary_all, Renaming};
use delivery_lab::courier::{self, cases};
use delivery_lab::lab::{lab_by_id, HiddenInputs, RunMode};
use delivery_lab::report::{Audience, Report, RunStatus, TestKind, TestStatus};
use delivery_lab::rng::SeededRng;
use delivery_lab::{LearnerError, Value};

/// Variant seeds (32-bit, as the hosts draw them): the tests hold every one of them.
fn variant_seeds(n: usize) -> Vec<u64> {
    let mut g = SeededRng::new(2828);
    (0..n).map(|_| g.next_u64() >> 32).collect()
}

/// Every hidden case with its index in the lab's list (a variant's stream).
fn hidden_cases() -> Vec<(usize, UnitCase)> {
    cases()
        .into_iter()
        .enumerate()
        .filter(|(_, c)| c.kind == TestKind::Hidden)
        .collect()
}

/// The same case in another world: the script killed at statement `k`, or not.
fn killed_at(c: &UnitCase, k: Option<usize>) -> UnitCase {
    UnitCase {
        name: c.name,
        kind: c.kind,
        rule: c.rule,
        setup: c.setup.clone(),
        call: c.call.clone(),
        script: Script {
            kill_at_statement: k,
            ..c.script.clone()
        },
        cfg: c.cfg,
    }
}

/// A value the fixed case's reference returned, as the variant's would say it: a
/// claim's action id renamed, a key (`write_intent`'s) renamed.
fn value_in(r: &Renaming, call: &Call, v: &Value) -> Value {
    match (call, v) {
        (Call::Claim { .. }, Value::Tuple(t)) => match t.as_slice() {
            [Value::Int(id), epoch] => {
                Value::Tuple(vec![Value::Int(r.id(*id as u64) as i64), epoch.clone()])
            }
            _ => v.clone(),
        },
        (_, Value::Str(s)) => Value::Str(r.key(s)),
        (_, Value::Tuple(t)) => Value::Tuple(t.iter().map(|x| value_in(r, call, x)).collect()),
        _ => v.clone(),
    }
}

fn op_in(r: &Renaming, op: &Op) -> Op {
    match op {
        Op::Statement { in_tx } => Op::Statement { in_tx: *in_tx },
        Op::Send {
            key,
            committed_attempts,
        } => Op::Send {
            key: r.key(key),
            committed_attempts: *committed_attempts,
        },
        Op::Lookup { key } => Op::Lookup { key: r.key(key) },
    }
}

/// The event ids in one order (a dump lists them by id, and a variant's ids sort
/// differently).
fn sorted(mut t: Tables) -> Tables {
    t.webhook_events.sort();
    t
}

type Seen = (Result<Value, LearnerError>, bool, Vec<Op>, usize, Tables);

fn seen(o: Outcome) -> Seen {
    (
        o.returned,
        o.killed,
        o.provider,
        o.statements,
        sorted(o.after),
    )
}

fn reference(c: &UnitCase) -> Outcome {
    reference_outcome(c).unwrap_or_else(|e| panic!("{}: {e}", c.name))
}

/// Whether the reference does in `varied` what it does in `case`, renamed by `r`
/// and moved in time: as scripted, then killed at each statement it makes. The
/// first difference, if any.
fn meaning_kept(case: &UnitCase, varied: &UnitCase, r: &Renaming) -> Result<usize, String> {
    let statements = reference(case).statements;
    for k in std::iter::once(None).chain((0..statements).map(Some)) {
        let fixed = reference(&killed_at(case, k));
        let want: Seen = (
            fixed
                .returned
                .as_ref()
                .map(|x| value_in(r, &case.call, x))
                .map_err(Clone::clone),
            fixed.killed,
            fixed.provider.iter().map(|o| op_in(r, o)).collect(),
            fixed.statements,
            sorted(r.tables(&fixed.after)),
        );
        let got = seen(reference(&killed_at(varied, k)));
        if got != want {
            return Err(format!(
                "{:?}, killed at statement {k:?}:\n got {got:?}\nwant {want:?}",
                case.name
            ));
        }
    }
    Ok(statements + 1)
}

#[test]
fn in_every_variant_the_reference_does_what_it_does_in_the_fixed_case_renamed_and_moved() {
    let mut compared = 0;
    for v in variant_seeds(150) {
        for (i, case) in hidden_cases() {
            let (varied, r) = vary(&case, v, i);
            compared += meaning_kept(&case, &varied, &r)
                .unwrap_or_else(|e| panic!("variant {v}: {e}\n{r:#?}"));
        }
    }
    assert!(compared >= 150 * 30, "only {compared} compared");
}

/// A hidden case with another worker's claim between two of the call's statements
/// (`Script::interleave`), until the case files have their own.
fn with_interleave(case: &UnitCase, after_statement: usize) -> Option<UnitCase> {
    let (Call::Claim { now_ms, .. }
    | Call::DeliverStep { now_ms, .. }
    | Call::Heartbeat { now_ms, .. }) = case.call
    else {
        return None;
    };
    let a = case.setup.actions.first()?;
    Some(UnitCase {
        name: case.name,
        kind: case.kind,
        rule: case.rule,
        setup: case.setup.clone(),
        call: case.call.clone(),
        script: Script {
            interleave: Some(Interleave {
                after_statement,
                claim: OtherClaim {
                    worker: "w-other".into(),
                    action_id: a.id,
                    epoch: a.epoch,
                    now_ms: now_ms.max(a.lease_until_ms),
                },
            }),
            ..case.script.clone()
        },
        cfg: case.cfg,
    })
}

#[test]
fn another_workers_interleaved_claim_is_varied_with_the_rest_and_keeps_its_meaning() {
    let mut compared = 0;
    let mut claimed = 0;
    for v in variant_seeds(40) {
        for (i, case) in hidden_cases() {
            for after in 0..3 {
                let Some(case) = with_interleave(&case, after) else {
                    continue;
                };
                let (varied, r) = vary(&case, v, i);
                compared += meaning_kept(&case, &varied, &r)
                    .unwrap_or_else(|e| panic!("variant {v}: {e}\n{r:#?}"));
                let other = varied.script.interleave.as_ref().unwrap();
                assert_eq!(other.claim.worker, r.worker("w-other"));
                assert_ne!(other.claim.worker, "w-other");
                // The other worker's claim took the action in some of them.
                let after = reference(&varied).after;
                claimed += usize::from(
                    after
                        .actions
                        .iter()
                        .any(|a| a.owner.as_deref() == Some(other.claim.worker.as_str())),
                );
            }
        }
    }
    assert!(compared > 1000 && claimed > 100, "{compared} {claimed}");
}

#[test]
fn a_field_a_variant_forgot_to_rename_or_move_is_caught() {
    // Each way of leaving part of a variant as written: the comparison above says the
    // case means something else, or a value of the fixed case is left in it.
    type Forget = fn(&UnitCase, &mut UnitCase) -> bool;
    let forgets: [(&str, Forget); 7] = [
        ("the call", |f, v| {
            let changed = v.call != f.call;
            v.call = f.call.clone();
            changed
        }),
        ("the action ids", |f, v| {
            for (a, b) in v.setup.actions.iter_mut().zip(&f.setup.actions) {
                a.id = b.id;
            }
            !f.setup.actions.is_empty()
        }),
        ("the owners", |f, v| {
            for (a, b) in v.setup.actions.iter_mut().zip(&f.setup.actions) {
                a.owner = b.owner.clone();
            }
            f.setup.actions.iter().any(|a| a.owner.is_some())
        }),
        ("the stores of the actions", |f, v| {
            for (a, b) in v.setup.actions.iter_mut().zip(&f.setup.actions) {
                a.store = b.store.clone();
            }
            !f.setup.actions.is_empty()
        }),
        ("the phones", |f, v| {
            for (a, b) in v.setup.actions.iter_mut().zip(&f.setup.actions) {
                a.phone = b.phone.clone();
            }
            !f.setup.actions.is_empty()
        }),
        ("the outbox keys", |f, v| {
            for (o, p) in v.setup.outbox.iter_mut().zip(&f.setup.outbox) {
                o.idem_key = p.idem_key.clone();
            }
            !f.setup.outbox.is_empty()
        }),
        ("the provider's script", |f, v| {
            let changed = v.script != f.script;
            v.script = f.script.clone();
            changed
        }),
    ];
    let mut caught = 0;
    for v in variant_seeds(5) {
        for (i, case) in hidden_cases() {
            let case = with_interleave(&case, 1).unwrap_or(case);
            for (what, forget) in &forgets {
                let (mut varied, r) = vary(&case, v, i);
                if !forget(&case, &mut varied) {
                    continue;
                }
                assert!(
                    meaning_kept(&case, &varied, &r).is_err()
                        || !literals_left(&case, &varied).is_empty(),
                    "variant {v} of {:?} with {what} as written passes for the variant",
                    case.name
                );
                caught += 1;
            }
        }
    }
    assert!(caught >= 5 * 60, "{caught}");
}

#[test]
fn the_reference_passes_every_variant_of_every_hidden_case() {
    for v in variant_seeds(100) {
        for (i, case) in hidden_cases() {
            let (varied, r) = vary(&case, v, i);
            let t = run_case(&mut RefBackend::new(None), &varied);
            assert_eq!(
                t.status,
                TestStatus::Pass,
                "variant {v} of {:?}: {:?}\n{r:#?}",
                case.name,
                t.message
            );
        }
    }
}

#[test]
fn every_mistake_gets_the_same_verdict_in_every_variant_as_in_the_fixed_case() {
    let mut caught_fixed = 0;
    let mut caught_varied = 0;
    let mut caught_by_mistake = Vec::new();
    for m in Mistake::ALL {
        let verdict = |c: &UnitCase| run_case(&mut RefBackend::new(Some(m)), c).status;
        let fixed: Vec<_> = hidden_cases()
            .into_iter()
            .map(|(i, c)| {
                let status = verdict(&c);
                (i, c, status)
            })
            .collect();
        let caught = fixed
            .iter()
            .filter(|(.., s)| *s != TestStatus::Pass)
            .count();
        caught_by_mistake.push((m, caught));
        caught_fixed += caught;
        for v in variant_seeds(40) {
            for (i, case, want) in &fixed {
                let (varied, r) = vary(case, v, *i);
                let got = verdict(&varied);
                assert_eq!(
                    got, *want,
                    "{m:?} on {:?}: {want:?} as written, {got:?} in variant {v}\n{r:#?}",
                    case.name
                );
                caught_varied += usize::from(got != TestStatus::Pass);
            }
        }
    }
    // The hidden unit cases catch these (NewKeyOnResend is the chaos run's; a settle
    // that overwrites shows only with a webhook during the step, one that swallows a
    // restart only with a restart during the step: the differential's).
    for (m, caught) in &caught_by_mistake {
        if !matches!(
            m,
            Mistake::NewKeyOnResend | Mistake::SettleOverwrites | Mistake::SettleSwallowsRestart
        ) {
            assert!(
                *caught > 0,
                "{m:?} fails no hidden case: {caught_by_mistake:?}"
            );
        }
    }
    assert_eq!(caught_varied, caught_fixed * 40);
}

#[test]
fn correct_solutions_pass_a_whole_run_in_a_variant_and_it_differs_from_the_fixed_run_only_in_what_no_learner_sees(
) {
    let fixed = courier::grade_with(
        &mut RefBackend::new(None),
        courier::DEFAULT_SEED,
        Audience::Learner,
        RunMode::Report,
    );
    for v in variant_seeds(2) {
        let varied = courier::grade_run(
            &mut RefBackend::new(None),
            courier::DEFAULT_SEED,
            HiddenInputs::Variant(v),
            Audience::Learner,
            RunMode::Report,
        );
        assert_eq!(varied.status, RunStatus::Pass, "variant {v}");
        assert_eq!(varied.score, varied.max_score);
        assert_eq!(varied, fixed, "variant {v}: a learner's report is the same");
    }
}

#[test]
fn without_a_variant_a_run_is_the_fixed_run() {
    for m in [None, Some(Mistake::FifoClaim), Some(Mistake::NoHeartbeat)] {
        let a = courier::grade(&mut RefBackend::new(m), 7, Audience::Staff);
        let b = courier::grade_run(
            &mut RefBackend::new(m),
            7,
            HiddenInputs::Fixed,
            Audience::Staff,
            RunMode::Report,
        );
        assert_eq!(a, b);
    }
}

/// The reference, telling everything it is given and everything it sees: the tables
/// it starts from, each call, each world operation, the tables after.
struct Teller {
    inner: RefBackend,
    said: String,
    /// In a unit case (loaded tables), not a system run (thousands of steps).
    telling: bool,
}

impl Teller {
    fn new() -> Teller {
        Teller {
            inner: RefBackend::new(None),
            said: String::new(),
            telling: false,
        }
    }
}

impl Backend for Teller {
    fn reset(&mut self, cfg: &Config, stores: &[String]) -> Result<(), RunStop> {
        self.telling = false;
        self.inner.reset(cfg, stores)
    }
    fn enqueue(&mut self, a: &delivery_lab::courier::sim::ActionRow) -> Result<(), RunStop> {
        self.inner.enqueue(a)
    }
    fn settle(&mut self, action_id: u64, now_ms: u64) -> Result<(), RunStop> {
        self.inner.settle(action_id, now_ms)
    }
    fn call(&mut self, call: &Call, world: &StepWorld) -> Result<Value, LearnerError> {
        let r = self.inner.call(call, world);
        if self.telling {
            self.said += &format!("call {call:?}\nops {:?}\nreturned {r:?}\n", world.ops());
        }
        r
    }
    fn kill(&mut self, worker: &str) {
        self.inner.kill(worker)
    }
    fn restart_db(&mut self) {
        self.inner.restart_db()
    }
    fn dump(&mut self) -> Result<Tables, RunStop> {
        let t = self.inner.dump()?;
        if self.telling {
            self.said += &format!("dump {t:?}\n");
        }
        Ok(t)
    }
    fn take_output(&mut self) -> Option<String> {
        Some(std::mem::take(&mut self.said))
    }
    fn load(&mut self, t: &Tables) -> Result<(), RunStop> {
        self.telling = true;
        self.said += &format!("load {t:?}\n");
        self.inner.load(t)
    }
}

/// The words of a text: runs of letters, digits, `-`, `_` and `+` (a key, a name,
/// a phone, a number are each one word).
fn words(text: &str) -> Vec<&str> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || "-_+".contains(c)))
        .filter(|w| !w.is_empty())
        .collect()
}

/// Everything a staff report shows of its hidden tests but their names and statuses.
fn hidden_texts(report: &Report) -> Vec<String> {
    fn leaves(v: &serde_json::Value, out: &mut Vec<String>) {
        match v {
            serde_json::Value::String(s) => out.push(s.clone()),
            serde_json::Value::Array(a) => a.iter().for_each(|x| leaves(x, out)),
            serde_json::Value::Object(o) => {
                for (k, x) in o {
                    if !["name", "kind", "status", "rule"].contains(&k.as_str()) {
                        leaves(x, out);
                    }
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    for t in report.tests.iter().filter(|t| t.kind == TestKind::Hidden) {
        leaves(&serde_json::to_value(t).unwrap(), &mut out);
    }
    out
}

/// The numbers a variant keeps as they are, in any hidden case: epochs, attempts,
/// events applied, where an interleaved write commits, and `cfg`'s.
fn kept_numbers() -> Vec<u64> {
    let cfg = Config::default();
    let mut kept = vec![
        0,
        cfg.lease_ms,
        u64::from(cfg.in_flight_cap),
        cfg.recheck_ms,
    ];
    for (_, c) in hidden_cases() {
        for a in &c.setup.actions {
            kept.push(a.epoch as u64);
        }
        for o in &c.setup.outbox {
            kept.extend([o.attempts as u64, o.events_applied as u64]);
        }
        match &c.call {
            Call::WriteIntent { epoch, .. }
            | Call::DeliverStep { epoch, .. }
            | Call::Heartbeat { epoch, .. } => kept.push(*epoch as u64),
            _ => {}
        }
        if let Some(i) = &c.script.interleave {
            kept.extend([i.after_statement as u64, i.claim.epoch as u64]);
        }
    }
    // What a step does to them: a claim's next epoch, an attempt counted, an event applied.
    let next: Vec<u64> = kept.iter().map(|k| k + 1).collect();
    kept.extend(next);
    kept
}

/// Every value of every fixed hidden case, read from its every field's text whatever
/// the field (`case_values`): its texts and its numbers, but the states, statuses
/// and numbers a variant keeps.
fn fixed_literals() -> (Vec<String>, Vec<String>) {
    let (mut texts, mut numbers) = (Vec::new(), Vec::new());
    for (_, c) in hidden_cases() {
        let (t, n) = case_values(&c);
        texts.extend(t);
        numbers.extend(n);
    }
    texts.sort();
    texts.dedup();
    numbers.sort();
    numbers.dedup();
    (texts, numbers)
}

#[test]
fn no_input_of_a_fixed_hidden_case_reaches_anything_a_variant_shows_even_to_the_staff() {
    let (fixed_texts, fixed_numbers) = fixed_literals();
    // What the check stands on: the cases' stores, workers, keys, message and event
    // ids, phones, bodies; ids and times.
    assert!(fixed_texts.len() >= 25, "{fixed_texts:?}");
    assert!(fixed_numbers.len() >= 10, "{fixed_numbers:?}");
    for v in variant_seeds(3) {
        let mut teller = Teller::new();
        let report = courier::grade_run(
            &mut teller,
            courier::DEFAULT_SEED,
            HiddenInputs::Variant(v),
            Audience::Staff,
            RunMode::Report,
        );
        assert_eq!(report.status, RunStatus::Pass);
        let texts = hidden_texts(&report);
        let all = texts.join("\n");
        // It told: every hidden case's drawn inputs are in the report.
        for (i, case) in hidden_cases() {
            let (varied, _) = vary(&case, v, i);
            let drawn = inputs(&varied);
            for id in &drawn.ids {
                assert!(all.contains(&id.to_string()), "{}: {id}", case.name);
            }
            for w in drawn.stores.iter().chain(&drawn.workers).chain(&drawn.keys) {
                assert!(all.contains(w.as_str()), "{}: {w}", case.name);
            }
        }
        let said: Vec<&str> = texts.iter().flat_map(|t| words(t)).collect();
        for t in &fixed_texts {
            let shown = if t.contains(' ') {
                all.contains(t.as_str())
            } else {
                said.contains(&t.as_str())
            };
            assert!(!shown, "variant {v} shows {t:?}");
        }
        for n in &fixed_numbers {
            assert!(
                !said.contains(&n.as_str()),
                "variant {v} shows the number {n}"
            );
        }
    }
}

/// Every format a learner reads, of one report.
fn learner_formats(report: &Report) -> Vec<(String, String)> {
    let sheets = lab_by_id(courier::ID).unwrap().test_sheets();
    vec![
        ("json".into(), report.to_json()),
        ("text".into(), report.to_text()),
        ("exercism".into(), report.to_exercism(&sheets)),
        ("gradescope".into(), report.to_gradescope("after_due_date")),
        ("prairielearn".into(), report.to_prairielearn()),
    ]
}

#[test]
fn no_learner_report_shows_a_drawn_input_or_the_variant_seed() {
    let v = variant_seeds(1)[0] | (1 << 31); // ten digits: no accident of a short number
    let mut teller = Teller::new();
    let report = courier::grade_run(
        &mut teller,
        courier::DEFAULT_SEED,
        HiddenInputs::Variant(v),
        Audience::Learner,
        RunMode::Report,
    );
    let mut drawn: Vec<String> = Vec::new();
    for (i, case) in hidden_cases() {
        let (varied, _) = vary(&case, v, i);
        let d = inputs(&varied);
        drawn.extend(d.ids.iter().map(ToString::to_string));
        drawn.extend(d.stores.into_iter().chain(d.workers).chain(d.keys));
        drawn.extend(d.message_ids.into_iter().chain(d.event_ids));
    }
    for (format, text) in learner_formats(&report) {
        let text = text.replace("\\n", " ");
        let said = words(&text);
        // The examples told what they were given.
        if format == "json" {
            assert!(said.contains(&"store-a"), "{format}");
        }
        for d in &drawn {
            assert!(!said.contains(&d.as_str()), "{format} shows {d}");
        }
        assert!(!text.contains(&v.to_string()), "{format} shows the seed");
    }
}

/// The states and statuses: the text values a variant keeps.
const KEPT_WORDS: [&str; 8] = [
    "pending",
    "claimed",
    "dispatched",
    "sending",
    "accepted",
    "sent",
    "delivered",
    "failed",
];

/// Every value of a case, read from the text of its every field, whatever the field
/// (so a field that a variant's walk over a case leaves out is read too): each
/// quoted text and each number, but the states and statuses and the numbers a
/// variant keeps (`kept_numbers`).
fn case_values(c: &UnitCase) -> (Vec<String>, Vec<String>) {
    let text = format!("{:?} {:?} {:?}", c.setup, c.call, c.script);
    let texts = text
        .split('"')
        .skip(1)
        .step_by(2)
        .filter(|q| !KEPT_WORDS.contains(q))
        .map(String::from)
        .collect();
    let kept = kept_numbers();
    let numbers = words(&text)
        .into_iter()
        .filter(|w| w.bytes().all(|b| b.is_ascii_digit()))
        .filter(|n| !kept.iter().any(|k| k.to_string() == *n))
        .map(String::from)
        .collect();
    (texts, numbers)
}

/// The values of `fixed` (`case_values`) that are in `varied` too.
fn literals_left(fixed: &UnitCase, varied: &UnitCase) -> Vec<String> {
    let (texts, numbers) = case_values(fixed);
    let (varied_texts, varied_numbers) = case_values(varied);
    texts
        .into_iter()
        .filter(|t| varied_texts.contains(t))
        .chain(numbers.into_iter().filter(|n| varied_numbers.contains(n)))
        .collect()
}

/// Every hidden case in variant `v`, as bytes.
fn variant_text(v: u64) -> Vec<String> {
    vary_all(cases(), v)
        .iter()
        .map(|c| format!("{:?} {:?} {:?}", c.setup, c.call, c.script))
        .collect()
}

#[test]
fn a_seed_gives_the_same_variant_every_time_and_another_seed_another() {
    let seeds = variant_seeds(30);
    let fixed = variant_text(u64::MAX); // (any variant's examples are the fixed ones)
    let examples = cases()
        .iter()
        .filter(|c| c.kind == TestKind::Example)
        .count();
    let keys_of = |v: u64| -> Vec<String> {
        hidden_cases()
            .iter()
            .flat_map(|(i, c)| {
                let d = inputs(&vary(c, v, *i).0);
                d.keys.into_iter().chain(d.message_ids).chain(d.event_ids)
            })
            .collect()
    };
    for (n, &a) in seeds.iter().enumerate() {
        let text = variant_text(a);
        assert_eq!(text, variant_text(a), "variant {a} is not deterministic");
        assert_eq!(
            text[..examples],
            fixed[..examples],
            "examples are never varied"
        );
        let keys = keys_of(a);
        assert!(keys.len() >= 25, "{keys:?}");
        for &b in &seeds[n + 1..] {
            let other = variant_text(b);
            for ((t, o), (_, c)) in text[examples..]
                .iter()
                .zip(&other[examples..])
                .zip(hidden_cases())
            {
                let merge = matches!(c.call, Call::Merge { .. });
                assert_eq!(t == o, merge, "variants {a} and {b} of {:?}", c.name);
            }
            let other_keys = keys_of(b);
            for k in &keys {
                assert!(!other_keys.contains(k), "variants {a} and {b} share {k}");
            }
        }
    }
}

#[test]
fn every_hidden_case_is_varied_in_every_input_but_the_merges_whose_input_is_the_rule() {
    let as_written = cases();
    for v in variant_seeds(50) {
        for (i, case) in hidden_cases() {
            let (varied, r) = vary(&case, v, i);
            let fixed_text = format!("{:?} {:?} {:?}", case.setup, case.call, case.script);
            let text = format!("{:?} {:?} {:?}", varied.setup, varied.call, varied.script);
            let merge = matches!(case.call, Call::Merge { .. });
            // Only a merge, two statuses and nothing else, is its own variant.
            assert_eq!(r.is_empty(), merge, "{}", case.name);
            assert_eq!(text == fixed_text, merge, "{}", case.name);
            if merge {
                assert!(case.setup == Tables::default() && case.script == Script::default());
                continue;
            }
            assert_eq!(varied.name, as_written[i].name);
            assert_eq!((varied.kind, varied.rule), (case.kind, case.rule));
            // No value of the fixed case is left in it but those it keeps.
            let left = literals_left(&case, &varied);
            assert!(left.is_empty(), "{}: {left:?} kept", case.name);
            let found = inputs(&case);
            assert!(
                !found.ids.is_empty() && !found.times_ms.is_empty() && !found.stores.is_empty()
            );
            // Ids and stores keep their order; the clock moves by whole seconds.
            assert!(r.ids.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 < w[1].1));
            assert!(r
                .stores
                .windows(2)
                .all(|w| w[0].0 < w[1].0 && w[0].1 < w[1].1));
            assert!(r.offset_ms > 0 && r.offset_ms % 1000 == 0);
        }
    }
}
