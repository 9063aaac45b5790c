//! The reference design as a Rust backend: an in-memory store with the lab's tables and
//! the six pieces written as `reference.py` writes them, one fault point per SQL
//! statement (and one at each commit) at the same places. It proves the simulator
//! natively (the chaos rows, determinism, WASM against native) and, with a
//! `Mistake`, that the system rows catch the big mistakes. Learners are graded
//! against their own SQLite; this store is never shown to them.

use super::provider::{LookupAnswer, SendAnswer};
use super::tables::Holder;
use super::sim::{
    status_name, ActionRow, ActionState, Call, Config, Fault, Faults, Backend, OutboxState, RunStop,
    StepWorld, StoreState, Tables,
};
use crate::value::{LearnerError, Value};
use std::collections::{BTreeMap, BTreeSet};

/// Wrong designs the system runs must catch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mistake {
    /// After an unknown outcome, send again without looking the key up.
    ResendWithoutLookup,
    /// A new idempotency key on every attempt.
    NewKeyOnResend,
    /// Oldest claimable action in the whole table.
    FifoClaim,
    /// The heartbeat says yes without extending the lease.
    NoHeartbeat,
    /// A timeout taken as "not sent": mark failed and settle.
    TimeoutIsFailure,
    /// The claim's UPDATE trusts the SELECT before it: no compare-and-set on the
    /// epoch read (`UPDATE ... SET epoch = epoch + 1 WHERE id = ?`), so a claim that
    /// landed in between is taken over while its lease is live.
    ClaimWithoutCas,
    /// The settle writes the reported status over the row's instead of merging it.
    SettleOverwrites,
    /// The settle catches the database's restart (`sqlite3.OperationalError`) and
    /// returns `("done", status)` as if it had committed: the provider has the
    /// message, so the step "is done". The restart rolled the settle back, and the
    /// action stays claimed. Only a restart between the send and the settle shows it
    /// (`units::Racer::Restart`): a step with the database down fails at its first read.
    SettleSwallowsRestart,
}

impl Mistake {
    /// Every mistake, in the enum's order: what the tests prove each one caught by.
    pub const ALL: [Mistake; 8] = [
        Mistake::ResendWithoutLookup,
        Mistake::NewKeyOnResend,
        Mistake::FifoClaim,
        Mistake::NoHeartbeat,
        Mistake::TimeoutIsFailure,
        Mistake::ClaimWithoutCas,
        Mistake::SettleOverwrites,
        Mistake::SettleSwallowsRestart,
    ];
}

#[derive(Clone, Debug, PartialEq)]
struct ActionRec {
    store: String,
    created_ms: u64,
    body: String,
    phone: String,
    state: &'static str,
    owner: Option<String>,
    epoch: i64,
    lease_until_ms: u64,
}

#[derive(Clone, Debug, PartialEq)]
struct OutboxRec {
    key: String,
    attempts: i64,
    status: String,
    message_id: Option<String>,
    events_applied: i64,
}

impl Holder for ActionRec {
    fn claim(&self) -> (&str, Option<&str>, i64) {
        (self.state, self.owner.as_deref(), self.epoch)
    }
}

enum Undo {
    Action(u64, ActionRec),
    Outbox(u64, Option<OutboxRec>),
    Store(String, u64),
    Event(String),
}

#[derive(Default)]
pub struct RefBackend {
    cfg: Config,
    mistake: Option<Mistake>,
    actions: BTreeMap<u64, ActionRec>,
    stores: BTreeMap<String, u64>,
    outbox: BTreeMap<u64, OutboxRec>,
    events: BTreeSet<String>,
    undo: Vec<Undo>,
    in_tx: bool,
    /// The world of the call in progress: another worker's write may commit
    /// between two of its statements (a unit case's `Script::interleave`).
    step: Option<StepWorld>,
}

/// A step stopped: killed (the value is never read) or the database failed.
struct Stop(LearnerError);

type R<T> = Result<T, Stop>;

pub fn rank(status: &str) -> u8 {
    match status {
        "sending" => 0,
        "accepted" => 1,
        "sent" => 2,
        "delivered" | "failed" => 3,
        _ => 0,
    }
}

/// Forward-only: a report counts only when it is strictly ahead.
pub fn merge(current: &str, reported: &str) -> String {
    if rank(reported) > rank(current) {
        reported.into()
    } else {
        current.into()
    }
}

impl RefBackend {
    pub fn new(mistake: Option<Mistake>) -> RefBackend {
        RefBackend {
            mistake,
            ..RefBackend::default()
        }
    }

