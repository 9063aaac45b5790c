//! The courier lab's differential tests (`src/courier/differential.rs`, issue 36):
//! the reference design passes every world of every piece over many seeds, each of
//! the reference's `Mistake`s (`Mistake::ALL`) fails the differential of its piece
//! for every seed tried (30 here: the worlds are drawn per submission, so a
//! mistake must not slip through on some seeds), a failing world is
//! shrunk and reported as a case file would write it, and the worlds depend on the
//! run's seed and the submission's hidden seed.

use delivery_lab::courier::differential::{self, describe, seed_of, worlds, PIECES};
use delivery_lab::courier::reference::{Mistake, RefBackend};
use delivery_lab::report::TestStatus;

#[test]
fn the_reference_passes_every_world_of_every_piece() {
    for seed in 0..60 {
        if let Err(e) = differential::reference_passes(seed_of(seed, None)) {
            panic!("{e}");
        }
    }
    for v in [1, 2, 3, 0xdead_beef] {
        differential::reference_passes(seed_of(1042, Some(v))).unwrap_or_else(|e| panic!("{e}"));
    }
}

/// The piece each mistake lives in, and a word of the message that names the rule.
fn piece_of(m: Mistake) -> (&'static str, &'static str) {
    match m {
        Mistake::ResendWithoutLookup => ("deliver_step", "lookup-before-resend"),
        Mistake::NewKeyOnResend => ("deliver_step", "provider calls"),
        Mistake::FifoClaim => ("claim", "fair-claim"),
        Mistake::NoHeartbeat => ("heartbeat", "heartbeat"),
        Mistake::TimeoutIsFailure => ("deliver_step", "lookup-before-resend"),
        Mistake::ClaimWithoutCas => ("claim", "as if one ran after the other"),
        Mistake::SettleOverwrites => ("deliver_step", "handling webhook"),
        Mistake::SettleSwallowsRestart => ("deliver_step", "let it escape"),
    }
}

#[test]
fn each_mistake_fails_the_differential_of_its_piece_with_a_shrunk_world() {
    for m in Mistake::ALL {
        let (function, word) = piece_of(m);
        let piece = PIECES.iter().find(|p| p.function == function).unwrap();
        for seed in 0..30 {
            let r = differential::run(
                &mut RefBackend::new(Some(m)),
                piece,
                seed_of(seed, None),
                "./lab grade --lab courier --seed 1 solution.py",
            );
            assert_eq!(r.status, TestStatus::Fail, "{m:?} seed {seed}");
            let msg = r.message.unwrap();
            assert!(msg.contains("Smallest failing world found"), "{m:?}: {msg}");
            assert!(
                msg.contains(&format!("call = {{ fn = \"{function}\"")),
                "{m:?}: {msg}"
            );
            assert!(msg.contains(word), "{m:?}: {msg}");
            assert!(
                msg.contains("Replay: ./lab grade --lab courier"),
                "{m:?}: {msg}"
            );
            assert_eq!(r.name, piece.test_name());
        }
    }
}

