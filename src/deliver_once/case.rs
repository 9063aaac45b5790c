//! The case format: what a test does to the world and what must hold afterwards.
//! Case files are TOML (documented in `hidden-tests/README.md`); `build.rs` compiles
//! them in as JSON, and this module turns them into checked `Case`s, naming the file,
//! the case and the field of anything malformed.

use super::model::{Policy, SendResult, Task, TaskKind};
use super::rules::Rule;
use crate::report::TestKind;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::fmt;

// ---- The file format, as people write it -------------------------------------------

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileSpec {
    #[serde(default)]
    defaults: DefaultsSpec,
    case: Vec<CaseSpec>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct DefaultsSpec {
    seed: Option<u64>,
    #[serde(default)]
    task: TaskPatch,
    #[serde(default)]
    policy: PolicyPatch,
}

#[derive(Deserialize, Default, Clone)]
#[serde(deny_unknown_fields)]
struct TaskPatch {
    key: Option<String>,
    kind: Option<TaskKind>,
    attempt: Option<u32>,
    expires_at_s: Option<f64>,
    /// `""` means the task has no fallback channel (TOML has no null).
    fallback: Option<String>,
}

#[derive(Deserialize, Default, Clone)]
#[serde(deny_unknown_fields)]
struct PolicyPatch {
    claim_ttl_s: Option<f64>,
    at_most_once: Option<bool>,
    min_delay_s: Option<f64>,
    base_delay_s: Option<f64>,
    max_attempts: Option<u32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CaseSpec {
    name: String,
    rules: Vec<Rule>,
    seed: Option<u64>,
    #[serde(default)]
    task: TaskPatch,
    #[serde(default)]
    policy: PolicyPatch,
    #[serde(default)]
    kv: Vec<KvPreload>,
    #[serde(default)]
    provider: Vec<Answer>,
    #[serde(default)]
    step: Vec<StepSpec>,
    differential: Option<DifferentialSpec>,
    #[serde(default)]
    expect: FinalExpect,
}

/// A key in the kv before the test starts: a done marker, a live or a stale claim.
#[derive(Deserialize, Clone, Debug)]
#[serde(deny_unknown_fields)]
pub struct KvPreload {
    pub key: String,
    pub value: String,
    /// Absent: the key never expires.
    pub ttl_s: Option<f64>,
    /// When it was written (before the test's first step, often negative).
    #[serde(default)]
    pub written_at_s: f64,
}

/// One scripted provider answer.
#[derive(Deserialize, Clone, Debug)]
#[serde(tag = "answer", rename_all = "lowercase", deny_unknown_fields)]
pub enum Answer {
    Ok,
    Transient {
        reason: String,
        retry_after_s: Option<f64>,
    },
    Permanent {
        reason: String,
    },
}

impl Answer {
    pub fn to_result(&self) -> SendResult {
        match self {
            Answer::Ok => SendResult::ok(),
            Answer::Transient {
                reason,
                retry_after_s,
            } => SendResult::transient(reason, *retry_after_s),
            Answer::Permanent { reason } => SendResult::permanent(reason),
        }
    }
}

#[derive(Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
enum CallName {
    DeliverOnce,
    NextStep,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StepSpec {
    at_s: f64,
    call: CallName,
    #[serde(default)]
    task: TaskPatch,
    /// `next_step` only: the failed send's result.
    result: Option<Answer>,
    #[serde(default)]
    expect: StepExpect,
}

/// What must hold after one call. Every field is optional; the grader also compares
/// the call, effect by effect, with the reference.
#[derive(Deserialize, Default, Clone, Debug)]
#[serde(deny_unknown_fields)]
pub struct StepExpect {
    /// A string, or an array for a tuple: `["retry", 4.0]`.
    pub returns: Option<serde_json::Value>,
    /// How many times `provider.send` is called.
    pub sends: Option<usize>,
    /// The arguments of every `rng.uniform` call, in order: `[[0, 4]]`.
    pub draws: Option<Vec<[f64; 2]>>,
    /// Every kv write that changed something, in order.
    pub writes: Option<Vec<WriteSpec>>,
}

#[derive(Deserialize, Clone, Debug, PartialEq)]
#[serde(tag = "op", rename_all = "lowercase", deny_unknown_fields)]
pub enum WriteSpec {
    /// Absent `ttl_s`: written without a ttl; absent `nx`: false.
    Set {
        key: String,
        value: String,
        ttl_s: Option<f64>,
        #[serde(default)]
        nx: bool,
    },
    Delete {
        key: String,
    },
}

#[derive(Deserialize, Default, Clone, Debug)]
#[serde(deny_unknown_fields)]
pub struct FinalExpect {
    /// Every live key and its value after the last step.
    pub kv: Option<BTreeMap<String, String>>,
}

#[derive(Deserialize, Clone, Copy, Debug)]
#[serde(deny_unknown_fields)]
pub struct DifferentialSpec {
    /// How many random failures `next_step` is compared on.
    pub next_step: usize,
    /// How many random scenarios `deliver_once` is compared on.
    pub deliver_once: usize,
}

// ---- Checked cases, as the runner uses them ------------------------------------------

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
    pub expect: StepExpect,
}

#[derive(Clone, Debug)]
pub struct Scripted {
    pub seed: u64,
    pub kv: Vec<KvPreload>,
    pub provider: Vec<SendResult>,
    pub steps: Vec<Step>,
    pub expect: FinalExpect,
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
    pub body: Body,
}

/// A malformed case file, with everything needed to find the mistake.
#[derive(Clone, Debug, PartialEq)]
pub struct CaseError {
    pub file: String,
    /// The case's index and name, when the mistake is inside one.
    pub case: Option<(usize, String)>,
    /// The field's path, e.g. `case[2].step[0].call`.
    pub field: String,
    pub message: String,
}

impl fmt::Display for CaseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file)?;
        if let Some((i, name)) = &self.case {
            write!(f, ": case {i} ({name:?})")?;
        }
        write!(f, ": field `{}`: {}", self.field, self.message)
    }
}

