#![cfg(target_arch = "wasm32")]
//! The browser API, driven from JavaScript the way the page's worker drives it: the
//! `Grader` and `JsWorld` objects are called by their JS names through the generated
//! glue, and the learner's code is a JS solution object. Run by scripts/test-wasm.sh
//! in headless Chromium.

use delivery_lab::wasm::Grader;
use serde_json::Value as Json;
use wasm_bindgen::prelude::*;
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

/// The native reports these JS solutions must reproduce byte for byte
/// (`grade(&mut <solution>, DEFAULT_SEED, Audience::Learner).to_json()`).
const REFERENCE_REPORT: &str = include_str!("snapshots/deliver-once-reference.json");
const MUTANT_NO_FLOOR_REPORT: &str = include_str!("snapshots/deliver-once-mutant-no-floor.json");

#[wasm_bindgen(inline_js = r#"
// ---- The contract in JS, over the exported JsWorld (a port of reference.rs) --------
const DONE_TTL_S = 604800;
const str = (s) => ({ type: "str", value: s });
const ok = (v) => JSON.stringify({ ok: v });

function deliverOnce(w, task, policy) {
  const key = "sent:" + task.key;
  if (w.op("kv_get", key) === "done") return "duplicate-skipped";
  if (!w.op("kv_set", key, "sending", policy.claim_ttl_s, true)) {
    return policy.at_most_once ? "duplicate-skipped" : "retry-later";
  }
  const sent = JSON.parse(w.op("send", task.key));
  if (sent.ok) {
    w.op("kv_set", key, "done", DONE_TTL_S, false);
    return "sent";
  }
  w.op("kv_delete", key);
  return "failed";
}

// `floor` false is the mutant: the jitter draw is used without the min_delay_s floor.
function nextStep(w, task, result, now, policy, floor) {
  if (result.permanent) {
    return task.fallback != null ? ["fallback", task.fallback] : ["dlq", result.reason];
  }
  let delay;
  if (result.retry_after_s != null) {
    delay = result.retry_after_s;
  } else {
    const drawn = w.op("uniform", 0, policy.base_delay_s * 2 ** task.attempt);
    delay = floor ? Math.max(policy.min_delay_s, drawn) : drawn;
  }
  if (task.attempt + 1 >= policy.max_attempts || now + delay >= task.expires_at_s) {
    if (task.kind === "bulk") return ["drop", "expired or out of attempts"];
    return task.fallback != null ? ["fallback", task.fallback] : ["dlq", "retries exhausted"];
  }
  return ["retry", delay];
}

// The arguments come as one flat array (src/deliver_once/learner.rs).
const taskAt = (a, i) => ({ key: a[i], kind: a[i + 1], attempt: a[i + 2], expires_at_s: a[i + 3], fallback: a[i + 4] });
const policyAt = (a, i) => ({ claim_ttl_s: a[i], at_most_once: a[i + 1], min_delay_s: a[i + 2], base_delay_s: a[i + 3], max_attempts: a[i + 4] });

function run(fn, argsJson, w, floor) {
  const a = JSON.parse(argsJson);
  if (fn === "deliver_once") return ok(str(deliverOnce(w, taskAt(a, 0), policyAt(a, 5))));
  const result = { ok: a[5], permanent: a[6], reason: a[7], retry_after_s: a[8] };
  const [action, value] = nextStep(w, taskAt(a, 0), result, a[9], policyAt(a, 10), floor);
  const v = typeof value === "number" ? { type: "float", value } : str(value);
  return ok({ type: "tuple", value: [str(action), v] });
}

// A solution whose next_step answers `answer` (a function of nothing), and whose
// deliver_once is the reference.
function withNextStep(answer) {
  return {
    call(fn, argsJson, world) {
      return fn === "next_step" ? answer() : run(fn, argsJson, world, true);
    },
  };
}

