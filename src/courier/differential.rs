//! The differential tests of the courier lab (issue 36): each piece on seeded random
//! worlds, compared with the reference design from the same tables by the unit
//! tests' own comparison (`units::run_case`: the value returned, the provider
//! calls, every row after, the transaction ended), so that a mistake shows whatever
//! world it needs, not only the worlds someone wrote down.
//!
//! A world draws what `lab.md` lets vary: every field of `cfg`; store names of
//! different lengths, in any order, tied or not on `last_served_ms`; ids in any
//! order and created in any order; actions pending, claimed with a lease that ended
//! before, exactly at or after `now_ms`, and dispatched; outbox rows in every status
//! with 0 to 3 attempts, keys written by an earlier owner, events already recorded;
//! callers that hold the claim and callers fenced by another worker or by a newer
//! epoch of their own; provider answers of every kind, a kill with the request on
//! the wire, the database restarting, and kills at each statement
//! (`all_or_nothing`). Only states the reference design can reach are drawn (a
//! pending action has epoch 0 and no owner; a dispatched one has an outbox row past
//! `sending`), so that every correct way of writing a piece passes.
//!
//! Some worlds also race another worker's claim or a webhook against the call, at each
//! of the call's statements in turn, and a few more restart the database at each of
//! them (`units::run_case_interleaved`): the call must let the error escape and end
//! as the reference's ends when its worker crashes at an instant of it.
//!
//! A failing world is shrunk (rows dropped, `cfg` back to its defaults, one at a
//! time while it still fails), and the test reports the smallest one it found,
//! written as a case file's TOML (`hidden-tests/README.md`) so that staff can keep
//! it as a case, with the rule broken, expected against actual, and the seed.

use super::provider::{LookupAnswer, SendAnswer, Status, Webhook};
use super::reference::RefBackend;
use super::rules::Rule;
use super::sim::{status_name, Backend, Call, Config, Script, Tables};
use super::step_world::{OtherClaim, OtherWrite};
use super::tables::Holder;
use super::units::{action, created, run_case, run_case_interleaved, Racer, UnitCase};
use crate::report::{TestKind, TestReport, TestStatus};
use crate::rng::{mix, SeededRng};
use crate::value::Value;
use std::fmt::Write as _;

/// One piece's differential test: how many random worlds, how many of them race
/// another worker's claim or a webhook at every statement, and how many more restart
/// the database at every statement.
pub struct Piece {
    pub function: &'static str,
    pub worlds: usize,
    pub races: usize,
    pub restarts: usize,
}

/// The pieces, in the lab's order. `merge` is pure and has 25 inputs: it is tried on
/// every pair instead.
pub const PIECES: [Piece; 6] = [
    Piece {
        function: "claim",
        worlds: 40,
        races: 6,
        restarts: 2,
    },
    Piece {
        function: "write_intent",
        worlds: 30,
        races: 4,
        restarts: 2,
    },
    Piece {
        function: "deliver_step",
        worlds: 40,
        races: 4,
        restarts: 4,
    },
    Piece {
        function: "merge",
        worlds: 25,
        races: 0,
        restarts: 0,
    },
    Piece {
        function: "on_webhook",
        worlds: 30,
        races: 4,
        restarts: 2,
    },
    Piece {
        function: "heartbeat",
        worlds: 30,
        races: 4,
        restarts: 2,
    },
];

/// The pieces whose differential tests this build holds: they are hidden tests, so a
/// build without the hidden tests (`--no-hidden`: the page, while a server grades them)
/// has none.
pub fn pieces() -> &'static [Piece] {
    if cfg!(feature = "hidden") {
        &PIECES
    } else {
        &[]
    }
}

/// The prefix of every differential test's name.
pub const PREFIX: &str = "differential: ";

/// At most this many simpler worlds are tried while shrinking a failing one.
const SHRINK_BUDGET: usize = 150;

/// The case name the worlds run under (the report takes the test's).
const WORLD: &str = "a random world";

impl Piece {
    pub fn test_name(&self) -> String {
        if self.function == "merge" {
            format!("{PREFIX}merge over every pair of statuses")
        } else if self.races > 0 {
            format!(
                "{PREFIX}{} over {} random worlds, {} of them raced by another write and {} by a database restart at every statement",
                self.function,
                self.worlds + self.restarts,
                self.races,
                self.restarts
            )
        } else {
            format!("{PREFIX}{} over {} random worlds", self.function, self.worlds)
        }
    }
}

/// The worlds' seed: the run's, and the hidden inputs' when the run draws them per
/// submission (`HiddenInputs::Variant`), so that two submissions meet other worlds.
pub fn seed_of(run_seed: u64, variant: Option<u64>) -> u64 {
    mix(run_seed, variant.map_or(0x6469_6666, |v| mix(v, 36)))
}

/// A world: a unit case with its `cfg`, and the other worker's claim that races it.
#[derive(Clone, Debug)]
pub struct World {
    pub case: UnitCase,
    pub race: Option<Racer>,
}

