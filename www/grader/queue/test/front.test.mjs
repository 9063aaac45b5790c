// The front in this process, on a cluster of its own, without workers: it takes the
// labs of the registry it is handed (serve.mjs hands over the one it loaded at start
// instead of the front loading www/pkg's again), stores a submission with its job,
// and answers for it while it waits. Then the reaper on those jobs, as pg-boss keeps
// them: a lease past its time puts its job back, a job pg-boss gave up on gets an
// error report, and a submission whose job is not in this pg-boss's schema is left
// to the processes of the pg-boss that has it.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import http from 'node:http';
import pg from 'pg';
import { loadGrader } from '../../../host/node_host.mjs';
import {
  BOSS_SCHEMA, RETRY_LIMIT, SCHEMA, buildId, fairFetch, fetchIn, inTx, makePool, queueName, reap, startBoss, takeLease, tx, writeReport,
} from '../common.mjs';
import { createQueueFront, QueueWaitTimeout } from '../front.mjs';
import { Cluster, serverBinDir } from './pg_cluster.mjs';

const skip = !serverBinDir() ? 'PostgreSQL server binaries are not installed' : false;
let cluster;
let front;
let server;
let url;
let db;

before(async () => {
  if (skip) return;
  cluster = new Cluster();
  cluster.start();
  await cluster.createDatabase('grading');
  const grader = new (await loadGrader()).Grader();
  const all = JSON.parse(grader.labs()).map((l) => l.id);
  assert.ok(all.includes('deliver-once') && all.includes('courier'), `the registry's labs: ${all}`);
  // The registry as handed over: one lab of the two the grader has.
  const registry = { labs: () => JSON.stringify(JSON.parse(grader.labs()).filter((l) => l.id === 'deliver-once')), lab: (id) => grader.lab(id) };
  // Its own reaper never runs here: the reaper's test calls reap() itself, and one run
  // by the front meanwhile would take its lease back first (a machine busy enough makes it so).
  front = await createQueueFront({ connectionString: cluster.url('grading'), registry, hiddenOf: () => ({ seed: null, statuses: 'each' }), log: () => {},
    reapEveryMs: 3_600_000 });
  server = http.createServer((req, res) => { if (!front.handle(req, res)) { res.writeHead(404); res.end(); } });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  url = `http://127.0.0.1:${server.address().port}/`;
  db = makePool(cluster.url('grading'));
});

after(async () => {
  server?.close();
  await front?.close();
  await db?.end();
  cluster?.close();
});

// A front answers 503 when the database does not answer within its bound (1.5 s), as
// on a machine too busy for a login to finish in time: a client tries again, as these do.
const AGAIN_503 = 20;