export function reference_solution(floor) {
  return { call: (fn, argsJson, world) => run(fn, argsJson, world, floor) };
}
export function throwing_solution() {
  return withNextStep(() => { throw new TypeError("boom"); });
}
export function answering_solution(answer) {
  return withNextStep(() => answer);
}
export function number_solution() {
  return withNextStep(() => 42);
}
let calls = 0;
export function printing_solution() {
  calls = 0;
  return {
    call(fn, argsJson, world) {
      calls += 1;
      return run(fn, argsJson, world, true);
    },
    take_output() { return calls === 1 ? "hello from call 1\n" : undefined; },
  };
}
let kept = null;
export function hoarding_solution() {
  return {
    call(fn, argsJson, world) {
      kept = world; // deliberately kept past the call, and never freed
      return run(fn, argsJson, world, true);
    },
  };
}
// A host that frees the run's world after each call, which the interface says not
// to do (the world is the run's, src/wasm.rs).
export function freeing_solution() {
  return {
    call(fn, argsJson, world) {
      try {
        return run(fn, argsJson, world, true);
      } finally {
        world.free();
      }
    },
  };
}
export function empty_object() { return {}; }
export function throwing_getter() { return { get call() { throw new Error("getter"); } }; }
export function use_kept_world() { return kept.op("kv_get", "sent:x"); }

// ---- The Grader through its JS names -----------------------------------------------
export function js_new_grader(grader) { return new grader.constructor(); }
export function js_labs(grader) { return grader.labs(); }
export function js_lab(grader, id) { return grader.lab(id); }
export function js_grade(grader, id, solution, seed) { return grader.grade(id, solution, seed); }
export function js_grade_no_seed(grader, id, solution) { return grader.grade(id, solution); }
export function js_error_report(grader, id, seed, message) { return grader.error_report(id, seed, message); }
export function js_timeout_report(grader, id, seed, message) { return grader.timeout_report(id, seed, message); }
export function js_formatted(grader, id, solution, format) { return grader.grade(id, solution, undefined, format); }
export function js_error_formatted(grader, id, format) { return grader.error_report(id, undefined, "boom", format); }
export function js_grade_hidden(grader, id, solution, hiddenSeed, statuses) { return grader.grade(id, solution, undefined, undefined, hiddenSeed, statuses); }
export function js_timeout_only(grader, id, onlyJson) { return grader.timeout_report(id, undefined, "Stopped after 8 s", undefined, undefined, JSON.parse(onlyJson)); }
export function js_grade_only(grader, id, solution, onlyJson, statuses) { return grader.grade(id, solution, undefined, undefined, undefined, statuses, JSON.parse(onlyJson)); }
export function js_error_aggregate(grader, id) { return grader.error_report(id, undefined, "boom", undefined, "aggregate"); }
export function error_text(e) {
  return e instanceof Error ? "Error: " + e.message : "not an Error: " + String(e);
}
"#)]
extern "C" {
    fn reference_solution(floor: bool) -> JsValue;
    fn throwing_solution() -> JsValue;
    fn answering_solution(answer: &str) -> JsValue;
    fn number_solution() -> JsValue;
    fn printing_solution() -> JsValue;
    fn hoarding_solution() -> JsValue;
    fn freeing_solution() -> JsValue;
    fn empty_object() -> JsValue;
    fn throwing_getter() -> JsValue;
    #[wasm_bindgen(catch)]
    fn use_kept_world() -> Result<JsValue, JsValue>;

    fn js_new_grader(grader: &JsValue) -> JsValue;
    #[wasm_bindgen(catch)]
    fn js_labs(grader: &JsValue) -> Result<String, JsValue>;
    #[wasm_bindgen(catch)]
    fn js_lab(grader: &JsValue, id: &str) -> Result<String, JsValue>;
    #[wasm_bindgen(catch)]
    fn js_grade(
        grader: &JsValue,
        id: &str,
        solution: &JsValue,
        seed: &JsValue,
    ) -> Result<String, JsValue>;
    #[wasm_bindgen(catch)]
    fn js_grade_no_seed(grader: &JsValue, id: &str, solution: &JsValue) -> Result<String, JsValue>;
    #[wasm_bindgen(catch)]
    fn js_error_report(
        grader: &JsValue,
        id: &str,
        seed: &JsValue,
        message: &str,
    ) -> Result<String, JsValue>;
    #[wasm_bindgen(catch)]
    fn js_timeout_report(
        grader: &JsValue,
        id: &str,
        seed: &JsValue,
        message: &str,
    ) -> Result<String, JsValue>;
    #[wasm_bindgen(catch)]
    fn js_formatted(
        grader: &JsValue,
        id: &str,
        solution: &JsValue,
        format: &str,
    ) -> Result<String, JsValue>;
    #[wasm_bindgen(catch)]
    fn js_error_formatted(grader: &JsValue, id: &str, format: &str) -> Result<String, JsValue>;
    #[wasm_bindgen(catch)]
    fn js_grade_hidden(
        grader: &JsValue,
        id: &str,
        solution: &JsValue,
        hidden_seed: &JsValue,
        statuses: &JsValue,
    ) -> Result<String, JsValue>;
    #[wasm_bindgen(catch)]
    fn js_timeout_only(grader: &JsValue, id: &str, only_json: &str) -> Result<String, JsValue>;
    #[wasm_bindgen(catch)]
    fn js_grade_only(
        grader: &JsValue,
        id: &str,
        solution: &JsValue,
        only_json: &str,
        statuses: &JsValue,
    ) -> Result<String, JsValue>;
    #[wasm_bindgen(catch)]
    fn js_error_aggregate(grader: &JsValue, id: &str) -> Result<String, JsValue>;
    fn error_text(e: &JsValue) -> String;
}

