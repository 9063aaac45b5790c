//! The labs are named together in one place, src/labs.rs (the engine and build.rs
//! include it; the build scripts and ./lab test read it through scripts/labs); the
//! registry (`labs()`) must hold exactly those labs, in that order, and the case
//! folders (found by a lab's id: `case_files.rs`) exactly those labs' cases. And a
//! learner function's signature is the starter's wherever a lab writes it.

#[path = "../src/case_files.rs"]
mod case_files;

/// The lab ids as scripts/labs reads them from src/labs.rs (the build and ./lab test
/// use that script), each with its module.
fn listed_labs() -> Vec<String> {
    let out = std::process::Command::new("scripts/labs")
        .output()
        .expect("scripts/labs runs");
    assert!(out.status.success(), "scripts/labs failed");
    let labs: Vec<String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    // Each is a line of the list, and each lab's folder is its module.
    let list = include_str!("../src/labs.rs");
    for lab in &labs {
        let module = lab.replace('-', "_");
        assert!(
            list.contains(&format!("\"{lab}\" => {module}::")),
            "src/labs.rs: {lab}'s module is not src/{module}/"
        );
    }
    labs
}

#[test]
fn the_registry_and_the_case_folders_hold_the_listed_labs() {
    let labs = listed_labs();
    assert!(labs.len() >= 2, "{labs:?}");
    let registry: Vec<String> = delivery_lab::labs()
        .iter()
        .map(|l| l.info().id.to_string())
        .collect();
    assert_eq!(
        registry, labs,
        "labs() against scripts/labs' reading of src/labs.rs"
    );
    // Each lab's cases are in its own folders, found by its id alone.
    let root = std::path::Path::new(".");
    for lab in &labs {
        let files = case_files::lab_files(root, lab, true);
        let examples = files.iter().filter(|(_, hidden)| !hidden).count();
        assert!(
            examples > 0,
            "{lab}: no example case in {}",
            case_files::examples_dir(lab).display()
        );
        assert!(
            files.len() > examples,
            "{lab}: no hidden case in hidden-tests/{lab}/"
        );
    }
    // And no case folder belongs to a lab that is not listed.
    let mut folders: Vec<String> = std::fs::read_dir("hidden-tests")
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    folders.sort();
    let mut listed = labs.clone();
    listed.sort();
    assert_eq!(
        folders, listed,
        "hidden-tests/'s folders against src/labs.rs"
    );
}

/// Each `name(...)` in `text` for a function `name`: the text between its
/// parentheses (None when `name` stands there as part of a longer word).
fn written_signatures<'t>(text: &'t str, name: &str) -> Vec<&'t str> {
    let pattern = format!("{name}(");
    let mut out = Vec::new();
    for (at, _) in text.match_indices(&pattern) {
        let before = text[..at].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '.') {
            continue;
        }
        let rest = &text[at + pattern.len()..];
        if let Some(end) = rest.find(')') {
            out.push(&rest[..end]);
        }
    }
    out
}

/// A learner's function's signature is written once, in the starter (the file the
/// learner edits): the reference defines it alike, and every place the lab's text
/// writes it (`name(params)`) says the same parameters, in the same order.
#[test]
fn every_signature_in_a_labs_text_and_reference_is_the_starters() {
    for lab in delivery_lab::labs() {
        let info = lab.info();
        for name in info.functions {
            let def = format!("def {name}");
            let starter = written_signatures(info.starter_py, &def);
            assert_eq!(
                starter.len(),
                1,
                "{}: the starter defines {name} once",
                info.id
            );
            let params = starter[0];
            assert_eq!(
                written_signatures(info.reference_py, &def),
                [params],
                "{}: reference.py's {name} against the starter's",
                info.id
            );
            let in_text = written_signatures(info.instructions_md, name);
            assert!(
                !in_text.is_empty(),
                "{}: lab.md never writes {name}({params})",
                info.id
            );
            for written in in_text {
                assert_eq!(
                    written, params,
                    "{}: lab.md writes {name}({written}), the starter {name}({params})",
                    info.id
                );
            }
        }
    }
}

