// The report formats, in one place: what `./lab grade --format` takes (and its help
// text, commands.mjs), what the grading pool asks the engine for (pool.mjs), what a
// platform's entry writes (platform.mjs), and which need --out. No imports: the
// help reads it without anything built.
//
// `engine`: the engine renders it (src/wasm.rs `format`, src/report.rs); the others
// the CLI makes from the engine's json line (gradebook.mjs). `platform`: a platform's
// results file, one per submission under --out (learners' reports: no hidden seed).
// `stdout`: where the CLI writes it when it is not a platform's file.
// The engine's list is held to this one by test/formats.test.mjs.

/** @type {ReadonlyArray<{name: string, engine: boolean, platform: boolean, help: string}>} */
export const REPORT_FORMATS = Object.freeze([
  { name: 'json', engine: true, platform: false, help: 'one JSON line per file (the default in a pipe)' },
  { name: 'text', engine: true, platform: false, help: 'each file\'s report, then a roll-up table: file, score, failed tests (the default on a terminal)' },
  { name: 'csv', engine: false, platform: false, help: 'a gradebook: a header, then a row per file: file, lab, score, max, status, failed_tests' },
  { name: 'junit', engine: false, platform: false, help: 'JUnit XML for CodeGrade, GitLab and Jenkins: a testsuite per file, a testcase per test' },
  { name: 'exercism', engine: true, platform: true, help: 'Exercism\'s results.json (version 3), one per file under --out' },
  { name: 'gradescope', engine: true, platform: true, help: 'Gradescope\'s results.json, hidden tests shown after the due date' },
  { name: 'gradescope-published', engine: true, platform: true, help: 'the same, hidden tests shown once grades are published' },
  { name: 'gradescope-hidden', engine: true, platform: true, help: 'the same, hidden tests never shown' },
  { name: 'prairielearn', engine: true, platform: true, help: 'PrairieLearn\'s results.json, one per file under --out' },
].map(Object.freeze));

/** Every format's name, in the order above. */
export const FORMAT_NAMES = Object.freeze(REPORT_FORMATS.map((f) => f.name));
/** The formats the engine renders (pool.mjs asks for these only). */
export const ENGINE_FORMATS = Object.freeze(REPORT_FORMATS.filter((f) => f.engine).map((f) => f.name));
/** The platforms' results files: one per submission, under --out. */
export const PLATFORM_FORMATS = Object.freeze(REPORT_FORMATS.filter((f) => f.platform).map((f) => f.name));
/** The staff's formats the CLI writes to stdout, one document for the whole run. */
export const STDOUT_FORMATS = Object.freeze(REPORT_FORMATS.filter((f) => !f.platform).map((f) => f.name));
