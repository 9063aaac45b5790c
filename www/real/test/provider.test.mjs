// The real run's provider server (www/real/provider.mjs): the simulation's own
// provider behind HTTP on loopback. With a clock the test drives, every answer,
// timeout and webhook is the one the bare provider gives for the same seed and
// times: the HTTP layer adds no behaviour of its own. And it stays up for bad
// requests, and keeps an append-only log on disk.
// Run: node --test real/test/provider.test.mjs   (needs www/pkg)
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { loadGrader } from '../../host/node_host.mjs';
import { startProvider } from '../provider.mjs';

const HOLD_MS = 60;

/** A request; resolves to { status, body } or { timeout: true } when the server hangs up unanswered. */
function request(url, { method = 'GET', body } = {}) {
  return new Promise((resolve) => {
    const req = http.request(url, { method, headers: body ? { 'Content-Type': 'application/json' } : {} }, (res) => {
      let text = '';
      res.on('data', (d) => { text += d; });
      res.on('end', () => resolve({ status: res.statusCode, body: text ? JSON.parse(text) : null }));
    });
    req.on('error', () => resolve({ timeout: true }));
    req.end(body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body));
  });
}

/** A webhook receiver that refuses the first `refuse` posts (500) and keeps the rest. */
async function receiver(refuse = 0) {
  const got = [];
  let seen = 0;
  const server = http.createServer((req, res) => {
    let text = '';
    req.on('data', (d) => { text += d; });
    req.on('end', () => {
      seen += 1;
      if (seen <= refuse) { res.writeHead(500); res.end(); return; }
      got.push(JSON.parse(text));
      res.writeHead(204);
      res.end();
    });
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  return { url: `http://127.0.0.1:${server.address().port}/webhook`, got, seen: () => seen, close: () => new Promise((r) => server.close(r)) };
}

const waitFor = async (cond, ms = 5000) => {
  const t0 = Date.now();
  while (!cond()) {
    if (Date.now() - t0 > ms) throw new Error('timed out waiting');
    await new Promise((r) => setTimeout(r, 10));
  }
};

test('over HTTP, the provider answers, times out, lags and sends webhooks exactly as the simulation\'s provider does', { timeout: 60_000 }, async () => {
  const pkg = await loadGrader();
  const SEED = 99;
  const bare = new pkg.CourierProvider(SEED);
  const hooks = await receiver(3);
  const logFile = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'delivery-lab-provider-')), 'provider.log');
  let t = 0;
  const p = await startProvider({ seed: SEED, webhookUrl: hooks.url, clock: () => t, holdMs: HOLD_MS, tickMs: 0, retryMs: 5, logFile });
  try {
    let timeouts = 0;
    const expectedHooks = [];
    // 300 sends over 40 keys (replays within a key's memory) with lookups between.
    for (let i = 0; i < 300; i++) {
      t = i * 0.25;
      const key = `k${i % 40}`;
      const want = JSON.parse(bare.send(t, i % 40, key));
      const got = await request(`${p.url}/send`, { method: 'POST', body: { action: i % 40, key, phone: '+15550100', body: `action ${i % 40}` } });
      if (want.answer === 'timeout') {
        timeouts += 1;
        assert.deepEqual(got, { timeout: true }, `send ${i}`);
      } else {
        assert.deepEqual(got, { status: 200, body: want }, `send ${i}`);
      }
      if (i % 3 === 0) {
        const wantL = JSON.parse(bare.lookup(t, key));
        const gotL = await request(`${p.url}/lookup?key=${key}`);
        assert.deepEqual(wantL.answer === 'timeout' ? { timeout: true } : { status: 200, body: wantL }, gotL, `lookup ${i}`);
      }
      expectedHooks.push(...JSON.parse(bare.due_webhooks(t)));
      p.tick();
      // The server's webhooks for this moment are out before time moves on.
      await waitFor(() => hooks.got.length === expectedHooks.length);
    }
    assert.ok(timeouts > 0, 'some requests timed out (the seed\'s 5%)');
    const strip = (w) => ({ event_id: w.event_id, key: w.key, message_id: w.message_id, status: w.status });
    assert.deepEqual(hooks.got, expectedHooks.map(strip));
    assert.ok(expectedHooks.length > 50, `${expectedHooks.length} webhooks`);
    assert.equal(hooks.seen(), expectedHooks.length + 3, 'the three refused posts were sent again');
    // The provider's own log, over HTTP and on disk, is the bare provider's.
    const log = JSON.parse(bare.log_since(0));
    assert.deepEqual((await request(`${p.url}/log`)).body, log);
    const tally = await request(`${p.url}/tally`, { method: 'POST', body: { actions: Array.from({ length: 40 }, (_, i) => i) } });
    assert.deepEqual(tally.body, JSON.parse(bare.tally(Array.from({ length: 40 }, (_, i) => i))));
    await p.close();
    const onDisk = fs.readFileSync(logFile, 'utf8').trim().split('\n').map((l) => JSON.parse(l));
    assert.deepEqual(onDisk, log);
  } finally {
    await p.close();
    await hooks.close();
  }
});