    fn stmt(&mut self, f: &mut dyn Faults) -> R<()> {
        if let Some(other) = self.step.as_ref().and_then(|w| w.interleave_due(self.in_tx)) {
            // Another worker's claim commits here, with no transaction of ours open.
            let mut t = self.tables();
            other.apply(&mut t, self.cfg.lease_ms);
            self.load_tables(&t)
                .map_err(|e| Stop(LearnerError::Host { message: e.to_string() }))?;
        }
        if let Some(w) = self.step.as_ref().and_then(|w| w.write_due(self.in_tx)) {
            // Another connection's write (a webhook, the old holder's) commits here.
            let mut t = self.tables();
            w.apply(&mut t);
            self.load_tables(&t)
                .map_err(|e| Stop(LearnerError::Host { message: e.to_string() }))?;
        }
        match f.statement(self.in_tx) {
            Fault::Go => Ok(()),
            Fault::Kill => {
                self.rollback();
                Err(Stop(LearnerError::Host {
                    message: "killed".into(),
                }))
            }
            Fault::DbDown => {
                self.rollback();
                Err(Stop(LearnerError::Exception {
                    message: "sqlite3.OperationalError: database is restarting".into(),
                }))
            }
        }
    }

    /// A write statement: opens the transaction implicitly, as sqlite3 does.
    fn write(&mut self, f: &mut dyn Faults) -> R<()> {
        self.stmt(f)?;
        self.in_tx = true;
        Ok(())
    }

    fn commit(&mut self, f: &mut dyn Faults) -> R<()> {
        if self.in_tx {
            self.stmt(f)?;
        }
        self.undo.clear();
        self.in_tx = false;
        Ok(())
    }

    fn rollback(&mut self) {
        while let Some(u) = self.undo.pop() {
            match u {
                Undo::Action(id, a) => {
                    self.actions.insert(id, a);
                }
                Undo::Outbox(id, o) => match o {
                    Some(o) => {
                        self.outbox.insert(id, o);
                    }
                    None => {
                        self.outbox.remove(&id);
                    }
                },
                Undo::Store(s, t) => {
                    self.stores.insert(s, t);
                }
                Undo::Event(e) => {
                    self.events.remove(&e);
                }
            }
        }
        self.in_tx = false;
    }

    fn set_action(&mut self, id: u64, a: ActionRec) {
        if let Some(old) = self.actions.insert(id, a) {
            self.undo.push(Undo::Action(id, old));
        }
    }

    fn set_outbox(&mut self, id: u64, o: OutboxRec) {
        let old = self.outbox.insert(id, o);
        self.undo.push(Undo::Outbox(id, old));
    }

    fn claimable(&self, a: &ActionRec, now_ms: u64) -> bool {
        a.state == "pending" || (a.state == "claimed" && a.lease_until_ms <= now_ms)
    }

    /// A write fenced on (owner, epoch): whether they still hold; if not, the
    /// transaction is rolled back.
    fn fence(&mut self, f: &mut dyn Faults, id: u64, worker: &str, epoch: i64) -> R<bool> {
        self.write(f)?;
        let held = self.fenced_ok(id, worker, epoch);
        if !held {
            self.rollback();
        }
        Ok(held)
    }

    fn fenced_ok(&self, id: u64, worker: &str, epoch: i64) -> bool {
        self.actions.get(&id).is_some_and(|a| a.held_by(worker, epoch))
    }

