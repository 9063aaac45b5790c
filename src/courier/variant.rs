//! Hidden inputs drawn per submission for the courier lab (issue 28; lab 1's
//! `deliver_once/variant.rs` is the model): a seeded transform of each hidden unit
//! case that keeps the rule it tests and changes every input a learner could learn
//! from one report and hard-code for the next.
//!
//! What a variant changes, consistently wherever the value appears in the case (its
//! tables, its call, its scripted provider):
//!
//! - action ids, each to a fresh one **in the same order** ("its claimable action
//!   with the smallest id" is a rule), and with them every key of the contract's
//!   form (`action-<id>`, `units::outbox`'s); any other idempotency key to a fresh
//!   one;
//! - store names, to fresh ones **in the same order** (a tie between stores goes to
//!   the smaller name);
//! - worker names (the other worker's of an `interleave` too), message ids, event ids, phones and bodies, each distinct one to a
//!   distinct fresh one;
//! - the clock: every time (`now_ms`, the other worker's too, `lease_until_ms`,
//!   `last_served_ms`, `created_ms`, a webhook's `due_s`) moves by one whole number of seconds, except
//!   0, which stays 0 (`lease_until_ms = 0` is "never claimed", `last_served_ms = 0`
//!   "never served", the reference's value for a store without a row). The map is
//!   strictly increasing, so every comparison between two times of a case (a lease
//!   against now, one store's turn against another's) and every boundary is what it
//!   was, and `now + lease_ms` is the moved time of the fixed case's `now + lease_ms`.
//!
//! What it keeps, because it is the rule a case tests: states, epochs (a fence is an
//! epoch compared with the row's; a claim's is the row's plus one), attempts,
//! statuses, `events_applied`, the provider's answers, the kills, the database's
//! restart, `all_or_nothing`, the statement an `interleave` commits after, `cfg`, and the merge cases, whose two statuses are all
//! their input (a merge case's variant is the case itself).
//!
//! Expected behaviour is the reference's, from the variant's own tables, at grading
//! time, as for every unit case (`units::run_case`): a variant needs no expectation
//! rewritten (the case files' `expect` tables are not compiled in).
//!
//! Every field of a case is named below (`Values` and the walk over a case): a field
//! added to `UnitCase`, `Tables`' rows, `Call`, `Webhook`, `Script` or the provider's
//! answers does not compile here until it says which kind of value it holds, and
//! `tests/courier_variants.rs` holds every hidden case's variants to the fixed case's
//! meaning (the reference does the same, renamed and moved in time).
//!
//! The chaos and fairness runs are example tests (their rows and tables are shown to
//! the learner, and their seed is the run's, printed in every report): a variant does
//! not touch them.

use super::provider::{LookupAnswer, SendAnswer, Webhook};
use super::sim::{ActionState, Call, OutboxState, Script, StoreState, Tables};
use super::step_world::{Interleave, OtherClaim, OtherWrite};
use super::units::{self, UnitCase};
use crate::report::TestKind;
use crate::rng::{mix, SeededRng};

/// Fresh action ids are below 2^31 (any 32-bit path stays safe) and far above the
/// case files' own.
const ID_MIN: u64 = 1_000_000;
const ID_MAX: u64 = 1_000_000_000;
/// The clock moves by a whole number of seconds from here, plus up to `OFFSET_SPAN_S`:
/// times look like Unix time in ms (2017 on), far above any case file's, and stay
/// exact everywhere (below 2^53).
const OFFSET_MIN_S: u64 = 1_500_000_000;
const OFFSET_SPAN_S: u64 = 300_000_000;
const STORE_WORDS: [&str; 8] = [
    "bakery", "pharmacy", "florist", "grocer", "deli", "bookshop", "kiosk", "market",
];
const WORKER_WORDS: [&str; 4] = ["worker", "courier", "rider", "dispatcher"];
const BODY_WHATS: [&str; 6] = [
    "Your order",
    "Parcel",
    "Your booking",
    "Delivery",
    "Your refund",
    "Shipment",
];
const BODY_EVENTS: [&str; 6] = [
    "has shipped",
    "is out for delivery",
    "was delivered",
    "is ready for pickup",
    "is delayed",
    "was processed",
];

