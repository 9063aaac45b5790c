//! The reference solution passes every test, every case file is well formed and the
//! reference meets every expectation it writes, and the engine was built with exactly
//! what the files say.

mod case_files;

use case_files::case_format;
use delivery_lab::deliver_once::model::TaskKind;
use delivery_lab::deliver_once::{self, reference::Reference, rules::Rule};
use delivery_lab::report::{Audience, RunStatus, TestKind};

#[test]
fn every_case_file_loads_and_the_reference_meets_every_expectation() {
    let files = case_files::load().unwrap_or_else(|e| panic!("{e}"));
    for case in &files {
        case_files::check_expectations(case).unwrap_or_else(|e| panic!("{e}"));
    }
    let cases = deliver_once::cases();
    let examples = cases.iter().filter(|c| c.kind == TestKind::Example).count();
    let hidden = cases.iter().filter(|c| c.kind == TestKind::Hidden).count();
    assert_eq!(examples, 3, "the lab has exactly 3 example tests");
    assert!(
        hidden >= 10,
        "the lab has at least 10 hidden tests, found {hidden}"
    );
}

#[test]
fn the_engine_holds_exactly_the_cases_of_the_files() {
    // What build.rs compiled in, against the files read again: same cases, same order,
    // same values (f64's Debug is exact, so equal text means equal numbers).
    let files = case_files::load().unwrap_or_else(|e| panic!("{e}"));
    let engine = deliver_once::cases();
    assert_eq!(files.len(), engine.len());
    for (file, compiled) in files.iter().zip(engine) {
        let want = format!("{:#?}", case_files::to_engine(file));
        assert_eq!(want, format!("{compiled:#?}"), "{}", file.name);
    }
}

#[test]
fn the_case_format_names_the_engine_s_rules_and_task_kinds() {
    // case_format.rs shares rules.rs and mirrors TaskKind (it may not import the crate).
    assert_eq!(case_format::Rule::ALL.len(), Rule::ALL.len());
    for (mirror, rule) in case_format::Rule::ALL.into_iter().zip(Rule::ALL) {
        let read: case_format::Rule = toml::Value::String(rule.id().into())
            .try_into()
            .unwrap_or_else(|e| panic!("{}: {e}", rule.id()));
        assert_eq!(read, mirror);
        assert_eq!(case_files::rule(mirror), rule);
    }
    for kind in [TaskKind::Critical, TaskKind::Normal, TaskKind::Bulk] {
        let read: case_format::TaskKind = toml::Value::String(kind.as_str().into())
            .try_into()
            .unwrap_or_else(|e| panic!("{}: {e}", kind.as_str()));
        assert_eq!(case_files::task_kind(read), kind);
    }
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
    let cases = deliver_once::cases();
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
