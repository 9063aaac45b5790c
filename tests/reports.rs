//! Reports in every format, checked against committed snapshots, and determinism:
//! the same solution and seed give byte-identical reports.
//!
//! After an intended change, rewrite the snapshots with
//! `UPDATE_SNAPSHOTS=1 cargo test --test reports` and review the diff.

mod common;

use common::mutants::{Mutant, M};
use delivery_lab::deliver_once::{self, reference::Reference, DEFAULT_SEED};
use delivery_lab::report::{
    Audience, Report, RunStatus, TestKind, TestSheet, TestStatus, EXERCISM_MESSAGE_CAP,
    FIELD_CAP_CHARS, HIDDEN_TEST_CODE,
};
use delivery_lab::Lab;
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

fn sheets() -> Vec<TestSheet> {
    deliver_once::DeliverOnce.test_sheets()
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
    let out = report.to_exercism(&sheets());
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["version"], 3);
    assert_eq!(v["status"], "fail");
    assert_eq!(v["tests"].as_array().unwrap().len(), report.total);
    snapshot("deliver-once-claim-without-ttl.exercism.json", &out);
}

/// Version 3 of Exercism's interface: every test has its code (version 2 on) and
/// its task; an example's code is its calls with their results, a hidden test's
/// only says it is hidden, whatever the audience.
#[test]
fn every_exercism_test_has_its_code_and_task() {
    let sheets = sheets();
    for audience in [Audience::Learner, Audience::Staff] {
        let report = deliver_once::grade(&mut Mutant(M::ClaimWithoutTtl), 7, audience);
        let v: serde_json::Value = serde_json::from_str(&report.to_exercism(&sheets)).unwrap();
        for (t, r) in v["tests"].as_array().unwrap().iter().zip(&report.tests) {
            let code = t["test_code"].as_str().unwrap();
            let task = t["task_id"].as_u64().unwrap();
            assert!((1..=2).contains(&task), "{t}");
            if r.kind == TestKind::Hidden {
                assert_eq!(code, HIDDEN_TEST_CODE, "{}", r.name);
            } else {
                assert!(
                    code.starts_with('#') || code.starts_with("assert"),
                    "{code}"
                );
                assert!(code.contains(" == "), "{code}");
            }
        }
    }
    // A syntax error's report lists every test the same way, with the message.
    let lab = delivery_lab::lab_by_id("deliver-once").unwrap();
    let e = Report::error("deliver-once", 5, "SyntaxError: line 3", lab.tests());
    let v: serde_json::Value = serde_json::from_str(&e.to_exercism(&sheets)).unwrap();
    assert_eq!(
        (v["status"].as_str(), v["message"].as_str()),
        (Some("error"), Some("SyntaxError: line 3"))
    );
    assert!(v["tests"]
        .as_array()
        .unwrap()
        .iter()
        .all(|t| t["task_id"].is_u64() && t["test_code"].is_string()));
}

/// Exercism takes a top-level message of at most 65,535 (fewer when characters take
/// several bytes): a report's message is cut long before, whatever the code raised.
#[test]
fn an_exercism_message_stays_under_its_cap_in_bytes() {
    let lab = delivery_lab::lab_by_id("deliver-once").unwrap();
    let huge = "\u{1F4E6}".repeat(100_000); // four bytes each
    let e = Report::error("deliver-once", 5, &huge, lab.tests());
    let v: serde_json::Value = serde_json::from_str(&e.to_exercism(&sheets())).unwrap();
    let m = v["message"].as_str().unwrap();
    assert!(m.len() < EXERCISM_MESSAGE_CAP, "{} bytes", m.len());
    assert!(m.chars().count() <= FIELD_CAP_CHARS + 64);
}

