// Mutation testing of the labs' graders: cosmic-ray (a mutation tool for Python,
// from PyPI, in the project venv) mutates a lab's reference.py one change at a time
// and runs, as its test command, the lab's own grader on the mutated file. A mutant
// that passes every test "survived": either the tests miss a mistake (add a case)
// or the change cannot be told apart from the reference (an equivalent mutant),
// which is listed, with why, in tests/mutation/<lab>.json.
//
// The grader is the engine the page runs (Pyodide and the WASM grader, in this
// process): the mutants are our own code, so no sandbox. cosmic-ray's test command
// is a small client that hands the mutated file to this process over a Unix socket
// and exits 0 (survived) or 1 (killed), so Pyodide boots once, not once per mutant.
//
// Beside cosmic-ray's, two families of our own (mutant_families.py, the same
// grading): sql, sqlglot's rewrites of each statement of the reference's SQL, and
// learner, Python changes shaped like learners' mistakes. Each family has its score
// and its list of equivalent mutants (families.<name> in the lab's list).
//
// Run: ./lab mutants [--lab ID] [--family NAME] [--update]
//   --update  rewrites tests/mutation/<lab>.json for the current reference: its
//             hash, the run's figures, and the survivors, keeping the reasons of
//             those listed before (a new survivor gets an empty reason, which fails)
//   --bench   (./lab bench) runs the labs whose last run took under BENCH_MAX_S and
//             prints the recorded figures of the others, saying so
// Exit 1 when a survivor is not listed with a reason, or a listed one no longer survives.
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import crypto from 'node:crypto';
import { execFileSync, spawn } from 'node:child_process';
import { Worker } from 'node:worker_threads';
import { fileURLToPath } from 'node:url';
import { loadGrader, loadNodeEngine } from '../host/node_host.mjs';
import { parseOrExit, usageExit } from './args.mjs';
import { MUTANTS } from './commands.mjs';

const REPO = fileURLToPath(new URL('../../', import.meta.url));
const VENV_PY = path.join(REPO, '.venv/bin/python');
const COSMIC_RAY = path.join(REPO, '.venv/bin/cosmic-ray');
export const MUTATION_DIR = path.join(REPO, 'tests/mutation');
export const sha256 = (text) => crypto.createHash('sha256').update(text).digest('hex');
export const listFile = (lab) => path.join(MUTATION_DIR, `${lab}.json`);

// The test command: the mutated file's path to the grading process, its verdict back.
const CLIENT = `import socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.sendall(sys.argv[2].encode() + b"\\n")
answer = b""
while not answer.endswith(b"\\n"):
    chunk = s.recv(64)
    if not chunk:
        break
    answer += chunk
sys.exit(0 if answer == b"survived\\n" else 1)
`;

/** A mutant as the list names it: where, what, and the changed line. */
function mutantOf(job, reference) {
  const m = job.mutations[0];
  const line = m.start_pos[0];
  return {
    operator: m.operator_name,
    occurrence: m.occurrence,
    line,
    function: m.definition_name,
    before: reference.split('\n')[line - 1].trim(),
  };
}
const BENCH_MAX_S = 120;
const GRADINGS_PER_ENGINE = 20;

/**
 * The lab's time limit on each grading, as the page keeps it: a thread of its own
 * writes SIGINT into Pyodide's interrupt buffer once a run has lasted `limitS`
 * (this thread is busy in the run meanwhile). The run then reports a timeout, and
 * the mutant is killed, as the page would fail it. Without it one slow mutant of
 * the courier lab held the run for minutes. The interrupt is written again each
 * second until the run ends (the page's runner ends its worker instead).
 */
