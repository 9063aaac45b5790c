//! The courier simulator: virtual workers that call the learner's pieces as steps,
//! interleaved on one lab clock, killed at fault points, frozen past their lease,
//! with one database restart and the provider's webhooks. Deterministic from a seed:
//! time moves only when the next event is taken, and every draw comes from the run's
//! own rng, so a seed replays the same run native or in WASM.
//!
//! The database is the host's (SQLite in Pyodide for learners, an in-memory store for
//! the Rust reference); the simulator reaches it only through the learner's pieces and
//! three trusted calls (`reset`, `enqueue`, `settle`, plus `outbox` to read the end).

use super::provider::{
    tally_of, ChaosTally, LookupAnswer, Provider, Rates, SendAnswer, Status, Timing, Webhook,
};
use crate::rng::SeededRng;
use crate::value::{LearnerError, Value};
use serde::Serialize;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fmt;
use std::rc::Rc;

/// The numbers the learner's pieces get as `cfg`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Config {
    pub lease_ms: u64,
    pub in_flight_cap: u32,
    pub recheck_ms: u64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            lease_ms: 30_000,
            in_flight_cap: 4,
            recheck_ms: 1_000,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ActionRow {
    pub id: u64,
    pub store: String,
    pub phone: String,
    pub body: String,
    pub created_ms: u64,
}

/// The lab's tables, row by row, in key order (what `Host::dump` reads and
/// `Host::load` writes).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Tables {
    pub actions: Vec<ActionState>,
    pub stores: Vec<StoreState>,
    pub outbox: Vec<OutboxState>,
    pub webhook_events: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ActionState {
    pub id: u64,
    pub store: String,
    pub phone: String,
    pub body: String,
    pub created_ms: u64,
    pub state: String,
    pub owner: Option<String>,
    pub epoch: i64,
    pub lease_until_ms: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StoreState {
    pub store: String,
    pub last_served_ms: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OutboxState {
    pub action_id: u64,
    pub idem_key: String,
    pub attempts: i64,
    pub status: String,
    pub message_id: Option<String>,
    pub events_applied: i64,
}

/// Reading a host's tables by hand: serde's derive costs the WASM ~20 KB here.
impl Tables {
    pub fn from_json(v: &serde_json::Value) -> Result<Tables, String> {
        fn rows<'a>(
            v: &'a serde_json::Value,
            table: &str,
        ) -> Result<&'a Vec<serde_json::Value>, String> {
            v.get(table)
                .and_then(|t| t.as_array())
                .ok_or_else(|| format!("no {table} list"))
        }
        fn u(r: &serde_json::Value, k: &str) -> Result<u64, String> {
            r.get(k)
                .and_then(|x| x.as_u64())
                .ok_or_else(|| format!("{k} is not a whole number >= 0"))
        }
        fn i(r: &serde_json::Value, k: &str) -> Result<i64, String> {
            r.get(k)
                .and_then(|x| x.as_i64())
                .ok_or_else(|| format!("{k} is not a whole number"))
        }
        fn st(r: &serde_json::Value, k: &str) -> Result<String, String> {
            r.get(k)
                .and_then(|x| x.as_str())
                .map(String::from)
                .ok_or_else(|| format!("{k} is not text"))
        }
        fn opt(r: &serde_json::Value, k: &str) -> Result<Option<String>, String> {
            match r.get(k) {
                None | Some(serde_json::Value::Null) => Ok(None),
                Some(x) => x
                    .as_str()
                    .map(|s| Some(s.to_string()))
                    .ok_or_else(|| format!("{k} is not text or null")),
            }
        }
        let actions = rows(v, "actions")?
            .iter()
            .map(|r| {
                Ok(ActionState {
                    id: u(r, "id")?,
                    store: st(r, "store")?,
                    phone: st(r, "phone")?,
                    body: st(r, "body")?,
                    created_ms: u(r, "created_ms")?,
                    state: st(r, "state")?,
                    owner: opt(r, "owner")?,
                    epoch: i(r, "epoch")?,
                    lease_until_ms: u(r, "lease_until_ms")?,
                })
            })
            .collect::<Result<_, String>>()?;
        let stores = rows(v, "stores")?
            .iter()
            .map(|r| {
                Ok(StoreState {
                    store: st(r, "store")?,
                    last_served_ms: u(r, "last_served_ms")?,
                })
            })
            .collect::<Result<_, String>>()?;
        let outbox = rows(v, "outbox")?
            .iter()
            .map(|r| {
                Ok(OutboxState {
                    action_id: u(r, "action_id")?,
                    idem_key: st(r, "idem_key")?,
                    attempts: i(r, "attempts")?,
                    status: st(r, "status")?,
                    message_id: opt(r, "message_id")?,
                    events_applied: i(r, "events_applied")?,
                })
            })
            .collect::<Result<_, String>>()?;
        let webhook_events = rows(v, "webhook_events")?
            .iter()
            .map(|e| {
                e.as_str()
                    .map(String::from)
                    .ok_or_else(|| "an event id is not text".to_string())
            })
            .collect::<Result<_, String>>()?;
        Ok(Tables {
            actions,
            stores,
            outbox,
            webhook_events,
        })
    }
}

/// One call of a learner piece, as the host receives it.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "piece", rename_all = "snake_case")]
pub enum Call {
    Claim {
        worker: String,
        now_ms: u64,
    },
    WriteIntent {
        action_id: u64,
        worker: String,
        epoch: i64,
    },
    DeliverStep {
        action_id: u64,
        worker: String,
        epoch: i64,
        now_ms: u64,
    },
    OnWebhook {
        event: Webhook,
    },
    Merge {
        current: String,
        reported: String,
    },
    Heartbeat {
        action_id: u64,
        worker: String,
        epoch: i64,
        now_ms: u64,
    },
}

