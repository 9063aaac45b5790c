//! One report model for every lab and host, and the formats made from it: the
//! project's own JSON, Exercism's `results.json` (version 3), Gradescope's and
//! PrairieLearn's.

use serde::{Deserialize, Serialize};
use serde_json::json;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TestKind {
    Example,
    Hidden,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TestStatus {
    Pass,
    Fail,
    Error,
    Timeout,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    /// Every test passed.
    Pass,
    /// Some test did not pass.
    Fail,
    /// Nothing could be graded (the host says why in `message`).
    Error,
}

/// Who reads the report. Learners never see inside hidden tests; course staff may.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Audience {
    #[default]
    Learner,
    Staff,
}

/// One thing that happened in a test's world, drawn on the page's timeline.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TraceEvent {
    pub t_s: f64,
    /// `kv`, `send` or `draw`: what the page colours it as.
    pub kind: String,
    /// The call as Python would write it, with its result: `kv.get('sent:a') -> None`.
    pub text: String,
}

/// One call of a learner function in a test, and what it did.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TraceStep {
    pub t_s: f64,
    pub call: String,
    pub events: Vec<TraceEvent>,
    /// The value returned (Python repr), or `None` when the call raised.
    pub returned: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TestReport {
    pub name: String,
    pub kind: TestKind,
    pub status: TestStatus,
    pub points: u32,
    pub max_points: u32,
    /// The rule that was broken (its id), for tests that did not pass.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expected: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub actual: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub trace: Vec<TraceStep>,
    /// What the learner's code printed during this test (capped by the host).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
    /// What a page draws instead of printing (a system run's rows, its comparison);
    /// the message says the same in text, for terminals.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub figure: Option<Figure>,
}

