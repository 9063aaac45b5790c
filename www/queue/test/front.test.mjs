// The front in this process, on a cluster of its own, without workers: it takes the
// labs of the registry it is handed (serve.mjs hands over the one it loaded at start
// instead of the front loading www/pkg's again), stores a submission with its job,
// and answers for it while it waits.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import pg from 'pg';
import { loadGrader } from '../../src/node_host.mjs';
import { BOSS_SCHEMA, SCHEMA } from '../common.mjs';
import { createQueueFront } from '../front.mjs';
import { Cluster, serverBinDir } from './pg_cluster.mjs';

const skip = !serverBinDir() ? 'PostgreSQL server binaries are not installed' : false;

async function post(url, body) {
  const r = await fetch(new URL('/grade', url), { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
  return { status: r.status, body: await r.json() };
}

test('the front grades the labs of the registry it is handed, and stores each submission with its job', { skip, timeout: 120_000 }, async () => {
  const cluster = new Cluster();
  let front;
  let server;
  try {
    cluster.start();
    await cluster.createDatabase('grading');
    const grader = new (await loadGrader()).Grader();
    const all = JSON.parse(grader.labs()).map((l) => l.id);
    assert.ok(all.includes('deliver-once') && all.includes('courier'), `the registry's labs: ${all}`);
    // The registry as handed over: one lab of the two the grader has.
    const registry = { labs: () => JSON.stringify(JSON.parse(grader.labs()).filter((l) => l.id === 'deliver-once')), lab: (id) => grader.lab(id) };
    const logged = [];
    front = await createQueueFront({ connectionString: cluster.url('grading'), registry, hiddenOf: () => ({ seed: null, statuses: 'each' }), log: (m) => logged.push(m) });
    server = http.createServer((req, res) => { if (!front.handle(req, res)) { res.writeHead(404); res.end(); } });
    await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
    const url = `http://127.0.0.1:${server.address().port}/`;

    const refused = await post(url, { lab: 'courier', source: 'x = 1\n' });
    assert.equal(refused.status, 404, JSON.stringify(refused.body));

    const stored = await post(url, { lab: 'deliver-once', source: 'x = 1\n' });
    assert.equal(stored.status, 202, JSON.stringify(stored.body));
    assert.equal(stored.body.status, 'queued');
    const got = await fetch(new URL(stored.body.url, url));
    assert.equal(got.status, 202);
    assert.deepEqual(await got.json(), { id: stored.body.id, status: 'queued', url: stored.body.url });
    assert.equal((await front.figures()).depth, 1);
    // Its job, in pg-boss's table: waiting to be taken.
    const c = new pg.Client({ connectionString: cluster.url('grading') });
    await c.connect();
    try {
      const { rows } = await c.query(`SELECT j.state, j.data FROM ${SCHEMA}.submissions s JOIN ${BOSS_SCHEMA}.job j ON j.name = s.queue AND j.id = s.job_id WHERE s.id = $1`, [stored.body.id]);
      assert.deepEqual(rows, [{ state: 'created', data: { submission: stored.body.id } }]);
    } finally {
      await c.end();
    }
    assert.deepEqual(logged, []);
  } finally {
    server?.close();
    await front?.close();
    cluster.close();
  }
});