export function watchdog(limitS) {
  const shared = new SharedArrayBuffer(8);
  const interrupt = new Int32Array(shared, 0, 1);
  const runs = new Int32Array(shared, 4, 1); // odd while a run is on
  const worker = new Worker(`
    const { workerData } = require('node:worker_threads');
    const interrupt = new Int32Array(workerData.shared, 0, 1);
    const runs = new Int32Array(workerData.shared, 4, 1);
    for (;;) {
      const n = Atomics.load(runs, 0);
      if (n % 2 === 0) { Atomics.wait(runs, 0, n); continue; }
      if (Atomics.wait(runs, 0, n, workerData.limitMs) !== 'timed-out') continue;
      // Again each second until this run ends: one interrupt that does not stop the
      // run (CI twice saw the endless-loop test spin on past it) must not hold it forever.
      do Atomics.store(interrupt, 0, 2); while (Atomics.wait(runs, 0, n, 1000) === 'timed-out');
    }`, { eval: true, workerData: { shared, limitMs: limitS * 1000 } });
  worker.unref();
  return {
    interrupt,
    run(fn) {
      Atomics.store(interrupt, 0, 0);
      Atomics.add(runs, 0, 1);
      Atomics.notify(runs, 0);
      try {
        return fn();
      } finally {
        Atomics.add(runs, 0, 1);
        Atomics.notify(runs, 0);
      }
    },
  };
}
// A mutant's name in a list: cosmic-ray's operator and occurrence, or our families' id.
const keyOf = (m) => m.id ?? `${m.operator} #${m.occurrence}`;
const sameMutant = (a, b) => keyOf(a) === keyOf(b);
const describe = (m) => (m.id
  ? `${m.id} (line ${m.line}, ${m.piece}): ${m.what}`
  : `line ${m.line} (${m.function}), ${m.operator} #${m.occurrence}: \`${m.before}\` -> \`${m.after}\``);

export const COSMIC = 'cosmic-ray';
/** The families, cosmic-ray's first: ./lab mutants --family's choices. */
export const FAMILIES = MUTANTS.options.family.choices;
const GENERATOR = path.join(REPO, 'www/grader/mutant_families.py');

/**
 * Our families' mutants of `lab`'s reference (mutant_families.py): { generator,
 * families: {name: [{id, piece, line, what, after, source}]}, controls: {name:
 * source}, skipped }. Bounded like cosmic-ray's quick calls.
 */
export function familyMutants(lab, reference) {
  if (!fs.existsSync(VENV_PY)) throw new Error(`${VENV_PY} is missing: ./lab mutants (or ./lab test) makes the project venv with sqlglot`);
  const made = JSON.parse(execFileSync(VENV_PY, [GENERATOR, lab], { encoding: 'utf8', maxBuffer: 256 << 20, timeout: 120_000, killSignal: 'SIGKILL' }));
  // The generator reads the source tree, the grader is the build: they must agree.
  if (made.reference_sha256 !== sha256(reference)) throw new Error(`${lab}: src's reference.py is not the built grader's: ./lab build`);
  return made;
}

/**
 * Grades one of our families' mutants of `lab`, after its control (the reference
 * rewritten the family's way with no change), which must pass. Returns a run as
 * mutateLab's: { lab, family, total, killed, survivors: [{id, piece, line, what,
 * after}], seconds, tool, referenceSha256 }. `only`: grade just these ids (a sample),
 * without the control (which a full run grades whenever the reference or the
 * generator changes: the list records both, and ./lab test checks them).
 */
export async function mutateFamily(lab, family, { log = () => {}, session, made, only } = {}) {
  const { reference, grade } = session ?? await gradingSession(lab);
  made ??= familyMutants(lab, reference);
  const started = performance.now();
  const control = made.controls[family];
  if (!only && control !== undefined && (await grade(control)).status !== 'pass') {
    throw new Error(`${lab} ${family}: the reference as this family renders it fails: the rendering changes its meaning`);
  }
  const mutants = (made.families[family] ?? []).filter((m) => !only || only.includes(m.id));
  const survivors = [];
  let killed = 0;
  for (const [i, m] of mutants.entries()) {
    const r = await grade(m.source);
    if (r.status === 'pass') {
      survivors.push({ id: m.id, piece: m.piece, line: m.line, what: m.what, after: m.after });
      log(`${lab} ${family}: survives: ${describe(m)}`);
    } else killed++;
    if ((i + 1) % 25 === 0) log(`${lab} ${family}: ${i + 1} of ${mutants.length} mutants graded`);
  }
  return { lab, family, total: mutants.length, killed, survivors, seconds: (performance.now() - started) / 1000, tool: made.generator, referenceSha256: sha256(reference) };
}

/**
 * The lab's grader on mutants, in this process: the reference must pass (unless
 * `checkReference` is false: a caller that grades a control instead); `grade` runs
 * one source in verdict mode under the lab's time limit.
 */
