//! The courier lab's differential tests (`src/courier/differential.rs`, issue 36):
//! the reference design passes every world of every piece over many seeds, each of
//! the reference's `Mistake`s fails the differential of its piece for every seed
//! tried (16 here; 30 checked by hand: the worlds are drawn per submission, so a
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
    }
}

#[test]
fn each_mistake_fails_the_differential_of_its_piece_with_a_shrunk_world() {
    let mistakes = [
        Mistake::ResendWithoutLookup,
        Mistake::NewKeyOnResend,
        Mistake::FifoClaim,
        Mistake::NoHeartbeat,
        Mistake::TimeoutIsFailure,
        Mistake::ClaimWithoutCas,
        Mistake::SettleOverwrites,
    ];
    for m in mistakes {
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
                    let held = c.setup.actions.iter().any(|a| {
                        a.id == *action_id
                            && a.state == "claimed"
                            && a.owner.as_deref() == Some(worker.as_str())
                            && a.epoch == *epoch
                    });
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
