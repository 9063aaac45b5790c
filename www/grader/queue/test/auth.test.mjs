// Who may do what (issue 37): per-course API tokens, stored hashed, made, listed and
// revoked with ./lab token (tokens.mjs), rotated without downtime; idempotency keys
// and report reads scoped to the client; a front reached by other than loopback
// addresses refuses to start without a live token unless told --open. No workers:
// the front alone on a cluster of the test's own.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import crypto from 'node:crypto';
import http from 'node:http';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { SCHEMA, ensureSchema, makePool } from '../common.mjs';
import { NoTokens, createQueueFront, isLoopback } from '../front.mjs';
import { courseOf, makeToken, revokeToken } from '../tokens.mjs';
import { clusterWith, serverBinDir } from './pg_cluster.mjs';

const WWW = fileURLToPath(new URL('../../../', import.meta.url));
const skip = !serverBinDir() ? 'PostgreSQL server binaries are not installed' : false;
let cluster;
let url;
let db;

before(async () => {
  if (skip) return;
  ({ cluster, url } = await clusterWith());
  db = makePool(url);
  await ensureSchema(db);
});

after(async () => {
  await db?.end();
  cluster?.close();
});

/** A front on its own loopback server, started with `opts`; fn(request) then closed. */
async function withFront(opts, fn) {
  const front = await createQueueFront({ connectionString: url, hiddenOf: () => ({ seed: null, statuses: 'each' }), log: () => {}, ...opts });
  const server = http.createServer((req, res) => { if (!front.handle(req, res)) { res.writeHead(404); res.end(); } });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const base = `http://127.0.0.1:${server.address().port}`;
  const request = async (method, p, { token, key, body } = {}) => {
    for (let i = 0; ; i++) {
      const r = await fetch(`${base}${p}`, {
        method,
        headers: { ...(body ? { 'Content-Type': 'application/json' } : {}), ...(token ? { Authorization: `Bearer ${token}` } : {}), ...(key ? { 'Idempotency-Key': key } : {}) },
        ...(body ? { body: JSON.stringify(body) } : {}),
      });
      const text = await r.text();
      // 503: the database did not answer within the front's bound (a machine too busy): again.
      if (r.status === 503 && i < 20) { await new Promise((res) => setTimeout(res, 500)); continue; }
      return { status: r.status, body: text ? JSON.parse(text) : null, auth: r.headers.get('www-authenticate') };
    }
  };
  try {
    return await fn(request, front);
  } finally {
    server.close();
    await front.close();
  }
}

const grade = (source) => ({ lab: 'deliver-once', source });

test('tokens: only the SHA-256 of the secret is stored; a token verifies until revoked; a wrong secret, a malformed one or an unknown id does not', { skip }, async () => {
  const { id, token } = await makeToken(db, 'algo-101');
  assert.match(token, /^dlq_[0-9a-f]{12}_[A-Za-z0-9_-]{43}$/);
  const secret = token.split('_').slice(2).join('_');
  const { rows: [row] } = await db.query(`SELECT * FROM ${SCHEMA}.tokens WHERE id = $1`, [id]);
  assert.equal(row.secret_sha256, crypto.createHash('sha256').update(secret).digest('hex'));
  assert.ok(!JSON.stringify(row).includes(secret), 'the secret itself is nowhere in its row');
  assert.equal(await courseOf(db, token), 'algo-101');
  assert.equal(await courseOf(db, `${token.slice(0, -1)}${token.endsWith('A') ? 'B' : 'A'}`), null, 'a wrong secret');
  assert.equal(await courseOf(db, `dlq_000000000000_${secret}`), null, 'an unknown id');
  assert.equal(await courseOf(db, 'not a token'), null);
  assert.equal(await revokeToken(db, id), true);
  assert.equal(await courseOf(db, token), null, 'revoked');
  assert.equal(await revokeToken(db, id), false, 'revoked already');
});

test('./lab token make, list, revoke (tokens.mjs): the token printed once, listed by id and course, refused once revoked', { skip, timeout: 120_000 }, () => {
  const run = (...args) => spawnSync(process.execPath, [path.join(WWW, 'grader', 'queue', 'tokens.mjs'), ...args, '--queue', url], { encoding: 'utf8', timeout: 60_000 });
  const made = run('make', '--course', 'cli-course');
  assert.equal(made.status, 0, made.stderr);
  const token = made.stdout.trim();
  const id = /^dlq_([0-9a-f]{12})_/.exec(token)?.[1];
  assert.ok(id, made.stdout);
  assert.match(made.stderr, /not shown again/);
  const listed = run('list');
  assert.equal(listed.status, 0, listed.stderr);
  assert.match(listed.stdout, new RegExp(`^${id}  cli-course  made \\S+$`, 'm'));
  assert.ok(!listed.stdout.includes(token.slice(17)), 'list shows no secret');
  assert.equal(run('revoke', id).status, 0);
  assert.match(run('list').stdout, new RegExp(`^${id}  cli-course  made \\S+  revoked \\S+$`, 'm'));
  assert.equal(run('revoke', id).status, 1, 'no live token of that id');
  const bad = run('make');
  assert.equal(bad.status, 2);
  assert.match(bad.stderr, /make needs --course NAME/);
});

