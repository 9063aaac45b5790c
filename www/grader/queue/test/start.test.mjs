// A worker that starts while the queue's database is away (a restart after a crash,
// a machine still booting) waits for it and then takes jobs, instead of exiting; a
// database that refuses it (a wrong password) is no reason to wait: exit 2 at once.
// (The proof's 300-file run found the first: a worker restarted after a SIGKILL at
// the moment PostgreSQL crashed exited with "could not start".)
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { jailProblem } from '../../jail.mjs';
import { descendants, isZombie, processes } from '../../procfs.mjs';
import { Cluster, serverBinDir } from './pg_cluster.mjs';

const WWW = fileURLToPath(new URL('../../../', import.meta.url));
const skip = !serverBinDir() ? 'PostgreSQL server binaries are not installed' : jailProblem() ? `the sandbox does not work here: ${jailProblem()}` : false;

function worker(url) {
  const child = spawn(process.execPath, [path.join(WWW, 'grader', 'queue', 'worker.mjs'), '--queue', url, '--jobs', '1'], { stdio: ['ignore', 'pipe', 'pipe'] });
  child.log = '';
  child.stdout.on('data', (d) => { child.log += d; });
  child.stderr.on('data', (d) => { child.log += d; });
  child.ended = new Promise((resolve) => child.once('exit', (code) => resolve(code)));
  return child;
}

/** Resolves when `re` matches the child's output; rejects when it ends first or `ms` pass. */
function until(child, re, ms) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => { clearInterval(poll); reject(new Error(`not seen within ${ms} ms: ${re}\n${child.log.slice(-2000)}`)); }, ms);
    const poll = setInterval(() => {
      if (re.test(child.log)) { clearTimeout(timer); clearInterval(poll); resolve(); }
      else if (child.exitCode !== null) { clearTimeout(timer); clearInterval(poll); reject(new Error(`it ended (${child.exitCode}) first:\n${child.log.slice(-2000)}`)); }
    }, 50);
  });
}

/** Runs `fn(spawnWorker, cluster)` with a cluster whose database `grading` exists
 *  and which is down (crashed) at the start; every worker spawned is killed after. */
async function withDatabaseDown(fn) {
  const cluster = new Cluster();
  const children = [];
  try {
    cluster.start();
    await cluster.createDatabase('grading');
    cluster.crash();
    await fn((url = cluster.url('grading')) => {
      const w = worker(url);
      children.push(w);
      return w;
    }, cluster);
  } finally {
    for (const c of children) if (c.exitCode === null) c.kill('SIGKILL');
    cluster.close();
  }
}

test('a worker started while the database is down waits for it, then takes jobs; a refused login exits 2 at once', { skip, timeout: 240_000 }, async () => {
  await withDatabaseDown(async (spawnWorker, cluster) => {
    const w = spawnWorker();
    await until(w, /the queue's database is not reachable \(.*\): trying again for up to 120 s/, 30_000);
    await new Promise((r) => setTimeout(r, 2000));
    assert.equal(w.exitCode, null, `it waits, and is still running:\n${w.log}`);
    assert.doesNotMatch(w.log, /could not start/);

    cluster.start();
    await until(w, /^ready /m, 120_000);
    w.kill('SIGTERM');
    assert.equal(await w.ended, 0, w.log.slice(-2000));

    // Not the database being away: the server answers, and refuses the login.
    const wrong = spawnWorker(cluster.url('grading').replace(`:${cluster.password}@`, ':not-the-password@'));
    const t0 = performance.now();
    assert.equal(await wrong.ended, 2, wrong.log);
    assert.match(wrong.log, /worker: could not start: password authentication failed/);
    assert.doesNotMatch(wrong.log, /trying again/);
    assert.ok(performance.now() - t0 < 30_000, 'at once, not after the wait');
  });
});

// A worker told to stop while it starts (a deployment scaled down, a test ending) exits
// 0 and leaves nothing running, at every step of its start. (The 60-file proof found
// it: a worker restarted after a SIGKILL got the closing SIGTERM while its pool was
// still starting, and died of the signal.)
test('a worker SIGTERMed while it starts exits 0 and leaves no process: waiting for the database, starting its pool', { skip, timeout: 240_000 }, async () => {
  await withDatabaseDown(async (spawnWorker, cluster) => {
    // Waiting for the database.
    const w = spawnWorker();
    await until(w, /the queue's database is not reachable/, 30_000);
    let t0 = performance.now();
    w.kill('SIGTERM');
    assert.equal(await w.ended, 0, w.log.slice(-2000));
    assert.equal(w.signalCode, null);
    assert.match(w.log, /stopped while starting; it took no job/);
    assert.ok(performance.now() - t0 < 10_000, `at once, not after the database's wait (${Math.round(performance.now() - t0)} ms)`);

    // Starting its grading pool, the database up.
    cluster.start();
    const v = spawnWorker();
    await until(v, /starts its grading pool/, 120_000);
    const tree = descendants(v.pid);
    t0 = performance.now();
    v.kill('SIGTERM');
    assert.equal(await v.ended, 0, v.log.slice(-2000));
    assert.match(v.log, /stopped while starting; it took no job/);
    assert.doesNotMatch(v.log, /^ready /m);
    assert.ok(performance.now() - t0 < 30_000, `promptly (${Math.round(performance.now() - t0)} ms)`);
    const live = new Set([...processes()].map((p) => p.pid));
    assert.deepEqual(tree.filter((pid) => live.has(pid) && !isZombie(pid)), [], 'the pool it was starting is gone');
  });
});