async function post(body) {
  for (let i = 0; ; i++) {
    const r = await fetch(new URL('/grade', url), { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
    const out = { status: r.status, body: await r.json() };
    if (out.status !== 503 || i >= AGAIN_503) return out;
    await new Promise((res) => setTimeout(res, 500));
  }
}

/** A stored submission's row and its job's state (null when its job is not in this pg-boss's schema). */
async function row(id) {
  const { rows: [r] } = await db.query(`SELECT s.report, s.lease_until, s.leases_lost, j.state FROM ${SCHEMA}.submissions s
    LEFT JOIN ${BOSS_SCHEMA}.job j ON j.name = s.queue AND j.id = s.job_id WHERE s.id = $1`, [id]);
  return r;
}

test('the front grades the labs of the registry it is handed, and stores each submission with its job', { skip, timeout: 60_000 }, async () => {
  const refused = await post({ lab: 'courier', source: 'x = 1\n' });
  assert.equal(refused.status, 404, JSON.stringify(refused.body));

  const stored = await post({ lab: 'deliver-once', source: 'x = 1\n' });
  assert.equal(stored.status, 202, JSON.stringify(stored.body));
  assert.equal(stored.body.status, 'queued');
  const got = await fetch(new URL(stored.body.url, url));
  assert.equal(got.status, 202);
  assert.deepEqual(await got.json(), { id: stored.body.id, status: 'queued', url: stored.body.url });
  assert.equal((await front.figures()).depth, 1);
  // Its job, in pg-boss's table: waiting to be taken.
  const { rows } = await db.query(`SELECT j.state, j.data FROM ${SCHEMA}.submissions s JOIN ${BOSS_SCHEMA}.job j ON j.name = s.queue AND j.id = s.job_id
    WHERE s.id = $1`, [stored.body.id]);
  assert.deepEqual(rows, [{ state: 'created', data: { submission: stored.body.id } }]);
});

test('the reaper: a lease past its time puts its job back, a job pg-boss gave up on gets an error report, another schema\'s job is left alone', { skip, timeout: 60_000 }, async () => {
  const boss = await startBoss(cluster.url('grading'), { supervise: false });
  const queue = queueName(buildId());
  const take = () => tx(db, async (c) => (await fetchIn(boss, queue, c))[0] ?? null);
  try {
    const expired = (await post({ lab: 'deliver-once', source: 'x = 2\n' })).body.id;
    const givenUp = (await post({ lab: 'deliver-once', source: 'x = 3\n' })).body.id;
    const elsewhere = (await post({ lab: 'deliver-once', source: 'x = 4\n' })).body.id;
    // Its job in another pg-boss's schema (a deployment's older version): not this one's.
    await db.query(`UPDATE ${SCHEMA}.submissions SET job_id = $2 WHERE id = $1`, [elsewhere, crypto.randomUUID()]);
    for (const id of [expired, elsewhere]) await db.query(`UPDATE ${SCHEMA}.submissions SET lease_worker = 'w', lease_until = now() - interval '1 s' WHERE id = $1`, [id]);

    // Its job taken by a worker that leased it and stopped heartbeating (the jobs before it are done).
    let job;
    while ((job = await take()) !== null && job.data.submission !== expired) await boss.complete(queue, job.id);
    assert.equal(job?.data.submission, expired);
    assert.equal((await row(expired)).state, 'active');
    assert.equal(await reap(db, boss), 1, 'one lease taken back: the other is not in this schema');
    const back = await row(expired);
    assert.equal(back.state, 'retry');
    assert.equal(back.lease_until, null);
    assert.equal(back.leases_lost, 1);
    const left = await row(elsewhere);
    assert.equal(left.state, null);
    assert.notEqual(left.lease_until, null, 'left to its own pg-boss');
    assert.equal(left.leases_lost, 0);

    // Taken and failed past its retries: pg-boss gives up, and the reaper reports.
    let takes = 0;
    while ((job = await take()) !== null) {
      if (job.data.submission !== givenUp) { await boss.complete(queue, job.id); continue; }
      takes += 1;
      await tx(db, (c) => boss.fail(queue, job.id, { message: 'test' }, { db: inTx(c) }));
    }
    assert.equal(takes, RETRY_LIMIT + 1);
    assert.equal((await row(givenUp)).state, 'failed');
    await reap(db, boss);
    const report = JSON.parse((await row(givenUp)).report);
    assert.equal(report.status, 'error');
    assert.match(report.message, /could not finish this submission/);
  } finally {
    await boss.stop({ graceful: false, wait: true, timeout: 2000 });
  }
});

test('a job fetch whose query fails throws its error (pg-boss alone answers "no job")', { skip, timeout: 60_000 }, async () => {
  const boss = await startBoss(cluster.url('grading'), { supervise: false });
  const queue = queueName(buildId());
  try {
    await post({ lab: 'deliver-once', source: 'x = 5\n' });
    // A client on which the fetch's query fails (as a statement cut off by the server would).
    const failing = (c) => ({ query: (text, values) => (/SKIP LOCKED/i.test(text)
      ? Promise.reject(Object.assign(new Error('canceling statement due to statement timeout'), { code: '57014' })) : c.query(text, values)) });
    const c = await db.connect();
    try {
      assert.deepEqual(await boss.fetch(queue, { batchSize: 1, db: inTx(failing(c)) }), [], 'pg-boss swallows it');
      await assert.rejects(fetchIn(boss, queue, failing(c)), { code: '57014' });
      // The job is still there, and the same fetch on a working client takes it.
      const [job] = await fetchIn(boss, queue, c);
      assert.ok(job?.data?.submission, 'a job is taken');
      await boss.complete(queue, job.id);
    } finally {
      c.release();
    }
  } finally {
    await boss.stop({ graceful: false, wait: true, timeout: 2000 });
  }
});

/** POST /grade from the loopback address `from` (the front's client is the address). */
async function postFrom(from, source, opts = {}) {
  for (let i = 0; ; i++) {
    const out = await postFromOnce(from, source, opts);
    if (out.status !== 503 || i >= AGAIN_503) return out;
    await new Promise((res) => setTimeout(res, 500));
  }
}

function postFromOnce(from, source, { base = url, headers = {} } = {}) {
  return new Promise((resolve, reject) => {
    const body = JSON.stringify({ lab: 'deliver-once', source });
    const req = http.request(new URL('/grade', base), { method: 'POST', localAddress: from, agent: false,
      headers: { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body), ...headers } }, (res) => {
      let text = '';
      res.on('data', (d) => { text += d; });
      res.on('end', () => resolve({ status: res.statusCode, body: JSON.parse(text), retryAfter: res.headers['retry-after'] }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

test('the fair claim: a client\'s single submission is taken right after the flood\'s first, not after the flood; a client at its cap waits', { skip, timeout: 60_000 }, async () => {
  const boss = await startBoss(cluster.url('grading'), { supervise: false });
  const queue = queueName(buildId());
  try {
    // What the earlier tests left in the queue is taken and done first.
    for (let job; (job = await tx(db, async (c) => (await fetchIn(boss, queue, c))[0] ?? null)) !== null;) await boss.complete(queue, job.id);
    const flood = [];
    for (let i = 0; i < 5; i++) flood.push((await postFrom('127.0.0.2', `x = ${100 + i}\n`)).body.id);
    const single = (await postFrom('127.0.0.3', 'x = 200\n')).body.id;
    const clientOf = async (id) => (await db.query(`SELECT client FROM ${SCHEMA}.submissions WHERE id = $1`, [id])).rows[0].client;
    assert.equal(await clientOf(flood[0]), '127.0.0.2');
    assert.equal(await clientOf(single), '127.0.0.3');

    // Taken one at a time, each reported before the next take (one worker of one job).
    const order = [];
    let job;
    while ((job = await tx(db, async (c) => (await fairFetch(c, queue))[0] ?? null)) !== null) {
      order.push(job.data.submission);
      await db.query(`UPDATE ${SCHEMA}.submissions SET report = '{}' WHERE id = $1`, [job.data.submission]);
      await boss.complete(queue, job.id);
    }
    assert.deepEqual(order, [flood[0], single, ...flood.slice(1)], 'the single one second; FIFO would take it last');

    // The cap: with one of A's in flight (leased) and a cap of 1, the next take is B's;
    // with B's in flight too, none, though A has more ready.
    const a = [];
    for (let i = 0; i < 3; i++) a.push((await postFrom('127.0.0.2', `x = ${300 + i}\n`)).body.id);
    const b = (await postFrom('127.0.0.3', 'x = 400\n')).body.id;
    const take = () => tx(db, async (c) => {
      const [j] = await fairFetch(c, queue, { cap: 1 });
      if (j) await takeLease(c, j.data.submission, 'test', 60);
      return j?.data.submission ?? null;
    });
    const first = await take();
    assert.ok(first === a[0] || first === b, `the first take is the oldest of the client served least recently: ${first}`);
    const second = await take();
    assert.deepEqual([first, second].sort(), [a[0], b].sort(), 'one of each client');
    assert.equal(await take(), null, 'both clients at their cap: nothing taken');
    assert.equal(Number((await db.query(`SELECT count(*) FROM ${BOSS_SCHEMA}.job WHERE name = $1 AND state = 'created'`, [queue])).rows[0].count), 2);
  } finally {
    await boss.stop({ graceful: false, wait: true, timeout: 2000 });
  }
});

test('--per-client with the queue: past N of one client\'s submissions waiting or grading, 429 with Retry-After; a repeat is still answered', { skip, timeout: 60_000 }, async () => {
  const capped = await createQueueFront({ connectionString: cluster.url('grading'), hiddenOf: () => ({ seed: null, statuses: 'each' }), log: () => {}, perClient: 2 });
  const srv = http.createServer((req, res) => { if (!capped.handle(req, res)) { res.writeHead(404); res.end(); } });
  await new Promise((resolve) => srv.listen(0, '127.0.0.1', resolve));
  const base = `http://127.0.0.1:${srv.address().port}/`;
  try {
    const one = await postFrom('127.0.0.4', 'x = 501\n', { base, headers: { 'Idempotency-Key': 'cap-1' } });
    const two = await postFrom('127.0.0.4', 'x = 502\n', { base });
    assert.deepEqual([one.status, two.status], [202, 202]);
    const three = await postFrom('127.0.0.4', 'x = 503\n', { base });
    assert.equal(three.status, 429, JSON.stringify(three.body));
    assert.equal(three.retryAfter, '5');
    assert.equal(three.body.retry_after_s, 5);
    // Another client is not held back by this one.
    assert.equal((await postFrom('127.0.0.5', 'x = 503\n', { base })).status, 202);
    // A repeat of a stored one is answered (its id), not refused.
    const again = await postFrom('127.0.0.4', 'x = 501\n', { base, headers: { 'Idempotency-Key': 'cap-1' } });
    assert.equal(again.status, 202);
    assert.equal(again.body.id, one.body.id);
    // One reported: room for one more.
    await db.query(`UPDATE ${SCHEMA}.submissions SET report = '{}' WHERE id = $1`, [one.body.id]);
    assert.equal((await postFrom('127.0.0.4', 'x = 503\n', { base })).status, 202);
    assert.equal((await postFrom('127.0.0.4', 'x = 504\n', { base })).status, 429);
  } finally {
    srv.close();
    await capped.close();
  }
});

test('gradeNow (the LTI tool\'s submissions, grader/lti/tool.mjs): stored as POST /grade stores it, answered with the report a worker writes', { skip, timeout: 60_000 }, async () => {
  const source = 'x = 500  # through LTI\n';
  const graded = front.gradeNow({ lab: 'deliver-once', source, client: 'lti', waitS: 30 });
  let sid = null;
  for (let i = 0; !sid && i < 200; i++) {
    sid = (await db.query(`SELECT id FROM ${SCHEMA}.submissions WHERE client = 'lti' AND source_json = $1`, [JSON.stringify(source)])).rows[0]?.id ?? null;
    if (!sid) await new Promise((r) => setTimeout(r, 50));
  }
  assert.ok(sid, 'stored, under the client lti');
  // A worker's part: the lease, then the report under it.
  const report = { file: 'submission.py', lab: 'deliver-once', status: 'fail', score: 3, max_score: 23 };
  await tx(db, async (c) => {
    const lease = await takeLease(c, sid, 'test', 60);
    assert.ok(await writeReport(c, { sid, epoch: lease.lease_epoch, report: JSON.stringify(report), by: 'test', ms: 1 }));
  });
  assert.deepEqual(await graded, report);
  // Again within the repeat window: the stored report, at once.
  assert.deepEqual(await front.gradeNow({ lab: 'deliver-once', source, client: 'lti', waitS: 1 }), report);
  // No worker: a typed time-out after the wait.
  await assert.rejects(front.gradeNow({ lab: 'deliver-once', source: `x = '${crypto.randomUUID()}'\n`, client: 'lti', waitS: 0.3 }), QueueWaitTimeout);
});