    fn claim(&mut self, f: &mut dyn Faults, worker: &str, now_ms: u64) -> R<Value> {
        self.stmt(f)?; // SELECT the candidate
        let pick = if self.mistake == Some(Mistake::FifoClaim) {
            self.actions
                .iter()
                .find(|(_, a)| self.claimable(a, now_ms))
                .map(|(id, a)| (*id, a.epoch))
        } else {
            let mut in_flight: BTreeMap<&str, u32> = BTreeMap::new();
            for a in self.actions.values() {
                if a.state == "claimed" && a.lease_until_ms > now_ms {
                    *in_flight.entry(a.store.as_str()).or_default() += 1;
                }
            }
            let mut best: Option<(u64, &str, u64, i64)> = None; // (last served, store, id, epoch)
            for (id, a) in &self.actions {
                if !self.claimable(a, now_ms)
                    || in_flight.get(a.store.as_str()).copied().unwrap_or(0)
                        >= self.cfg.in_flight_cap
                {
                    continue;
                }
                let served = self.stores.get(&a.store).copied().unwrap_or(0);
                let cand = (served, a.store.as_str(), *id, a.epoch);
                if best.is_none_or(|b| (cand.0, cand.1, cand.2) < (b.0, b.1, b.2)) {
                    best = Some(cand);
                }
            }
            best.map(|b| (b.2, b.3))
        };
        let Some((id, epoch)) = pick else {
            return Ok(Value::None);
        };
        self.write(f)?; // UPDATE actions ... WHERE id = ? AND epoch = ?
        let cas = self.mistake != Some(Mistake::ClaimWithoutCas);
        if cas
            && !self
                .actions
                .get(&id)
                .is_some_and(|a| a.epoch == epoch && self.claimable(a, now_ms))
        {
            // Lost a race: another worker claimed it since the SELECT.
            self.rollback();
            return Ok(Value::None);
        }
        let mut a = self.actions[&id].clone();
        a.state = "claimed";
        a.owner = Some(worker.into());
        // Without the compare-and-set the UPDATE's `epoch = epoch + 1` counts from
        // the row as it is now, whoever claimed it since the SELECT.
        a.epoch = if cas { epoch + 1 } else { a.epoch + 1 };
        a.lease_until_ms = now_ms + self.cfg.lease_ms;
        let store = a.store.clone();
        self.set_action(id, a);
        self.write(f)?; // UPDATE stores SET last_served_ms
        let old = self.stores.insert(store.clone(), now_ms).unwrap_or(0);
        self.undo.push(Undo::Store(store, old));
        self.commit(f)?;
        Ok(Value::Tuple(vec![
            Value::Int(id as i64),
            Value::Int(epoch + 1),
        ]))
    }

    fn key(&self, id: u64, epoch: i64, attempts: i64) -> String {
        match self.mistake {
            Some(Mistake::NewKeyOnResend) => format!("action-{id}-e{epoch}-a{attempts}"),
            _ => format!("action-{id}"),
        }
    }

    fn write_intent(&mut self, f: &mut dyn Faults, id: u64, worker: &str, epoch: i64) -> R<Value> {
        // The compare-and-set on (owner, epoch).
        if !self.fence(f, id, worker, epoch)? {
            return Ok(Value::None);
        }
        self.write(f)?; // INSERT OR IGNORE INTO outbox
        if !self.outbox.contains_key(&id) {
            let key = self.key(id, epoch, 0);
            self.set_outbox(
                id,
                OutboxRec {
                    key,
                    attempts: 0,
                    status: "sending".into(),
                    message_id: None,
                    events_applied: 0,
                },
            );
        }
        let key = self.outbox[&id].key.clone();
        self.commit(f)?;
        Ok(Value::Str(key))
    }

