#!/usr/bin/env node
// A grading platform's entry into the grader: grades the one .py file a learner
// submitted and writes the platform's results file. The scripts `./lab package`
// writes for Gradescope (run_autograder), PrairieLearn (tests/run.sh) and Exercism
// (bin/run.sh) call it from a copy of the grader; see docs/platforms.md.
//
//   node platform.mjs --format F --lab ID [--no-sandbox] [--deadline S] [--private PATH]...
//                     SUBMISSION_DIR RESULTS_FILE
//   node platform.mjs --self-check --lab ID [--no-sandbox] [--private PATH]...
//                     (grades the lab's reference: is this machine ready?)
//   --no-sandbox: the uid wall without bubblewrap even where bubblewrap works.
//   --private PATH: a platform's file or folder only root may read (made so).
//
// It runs as root, as the platforms run it, and learner code never does: every
// sandbox runs as a uid of its own (pool.mjs, jail.mjs), inside bubblewrap when
// bubblewrap works here (probed at start), else with that uid and the rlimits as
// its walls. Before any sandbox starts, the entry makes the files the learner must
// not touch root's (walls(), below): the grader (the WASM holds the hidden cases)
// readable by root only but for what a sandbox reads (its own code, the bridge,
// Pyodide), each --private PATH root's alone, the results file's folder writable by
// root only. It says which wall it used on stdout (the platform's log, for staff).
// Not root: with bubblewrap it grades and warns; without, it refuses.
//
// Whatever the submission is (none, two files, not UTF-8, a syntax error), a valid
// results file is written and the exit code is 0: the platform shows the learner
// the report. Exit 1: the grader itself failed or refused to grade unwalled (the
// results file says so when it can); 2: a usage error (an unknown lab included),
// nothing written.
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { createGradingPool, CLI_LIMIT_FACTOR } from './pool.mjs';
import { SANDBOX_READS } from './sandbox_command.mjs';
import { pyFilesIn, readSubmission } from './submissions.mjs';
import { command, number, parseOrExit, usageExit } from './args.mjs';
import { PLATFORM_FORMATS } from './formats.mjs';
import { GRADER_MARKER, hiddenPolicy, newSecret, PACKAGED_SECRET_FILE, readSecret, SecretError } from './hidden.mjs';
import { isRoot, jailProblem, SANDBOX_UID_BASE } from './jail.mjs';
import { loadGrader } from '../host/node_host.mjs';

/** What a run needs besides grading, within a platform's deadline: start-up, the results file. */
const DEADLINE_RESERVE_S = 8;
/** The grader's own folder (a copy's, as ./lab package lays it out: grader/, host/, pkg/, node_modules/pyodide). */
const GRADER_ROOT = path.resolve(fileURLToPath(new URL('../', import.meta.url)));
/** Written by package.mjs copyGrader: only a folder holding it is the entry's to lock down. */

/** The command line's one table (args.mjs: util.parseArgs, and --help made from it). */
const PLATFORM = command({
  name: 'platform',
  prog: 'node platform.mjs',
  synopsis: '--format F --lab ID [options] SUBMISSION_DIR RESULTS_FILE | --self-check --lab ID [options]',
  summary: 'A grading platform\'s entry into the grader: grades the one .py file in SUBMISSION_DIR into the platform\'s RESULTS_FILE.',
  options: {
    format: { type: 'string', value: 'F', choices: PLATFORM_FORMATS, help: 'the platform\'s results format' },
    lab: { type: 'string', value: 'ID', help: 'the lab' },
    'no-sandbox': { type: 'boolean', default: false, help: 'the uid wall without bubblewrap even where bubblewrap works' },
    deadline: { type: 'string', value: 'S', parse: number({ min: 0 }), help: 'the platform stops the run after S seconds: a results file comes before it' },
    'self-check': { type: 'boolean', default: false, help: 'grade the lab\'s reference: is this machine ready?' },
    private: { type: 'string', value: 'PATH', multiple: true, default: [], help: 'a platform\'s file or folder only root may read (made so)' },
    'hidden-statuses': { type: 'string', value: 'each|aggregate', choices: ['each', 'aggregate'], default: 'each', help: 'aggregate: learners see only how many hidden tests passed' },
  },
});

function usage(message) {
  usageExit(PLATFORM, message, 'platform');
}

