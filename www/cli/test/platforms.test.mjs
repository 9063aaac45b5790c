// The platform packages of ./lab package: each one built, laid out in a temporary
// root as its platform's documentation describes, its entry point run as the
// platform runs it on a correct file, a wrong one and files that cannot be graded
// (a syntax error, no .py, two .py), and every results file checked against the
// JSON Schema written from that platform's documentation
// (packaging/<platform>/results.schema.json), then for what this project promises
// beyond the form: scores, visibility, tasks, test code, hidden tests' secrecy.
// Run: cd www && node --test cli/test/platforms.test.mjs   (needs www/pkg: ./lab build)
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import Ajv from 'ajv';
import { loadGrader } from '../../src/node_host.mjs';
import { exercismInstructions, writePackage } from '../package.mjs';
import { noProcessLeftAfterTests } from '../fixtures/leftovers.mjs';

noProcessLeftAfterTests();

const ROOT = fileURLToPath(new URL('../../../', import.meta.url));
const TMP = fs.mkdtempSync(path.join(os.tmpdir(), 'delivery-lab-platforms-test-'));
const LIMIT = { timeout: 120_000 };
const LAB = 'deliver-once';
const HIDDEN_NOTE = 'This is a hidden test: its details are not shown.';
const HIDDEN_CODE = '# A hidden test: its code is not shown.';

let lab, REFERENCE, WRONG;
const SYNTAX_ERROR = 'def deliver_once(task, provider, kv, policy)\n    return "sent"\n';

before(async () => {
  const { Grader } = await loadGrader();
  lab = JSON.parse(new Grader().lab(LAB));
  REFERENCE = lab.reference_py;
  // The claim without its TTL (two examples and several hidden tests fail), and a
  // print in every call: what a hidden test printed must reach no platform.
  WRONG = REFERENCE.replace('ttl=policy.claim_ttl_s, nx=True', 'nx=True')
    .replace('    key = "sent:" + task.key\n', '    key = "sent:" + task.key\n    print("claiming", key)\n');
  assert.notEqual(WRONG, REFERENCE);
});
after(() => fs.rmSync(TMP, { recursive: true, force: true }));

// Strict: a schema keyword ajv does not know is a mistake; a `required` in a branch
// (if/then/else, anyOf) names properties defined beside it, which is plain JSON Schema.
const ajv = new Ajv({ allErrors: true, strict: true, strictRequired: false, allowUnionTypes: true });
/** The schema's validator for `platform`'s results. */
function schemaOf(platform) {
  const schema = JSON.parse(fs.readFileSync(path.join(ROOT, 'packaging', platform, 'results.schema.json'), 'utf8'));
  assert.match(schema.$comment, /https:\/\/\S+/, 'the schema names the documentation it follows');
  return ajv.compile(schema);
}

/** Reads a results file and checks it against `validate`; returns it parsed. */
function results(file, validate) {
  const text = fs.readFileSync(file, 'utf8');
  const json = JSON.parse(text);
  assert.ok(validate(json), `${file} against its platform's schema: ${ajv.errorsText(validate.errors)}\n${text.slice(0, 2000)}`);
  return json;
}

/** The schema is no formality: `json` broken by `breakIt` no longer passes it. */
function refused(validate, json, breakIt) {
  const broken = structuredClone(json);
  breakIt(broken);
  assert.ok(!validate(broken), `the schema accepts ${JSON.stringify(broken).slice(0, 300)}`);
}

/** Runs `cmd` (resolves to { code, stdout, stderr }). */
function run(cmd, args, opts = {}) {
  return new Promise((resolve) => {
    const child = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'], ...opts });
    let stdout = '', stderr = '';
    child.stdout.on('data', (d) => { stdout += d; });
    child.stderr.on('data', (d) => { stderr += d; });
    child.on('exit', (code) => resolve({ code, stdout, stderr }));
  });
}

/** A fresh folder holding `files` ({ name: text }). */
function folder(dir, files = {}) {
  fs.rmSync(dir, { recursive: true, force: true });
  fs.mkdirSync(dir, { recursive: true });
  for (const [name, text] of Object.entries(files)) {
    fs.mkdirSync(path.dirname(path.join(dir, name)), { recursive: true });
    fs.writeFileSync(path.join(dir, name), text);
  }
  return dir;
}