/// Each kind of value a unit case holds. The walk over a case (`tables`, `call`,
/// `script`) asks for each field by its kind; the values a variant keeps it copies
/// itself, saying so.
trait Values {
    fn id(&mut self, id: u64) -> u64;
    fn store(&mut self, store: &str) -> String;
    fn worker(&mut self, worker: &str) -> String;
    /// An idempotency key (`outbox.idem_key`, a webhook's key).
    fn key(&mut self, key: &str) -> String;
    fn message_id(&mut self, message_id: &str) -> String;
    fn event_id(&mut self, event_id: &str) -> String;
    fn phone(&mut self, phone: &str) -> String;
    fn body(&mut self, body: &str) -> String;
    fn time_ms(&mut self, t_ms: u64) -> u64;
    fn time_s(&mut self, t_s: f64) -> f64;
}

fn tables(t: &Tables, v: &mut impl Values) -> Tables {
    let Tables {
        actions,
        stores,
        outbox,
        webhook_events,
    } = t;
    Tables {
        actions: actions.iter().map(|a| action(a, v)).collect(),
        stores: stores
            .iter()
            .map(|s| {
                let StoreState {
                    store,
                    last_served_ms,
                } = s;
                StoreState {
                    store: v.store(store),
                    last_served_ms: v.time_ms(*last_served_ms),
                }
            })
            .collect(),
        outbox: outbox.iter().map(|o| outbox_row(o, v)).collect(),
        webhook_events: webhook_events.iter().map(|e| v.event_id(e)).collect(),
    }
}

fn action(a: &ActionState, v: &mut impl Values) -> ActionState {
    let ActionState {
        id,
        store,
        phone,
        body,
        created_ms,
        state,
        owner,
        epoch,
        lease_until_ms,
    } = a;
    ActionState {
        id: v.id(*id),
        store: v.store(store),
        phone: v.phone(phone),
        body: v.body(body),
        created_ms: v.time_ms(*created_ms),
        state: state.clone(),
        owner: owner.as_deref().map(|w| v.worker(w)),
        epoch: *epoch,
        lease_until_ms: v.time_ms(*lease_until_ms),
    }
}

fn outbox_row(o: &OutboxState, v: &mut impl Values) -> OutboxState {
    let OutboxState {
        action_id,
        idem_key,
        attempts,
        status,
        message_id,
        events_applied,
    } = o;
    OutboxState {
        action_id: v.id(*action_id),
        idem_key: v.key(idem_key),
        attempts: *attempts,
        status: status.clone(),
        message_id: message_id.as_deref().map(|m| v.message_id(m)),
        events_applied: *events_applied,
    }
}

fn webhook(w: &Webhook, v: &mut impl Values) -> Webhook {
    let Webhook {
        event_id,
        key,
        message_id,
        status,
        due_s,
    } = w;
    Webhook {
        event_id: v.event_id(event_id),
        key: v.key(key),
        message_id: v.message_id(message_id),
        status: *status,
        due_s: v.time_s(*due_s),
    }
}

fn call(c: &Call, v: &mut impl Values) -> Call {
    match c {
        Call::Claim { worker, now_ms } => Call::Claim {
            worker: v.worker(worker),
            now_ms: v.time_ms(*now_ms),
        },
        Call::WriteIntent {
            action_id,
            worker,
            epoch,
        } => Call::WriteIntent {
            action_id: v.id(*action_id),
            worker: v.worker(worker),
            epoch: *epoch,
        },
        Call::DeliverStep {
            action_id,
            worker,
            epoch,
            now_ms,
        } => Call::DeliverStep {
            action_id: v.id(*action_id),
            worker: v.worker(worker),
            epoch: *epoch,
            now_ms: v.time_ms(*now_ms),
        },
        Call::OnWebhook { event } => Call::OnWebhook {
            event: webhook(event, v),
        },
        // Two statuses: the whole rule.
        Call::Merge { current, reported } => Call::Merge {
            current: current.clone(),
            reported: reported.clone(),
        },
        Call::Heartbeat {
            action_id,
            worker,
            epoch,
            now_ms,
        } => Call::Heartbeat {
            action_id: v.id(*action_id),
            worker: v.worker(worker),
            epoch: *epoch,
            now_ms: v.time_ms(*now_ms),
        },
    }
}

