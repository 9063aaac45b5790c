// The courier lab under the grading CLI: its database is the coordinator's (the
// grading thread's store), so the verdicts below come from what the store saw. A
// file of its own, so that `./lab test` runs it beside grade.test.mjs (each full
// courier run is about 30 s of CPU, and most of grade.test.mjs uses one core).
// Run: cd www && node --test grader/test/courier.test.mjs   (needs www/pkg)
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { INTERFERED } from '../pool.mjs';
import { noProcessLeftAfterTests } from '../fixtures/leftovers.mjs';

noProcessLeftAfterTests();

const WWW = fileURLToPath(new URL('../../', import.meta.url));
const GRADE = path.join(WWW, 'grader/grade.mjs');

function write(dir, name, text) {
  fs.writeFileSync(path.join(dir, name), text);
}

test('the courier lab: the reference passes; a resend without lookup, an open transaction and a forged send do not', { timeout: 400_000 }, async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'delivery-lab-cli-courier-'));
  const ref = fs.readFileSync(path.join(WWW, '../src/courier/reference.py'), 'utf8');
  const anchor = '        if attempts > 0:\n';
  assert.ok(ref.includes(anchor));
  write(dir, 'a_reference.py', ref);
  write(dir, 'c_no_lookup.py', ref.replace(anchor, '        if False:\n'));
  // The store is the coordinator's: a step that leaves its transaction open is
  // caught there, whatever the sandbox answers.
  // (Only at the unit test's moment: everywhere, the chaos run would restart
  // workers until the limit.)
  write(dir, 'd_open_transaction.py', `${ref}\n_claim = claim\ndef claim(db, worker, now_ms, cfg):\n`
    + '    r = _claim(db, worker, now_ms, cfg)\n    if now_ms == 10000:\n'
    + '        db.execute("UPDATE stores SET last_served_ms = last_served_ms")\n    return r\n');
  // The attempts a send carries are the store's to read: a sandbox that states
  // its own (reaching the world object under its provider) has interfered.
  write(dir, 'e_forge_committed.py', ref.replace('answer = provider.send(key, phone, body)',
    'answer = provider._port.live("provider").op("send", key, phone, body, 1)'));
  const r = await new Promise((resolve) => {
    execFile(process.execPath, [GRADE, '--lab', 'courier', '--jobs', '2', '--format', 'json', dir], { maxBuffer: 1 << 26 },
      (e, stdout, stderr) => resolve({ code: e ? e.code : 0, stdout, stderr }));
  });
  assert.equal(r.code, 1, r.stderr);
  const lines = r.stdout.trim().split('\n').map((l) => JSON.parse(l));
  assert.deepEqual(lines.map((l) => [path.basename(l.file), l.lab, l.status]), [
    ['a_reference.py', 'courier', 'pass'], ['c_no_lookup.py', 'courier', 'fail'],
    ['d_open_transaction.py', 'courier', 'fail'], ['e_forge_committed.py', 'courier', 'error']]);
  const chaos = lines[1].tests.find((t) => t.name.startsWith('chaos run'));
  assert.equal(chaos.status, 'fail');
  assert.match(chaos.message, /FAIL sends with no lookup since the previous send: [1-9]/);
  const claim = lines[2].tests.find((t) => t.name === 'claim serves the store that waited longest');
  assert.equal(claim.status, 'fail');
  assert.match(claim.message, /^claim returned with its transaction still open, so the lab rolled it back/);
  assert.equal(lines[2].tests.filter((t) => t.status !== 'pass').length, 1, 'only the unit test at 10000 ms fails');
  assert.equal(lines[3].message, `${INTERFERED}: it asked for send with arguments of the wrong types.`);
  fs.rmSync(dir, { recursive: true, force: true });
});


