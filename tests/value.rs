//! The hand-written readers of host answers agree with the serde format hosts write.

use delivery_lab::{LearnerError, Value};

#[test]
fn every_value_reads_back_as_itself() {
    let values = [
        Value::None,
        Value::Bool(true),
        Value::Int(-7),
        Value::Float(2.5),
        Value::str("sent"),
        Value::Tuple(vec![Value::str("retry"), Value::Float(0.1 + 0.2)]),
        Value::List(vec![Value::Tuple(vec![]), Value::List(vec![Value::Int(1)])]),
        Value::Other {
            type_name: "dict".into(),
            repr: "{'a': 1}".into(),
        },
    ];
    for v in values {
        let json: serde_json::Value = serde_json::to_value(&v).unwrap();
        assert_eq!(Value::from_json(&json), Ok(v.clone()), "{json}");
    }
}

#[test]
fn every_learner_error_reads_back_as_itself() {
    let errors = [
        LearnerError::Exception {
            message: "Traceback ...".into(),
        },
        LearnerError::MissingFunction {
            function: "next_step".into(),
        },
        LearnerError::Timeout { limit_s: 8.0 },
        LearnerError::Host {
            message: "no".into(),
        },
    ];
    for e in errors {
        let json: serde_json::Value = serde_json::to_value(&e).unwrap();
        assert_eq!(LearnerError::from_json(&json), Ok(e.clone()), "{json}");
    }
}

#[test]
fn malformed_answers_say_what_is_wrong() {
    let read = |s: &str| Value::from_json(&serde_json::from_str(s).unwrap()).unwrap_err();
    assert!(read(r#"{"value": 1}"#).contains("`type`"));
    assert!(read(r#"{"type": "int", "value": 1.5}"#).contains("64-bit integer"));
    assert!(read(r#"{"type": "set", "value": []}"#).contains("unknown value type `set`"));
    assert!(read(r#"{"type": "tuple", "value": [{"type": "str"}]}"#).contains("needs a `value`"));
    let err = LearnerError::from_json(&serde_json::json!({"kind": "boom"})).unwrap_err();
    assert!(err.contains("unknown error kind `boom`"));
}