/// Exercism shows at most 500 characters of a test's output: a longer one is cut
/// to fit, the note of the cut included.
#[test]
fn an_exercism_tests_output_fits_in_500_characters() {
    let mut t =
        delivery_lab::report::TestReport::new("prints", TestKind::Example, TestStatus::Pass, None);
    t.output = Some("\u{e9}".repeat(3000));
    let short = "two lines\nof output".to_string();
    let mut u = t.clone();
    u.name = "prints less".into();
    u.output = Some(short.clone());
    let report = Report::new("deliver-once", 1, 0, vec![t, u]);
    let v: serde_json::Value = serde_json::from_str(&report.to_exercism(&[])).unwrap();
    let out = v["tests"][0]["output"].as_str().unwrap();
    assert_eq!(
        out.chars().count(),
        delivery_lab::report::EXERCISM_OUTPUT_CAP,
        "{out}"
    );
    // The cut is marked in the words Exercism's test-runner interface gives.
    assert!(
        out.starts_with("\u{e9}\u{e9}")
            && out.ends_with("\nOutput was truncated. Please limit to 500 chars")
    );
    assert_eq!(v["tests"][1]["output"].as_str(), Some(short.as_str()));
}

/// PrairieLearn's results: a score from 0 to 1, each test's points, a hidden test
/// shown by name and points only; a report that graded nothing is not gradable
/// and says why.
#[test]
fn the_prairielearn_results_score_from_0_to_1() {
    let report = learner_report(&mut Mutant(M::ClaimWithoutTtl));
    let v: serde_json::Value = serde_json::from_str(&report.to_prairielearn()).unwrap();
    assert_eq!(v["gradable"], true);
    let score = v["score"].as_f64().unwrap();
    assert!((score - f64::from(report.score) / f64::from(report.max_score)).abs() < 1e-12);
    assert!(score > 0.0 && score < 1.0, "{score}");
    assert!(v.get("format_errors").is_none());
    for (t, r) in v["tests"].as_array().unwrap().iter().zip(&report.tests) {
        assert_eq!(
            (
                t["name"].as_str(),
                t["points"].as_u64(),
                t["max_points"].as_u64()
            ),
            (Some(r.name.as_str()), Some(u64::from(r.points)), Some(1))
        );
        if r.kind == TestKind::Hidden {
            let keys: Vec<&str> = t.as_object().unwrap().keys().map(String::as_str).collect();
            let want: &[&str] = if r.status == TestStatus::Pass {
                &["max_points", "name", "points"]
            } else {
                &["max_points", "message", "name", "points"]
            };
            assert_eq!(keys, want, "{t}");
        }
    }
    let pass: serde_json::Value =
        serde_json::from_str(&learner_report(&mut Reference).to_prairielearn()).unwrap();
    assert_eq!(pass["score"], 1.0);
    let lab = delivery_lab::lab_by_id("deliver-once").unwrap();
    let e = Report::error("deliver-once", 5, "SyntaxError: line 3", lab.tests());
    let v: serde_json::Value = serde_json::from_str(&e.to_prairielearn()).unwrap();
    assert_eq!(v["gradable"], false);
    assert_eq!(
        v["format_errors"],
        serde_json::json!(["SyntaxError: line 3"])
    );
    assert_eq!(v["score"], 0.0);
    // A run stopped at its time limit was graded: its score counts.
    let t = Report::timed_out("deliver-once", 5, "stopped after 8 s", lab.tests());
    let v: serde_json::Value = serde_json::from_str(&t.to_prairielearn()).unwrap();
    assert_eq!(v["gradable"], true);
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
    let published = report.to_gradescope("after_published");
    assert_eq!(
        published.replace("after_published", "after_due_date"),
        out,
        "only the hidden tests' visibility differs"
    );
}

