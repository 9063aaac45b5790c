// The staff's output of ./lab grade: the one list of formats, csv, junit, the text
// format's roll-up table, the progress bar, the summary's time and the replay hint.
// Run: cd www && node --test grader/test/formats.test.mjs   (needs www/pkg; the XML is
// parsed by CPython's expat, the bar drawn on a pty by util-linux's script)
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { loadGrader } from '../../host/node_host.mjs';
import { ENGINE_FORMATS, FORMAT_NAMES, PLATFORM_FORMATS, REPORT_FORMATS } from '../formats.mjs';
import { FORMATS as POOL_FORMATS } from '../pool.mjs';
import { CSV_COLUMNS, HIDDEN_MESSAGE, junitXml } from '../gradebook.mjs';
import { noProcessLeftAfterTests } from '../fixtures/leftovers.mjs';

noProcessLeftAfterTests();

const WWW = fileURLToPath(new URL('../../', import.meta.url));
const GRADE = path.join(WWW, 'grader/grade.mjs');
const TMP = fs.mkdtempSync(path.join(os.tmpdir(), 'delivery-lab-formats-test-'));
fs.chmodSync(TMP, 0o755); // the sandbox probe runs as a sandbox uid (or nobody)
const DIR = path.join(TMP, 'class');
const LIMIT = { timeout: 150_000 };
const PYTHON = fs.existsSync('/usr/bin/python3') ? '/usr/bin/python3' : 'python3';

let lab;
/** file -> its json line, from one --format json run over DIR. */
let JSON_LINES;
const FILES = {};