const LAB: &str = "deliver-once";

fn grader() -> JsValue {
    JsValue::from(Grader::new())
}

fn grade(solution: &JsValue) -> Json {
    let report = js_grade(&grader(), LAB, solution, &JsValue::UNDEFINED)
        .unwrap_or_else(|e| panic!("grade threw {}", error_text(&e)));
    serde_json::from_str(&report).expect("the report is JSON")
}

/// Byte equality, reported as the first line that differs (a report is ~7 KB).
fn assert_same_report(actual: &str, expected: &str) {
    if actual == expected {
        return;
    }
    let (a, e): (Vec<_>, Vec<_>) = (actual.lines().collect(), expected.lines().collect());
    let at = a
        .iter()
        .zip(&e)
        .position(|(x, y)| x != y)
        .unwrap_or(a.len().min(e.len()));
    panic!(
        "the report differs from the native snapshot at line {}:\n  wasm:   {:?}\n  native: {:?}\n({} vs {} bytes)",
        at + 1,
        a.get(at),
        e.get(at),
        actual.len(),
        expected.len()
    );
}

fn err(r: Result<impl std::fmt::Debug, JsValue>) -> String {
    error_text(&r.expect_err("expected a JS exception"))
}

fn test_named<'a>(report: &'a Json, name: &str) -> &'a Json {
    report["tests"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == name)
        .unwrap_or_else(|| panic!("no test named {name:?}"))
}

fn statuses(report: &Json) -> Vec<(String, String, String)> {
    report["tests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            let s = |k: &str| t[k].as_str().unwrap().to_string();
            (s("name"), s("kind"), s("status"))
        })
        .collect()
}

/// The example whose second step calls next_step.
const NEXT_STEP_EXAMPLE: &str = "a permanent failure goes to the fallback channel";

#[wasm_bindgen_test]
fn the_reference_in_js_gets_the_native_report_byte_for_byte() {
    let g = grader();
    let solution = reference_solution(true);
    let report = js_grade(&g, LAB, &solution, &JsValue::UNDEFINED).unwrap();
    assert_same_report(&report, REFERENCE_REPORT);
    // The default seed, given explicitly, and an omitted argument are the same run.
    let seeded = js_grade(&g, LAB, &solution, &JsValue::from(1042)).unwrap();
    assert_same_report(&seeded, REFERENCE_REPORT);
    assert_same_report(
        &js_grade_no_seed(&g, LAB, &solution).unwrap(),
        REFERENCE_REPORT,
    );
}