/// What learner code raised or printed reaches each platform as plain text: a
/// traceback's `<module>` stays as written (Gradescope read its summary as HTML by
/// default, and the name vanished), and an escape sequence is shown, not obeyed
/// (PrairieLearn turns ANSI sequences into styles).
#[test]
fn learner_text_reaches_each_platform_as_plain_text() {
    let lab = delivery_lab::lab_by_id("deliver-once").unwrap();
    let raised = "Traceback (most recent call last):\n  File \"<exec>\", line 3, in <module>\n<b>x</b> & \u{1b}[8mhidden\u{1b}[0m";
    let shown = raised.replace('\u{1b}', "\\x1b");
    let e = Report::error("deliver-once", 5, raised, lab.tests());
    // Gradescope: every text field's format is plain text; the summary starts with
    // the traceback, an example test's output is it.
    let g: serde_json::Value = serde_json::from_str(&e.to_gradescope("after_due_date")).unwrap();
    for key in ["output_format", "test_output_format", "test_name_format"] {
        assert_eq!(g[key], "text", "{key}");
    }
    assert!(g["output"]
        .as_str()
        .unwrap()
        .starts_with(&format!("{shown}\n\n")));
    assert_eq!(g["tests"][0]["output"].as_str(), Some(shown.as_str()));
    // PrairieLearn: the same text in its message, the test's, and format_errors.
    let p: serde_json::Value = serde_json::from_str(&e.to_prairielearn()).unwrap();
    assert_eq!(p["format_errors"], serde_json::json!([shown.clone()]));
    assert!(p["message"]
        .as_str()
        .unwrap()
        .starts_with(&format!("{shown}\n\n")));
    assert_eq!(p["tests"][0]["message"].as_str(), Some(shown.as_str()));
    // Exercism: the report's message and the test's.
    let x: serde_json::Value = serde_json::from_str(&e.to_exercism(&sheets())).unwrap();
    assert_eq!(x["message"].as_str(), Some(shown.as_str()));
    assert_eq!(x["tests"][0]["message"].as_str(), Some(shown.as_str()));
    // What a test printed: an OSC sequence (set the clipboard) and a bell, written out.
    let mut t = delivery_lab::report::TestReport::new(
        "prints",
        TestKind::Example,
        TestStatus::Fail,
        Some("in <module>: \u{1b}[31mred".into()),
    );
    t.output = Some("\u{1b}]52;c;cGxhbnQ=\u{7}<i>out</i>".into());
    let r = Report::new("deliver-once", 1, 0, vec![t]);
    let printed = "\\x1b]52;c;cGxhbnQ=\\x07<i>out</i>";
    let p: serde_json::Value = serde_json::from_str(&r.to_prairielearn()).unwrap();
    assert_eq!(p["tests"][0]["message"], "in <module>: \\x1b[31mred");
    assert_eq!(p["tests"][0]["output"], printed);
    let x: serde_json::Value = serde_json::from_str(&r.to_exercism(&[])).unwrap();
    assert_eq!(x["tests"][0]["message"], "in <module>: \\x1b[31mred");
    assert_eq!(x["tests"][0]["output"], printed);
    let g: serde_json::Value = serde_json::from_str(&r.to_gradescope("hidden")).unwrap();
    assert_eq!(g["tests"][0]["output"], "in <module>: \\x1b[31mred");
}

