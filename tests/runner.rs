//! A learner error stays inside the test where it happened, and is reported there.

use delivery_lab::deliver_once::model::{Policy, SendResult, Task};
use delivery_lab::deliver_once::reference::Reference;
use delivery_lab::deliver_once::world::World;
use delivery_lab::deliver_once::{self, Solution};
use delivery_lab::report::{Audience, TestKind, TestStatus};
use delivery_lab::{LearnerError, Value};

/// `deliver_once` is correct; `next_step` misbehaves in the way it is told to.
struct Flaky {
    error: LearnerError,
    calls: usize,
    fail_from_call: usize,
}

impl Solution for Flaky {
    fn deliver_once(&mut self, w: &World, t: &Task, p: &Policy) -> Result<Value, LearnerError> {
        Reference.deliver_once(w, t, p)
    }

    fn next_step(
        &mut self,
        w: &World,
        t: &Task,
        r: &SendResult,
        now: f64,
        p: &Policy,
    ) -> Result<Value, LearnerError> {
        self.calls += 1;
        if self.calls >= self.fail_from_call {
            return Err(self.error.clone());
        }
        Reference.next_step(w, t, r, now, p)
    }

    fn take_output(&mut self) -> Option<String> {
        Some(format!("{} next_step calls so far", self.calls))
    }
}

fn grade(error: LearnerError, fail_from_call: usize) -> delivery_lab::Report {
    deliver_once::grade(
        &mut Flaky {
            error,
            calls: 0,
            fail_from_call,
        },
        1,
        Audience::Learner,
    )
}

#[test]
fn an_exception_fails_only_the_tests_that_call_the_raising_function() {
    let traceback = "Traceback (most recent call last):\n  File \"solution.py\", line 30, in next_step\nZeroDivisionError: division by zero";
    let report = grade(
        LearnerError::Exception {
            message: traceback.into(),
        },
        1,
    );
    let status = |name: &str| report.tests.iter().find(|t| t.name == name).unwrap().status;
    assert_eq!(
        status("a fresh task is claimed, sent and marked done"),
        TestStatus::Pass
    );
    assert_eq!(
        status("claim held by another worker: a critical task is retried later"),
        TestStatus::Pass
    );
    let example = report
        .tests
        .iter()
        .find(|t| t.name == "a permanent failure goes to the fallback channel")
        .unwrap();
    assert_eq!(example.status, TestStatus::Error);
    let message = example.message.as_deref().unwrap();
    assert!(
        message.contains("ZeroDivisionError") && message.contains("line 30"),
        "{message}"
    );
    assert!(
        message.contains("Step 2 of 2"),
        "the message says which call raised: {message}"
    );
    assert_eq!(
        example.trace.len(),
        2,
        "the trace shows what ran before the exception"
    );
    assert_eq!(example.output.as_deref(), Some("1 next_step calls so far"));
    assert_eq!(
        status("Retry-After is honoured without a draw, 0 included"),
        TestStatus::Error
    );
}

#[test]
fn a_missing_function_is_named_in_the_message() {
    let report = grade(
        LearnerError::MissingFunction {
            function: "next_step".into(),
        },
        1,
    );
    let example = report
        .tests
        .iter()
        .find(|t| t.kind == TestKind::Example && t.status == TestStatus::Error)
        .unwrap();
    assert!(example
        .message
        .as_deref()
        .unwrap()
        .contains("does not define `next_step`"));
    assert!(
        report
            .tests
            .iter()
            .filter(|t| t.status == TestStatus::Pass)
            .count()
            >= 5
    );
}

#[test]
fn a_timeout_ends_the_run_and_the_rest_are_reported_as_not_run() {
    let report = grade(LearnerError::Timeout { limit_s: 8.0 }, 3);
    let first = report
        .tests
        .iter()
        .position(|t| t.status == TestStatus::Timeout)
        .unwrap();
    assert!(report.tests[..first]
        .iter()
        .all(|t| t.status != TestStatus::Timeout));
    assert!(report.tests[first..]
        .iter()
        .all(|t| t.status == TestStatus::Timeout));
    assert!(
        report.tests.len() - first > 1,
        "the tests after the timeout are listed, not dropped"
    );
    assert_eq!(report.total, deliver_once::cases().len());
}

#[test]
fn a_wrong_return_type_fails_with_the_return_types_rule() {
    struct Lists;
    impl Solution for Lists {
        fn deliver_once(&mut self, w: &World, t: &Task, p: &Policy) -> Result<Value, LearnerError> {
            Reference.deliver_once(w, t, p)
        }
        fn next_step(
            &mut self,
            w: &World,
            t: &Task,
            r: &SendResult,
            n: f64,
            p: &Policy,
        ) -> Result<Value, LearnerError> {
            match Reference.next_step(w, t, r, n, p)? {
                Value::Tuple(v) => Ok(Value::List(v)),
                other => Ok(other),
            }
        }
    }
    let report = deliver_once::grade(&mut Lists, 1, Audience::Learner);
    let example = report
        .tests
        .iter()
        .find(|t| t.name == "a permanent failure goes to the fallback channel")
        .unwrap();
    assert_eq!(example.status, TestStatus::Fail);
    assert_eq!(example.rule.as_deref(), Some("return-types"));
    assert!(
        example
            .actual
            .as_deref()
            .unwrap()
            .contains("['fallback', 'sms']  (list)"),
        "{:?}",
        example.actual
    );
}