impl Call {
    pub fn function(&self) -> &'static str {
        match self {
            Call::Claim { .. } => "claim",
            Call::WriteIntent { .. } => "write_intent",
            Call::DeliverStep { .. } => "deliver_step",
            Call::OnWebhook { .. } => "on_webhook",
            Call::Heartbeat { .. } => "heartbeat",
            Call::Merge { .. } => "merge",
        }
    }
}

/// The world's answer at a database statement.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Fault {
    Go,
    /// The worker dies here: the host rolls its transaction back and stops the step.
    Kill,
    /// The database is restarting: the host rolls back and the statement fails.
    DbDown,
}

/// The worker was killed at this provider call (before or after the request left).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Killed;

/// The world as one step sees it: every statement and provider call asks it first.
pub trait Faults {
    fn statement(&mut self, in_tx: bool) -> Fault;
    /// `committed_attempts`: the outbox row's `attempts` as committed when the request
    /// leaves (read by the host outside the learner's transaction; None: no row).
    fn send(
        &mut self,
        key: &str,
        phone: &str,
        body: &str,
        committed_attempts: Option<i64>,
    ) -> Result<SendAnswer, Killed>;
    fn lookup(&mut self, key: &str) -> Result<LookupAnswer, Killed>;
}

/// The host: the database, the learner's pieces, and the trusted calls around them.
/// Why a run, or a trusted host operation, ended before its end. Typed, so that no
/// decision reads a message's words (a learner's exception may say "limit").
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "stop", content = "message", rename_all = "kebab-case")]
pub enum RunStop {
    /// The learner's code reached the run's time limit: no later test runs.
    TimedOut(String),
    /// The run fails with this message; the later tests still run.
    Failed(String),
}

impl RunStop {
    pub fn is_timeout(&self) -> bool {
        matches!(self, RunStop::TimedOut(_))
    }

    /// The same stop, its message rewritten (a prefix saying where it happened).
    pub fn map(self, f: impl FnOnce(String) -> String) -> RunStop {
        match self {
            RunStop::TimedOut(m) => RunStop::TimedOut(f(m)),
            RunStop::Failed(m) => RunStop::Failed(f(m)),
        }
    }
}

impl fmt::Display for RunStop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RunStop::TimedOut(m) | RunStop::Failed(m) => f.write_str(m),
        }
    }
}

impl From<LearnerError> for RunStop {
    fn from(e: LearnerError) -> Self {
        match e {
            LearnerError::Timeout { .. } => RunStop::TimedOut(e.to_string()),
            _ => RunStop::Failed(e.to_string()),
        }
    }
}

pub trait Host {
    /// A fresh database with the lab's schema and these stores.
    fn reset(&mut self, cfg: &Config, stores: &[String]) -> Result<(), RunStop>;
    /// Trusted: a new pending action.
    fn enqueue(&mut self, action: &ActionRow) -> Result<(), RunStop>;
    /// Trusted (fairness run only): the action's message went out; release it.
    fn settle(&mut self, action_id: u64, now_ms: u64) -> Result<(), RunStop>;
    /// Runs one learner piece; `faults` is asked at every statement and provider call.
    fn call(&mut self, call: &Call, world: &StepWorld) -> Result<Value, LearnerError>;
    /// The worker's process is gone: roll back and close its connection.
    fn kill(&mut self, worker: &str);
    /// The database restarts: every open transaction is lost.
    fn restart_db(&mut self);
    /// Trusted: every table's rows, as committed.
    fn dump(&mut self) -> Result<Tables, RunStop>;
    /// What the learner's code printed since the last time this was asked.
    fn take_output(&mut self) -> Option<String> {
        None
    }
    /// Trusted: replaces every table's rows (a unit case's starting state).
    fn load(&mut self, tables: &Tables) -> Result<(), RunStop>;
}

/// Where a worker was killed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
// The order is the order of `ChaosPlan::kills` (the enum's index is the slot).
pub enum KillKind {
    MidTransaction,
    BetweenCommitAndSend,
    RequestOnTheWire,
    FrozenPastLease,
}

/// The chaos run's size.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ChaosPlan {
    pub seed: u64,
    pub actions: u64,
    pub stores: u64,
    pub workers: u64,
    /// Arrivals are spread over this much lab time.
    pub arrivals_ms: u64,
    /// Kills per kind, in `KillKind` order (200 in all by default).
    pub kills: [u64; 4],
    /// Workers frozen past their lease that later resume (zombies).
    pub zombies: u64,
    /// Slow but healthy workers: their next step comes after twice the lease, and
    /// only their heartbeats keep the job theirs.
    pub slow: u64,
    pub db_restart_at_ms: u64,
    pub db_restart_ms: u64,
    /// Lab time a step takes, and a killed worker's restart.
    pub step_ms: u64,
    pub respawn_ms: u64,
    /// An idle worker asks for work again this often (expired leases have no arrival).
    pub idle_poll_ms: u64,
    /// The run stops at the latest here after the last arrival.
    pub drain_max_ms: u64,
}

impl ChaosPlan {
    pub fn full(seed: u64) -> ChaosPlan {
        ChaosPlan {
            seed,
            actions: 2_000,
            stores: 100,
            workers: 8,
            arrivals_ms: 40_000,
            kills: [70, 50, 50, 30],
            zombies: 20,
            slow: 20,
            db_restart_at_ms: 16_000,
            db_restart_ms: 3_000,
            step_ms: 4,
            respawn_ms: 500,
            idle_poll_ms: 2_000,
            drain_max_ms: 600_000,
        }
    }
}