export async function gradingSession(lab, { checkReference = true } = {}) {
  const grader = new (await loadGrader()).Grader();
  const { reference_py: reference, time_limit_s: limitS } = JSON.parse(grader.lab(lab));
  const limit = watchdog(limitS);
  // One interpreter grades many mutants, and it slows down over a run: measured on
  // the courier lab, a mutant that grades in 6.7 s in a fresh one ran past the 20 s
  // limit after about 55 others. So each interpreter grades at most GRADINGS_PER_ENGINE
  // mutants, and a mutant stopped at the limit is graded again in a fresh one before
  // it counts as killed: the limit kills slow mutants, never a tired interpreter.
  const freshEngine = () => loadNodeEngine({ labId: lab, interruptBuffer: limit.interrupt });
  let engine = await freshEngine();
  let engineGradings = 0;
  const timedOut = (r) => r.tests.some((t) => t.status === 'timeout');
  // A verdict run: the grader stops at the first failed test (a wrong courier
  // solution could spend 20 s in the chaos run after failing an example).
  const grade = async (source) => {
    if (engineGradings >= GRADINGS_PER_ENGINE) [engine, engineGradings] = [await freshEngine(), 0];
    engineGradings++;
    let r = limit.run(() => engine.run(source, { verdict: true }));
    if (timedOut(r) && engineGradings > 1) {
      [engine, engineGradings] = [await freshEngine(), 1];
      r = limit.run(() => engine.run(source, { verdict: true }));
    }
    return r;
  };
  if (checkReference && (await grade(reference)).status !== 'pass') throw new Error(`${lab}: the reference does not pass its own tests`);
  return { lab, reference, limitS, grade };
}

/**
 * Runs cosmic-ray over `lab`'s reference with the lab's grader as the test command.
 * Returns { lab, family: 'cosmic-ray', total, killed, survivors: [{operator, occurrence,
 * line, function, before, after}], seconds, tool }.
 */
export async function mutateLab(lab, { log = () => {}, session } = {}) {
  // Said first: without them the run below would wait on a child that never started.
  for (const tool of [VENV_PY, COSMIC_RAY]) {
    if (!fs.existsSync(tool)) throw new Error(`${tool} is missing: ./lab mutants (or ./lab test) makes the project venv with cosmic-ray`);
  }
  const { reference, limitS, grade } = session ?? await gradingSession(lab);

  const dir = fs.mkdtempSync(path.join(os.tmpdir(), `delivery-lab-mutants-${lab}-`));
  const started = performance.now();
  const socket = path.join(dir, 'grader.sock');
  let graded = 0;
  // A mutant that could not be graded is neither killed nor survived: the run fails.
  const failures = [];
  const server = net.createServer((conn) => {
    let buf = '';
    conn.on('data', async (d) => {
      buf += d;
      if (!buf.endsWith('\n')) return;
      let verdict = 'error';
      try {
        const source = fs.readFileSync(path.resolve(dir, buf.trim()), 'utf8');
        const r = await grade(source);
        verdict = r.status === 'pass' ? 'survived' : 'killed';
      } catch (e) {
        if (failures.length < 5) failures.push(String(e));
      }
      graded++;
      if (graded % 25 === 0) log(`${lab}: ${graded} mutants graded`);
      conn.end(`${verdict}\n`);
    });
    conn.on('error', () => {});
  });
  await new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(socket, () => { server.off('error', reject); resolve(); });
  });
  try {
    fs.writeFileSync(path.join(dir, 'reference.py'), reference);
    fs.writeFileSync(path.join(dir, 'client.py'), CLIENT);
    // A mutant that hangs the grader is stopped at the lab's time limit (watchdog);
    // cosmic-ray's timeout is the backstop.
    fs.writeFileSync(path.join(dir, 'cosmic-ray.toml'), [
      '[cosmic-ray]',
      'module-path = "reference.py"',
      'timeout = 120.0',
      'excluded-modules = []',
      `test-command = "${VENV_PY} client.py ${socket} reference.py"`,
      '',
      '[cosmic-ray.distributor]',
      'name = "local"',
      '',
    ].join('\n'));
    // Bounded: each of these is quick, and one that hung would block this process's
    // event loop, so no test timeout could end it (CI once saw this file stopped at
    // its 600 s bound with no test reported; the cause is not known).
    const run = (...args) => execFileSync(COSMIC_RAY, args, { cwd: dir, encoding: 'utf8', maxBuffer: 64 << 20, timeout: 120_000, killSignal: 'SIGKILL' });
    // The channel itself, on the unmutated file: it must say "survived".
    await new Promise((resolve, reject) => {
      const child = spawn(VENV_PY, ['client.py', socket, 'reference.py'], { cwd: dir, stdio: 'ignore' });
      // A child that could not start emits 'error' and never 'exit': the run ends, and
      // the finally closes the server (left listening, it would keep this process alive).
      child.on('error', reject);
      child.on('exit', (code) => (code === 0 ? resolve() : reject(new Error(`${lab}: the test command fails the reference (exit ${code}): ${failures.join('; ')}`))));
    });
    run('init', 'cosmic-ray.toml', 'session.sqlite');
    // exec grades in this process while it waits: the server answers between calls.
    // Bounded as a whole too: every mutant at the lab's limit, twice (a regrade in a
    // fresh interpreter), and a minute; past it the run fails, naming how far it got.
    const mutants = run('dump', 'session.sqlite').trim().split('\n').length;
    const deadlineS = mutants * limitS * 2 + 60;
    await new Promise((resolve, reject) => {
      const child = spawn(COSMIC_RAY, ['exec', 'cosmic-ray.toml', 'session.sqlite'], { cwd: dir, stdio: ['ignore', 'ignore', 'pipe'] });
      let err = '';
      const deadline = setTimeout(() => {
        child.kill('SIGKILL');
        reject(new Error(`${lab}: cosmic-ray exec did not finish within ${deadlineS} s (${graded} of ${mutants} mutants graded)`));
      }, deadlineS * 1000);
      child.stderr.on('data', (d) => { if (err.length < 64_000) err += d; });
      child.on('error', (e) => { clearTimeout(deadline); reject(e); });
      child.on('exit', (code) => {
        clearTimeout(deadline);
        if (code === 0) resolve();
        else reject(new Error(`cosmic-ray exec failed (${code}): ${err.slice(-2000)}`));
      });
    });
    if (failures.length) throw new Error(`${lab}: mutants could not be graded: ${failures.join('; ')}`);
    const jobs = run('dump', 'session.sqlite').trim().split('\n').map((l) => JSON.parse(l));
    const survivors = [];
    let killed = 0;
    for (const [job, result] of jobs) {
      if (!result || result.worker_outcome !== 'normal') throw new Error(`${lab}: a mutant was not run: ${JSON.stringify([job, result]).slice(0, 500)}`);
      if (result.test_outcome === 'killed') killed++;
      else {
        const after = (result.diff.split('\n').find((l) => l.startsWith('+') && !l.startsWith('+++')) ?? '').slice(1).trim();
        survivors.push({ ...mutantOf(job, reference), after });
      }
    }
    survivors.sort((a, b) => a.line - b.line || a.operator.localeCompare(b.operator) || a.occurrence - b.occurrence);
    const tool = run('--version').trim();
    return { lab, family: COSMIC, total: jobs.length, killed, survivors, seconds: (performance.now() - started) / 1000, tool, referenceSha256: sha256(reference) };
  } finally {
    server.close();
    fs.rmSync(dir, { recursive: true, force: true });
  }
}