// The store runs learner SQL inside SQLite, C compiled to WebAssembly: hostile input
// in the grading thread's own interpreter. So a store serves one submission only,
// and the thread that held it is replaced (a fresh isolate and interpreter).
test('each courier submission gets a store of its own: the grading thread that held one is replaced after it', { timeout: 200_000 }, async () => {
  const { createGradingPool } = await import('../pool.mjs');
  const { loadGrader } = await import('../../host/node_host.mjs');
  const lab1 = JSON.parse(new (await loadGrader()).Grader().lab('deliver-once'));
  // Every piece raises: the cheapest submission whose runs still reach the store.
  const raises = ['claim', 'write_intent', 'deliver_step', 'merge', 'on_webhook', 'heartbeat']
    .map((f) => `def ${f}(*args):\n    raise RuntimeError("no")\n`).join('');
  const pool = createGradingPool({ jobs: 1 });
  try {
    await pool.ready;
    assert.equal(pool.stats.threadsStarted, 1);
    const a = await pool.grade({ lab: 'courier', source: raises });
    // Lab 1's submissions touch no store: the thread that grades them stays.
    const b = await pool.grade({ lab: 'deliver-once', source: lab1.reference_py });
    const c = await pool.grade({ lab: 'courier', source: raises });
    assert.deepEqual([a.status, b.status, c.status], ['fail', 'pass', 'fail']);
    // The same file, the same seed, a fresh store: the same report.
    assert.deepEqual({ ...c, duration_ms: 0 }, { ...a, duration_ms: 0 });
    assert.equal(pool.stats.threadsStarted, 3, 'one thread at the start, one more after each courier submission');
    assert.equal(pool.stats.storeReuses, 0);
  } finally {
    await pool.close();
  }
});

// Builds do not mix (issue 28): a pool grades with the grader it started with. Its
// grading threads load the pool's own copy, so a build made meanwhile (here: the
// folder it was copied from, made unusable) changes nothing, even for a thread
// started after it (each courier submission replaces its thread).
test('a pool grades with the grader it started with, whatever is built after', { timeout: 200_000 }, async () => {
  const { createGradingPool } = await import('../pool.mjs');
  const { loadGrader, graderFiles } = await import('../../host/node_host.mjs');
  const lab1 = JSON.parse(new (await loadGrader()).Grader().lab('deliver-once'));
  const pkgDir = fs.mkdtempSync(path.join(os.tmpdir(), 'delivery-lab-pinned-'));
  const raises = ['claim', 'write_intent', 'deliver_step', 'merge', 'on_webhook', 'heartbeat']
    .map((f) => `def ${f}(*args):\n    raise RuntimeError("no")\n`).join('');
  for (const file of Object.values(graderFiles())) fs.copyFileSync(file, path.join(pkgDir, path.basename(file)));
  const pool = createGradingPool({ jobs: 1, pkgDir });
  try {
    await pool.ready;
    for (const file of Object.values(graderFiles(pkgDir))) fs.writeFileSync(file, 'not a grader');
    const a = await pool.grade({ lab: 'courier', source: raises });
    const b = await pool.grade({ lab: 'deliver-once', source: lab1.reference_py });
    assert.deepEqual([a.status, b.status], ['fail', 'pass']);
    assert.equal(pool.stats.threadsStarted, 2, 'lab 1 was graded by a thread started after the change');
  } finally {
    await pool.close();
    fs.rmSync(pkgDir, { recursive: true, force: true });
  }
});