/// Every world of `piece` for `seed`, in order (the ones that race come last, then
/// the ones restarted at every statement).
pub fn worlds(piece: &Piece, seed: u64) -> Vec<World> {
    if piece.function == "merge" {
        return merge_worlds();
    }
    let mut g = SeededRng::new(mix(seed, piece.function.len() as u64 * 7919 + piece.worlds as u64));
    let mut all: Vec<World> = (0..piece.worlds)
        .map(|i| {
            let race = i >= piece.worlds - piece.races;
            draw(piece.function, &mut g, race, i)
        })
        .collect();
    all.extend((0..piece.restarts).map(|j| restarted(piece.function, &mut g, j)));
    all
}

/// Restart world `j` of a piece: a plain world on a path that writes (a step that
/// settles, a holder's write), its own faults left out, restarted at each statement.
fn restarted(function: &str, g: &mut SeededRng, j: usize) -> World {
    // deliver_step's paths (`draw`): a first send accepted, a lookup found, a status
    // already past sending, a lookup not found and a send; the fenced pieces' holders.
    let k = match function {
        "deliver_step" => [1, 2, 5, 3][j % 4],
        _ => j % 2,
    };
    let mut w = draw(function, g, false, k);
    let s = &mut w.case.script;
    (s.all_or_nothing, s.db_down, s.kill_after_send) = (false, false, false);
    w.race = Some(Racer::Restart);
    w
}

/// Runs one world against `learner`.
pub fn check(learner: &mut dyn Backend, w: &World) -> TestReport {
    match &w.race {
        Some(other) => run_case_interleaved(learner, &w.case, other),
        None => run_case(learner, &w.case),
    }
}

/// The differential test of one piece.
pub fn run(learner: &mut dyn Backend, piece: &Piece, seed: u64, replay: &str) -> TestReport {
    let name = piece.test_name();
    let all = worlds(piece, seed);
    for (i, w) in all.iter().enumerate() {
        let r = check(learner, w);
        match r.status {
            TestStatus::Pass => continue,
            TestStatus::Fail => {
                let (small, report, steps) = shrink(learner, w.clone(), r);
                return finish(
                    &name,
                    report,
                    &format!(
                        "{} differs from the reference design in random world {} of {} (worlds seed {seed}).\nSmallest failing world found ({steps} simplifications), as a case file would write it:\n{}",
                        piece.function,
                        i + 1,
                        all.len(),
                        describe(&small)
                    ),
                    replay,
                );
            }
            TestStatus::Error | TestStatus::Timeout => {
                return finish(
                    &name,
                    r,
                    &format!(
                        "{} failed in random world {} of {} (worlds seed {seed}):\n{}",
                        piece.function,
                        i + 1,
                        all.len(),
                        describe(w)
                    ),
                    replay,
                );
            }
        }
    }
    let mut t = TestReport::new(name, TestKind::Hidden, TestStatus::Pass, None);
    t.output = None;
    t
}

fn finish(name: &str, mut r: TestReport, head: &str, replay: &str) -> TestReport {
    r.name = name.to_string();
    r.kind = TestKind::Hidden;
    r.trace.clear();
    r.message = Some(format!(
        "{head}\n\n{}\n\nReplay: {replay}",
        r.message.as_deref().unwrap_or("")
    ));
    r
}

fn shrink(learner: &mut dyn Backend, w: World, failure: TestReport) -> (World, TestReport, usize) {
    crate::shrink::shrink(w, failure, SHRINK_BUDGET, simpler, |candidate| {
        let r = check(learner, candidate);
        (r.status == TestStatus::Fail).then_some(r)
    })
}

// ---- Drawing worlds ---------------------------------------------------------------

/// Names of different lengths that sort differently by length and by bytes.
const STORE_NAMES: [&str; 10] = [
    "a", "b", "z", "ab", "ba", "bb", "aab", "store-1", "store-10", "store-2",
];
const WORKERS: [&str; 4] = ["w1", "w2", "w3", "w10"];
const STATUSES: [&str; 5] = ["sending", "accepted", "sent", "delivered", "failed"];
const PROVIDER_STATUSES: [Status; 4] = [Status::Accepted, Status::Sent, Status::Delivered, Status::Failed];

fn draw_cfg(g: &mut SeededRng) -> Config {
    if g.chance(0.15) {
        return Config::default();
    }
    Config {
        lease_ms: *g.pick(&[1, 40, 500, 2_500, 10_000, 30_000, 45_000, 120_000]),
        in_flight_cap: 1 + g.below(6) as u32,
        recheck_ms: *g.pick(&[1, 7, 250, 1_000, 1_500, 4_000, 60_000]),
    }
}

/// A claimed action's lease as a claim at or before `now_ms` set it: ended long
/// ago, a moment ago, exactly now, a moment from now, or live for a while.
fn lease_until(g: &mut SeededRng, cfg: &Config, now_ms: u64) -> u64 {
    let l = cfg.lease_ms as i64;
    let off = *g.pick(&[-2 * l - 7, -l, -1, 0, 0, 1, l / 2, l]);
    (now_ms as i64 + off).max(0) as u64
}