/// Every lab grades through the one `LearnerHost` a host implements: here a host
/// that cannot run anything. Each lab still reports every test it lists, in order,
/// none passing, and names the function the host could not run.
#[test]
fn every_lab_grades_through_the_one_learner_host() {
    use delivery_lab::lab::{LearnerHost, RunMode, StoreOp};
    use delivery_lab::report::{Audience, TestStatus};
    struct Broken;
    impl LearnerHost for Broken {
        fn call(
            &mut self,
            _fn_name: &str,
            _args_json: &str,
            _world: &dyn delivery_lab::lab::LabWorld,
        ) -> Result<String, String> {
            Err("this host runs nothing".into())
        }
        fn store(&mut self, _op: StoreOp, _args_json: &str) -> Result<String, String> {
            Err("this host runs nothing".into())
        }
    }
    for lab in delivery_lab::labs() {
        let mut host = Broken;
        let r = lab.grade(
            &mut host,
            7,
            Default::default(),
            Audience::Staff,
            RunMode::Report,
        );
        let listed: Vec<_> = lab.tests().into_iter().map(|(name, _)| name).collect();
        let reported: Vec<_> = r.tests.iter().map(|t| t.name.clone()).collect();
        assert_eq!(reported, listed, "{}", lab.info().id);
        assert!(
            r.tests.iter().all(|t| t.status != TestStatus::Pass),
            "{}",
            lab.info().id
        );
        assert_eq!((r.lab.as_str(), r.seed), (lab.info().id, 7));
        let said = r
            .tests
            .iter()
            .filter_map(|t| t.message.as_deref())
            .collect::<Vec<_>>()
            .join("\n");
        assert!(
            said.contains("this host runs nothing"),
            "{}: {said}",
            lab.info().id
        );
    }
}

/// The `## `/`### ` headings of a lab's text, without their `#`s.
fn headings(md: &str) -> Vec<&str> {
    md.lines()
        .filter_map(|l| l.strip_prefix("## ").or_else(|| l.strip_prefix("### ")))
        .map(str::trim)
        .collect()
}

/// A lab's tasks (Exercism's `task_id`) are sections of its text, and every test
/// belongs to exactly one of them: each learner function is in one task's list, each
/// test the registry names a task for is one of the lab's, and each test's sheet
/// has a task; every task holds at least one test.
#[test]
fn every_task_is_a_section_of_the_labs_text_and_every_test_has_one() {
    for lab in delivery_lab::labs() {
        let info = lab.info();
        let sections = headings(info.instructions_md);
        assert!(!info.tasks.is_empty(), "{}: no tasks", info.id);
        for task in info.tasks {
            assert!(
                sections.contains(&task.heading),
                "{}: the task {:?} is no section of lab.md (its sections: {sections:?})",
                info.id,
                task.heading
            );
        }
        let names: Vec<String> = lab.tests().into_iter().map(|(n, _)| n).collect();
        for f in info.functions {
            let owners = info
                .tasks
                .iter()
                .filter(|t| t.functions.contains(f))
                .count();
            assert_eq!(owners, 1, "{}: {f} is in {owners} tasks", info.id);
        }
        for t in info.tasks.iter().flat_map(|t| t.tests) {
            assert!(
                names.iter().any(|n| n == t),
                "{}: the registry's test {t:?} is not one of the lab's",
                info.id
            );
        }
        let sheets = lab.test_sheets();
        let sheet_names: Vec<&str> = sheets.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(
            sheet_names, names,
            "{}: one sheet per test, in report order",
            info.id
        );
        // Without the hidden tests, a task may hold none (courier's heartbeat).
        for (i, _) in info
            .tasks
            .iter()
            .enumerate()
            .filter(|_| cfg!(feature = "hidden"))
        {
            let id = u32::try_from(i + 1).unwrap();
            assert!(
                sheets.iter().any(|s| s.task_id == id),
                "{}: task {id} ({}) holds no test",
                info.id,
                info.tasks[i].heading
            );
        }
        assert!(sheets
            .iter()
            .all(|s| (1..=info.tasks.len()).contains(&(s.task_id as usize))));
    }
}

/// An example's code is the calls it makes, each with what it must return, in
/// Python; a hidden test's sheet has none (its data stays out of every report).
#[test]
fn an_examples_code_is_its_calls_and_results_and_a_hidden_test_has_none() {
    for lab in delivery_lab::labs() {
        let kinds: Vec<_> = lab.tests().into_iter().map(|(_, k)| k).collect();
        for (sheet, kind) in lab.test_sheets().iter().zip(kinds) {
            match kind {
                delivery_lab::TestKind::Hidden => {
                    assert_eq!(sheet.code, None, "{}", sheet.name)
                }
                delivery_lab::TestKind::Example => {
                    let code = sheet.code.as_deref().unwrap_or("");
                    assert!(!code.is_empty(), "{}: an example with no code", sheet.name);
                }
            }
        }
    }
    let lab = delivery_lab::lab_by_id("deliver-once").unwrap();
    let sheets = lab.test_sheets();
    let fresh = &sheets[0];
    assert_eq!(fresh.name, "a fresh task is claimed, sent and marked done");
    assert_eq!(fresh.task_id, 1, "deliver_once's section");
    assert_eq!(
        fresh.code.as_deref().unwrap(),
        "# every provider.send answers SendResult(ok=True, permanent=False, reason='200 OK', retry_after_s=None)\nassert deliver_once(Task(key='order-1042:shipped', kind='critical', attempt=0, expires_at=3600.0, fallback='sms'), provider, kv, Policy(claim_ttl_s=30.0, at_most_once=False, min_delay_s=1.0, base_delay_s=2.0, max_attempts=5)) == 'sent'"
    );
    let fallback = &sheets[2];
    assert_eq!(
        fallback.task_id, 2,
        "named in its case: next_step's section"
    );
    let code = fallback.code.as_deref().unwrap();
    assert!(
        code.contains("\nassert next_step(Task(key='order-1042:shipped'"),
        "{code}"
    );
    assert!(code.ends_with(", rng) == ('fallback', 'sms')"), "{code}");
    let courier = delivery_lab::lab_by_id("courier").unwrap().test_sheets();
    assert_eq!(
        courier[0].code.as_deref(),
        Some("assert claim(db, \"w1\", 10000, cfg) == (3, 1)")
    );
}

