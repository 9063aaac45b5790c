//! The case format of lab `deliver-once`: the TOML that people write (documented in
//! `hidden-tests/README.md`), parsed and checked, naming the file, the case and the
//! field of anything malformed.
//!
//! Not a module of the engine: the engine carries no case parser. `build.rs` includes
//! this file (`#[path]`) to turn the case files into Rust source that builds the
//! engine's `case::Case`s, so a malformed file fails the build; the tests include it
//! to read the files again and check every `expect` table against the reference. So
//! it depends on std, serde and toml (and serde_path_to_error) only, never on the
//! crate: the types below mirror the engine's, and the tests check that they agree.

#![allow(dead_code)] // build.rs and each test use their own part of it

use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::Path;

// What every lab's case files share: where they are, and how a mistake is named.
#[path = "../case_files.rs"]
mod case_files;
// build.rs uses all of these; a test that includes this file may use only some.
#[allow(unused_imports)]
pub use case_files::{examples_dir, lab_files, read_lab_files, unique_names, CaseError, FileCase};

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
    /// The function whose section of lab.md the case belongs to (Exercism's task);
    /// needed only when the case calls both.
    section: Option<CallName>,
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

/// A learner function, as case files name it.
#[derive(Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum CallName {
    DeliverOnce,
    NextStep,
}

impl CallName {
    /// The function's name in Python (and in the lab's registry).
    pub fn name(self) -> &'static str {
        match self {
            CallName::DeliverOnce => "deliver_once",
            CallName::NextStep => "next_step",
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StepSpec {
    at_s: f64,
    call: CallName,
    #[serde(default)]
    task: TaskPatch,
    #[serde(default)]
    policy: PolicyPatch,
    /// `next_step` only: the failed send's result.
    result: Option<Answer>,
    #[serde(default)]
    expect: StepExpect,
}

// ---- Mirrors of the engine's types (`model.rs`, `rules.rs`) ---------------------------

/// The engine's `model::TaskKind`.
#[derive(Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum TaskKind {
    Critical,
    Normal,
    Bulk,
}

/// The engine's own rules (`rules.rs` needs nothing but serde, so it is shared as is).
#[allow(dead_code)] // the build script and the tests each use part of it
#[path = "rules.rs"]
mod rules;
pub use rules::Rule;

/// The engine's `model::Task`.
#[derive(Clone, Debug, PartialEq)]
pub struct Task {
    pub key: String,
    pub kind: TaskKind,
    pub attempt: u32,
    pub expires_at_s: f64,
    pub fallback: Option<String>,
}

/// The engine's `model::Policy`.
#[derive(Clone, Debug, PartialEq)]
pub struct Policy {
    pub claim_ttl_s: f64,
    pub at_most_once: bool,
    pub min_delay_s: f64,
    pub base_delay_s: f64,
    pub max_attempts: u32,
}

/// One scripted provider answer: `SendResult::ok()`, `::transient(..)` or
/// `::permanent(..)` in the engine.
#[derive(Deserialize, Clone, Debug, PartialEq)]
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

/// A key in the kv before the test starts: a done marker, a live or a stale claim.
#[derive(Deserialize, Clone, Debug, PartialEq)]
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

#[derive(Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct DifferentialSpec {
    /// How many random failures `next_step` is compared on.
    pub next_step: usize,
    /// How many random scenarios `deliver_once` is compared on.
    pub deliver_once: usize,
}

// ---- Expectations: checked against the reference by the tests, not compiled in ------

/// What must hold after one call. Every field is optional; the grader also compares
/// the call, effect by effect, with the reference.
#[derive(Deserialize, Default, Clone, Debug, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct StepExpect {
    /// A string, or an array for a tuple: `["retry", 4.0]`.
    pub returns: Option<toml::Value>,
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

#[derive(Deserialize, Default, Clone, Debug, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct FinalExpect {
    /// Every live key and its value after the last step.
    pub kv: Option<BTreeMap<String, String>>,
}

// ---- Checked cases ---------------------------------------------------------------------

#[derive(Clone, Debug, PartialEq)]
pub enum Call {
    DeliverOnce {
        task: Task,
        policy: Policy,
    },
    NextStep {
        task: Task,
        /// Never `Answer::Ok`: `next_step` follows a failed send.
        result: Answer,
        now_s: f64,
        policy: Policy,
    },
}