/// One line of an action's story, in lab time.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StoryLine {
    pub t_ms: u64,
    pub action: u64,
    pub what: String,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ChaosReport {
    pub seed: u64,
    pub tally: ChaosTally,
    /// Actions whose outbox status differs from the provider's final status.
    pub outcomes_differ: usize,
    /// Claims of an action a healthy, live worker still held.
    pub taken_from_healthy: usize,
    /// Kills per kind, in `KillKind` order (as the plan's).
    pub kills: [u64; 4],
    pub zombies: u64,
    pub slow: u64,
    pub db_restart: (u64, u64),
    /// Steps that raised or returned something other than the piece's contract; the
    /// worker crashed and restarted. The first few messages are kept.
    pub crashes: u64,
    /// Crashes with the database up: the learner's own errors.
    pub crashes_db_up: u64,
    pub crash_messages: Vec<String>,
    pub steps: u64,
    pub end_ms: u64,
    /// Actions that broke a row, first ones first, with their stories.
    pub failing: Vec<(u64, String)>,
    pub stories: BTreeMap<u64, Vec<StoryLine>>,
}

impl ChaosReport {
    pub fn kills_total(&self) -> u64 {
        self.kills.iter().sum()
    }

    /// Each kind of kill that happened, with its count, by name.
    pub fn kills_by_name(&self) -> Vec<(&'static str, u64)> {
        let mut out: Vec<_> = KILL_KINDS
            .iter()
            .map(|k| (kill_name(*k), self.kills[*k as usize]))
            .filter(|(_, n)| *n > 0)
            .collect();
        out.sort();
        out
    }

    /// Every row at its required value.
    pub fn passed(&self) -> bool {
        let t = &self.tally;
        t.exactly_one_effect == t.actions
            && t.more_than_one_effect == 0
            && t.no_effect == 0
            && t.resends_without_lookup == 0
            && self.outcomes_differ == 0
            && self.taken_from_healthy == 0
            && self.crashes_db_up == 0
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Healthy,
    /// Frozen past the lease; on resume either killed (`true`) or a zombie.
    Frozen(bool),
    Slow,
}

#[derive(Clone, Debug)]
struct Job {
    action: u64,
    epoch: i64,
    intent: bool,
}

#[derive(Clone, Debug)]
struct Worker {
    base: String,
    life: u32,
    /// Events carry the generation they were made in; a kill or a dropped job
    /// makes older ones stale.
    gen: u64,
    job: Option<Job>,
    mode: Mode,
    idle: bool,
    dead: bool,
}

impl Worker {
    fn name(&self) -> String {
        format!("{}.{}", self.base, self.life)
    }
}

#[derive(Clone, Debug)]
enum Ev {
    Arrive(u64),
    Step(usize, u64),
    Beat(usize, u64),
    Respawn(usize),
    Hooks,
    RestartDb,
}

/// One world operation of a step, in order (unit cases check these).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "op", rename_all = "kebab-case")]
pub enum Op {
    Statement {
        in_tx: bool,
    },
    Send {
        key: String,
        committed_attempts: Option<i64>,
    },
    Lookup {
        key: String,
    },
}

/// A unit case's world: provider answers in order, and maybe a kill.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Script {
    /// Kill the worker at this statement of the step (0-based).
    pub kill_at_statement: Option<usize>,
    /// Kill it with its send on the wire (after the provider took it).
    pub kill_after_send: bool,
    /// The database is restarting during this step.
    pub db_down: bool,
    pub sends: Vec<SendAnswer>,
    pub lookups: Vec<LookupAnswer>,
    /// Not a world rule: the unit test also kills the call at each of its
    /// statements in turn and checks the tables are left as before or as after.
    pub all_or_nothing: bool,
}

enum Rule {
    /// The fairness run: nothing fails.
    Calm,
    Chaos {
        quota: Quota,
        restart: (u64, u64),
    },
    Script(Script),
}

/// Everything a step's world needs, shared between the simulator and the handle
/// the host holds during a call (`StepWorld`).
pub struct WorldState {
    pub provider: Provider,
    rng: SeededRng,
    rule: Rule,
    action_of_body: BTreeMap<String, u64>,
    /// Keys seen in sends, for the stories of lookups with keys of any shape.
    action_of_key: BTreeMap<String, u64>,
    story: Vec<StoryLine>,
    now_ms: u64,
    worker: String,
    may_kill: bool,
    killed: Option<KillKind>,
    pub ops: Vec<Op>,
    statements: usize,
    sends: usize,
    lookups: usize,
}

/// The handle a host's step reaches the world through.
#[derive(Clone)]
pub struct StepWorld(Rc<RefCell<WorldState>>);

impl StepWorld {
    fn new(provider: Provider, rng: SeededRng, rule: Rule) -> StepWorld {
        StepWorld(Rc::new(RefCell::new(WorldState {
            provider,
            rng,
            rule,
            action_of_body: BTreeMap::new(),
            action_of_key: BTreeMap::new(),
            story: Vec::new(),
            now_ms: 0,
            worker: String::new(),
            may_kill: false,
            killed: None,
            ops: Vec::new(),
            statements: 0,
            sends: 0,
            lookups: 0,
        })))
    }

    /// A world that never fails (the fairness run's claims).
    pub fn calm() -> StepWorld {
        StepWorld::new(
            Provider::new(0, Rates::default(), Timing::default()),
            SeededRng::new(0),
            Rule::Calm,
        )
    }

    /// A unit case's world.
    pub fn scripted(script: Script, now_ms: u64, worker: &str) -> StepWorld {
        let w = StepWorld::new(
            Provider::new(0, Rates::default(), Timing::default()),
            SeededRng::new(0),
            Rule::Script(script),
        );
        w.begin(now_ms, worker, true);
        w
    }

    fn begin(&self, now_ms: u64, worker: &str, may_kill: bool) {
        let mut s = self.0.borrow_mut();
        s.now_ms = now_ms;
        s.worker = worker.to_string();
        s.may_kill = may_kill;
        s.killed = None;
        s.ops.clear();
        s.statements = 0;
        s.sends = 0;
        s.lookups = 0;
    }

    pub fn killed(&self) -> Option<KillKind> {
        self.0.borrow().killed
    }

    pub fn ops(&self) -> Vec<Op> {
        self.0.borrow().ops.clone()
    }