/// Parses one compiled-in case file (JSON made from its TOML by `build.rs`).
pub fn parse_file(file: &'static str, json: &str, kind: TestKind) -> Result<Vec<Case>, CaseError> {
    let raw: serde_json::Value = serde_json::from_str(json).map_err(|e| CaseError {
        file: file.into(),
        case: None,
        field: String::new(),
        message: e.to_string(),
    })?;
    let case_at = |index: usize| {
        let name = raw["case"][index]["name"]
            .as_str()
            .unwrap_or("unnamed")
            .to_string();
        (index, name)
    };
    let spec: FileSpec = serde_path_to_error::deserialize(&raw).map_err(|e| {
        let field = e.path().to_string();
        CaseError {
            file: file.into(),
            case: case_index(&field).map(case_at),
            field,
            message: e.into_inner().to_string(),
        }
    })?;
    let defaults = spec.defaults;
    spec.case
        .into_iter()
        .enumerate()
        .map(|(i, c)| {
            let err = |field: String, message: String| CaseError {
                file: file.into(),
                case: Some(case_at(i)),
                field: format!("case[{i}].{field}"),
                message,
            };
            build_case(file, kind, &defaults, c).map_err(|(field, message)| err(field, message))
        })
        .collect()
}

fn case_index(path: &str) -> Option<usize> {
    let rest = path.strip_prefix("case[")?;
    rest[..rest.find(']')?].parse().ok()
}

type FieldError = (String, String);

