//! The differential test: hundreds of seeded random inputs, each compared call by
//! call with the reference. On a mismatch it shrinks the input greedily and reports
//! the smallest failing input it found.

use super::case::{Call, DifferentialSpec};
use super::model::{Policy, SendResult, Task, TaskKind, DONE_TTL_S};
use super::play::{play, Outcome};
use super::world::World;
use super::Solution;
use crate::report::TestStatus;
use crate::rng::SeededRng;
use crate::value::float_repr;

/// At most this many candidate inputs are tried while shrinking.
const SHRINK_BUDGET: usize = 400;

/// A random input for one of the learner's functions.
trait Scenario: Clone + PartialEq {
    fn describe(&self) -> String;
    /// Simpler variants of this input; each moves one field toward a plain value.
    fn simpler(&self) -> Vec<Self>;
    /// The world this input's calls run in, as it is before the first.
    fn world(&self) -> World;
    /// The calls this input makes, at their clock times.
    fn calls(&self) -> Vec<(f64, Call)>;

    fn check(&self, solution: &mut dyn Solution) -> Outcome {
        let calls = self.calls();
        let steps = calls.iter().map(|(t_s, call)| (*t_s, call));
        // A passing input's trace is never shown (the test reports its first
        // failing input only), so it is not written.
        play(
            solution,
            &self.world(),
            &self.world(),
            steps,
            false,
            |_, t_s, call| format!("At t={} s: {}", float_repr(t_s), call.text()),
        )
    }
}

pub fn run(
    solution: &mut dyn Solution,
    run_seed: u64,
    case_seed: u64,
    spec: &DifferentialSpec,
) -> Outcome {
    let mut gen = SeededRng::new(run_seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ case_seed);
    let next: Vec<NextStepInput> = (0..spec.next_step)
        .map(|_| NextStepInput::random(&mut gen))
        .collect();
    let deliver: Vec<DeliverInput> = (0..spec.deliver_once)
        .map(|_| DeliverInput::random(&mut gen))
        .collect();
    if let Some(outcome) = first_failure(solution, "next_step", &next, run_seed) {
        return outcome;
    }
    first_failure(solution, "deliver_once", &deliver, run_seed)
        .unwrap_or_else(|| Outcome::pass(Vec::new()))
}

fn first_failure<S: Scenario>(
    solution: &mut dyn Solution,
    function: &str,
    inputs: &[S],
    run_seed: u64,
) -> Option<Outcome> {
    for (i, input) in inputs.iter().enumerate() {
        // Written only for the input that fails: hundreds pass in every run.
        let header = || {
            format!(
                "{function} differs from the contract on random input {} of {} (run seed {run_seed}).",
                i + 1,
                inputs.len()
            )
        };
        let outcome = input.check(solution);
        match outcome.status {
            TestStatus::Pass => {}
            TestStatus::Fail => {
                let (small, failure, steps) = shrink(solution, input.clone(), outcome);
                let message = format!(
                    "{}\nSmallest failing input found ({steps} simplifications):\n{}\n\n{}",
                    header(),
                    small.describe(),
                    failure.message.unwrap_or_default()
                );
                return Some(Outcome {
                    message: Some(message),
                    ..failure
                });
            }
            TestStatus::Error | TestStatus::Timeout => {
                let message = format!(
                    "{}\nInput:\n{}\n{}",
                    header(),
                    input.describe(),
                    outcome.message.unwrap_or_default()
                );
                return Some(Outcome {
                    message: Some(message),
                    trace: Vec::new(),
                    ..outcome
                });
            }
        }
    }
    None
}

fn shrink<S: Scenario>(solution: &mut dyn Solution, input: S, failure: Outcome) -> (S, Outcome, usize) {
    // A candidate the same as its input is no simplification: not tried.
    let simpler = |s: &S| s.simpler().into_iter().filter(|c| c != s).collect();
    crate::shrink::shrink(input, failure, SHRINK_BUDGET, simpler, |candidate| {
        let outcome = candidate.check(solution);
        (outcome.status == TestStatus::Fail).then_some(outcome)
    })
}

// ---- next_step --------------------------------------------------------------------

#[derive(Clone, Debug, PartialEq)]
struct NextStepInput {
    seed: u64,
    task: Task,
    result: SendResult,
    now_s: f64,
    policy: Policy,
}