    fn state(&self) -> std::cell::RefMut<'_, WorldState> {
        self.0.borrow_mut()
    }
}

/// Spreads each kind of fault evenly over the arrival period.
struct Quota {
    arrivals_ms: u64,
    kills: [u64; 4],
    done: [u64; 4],
}

impl Quota {
    fn allowed(&self, kind: KillKind, now_ms: u64) -> bool {
        let i = kind as usize;
        let due = self.kills[i] * (now_ms.min(self.arrivals_ms) + 1) / self.arrivals_ms.max(1);
        self.done[i] < due.min(self.kills[i])
    }
    fn take(&mut self, kind: KillKind) {
        self.done[kind as usize] += 1;
    }
}

impl WorldState {
    /// Whether the worker dies at this point (`kind` says where).
    fn kill(&mut self, kind: KillKind) -> bool {
        if self.killed.is_some() {
            return true;
        }
        let now = self.now_ms;
        let hit = match &mut self.rule {
            Rule::Calm => false,
            Rule::Chaos { quota, .. } => {
                self.may_kill && quota.allowed(kind, now) && self.rng.chance(0.5) && {
                    quota.take(kind);
                    true
                }
            }
            Rule::Script(s) => match kind {
                KillKind::MidTransaction => s.kill_at_statement == Some(self.statements),
                KillKind::RequestOnTheWire => s.kill_after_send,
                _ => false,
            },
        };
        if hit {
            self.killed = Some(kind);
        }
        hit
    }

    fn action_for(&self, body: &str) -> u64 {
        self.action_of_body.get(body).copied().unwrap_or(0)
    }

    fn note(&mut self, action: u64, what: String) {
        let t_ms = self.now_ms;
        self.story.push(StoryLine { t_ms, action, what });
    }
}

impl Faults for StepWorld {
    fn statement(&mut self, in_tx: bool) -> Fault {
        let mut guard = self.state();
        let s = &mut *guard;
        s.ops.push(Op::Statement { in_tx });
        let answer = if s.killed.is_some() {
            Fault::Kill
        } else {
            let down = match &s.rule {
                Rule::Chaos { restart, .. } => s.now_ms >= restart.0 && s.now_ms < restart.1,
                Rule::Script(sc) => sc.db_down,
                Rule::Calm => false,
            };
            // A scripted kill may land on any statement; a chaos kill only inside a
            // transaction (outside one it is the same as a kill between steps).
            let scripted = matches!(s.rule, Rule::Script(_));
            if down {
                Fault::DbDown
            } else if (in_tx || scripted) && s.kill(KillKind::MidTransaction) {
                Fault::Kill
            } else {
                Fault::Go
            }
        };
        s.statements += 1;
        answer
    }

    fn send(
        &mut self,
        key: &str,
        _phone: &str,
        body: &str,
        committed_attempts: Option<i64>,
    ) -> Result<SendAnswer, Killed> {
        let mut guard = self.state();
        let s = &mut *guard;
        s.ops.push(Op::Send {
            key: key.to_string(),
            committed_attempts,
        });
        if s.kill(KillKind::BetweenCommitAndSend) {
            return Err(Killed);
        }
        let action = s.action_for(body);
        s.action_of_key.insert(key.to_string(), action);
        let i = s.sends;
        let answer = match &s.rule {
            Rule::Script(sc) => sc
                .sends
                .get(i)
                .or(sc.sends.last())
                .cloned()
                .unwrap_or(SendAnswer::Timeout),
            _ => {
                let now_s = s.now_ms as f64 / 1000.0;
                s.provider.send(now_s, action, key)
            }
        };
        s.sends += 1;
        let worker = s.worker.clone();
        s.note(
            action,
            format!("{worker} sends with key {key:?}: {}", send_text(&answer)),
        );
        // The story tells what the caller could not see: whether a text went out.
        let truth = match s.provider.log().last() {
            Some(super::provider::Entry::Effect { message_id, .. }) => {
                format!("the provider texted the customer: {message_id}")
            }
            Some(super::provider::Entry::Replay { .. }) => {
                "the provider knew the key: no new text".to_string()
            }
            Some(super::provider::Entry::Send { reached: false, .. }) => {
                "the request never reached the provider".to_string()
            }
            _ => String::new(),
        };
        if !truth.is_empty() && !matches!(s.rule, Rule::Script(_)) {
            s.note(action, format!("  ({truth})"));
        }
        if s.kill(KillKind::RequestOnTheWire) {
            s.note(
                action,
                format!("{worker} killed with the request on the wire (the answer is lost)"),
            );
            return Err(Killed);
        }
        Ok(answer)
    }

    fn lookup(&mut self, key: &str) -> Result<LookupAnswer, Killed> {
        let mut guard = self.state();
        let s = &mut *guard;
        s.ops.push(Op::Lookup {
            key: key.to_string(),
        });
        if s.killed.is_some() {
            return Err(Killed);
        }
        let i = s.lookups;
        let answer = match &s.rule {
            Rule::Script(sc) => sc
                .lookups
                .get(i)
                .or(sc.lookups.last())
                .cloned()
                .unwrap_or(LookupAnswer::Timeout),
            _ => {
                let now_s = s.now_ms as f64 / 1000.0;
                s.provider.lookup(now_s, key)
            }
        };
        s.lookups += 1;
        let worker = s.worker.clone();
        let action = s.action_of_key.get(key).copied().unwrap_or(0);
        s.note(
            action,
            format!("{worker} looks up {key:?}: {}", lookup_text(&answer)),
        );
        Ok(answer)
    }
}

fn send_text(a: &SendAnswer) -> String {
    match a {
        SendAnswer::Accepted { message_id } => format!("accepted as {message_id}"),
        SendAnswer::Timeout => "timeout (unknown)".into(),
    }
}