function parseArgs(argv) {
  const { values: v, positionals } = parseOrExit(PLATFORM, argv, 'platform');
  const o = {
    format: v.format ?? null, lab: v.lab ?? null, sandbox: !v['no-sandbox'], deadline: v.deadline ?? null, selfCheck: v['self-check'],
    paths: positionals, private: v.private, hiddenStatuses: v['hidden-statuses'],
  };
  if (!o.lab) usage('--lab needs a lab id');
  if (o.selfCheck) return o;
  if (!o.format) usage('--format needs a platform\'s format');
  if (o.deadline !== null && !(o.deadline > DEADLINE_RESERVE_S)) usage(`--deadline needs more than ${DEADLINE_RESERVE_S} seconds`);
  if (o.paths.length !== 2) usage('give the submission folder and the results file');
  return o;
}

// --- the walls --------------------------------------------------------------

/** What a sandbox reads of the grader (sandbox_command.mjs SANDBOX_READS: its own code, the bridge, Pyodide). */
const sandboxReads = () => SANDBOX_READS.map((p) => path.resolve(p));

/** Each path under `p` (itself first), links not followed. */
function walk(p, visit) {
  let st;
  try { st = fs.lstatSync(p); } catch { return; }
  if (st.isSymbolicLink()) return;
  visit(p, st);
  if (st.isDirectory()) for (const n of fs.readdirSync(p)) walk(path.join(p, n), visit);
}

/**
 * Under root: makes what the learner must not touch root's, before any sandbox
 * starts. Modes are set only where they differ, so a read-only image that was
 * locked when it was built (the self-check in setup.sh or the Dockerfile) passes.
 *   - the grader: root's, folders 0711 and files 0600 (0700 if executable), but
 *     what a sandbox reads (0644, its folders 0755) and package.json (0644, the
 *     modules' type: nothing in it);
 *   - each --private path: root's, no bit for group or others;
 *   - every folder above what a sandbox reads: o+x (to be passed through, not listed);
 *   - the results file's folder: root's, 0755; the file is written by this process.
 * Returns { problems, warnings }: problems, what a sandbox's uid could still
 * read or write, read back at the end (the caller decides); warnings, what could
 * not be changed but is out of a sandbox's reach anyway (a folder of a user of
 * the host's that root cannot chown, mode 0755).
 */
function lockDown({ privatePaths = [], resultsDir = null }) {
  const want = new Map();   // path -> mode
  const own = new Set();    // paths to be root's
  const problems = [];
  const warnings = [];
  for (const p of privatePaths) {
    walk(path.resolve(p), (q, st) => { want.set(q, (st.mode & 0o700) | (st.isDirectory() ? 0o700 : 0)); own.add(q); });
  }
  const packaged = fs.existsSync(path.join(GRADER_ROOT, GRADER_MARKER));
  const reads = sandboxReads();
  if (packaged) {
    walk(GRADER_ROOT, (q, st) => {
      want.set(q, st.isDirectory() ? 0o711 : ((st.mode & 0o100) ? 0o700 : 0o600));
      own.add(q);
    });
    want.set(path.join(GRADER_ROOT, 'package.json'), 0o644);
    for (const r of reads) walk(r, (q, st) => want.set(q, st.isDirectory() ? 0o755 : 0o644));
  }
  for (const r of reads) {
    for (let d = path.dirname(r); ; d = path.dirname(d)) {
      let mode = want.get(d);
      if (mode === undefined) {
        try { mode = fs.statSync(d).mode & 0o7777; } catch { break; }
      }
      want.set(d, mode | 0o001);
      if (d === path.dirname(d)) break;
    }
  }
  if (resultsDir) {
    fs.mkdirSync(resultsDir, { recursive: true });
    want.set(resultsDir, 0o755);
    own.add(resultsDir);
  }
  for (const p of own) {
    try {
      const st = fs.lstatSync(p);
      if (st.uid !== 0 || st.gid !== 0) fs.lchownSync(p, 0, 0);
    } catch (e) { warnings.push(`${p}: chown: ${e.code || e.message}`); }
  }
  for (const [p, mode] of want) {
    try {
      if ((fs.lstatSync(p).mode & 0o7777) !== mode) fs.chmodSync(p, mode);
    } catch (e) { if (e.code !== 'ENOENT') warnings.push(`${p}: chmod ${mode.toString(8)}: ${e.code || e.message}`); }
  }
  // The outcome, read back: what a sandbox's uid (one of its own, in no group but
  // its own) could still read or write.
  const how = (st) => `mode ${(st.mode & 0o7777).toString(8)}, uid ${st.uid}`;
  const readable = (q) => reads.some((r) => q === r || q.startsWith(`${r}/`)) || q === path.join(GRADER_ROOT, 'package.json');
  if (!packaged) problems.push(`${GRADER_ROOT} is not a packaged grader (no ${GRADER_MARKER}): its files are left as they are`);
  else {
    walk(GRADER_ROOT, (q, st) => {
      if (!st.isDirectory() && !readable(q) && sandboxMay(st, 4)) problems.push(`${q} is readable by a sandbox (${how(st)})`);
    });
  }
  for (const p of privatePaths) {
    walk(path.resolve(p), (q, st) => {
      // Private but for what the grader's rules above open (a sandbox's reads, o+x on the way to them).
      if (!readable(q) && sandboxMay(st, 6)) problems.push(`${q} is not private (${how(st)})`);
    });
  }
  if (resultsDir) {
    const st = fs.statSync(resultsDir);
    if (sandboxMay(st, 2)) problems.push(`${resultsDir} is writable by a sandbox (${how(st)})`);
  }
  return { problems, warnings };
}

