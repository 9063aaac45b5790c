//! Values that cross from learner code into the engine: what a function returned,
//! described with its Python type so the checks can hold the learner to exact types.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A value as Python sees it. Hosts describe the learner's return value this way.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", content = "value", rename_all = "lowercase")]
pub enum Value {
    None,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Tuple(Vec<Value>),
    List(Vec<Value>),
    /// Anything else: its type name and `repr`, for messages.
    Other {
        type_name: String,
        repr: String,
    },
}

impl Value {
    pub fn str(s: impl Into<String>) -> Value {
        Value::Str(s.into())
    }

    pub fn type_name(&self) -> &str {
        match self {
            Value::None => "NoneType",
            Value::Bool(_) => "bool",
            Value::Int(_) => "int",
            Value::Float(_) => "float",
            Value::Str(_) => "str",
            Value::Tuple(_) => "tuple",
            Value::List(_) => "list",
            Value::Other { type_name, .. } => type_name,
        }
    }

    /// Whether a learner's value equals what the contract expects. Numbers compare by
    /// value (an int where a float is expected is fine, a bool is not), with a tolerance
    /// far below anything a wrong formula produces; everything else compares exactly.
    pub fn matches(&self, expected: &Value) -> bool {
        match (self, expected) {
            (Value::Int(_) | Value::Float(_), Value::Int(_) | Value::Float(_)) => {
                close(self.as_f64().unwrap(), expected.as_f64().unwrap())
            }
            (Value::Tuple(a), Value::Tuple(b)) => {
                a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.matches(y))
            }
            _ => self == expected,
        }
    }

    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Value::Int(i) => Some(*i as f64),
            Value::Float(f) => Some(*f),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }
}

/// Two floats are the same number for grading purposes.
pub fn close(a: f64, b: f64) -> bool {
    a == b || (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

/// Python's `repr` of a float: `3.0`, `0.25`, `inf`.
pub fn float_repr(f: f64) -> String {
    if f.is_nan() {
        "nan".into()
    } else if f.is_infinite() {
        if f > 0.0 { "inf" } else { "-inf" }.into()
    } else if f.fract() == 0.0 && f.abs() < 1e16 {
        // What `format!("{f:.1}")` writes, without its exact-digits algorithm (a
        // tenth of a warm run's time in WASM, measured): the value is a whole
        // number below 1e16, which an i64 holds exactly. Only -0.0 keeps its sign.
        if f == 0.0 && f.is_sign_negative() {
            "-0.0".into()
        } else {
            format!("{}.0", f as i64)
        }
    } else {
        format!("{f}")
    }
}

/// Python's `repr` of a str, single-quoted.
pub fn str_repr(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('\'');
    for c in s.chars() {
        match c {
            '\'' => out.push_str("\\'"),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

pub fn opt_str_repr(s: Option<&str>) -> String {
    s.map_or_else(|| "None".into(), str_repr)
}

pub fn opt_float_repr(f: Option<f64>) -> String {
    f.map_or_else(|| "None".into(), float_repr)
}

impl fmt::Display for Value {
    /// Python's `repr`, so messages show values the way the learner writes them.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::None => f.write_str("None"),
            Value::Bool(b) => f.write_str(if *b { "True" } else { "False" }),
            Value::Int(i) => write!(f, "{i}"),
            Value::Float(x) => f.write_str(&float_repr(*x)),
            Value::Str(s) => f.write_str(&str_repr(s)),
            Value::Tuple(items) => {
                f.write_str("(")?;
                for (i, v) in items.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{v}")?;
                }
                f.write_str(if items.len() == 1 { ",)" } else { ")" })
            }
            Value::List(items) => {
                f.write_str("[")?;
                for (i, v) in items.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{v}")?;
                }
                f.write_str("]")
            }
            Value::Other { repr, .. } => f.write_str(repr),
        }
    }
}

/// Why a call into learner code produced no value. Confined to the test it happened in.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum LearnerError {
    /// The learner's code raised; `message` is the traceback, already trimmed to the
    /// learner's own lines by the host.
    Exception { message: String },
    /// The module does not define the function the test calls.
    MissingFunction { function: String },
    /// The run went past its time limit.
    Timeout { limit_s: f64 },
    /// The host could not run the code at all (it says why).
    Host { message: String },
    /// A lab's trusted side refused what the call did, whatever the code answered:
    /// `rule` is the lab's id of the rule (the courier store's `open-transaction`,
    /// `sqlite-only`), `message` the learner's sentence naming `function`.
    Refused {
        function: String,
        rule: String,
        message: String,
    },
}

impl fmt::Display for LearnerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LearnerError::Exception { message } => write!(f, "Your code raised an exception:\n{message}"),
            LearnerError::MissingFunction { function } => write!(
                f,
                "solution.py does not define `{function}`. Define it at the top level of the module, with the signature from the lab."
            ),
            LearnerError::Timeout { limit_s } => write!(
                f,
                "Stopped: the tests ran longer than the {limit_s} s limit. Look for a loop that never ends."
            ),
            LearnerError::Host { message } | LearnerError::Refused { message, .. } => {
                write!(f, "{message}")
            }
        }
    }
}