test('a front reached by other than loopback refuses to start without a live token, unless open on purpose', { skip, timeout: 120_000 }, async () => {
  for (const host of ['127.0.0.1', '127.0.0.2', '::1', 'localhost']) assert.ok(isLoopback(host), host);
  for (const host of ['0.0.0.0', '::', '192.0.2.1', 'lab.example']) assert.ok(!isLoopback(host), host);
  await db.query(`UPDATE ${SCHEMA}.tokens SET revoked_at = now() WHERE revoked_at IS NULL`);
  await assert.rejects(createQueueFront({ connectionString: url, hiddenOf: () => ({ seed: null, statuses: 'each' }), log: () => {}, loopbackOnly: false }),
    (e) => e instanceof NoTokens && /--open/.test(e.message));
  // Open on purpose: it starts, and the address is the client.
  await withFront({ loopbackOnly: false, open: true }, async (request) => {
    assert.equal((await request('POST', '/grade', { body: grade('x = 1\n') })).status, 202);
  });
  // Loopback only and no token: open, as on a developer's machine.
  await withFront({}, async (request) => {
    const r = await request('POST', '/grade', { body: grade('x = 2\n') });
    assert.equal(r.status, 202);
    assert.equal((await request('GET', r.body.url)).status, 202);
  });
});

test('clients are courses: keys and reads are a course\'s own; tokens rotate without downtime; no token, a bad one or a revoked one is 401', { skip, timeout: 120_000 }, async () => {
  const a1 = await makeToken(db, 'course-a');
  const b = await makeToken(db, 'course-b');
  await withFront({ loopbackOnly: false }, async (request) => {
    // Without a token, with a malformed or unknown one: 401 and nothing stored.
    const before = Number((await db.query(`SELECT count(*) FROM ${SCHEMA}.submissions`)).rows[0].count);
    for (const token of [undefined, 'nonsense', `dlq_000000000000_${'A'.repeat(43)}`]) {
      const r = await request('POST', '/grade', { token, body: grade('x = 3\n') });
      assert.equal(r.status, 401, `${token}: ${JSON.stringify(r.body)}`);
      assert.equal(r.auth, 'Bearer');
    }
    assert.equal(Number((await db.query(`SELECT count(*) FROM ${SCHEMA}.submissions`)).rows[0].count), before);

    const mine = await request('POST', '/grade', { token: a1.token, key: 'k-1', body: grade('x = 4\n') });
    assert.equal(mine.status, 202);
    const { rows: [row] } = await db.query(`SELECT client FROM ${SCHEMA}.submissions WHERE id = $1`, [mine.body.id]);
    assert.equal(row.client, 'course:course-a');
    // The same key and the same submission from another course: a new submission, not A's.
    const theirs = await request('POST', '/grade', { token: b.token, key: 'k-1', body: grade('x = 4\n') });
    assert.equal(theirs.status, 202);
    assert.notEqual(theirs.body.id, mine.body.id);
    assert.equal(theirs.body.repeated, undefined);
    // The same key with another submission from B: B's own conflict, with B's id.
    const conflict = await request('POST', '/grade', { token: b.token, key: 'k-1', body: grade('x = 5\n') });
    assert.equal(conflict.status, 409);
    assert.equal(conflict.body.id, theirs.body.id);
    // A's repeat is A's.
    const again = await request('POST', '/grade', { token: a1.token, key: 'k-1', body: grade('x = 4\n') });
    assert.equal(again.body.id, mine.body.id);
    assert.equal(again.body.repeated, true);

    // Reads: A's id is A's; to B it is as unknown as an id never made; without a token 401.
    assert.equal((await request('GET', `/grade/${mine.body.id}`, { token: a1.token })).status, 202);
    assert.equal((await request('GET', `/grade/${mine.body.id}`, { token: b.token })).status, 404);
    assert.equal((await request('GET', `/grade/${crypto.randomUUID()}`, { token: b.token })).status, 404);
    assert.equal((await request('GET', `/grade/${mine.body.id}`)).status, 401);
    // A report, once there, is read by its course only.
    await db.query(`UPDATE ${SCHEMA}.submissions SET report = '{"status":"pass"}' WHERE id = $1`, [mine.body.id]);
    assert.deepEqual((await request('GET', `/grade/${mine.body.id}`, { token: a1.token })).body, { status: 'pass' });
    assert.equal((await request('GET', `/grade/${mine.body.id}`, { token: b.token })).status, 404);

    // Rotation: a second token of course A works at once beside the first, for A's
    // submissions too; the first, revoked, is refused at the next request, the front running.
    const a2 = await makeToken(db, 'course-a');
    assert.equal((await request('GET', `/grade/${mine.body.id}`, { token: a2.token })).status, 200);
    assert.equal((await request('GET', `/grade/${mine.body.id}`, { token: a1.token })).status, 200);
    await revokeToken(db, a1.id);
    assert.equal((await request('GET', `/grade/${mine.body.id}`, { token: a1.token })).status, 401);
    assert.equal((await request('POST', '/grade', { token: a1.token, body: grade('x = 6\n') })).status, 401);
    assert.equal((await request('GET', `/grade/${mine.body.id}`, { token: a2.token })).status, 200);
    const afterRotation = await request('POST', '/grade', { token: a2.token, key: 'k-1', body: grade('x = 4\n') });
    assert.equal(afterRotation.body.id, mine.body.id, 'the course\'s key is still its own after the rotation');
  });
});
