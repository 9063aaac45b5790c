// What the queue's front and its workers share: the tables next to pg-boss's, the
// build id of the grader, the queue's name and options, and a few database helpers.
// See www/grader/queue/README.md.
import crypto from 'node:crypto';
import fs from 'node:fs';
import pg from 'pg';
import PgBoss from 'pg-boss';
import { graderFiles } from '../../host/node_host.mjs';

// Our own tables live in `grading`; pg-boss keeps its jobs in a schema named for its
// major version: pg-boss 11 cannot migrate pg-boss 10's (`pgboss`), so the two can
// run side by side while the old one drains (docs/deploy.md).
export const SCHEMA = 'grading';
export const BOSS_SCHEMA = 'pgboss_v11';

// One row per submission: what was sent, what grades it, and its report once made.
// `report` is written once (UPDATE ... WHERE report IS NULL), in the same
// transaction as the job's completion. `lease_*` say which worker grades it now and
// until when (its heartbeat moves `lease_until`); a lease past its time is taken
// back by a reaper (the job failed back into the queue, after a back-off).
// `lease_epoch` is the lease's fencing token: each take adds one, and a heartbeat,
// a report or a give-back counts only under the epoch of a lease still held
// (`fenced`); `late_results` counts the results a writer brought too late.
export const SCHEMA_SQL = `
CREATE SCHEMA IF NOT EXISTS ${SCHEMA};
CREATE TABLE IF NOT EXISTS ${SCHEMA}.submissions (
  id              uuid PRIMARY KEY,
  created_at      timestamptz NOT NULL DEFAULT now(),
  lab             text NOT NULL,
  seed            integer NOT NULL,
  hidden_seed     bigint,
  hidden_statuses text NOT NULL DEFAULT 'each',
  build           text NOT NULL,
  source_json     text NOT NULL, -- JSON.stringify(source): exact, NUL and lone surrogates included
  cache_key       text NOT NULL,
  client          text,
  idempotency_key text,
  queue           text NOT NULL,
  job_id          uuid,
  cached          boolean NOT NULL DEFAULT false,
  attempts        integer NOT NULL DEFAULT 0,
  leases_lost     integer NOT NULL DEFAULT 0,
  lease_worker    text,
  lease_until     timestamptz,
  lease_epoch     bigint NOT NULL DEFAULT 0,
  late_results    integer NOT NULL DEFAULT 0,
  report          text,
  reported_at     timestamptz,
  graded_by       text,
  grade_ms        integer
);
-- When each client (an address, or a course's token) was last given a worker: the
-- fair claim (fairFetch) serves the one served least recently first.
CREATE TABLE IF NOT EXISTS ${SCHEMA}.clients (
  client      text PRIMARY KEY,
  last_served timestamptz NOT NULL
);
-- A table made before the fencing token (issue 37) gets its columns.
ALTER TABLE ${SCHEMA}.submissions ADD COLUMN IF NOT EXISTS lease_epoch bigint NOT NULL DEFAULT 0;
ALTER TABLE ${SCHEMA}.submissions ADD COLUMN IF NOT EXISTS late_results integer NOT NULL DEFAULT 0;
-- An Idempotency-Key is its client's own: another client's same key is another submission.
DROP INDEX IF EXISTS ${SCHEMA}.submissions_idempotency;
CREATE UNIQUE INDEX IF NOT EXISTS submissions_client_idempotency ON ${SCHEMA}.submissions (client, idempotency_key) WHERE idempotency_key IS NOT NULL;
-- The fronts' API tokens (tokens.mjs): a course's clients send one; only its SHA-256 is kept.
CREATE TABLE IF NOT EXISTS ${SCHEMA}.tokens (
  id            text PRIMARY KEY,
  course        text NOT NULL,
  secret_sha256 text NOT NULL,
  created_at    timestamptz NOT NULL DEFAULT now(),
  revoked_at    timestamptz
);
CREATE INDEX IF NOT EXISTS submissions_cache ON ${SCHEMA}.submissions (cache_key) WHERE report IS NOT NULL;
CREATE INDEX IF NOT EXISTS submissions_pending ON ${SCHEMA}.submissions (created_at) WHERE report IS NULL;
CREATE INDEX IF NOT EXISTS submissions_leases ON ${SCHEMA}.submissions (lease_until) WHERE report IS NULL AND lease_until IS NOT NULL;
CREATE INDEX IF NOT EXISTS submissions_reported ON ${SCHEMA}.submissions (reported_at) WHERE reported_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS submissions_repeat ON ${SCHEMA}.submissions (client, cache_key, created_at);
`;