/// Reading what hosts send (`{"type": "str", "value": "sent"}`, `{"kind": "exception",
/// "message": ...}`) by hand: serde's derive for these tagged enums buffers its input
/// and costs the browser's WASM about 9 KB gzip, for a format this small.
impl Value {
    pub fn from_json(v: &serde_json::Value) -> Result<Value, String> {
        let ty = v
            .get("type")
            .and_then(|t| t.as_str())
            .ok_or("a value needs a string `type`")?;
        let inner = v.get("value");
        let need = || inner.ok_or_else(|| format!("a `{ty}` value needs a `value`"));
        let items = |inner: &serde_json::Value| -> Result<Vec<Value>, String> {
            let a = inner
                .as_array()
                .ok_or_else(|| format!("a `{ty}` value is an array"))?;
            a.iter().map(Value::from_json).collect()
        };
        Ok(match ty {
            "none" => Value::None,
            "bool" => Value::Bool(need()?.as_bool().ok_or("a `bool` value is true or false")?),
            "int" => Value::Int(
                need()?
                    .as_i64()
                    .ok_or("an `int` value is a 64-bit integer")?,
            ),
            "float" => Value::Float(need()?.as_f64().ok_or("a `float` value is a number")?),
            "str" => Value::Str(
                need()?
                    .as_str()
                    .ok_or("a `str` value is a string")?
                    .to_string(),
            ),
            "tuple" => Value::Tuple(items(need()?)?),
            "list" => Value::List(items(need()?)?),
            "other" => {
                let o = need()?;
                let field = |name: &str| {
                    o.get(name)
                        .and_then(|s| s.as_str())
                        .map(str::to_string)
                        .ok_or_else(|| format!("an `other` value needs a string `{name}`"))
                };
                Value::Other {
                    type_name: field("type_name")?,
                    repr: field("repr")?,
                }
            }
            other => return Err(format!("unknown value type `{other}`")),
        })
    }
}

/// The value of a host's answer `{"ok": <Value>}` when the answer has the exact shape
/// the bridge writes (one key; `type` before `value`; no other key; no `other`), read
/// straight from the text; `None` for anything else, which `Value::from_json` then
/// reads from the parsed tree, with its errors. A warm run reads about 750 answers,
/// and the tree cost most of the reading (measured in WASM); every answer this
/// accepts is one `from_json` reads to the same value (tests below).
pub fn ok_answer(text: &str) -> Option<Value> {
    serde_json::from_str::<OkAnswer>(text).ok().map(|a| a.0)
}

struct OkAnswer(Value);
struct Exact(Value);

/// Why the exact reading stopped; never shown (the tree reading follows).
fn inexact<E: serde::de::Error>() -> E {
    E::custom("not the bridge's exact shape")
}

impl<'de> Deserialize<'de> for OkAnswer {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = OkAnswer;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("{\"ok\": value}")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut m: A,
            ) -> Result<OkAnswer, A::Error> {
                if m.next_key::<&str>()? != Some("ok") {
                    return Err(inexact());
                }
                let Exact(v) = m.next_value()?;
                match m.next_key::<&str>()? {
                    None => Ok(OkAnswer(v)),
                    Some(_) => Err(inexact()),
                }
            }
        }
        d.deserialize_map(V)
    }
}

impl<'de> Deserialize<'de> for Exact {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Exact;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("{\"type\": ..., \"value\": ...}")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut m: A) -> Result<Exact, A::Error> {
                if m.next_key::<&str>()? != Some("type") {
                    return Err(inexact());
                }
                let ty: &str = m.next_value()?;
                let value = match (ty, m.next_key::<&str>()?) {
                    ("none", None) => return Ok(Exact(Value::None)),
                    (_, Some("value")) => match ty {
                        "str" => Value::Str(m.next_value()?),
                        "float" => Value::Float(m.next_value()?),
                        "int" => Value::Int(m.next_value()?),
                        "bool" => Value::Bool(m.next_value()?),
                        "tuple" => Value::Tuple(items(m.next_value()?)),
                        "list" => Value::List(items(m.next_value()?)),
                        _ => return Err(inexact()),
                    },
                    _ => return Err(inexact()),
                };
                match m.next_key::<&str>()? {
                    None => Ok(Exact(value)),
                    Some(_) => Err(inexact()),
                }
            }
        }
        fn items(v: Vec<Exact>) -> Vec<Value> {
            v.into_iter().map(|e| e.0).collect()
        }
        d.deserialize_map(V)
    }
}

