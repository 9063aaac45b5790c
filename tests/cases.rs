//! A malformed case file is refused with its file, its case and its field named: by
//! the parser `build.rs` compiles the files with (so the build fails), and by the check
//! of its expectations against the reference (so `cargo test` fails).

mod case_files;

use case_files::case_format::{self, Case, CaseError};
use case_files::check_expectations;

const GOOD_HEAD: &str = r#"
[defaults]
seed = 1
task = { key = "k", kind = "normal", attempt = 0, expires_at_s = 100, fallback = "" }
policy = { claim_ttl_s = 30, at_most_once = false, min_delay_s = 1, base_delay_s = 2, max_attempts = 5 }
"#;

fn load(toml_text: &str) -> Result<Vec<Case>, CaseError> {
    let cases = case_format::parse_file("hidden-tests/deliver-once/broken.toml", toml_text, true)?;
    case_format::unique_names(&cases)?;
    cases.iter().try_for_each(check_expectations)?;
    Ok(cases)
}

fn error_of(body: &str) -> String {
    match load(&format!("{GOOD_HEAD}{body}")) {
        Ok(_) => panic!("accepted a malformed case:\n{body}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn a_well_formed_case_loads() {
    let cases = load(&format!(
        "{GOOD_HEAD}\n[[case]]\nname = \"fine\"\nrules = [\"claim\"]\n[[case.step]]\nat_s = 0\ncall = \"deliver_once\"\nexpect.returns = \"sent\"\n"
    ))
    .unwrap();
    assert_eq!(cases.len(), 1);
}

#[test]
fn a_step_s_policy_overrides_the_case_s_for_that_call_only() {
    let cases = load(&format!(
        "{GOOD_HEAD}\n[[case]]\nname = \"p\"\nrules = [\"claim-held\"]\npolicy = {{ claim_ttl_s = 9 }}\n[[case.step]]\nat_s = 0\ncall = \"deliver_once\"\npolicy = {{ at_most_once = true }}\n[[case.step]]\nat_s = 1\ncall = \"deliver_once\"\n"
    ))
    .unwrap();
    let case_format::Body::Scripted(s) = &cases[0].body else {
        panic!("a scripted case")
    };
    let policies: Vec<_> = s
        .steps
        .iter()
        .map(|st| match &st.call {
            case_format::Call::DeliverOnce { policy, .. } => {
                (policy.at_most_once, policy.claim_ttl_s)
            }
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(policies, [(true, 9.0), (false, 9.0)]);
}

#[test]
fn an_unknown_call_names_file_case_and_field() {
    let e = error_of("[[case]]\nname = \"bad call\"\nrules = [\"claim\"]\n[[case.step]]\nat_s = 0\ncall = \"deliver\"\n");
    assert!(e.contains("hidden-tests/deliver-once/broken.toml"), "{e}");
    assert!(e.contains("case 0 (\"bad call\")"), "{e}");
    assert!(e.contains("case[0].step[0].call"), "{e}");
    assert!(
        e.contains("deliver_once"),
        "the message lists what is allowed: {e}"
    );
}

#[test]
fn a_misspelt_field_is_refused() {
    let e = error_of("[[case]]\nname = \"typo\"\nrules = [\"claim\"]\n[[case.step]]\nat_s = 0\ncall = \"deliver_once\"\nexpect.return = \"sent\"\n");
    assert!(e.contains("case[0].step[0].expect"), "{e}");
    assert!(e.contains("unknown field `return`"), "{e}");
}

#[test]
fn an_unknown_rule_is_refused() {
    let e = error_of("[[case]]\nname = \"r\"\nrules = [\"be-nice\"]\n[[case.step]]\nat_s = 0\ncall = \"deliver_once\"\n");
    assert!(e.contains("case[0].rules[0]"), "{e}");
}

#[test]
fn next_step_without_a_result_is_refused() {
    let e = error_of("[[case]]\nname = \"no result\"\nrules = [\"jitter\"]\n[[case.step]]\nat_s = 0\ncall = \"next_step\"\n");
    assert!(e.contains("case[0].step[0].result"), "{e}");
    assert!(e.contains("(\"no result\")"), "{e}");
}

#[test]
fn steps_out_of_order_are_refused() {
    let e = error_of("[[case]]\nname = \"time\"\nrules = [\"claim\"]\n[[case.step]]\nat_s = 5\ncall = \"deliver_once\"\n[[case.step]]\nat_s = 1\ncall = \"deliver_once\"\n");
    assert!(e.contains("case[0].step[1].at_s"), "{e}");
}

#[test]
fn a_missing_task_field_says_where_it_could_be_set() {
    let text = "[[case]]\nname = \"no key\"\nrules = [\"claim\"]\nseed = 1\ntask = { kind = \"normal\", attempt = 0, expires_at_s = 1, fallback = \"\" }\npolicy = { claim_ttl_s = 30, at_most_once = false, min_delay_s = 1, base_delay_s = 2, max_attempts = 5 }\n[[case.step]]\nat_s = 0\ncall = \"deliver_once\"\n";
    let e = load(text).unwrap_err().to_string();
    assert!(e.contains("case[0].task.key"), "{e}");
    assert!(e.contains("[defaults]"), "{e}");
}

#[test]
fn an_expectation_the_contract_does_not_hold_is_refused() {
    let e = error_of("[[case]]\nname = \"wrong\"\nrules = [\"mark-done\"]\n[[case.step]]\nat_s = 0\ncall = \"deliver_once\"\nexpect.returns = \"failed\"\n");
    assert!(
        e.contains("(\"wrong\")") && e.contains("step[0].expect.returns"),
        "{e}"
    );
    assert!(e.contains("reference solution disagrees"), "{e}");
    let e = error_of("[[case]]\nname = \"draws\"\nrules = [\"jitter\"]\n[[case.step]]\nat_s = 0\ncall = \"next_step\"\nresult = { answer = \"transient\", reason = \"503\" }\nexpect.draws = [[0, 4]]\n");
    assert!(e.contains("step[0].expect.draws"), "{e}");
}

#[test]
fn two_cases_with_one_name_are_refused() {
    let case = "[[case]]\nname = \"twice\"\nrules = [\"claim\"]\n[[case.step]]\nat_s = 0\ncall = \"deliver_once\"\n";
    let e = error_of(&format!("{case}{case}"));
    assert!(e.contains("case 1 (\"twice\")"), "{e}");
    assert!(e.contains("case[1].name"), "{e}");
}

#[test]
fn a_toml_syntax_error_names_the_file() {
    let e = load("[[case]\nname = 1").unwrap_err().to_string();
    assert!(
        e.starts_with("hidden-tests/deliver-once/broken.toml: not valid TOML"),
        "{e}"
    );
}

/// A case belongs to one section of lab.md (Exercism's task): the function it calls,
/// or, when it calls both, the one its `section` names.
#[test]
fn a_case_that_calls_both_functions_names_its_section() {
    let both = "[[case]]\nname = \"both\"\nrules = [\"permanent\"]\nprovider = [{ answer = \"permanent\", reason = \"410\" }]\n[[case.step]]\nat_s = 0\ncall = \"deliver_once\"\n[[case.step]]\nat_s = 0\ncall = \"next_step\"\nresult = { answer = \"permanent\", reason = \"410\" }\n";
    let e = error_of(both);
    assert!(e.contains("case[0].section"), "{e}");
    assert!(e.contains("calls both deliver_once and next_step"), "{e}");
    let named = load(&format!(
        "{GOOD_HEAD}{}",
        both.replace("rules =", "section = \"next_step\"\nrules =")
    ))
    .unwrap();
    assert_eq!(named[0].section, case_format::CallName::NextStep);
    // One function: the section is its own, and a section it never calls is refused.
    let one = load(&format!(
        "{GOOD_HEAD}[[case]]\nname = \"one\"\nrules = [\"claim\"]\n[[case.step]]\nat_s = 0\ncall = \"deliver_once\"\n"
    ))
    .unwrap();
    assert_eq!(one[0].section, case_format::CallName::DeliverOnce);
    let e = error_of("[[case]]\nname = \"elsewhere\"\nrules = [\"claim\"]\nsection = \"next_step\"\n[[case.step]]\nat_s = 0\ncall = \"deliver_once\"\n");
    assert!(
        e.contains("case[0].section") && e.contains("never calls next_step"),
        "{e}"
    );
}