fn lookup_text(a: &LookupAnswer) -> String {
    match a {
        LookupAnswer::Found { message_id, status } => {
            format!("found {message_id}, {}", status_name(*status))
        }
        LookupAnswer::NotFound => "not found".into(),
        LookupAnswer::Timeout => "timeout (unknown)".into(),
    }
}

pub fn status_name(s: Status) -> &'static str {
    match s {
        Status::Accepted => "accepted",
        Status::Sent => "sent",
        Status::Delivered => "delivered",
        Status::Failed => "failed",
    }
}

pub fn store_name(i: u64) -> String {
    format!("store-{i:03}")
}

pub fn action_row(id: u64, store: u64, created_ms: u64) -> ActionRow {
    ActionRow {
        id,
        store: store_name(store),
        phone: format!("+1555{id:07}"),
        body: format!("Order {id} has shipped"),
        created_ms,
    }
}

/// What a learner step returned, checked against the piece's contract.
enum Step {
    Claimed(Option<(u64, i64)>),
    Intent(Option<String>),
    Wait(u64),
    Done,
    Fenced,
    Beat(bool),
    Nothing,
}

/// What `claim` returned, checked against its contract (the chaos and fairness
/// runs both read it here).
pub(super) fn read_claim(v: &Value) -> Result<Option<(u64, i64)>, String> {
    match v {
        Value::None => Ok(None),
        Value::Tuple(t) if t.len() == 2 => match (&t[0], &t[1]) {
            (Value::Int(id), Value::Int(epoch)) if *id > 0 => Ok(Some((*id as u64, *epoch))),
            _ => Err(format!(
                "claim returned {v}; expected (action_id, epoch), two ints, or None"
            )),
        },
        _ => Err(format!(
            "claim returned {v}; expected (action_id, epoch) or None"
        )),
    }
}

fn read_step(call: &Call, v: &Value) -> Result<Step, String> {
    match call {
        Call::Claim { .. } => read_claim(v).map(Step::Claimed),
        Call::WriteIntent { .. } => match v {
            Value::None => Ok(Step::Intent(None)),
            Value::Str(k) => Ok(Step::Intent(Some(k.clone()))),
            _ => Err(format!("write_intent returned {v}; expected the key (a str) or None")),
        },
        Call::DeliverStep { .. } => match v {
            Value::Tuple(t) if t.len() == 2 => match (&t[0], &t[1]) {
                (Value::Str(w), Value::Int(ms)) if w == "wait" && *ms > 0 => Ok(Step::Wait(*ms as u64)),
                (Value::Str(d), Value::Str(_)) if d == "done" => Ok(Step::Done),
                (Value::Str(f), Value::None) if f == "fenced" => Ok(Step::Fenced),
                _ => Err(format!(
                    "deliver_step returned {v}; expected (\"wait\", ms > 0), (\"done\", status) or (\"fenced\", None)"
                )),
            },
            _ => Err(format!("deliver_step returned {v}; expected a tuple of two")),
        },
        Call::Heartbeat { .. } => match v {
            Value::Bool(b) => Ok(Step::Beat(*b)),
            _ => Err(format!("heartbeat returned {v}; expected True or False")),
        },
        Call::OnWebhook { .. } | Call::Merge { .. } => Ok(Step::Nothing),
    }
}

struct Chaos<'h> {
    host: &'h mut dyn Host,
    plan: ChaosPlan,
    cfg: Config,
    rng: SeededRng,
    /// The provider, the fault rules and the stories, shared with the host's steps.
    world: StepWorld,
    now_ms: u64,
    seq: u64,
    events: BTreeMap<(u64, u64), Ev>,
    workers: Vec<Worker>,
    /// Webhooks the receiver could not take (the database was restarting): again later.
    hook_retry: Vec<Webhook>,
    report: ChaosReport,
    zombies_left: u64,
    slow_left: u64,
    arrived: u64,
    /// The epoch of each action's latest claim: only its holder is doing the job.
    current_epoch: BTreeMap<u64, i64>,
    taken: Vec<u64>,
    /// The run stopped early: the learner's code ran past the time limit.
    stopped: Option<RunStop>,
}

const CRASH_MESSAGES_KEPT: usize = 3;

impl<'h> Chaos<'h> {
    fn at(&mut self, t_ms: u64, ev: Ev) {
        self.seq += 1;
        self.events.insert((t_ms, self.seq), ev);
    }

    fn log(&mut self, action: u64, what: String) {
        let mut w = self.world.state();
        w.now_ms = self.now_ms;
        w.note(action, what);
    }

    fn frozen_kill_due(&mut self) -> bool {
        let now = self.now_ms;
        let mut w = self.world.state();
        match &mut w.rule {
            Rule::Chaos { quota, .. } if quota.allowed(KillKind::FrozenPastLease, now) => {
                quota.take(KillKind::FrozenPastLease);
                true
            }
            _ => false,
        }
    }

    /// Runs one learner step for worker `w` (or the webhook receiver when `None`).
    /// Returns the checked result, or None when the worker died or crashed.
    fn step(&mut self, w: Option<usize>, call: Call) -> Option<Step> {
        let worker = w.map_or_else(|| "webhooks".to_string(), |w| self.workers[w].name());
        self.world.begin(self.now_ms, &worker, w.is_some());
        let answer = self.host.call(&call, &self.world);
        let killed = self.world.killed();
        self.report.steps += 1;
        if let (Some(kind), Some(w)) = (killed, w) {
            self.kill(w, kind);
            return None;
        }
        if let Err(LearnerError::Timeout { .. }) = &answer {
            self.stopped = answer.clone().err().map(RunStop::from);
            return None;
        }
        let checked = answer
            .map_err(|e| e.to_string())
            .and_then(|v| read_step(&call, &v));
        match checked {
            Ok(step) => Some(step),
            Err(message) => {
                self.report.crashes += 1;
                let (down_from, down_to) = (
                    self.plan.db_restart_at_ms,
                    self.plan.db_restart_at_ms + self.plan.db_restart_ms,
                );
                let db_up = !(down_from..down_to).contains(&self.now_ms);
                if db_up {
                    self.report.crashes_db_up += 1;
                }
                // The restart's own failures are expected; the others are shown.
                if db_up && self.report.crash_messages.len() < CRASH_MESSAGES_KEPT {
                    self.report.crash_messages.push(format!(
                        "{} at {} ms: {message}",
                        call.function(),
                        self.now_ms
                    ));
                }
                if let Some(w) = w {
                    let action = self.workers[w].job.as_ref().map_or(0, |j| j.action);
                    self.log(
                        action,
                        format!("{worker}: {} failed, the worker restarts", call.function()),
                    );
                    self.crash(w);
                }
                None
            }
        }
    }