    /// Records a status (and message id) and settles the action, fenced, in one
    /// transaction; `done` or `fenced`. (The piece's own arguments, as in Python.)
    #[allow(clippy::too_many_arguments)]
    fn record_and_settle(
        &mut self,
        f: &mut dyn Faults,
        id: u64,
        worker: &str,
        epoch: i64,
        now_ms: u64,
        status: &str,
        msg: Option<String>,
    ) -> R<Value> {
        let merged = merge(&self.outbox[&id].status, status);
        match self.record_and_settle_tx(f, id, worker, epoch, now_ms, status, msg) {
            // `except sqlite3.OperationalError: return ("done", status)`.
            Err(Stop(LearnerError::Exception { .. }))
                if self.mistake == Some(Mistake::SettleSwallowsRestart) =>
            {
                Ok(Value::Tuple(vec![Value::str("done"), Value::Str(merged)]))
            }
            r => r,
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn record_and_settle_tx(
        &mut self,
        f: &mut dyn Faults,
        id: u64,
        worker: &str,
        epoch: i64,
        now_ms: u64,
        status: &str,
        msg: Option<String>,
    ) -> R<Value> {
        self.write(f)?; // UPDATE outbox SET status
        let mut o = self.outbox[&id].clone();
        o.status = if self.mistake == Some(Mistake::SettleOverwrites) {
            status.to_string()
        } else {
            merge(&o.status, status)
        };
        if o.message_id.is_none() {
            o.message_id = msg;
        }
        let final_status = o.status.clone();
        self.set_outbox(id, o);
        // UPDATE actions SET state = 'dispatched' WHERE fenced
        if !self.fence(f, id, worker, epoch)? {
            return Ok(fenced());
        }
        let mut a = self.actions[&id].clone();
        a.state = "dispatched";
        a.lease_until_ms = now_ms;
        self.set_action(id, a);
        self.commit(f)?;
        Ok(Value::Tuple(vec![
            Value::str("done"),
            Value::Str(final_status),
        ]))
    }

    fn deliver_step(
        &mut self,
        f: &mut dyn Faults,
        id: u64,
        worker: &str,
        epoch: i64,
        now_ms: u64,
    ) -> R<Value> {
        self.stmt(f)?; // SELECT the outbox row
        let Some(o) = self.outbox.get(&id).cloned() else {
            return Ok(fenced());
        };
        if o.status != "sending" {
            return self.record_and_settle(f, id, worker, epoch, now_ms, &o.status, None);
        }
        let wait = Value::Tuple(vec![
            Value::str("wait"),
            Value::Int(self.cfg.recheck_ms as i64),
        ]);
        let lookup_first = o.attempts > 0 && self.mistake != Some(Mistake::ResendWithoutLookup);
        if lookup_first {
            match f.lookup(&o.key).map_err(killed)? {
                LookupAnswer::Found { message_id, status } => {
                    return self.record_and_settle(
                        f,
                        id,
                        worker,
                        epoch,
                        now_ms,
                        status_name(status),
                        Some(message_id),
                    );
                }
                LookupAnswer::Timeout => return Ok(wait),
                LookupAnswer::NotFound => {}
            }
        }
        // Count the attempt before the request leaves, fenced.
        if !self.fence(f, id, worker, epoch)? {
            return Ok(fenced());
        }
        let key = if self.mistake == Some(Mistake::NewKeyOnResend) {
            self.key(id, epoch, o.attempts + 1)
        } else {
            o.key.clone()
        };
        let mut o2 = o.clone();
        o2.attempts += 1;
        o2.key = key.clone();
        self.set_outbox(id, o2);
        self.commit(f)?;
        let a = self.actions[&id].clone();
        // What the outbox holds, committed, as the request leaves.
        let committed = self
            .outbox
            .values()
            .find(|o| o.key == key)
            .map(|o| o.attempts);
        match f.send(&key, &a.phone, &a.body, committed).map_err(killed)? {
            SendAnswer::Accepted { message_id } => {
                self.record_and_settle(f, id, worker, epoch, now_ms, "accepted", Some(message_id))
            }
            SendAnswer::Timeout if self.mistake == Some(Mistake::TimeoutIsFailure) => {
                self.record_and_settle(f, id, worker, epoch, now_ms, "failed", None)
            }
            SendAnswer::Timeout => Ok(wait),
        }
    }

    fn on_webhook(
        &mut self,
        f: &mut dyn Faults,
        event_id: &str,
        key: &str,
        status: &str,
        message_id: &str,
    ) -> R<Value> {
        self.write(f)?; // INSERT OR IGNORE INTO webhook_events
        if self.events.contains(event_id) {
            self.rollback();
            return Ok(Value::None);
        }
        self.events.insert(event_id.into());
        self.undo.push(Undo::Event(event_id.into()));
        self.write(f)?; // UPDATE outbox ... WHERE idem_key = ?
        if let Some((id, o)) = self
            .outbox
            .iter()
            .find(|(_, o)| o.key == key)
            .map(|(id, o)| (*id, o.clone()))
        {
            let mut o2 = o;
            o2.status = merge(&o2.status, status);
            o2.events_applied += 1;
            if o2.message_id.is_none() {
                o2.message_id = Some(message_id.into());
            }
            self.set_outbox(id, o2);
        }
        self.commit(f)?;
        Ok(Value::None)
    }

    fn heartbeat(
        &mut self,
        f: &mut dyn Faults,
        id: u64,
        worker: &str,
        epoch: i64,
        now_ms: u64,
    ) -> R<Value> {
        if self.mistake == Some(Mistake::NoHeartbeat) {
            return Ok(Value::Bool(true));
        }
        if !self.fence(f, id, worker, epoch)? {
            return Ok(Value::Bool(false));
        }
        let mut a = self.actions[&id].clone();
        a.lease_until_ms = now_ms + self.cfg.lease_ms;
        self.set_action(id, a);
        self.commit(f)?;
        Ok(Value::Bool(true))
    }
}

fn fenced() -> Value {
    Value::Tuple(vec![Value::str("fenced"), Value::None])
}

fn killed(_: super::sim::Killed) -> Stop {
    Stop(LearnerError::Host {
        message: "killed".into(),
    })
}

impl Backend for RefBackend {
    fn reset(&mut self, cfg: &Config, stores: &[String]) -> Result<(), RunStop> {
        *self = RefBackend::new(self.mistake);
        self.cfg = *cfg;
        for s in stores {
            self.stores.insert(s.clone(), 0);
        }
        Ok(())
    }

    fn enqueue(&mut self, a: &ActionRow) -> Result<(), RunStop> {
        self.actions.insert(
            a.id,
            ActionRec {
                store: a.store.clone(),
                created_ms: a.created_ms,
                body: a.body.clone(),
                phone: a.phone.clone(),
                state: "pending",
                owner: None,
                epoch: 0,
                lease_until_ms: 0,
            },
        );
        Ok(())
    }

    fn settle(&mut self, action_id: u64, now_ms: u64) -> Result<(), RunStop> {
        let a = self
            .actions
            .get_mut(&action_id)
            .ok_or_else(|| RunStop::Failed("no such action".into()))?;
        a.state = "dispatched";
        a.lease_until_ms = now_ms;
        Ok(())
    }

    fn call(&mut self, call: &Call, world: &StepWorld) -> Result<Value, LearnerError> {
        self.step = Some(world.clone());
        let f: &mut dyn Faults = &mut world.clone();
        let r = match call {
            Call::Claim { worker, now_ms } => self.claim(f, worker, *now_ms),
            Call::WriteIntent {
                action_id,
                worker,
                epoch,
            } => self.write_intent(f, *action_id, worker, *epoch),
            Call::DeliverStep {
                action_id,
                worker,
                epoch,
                now_ms,
            } => self.deliver_step(f, *action_id, worker, *epoch, *now_ms),
            Call::OnWebhook { event } => self.on_webhook(
                f,
                &event.event_id,
                &event.key,
                status_name(event.status),
                &event.message_id,
            ),
            Call::Heartbeat {
                action_id,
                worker,
                epoch,
                now_ms,
            } => self.heartbeat(f, *action_id, worker, *epoch, *now_ms),
            Call::Merge { current, reported } => Ok(Value::Str(merge(current, reported))),
        };
        self.step = None;
        r.map_err(|Stop(e)| e)
    }

    fn kill(&mut self, _worker: &str) {
        self.rollback();
    }

    fn restart_db(&mut self) {
        self.rollback();
    }

    fn dump(&mut self) -> Result<Tables, RunStop> {
        Ok(self.tables())
    }

    fn load(&mut self, t: &Tables) -> Result<(), RunStop> {
        self.load_tables(t)
    }
}

impl RefBackend {
    /// Every table's rows.
    fn tables(&self) -> Tables {
        Tables {
            actions: self
                .actions
                .iter()
                .map(|(id, a)| ActionState {
                    id: *id,
                    store: a.store.clone(),
                    phone: a.phone.clone(),
                    body: a.body.clone(),
                    created_ms: a.created_ms,
                    state: a.state.to_string(),
                    owner: a.owner.clone(),
                    epoch: a.epoch,
                    lease_until_ms: a.lease_until_ms,
                })
                .collect(),
            stores: self
                .stores
                .iter()
                .map(|(s, t)| StoreState {
                    store: s.clone(),
                    last_served_ms: *t,
                })
                .collect(),
            outbox: self
                .outbox
                .iter()
                .map(|(id, o)| OutboxState {
                    action_id: *id,
                    idem_key: o.key.clone(),
                    attempts: o.attempts,
                    status: o.status.clone(),
                    message_id: o.message_id.clone(),
                    events_applied: o.events_applied,
                })
                .collect(),
            webhook_events: self.events.iter().cloned().collect(),
        }
    }

    /// Replaces every table's rows.
    fn load_tables(&mut self, t: &Tables) -> Result<(), RunStop> {
        self.actions.clear();
        self.stores.clear();
        self.outbox.clear();
        self.events.clear();
        self.undo.clear();
        self.in_tx = false;
        for a in &t.actions {
            let state = match a.state.as_str() {
                "pending" => "pending",
                "claimed" => "claimed",
                "dispatched" => "dispatched",
                other => return Err(RunStop::Failed(format!("unknown state {other:?}"))),
            };
            self.actions.insert(
                a.id,
                ActionRec {
                    store: a.store.clone(),
                    body: a.body.clone(),
                    phone: a.phone.clone(),
                    created_ms: a.created_ms,
                    state,
                    owner: a.owner.clone(),
                    epoch: a.epoch,
                    lease_until_ms: a.lease_until_ms,
                },
            );
        }
        for st in &t.stores {
            self.stores.insert(st.store.clone(), st.last_served_ms);
        }
        for o in &t.outbox {
            self.outbox.insert(
                o.action_id,
                OutboxRec {
                    key: o.idem_key.clone(),
                    attempts: o.attempts,
                    status: o.status.clone(),
                    message_id: o.message_id.clone(),
                    events_applied: o.events_applied,
                },
            );
        }
        self.events = t.webhook_events.iter().cloned().collect();
        Ok(())
    }
}