/// A settle that swallows the database's restart and returns `("done", ...)` is
/// caught by the restart racer alone: it passes every unit case, every world that is
/// not restarted at each statement (the whole-step restart, `db_down`, fails the
/// step's first read, before the settle), and the chaos run's restart, which lasts
/// seconds of lab time while a step is one instant; a restart world fails it, saying
/// where the restart landed and quoting lab.md.
#[test]
fn a_restart_swallowed_by_the_settle_is_caught_by_the_restart_racer_alone() {
    use delivery_lab::courier::units::{run_case, Racer};
    let m = Mistake::SettleSwallowsRestart;
    for case in delivery_lab::courier::cases() {
        let r = run_case(&mut RefBackend::new(Some(m)), &case);
        assert_eq!(r.status, TestStatus::Pass, "{}: {:?}", case.name, r.message);
    }
    let deliver = PIECES
        .iter()
        .find(|p| p.function == "deliver_step")
        .unwrap();
    for seed in 0..8 {
        let all = worlds(deliver, seed_of(seed, None));
        let (restarted, others): (Vec<_>, Vec<_>) =
            all.iter().partition(|w| w.race == Some(Racer::Restart));
        assert_eq!(restarted.len(), deliver.restarts);
        for w in others {
            let r = differential::check(&mut RefBackend::new(Some(m)), w);
            assert_eq!(
                r.status,
                TestStatus::Pass,
                "seed {seed}\n{}\n{:?}",
                describe(w),
                r.message
            );
        }
        let caught = restarted
            .iter()
            .filter(|w| {
                differential::check(&mut RefBackend::new(Some(m)), w).status == TestStatus::Fail
            })
            .count();
        assert!(
            caught >= 3,
            "seed {seed}: {caught} of {} restart worlds",
            restarted.len()
        );
        let r = differential::run(
            &mut RefBackend::new(Some(m)),
            deliver,
            seed_of(seed, None),
            "",
        );
        let msg = r.message.unwrap_or_default();
        assert_eq!(r.status, TestStatus::Fail, "seed {seed}");
        assert!(
            msg.contains("with the database restarting at its statement"),
            "{msg}"
        );
        assert!(msg.contains("returned ('done', "), "{msg}");
        assert!(
            msg.contains("# restarted at each statement in turn"),
            "{msg}"
        );
    }
}

#[test]
fn the_worlds_follow_the_run_seed_and_the_submission() {
    for piece in &PIECES {
        let text = |s| worlds(piece, s).iter().map(describe).collect::<Vec<_>>();
        assert_eq!(
            text(seed_of(7, None)),
            text(seed_of(7, None)),
            "{}",
            piece.function
        );
        if piece.function == "merge" {
            continue;
        }
        assert_ne!(
            text(seed_of(7, None)),
            text(seed_of(8, None)),
            "{}",
            piece.function
        );
        assert_ne!(
            text(seed_of(7, Some(1))),
            text(seed_of(7, Some(2))),
            "{}",
            piece.function
        );
        assert_ne!(
            text(seed_of(7, None)),
            text(seed_of(7, Some(1))),
            "{}",
            piece.function
        );
    }
}

/// The draws cover what the lab lets vary: every cfg field off its default, each
/// action state, a lease ending exactly at now_ms, outbox rows in every status,
/// fenced callers and holders, ties between stores.
#[test]
fn the_worlds_cover_what_the_lab_lets_vary() {
    use delivery_lab::courier::sim::{Call, Config};
    use delivery_lab::courier::tables::Holder;
    let d = Config::default();
    let (mut lease, mut cap, mut recheck, mut boundary, mut ties) = (0, 0, 0, 0, 0);
    let mut states = std::collections::BTreeSet::new();
    let mut statuses = std::collections::BTreeSet::new();
    let (mut fenced, mut holder) = (0, 0);
    for seed in 0..20 {
        for piece in &PIECES {
            for w in worlds(piece, seed_of(seed, None)) {
                let c = &w.case;
                lease += usize::from(c.cfg.lease_ms != d.lease_ms);
                cap += usize::from(c.cfg.in_flight_cap != d.in_flight_cap);
                recheck += usize::from(c.cfg.recheck_ms != d.recheck_ms);
                let now = match c.call {
                    Call::Claim { now_ms, .. }
                    | Call::DeliverStep { now_ms, .. }
                    | Call::Heartbeat { now_ms, .. } => Some(now_ms),
                    _ => None,
                };
                for a in &c.setup.actions {
                    states.insert(a.state.clone());
                    boundary += usize::from(a.state == "claimed" && Some(a.lease_until_ms) == now);
                }
                for o in &c.setup.outbox {
                    statuses.insert(o.status.clone());
                }
                let s = &c.setup.stores;
                ties += usize::from(
                    (0..s.len())
                        .any(|i| (0..i).any(|j| s[i].last_served_ms == s[j].last_served_ms)),
                );
                if let Call::DeliverStep {
                    action_id,
                    worker,
                    epoch,
                    ..
                }
                | Call::Heartbeat {
                    action_id,
                    worker,
                    epoch,
                    ..
                }
                | Call::WriteIntent {
                    action_id,
                    worker,
                    epoch,
                } = &c.call
                {
                    let held = c
                        .setup
                        .actions
                        .iter()
                        .any(|a| a.id == *action_id && a.held_by(worker, *epoch));
                    if held {
                        holder += 1;
                    } else {
                        fenced += 1;
                    }
                }
            }
        }
    }
    for (what, n) in [
        ("lease_ms", lease),
        ("in_flight_cap", cap),
        ("recheck_ms", recheck),
        ("a lease ending at now_ms", boundary),
        ("tied stores", ties),
        ("fenced callers", fenced),
        ("holders", holder),
    ] {
        assert!(n >= 20, "{what}: only {n} worlds");
    }
    assert_eq!(states.len(), 3, "{states:?}");
    assert_eq!(statuses.len(), 5, "{statuses:?}");
}