/** The grader's build id: the first 16 hex digits of SHA-256 over its two files
 *  (www/pkg, or `dir`). The cache key and the queue's name carry it, so a report is
 *  reused only for the same grader, and a worker takes only jobs made for its build. */
export function buildId(dir) {
  const f = graderFiles(dir);
  const h = crypto.createHash('sha256');
  h.update(fs.readFileSync(f.js));
  h.update('\0');
  h.update(fs.readFileSync(f.wasm));
  return h.digest('hex').slice(0, 16);
}

/** The queue a build's submissions wait in. */
export const queueName = (build) => `grade-${build}`;

/** What a report is reused for: the same source, lab, grader build, seed and hidden inputs. */
export function cacheKey({ build, lab, seed, hiddenSeed, hiddenStatuses, source }) {
  return crypto.createHash('sha256')
    .update(JSON.stringify([build, lab, seed, hiddenSeed ?? null, hiddenStatuses ?? 'each']))
    .update('\0')
    .update(source, 'utf8')
    .digest('hex');
}

// Each job may be taken this many times (a worker killed, a lease lost, a worker
// stopped) before pg-boss gives up on it; past that its submission is answered with
// an error report by the reaper (never left without one).
export const RETRY_LIMIT = 20;
// pg-boss's own expiry of an active job: the backstop behind our lease, for a worker
// killed between taking a job and its first lease (they are one transaction, so
// this is only a guard): the lab's longest run on the clock plus a minute.
export const expireSecondsFor = (info) => Math.ceil(info.time_limit_s * 4 * 3 + 60);

/** How long any query of the queue may take, connecting included. A database that is
 *  frozen (its processes stopped, a machine paused) or unreachable answers nothing:
 *  without a bound, a request or a worker's slot would wait for it for ever.
 *  `front`: each query and each connection of a front (a request answers 503 within
 *  `requestMs` whatever its queries do: a machine so busy that a login or a query
 *  takes longer gets 503 too, which says try again); `worker`: a worker's (its claim, heartbeat,
 *  report; a third of the shortest lease, so a heartbeat is not lost to one slow query). */
export const DB_TIMEOUTS = Object.freeze({
  front: { connectMs: 1500, queryMs: 1500, requestMs: 1500 },
  worker: { connectMs: 5000, queryMs: 5000 },
  // pg-boss's own pool (its start and schema migration, its supervision) and a start's
  // making of our tables: longer, as a first start makes a schema on a busy machine.
  setup: { connectMs: 5000, queryMs: 30_000 },
});

/** What a wait for the database that ran out of its time rejects with (within()). */
export class DatabaseTimeout extends Error {
  constructor(ms) { super(`the database did not answer within ${ms / 1000} s`); this.name = 'DatabaseTimeout'; this.code = 'EDBTIMEOUT'; }
}

/** `p`, or a DatabaseTimeout once `ms` pass (p goes on, its outcome unheard). */
export function within(p, ms) {
  let timer;
  const late = new Promise((_, reject) => { timer = setTimeout(() => reject(new DatabaseTimeout(ms)), ms); });
  p.catch(() => {});
  return Promise.race([p, late]).finally(() => clearTimeout(timer));
}

/** A pg.Pool whose every query and connection has a time limit (the client's
 *  query_timeout and connectionTimeoutMillis, and the server's statement_timeout and
 *  lock_timeout for the server's side of it), and that never throws out of an idle
 *  client's error (a server restart). A client whose query ran out of time is
 *  closed, not reused (pg.Pool's query(), and tx() below). */
export function makePool(connectionString, { max = 5, onError, connectMs = DB_TIMEOUTS.worker.connectMs, queryMs = DB_TIMEOUTS.worker.queryMs } = {}) {
  const pool = new pg.Pool({
    connectionString, max, connectionTimeoutMillis: connectMs, idleTimeoutMillis: 10_000,
    query_timeout: queryMs, statement_timeout: queryMs, lock_timeout: queryMs,
  });
  pool.on('error', (e) => onError?.(e));
  return pool;
}

