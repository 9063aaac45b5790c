// The grading CLI: statuses, formats, exit codes, the hostile suite (each hostile
// submission graded in one batch between correct and wrong ones, which must still
// pass and fail), and the page-vs-CLI identical report.
// Run: cd www && node --test grader/test/   (needs www/pkg; the page test needs /usr/bin/chromium)
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { loadGrader } from '../../host/node_host.mjs';
import { jsonText, LINE_CAP_BYTES } from '../output.mjs';
import { createGradingPool } from '../pool.mjs';
import { sandboxCommand } from '../sandbox_command.mjs';
import { jailCommand, RLIMITS, sandboxUid, SANDBOX_UID_BASE, UIDS_PER_OWNER } from '../jail.mjs';
import { noProcessLeftAfterTests } from '../fixtures/leftovers.mjs';
import { descendants } from '../procfs.mjs';
import { hiddenSeedOf } from '../hidden.mjs';
import { junitXml } from '../gradebook.mjs';

noProcessLeftAfterTests();

const WWW = fileURLToPath(new URL('../../', import.meta.url));
const GRADE = path.join(WWW, 'grader/grade.mjs');
const HOSTILE = path.join(WWW, 'grader/test/hostile');
const TMP = fs.mkdtempSync(path.join(os.tmpdir(), 'delivery-lab-cli-test-'));
fs.chmodSync(TMP, 0o755); // the sandbox probe runs as a sandbox uid (or nobody)
const LIMIT = { timeout: 150_000 };

/** Whether `pid` runs `script` (a word of its command line). */
const runs = (pid, script) => {
  try { return fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes(script); } catch { return false; }
};
/** Whether `pid` is a process still running (not gone, not a zombie). */
const alive = (pid) => {
  try { return !/^\d+ \(.*\) Z/.test(fs.readFileSync(`/proc/${pid}/stat`, 'utf8')); } catch { return false; }
};
/** The pids of `pids` still alive after up to 10 s of waiting for them to end. */
async function leftOf(pids) {
  let left = pids.filter(alive);
  for (let i = 0; i < 100 && left.length; i++) {
    await new Promise((r) => setTimeout(r, 100));
    left = left.filter(alive);
  }
  return left;
}
/** The pid of the pool's spawner under this process. */
function spawnerPid() {
  const pid = descendants(process.pid).find((p) => runs(p, 'spawner.mjs'));
  assert.ok(pid, 'the pool has a spawner process');
  return pid;
}

let REFERENCE, STARTER, lab;

/** Runs grade.mjs (`prefix`: a command to run it under); resolves to { code, stdout, stderr }. */
function grade(args, { prefix = [], env } = {}) {
  return new Promise((resolve) => {
    const argv = [...prefix, process.execPath, GRADE, ...args];
    const child = spawn(argv[0], argv.slice(1), { stdio: ['ignore', 'pipe', 'pipe'], ...(env ? { env } : {}) });
    let stdout = '', stderr = '';
    child.stdout.on('data', (d) => { stdout += d; });
    child.stderr.on('data', (d) => { stderr += d; });
    child.on('exit', (code) => resolve({ code, stdout, stderr }));
  });
}

function write(dir, name, text) {
  fs.mkdirSync(dir, { recursive: true });
  const p = path.join(dir, name);
  fs.writeFileSync(p, text);
  return p;
}

function expectations(source) {
  const status = /^# expect-status: (\S+)/m.exec(source)?.[1];
  const message = /^# expect-message: (.+)$/m.exec(source)?.[1];
  return { status, message };
}

const allMessages = (line) => [line.message ?? '', ...line.tests.map((t) => (t.status === 'pass' ? '' : `[${t.name}: ${t.status}] ${t.message ?? ''}`))].join('\n').trim();

before(async () => {
  const pkg = await loadGrader();
  lab = JSON.parse(new pkg.Grader().lab('deliver-once'));
  REFERENCE = lab.reference_py;
  STARTER = lab.starter_py;
});

after(() => fs.rmSync(TMP, { recursive: true, force: true }));