    fn kill(&mut self, w: usize, kind: KillKind) {
        let name = self.workers[w].name();
        let action = self.workers[w].job.as_ref().map_or(0, |j| j.action);
        self.report.kills[kind as usize] += 1;
        self.log(action, format!("{name} killed ({})", kill_name(kind)));
        self.crash(w);
    }

    /// The worker's process is gone; a new one starts after `respawn_ms`.
    fn crash(&mut self, w: usize) {
        let name = self.workers[w].name();
        self.host.kill(&name);
        let wk = &mut self.workers[w];
        wk.gen += 1;
        wk.job = None;
        wk.dead = true;
        wk.idle = false;
        wk.mode = Mode::Healthy;
        let t = self.now_ms + self.plan.respawn_ms;
        self.at(t, Ev::Respawn(w));
    }

    fn drop_job(&mut self, w: usize) {
        let wk = &mut self.workers[w];
        wk.gen += 1;
        wk.job = None;
        wk.mode = Mode::Healthy;
        let (gen, t) = (wk.gen, self.now_ms + self.plan.step_ms);
        self.at(t, Ev::Step(w, gen));
    }

    fn next_step(&mut self, w: usize, after_ms: u64) {
        let gen = self.workers[w].gen;
        self.at(self.now_ms + after_ms, Ev::Step(w, gen));
    }

    fn worker_step(&mut self, w: usize) {
        let name = self.workers[w].name();
        let now_ms = self.now_ms;
        // A frozen worker wakes: killed while frozen, or a zombie with its old epoch.
        if let Mode::Frozen(dies) = self.workers[w].mode {
            if dies {
                self.kill(w, KillKind::FrozenPastLease);
                return;
            }
            let action = self.workers[w].job.as_ref().map_or(0, |j| j.action);
            self.log(
                action,
                format!("{name} resumes after a freeze (a zombie unless its epoch still holds)"),
            );
            self.workers[w].mode = Mode::Healthy;
            // Its heartbeat resumes with it.
            let gen = self.workers[w].gen;
            self.at(now_ms, Ev::Beat(w, gen));
        }
        if self.workers[w].mode == Mode::Slow {
            self.workers[w].mode = Mode::Healthy;
        }
        let Some(job) = self.workers[w].job.clone() else {
            return self.claim(w, &name, now_ms);
        };
        let call = if job.intent {
            Call::DeliverStep {
                action_id: job.action,
                worker: name.clone(),
                epoch: job.epoch,
                now_ms,
            }
        } else {
            Call::WriteIntent {
                action_id: job.action,
                worker: name.clone(),
                epoch: job.epoch,
            }
        };
        let Some(step) = self.step(Some(w), call) else {
            return;
        };
        match step {
            Step::Intent(Some(key)) => {
                self.log(
                    job.action,
                    format!(
                        "{name} wrote the intent at epoch {}, key {key:?}",
                        job.epoch
                    ),
                );
                if let Some(j) = self.workers[w].job.as_mut() {
                    j.intent = true;
                }
                self.after_step(w);
            }
            Step::Intent(None) | Step::Fenced => {
                self.log(
                    job.action,
                    format!("{name} fenced at epoch {}: drops the job", job.epoch),
                );
                self.drop_job(w);
            }
            Step::Wait(ms) => {
                let ms = ms.clamp(1, 10 * self.cfg.lease_ms);
                if self.maybe_freeze(w) {
                    return;
                }
                self.next_step(w, ms);
            }
            Step::Done => {
                self.log(job.action, format!("{name} settled the action"));
                self.drop_job(w);
            }
            _ => self.drop_job(w),
        }
    }

    /// Between two steps of a job: maybe freeze the worker past its lease, or make
    /// it slow; otherwise its next step comes at once.
    fn after_step(&mut self, w: usize) {
        if self.maybe_freeze(w) {
            return;
        }
        self.next_step(w, self.plan.step_ms);
    }

    fn maybe_freeze(&mut self, w: usize) -> bool {
        let action = self.workers[w].job.as_ref().map_or(0, |j| j.action);
        let name = self.workers[w].name();
        let lease = self.cfg.lease_ms;
        let t = self.now_ms;
        // Frozen-then-killed workers come at their own pace; zombies and slow
        // workers at most two at a time, so the rest keep the queue moving.
        let away = self
            .workers
            .iter()
            .filter(|o| matches!(o.mode, Mode::Slow | Mode::Frozen(false)))
            .count();
        let frozen_kill_due = self.frozen_kill_due();
        if frozen_kill_due
            || (away < 2
                && self.zombies_left > 0
                && self.due(self.plan.zombies, self.zombies_left, t)
                && self.rng.chance(0.3))
        {
            let dies = frozen_kill_due;
            if !dies {
                self.zombies_left -= 1;
                self.report.zombies += 1;
            }
            let for_ms = lease + self.rng.below(lease);
            self.workers[w].mode = Mode::Frozen(dies);
            self.log(
                action,
                format!("{name} freezes for {for_ms} ms (its lease is {lease} ms)"),
            );
            self.next_step(w, for_ms);
            return true;
        }
        if away < 2
            && self.slow_left > 0
            && self.due(self.plan.slow, self.slow_left, t)
            && self.rng.chance(0.3)
        {
            self.slow_left -= 1;
            self.report.slow += 1;
            self.workers[w].mode = Mode::Slow;
            self.log(
                action,
                format!(
                    "{name} is slow but healthy: its next step comes in {} ms",
                    2 * lease
                ),
            );
            self.next_step(w, 2 * lease);
            return true;
        }
        false
    }

