#!/usr/bin/env node
// ./lab grade: grades learners' files again, where they cannot touch the grader.
// Same engine, WASM grader, bridge.py and Pyodide as the page, hosted by Node:
// the coordinator (this file, with pool.mjs) runs no learner code; sandbox.mjs
// processes do. See www/cli/README.md.
import fs from 'node:fs';
import path from 'node:path';
import { firstLab, SEED_MAX } from '../src/engine.mjs';
import { loadGrader } from '../src/node_host.mjs';
import { hiddenSeedOf, newSecret, readSecret, SecretError, staffReplay } from './hidden.mjs';
import { createGradingPool, jsonText, pyFilesIn, readSubmission, terminalSafe, FORMATS } from './pool.mjs';

const USAGE = `usage: ./lab grade [--lab ID] [--format text|json|exercism|gradescope|gradescope-published|gradescope-hidden|prairielearn]
                   [--seed N] [--hidden-seed N|none | --secret-file FILE] [--hidden-statuses each|aggregate]
                   [--timeout SECONDS] [--jobs N] [--memory MB] [--out DIR] [--no-sandbox] FILE_OR_DIR...
  --lab: the lab's id (default: the course's first lab). A directory means every .py
  file in it (sorted). The platforms' formats (exercism, gradescope*, prairielearn) need --out DIR.
  Hidden inputs are drawn per submission (labs that can): the hidden seed is a keyed hash of
  the secret in --secret-file (else a random one for this run) and the submission; staff
  output shows it, learner reports never. --hidden-seed N replays one; none: the fixed cases.
  --hidden-statuses aggregate: reports show only how many hidden tests passed.
  Exit code: 0 every submission passes, 1 any fails or errors, 2 usage error.`;

function usage(message) {
  process.stderr.write(`grade: ${message}\n${USAGE}\n`);
  process.exit(2);
}

function parseArgs(argv) {
  const o = { lab: null, format: null, seed: null, hiddenSeed: undefined, secretFile: null, hiddenStatuses: 'each', timeout: null, jobs: 1, memory: 512, out: null, sandbox: true, files: [] };
  const num = (name, v, { int = false, min = 0 } = {}) => {
    const n = Number(v);
    if (v === undefined || v === '' || !Number.isFinite(n) || (int && !Number.isInteger(n)) || n < min) usage(`${name} needs a ${int ? 'whole ' : ''}number${min ? ` of at least ${min}` : ''}, not ${v ?? 'nothing'}`);
    return n;
  };
  for (let i = 0; i < argv.length; i++) {
    let a = argv[i];
    let v;
    const eq = a.startsWith('--') ? a.indexOf('=') : -1;
    if (eq > 0) { v = a.slice(eq + 1); a = a.slice(0, eq); }
    const take = () => (v !== undefined ? v : argv[++i]);
    switch (a) {
      case '--lab': o.lab = take(); if (!o.lab) usage('--lab needs a lab id'); break;
      case '--format': o.format = take(); if (!FORMATS.includes(o.format)) usage(`--format must be one of ${FORMATS.join(', ')}, not ${o.format ?? 'nothing'}`); break;
      case '--seed': o.seed = num('--seed', take(), { int: true }); if (o.seed > SEED_MAX) usage(`--seed must be at most ${SEED_MAX}`); break;
      case '--hidden-seed': {
        const v = take();
        o.hiddenSeed = v === 'none' ? 'none' : num('--hidden-seed', v, { int: true });
        if (o.hiddenSeed !== 'none' && o.hiddenSeed > SEED_MAX) usage(`--hidden-seed must be at most ${SEED_MAX}, or none`);
        break;
      }
      case '--secret-file': o.secretFile = take(); if (!o.secretFile) usage('--secret-file needs a file'); break;
      case '--hidden-statuses': o.hiddenStatuses = take(); if (!['each', 'aggregate'].includes(o.hiddenStatuses)) usage(`--hidden-statuses must be each or aggregate, not ${o.hiddenStatuses ?? 'nothing'}`); break;
      case '--timeout': o.timeout = num('--timeout', take(), { min: 0.1 }); break;
      case '--jobs': o.jobs = num('--jobs', take(), { int: true, min: 1 }); break;
      case '--memory': o.memory = num('--memory', take(), { int: true, min: 64 }); break;
      case '--out': o.out = take(); if (!o.out) usage('--out needs a directory'); break;
      case '--no-sandbox': o.sandbox = false; break;
      case '-h': case '--help': process.stdout.write(`${USAGE}\n`); process.exit(0); break;
      case '--': o.files.push(...argv.slice(i + 1)); i = argv.length; break;
      default:
        if (a.startsWith('-') && a !== '-') usage(`unknown option ${a}`);
        o.files.push(argv[i]);
    }
  }
  if (!o.files.length) usage('no submission given: name .py files or directories');
  if (o.hiddenSeed !== undefined && o.secretFile) usage('--hidden-seed replays one seed, --secret-file draws one per submission: give one of them');
  if (!o.format) o.format = process.stdout.isTTY ? 'text' : 'json';
  if (!['json', 'text'].includes(o.format) && !o.out) usage(`--format ${o.format} writes one results.json per submission: give --out DIR`);
  return o;
}