#[wasm_bindgen_test]
fn a_mutant_in_js_gets_the_native_mutant_report_byte_for_byte() {
    let report = js_grade(&grader(), LAB, &reference_solution(false), &JsValue::NULL).unwrap();
    assert_same_report(&report, MUTANT_NO_FLOOR_REPORT);
}

#[wasm_bindgen_test]
fn another_seed_is_reported_and_replayable() {
    let report = js_grade(&grader(), LAB, &reference_solution(true), &JsValue::from(7)).unwrap();
    let report: Json = serde_json::from_str(&report).unwrap();
    assert_eq!(report["seed"], 7);
    assert_eq!(report["status"], "pass");
    assert!(report["replay"].as_str().unwrap().contains("--seed 7 "));
}

#[wasm_bindgen_test]
fn a_hidden_seed_varies_only_what_no_report_shows_and_aggregate_shows_a_count() {
    let g = grader();
    let hidden_seed = JsValue::from_f64(3_141_592_653.0);
    let none = JsValue::UNDEFINED;
    // The reference and the no-floor mutant pass and fail the same tests in the
    // variant, and their learner reports, which show no hidden input, are the same.
    for (floor, want) in [(true, REFERENCE_REPORT), (false, MUTANT_NO_FLOOR_REPORT)] {
        let varied = js_grade_hidden(&g, LAB, &reference_solution(floor), &hidden_seed, &none)
            .unwrap_or_else(|e| panic!("{}", error_text(&e)));
        assert_same_report(&varied, want);
        assert!(!varied.contains("3141592653"));
    }
    let aggregate: Json = serde_json::from_str(
        &js_grade_hidden(
            &g,
            LAB,
            &reference_solution(true),
            &hidden_seed,
            &"aggregate".into(),
        )
        .unwrap(),
    )
    .unwrap();
    let tests = aggregate["tests"].as_array().unwrap();
    assert_eq!(tests.len(), 4);
    assert_eq!(tests[3]["name"], "hidden tests: 20 of 20 passed");
    assert_eq!(
        (tests[3]["points"].as_u64(), tests[3]["max_points"].as_u64()),
        (Some(20), Some(20))
    );
    let error: Json = serde_json::from_str(&js_error_aggregate(&g, LAB).unwrap()).unwrap();
    assert_eq!(error["tests"][3]["name"], "hidden tests: 0 of 20 passed");
    assert_eq!(error["tests"][3]["status"], "error");
    // Statuses are each or aggregate. (Every lab draws its hidden inputs per submission
    // now, the courier lab too: no lab is left for `hidden_inputs`' refusal.)
    assert_eq!(
        err(js_grade_hidden(
            &g,
            LAB,
            &reference_solution(true),
            &none,
            &"some".into()
        )),
        "Error: Unknown hidden_statuses `some`: use each or aggregate"
    );
}