const copy = (from, to) => fs.cpSync(from, to, { recursive: true });
const isExec = (file) => (fs.statSync(file).mode & 0o111) !== 0;
const hidden = (name) => lab.tests.find((t) => t.name === name).kind === 'hidden';
/** The submissions each platform grades, by what they are. */
const SUBMISSIONS = () => ({
  correct: { 'solution.py': REFERENCE },
  wrong: { 'solution.py': WRONG },
  syntax: { 'solution.py': SYNTAX_ERROR },
  none: { 'notes.txt': 'no Python here' },
  two: { 'a.py': REFERENCE, 'b.py': REFERENCE },
});

test('gradescope: autograder.zip runs as Gradescope runs it and writes results.json in its format', LIMIT, async () => {
  const validate = schemaOf('gradescope');
  const out = path.join(TMP, 'gradescope');
  await writePackage({ platform: 'gradescope', lab: LAB, out, untilPublished: false });
  const published = path.join(TMP, 'gradescope-published');
  await writePackage({ platform: 'gradescope', lab: LAB, out: published, untilPublished: true });

  // Gradescope's layout (Autograder Specifications, "File hierarchy"): the zip
  // unpacked in /autograder/source, run_autograder copied to /autograder, the
  // submission in /autograder/submission, results in /autograder/results.
  const layout = (zip, name) => {
    const ag = path.join(TMP, `root-${name}`, 'autograder');
    fs.mkdirSync(path.join(ag, 'source'), { recursive: true });
    execFileSync('unzip', ['-q', zip, '-d', path.join(ag, 'source')]);
    for (const f of ['setup.sh', 'run_autograder']) assert.ok(isExec(path.join(ag, 'source', f)), `${f} at the zip's root, executable`);
    fs.copyFileSync(path.join(ag, 'source', 'run_autograder'), path.join(ag, 'run_autograder'));
    fs.chmodSync(path.join(ag, 'run_autograder'), 0o755);
    return ag;
  };
  const ag = layout(path.join(out, 'autograder.zip'), 'default');
  const agPublished = layout(path.join(published, 'autograder.zip'), 'published');
  assert.match(fs.readFileSync(path.join(ag, 'source', 'README.md'), 'utf8'), /--no-sandbox/);
  assert.match(fs.readFileSync(path.join(ag, 'source', 'setup.sh'), 'utf8'), /apt-get install[^\n]* nodejs/);

  const grade = async (root, files) => {
    folder(path.join(root, 'submission'), files);
    folder(path.join(root, 'results'));
    const r = await run(path.join(root, 'run_autograder'), [], { cwd: root });
    assert.equal(r.code, 0, r.stderr);
    return results(path.join(root, 'results', 'results.json'), validate);
  };
  const s = SUBMISSIONS();

  const ok = await grade(ag, s.correct);
  assert.equal(ok.score, lab.tests.length);
  assert.ok(ok.tests.every((t) => t.status === 'passed' && t.score === t.max_score));
  for (const t of ok.tests) assert.equal(t.visibility, hidden(t.name) ? 'after_due_date' : 'visible', t.name);
  refused(validate, ok, (r) => { r.tests[0].status = 'ok'; });
  refused(validate, ok, (r) => { r.tests[0].visiblity = 'visible'; });

  const wrong = await grade(agPublished, s.wrong);
  assert.ok(wrong.score > 0 && wrong.score < lab.tests.length, String(wrong.score));
  for (const t of wrong.tests) {
    assert.equal(t.visibility, hidden(t.name) ? 'after_published' : 'visible', t.name);
    if (hidden(t.name)) assert.ok(t.output === undefined || t.output === HIDDEN_NOTE, `${t.name}: ${t.output}`);
  }
  assert.ok(wrong.tests.some((t) => !hidden(t.name) && t.status === 'failed' && /Rule broken \(claim\)/.test(t.output)));

  for (const [kind, pattern] of [['syntax', /could not be compiled|SyntaxError/], ['none', /No \.py file was submitted/], ['two', /2 \.py files were submitted \(a\.py, b\.py\)/]]) {
    const e = await grade(ag, s[kind]);
    assert.equal(e.score, 0, kind);
    assert.match(e.output, pattern, kind);
    assert.ok(e.tests.every((t) => t.status === 'failed'), kind);
  }
});