/** Whether a sandbox's uid (and its group, the same number) may use `bits` (4 read,
 *  2 write, 6 either) on what `st` describes: as others, or as its owner or group. */
function sandboxMay(st, bits) {
  return Boolean((st.mode & bits)
    || (st.uid >= SANDBOX_UID_BASE && (st.mode & (bits << 6)))
    || (st.gid >= SANDBOX_UID_BASE && (st.mode & (bits << 3))));
}

/**
 * The wall the learner's code runs behind here, chosen at start:
 *   { sandbox: true|false, say: the log's line } or { refuse: why }.
 * Root: bubblewrap when it works (a uid of each sandbox's own inside it), else
 * that uid and the rlimits alone (--no-sandbox asks for this outright). Not root:
 * bubblewrap or nothing.
 */
function chooseWall(o) {
  const problem = o.sandbox ? jailProblem() : '--no-sandbox was given';
  if (isRoot()) {
    if (!problem) return { sandbox: true, say: 'bubblewrap (namespaces, a read-only view of the sandbox\'s files), each sandbox as a uid of its own, rlimits' };
    const without = jailProblem({ bwrap: false });
    if (without) return { refuse: `bubblewrap cannot be used (${problem}), and neither can a uid of the sandbox's own (${without}): no wall would hold the learner's code` };
    return { sandbox: false, say: `each sandbox as a uid of its own and rlimits, without bubblewrap (${problem})` };
  }
  if (!problem) {
    return {
      sandbox: true,
      say: 'bubblewrap, as this user',
      warn: `NOT RUN AS ROOT (uid ${process.getuid?.()}): every sandbox runs as this same user, so no uid of its own keeps it from the grader's processes; bubblewrap's view still keeps the grader's files out of its reach. Run the entry as root, as the platforms do.`,
    };
  }
  return { refuse: `not run as root and bubblewrap cannot be used (${problem}): learner code would run as the grader's own user, beside its files, with only Node's permission model between them, which is no security boundary. Run the entry as root (the platforms do)` };
}

/**
 * Chooses the wall, locks the files down and says so; `refuse(why)` ends the run
 * when no wall holds. Returns the pool's `sandbox` option.
 */
function walls(o, { resultsDir = null, refuse }) {
  const wall = chooseWall(o);
  if (wall.refuse) refuse(wall.refuse);
  if (wall.warn) process.stderr.write(`platform: WARNING: ${wall.warn}\n`);
  if (isRoot()) {
    const { problems, warnings } = lockDown({ privatePaths: o.private, resultsDir });
    if (warnings.length) process.stderr.write(`platform: warning: could not change (what a sandbox could still reach is checked next): ${warnings.slice(0, 10).join('; ')}\n`);
    if (problems.length) {
      // Without bubblewrap, the modes are the wall between a sandbox and these files.
      const list = problems.slice(0, 10).join('; ');
      if (!wall.sandbox) refuse(`the grader's files could not be made private to root, and without bubblewrap the learner's code could reach them: ${list}`);
      process.stderr.write(`platform: WARNING: the grader's files could not all be made private to root (bubblewrap still hides them): ${list}\n`);
    }
  }
  process.stdout.write(`platform: wall: ${wall.say}\n`);
  return wall.sandbox;
}

// --- the submission ---------------------------------------------------------

/**
 * The submitted .py file in `dir` (its top level), or { error } saying why there is
 * not exactly one. Exercism's input folder may hold other exercise files: when its
 * `.meta/config.json` names the solution files, only those count.
 */
function findSubmission(dir) {
  let names;
  try {
    names = pyFilesIn(dir);
  } catch {
    return { error: 'No submission folder was found, so no test ran.' };
  }
  try {
    const solution = JSON.parse(fs.readFileSync(path.join(dir, '.meta', 'config.json'), 'utf8')).files?.solution;
    if (Array.isArray(solution)) names = names.filter((n) => solution.includes(n));
  } catch { /* no config: every .py counts */ }
  if (names.length === 0) return { error: 'No .py file was submitted, so no test ran. Submit your solution as one Python file.' };
  if (names.length > 1) {
    return { error: `${names.length} .py files were submitted (${names.join(', ')}), so no test ran: submit exactly one, your solution.` };
  }
  return { file: path.join(dir, names[0]) };
}

