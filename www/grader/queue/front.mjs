// The queue's front: what `./lab serve --grading --queue URL` answers with. Stateless
// (everything is in PostgreSQL), so any number of fronts may run side by side.
//
//   POST /grade            {lab, source[, seed]} -> 202 {id, status, url} once stored
//                          (?wait=S or "Prefer: wait=S": waits up to S s, at most
//                          maxWaitS, and answers 200 with the report as today;
//                          202 {id, ...} when it is not done by then)
//   GET  /grade/ID         200 the report; 202 {id, status} while pending; 404 unknown
//   GET  /healthz          200 while the process runs
//   GET  /readyz           200 when the database answers; 503 otherwise
//   GET  /metrics          Prometheus text: queue depth, graded per second, p95 latency, ...
//
// The request is read and checked by serve.mjs's own POST /grade handler
// (createGradeHandler: Origin, Content-Type, 64 KB, 10 s, UTF-8, JSON, fields, lab),
// through its `pool` seam; see README.md for the export that would replace the seam.
//
// Standalone (compose, the tests):  node www/grader/queue/front.mjs --queue URL [--port N]
//   [--host 0.0.0.0] [--secret-file F] [--hidden-statuses each|aggregate] [--max-wait S]
import crypto from 'node:crypto';
import http from 'node:http';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { createGradeHandler, GRADE_LIMITS, LOOPBACK_NAMES } from '../serve.mjs';
import { anyToken, courseOf } from './tokens.mjs';
import { loadGrader } from '../../host/node_host.mjs';
import { servicePolicy } from '../hidden.mjs';
import { command, number, parseOrExit, usageExit } from '../args.mjs';
import { allowedOrigin, SERVE } from '../commands.mjs';
import {
  DB_TIMEOUTS, SCHEMA, buildId, cacheKey, ensureQueue, ensureSchema, expireSecondsFor, inTx, makePool, queueName, reap, startBoss, transient, tx, whileAway,
  withPool, within,
} from './common.mjs';

/** A front reached by other than loopback names, with no live API token and not told --open. */
export class NoTokens extends Error {
  constructor() {
    super('this front is reached by other than loopback addresses and no API token is live: make one for each course '
      + '(./lab token make --queue URL --course NAME), or pass --open to serve without tokens on purpose');
    this.name = 'NoTokens';
    this.code = 'ENOTOKENS';
  }
}

export const FRONT_LIMITS = Object.freeze({
  maxWaitS: 60, // the longest a POST may ask to wait for its report
  maxWaiters: 256, // requests waiting for a report at once (429 past it)
  repeatWindowS: 60, // the same source from the same address within it: the first's id
  pollMs: 250, // how often waiting requests look for their reports
  reapEveryMs: 2000,
  retryAfterS: 5, // a client past --per-client: 429, try again in this
  gradeNowWaitS: 600, // gradeNow (the LTI tool's submissions): the longest wait for a worker's report
});

/** gradeNow's report did not come within its wait. */
export class QueueWaitTimeout extends Error {
  constructor(s) {
    super(`no worker graded the submission within ${s} s`);
    this.name = 'QueueWaitTimeout';
  }
}
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const IDEMPOTENCY_KEY = /^[\x21-\x7e]{1,128}$/;

/**
 * @param {object} o
 * @param {string} o.connectionString  postgres://...
 * @param {{labs():string, lab(id:string):string}} [o.registry]  the grader's registry (serve.mjs
 *        hands over the one it loaded); else pkgDir's (www/pkg) is loaded
 * @param {(lab:string, source:string) => {seed:number|null, statuses:string}} [o.hiddenOf]
 *        the submission's hidden inputs (serve.mjs hands over its own); else hidden.mjs
 *        servicePolicy's, which serve.mjs makes too, from secretFile (or a secret of this
 *        process's own) and hiddenStatuses
 * @param {string[]} [o.allowOrigins]  as serve.mjs
 * @param {object} [o.headers]  extra headers of every answer (serve.mjs's security('api'))
 * @param {boolean} [o.open]  no API tokens, on purpose: the client is the address
 * @param {boolean} [o.loopbackOnly]  reached only on loopback names (the default): without a live
 *        token it is open; else (another address or Host name) it refuses to start without one
 *        unless `open`, and every request needs one (tokens.mjs)
 * @param {number} [o.perClient]  at most this many of one client's submissions waiting or
 *        grading (429 with Retry-After past it); none when not given (the queue takes the backlog)
 * Resolves to { handle(req, res) → boolean (false: not a path of the front's),
 *   stats(), metrics(), close() }.
 */