    /// Whether the next of `total` things is due by now (spread over the arrivals).
    fn due(&self, total: u64, left: u64, t: u64) -> bool {
        let done = total - left;
        done * self.plan.arrivals_ms < total * t.min(self.plan.arrivals_ms) + 1
    }

    fn claim(&mut self, w: usize, name: &str, now_ms: u64) {
        let call = Call::Claim {
            worker: name.to_string(),
            now_ms,
        };
        let Some(step) = self.step(Some(w), call) else {
            return;
        };
        match step {
            Step::Claimed(Some((action, epoch))) => {
                // Held by someone healthy, alive and not frozen? Then the claim took
                // a job from a worker that was doing it.
                let current = self.current_epoch.get(&action).copied();
                let holder = self.workers.iter().position(|o| {
                    !o.dead
                        && o.job
                            .as_ref()
                            .is_some_and(|j| j.action == action && Some(j.epoch) == current)
                        && matches!(o.mode, Mode::Healthy | Mode::Slow)
                });
                if let Some(h) = holder.filter(|h| *h != w) {
                    self.report.taken_from_healthy += 1;
                    self.taken.push(action);
                    let hn = self.workers[h].name();
                    self.log(
                        action,
                        format!("{name} claimed it while {hn} was alive and working on it"),
                    );
                }
                self.log(action, format!("{name} claimed it at epoch {epoch}"));
                self.current_epoch.insert(action, epoch);
                let wk = &mut self.workers[w];
                wk.job = Some(Job {
                    action,
                    epoch,
                    intent: false,
                });
                wk.idle = false;
                self.after_step(w);
                let gen = self.workers[w].gen;
                self.at(now_ms + self.cfg.lease_ms / 3, Ev::Beat(w, gen));
            }
            _ => {
                self.workers[w].idle = true;
                self.next_step(w, self.plan.idle_poll_ms);
            }
        }
    }

    fn beat(&mut self, w: usize) {
        let Some(job) = self.workers[w].job.clone() else {
            return;
        };
        if !matches!(self.workers[w].mode, Mode::Healthy | Mode::Slow) {
            return;
        }
        let name = self.workers[w].name();
        let call = Call::Heartbeat {
            action_id: job.action,
            worker: name.clone(),
            epoch: job.epoch,
            now_ms: self.now_ms,
        };
        match self.step(Some(w), call) {
            Some(Step::Beat(true)) => {
                let gen = self.workers[w].gen;
                self.at(self.now_ms + self.cfg.lease_ms / 3, Ev::Beat(w, gen));
            }
            Some(_) => {
                self.log(
                    job.action,
                    format!("{name}'s heartbeat was fenced: drops the job"),
                );
                self.drop_job(w);
            }
            None => {}
        }
    }

    fn hooks(&mut self) {
        let mut due = std::mem::take(&mut self.hook_retry);
        let now_s = self.now_ms as f64 / 1000.0;
        due.extend(self.world.state().provider.due_webhooks(now_s));
        for hook in due {
            // Stories go by the keys actually sent (a key of any shape).
            let action = self
                .world
                .0
                .borrow()
                .action_of_key
                .get(&hook.key)
                .copied()
                .unwrap_or(0);
            self.log(
                action,
                format!(
                    "webhook {} says {} for {:?}",
                    hook.event_id,
                    status_name(hook.status),
                    hook.key
                ),
            );
            let before = self.report.crashes;
            let r = self.step(
                None,
                Call::OnWebhook {
                    event: hook.clone(),
                },
            );
            if r.is_none() || self.report.crashes > before {
                // The receiver answered with an error: the provider delivers it again.
                self.hook_retry.push(hook);
            }
        }
    }

    fn wake_idle(&mut self) {
        if let Some(w) = self.workers.iter().position(|w| w.idle && !w.dead) {
            self.workers[w].idle = false;
            self.workers[w].gen += 1;
            self.next_step(w, 0);
        }
    }

    fn quiet(&self) -> bool {
        self.arrived == self.plan.actions
            && self.hook_retry.is_empty()
            && self.world.0.borrow().provider.pending_webhooks() == 0
            && self.workers.iter().all(|w| w.job.is_none() && !w.dead)
    }