#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    pub at_s: f64,
    pub call: Call,
    pub expect: StepExpect,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Scripted {
    pub seed: u64,
    pub kv: Vec<KvPreload>,
    pub provider: Vec<Answer>,
    pub steps: Vec<Step>,
    pub expect: FinalExpect,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Body {
    Scripted(Scripted),
    Differential { seed: u64, spec: DifferentialSpec },
}

#[derive(Clone, Debug, PartialEq)]
pub struct Case {
    /// The file, relative to the project (`hidden-tests/deliver-once/10-claims.toml`).
    pub file: String,
    /// The case's index in its file.
    pub index: usize,
    pub name: String,
    /// From `hidden-tests/` rather than a lab's examples.
    pub hidden: bool,
    pub rules: Vec<Rule>,
    /// The function whose section of lab.md (its task) the case belongs to.
    pub section: CallName,
    pub body: Body,
}

impl FileCase for Case {
    fn place(&self) -> (&str, usize, &str) {
        (&self.file, self.index, &self.name)
    }
}

// ---- Finding and reading the files -----------------------------------------------------

/// Reads and checks every case of `lab` (see `lab_files`), and that no two share a name.
pub fn load_lab(root: &Path, lab: &str, hidden: bool) -> Result<Vec<Case>, CaseError> {
    case_files::load_lab(root, lab, hidden, parse_file)
}

// ---- Parsing and checking one file -----------------------------------------------------

/// Parses one case file. `file` names it in errors; `hidden`: it is a hidden one.
pub fn parse_file(file: &str, text: &str, hidden: bool) -> Result<Vec<Case>, CaseError> {
    let spec: FileSpec = case_files::parse_toml(file, text)?;
    let defaults = spec.defaults;
    spec.case
        .into_iter()
        .enumerate()
        .map(|(i, c)| {
            let name = c.name.clone();
            let (rules, section, body) =
                build_case(&defaults, c).map_err(|(field, message)| CaseError {
                    file: file.into(),
                    case: Some((i, name.clone())),
                    field: format!("case[{i}].{field}"),
                    message,
                })?;
            Ok(Case {
                file: file.into(),
                index: i,
                name,
                hidden,
                rules,
                section,
                body,
            })
        })
        .collect()
}

type FieldError = (String, String);

fn build_case(
    defaults: &DefaultsSpec,
    c: CaseSpec,
) -> Result<(Vec<Rule>, CallName, Body), FieldError> {
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
                let policy = merge_policy_onto(&policy, &s.policy);
                let call = match (s.call, s.result) {
                    (CallName::DeliverOnce, None) => Call::DeliverOnce { task, policy },
                    (CallName::DeliverOnce, Some(_)) => {
                        return Err((
                            at("result"),
                            "deliver_once takes no result: script the provider instead".into(),
                        ))
                    }
                    (CallName::NextStep, Some(Answer::Ok)) => {
                        return Err((
                            at("result"),
                            "next_step is called after a failed send: the result cannot be ok"
                                .into(),
                        ))
                    }
                    (CallName::NextStep, Some(result)) => Call::NextStep {
                        task,
                        result,
                        now_s: s.at_s,
                        policy,
                    },
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
                provider: c.provider,
                steps,
                expect: c.expect,
            })
        }
    };
    let section = section_of(&body, c.section)?;
    Ok((c.rules, section, body))
}

/// The section a case belongs to: the one function it calls, or, for a case that
/// calls both, the one its `section` names.
fn section_of(body: &Body, named: Option<CallName>) -> Result<CallName, FieldError> {
    let called: Vec<CallName> = match body {
        Body::Differential { spec, .. } => [
            (spec.deliver_once > 0).then_some(CallName::DeliverOnce),
            (spec.next_step > 0).then_some(CallName::NextStep),
        ]
        .into_iter()
        .flatten()
        .collect(),
        Body::Scripted(s) => {
            let mut names: Vec<CallName> = Vec::new();
            for step in &s.steps {
                let name = match step.call {
                    Call::DeliverOnce { .. } => CallName::DeliverOnce,
                    Call::NextStep { .. } => CallName::NextStep,
                };
                if !names.contains(&name) {
                    names.push(name);
                }
            }
            names
        }
    };
    match (named, called.as_slice()) {
        (Some(n), _) if !called.contains(&n) => Err((
            "section".into(),
            format!("the case never calls {}", n.name()),
        )),
        (Some(n), _) => Ok(n),
        (None, [one]) => Ok(*one),
        (None, _) => Err((
            "section".into(),
            "the case calls both deliver_once and next_step: name the one whose section of lab.md it belongs to (section = \"next_step\", say)".into(),
        )),
    }
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

fn merge_policy_onto(p: &Policy, s: &PolicyPatch) -> Policy {
    Policy {
        claim_ttl_s: s.claim_ttl_s.unwrap_or(p.claim_ttl_s),
        at_most_once: s.at_most_once.unwrap_or(p.at_most_once),
        min_delay_s: s.min_delay_s.unwrap_or(p.min_delay_s),
        base_delay_s: s.base_delay_s.unwrap_or(p.base_delay_s),
        max_attempts: s.max_attempts.unwrap_or(p.max_attempts),
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