fn build_case(
    file: &'static str,
    kind: TestKind,
    defaults: &DefaultsSpec,
    c: CaseSpec,
) -> Result<Case, FieldError> {
    let fail = |field: &str, message: &str| Err((field.to_string(), message.to_string()));
    if c.name.trim().is_empty() {
        return fail("name", "a case needs a name: it is what the learner sees");
    }
    if c.rules.is_empty() {
        return fail(
            "rules",
            "name at least one rule this case holds the learner to",
        );
    }
    let seed = c.seed.or(defaults.seed);
    let body = match (c.differential, c.step.is_empty()) {
        (Some(spec), true) => {
            if spec.next_step == 0 && spec.deliver_once == 0 {
                return fail("differential", "compare at least one call");
            }
            Body::Differential {
                seed: seed.unwrap_or(0),
                spec,
            }
        }
        (Some(_), false) => return fail("step", "a differential case has no steps"),
        (None, true) => return fail("step", "a case needs at least one [[case.step]]"),
        (None, false) => {
            let Some(seed) = seed else {
                return fail(
                    "seed",
                    "set a seed for the rng, in the case or in [defaults]",
                );
            };
            let task = merge_task(&defaults.task, &c.task)
                .map_err(|f| (format!("task.{f}"), missing(f)))?;
            let policy = merge_policy(&defaults.policy, &c.policy)
                .map_err(|f| (format!("policy.{f}"), missing(f)))?;
            let mut steps = Vec::new();
            let mut last_s = f64::NEG_INFINITY;
            for (j, s) in c.step.into_iter().enumerate() {
                let at = |f: &str| format!("step[{j}].{f}");
                if !s.at_s.is_finite() || s.at_s < 0.0 || s.at_s < last_s {
                    return Err((at("at_s"), "steps run at times >= 0, in order".into()));
                }
                last_s = s.at_s;
                let task = merge_task_onto(&task, &s.task);
                let call = match (s.call, s.result) {
                    (CallName::DeliverOnce, None) => Call::DeliverOnce {
                        task,
                        policy: policy.clone(),
                    },
                    (CallName::DeliverOnce, Some(_)) => {
                        return Err((
                            at("result"),
                            "deliver_once takes no result: script the provider instead".into(),
                        ))
                    }
                    (CallName::NextStep, Some(r)) => {
                        let result = r.to_result();
                        if result.ok {
                            return Err((
                                at("result"),
                                "next_step is called after a failed send: the result cannot be ok"
                                    .into(),
                            ));
                        }
                        Call::NextStep {
                            task,
                            result,
                            now_s: s.at_s,
                            policy: policy.clone(),
                        }
                    }
                    (CallName::NextStep, None) => {
                        return Err((
                            at("result"),
                            "next_step needs the failed send's result".into(),
                        ))
                    }
                };
                steps.push(Step {
                    at_s: s.at_s,
                    call,
                    expect: s.expect,
                });
            }
            Body::Scripted(Scripted {
                seed,
                kv: c.kv,
                provider: c.provider.iter().map(Answer::to_result).collect(),
                steps,
                expect: c.expect,
            })
        }
    };
    Ok(Case {
        file,
        name: c.name,
        kind,
        rules: c.rules,
        body,
    })
}

fn missing(field: &str) -> String {
    format!("`{field}` is set neither in the case nor in [defaults]")
}

fn merge_task(d: &TaskPatch, c: &TaskPatch) -> Result<Task, &'static str> {
    let fallback = c
        .fallback
        .clone()
        .or(d.fallback.clone())
        .ok_or("fallback")?;
    Ok(Task {
        key: c.key.clone().or(d.key.clone()).ok_or("key")?,
        kind: c.kind.or(d.kind).ok_or("kind")?,
        attempt: c.attempt.or(d.attempt).ok_or("attempt")?,
        expires_at_s: c.expires_at_s.or(d.expires_at_s).ok_or("expires_at_s")?,
        fallback: (!fallback.is_empty()).then_some(fallback),
    })
}

fn merge_task_onto(t: &Task, p: &TaskPatch) -> Task {
    Task {
        key: p.key.clone().unwrap_or_else(|| t.key.clone()),
        kind: p.kind.unwrap_or(t.kind),
        attempt: p.attempt.unwrap_or(t.attempt),
        expires_at_s: p.expires_at_s.unwrap_or(t.expires_at_s),
        fallback: match &p.fallback {
            None => t.fallback.clone(),
            Some(f) => (!f.is_empty()).then(|| f.clone()),
        },
    }
}

fn merge_policy(d: &PolicyPatch, c: &PolicyPatch) -> Result<Policy, &'static str> {
    Ok(Policy {
        claim_ttl_s: c.claim_ttl_s.or(d.claim_ttl_s).ok_or("claim_ttl_s")?,
        at_most_once: c.at_most_once.or(d.at_most_once).ok_or("at_most_once")?,
        min_delay_s: c.min_delay_s.or(d.min_delay_s).ok_or("min_delay_s")?,
        base_delay_s: c.base_delay_s.or(d.base_delay_s).ok_or("base_delay_s")?,
        max_attempts: c.max_attempts.or(d.max_attempts).ok_or("max_attempts")?,
    })
}
