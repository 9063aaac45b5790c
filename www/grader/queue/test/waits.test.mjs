// Bounded waits (issue 37): with PostgreSQL frozen (every process of the cluster
// SIGSTOPped: the server is there and answers nothing) and then unreachable (stopped),
// the front answers POST /grade, GET /grade/ID, /readyz and /metrics with 503 and
// Retry-After within 2 s, /healthz stays 200; a worker's queries run out of time
// (counted) instead of holding its slot; once the database is back (SIGCONT) the
// front stores again and the worker grades.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import pg from 'pg';
import { descendants } from '../../procfs.mjs';
import { jailProblem } from '../../jail.mjs';
import { DB_TIMEOUTS, SCHEMA } from '../common.mjs';
import { createQueueFront } from '../front.mjs';
import { startWorker } from '../worker.mjs';
import { clusterWith, serverBinDir } from './pg_cluster.mjs';
import { until } from './until.mjs';

const skip = !serverBinDir() ? 'PostgreSQL server binaries are not installed' : jailProblem() ? `the sandbox does not work here: ${jailProblem()}` : false;
const BOUND_MS = 2000; // the issue's bound on a 503
const waitFor = (fn, what, ms) => until(fn, what, ms, 200);

let cluster;
let url;
let front;
let server;
let base;

before(async () => {
  if (skip) return;
  ({ cluster, url } = await clusterWith());
  front = await createQueueFront({ connectionString: url, hiddenOf: () => ({ seed: null, statuses: 'each' }), log: () => {} });
  server = http.createServer((req, res) => { if (!front.handle(req, res)) { res.writeHead(404); res.end(); } });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${server.address().port}/`;
});

after(async () => {
  freeze('SIGCONT');
  server?.close();
  await front?.close();
  cluster?.close();
});

/** Sends `signal` to every process of the cluster: its postmaster and all it started. */
function freeze(signal = 'SIGSTOP') {
  const pidFile = path.join(cluster?.data ?? '/nonexistent', 'postmaster.pid');
  if (!fs.existsSync(pidFile)) return 0;
  const postmaster = Number(fs.readFileSync(pidFile, 'utf8').split('\n')[0]);
  const all = [postmaster, ...descendants(postmaster)];
  for (const pid of all) { try { process.kill(pid, signal); } catch { /* gone */ } }
  return all.length;
}

/** The request's answer and how long it took. A connection of its own each (no
 *  keep-alive: the cluster's pg_ctl runs block this process's event loop, and a
 *  kept connection can be closed by the server as it is reused). */
function timed(pathName, { method = 'GET', headers = {}, body } = {}) {
  const t0 = performance.now();
  return new Promise((resolve, reject) => {
    const req = http.request(new URL(pathName, base), { method, headers, agent: false, timeout: 30_000 }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d) => { text += d; });
      res.on('end', () => resolve({ status: res.statusCode, text, retryAfter: res.headers['retry-after'] ?? null, ms: performance.now() - t0 }));
    });
    req.on('timeout', () => req.destroy(new Error(`${method} ${pathName}: no answer in 30 s`)));
    req.on('error', reject);
    req.end(body);
  });
}
const postGrade = (source) => timed('/grade', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ lab: 'deliver-once', source }) });

/** Every one of the front's database paths answers 503 with Retry-After within BOUND_MS; /healthz 200. */
async function allUnavailable(what, id) {
  const times = [];
  for (const [name, ask] of [
    ['POST /grade', () => postGrade(`x = ${Math.random()}\n`)],
    ['POST /grade again', () => postGrade(`x = ${Math.random()}\n`)],
    ['GET /grade/ID', () => timed(`/grade/${id}`)],
    ['GET /readyz', () => timed('/readyz')],
    ['GET /metrics', () => timed('/metrics')],
  ]) {
    const r = await ask();
    times.push([name, r.ms]);
    assert.equal(r.status, 503, `${what}: ${name} answered ${r.status} ${r.text}`);
    if (name !== 'GET /readyz') assert.equal(r.retryAfter, '5', `${what}: ${name} says when to try again`);
    assert.ok(r.ms < BOUND_MS, `${what}: ${name} answered in ${Math.round(r.ms)} ms (at most ${BOUND_MS})`);
    if (name === 'GET /readyz') assert.match(JSON.parse(r.text).why, /did not answer within|connect|ECONNREFUSED|ENOENT|timeout/i, r.text);
  }
  console.log(`# ${what}: ${times.map(([n, ms]) => `${n} ${Math.round(ms)} ms`).join(', ')}`);
  const h = await timed('/healthz');
  assert.equal(h.status, 200, `${what}: the process itself is fine`);
}

test('a frozen database (SIGSTOPped), then an unreachable one: 503 with Retry-After within 2 s; the worker\'s queries run out of time; both recover',
  { skip, timeout: 300_000 }, async () => {
    assert.ok(DB_TIMEOUTS.front.requestMs < BOUND_MS);
    // (Before the faults, a 503 is a machine too busy for a login within the bound: again.)
    const first = await waitFor(async () => { const r = await postGrade('x = 1\n'); return r.status !== 503 ? r : null; }, 'the first POST');
    assert.equal(first.status, 202, first.text);
    const { id } = JSON.parse(first.text);
    await waitFor(async () => (await timed('/readyz')).status === 200, 'ready');

    const worker = await startWorker({ connectionString: url, jobs: 1, leaseS: 30, pollMs: 100, log: () => {} });
    const db = new pg.Client({ connectionString: url });
    try {
      // The worker grades the first submission: it is up and asking.
      await waitFor(async () => (await timed(`/grade/${id}`)).status === 200, 'the first submission graded');

      // Frozen: the server's processes are there and answer nothing.
      assert.ok(freeze('SIGSTOP') >= 2, 'the postmaster and its processes');
      const errors0 = worker.stats.dbErrors;
      await allUnavailable('frozen', id);
      // The worker's slot asked, and its query ran out of time (DB_TIMEOUTS.worker) rather than hanging.
      await waitFor(() => worker.stats.dbErrors > errors0, 'a worker query out of time', DB_TIMEOUTS.worker.queryMs * 4);

      // Back: the front stores again, the worker grades it.
      freeze('SIGCONT');
      const again = await waitFor(async () => { const r = await postGrade('x = 2\n'); return r.status === 202 ? r : null; }, 'a POST stored after the thaw');
      const id2 = JSON.parse(again.text).id;
      await waitFor(async () => (await timed(`/grade/${id2}`)).status === 200, 'graded after the thaw');
      await waitFor(async () => (await timed('/readyz')).status === 200, 'ready after the thaw');

      // Unreachable: the server is gone (its socket too).
      cluster.crash();
      await allUnavailable('stopped', id);
      cluster.start();
      await waitFor(async () => (await timed('/readyz')).status === 200, 'ready once it is back');
      await db.connect();
      const { rows } = await db.query(`SELECT count(*)::int AS n FROM ${SCHEMA}.submissions WHERE report IS NOT NULL`);
      assert.equal(rows[0].n, 2);
    } finally {
      freeze('SIGCONT');
      await db.end().catch(() => {});
      await worker.stop({ graceS: 0 });
    }
  });