test('prairielearn: the question grades externally as PrairieLearn runs it and writes results.json in its format', LIMIT, async () => {
  const validate = schemaOf('prairielearn');
  const out = path.join(TMP, 'prairielearn');
  await writePackage({ platform: 'prairielearn', lab: LAB, out, image: 'node:20-bookworm-slim' });
  const q = path.join(out, 'questions', LAB);
  const info = JSON.parse(fs.readFileSync(path.join(q, 'info.json'), 'utf8'));
  assert.match(info.uuid, /^[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
  assert.equal(info.gradingMethod, 'External');
  const ext = info.externalGradingOptions;
  assert.deepEqual([ext.enabled, ext.entrypoint, ext.serverFilesCourse], [true, '/grade/tests/run.sh', ['delivery-lab/']]);
  assert.ok(ext.timeout > 30 && ext.timeout <= 600, String(ext.timeout));
  const html = fs.readFileSync(path.join(q, 'question.html'), 'utf8');
  assert.match(html, /<pl-file-editor file-name="solution\.py"[^>]*source-file-name="starter\.py"/);
  assert.match(html, /<pl-external-grader-results>/);
  assert.match(html, /<h2[^>]*>Why this matters<\/h2>/, 'the lab text, as HTML');
  assert.ok(!html.includes('{{'), 'nothing a Mustache template would read');
  assert.equal(fs.readFileSync(path.join(q, 'starter.py'), 'utf8'), lab.starter_py);
  assert.match(fs.readFileSync(path.join(out, 'README.md'), 'utf8'), /--no-sandbox/);

  // PrairieLearn's layout (External Grading, "The Grading Process"): the question's
  // tests/ in /grade/tests, serverFilesCourse's folders in /grade/serverFilesCourse,
  // the learner's files in /grade/student, data in /grade/data/data.json; the
  // entry point creates /grade/results itself.
  const grade = async (files) => {
    const g = path.join(TMP, 'root-pl', 'grade');
    fs.rmSync(g, { recursive: true, force: true });
    copy(path.join(q, 'tests'), path.join(g, 'tests'));
    copy(path.join(out, 'serverFilesCourse', 'delivery-lab'), path.join(g, 'serverFilesCourse', 'delivery-lab'));
    folder(path.join(g, 'student'), files);
    folder(path.join(g, 'data'), { 'data.json': JSON.stringify({ params: {}, submitted_answers: {} }) });
    const r = await run(path.join(g, 'tests', 'run.sh'), []);
    assert.equal(r.code, 0, r.stderr);
    const file = path.join(g, 'results', 'results.json');
    assert.ok(fs.statSync(file).size < 1024 * 1024, 'under PrairieLearn\'s 1 MB');
    return results(file, validate);
  };
  const s = SUBMISSIONS();

  const ok = await grade(s.correct);
  assert.deepEqual([ok.gradable, ok.score], [true, 1]);
  assert.equal(ok.tests.length, lab.tests.length);
  refused(validate, ok, (r) => { r.score = 23; });
  refused(validate, ok, (r) => { delete r.score; });

  const wrong = await grade(s.wrong);
  assert.equal(wrong.gradable, true);
  assert.ok(wrong.score > 0 && wrong.score < 1, String(wrong.score));
  const sum = wrong.tests.reduce((n, t) => n + t.points, 0);
  assert.ok(Math.abs(wrong.score - sum / wrong.tests.reduce((n, t) => n + t.max_points, 0)) < 1e-9);
  for (const t of wrong.tests) {
    if (!hidden(t.name)) continue;
    assert.deepEqual(Object.keys(t).filter((k) => !['name', 'points', 'max_points', 'message'].includes(k)), [], `${t.name}: name and points only`);
    assert.ok(t.message === undefined || t.message === HIDDEN_NOTE, t.message);
  }
  assert.ok(wrong.tests.some((t) => !hidden(t.name) && /claiming sent:/.test(t.output ?? '')), 'an example shows what the code printed');

  for (const [kind, pattern] of [['syntax', /could not be compiled|SyntaxError/], ['none', /No \.py file was submitted/], ['two', /2 \.py files were submitted/]]) {
    const e = await grade(s[kind]);
    assert.equal(e.gradable, false, kind);
    assert.match(e.format_errors.join('\n'), pattern, kind);
  }
});

test('exercism: bin/run.sh follows the test runner interface and writes results.json version 3', LIMIT, async () => {
  const validate = schemaOf('exercism');
  const out = path.join(TMP, 'exercism');
  await writePackage({ platform: 'exercism', lab: LAB, out });
  const runner = path.join(out, 'bin', 'run.sh');
  assert.ok(isExec(runner));
  assert.match(fs.readFileSync(path.join(out, 'README.md'), 'utf8'), /--no-sandbox/);
  const exercise = path.join(out, 'exercises', LAB);
  const instructions = fs.readFileSync(path.join(exercise, '.docs', 'instructions.md'), 'utf8');
  assert.equal(instructions, exercismInstructions(lab));
  // The instructions number the lab's tasks as task_id does.
  const numbered = [...instructions.matchAll(/^## (\d+)\. (.+)$/gm)].map((m) => [Number(m[1]), m[2]]);
  assert.deepEqual(numbered, lab.tasks.map((heading, i) => [i + 1, heading]));

  // Exercism's interface: bin/run.sh SLUG INPUT_DIR OUTPUT_DIR, directories with a
  // trailing slash; the input holds the solution and the exercise's other files.
  const solution = 'deliver_once.py';
  const grade = async (files, { slug = LAB } = {}) => {
    const input = path.join(TMP, 'root-exercism', 'input');
    fs.rmSync(input, { recursive: true, force: true });
    copy(exercise, input);
    fs.rmSync(path.join(input, solution));
    for (const [name, text] of Object.entries(files)) fs.writeFileSync(path.join(input, name), text);
    const output = folder(path.join(TMP, 'root-exercism', 'output'));
    const r = await run(runner, [slug, `${input}/`, `${output}/`]);
    return { r, file: path.join(output, 'results.json') };
  };
  const graded = async (files) => {
    const { r, file } = await grade(files);
    assert.equal(r.code, 0, r.stderr);
    return results(file, validate);
  };
  const checkTests = (res) => {
    assert.equal(res.tests.length, lab.tests.length);
    for (const t of res.tests) {
      assert.ok(Number.isInteger(t.task_id) && t.task_id >= 1 && t.task_id <= lab.tasks.length, `${t.name}: task ${t.task_id}`);
      if (hidden(t.name)) assert.equal(t.test_code, HIDDEN_CODE, t.name);
      else assert.match(t.test_code, /^assert (deliver_once|next_step)\(.*\) == /m, t.name);
    }
  };

  // A test file of the exercise's beside the solution: .meta/config.json names the solution.
  const ok = await graded({ [solution]: REFERENCE, 'deliver_once_test.py': 'import deliver_once\n' });
  assert.equal(ok.version, 3);
  assert.equal(ok.status, 'pass');
  checkTests(ok);
  const fallback = ok.tests.find((t) => t.name === 'a permanent failure goes to the fallback channel');
  assert.equal(fallback.task_id, lab.tasks.indexOf(lab.tasks.find((h) => h.startsWith('`next_step('))) + 1);
  assert.match(fallback.test_code, /\nassert next_step\(.*\) == \('fallback', 'sms'\)$/);
  refused(validate, ok, (r) => { delete r.tests[0].test_code; });
  refused(validate, ok, (r) => { r.version = 2; });

  const wrong = await graded({ [solution]: WRONG });
  assert.equal(wrong.status, 'fail');
  checkTests(wrong);
  for (const t of wrong.tests.filter((x) => hidden(x.name))) {
    assert.equal(t.output, undefined, `${t.name}: a hidden test's output`);
    if (t.status !== 'pass') assert.equal(t.message, HIDDEN_NOTE);
  }
  assert.ok(wrong.tests.some((t) => !hidden(t.name) && t.status === 'fail' && /Rule broken \(claim\)/.test(t.message)));

  const syntax = await graded({ [solution]: SYNTAX_ERROR });
  assert.equal(syntax.status, 'error');
  assert.match(syntax.message, /could not be compiled|SyntaxError/);
  assert.ok(Buffer.byteLength(syntax.message) < 65535);
  checkTests(syntax);
  assert.ok(syntax.tests.every((t) => t.status === 'error'));

  const none = await graded({});
  assert.deepEqual([none.status, /No \.py file was submitted/.test(none.message)], ['error', true]);
  fs.rmSync(path.join(exercise, '.meta', 'config.json'));
  const two = await graded({ 'a.py': REFERENCE, 'b.py': REFERENCE });
  assert.deepEqual([two.status, /2 \.py files were submitted/.test(two.message)], ['error', true]);

  // A slug that is no lab: a usage error (exit 2), no results to show a learner.
  const { r, file } = await grade({ [solution]: REFERENCE }, { slug: 'two-fer' });
  assert.equal(r.code, 2);
  assert.match(r.stderr, /Unknown lab `two-fer`/);
  assert.ok(!fs.existsSync(file));
});

test('./lab package refuses to replace a folder it did not write', LIMIT, async () => {
  const mine = folder(path.join(TMP, 'not-a-package'), { 'keep.txt': 'mine' });
  await assert.rejects(writePackage({ platform: 'exercism', lab: LAB, out: mine }), /holds files this command did not write/);
  assert.equal(fs.readFileSync(path.join(mine, 'keep.txt'), 'utf8'), 'mine');
});