test('the hostile suite has at least 15 kinds, each stating its attack and outcome', () => {
  const files = fs.readdirSync(HOSTILE).filter((f) => f.endsWith('.py'));
  assert.ok(files.length >= 15, `${files.length} hostile files`);
  for (const f of files) {
    const src = fs.readFileSync(path.join(HOSTILE, f), 'utf8');
    assert.match(src, /^# Attack: /m, `${f} states its attack`);
    assert.match(src, /^# Expected: /m, `${f} states the expected outcome`);
    assert.ok(expectations(src).status, `${f} has an expect-status line`);
  }
});

test('hostile batch: every attack gets the truth, and correct/wrong submissions after each are graded right', LIMIT, async () => {
  const dir = path.join(TMP, 'batch');
  const hostile = fs.readdirSync(HOSTILE).filter((f) => f.endsWith('.py')).sort();
  const expected = new Map();
  hostile.forEach((f, i) => {
    const n = String(i).padStart(2, '0');
    const src = fs.readFileSync(path.join(HOSTILE, f), 'utf8');
    expected.set(write(dir, `${n}-a-${f}`, src), { kind: 'hostile', name: f, ...expectations(src) });
    expected.set(write(dir, `${n}-b-correct.py`, REFERENCE), { kind: 'correct' });
    expected.set(write(dir, `${n}-c-wrong.py`, STARTER), { kind: 'wrong' });
  });
  const { code, stdout, stderr } = await grade(['--jobs', '2', '--timeout', '4', '--format', 'json', dir]);
  assert.equal(code, 1, stderr);
  const lines = stdout.trim().split('\n');
  // One line per submission, nothing else: prints never reach the CLI's stdout.
  assert.equal(lines.length, expected.size, stdout.slice(0, 2000));
  // Every line within its cap, whatever the code printed or raised (huge_print.py, huge_raise.py).
  for (const l of lines) assert.ok(Buffer.byteLength(l) < LINE_CAP_BYTES, `a line of ${Buffer.byteLength(l)} bytes: ${l.slice(0, 200)}`);
  assert.ok(!stdout.includes('FORGED'), 'a printed fake report line reached stdout');
  const seen = new Set();
  for (const l of lines) {
    const line = JSON.parse(l);
    const want = expected.get(line.file);
    assert.ok(want, `unexpected file ${line.file}`);
    seen.add(line.file);
    for (const k of ['lab', 'status', 'passed', 'failed', 'total', 'score', 'max_score', 'seed', 'duration_ms', 'tests']) assert.ok(k in line, `${k} in ${line.file}`);
    if (want.kind === 'correct') assert.equal(line.status, 'pass', `${line.file}: ${allMessages(line).slice(0, 800)}`);
    else if (want.kind === 'wrong') {
      assert.equal(line.status, 'fail', line.file);
      assert.equal(line.passed, 0, line.file);
    } else {
      if (want.status.startsWith('!')) assert.notEqual(line.status, want.status.slice(1), `${want.name}: ${allMessages(line).slice(0, 500)}`);
      else assert.equal(line.status, want.status, `${want.name}: ${allMessages(line).slice(0, 500)}`);
      if (want.message) assert.ok(allMessages(line).includes(want.message), `${want.name}: message should include ${want.message}; got ${allMessages(line).slice(0, 500)}`);
      if (line.status === 'error') assert.ok(line.message, `${want.name}: an error carries a message`);
    }
  }
  assert.equal(seen.size, expected.size);
});

test('exit codes: 0 when all pass, 1 when any fails, 2 for usage errors', LIMIT, async () => {
  const ok = write(path.join(TMP, 'ok'), 'alice.py', REFERENCE);
  let r = await grade(['--format', 'json', ok]);
  assert.equal(r.code, 0, r.stderr);
  const line = JSON.parse(r.stdout);
  assert.equal(line.status, 'pass');
  assert.equal(line.file, ok);
  assert.equal(line.seed, lab.default_seed);
  // The staff's replay carries the submission's hidden seed (drawn for this run).
  assert.ok(Number.isInteger(line.hidden_seed), JSON.stringify(line));
  assert.equal(line.replay, `./lab grade --lab deliver-once --seed ${line.seed} --hidden-seed ${line.hidden_seed} solution.py`);
  r = await grade(['--format', 'json', '--seed', '7', ok, write(path.join(TMP, 'ko'), 'bob.py', STARTER)]);
  assert.equal(r.code, 1);
  assert.deepEqual(r.stdout.trim().split('\n').map((l) => JSON.parse(l).seed), [7, 7]);
  for (const args of [[], ['--format', 'yaml', ok], ['--jobs', 'x', ok], ['--bogus', ok], ['--format', 'exercism', ok], [path.join(TMP, 'missing.py')]]) {
    r = await grade(args);
    assert.equal(r.code, 2, `${args.join(' ')}: ${r.stderr}`);
    assert.match(r.stderr, /grade: .+\n.*usage/s);
  }
});

// Issue 39: ./lab works in its checkout, yet a path on its command line is the
// caller's, as in any Unix tool; a file whose name starts with - goes after --.
const LAB = path.join(WWW, '../lab');
/** ./lab ARGS run in `cwd`; resolves to { code, stdout, stderr }. */
function labIn(cwd, args) {
  return new Promise((resolve) => {
    const child = spawn(LAB, args, { cwd, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '', stderr = '';
    child.stdout.on('data', (d) => { stdout += d; });
    child.stderr.on('data', (d) => { stderr += d; });
    child.on('exit', (code) => resolve({ code, stdout, stderr }));
  });
}

test('./lab grade and ./lab package from another folder: files, folders, --out and --secret-file are the caller\'s; -2.py after --', LIMIT, async () => {
  const here = path.join(TMP, 'elsewhere');
  write(here, 'alice.py', REFERENCE);
  write(here, '-2.py', STARTER);
  write(path.join(here, 'class'), 'bob.py', REFERENCE);
  const secret = Buffer.from('a course secret of 32 bytes, ok!');
  fs.writeFileSync(path.join(here, 'course.secret'), secret);
  const repo = path.dirname(LAB);
  for (const name of ['alice.py', '-2.py', 'class', 'course.secret', 'results', 'pkg']) assert.ok(!fs.existsSync(path.join(repo, name)), `the checkout has ${name}`);
  let r = await labIn(here, ['grade', '--format', 'gradescope', '--out', 'results', '--secret-file', 'course.secret', 'alice.py', 'class', '--', '-2.py']);
  assert.equal(r.code, 1, r.stderr);
  // Each file by the name it was given, its results under the caller's results/, its
  // hidden seed drawn from the caller's secret file.
  const shown = r.stdout.trim().split('\n').slice(0, 3);
  const want = [['alice.py', REFERENCE, 'pass', 'alice'], ['class/bob.py', REFERENCE, 'pass', 'bob'], ['-2.py', STARTER, 'fail', '-2']];
  const re = (text) => text.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&');
  want.forEach(([file, source, status, base], i) => {
    const results = path.join(here, 'results', `${base}.json`);
    const seed = hiddenSeedOf(secret, 'deliver-once', source);
    assert.match(shown[i], new RegExp(`^${re(file)}: ${status} \\d+/23 -> ${re(results)} \\(hidden seed ${seed}\\)$`), r.stdout);
    const res = JSON.parse(fs.readFileSync(results, 'utf8'));
    assert.equal(res.score === res.max_score, status === 'pass', base);
  });
  for (const name of ['results', 'class', '-2.py']) assert.ok(!fs.existsSync(path.join(repo, name)), `./lab wrote ${name} into the checkout`);
  // Without --, -2.py is an option no command has: exit 2, saying where a file so named goes.
  r = await labIn(here, ['grade', '-2.py']);
  assert.equal(r.code, 2);
  assert.match(r.stderr, /^\.\/lab grade: unknown option -2 \(a file whose name starts with - goes after --: \.\/lab grade \[options\] -- FILE\.\.\.\)$/m);
  // A file the caller's folder does not have is not looked for in the checkout.
  r = await labIn(here, ['grade', 'README.md']);
  assert.equal(r.code, 2);
  assert.match(r.stderr, /^grade: README\.md: no such file or directory$/m);
  // ./lab package --out: the caller's folder, and the steps it prints name it from there.
  r = await labIn(here, ['package', 'exercism', '--lab', 'deliver-once', '--out', 'pkg']);
  assert.equal(r.code, 0, r.stderr);
  assert.ok(fs.existsSync(path.join(here, 'pkg', 'bin', 'run.sh')));
  assert.match(r.stdout, /^ {2}pkg\/ \(bin\/run\.sh, Dockerfile, grader\/\)/m);
  assert.ok(!fs.existsSync(path.join(repo, 'pkg')), './lab package wrote into the checkout');
});

// Staff read reports on a terminal: what a submission raises or prints, and its
// file's name, reach it with every control sequence escaped (erase a line, print a
// fake PASS, write the clipboard, reorder text with a bidi override).
test('no control sequence from a submission reaches the terminal, in text or json; the json still says what was raised', LIMIT, async () => {
  const raised = '\\x1b[1A\\x1b[2K\\x1b]52;c;cHduZWQ=\\x07 23/23 PASS\\r\\x9b2J\\x7f\\u202e';
  const src = `def deliver_once(task, provider, kv, policy):\n    print("\\x1b[2J")\n    raise ValueError("${raised}")\n`
    + 'def next_step(task, result, now, policy, rng):\n    return ("drop", None)\n';
  const file = write(path.join(TMP, 'escapes'), 'e\x1b[31mvil\u202e.py', src);
  const raw = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]/;
  const text = await grade(['--format', 'text', file]);
  assert.equal(text.code, 1, text.stderr);
  assert.ok(!raw.test(text.stdout), JSON.stringify(text.stdout.match(raw)));
  assert.match(text.stdout, /ValueError: \\x1b\[1A\\x1b\[2K\\x1b\]52;c;cHduZWQ=\\x07 23\/23 PASS\\x0d\\x9b2J\\x7f\\u202e/);
  assert.ok(text.stdout.includes('e\\x1b[31mvil\\u202e.py'));
  const json = await grade(['--format', 'json', file]);
  assert.ok(!raw.test(json.stdout), JSON.stringify(json.stdout.match(raw)));
  const line = JSON.parse(json.stdout);
  assert.equal(line.file, file);
  assert.ok(line.tests[0].message.includes('ValueError: \x1b[1A\x1b[2K\x1b]52;c;cHduZWQ=\x07 23/23 PASS\r\x9b2J\x7f\u202e'), line.tests[0].message);
});

// One set of characters a terminal must not get raw (report.rs TERMINAL_UNSAFE): the
// engine's text report escapes it, and the CLI's file names and JSON lines
// (output.mjs) escape the character class it builds from the grader's list. The two
// escape the same characters over the first 0x3000 code points and U+FEFF.
test('the engine and the CLI escape exactly the same characters for a terminal', LIMIT, async () => {
  const { terminalSafe } = await import('../output.mjs');
  const grader = new (await loadGrader()).Grader();
  const differ = [];
  for (let cp = 0; cp <= 0x3000; cp++) {
    if (cp === 10 || (cp >= 0xd800 && cp <= 0xdfff)) continue; // newline: kept (and indented); lone surrogates
    const ch = String.fromCodePoint(cp);
    const js = terminalSafe(ch) !== ch;
    const rust = !grader.error_report('deliver-once', 1, `x${ch}y`, 'text').includes(`x${ch}y`);
    if (js !== rust) differ.push(cp.toString(16));
  }
  const ch = '\ufeff';
  if ((terminalSafe(ch) !== ch) !== !grader.error_report('deliver-once', 1, `x${ch}y`, 'text').includes(`x${ch}y`)) differ.push('feff');
  assert.deepEqual(differ, []);
  assert.notEqual(terminalSafe('\u202e'), '\u202e');
});

// Learner text in a text report is always indented: a load-time exception that is
// another file's result block cannot pass for one (hostile/fake_result_lines.py).
test('in text, learner text cannot pass for the report\'s own lines', LIMIT, async () => {
  const r = await grade(['--format', 'text', path.join(HOSTILE, 'fake_result_lines.py')]);
  assert.equal(r.code, 1, r.stderr);
  const lines = r.stdout.split('\n');
  assert.ok(lines.some((l) => l.startsWith('deliver-once: ERROR')), r.stdout);
  for (const fake of ['deliver-once: PASS', 'submissions/bob.py', '────']) {
    assert.ok(!lines.some((l) => l.startsWith(fake) && !l.startsWith('─'.repeat(20))), `a line starts with ${fake}:\n${r.stdout}`);
  }
  assert.ok(r.stdout.includes('  deliver-once: PASS (23 of 23'), 'the fake is shown, indented');
});

// Submissions come from learners' archives: a link in one would have the grader,
// with staff's rights, read and grade what it points to.
test('a submission that is a link is not followed: an error, and nothing of its target read', LIMIT, async () => {
  const dir = path.join(TMP, 'links');
  fs.mkdirSync(dir, { recursive: true });
  fs.symlinkSync(path.join(WWW, '../src/deliver_once/reference.py'), path.join(dir, 'trudy.py'));
  const hidden = path.join(WWW, '../hidden-tests/courier');
  const secret = path.join(hidden, fs.readdirSync(hidden).find((f) => f.endsWith('.toml')));
  fs.symlinkSync(secret, path.join(dir, 'mallory.py'));
  for (const args of [[dir], [path.join(dir, 'trudy.py'), path.join(dir, 'mallory.py')]]) {
    const r = await grade(['--format', 'json', ...args]);
    assert.equal(r.code, 1, r.stderr);
    const lines = r.stdout.trim().split('\n').map((l) => JSON.parse(l));
    assert.deepEqual(lines.map((l) => [path.basename(l.file), l.status, l.passed]).sort(), [['mallory.py', 'error', 0], ['trudy.py', 'error', 0]]);
    for (const l of lines) assert.match(l.message, /is a link, not a file/);
    const firstLine = fs.readFileSync(secret, 'utf8').split('\n').find((x) => x.trim().length > 10);
    assert.ok(!r.stdout.includes(firstLine.trim()), 'the target\'s text is in no report');
  }
});

test('files that cannot be graded: empty, whitespace, not UTF-8, no functions, syntax error', LIMIT, async () => {
  const dir = path.join(TMP, 'ungradable');
  write(dir, 'a-empty.py', '');
  write(dir, 'b-blank.py', '  \n\t\n');
  fs.writeFileSync(path.join(dir, 'c-latin1.py'), Buffer.from([0x23, 0x20, 0xe9, 0xff, 0x0a]));
  write(dir, 'd-nofunctions.py', 'X = 1\n');
  write(dir, 'e-syntax.py', 'def deliver_once(:\n');
  write(dir, 'notes.txt', 'not a submission');
  const r = await grade(['--format', 'json', dir]);
  assert.equal(r.code, 1);
  const lines = r.stdout.trim().split('\n').map((l) => JSON.parse(l));
  assert.deepEqual(lines.map((l) => path.basename(l.file)), ['a-empty.py', 'b-blank.py', 'c-latin1.py', 'd-nofunctions.py', 'e-syntax.py']);
  for (const l of lines) assert.equal(l.status, 'error', l.file);
  assert.match(lines[0].message, /empty/);
  assert.match(lines[2].message, /UTF-8/);
  assert.match(lines[3].message, /defines neither/);
  assert.match(lines[4].message, /could not be compiled/);
});

test('formats: text table and summary; exercism and gradescope results.json files under --out', LIMIT, async () => {
  const dir = path.join(TMP, 'formats');
  write(dir, 'alice.py', REFERENCE);
  write(dir, 'bob.py', STARTER);
  write(dir, 'carol.py', '');
  let r = await grade(['--format', 'text', dir]);
  assert.equal(r.code, 1);
  assert.match(r.stdout, /alice\.py/);
  assert.match(r.stdout, /PASS/);
  assert.match(r.stdout, /FAIL/);
  // The staff's replay names the file graded (formats.test.mjs: the roll-up table after the reports).
  assert.match(r.stdout, new RegExp(`replay with: \\./lab grade --lab deliver-once --seed \\d+ --hidden-seed \\d+ ${path.join(dir, 'bob.py')}\n`));
  assert.match(r.stdout, /3 submissions: 1 pass, 1 fail, 1 error/);
  for (const format of ['exercism', 'gradescope']) {
    const out = path.join(TMP, `out-${format}`);
    r = await grade(['--format', format, '--out', out, dir]);
    assert.equal(r.code, 1, r.stderr);
    assert.deepEqual(fs.readdirSync(out).sort(), ['alice.json', 'bob.json', 'carol.json']);
    const alice = JSON.parse(fs.readFileSync(path.join(out, 'alice.json'), 'utf8'));
    const bob = JSON.parse(fs.readFileSync(path.join(out, 'bob.json'), 'utf8'));
    const carol = JSON.parse(fs.readFileSync(path.join(out, 'carol.json'), 'utf8'));
    if (format === 'exercism') {
      assert.equal(alice.version, 3);
      assert.equal(alice.status, 'pass');
      assert.equal(bob.status, 'fail');
      assert.equal(carol.status, 'error');
    } else {
      assert.equal(alice.score, alice.max_score ?? alice.score);
      assert.ok(Array.isArray(alice.tests) && alice.tests.every((t) => t.status === 'passed'));
      assert.ok(bob.tests.some((t) => t.status === 'failed'));
      assert.ok(typeof carol.output === 'string' || carol.tests);
    }
  }
});

test('the page and the CLI give the same report for the same source and seed', LIMIT, async (t) => {
  const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
  if (!fs.existsSync(CHROMIUM)) return t.skip('no chromium');
  const { chromium } = await import('playwright-core');
  const root = path.join(TMP, 'site');
  execFileSync(process.execPath, ['build.mjs', '--no-wasm', '--out', root], { cwd: WWW, stdio: 'ignore' });
  const server = spawn(process.execPath, ['grader/serve.mjs', '--port', '0', '--root', root], { cwd: WWW, stdio: ['ignore', 'pipe', 'inherit'] });
  const url = await new Promise((resolve, reject) => {
    server.once('exit', (code) => reject(new Error(`serve.mjs exited with ${code}`)));
    server.stdout.once('data', (d) => resolve(d.toString().split('\n')[0].trim()));
  });
  const browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--no-first-run'] });
  try {
    const page = await browser.newPage();
    await page.goto(url);
    await page.waitForFunction(() => window.deliveryLab);
    await page.evaluate(() => window.deliveryLab.ready);
    const sources = {
      correct: REFERENCE,
      wrong: STARTER,
      prints: REFERENCE.replace('def deliver_once(task, provider, kv, policy):\n', 'def deliver_once(task, provider, kv, policy):\n    print("hello from", task.key)\n'),
      raises: 'def deliver_once(task, provider, kv, policy):\n    raise ValueError("nope")\n\ndef next_step(task, result, now, policy, rng):\n    return ("retry", 1.0)\n',
    };
    for (const [name, source] of Object.entries(sources)) {
      const file = write(path.join(TMP, 'same'), `${name}.py`, source);
      const pageReport = await page.evaluate(async (src) => {
        window.deliveryLab.setCode(src);
        return window.deliveryLab.run();
      }, source);
      // The page grades the hidden cases as written; so does the CLI with --hidden-seed none.
      const r = await grade(['--format', 'json', '--hidden-seed', 'none', file]);
      const cli = JSON.parse(r.stdout);
      assert.equal(cli.hidden_seed, undefined);
      const { file: f, duration_ms: d, ...cliRest } = cli;
      // The CLI's line is the staff's: a hidden test carries its message too (issue 39,
      // item 5). The page's is the learner's: the same line, those messages aside.
      cliRest.tests = cliRest.tests.map((x) => (x.kind === 'hidden' ? { name: x.name, kind: x.kind, status: x.status } : x));
      // The CLI's line is a projection of the engine's report: compare field by field.
      const fromPage = JSON.parse(JSON.stringify({
        lab: pageReport.lab, status: pageReport.status, passed: pageReport.passed, failed: pageReport.failed,
        total: pageReport.total, score: pageReport.score, max_score: pageReport.max_score, seed: pageReport.seed,
        tests: pageReport.tests.map((x) => ({ name: x.name, kind: x.kind, status: x.status, ...(x.kind === 'example' && x.message != null ? { message: x.message } : {}) })),
        replay: pageReport.replay,
        ...(pageReport.status === 'error' && pageReport.message != null ? { message: pageReport.message } : {}),
      }));
      assert.deepEqual(cliRest, fromPage, `${name}: the page and the CLI disagree`);
      assert.equal(f, file);
      assert.equal(typeof d, 'number');
    }
  } finally {
    await browser.close();
    server.kill();
  }
});

test('the pool module API: grade() in json and other formats, queued(), close()', LIMIT, async () => {
  const { createGradingPool } = await import('../pool.mjs');
  const pool = createGradingPool({ jobs: 1 });
  await pool.ready;
  const [a, b] = await Promise.all([
    pool.grade({ lab: 'deliver-once', source: REFERENCE, seed: 3 }),
    pool.grade({ lab: 'deliver-once', source: STARTER, seed: 3, format: 'exercism' }),
  ]);
  // json: the CLI's line, an object (the caller serialises it); other formats: text.
  const line = a;
  assert.equal(line.file, null);
  assert.equal(line.status, 'pass');
  assert.equal(line.seed, 3);
  assert.equal(JSON.parse(b).status, 'fail');
  assert.equal(pool.queued(), 0);
  await pool.close();
  await assert.rejects(pool.grade({ source: REFERENCE }));
});

/** Runs `script` with `command`; resolves to what it wrote on fd 4, parsed. */
async function runProbe({ cmd, args }) {
  const child = spawn(cmd, args, { stdio: ['ignore', 'ignore', 'pipe', 'ignore', 'pipe'], env: {} });
  let err = '', out = '';
  child.stderr.on('data', (d) => { err += d; });
  child.stdio[4].on('data', (d) => { out += d; });
  await new Promise((resolve) => child.on('exit', resolve));
  assert.ok(out, `the probe said nothing: ${err}`);
  return JSON.parse(out);
}

// The probe's network check dials a listener of the test's own on the host's
// loopback (never an outside address): from an empty network namespace it cannot
// be reached, from the host it can.
const PROBE_HEAD = (port) => `
  import fs from 'node:fs';
  import cp from 'node:child_process';
  import net from 'node:net';
  const r = {};
  const attempt = (f) => { try { f(); return 'allowed'; } catch (e) { return e.code || e.name; } };
  r.read = attempt(() => fs.readFileSync('/etc/passwd'));
  r.grader = attempt(() => fs.readFileSync(${JSON.stringify(`${WWW}pkg/delivery_lab_bg.wasm`)}));
  r.hidden = attempt(() => fs.readFileSync(${JSON.stringify(path.join(WWW, '../hidden-tests/README.md'))}));
  r.source = attempt(() => fs.readFileSync(${JSON.stringify(path.join(WWW, '../src/deliver_once/reference.py'))}));
  r.write = attempt(() => fs.writeFileSync('/tmp/x-sandbox-probe', 'x'));
  r.spawn = attempt(() => cp.execFileSync('/bin/true'));
  r.codegen = attempt(() => new Function('return 1')());
  r.env = Object.entries(process.env).map(([k, v]) => \`\${k}=\${v}\`);
  r.uid = process.getuid();
  r.pid = process.pid;
  try { r.limits = fs.readFileSync('/proc/self/limits', 'utf8'); } catch (e) { r.limits = e.code; }
  try { r.procs = fs.readdirSync('/proc').filter((n) => /^\\d+$/.test(n)); } catch (e) { r.procs = e.code; }
  const s = net.connect({ host: '127.0.0.1', port: ${port} });
  const done = () => { fs.writeSync(4, JSON.stringify(r)); process.exit(0); };
  s.on('error', (e) => { r.net = e.code; done(); });
  s.on('connect', () => { r.net = 'connected'; done(); });
`;

test('the sandbox boundary, each wall alone: bubblewrap (namespaces, files, rlimits) and Node (permissions, no code from strings)', LIMIT, async () => {
  const listener = net.createServer((c) => { reached += 1; c.destroy(); });
  let reached = 0;
  await new Promise((resolve) => listener.listen(0, '127.0.0.1', resolve));
  const probe = write(TMP, 'probe.mjs', PROBE_HEAD(listener.address().port));
  const NO_FILE = ['ENOENT'];
  // bubblewrap alone (no permission model): what the kernel enforces.
  const jail = await runProbe(jailCommand([process.execPath, probe], [probe], { uid: sandboxUid() }));
  // /etc, the grader, the hidden tests and the lab's sources are not in its view.
  for (const k of ['read', 'grader', 'hidden', 'source']) assert.ok(NO_FILE.includes(jail[k]), `jail ${k}: ${jail[k]}`);
  assert.equal(jail.write, 'EROFS');
  // Nothing of the host's environment (bubblewrap sets PWD for the folder it starts in).
  assert.deepEqual(jail.env, ['PWD=/']);
  // Starting a process is the permission model's to refuse (below); the jail bounds them (nproc).
  // Its own PID namespace: pid 2 under bubblewrap's init, and no other process of
  // the machine to see or signal.
  assert.equal(jail.pid, 2);
  assert.deepEqual(jail.procs.sort(), ['1', '2']);
  // Its own loopback only: the host's listener is not there.
  assert.ok(['ECONNREFUSED', 'ENETUNREACH', 'EHOSTUNREACH'].includes(jail.net), jail.net);
  assert.match(jail.limits, new RegExp(`Max file size\\s+${RLIMITS.fsize}\\s+${RLIMITS.fsize}`));
  assert.match(jail.limits, new RegExp(`Max processes\\s+${RLIMITS.nproc}\\s`));
  assert.match(jail.limits, new RegExp(`Max data size\\s+${RLIMITS.data}\\s`));
  // Never root: a uid of its own (jail.mjs sandboxUid; bubblewrap maps it to itself).
  if (process.getuid() === 0) assert.ok(jail.uid >= SANDBOX_UID_BASE, `jail's uid: ${jail.uid}`);
  // The sandbox's own command line: both walls.
  const both = await runProbe(sandboxCommand({ script: probe }));
  for (const k of ['read', 'grader', 'hidden', 'source', 'write', 'spawn']) assert.ok(['ERR_ACCESS_DENIED', 'ENOENT'].includes(both[k]), `sandbox ${k}: ${both[k]}`);
  assert.equal(both.codegen, 'EvalError');
  assert.deepEqual(both.env, ['PWD=/']);
  assert.equal(both.pid, 2);
  assert.equal(both.procs, 'ERR_ACCESS_DENIED');
  assert.ok(['ECONNREFUSED', 'ENETUNREACH', 'EHOSTUNREACH', 'ERR_ACCESS_DENIED'].includes(both.net), both.net);
  assert.equal(reached, 0, 'no jailed probe reached the host\'s listener');
  // And without bubblewrap (--no-sandbox), Node's wall still holds.
  const node = await runProbe(sandboxCommand({ script: probe, jailed: false }));
  for (const k of ['read', 'grader', 'hidden', 'source', 'write', 'spawn']) assert.equal(node[k], 'ERR_ACCESS_DENIED', `node ${k}`);
  assert.equal(node.codegen, 'EvalError');
  // Even then, under root, a uid of its own (jail.mjs with bwrap: false; its rlimits
  // are in test/uids.test.mjs), never root.
  if (process.getuid() === 0) assert.ok(node.uid >= SANDBOX_UID_BASE, `--no-sandbox's uid: ${node.uid}`);
  // The network is bubblewrap's wall alone: unjailed, the same dial gets through
  // (so the refusals above are the namespace's doing, not a listener that was down).
  assert.equal(node.net, 'connected');
  listener.close();
  assert.ok(!fs.existsSync('/tmp/x-sandbox-probe'));
});

test('a staff account that is not root grades inside the sandbox; without bubblewrap the CLI refuses unless --no-sandbox', LIMIT, async (t) => {
  const dir = path.join(TMP, 'staff');
  const ok = write(dir, 'alice.py', REFERENCE);
  const ko = write(dir, 'bob.py', STARTER);
  if (process.getuid() === 0) {
    // As user nobody, a plain account: bubblewrap runs on unprivileged user namespaces.
    const r = await grade(['--format', 'json', ok, ko], {
      prefix: ['setpriv', '--reuid=65534', '--regid=65534', '--clear-groups', '--'],
      env: { PATH: process.env.PATH, HOME: TMP },
    });
    assert.equal(r.code, 1, r.stderr);
    assert.deepEqual(r.stdout.trim().split('\n').map((l) => JSON.parse(l).status), ['pass', 'fail']);
    assert.doesNotMatch(r.stderr, /no-sandbox|warning/);
  } else {
    t.diagnostic('not root: this whole suite already runs as a plain account');
  }
  // A machine without bubblewrap (a PATH holding only what grading needs besides it).
  const bin = path.join(TMP, 'bin-without-bwrap');
  fs.mkdirSync(bin, { recursive: true });
  for (const tool of ['mkfifo']) fs.symlinkSync(execFileSync('sh', ['-c', `command -v ${tool}`]).toString().trim(), path.join(bin, tool));
  const env = { PATH: bin, HOME: TMP };
  let r = await grade(['--format', 'json', ok], { env });
  assert.equal(r.code, 2);
  assert.match(r.stderr, /the grading sandbox does not work here: .*--no-sandbox/s);
  assert.equal(r.stdout, '');
  if (process.getuid() === 0) {
    // Under root, --no-sandbox still never runs learner code as root: without setpriv
    // (and prlimit) to drop each sandbox to a uid of its own, it is refused.
    r = await grade(['--format', 'json', '--no-sandbox', ok], { env });
    assert.equal(r.code, 2, r.stderr);
    assert.match(r.stderr, /--no-sandbox as root needs setpriv and prlimit .*prlimit, setpriv not found/s);
    assert.equal(r.stdout, '');
    for (const tool of ['setpriv', 'prlimit']) fs.symlinkSync(execFileSync('sh', ['-c', `command -v ${tool}`]).toString().trim(), path.join(bin, tool));
  }
  r = await grade(['--format', 'json', '--no-sandbox', ok, ko], { env });
  assert.equal(r.code, 1, r.stderr);
  assert.match(r.stderr, /--no-sandbox: each submission still gets a fresh process/);
  if (process.getuid() === 0) assert.match(r.stderr, /as a uid of its own with the rlimits/);
  assert.deepEqual(r.stdout.trim().split('\n').map((l) => JSON.parse(l).status), ['pass', 'fail']);
});

test('no signal leaves a sandbox: a process of another sandbox\'s uid outside, and a sibling sandbox, survive a kill of every pid', LIMIT, async () => {
  // A process of another sandbox's uid on the host (from another owner's block when
  // the grader runs as root; the same user otherwise), whose pid the submission is given.
  const other = SANDBOX_UID_BASE + 1 * UIDS_PER_OWNER;
  const asSandboxUser = process.getuid() === 0 ? ['setpriv', `--reuid=${other}`, `--regid=${other}`, '--clear-groups', '--'] : [];
  const sentinel = spawn(asSandboxUser[0] ?? 'sleep', [...asSandboxUser.slice(1), ...(asSandboxUser.length ? ['sleep'] : []), '120'], { stdio: 'ignore' });
  let killer = fs.readFileSync(path.join(HOSTILE, 'js_kill_everything.py'), 'utf8')
    .replace('list(range(4096, 2, -1))', '[SENTINELS] + list(range(4096, 2, -1))');
  const pool = createGradingPool({ jobs: 2 });
  try {
    await pool.ready;
    const spawner = spawnerPid();
    killer = killer.replace('SENTINELS', `${sentinel.pid}, ${spawner}, ${process.pid}, ${process.ppid}`);
    const [k, sibling] = await Promise.all([
      pool.grade({ source: killer }),
      pool.grade({ source: REFERENCE }),
    ]);
    assert.equal(k.status, 'error');
    assert.match(k.message, /ended the grader's Python process/);
    assert.equal(sibling.status, 'pass', allMessages(sibling).slice(0, 300));
    assert.equal(sentinel.exitCode, null, 'the sentinel was killed');
    assert.equal(sentinel.signalCode, null, 'the sentinel was killed');
    assert.equal((await pool.grade({ source: REFERENCE })).status, 'pass');
    assert.equal(spawnerPid(), spawner, 'the spawner was killed');
  } finally {
    sentinel.kill('SIGKILL');
    await pool.close();
  }
});

test('the spawner killed: its sandboxes go with it, the pool starts another and grades on', LIMIT, async () => {
  // Spawned sandboxes only (fork.test.mjs kills the spawner of a fork server).
  const pool = createGradingPool({ jobs: 1, fork: false });
  try {
    await pool.ready;
    const first = spawnerPid();
    const spare = descendants(first);
    const direct = fs.readFileSync(`/proc/${first}/task/${first}/children`, 'utf8').trim().split(/\s+/).filter(Boolean);
    assert.equal(direct.length, 1, 'one spare sandbox, started by the spawner');
    assert.ok(spare.some((p) => runs(p, 'sandbox.mjs')), 'the spawner\'s child is a sandbox');
    process.kill(first, 'SIGKILL');
    // The spare dies with its parent (--die-with-parent), and is replaced.
    assert.deepEqual(await leftOf(spare), [], 'the spare outlived its spawner');
    await new Promise((r) => setTimeout(r, 200));
    const line = await pool.grade({ source: REFERENCE });
    assert.equal(line.status, 'pass', allMessages(line).slice(0, 300));
    assert.notEqual(spawnerPid(), first);
    assert.ok(pool.stats.spawned >= 2);
  } finally {
    await pool.close();
  }
});

test('the coordinator killed: its spawner and every sandbox end with it', LIMIT, async () => {
  const file = write(path.join(TMP, 'killed-coordinator'), 'loop.py', fs.readFileSync(path.join(HOSTILE, 'loop_in_function.py'), 'utf8'));
  const cli = spawn(process.execPath, [GRADE, file], { stdio: 'ignore' });
  const isSandbox = (pid) => runs(pid, 'sandbox.mjs');
  let tree = [];
  // Until the loop runs in a sandbox and the next one is started ahead: two sandboxes.
  for (let i = 0; i < 600 && tree.filter(isSandbox).length < 2; i++) {
    await new Promise((r) => setTimeout(r, 100));
    tree = descendants(cli.pid);
  }
  assert.ok(tree.filter(isSandbox).length >= 2, `no running sandboxes under the CLI: ${tree}`);
  assert.ok(tree.some((pid) => runs(pid, 'spawner.mjs')));
  cli.kill('SIGKILL');
  assert.deepEqual(await leftOf(tree), [], 'processes of a killed coordinator still running');
});

test('the memory cap: a bomb raises MemoryError inside Python at the cap', LIMIT, async () => {
  const { createGradingPool } = await import('../pool.mjs');
  const pool = createGradingPool({ jobs: 1, memoryMb: 256, timeoutS: 20 });
  await pool.ready;
  const bomb = 'hog = []\ndef deliver_once(task, provider, kv, policy):\n    while True:\n        hog.append(bytearray(16 * 1024 * 1024))\n\ndef next_step(task, result, now, policy, rng):\n    return None\n';
  const line = await pool.grade({ source: bomb });
  await pool.close();
  assert.equal(line.status, 'fail');
  assert.ok(allMessages(line).includes('MemoryError'), allMessages(line).slice(0, 500));
  assert.ok(pool.stats.peakRssMb < 256 + 1024, `peak RSS ${pool.stats.peakRssMb} MB`);
});

test('a fresh sandbox process per submission: poison, plants and a syntax error\'s text never reach the next one', LIMIT, async () => {
  const pool = createGradingPool({ jobs: 1 });
  await pool.ready;
  try {
    const poison = ['poison_builtins.py', 'poison_bridge.py', 'raises_baseexceptions.py', 'frames_and_heap.py',
      'import_js.py', 'pyodide_js.py', 'js_plant_next.py']
      .map((f) => fs.readFileSync(path.join(HOSTILE, f), 'utf8'));
    // A tracer and a seeded `random` that would change a correct solution's draws.
    poison.push('import random, sys\nrandom.seed(99)\n_u = random.uniform\nrandom.uniform = lambda a, b: b\nsys.settrace(lambda *a: None)\n'
      + 'def deliver_once(task, provider, kv, policy):\n    return "sent"\n\ndef next_step(task, result, now, policy, rng):\n    return ("drop", None)\n');
    let graded = 0;
    for (const source of poison) {
      const bad = await pool.grade({ source });
      assert.notEqual(bad.status, 'pass');
      const good = await pool.grade({ source: REFERENCE });
      assert.equal(good.status, 'pass', allMessages(good).slice(0, 500));
      const wrong = await pool.grade({ source: STARTER });
      assert.equal(wrong.status, 'fail');
      graded += 3;
    }
    // A syntax error holding a secret, then a submission that looks for it
    // everywhere it can (its heap, linecache, sys.modules, JavaScript's globals)
    // and says what it found in every example test's message.
    const SECRET = 'SECRET-of-the-previous-learner-8d41';
    const syntax = await pool.grade({ source: `# ${SECRET}\ndef deliver_once(task, provider, kv, policy)\n    return "${SECRET}"\n` });
    assert.equal(syntax.status, 'error');
    const seeker = `import gc, linecache, sys
def _look():
    found = []
    for o in gc.get_objects():
        try:
            if isinstance(o, str) and "SECRET-of" in o and "_look" not in o:
                found.append(o[:80])
        except Exception:
            pass
    for v in list(linecache.cache.values()):
        found += [l for l in v[2] if "SECRET-of" in l and "_look" not in l]
    return found
def deliver_once(task, provider, kv, policy):
    raise ValueError("found: " + repr(_look()))
def next_step(task, result, now, policy, rng):
    raise ValueError("found: " + repr(_look()))
`;
    const seek = await pool.grade({ source: seeker, format: 'text' });
    assert.match(seek, /found: \[\]/);
    assert.ok(!seek.includes('8d41'), seek.slice(0, 500));
    graded += 2;
    assert.equal(pool.stats.graded, graded);
    // One process per submission (and the one started ahead for the next).
    assert.equal(pool.stats.spawned, graded + 1);
  } finally {
    await pool.close();
  }
});

test('no oracle in the sandbox: a submission that says every input it saw shows no hidden case in any report', LIMIT, async () => {
  const hiddenKeys = fs.readdirSync(path.join(WWW, '../hidden-tests/deliver-once'))
    .flatMap((f) => [...fs.readFileSync(path.join(WWW, '../hidden-tests/deliver-once', f), 'utf8').matchAll(/task = \{ key = "([^"]+)"/g)].map((m) => m[1]));
  assert.ok(hiddenKeys.length >= 4, hiddenKeys.join());
  for (const k of hiddenKeys) assert.ok(!lab.tests.map((t) => t.name).join().includes(k));
  // It keeps every argument of every call, and raises all of them every time.
  const teller = `SEEN = []
def _tell(*args):
    SEEN.append(repr(args))
    raise ValueError("seen so far: " + " | ".join(SEEN))
def deliver_once(task, provider, kv, policy):
    print("printing:", task.key)
    _tell(task, policy)
def next_step(task, result, now, policy, rng):
    print("printing:", task.key)
    _tell(task, result, now, policy)
`;
  const pool = createGradingPool({ jobs: 1 });
  try {
    await pool.ready;
    const out = await pool.gradeMany({ source: teller, formats: ['json', 'text', 'exercism', 'gradescope'] });
    const line = out.json;
    assert.equal(line.status, 'fail');
    // It did run and tell (an example's message has its own task's key)...
    assert.match(allMessages(line), /seen so far: .*order-1042:shipped/);
    // ...and no hidden input is in any format of the report.
    for (const [format, report] of Object.entries(out)) {
      const text = format === 'json' ? jsonText(report) : report;
      for (const k of hiddenKeys) assert.ok(!text.includes(k), `${format} shows the hidden key ${k}`);
    }
  } finally {
    await pool.close();
  }
});

// Issue 28: a submission that passes or fails each hidden test on one bit of that
// test's task key reads the keys out of its reports. With hidden inputs drawn per
// submission, that bit is a fresh coin for every submission.
const LEAK = `
def _leak(task):
    if task.key != "order-1042:shipped" and sum(map(ord, task.key)) % 2:
        raise ValueError("one bit of the task key")
`;
const leaker = (tail) => REFERENCE
  .replace('def deliver_once(task, provider, kv, policy):\n', 'def deliver_once(task, provider, kv, policy):\n    _leak(task)\n')
  .replace('def next_step(task, result, now, policy, rng):\n', 'def next_step(task, result, now, policy, rng):\n    _leak(task)\n') + LEAK + tail;
const hiddenBits = (line) => line.tests.filter((t) => t.kind === 'hidden').map((t) => (t.status === 'pass' ? 1 : 0)).join('');
const fixedHiddenKeys = () => fs.readdirSync(path.join(WWW, '../hidden-tests/deliver-once'))
  .flatMap((f) => [...fs.readFileSync(path.join(WWW, '../hidden-tests/deliver-once', f), 'utf8').matchAll(/key = "(?:sent:)?([^"]+)"/g)].map((m) => m[1]));

test('hidden inputs are drawn per submission: the key-bit leak reads a new coin each time, the same file and secret replay, no report shows a key or the seed', LIMIT, async () => {
  const dir = path.join(TMP, 'leak');
  const a = write(dir, 'a.py', leaker(''));
  const b = write(dir, 'b.py', leaker('# the same code, another submission\n'));
  assert.ok(leaker('').split('    _leak(task)\n').length === 3);
  const secret = write(dir, 'course.secret', 'a course secret, 32 bytes or so\n');
  const lines = (r) => r.stdout.trim().split('\n').map((l) => JSON.parse(l));

  // The hidden cases as written: both submissions read the same bits (the leak).
  let r = await grade(['--format', 'json', '--hidden-seed', 'none', a, b]);
  const [fa, fb] = lines(r);
  assert.equal(hiddenBits(fa), hiddenBits(fb));
  assert.equal(fa.hidden_seed, undefined);

  // Drawn from the secret and the source: another submission, other bits.
  r = await grade(['--format', 'json', '--secret-file', secret, a, b]);
  assert.equal(r.code, 1, r.stderr);
  const [va, vb] = lines(r);
  for (const l of [va, vb]) {
    assert.ok(Number.isInteger(l.hidden_seed) && l.hidden_seed >= 0 && l.hidden_seed <= 0xffffffff, JSON.stringify(l));
    assert.equal(l.replay, `./lab grade --lab deliver-once --seed ${l.seed} --hidden-seed ${l.hidden_seed} solution.py`);
    assert.equal(l.tests.length, 23);
  }
  assert.notEqual(va.hidden_seed, vb.hidden_seed);
  assert.notEqual(hiddenBits(va), hiddenBits(vb));
  assert.notEqual(hiddenBits(va), hiddenBits(fa));

  // The same file and secret: the same seed and report; the seed alone replays it.
  const strip = ({ duration_ms: _d, ...rest }) => rest;
  r = await grade(['--format', 'json', '--secret-file', secret, a]);
  assert.deepEqual(strip(lines(r)[0]), strip(va));
  r = await grade(['--format', 'json', '--hidden-seed', String(va.hidden_seed), a]);
  assert.deepEqual(strip(lines(r)[0]), strip(va));
  // No secret file: a random secret for the run, so a seed of its own.
  r = await grade(['--format', 'json', a]);
  assert.notEqual(lines(r)[0].hidden_seed, va.hidden_seed);

  // The learner's files carry neither a hidden key nor the seed; the staff's line names it.
  const keys = [...new Set(fixedHiddenKeys())];
  assert.ok(keys.length >= 5, keys.join());
  for (const format of ['exercism', 'gradescope', 'prairielearn']) {
    const out = path.join(dir, `out-${format}`);
    r = await grade(['--format', format, '--out', out, '--secret-file', secret, a]);
    assert.equal(r.code, 1, r.stderr);
    assert.match(r.stdout, new RegExp(`a\\.py: fail \\d+/23 -> .* \\(hidden seed ${va.hidden_seed}\\)`));
    const text = fs.readFileSync(path.join(out, 'a.json'), 'utf8');
    assert.ok(!text.includes(String(va.hidden_seed)), `${format} shows the hidden seed`);
    assert.ok(!text.includes('hidden-seed'), `${format} shows a staff replay`);
    for (const k of keys) assert.ok(!text.includes(k), `${format} shows the hidden key ${k}`);
  }
  r = await grade(['--format', 'text', '--secret-file', secret, a]);
  assert.ok(r.stdout.includes(`replay with: ./lab grade --lab deliver-once --seed 1042 --hidden-seed ${va.hidden_seed} ${a}\n`), r.stdout);
  for (const k of keys) assert.ok(!r.stdout.includes(k), `text shows the hidden key ${k}`);
});

// Issue 39: staff see why a hidden test failed (its message, the shrunk
// counterexample), learners only that it did. One CLI run and two pool runs: the
// platforms' formats are made from the staff's own run, so they are what is at stake.
test('staff see why: ./lab grade\'s json and text carry a failed hidden test\'s message; every learner format, and the pool\'s default, none', LIMIT, async () => {
  const source = REFERENCE.replace('max(policy.min_delay_s, rng.uniform(0, cap))', 'rng.uniform(0, cap)');
  assert.notEqual(source, REFERENCE, 'the mutation applies');
  const f = write(path.join(TMP, 'why'), 'nofloor.py', source);
  // Every run grades the hidden cases as written (the pool's default), so the
  // messages compared below are the same run's.
  const r = await grade(['--format', 'json', '--hidden-seed', 'none', f]);
  assert.equal(r.code, 1, r.stderr);
  const line = JSON.parse(r.stdout);
  assert.ok(line.tests.filter((t) => t.kind === 'example').every((t) => t.status === 'pass'), 'a hidden-only mistake');
  const failed = line.tests.filter((t) => t.kind === 'hidden' && t.status !== 'pass');
  assert.ok(failed.length > 0);
  for (const t of failed) assert.ok(t.message?.length > 0, `${t.name}: no message in the staff's line`);
  assert.ok(failed.some((t) => t.message.includes('Smallest failing input found')), failed.map((t) => t.message).join('\n---\n'));
  // The first line of each hidden message: what no learner may read.
  const secrets = failed.map((t) => t.message.split('\n')[0]);
  const platforms = ['exercism', 'gradescope', 'gradescope-published', 'gradescope-hidden', 'prairielearn'];
  const seen = { junit: junitXml([line]) };
  const pool = createGradingPool({ jobs: 1 });
  try {
    await pool.ready;
    const staff = await pool.gradeMany({ source, formats: ['json', 'text', ...platforms], audience: 'staff' });
    assert.deepEqual(staff.json.tests, line.tests, 'the CLI\'s line is the staff\'s');
    assert.ok(staff.text.includes('Smallest failing input found'), staff.text.slice(0, 3000));
    for (const s of secrets) assert.ok(staff.text.includes(s), `the staff's text lacks ${s}`);
    for (const p of platforms) seen[p] = staff[p];
    // What serve --grading and the queue ask for: the learner's, by default.
    const learner = await pool.gradeMany({ source, formats: ['json', 'text'] });
    assert.deepEqual(learner.json.tests.map((t) => t.status), line.tests.map((t) => t.status));
    seen['pool json'] = jsonText(learner.json);
    seen['pool text'] = learner.text;
    await assert.rejects(pool.gradeMany({ source, audience: 'teacher' }), /unknown audience teacher/);
  } finally {
    await pool.close();
  }
  for (const [format, text] of Object.entries(seen)) {
    assert.ok(!text.includes('Smallest failing input'), `${format} shows a hidden test's counterexample`);
    for (const s of secrets) assert.ok(!text.includes(s), `${format} shows a hidden test's message: ${s}`);
  }
});

test('--hidden-statuses aggregate: every format shows how many hidden tests passed, none by name', LIMIT, async () => {
  const dir = path.join(TMP, 'aggregate');
  const a = write(dir, 'a.py', leaker(''));
  const names = lab.tests.filter((t) => t.kind === 'hidden').map((t) => t.name);
  assert.equal(names.length, 20);
  let r = await grade(['--format', 'json', '--hidden-seed', '7', '--hidden-statuses', 'aggregate', a]);
  const line = JSON.parse(r.stdout);
  const each = JSON.parse((await grade(['--format', 'json', '--hidden-seed', '7', a])).stdout);
  const passed = each.tests.filter((t) => t.kind === 'hidden' && t.status === 'pass').length;
  assert.deepEqual(line.tests, [
    ...each.tests.filter((t) => t.kind === 'example'),
    { name: `hidden tests: ${passed} of 20 passed`, kind: 'hidden', status: passed === 20 ? 'pass' : 'fail' },
  ]);
  for (const k of ['passed', 'failed', 'total', 'score', 'max_score']) assert.equal(line[k], each[k], k);
  assert.equal(line.replay, './lab grade --lab deliver-once --seed 1042 --hidden-seed 7 --hidden-statuses aggregate solution.py');
  for (const format of ['exercism', 'gradescope', 'prairielearn', 'text']) {
    const out = path.join(dir, `out-${format}`);
    r = await grade(['--format', format, '--out', out, '--hidden-seed', '7', '--hidden-statuses', 'aggregate', a]);
    assert.equal(r.code, 1, r.stderr);
    const text = format === 'text' ? r.stdout : fs.readFileSync(path.join(out, 'a.json'), 'utf8');
    assert.ok(text.includes(`hidden tests: ${passed} of 20 passed`), `${format}: ${text.slice(0, 400)}`);
    for (const n of names) assert.ok(!text.includes(n), `${format} names the hidden test ${n}`);
  }
  // A file that cannot be graded: its one status, and still no name.
  const empty = write(dir, 'empty.py', '');
  r = await grade(['--format', 'json', '--hidden-statuses', 'aggregate', empty]);
  const err = JSON.parse(r.stdout);
  assert.equal(err.status, 'error');
  assert.deepEqual(err.tests.at(-1), { name: 'hidden tests: 0 of 20 passed', kind: 'hidden', status: 'error' });
});

test('the hidden seed\'s usage errors', LIMIT, async () => {
  const dir = path.join(TMP, 'hidden-usage');
  const ok = write(dir, 'ok.py', REFERENCE);
  const short = write(dir, 'short.secret', 'too short');
  for (const [args, message] of [
    [['--hidden-seed', 'x', ok], /--hidden-seed needs a whole number/],
    [['--hidden-seed', String(2 ** 32), ok], /--hidden-seed must be at most 4294967295, or none/],
    [['--hidden-seed', '1', '--secret-file', short, ok], /give one of them/],
    [['--secret-file', short, ok], /short\.secret: a secret needs at least 16 bytes, it has 9/],
    [['--secret-file', path.join(dir, 'missing'), ok], /missing: no such file/],
    [['--hidden-statuses', 'some', ok], /--hidden-statuses must be each or aggregate, not some/],
  ]) {
    const r = await grade(args);
    assert.equal(r.code, 2, `${args.join(' ')}: ${r.stderr}`);
    assert.match(r.stderr, message, args.join(' '));
  }
});

test('a withdrawn submission (AbortSignal) leaves the queue or has its sandbox killed at once', LIMIT, async () => {
  const loop = fs.readFileSync(path.join(HOSTILE, 'loop_in_function.py'), 'utf8');
  const pool = createGradingPool({ jobs: 1 });
  try {
    await pool.ready;
    const running = new AbortController();
    const queued = new AbortController();
    const a = pool.grade({ source: loop, signal: running.signal });
    const b = pool.grade({ source: REFERENCE, signal: queued.signal });
    await new Promise((r) => setTimeout(r, 500));
    assert.equal(pool.queued(), 2);
    queued.abort();
    await assert.rejects(b, { name: 'AbortError' });
    assert.equal(pool.queued(), 1);
    const t0 = performance.now();
    running.abort();
    await assert.rejects(a, { name: 'AbortError' });
    assert.ok(performance.now() - t0 < 1000, 'the running submission took over 1 s to end');
    assert.equal(pool.queued(), 0);
    assert.equal((await pool.grade({ source: REFERENCE })).status, 'pass');
    const pre = new AbortController();
    pre.abort();
    await assert.rejects(pool.grade({ source: REFERENCE, signal: pre.signal }), { name: 'AbortError' });
  } finally {
    await pool.close();
  }
});

test('a submission that runs longer than a sandbox may take to start does not cost the next one its sandbox', LIMIT, async () => {
  // The slot's next sandbox starts and is ready (its "ready" written to its pipe)
  // while the thread grades; its start is timed from when the thread waits for it.
  // Timed from its spawn, it was killed at 4 s with its "ready" still in the pipe,
  // and the next submission was handed a dead sandbox.
  const loop = fs.readFileSync(path.join(HOSTILE, 'loop_in_function.py'), 'utf8');
  const pool = createGradingPool({ jobs: 1, timeoutS: 9, bootLimitS: 4 });
  try {
    await pool.ready;
    const slow = await pool.grade({ source: loop });
    assert.equal(slow.status, 'fail');
    assert.ok(slow.tests.some((t) => t.status === 'timeout'), JSON.stringify(slow).slice(0, 500));
    const next = await pool.grade({ source: REFERENCE });
    assert.equal(next.status, 'pass', JSON.stringify(next).slice(0, 500));
  } finally {
    await pool.close();
  }
});