// One SQLite step can run long (instr() over a long text is one step of its
// machine, out of reach of the store's progress handler): the thread's CPU still
// counts against the limit, read from /proc, and a thread still busy THREAD_GRACE_MS
// after the stop is replaced, so no submission holds a slot past its limit.
test('a statement that runs long in one step is stopped at the limit and its grading thread replaced', { timeout: 120_000 }, async () => {
  const { createGradingPool, THREAD_GRACE_MS } = await import('../pool.mjs');
  const { loadGrader } = await import('../../host/node_host.mjs');
  const lab1 = JSON.parse(new (await loadGrader()).Grader().lab('deliver-once'));
  const bomb = "def claim(db, worker, now_ms, cfg):\n"
    + "    db.execute(\"SELECT instr(printf('%.*c', 900000, 'a'), printf('%.*c', 450000, 'a') || 'b')\").fetchall()\n"
    + ['write_intent', 'deliver_step', 'merge', 'on_webhook', 'heartbeat'].map((f) => `def ${f}(*a):\n    return None\n`).join('');
  const LIMIT_S = 2;
  // The clock's stop far off (30 s), so that the CPU limit ends the run however
  // loaded the machine is: the thread only needs 2 s of CPU in 30 s.
  const WALL_FACTOR = 15;
  const pool = createGradingPool({ jobs: 1, timeoutS: LIMIT_S, wallFactor: WALL_FACTOR });
  try {
    await pool.ready;
    const t0 = performance.now();
    const r = await pool.grade({ lab: 'courier', source: bomb });
    const tookMs = performance.now() - t0;
    assert.equal(r.status, 'fail');
    assert.equal(r.tests[0].status, 'timeout');
    assert.match(r.tests[0].message, new RegExp(`longer than the ${LIMIT_S} s limit of CPU time`));
    assert.equal(pool.stats.threadsHung, 1);
    assert.equal(pool.stats.stoppedByCpu, 1, 'the thread\'s CPU, read from /proc, reached the limit');
    // At most the clock's stop, the grace and a start: nothing like the statement's
    // own minutes of CPU (on a quiet machine, about the 2 s limit and the grace).
    assert.ok(tookMs < (LIMIT_S * WALL_FACTOR + THREAD_GRACE_MS / 1000) * 1000 + 8000, `${tookMs} ms`);
    // The slot is free: the next submission is graded by the new thread.
    assert.equal((await pool.grade({ lab: 'deliver-once', source: lab1.reference_py })).status, 'pass');
  } finally {
    await pool.close();
  }
});

// Issue 38: the store's SQLite kept its sorts and temporary tables in temporary
// files, which in Pyodide are JavaScript memory outside the store interpreter's
// capped WebAssembly memory: one ORDER BY over 2,000 values of 900 KB grew the
// grading process by 1.9 GB (peak RSS 0.4 -> 3.6 GB in the store's own test). Now
// they are kept in SQLite's capped heap (db_store.py TEMP_STORE, HEAP_CAP_BYTES),
// and a statement past it fails its call by name, whatever the code does with the
// exception (here: swallowed). The grading process's peak RSS is read from /proc
// while it grades (its sandboxes are other processes, not counted). About 25 s of
// the CLI's phase: the one check of the grading process's memory end to end.
test('a query past the store\'s memory fails its call by name, and the grading process stays bounded', { timeout: 200_000 }, async () => {
  const { QUERY_MEMORY_BOMB, BOMB_PEAK_BOUND_MB } = await import('../fixtures/query_memory.mjs');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'delivery-lab-cli-query-memory-'));
  write(dir, 'bomb.py', QUERY_MEMORY_BOMB);
  let peakKb = 0;
  const r = await new Promise((resolve) => {
    const child = execFile(process.execPath, [GRADE, '--lab', 'courier', '--jobs', '1', '--format', 'json', dir], { maxBuffer: 1 << 26 },
      (e, stdout, stderr) => { clearInterval(sampler); resolve({ code: e ? e.code : 0, stdout, stderr }); });
    const sampler = setInterval(() => {
      try {
        peakKb = Math.max(peakKb, Number(/VmHWM:\s+(\d+)/.exec(fs.readFileSync(`/proc/${child.pid}/status`, 'utf8'))[1]));
      } catch { /* not there yet, or gone */ }
    }, 50);
  });
  fs.rmSync(dir, { recursive: true, force: true });
  assert.equal(r.code, 1, r.stderr);
  const line = JSON.parse(r.stdout);
  assert.equal(line.status, 'fail');
  const bombed = line.tests.filter((t) => t.message?.startsWith('claim: your query used more than 256 MB of memory'));
  assert.deepEqual(bombed.map((t) => [t.name, t.status]), [['claim serves the store that waited longest', 'fail']], JSON.stringify(line.tests.map((t) => [t.name, t.status, t.message?.slice(0, 80)])));
  assert.equal(bombed[0].message, "claim: your query used more than 256 MB of memory (SQLite's, for the lab's database and for "
    + 'what a statement sorts, groups or keeps aside), so the lab stopped it. Read only the rows you need: a piece reads a few rows, '
    + 'never a sort or a join over everything.');
  assert.ok(peakKb > 0, 'the grading process was sampled');
  assert.ok(peakKb / 1024 < BOMB_PEAK_BOUND_MB, `the grading process peaked at ${(peakKb / 1024).toFixed(0)} MB`);
});