fn draw_tables(g: &mut SeededRng, cfg: &Config, now_ms: u64, actions: usize) -> Tables {
    let mut names: Vec<&str> = Vec::new();
    let k = 1 + g.below(4) as usize;
    while names.len() < k {
        let n = *g.pick(&STORE_NAMES);
        if !names.contains(&n) {
            names.push(n);
        }
    }
    // Few distinct times, so that ties between stores are common.
    let served = [0, 0, now_ms.saturating_sub(1_000), now_ms.saturating_sub(1_000), now_ms.saturating_sub(20_000), now_ms];
    let mut t = Tables {
        stores: names
            .iter()
            .map(|n| super::sim::StoreState {
                store: (*n).to_string(),
                last_served_ms: *g.pick(&served),
            })
            .collect(),
        ..Tables::default()
    };
    let mut ids: Vec<u64> = Vec::new();
    while ids.len() < actions {
        let id = 1 + g.below(40);
        if !ids.contains(&id) {
            ids.push(id);
        }
    }
    for id in ids {
        let store = *g.pick(&names);
        let roll = g.below(100);
        let created_ms = now_ms.saturating_sub(g.below(100_000));
        let (state, owner, epoch, lease) = if roll < 45 {
            ("pending", None, 0, 0)
        } else if roll < 80 {
            let owner = *g.pick(&WORKERS);
            ("claimed", Some(owner), 1 + g.below(4) as i64, lease_until(g, cfg, now_ms))
        } else {
            let owner = *g.pick(&WORKERS);
            ("dispatched", Some(owner), 1 + g.below(4) as i64, now_ms.saturating_sub(g.below(60_000)))
        };
        t.actions.push(created(action(id, store, state, owner, epoch, lease), created_ms));
        let outbox = match state {
            "dispatched" => true,
            "claimed" => g.chance(0.6),
            _ => false,
        };
        if outbox {
            add_outbox(g, &mut t, id, state == "dispatched");
        }
    }
    for _ in 0..g.below(3) {
        let e = format!("evt-{}", 1 + g.below(30));
        if !t.webhook_events.contains(&e) {
            t.webhook_events.push(e);
        }
    }
    t.actions.sort_by_key(|a| a.id);
    t.outbox.sort_by_key(|o| o.action_id);
    t
}

/// An outbox row for action `id`, as the design leaves one: `sending` with the
/// attempts counted so far, or a status the provider reported (after at least one
/// attempt, with its message id).
fn add_outbox(g: &mut SeededRng, t: &mut Tables, id: u64, past_sending: bool) {
    t.outbox.retain(|o| o.action_id != id);
    let status = if past_sending || g.chance(0.4) {
        *g.pick(&STATUSES[1..])
    } else {
        "sending"
    };
    let mut row = super::units::outbox(id, 0, status);
    if g.chance(0.1) {
        row.idem_key = format!("key-{id}-old");
    }
    if status == "sending" {
        row.attempts = g.below(4) as i64;
    } else {
        row.attempts = 1 + g.below(3) as i64;
        row.message_id = Some(format!("msg-{id}"));
        if status != "accepted" {
            row.events_applied = g.below(3) as i64;
        }
    }
    t.outbox.push(row);
}

/// A caller of action `i`, as the design can call a piece: the claim's holder, or a
/// worker whose claim was an earlier epoch of this action (a zombie, or the same
/// worker after it lost the action and claimed it again). An epoch names one claim
/// and so one owner (lab.md), so no caller holds the current epoch under another
/// name, or an epoch the action has not reached. A `dispatched` action's own
/// holder calls only where `holder_of_dispatched` (lab.md names the answer for
/// write_intent and heartbeat: `claimed` is part of their fence).
fn caller(
    g: &mut SeededRng,
    t: &mut Tables,
    i: usize,
    holder: f64,
    holder_of_dispatched: bool,
) -> (String, i64) {
    caller_with(g, t, i, holder, holder_of_dispatched, 0.3)
}

/// `caller`, where the fenced caller holds another action at its epoch number with
/// chance `elsewhere`.
fn caller_with(
    g: &mut SeededRng,
    t: &mut Tables,
    i: usize,
    holder: f64,
    holder_of_dispatched: bool,
    elsewhere: f64,
) -> (String, i64) {
    let a = &mut t.actions[i];
    let owner = a.owner.clone().unwrap_or_else(|| "w1".into());
    let may_hold = a.state == "claimed" || holder_of_dispatched;
    if may_hold && g.chance(holder) {
        return (owner, a.epoch);
    }
    if a.epoch < 2 {
        // An earlier claim needs an earlier epoch.
        a.epoch = 2 + g.below(3) as i64;
    }
    let epoch = 1 + g.below(a.epoch as u64 - 1) as i64;
    let worker = if g.chance(0.4) {
        owner
    } else {
        (*g.pick(&WORKERS)).to_string()
    };
    // Now and then the same worker holds another action at that epoch number: a
    // fence must name the action as well as the epoch.
    if g.chance(elsewhere) {
        let id = t.actions[i].id;
        if let Some(b) = t.actions.iter_mut().find(|b| b.id != id && b.state == "claimed") {
            b.owner = Some(worker.clone());
            b.epoch = epoch;
        }
    }
    (worker, epoch)
}