/// `cargo test --test courier_differential peek -- --ignored --nocapture`: the
/// messages staff read for each mistake.
#[test]
#[ignore]
fn peek() {
    for m in [
        Mistake::FifoClaim,
        Mistake::TimeoutIsFailure,
        Mistake::NoHeartbeat,
        Mistake::SettleSwallowsRestart,
    ] {
        let (function, _) = piece_of(m);
        let piece = PIECES.iter().find(|p| p.function == function).unwrap();
        let r = differential::run(
            &mut RefBackend::new(Some(m)),
            piece,
            seed_of(1042, None),
            "./lab grade --lab courier --seed 1042 solution.py",
        );
        println!("=== {m:?}: {}\n{}\n", r.name, r.message.unwrap_or_default());
    }
}

/// `cargo test --release --test courier_differential cost -- --ignored --nocapture`:
/// how many learner calls and table loads each differential test makes, against the
/// chaos run's and the unit tests' (what a host pays for, a call at a time).
#[test]
#[ignore]
fn cost() {
    use delivery_lab::courier::sim::{
        ActionRow, Backend, Call, Config, RunStop, StepWorld, Tables,
    };
    use delivery_lab::value::{LearnerError, Value};
    struct Count(RefBackend, usize, usize);
    impl Backend for Count {
        fn reset(&mut self, c: &Config, s: &[String]) -> Result<(), RunStop> {
            self.0.reset(c, s)
        }
        fn enqueue(&mut self, a: &ActionRow) -> Result<(), RunStop> {
            self.0.enqueue(a)
        }
        fn settle(&mut self, id: u64, now: u64) -> Result<(), RunStop> {
            self.0.settle(id, now)
        }
        fn call(&mut self, c: &Call, w: &StepWorld) -> Result<Value, LearnerError> {
            self.1 += 1;
            self.0.call(c, w)
        }
        fn kill(&mut self, w: &str) {
            self.0.kill(w)
        }
        fn restart_db(&mut self) {
            self.0.restart_db()
        }
        fn dump(&mut self) -> Result<Tables, RunStop> {
            self.0.dump()
        }
        fn load(&mut self, t: &Tables) -> Result<(), RunStop> {
            self.2 += 1;
            self.0.load(t)
        }
    }
    let seed = seed_of(1042, None);
    for p in &PIECES {
        let mut c = Count(RefBackend::new(None), 0, 0);
        differential::run(&mut c, p, seed, "");
        println!("{}: {} calls, {} loads", p.test_name(), c.1, c.2);
    }
    let mut c = Count(RefBackend::new(None), 0, 0);
    let r = delivery_lab::courier::grade(&mut c, 1042, delivery_lab::report::Audience::Learner);
    assert!(r.all_passed());
    println!("a whole run: {} calls, {} loads", c.1, c.2);
}