/** The committed list of `lab`, or null. */
export function readList(lab) {
  try {
    return JSON.parse(fs.readFileSync(listFile(lab), 'utf8'));
  } catch (e) {
    if (e.code === 'ENOENT') return null;
    throw e;
  }
}

/**
 * What is wrong between a run and the committed list: survivors not listed (or
 * listed without a reason), listed ones that no longer survive.
 */
export function problemsOf(run, list) {
  const problems = [];
  const listed = familyList(list, run.family)?.equivalent ?? [];
  for (const s of run.survivors) {
    const l = listed.find((x) => sameMutant(x, s));
    if (!l) problems.push(`survives and is not listed: ${describe(s)}`);
    else if (!l.why) problems.push(`listed without a reason why it is equivalent: ${describe(s)}`);
  }
  for (const l of listed) {
    if (!run.survivors.some((s) => sameMutant(l, s))) problems.push(`listed but killed now (take it off the list): ${describe(l)}`);
  }
  if (list && list.reference_sha256 !== run.referenceSha256) problems.push('the list was made for another reference.py: ./lab mutants --update');
  return problems;
}

/**
 * A family's part of a lab's list: cosmic-ray's is the list's top level (tool,
 * mutants, killed, seconds, equivalent), each of ours is families.<name>, alike.
 */
export function familyList(list, family) {
  if (!list) return null;
  return family === COSMIC ? list : list.families?.[family] ?? null;
}

/**
 * The list file with a run's family in it, keeping the reasons already written and
 * the other families' parts (a family whose part is made for another reference
 * fails its check until it is run again).
 */
