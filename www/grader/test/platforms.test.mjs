// The platform packages of ./lab package: each one built, laid out in a temporary
// root as its platform's documentation describes, its entry point run as the
// platform runs it on a correct file, a wrong one and files that cannot be graded
// (a syntax error, no .py, two .py), and every results file checked against the
// JSON Schema written from that platform's documentation
// (packaging/<platform>/results.schema.json), then for what this project promises
// beyond the form: scores, visibility, tasks, test code, hidden tests' secrecy.
// Then the walls (issue 28): a hostile submission through each platform's entry, as
// the platform runs it (root), behind bubblewrap where it works and, with bubblewrap
// off the PATH, behind a uid of its own alone: it runs as no uid 0, reads no hidden
// data, writes no results and no file in its working directory (trace_events, which
// Node's permission model lets through); the same attempts from a process behind
// the uid wall alone, without Node's permission model; and an entry not run as
// root without bubblewrap refuses.
// Run: cd www && node --test grader/test/platforms.test.mjs   (needs www/pkg: ./lab build;
// the wall tests need root, as CI runs them)
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import Ajv from 'ajv';
import { loadGrader } from '../../host/node_host.mjs';
import { exercismInstructions, writePackage } from '../package.mjs';
import { jailCommand, jailProblem, sandboxUid, PERMISSION_FLAG, SANDBOX_UID_BASE } from '../jail.mjs';
import { noProcessLeftAfterTests } from '../fixtures/leftovers.mjs';

noProcessLeftAfterTests();

const ROOT = fileURLToPath(new URL('../../../', import.meta.url));
const TMP = fs.mkdtempSync(path.join(os.tmpdir(), 'delivery-lab-platforms-test-'));
// Open to every user, as a platform's folders are (/autograder, /grade): what keeps
// a sandbox's uid from the grader is then the entry's doing, not this folder's mode.
fs.chmodSync(TMP, 0o755);
const LIMIT = { timeout: 120_000 };
/** The platform tests that also grade hostile submissions (a grading pool's start each). */
const LONG = { timeout: 300_000 };
const IS_ROOT = process.getuid() === 0;
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
after(() => {
  fs.rmSync(TMP, { recursive: true, force: true });
  if (noBwrapPath) fs.rmSync(noBwrapPath, { recursive: true, force: true });
});

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

/** Runs `cmd` (resolves to { code, stdout, stderr }); opts as spawn's. */
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

// --- the walls ----------------------------------------------------------------

/** A PATH of every program on this one but bubblewrap: the entry's probe then finds
 *  no sandbox, as in a container without it, and falls back to the uid wall. */
