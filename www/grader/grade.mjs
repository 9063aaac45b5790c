#!/usr/bin/env node
// ./lab grade: grades learners' files again, where they cannot touch the grader.
// Same engine, WASM grader, solution_runner.py and Pyodide as the page, hosted by Node:
// the coordinator (this file, with pool.mjs) runs no learner code; sandbox.mjs
// processes do. See www/grader/README.md.
import fs from 'node:fs';
import path from 'node:path';
import { firstLab } from '../host/engine.mjs';
import { loadGrader } from '../host/node_host.mjs';
import { hiddenSeedOf, newSecret, readSecret, SecretError, staffReplay } from './hidden.mjs';
import { jsonText, terminalSafe } from './output.mjs';
import { createGradingPool } from './pool.mjs';
import { pyFilesIn, readSubmission } from './submissions.mjs';
import { callerPath, parseOrExit, usageExit } from './args.mjs';
import { GRADE } from './commands.mjs';
import { ENGINE_FORMATS, PLATFORM_FORMATS } from './formats.mjs';
import { csvHeader, csvRow, junitXml, rollupTable } from './gradebook.mjs';

const usage = (message) => usageExit(GRADE, message, 'grade');

/** The command line (commands.mjs GRADE, the one table of its options), checked. */
function parseArgs(argv) {
  const { values: v, positionals } = parseOrExit(GRADE, argv, 'grade');
  const o = {
    lab: v.lab ?? null, format: v.format ?? null, seed: v.seed ?? null, hiddenSeed: v['hidden-seed'], secretFile: v['secret-file'] ?? null,
    hiddenStatuses: v['hidden-statuses'], timeout: v.timeout ?? null, jobs: v.jobs, memory: v.memory, out: v.out ?? null,
    sandbox: !v['no-sandbox'], files: positionals,
  };
  if (o.hiddenSeed !== undefined && o.secretFile) usage('--hidden-seed replays one seed, --secret-file draws one per submission: give one of them');
  if (!o.format) o.format = process.stdout.isTTY ? 'text' : 'json';
  if (PLATFORM_FORMATS.includes(o.format) && !o.out) usage(`--format ${o.format} writes one results.json per submission: give --out DIR`);
  return o;
}

// Each file as it was named (what the reports and the replay command show), read
// from the folder the command was run in (args.mjs callerPath: ./lab works in its
// checkout). --out and --secret-file come parsed to absolute paths the same way.
function collect(files) {
  const list = [];
  for (const f of files) {
    let st;
    try { st = fs.statSync(callerPath(f)); } catch { usage(`${f}: no such file or directory`); }
    if (st.isDirectory()) {
      const py = pyFilesIn(callerPath(f));
      if (!py.length) usage(`${f}: the directory has no .py files`);
      list.push(...py.map((n) => path.join(f, n)));
    } else list.push(f);
  }
  return list;
}

const o = parseArgs(process.argv.slice(2));
const files = collect(o.files);

// Which hidden inputs each submission gets (hidden.mjs): drawn from the secret and
// the submission, for a lab that can (its registry entry's hidden_variants).
const registry = new (await loadGrader()).Grader();
const labId = o.lab ?? firstLab(registry);
let variants = false;
try {
  variants = JSON.parse(registry.lab(labId)).hidden_variants === true;
} catch {
  // An unknown lab: the pool says so, as before.
}
if (!variants && typeof o.hiddenSeed === 'number') usage(`--hidden-seed: lab ${labId} draws no hidden inputs per submission`);
let secret = null;
if (variants && o.hiddenSeed === undefined) {
  try {
    secret = o.secretFile ? readSecret(o.secretFile) : newSecret();
  } catch (e) {
    if (e instanceof SecretError) usage(`--secret-file ${e.message}`);
    throw e;
  }
}
/** A submission's hidden seed, or null for the hidden cases as written. */
function hiddenSeedFor(read) {
  if (!variants || o.hiddenSeed === 'none' || read.error !== undefined) return null;
  return typeof o.hiddenSeed === 'number' ? o.hiddenSeed : hiddenSeedOf(secret, labId, read.text);
}

/** The CLI's line with the staff's facts: the hidden seed after the seed, and the
 *  replay command that reproduces the report. */
function staffLine(line, hiddenSeed) {
  const out = {};
  for (const [k, v] of Object.entries(line)) {
    out[k] = k === 'replay' ? staffReplay(v, hiddenSeed, o.hiddenStatuses) : v;
    if (k === 'seed' && hiddenSeed !== null) out.hidden_seed = hiddenSeed;
  }
  return out;
}
if (o.out) fs.mkdirSync(o.out, { recursive: true });

for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP']) process.on(sig, () => process.exit(130));
let pool;
try {
  // A fork server pays for its own start only when there are more files than slots.
  pool = createGradingPool({
    jobs: Math.min(o.jobs, files.length), timeoutS: o.timeout ?? undefined, memoryMb: o.memory, sandbox: o.sandbox, lab: o.lab ?? null,
    fork: files.length > Math.min(o.jobs, files.length),
  });
  await pool.ready;
} catch (e) {
  process.stderr.write(`grade: the grader could not start: ${e.message}\n`);
  process.exit(2);
}