/** fn(pool) on a pool of one connection with `limits` (DB_TIMEOUTS.setup for a
 *  start's making of the tables), closed after. */
export async function withPool(connectionString, limits, fn) {
  const pool = makePool(connectionString, { max: 1, ...limits });
  try { return await fn(pool); } finally { await pool.end().catch(() => {}); }
}

/** pg-boss on the same database. Started, its schema made or migrated. Its own pool's
 *  queries (its start, its supervision) have DB_TIMEOUTS.setup's limits; the queue's
 *  calls into pg-boss run on our clients (inTx), with theirs. */
export async function startBoss(connectionString, { onError, supervise = true, expiryCheckSeconds = 30 } = {}) {
  const { connectMs, queryMs } = DB_TIMEOUTS.setup;
  const boss = new PgBoss({
    connectionString, schema: BOSS_SCHEMA, max: 3, supervise, schedule: false, migrate: true,
    connectionTimeoutMillis: connectMs, query_timeout: queryMs,
    // How often active jobs past their expiry (the lease's backstop) are failed back.
    superviseIntervalSeconds: expiryCheckSeconds, monitorIntervalSeconds: expiryCheckSeconds,
  });
  boss.on('error', (e) => onError?.(e));
  try {
    await boss.start();
  } catch (e) {
    await boss.stop({ graceful: false, wait: false }).catch(() => {});
    throw e;
  }
  return boss;
}

/** Makes our tables (idempotent; concurrent starts are serialised by an advisory lock). */
export async function ensureSchema(pool) {
  const c = await pool.connect();
  let broken = false;
  const lost = () => { broken = true; }; // as in tx()
  c.on('error', lost);
  try {
    await c.query('SELECT pg_advisory_lock(31031)');
    try { await c.query(SCHEMA_SQL); } finally { await c.query('SELECT pg_advisory_unlock(31031)'); }
  } catch (e) {
    broken = true; // its session may still hold the lock: closed, not reused
    throw e;
  } finally {
    c.off('error', lost);
    c.release(broken);
  }
}

/** Creates the build's queue (pg-boss needs it before send or fetch). */
export async function ensureQueue(boss, name) {
  for (let i = 0; ; i++) {
    try {
      if (await boss.getQueue(name)) return;
      await boss.createQueue(name, { policy: 'standard', retryLimit: RETRY_LIMIT, retryDelay: 0, retryBackoff: false });
      return;
    } catch (e) {
      if (i >= 4) throw e; // two creators at once: the loser sees the queue next time
      await sleep(200 + Math.random() * 300);
    }
  }
}

/** pg-boss's calls inside one of our transactions (its `db` option). */
export const inTx = (client) => ({ executeSql: (text, values) => client.query(text, values) });

/** pg-boss's fetch on `client` (in its transaction). pg-boss swallows its query's
 *  error and answers "no job" (it expects only unique violations there): in our
 *  transaction that left the error unseen and the transaction aborted, then
 *  committed as a rollback. Here the query's error is thrown. */
export async function fetchIn(boss, queue, client, { batchSize = 1 } = {}) {
  let error = null;
  const db = { executeSql: (text, values) => client.query(text, values).catch((e) => { error ??= e; throw e; }) };
  const jobs = await boss.fetch(queue, { batchSize, db });
  if (error) throw error;
  return jobs;
}

/**
 * The fair claim (in the claim's transaction on `c`): the oldest job ready to take of
 * the client served least recently among those with a job ready and fewer than `cap`
 * submissions in flight (leased now); that client's last_served is now. A flood of
 * one client's submissions then holds back another's single one by about one job,
 * not by the flood (./lab bench's "flood" lines). A client is the submission's
 * `client` (its course's token, or its address). Jobs are taken as pg-boss's own
 * fetch takes them (its `fetchNextJob`: state active, started_on, retry_count; the
 * table of pg-boss 11, pinned), so pg-boss completes, fails and expires them as usual.
 * Resolves to [job] or [] as fetchIn does.
 */