fn script(s: &Script, v: &mut impl Values) -> Script {
    let Script {
        kill_at_statement,
        kill_after_send,
        db_down,
        restart_at_statement,
        sends,
        lookups,
        all_or_nothing,
        interleave,
        write_during,
    } = s;
    Script {
        kill_at_statement: *kill_at_statement,
        kill_after_send: *kill_after_send,
        db_down: *db_down,
        restart_at_statement: *restart_at_statement,
        sends: sends
            .iter()
            .map(|a| match a {
                SendAnswer::Accepted { message_id } => SendAnswer::Accepted {
                    message_id: v.message_id(message_id),
                },
                SendAnswer::Timeout => SendAnswer::Timeout,
            })
            .collect(),
        lookups: lookups
            .iter()
            .map(|a| match a {
                LookupAnswer::Found { message_id, status } => LookupAnswer::Found {
                    message_id: v.message_id(message_id),
                    status: *status,
                },
                LookupAnswer::NotFound => LookupAnswer::NotFound,
                LookupAnswer::Timeout => LookupAnswer::Timeout,
            })
            .collect(),
        all_or_nothing: *all_or_nothing,
        interleave: interleave.as_ref().map(|i| {
            let Interleave {
                after_statement,
                claim,
            } = i;
            let OtherClaim {
                worker,
                action_id,
                epoch,
                now_ms,
            } = claim;
            Interleave {
                // Where in the call it commits: the rule.
                after_statement: *after_statement,
                claim: OtherClaim {
                    worker: v.worker(worker),
                    action_id: v.id(*action_id),
                    epoch: *epoch,
                    now_ms: v.time_ms(*now_ms),
                },
            }
        }),
        write_during: write_during.as_ref().map(|w| super::step_world::WriteDuring {
            after_statement: w.after_statement,
            write: match &w.write {
                OtherWrite::Webhook(e) => OtherWrite::Webhook(webhook(e, v)),
            },
        }),
    }
}

/// A unit case walked whole: its name, kind and rule are kept.
fn case(c: &UnitCase, v: &mut impl Values) -> UnitCase {
    let UnitCase {
        name,
        kind,
        rule,
        setup,
        call: the_call,
        script: the_script,
        cfg,
    } = c;
    UnitCase {
        name,
        kind: *kind,
        rule: *rule,
        setup: tables(setup, v),
        call: call(the_call, v),
        script: script(the_script, v),
        cfg: *cfg,
    }
}

/// The key the contract gives action `id`'s outbox row (`f"action-{action_id}"`), as
/// the case builder writes it.
pub fn contract_key(id: u64) -> String {
    units::outbox(id, 0, "sending").idem_key
}

/// The action id in a key of the contract's form, if it is one.
fn id_of_key(key: &str) -> Option<u64> {
    let digits = key.trim_start_matches(|c: char| !c.is_ascii_digit());
    let id = digits.parse().ok()?;
    (contract_key(id) == key).then_some(id)
}

/// Every input of a case that a variant changes, by kind, each once, in order of
/// appearance; nonzero times only.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Inputs {
    /// Action ids, with those of keys of the contract's form.
    pub ids: Vec<u64>,
    pub stores: Vec<String>,
    pub workers: Vec<String>,
    /// Every key, of the contract's form or not.
    pub keys: Vec<String>,
    pub message_ids: Vec<String>,
    pub event_ids: Vec<String>,
    pub phones: Vec<String>,
    pub bodies: Vec<String>,
    pub times_ms: Vec<u64>,
    pub times_s: Vec<f64>,
}

fn add<T: PartialEq + Clone>(list: &mut Vec<T>, v: &T) {
    if !list.contains(v) {
        list.push(v.clone());
    }
}

impl Values for Inputs {
    fn id(&mut self, id: u64) -> u64 {
        add(&mut self.ids, &id);
        id
    }
    fn store(&mut self, store: &str) -> String {
        add(&mut self.stores, &store.to_string());
        store.into()
    }
    fn worker(&mut self, worker: &str) -> String {
        add(&mut self.workers, &worker.to_string());
        worker.into()
    }
    fn key(&mut self, key: &str) -> String {
        add(&mut self.keys, &key.to_string());
        if let Some(id) = id_of_key(key) {
            self.id(id);
        }
        key.into()
    }
    fn message_id(&mut self, message_id: &str) -> String {
        add(&mut self.message_ids, &message_id.to_string());
        message_id.into()
    }
    fn event_id(&mut self, event_id: &str) -> String {
        add(&mut self.event_ids, &event_id.to_string());
        event_id.into()
    }
    fn phone(&mut self, phone: &str) -> String {
        add(&mut self.phones, &phone.to_string());
        phone.into()
    }
    fn body(&mut self, body: &str) -> String {
        add(&mut self.bodies, &body.to_string());
        body.into()
    }
    fn time_ms(&mut self, t_ms: u64) -> u64 {
        if t_ms != 0 {
            add(&mut self.times_ms, &t_ms);
        }
        t_ms
    }
    fn time_s(&mut self, t_s: f64) -> f64 {
        if t_s != 0.0 {
            add(&mut self.times_s, &t_s);
        }
        t_s
    }
}

