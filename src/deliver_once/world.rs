//! The lab's world: a clock that moves only when a test moves it, a kv whose TTLs
//! run on that clock, a provider that answers from a script, and a seeded rng.
//! Every call is logged with its arguments, its result and the clock time.

use super::model::SendResult;
use crate::lab::{Arg, LabWorld, OpValue, WorldOp};
use crate::report::TraceEvent;
use crate::rng::SeededRng;
use crate::value::{float_repr, opt_float_repr, opt_str_repr, str_repr};
use serde::Serialize;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

/// One call into the world, with what it returned.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Op {
    KvGet {
        key: String,
        returned: Option<String>,
    },
    KvSet {
        key: String,
        value: String,
        ttl_s: Option<f64>,
        nx: bool,
        returned: bool,
    },
    KvDelete {
        key: String,
        returned: bool,
    },
    Send {
        task_key: String,
        returned: SendResult,
    },
    Uniform {
        a: f64,
        b: f64,
        returned: f64,
    },
}

impl Op {
    /// The call as the learner wrote it, without its result.
    pub fn call_text(&self) -> String {
        match self {
            Op::KvGet { key, .. } => format!("kv.get({})", str_repr(key)),
            Op::KvSet {
                key,
                value,
                ttl_s,
                nx,
                ..
            } => format!(
                "kv.set({}, {}, ttl={}, nx={})",
                str_repr(key),
                str_repr(value),
                opt_float_repr(*ttl_s),
                if *nx { "True" } else { "False" }
            ),
            Op::KvDelete { key, .. } => format!("kv.delete({})", str_repr(key)),
            Op::Send { task_key, .. } => {
                format!("provider.send(task)  # task.key={}", str_repr(task_key))
            }
            Op::Uniform { a, b, .. } => {
                format!("rng.uniform({}, {})", float_repr(*a), float_repr(*b))
            }
        }
    }

    pub fn result_text(&self) -> String {
        let b = |x: bool| if x { "True" } else { "False" }.to_string();
        match self {
            Op::KvGet { returned, .. } => opt_str_repr(returned.as_deref()),
            Op::KvSet { returned, .. } | Op::KvDelete { returned, .. } => b(*returned),
            Op::Send { returned, .. } => returned.repr(),
            Op::Uniform { returned, .. } => float_repr(*returned),
        }
    }

    pub fn text(&self) -> String {
        format!("{} -> {}", self.call_text(), self.result_text())
    }