#[test]
fn the_same_solution_and_seed_give_byte_identical_reports() {
    for m in [M::NoFloor, M::ClaimWithoutNx, M::GtForExpiry] {
        for seed in [0, DEFAULT_SEED, 99] {
            let a = deliver_once::grade(&mut Mutant(m), seed, Audience::Staff);
            let b = deliver_once::grade(&mut Mutant(m), seed, Audience::Staff);
            assert_eq!(a.to_json(), b.to_json(), "{m:?} seed {seed}");
            assert_eq!(a.to_exercism(&sheets()), b.to_exercism(&sheets()));
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

/// Staff see why (issue 39): the staff's report of a file that fails only hidden
/// tests carries each failed hidden test's message, the shrunk counterexample
/// included, in its JSON and text; every platform's file made from it is the
/// learner's, byte for byte.
#[test]
fn staff_see_a_hidden_tests_message_and_the_platforms_never_do() {
    let staff = deliver_once::grade(&mut Mutant(M::NoFloor), DEFAULT_SEED, Audience::Staff);
    let learner = learner_report(&mut Mutant(M::NoFloor));
    let failed: Vec<_> = staff
        .tests
        .iter()
        .filter(|t| t.kind == TestKind::Hidden && t.status != TestStatus::Pass)
        .collect();
    assert!(!failed.is_empty());
    assert!(failed
        .iter()
        .all(|t| t.message.as_deref().is_some_and(|m| !m.is_empty())));
    let shrunk = failed
        .iter()
        .filter_map(|t| t.message.as_deref())
        .find(|m| m.contains("Smallest failing input found"))
        .expect("the differential test's counterexample, shrunk");
    assert!(staff
        .to_json()
        .contains(&serde_json::to_string(shrunk).unwrap()[1..40]));
    assert!(staff.to_text().contains(shrunk.lines().next().unwrap()));
    assert!(!learner.to_json().contains("Smallest failing input"));
    assert!(!learner.to_text().contains("Smallest failing input"));
    for v in ["hidden", "after_due_date", "after_published"] {
        assert_eq!(staff.to_gradescope(v), learner.to_gradescope(v), "{v}");
    }
    assert_eq!(staff.to_prairielearn(), learner.to_prairielearn());
    // The WASM grader grades for staff and shows each caller its audience's view.
    assert_eq!(
        staff.clone().for_audience(Audience::Learner).to_json(),
        learner.to_json()
    );
    assert_eq!(staff.to_exercism(&sheets()), learner.to_exercism(&sheets()));
    assert!(!staff
        .to_exercism(&sheets())
        .contains("Smallest failing input"));
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
    assert!(t.to_exercism(&sheets()).contains("\"status\": \"error\""));
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
    // Indented, like every line of learner text, and its tab kept.
    assert!(text.contains("\n  \tnext"), "{text}");
    // A line of learner text cannot pass for one of the report's own.
    let fake = "x\ndeliver-once: PASS (23 of 23 passed)";
    let text = Report::error(
        "deliver-once",
        5,
        fake,
        delivery_lab::lab_by_id("deliver-once").unwrap().tests(),
    )
    .to_text();
    assert!(
        text.lines().all(|l| !l.starts_with("deliver-once: PASS")),
        "{text}"
    );
    // Text without such characters is unchanged.
    assert_eq!(delivery_lab::report::terminal_safe("a\tb\nc"), "a\tb\nc");
}

/// The one list of terminal-unsafe characters is every control character (Unicode's
/// Cc: C0, DEL, C1) but newline and tab, and the bidirectional and zero-width marks,
/// and nothing else; sorted and apart, so the CLI's character class built from it
/// (www/grader/output.mjs) is well formed.
#[test]
fn terminal_unsafe_is_the_controls_and_the_invisible_marks() {
    use delivery_lab::report::{terminal_safe, TERMINAL_UNSAFE};
    let marks = |c: char| {
        matches!(c, '\u{061c}' | '\u{200b}'..='\u{200f}' | '\u{2028}'..='\u{202e}'
            | '\u{2060}'..='\u{2069}' | '\u{feff}')
    };
    for c in (0..=0x10ffffu32).filter_map(char::from_u32) {
        let want = (c.is_control() && c != '\n' && c != '\t') || marks(c);
        let listed = TERMINAL_UNSAFE
            .iter()
            .any(|&(lo, hi)| (lo..=hi).contains(&c));
        assert_eq!(listed, want, "U+{:04X}", c as u32);
        assert_eq!(
            terminal_safe(&c.to_string()) != c.to_string(),
            want,
            "U+{:04X}",
            c as u32
        );
    }
    for w in TERMINAL_UNSAFE.windows(2) {
        assert!(
            w[0].0 <= w[0].1 && (w[0].1 as u32) + 1 < w[1].0 as u32,
            "{w:?}"
        );
    }
}
