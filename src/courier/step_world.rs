//! The world one step of a learner piece sees: the provider (scripted in a unit
//! case, the misbehaving one in a run), the faults dealt at each statement and
//! provider call, and the operations it logs.

use super::chaos_plan::KillKind;
use super::chaos_report::StoryLine;
use super::faults::{Fault, Faults, Killed};
use super::provider::{status_name, LookupAnswer, Provider, Rates, SendAnswer, Timing};
use crate::lab::{Arg, LabWorld, OpValue, WorldOp};
use crate::rng::SeededRng;
use serde::Serialize;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

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
    /// The database restarts at this statement of the step (0-based): the open
    /// transaction is rolled back and the statement raises, as under `db_down`; the
    /// statements after it find the database up again (the differential's restart
    /// racer, `units::Racer::Restart`; no case file has one).
    pub restart_at_statement: Option<usize>,
    pub sends: Vec<SendAnswer>,
    pub lookups: Vec<LookupAnswer>,
    /// Not a world rule: the unit test also kills the call at each of its
    /// statements in turn and checks the tables are left as before or as after.
    pub all_or_nothing: bool,
    /// Real concurrency: another worker's write commits between two statements of
    /// the call (on a connection of its own).
    pub interleave: Option<Interleave>,
    /// Real concurrency too: another connection's write (a webhook) commits between
    /// two statements of the call (the differential tests' races; no case file has one).
    pub write_during: Option<WriteDuring>,
}

/// Another connection's write while the call runs: once the caller has run
/// `after_statement` statements, at its first statement from then on with no
/// transaction open (else right after the call).
#[derive(Clone, Debug, PartialEq)]
pub struct WriteDuring {
    pub after_statement: usize,
    pub write: OtherWrite,
}

/// A write another connection commits, as the piece that makes it does.
#[derive(Clone, Debug, PartialEq)]
pub enum OtherWrite {
    /// `on_webhook`: the event id recorded (a known one changes nothing), the status
    /// merged forward into the row with its key, its message id kept if the row has
    /// one, `events_applied` + 1.
    Webhook(super::provider::Webhook),
}

impl OtherWrite {
    /// The write on tables (the reference's and the trusted side's view).
    pub fn apply(&self, t: &mut super::tables::Tables) {
        match self {
            OtherWrite::Webhook(e) => {
                if t.webhook_events.contains(&e.event_id) {
                    return;
                }
                t.webhook_events.push(e.event_id.clone());
                if let Some(o) = t.outbox.iter_mut().find(|o| o.idem_key == e.key) {
                    let reported = status_name(e.status);
                    if super::reference::rank(reported) > super::reference::rank(&o.status) {
                        o.status = reported.to_string();
                    }
                    if o.message_id.is_none() {
                        o.message_id = Some(e.message_id.clone());
                    }
                    o.events_applied += 1;
                }
            }
        }
    }

    /// The same write as the statements another connection runs and commits.
    pub fn statements(&self) -> String {
        match self {
            OtherWrite::Webhook(e) => {
                let rank = |col: &str| {
                    format!("CASE {col} WHEN 'sending' THEN 0 WHEN 'accepted' THEN 1 WHEN 'sent' THEN 2 WHEN 'delivered' THEN 3 WHEN 'failed' THEN 3 ELSE -1 END")
                };
                let status = status_name(e.status);
                serde_json::json!([
                    [
                        format!(
                            "UPDATE outbox SET status = CASE WHEN {} > {} THEN ? ELSE status END, \
                             message_id = COALESCE(message_id, ?), events_applied = events_applied + 1 \
                             WHERE idem_key = ? AND NOT EXISTS (SELECT 1 FROM webhook_events WHERE event_id = ?)",
                            rank("?"),
                            rank("status")
                        ),
                        [status, status, e.message_id, e.key, e.event_id]
                    ],
                    [
                        "INSERT INTO webhook_events (event_id) VALUES (?) ON CONFLICT DO NOTHING",
                        [e.event_id]
                    ]
                ])
            }
        }
        .to_string()
    }
}

/// Another worker's write that commits while the call runs: once the caller has
/// run `after_statement` statements, at its first statement from then on that finds
/// its connection with no transaction open (a write the caller holds locked waits
/// for it, as it would on a real database). If that moment never comes, it commits
/// right after the call.
#[derive(Clone, Debug, PartialEq)]
pub struct Interleave {
    pub after_statement: usize,
    pub claim: OtherClaim,
}

/// Another worker's claim of one action, a compare-and-set on the epoch it read, as
/// `claim` makes it: the action claimed at the next epoch with a lease of
/// `lease_ms`, and its store's `last_served_ms` set to `now_ms`. It changes nothing
/// when the action moved on from `epoch`, or is not claimable at `now_ms`.
#[derive(Clone, Debug, PartialEq)]
pub struct OtherClaim {
    pub worker: String,
    pub action_id: u64,
    pub epoch: i64,
    pub now_ms: u64,
}