impl LearnerError {
    pub fn from_json(v: &serde_json::Value) -> Result<LearnerError, String> {
        let field = |name: &str| {
            v.get(name)
                .and_then(|s| s.as_str())
                .map(str::to_string)
                .ok_or_else(|| format!("this error needs a string `{name}`"))
        };
        let kind = v
            .get("kind")
            .and_then(|k| k.as_str())
            .ok_or("an error needs a string `kind`")?;
        Ok(match kind {
            "exception" => LearnerError::Exception {
                message: field("message")?,
            },
            "missing-function" => LearnerError::MissingFunction {
                function: field("function")?,
            },
            "timeout" => LearnerError::Timeout {
                limit_s: v
                    .get("limit_s")
                    .and_then(|x| x.as_f64())
                    .ok_or("a timeout needs `limit_s`")?,
            },
            "host" => LearnerError::Host {
                message: field("message")?,
            },
            "refused" => LearnerError::Refused {
                function: field("function")?,
                rule: field("rule")?,
                message: field("message")?,
            },
            other => return Err(format!("unknown error kind `{other}`")),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::float_repr;
    use super::{ok_answer, Value};

    /// The tree's reading of an answer: what learner_call read before ok_answer.
    fn by_tree(text: &str) -> Option<Result<Value, String>> {
        let v: serde_json::Value = serde_json::from_str(text).ok()?;
        match (v.get("ok"), v.get("error")) {
            (Some(ok), None) => Some(Value::from_json(ok)),
            _ => None,
        }
    }

    /// What the bridge writes is read without the tree, to the tree's value; what it
    /// never writes is left to the tree (None), whatever the tree makes of it.
    #[test]
    fn exact_answers_read_as_the_tree_reads_them() {
        let exact = [
            r#"{"ok":{"type":"str","value":"sent"}}"#,
            r#"{"ok":{"type":"str","value":"caf\u00e9 \"q\" \\ \n"}}"#,
            r#"{"ok":{"type":"str","value":""}}"#,
            r#"{"ok":{"type":"float","value":1.5}}"#,
            r#"{"ok":{"type":"float","value":3}}"#,
            r#"{"ok":{"type":"float","value":-0.0}}"#,
            r#"{"ok":{"type":"float","value":0.1}}"#,
            r#"{"ok":{"type":"float","value":1e308}}"#,
            r#"{"ok":{"type":"float","value":18446744073709551615}}"#,
            r#"{"ok":{"type":"int","value":-9223372036854775808}}"#,
            r#"{"ok":{"type":"int","value":9223372036854775807}}"#,
            r#"{"ok":{"type":"bool","value":true}}"#,
            r#"{"ok":{"type":"none"}}"#,
            r#"{"ok":{"type":"tuple","value":[]}}"#,
            r#"{"ok":{"type":"tuple","value":[{"type":"str","value":"retry"},{"type":"float","value":2.0}]}}"#,
            r#" { "ok" : { "type" : "list" , "value" : [ {"type":"tuple","value":[{"type":"int","value":1}]} ] } } "#,
        ];
        for text in exact {
            let fast = ok_answer(text).unwrap_or_else(|| panic!("not read exactly: {text}"));
            assert_eq!(by_tree(text), Some(Ok(fast)), "{text}");
        }
        let left_to_the_tree = [
            r#"{"ok":{"value":"sent","type":"str"}}"#,
            r#"{"ok":{"type":"str","value":"sent","extra":1}}"#,
            r#"{"ok":{"type":"str","value":"sent"},"error":{"kind":"host","message":"x"}}"#,
            r#"{"ok":{"type":"str","value":"a"},"ok":{"type":"str","value":"b"}}"#,
            r#"{"ok":{"type":"none","value":null}}"#,
            r#"{"ok":{"type":"other","value":{"type_name":"Task","repr":"Task()"}}}"#,
            r#"{"ok":{"type":"int","value":9223372036854775808}}"#,
            r#"{"ok":{"type":"int","value":1.0}}"#,
            r#"{"ok":{"type":"bool","value":1}}"#,
            r#"{"ok":{"type":"str","value":"\ud800"}}"#,
            r#"{"ok":{"type":"STR","value":"sent"}}"#,
            r#"{"ok":{"type":"str"}}"#,
            r#"{"error":{"kind":"timeout","limit_s":8}}"#,
            r#"{"ok":{"type":"str","value":"sent"}} x"#,
            r#"{"\u006fk":{"type":"str","value":"sent"}}"#,
            "[]",
            "",
        ];
        for text in left_to_the_tree {
            assert_eq!(ok_answer(text), None, "{text}");
        }
    }

    /// Whole numbers print as `format!("{f:.1}")` does, which float_repr no longer
    /// calls for them: every power of two and its neighbours below 1e16, both
    /// signs, the largest whole floats below 1e16, and both zeros.
    #[test]
    fn whole_floats_print_as_with_one_decimal() {
        let mut whole = vec![
            0.0,
            -0.0,
            1.0,
            -1.0,
            9_999_999_999_999_998.0,
            1e15,
            123_456_789.0,
        ];
        for e in 0..54 {
            let p = (1u64 << e) as f64;
            whole.extend([p - 1.0, p, p + 1.0]);
        }
        whole.extend([
            2f64.powi(53) + 2.0,
            9.007_199_254_740_994e15,
            9_999_999_999_999_996.0,
        ]);
        for f in whole.iter().flat_map(|&f| [f, -f]) {
            assert!(f.fract() == 0.0 && f.abs() < 1e16, "{f}");
            assert_eq!(float_repr(f), format!("{f:.1}"), "{f:e}");
        }
        assert_eq!(float_repr(-0.0), "-0.0");
        assert_eq!(float_repr(0.5), "0.5");
    }
}