    fn run(mut self) -> Result<ChaosReport, RunStop> {
        let stores: Vec<String> = (0..self.plan.stores).map(store_name).collect();
        self.host.reset(&self.cfg, &stores)?;
        // Arrivals: evenly spread with jitter, stores drawn from the seed.
        for id in 1..=self.plan.actions {
            let t = (id - 1) * self.plan.arrivals_ms / self.plan.actions
                + self.rng.below(self.plan.arrivals_ms / self.plan.actions);
            self.at(t, Ev::Arrive(id));
        }
        for w in 0..self.plan.workers as usize {
            self.workers.push(Worker {
                base: format!("w{w}"),
                life: 1,
                gen: 0,
                job: None,
                mode: Mode::Healthy,
                idle: true,
                dead: false,
            });
        }
        let restart_at = self.plan.db_restart_at_ms;
        self.at(restart_at, Ev::RestartDb);
        self.at(100, Ev::Hooks);
        let stop_ms = self.plan.arrivals_ms + self.plan.drain_max_ms;
        let mut quiet_polls = 0;
        while let Some(((t, _), ev)) = self.events.pop_first() {
            if t > stop_ms {
                break;
            }
            if let Some(why) = self.stopped.take() {
                return Err(why);
            }
            self.now_ms = t;
            match ev {
                Ev::Arrive(id) => {
                    let store = self.rng.below(self.plan.stores);
                    let row = action_row(id, store, t);
                    self.world
                        .state()
                        .action_of_body
                        .insert(row.body.clone(), id);
                    self.host.enqueue(&row)?;
                    self.arrived += 1;
                    self.log(id, format!("arrives for {}", row.store));
                    self.wake_idle();
                }
                Ev::Step(w, gen) => {
                    if self.workers[w].gen == gen && !self.workers[w].dead {
                        if self.workers[w].job.is_none() && self.quiet() {
                            quiet_polls += 1;
                            // Every worker found nothing twice in a row: done.
                            if quiet_polls > 2 * self.plan.workers {
                                break;
                            }
                        } else {
                            quiet_polls = 0;
                        }
                        self.worker_step(w);
                    }
                }
                Ev::Beat(w, gen) => {
                    if self.workers[w].gen == gen && !self.workers[w].dead {
                        self.beat(w);
                    }
                }
                Ev::Respawn(w) => {
                    let wk = &mut self.workers[w];
                    wk.dead = false;
                    wk.life += 1;
                    wk.gen += 1;
                    wk.idle = false;
                    self.next_step(w, 0);
                }
                Ev::Hooks => {
                    self.hooks();
                    self.at(t + 100, Ev::Hooks);
                }
                Ev::RestartDb => {
                    self.host.restart_db();
                    self.log(
                        0,
                        format!(
                            "the database restarts; down for {} ms",
                            self.plan.db_restart_ms
                        ),
                    );
                }
            }
        }
        self.report.end_ms = self.now_ms;
        self.finish()
    }

    fn finish(mut self) -> Result<ChaosReport, RunStop> {
        let actions: Vec<u64> = (1..=self.plan.actions).collect();
        let world = self.world.0.clone();
        let world = world.borrow();
        let per_action = super::provider::per_action(world.provider.log());
        self.report.tally = tally_of(&per_action, actions.iter().copied());
        let finals = world.provider.final_statuses();
        let outbox: BTreeMap<u64, String> = self
            .host
            .dump()?
            .outbox
            .into_iter()
            .map(|o| (o.action_id, o.status))
            .collect();
        let mut failing = Vec::new();
        for a in &actions {
            let mut why = Vec::new();
            let log = per_action.get(a).copied().unwrap_or_default();
            match log.effects {
                0 => why.push("no message went out".to_string()),
                1 => {}
                n => why.push(format!("{n} messages went out")),
            }
            if log.resends_without_lookup > 0 {
                why.push("sent again with no lookup since the previous send".to_string());
            }
            if let Some(f) = finals.get(a) {
                let o = outbox.get(a);
                if o.map(String::as_str) != Some(status_name(*f)) {
                    self.report.outcomes_differ += 1;
                    why.push(format!(
                        "the outbox says {} but the provider's final status is {}",
                        o.map_or("nothing (no row)".to_string(), |s| format!("{s:?}")),
                        status_name(*f)
                    ));
                }
            }
            if self.taken.contains(a) {
                why.push("claimed while a healthy worker was still on it".to_string());
            }
            if !why.is_empty() {
                failing.push((*a, why.join("; ")));
            }
        }
        const STORIES: usize = 5;
        for (a, _) in failing.iter().take(STORIES) {
            let lines: Vec<StoryLine> = world
                .story
                .iter()
                .filter(|l| l.action == *a)
                .cloned()
                .collect();
            self.report.stories.insert(*a, lines);
        }
        self.report.failing = failing;
        Ok(self.report)
    }
}

/// Every kind, in its order (the index of a plan's or a report's counts).
pub const KILL_KINDS: [KillKind; 4] = [
    KillKind::MidTransaction,
    KillKind::BetweenCommitAndSend,
    KillKind::RequestOnTheWire,
    KillKind::FrozenPastLease,
];

pub fn kill_name(k: KillKind) -> &'static str {
    match k {
        KillKind::MidTransaction => "mid-transaction",
        KillKind::BetweenCommitAndSend => "between commit and send",
        KillKind::RequestOnTheWire => "with a request on the wire",
        KillKind::FrozenPastLease => "while frozen past the lease",
    }
}

/// The chaos run: the plan's actions through the host's pieces, with kills,
/// freezes, slow workers, one database restart and the provider's webhooks.
pub fn chaos_run(host: &mut dyn Host, plan: &ChaosPlan) -> Result<ChaosReport, RunStop> {
    let restart = (
        plan.db_restart_at_ms,
        plan.db_restart_at_ms + plan.db_restart_ms,
    );
    let sim = Chaos {
        host,
        cfg: Config::default(),
        rng: SeededRng::new(plan.seed),
        world: StepWorld::new(
            Provider::new(plan.seed ^ 0x9e37_79b9, Rates::default(), Timing::default()),
            SeededRng::new(plan.seed ^ 0x5eed_fa17),
            Rule::Chaos {
                quota: Quota {
                    arrivals_ms: plan.arrivals_ms,
                    kills: plan.kills,
                    done: [0; 4],
                },
                restart,
            },
        ),
        now_ms: 0,
        seq: 0,
        events: BTreeMap::new(),
        workers: Vec::new(),
        hook_retry: Vec::new(),
        report: ChaosReport {
            seed: plan.seed,
            tally: ChaosTally::default(),
            outcomes_differ: 0,
            taken_from_healthy: 0,
            kills: [0; 4],
            zombies: 0,
            slow: 0,
            db_restart: restart,
            crashes: 0,
            crashes_db_up: 0,
            crash_messages: Vec::new(),
            steps: 0,
            end_ms: 0,
            failing: Vec::new(),
            stories: BTreeMap::new(),
        },
        zombies_left: plan.zombies,
        slow_left: plan.slow,
        arrived: 0,
        current_epoch: BTreeMap::new(),
        taken: Vec::new(),
        stopped: None,
        plan: plan.clone(),
    };
    sim.run()
}
