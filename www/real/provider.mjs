// The courier lab's misbehaving SMS provider as a real HTTP server on loopback, for
// the real run (issue 12; www/real/README.md). It is the simulation's own provider
// (src/courier/provider.rs, through the grader's WASM module as `CourierProvider`),
// so the behaviour is written once: seeded timeouts (the request lost, or only the
// answer), keys remembered an hour, lookups that lag, duplicate, out-of-order and
// late webhooks. Only time is real here: seconds since the server started, or a
// clock the caller gives (the tests drive one by hand).
//
//   POST /send    {"action": 17, "key": "...", "phone": "...", "body": "..."}
//   GET  /lookup?key=...
//        200 with the provider's answer as JSON; a timeout answers nothing: the
//        connection is held for holdMs, then closed, as a provider that hangs.
//   POST /hold {"action": 17}   the answer to the next request for action 17 (a send,
//                 or a lookup given &action=17) waits for POST /release {"action": 17};
//                 GET /holding?action=17 says whether one waits now (its client still
//                 connected); GET /holds how many wait for their request now, the most
//                 at once, and how many answers were held in all. The request
//                 itself is taken and logged as usual: only its answer is slow, as on
//                 a slow network. The run freezes a worker while it waits so (run.py).
//   GET  /log     the provider's own log (JSON array); POST /tally {"actions": [...]}
//                 the chaos counts read from it; GET /final each action's final status;
//                 GET /pending the webhooks not yet taken by the receiver
//
// Webhooks go out by POST to `webhookUrl` when due (JSON {event_id, key,
// message_id, status}), one at a time in due order, again every retryMs until
// the receiver answers 2xx (a killed receiver misses none). Each log entry is also
// appended to `logFile` as a JSON line the moment it is made: the log a run's
// verdict is read from survives whatever happens to the processes around it.
import fs from 'node:fs';
import http from 'node:http';
import { BodyError, GONE, readBody, utf8Of } from '../grader/body.mjs';
import { loadGrader } from '../host/node_host.mjs';

const MAX_BODY_BYTES = 64 * 1024;
const BODY_TIMEOUT_MS = 10_000;
const MAX_KEY_CHARS = 1024;
const TEXT_FIELDS = ['key', 'phone', 'body'];

/**
 * Starts the provider; resolves to { url, port, provider, close() }.
 * @param {object} o
 * @param {number} o.seed            the provider's seed (the run's)
 * @param {string} [o.webhookUrl]    where webhooks go (none sent without it)
 * @param {() => number} [o.clock]   seconds since the run began (default: real time)
 * @param {number} [o.holdMs]        how long a timed-out request is held (default 1500)
 * @param {number} [o.tickMs]        how often due webhooks are looked for (default 20; 0: only by tick())
 * @param {number} [o.retryMs]       how soon a webhook the receiver refused goes again (default 200)
 * @param {string} [o.logFile]       the log as JSON lines, appended as it grows
 * @param {string} [o.learnerSocket] a Unix socket to serve the learner's API on too
 *                                   (POST /send and GET /lookup only): the real run's
 *                                   sandboxed workers have no network
 * @param {string} [o.webhookSocket] post webhooks to POST /webhook on this Unix socket
 *                                   instead of webhookUrl (a sandboxed receiver's)
 */
