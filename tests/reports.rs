//! Reports in every format, checked against committed snapshots, and determinism:
//! the same solution and seed give byte-identical reports.
//!
//! After an intended change, rewrite the snapshots with
//! `UPDATE_SNAPSHOTS=1 cargo test --test reports` and review the diff.

mod common;

use common::mutants::{Mutant, M};
use delivery_lab::deliver_once::{self, reference::Reference, DEFAULT_SEED};
use delivery_lab::report::{Audience, Report, RunStatus, TestKind, TestStatus};
use std::path::Path;

fn snapshot(name: &str, actual: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/snapshots")
        .join(name);
    if std::env::var_os("UPDATE_SNAPSHOTS").is_some() {
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|_| {
        panic!(
            "missing snapshot {}: run UPDATE_SNAPSHOTS=1 cargo test --test reports",
            path.display()
        )
    });
    assert!(
        expected == actual,
        "{name} differs from its snapshot; if the change is intended, run UPDATE_SNAPSHOTS=1 cargo test --test reports and review the diff.\n--- actual ---\n{actual}"
    );
}

fn learner_report(solution: &mut dyn deliver_once::Solution) -> Report {
    deliver_once::grade(solution, DEFAULT_SEED, Audience::Learner)
}

#[test]
fn the_project_json_matches_its_snapshots() {
    snapshot(
        "deliver-once-reference.json",
        &learner_report(&mut Reference).to_json(),
    );
    // The WASM API test compares its own report with these two, byte for byte.
    snapshot(
        "deliver-once-mutant-no-floor.json",
        &learner_report(&mut Mutant(M::NoFloor)).to_json(),
    );
    snapshot(
        "deliver-once-claim-without-ttl.json",
        &learner_report(&mut Mutant(M::ClaimWithoutTtl)).to_json(),
    );
}

#[test]
fn the_exercism_results_match_their_snapshot() {
    let report = learner_report(&mut Mutant(M::ClaimWithoutTtl));
    let out = report.to_exercism();
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["version"], 3);
    assert_eq!(v["status"], "fail");
    assert_eq!(v["tests"].as_array().unwrap().len(), report.total);
    snapshot("deliver-once-claim-without-ttl.exercism.json", &out);
}

#[test]
fn the_gradescope_results_match_their_snapshot() {
    let report = learner_report(&mut Mutant(M::ClaimWithoutTtl));
    let out = report.to_gradescope("after_due_date");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["score"], report.score);
    let tests = v["tests"].as_array().unwrap();
    for (t, r) in tests.iter().zip(&report.tests) {
        let want = if r.kind == TestKind::Hidden {
            "after_due_date"
        } else {
            "visible"
        };
        assert_eq!(t["visibility"], want, "{}", r.name);
    }
    snapshot("deliver-once-claim-without-ttl.gradescope.json", &out);
    let hidden = report.to_gradescope("hidden");
    assert!(hidden.contains("\"visibility\": \"hidden\""));
}

#[test]
fn the_same_solution_and_seed_give_byte_identical_reports() {
    for m in [M::NoFloor, M::ClaimWithoutNx, M::GtForExpiry] {
        for seed in [0, DEFAULT_SEED, 99] {
            let a = deliver_once::grade(&mut Mutant(m), seed, Audience::Staff);
            let b = deliver_once::grade(&mut Mutant(m), seed, Audience::Staff);
            assert_eq!(a.to_json(), b.to_json(), "{m:?} seed {seed}");
            assert_eq!(a.to_exercism(), b.to_exercism());
            assert_eq!(a.to_gradescope("hidden"), b.to_gradescope("hidden"));
        }
    }
}

#[test]
fn a_learner_sees_only_the_name_and_status_of_a_hidden_test() {
    let report = learner_report(&mut Mutant(M::ClaimWithoutTtl));
    let v: serde_json::Value = serde_json::from_str(&report.to_json()).unwrap();
    let mut saw_failing_hidden = false;
    for t in v["tests"].as_array().unwrap() {
        let keys: Vec<&str> = t.as_object().unwrap().keys().map(String::as_str).collect();
        if t["kind"] == "hidden" {
            assert_eq!(
                keys,
                ["kind", "max_points", "name", "points", "status"],
                "{t}"
            );
            saw_failing_hidden |= t["status"] == "fail";
        }
    }
    assert!(saw_failing_hidden);
    // Examples explain themselves: the rule, expected against actual, and a trace.
    let example = report
        .tests
        .iter()
        .find(|t| t.kind == TestKind::Example && t.status == TestStatus::Fail)
        .unwrap();
    assert_eq!(example.rule.as_deref(), Some("claim"));
    assert!(example
        .expected
        .as_deref()
        .unwrap()
        .contains("ttl=30.0, nx=True"));
    assert!(example
        .actual
        .as_deref()
        .unwrap()
        .contains("ttl=None, nx=True"));
    assert!(!example.trace.is_empty());
    assert!(example
        .message
        .as_deref()
        .unwrap()
        .contains("What happened (lab clock)"));
}

#[test]
fn a_passing_run_earns_90_xp_and_a_failing_one_none() {
    let pass = learner_report(&mut Reference);
    assert_eq!(
        (pass.status, pass.xp, pass.failed),
        (RunStatus::Pass, 90, 0)
    );
    assert_eq!(pass.examples.total, 3);
    let fail = learner_report(&mut Mutant(M::NoFloor));
    assert_eq!((fail.status, fail.xp), (RunStatus::Fail, 0));
    assert_eq!(
        fail.examples.passed, 3,
        "a hidden-only mistake leaves the examples green"
    );
    assert!(fail.replay.contains("--seed 1042"), "{}", fail.replay);
}

#[test]
fn error_and_timeout_reports_list_every_test() {
    let tests = delivery_lab::lab_by_id("deliver-once").unwrap().tests();
    let e = Report::error("deliver-once", 5, "SyntaxError: line 3", tests.clone());
    assert_eq!(e.status, RunStatus::Error);
    assert_eq!((e.total, e.passed, e.score), (tests.len(), 0, 0));
    assert!(e.tests.iter().all(|t| t.status == TestStatus::Error));
    let t = Report::timed_out("deliver-once", 5, "stopped after 8 s", tests.clone());
    assert_eq!(t.status, RunStatus::Fail);
    assert!(t.tests.iter().all(|t| t.status == TestStatus::Timeout));
    assert!(t.to_exercism().contains("\"status\": \"error\""));
}

/// A text report goes to a staff member's terminal: nothing a learner raised or
/// printed may reach it as a control sequence (erase a line, print a fake one,
/// write the clipboard, reorder the text), while newlines and tabs stay.
#[test]
fn the_text_report_shows_control_characters_as_escapes() {
    let tests = delivery_lab::lab_by_id("deliver-once").unwrap().tests();
    let raised =
        "ValueError: \u{1b}[1A\u{1b}[2Kfake\rline\u{9b}2J\u{7f}\u{7}\u{202e}txt.exe\n\tnext";
    let text = Report::error("deliver-once", 5, raised, tests).to_text();
    assert!(
        !text
            .chars()
            .any(|c| (c.is_control() && c != '\n' && c != '\t') || c == '\u{202e}'),
        "{text:?}"
    );
    assert!(
        text.contains(r"ValueError: \x1b[1A\x1b[2Kfake\x0dline\x9b2J\x7f\x07\u202etxt.exe"),
        "{text}"
    );
    assert!(text.contains("\n\tnext"), "{text}");
    // Text without such characters is unchanged.
    assert_eq!(delivery_lab::report::terminal_safe("a\tb\nc"), "a\tb\nc");
}