/// A claimed action (most of the time) or a dispatched one, when the world has one.
fn target(g: &mut SeededRng, t: &mut Tables, cfg: &Config, now_ms: u64, dispatched: f64) -> usize {
    let done: Vec<usize> = (0..t.actions.len())
        .filter(|i| t.actions[*i].state == "dispatched")
        .collect();
    if !done.is_empty() && g.chance(dispatched) {
        return *g.pick(&done);
    }
    claimed_index(g, t, cfg, now_ms)
}

/// Makes sure the world has a claimed action and returns its index.
fn claimed_index(g: &mut SeededRng, t: &mut Tables, cfg: &Config, now_ms: u64) -> usize {
    let claimed: Vec<usize> = (0..t.actions.len())
        .filter(|i| t.actions[*i].state == "claimed")
        .collect();
    if !claimed.is_empty() {
        return *g.pick(&claimed);
    }
    let i = g.below(t.actions.len() as u64) as usize;
    let a = &mut t.actions[i];
    a.state = "claimed".into();
    a.owner = Some((*g.pick(&WORKERS)).to_string());
    a.epoch = 1 + g.below(4) as i64;
    a.lease_until_ms = lease_until(g, cfg, now_ms);
    let id = a.id;
    // A claimed action has no outbox row, or one past `sending` only after a send.
    if g.chance(0.6) {
        add_outbox(g, t, id, false);
    } else {
        t.outbox.retain(|o| o.action_id != id);
    }
    i
}

/// World `k` of a piece: `k` picks the path a step takes where chance alone could
/// miss one (`deliver_step`'s), so that every seed meets every path.
/// The action and caller of a fenced piece's world `k` (write_intent, heartbeat): by
/// path, so that every seed meets each: 0 and 1 the holder of a claimed action, 2 a
/// caller that lost its claim, 3 the holder of an action it already settled.
fn fenced_call(g: &mut SeededRng, t: &mut Tables, cfg: &Config, now_ms: u64, race: bool, k: usize) -> (usize, String, i64) {
    let path = if race { 0 } else { k % 4 };
    let i = match path {
        3 => target(g, t, cfg, now_ms, 1.0),
        2 => target(g, t, cfg, now_ms, 0.2),
        _ => claimed_index(g, t, cfg, now_ms),
    };
    let (worker, epoch) = match path {
        2 => caller(g, t, i, 0.0, false),
        3 if t.actions[i].state == "dispatched" => caller(g, t, i, 1.0, true),
        _ => {
            let a = &t.actions[i];
            (a.owner.clone().unwrap_or_default(), a.epoch)
        }
    };
    (i, worker, epoch)
}