const o = parseArgs(process.argv.slice(2));
const { Grader } = await loadGrader();
const grader = new Grader();
let lab;
try {
  lab = JSON.parse(grader.lab(o.lab));
} catch (e) {
  usage(e.message);
}

// A platform that kills the run at a deadline gets a results file before it: the
// run's CPU limit fits inside, and the clock stops it at the same time.
const limitS = lab.time_limit_s * CLI_LIMIT_FACTOR;
const timeoutS = o.deadline ? Math.min(limitS, o.deadline - DEADLINE_RESERVE_S) : limitS;
const onWarning = (m) => process.stderr.write(`platform: ${m}\n`);
// One submission per run: a fork server would not pay for its own start.
const newPool = (sandbox) => createGradingPool({ jobs: 1, timeoutS, sandbox, onWarning, lab: lab.id, fork: false, ...(o.deadline ? { wallFactor: 1 } : {}) });

if (o.selfCheck) {
  const sandbox = walls(o, { refuse: (why) => { process.stderr.write(`platform: refused: ${why}\n`); process.exit(1); } });
  const pool = newPool(sandbox);
  let line;
  try {
    await pool.ready;
    line = await pool.grade({ lab: o.lab, source: lab.reference_py, format: 'json' });
  } finally {
    await pool.close();
  }
  process.stdout.write(`self-check: ${o.lab}'s reference solution: ${line.status} ${line.passed}/${line.total}\n`);
  process.exit(line.status === 'pass' ? 0 : 1);
}

const [dir, resultsFile] = o.paths;
const resultsDir = path.dirname(path.resolve(resultsFile));
fs.mkdirSync(resultsDir, { recursive: true });
// Written by this process only (root's, in a folder only root may write), afresh.
const write = (text) => {
  fs.rmSync(resultsFile, { force: true });
  fs.writeFileSync(resultsFile, text, { flag: 'wx', mode: 0o644 });
};
const errorResults = (message) => grader.error_report(o.lab, undefined, message, o.format, o.hiddenStatuses);

const sandbox = walls(o, {
  resultsDir,
  refuse: (why) => {
    process.stderr.write(`platform: refused: ${why}\n`);
    write(errorResults('The grader is not set up to run learner code safely here, so it did not grade this submission. Ask your course staff.'));
    process.exit(1);
  },
});

const found = findSubmission(dir);
const read = found.file ? readSubmission(found.file) : { error: found.error };
if (read.error !== undefined) {
  write(errorResults(read.error));
  process.stdout.write(`${o.lab}: error (${read.error})\n`);
  process.exit(0);
}

// The submission's hidden inputs (hidden.mjs): drawn from the package's secret and
// the submission, so a key learned from one submission tells nothing of the next;
// the seed is in the staff's log only (stdout), never in the results file.
const secretFile = path.join(GRADER_ROOT, PACKAGED_SECRET_FILE);
let secret;
try {
  secret = readSecret(secretFile);
} catch (e) {
  if (!(e instanceof SecretError)) throw e;
  // A checkout's grader (no package), or an entry not run as root (the secret is
  // root's): a secret of this run's own, so a regrade draws other hidden inputs.
  secret = newSecret();
  process.stdout.write(`platform: no package secret to read (${e.message}): this run draws its hidden inputs from a secret of its own\n`);
}
// The one policy ./lab grade and serve use (hidden.mjs): a seed per submission, for a lab with variants.
const hidden = hiddenPolicy({ secret, statuses: o.hiddenStatuses, variantLabs: lab.hidden_variants ? [o.lab] : [] })(o.lab, read.text);

let pool = null;
let code = 0;
try {
  pool = newPool(sandbox);
  await pool.ready;
  const out = await pool.gradeMany({ lab: o.lab, source: read.text, formats: ['json', o.format], hidden });
  write(out[o.format]);
  const line = out.json;
  const seen = hidden.seed === null ? '' : `; hidden seed ${hidden.seed}: ./lab grade --lab ${o.lab} --hidden-seed ${hidden.seed} FILE replays it`;
  process.stdout.write(`${o.lab}: ${line.status} ${line.passed}/${line.total} (${path.basename(found.file)}${seen})\n`);
} catch (e) {
  // The grader, not the submission: staff read this in the platform's log.
  write(errorResults(`The grader could not grade this submission: ${e.message}. Ask your course staff.`));
  process.stderr.write(`platform: ${e.stack ?? e.message}\n`);
  code = 1;
} finally {
  await pool?.close();
}
process.exit(code);