export function listFor(run, old) {
  const oldPart = familyList(old, run.family);
  const part = {
    tool: run.tool,
    mutants: run.total,
    killed: run.killed,
    seconds: Math.round(run.seconds),
    equivalent: run.survivors.map((s) => {
      const was = (oldPart?.equivalent ?? []).find((x) => sameMutant(x, s));
      return { ...s, why: was?.why ?? '', ...(was?.gap ? { gap: true } : {}) };
    }),
  };
  const list = {
    about: 'Mutants of this lab\'s reference.py that pass every test, each with why it cannot be told apart from the reference: cosmic-ray\'s at the top level, our own families (www/grader/mutant_families.py) under families. Made by ./lab mutants --update (www/grader/mutation.mjs); ./lab test checks it against the current reference.',
    ...(run.family === COSMIC ? part : { tool: old?.tool, mutants: old?.mutants, killed: old?.killed, seconds: old?.seconds, equivalent: old?.equivalent }),
    reference_sha256: run.referenceSha256,
    families: { ...(old?.families ?? {}) },
  };
  if (run.family !== COSMIC) list.families[run.family] = part;
  // a fixed key order, whatever was run first
  return { about: list.about, tool: list.tool, reference_sha256: list.reference_sha256, mutants: list.mutants, killed: list.killed,
    seconds: list.seconds, equivalent: list.equivalent, families: Object.fromEntries(FAMILIES.filter((f) => list.families[f]).map((f) => [f, list.families[f]])) };
}

/**
 * The score line: killed among the mutants not listed as equivalent (with a reason).
 * `how`: where the figures come from (by default, this run and its time).
 */
export function scoreLine(run, list, how = `in ${run.seconds.toFixed(0)} s`) {
  // A listed survivor marked `gap` is a mistake the tests are known to miss (its why
  // says why no test sees it): listed so that it is not news, counted as not killed.
  const equivalent = run.survivors.filter((s) => (familyList(list, run.family)?.equivalent ?? []).some((x) => sameMutant(x, s) && x.why && !x.gap)).length;
  const meaningful = run.total - equivalent;
  return `${run.lab} ${run.family}: ${run.total} mutants (${run.tool}), ${run.killed} killed, ${run.survivors.length} survive `
    + `(${equivalent} listed as equivalent); mutation score ${((run.killed / Math.max(1, meaningful)) * 100).toFixed(1)}% `
    + `of ${meaningful} non-equivalent, ${how}`;
}

/** The run a list was made from, as far as the list records it. */
const recordedRun = (lab, family, part) => ({ lab, family, total: part.mutants, killed: part.killed, survivors: part.equivalent, tool: part.tool, seconds: part.seconds });

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  // The command line, by ./lab mutants's table (commands.mjs MUTANTS; --bench is ./lab bench's).
  const { values: { update, bench, lab: one, family: onlyFamily } } = parseOrExit(MUTANTS, process.argv.slice(2), 'mutants');
  const grader = new (await loadGrader()).Grader();
  const ids = JSON.parse(grader.labs()).map((l) => l.id);
  if (one !== undefined && !ids.includes(one)) usageExit(MUTANTS, `--lab ${JSON.stringify(one)} is not a lab (${ids.join(', ')})`, 'mutants');
  const labs = one !== undefined ? [one] : ids;
  const log = (m) => process.stderr.write(`${m}\n`);
  let bad = false;
  for (const lab of labs) {
    let recorded = readList(lab);
    let session = null;
    let made = null;
    for (const family of onlyFamily !== undefined ? [onlyFamily] : FAMILIES) {
      const part = familyList(recorded, family);
      if (bench && part?.seconds > BENCH_MAX_S) {
        // Too long for the bench: the figures of the last ./lab mutants --update.
        console.log(scoreLine(recordedRun(lab, family, part), recorded,
          `recorded by ./lab mutants --update --lab ${lab} --family ${family} (${Math.round(part.seconds / 60)} min), not rerun here`));
        continue;
      }
      session ??= await gradingSession(lab);
      let run;
      if (family === COSMIC) run = await mutateLab(lab, { log, session });
      else {
        made ??= familyMutants(lab, session.reference);
        // A lab with no SQL has no sql family: nothing to say.
        if (!made.families[family]) continue;
        for (const [id, why] of made.skipped[family] ?? []) log(`${lab} ${family}: skipped ${id}: ${why}`);
        run = await mutateFamily(lab, family, { log, session, made });
      }
      const list = update ? listFor(run, recorded) : recorded;
      if (update) {
        fs.mkdirSync(MUTATION_DIR, { recursive: true });
        fs.writeFileSync(listFile(lab), `${JSON.stringify(list, null, 2)}\n`);
        recorded = list;
      }
      console.log(scoreLine(run, list));
      const problems = problemsOf(run, list);
      for (const p of problems) console.log(`  ${p}`);
      bad ||= problems.length > 0;
    }
  }
  process.exit(bad ? 1 : 0);
}