impl NextStepInput {
    fn random(g: &mut SeededRng) -> Self {
        let max_attempts = 1 + g.below(6) as u32;
        let kind = *g.pick(&[TaskKind::Critical, TaskKind::Normal, TaskKind::Bulk]);
        // Every field of the failure on its own: a permanent failure may carry a
        // Retry-After, and its reason says nothing of which kind it is (a 4xx with
        // permanent=False, a 503 with permanent=True). Only `permanent` decides.
        let result = SendResult {
            ok: false,
            permanent: g.chance(0.15),
            reason: (*g.pick(&REASONS)).into(),
            retry_after_s: g
                .chance(0.4)
                .then(|| *g.pick(&[0.0, 0.5, 1.0, 2.0, 5.0, 30.0, 120.0])),
        };
        let now_s = g.below(2000) as f64 / 2.0;
        // A quarter of the inputs sit exactly on the expiry boundary when they can.
        let ahead_s = match result.retry_after_s {
            Some(r) if g.chance(0.25) => r,
            _ => *g.pick(&[0.0, 1.0, 2.5, 10.0, 60.0, 600.0, 3600.0]),
        };
        let mut input = NextStepInput {
            seed: g.next_u64() % 1000,
            task: Task {
                key: format!("order-{}:shipped", 1000 + g.below(9000)),
                kind,
                attempt: g.below(u64::from(max_attempts) + 1) as u32,
                expires_at_s: now_s + ahead_s,
                fallback: g
                    .pick(&[None, Some("sms"), Some("email")])
                    .map(String::from),
            },
            result,
            now_s,
            policy: Policy {
                claim_ttl_s: *g.pick(&CLAIM_TTLS_S),
                at_most_once: false,
                min_delay_s: *g.pick(&MIN_DELAYS_S),
                base_delay_s: *g.pick(&BASE_DELAYS_S),
                max_attempts,
            },
        };
        // Drawn apart from the kind: bulk traffic usually runs at most once, but
        // `next_step` must decide a drop by the task's kind alone.
        input.policy.at_most_once = g.chance(0.5);
        input
    }
}

/// The reasons a failure may give, permanent-sounding and transient-sounding alike.
const REASONS: [&str; 7] = [
    "410 Unregistered",
    "400 InvalidToken",
    "404 NoSuchNumber",
    "503",
    "429",
    "500 Internal",
    "504 Timeout",
];
const CLAIM_TTLS_S: [f64; 3] = [10.0, 30.0, 60.0];
const MIN_DELAYS_S: [f64; 4] = [0.0, 0.5, 1.0, 5.0];
const BASE_DELAYS_S: [f64; 4] = [0.5, 1.0, 2.0, 3.0];

impl Scenario for NextStepInput {
    fn describe(&self) -> String {
        format!("  rng seed {}\n  {}", self.seed, self.calls()[0].1.text())
    }

    fn simpler(&self) -> Vec<Self> {
        let mut out = Vec::new();
        let mut with = |f: &dyn Fn(&mut Self)| {
            let mut c = self.clone();
            f(&mut c);
            out.push(c);
        };
        with(&|c| c.task.attempt = 0);
        with(&|c| c.task.attempt = c.task.attempt.saturating_sub(1));
        with(&|c| c.task.fallback = None);
        with(&|c| c.task.kind = TaskKind::Normal);
        with(&|c| c.task.key = "t".into());
        with(&|c| c.result.permanent = false);
        with(&|c| c.result.retry_after_s = None);
        with(&|c| c.result.retry_after_s = c.result.retry_after_s.map(|_| 0.0));
        with(&|c| c.result.reason = "503".into());
        with(&|c| c.policy.claim_ttl_s = 30.0);
        with(&|c| {
            c.task.expires_at_s -= c.now_s;
            c.now_s = 0.0;
        });
        with(&|c| c.task.expires_at_s = c.task.expires_at_s.floor());
        with(&|c| c.task.expires_at_s = 3600.0);
        with(&|c| c.policy.min_delay_s = 0.0);
        with(&|c| c.policy.base_delay_s = 1.0);
        with(&|c| c.policy.max_attempts = 5);
        with(&|c| c.policy.at_most_once = false);
        with(&|c| c.seed = 0);
        out
    }

    fn world(&self) -> World {
        World::new(self.seed, Vec::new())
    }

    fn calls(&self) -> Vec<(f64, Call)> {
        let call = Call::NextStep {
            task: self.task.clone(),
            result: self.result.clone(),
            now_s: self.now_s,
            policy: self.policy.clone(),
        };
        vec![(self.now_s, call)]
    }
}

// ---- deliver_once -----------------------------------------------------------------

#[derive(Clone, Debug, PartialEq)]
enum Preload {
    Empty,
    /// A done marker written this long ago.
    Done {
        age_s: f64,
    },
    /// Another worker's claim written this long ago (stale once age >= claim_ttl_s).
    Claim {
        age_s: f64,
    },
}

#[derive(Clone, Debug, PartialEq)]
struct DeliverInput {
    seed: u64,
    task: Task,
    policy: Policy,
    preload: Preload,
    answers: Vec<SendResult>,
    times_s: Vec<f64>,
}

