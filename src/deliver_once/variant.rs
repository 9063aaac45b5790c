//! Hidden inputs drawn per submission (issue 28): a seeded transform of each hidden
//! case that keeps the rule it tests and changes every input a learner could learn
//! from one report and hard-code for the next.
//!
//! A report's per-test statuses leak the hidden inputs a bit at a time (a submission
//! that passes or fails each hidden test on one bit of its task key spelled the keys
//! out over 21 submissions). Drawn per submission, what one submission learns is
//! worth nothing to the next. What a variant changes, consistently wherever it
//! appears in the case:
//!
//! - every task key (`order-2001:shipped`), in the tasks and in the kv
//!   (`sent:<key>`), each distinct key to a distinct fresh one;
//! - the clock: every time (step times, `now`, `expires_at`, when a kv key was
//!   written) moves by one whole number of seconds, so every duration, TTL and
//!   boundary (a retry landing exactly at expiry) is exactly what it was;
//! - fallback channels and the provider's reasons, each distinct one to a distinct
//!   one of its kind (a permanent reason stays permanent);
//! - the differential test's draws (its seed).
//!
//! What it keeps: each task's kind and attempt, every policy and TTL, the provider's
//! answers and Retry-After, and each scripted case's rng seed: those are the rule a
//! case tests (the floor of a jitter needs the draw that falls under it), and the
//! reference computes what the contract expects at grading time, as for every case.
//! `tests/variants.rs` holds every variant to the fixed case's meaning: the
//! reference does the same thing in both (renamed, moved in time), and every mutant
//! of the catalogue that fails a fixed case fails its variant.

use super::case::{Body, Call, Case, KvPreload, Scripted};
use super::model::{SendResult, Task};
use super::reference::CLAIM_PREFIX as KV_PREFIX;
use crate::report::TestKind;
use crate::rng::{mix, SeededRng};

/// Fresh task keys are `<what>-<number>:<event>`, like the cases' own.
const KEY_WHATS: [&str; 8] = [
    "order", "invoice", "parcel", "refund", "booking", "return", "pickup", "payment",
];
const KEY_EVENTS: [&str; 8] = [
    "shipped",
    "paid",
    "delivered",
    "out-for-delivery",
    "refunded",
    "ready",
    "delayed",
    "cancelled",
];
const CHANNELS: [&str; 8] = [
    "sms", "email", "push", "voice", "whatsapp", "telegram", "letter", "webhook",
];
const PERMANENT_REASONS: [&str; 8] = [
    "410 Unregistered",
    "400 InvalidToken",
    "404 NoSuchNumber",
    "403 Blocked",
    "400 BadDeviceToken",
    "410 Gone",
    "400 MalformedNumber",
    "404 UnknownRecipient",
];
const TRANSIENT_REASONS: [&str; 8] = [
    "503",
    "429",
    "500 Internal",
    "504 Timeout",
    "502 Bad Gateway",
    "503 Overloaded",
    "429 Too Many Requests",
    "500 Server Error",
];
/// The clock moves by a whole number of seconds below this: every time in the
/// cases stays exact (they are multiples of 0.5 s below 2^21 s).
const OFFSET_MAX_S: u64 = 1 << 20;

/// What a variant renamed and moved: each original value with its fresh one.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Renaming {
    pub keys: Vec<(String, String)>,
    pub channels: Vec<(String, String)>,
    pub reasons: Vec<(String, String)>,
    /// Added to every time of the case.
    pub offset_s: f64,
}

impl Renaming {
    fn fresh<'a>(pairs: &'a [(String, String)], original: &'a str) -> &'a str {
        pairs
            .iter()
            .find(|(o, _)| o == original)
            .map_or(original, |(_, f)| f.as_str())
    }

    pub fn key(&self, original: &str) -> String {
        Self::fresh(&self.keys, original).to_string()
    }

    /// A kv key: `sent:<task key>` with the task key renamed, any other whole.
    pub fn kv_key(&self, original: &str) -> String {
        match original.strip_prefix(KV_PREFIX) {
            Some(task_key) => format!("{KV_PREFIX}{}", self.key(task_key)),
            None => self.key(original),
        }
    }

    pub fn channel(&self, original: &str) -> String {
        Self::fresh(&self.channels, original).to_string()
    }

    pub fn reason(&self, original: &str) -> String {
        Self::fresh(&self.reasons, original).to_string()
    }

    pub fn time(&self, t_s: f64) -> f64 {
        t_s + self.offset_s
    }

    fn task(&self, t: &Task) -> Task {
        Task {
            key: self.key(&t.key),
            kind: t.kind,
            attempt: t.attempt,
            expires_at_s: self.time(t.expires_at_s),
            fallback: t.fallback.as_deref().map(|c| self.channel(c)),
        }
    }

    pub fn result(&self, r: &SendResult) -> SendResult {
        SendResult {
            reason: if r.ok {
                r.reason.clone()
            } else {
                self.reason(&r.reason)
            },
            ..r.clone()
        }
    }