/// Every input of `c` that a variant changes.
pub fn inputs(c: &UnitCase) -> Inputs {
    let mut found = Inputs::default();
    case(c, &mut found);
    found
}

/// What a variant renamed and moved: each original value with its fresh one.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Renaming {
    /// In increasing order of both: the map keeps the ids' order.
    pub ids: Vec<(u64, u64)>,
    /// In increasing order of both: the map keeps the stores' order.
    pub stores: Vec<(String, String)>,
    pub workers: Vec<(String, String)>,
    /// Keys not of the contract's form (those follow their action's id).
    pub keys: Vec<(String, String)>,
    pub message_ids: Vec<(String, String)>,
    pub event_ids: Vec<(String, String)>,
    pub phones: Vec<(String, String)>,
    pub bodies: Vec<(String, String)>,
    /// Added to every time but 0, in ms (a whole number of seconds).
    pub offset_ms: u64,
}

fn fresh_of<T: PartialEq + Clone>(pairs: &[(T, T)], original: &T) -> T {
    pairs
        .iter()
        .find(|(o, _)| o == original)
        .map_or_else(|| original.clone(), |(_, f)| f.clone())
}

impl Renaming {
    pub fn id(&self, id: u64) -> u64 {
        fresh_of(&self.ids, &id)
    }
    pub fn store(&self, store: &str) -> String {
        fresh_of(&self.stores, &store.to_string())
    }
    pub fn worker(&self, worker: &str) -> String {
        fresh_of(&self.workers, &worker.to_string())
    }
    /// A key: one of the contract's form follows its action's id; any other is renamed
    /// as a whole.
    pub fn key(&self, key: &str) -> String {
        match id_of_key(key) {
            Some(id) => contract_key(self.id(id)),
            None => fresh_of(&self.keys, &key.to_string()),
        }
    }
    pub fn message_id(&self, message_id: &str) -> String {
        fresh_of(&self.message_ids, &message_id.to_string())
    }
    pub fn event_id(&self, event_id: &str) -> String {
        fresh_of(&self.event_ids, &event_id.to_string())
    }
    pub fn time_ms(&self, t_ms: u64) -> u64 {
        if t_ms == 0 {
            0
        } else {
            t_ms + self.offset_ms
        }
    }
    pub fn time_s(&self, t_s: f64) -> f64 {
        if t_s == 0.0 {
            0.0
        } else {
            t_s + (self.offset_ms / 1000) as f64
        }
    }
    /// Tables of the fixed case's world as they are in the variant's.
    pub fn tables(&self, t: &Tables) -> Tables {
        tables(t, &mut Apply(self))
    }
    pub fn call(&self, c: &Call) -> Call {
        call(c, &mut Apply(self))
    }
    pub fn script(&self, s: &Script) -> Script {
        script(s, &mut Apply(self))
    }
    /// Whether it changes nothing (a case with no input but the rule: a merge).
    pub fn is_empty(&self) -> bool {
        let Renaming {
            ids,
            stores,
            workers,
            keys,
            message_ids,
            event_ids,
            phones,
            bodies,
            offset_ms: _,
        } = self;
        ids.is_empty()
            && stores.is_empty()
            && workers.is_empty()
            && keys.is_empty()
            && message_ids.is_empty()
            && event_ids.is_empty()
            && phones.is_empty()
            && bodies.is_empty()
    }
}

/// A renaming as the walk over a case applies it.
struct Apply<'a>(&'a Renaming);

impl Values for Apply<'_> {
    fn id(&mut self, id: u64) -> u64 {
        self.0.id(id)
    }
    fn store(&mut self, store: &str) -> String {
        self.0.store(store)
    }
    fn worker(&mut self, worker: &str) -> String {
        self.0.worker(worker)
    }
    fn key(&mut self, key: &str) -> String {
        self.0.key(key)
    }
    fn message_id(&mut self, message_id: &str) -> String {
        self.0.message_id(message_id)
    }
    fn event_id(&mut self, event_id: &str) -> String {
        self.0.event_id(event_id)
    }
    fn phone(&mut self, phone: &str) -> String {
        fresh_of(&self.0.phones, &phone.to_string())
    }
    fn body(&mut self, body: &str) -> String {
        fresh_of(&self.0.bodies, &body.to_string())
    }
    fn time_ms(&mut self, t_ms: u64) -> u64 {
        self.0.time_ms(t_ms)
    }
    fn time_s(&mut self, t_s: f64) -> f64 {
        self.0.time_s(t_s)
    }
}