test('the provider server refuses malformed requests with 4xx and stays up; in real time its webhooks arrive', { timeout: 30_000 }, async () => {
  const hooks = await receiver();
  const p = await startProvider({ seed: 5, webhookUrl: hooks.url, holdMs: HOLD_MS });
  try {
    const bad = [
      [{ method: 'POST', body: 'not json' }, 400],
      [{ method: 'POST', body: [] }, 400],
      [{ method: 'POST', body: { action: 1.5, key: 'k', phone: 'p', body: 'b' } }, 400],
      [{ method: 'POST', body: { action: -1, key: 'k', phone: 'p', body: 'b' } }, 400],
      [{ method: 'POST', body: { action: 1, key: 7, phone: 'p', body: 'b' } }, 400],
      [{ method: 'POST', body: { action: 1, key: 'k'.repeat(5000), phone: 'p', body: 'b' } }, 400],
      [{ method: 'POST', body: 'x'.repeat(70 * 1024) }, 413],
    ];
    for (const [opts, status] of bad) assert.equal((await request(`${p.url}/send`, opts)).status, status, JSON.stringify(opts).slice(0, 80));
    assert.equal((await request(`${p.url}/lookup`)).status, 400);
    assert.equal((await request(`${p.url}/nowhere`)).status, 404);
    assert.equal((await request(`${p.url}/tally`, { method: 'POST', body: { actions: ['a'] } })).status, 400);
    // Real time: a send that is accepted has its webhooks within the provider's 5 s
    // (plus a late "failed" in 1%); wait for the first.
    let accepted = null;
    for (let i = 0; !accepted && i < 20; i++) {
      const r = await request(`${p.url}/send`, { method: 'POST', body: { action: i, key: `real-${i}`, phone: 'p', body: 'b' } });
      if (r.status === 200) accepted = r.body;
    }
    assert.ok(accepted, 'one of 20 sends was accepted');
    await waitFor(() => hooks.got.some((h) => h.message_id === accepted.message_id), 12_000);
  } finally {
    await p.close();
    await hooks.close();
  }
});

// The run freezes a worker while the provider holds back the answer to its request
// (run.py's freeze): the request is taken and logged at once, only the answer waits
// for /release; one hold catches one request of its action, a lookup naming its
// action too; other actions are answered as usual.
test('a hold takes and logs the request at once and keeps its answer until released, for that action only', { timeout: 30_000 }, async () => {
  let t = 0;
  const pkg = await loadGrader();
  const bare = new pkg.CourierProvider(7);
  const p = await startProvider({ seed: 7, clock: () => t, holdMs: HOLD_MS, tickMs: 0 });
  try {
    const holding = async (a) => (await request(`${p.url}/holding?action=${a}`)).body.holding;
    assert.equal((await request(`${p.url}/hold`, { method: 'POST', body: { action: 3 } })).status, 200);
    assert.equal(await holding(3), false, 'armed, with no request yet');
    let answered = null;
    const held = request(`${p.url}/send`, { method: 'POST', body: { action: 3, key: 'k3', phone: 'p', body: 'b' } })
      .then((r) => { answered = r; return r; });
    await waitFor(() => p.provider.log_since(0) !== '[]');
    assert.equal(await holding(3), true);
    const want = JSON.parse(bare.send(0, 3, 'k3'));
    assert.deepEqual(JSON.parse(p.provider.log_since(0)), JSON.parse(bare.log_since(0)), 'logged at once');
    // Another action's request goes through while action 3's answer waits.
    t = 1;
    const other = await request(`${p.url}/send`, { method: 'POST', body: { action: 4, key: 'k4', phone: 'p', body: 'b' } });
    const wantOther = JSON.parse(bare.send(1, 4, 'k4'));
    assert.deepEqual(wantOther.answer === 'timeout' ? { timeout: true } : { status: 200, body: wantOther }, other);
    await new Promise((r) => setTimeout(r, 100));
    assert.equal(answered, null, 'the held answer waits');
    assert.equal((await request(`${p.url}/release`, { method: 'POST', body: { action: 3 } })).status, 200);
    assert.deepEqual(await held, want.answer === 'timeout' ? { timeout: true } : { status: 200, body: want });
    assert.equal(await holding(3), false);
    // A hold catches one request only; a lookup naming its action is caught too.
    const answer = (want) => (want.answer === 'timeout' ? { timeout: true } : { status: 200, body: want });
    await request(`${p.url}/hold`, { method: 'POST', body: { action: 5 } });
    const before = JSON.parse(p.provider.log_since(0)).length;
    const lookup = request(`${p.url}/lookup?key=k3&action=5`);
    await waitFor(() => JSON.parse(p.provider.log_since(0)).length > before);
    assert.equal(await holding(5), true);
    await request(`${p.url}/release`, { method: 'POST', body: { action: 5 } });
    assert.deepEqual(await lookup, answer(JSON.parse(bare.lookup(1, 'k3'))));
    assert.deepEqual(await request(`${p.url}/lookup?key=k3&action=5`), answer(JSON.parse(bare.lookup(1, 'k3'))), 'not held');
    // A client that gives up waiting is held no more.
    await request(`${p.url}/hold`, { method: 'POST', body: { action: 6 } });
    const gone = http.request(`${p.url}/send`, { method: 'POST', headers: { 'Content-Type': 'application/json' } });
    gone.on('error', () => {});
    gone.end(JSON.stringify({ action: 6, key: 'k6', phone: 'p', body: 'b' }));
    await waitFor(() => JSON.parse(p.provider.log_since(0)).some((e) => JSON.stringify(e).includes('k6')));
    assert.equal(await holding(6), true);
    gone.destroy();
    const t1 = Date.now();
    while (await holding(6)) {
      assert.ok(Date.now() - t1 < 5000, 'still held after its client went');
      await new Promise((r) => setTimeout(r, 10));
    }
    for (const [path, body] of [['/hold', { action: -1 }], ['/release', { action: 'x' }], ['/hold', []]]) {
      assert.equal((await request(`${p.url}${path}`, { method: 'POST', body })).status, 400, path);
    }
    assert.equal((await request(`${p.url}/holding`)).status, 400);
  } finally {
    await p.close();
  }
});