fn draw(function: &str, g: &mut SeededRng, race: bool, k: usize) -> World {
    let cfg = draw_cfg(g);
    let now_ms = 500_000 + 1_000 * g.below(500) + *g.pick(&[0, 0, 1, 999]);
    let n = match function {
        "claim" => 2 + g.below(9) as usize,
        _ => 1 + g.below(5) as usize,
    };
    let mut t = draw_tables(g, &cfg, now_ms, n);
    let mut script = Script::default();
    let mut other = None;
    let call = match function {
        "claim" => {
            let worker = (*g.pick(&["w1", "w2", "w9"])).to_string();
            let call = Call::Claim { worker, now_ms };
            if race && k % 2 == 1 {
                // Half the races are for an action whose old holder's lease ran out.
                for a in t.actions.iter_mut().filter(|a| a.state == "pending") {
                    a.state = "claimed".into();
                    a.owner = Some((*g.pick(&WORKERS)).to_string());
                    a.epoch = 1 + g.below(3) as i64;
                    a.lease_until_ms = now_ms.saturating_sub(g.below(cfg.lease_ms + 1));
                }
            }
            if race {
                // The race that matters: for the action the claim would take.
                let probe = UnitCase {
                    name: WORLD,
                    kind: TestKind::Hidden,
                    rule: Rule::FairClaim,
                    setup: t.clone(),
                    call: call.clone(),
                    script: Script::default(),
                    cfg,
                };
                let picked = match super::units::reference_outcome(&probe) {
                    Ok(super::units::Outcome {
                        returned: Ok(Value::Tuple(v)),
                        ..
                    }) => match v.first() {
                        Some(Value::Int(id)) => u64::try_from(*id).ok(),
                        _ => None,
                    },
                    _ => None,
                };
                let target = picked
                    .and_then(|id| t.actions.iter().find(|a| a.id == id))
                    .or_else(|| t.actions.first());
                if let Some(a) = target {
                    // Another worker's claim of the same action. (The old holder's
                    // heartbeat or settle between the claim's read and its write is no
                    // race lab.md rules on: a compare-and-set on the epoch read is what
                    // it asks for, and neither write moves the epoch.)
                    other = Some(Racer::Claim(OtherClaim {
                        worker: "w-other".into(),
                        action_id: a.id,
                        epoch: a.epoch,
                        now_ms,
                    }));
                }
            } else {
                match g.below(100) {
                    0..25 => script.all_or_nothing = true,
                    25..30 => script.db_down = true,
                    _ => {}
                }
            }
            call
        }
        "write_intent" => {
            let (i, worker, epoch) = fenced_call(g, &mut t, &cfg, now_ms, race, k);
            let a = t.actions[i].clone();
            if race {
                other = Some(Racer::Claim(OtherClaim {
                    worker: "w-other".into(),
                    action_id: a.id,
                    epoch: a.epoch,
                    now_ms: now_ms.max(a.lease_until_ms),
                }));
            } else if g.chance(0.3) {
                script.all_or_nothing = true;
            }
            Call::WriteIntent {
                action_id: a.id,
                worker,
                epoch,
            }
        }
        "deliver_step" => {
            // Paths: 0 first send times out, 1 first send accepted, 2 lookup found,
            // 3 lookup not found then a send, 4 lookup times out, 5 a status already
            // past sending, 6 a caller that lost its claim, 7 a kill or a restart.
            let path = k % 8;
            let i = if race || path != 6 {
                claimed_index(g, &mut t, &cfg, now_ms)
            } else {
                target(g, &mut t, &cfg, now_ms, 0.3)
            };
            let id_of_target = t.actions[i].id;
            let (worker, epoch) = if race || path != 6 {
                let a = &t.actions[i];
                (a.owner.clone().unwrap_or_default(), a.epoch)
            } else {
                // The worker may hold another action at the same epoch number: its
                // fence must name this one.
                if !t.actions.iter().any(|b| b.id != t.actions[i].id && b.state == "claimed") {
                    let id = 100 + g.below(9);
                    let store = t.actions[i].store.clone();
                    t.actions.push(action(id, &store, "claimed", Some("w1"), 1, lease_until(g, &cfg, now_ms)));
                    t.actions.sort_by_key(|a| a.id);
                }
                let i = t.actions.iter().position(|b| b.id == id_of_target).unwrap_or(i);
                caller_with(g, &mut t, i, 0.0, false, 0.8)
            };
            // Rows may have been added before it: its index again.
            let i = t.actions.iter().position(|b| b.id == id_of_target).unwrap_or(i);
            let a = t.actions[i].clone();
            // A step follows a write_intent that returned a key: the row is there.
            if !t.outbox.iter().any(|o| o.action_id == a.id) {
                add_outbox(g, &mut t, a.id, a.state == "dispatched");
                t.outbox.sort_by_key(|o| o.action_id);
            }
            if let Some(o) = t.outbox.iter_mut().find(|o| o.action_id == a.id) {
                if path == 5 {
                    if o.status == "sending" {
                        o.status = (*g.pick(&STATUSES[1..])).into();
                        o.attempts = o.attempts.max(1);
                        o.message_id = Some(format!("msg-{}", a.id));
                    }
                } else if path != 6 {
                    o.status = "sending".into();
                    o.message_id = None;
                    o.events_applied = 0;
                    o.attempts = match path {
                        0 | 1 => 0,
                        2..=4 => 1 + g.below(3) as i64,
                        _ => o.attempts,
                    };
                }
            }
            let accepted = SendAnswer::Accepted {
                message_id: format!("msg-{}-{}", a.id, 1 + g.below(9)),
            };
            script.sends = vec![match path {
                0 => SendAnswer::Timeout,
                1 => accepted,
                _ if g.chance(0.55) => accepted,
                _ => SendAnswer::Timeout,
            }];
            let found = LookupAnswer::Found {
                message_id: format!("msg-{}", a.id),
                status: *g.pick(&PROVIDER_STATUSES),
            };
            let roll = g.below(100);
            script.lookups = vec![match path {
                2 => found,
                3 => LookupAnswer::NotFound,
                4 => LookupAnswer::Timeout,
                _ if roll < 40 => found,
                _ if roll < 75 => LookupAnswer::NotFound,
                _ => LookupAnswer::Timeout,
            }];
            if race && k % 2 == 0 {
                // A webhook for this action's key lands during the step: the settle
                // must merge forward over what it wrote.
                if let Some(o) = t.outbox.iter_mut().find(|o| o.action_id == a.id) {
                    // The first send, accepted, then the settle: the webhook can land
                    // between the attempt's commit and the settle.
                    o.status = "sending".into();
                    o.message_id = None;
                    o.events_applied = 0;
                    o.attempts = 0;
                    let key = o.idem_key.clone();
                    other = Some(Racer::Write(OtherWrite::Webhook(Webhook {
                        event_id: format!("evt-{}", 91 + g.below(9)),
                        key,
                        message_id: format!("msg-{}", a.id),
                        // Ahead of what the step records: a settle that writes its
                        // own status over the row's shows.
                        status: *g.pick(&PROVIDER_STATUSES[1..]),
                        due_s: 0.0,
                    })));
                }
                script.sends = vec![SendAnswer::Accepted {
                    message_id: format!("msg-{}", a.id),
                }];
            } else if race {
                other = Some(Racer::Claim(OtherClaim {
                    worker: "w-other".into(),
                    action_id: a.id,
                    epoch: a.epoch,
                    now_ms: now_ms.max(a.lease_until_ms),
                }));
            } else if path == 7 {
                if g.chance(0.6) {
                    script.kill_after_send = true;
                } else {
                    script.db_down = true;
                }
            }
            Call::DeliverStep {
                action_id: a.id,
                worker,
                epoch,
                now_ms,
            }
        }
        "on_webhook" => {
            if t.outbox.is_empty() {
                let i = claimed_index(g, &mut t, &cfg, now_ms);
                let id = t.actions[i].id;
                add_outbox(g, &mut t, id, false);
            }
            let row = g.pick(&t.outbox).clone();
            let event_id = if !t.webhook_events.is_empty() && g.chance(0.25) {
                g.pick(&t.webhook_events).clone()
            } else {
                let mut e;
                loop {
                    e = format!("evt-{}", 31 + g.below(60));
                    if !t.webhook_events.contains(&e) {
                        break;
                    }
                }
                e
            };
            let status = *g.pick(&PROVIDER_STATUSES);
            let message_id = row
                .message_id
                .clone()
                .unwrap_or_else(|| format!("msg-{}", row.action_id));
            if race {
                // The same event delivered twice at once, or another event for the key.
                let (event_id, status) = if g.chance(0.5) {
                    (event_id.clone(), status)
                } else {
                    (format!("evt-{}", 91 + g.below(9)), *g.pick(&PROVIDER_STATUSES))
                };
                other = Some(Racer::Write(OtherWrite::Webhook(Webhook {
                    event_id,
                    key: row.idem_key.clone(),
                    message_id: message_id.clone(),
                    status,
                    due_s: 0.0,
                })));
            } else {
                match g.below(100) {
                    0..30 => script.all_or_nothing = true,
                    30..34 => script.db_down = true,
                    _ => {}
                }
            }
            Call::OnWebhook {
                event: Webhook {
                    event_id,
                    key: row.idem_key.clone(),
                    message_id,
                    status,
                    due_s: 0.0,
                },
            }
        }
        "heartbeat" => {
            let (i, worker, epoch) = fenced_call(g, &mut t, &cfg, now_ms, race, k);
            let a = t.actions[i].clone();
            if race {
                other = Some(Racer::Claim(OtherClaim {
                    worker: "w-other".into(),
                    action_id: a.id,
                    epoch: a.epoch,
                    now_ms: now_ms.max(a.lease_until_ms),
                }));
            } else {
                match g.below(100) {
                    0..20 => script.all_or_nothing = true,
                    20..24 => script.db_down = true,
                    _ => {}
                }
            }
            Call::Heartbeat {
                action_id: a.id,
                worker,
                epoch,
                now_ms,
            }
        }
        other => unreachable!("`{other}` is not a courier piece"),
    };
    let mut case = UnitCase {
        name: WORLD,
        kind: TestKind::Hidden,
        rule: Rule::FairClaim,
        setup: t,
        call,
        script,
        cfg,
    };
    case.rule = rule_for(&case, &other);
    World { case, race: other }
}

