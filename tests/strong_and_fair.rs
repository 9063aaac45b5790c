//! The suite is strong (every mutant in the catalogue fails the hidden test named for
//! its mistake) and fair (correct solutions written differently pass everything).

mod common;

use common::mutants::{Mutant, CATALOGUE};
use common::variants::{ClaimFirst, KindFirst};
use delivery_lab::deliver_once::{self, Solution};
use delivery_lab::report::{Audience, Report, RunStatus, TestKind, TestStatus};

fn grade(solution: &mut dyn Solution) -> Report {
    deliver_once::grade(solution, deliver_once::DEFAULT_SEED, Audience::Staff)
}

fn failing_hidden(report: &Report) -> Vec<&str> {
    report
        .tests
        .iter()
        .filter(|t| t.kind == TestKind::Hidden && t.status != TestStatus::Pass)
        .map(|t| t.name.as_str())
        .collect()
}

#[test]
fn the_catalogue_holds_at_least_25_distinct_mutants_naming_real_tests() {
    assert!(CATALOGUE.len() >= 25, "only {} mutants", CATALOGUE.len());
    let names: Vec<String> = deliver_once::cases()
        .iter()
        .map(|c| c.name.clone())
        .collect();
    for (m, _, catcher) in CATALOGUE {
        assert!(
            names.iter().any(|n| n == catcher),
            "{m:?} names no existing test: {catcher:?}"
        );
        assert_eq!(
            CATALOGUE.iter().filter(|(x, ..)| x == m).count(),
            1,
            "{m:?} listed twice"
        );
    }
}

#[test]
fn every_mutant_fails_the_hidden_test_named_for_its_mistake() {
    let mut missed = Vec::new();
    for (m, what, catcher) in CATALOGUE {
        let report = grade(&mut Mutant(*m));
        let failing = failing_hidden(&report);
        println!("{m:?} ({what}): caught by {failing:?}");
        if !failing.contains(catcher) {
            missed.push(format!(
                "{m:?} ({what}) should fail {catcher:?} but fails {failing:?}"
            ));
        }
        assert_ne!(report.xp, 90, "{m:?} must not earn the XP");
    }
    assert!(
        missed.is_empty(),
        "mutants not caught by name:\n{}",
        missed.join("\n")
    );
}

#[test]
fn every_mutant_is_also_caught_by_the_differential_test() {
    // The differential test is a safety net under the named tests: on its own it
    // catches every mistake in the catalogue.
    let differential = deliver_once::cases()
        .iter()
        .find(|c| matches!(c.body, deliver_once::case::Body::Differential { .. }))
        .expect("the lab has a differential test")
        .name
        .clone();
    for (m, what, _) in CATALOGUE {
        let report = grade(&mut Mutant(*m));
        assert!(
            failing_hidden(&report).contains(&differential.as_str()),
            "the differential test misses {m:?} ({what})"
        );
    }
}

#[test]
fn correct_solutions_written_differently_pass_everything() {
    let variants: [(&str, &mut dyn Solution); 2] = [
        ("ClaimFirst", &mut ClaimFirst),
        ("KindFirst", &mut KindFirst),
    ];
    for (name, solution) in variants {
        let report = grade(solution);
        let failing: Vec<_> = report
            .tests
            .iter()
            .filter(|t| t.status != TestStatus::Pass)
            .collect();
        assert!(
            failing.is_empty(),
            "{name} is correct but fails: {failing:#?}"
        );
        assert_eq!(report.xp, 90);
    }
}

#[test]
fn the_differential_test_reports_the_smallest_failing_input_it_finds() {
    let report = grade(&mut Mutant(common::mutants::M::JitterExponentOffByOne));
    let t = report
        .tests
        .iter()
        .find(|t| t.name.starts_with("differential"))
        .unwrap();
    let message = t
        .message
        .as_deref()
        .expect("staff see the differential's message");
    assert!(
        message.contains("Smallest failing input found"),
        "{message}"
    );
    assert!(
        message.contains("rule broken (jitter)") || message.contains("Rule broken (jitter)"),
        "{message}"
    );
    // Shrinking drives every field it can to a plain value.
    assert!(message.contains("attempt=0"), "not shrunk: {message}");
    assert!(message.contains("min_delay_s=0.0"), "not shrunk: {message}");
    assert!(message.contains("fallback=None"), "not shrunk: {message}");
}

#[test]
#[ignore = "prints messages for a person to read: cargo test --test strong_and_fair peek -- --ignored --nocapture"]
fn peek() {
    for m in [
        common::mutants::M::ClaimWithoutTtl,
        common::mutants::M::NoFloor,
    ] {
        let r = grade(&mut Mutant(m));
        println!("{}", r.to_text());
    }
}

/// A verdict run (`RunMode::Verdict`, what mutation testing asks) stops at the first
/// failed test; it must give the pass or fail of the full run, for every mutant and
/// for correct solutions, and a passing run must be the full report.
#[test]
fn a_verdict_run_gives_the_full_run_s_pass_or_fail() {
    use delivery_lab::RunMode;
    let verdict = |s: &mut dyn Solution| {
        deliver_once::grade_with(
            s,
            deliver_once::DEFAULT_SEED,
            Audience::Staff,
            RunMode::Verdict,
        )
    };
    for (m, ..) in CATALOGUE {
        let full = grade(&mut Mutant(*m));
        let quick = verdict(&mut Mutant(*m));
        assert_ne!(full.status, RunStatus::Pass, "{m:?}");
        assert_eq!(quick.status, full.status, "{m:?}");
        let first_failed = full
            .tests
            .iter()
            .position(|t| t.status != TestStatus::Pass)
            .unwrap();
        assert_eq!(
            quick.tests[..=first_failed],
            full.tests[..=first_failed],
            "{m:?}"
        );
        assert!(quick.tests[first_failed + 1..]
            .iter()
            .all(|t| t.message.as_deref()
                == Some("Not run: a verdict run stops at the first failed test.")));
    }
    for correct in [&mut ClaimFirst as &mut dyn Solution, &mut KindFirst] {
        let full = grade(correct);
        assert_eq!(full.status, RunStatus::Pass);
        assert_eq!(verdict(correct).to_json(), full.to_json());
    }
}