/// A test's result as a picture. Its size is the lab's, never the learner's: the
/// rows and bars are fixed by the run, only their values come from it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Figure {
    /// Rows, each a value against what it must be.
    Table { rows: Vec<FigureRow> },
    /// Groups of bars, each a ratio to a baseline of 1, and the line they must stay at or under.
    Bars {
        caption: String,
        limit: f64,
        groups: Vec<BarGroup>,
    },
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FigureRow {
    pub label: String,
    pub value: String,
    pub must: String,
    pub ok: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BarGroup {
    pub label: String,
    pub bars: Vec<Bar>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Bar {
    pub label: String,
    pub ratio: f64,
    /// The measured value the ratio stands for, as a person reads it (`78 ms`).
    pub value: String,
}

/// The most characters one field of a test (message, expected, actual, output, a
/// trace line) or a report's own message carries; longer text is cut and marked. A
/// learner's code decides much of that text (what it raises, prints and returns),
/// so every report stays small whatever the code does: a JSON line of the grading
/// CLI holds at most the example tests' messages.
pub const FIELD_CAP_CHARS: usize = 4096;
/// The most steps a test's trace keeps (its first ones: where it went wrong).
pub const TRACE_CAP_STEPS: usize = 40;
/// The most events one step of a trace keeps.
pub const EVENTS_CAP: usize = 40;

fn cap_field(s: &mut Option<String>) {
    if let Some(text) = s {
        if text.chars().nth(FIELD_CAP_CHARS).is_some() {
            *text = cap_chars(text, FIELD_CAP_CHARS);
        }
    }
}

impl TestReport {
    /// This test with every field within its cap (see `FIELD_CAP_CHARS`).
    fn capped(mut self) -> Self {
        cap_field(&mut self.message);
        cap_field(&mut self.expected);
        cap_field(&mut self.actual);
        cap_field(&mut self.output);
        self.trace.truncate(TRACE_CAP_STEPS);
        for step in &mut self.trace {
            step.call = cap_chars(&step.call, FIELD_CAP_CHARS / 8);
            cap_field(&mut step.returned);
            step.events.truncate(EVENTS_CAP);
            for e in &mut step.events {
                e.text = cap_chars(&e.text, FIELD_CAP_CHARS / 8);
            }
        }
        self
    }

    /// A one-point test with this outcome and nothing else to show yet.
    pub fn new(
        name: impl Into<String>,
        kind: TestKind,
        status: TestStatus,
        message: Option<String>,
    ) -> TestReport {
        TestReport {
            name: name.into(),
            kind,
            status,
            points: u32::from(status == TestStatus::Pass),
            max_points: 1,
            rule: None,
            message,
            expected: None,
            actual: None,
            trace: Vec::new(),
            output: None,
            figure: None,
        }
    }

    /// A test's result as the audience may see it: a hidden test shows a learner its
    /// name and status only.
    pub fn for_audience(mut self, audience: Audience) -> Self {
        if self.kind == TestKind::Hidden && audience == Audience::Learner {
            self.rule = None;
            self.message = None;
            self.expected = None;
            self.actual = None;
            self.trace.clear();
            self.output = None;
            self.figure = None;
        }
        self
    }
}

/// How a report shows a learner its hidden tests: each by name and status (the
/// default), or (`--hidden-statuses aggregate`) only how many passed, so that no
/// report says which hidden test a submission passed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum HiddenStatuses {
    #[default]
    Each,
    Aggregate,
}

impl HiddenStatuses {
    pub const NAMES: [&'static str; 2] = ["each", "aggregate"];

    pub fn parse(name: &str) -> Option<HiddenStatuses> {
        match name {
            "each" => Some(HiddenStatuses::Each),
            "aggregate" => Some(HiddenStatuses::Aggregate),
            _ => None,
        }
    }
}

/// The name of the one test that stands for every hidden test in an aggregate report.
pub fn hidden_aggregate_name(passed: usize, total: usize) -> String {
    format!("hidden tests: {passed} of {total} passed")
}

/// What a learner may read of a test before it runs, for the formats that show it
/// (Exercism's `task_id` and `test_code`). Each lab makes its own (`Lab::test_sheets`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TestSheet {
    pub name: String,
    /// The lab's task it belongs to, numbered from 1 (`LabInfo::tasks`).
    pub task_id: u32,
    /// An example's calls and what each must return, in Python. None for a hidden test.
    pub code: Option<String>,
}

/// Gradescope's format for every text of its `results.json` (its "Output String
/// Formatting": `text`, nothing rendered as HTML, Markdown or ANSI). Written for the
/// summary, the tests' outputs and their names alike, though Gradescope's own
/// default is `text` for the last two.
pub const GRADESCOPE_TEXT_FORMAT: &str = "text";

/// A hidden test's `test_code`: that it is hidden, and nothing of it.
pub const HIDDEN_TEST_CODE: &str = "# A hidden test: its code is not shown.";

/// The longest top-level `message` Exercism takes (its interface: 65,535, fewer when
/// characters take several bytes). A report's message is cut far below that, at
/// `FIELD_CAP_CHARS`, even if each of its characters took four bytes.
pub const EXERCISM_MESSAGE_CAP: usize = 65_535;
const _: () = assert!(4 * (FIELD_CAP_CHARS + 64) < EXERCISM_MESSAGE_CAP);

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tally {
    pub passed: usize,
    pub total: usize,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub lab: String,
    pub seed: u64,
    pub status: RunStatus,
    pub passed: usize,
    pub failed: usize,
    pub total: usize,
    pub score: u32,
    pub max_score: u32,
    /// The lab's XP when every test passes, else 0.
    pub xp: u32,
    pub examples: Tally,
    pub hidden: Tally,
    /// Why nothing could be graded, when `status` is `error`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The command that grades the same file with the same seed again.
    pub replay: String,
    /// Only some of the lab's tests ran (`RunMode::Only`): the totals are theirs, and
    /// the run says nothing of the others. Absent from every full run's JSON.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub partial: bool,
    pub tests: Vec<TestReport>,
}

pub fn replay_command(lab: &str, seed: u64) -> String {
    format!("./lab grade --lab {lab} --seed {seed} solution.py")
}

impl Report {
    pub fn new(lab: &str, seed: u64, xp_on_pass: u32, tests: Vec<TestReport>) -> Report {
        // Every report is made here, so this is the one place its size is bounded.
        let tests: Vec<TestReport> = tests.into_iter().map(TestReport::capped).collect();
        let tally = |kind: Option<TestKind>| {
            let of_kind = tests.iter().filter(|t| kind.is_none_or(|k| t.kind == k));
            Tally {
                passed: of_kind
                    .clone()
                    .filter(|t| t.status == TestStatus::Pass)
                    .count(),
                total: of_kind.count(),
            }
        };
        let all = tally(None);
        let all_pass = all.total > 0 && all.passed == all.total;
        Report {
            lab: lab.into(),
            seed,
            status: if all_pass {
                RunStatus::Pass
            } else {
                RunStatus::Fail
            },
            passed: all.passed,
            failed: all.total - all.passed,
            total: all.total,
            score: tests.iter().map(|t| t.points).sum(),
            max_score: tests.iter().map(|t| t.max_points).sum(),
            xp: if all_pass { xp_on_pass } else { 0 },
            examples: tally(Some(TestKind::Example)),
            hidden: tally(Some(TestKind::Hidden)),
            message: None,
            replay: replay_command(lab, seed),
            partial: false,
            tests,
        }
    }

    /// A report for code that could not be graded at all (a syntax error, an empty
    /// file): every test is listed as an error so the totals stay honest.
    pub fn error(lab: &str, seed: u64, message: &str, tests: Vec<(String, TestKind)>) -> Report {
        Self::all_tests(
            lab,
            seed,
            message,
            tests,
            TestStatus::Error,
            RunStatus::Error,
        )
    }

    /// The report of a run of some tests only (`RunMode::Only`): `partial`, and no XP
    /// whatever passed.
    pub fn into_partial(mut self) -> Report {
        self.partial = true;
        self.xp = 0;
        self
    }

    /// A report for a run the host stopped at its time limit.
    pub fn timed_out(
        lab: &str,
        seed: u64,
        message: &str,
        tests: Vec<(String, TestKind)>,
    ) -> Report {
        Self::all_tests(
            lab,
            seed,
            message,
            tests,
            TestStatus::Timeout,
            RunStatus::Fail,
        )
    }

    fn all_tests(
        lab: &str,
        seed: u64,
        message: &str,
        tests: Vec<(String, TestKind)>,
        status: TestStatus,
        run_status: RunStatus,
    ) -> Report {
        let message = &cap_chars(message, FIELD_CAP_CHARS);
        let tests = tests
            .into_iter()
            .map(|(name, kind)| {
                let shown = (kind == TestKind::Example).then(|| message.to_string());
                TestReport::new(name, kind, status, shown)
            })
            .collect();
        let mut report = Report::new(lab, seed, 0, tests);
        report.status = run_status;
        report.message = Some(message.to_string());
        report
    }

    /// The report with its hidden tests shown as `statuses` says. `Aggregate`: one
    /// test in place of the first hidden one, named by how many passed, with their
    /// points and a status that is `pass` when all passed, their one status when
    /// they share it, else `fail`; every total stays as it was.
    pub fn with_hidden_statuses(mut self, statuses: HiddenStatuses) -> Report {
        if statuses == HiddenStatuses::Each {
            return self;
        }
        let Some(at) = self.tests.iter().position(|t| t.kind == TestKind::Hidden) else {
            return self;
        };
        let (hidden, mut tests): (Vec<TestReport>, Vec<TestReport>) =
            std::mem::take(&mut self.tests)
                .into_iter()
                .partition(|t| t.kind == TestKind::Hidden);
        let passed = hidden
            .iter()
            .filter(|t| t.status == TestStatus::Pass)
            .count();
        let first = hidden[0].status;
        let status = match () {
            _ if passed == hidden.len() => TestStatus::Pass,
            _ if hidden.iter().all(|t| t.status == first) => first,
            _ => TestStatus::Fail,
        };
        let mut one = TestReport::new(
            hidden_aggregate_name(passed, hidden.len()),
            TestKind::Hidden,
            status,
            None,
        );
        one.points = hidden.iter().map(|t| t.points).sum();
        one.max_points = hidden.iter().map(|t| t.max_points).sum();
        tests.insert(at, one);
        self.tests = tests;
        self
    }

    /// The report as `audience` may see it: each test's `TestReport::for_audience`.
    pub fn for_audience(mut self, audience: Audience) -> Report {
        self.tests = self
            .tests
            .into_iter()
            .map(|t| t.for_audience(audience))
            .collect();
        self
    }

    pub fn all_passed(&self) -> bool {
        self.status == RunStatus::Pass
    }

    /// The project's own JSON: what the page, the CLI and the embed API all read.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a report always serializes")
    }

    /// Exercism's test-runner `results.json`, version 3: each test with its task and
    /// its code from `sheets` (the lab's, `Lab::test_sheets`); a hidden test's code
    /// says only that it is hidden.
    pub fn to_exercism(&self, sheets: &[TestSheet]) -> String {
        let tests = self.each_test(|t| {
            let status = match t.status {
                TestStatus::Pass => "pass",
                TestStatus::Fail => "fail",
                TestStatus::Error | TestStatus::Timeout => "error",
            };
            let mut o = json!({ "name": t.name, "status": status });
            if t.status != TestStatus::Pass {
                o["message"] = json!(shown_message(t).unwrap_or_default());
            }
            if let Some(out) = &t.output {
                o["output"] = json!(exercism_output(&terminal_safe(out)));
            }
            let sheet = sheets.iter().find(|s| s.name == t.name);
            o["test_code"] = json!(match t.kind {
                TestKind::Hidden => HIDDEN_TEST_CODE,
                TestKind::Example => sheet.and_then(|s| s.code.as_deref()).unwrap_or(""),
            });
            if let Some(s) = sheet {
                o["task_id"] = json!(s.task_id);
            }
            o
        });
        let status = match self.status {
            RunStatus::Pass => "pass",
            RunStatus::Fail => "fail",
            RunStatus::Error => "error",
        };
        let mut root = json!({ "version": 3, "status": status, "tests": tests });
        if let Some(m) = &self.message {
            root["message"] = json!(terminal_safe(m));
        }
        serde_json::to_string_pretty(&root).expect("serializes")
    }

    /// Gradescope's autograder `results.json`. Hidden tests carry the given visibility
    /// (`hidden`, `after_due_date` or `after_published`); examples are always visible.
    pub fn to_gradescope(&self, hidden_visibility: &str) -> String {
        let tests = self.each_test(|t| {
            let mut o = json!({
                "name": t.name,
                "score": t.points,
                "max_score": t.max_points,
                "status": if t.status == TestStatus::Pass { "passed" } else { "failed" },
                "visibility": match t.kind {
                    TestKind::Example => "visible",
                    TestKind::Hidden => hidden_visibility,
                },
            });
            if let Some(output) = shown_message(t).filter(|m| !m.is_empty()) {
                o["output"] = json!(output);
            }
            o
        });
        // Every text as plain text (`GRADESCOPE_TEXT_FORMAT`): the summary carries
        // what learner code raised, and Gradescope's default for it, `simple_format`,
        // reads it as HTML, so a traceback's `<module>` vanished.
        let root = json!({
            "score": self.score,
            "max_score": self.max_score,
            "output": self.summary(),
            "output_format": GRADESCOPE_TEXT_FORMAT,
            "test_output_format": GRADESCOPE_TEXT_FORMAT,
            "test_name_format": GRADESCOPE_TEXT_FORMAT,
            "visibility": "visible",
            "stdout_visibility": "hidden",
            "tests": tests,
        });
        serde_json::to_string_pretty(&root).expect("serializes")
    }

    /// PrairieLearn's external-grader `results.json`: `score` from 0 to 1 and each
    /// test with its points. A report that graded nothing (a syntax error, no
    /// functions) is not gradable: PrairieLearn then counts no attempt, and shows why
    /// from `format_errors`. (Its results element escapes HTML in `message` and
    /// `output` but turns ANSI escape sequences into colours and styles: the plain
    /// text of `each_test` matters here most.)
    pub fn to_prairielearn(&self) -> String {
        let tests = self.each_test(|t| {
            let mut o = json!({
                "name": t.name,
                "points": t.points,
                "max_points": t.max_points,
            });
            if let Some(m) = shown_message(t).filter(|m| !m.is_empty()) {
                o["message"] = json!(m);
            }
            if let Some(out) = &t.output {
                o["output"] = json!(terminal_safe(out));
            }
            o
        });
        let score = match self.max_score {
            0 => 0.0,
            max => f64::from(self.score) / f64::from(max),
        };
        let gradable = self.status != RunStatus::Error;
        let mut root = json!({
            "gradable": gradable,
            "score": score,
            "message": self.summary(),
            "tests": tests,
        });
        if let (false, Some(m)) = (gradable, &self.message) {
            root["format_errors"] = json!([terminal_safe(m)]);
        }
        serde_json::to_string_pretty(&root).expect("serializes")
    }

    /// Each test as one object of a platform's JSON, made by `one`.
    ///
    /// Every platform's text that can carry what learner code printed or raised (a
    /// test's message and output, the report's message in the summary) is plain text
    /// as `terminal_safe` writes it: an escape sequence shown as `\x1b`, never obeyed
    /// by the platform's page, and HTML left as the characters it is (Gradescope is
    /// told so: `GRADESCOPE_TEXT_FORMAT`).
    ///
    /// A platform's file is the learner's, whatever report it is made from (a
    /// staff's one too): each hidden test shows its name, status and points only.
    fn each_test(&self, one: impl Fn(&TestReport) -> serde_json::Value) -> Vec<serde_json::Value> {
        self.tests
            .iter()
            .map(|t| one(&t.clone().for_audience(Audience::Learner)))
            .collect()
    }

    /// One paragraph for a platform's page: the tally, the seed and how to replay it,
    /// after the report's own message when it has one.
    fn summary(&self) -> String {
        let tally = format!(
            "{}: {} of {} tests passed (examples {}/{}, hidden {}/{}). Seed {}; replay with: {}",
            self.lab,
            self.passed,
            self.total,
            self.examples.passed,
            self.examples.total,
            self.hidden.passed,
            self.hidden.total,
            self.seed,
            self.replay
        );
        match &self.message {
            Some(m) => format!("{}\n\n{tally}", terminal_safe(m)),
            None => tally,
        }
    }

    /// A plain-text summary for terminals.
    pub fn to_text(&self) -> String {
        let mut out = format!(
            "{}: {} ({} of {} passed; examples {}/{}, hidden {}/{}; score {}/{}",
            self.lab,
            match self.status {
                RunStatus::Pass => "PASS",
                RunStatus::Fail => "FAIL",
                RunStatus::Error => "ERROR",
            },
            self.passed,
            self.total,
            self.examples.passed,
            self.examples.total,
            self.hidden.passed,
            self.hidden.total,
            self.score,
            self.max_score
        );
        if self.xp > 0 {
            out.push_str(&format!(", {} XP", self.xp));
        }
        out.push_str(")\n");
        // Learner text (a traceback, what the code printed) is always indented, so
        // it cannot pass for a report's own lines on a terminal.
        if let Some(m) = &self.message {
            for line in m.lines() {
                out.push_str(&format!("  {line}\n"));
            }
        }
        for t in &self.tests {
            let mark = match t.status {
                TestStatus::Pass => "pass",
                TestStatus::Fail => "FAIL",
                TestStatus::Error => "ERROR",
                TestStatus::Timeout => "TIMEOUT",
            };
            let kind = match t.kind {
                TestKind::Example => "example",
                TestKind::Hidden => "hidden",
            };
            out.push_str(&format!("  {mark:<7} {kind:<7} {}\n", t.name));
            if let Some(m) = &t.message {
                for line in m.lines() {
                    out.push_str(&format!("            {line}\n"));
                }
            }
        }
        if !self.all_passed() {
            out.push_str(&format!(
                "seed {}; replay with: {}\n",
                self.seed, self.replay
            ));
        }
        terminal_safe(&out)
    }
}