export async function startProvider({ seed, webhookUrl, clock, holdMs = 1500, tickMs = 20, retryMs = 200, logFile, learnerSocket, webhookSocket } = {}) {
  if (!Number.isInteger(seed) || seed < 0 || seed > 0xffffffff) throw new Error('startProvider: seed must be a whole number from 0 to 2^32 - 1');
  const pkg = await loadGrader();
  const provider = new pkg.CourierProvider(seed);
  const t0 = performance.now();
  const now = clock ?? (() => (performance.now() - t0) / 1000);
  const held = new Set();
  // action -> the answer held back for it (null until its request comes).
  const holds = new Map();
  // How many holds waited for their request at once, at most, and how many answers
  // were held in all (GET /holds): the run arms a few at a time (run.py HOLDS_ARMED).
  const holding = { most: 0, held: 0 };
  const armedNow = () => [...holds.values()].filter((v) => v === null).length;
  let written = 0;
  let closed = false;

  // The log file grows with the provider's log, entry by entry.
  const flushLog = () => {
    const fresh = JSON.parse(provider.log_since(written));
    written += fresh.length;
    if (logFile && fresh.length) fs.appendFileSync(logFile, fresh.map((e) => `${JSON.stringify(e)}\n`).join(''));
  };

  const reply = (res, status, body) => {
    const text = JSON.stringify(body);
    res.writeHead(status, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(text) });
    res.end(text);
  };
  // What a provider that times out does: no answer, then the connection drops.
  const hang = (req) => {
    const socket = req.socket;
    held.add(socket);
    const t = setTimeout(() => { held.delete(socket); socket.destroy(); }, holdMs);
    socket.once('close', () => { clearTimeout(t); held.delete(socket); });
  };
  const answer = (req, res, text, action) => {
    const a = JSON.parse(text);
    flushLog();
    const deliver = () => (a.answer === 'timeout' ? hang(req) : reply(res, 200, a));
    if (holds.has(action) && holds.get(action) === null) {
      holds.set(action, deliver);
      holding.held += 1;
      // A client that gave up waiting is no longer held: /holding says so.
      req.socket.once('close', () => { if (holds.get(action) === deliver) holds.set(action, 'gone'); });
    } else deliver();
  };
  const actionOf = (v) => (Number.isSafeInteger(v) && v >= 0 ? v : undefined);
  const actionParam = (url) => {
    const v = url.searchParams.get('action');
    return v !== null && /^[0-9]{1,15}$/.test(v) ? Number(v) : undefined;
  };

  // The body read within its bounds (grader/body.mjs: 413 past MAX_BODY_BYTES, 408
  // past BODY_TIMEOUT_MS, each closing the connection), then parsed as an object.
  function readJson(req, then, res) {
    readBody(req, res, { maxBytes: MAX_BODY_BYTES, timeoutMs: BODY_TIMEOUT_MS }).then((bytes) => {
      let body;
      try { body = JSON.parse(utf8Of(bytes)); } catch { return reply(res, 400, { error: 'the body is not JSON' }); }
      if (!body || typeof body !== 'object' || Array.isArray(body)) return reply(res, 400, { error: 'the body must be a JSON object' });
      return then(body);
    }, (e) => {
      if (e instanceof BodyError && e.code !== GONE) reply(res, e.status, { error: e.message });
    });
  }

  function route(req, res) {
    const url = new URL(req.url, 'http://provider');
    if (req.method === 'POST' && url.pathname === '/send') {
      return readJson(req, (b) => {
        if (!Number.isSafeInteger(b.action) || b.action < 0) return reply(res, 400, { error: '"action" must be a whole number' });
        for (const f of TEXT_FIELDS) {
          if (typeof b[f] !== 'string') return reply(res, 400, { error: `"${f}" must be a string` });
        }
        if (b.key.length > MAX_KEY_CHARS) return reply(res, 400, { error: `"key" is longer than ${MAX_KEY_CHARS} characters` });
        answer(req, res, provider.send(now(), b.action, b.key), b.action);
      }, res);
    }
    if (req.method === 'GET' && url.pathname === '/lookup') {
      const key = url.searchParams.get('key');
      if (key === null || key.length > MAX_KEY_CHARS) return reply(res, 400, { error: 'give ?key=' });
      return answer(req, res, provider.lookup(now(), key), actionParam(url));
    }
    if (req.method === 'POST' && (url.pathname === '/hold' || url.pathname === '/release')) {
      return readJson(req, (b) => {
        const action = actionOf(b.action);
        if (action === undefined) return reply(res, 400, { error: '"action" must be a whole number' });
        // An answer already held goes out either way: a new hold starts afresh.
        const waiting = holds.get(action);
        holds.delete(action);
        if (typeof waiting === 'function') waiting();
        if (url.pathname === '/hold') {
          holds.set(action, null);
          holding.most = Math.max(holding.most, armedNow());
        }
        reply(res, 200, { ok: true });
      }, res);
    }
    if (req.method === 'GET' && url.pathname === '/holding') {
      const action = actionParam(url);
      if (action === undefined) return reply(res, 400, { error: 'give ?action=' });
      return reply(res, 200, { holding: typeof holds.get(action) === 'function' });
    }
    if (req.method === 'GET' && url.pathname === '/holds') {
      return reply(res, 200, { armed: armedNow(), most_armed: holding.most, answers_held: holding.held });
    }
    if (req.method === 'GET' && url.pathname === '/log') return reply(res, 200, JSON.parse(provider.log_since(0)));
    if (req.method === 'GET' && url.pathname === '/final') return reply(res, 200, JSON.parse(provider.final_statuses()));
    if (req.method === 'GET' && url.pathname === '/pending') return reply(res, 200, { undelivered: undelivered() });
    if (req.method === 'POST' && url.pathname === '/tally') {
      return readJson(req, (b) => {
        if (!Array.isArray(b.actions) || !b.actions.every((a) => Number.isSafeInteger(a) && a >= 0)) {
          return reply(res, 400, { error: '"actions" must be a list of whole numbers' });
        }
        reply(res, 200, JSON.parse(provider.tally(b.actions)));
      }, res);
    }
    req.resume();
    return reply(res, 404, { error: 'POST /send, GET /lookup?key=, GET /log, GET /final, GET /pending, POST /tally, POST /hold, POST /release, GET /holding?action=, GET /holds' });
  }

  const serve = (learnerOnly) => (req, res) => {
    try {
      // The learner's code reaches only the provider's own API: holds, the log
      // and the tally are the run's (on loopback, which a sandbox cannot reach).
      if (learnerOnly && !['/send', '/lookup'].includes(new URL(req.url, 'http://provider').pathname)) {
        req.resume();
        return reply(res, 404, { error: 'POST /send, GET /lookup?key=' });
      }
      route(req, res);
    } catch (e) {
      // Our fault, never the client's: said, and the server goes on.
      if (!res.headersSent) reply(res, 500, { error: String(e?.message ?? e) });
    }
  };
  const server = http.createServer(serve(false));
  server.on('clientError', (_, socket) => socket.destroy());
  const learnerServer = learnerSocket ? http.createServer(serve(true)) : null;
  learnerServer?.on('clientError', (_, socket) => socket.destroy());

  // Webhooks, one at a time in due order; one the receiver did not take goes again.
  const outbox = [];
  const undelivered = () => provider.pending_webhooks() + outbox.length;
  let sending = false;
  const hookTarget = webhookSocket ? { socketPath: webhookSocket, path: '/webhook' } : webhookUrl;
  function post(hook) {
    return new Promise((resolve) => {
      const body = JSON.stringify({ event_id: hook.event_id, key: hook.key, message_id: hook.message_id, status: hook.status });
      const opts = { method: 'POST', headers: { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body) }, timeout: 5000 };
      const req = http.request(...(typeof hookTarget === 'string' ? [hookTarget, opts] : [{ ...hookTarget, ...opts }]), (res) => {
        res.resume();
        resolve(res.statusCode >= 200 && res.statusCode < 300);
      });
      req.on('timeout', () => req.destroy());
      req.on('error', () => resolve(false));
      req.end(body);
    });
  }
  async function drain() {
    if (sending || !hookTarget) return;
    sending = true;
    try {
      while (outbox.length && !closed) {
        if (await post(outbox[0])) outbox.shift();
        else await new Promise((r) => setTimeout(r, retryMs));
      }
    } finally {
      sending = false;
    }
  }
  const tick = () => {
    const due = JSON.parse(provider.due_webhooks(now()));
    if (due.length) {
      flushLog();
      outbox.push(...due);
      drain();
    }
  };
  const ticker = tickMs ? setInterval(tick, tickMs) : null;

  await new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', resolve);
  });
  if (learnerServer) {
    await new Promise((resolve, reject) => {
      learnerServer.once('error', reject);
      // Any uid may connect: the sandbox runs as nobody.
      learnerServer.listen({ path: learnerSocket, readableAll: true, writableAll: true }, resolve);
    });
  }
  const { port } = server.address();
  return {
    url: `http://127.0.0.1:${port}`,
    port,
    provider,
    /** Looks for due webhooks now (what the timer does every tickMs; with tickMs
     *  0, a test drives it, so the log's order is the test's). */
    tick,
    /** Webhooks made and not yet taken by the receiver. */
    undelivered,
    close() {
      closed = true;
      if (ticker) clearInterval(ticker);
      for (const s of held) s.destroy();
      flushLog();
      const done = Promise.all([server, learnerServer].filter(Boolean).map((srv) => new Promise((resolve) => srv.close(() => resolve()))));
      server.closeAllConnections();
      learnerServer?.closeAllConnections();
      return done;
    },
  };
}

// As a process of the real run:
//   node provider.mjs --seed N (--webhook URL | --webhook-socket PATH) [--socket PATH] [--log FILE]
// prints its URL on the first line; SIGTERM or SIGINT closes it (the log file kept).
if (process.argv[1] && new URL(import.meta.url).pathname === (await import('node:path')).resolve(process.argv[1])) {
  const arg = (name) => {
    const i = process.argv.indexOf(name);
    return i > 0 ? process.argv[i + 1] : undefined;
  };
  const seed = Number(arg('--seed'));
  if (!Number.isInteger(seed) || seed < 0) {
    console.error('usage: node provider.mjs --seed N (--webhook URL | --webhook-socket PATH) [--socket PATH] [--log FILE]');
    process.exit(2);
  }
  const p = await startProvider({ seed, webhookUrl: arg('--webhook'), webhookSocket: arg('--webhook-socket'), learnerSocket: arg('--socket'), logFile: arg('--log') });
  console.log(p.url);
  const stop = () => p.close().then(() => process.exit(0));
  process.once('SIGTERM', stop);
  process.once('SIGINT', stop);
}