/// The rule a world holds the piece to: the one its failure names.
fn rule_for(case: &UnitCase, race: &Option<Racer>) -> Rule {
    let held = |id: u64, worker: &str, epoch: i64| {
        case.setup
            .actions
            .iter()
            .any(|a| a.id == id && a.held_by(worker, epoch))
    };
    match &case.call {
        Call::Claim { .. } => Rule::FairClaim,
        Call::Merge { .. } => Rule::MergeForward,
        Call::OnWebhook { .. } => Rule::WebhookOnce,
        Call::Heartbeat { .. } => Rule::Heartbeat,
        Call::WriteIntent {
            action_id,
            worker,
            epoch,
        } => {
            if held(*action_id, worker, *epoch) && !matches!(race, Some(Racer::Claim(_))) {
                Rule::OneKey
            } else {
                Rule::Fence
            }
        }
        Call::DeliverStep {
            action_id,
            worker,
            epoch,
            ..
        } => {
            let status = case
                .setup
                .outbox
                .iter()
                .find(|o| o.action_id == *action_id)
                .map(|o| o.status.as_str());
            if !held(*action_id, worker, *epoch) || matches!(race, Some(Racer::Claim(_))) {
                Rule::Fence
            } else if matches!(race, Some(Racer::Write(OtherWrite::Webhook(_)))) {
                Rule::MergeForward
            } else if status != Some("sending") {
                Rule::Settle
            } else {
                Rule::LookupBeforeResend
            }
        }
    }
}

fn merge_worlds() -> Vec<World> {
    let mut out = Vec::new();
    for current in STATUSES {
        for reported in STATUSES {
            out.push(World {
                case: UnitCase {
                    name: WORLD,
                    kind: TestKind::Hidden,
                    rule: Rule::MergeForward,
                    setup: Tables::default(),
                    call: Call::Merge {
                        current: current.into(),
                        reported: reported.into(),
                    },
                    script: Script::default(),
                    cfg: Config::default(),
                },
                race: None,
            });
        }
    }
    out
}

// ---- Shrinking ----------------------------------------------------------------------