/// Every case for a run with hidden variant `variant`: the examples as they are (a
/// learner reads them whole), each hidden case varied.
pub fn vary_all(cases: Vec<UnitCase>, variant: u64) -> Vec<UnitCase> {
    cases
        .into_iter()
        .enumerate()
        .map(|(i, c)| match c.kind {
            TestKind::Example => c,
            TestKind::Hidden => vary(&c, variant, i).0,
        })
        .collect()
}

/// The case at `index` of the lab's list in variant `variant`, and what it renamed.
/// Each case draws from a stream of its own, so one case's inputs say nothing of
/// another's.
pub fn vary(c: &UnitCase, variant: u64, index: usize) -> (UnitCase, Renaming) {
    let mut g = SeededRng::new(mix(variant, index as u64));
    let renaming = renaming_for(&inputs(c), &mut g);
    (case(c, &mut Apply(&renaming)), renaming)
}

/// What variant `g` renames in a case of these inputs.
fn renaming_for(found: &Inputs, g: &mut SeededRng) -> Renaming {
    let Inputs {
        ids,
        stores,
        workers,
        keys,
        message_ids,
        event_ids,
        phones,
        bodies,
        times_ms: _,
        times_s: _,
    } = found;
    let other_keys: Vec<String> = keys
        .iter()
        .filter(|k| id_of_key(k).is_none())
        .cloned()
        .collect();
    Renaming {
        ids: in_order(ids.clone(), fresh(g, ids.len(), ids, |g| {
            ID_MIN + g.below(ID_MAX - ID_MIN)
        })),
        stores: in_order(
            stores.clone(),
            fresh(g, stores.len(), stores, |g| {
                format!("{}-{}", g.pick(&STORE_WORDS), 100_000 + g.below(900_000))
            }),
        ),
        workers: paired(
            workers,
            fresh(g, workers.len(), workers, |g| {
                format!("{}-{}", g.pick(&WORKER_WORDS), 1000 + g.below(9_000_000))
            }),
        ),
        keys: paired(
            &other_keys,
            fresh(g, other_keys.len(), keys, |g| {
                format!("key-{:012x}", g.next_u64() >> 16)
            }),
        ),
        message_ids: paired(
            message_ids,
            fresh(g, message_ids.len(), message_ids, |g| {
                format!("SM{:016x}", g.next_u64())
            }),
        ),
        event_ids: paired(
            event_ids,
            fresh(g, event_ids.len(), event_ids, |g| {
                format!("evt_{:012x}", g.next_u64() >> 16)
            }),
        ),
        phones: paired(
            phones,
            fresh(g, phones.len(), phones, |g| {
                format!("+1{}{:07}", 200 + g.below(800), g.below(10_000_000))
            }),
        ),
        bodies: paired(
            bodies,
            fresh(g, bodies.len(), bodies, |g| {
                format!(
                    "{} {} {}",
                    g.pick(&BODY_WHATS),
                    ID_MIN + g.below(ID_MAX - ID_MIN),
                    g.pick(&BODY_EVENTS)
                )
            }),
        ),
        offset_ms: 1000 * (OFFSET_MIN_S + g.below(OFFSET_SPAN_S)),
    }
}

/// `n` distinct values from `draw`, none of them one of `taken`.
fn fresh<T: PartialEq>(
    g: &mut SeededRng,
    n: usize,
    taken: &[T],
    draw: impl Fn(&mut SeededRng) -> T,
) -> Vec<T> {
    let mut out: Vec<T> = Vec::with_capacity(n);
    while out.len() < n {
        let v = draw(g);
        if !out.contains(&v) && !taken.contains(&v) {
            out.push(v);
        }
    }
    out
}

/// Each original with a fresh value, the smallest with the smallest: the map keeps
/// their order.
fn in_order<T: Ord>(mut originals: Vec<T>, mut fresh: Vec<T>) -> Vec<(T, T)> {
    originals.sort();
    fresh.sort();
    originals.into_iter().zip(fresh).collect()
}

fn paired(originals: &[String], fresh: Vec<String>) -> Vec<(String, String)> {
    originals.iter().cloned().zip(fresh).collect()
}