function collect(files) {
  const list = [];
  for (const f of files) {
    let st;
    try { st = fs.statSync(f); } catch { usage(`${f}: no such file or directory`); }
    if (st.isDirectory()) {
      const py = pyFilesIn(f);
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
  pool = createGradingPool({ jobs: Math.min(o.jobs, files.length), timeoutS: o.timeout ?? undefined, memoryMb: o.memory, sandbox: o.sandbox });
  await pool.ready;
} catch (e) {
  process.stderr.write(`grade: the grader could not start: ${e.message}\n`);
  process.exit(2);
}

const tty = process.stderr.isTTY && files.length > 1;
let done = 0;
function progress() {
  if (!tty) return;
  const w = 30;
  const k = Math.round((done / files.length) * w);
  process.stderr.write(`\r[${'#'.repeat(k)}${'.'.repeat(w - k)}] ${done}/${files.length}`);
  if (done === files.length) process.stderr.write('\n');
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
const started = performance.now();

function flush() {
  // Reports come out in the order of the files, whatever order they finish in.
  while (printed < files.length && results[printed]) {
    const { file, line, text } = results[printed++];
    summary[line.status] = (summary[line.status] || 0) + 1;
    if (o.format === 'json') process.stdout.write(`${jsonText(line)}\n`);
    else if (o.format === 'text') process.stdout.write(textBlock(file, line, text));
    else {
      const p = outPath(file);
      fs.writeFileSync(p, text);
      const seen = line.hidden_seed === undefined ? '' : ` (hidden seed ${line.hidden_seed})`;
      process.stdout.write(`${terminalSafe(file)}: ${line.status} ${line.passed}/${line.total} -> ${terminalSafe(p)}${seen}\n`);
    }
  }
}

// What reaches a terminal carries no control sequence: the engine's text report
// escapes them itself (report.rs terminal_safe), a file name gets the same here
// (pool.mjs terminalSafe), and a JSON line is pool.mjs's jsonText.

function textBlock(file, line, text) {
  const rule = '─'.repeat(Math.min(72, Math.max(20, file.length + 4)));
  return `${rule}\n${terminalSafe(file)}  (${line.duration_ms} ms)\n${text.replace(/\s*$/, '')}\n\n`;
}

async function gradeOne(i) {
  const file = files[i];
  const read = readSubmission(file);
  const formats = o.format === 'json' ? ['json'] : ['json', o.format];
  const hiddenSeed = hiddenSeedFor(read);
  const hidden = { seed: hiddenSeed, statuses: o.hiddenStatuses };
  const t0 = performance.now();
  const out = read.error !== undefined
    ? await pool.errorReports({ lab: o.lab, seed: o.seed, message: read.error, formats, hidden })
    : await pool.gradeMany({ lab: o.lab, source: read.text, seed: o.seed, formats, hidden });
  const engineLine = JSON.parse(out.json);
  const line = staffLine(engineLine, hiddenSeed);
  line.file = file;
  if (line.duration_ms == null) line.duration_ms = Math.round(performance.now() - t0);
  // The text report is the staff's here: its replay line gets the hidden seed too.
  // The platforms' files are the learners': they stay as the engine made them.
  let text = o.format === 'json' ? null : out[o.format];
  if (o.format === 'text') text = text.split(engineLine.replay).join(line.replay);
  results[i] = { file, line, text };
  done++;
  progress();
  flush();
}

let code = 0;
try {
  await Promise.all(files.map((_, i) => gradeOne(i)));
} catch (e) {
  process.stderr.write(`\ngrade: ${e.message}\n`);
  code = 2;
}
await pool.close();
if (code === 0) {
  const n = files.length;
  const secs = ((performance.now() - started) / 1000).toFixed(1);
  const line = `${n} submission${n === 1 ? '' : 's'}: ${summary.pass} pass, ${summary.fail} fail, ${summary.error} error (${secs} s)`;
  if (o.format === 'json') process.stderr.write(`${line}\n`);
  else process.stdout.write(`${line}\n`);
  code = summary.pass === n ? 0 : 1;
}
process.stdout.write('', () => process.exit(code));