// A progress bar on stderr for batches on a terminal, on a line of its own: it is
// cleared before anything else is written (a report on stdout, the summary), drawn
// again after it, and cleared for good at the end, so no bar is left in the output.
const tty = process.stderr.isTTY && files.length > 1;
let done = 0;
let barShown = false;
function clearBar() {
  if (barShown) process.stderr.write('\r\x1b[2K');
  barShown = false;
}
function progress() {
  if (!tty || done === files.length) return clearBar();
  const w = 30;
  const k = Math.round((done / files.length) * w);
  process.stderr.write(`\r\x1b[2K[${'#'.repeat(k)}${'.'.repeat(w - k)}] ${done}/${files.length}`);
  barShown = true;
}
progress();

const outName = new Map();
function outPath(file) {
  let base = path.basename(file).replace(/\.py$/, '');
  let name = `${base}.json`;
  for (let n = 2; outName.has(name); n++) name = `${base}-${n}.json`;
  outName.set(name, file);
  return path.join(o.out, name);
}

const results = new Array(files.length);
let printed = 0;
const summary = { pass: 0, fail: 0, error: 0 };
/** Every file's line, in the order of the files: the roll-up table and junit are made of them. */
const lines = [];

function flush() {
  // Reports come out in the order of the files, whatever order they finish in.
  let out = '';
  while (printed < files.length && results[printed]) {
    const { file, line, text } = results[printed++];
    summary[line.status] = (summary[line.status] || 0) + 1;
    lines.push(line);
    if (o.format === 'json') out += `${jsonText(line)}\n`;
    else if (o.format === 'text') out += textBlock(file, line, text);
    else if (o.format === 'csv') out += csvRow(line);
    else if (o.format === 'junit') continue; // one document, at the end
    else {
      const p = outPath(file);
      fs.writeFileSync(p, text);
      const seen = line.hidden_seed === undefined ? '' : ` (hidden seed ${line.hidden_seed})`;
      out += `${terminalSafe(file)}: ${line.status} ${line.passed}/${line.total} -> ${terminalSafe(p)}${seen}\n`;
    }
  }
  if (out) {
    clearBar();
    process.stdout.write(out);
  }
}

// What reaches a terminal carries no control sequence: the engine's text report
// escapes them itself (report.rs terminal_safe), a file name gets the same here
// (output.mjs terminalSafe), and a JSON line is output.mjs's jsonText.

function textBlock(file, line, text) {
  const rule = '─'.repeat(Math.min(72, Math.max(20, file.length + 4)));
  return `${rule}\n${terminalSafe(file)}  (${line.duration_ms} ms)\n${text.replace(/\s*$/, '')}\n\n`;
}

/** The file as a shell word: the replay command names the file itself, ready to paste. */
function shellWord(file) {
  return /^[\w@%+=:,./-]+$/.test(file) ? file : `'${file.replaceAll("'", "'\\''")}'`;
}

async function gradeOne(i) {
  const file = files[i];
  const read = readSubmission(callerPath(file));
  // csv and junit are made from the json line (gradebook.mjs); the text and the
  // platforms' formats are the engine's.
  const formats = ENGINE_FORMATS.includes(o.format) && o.format !== 'json' ? ['json', o.format] : ['json'];
  const hiddenSeed = hiddenSeedFor(read);
  const hidden = { seed: hiddenSeed, statuses: o.hiddenStatuses };
  const t0 = performance.now();
  // The staff's report: its json and text carry each hidden test's message (the
  // platforms' formats stay the learner's, the engine sees to it).
  const out = read.error !== undefined
    ? await pool.errorReports({ lab: o.lab, seed: o.seed, message: read.error, formats, hidden, audience: 'staff' })
    : await pool.gradeMany({ lab: o.lab, source: read.text, seed: o.seed, formats, hidden, audience: 'staff' });
  const engineLine = out.json; // the pool's line (an object), serialised once, by flush()
  const line = staffLine(engineLine, hiddenSeed);
  line.file = file;
  if (line.duration_ms == null) line.duration_ms = Math.round(performance.now() - t0);
  // The text report is the staff's here: its replay line gets the hidden seed too,
  // and names the file graded (the engine's says solution.py, the learner's name for it).
  // The platforms' files are the learners': they stay as the engine made them.
  let text = formats.length > 1 ? out[o.format] : null;
  if (o.format === 'text') {
    const replay = line.replay.replace(/ solution\.py$/, ` ${terminalSafe(shellWord(file))}`);
    text = text.split(engineLine.replay).join(replay);
  }
  results[i] = { file, line, text };
  done++;
  progress();
  flush();
}

if (o.format === 'csv') process.stdout.write(csvHeader());
let code = 0;
try {
  await Promise.all(files.map((_, i) => gradeOne(i)));
} catch (e) {
  clearBar();
  process.stderr.write(`grade: ${e.message}\n`);
  code = 2;
}
await pool.close();
clearBar();
if (code === 0) {
  const n = files.length;
  // The command's wall time: from the process's start (performance's time origin),
  // the grader's start-up included.
  const secs = (performance.now() / 1000).toFixed(1);
  const line = `${n} submission${n === 1 ? '' : 's'}: ${summary.pass} pass, ${summary.fail} fail, ${summary.error} error (${secs} s)`;
  if (o.format === 'junit') process.stdout.write(junitXml(lines));
  if (o.format === 'text') process.stdout.write(`${rollupTable(lines)}\n${line}\n`);
  else if (PLATFORM_FORMATS.includes(o.format)) process.stdout.write(`${line}\n`);
  else process.stderr.write(`${line}\n`); // json, csv, junit: stdout is the document
  code = summary.pass === n ? 0 : 1;
}
process.stdout.write('', () => process.exit(code));