impl DeliverInput {
    fn random(g: &mut SeededRng) -> Self {
        let claim_ttl_s = *g.pick(&CLAIM_TTLS_S);
        let preload = match g.below(4) {
            0 | 1 => Preload::Empty,
            2 => Preload::Done {
                age_s: *g.pick(&[1.0, 3600.0, DONE_TTL_S - 1.0, DONE_TTL_S]),
            },
            _ => Preload::Claim {
                age_s: *g.pick(&[0.0, 5.0, claim_ttl_s - 0.5, claim_ttl_s, claim_ttl_s + 1.0]),
            },
        };
        // A failed answer's fields each on their own, as in next_step's inputs.
        let answer = |g: &mut SeededRng| {
            if g.chance(0.5) {
                return SendResult::ok();
            }
            SendResult {
                ok: false,
                permanent: g.chance(0.4),
                reason: (*g.pick(&REASONS)).into(),
                retry_after_s: g.chance(0.3).then_some(2.0),
            }
        };
        let answers = (0..1 + g.below(3)).map(|_| answer(g)).collect();
        let mut times_s = vec![0.0];
        for _ in 0..g.below(3) {
            let gap = *g.pick(&[
                0.5,
                5.0,
                claim_ttl_s - 0.5,
                claim_ttl_s,
                claim_ttl_s + 1.0,
                DONE_TTL_S,
            ]);
            times_s.push(times_s.last().unwrap() + gap);
        }
        let kind = *g.pick(&[TaskKind::Critical, TaskKind::Normal, TaskKind::Bulk]);
        // The fields deliver_once has no use for are drawn too (an attempt past
        // max_attempts, an expiry already behind the clock): it must send whatever
        // they say, so a solution that reads them where it should not is seen.
        let max_attempts = 1 + g.below(6) as u32;
        DeliverInput {
            seed: g.next_u64() % 1000,
            task: Task {
                key: format!("order-{}:shipped", 1000 + g.below(9000)),
                kind,
                attempt: g.below(u64::from(max_attempts) + 2) as u32,
                expires_at_s: *g.pick(&[0.0, 10.0, 3600.0]),
                fallback: g.chance(0.5).then(|| "sms".into()),
            },
            policy: Policy {
                claim_ttl_s,
                at_most_once: g.chance(0.3),
                min_delay_s: *g.pick(&MIN_DELAYS_S),
                base_delay_s: *g.pick(&BASE_DELAYS_S),
                max_attempts,
            },
            preload,
            answers,
            times_s,
        }
    }
}

impl Scenario for DeliverInput {
    fn describe(&self) -> String {
        let key = format!("'sent:{}'", self.task.key);
        let kv = match &self.preload {
            Preload::Empty => "the kv starts empty".to_string(),
            Preload::Done { age_s } => format!(
                "the kv starts with {key} = 'done', written at t={} s with ttl={}",
                float_repr(-age_s),
                float_repr(DONE_TTL_S)
            ),
            Preload::Claim { age_s } => format!(
                "the kv starts with {key} = 'sending' (another worker's claim), written at t={} s with ttl={}",
                float_repr(-age_s),
                float_repr(self.policy.claim_ttl_s)
            ),
        };
        let answers: Vec<String> = self.answers.iter().map(SendResult::repr).collect();
        let times: Vec<String> = self.times_s.iter().map(|t| float_repr(*t)).collect();
        format!(
            "  rng seed {}; {kv}\n  the provider answers, in order: {}\n  deliver_once is called at t = {} s with\n  {}\n  {}",
            self.seed,
            answers.join(", "),
            times.join(", "),
            self.task.repr(),
            self.policy.repr()
        )
    }

    fn simpler(&self) -> Vec<Self> {
        let mut out = Vec::new();
        let mut with = |f: &dyn Fn(&mut Self)| {
            let mut c = self.clone();
            f(&mut c);
            out.push(c);
        };
        with(&|c| c.times_s.truncate(1));
        with(&|c| {
            if c.times_s.len() > 1 {
                c.times_s.pop();
            }
        });
        with(&|c| c.preload = Preload::Empty);
        with(&|c| c.answers.truncate(1));
        with(&|c| c.answers = vec![SendResult::ok()]);
        with(&|c| c.policy.at_most_once = false);
        with(&|c| c.task.kind = TaskKind::Normal);
        with(&|c| c.task.fallback = None);
        with(&|c| c.task.key = "t".into());
        with(&|c| c.task.attempt = 0);
        with(&|c| c.task.expires_at_s = 3600.0);
        with(&|c| c.policy.min_delay_s = 1.0);
        with(&|c| c.policy.base_delay_s = 2.0);
        with(&|c| c.policy.max_attempts = 5);
        with(&|c| c.seed = 0);
        out
    }

    fn world(&self) -> World {
        let world = World::new(self.seed, self.answers.clone());
        let key = format!("sent:{}", self.task.key);
        match &self.preload {
            Preload::Empty => {}
            Preload::Done { age_s } => world.preload(&key, "done", Some(DONE_TTL_S), -age_s),
            Preload::Claim { age_s } => {
                world.preload(&key, "sending", Some(self.policy.claim_ttl_s), -age_s)
            }
        }
        world
    }

    fn calls(&self) -> Vec<(f64, Call)> {
        let call = Call::DeliverOnce {
            task: self.task.clone(),
            policy: self.policy.clone(),
        };
        self.times_s.iter().map(|t| (*t, call.clone())).collect()
    }
}