export async function createQueueFront({ connectionString, registry, hiddenOf, secretFile, hiddenStatuses = 'each', allowOrigins = [], headers = {},
  maxBodyBytes = GRADE_LIMITS.maxBodyBytes, bodyTimeoutMs = GRADE_LIMITS.bodyTimeoutMs, pkgDir, log = (m) => console.error(`queue front: ${m}`), perClient,
  open = false, loopbackOnly = true,
  ...limits } = {}) {
  const lim = { ...FRONT_LIMITS, ...Object.fromEntries(Object.entries(limits).filter(([, v]) => v !== undefined)) };
  // Every request's use of the database is answered within this: else 503.
  const { requestMs } = DB_TIMEOUTS.front;
  registry ??= new (await loadGrader(pkgDir ? { dir: pkgDir } : {})).Grader();
  const labInfo = new Map(JSON.parse(registry.labs()).map((l) => [l.id, JSON.parse(registry.lab(l.id))]));
  const labs = [...labInfo.keys()];
  hiddenOf ??= servicePolicy({ registry, secretFile, statuses: hiddenStatuses });
  const build = buildId(pkgDir);
  const queue = queueName(build);

  let dbProblem = null;
  const onDbError = (e) => { dbProblem = e.message; };
  const pool = makePool(connectionString, { max: 8, onError: onDbError, ...DB_TIMEOUTS.front });
  await whileAway(() => withPool(connectionString, DB_TIMEOUTS.setup, ensureSchema), { log });
  const boss = await whileAway(() => startBoss(connectionString, { onError: (e) => log(`pg-boss: ${e.message}`) }), { log });
  await whileAway(() => ensureQueue(boss, queue), { log });
  if (!open && !loopbackOnly && !await whileAway(() => anyToken(pool), { log })) {
    await boss.stop({ graceful: false, wait: true, timeout: 2000 }).catch(() => {});
    await pool.end().catch(() => {});
    throw new NoTokens();
  }

  const counts = { accepted: 0, cached: 0, repeated: 0, refused: 0, conflicts: 0, busy: 0, unauthorized: 0, waited: 0, waitTimeouts: 0, unavailable: 0, failed: 0 };
  const waiters = new Map(); // id -> Set of resolve(report|null)
  let closed = false;

  const reply = (res, status, body, extra = {}) => {
    if (res.headersSent || res.destroyed) return;
    const text = typeof body === 'string' ? body : JSON.stringify(body);
    try {
      res.writeHead(status, { 'Content-Type': 'application/json; charset=utf-8', 'Cache-Control': 'no-store', 'Content-Length': Buffer.byteLength(text), ...headers, ...extra });
      res.end(text);
    } catch {
      res.destroy();
    }
  };
  const unavailable = (res, e) => {
    counts.unavailable += 1;
    log(`the database is unavailable: ${e?.message || e}`);
    reply(res, 503, { error: 'the grading queue is unavailable for now; try again in 5 s', retry_after_s: 5 }, { 'Retry-After': '5' });
  };

  // Waiting requests look for their reports together, one query per tick.
  const poller = setInterval(async () => {
    if (!waiters.size) return;
    try {
      const { rows } = await pool.query(`SELECT id, report FROM ${SCHEMA}.submissions WHERE id = ANY($1::uuid[]) AND report IS NOT NULL`, [[...waiters.keys()]]);
      for (const r of rows) for (const done of waiters.get(r.id) ?? []) done(r.report);
    } catch { /* the database is away: the next tick tries again */ }
  }, lim.pollMs);
  poller.unref();
  const reaper = setInterval(() => { reap(pool, boss).catch(() => {}); }, lim.reapEveryMs);
  reaper.unref();

  function waitFor(id, seconds, signal) {
    return new Promise((resolve) => {
      let set = waiters.get(id);
      if (!set) waiters.set(id, (set = new Set()));
      const finish = (report) => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
        set.delete(finish);
        if (!set.size) waiters.delete(id);
        resolve(report);
      };
      const onAbort = () => finish(null);
      const timer = setTimeout(() => finish(null), seconds * 1000);
      signal?.addEventListener('abort', onAbort, { once: true });
      set.add(finish);
    });
  }

  /** How long this request asks to wait: ?wait=S or Prefer: wait=S; 0 when not asked. */
  function waitAsked(req) {
    let s = new URL(`http://x${req.url}`).searchParams.get('wait');
    if (s === null) s = /(?:^|[,;\s])wait=(\d+(?:\.\d+)?)/i.exec(String(req.headers.prefer ?? ''))?.[1] ?? null;
    if (s === null) return 0;
    const n = Number(s);
    return Number.isFinite(n) && n > 0 ? Math.min(n, lim.maxWaitS) : 0;
  }

  const accepted = (res, id, status, repeated) => reply(res, 202, { id, status, url: `/grade/${id}`, ...(repeated ? { repeated: true } : {}) },
    { Location: `/grade/${id}` });

  /** Answers a stored submission: its report (200), or 202 after waiting `wait` s. */
  async function answer(res, id, report, wait, signal, repeated = false) {
    if (report === null && wait > 0) {
      if (waiters.size >= lim.maxWaiters) return accepted(res, id, 'queued', repeated);
      counts.waited += 1;
      report = await waitFor(id, wait, signal);
      if (report === null) counts.waitTimeouts += 1;
    }
    if (report !== null && wait > 0) return reply(res, 200, report, { 'X-Submission-Id': id, Location: `/grade/${id}` });
    return accepted(res, id, report === null ? 'queued' : 'done', repeated);
  }

  // A checked submission: stored (with its job, in one transaction), or answered from
  // what is stored already (a repeat, the cache).
  async function store(req, res, client, { lab, source, seed, hidden }, signal) {
    const wait = waitAsked(req);
    const idem = req.headers['idempotency-key'];
    if (idem !== undefined && !IDEMPOTENCY_KEY.test(idem)) {
      counts.refused += 1;
      return reply(res, 400, { error: 'Idempotency-Key must be 1 to 128 printable ASCII characters' });
    }
    const out = await enqueue(client, { lab, source, seed, hidden, idem });
    if (out.busy !== undefined) {
      counts.busy += 1;
      return reply(res, 429, { error: `too many submissions from this client waiting or grading (at most ${perClient}); try again in ${lim.retryAfterS} s`,
        retry_after_s: lim.retryAfterS }, { 'Retry-After': String(lim.retryAfterS) });
    }
    if (out.conflict) {
      counts.conflicts += 1;
      counts.refused += 1;
      return reply(res, 409, { error: 'this Idempotency-Key was used for another submission', id: out.conflict });
    }
    if (out.repeat) {
      counts.repeated += 1;
      return answer(res, out.repeat.id, out.repeat.report, wait, signal, true);
    }
    if (out.report !== null) counts.cached += 1; else counts.accepted += 1;
    return answer(res, out.id, out.report, wait, signal);
  }

  /** Stores a checked submission with its job (or finds it stored: a repeat, the cache):
   *  { id, report } | { repeat: {id, report} } | { conflict: id } | { busy: n }. */
  async function enqueue(client, { lab, source, seed, hidden, idem }) {
    const info = labInfo.get(lab);
    seed ??= info.default_seed;
    const hiddenSeed = hidden?.seed ?? null;
    const statuses = hidden?.statuses ?? 'each';
    const key = cacheKey({ build, lab, seed, hiddenSeed, hiddenStatuses: statuses, source });
    const id = crypto.randomUUID();
    return within(tx(pool, async (c) => {
      // A repeat: the same Idempotency-Key of the same client (the same submission, or a
      // conflict), or the same source from the same client within repeatWindowS. Not
      // stored again. Another client's key is not this one's: a new submission.
      if (idem !== undefined) {
        await c.query('SELECT pg_advisory_xact_lock(hashtext($1))', [`${client} ${idem}`]);
        const { rows } = await c.query(`SELECT id, cache_key, report FROM ${SCHEMA}.submissions WHERE client = $1 AND idempotency_key = $2`, [client, idem]);
        if (rows.length) return rows[0].cache_key === key ? { repeat: rows[0] } : { conflict: rows[0].id };
      } else {
        await c.query('SELECT pg_advisory_xact_lock(hashtext($1))', [`${client} ${key}`]);
        const { rows } = await c.query(`SELECT id, report FROM ${SCHEMA}.submissions WHERE client = $1 AND cache_key = $2
          AND created_at > now() - make_interval(secs => $3) ORDER BY created_at LIMIT 1`, [client, key, lim.repeatWindowS]);
        if (rows.length) return { repeat: rows[0] };
      }
      // --per-client: at most that many of one client's submissions waiting or grading.
      if (perClient !== undefined) {
        await c.query('SELECT pg_advisory_xact_lock(hashtext($1))', [`client ${client}`]);
        const { rows: [{ n }] } = await c.query(`SELECT count(*)::int AS n FROM ${SCHEMA}.submissions WHERE client = $1 AND report IS NULL`, [client]);
        if (n >= perClient) return { busy: n };
      }
      const hit = await c.query(`SELECT report FROM ${SCHEMA}.submissions WHERE cache_key = $1 AND report IS NOT NULL LIMIT 1`, [key]);
      const report = hit.rows[0]?.report ?? null;
      let jobId = null;
      if (report === null) {
        jobId = await boss.send(queue, { submission: id }, { db: inTx(c), expireInSeconds: expireSecondsFor(info) });
        if (!jobId) throw new Error('pg-boss stored no job');
      }
      await c.query(`INSERT INTO ${SCHEMA}.submissions (id, lab, seed, hidden_seed, hidden_statuses, build, source_json, cache_key, client, idempotency_key,
          queue, job_id, cached, report, reported_at, graded_by)
        VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, CASE WHEN $13 THEN now() END, CASE WHEN $13 THEN 'cache' END)`,
      [id, lab, seed, hiddenSeed, statuses, build, JSON.stringify(source), key, client, idem ?? null, queue, jobId, report !== null, report]);
      return { id, report };
    }), requestMs);
  }

  /**
   * A submission graded through the queue for a caller of the server's own (the LTI
   * tool, lti/tool.mjs): stored as POST /grade stores it, under `client`, then its
   * report (the JSON line as an object) once a worker wrote it, within `waitS`; throws
   * when none came by then (QueueWaitTimeout) or the database is away.
   */
  async function gradeNow({ lab, source, client, waitS = lim.gradeNowWaitS }) {
    const out = await enqueue(client, { lab, source, hidden: hiddenOf(lab, source) });
    const stored = out.repeat ?? out;
    if (out.busy !== undefined || out.conflict) throw new Error('the queue refused the submission');
    let report = stored.report;
    if (report === null) report = await waitFor(stored.id, waitS);
    if (report === null) throw new QueueWaitTimeout(waitS);
    return typeof report === 'string' ? JSON.parse(report) : report;
  }

  /** The client of a request of /grade's (tokens.mjs): a live token's course
   *  (`course:NAME`), or on an open front the address; null when it may not (a 401
   *  has to be answered). Throws when the database does not answer. */
  async function who(req) {
    const address = req.socket.remoteAddress ?? '?';
    if (open) return address;
    const auth = req.headers.authorization;
    const bearer = /^Bearer ([\x21-\x7e]{1,200})$/.exec(auth ?? '');
    if (bearer) {
      const course = await within(courseOf(pool, bearer[1]), requestMs);
      return course === null ? null : `course:${course}`;
    }
    // Reached only on loopback names and no token made: open, as on a developer's machine.
    if (auth === undefined && loopbackOnly && !await within(anyToken(pool), requestMs)) return address;
    return null;
  }
  const unauthorized = (res) => {
    counts.unauthorized += 1;
    reply(res, 401, { error: 'this needs a live API token of a course: Authorization: Bearer TOKEN (./lab token make)' }, { 'WWW-Authenticate': 'Bearer' });
  };

  async function post(req, res) {
    let client;
    try {
      client = await who(req);
    } catch (e) {
      req.resume();
      return transient(e) ? unavailable(res, e) : reply(res, 500, { error: 'the server failed to check this request' });
    }
    if (client === null) { req.resume(); return unauthorized(res); }
    // serve.mjs's handler reads and checks the request, answers every refusal, and
    // calls grade() with a checked submission. We answer it here; its own answer
    // after grade() resolves then finds the response sent and does nothing.
    const check = createGradeHandler({
      labs, hiddenOf, jobs: 1, maxWaiting: 0, perClient: 1, maxBodyBytes, bodyTimeoutMs, allowOrigins, headers,
      pool: {
        grade: async ({ lab, source, seed, hidden, signal }) => {
          try {
            await store(req, res, client, { lab, source, seed, hidden }, signal);
          } catch (e) {
            if (transient(e)) unavailable(res, e);
            else { counts.failed += 1; log(`POST /grade failed: ${e?.stack || e}`); reply(res, 500, { error: 'the server failed to store this submission' }); }
          }
          return null; // never sent: store() has answered
        },
      },
    });
    check(req, res);
  }

  async function get(req, res, id) {
    let client;
    let rows;
    try {
      client = await who(req);
      if (client === null) return unauthorized(res);
      if (!UUID.test(id)) return reply(res, 404, { error: 'no such submission' });
      // Only the client's own: another client's id is as unknown as one never made.
      ({ rows } = await within(pool.query(`SELECT report, lease_until > now() AS grading FROM ${SCHEMA}.submissions WHERE id = $1 AND client = $2`,
        [id, client]), requestMs));
    } catch (e) {
      return transient(e) ? unavailable(res, e) : reply(res, 500, { error: 'the server failed to read this submission' });
    }
    if (!rows.length) return reply(res, 404, { error: 'no such submission' });
    if (rows[0].report !== null) return reply(res, 200, rows[0].report, { 'X-Submission-Id': id });
    return reply(res, 202, { id, status: rows[0].grading ? 'grading' : 'queued', url: `/grade/${id}` });
  }

  async function ready() {
    try {
      await within(pool.query('SELECT 1'), requestMs);
      dbProblem = null;
      return null;
    } catch (e) {
      return e.message || String(e);
    }
  }

  /** The figures, from the database (the same whichever front is asked). */
  async function figures() {
    const { rows: [f] } = await pool.query(`SELECT
        count(*) FILTER (WHERE report IS NULL) AS depth,
        count(*) FILTER (WHERE report IS NULL AND lease_until > now()) AS grading,
        count(*) FILTER (WHERE reported_at > now() - interval '60 seconds' AND NOT cached) AS graded_60s,
        count(*) FILTER (WHERE reported_at > now() - interval '60 seconds' AND cached) AS cached_60s,
        COALESCE(extract(epoch FROM now() - min(created_at) FILTER (WHERE report IS NULL)), 0) AS oldest_s,
        count(*) AS submissions,
        count(*) FILTER (WHERE report IS NOT NULL) AS reported,
        COALESCE(sum(leases_lost), 0) AS leases_lost,
        COALESCE(sum(late_results), 0) AS late_results,
        count(DISTINCT graded_by) FILTER (WHERE reported_at > now() - interval '300 seconds' AND NOT cached) AS workers_5m
      FROM ${SCHEMA}.submissions`);
    const { rows: [p] } = await pool.query(`SELECT
        percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM reported_at - created_at)) AS p50,
        percentile_cont(0.95) WITHIN GROUP (ORDER BY extract(epoch FROM reported_at - created_at)) AS p95
      FROM ${SCHEMA}.submissions WHERE reported_at > now() - interval '300 seconds' AND NOT cached`);
    return {
      depth: Number(f.depth), grading: Number(f.grading), gradedPerS: Number(f.graded_60s) / 60, cachedPerS: Number(f.cached_60s) / 60,
      oldestS: Number(f.oldest_s), submissions: Number(f.submissions), reported: Number(f.reported), leasesLost: Number(f.leases_lost), lateResults: Number(f.late_results),
      workers: Number(f.workers_5m), p50S: p.p50 === null ? null : Number(p.p50), p95S: p.p95 === null ? null : Number(p.p95),
    };
  }

  async function metrics(res) {
    let f;
    try { f = await within(figures(), requestMs); } catch (e) { return unavailable(res, e); }
    const g = (name, help, v, type = 'gauge') => `# HELP ${name} ${help}\n# TYPE ${name} ${type}\n${name} ${v ?? 'NaN'}\n`;
    const text = g('grading_queue_depth', 'Submissions stored and not yet reported (waiting or grading).', f.depth)
      + g('grading_in_progress', 'Submissions a worker holds a lease on now.', f.grading)
      + g('grading_oldest_pending_seconds', 'Age of the oldest submission without a report.', f.oldestS.toFixed(3))
      + g('grading_graded_per_second', 'Reports made by workers per second, over the last 60 s.', f.gradedPerS.toFixed(3))
      + g('grading_cached_per_second', 'Submissions answered from the cache per second, over the last 60 s.', f.cachedPerS.toFixed(3))
      + g('grading_latency_p50_seconds', 'Stored to reported, median over the last 5 min (graded, not cached).', f.p50S?.toFixed(3))
      + g('grading_latency_p95_seconds', 'Stored to reported, 95th percentile over the last 5 min (graded, not cached).', f.p95S?.toFixed(3))
      + g('grading_workers_active', 'Workers that reported in the last 5 min.', f.workers)
      + g('grading_submissions_total', 'Submissions stored.', f.submissions, 'counter')
      + g('grading_reports_total', 'Submissions with a report.', f.reported, 'counter')
      + g('grading_leases_lost_total', 'Leases taken back from workers that stopped heartbeating.', f.leasesLost, 'counter')
      + g('grading_late_results_dropped_total', 'Results a worker brought after its lease was gone (its fencing token old): dropped.', f.lateResults, 'counter')
      + Object.entries(counts).map(([k, v]) => g(`grading_front_${k.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`)}_total`, `This front: ${k}.`, v, 'counter')).join('');
    if (res.headersSent || res.destroyed) return;
    res.writeHead(200, { 'Content-Type': 'text/plain; version=0.0.4; charset=utf-8', 'Cache-Control': 'no-store', ...headers });
    res.end(text);
  }

  /** Routes the front's paths; false for any other path (the caller serves it). */
  function handle(req, res) {
    const rel = new URL(`http://x${req.url}`).pathname;
    const fail = (e) => { log(`${req.method} ${rel} failed: ${e?.stack || e}`); reply(res, 500, { error: 'internal error' }); };
    if (rel === '/grade') { post(req, res).catch(fail); return true; }
    const m = /^\/grade\/([^/]+)$/.exec(rel);
    if (m || ['/healthz', '/readyz', '/metrics'].includes(rel)) {
      req.resume();
      if (req.method !== 'GET' && req.method !== 'HEAD') { reply(res, 405, { error: 'GET only' }, { Allow: 'GET, HEAD' }); return true; }
      if (m) get(req, res, m[1]).catch(fail);
      else if (rel === '/healthz') reply(res, closed ? 503 : 200, { ok: !closed, build, queue });
      else if (rel === '/readyz') ready().then((p) => reply(res, p || closed ? 503 : 200, p || closed ? { ready: false, why: closed ? 'closing' : p } : { ready: true, build, queue })).catch(fail);
      else metrics(res).catch(fail);
      return true;
    }
    return false;
  }

  return {
    handle,
    gradeNow,
    build,
    queue,
    stats: () => ({ ...counts, waiting: waiters.size, dbProblem }),
    figures,
    async close() {
      closed = true;
      clearInterval(poller);
      clearInterval(reaper);
      for (const set of waiters.values()) for (const done of set) done(null);
      await boss.stop({ graceful: false, wait: true, timeout: 2000 }).catch(() => {});
      await pool.end().catch(() => {});
    },
  };
}