    pub fn kind(&self) -> &'static str {
        match self {
            Op::KvGet { .. } | Op::KvSet { .. } | Op::KvDelete { .. } => "kv",
            Op::Send { .. } => "send",
            Op::Uniform { .. } => "draw",
        }
    }

    /// Whether the call changed the world or is something the contract counts: kv
    /// writes that wrote, deletes that removed, every send and every draw. Reads and
    /// writes that changed nothing are free, so correct solutions may differ there.
    pub fn counts(&self) -> bool {
        match self {
            Op::KvGet { .. } => false,
            Op::KvSet { returned, .. } | Op::KvDelete { returned, .. } => *returned,
            Op::Send { .. } | Op::Uniform { .. } => true,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Event {
    pub t_s: f64,
    #[serde(flatten)]
    pub op: Op,
}

impl Event {
    pub fn to_trace(&self) -> TraceEvent {
        TraceEvent {
            t_s: self.t_s,
            kind: self.op.kind().into(),
            text: self.op.text(),
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
struct Entry {
    value: String,
    expires_at_s: Option<f64>,
}

#[derive(Debug)]
struct State {
    now_s: f64,
    kv: BTreeMap<String, Entry>,
    script: Vec<SendResult>,
    sends: usize,
    rng: SeededRng,
    log: Vec<Event>,
}

/// A shared handle on one world. Cloning shares it, so a host can hand the world to
/// learner code while the runner keeps its own handle; no borrow is held across a
/// call into learner code.
#[derive(Clone, Debug)]
pub struct World(Rc<RefCell<State>>);

/// A live key of the kv, as the test sees it afterwards.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct KvEntry {
    pub key: String,
    pub value: String,
    pub expires_at_s: Option<f64>,
}

impl World {
    /// A world at time 0 whose rng is seeded with `seed` and whose provider answers
    /// from `script`, in order (the last answer repeats once the script runs out).
    pub fn new(seed: u64, script: Vec<SendResult>) -> World {
        World(Rc::new(RefCell::new(State {
            now_s: 0.0,
            kv: BTreeMap::new(),
            script,
            sends: 0,
            rng: SeededRng::new(seed),
            log: Vec::new(),
        })))
    }

    /// Puts a key in the kv as if written at `written_at_s` with `ttl_s`, unlogged.
    pub fn preload(&self, key: &str, value: &str, ttl_s: Option<f64>, written_at_s: f64) {
        let entry = Entry {
            value: value.into(),
            expires_at_s: ttl_s.map(|t| written_at_s + t),
        };
        self.0.borrow_mut().kv.insert(key.into(), entry);
    }

    pub fn now_s(&self) -> f64 {
        self.0.borrow().now_s
    }

    /// Moves the clock forward. Time never moves back.
    pub fn advance_to(&self, t_s: f64) {
        let mut s = self.0.borrow_mut();
        assert!(
            t_s >= s.now_s,
            "the clock moves forward only ({} -> {t_s})",
            s.now_s
        );
        s.now_s = t_s;
    }

    fn log(&self, op: Op) {
        let mut s = self.0.borrow_mut();
        let t_s = s.now_s;
        s.log.push(Event { t_s, op });
    }

    fn live(s: &State, key: &str) -> Option<Entry> {
        // A key written at s with ttl t is gone from s + t on, as in Redis.
        s.kv.get(key)
            .filter(|e| e.expires_at_s.is_none_or(|x| s.now_s < x))
            .cloned()
    }

    pub fn kv_get(&self, key: &str) -> Option<String> {
        let returned = Self::live(&self.0.borrow(), key).map(|e| e.value);
        self.log(Op::KvGet {
            key: key.into(),
            returned: returned.clone(),
        });
        returned
    }

    /// `ttl_s` must be finite when given (the bridge refuses anything else).
    pub fn kv_set(&self, key: &str, value: &str, ttl_s: Option<f64>, nx: bool) -> bool {
        let returned = {
            let mut s = self.0.borrow_mut();
            if nx && Self::live(&s, key).is_some() {
                false
            } else {
                let expires_at_s = ttl_s.map(|t| s.now_s + t);
                s.kv.insert(
                    key.into(),
                    Entry {
                        value: value.into(),
                        expires_at_s,
                    },
                );
                true
            }
        };
        let op = Op::KvSet {
            key: key.into(),
            value: value.into(),
            ttl_s,
            nx,
            returned,
        };
        self.log(op);
        returned
    }

    pub fn kv_delete(&self, key: &str) -> bool {
        let returned = {
            let mut s = self.0.borrow_mut();
            let was_live = Self::live(&s, key).is_some();
            s.kv.remove(key);
            was_live
        };
        self.log(Op::KvDelete {
            key: key.into(),
            returned,
        });
        returned
    }

    pub fn send(&self, task_key: &str) -> SendResult {
        let returned = {
            let mut s = self.0.borrow_mut();
            let answer = s.script.get(s.sends).or(s.script.last()).cloned();
            s.sends += 1;
            answer.unwrap_or_else(SendResult::ok)
        };
        self.log(Op::Send {
            task_key: task_key.into(),
            returned: returned.clone(),
        });
        returned
    }

    pub fn uniform(&self, a: f64, b: f64) -> f64 {
        let returned = self.0.borrow_mut().rng.uniform(a, b);
        self.log(Op::Uniform { a, b, returned });
        returned
    }

    /// Everything logged since the last call.
    pub fn take_log(&self) -> Vec<Event> {
        std::mem::take(&mut self.0.borrow_mut().log)
    }

    /// The live keys, sorted.
    pub fn kv_entries(&self) -> Vec<KvEntry> {
        let s = self.0.borrow();
        s.kv.keys()
            .filter_map(|k| {
                Self::live(&s, k).map(|e| KvEntry {
                    key: k.clone(),
                    value: e.value,
                    expires_at_s: e.expires_at_s,
                })
            })
            .collect()
    }
}

/// What a learner call can do to its world: the kv, the provider and the rng, by
/// name (the registry's `world_ops`, which the hosts learn the protocol from).
pub const OPS: &[WorldOp] = &[
    WorldOp {
        name: "now_s",
        args: &[],
    },
    WorldOp {
        name: "kv_get",
        args: &[Arg::Str],
    },
    WorldOp {
        name: "kv_set",
        args: &[Arg::Str, Arg::Str, Arg::NumberOrNull, Arg::Bool],
    },
    WorldOp {
        name: "kv_delete",
        args: &[Arg::Str],
    },
    WorldOp {
        name: "send",
        args: &[Arg::Str],
    },
    WorldOp {
        name: "uniform",
        args: &[Arg::Number, Arg::Number],
    },
];

impl LabWorld for World {
    fn ops(&self) -> &'static [WorldOp] {
        OPS
    }

    fn run_op(&self, op: &WorldOp, a: &[OpValue]) -> OpValue {
        match op.name {
            "now_s" => OpValue::Number(self.now_s()),
            "kv_get" => self.kv_get(a[0].str()).map_or(OpValue::Null, OpValue::Str),
            "kv_set" => OpValue::Bool(self.kv_set(a[0].str(), a[1].str(), a[2].number(), a[3].bool())),
            "kv_delete" => OpValue::Bool(self.kv_delete(a[0].str())),
            // The provider's answer, as JSON of `SendResult`.
            "send" => OpValue::Str(
                serde_json::to_string(&self.send(a[0].str())).expect("a SendResult serializes"),
            ),
            "uniform" => OpValue::Number(self.uniform(
                a[0].number().unwrap_or_default(),
                a[1].number().unwrap_or_default(),
            )),
            other => unreachable!("`{other}` is not in OPS"),
        }
    }

    fn handle(&self) -> Box<dyn LabWorld> {
        Box::new(self.clone())
    }
}
