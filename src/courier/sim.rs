//! The courier simulator: virtual workers that call the learner's pieces as steps,
//! interleaved on one lab clock, killed at fault points, frozen past their lease,
//! with one database restart and the provider's webhooks. Deterministic from a seed:
//! time moves only when the next event is taken, and every draw comes from the run's
//! own rng, so a seed replays the same run native or in WASM.
//!
//! The database is the backend's (SQLite in Pyodide for learners, an in-memory store for
//! the Rust reference); the simulator reaches it only through the learner's pieces and
//! three trusted calls (`reset`, `enqueue`, `settle`, plus `outbox` to read the end).

pub use super::chaos_plan::{kill_name, ChaosPlan, KillKind, KILL_KINDS};
pub use super::chaos_report::{ChaosReport, StoryLine};
pub use super::backend::{Call, Fault, Faults, Backend, Killed, RunStop};
pub use super::provider::status_name;
use super::provider::{tally_of, ChaosTally, Provider, Rates, Timing, Webhook};
pub use super::step_world::{Op, Script, StepWorld, WorldState};
pub use super::tables::{ActionRow, ActionState, Config, OutboxState, StoreState, Tables};
use crate::rng::SeededRng;
use crate::value::{LearnerError, Value};
use std::collections::BTreeMap;

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
                // Any finite number of ms above 0, an int or a float (a fraction of a
                // ms rounds up: the lab clock counts whole ms).
                (Value::Str(w), Value::Int(ms)) if w == "wait" && *ms > 0 => Ok(Step::Wait(*ms as u64)),
                (Value::Str(w), Value::Float(ms)) if w == "wait" && ms.is_finite() && *ms > 0.0 => {
                    Ok(Step::Wait(ms.ceil() as u64))
                }
                (Value::Str(d), Value::Str(_)) if d == "done" => Ok(Step::Done),
                (Value::Str(f), Value::None) if f == "fenced" => Ok(Step::Fenced),
                _ => Err(format!(
                    "deliver_step returned {v}; expected (\"wait\", ms) with ms a number above 0, (\"done\", status) or (\"fenced\", None)"
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

struct Chaos<'b> {
    backend: &'b mut dyn Backend,
    plan: ChaosPlan,
    cfg: Config,
    rng: SeededRng,
    /// The provider, the fault rules and the stories, shared with the backend's steps.
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

/// The most steps a chaos run takes per action before it stops as failed: the
/// reference takes about 6 (11,396 for seed 1042's 2,000 actions). Code that keeps
/// its workers busy without finishing (claims that take each other's jobs, a
/// webhook that fails at every delivery) would otherwise run until the drain's end,
/// hundreds of thousands of steps, each a pipe's round trip under `./lab grade`.
pub const STEPS_PER_ACTION_CAP: u64 = 20;

impl<'b> Chaos<'b> {
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
        self.world.frozen_kill_due(self.now_ms)
    }

    /// Runs one learner step for worker `w` (or the webhook receiver when `None`).
    /// Returns the checked result, or None when the worker died or crashed.
    fn step(&mut self, w: Option<usize>, call: Call) -> Option<Step> {
        let worker = w.map_or_else(|| "webhooks".to_string(), |w| self.workers[w].name());
        self.world.begin(self.now_ms, &worker, w.is_some());
        let answer = self.backend.call(&call, &self.world);
        let killed = self.world.killed();
        self.report.steps += 1;
        if let (Some(kind), Some(w)) = (killed, w) {
            self.kill(w, kind);
            return None;
        }
        match &answer {
            Err(LearnerError::Timeout { .. }) => {
                self.stopped = answer.clone().err().map(RunStop::from);
                return None;
            }
            // The store's verdict on the call (a transaction left open, SQL that
            // only SQLite takes): the run stops here, naming the call.
            Err(LearnerError::Refused { message, .. }) => {
                self.stopped = Some(RunStop::Failed(format!(
                    "at {} ms of lab time, `{}`: {message}",
                    self.now_ms,
                    super::units::call_text(&call)
                )));
                return None;
            }
            _ => {}
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
        self.backend.kill(&name);
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
                    if self.report.taken_from_healthy == 1 {
                        if let Some(stop) = self.lease_not_a_time(action, name, &hn) {
                            self.stopped = Some(stop);
                            return;
                        }
                    }
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

    /// At the first job claimed from a healthy worker: whether the claim set a lease
    /// that is not `now_ms + cfg.lease_ms` (a duration, say), which makes every
    /// claim take the others' jobs once the lab clock passes it. Read once, by the
    /// trusted side.
    fn lease_not_a_time(&mut self, action: u64, name: &str, holder: &str) -> Option<RunStop> {
        let tables = match self.backend.dump() {
            Ok(t) => t,
            Err(e) => return Some(e),
        };
        let lease = tables
            .actions
            .iter()
            .find(|a| a.id == action)?
            .lease_until_ms;
        let want = self.now_ms + self.cfg.lease_ms;
        (lease != want).then(|| {
            RunStop::Failed(format!(
                "at {now} ms of lab time, `claim(db, {name:?}, {now}, cfg)` took action {action} from {holder}, which was alive and working on it, and set its lease_until_ms to {lease}. A lease is a time, not a duration: lease_until_ms = now_ms + cfg.lease_ms ({want} here), and it has run out only once lease_until_ms <= now_ms; a lease that ends at a fixed time lets every claim after it take the jobs of live workers.",
                now = self.now_ms,
            ))
        })
    }

    /// The run has taken more steps than any finishing code needs: it stops, saying
    /// what it found so far.
    fn over_budget(&self) -> RunStop {
        let world = self.world.0.borrow();
        let per_action = super::provider::per_action(world.provider.log());
        let sent = (1..=self.plan.actions)
            .filter(|a| per_action.get(a).is_some_and(|l| l.effects > 0))
            .count();
        let mut found = vec![format!(
            "{sent} of {} actions have had a message",
            self.plan.actions
        )];
        if self.report.taken_from_healthy > 0 {
            found.push(format!(
                "{} jobs were claimed from a healthy worker (a live lease, lease_until_ms > now_ms, is not claimable)",
                self.report.taken_from_healthy
            ));
        }
        if self.report.crashes_db_up > 0 {
            found.push(format!(
                "{} steps failed while the database was up (each restarts its worker; a webhook whose handler fails is delivered again){}",
                self.report.crashes_db_up,
                self.report
                    .crash_messages
                    .first()
                    .map_or(String::new(), |m| format!(
                        "; the first: {}",
                        crate::report::cap_chars(m, 1500)
                    ))
            ));
        }
        RunStop::Failed(format!(
            "it took {} steps, more than {} per action (a correct solution takes about 6), and reached {} ms of lab time without finishing: your workers keep working without getting the actions done. So far {}.",
            self.report.steps,
            STEPS_PER_ACTION_CAP,
            self.now_ms,
            found.join("; ")
        ))
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
        self.backend.reset(&self.cfg, &stores)?;
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
            if self.report.steps > STEPS_PER_ACTION_CAP * self.plan.actions {
                return Err(self.over_budget());
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
                    self.backend.enqueue(&row)?;
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
                    self.backend.restart_db();
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
            .backend
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

/// The chaos run: the plan's actions through the backend's pieces, with kills,
/// freezes, slow workers, one database restart and the provider's webhooks.
pub fn chaos_run(backend: &mut dyn Backend, plan: &ChaosPlan) -> Result<ChaosReport, RunStop> {
    let restart = (
        plan.db_restart_at_ms,
        plan.db_restart_at_ms + plan.db_restart_ms,
    );
    let sim = Chaos {
        backend,
        cfg: Config::default(),
        rng: SeededRng::new(plan.seed),
        world: StepWorld::chaos(
            Provider::new(plan.seed ^ 0x9e37_79b9, Rates::default(), Timing::default()),
            SeededRng::new(plan.seed ^ 0x5eed_fa17),
            plan.arrivals_ms,
            plan.kills,
            restart,
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
