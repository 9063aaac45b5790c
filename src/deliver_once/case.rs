//! The cases of the lab as the runner plays them: what a test does to the world. Case
//! files are TOML (documented in `hidden-tests/README.md`); `build.rs` parses and
//! checks them at build time (with `case_format.rs`, which the engine does not carry)
//! and compiles them in as Rust source that builds these values, so a malformed file
//! fails the build. Their `expect` tables are checked against the reference by the
//! tests (`tests/reference.rs`), not here.

use super::model::{Policy, SendResult, Task, TaskKind};
use super::rules::Rule;
use crate::report::TestKind;

/// A key in the kv before the test starts: a done marker, a live or a stale claim.
#[derive(Clone, Debug)]
pub struct KvPreload {
    pub key: String,
    pub value: String,
    /// Absent: the key never expires.
    pub ttl_s: Option<f64>,
    /// When it was written (before the test's first step, often negative).
    pub written_at_s: f64,
}

#[derive(Clone, Copy, Debug)]
pub struct DifferentialSpec {
    /// How many random failures `next_step` is compared on.
    pub next_step: usize,
    /// How many random scenarios `deliver_once` is compared on.
    pub deliver_once: usize,
}

#[derive(Clone, Debug)]
pub enum Call {
    DeliverOnce {
        task: Task,
        policy: Policy,
    },
    NextStep {
        task: Task,
        result: SendResult,
        now_s: f64,
        policy: Policy,
    },
}

impl Call {
    pub fn function(&self) -> &'static str {
        match self {
            Call::DeliverOnce { .. } => "deliver_once",
            Call::NextStep { .. } => "next_step",
        }
    }

    /// The call as Python would write it, with every argument shown.
    pub fn text(&self) -> String {
        match self {
            Call::DeliverOnce { task, policy } => {
                format!(
                    "deliver_once({}, provider, kv, {})",
                    task.repr(),
                    policy.repr()
                )
            }
            Call::NextStep {
                task,
                result,
                now_s,
                policy,
            } => format!(
                "next_step({}, {}, {}, {}, rng)",
                task.repr(),
                result.repr(),
                crate::value::float_repr(*now_s),
                policy.repr()
            ),
        }
    }
}

#[derive(Clone, Debug)]
pub struct Step {
    pub at_s: f64,
    pub call: Call,
}

#[derive(Clone, Debug)]
pub struct Scripted {
    pub seed: u64,
    pub kv: Vec<KvPreload>,
    pub provider: Vec<SendResult>,
    pub steps: Vec<Step>,
}

#[derive(Clone, Debug)]
pub enum Body {
    Scripted(Scripted),
    Differential { seed: u64, spec: DifferentialSpec },
}

#[derive(Clone, Debug)]
pub struct Case {
    pub file: &'static str,
    pub name: String,
    pub kind: TestKind,
    pub rules: Vec<Rule>,
    /// The learner function whose section of lab.md the case belongs to (its task).
    pub section: &'static str,
    pub body: Body,
}

/// Every case of the lab, examples first, then (with the `hidden` feature) the hidden
/// ones; each folder in file-name order, each file's cases in order.
pub(super) fn compiled() -> Vec<Case> {
    use make::*;
    include!(concat!(env!("OUT_DIR"), "/deliver_once_cases.rs"))
}

/// Constructors for the source `build.rs` generates: one call per value, not inlined,
/// rather than a struct literal with its allocations at every use. The code that
/// builds the cases is most of what they cost the WASM; this makes the module ~2.5 KB
/// gzip smaller (measured).
#[allow(dead_code)] // which of them are called depends on the case files
mod make {
    use super::*;

    #[inline(never)]
    pub fn case(
        file: &'static str,
        name: &str,
        kind: TestKind,
        rules: &[Rule],
        section: &'static str,
        body: Body,
    ) -> Case {
        Case {
            file,
            name: name.into(),
            kind,
            rules: rules.to_vec(),
            section,
            body,
        }
    }

    #[inline(never)]
    pub fn scripted(
        seed: u64,
        kv: Vec<KvPreload>,
        provider: Vec<SendResult>,
        steps: Vec<Step>,
    ) -> Body {
        Body::Scripted(Scripted {
            seed,
            kv,
            provider,
            steps,
        })
    }

    #[inline(never)]
    pub fn deliver_once(at_s: f64, task: Task, policy: Policy) -> Step {
        Step {
            at_s,
            call: Call::DeliverOnce { task, policy },
        }
    }

    /// `next_step` is called with the step's time as `now`.
    #[inline(never)]
    pub fn next_step(at_s: f64, task: Task, result: SendResult, policy: Policy) -> Step {
        Step {
            at_s,
            call: Call::NextStep {
                task,
                result,
                now_s: at_s,
                policy,
            },
        }
    }

    #[inline(never)]
    pub fn task(
        key: &str,
        kind: TaskKind,
        attempt: u32,
        expires_at_s: f64,
        fallback: &str,
    ) -> Task {
        Task {
            key: key.into(),
            kind,
            attempt,
            expires_at_s,
            fallback: (!fallback.is_empty()).then(|| fallback.into()),
        }
    }

    #[inline(never)]
    pub fn policy(
        claim_ttl_s: f64,
        at_most_once: bool,
        min_delay_s: f64,
        base_delay_s: f64,
        max_attempts: u32,
    ) -> Policy {
        Policy {
            claim_ttl_s,
            at_most_once,
            min_delay_s,
            base_delay_s,
            max_attempts,
        }
    }

    #[inline(never)]
    pub fn kv(key: &str, value: &str, ttl_s: Option<f64>, written_at_s: f64) -> KvPreload {
        KvPreload {
            key: key.into(),
            value: value.into(),
            ttl_s,
            written_at_s,
        }
    }
}