let noBwrapPath = null;
function pathWithoutBwrap() {
  if (noBwrapPath) return noBwrapPath;
  // A folder open to every user (the refusal test runs as nobody), removed after the file.
  const bin = fs.mkdtempSync(path.join(os.tmpdir(), 'delivery-lab-bin-without-bwrap-'));
  fs.chmodSync(bin, 0o755);
  for (const dir of process.env.PATH.split(':').filter(Boolean)) {
    let names;
    try { names = fs.readdirSync(dir); } catch { continue; }
    for (const n of names) {
      if (n === 'bwrap' || fs.existsSync(path.join(bin, n))) continue;
      try { fs.symlinkSync(path.join(dir, n), path.join(bin, n)); } catch { /* a duplicate */ }
    }
  }
  noBwrapPath = bin;
  return bin;
}
const WALL = {
  bwrap: /^platform: wall: bubblewrap .*each sandbox as a uid of its own/m,
  uid: /^platform: wall: each sandbox as a uid of its own and rlimits, without bubblewrap \(bwrap not found on PATH/m,
};

/**
 * A hostile submission: it reaches JavaScript (gc finds the finder holding
 * globalThis, as test/hostile/js_forge_timeout.py does) and, at load, reads the
 * hidden data (the grader's WASM, which holds the hidden tests), writes the results
 * file and a file beside it, writes into its working directory, and raises what it
 * found: "PROBE {json} END". (Trace events, the write Node's permission model lets
 * through, are TRACE below: where the file cannot be opened, Node 20 hangs in
 * enable(), so they get a submission of their own.)
 */
/** Python that reaches JavaScript from the learner's interpreter (Pyodide is no
 *  security boundary: its finder holds globalThis), as `js`. */
const REACH_JS = `import gc
def _js():
    for o in gc.get_objects():
        try:
            if type(o).__name__ == "JsFinder":
                return o.jsproxies["js"]
        except Exception:
            pass
js = _js()
`;

function hostile({ hidden, results }) {
  return `${REACH_JS}import json
p = js.process
fs = p.getBuiltinModule("fs")
found = {"uid": p.getuid(), "euid": p.geteuid(), "gid": p.getgid(), "cwd": p.cwd()}
def attempt(name, f):
    try:
        f()
        found[name] = "done"
    except Exception as e:
        found[name] = str(e)[:200]
attempt("read_hidden", lambda: fs.readFileSync(${JSON.stringify(hidden)}))
attempt("write_results", lambda: fs.writeFileSync(${JSON.stringify(results)}, "{}"))
attempt("write_results_dir", lambda: fs.writeFileSync(${JSON.stringify(path.join(path.dirname(results), 'planted.json'))}, "{}"))
attempt("write_cwd", lambda: fs.writeFileSync("planted.txt", "x"))
raise RuntimeError("PROBE " + json.dumps(found) + " END")
`;
}

/**
 * The trace_events attack of issue 28: trace events started from the learner's
 * process, which write node_trace.1.log into its working directory whatever Node's
 * permission model says; then work enough for Node to write it, and a load error.
 * Where the file cannot be opened, Node 20 hangs in enable(): the run ends at its
 * time limit.
 */
const TRACE = `${REACH_JS}t = js.process.getBuiltinModule("trace_events").createTracing(js.JSON.parse('{"categories": ["node", "node.perf", "v8"]}'))
t.enable()
n = 0
for i in range(2000000):
    n += i
raise RuntimeError("traced")
`;

/** What the hostile submission found, from the text of its results' message. */
function probeOf(text) {
  const m = /PROBE (\{.*?\}) END/s.exec(text);
  assert.ok(m, `no probe in: ${String(text).slice(0, 3000)}`);
  return JSON.parse(m[1]);
}

/** The wall the entries choose with this machine's PATH. */
const DEFAULT_WALL = () => (jailProblem() ? 'uid' : 'bwrap');
/** The environment of an entry run behind `wall` ('bwrap': this machine's PATH, if bubblewrap works here). */
const envFor = (wall) => (wall === 'uid' ? { ...process.env, PATH: pathWithoutBwrap() } : process.env);

/** Files an attack could have left in `dir` since `since` (ms). */
const planted = (dir, since) => fs.readdirSync(dir)
  .filter((n) => /^(node_trace\..*|planted.*)$/.test(n))
  .filter((n) => { try { return fs.lstatSync(path.join(dir, n)).mtimeMs >= since - 1000; } catch { return false; } });

/**
 * The walls held for one hostile run: the submission ran as a uid of its own, read
 * no hidden data, wrote nothing; the grader's files and results are root's.
 */
function assertWalled(found, { since, grader, resultsFile, cwds, stdout, wall }) {
  assert.match(stdout, WALL[wall], 'the log says which wall was used');
  assert.ok(found.uid >= SANDBOX_UID_BASE && found.euid === found.uid && found.gid !== 0, `not root, a uid of its own: ${JSON.stringify(found)}`);
  for (const k of ['read_hidden', 'write_results', 'write_results_dir', 'write_cwd']) {
    assert.notEqual(found[k], 'done', `${k}: ${JSON.stringify(found)}`);
    assert.ok(typeof found[k] === 'string' && found[k].length > 0, k);
  }
  assert.equal(found.cwd, '/', 'a sandbox works in /');
  for (const dir of new Set(['/', ...cwds])) assert.deepEqual(planted(dir, since), [], `no file left in ${dir}`);
  // The results: the grader's file, alone in a folder of root's.
  const resultsDir = path.dirname(resultsFile);
  assert.deepEqual(fs.readdirSync(resultsDir), [path.basename(resultsFile)]);
  for (const [f, mask] of [[resultsDir, 0o022], [resultsFile, 0o022], [path.join(grader, 'pkg', 'delivery_lab_bg.wasm'), 0o077], [path.join(grader, 'grader', 'pool.mjs'), 0o077]]) {
    const st = fs.statSync(f);
    assert.deepEqual([st.uid, (st.mode & mask).toString(8)], [0, '0'], `${f}: root's, mode ${(st.mode & 0o7777).toString(8)}`);
  }
  // What a sandbox reads stays readable.
  for (const f of ['grader/sandbox.mjs', 'host/solution_runner.py']) assert.ok(fs.statSync(path.join(grader, f)).mode & 0o004, f);
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

test('gradescope: autograder.zip runs as Gradescope runs it and writes results.json in its format; a hostile submission is walled', LONG, async (tc) => {
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
  assert.match(fs.readFileSync(path.join(ag, 'source', 'README.md'), 'utf8'), /a\s+uid\s+of\s+its\s+own/);
  assert.match(fs.readFileSync(path.join(ag, 'source', 'setup.sh'), 'utf8'), /apt-get install[^\n]* nodejs[^\n]* bubblewrap/);
  assert.doesNotMatch(fs.readFileSync(path.join(ag, 'run_autograder'), 'utf8'), /--no-sandbox/);

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
    assert.ok(e.tests.every((x) => x.status === 'failed'), kind);
  }

  // The walls, as Gradescope runs the entry (root), behind the wall this machine
  // allows, then behind the uid alone (bubblewrap off the PATH).
  if (!IS_ROOT) return tc.diagnostic('not root: the walls are tested as root (as CI and the platforms run the entry)');
  const grader = path.join(ag, 'source', 'grader');
  const resultsFile = path.join(ag, 'results', 'results.json');
  const metadata = path.join(ag, 'submission_metadata.json');
  for (const wall of new Set([DEFAULT_WALL(), 'uid'])) {
    folder(path.join(ag, 'submission'), { 'solution.py': hostile({ hidden: path.join(grader, 'pkg', 'delivery_lab_bg.wasm'), results: resultsFile }) });
    folder(path.join(ag, 'results'));
    fs.writeFileSync(metadata, JSON.stringify({ previous_submissions: [] }), { mode: 0o644 });
    const since = Date.now();
    const r = await run(path.join(ag, 'run_autograder'), [], { cwd: ag, env: envFor(wall) });
    assert.equal(r.code, 0, r.stderr);
    const res = results(resultsFile, validate);
    assert.equal(res.score, 0, wall);
    assertWalled(probeOf(res.output), { since, grader, resultsFile, cwds: [ag], stdout: r.stdout, wall });
    const st = fs.statSync(metadata);
    assert.deepEqual([st.uid, st.mode & 0o077], [0, 0], 'submission_metadata.json is root\'s alone');
  }
});

test('prairielearn: the question grades externally as PrairieLearn runs it and writes results.json in its format; a hostile submission is walled', LONG, async (tc) => {
  const validate = schemaOf('prairielearn');
  const out = path.join(TMP, 'prairielearn');
  await writePackage({ platform: 'prairielearn', lab: LAB, out, image: 'node:24-bookworm-slim' });
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
  assert.match(fs.readFileSync(path.join(out, 'README.md'), 'utf8'), /a\s+uid\s+of\s+its\s+own/);
  assert.doesNotMatch(fs.readFileSync(path.join(q, 'tests', 'run.sh'), 'utf8'), /--no-sandbox/);

  // PrairieLearn's layout (External Grading, "The Grading Process"): the question's
  // tests/ in /grade/tests, serverFilesCourse's folders in /grade/serverFilesCourse,
  // the learner's files in /grade/student, data in /grade/data/data.json; the
  // entry point creates /grade/results itself.
  const g = path.join(TMP, 'root-pl', 'grade');
  const grade = async (files, { wall = null, raw = false } = {}) => {
    fs.rmSync(g, { recursive: true, force: true });
    copy(path.join(q, 'tests'), path.join(g, 'tests'));
    copy(path.join(out, 'serverFilesCourse', 'delivery-lab'), path.join(g, 'serverFilesCourse', 'delivery-lab'));
    folder(path.join(g, 'student'), files);
    folder(path.join(g, 'data'), { 'data.json': JSON.stringify({ params: {}, submitted_answers: {} }) });
    const r = await run(path.join(g, 'tests', 'run.sh'), [], wall ? { env: envFor(wall) } : {});
    assert.equal(r.code, 0, r.stderr);
    const file = path.join(g, 'results', 'results.json');
    assert.ok(fs.statSync(file).size < 1024 * 1024, 'under PrairieLearn\'s 1 MB');
    return raw ? { r, res: results(file, validate) } : results(file, validate);
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

  // The walls, as PrairieLearn runs the entry (root), behind the uid alone
  // (bubblewrap off the PATH, as in its default image).
  if (!IS_ROOT) return tc.diagnostic('not root: the walls are tested as root (as CI and the platforms run the entry)');
  const resultsFile = path.join(g, 'results', 'results.json');
  const grader = path.join(g, 'serverFilesCourse', 'delivery-lab');
  const since = Date.now();
  const { r, res } = await grade({ 'solution.py': hostile({ hidden: path.join(grader, 'pkg', 'delivery_lab_bg.wasm'), results: resultsFile }) }, { wall: 'uid', raw: true });
  assert.equal(res.gradable, false);
  assertWalled(probeOf(res.format_errors.join('\n')), { since, grader, resultsFile, cwds: [process.cwd()], stdout: r.stdout, wall: 'uid' });
  const data = fs.statSync(path.join(g, 'data', 'data.json'));
  assert.deepEqual([data.uid, data.mode & 0o077], [0, 0], 'data/ is root\'s alone');
});

test('exercism: bin/run.sh follows the test runner interface and writes results.json version 3; a hostile submission is walled', LONG, async (tc) => {
  const validate = schemaOf('exercism');
  const out = path.join(TMP, 'exercism');
  await writePackage({ platform: 'exercism', lab: LAB, out });
  const runner = path.join(out, 'bin', 'run.sh');
  assert.ok(isExec(runner));
  assert.match(fs.readFileSync(path.join(out, 'README.md'), 'utf8'), /a\s+uid\s+of\s+its\s+own/);
  assert.doesNotMatch(fs.readFileSync(runner, 'utf8'), /--no-sandbox/);
  assert.match(fs.readFileSync(path.join(out, 'Dockerfile'), 'utf8'), /apt-get install[^\n]* bubblewrap/);
  const exercise = path.join(out, 'exercises', LAB);
  const instructions = fs.readFileSync(path.join(exercise, '.docs', 'instructions.md'), 'utf8');
  assert.equal(instructions, exercismInstructions(lab));
  // The instructions number the lab's tasks as task_id does.
  const numbered = [...instructions.matchAll(/^## (\d+)\. (.+)$/gm)].map((m) => [Number(m[1]), m[2]]);
  assert.deepEqual(numbered, lab.tasks.map((heading, i) => [i + 1, heading]));

  // Exercism's interface: bin/run.sh SLUG INPUT_DIR OUTPUT_DIR, directories with a
  // trailing slash; the input holds the solution and the exercise's other files.
  const solution = 'deliver_once.py';
  const grade = async (files, { slug = LAB, wall = null } = {}) => {
    const input = path.join(TMP, 'root-exercism', 'input');
    fs.rmSync(input, { recursive: true, force: true });
    copy(exercise, input);
    fs.rmSync(path.join(input, solution));
    for (const [name, text] of Object.entries(files)) fs.writeFileSync(path.join(input, name), text);
    const output = folder(path.join(TMP, 'root-exercism', 'output'));
    const r = await run(runner, [slug, `${input}/`, `${output}/`], wall ? { env: envFor(wall) } : {});
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

  // Hidden inputs drawn per submission (issue 28) from the package's own secret
  // (hidden.mjs): the staff's log gives the seed and its replay, the results never
  // do; the same file gets the same seed (a regrade, the same grade), another file
  // another seed.
  assert.equal(fs.statSync(path.join(out, 'grader', 'hidden-secret')).size, 32);
  assert.match(fs.readFileSync(runner, 'utf8'), / --hidden-statuses 'each' /);
  const seedOf = async (text) => {
    const { r, file } = await grade({ [solution]: text });
    assert.equal(r.code, 0, r.stderr);
    const m = /hidden seed (\d+): \.\/lab grade --lab deliver-once --hidden-seed \1 FILE replays it/.exec(r.stdout);
    assert.ok(m, r.stdout);
    assert.doesNotMatch(fs.readFileSync(file, 'utf8'), /hidden.seed/i);
    assert.equal(results(file, validate).status, 'pass');
    return Number(m[1]);
  };
  const seed = await seedOf(REFERENCE);
  assert.equal(await seedOf(REFERENCE), seed);
  assert.notEqual(await seedOf(`${REFERENCE}\n# another submission\n`), seed);

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

  // The walls, as the runner's container runs the entry (root), behind the uid
  // alone (bubblewrap off the PATH, as where the container forbids namespaces).
  if (!IS_ROOT) return tc.diagnostic('not root: the walls are tested as root (as CI and the platforms run the entry)');
  const resultsFile = path.join(TMP, 'root-exercism', 'output', 'results.json');
  const grader = path.join(out, 'grader');
  const since = Date.now();
  const attack = await grade({ [solution]: hostile({ hidden: path.join(grader, 'pkg', 'delivery_lab_bg.wasm'), results: resultsFile }) }, { wall: 'uid' });
  assert.equal(attack.r.code, 0, attack.r.stderr);
  const res = results(attack.file, validate);
  assert.equal(res.status, 'error');
  assertWalled(probeOf(res.message), { since, grader, resultsFile, cwds: [process.cwd()], stdout: attack.r.stdout, wall: 'uid' });
  // Trace events: no file anywhere the sandbox's process could have put one (its
  // working directory is /), and the run ends at Exercism's deadline, graded.
  const traceSince = Date.now();
  const traced = await grade({ [solution]: TRACE }, { wall: 'uid' });
  assert.equal(traced.r.code, 0, traced.r.stderr);
  const tres = results(traced.file, validate);
  assert.ok(['error', 'fail'].includes(tres.status), tres.status);
  for (const dir of ['/', process.cwd(), path.dirname(resultsFile)]) assert.deepEqual(planted(dir, traceSince), [], dir);
  assert.deepEqual(fs.readdirSync(path.dirname(resultsFile)), ['results.json']);
  const st = fs.statSync(runner);
  assert.deepEqual([st.uid, st.mode & 0o077], [0, 0], 'the runner\'s folder is root\'s alone');
});

/**
 * Run behind the uid wall alone (jail.mjs's command with bwrap: false, as the pool
 * runs a sandbox without bubblewrap) and WITHOUT Node's permission model: plain
 * Node, so nothing but the uid, the rlimits and the modes the entry set stands
 * between it and the files. Prints what each attempt gave (its error code).
 */
const WALL_PROBE = `import fs from 'node:fs';
const a = JSON.parse(process.argv[2]);
const code = (f) => { try { f(); return 'done'; } catch (e) { return e.code || String(e); } };
const found = { uid: process.getuid(), gid: process.getgid(), groups: process.getgroups() };
for (const [k, f] of Object.entries(a.unreadable)) found['read ' + k] = code(() => fs.readFileSync(f));
for (const [k, f] of Object.entries(a.readable)) found['read ' + k] = code(() => fs.readFileSync(f));
found['list grader/pkg'] = code(() => fs.readdirSync(a.pkg));
found['open results.json for writing'] = code(() => fs.openSync(a.results, 'r+'));
found['remove results.json'] = code(() => fs.unlinkSync(a.results));
found['rename results.json'] = code(() => fs.renameSync(a.results, a.results + '.old'));
found['create a file in results/'] = code(() => fs.openSync(a.resultsDir + '/planted.json', 'wx'));
found['chmod results/'] = code(() => fs.chmodSync(a.resultsDir, 0o777));
found['create a file in its working directory'] = code(() => fs.openSync('planted.txt', 'wx'));
found['create a file in /autograder'] = code(() => fs.openSync(a.ag + '/planted.txt', 'wx'));
found['signal the grader'] = code(() => process.kill(a.graderPid, 0));
process.stdout.write(JSON.stringify(found));
`;

test('the uid wall alone, without Node\'s permission model, keeps a sandbox from what the entry made root\'s', LIMIT, async (tc) => {
  if (!IS_ROOT) return tc.diagnostic('not root: the uid wall is tested as root (as CI and the platforms run the entry)');
  // A Gradescope layout whose entry ran once: a submission without a .py is answered
  // without a sandbox, after the entry set the owners and modes.
  const out = path.join(TMP, 'gradescope-walls');
  await writePackage({ platform: 'gradescope', lab: LAB, out, untilPublished: false });
  const ag = path.join(TMP, 'root-walls', 'autograder');
  fs.mkdirSync(path.join(ag, 'source'), { recursive: true });
  execFileSync('unzip', ['-q', path.join(out, 'autograder.zip'), '-d', path.join(ag, 'source')]);
  fs.copyFileSync(path.join(ag, 'source', 'run_autograder'), path.join(ag, 'run_autograder'));
  fs.chmodSync(path.join(ag, 'run_autograder'), 0o755);
  folder(path.join(ag, 'submission'), { 'notes.txt': 'no Python here' });
  folder(path.join(ag, 'results'));
  fs.writeFileSync(path.join(ag, 'submission_metadata.json'), JSON.stringify({ previous_submissions: [] }), { mode: 0o644 });
  const r = await run(path.join(ag, 'run_autograder'), [], { cwd: ag, env: envFor('uid') });
  assert.equal(r.code, 0, r.stderr);
  assert.match(r.stdout, WALL.uid);
  const resultsFile = path.join(ag, 'results', 'results.json');
  const before = fs.readFileSync(resultsFile, 'utf8');

  const grader = path.join(ag, 'source', 'grader');
  // In TMP (open to every user, removed after the file), so nothing is left if an assertion fails.
  const probeDir = fs.mkdtempSync(path.join(TMP, 'wall-probe-'));
  fs.chmodSync(probeDir, 0o755);
  const probe = path.join(probeDir, 'probe.mjs');
  fs.writeFileSync(probe, WALL_PROBE, { mode: 0o644 });
  const args = {
    unreadable: {
      'the hidden data (grader/pkg/delivery_lab_bg.wasm)': path.join(grader, 'pkg', 'delivery_lab_bg.wasm'),
      'grader/pkg/delivery_lab.js': path.join(grader, 'pkg', 'delivery_lab.js'),
      'grader/grader/pool.mjs': path.join(grader, 'grader', 'pool.mjs'),
      'source/setup.sh': path.join(ag, 'source', 'setup.sh'),
      'submission_metadata.json': path.join(ag, 'submission_metadata.json'),
    },
    readable: {
      'grader/grader/sandbox.mjs': path.join(grader, 'grader', 'sandbox.mjs'),
      'grader/host/solution_runner.py': path.join(grader, 'host', 'solution_runner.py'),
      'Pyodide\'s package.json': path.join(grader, 'node_modules', 'pyodide', 'package.json'),
    },
    pkg: path.join(grader, 'pkg'),
    results: resultsFile,
    resultsDir: path.dirname(resultsFile),
    ag,
    graderPid: process.pid,
  };
  const uid = sandboxUid();
  const { cmd, args: argv } = jailCommand([process.execPath, probe, JSON.stringify(args)], [], { uid, bwrap: false });
  const since = Date.now();
  const p = await run(cmd, argv, { cwd: '/', env: {} });
  assert.equal(p.code, 0, p.stderr);
  const found = JSON.parse(p.stdout);
  const expected = { uid, gid: uid, groups: [uid] };
  for (const k of Object.keys(args.unreadable)) expected[`read ${k}`] = 'EACCES';
  for (const k of Object.keys(args.readable)) expected[`read ${k}`] = 'done';
  Object.assign(expected, {
    'list grader/pkg': 'EACCES',
    'open results.json for writing': 'EACCES',
    'remove results.json': 'EACCES',
    'rename results.json': 'EACCES',
    'create a file in results/': 'EACCES',
    'chmod results/': 'EPERM',
    'create a file in its working directory': 'EACCES',
    'create a file in /autograder': 'EACCES',
    'signal the grader': 'EPERM',
  });
  assert.deepEqual(found, expected);
  assert.equal(fs.readFileSync(resultsFile, 'utf8'), before);
  assert.deepEqual(fs.readdirSync(path.dirname(resultsFile)), ['results.json']);

  // Trace events write into the working directory. Node 20 let them through its
  // permission model (issue 28: 50 KB written with no write grant); Node 24 refuses
  // them there. The uid wall holds without it: with no permission model at all, the
  // probe writes in a directory of root's as root (the control) and nothing behind
  // the uid wall (in /, and in the results folder). Where the file cannot be opened
  // Node 20 hung in enable(): a walled run is ended after 4 s.
  const traceRun = (prefix, cwd, killMs, { permission = false } = {}) => new Promise((resolve) => {
    const flags = permission ? [PERMISSION_FLAG, `--allow-fs-read=${probe}`] : [];
    const child = spawn(prefix[0], [...prefix.slice(1), process.execPath, ...flags, '--no-warnings', probe],
      { cwd, stdio: 'ignore', env: {} });
    const timer = setTimeout(() => child.kill('SIGKILL'), killMs);
    child.on('exit', () => { clearTimeout(timer); resolve(); });
  });
  fs.mkdirSync(probeDir, { recursive: true });
  fs.writeFileSync(probe, `const t = process.getBuiltinModule('trace_events').createTracing({ categories: ['node', 'node.perf', 'v8'] });
t.enable();
let a = [];
const until = Date.now() + 1500;
while (Date.now() < until) { a.push({ x: Math.random() }); if (a.length > 1e5) a = []; }
process.exit(0);
`, { mode: 0o644 });
  const control = fs.mkdtempSync(path.join(TMP, 'trace-control-'));
  await traceRun(['/usr/bin/env'], control, 60_000);
  assert.ok(fs.statSync(path.join(control, 'node_trace.1.log')).size > 0, 'the control: trace events wrote with nothing in their way');
  const refused = fs.mkdtempSync(path.join(TMP, 'trace-permission-'));
  await traceRun(['/usr/bin/env'], refused, 60_000, { permission: true });
  assert.deepEqual(fs.readdirSync(refused), [], 'Node 24\'s permission model refuses trace events a write');
  const walled = jailCommand(['/usr/bin/env'], [], { uid: sandboxUid(), bwrap: false });
  const wallPrefix = [walled.cmd, ...walled.args.slice(0, -1)];
  for (const cwd of ['/', path.dirname(resultsFile)]) {
    const t0 = Date.now();
    await traceRun(wallPrefix, cwd, 4000);
    assert.deepEqual(planted(cwd, t0), [], cwd);
  }
  fs.rmSync(probeDir, { recursive: true, force: true });
  for (const dir of ['/', ag, path.dirname(resultsFile)]) assert.deepEqual(planted(dir, since), [], dir);
  assert.deepEqual(fs.readdirSync(path.dirname(resultsFile)), ['results.json']);
});

test('an entry not run as root refuses to grade where bubblewrap does not work, and warns where it does', LIMIT, async (tc) => {
  if (!IS_ROOT) return tc.diagnostic('not root: this test runs the entry as user nobody');
  const base = fs.mkdtempSync(path.join(os.tmpdir(), 'delivery-lab-platforms-nobody-'));
  fs.chmodSync(base, 0o755);
  try {
    const out = path.join(base, 'exercism');
    await writePackage({ platform: 'exercism', lab: LAB, out });
    const input = folder(path.join(base, 'input'), { 'deliver_once.py': REFERENCE });
    const output = folder(path.join(base, 'output'));
    fs.chownSync(output, 65534, 65534);
    const r = await run('setpriv', ['--reuid=65534', '--regid=65534', '--clear-groups', '--',
      path.join(out, 'bin', 'run.sh'), LAB, `${input}/`, `${output}/`], { env: { PATH: pathWithoutBwrap(), HOME: base } });
    assert.equal(r.code, 1, r.stderr);
    assert.match(r.stderr, /platform: refused: not run as root and bubblewrap cannot be used \(bwrap not found on PATH/);
    assert.doesNotMatch(r.stdout, /platform: wall:/);
    const res = results(path.join(output, 'results.json'), schemaOf('exercism'));
    assert.equal(res.status, 'error');
    assert.match(res.message, /not set up to run learner code safely here/);
    // Nothing of the package was touched: not root, the entry changes no owner or mode.
    assert.equal(fs.statSync(path.join(out, 'grader', 'pkg', 'delivery_lab_bg.wasm')).mode & 0o777, 0o644);
    // Where bubblewrap works, the same account grades inside it, and warns loudly.
    if (DEFAULT_WALL() === 'bwrap') {
      const ok = await run('setpriv', ['--reuid=65534', '--regid=65534', '--clear-groups', '--',
        path.join(out, 'bin', 'run.sh'), LAB, `${input}/`, `${output}/`], { env: { PATH: process.env.PATH, HOME: base } });
      assert.equal(ok.code, 0, ok.stderr);
      assert.match(ok.stderr, /platform: WARNING: NOT RUN AS ROOT \(uid 65534\)/);
      assert.match(ok.stdout, /^platform: wall: bubblewrap, as this user$/m);
      assert.equal(results(path.join(output, 'results.json'), schemaOf('exercism')).status, 'pass');
    } else tc.diagnostic('bubblewrap does not work here: the warning is not tested');
  } finally {
    fs.rmSync(base, { recursive: true, force: true });
  }
});

test('./lab package --hidden-statuses aggregate reaches every platform\'s entry; each package has a secret of its own', LIMIT, async () => {
  const secrets = [];
  for (const platform of ['gradescope', 'prairielearn', 'exercism']) {
    const out = path.join(TMP, `aggregate-${platform}`);
    await writePackage({ platform, lab: LAB, out, hiddenStatuses: 'aggregate' });
    if (platform === 'gradescope') {
      const unzipped = folder(path.join(TMP, 'aggregate-gradescope-unzipped'));
      const u = await run('unzip', ['-q', path.join(out, 'autograder.zip'), '-d', unzipped]);
      assert.equal(u.code, 0, u.stderr);
      assert.match(fs.readFileSync(path.join(unzipped, 'run_autograder'), 'utf8'), / --hidden-statuses 'aggregate' /);
      secrets.push(fs.readFileSync(path.join(unzipped, 'grader', 'hidden-secret')));
    } else {
      const script = platform === 'exercism' ? path.join(out, 'bin', 'run.sh') : path.join(out, 'questions', LAB, 'tests', 'run.sh');
      assert.match(fs.readFileSync(script, 'utf8'), / --hidden-statuses 'aggregate' /);
      const grader = platform === 'exercism' ? path.join(out, 'grader') : path.join(out, 'serverFilesCourse', 'delivery-lab');
      secrets.push(fs.readFileSync(path.join(grader, 'hidden-secret')));
    }
  }
  assert.equal(new Set(secrets.map((b) => b.toString('hex'))).size, 3);
  assert.ok(secrets.every((b) => b.length === 32));
});

test('./lab package refuses to replace a folder it did not write', LIMIT, async () => {
  const mine = folder(path.join(TMP, 'not-a-package'), { 'keep.txt': 'mine' });
  await assert.rejects(writePackage({ platform: 'exercism', lab: LAB, out: mine }), /holds files this command did not write/);
  assert.equal(fs.readFileSync(path.join(mine, 'keep.txt'), 'utf8'), 'mine');
});
