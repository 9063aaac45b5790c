// The courier lab through the real engine in Node: Pyodide runs the learner's
// Python against SQLite, the grader (WASM) drives the unit tests, the chaos run
// and the fairness run. The reference passes everything; the starter does not;
// every wrong solution in src/courier/mutants.py fails the test the catalogue
// names for it.
// Run: node --test host/test/courier.test.mjs   (needs www/pkg: ./lab build)
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { execFileSync } from 'node:child_process';
import { isMainThread, parentPort, Worker } from 'node:worker_threads';
import { loadGrader, loadNodeEngine } from '../node_host.mjs';
import { REFERENCE, applyMutant, failing, loadCorrect, loadMutants, names } from './courier/mutants.mjs';

// A whole run takes about 5 s of one core, and there are about 20 (9 correct styles
// among them: the catalogue's correct solutions are what says the grader passes what
// learners write right, so each is graded in full), beside the catalogue's 80 wrong
// solutions, each run on its own test alone (below): they go to two
// engines, each in a worker thread running this same file (a helper module under
// test/ would itself be run as a test file). In a worker, this file is one engine:
// each message is a job, `{ id, runs: [{ source, seed }] }`, run in order (a job
// that checks what one run leaves for the next keeps its runs together), answered
// `{ id, reports }` or `{ id, error }`; the module never gets past this point there,
// so no test is defined in a worker. A run may carry a `hiddenSeed` (the hidden unit
// cases' variant, src/courier/variant.rs).
if (!isMainThread) {
  const engine = await loadNodeEngine({ labId: 'courier' });
  parentPort.on('message', ({ id, runs: list }) => {
    try {
      parentPort.postMessage({ id, reports: list.map(({ source, seed, hiddenSeed, only }) => engine.run(source, {
        ...(seed === undefined ? {} : { seed }),
        ...(hiddenSeed === undefined ? {} : { hiddenSeed }),
        ...(only === undefined ? {} : { only }),
      })) });
    } catch (e) {
      parentPort.postMessage({ id, error: String((e && e.stack) || e) });
    }
  });
  await new Promise(() => {});
}

const STARTER = fs.readFileSync(new URL('../../../src/courier/starter.py', import.meta.url), 'utf8');
const MUTANTS = loadMutants();

const CHAOS = 'chaos run: 2,000 actions, 200 kills, a database restart';
const FAIRNESS = 'fairness run: one store at 10x among 100';

// Every run is asked for up front, so both engines work while the tests below wait
// for their runs in order.
const ENGINES = 2;
const workers = Array.from({ length: ENGINES }, () => new Worker(new URL(import.meta.url)));
const waiting = new Map();
const queue = [];
const idle = [...workers];
let nextId = 0;
for (const w of workers) {
  w.on('message', ({ id, reports, error }) => {
    const job = waiting.get(id);
    waiting.delete(id);
    if (error) job.reject(new Error(error));
    else job.resolve(reports);
    idle.push(w);
    dispatch();
  });
  w.on('error', (e) => { for (const job of waiting.values()) job.reject(e); });
}
function dispatch() {
  while (idle.length && queue.length) {
    const job = queue.shift();
    waiting.set(job.id, job);
    idle.shift().postMessage({ id: job.id, runs: job.runs });
  }
}
/** The reports of `runs` ([source, {seed, hiddenSeed, only}?] each), run in order in one engine. */
function runs(...list) {
  const job = { id: nextId++, runs: list.map(([source, { seed, hiddenSeed, only } = {}]) => ({ source, seed, hiddenSeed, only })) };
  const done = new Promise((resolve, reject) => { job.resolve = resolve; job.reject = reject; });
  done.catch(() => {}); // reported by the test that awaits it
  queue.push(job);
  dispatch();
  return done;
}
const run = (source, opts) => runs([source, opts]).then(([r]) => r);
after(() => Promise.all(workers.map((w) => w.terminate())));

// The longest run first (the variant's claim reads every row), so that it is not last.
const variantRun = run(fs.readFileSync(new URL('courier/variant.py', import.meta.url), 'utf8'));
const referenceRun = run(REFERENCE);

test('the reference passes every unit test, the chaos run and the fairness run', async () => {
  const r = await referenceRun;
  assert.deepEqual(failing(r), []);
  assert.equal(r.status, 'pass');
  const chaos = r.tests.find((t) => t.name === CHAOS);
  assert.match(chaos.message, /2000 of 2000/);
  assert.match(chaos.message, /200 kills/);
  assert.match(r.tests.find((t) => t.name === FAIRNESS).message, /FIFO/);
});

test('a correct solution written differently (rows by name, choices in Python, `with db:`) passes everything', async () => {
  assert.deepEqual(failing(await variantRun), []);
});