/// The action the call is about (its target, the event's row, the race's).
fn kept_ids(w: &World) -> Vec<u64> {
    let mut ids = Vec::new();
    match &w.case.call {
        Call::WriteIntent { action_id, .. }
        | Call::DeliverStep { action_id, .. }
        | Call::Heartbeat { action_id, .. } => ids.push(*action_id),
        Call::OnWebhook { event } => ids.extend(
            w.case
                .setup
                .outbox
                .iter()
                .filter(|o| o.idem_key == event.key)
                .map(|o| o.action_id),
        ),
        Call::Claim { .. } | Call::Merge { .. } => {}
    }
    if let Some(Racer::Claim(o)) = &w.race {
        ids.push(o.action_id);
    }
    ids
}

/// Simpler worlds, each one step from `w`: a row fewer, a `cfg` field back to its
/// default, a fault fewer. Each keeps the world one the design can reach.
fn simpler(w: &World) -> Vec<World> {
    let mut out = Vec::new();
    let keep = kept_ids(w);
    let t = &w.case.setup;
    let with = |out: &mut Vec<World>, f: &dyn Fn(&mut World)| {
        let mut c = w.clone();
        f(&mut c);
        out.push(c);
    };
    for a in &t.actions {
        if keep.contains(&a.id) {
            continue;
        }
        let id = a.id;
        with(&mut out, &|c| {
            c.case.setup.actions.retain(|x| x.id != id);
            c.case.setup.outbox.retain(|o| o.action_id != id);
        });
    }
    for s in &t.stores {
        if t.actions.iter().any(|a| a.store == s.store) {
            if s.last_served_ms != 0 {
                let name = s.store.clone();
                with(&mut out, &|c| {
                    for x in &mut c.case.setup.stores {
                        if x.store == name {
                            x.last_served_ms = 0;
                        }
                    }
                });
            }
            continue;
        }
        let name = s.store.clone();
        with(&mut out, &|c| c.case.setup.stores.retain(|x| x.store != name));
    }
    let event = match &w.case.call {
        Call::OnWebhook { event } => Some(event.event_id.clone()),
        _ => None,
    };
    for e in &t.webhook_events {
        if Some(e) == event.as_ref() {
            continue;
        }
        let e = e.clone();
        with(&mut out, &|c| c.case.setup.webhook_events.retain(|x| *x != e));
    }
    let d = Config::default();
    if w.case.cfg.lease_ms != d.lease_ms && !matches!(w.race, Some(Racer::Claim(_))) {
        with(&mut out, &|c| c.case.cfg.lease_ms = d.lease_ms);
    }
    if w.case.cfg.in_flight_cap != d.in_flight_cap {
        with(&mut out, &|c| c.case.cfg.in_flight_cap = d.in_flight_cap);
    }
    if w.case.cfg.recheck_ms != d.recheck_ms {
        with(&mut out, &|c| c.case.cfg.recheck_ms = d.recheck_ms);
    }
    let s = &w.case.script;
    if s.all_or_nothing {
        with(&mut out, &|c| c.case.script.all_or_nothing = false);
    }
    if s.kill_after_send {
        with(&mut out, &|c| c.case.script.kill_after_send = false);
    }
    if s.db_down {
        with(&mut out, &|c| c.case.script.db_down = false);
    }
    if w.race.is_some() {
        with(&mut out, &|c| {
            c.race = None;
            c.case.rule = rule_for(&c.case, &None);
        });
    }
    out
}

// ---- Describing a world --------------------------------------------------------------