/// `only`: the named tests run alone, and the report, listing them alone, says it is
/// partial and earns no XP; a name the lab does not have, none, a name twice, or a
/// hidden test when hidden statuses are aggregate is refused by name.
#[wasm_bindgen_test]
fn only_runs_the_named_tests_alone_and_says_so() {
    let g = grader();
    let lab: Json = serde_json::from_str(&js_lab(&g, LAB).unwrap()).unwrap();
    let named = |kind: &str| {
        lab["tests"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["kind"] == kind)
            .unwrap()["name"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let (example, hidden) = (named("example"), named("hidden"));
    let none = JsValue::UNDEFINED;
    let only = |names: &[&str], statuses: &JsValue| {
        js_grade_only(
            &g,
            LAB,
            &reference_solution(false),
            &serde_json::to_string(names).unwrap(),
            statuses,
        )
    };
    let full: Json =
        serde_json::from_str(&js_grade(&g, LAB, &reference_solution(false), &none).unwrap())
            .unwrap();
    assert!(full.get("partial").is_none());
    assert_eq!(full["status"], "fail");
    let failing = full["tests"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["status"] == "fail")
        .unwrap();
    let failing_name = failing["name"].as_str().unwrap();
    for names in [vec![example.as_str()], vec![hidden.as_str(), failing_name]] {
        let r: Json = serde_json::from_str(&only(&names, &none).unwrap()).unwrap();
        let ran: Vec<&str> = r["tests"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect();
        // In the lab's order, whatever the order asked.
        let mut want = names.clone();
        want.sort_by_key(|n| {
            full["tests"]
                .as_array()
                .unwrap()
                .iter()
                .position(|t| t["name"] == *n)
        });
        assert_eq!(ran, want);
        assert_eq!(r["partial"], true);
        assert_eq!(r["total"], names.len());
        assert_eq!(r["xp"], 0);
        for t in r["tests"].as_array().unwrap() {
            assert_eq!(
                t["status"],
                test_named(&full, t["name"].as_str().unwrap())["status"]
            );
        }
    }
    assert_eq!(err(only(&[], &none)), "Error: only: name at least one test");
    assert_eq!(
        err(only(&["nope"], &none)),
        "Error: only: lab `deliver-once` has no test named `nope`"
    );
    assert_eq!(
        err(only(&[&example, &example], &none)),
        format!("Error: only: `{example}` is named twice")
    );
    assert_eq!(
        err(only(&[&hidden], &"aggregate".into())),
        format!("Error: only: `{hidden}` is a hidden test, and hidden statuses are aggregate here")
    );
    let shown: Json =
        serde_json::from_str(&only(&[&example], &"aggregate".into()).unwrap()).unwrap();
    assert_eq!(shown["partial"], true);

    // A run of some tests stopped at the limit (the page's worker ended): its report
    // lists those tests alone, timed out, and is partial; refused as `grade` refuses.
    let timeout_only =
        |names: &[&str]| js_timeout_only(&g, LAB, &serde_json::to_string(names).unwrap());
    let t: Json = serde_json::from_str(&timeout_only(&[&hidden, &example]).unwrap()).unwrap();
    let listed: Vec<(&str, &str)> = t["tests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["name"].as_str().unwrap(), t["status"].as_str().unwrap()))
        .collect();
    assert_eq!(
        listed,
        [(example.as_str(), "timeout"), (hidden.as_str(), "timeout")]
    );
    assert_eq!(
        (
            t["partial"].as_bool(),
            t["xp"].as_u64(),
            t["total"].as_u64()
        ),
        (Some(true), Some(0), Some(2))
    );
    assert_eq!(t["message"], "Stopped after 8 s");
    assert_eq!(
        err(timeout_only(&["nope"])),
        "Error: only: lab `deliver-once` has no test named `nope`"
    );
}

#[wasm_bindgen_test]
fn an_unknown_lab_is_a_js_error_everywhere() {
    let g = grader();
    for message in [
        err(js_lab(&g, "nope")),
        err(js_grade(
            &g,
            "nope",
            &reference_solution(true),
            &JsValue::UNDEFINED,
        )),
        err(js_error_report(&g, "nope", &JsValue::UNDEFINED, "x")),
        err(js_timeout_report(&g, "nope", &JsValue::UNDEFINED, "x")),
    ] {
        assert!(
            message.starts_with("Error: Unknown lab `nope`") && message.contains("deliver-once"),
            "{message}"
        );
    }
}

#[wasm_bindgen_test]
fn a_solution_without_call_is_a_js_error() {
    let g = grader();
    for not_a_solution in [
        JsValue::UNDEFINED,
        JsValue::NULL,
        JsValue::from("x"),
        empty_object(),
        throwing_getter(),
    ] {
        let message = err(js_grade(&g, LAB, &not_a_solution, &JsValue::UNDEFINED));
        assert!(message.contains("needs a solution object"), "{message}");
    }
    // The same grader still grades afterwards.
    let report = js_grade(&g, LAB, &reference_solution(true), &JsValue::UNDEFINED).unwrap();
    assert_same_report(&report, REFERENCE_REPORT);
}

#[wasm_bindgen_test]
fn a_call_that_throws_errors_its_test_and_the_others_still_run() {
    let report = grade(&throwing_solution());
    let t = test_named(&report, NEXT_STEP_EXAMPLE);
    assert_eq!(t["status"], "error");
    let message = t["message"].as_str().unwrap();
    assert!(message.contains("could not run `next_step`"), "{message}");
    assert!(message.contains("TypeError: boom"), "{message}");
    // deliver_once alone still passes its examples; every test got a result.
    let all = statuses(&report);
    assert_eq!(all.len(), report["total"].as_u64().unwrap() as usize);
    assert!(all
        .iter()
        .any(|(_, kind, s)| kind == "example" && s == "pass"));
    assert!(all
        .iter()
        .any(|(_, kind, s)| kind == "hidden" && s == "pass"));
    assert!(all.iter().all(|(_, _, s)| s == "pass" || s == "error"));
    assert_eq!(report["status"], "fail");
}

#[wasm_bindgen_test]
fn a_missing_function_is_a_test_error_that_says_so() {
    let report = grade(&answering_solution(
        r#"{"error":{"kind":"missing-function","function":"next_step"}}"#,
    ));
    let t = test_named(&report, NEXT_STEP_EXAMPLE);
    assert_eq!(t["status"], "error");
    assert!(t["message"]
        .as_str()
        .unwrap()
        .contains("does not define `next_step`"));
}

#[wasm_bindgen_test]
fn a_learner_exception_reaches_the_report_with_its_traceback() {
    let report = grade(&answering_solution(
        r#"{"error":{"kind":"exception","message":"Traceback (most recent call last):\nValueError: no"}}"#,
    ));
    let t = test_named(&report, NEXT_STEP_EXAMPLE);
    assert_eq!(t["status"], "error");
    assert!(t["message"].as_str().unwrap().contains("ValueError: no"));
}

#[wasm_bindgen_test]
fn a_timeout_answer_stops_the_run() {
    let report = grade(&answering_solution(
        r#"{"error":{"kind":"timeout","limit_s":8}}"#,
    ));
    let all = statuses(&report);
    let at = all
        .iter()
        .position(|(name, _, _)| name == NEXT_STEP_EXAMPLE)
        .unwrap();
    assert_eq!(all[at].2, "timeout");
    assert!(all[at + 1..].iter().all(|(_, _, s)| s == "timeout"));
}

#[wasm_bindgen_test]
fn an_unparsable_answer_is_a_host_error_in_its_test() {
    for solution in [
        answering_solution("this is not JSON"),
        answering_solution(r#"{"ok": 3}"#),
        number_solution(),
    ] {
        let report = grade(&solution);
        let t = test_named(&report, NEXT_STEP_EXAMPLE);
        assert_eq!(t["status"], "error");
        let message = t["message"].as_str().unwrap();
        assert!(
            message.contains("could not run `next_step`: the host's"),
            "{message}"
        );
    }
}

#[wasm_bindgen_test]
fn printed_output_goes_to_the_test_that_printed_it() {
    let report = grade(&printing_solution());
    let first = &report["tests"][0];
    assert_eq!(first["output"], "hello from call 1\n");
    assert!(report["tests"][1].get("output").is_none());
}

#[wasm_bindgen_test]
fn a_world_kept_after_its_call_is_detached() {
    let report = grade(&hoarding_solution());
    assert_eq!(report["status"], "pass");
    let message = err(use_kept_world());
    assert!(
        message.contains("call that has already returned"),
        "{message}"
    );
}

#[wasm_bindgen_test]
fn a_host_that_frees_the_world_gets_errors_not_a_crash() {
    // The first call's world works; every later call's world was freed by the host,
    // so its operations throw: those tests are errors, and the grader lives on.
    let report = grade(&freeing_solution());
    let all = statuses(&report);
    assert_eq!(all.len(), report["total"].as_u64().unwrap() as usize);
    assert!(all.iter().all(|(_, _, s)| s == "pass" || s == "error"));
    assert!(all.iter().any(|(_, _, s)| s == "error"));
    assert_eq!(report["status"], "fail");
    // The next run (a new world) grades the reference as before.
    assert_eq!(grade(&reference_solution(true))["status"], "pass");
}

#[wasm_bindgen_test]
fn labs_lists_every_lab() {
    let g = js_new_grader(&grader()); // `new Grader()` from JS
    let labs: Json = serde_json::from_str(&js_labs(&g).unwrap()).unwrap();
    assert_eq!(
        labs,
        serde_json::json!([
            { "id": "deliver-once", "title": "Deliver once, retry right" },
            { "id": "courier", "title": "The courier challenge" }
        ])
    );
}

#[wasm_bindgen_test]
fn lab_describes_deliver_once() {
    let lab: Json = serde_json::from_str(&js_lab(&grader(), LAB).unwrap()).unwrap();
    assert_eq!(lab["id"], LAB);
    assert_eq!(lab["level"], "medium");
    assert_eq!(lab["minutes"], 35);
    assert_eq!(lab["xp"], 90);
    assert_eq!(lab["time_limit_s"], 8.0);
    assert_eq!(lab["default_seed"], 1042);
    assert_eq!(
        lab["functions"],
        serde_json::json!(["deliver_once", "next_step"])
    );
    let starter = lab["starter_py"].as_str().unwrap();
    assert!(starter.contains("def deliver_once(") && starter.contains("def next_step("));
    assert!(lab["reference_py"]
        .as_str()
        .unwrap()
        .contains("def next_step("));
    assert!(!lab["instructions_md"].as_str().unwrap().is_empty());
    assert_eq!(
        lab["tasks"],
        serde_json::json!([
            "`deliver_once(task, provider, kv, policy)`",
            "`next_step(task, result, now, policy, rng)`"
        ])
    );
    let tests = lab["tests"].as_array().unwrap();
    let count = |kind: &str| tests.iter().filter(|t| t["kind"] == kind).count();
    assert_eq!(count("example"), 3);
    assert!(count("hidden") >= 10);
    assert!(tests
        .iter()
        .all(|t| t["name"].is_string() && t.as_object().unwrap().len() == 3));
    // Each test names its task, as its test sheet does; each task its functions.
    let sheets = delivery_lab::lab::lab_by_id(LAB).unwrap().test_sheets();
    let tasks: Vec<u64> = tests.iter().map(|t| t["task"].as_u64().unwrap()).collect();
    let want: Vec<u64> = sheets.iter().map(|s| u64::from(s.task_id)).collect();
    assert_eq!(tasks, want);
    assert!(tasks.contains(&1) && tasks.contains(&2));
    assert_eq!(
        lab["task_functions"],
        serde_json::json!([["deliver_once"], ["next_step"]])
    );
}

#[wasm_bindgen_test]
fn error_and_timeout_reports_list_every_test() {
    let g = grader();
    let lab: Json = serde_json::from_str(&js_lab(&g, LAB).unwrap()).unwrap();
    let n = lab["tests"].as_array().unwrap().len();

    let e: Json = serde_json::from_str(
        &js_error_report(&g, LAB, &JsValue::UNDEFINED, "SyntaxError: line 3").unwrap(),
    )
    .unwrap();
    assert_eq!(e["status"], "error");
    assert_eq!(e["seed"], 1042);
    assert_eq!(e["message"], "SyntaxError: line 3");
    assert_eq!(
        (e["total"].as_u64(), e["passed"].as_u64()),
        (Some(n as u64), Some(0))
    );
    for t in e["tests"].as_array().unwrap() {
        assert_eq!(t["status"], "error");
        // The message goes to examples only; hidden tests show name and status.
        assert_eq!(t["kind"] == "example", t.get("message").is_some());
    }

    let t: Json = serde_json::from_str(
        &js_timeout_report(&g, LAB, &JsValue::from(5), "Stopped after 8 s").unwrap(),
    )
    .unwrap();
    assert_eq!(t["status"], "fail");
    assert_eq!(t["seed"], 5);
    assert_eq!(t["message"], "Stopped after 8 s");
    assert_eq!(t["total"].as_u64(), Some(n as u64));
    assert!(t["tests"]
        .as_array()
        .unwrap()
        .iter()
        .all(|t| t["status"] == "timeout"));
}

#[wasm_bindgen_test]
fn reports_come_in_every_format_the_cli_writes() {
    let g = grader();
    // The same no-floor mutant as the native snapshot, in each platform's format.
    let exercism = js_formatted(&g, LAB, &reference_solution(false), "exercism").unwrap();
    let v: Json = serde_json::from_str(&exercism).unwrap();
    assert_eq!(
        (v["version"].as_u64(), v["status"].as_str()),
        (Some(3), Some("fail"))
    );
    let gradescope = js_formatted(&g, LAB, &reference_solution(false), "gradescope").unwrap();
    let v: Json = serde_json::from_str(&gradescope).unwrap();
    assert!(v["tests"]
        .as_array()
        .unwrap()
        .iter()
        .any(|t| t["visibility"] == "after_due_date"));
    let hidden = js_formatted(&g, LAB, &reference_solution(true), "gradescope-hidden").unwrap();
    assert!(hidden.contains("\"visibility\": \"hidden\""));
    let published =
        js_formatted(&g, LAB, &reference_solution(true), "gradescope-published").unwrap();
    assert!(published.contains("\"visibility\": \"after_published\""));
    let pl: Json = serde_json::from_str(
        &js_formatted(&g, LAB, &reference_solution(true), "prairielearn").unwrap(),
    )
    .unwrap();
    assert_eq!(
        (pl["gradable"].as_bool(), pl["score"].as_f64()),
        (Some(true), Some(1.0))
    );
    let v: Json = serde_json::from_str(&exercism).unwrap();
    assert!(v["tests"]
        .as_array()
        .unwrap()
        .iter()
        .all(|t| t["test_code"].is_string() && t["task_id"].is_u64()));
    let text = js_formatted(&g, LAB, &reference_solution(true), "text").unwrap();
    assert!(text.starts_with("deliver-once: PASS"), "{text}");
    let e: Json = serde_json::from_str(&js_error_formatted(&g, LAB, "exercism").unwrap()).unwrap();
    assert_eq!(
        (e["status"].as_str(), e["message"].as_str()),
        (Some("error"), Some("boom"))
    );
    let err = js_error_formatted(&g, LAB, "yaml").unwrap_err();
    assert!(
        error_text(&err).contains("Unknown report format `yaml`"),
        "{}",
        error_text(&err)
    );
}

/// The courier simulator in WASM: the reference's chaos and fairness runs for the
/// committed seed are byte-identical to the native ones (`tests/courier_sim.rs`).
#[wasm_bindgen_test]
fn courier_runs_match_native() {
    use delivery_lab::courier::fairness::{fairness_run, FairPlan};
    use delivery_lab::courier::reference::RefBackend;
    use delivery_lab::courier::sim::{chaos_run, ChaosPlan};
    let chaos =
        chaos_run(&mut RefBackend::new(None), &ChaosPlan::full(1042)).expect("the run finishes");
    let fair = fairness_run(&mut RefBackend::new(None), &FairPlan::full(1042));
    let actual = format!(
        "{}\n{}\n",
        serde_json::to_string(&chaos).unwrap(),
        serde_json::to_string(&fair).unwrap()
    );
    assert_same_report(
        &actual,
        include_str!("snapshots/courier-reference-runs.json"),
    );
}