    fn call(&self, c: &Call) -> Call {
        match c {
            Call::DeliverOnce { task, policy } => Call::DeliverOnce {
                task: self.task(task),
                policy: policy.clone(),
            },
            Call::NextStep {
                task,
                result,
                now_s,
                policy,
            } => Call::NextStep {
                task: self.task(task),
                result: self.result(result),
                now_s: self.time(*now_s),
                policy: policy.clone(),
            },
        }
    }
}

/// Every case for a run with hidden variant `variant`: the examples as they are
/// (a learner reads them whole), each hidden case varied.
pub fn vary_all(cases: &[Case], variant: u64) -> Vec<Case> {
    cases
        .iter()
        .enumerate()
        .map(|(i, c)| match c.kind {
            TestKind::Example => c.clone(),
            TestKind::Hidden => vary(c, variant, i).0,
        })
        .collect()
}

/// The case at `index` of the lab's list in variant `variant`, and what it renamed.
/// Each case draws from a stream of its own, so one case's inputs say nothing of
/// another's.
pub fn vary(case: &Case, variant: u64, index: usize) -> (Case, Renaming) {
    let mut g = SeededRng::new(mix(variant, index as u64));
    let (body, renaming) = match &case.body {
        Body::Differential { seed, spec } => (
            Body::Differential {
                seed: mix(g.next_u64(), *seed),
                spec: *spec,
            },
            Renaming::default(),
        ),
        Body::Scripted(s) => {
            let renaming = renaming_for(s, &mut g);
            (Body::Scripted(apply(s, &renaming)), renaming)
        }
    };
    let varied = Case {
        body,
        ..case.clone()
    };
    (varied, renaming)
}

/// What variant `g` renames in `s`: each distinct task key, fallback channel and
/// provider reason (in order of appearance) with its fresh value, and the clock's offset.
fn renaming_for(s: &Scripted, g: &mut SeededRng) -> Renaming {
    let mut keys: Vec<String> = Vec::new();
    let mut channels: Vec<String> = Vec::new();
    // A failed send's reason, by its kind: index 0 permanent, 1 transient.
    let mut reasons: [Vec<String>; 2] = [Vec::new(), Vec::new()];
    fn add(list: &mut Vec<String>, v: &str) {
        if !list.iter().any(|x| x == v) {
            list.push(v.to_string());
        }
    }
    let mut add_reason = |r: &SendResult| {
        if !r.ok {
            add(&mut reasons[usize::from(!r.permanent)], &r.reason);
        }
    };
    for k in &s.kv {
        add(&mut keys, k.key.strip_prefix(KV_PREFIX).unwrap_or(&k.key));
    }
    s.provider.iter().for_each(&mut add_reason);
    for step in &s.steps {
        let task = match &step.call {
            Call::DeliverOnce { task, .. } => task,
            Call::NextStep { task, result, .. } => {
                add_reason(result);
                task
            }
        };
        add(&mut keys, &task.key);
        if let Some(c) = &task.fallback {
            add(&mut channels, c);
        }
    }
    let [permanent, transient] = reasons;
    let fresh_keys = fresh(g, keys.len(), &keys, |g| {
        format!(
            "{}-{}:{}",
            g.pick(&KEY_WHATS),
            1000 + g.below(99_999_000),
            g.pick(&KEY_EVENTS)
        )
    });
    Renaming {
        keys: keys.into_iter().zip(fresh_keys).collect(),
        channels: drawn_from(g, channels, &CHANNELS),
        reasons: [
            drawn_from(g, permanent, &PERMANENT_REASONS),
            drawn_from(g, transient, &TRANSIENT_REASONS),
        ]
        .concat(),
        offset_s: g.below(OFFSET_MAX_S) as f64,
    }
}

/// `n` distinct values from `draw`, none of them one of `taken`.
fn fresh(
    g: &mut SeededRng,
    n: usize,
    taken: &[String],
    draw: impl Fn(&mut SeededRng) -> String,
) -> Vec<String> {
    let mut out: Vec<String> = Vec::with_capacity(n);
    while out.len() < n {
        let v = draw(g);
        if !out.contains(&v) && !taken.contains(&v) {
            out.push(v);
        }
    }
    out
}

/// Each of `originals` paired with a distinct value of `pool` (a shuffle of the pool);
/// more originals than the pool holds keep their own values beyond it.
fn drawn_from(g: &mut SeededRng, originals: Vec<String>, pool: &[&str]) -> Vec<(String, String)> {
    let mut pool: Vec<&str> = pool.to_vec();
    for i in (1..pool.len()).rev() {
        pool.swap(i, g.below(i as u64 + 1) as usize);
    }
    originals
        .into_iter()
        .zip(pool)
        .map(|(o, f)| (o, f.to_string()))
        .collect()
}

fn apply(s: &Scripted, r: &Renaming) -> Scripted {
    Scripted {
        seed: s.seed,
        kv: s
            .kv
            .iter()
            .map(|k| KvPreload {
                key: r.kv_key(&k.key),
                value: k.value.clone(),
                ttl_s: k.ttl_s,
                written_at_s: r.time(k.written_at_s),
            })
            .collect(),
        provider: s.provider.iter().map(|a| r.result(a)).collect(),
        steps: s
            .steps
            .iter()
            .map(|st| super::case::Step {
                at_s: r.time(st.at_s),
                call: r.call(&st.call),
            })
            .collect(),
    }
}