impl OtherClaim {
    /// The claim on tables (the reference's and the trusted side's view).
    pub fn apply(&self, t: &mut super::tables::Tables, lease_ms: u64) {
        let Some(a) = t.actions.iter_mut().find(|a| {
            a.id == self.action_id
                && a.epoch == self.epoch
                && (a.state == "pending"
                    || (a.state == "claimed" && a.lease_until_ms <= self.now_ms))
        }) else {
            return;
        };
        a.state = "claimed".into();
        a.owner = Some(self.worker.clone());
        a.epoch += 1;
        a.lease_until_ms = self.now_ms + lease_ms;
        let store = a.store.clone();
        if let Some(s) = t.stores.iter_mut().find(|s| s.store == store) {
            s.last_served_ms = self.now_ms;
        }
    }

    /// The same claim as the statements another connection runs and commits (what
    /// the store is asked to do: `statement`'s answer).
    pub fn statements(&self, lease_ms: u64) -> String {
        serde_json::json!([
            [
                "UPDATE actions SET state = 'claimed', owner = ?, epoch = epoch + 1, lease_until_ms = ? \
                 WHERE id = ? AND epoch = ? AND (state = 'pending' OR (state = 'claimed' AND lease_until_ms <= ?))",
                [self.worker, self.now_ms + lease_ms, self.action_id, self.epoch, self.now_ms]
            ],
            [
                "UPDATE stores SET last_served_ms = ? WHERE store = \
                 (SELECT store FROM actions WHERE id = ? AND owner = ? AND epoch = ?)",
                [self.now_ms, self.action_id, self.worker, self.epoch + 1]
            ]
        ])
        .to_string()
    }
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
/// the backend holds during a call (`StepWorld`).
pub struct WorldState {
    pub provider: Provider,
    rng: SeededRng,
    rule: Rule,
    pub(super) action_of_body: BTreeMap<String, u64>,
    /// Keys seen in sends, for the stories of lookups with keys of any shape.
    pub(super) action_of_key: BTreeMap<String, u64>,
    pub(super) story: Vec<StoryLine>,
    pub(super) now_ms: u64,
    worker: String,
    may_kill: bool,
    killed: Option<KillKind>,
    pub ops: Vec<Op>,
    statements: usize,
    sends: usize,
    lookups: usize,
    /// The script's interleaved write has committed.
    interleaved: bool,
    /// The script's other write during the call has committed.
    write_done: bool,
    /// `cfg.lease_ms` of a unit case's run: the lease of the interleaved claim.
    lease_ms: u64,
}

/// The handle a backend's step reaches the world through.
#[derive(Clone)]
pub struct StepWorld(pub(super) Rc<RefCell<WorldState>>);

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
            interleaved: false,
            write_done: false,
            lease_ms: super::tables::Config::default().lease_ms,
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

    /// The chaos run's world: each kind of kill spread evenly over the arrivals
    /// (`kills` in `KillKind` order), the database down during `restart` (ms).
    pub fn chaos(
        provider: Provider,
        rng: SeededRng,
        arrivals_ms: u64,
        kills: [u64; 4],
        restart: (u64, u64),
    ) -> StepWorld {
        StepWorld::new(
            provider,
            rng,
            Rule::Chaos {
                quota: Quota {
                    arrivals_ms,
                    kills,
                    done: [0; 4],
                },
                restart,
            },
        )
    }

    /// In a chaos run: whether a freeze past the lease that ends in a kill is due
    /// now; if so, it is counted.
    pub fn frozen_kill_due(&self, now_ms: u64) -> bool {
        match &mut self.state().rule {
            Rule::Chaos { quota, .. } if quota.allowed(KillKind::FrozenPastLease, now_ms) => {
                quota.take(KillKind::FrozenPastLease);
                true
            }
            _ => false,
        }
    }

    /// A unit case's world; `lease_ms` is the case's `cfg.lease_ms`, the lease of
    /// another worker's claim that the script interleaves.
    pub fn scripted(script: Script, now_ms: u64, worker: &str, lease_ms: u64) -> StepWorld {
        let w = StepWorld::new(
            Provider::new(0, Rates::default(), Timing::default()),
            SeededRng::new(0),
            Rule::Script(script),
        );
        w.state().lease_ms = lease_ms;
        w.begin(now_ms, worker, true);
        w
    }

    pub(super) fn begin(&self, now_ms: u64, worker: &str, may_kill: bool) {
        let mut s = self.0.borrow_mut();
        s.now_ms = now_ms;
        s.worker = worker.to_string();
        s.may_kill = may_kill;
        s.killed = None;
        s.ops.clear();
        s.statements = 0;
        s.sends = 0;
        s.lookups = 0;
        s.interleaved = false;
        s.write_done = false;
    }

