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
// back by a reaper (the job failed back into the queue, retried at once).
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
  report          text,
  reported_at     timestamptz,
  graded_by       text,
  grade_ms        integer
);
CREATE UNIQUE INDEX IF NOT EXISTS submissions_idempotency ON ${SCHEMA}.submissions (idempotency_key) WHERE idempotency_key IS NOT NULL;
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

/** A pg.Pool that never throws out of an idle client's error (a server restart). */
export function makePool(connectionString, { max = 5, onError } = {}) {
  const pool = new pg.Pool({ connectionString, max, connectionTimeoutMillis: 5000, idleTimeoutMillis: 10_000 });
  pool.on('error', (e) => onError?.(e));
  return pool;
}

/** pg-boss on the same database. Started, its schema made or migrated. */
export async function startBoss(connectionString, { onError, supervise = true, expiryCheckSeconds = 30 } = {}) {
  const boss = new PgBoss({
    connectionString, schema: BOSS_SCHEMA, max: 3, supervise, schedule: false, migrate: true,
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
  try {
    await c.query('SELECT pg_advisory_lock(31031)');
    try { await c.query(SCHEMA_SQL); } finally { await c.query('SELECT pg_advisory_unlock(31031)'); }
  } finally {
    c.release();
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

/** Runs fn(client) in a transaction on a client of `pool`. */
export async function tx(pool, fn) {
  const c = await pool.connect();
  let broken = false;
  try {
    await c.query('BEGIN');
    const out = await fn(c);
    await c.query('COMMIT');
    return out;
  } catch (e) {
    try { await c.query('ROLLBACK'); } catch { broken = true; }
    throw e;
  } finally {
    c.release(broken);
  }
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
  return /^(08|57P0|53)/.test(code) || ['ECONNREFUSED', 'ECONNRESET', 'ENOENT', 'EPIPE', 'ETIMEDOUT'].includes(code)
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

/** The reaper: leases past their time are taken back (the job failed into the queue
 *  again, retried at once, its retry counted); jobs pg-boss gave up on (RETRY_LIMIT
 *  takes) get an error report, so no submission is left without one. Any process may
 *  run it, several at once (SKIP LOCKED). Only submissions whose job is in this
 *  pg-boss's schema: another version's processes reap theirs (its queues are not
 *  this one's). Returns how many leases it took back. */
export async function reap(pool, boss) {
  const taken = await tx(pool, async (c) => {
    const { rows } = await c.query(`SELECT s.id, s.queue, s.job_id FROM ${SCHEMA}.submissions s
      JOIN ${BOSS_SCHEMA}.job j ON j.name = s.queue AND j.id = s.job_id
      WHERE s.report IS NULL AND s.lease_until < now() ORDER BY s.lease_until LIMIT 100 FOR UPDATE OF s SKIP LOCKED`);
    for (const r of rows) {
      await boss.fail(r.queue, r.job_id, { message: 'lease expired' }, { db: inTx(c) });
      await c.query(`UPDATE ${SCHEMA}.submissions SET lease_until = NULL, lease_worker = NULL, leases_lost = leases_lost + 1 WHERE id = $1`, [r.id]);
    }
    return rows.length;
  });
  // Given up on: pg-boss's job is `failed` for good.
  await tx(pool, async (c) => {
    const { rows } = await c.query(`SELECT s.id, s.lab, s.seed, s.attempts FROM ${SCHEMA}.submissions s
      JOIN ${BOSS_SCHEMA}.job j ON j.name = s.queue AND j.id = s.job_id
      WHERE s.report IS NULL AND j.state = 'failed' LIMIT 100 FOR UPDATE OF s SKIP LOCKED`);
    for (const r of rows) {
      const line = JSON.stringify({ file: null, lab: r.lab, status: 'error', passed: 0, failed: 0, total: 0, score: 0, max_score: 0, seed: r.seed,
        duration_ms: null, tests: [], message: `The grader could not finish this submission after ${r.attempts} attempts; staff have been told.` });
      await c.query(`UPDATE ${SCHEMA}.submissions SET report = $2, reported_at = now(), graded_by = 'reaper' WHERE id = $1 AND report IS NULL`, [r.id, line]);
    }
  });
  return taken;
}