/// The world protocol lives once, in the registry (`world_ops`): every world a lab
/// hands to a learner call answers exactly those operations, by name, and the
/// checks in `world_op` refuse anything else before the world sees it. And the two
/// paths to a host stay apart: every learner call names one of the lab's functions,
/// and the grader's operations on the run's database come through `store` only,
/// from a lab that has one.
#[test]
fn every_world_answers_exactly_its_registry_operations() {
    use delivery_lab::lab::{
        world_op, Arg, LabWorld, LearnerHost, OpError, OpValue, RunMode, StoreOp, OP_ARGS_MAX,
    };
    use delivery_lab::report::Audience;
    struct Probe {
        worlds: usize,
        ops: &'static [delivery_lab::lab::WorldOp],
        functions: &'static [&'static str],
        store_ops: Vec<StoreOp>,
    }
    fn sample(want: Arg) -> OpValue {
        match want {
            Arg::Str => OpValue::Str("k".into()),
            Arg::Number => OpValue::Number(1.0),
            Arg::NumberOrNull => OpValue::Null,
            Arg::Bool => OpValue::Bool(false),
        }
    }
    impl LearnerHost for Probe {
        fn call(
            &mut self,
            fn_name: &str,
            _args_json: &str,
            world: &dyn LabWorld,
        ) -> Result<String, String> {
            assert!(
                self.functions.contains(&fn_name),
                "a learner call named {fn_name}, no function of the lab"
            );
            self.worlds += 1;
            let names =
                |ops: &[delivery_lab::lab::WorldOp]| ops.iter().map(|o| o.name).collect::<Vec<_>>();
            assert_eq!(
                names(world.ops()),
                names(self.ops),
                "a world of another lab"
            );
            for op in world.ops() {
                assert!(op.args.len() <= OP_ARGS_MAX, "{} takes too many", op.name);
                // Each operation runs on arguments of its types (the world's own
                // dispatch has an arm for it, or this panics).
                world_op(world, op.name, op.args.len(), |_, want| Some(sample(want)))
                    .unwrap_or_else(|e| panic!("{}: {e}", op.name));
                if let Some(&first) = op.args.first() {
                    let wrong = match first {
                        Arg::Str => OpValue::Number(1.0),
                        _ => OpValue::Str("x".into()),
                    };
                    let e = world_op(world, op.name, op.args.len(), |i, want| {
                        if i == 0 {
                            (std::mem::discriminant(&wrong)
                                == std::mem::discriminant(&sample(want)))
                            .then(|| wrong.clone())
                        } else {
                            Some(sample(want))
                        }
                    });
                    assert!(
                        matches!(e, Err(OpError::BadArgument { index: 0, .. })),
                        "{}: {e:?}",
                        op.name
                    );
                }
                let e = world_op(world, op.name, op.args.len() + 1, |_, w| Some(sample(w)));
                assert!(matches!(e, Err(OpError::TooMany { .. })), "{}", op.name);
            }
            let e = world_op(world, "__proto__", 0, |_, w| Some(sample(w)));
            assert!(matches!(e, Err(OpError::Unknown { .. })));
            Err("probed".into())
        }
        // The store's operations succeed, so the lab goes on to the learner calls.
        fn store(&mut self, op: StoreOp, _args_json: &str) -> Result<String, String> {
            self.store_ops.push(op);
            Ok(r#"{"ok": null}"#.into())
        }
    }
    for lab in delivery_lab::labs() {
        let mut host = Probe {
            worlds: 0,
            ops: lab.info().world_ops,
            functions: lab.info().functions,
            store_ops: Vec::new(),
        };
        lab.grade(
            &mut host,
            7,
            Default::default(),
            Audience::Staff,
            RunMode::Report,
        );
        assert!(
            host.worlds > 0,
            "{}: no call was handed a world",
            lab.info().id
        );
        assert_eq!(
            host.store_ops.contains(&StoreOp::Reset),
            lab.info().store_py.is_some(),
            "{}: store operations {:?}",
            lab.info().id,
            host.store_ops
        );
        if lab.info().store_py.is_none() {
            assert_eq!(host.store_ops, [], "{}", lab.info().id);
        }
    }
}