function grade(args, { prefix = [] } = {}) {
  return new Promise((resolve) => {
    const argv = [...prefix, process.execPath, GRADE, ...args];
    const t0 = performance.now();
    const child = spawn(argv[0], argv.slice(1), { stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => { stdout += d; });
    child.stderr.on('data', (d) => { stderr += d; });
    child.on('exit', (code) => resolve({ code, stdout, stderr, wallS: (performance.now() - t0) / 1000 }));
  });
}

before(async () => {
  lab = JSON.parse(new (await loadGrader()).Grader().lab('deliver-once'));
  fs.mkdirSync(DIR);
  const put = (name, text) => { FILES[name] = path.join(DIR, name); fs.writeFileSync(FILES[name], text); };
  put('alice.py', lab.reference_py);
  put('bob.py', lab.starter_py);
  put('carol.py', '');
  // A name a spreadsheet would run as a formula, with a comma and a quote; and an
  // example whose message holds what XML and CSV must escape.
  put('=1+1, "x".py', lab.reference_py);
  const raising = 'def deliver_once(task, provider, kv, policy):\n    raise ValueError("<&> ]]> \\x1b[2J \\x00 \\uffff")\n'
    + 'def next_step(task, result, now, policy, rng):\n    return ("drop", None)\n';
  put('eve.py', raising);
  const r = await grade(['--format', 'json', DIR]);
  assert.equal(r.code, 1, r.stderr);
  JSON_LINES = new Map(r.stdout.trim().split('\n').map((l) => JSON.parse(l)).map((l) => [l.file, l]));
  assert.equal(JSON_LINES.size, 5);
});
after(() => fs.rmSync(TMP, { recursive: true, force: true }));

/** RFC 4180, strictly: quoted fields with "" for a quote; anything else is an error. */
function parseCsv(text) {
  const rows = [];
  let row = [];
  let i = 0;
  assert.ok(text.endsWith('\r\n'), 'the last row ends with CRLF');
  while (i < text.length) {
    let cell = '';
    if (text[i] === '"') {
      i++;
      for (;;) {
        const q = text.indexOf('"', i);
        assert.ok(q >= 0, 'an unclosed quote');
        cell += text.slice(i, q);
        if (text[q + 1] === '"') { cell += '"'; i = q + 2; } else { i = q + 1; break; }
      }
    } else {
      const end = text.slice(i).search(/,|\r\n/);
      cell = text.slice(i, i + end);
      assert.ok(!/["\r\n]/.test(cell), `a bare field holds a quote or line break: ${cell}`);
      i += end;
    }
    row.push(cell);
    if (text[i] === ',') i++;
    else if (text.startsWith('\r\n', i)) { rows.push(row); row = []; i += 2; } else assert.fail(`junk after a field at ${i}: ${text.slice(i, i + 20)}`);
  }
  return rows;
}

const failedOf = (line) => line.tests.filter((t) => t.status !== 'pass').map((t) => t.name);

test('one list of report formats: the pool\'s, the platforms\' and the engine\'s are formats.mjs\'s', () => {
  assert.equal(POOL_FORMATS, ENGINE_FORMATS);
  assert.deepEqual(FORMAT_NAMES, REPORT_FORMATS.map((f) => f.name));
  assert.deepEqual(PLATFORM_FORMATS, ['exercism', 'gradescope', 'gradescope-published', 'gradescope-hidden', 'prairielearn']);
  // The engine renders each of its formats and refuses the others, naming exactly its list.
  return loadGrader().then(({ Grader }) => {
    const g = new Grader();
    for (const f of ENGINE_FORMATS) assert.ok(g.error_report('deliver-once', 1, 'x', f).length > 0, f);
    for (const f of FORMAT_NAMES.filter((n) => !ENGINE_FORMATS.includes(n))) {
      let message = '';
      try { g.error_report('deliver-once', 1, 'x', f); } catch (e) { message = String(e.message ?? e); }
      const m = /use (.+)$/.exec(message);
      assert.ok(m, `the engine made ${f}: ${message}`);
      assert.deepEqual(m[1].replace(' or ', ', ').split(', '), [...ENGINE_FORMATS], 'the engine\'s list is formats.mjs\'s');
    }
  });
  // (No other file lists them: www/grader/test/help.test.mjs checks grade's help names each.)
});

test('--format csv: a header and one row per file, six columns, the json lines\' figures and failed tests', LIMIT, async () => {
  const r = await grade(['--format', 'csv', DIR]);
  assert.equal(r.code, 1, r.stderr);
  const rows = parseCsv(r.stdout);
  assert.deepEqual(rows[0], [...CSV_COLUMNS]);
  assert.deepEqual(CSV_COLUMNS, ['file', 'lab', 'score', 'max', 'status', 'failed_tests']);
  assert.equal(rows.length, 1 + JSON_LINES.size);
  for (const row of rows) assert.equal(row.length, 6, row.join('|'));
  const byFile = new Map(rows.slice(1).map((r) => [r[0], r]));
  for (const [file, line] of JSON_LINES) {
    const row = byFile.get(file); // a path: it starts with /, never a formula's character
    assert.ok(row, `no row for ${file}: ${[...byFile.keys()]}`);
    assert.deepEqual(row.slice(1), [line.lab, String(line.score), String(line.max_score), line.status, failedOf(line).join('; ')], file);
  }
  assert.deepEqual(rows.slice(1).map((r) => r[4]), [...JSON_LINES.values()].map((l) => l.status), 'in the order of the files');
  assert.equal(byFile.get(FILES['alice.py'])[5], '');
  assert.match(r.stderr, /^5 submissions: 2 pass, 2 fail, 1 error \(\d+\.\d s\)$/m);
  assert.doesNotMatch(r.stdout, /hidden.seed/);
});

test('the leading = of a file name is quoted out (a csv opened in a spreadsheet runs no formula)', LIMIT, async () => {
  // Given as a bare name (graded from its folder), the file's name starts with =.
  const inside = spawnSync(process.execPath, [GRADE, '--format', 'csv', '=1+1, "x".py'], { cwd: DIR, encoding: 'utf8' });
  assert.equal(inside.status, 0, inside.stderr);
  assert.equal(inside.stdout.split('\r\n')[1].slice(0, 18), '"\'=1+1, ""x"".py",');
  assert.equal(parseCsv(inside.stdout)[1][0], '\'=1+1, "x".py');
});

/** The project venv's Python, with pandas (pyproject.toml's gradebook group). */
const VENV_PYTHON = path.join(WWW, '../.venv/bin/python');

/** `text` as each reader reads it: Python's csv module and pandas, each splitting at
 *  ',' and at ';' (Excel in many locales); every cell a string, rows as read. */
function readCsvEach(text) {
  const script = `
import csv, io, json, sys
import pandas as pd
text = sys.stdin.read()
out = {}
for sep in (",", ";"):
    out["csv" + sep] = [row for row in csv.reader(io.StringIO(text, newline=""), delimiter=sep)]
    frame = pd.read_csv(io.StringIO(text), sep=sep, header=None, names=list(range(64)), dtype=str, keep_default_na=False)
    out["pandas" + sep] = [[c for c in row if c != ""] for row in frame.values.tolist()]
json.dump(out, sys.stdout)
`;
  assert.ok(fs.existsSync(VENV_PYTHON), `no project venv at ${VENV_PYTHON}: ./lab makes it (need_venv), with pandas from pyproject.toml's gradebook group`);
  const r = spawnSync(VENV_PYTHON, ['-c', script], { input: text, encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  return JSON.parse(r.stdout);
}

/** What a spreadsheet takes for a formula: a cell that starts with one of these. */
const FORMULA = /^[=+\-@\t\r\uff1d\uff0b\uff0d\uff20]/;

test('csv: no reader, at \',\' or at \';\', sees a formula in a learner\'s file name; the \',\' readers read every field back', LIMIT, async () => {
  // Names a spreadsheet that splits at ';' would run as formulas if they were bare:
  // the whole name, and what follows a ';' in it.
  const names = ['=1+1;x.py', 'a;=1+1.py', '+1;@SUM(A1).py', '@cmd.py', '\uff1d1+1.py', 'b"c,;=d.py', '\t=1.py'];
  const dir = path.join(TMP, 'formulas');
  fs.mkdirSync(dir);
  for (const n of names) fs.writeFileSync(path.join(dir, n), n === 'a;=1+1.py' ? lab.starter_py : lab.reference_py);
  // Graded from their folder by bare names, as a staff member would: the names start the cells.
  const r = spawnSync(process.execPath, [GRADE, '--format', 'csv', ...names], { cwd: dir, encoding: 'utf8' });
  assert.equal(r.status, 1, r.stderr);
  const read = readCsvEach(r.stdout);
  for (const [reader, rows] of Object.entries(read)) {
    for (const row of rows) for (const cell of row) assert.doesNotMatch(cell, FORMULA, `${reader} reads a formula: ${JSON.stringify(cell)} in ${JSON.stringify(row)}`);
  }
  const shown = (n) => (FORMULA.test(n) ? `'${n}` : n);
  for (const reader of ['csv,', 'pandas,']) {
    const rows = read[reader];
    assert.deepEqual(rows[0], [...CSV_COLUMNS], reader);
    assert.deepEqual(rows.slice(1).map((row) => row[0]), names.map(shown), reader);
    for (const row of rows.slice(1)) {
      assert.equal(row[1], 'deliver-once', reader);
      assert.equal(row[4], row[2] === row[3] ? 'pass' : 'fail', `${reader}: ${row}`);
    }
    const starter = rows[1 + names.indexOf('a;=1+1.py')];
    assert.equal(starter[4], 'fail');
    assert.ok(starter[5].split('; ').length > 1, `${reader}: the starter's failed tests: ${starter[5]}`);
  }
  // Read at ';', each row's first cell still starts with the whole name as the file
  // wrote it (quoted, so its own ';' split nothing).
  for (const reader of ['csv;', 'pandas;']) {
    const firsts = read[reader].slice(1).map((row) => row[0]);
    names.forEach((n, i) => assert.ok(firsts[i].startsWith(`${shown(n)},"deliver-once",`), `${reader}: ${firsts[i]}`));
  }
});

/** The JUnit document as CPython's expat reads it (strict XML 1.0), summed up. */
function parseJunit(xml) {
  const script = `
import json, sys, xml.etree.ElementTree as ET
root = ET.fromstring(sys.stdin.buffer.read())
out = {"tag": root.tag, "attrib": root.attrib, "suites": []}
for s in root:
    cases = []
    for c in s.iter("testcase"):
        f = [{"tag": x.tag, "type": x.get("type"), "message": x.get("message"), "text": x.text} for x in c if x.tag in ("failure", "error")]
        cases.append({"name": c.get("name"), "classname": c.get("classname"), "outcome": f})
    props = {p.get("name"): p.get("value") for p in s.iter("property")}
    err = s.find("system-err")
    out["suites"].append({"tag": s.tag, "attrib": s.attrib, "props": props, "cases": cases, "err": None if err is None else err.text})
json.dump(out, sys.stdout)
`;
  const r = spawnSync(PYTHON, ['-c', script], { input: xml, encoding: 'utf8' });
  assert.equal(r.status, 0, `not well-formed XML: ${r.stderr}`);
  return JSON.parse(r.stdout);
}

test('--format junit: well-formed XML, a testsuite per file, a testcase per test, failures and errors counted right', LIMIT, async () => {
  const r = await grade(['--format', 'junit', DIR]);
  assert.equal(r.code, 1, r.stderr);
  assert.ok(r.stdout.startsWith('<?xml version="1.0" encoding="UTF-8"?>\n<testsuites '));
  const doc = parseJunit(r.stdout);
  assert.equal(doc.tag, 'testsuites');
  const lines = [...JSON_LINES.values()];
  assert.equal(doc.suites.length, lines.length);
  const count = (l, statuses) => l.tests.filter((t) => statuses.includes(t.status)).length;
  let failures = 0;
  let errors = 0;
  lines.forEach((line, i) => {
    const s = doc.suites[i];
    assert.equal(s.tag, 'testsuite');
    assert.equal(s.attrib.name, line.file);
    assert.equal(Number(s.attrib.tests), line.tests.length);
    assert.equal(Number(s.attrib.failures), count(line, ['fail', 'timeout']), line.file);
    assert.equal(Number(s.attrib.errors), count(line, ['error']), line.file);
    assert.deepEqual(s.props, { lab: 'deliver-once', status: line.status, score: String(line.score), max_score: String(line.max_score), seed: String(line.seed) });
    assert.deepEqual(s.cases.map((c) => c.name), line.tests.map((t) => t.name));
    s.cases.forEach((c, k) => {
      const t = line.tests[k];
      assert.equal(c.classname, line.file);
      const want = { pass: [], fail: ['failure'], timeout: ['failure'], error: ['error'] }[t.status];
      assert.deepEqual(c.outcome.map((o) => o.tag), want, `${line.file}: ${t.name}`);
      if (!want.length) return;
      assert.equal(c.outcome[0].type, t.status);
      // Hidden tests' messages are withheld as on the platforms; examples carry the learner's.
      if (t.kind === 'hidden') assert.equal(c.outcome[0].text, HIDDEN_MESSAGE);
      else assert.ok(c.outcome[0].text.length > 0);
    });
    failures += count(line, ['fail', 'timeout']);
    errors += count(line, ['error']);
    if (line.status === 'error') assert.equal(s.err, line.message);
  });
  assert.equal(Number(doc.attrib.failures), failures);
  assert.equal(Number(doc.attrib.errors), errors);
  assert.equal(Number(doc.attrib.tests), lines.reduce((n, l) => n + l.tests.length, 0));
  assert.ok(failures > 0 && errors > 0, 'both kinds are exercised');
  // eve's example message, escaped for XML and a terminal: every character is there.
  const eve = doc.suites[lines.findIndex((l) => l.file === FILES['eve.py'])];
  const first = eve.cases[0].outcome[0];
  assert.match(first.text, /ValueError: <&> \]\]> \\x1b\[2J \\x00 \\uffff/);
  assert.doesNotMatch(r.stdout, /hidden.seed|--hidden-seed/, 'no staff replay or hidden seed: a platform may show it to learners');
});

test('junit: what XML 1.0 cannot hold (NUL, lone surrogates, U+FFFE/U+FFFF) is escaped, the rest kept', () => {
  const line = {
    file: 'a<&"\'>\ud800.py', lab: 'deliver-once', status: 'fail', score: 0, max_score: 2, seed: 1, duration_ms: 5,
    tests: [
      { name: 'ex <1> & "2"', kind: 'example', status: 'fail', message: 'got \u0000 \ud800 \udfff \ufffe \uffff ]]> \u{1F600} tab\there\nnext' },
      { name: 'secret', kind: 'hidden', status: 'timeout', message: 'never shown' },
    ],
  };
  const xml = junitXml([line]);
  const doc = parseJunit(xml);
  const [s] = doc.suites;
  assert.equal(s.attrib.name, 'a<&"\'>\\ud800.py');
  assert.deepEqual(s.cases.map((c) => c.name), ['ex <1> & "2"', 'secret']);
  assert.equal(s.cases[0].outcome[0].text, 'got \\x00 \\ud800 \\udfff \\ufffe \\uffff ]]> \u{1F600} tab\there\nnext');
  assert.equal(s.cases[1].outcome[0].text, HIDDEN_MESSAGE);
  assert.ok(!xml.includes('never shown'));
  assert.deepEqual([doc.attrib.tests, doc.attrib.failures, doc.attrib.errors], ['2', '2', '0']);
});

test('text: each file\'s report, then the roll-up table naming failed tests, then the summary; the replay names the real file', LIMIT, async () => {
  const r = await grade(['--format', 'text', DIR]);
  assert.equal(r.code, 1, r.stderr);
  const tableAt = r.stdout.search(/^file +score +status +failed tests$/m);
  assert.ok(tableAt > 0, r.stdout.slice(-2000));
  const afterTable = r.stdout.slice(tableAt).split('\n');
  // header, rule, one row per file in the order of the files, a blank line, the summary.
  const rows = afterTable.slice(2, 2 + JSON_LINES.size);
  [...JSON_LINES.values()].forEach((line, i) => {
    const row = rows[i];
    assert.ok(row.startsWith(line.file), `${row} / ${line.file}`);
    assert.match(row, new RegExp(` ${line.score}/${line.max_score} +${line.status}\\b`));
    const failed = failedOf(line);
    if (line.status === 'error') assert.ok(row.includes(line.message), row);
    else if (!failed.length) assert.match(row, /pass$/);
    else {
      for (const name of failed.slice(0, 3)) assert.ok(row.includes(name), `${row} names ${name}`);
      if (failed.length > 3) assert.ok(row.endsWith(`; +${failed.length - 3} more`), row);
    }
  });
  assert.match(afterTable.at(-2), /^5 submissions: 2 pass, 2 fail, 1 error \(\d+\.\d s\)$/);
  // Every report came before the table.
  for (const f of JSON_LINES.keys()) assert.ok(r.stdout.indexOf(f) < tableAt, f);
  const bob = JSON_LINES.get(FILES['bob.py']);
  assert.ok(r.stdout.includes(`replay with: ./lab grade --lab deliver-once --seed ${bob.seed} --hidden-seed `), r.stdout.slice(0, 3000));
  assert.match(r.stdout, new RegExp(`replay with: \\./lab grade --lab deliver-once --seed \\d+ --hidden-seed \\d+ ${FILES['bob.py'].replace(/[.]/g, '\\.')}\\n`));
  // A name the shell would split is quoted so the line pastes as it is.
  assert.ok(!r.stdout.includes(' solution.py\n'), 'a replay line still says solution.py');
});

/** What a terminal shows after `raw`: \r returns to the line's start, ESC[2K erases it. */
function rendered(raw) {
  const shown = [];
  for (const line of raw.replaceAll('\r\n', '\n').split('\n')) {
    let text = '';
    for (const part of line.split(/(\r|\x1b\[2K)/).filter(Boolean)) {
      if (part === '\x1b[2K') text = text.startsWith('\0') ? '\0' : '';
      else if (part === '\r') text = text.length ? `\0${text}` : text; // the next write overwrites from column 0
      else if (text.startsWith('\0')) text = part + text.slice(1 + part.length);
      else text += part;
    }
    shown.push(text.replace(/^\0/, ''));
  }
  return shown;
}

test('on a terminal the progress bar is drawn on stderr and cleared: no bar is left in what the terminal shows', LIMIT, async (t) => {
  const probe = spawnSync('script', ['--version'], { encoding: 'utf8' });
  if (probe.status !== 0) return t.skip('no util-linux script for a pty');
  const cmd = [process.execPath, GRADE, '--format', 'json', FILES['alice.py'], FILES['bob.py'], FILES['carol.py']].map((a) => `'${a}'`).join(' ');
  const pty = spawnSync('script', ['-qfec', `${cmd} 2>&1`, '/dev/null'], { encoding: 'utf8', timeout: 120_000 });
  assert.equal(pty.status, 1, pty.stderr);
  assert.match(pty.stdout, /\[#+\.*\] \d\/3/, 'a bar was drawn');
  const shown = rendered(pty.stdout);
  assert.deepEqual(shown.filter((l) => /\[[#.]+\] \d\/3/.test(l)), [], 'a bar is left on screen');
  const json = shown.filter((l) => l.startsWith('{'));
  assert.equal(json.length, 3);
  for (const l of json) JSON.parse(l);
  assert.match(shown.filter((l) => l.trim()).at(-1), /^3 submissions: 1 pass, 1 fail, 1 error \(\d+\.\d s\)$/);
});

test('the summary\'s time is the command\'s wall time, the grader\'s start included', LIMIT, async () => {
  const r = await grade(['--format', 'csv', FILES['alice.py']]);
  assert.equal(r.code, 0, r.stderr);
  const secs = Number(/\((\d+\.\d) s\)$/m.exec(r.stderr)[1]);
  assert.ok(secs <= r.wallS + 0.05, `${secs} s said, ${r.wallS.toFixed(2)} s measured`);
  assert.ok(secs >= r.wallS - 1.5, `${secs} s said, ${r.wallS.toFixed(2)} s measured: the start-up is left out`);
});