/// The characters a terminal must not get raw, as inclusive ranges: C0 but tab and
/// newline, DEL and C1 (they move the cursor, recolour, erase, set the title or the
/// clipboard), and the bidirectional and zero-width marks (they reorder or hide what
/// is read). The one list: the CLI's escapes (www/grader/output.mjs) are built from
/// it through the grader (`Grader::terminal_unsafe`).
pub const TERMINAL_UNSAFE: &[(char, char)] = &[
    ('\u{0}', '\u{8}'),
    ('\u{b}', '\u{1f}'),
    ('\u{7f}', '\u{9f}'),
    ('\u{61c}', '\u{61c}'),
    ('\u{200b}', '\u{200f}'),
    ('\u{2028}', '\u{202e}'),
    ('\u{2060}', '\u{2069}'),
    ('\u{feff}', '\u{feff}'),
];

/// Text fit for a terminal: every control character but newline and tab (C0, DEL,
/// C1) and the bidirectional and zero-width marks written as an escape (`\x1b`,
/// `\u202e`).
/// A text report shows what a learner's code raised or printed, and staff read it
/// on a terminal: raw, an escape sequence there could erase lines, print fake ones,
/// write the clipboard or reorder what is read.
pub fn terminal_safe(s: &str) -> String {
    let unsafe_char = |c: char| {
        TERMINAL_UNSAFE
            .iter()
            .any(|&(lo, hi)| (lo..=hi).contains(&c))
    };
    if !s.chars().any(unsafe_char) {
        return s.to_string();
    }
    let mut out = String::with_capacity(s.len() + 16);
    for c in s.chars() {
        match c {
            c if !unsafe_char(c) => out.push(c),
            c if (c as u32) < 0x100 => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push_str(&format!("\\u{:04x}", c as u32)),
        }
    }
    out
}