// Correct solutions in the styles issue 36 names (courier/correct.py): two reads, waits as floats,
// a subquery for the CTE, explicit BEGIN/COMMIT/ROLLBACK, RETURNING, early returns
// that commit, merge by a list, state checked in every fence, a helper class. Each
// is the reference written otherwise and must pass everything (about 5 s of a core each).
for (const style of loadCorrect()) {
  const { source, missing } = applyMutant(style);
  const styleRun = missing ? null : run(source);
  test(`a correct solution in the style ${style.name} passes everything (${style.style})`, async () => {
    assert.ok(!missing, `anchor not found: ${missing}`);
    assert.deepEqual(failing(await styleRun), []);
  });
}

// Fenced on the epoch alone, without the owner: every claim raises the epoch by one,
// so an action's epoch names one claim and one owner, and no run (nor a unit case,
// which holds to states a run can reach) tells this from the reference; lab.md says so.
const EPOCH_ONLY = REFERENCE.replaceAll('AND owner = ? AND epoch = ?', 'AND epoch = ?')
  .replaceAll(', worker, epoch),', ', epoch),');
const epochOnlyRun = run(EPOCH_ONLY);

test('a solution fenced on the epoch alone (no owner check) passes everything', async () => {
  assert.notEqual(EPOCH_ONLY, REFERENCE);
  assert.equal(EPOCH_ONLY.match(/owner = \? AND epoch/g), null);
  assert.deepEqual(failing(await epochOnlyRun), []);
});

// Hidden inputs drawn per submission (src/courier/variant.rs): in a variant, with
// ids, stores, workers, keys and message ids of its own and times of 13 digits, the
// reference and the solution written differently pass everything in Python and
// SQLite too, and a learner's report is the one of the cases as written. (Grading
// the catalogue's mutants in a variant as well would take a run each, about as long
// again as this file; tests/courier_variants.rs holds the reference's Mistakes to
// the same verdict in every variant.)
const HIDDEN_SEED = 3141592653;
const variantSeedRuns = runs([REFERENCE, { hiddenSeed: HIDDEN_SEED }],
  [fs.readFileSync(new URL('courier/variant.py', import.meta.url), 'utf8'), { hiddenSeed: HIDDEN_SEED }]);

test('in a variant of the hidden cases, correct solutions pass everything and the report is the same', async () => {
  const [reference, written] = await variantSeedRuns;
  assert.deepEqual(failing(reference), []);
  assert.deepEqual(failing(written), []);
  assert.equal(reference.tests.filter((t) => t.kind === 'hidden').length, (await referenceRun).tests.filter((t) => t.kind === 'hidden').length);
  assert.equal(JSON.stringify(reference), JSON.stringify(await referenceRun));
  assert.ok(!JSON.stringify(reference).includes(String(HIDDEN_SEED)));
});

// Twice in one engine (nothing of a run reaches the next); the reference's run
// above is the lab's default seed, another one.
const seed7Runs = runs([REFERENCE, { seed: 7 }], [REFERENCE, { seed: 7 }]);

test('the same seed gives the same report, another seed another run', async () => {
  const [a, b] = (await seed7Runs).map((r) => JSON.stringify(r));
  assert.equal(b, a);
  assert.notEqual(JSON.stringify(await referenceRun), a);
});

const starterRun = run(STARTER);

test('the starter runs and fails, with messages that name the rule', async () => {
  const r = await starterRun;
  assert.equal(r.status, 'fail');
  const claim = r.tests.find((t) => t.name === 'claim serves the store that waited longest');
  assert.equal(claim.status, 'fail');
  assert.equal(claim.rule, 'fair-claim');
  assert.match(claim.message, /^Rule broken \(fair-claim\): Fair claim/);
  assert.match(claim.message, /After `claim\(db, "w1", 10000, cfg\)`/);
  // Hidden tests show their names and status only.
  for (const t of r.tests.filter((x) => x.kind === 'hidden')) {
    assert.equal(t.message, undefined);
  }
});

// mutants.py and correct.py check themselves when run: each edit applies and
// compiles, and each "sentence" a mutant breaks is lab.md's words.
test('every mutant and style applies and compiles, and each mutant quotes lab.md', () => {
  const check = (url) => execFileSync('python3', [url.pathname], { encoding: 'utf8' }).trim();
  // MUTANTS leaves out the changes kept as not_a_mistake (mutants.mjs), which apply and compile too.
  assert.match(check(new URL('../../../src/courier/mutants.py', import.meta.url)),
    new RegExp(`^${MUTANTS.length} mutants apply and compile, and \\d+ changes that are not mistakes$`));
  assert.equal(check(new URL('courier/correct.py', import.meta.url)), `${loadCorrect().length} styles apply and compile`);
});