export async function fairFetch(c, queue, { cap = Infinity } = {}) {
  const { rows } = await c.query(`WITH pending AS (
      SELECT COALESCE(s.client, '') AS client, s.lease_until > now() AS in_flight,
        j.state < 'active' AND j.start_after < now() AS ready
      FROM ${SCHEMA}.submissions s JOIN ${BOSS_SCHEMA}.job j ON j.name = $1 AND j.id = s.job_id
      WHERE s.report IS NULL AND s.queue = $1
    ), clients AS (
      SELECT p.client FROM pending p LEFT JOIN ${SCHEMA}.clients k ON k.client = p.client
      GROUP BY p.client, k.last_served
      HAVING bool_or(p.ready) AND count(*) FILTER (WHERE p.in_flight) < $2
      ORDER BY k.last_served NULLS FIRST, p.client LIMIT 20
    )
    SELECT n.id, cl.client FROM clients cl CROSS JOIN LATERAL (
      SELECT j.id FROM ${BOSS_SCHEMA}.job j JOIN ${SCHEMA}.submissions s ON s.job_id = j.id AND s.queue = $1
      WHERE j.name = $1 AND j.state < 'active' AND j.start_after < now() AND COALESCE(s.client, '') = cl.client AND s.report IS NULL
      ORDER BY j.priority DESC, j.created_on, j.id LIMIT 1 FOR UPDATE OF j SKIP LOCKED
    ) n LIMIT 1`, [queue, Number.isFinite(cap) ? cap : 2 ** 31 - 1]);
  if (!rows.length) return [];
  const { rows: jobs } = await c.query(`UPDATE ${BOSS_SCHEMA}.job SET state = 'active', started_on = now(),
      retry_count = CASE WHEN started_on IS NOT NULL THEN retry_count + 1 ELSE retry_count END
    WHERE name = $1 AND id = $2 RETURNING id, name, data`, [queue, rows[0].id]);
  await c.query(`INSERT INTO ${SCHEMA}.clients (client, last_served) VALUES ($1, clock_timestamp())
    ON CONFLICT (client) DO UPDATE SET last_served = clock_timestamp()`, [rows[0].client]);
  return jobs;
}

/** Runs fn(client) in a transaction on a client of `pool`. A client whose query ran
 *  out of time is closed at once (the server rolls back what it had when the
 *  connection ends), not asked to ROLLBACK: a frozen server would not answer that either. */
export async function tx(pool, fn) {
  const c = await pool.connect();
  let broken = false;
  // A connection lost while the client is checked out (a server crash) is an 'error'
  // event on it, which nothing else hears (pg.Pool listens to idle clients only):
  // unheard, it would be an uncaught exception. Its query rejects as well.
  const lost = () => { broken = true; };
  c.on('error', lost);
  try {
    await c.query('BEGIN');
    const out = await fn(c);
    await c.query('COMMIT');
    return out;
  } catch (e) {
    if (timedOut(e)) broken = true;
    else try { await c.query('ROLLBACK'); } catch { broken = true; }
    throw e;
  } finally {
    c.off('error', lost);
    c.release(broken);
  }
}

/** A query or a connection that ran out of its time (DB_TIMEOUTS). node-postgres's
 *  own errors carry no code: its two messages are matched here, and nowhere else. */
export function timedOut(e) {
  return e?.code === 'EDBTIMEOUT' || e?.code === '57014' /* the server's statement_timeout */ || e?.code === '55P03' /* lock_timeout */
    || /^(Query read timeout|timeout expired|Connection terminated due to connection timeout|timeout exceeded when trying to connect)$/.test(String(e?.message));
}

/** Resolves after `ms`, or at once when `signal` aborts. */
export const sleep = (ms, signal) => new Promise((r) => {
  if (signal?.aborted) return r();
  const t = setTimeout(done, ms);
  function done() { clearTimeout(t); signal?.removeEventListener('abort', done); r(); }
  signal?.addEventListener('abort', done, { once: true });
});

/** What a start withdrawn by its signal (a SIGTERM while starting) rejects with. */
export class StartAborted extends Error {
  constructor() { super('stopped while starting'); this.name = 'StartAborted'; this.code = 'ESTARTABORTED'; }
}