/// The world as a case file writes it (`hidden-tests/README.md`).
pub fn describe(w: &World) -> String {
    let c = &w.case;
    let mut s = String::new();
    let q = |v: &str| format!("{v:?}");
    let _ = writeln!(
        s,
        "cfg = {{ lease_ms = {}, in_flight_cap = {}, recheck_ms = {} }}",
        c.cfg.lease_ms, c.cfg.in_flight_cap, c.cfg.recheck_ms
    );
    let rows = |items: Vec<String>| {
        if items.is_empty() {
            "[]".to_string()
        } else {
            format!("[\n  {},\n]", items.join(",\n  "))
        }
    };
    // A table's rows, one line each; a table with none is left out.
    let mut table = |name: &str, items: Vec<String>| {
        if !items.is_empty() {
            let _ = writeln!(s, "{name} = {}", rows(items));
        }
    };
    table(
        "stores",
        c.setup
            .stores
            .iter()
            .map(|x| format!("{{ store = {}, last_served_ms = {} }}", q(&x.store), x.last_served_ms))
            .collect(),
    );
    table(
        "actions",
        c.setup
            .actions
            .iter()
            .map(|a| {
                let owner = a
                    .owner
                    .as_ref()
                    .map_or(String::new(), |o| format!(", owner = {}", q(o)));
                format!(
                    "{{ id = {}, store = {}, state = {}{owner}, epoch = {}, lease_until_ms = {}, created_ms = {} }}",
                    a.id,
                    q(&a.store),
                    q(&a.state),
                    a.epoch,
                    a.lease_until_ms,
                    a.created_ms
                )
            })
            .collect(),
    );
    table(
        "outbox",
        c.setup
            .outbox
            .iter()
            .map(|o| {
                let mid = o
                    .message_id
                    .as_ref()
                    .map_or(String::new(), |m| format!(", message_id = {}", q(m)));
                format!(
                    "{{ action_id = {}, idem_key = {}, attempts = {}, status = {}{mid}, events_applied = {} }}",
                    o.action_id,
                    q(&o.idem_key),
                    o.attempts,
                    q(&o.status),
                    o.events_applied
                )
            })
            .collect(),
    );
    if !c.setup.webhook_events.is_empty() {
        let _ = writeln!(
            s,
            "webhook_events = [{}]",
            c.setup.webhook_events.iter().map(|e| q(e)).collect::<Vec<_>>().join(", ")
        );
    }
    let call = match &c.call {
        Call::Claim { worker, now_ms } => {
            format!("{{ fn = \"claim\", worker = {}, now_ms = {now_ms} }}", q(worker))
        }
        Call::WriteIntent {
            action_id,
            worker,
            epoch,
        } => format!(
            "{{ fn = \"write_intent\", action_id = {action_id}, worker = {}, epoch = {epoch} }}",
            q(worker)
        ),
        Call::DeliverStep {
            action_id,
            worker,
            epoch,
            now_ms,
        } => format!(
            "{{ fn = \"deliver_step\", action_id = {action_id}, worker = {}, epoch = {epoch}, now_ms = {now_ms} }}",
            q(worker)
        ),
        Call::Heartbeat {
            action_id,
            worker,
            epoch,
            now_ms,
        } => format!(
            "{{ fn = \"heartbeat\", action_id = {action_id}, worker = {}, epoch = {epoch}, now_ms = {now_ms} }}",
            q(worker)
        ),
        Call::OnWebhook { event } => format!(
            "{{ fn = \"on_webhook\", event_id = {}, key = {}, message_id = {}, status = {} }}",
            q(&event.event_id),
            q(&event.key),
            q(&event.message_id),
            q(status_name(event.status))
        ),
        Call::Merge { current, reported } => format!(
            "{{ fn = \"merge\", current = {}, reported = {} }}",
            q(current),
            q(reported)
        ),
    };
    let _ = writeln!(s, "call = {call}");
    let sc = &c.script;
    if matches!(c.call, Call::DeliverStep { .. }) {
        let sends: Vec<String> = sc
            .sends
            .iter()
            .map(|a| match a {
                SendAnswer::Accepted { message_id } => {
                    format!("{{ answer = \"accepted\", message_id = {} }}", q(message_id))
                }
                SendAnswer::Timeout => "{ answer = \"timeout\" }".into(),
            })
            .collect();
        let lookups: Vec<String> = sc
            .lookups
            .iter()
            .map(|a| match a {
                LookupAnswer::Found { message_id, status } => format!(
                    "{{ answer = \"found\", message_id = {}, status = {} }}",
                    q(message_id),
                    q(status_name(*status))
                ),
                LookupAnswer::NotFound => "{ answer = \"not-found\" }".into(),
                LookupAnswer::Timeout => "{ answer = \"timeout\" }".into(),
            })
            .collect();
        let _ = writeln!(s, "provider.sends = [{}]", sends.join(", "));
        let _ = writeln!(s, "provider.lookups = [{}]", lookups.join(", "));
    }
    if sc.kill_after_send {
        let _ = writeln!(s, "world.kill_after_send = true");
    }
    if sc.db_down {
        let _ = writeln!(s, "world.db_down = true");
    }
    if sc.all_or_nothing {
        let _ = writeln!(s, "all_or_nothing = true");
    }
    match &w.race {
        Some(Racer::Claim(o)) => {
            let _ = writeln!(
                s,
                "# raced at each statement in turn by: interleave = {{ after_statement = N, claim = {{ worker = {}, action_id = {}, epoch = {}, now_ms = {} }} }}",
                q(&o.worker),
                o.action_id,
                o.epoch,
                o.now_ms
            );
        }
        Some(Racer::Write(OtherWrite::Webhook(e))) => {
            let _ = writeln!(
                s,
                "# raced at each statement in turn by a webhook handled on another connection: {{ event_id = {}, key = {}, message_id = {}, status = {} }}",
                q(&e.event_id),
                q(&e.key),
                q(&e.message_id),
                q(status_name(e.status))
            );
        }
        Some(Racer::Restart) => {
            let _ = writeln!(
                s,
                "# restarted at each statement in turn: the database restarts at statement N (that statement raises sqlite3.OperationalError, the open transaction is rolled back, the statements after it find the database up)"
            );
        }
        None => {}
    }
    s
}

/// The reference design passes every world of every piece (a check the tests run
/// over many seeds: a world it fails would fail every learner).
pub fn reference_passes(seed: u64) -> Result<(), String> {
    for piece in &PIECES {
        for (i, w) in worlds(piece, seed).iter().enumerate() {
            let r = check(&mut RefBackend::new(None), w);
            if r.status != TestStatus::Pass {
                return Err(format!(
                    "{} world {i} (seed {seed}):\n{}\n{}",
                    piece.function,
                    describe(w),
                    r.message.unwrap_or_default()
                ));
            }
        }
    }
    Ok(())
}