    /// Asked before a statement: the other worker's claim, when it is to commit now,
    /// before this statement runs (it is then done).
    pub fn interleave_due(&self, in_tx: bool) -> Option<OtherClaim> {
        self.take_interleave(|s, i| {
            !in_tx && s.killed.is_none() && s.statements >= i.after_statement
        })
    }

    /// After the call: the other worker's claim if it has not committed yet (it
    /// commits now; it is then done).
    pub fn interleave_left(&self) -> Option<OtherClaim> {
        self.take_interleave(|_, _| true)
    }

    /// The script's interleaved claim, once: when it has not committed yet and
    /// `when` says now.
    fn take_interleave(
        &self,
        when: impl FnOnce(&WorldState, &Interleave) -> bool,
    ) -> Option<OtherClaim> {
        let mut s = self.0.borrow_mut();
        let Rule::Script(Script {
            interleave: Some(i),
            ..
        }) = &s.rule
        else {
            return None;
        };
        if s.interleaved || !when(&s, i) {
            return None;
        }
        let claim = i.claim.clone();
        s.interleaved = true;
        Some(claim)
    }

    /// Asked before a statement: the other connection's write the script runs during
    /// the call, when it is to commit now, before this statement runs (it is then done).
    pub fn write_due(&self, in_tx: bool) -> Option<OtherWrite> {
        self.take_write(|s, w| !in_tx && s.killed.is_none() && s.statements >= w.after_statement)
    }

    /// After the call: the script's other write if it has not committed yet.
    pub fn write_left(&self) -> Option<OtherWrite> {
        self.take_write(|_, _| true)
    }

    fn take_write(&self, when: impl FnOnce(&WorldState, &WriteDuring) -> bool) -> Option<OtherWrite> {
        let mut s = self.0.borrow_mut();
        let Rule::Script(Script {
            write_during: Some(w),
            ..
        }) = &s.rule
        else {
            return None;
        };
        if s.write_done || !when(&s, w) {
            return None;
        }
        let w = w.write.clone();
        s.write_done = true;
        Some(w)
    }

    pub fn killed(&self) -> Option<KillKind> {
        self.0.borrow().killed
    }

    pub fn ops(&self) -> Vec<Op> {
        self.0.borrow().ops.clone()
    }

    pub(super) fn state(&self) -> std::cell::RefMut<'_, WorldState> {
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

    pub(super) fn note(&mut self, action: u64, what: String) {
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
                Rule::Script(sc) => {
                    sc.db_down || sc.restart_at_statement == Some(s.statements)
                }
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

/// A step's fault points, by name (the registry's `world_ops`): the store asks
/// before each statement, and the provider's calls, with the attempts the store
/// read. Answers are text: the fault's name, or JSON of the provider's answer
/// (`{"answer": "killed"}` when the worker dies with the request). In a unit case
/// with another worker's write (`Script::interleave`), the statement's answer may be
/// that write instead of "go": a JSON list of `[sql, params]` the store runs and
/// commits on a connection of its own before it runs the statement.
pub const OPS: &[WorldOp] = &[
    WorldOp {
        name: "statement",
        args: &[Arg::Bool],
    },
    WorldOp {
        name: "send",
        args: &[Arg::Str, Arg::Str, Arg::Str, Arg::NumberOrNull],
    },
    WorldOp {
        name: "lookup",
        args: &[Arg::Str],
    },
];

const KILLED: &str = r#"{"answer":"killed"}"#;

fn answer_json<T: Serialize>(answer: Result<T, Killed>) -> OpValue {
    OpValue::Str(match answer {
        Ok(a) => serde_json::to_string(&a).expect("a provider answer serializes"),
        Err(Killed) => KILLED.into(),
    })
}

impl LabWorld for StepWorld {
    fn ops(&self) -> &'static [WorldOp] {
        OPS
    }

    fn run_op(&self, op: &WorldOp, a: &[OpValue]) -> OpValue {
        let mut world = self.clone();
        match op.name {
            "statement" => {
                let in_tx = a[0].bool();
                let other = self.interleave_due(in_tx);
                let write = self.write_due(in_tx);
                let lease_ms = self.0.borrow().lease_ms;
                OpValue::Str(match (world.statement(in_tx), other, write) {
                    (Fault::Go, Some(claim), _) => claim.statements(lease_ms),
                    (Fault::Go, None, Some(w)) => w.statements(),
                    (Fault::Go, None, None) => "go".into(),
                    (Fault::Kill, ..) => "kill".into(),
                    (Fault::DbDown, ..) => "db-down".into(),
                })
            }
            "send" => {
                let committed = a[3].number().map(|n| n as i64);
                answer_json(world.send(a[0].str(), a[1].str(), a[2].str(), committed))
            }
            "lookup" => answer_json(world.lookup(a[0].str())),
            other => unreachable!("`{other}` is not in OPS"),
        }
    }

    fn handle(&self) -> Box<dyn LabWorld> {
        Box::new(self.clone())
    }
}