/** Whether an address to listen on is reached from this machine only. */
export function isLoopback(host) {
  return LOOPBACK_NAMES.includes(host) || LOOPBACK_NAMES.includes(`[${host}]`) || /^127\.\d+\.\d+\.\d+$/.test(host) || host === '::1';
}

/** The standalone front: the front's paths on an HTTP server of its own. */
export async function startFront({ port = 8000, host = '127.0.0.1', ...opts }) {
  const front = await createQueueFront({ loopbackOnly: isLoopback(host), ...opts });
  const server = http.createServer({ headersTimeout: 10_000, requestTimeout: 30_000, keepAliveTimeout: 5000 }, (req, res) => {
    res.on('error', () => {});
    try {
      if (!front.handle(req, res)) {
        req.resume();
        res.writeHead(404, { 'Content-Type': 'text/plain' });
        res.end('Not found\n');
      }
    } catch (e) {
      console.error(`queue front: ${e?.stack || e}`);
      if (!res.headersSent) { res.writeHead(500); res.end(); }
    }
  });
  server.maxConnections = 1024;
  await new Promise((resolve, reject) => { server.once('error', reject); server.listen(port, host, resolve); });
  return { server, front, url: `http://${host.includes(':') ? `[${host}]` : host}:${server.address().port}/` };
}