/** Errors that say the database is away for now (down, restarting, unreachable). */
export function transient(e) {
  const code = e?.code ?? '';
  return /^(08|57P0|53)/.test(code) || ['ECONNREFUSED', 'ECONNRESET', 'ENOENT', 'EPIPE', 'ETIMEDOUT'].includes(code) || timedOut(e)
    || /Connection terminated|connection timeout|timeout exceeded when trying to connect|Client has encountered a connection error|not queryable/i.test(String(e?.message));
}

/** How long a front or a worker that is starting waits for the queue's database
 *  (down, or restarting after a crash) before it gives up and exits. */
export const START_WAIT_S = 120;

/**
 * `fn()`, again while it fails because the database is away (transient), waiting
 * twice as long each time (up to 5 s) for at most `waitS`; `log` says so once. A
 * worker restarted while PostgreSQL restarts waits for it instead of exiting.
 */
export async function whileAway(fn, { log, waitS = START_WAIT_S, signal } = {}) {
  const until = Date.now() + waitS * 1000;
  let said = false;
  for (let delayMs = 250; ; delayMs = Math.min(delayMs * 2, 5000)) {
    if (signal?.aborted) throw new StartAborted();
    try {
      return await fn();
    } catch (e) {
      if (!transient(e) || Date.now() + delayMs > until) throw e;
      if (!said) log?.(`the queue's database is not reachable (${e.message}): trying again for up to ${waitS} s`);
      said = true;
      await sleep(delayMs, signal);
    }
  }
}

/** A job whose worker stopped heartbeating (killed, frozen, its machine lost) this
 *  many times is not taken again: its submission is reported "could not be graded",
 *  with the reason. Before that, each lease taken back delays the job's next take by
 *  `backoffS` doubled each time (3 s, then 6 s): not straight back to the queue's head. */
export const POISON = Object.freeze({ kills: 3, backoffS: 3 });

/** The report of a submission the queue gave up on (an error, like the grader's own). */
export function errorReport({ lab, seed }, message) {
  return JSON.stringify({ file: null, lab, status: 'error', passed: 0, failed: 0, total: 0, score: 0, max_score: 0, seed,
    duration_ms: null, tests: [], message });
}

// ---- Leases and their fencing token -------------------------------------------------
// A worker takes a submission under a lease (lease_until) with an epoch, the fencing
// token: each take adds one to lease_epoch. Its heartbeat, its report and its
// give-back each say the epoch they were given and count only while that lease is
// held: the epoch is still the row's and lease_until is still ahead (the database's
// clock, the one clock every process shares). A worker paused past its lease (a stop,
// a long pause, a partition) finds it gone when it comes back: its result is dropped,
// counted in late_results, and its job, which another worker may hold now, is left alone.
const HELD = 'lease_epoch = $2 AND lease_until > now() AND report IS NULL';

/** Takes the lease of submission `sid` for `worker` (in the claim's transaction):
 *  its row with the new epoch, or null when it has a report already. */
export async function takeLease(c, sid, worker, leaseS) {
  const { rows } = await c.query(`UPDATE ${SCHEMA}.submissions SET lease_worker = $2, lease_until = now() + make_interval(secs => $3),
      lease_epoch = lease_epoch + 1, attempts = attempts + 1
    WHERE id = $1 AND report IS NULL RETURNING lease_epoch, lab, source_json, seed, hidden_seed, hidden_statuses, cache_key`, [sid, worker, leaseS]);
  return rows[0] ?? null;
}

/** Moves the lease of epoch `epoch` on: false when it is not held any more. */
export async function renewLease(q, sid, epoch, leaseS) {
  const r = await q.query(`UPDATE ${SCHEMA}.submissions SET lease_until = now() + make_interval(secs => $3) WHERE id = $1 AND ${HELD}`,
    [sid, String(epoch), leaseS]);
  return r.rowCount === 1;
}

/** Writes the report under the lease of epoch `epoch` (in the transaction that
 *  completes the job, which the caller does only on true). A writer whose lease is
 *  gone writes nothing, and its result is counted in late_results: false. */
