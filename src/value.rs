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
            LearnerError::Host { message } => write!(f, "{message}"),
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
            other => return Err(format!("unknown error kind `{other}`")),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::float_repr;

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