/** The front alone (the API, no page), as the container image runs it. */
const FRONT = command({
  name: 'front',
  prog: 'node www/grader/queue/front.mjs',
  synopsis: '--queue URL [options]',
  summary: 'The grading queue\'s front alone: POST /grade, GET /grade/ID, /healthz, /readyz, /metrics (./lab serve --grading --queue '
    + 'is the same front with the page).',
  positionals: { max: 0 },
  options: {
    queue: { ...SERVE.options.queue, help: 'the queue\'s PostgreSQL', defaultText: 'the environment\'s GRADING_QUEUE_URL' },
    port: { type: 'string', value: 'N', parse: number({ int: true, min: 0, max: 65535 }), default: 8000, help: 'the port (0: a free one; the first line printed is the URL)' },
    host: { type: 'string', value: 'ADDR', default: '127.0.0.1', help: 'the address it listens on' },
    'secret-file': { ...SERVE.options['secret-file'], help: 'the secret hidden inputs are drawn from (keep it from learners)' },
    'hidden-statuses': SERVE.options['hidden-statuses'],
    'max-wait': { type: 'string', value: 'S', parse: number({ min: 0 }), help: 'how long a request that asks to wait may wait for its report', defaultText: String(FRONT_LIMITS.maxWaitS) },
    'allow-origin': { type: 'string', value: 'ORIGIN', multiple: true, default: [], parse: allowedOrigin, help: 'a course page\'s origin that may POST /grade' },
    'per-client': { ...SERVE.options['per-client'], help: 'at most N of one client\'s submissions waiting or grading (429 past it)', defaultText: 'no limit' },
    open: { type: 'boolean', default: false, help: 'on a --host other than loopback: serve without API tokens, on purpose (else it refuses to start without a live one: ./lab token)' },
  },
});

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const { values: v } = parseOrExit(FRONT, process.argv.slice(2), 'front');
  const o = {
    connectionString: v.queue ?? process.env.GRADING_QUEUE_URL, port: v.port, host: v.host, allowOrigins: v['allow-origin'],
    hiddenStatuses: v['hidden-statuses'], ...(v['secret-file'] !== undefined ? { secretFile: v['secret-file'] } : {}),
    ...(v['max-wait'] !== undefined ? { maxWaitS: v['max-wait'] } : {}), ...(v['per-client'] !== undefined ? { perClient: v['per-client'] } : {}), open: v.open,
  };
  if (!o.connectionString) usageExit(FRONT, '--queue (or GRADING_QUEUE_URL) is needed', 'front');
  let started;
  try {
    started = await startFront(o);
  } catch (e) {
    if (!(e instanceof NoTokens)) throw e;
    console.error(`front: ${e.message}`);
    process.exit(2);
  }
  const { server, front, url } = started;
  console.log(url);
  const stop = () => {
    setTimeout(() => process.exit(0), 5000).unref();
    server.close();
    front.close().finally(() => process.exit(0));
  };
  process.once('SIGTERM', stop);
  process.once('SIGINT', stop);
}