export async function writeReport(c, { sid, epoch, report, by, ms }) {
  const r = await c.query(`UPDATE ${SCHEMA}.submissions SET report = $3, reported_at = now(), graded_by = $4, grade_ms = $5,
      lease_until = NULL, lease_worker = NULL WHERE id = $1 AND ${HELD}`, [sid, String(epoch), report, by, ms]);
  if (r.rowCount === 1) return true;
  // This very write, again: its COMMIT went through and its answer was lost (a server
  // crash), so the writer tries once more. Not a late result.
  const { rows: [again] } = await c.query(`SELECT graded_by = $2 AND lease_epoch = $3 AS mine FROM ${SCHEMA}.submissions WHERE id = $1`, [sid, by, String(epoch)]);
  if (again?.mine) return true;
  await c.query(`UPDATE ${SCHEMA}.submissions SET late_results = late_results + 1 WHERE id = $1`, [sid]);
  return false;
}

/** Gives the lease of epoch `epoch` up (a stop): false when it was not held any more. */
export async function releaseLease(c, sid, epoch) {
  const r = await c.query(`UPDATE ${SCHEMA}.submissions SET lease_until = NULL, lease_worker = NULL WHERE id = $1 AND ${HELD}`, [sid, String(epoch)]);
  return r.rowCount === 1;
}

/** The reaper: leases past their time are taken back: the job failed into the queue
 *  again, not to be taken before its back-off (POISON.backoffS, doubled for each lease
 *  lost before), or, at the POISON.kills-th lease lost, the submission reported "could
 *  not be graded" and its job cancelled. Jobs pg-boss gave up on (RETRY_LIMIT takes)
 *  get an error report, so no submission is left without one. Any process may
 *  run it, several at once (SKIP LOCKED). Only submissions whose job is in this
 *  pg-boss's schema: another version's processes reap theirs (its queues are not
 *  this one's). Returns how many leases it took back. */
export async function reap(pool, boss) {
  const taken = await tx(pool, async (c) => {
    const { rows } = await c.query(`SELECT s.id, s.queue, s.job_id, s.lab, s.seed, s.leases_lost FROM ${SCHEMA}.submissions s
      JOIN ${BOSS_SCHEMA}.job j ON j.name = s.queue AND j.id = s.job_id
      WHERE s.report IS NULL AND s.lease_until < now() ORDER BY s.lease_until LIMIT 100 FOR UPDATE OF s SKIP LOCKED`);
    for (const r of rows) {
      const lost = r.leases_lost + 1;
      if (lost >= POISON.kills) {
        const line = errorReport(r, `This submission could not be graded: the worker grading it stopped (it was killed or froze) ${lost} times `
          + 'before it finished, so it is not tried again. Staff have been told.');
        await c.query(`UPDATE ${SCHEMA}.submissions SET report = $2, reported_at = now(), graded_by = 'reaper', lease_until = NULL, lease_worker = NULL,
          leases_lost = $3 WHERE id = $1`, [r.id, line, lost]);
        await boss.cancel(r.queue, r.job_id, { db: inTx(c) });
        continue;
      }
      await boss.fail(r.queue, r.job_id, { message: 'lease expired' }, { db: inTx(c) });
      // pg-boss retries a failed job after the queue's retryDelay (0: at once, for a
      // worker's stop); a lost lease waits its back-off first.
      await c.query(`UPDATE ${BOSS_SCHEMA}.job SET start_after = now() + make_interval(secs => $3) WHERE name = $1 AND id = $2 AND state = 'retry'`,
        [r.queue, r.job_id, POISON.backoffS * 2 ** (lost - 1)]);
      await c.query(`UPDATE ${SCHEMA}.submissions SET lease_until = NULL, lease_worker = NULL, leases_lost = $2 WHERE id = $1`, [r.id, lost]);
    }
    return rows.length;
  });
  // Given up on: pg-boss's job is `failed` for good.
  await tx(pool, async (c) => {
    const { rows } = await c.query(`SELECT s.id, s.lab, s.seed, s.attempts FROM ${SCHEMA}.submissions s
      JOIN ${BOSS_SCHEMA}.job j ON j.name = s.queue AND j.id = s.job_id
      WHERE s.report IS NULL AND j.state = 'failed' LIMIT 100 FOR UPDATE OF s SKIP LOCKED`);
    for (const r of rows) {
      const line = errorReport(r, `The grader could not finish this submission after ${r.attempts} attempts; staff have been told.`);
      await c.query(`UPDATE ${SCHEMA}.submissions SET report = $2, reported_at = now(), graded_by = 'reaper' WHERE id = $1 AND report IS NULL`, [r.id, line]);
    }
  });
  return taken;
}