/// What a platform shows of a test: its message as plain text (`terminal_safe`), or
/// for a hidden test that did not pass, that it is hidden (a learner's hidden test
/// carries no message).
fn shown_message(t: &TestReport) -> Option<String> {
    match (&t.message, t.kind, t.status) {
        (Some(m), _, _) => Some(terminal_safe(m)),
        (None, TestKind::Hidden, s) if s != TestStatus::Pass => {
            Some("This is a hidden test: its details are not shown.".into())
        }
        _ => None,
    }
}

/// The most characters of a test's output Exercism takes, a note of a cut included.
pub const EXERCISM_OUTPUT_CAP: usize = 500;

/// A test's output within Exercism's cap: its start, and a note when it was cut.
fn exercism_output(out: &str) -> String {
    // The words Exercism's test-runner interface gives for it.
    const NOTE: &str = "\nOutput was truncated. Please limit to 500 chars";
    if out.chars().nth(EXERCISM_OUTPUT_CAP).is_none() {
        return out.to_string();
    }
    let keep = EXERCISM_OUTPUT_CAP - NOTE.chars().count();
    let end = out.char_indices().nth(keep).map_or(out.len(), |(i, _)| i);
    format!("{}{NOTE}", &out[..end])
}

/// The first `n` characters of `s`, with a note when something was cut.
pub fn cap_chars(s: &str, n: usize) -> String {
    match s.char_indices().nth(n) {
        None => s.to_string(),
        Some((i, _)) => format!("{}\n[cut at {n} characters]", &s[..i]),
    }
}
