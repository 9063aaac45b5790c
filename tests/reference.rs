//! The reference solution passes every test, and every case file is well formed.

use delivery_lab::deliver_once::{self, reference::Reference, rules::Rule};
use delivery_lab::report::{Audience, RunStatus, TestKind};

#[test]
fn every_case_file_loads_and_the_reference_meets_every_expectation() {
    let cases = deliver_once::cases().unwrap_or_else(|e| panic!("{e}"));
    let examples = cases.iter().filter(|c| c.kind == TestKind::Example).count();
    let hidden = cases.iter().filter(|c| c.kind == TestKind::Hidden).count();
    assert_eq!(examples, 3, "the lab has exactly 3 example tests");
    assert!(
        hidden >= 10,
        "the lab has at least 10 hidden tests, found {hidden}"
    );
}

#[test]
fn the_reference_passes_every_test_with_any_seed() {
    for seed in [deliver_once::DEFAULT_SEED, 0, 1, 7, 123_456_789] {
        let report = deliver_once::grade(&mut Reference, seed, Audience::Staff);
        let failing: Vec<_> = report.tests.iter().filter(|t| t.points == 0).collect();
        assert!(
            failing.is_empty(),
            "seed {seed}: the reference fails {failing:#?}"
        );
        assert_eq!(report.status, RunStatus::Pass);
        assert_eq!(report.xp, 90);
        assert_eq!(report.score, report.max_score);
    }
}

#[test]
fn every_rule_of_the_contract_is_held_by_a_named_hidden_test() {
    let cases = deliver_once::cases().unwrap();
    for rule in Rule::ALL {
        let holders: Vec<_> = cases
            .iter()
            .filter(|c| c.kind == TestKind::Hidden && c.rules.contains(&rule))
            .filter(|c| !matches!(c.body, deliver_once::case::Body::Differential { .. }))
            .map(|c| c.name.as_str())
            .collect();
        assert!(
            !holders.is_empty(),
            "no scripted hidden test holds the learner to {}",
            rule.id()
        );
    }
}