// Each mutant is run on the test the catalogue names for it (or the tests whose
// names it begins, as "differential: claim" names one), alone (`only`): the claim
// is that this test catches it, and the other tests' verdicts on it say nothing of
// that. Run whole, the catalogue was about 7 min of CPU of this file's 9.5, most of
// it the chaos and fairness runs; `grade-mutants.mjs` still grades one whole to see
// everything it fails.
const LAB_TESTS = JSON.parse(new (await loadGrader()).Grader().lab('courier')).tests.map((t) => t.name);
for (const m of MUTANTS) {
  const { source, missing } = applyMutant(m);
  const only = LAB_TESTS.filter((t) => names(m.caught_by, t));
  const mutantRun = missing || !only.length ? null : run(source, { only });
  test(`mutant ${m.name} is caught (${m.mistake})`, async () => {
    assert.ok(!missing, `anchor not found: ${missing}`);
    assert.ok(only.length, `${m.name} names "${m.caught_by}", which is no test of the lab`);
    const r = await mutantRun;
    assert.equal(r.partial, true);
    assert.deepEqual(r.tests.map((t) => t.name), only);
    assert.ok(failing(r).length > 0, `${m.name} passed ${only.join(' | ')}`);
  });
}

const raisesRun = run(REFERENCE.replace('def heartbeat(db, action_id, worker, epoch, now_ms, cfg):\n',
  'def heartbeat(db, action_id, worker, epoch, now_ms, cfg):\n    raise RuntimeError("boom")\n'));

test('a piece that raises fails its test with a traceback into solution.py', async () => {
  const r = await raisesRun;
  const t = r.tests.find((x) => x.name === 'a heartbeat extends its own lease');
  assert.equal(t.status, 'error');
  assert.equal(r.tests.find((x) => x.name === 'claim serves the store that waited longest').status, 'pass');
  const chaos = r.tests.find((x) => x.name === CHAOS);
  assert.equal(chaos.status, 'fail');
  assert.match(chaos.message, /heartbeat at \d+ ms: Your code raised/);
  assert.match(chaos.message, /solution\.py", line \d+, in heartbeat/);
  assert.doesNotMatch(chaos.message, /delivery_lab_/);
});

const printsRun = run(REFERENCE.replace('def merge(current, reported):\n', 'def merge(current, reported):\n    print("merging", current, reported)\n'));

test("what a piece prints shows in its unit test's output", async () => {
  const r = await printsRun;
  const t = r.tests.find((x) => x.name === 'merge only moves forward');
  assert.equal(t.status, 'pass');
  assert.match(t.output, /merging delivered sent/);
});

// Open only at the unit test's moment (everywhere, the chaos run would restart
// workers for nothing but time).
const openRun = run(REFERENCE
  + '\n_claim = claim\ndef claim(db, worker, now_ms, cfg):\n    r = _claim(db, worker, now_ms, cfg)\n'
  + '    if now_ms == 10000:\n        db.execute("UPDATE stores SET last_served_ms = last_served_ms")\n    return r\n');

test('a step that returns with its transaction open is told so, and rolled back', async () => {
  const r = await openRun;
  const t = r.tests.find((x) => x.name === 'claim serves the store that waited longest');
  assert.equal(t.status, 'fail');
  assert.match(t.message, /^claim returned with its transaction still open, so the lab rolled it back/);
});

// In one engine: the run after the interrupted one.
const interruptRuns = runs([REFERENCE.replace('def claim(db, worker, now_ms, cfg):\n', 'def claim(db, worker, now_ms, cfg):\n    raise KeyboardInterrupt\n')], [REFERENCE]);

test('the time limit (a KeyboardInterrupt) ends the run as timed out, and the next run is unaffected', async () => {
  const [r, next] = await interruptRuns;
  assert.equal(r.status, 'fail');
  const first = r.tests.find((t) => t.name === 'claim serves the store that waited longest');
  assert.equal(first.status, 'timeout');
  assert.match(first.message, /20 s limit/);
  // Every test after it is reported as not run, the system runs included.
  const after = r.tests.slice(r.tests.indexOf(first) + 1);
  assert.ok(after.length > 20 && after.every((t) => t.status === 'timeout'), after.map((t) => t.status).join());
  assert.equal(next.status, 'pass');
});

const brokenRuns = runs(['def claim(db, worker, now_ms, cfg)\n    return None\n'],
  [REFERENCE.replace('def merge(', 'def merge_(').replaceAll('merge(', 'merge_(')]);

test('a syntax error and a missing piece are reported, not crashed on', async () => {
  const [syntax, missing] = await brokenRuns;
  assert.equal(syntax.status, 'error');
  assert.match(syntax.message, /could not be compiled/);
  const t = missing.tests.find((x) => x.name === 'merge only moves forward');
  assert.equal(t.status, 'error');
  assert.match(t.message, /does not define `merge`/);
});
