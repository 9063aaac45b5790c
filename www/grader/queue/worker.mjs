#!/usr/bin/env node
// A grading worker: takes submissions from the queue and grades them with the CLI's
// sandboxed pool (grader/pool.mjs), on any machine that reaches the database.
//
//   node www/grader/queue/worker.mjs --queue postgres://... [--jobs N] [--lease S] [--grace S]
//        [--timeout S] [--wall-factor K] [--memory MB] [--no-sandbox] [--health-port N] [--poll-ms MS]
//
// Each of its N slots: take a job and lease its submission (one transaction; the
// lease's epoch is its fencing token), grade it while a heartbeat moves the lease on,
// then write the report and complete the job (one transaction, both only while the
// lease of that epoch is held: a result that comes too late is dropped and counted). A
// worker that dies stops heartbeating; its lease runs out and the reaper (in every
// front and worker) puts the job back in the queue. SIGTERM: no new job; the ones
// under way finish within --grace seconds, or are withdrawn and put back at once.
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseOrExit } from '../args.mjs';
import { WORKER } from '../commands.mjs';
import { jsonText } from '../output.mjs';
import { createGradingPool } from '../pool.mjs';
import {
  DB_TIMEOUTS, SCHEMA, StartAborted, buildId, fairFetch, ensureQueue, ensureSchema, fetchIn, inTx, makePool, queueName, reap, releaseLease, renewLease, sleep,
  startBoss, takeLease, transient, tx, whileAway, withPool, writeReport,
} from './common.mjs';

const W = WORKER.options;
export const WORKER_DEFAULTS = Object.freeze({
  jobs: W.jobs.default, leaseS: W.lease.default, graceS: W.grace.default, pollMs: W['poll-ms'].default, reapEveryMs: 5000, claim: W.claim.default,
});

/**
 * Starts a worker; resolves once its pool is ready and it takes jobs.
 * Returns { stop({graceS}) → Promise, stats, id }. `signal` withdraws the start:
 * what was made is closed and it rejects with StartAborted.
 * `beforeWrite(job)`, a test's seam: awaited after a job is graded and before its
 * report is written (the tests hold a worker there; the CLI's is
 * GRADING_QUEUE_TEST_HOOK, below).
 */
export async function startWorker({ connectionString, jobs = WORKER_DEFAULTS.jobs, leaseS = WORKER_DEFAULTS.leaseS, graceS = WORKER_DEFAULTS.graceS,
  pollMs = WORKER_DEFAULTS.pollMs, reapEveryMs = WORKER_DEFAULTS.reapEveryMs, timeoutS, wallFactor, memoryMb, sandbox = true, pkgDir,
  log = (m) => console.error(`queue worker: ${m}`), gradingPool, signal, beforeWrite, claim: claimOrder = WORKER_DEFAULTS.claim, clientCap = Infinity } = {}) {
  const id = `${os.hostname()}:${process.pid}:${Math.random().toString(36).slice(2, 8)}`;
  const build = buildId(pkgDir);
  const queue = queueName(build);
  // A start may be withdrawn at any step (signal: a SIGTERM while starting); what it
  // made so far is closed, and it rejects with StartAborted.
  const made = [];
  const withdrawn = new Promise((_, reject) => {
    if (signal?.aborted) reject(new StartAborted());
    signal?.addEventListener('abort', () => reject(new StartAborted()), { once: true });
  });
  withdrawn.catch(() => {});
  const step = (p) => Promise.race([p, withdrawn]);
  let db, boss, grader;
  try {
    db = makePool(connectionString, { max: jobs + 3, onError: (e) => log(`database: ${e.message}`), ...DB_TIMEOUTS.worker });
    made.push(() => db.end());
    await step(whileAway(() => withPool(connectionString, DB_TIMEOUTS.setup, ensureSchema), { log, signal }));
    const starting = whileAway(() => startBoss(connectionString, { onError: (e) => log(`pg-boss: ${e.message}`) }), { log, signal });
    // A boss that starts after the start was withdrawn is stopped too.
    made.push(() => starting.then((b) => b.stop({ graceful: false, wait: true, timeout: 2000 }), () => {}));
    boss = await step(starting);
    await step(whileAway(() => ensureQueue(boss, queue), { log, signal }));
    grader = gradingPool ?? createGradingPool({ jobs, ...(timeoutS ? { timeoutS } : {}), ...(wallFactor ? { wallFactor } : {}), ...(memoryMb ? { memoryMb } : {}), sandbox, ...(pkgDir ? { pkgDir } : {}) });
    if (!gradingPool) made.push(() => grader.close());
    log(`${id} starts its grading pool`);
    await step(grader.ready);
  } catch (e) {
    for (const close of made.reverse()) await Promise.resolve().then(close).catch(() => {});
    throw e;
  }

  // lateResults: results brought after their lease was gone (dropped, not written);
  // dbErrors: queries that failed or ran out of time (the database away or frozen).
  const stats = { graded: 0, fromCache: 0, skipped: 0, returned: 0, writeRetries: 0, leasesLost: 0, lateResults: 0, errors: 0, dbErrors: 0, busyMs: 0 };
  const running = new Map(); // submission id -> { jobId, controller }
  let stopping = false;

  /** Takes one job and leases its submission, in one transaction: null when none. */
  async function claim() {
    return tx(db, async (c) => {
      const [job] = claimOrder === 'fifo' ? await fetchIn(boss, queue, c) : await fairFetch(c, queue, { cap: clientCap });
      if (!job) return null;
      const sid = job.data?.submission;
      const leased = await takeLease(c, sid, id, leaseS);
      if (!leased) {
        // Reported already (another worker finished it): nothing to grade.
        await boss.complete(queue, job.id, null, { db: inTx(c) });
        return { skip: true };
      }
      return { jobId: job.id, sid, epoch: leased.lease_epoch, ...leased };
    });
  }

  /** Writes the report and completes the job, in one transaction, both fenced on the
   *  job's lease: only while the lease of its epoch is held (writeReport). A late
   *  result (the lease ran out, the job may be another worker's now) is dropped and
   *  counted; the job is left to whoever holds it. Again while the database is away,
   *  as long as the lease could still hold (a write after that is late). */
  async function finish(job, report, gradeMs) {
    for (let attempt = 0; ; attempt++) {
      try {
        return await tx(db, async (c) => {
          const wrote = await writeReport(c, { sid: job.sid, epoch: job.epoch, report, by: id, ms: gradeMs });
          if (wrote) await boss.complete(queue, job.jobId, null, { db: inTx(c) });
          return wrote;
        });
      } catch (e) {
        if (!transient(e) || attempt >= 60) throw e;
        stats.writeRetries += 1;
        stats.dbErrors += 1;
        await sleep(Math.min(5000, 250 * 2 ** Math.min(attempt, 5)));
      }
    }
  }

  /** Puts a job back in the queue now (a stop): failed, so pg-boss retries it at once. */
  async function giveBack(job) {
    // Only a lease still held: one gone is another's job now, not ours to fail.
    const gave = await tx(db, async (c) => {
      if (!await releaseLease(c, job.sid, job.epoch)) return false;
      await boss.fail(queue, job.jobId, { message: `worker ${id} stopped` }, { db: inTx(c) });
      return true;
    });
    if (gave) stats.returned += 1;
  }

  async function gradeOne(job) {
    const controller = new AbortController();
    running.set(job.sid, { job, controller });
    const heartbeat = setInterval(async () => {
      if (job.lost) return;
      try {
        if (!await renewLease(db, job.sid, job.epoch, leaseS)) { job.lost = true; stats.leasesLost += 1; }
      } catch { stats.dbErrors += 1; /* the database is away: the lease may run out, and the job go to another worker */ }
    }, Math.max(250, (leaseS * 1000) / 3));
    const t0 = performance.now();
    try {
      // Another submission with the same source, build, seed and hidden inputs was graded meanwhile.
      const hit = await db.query(`SELECT report FROM ${SCHEMA}.submissions WHERE cache_key = $1 AND report IS NOT NULL LIMIT 1`, [job.cache_key]);
      let report = hit.rows[0]?.report;
      if (report !== undefined) stats.fromCache += 1;
      else {
        // The pool's line (an object), serialised once, as serve.mjs answers it.
        report = jsonText(await grader.grade({
          lab: job.lab, source: JSON.parse(job.source_json), seed: job.seed, format: 'json', signal: controller.signal,
          hidden: { seed: job.hidden_seed === null ? null : Number(job.hidden_seed), statuses: job.hidden_statuses },
        }));
      }
      const ms = Math.round(performance.now() - t0);
      stats.busyMs += ms;
      await beforeWrite?.(job);
      const wrote = await finish(job, report, ms);
      clearInterval(heartbeat);
      if (wrote) stats.graded += 1;
      else {
        stats.lateResults += 1;
        log(`${job.sid}: its lease (epoch ${job.epoch}) was gone when its result came: the result is dropped`);
      }
    } catch (e) {
      clearInterval(heartbeat);
      if (controller.signal.aborted || e?.code === 'ESANDBOXSTART' || !transient(e)) {
        if (!controller.signal.aborted) { stats.errors += 1; log(`${job.sid}: ${e?.message || e}; returned to the queue`); }
        // Withdrawn (a stop) or this worker cannot grade now: back in the queue at once.
        await giveBack(job).catch((err) => log(`${job.sid}: could not return the job (its lease will run out): ${err.message}`));
        if (e?.code === 'ESANDBOXSTART') await sleep(Math.max(1000, (e.retryAfterS ?? 1) * 1000));
      }
      // The database went away: the lease runs out and the reaper returns the job.
    } finally {
      clearInterval(heartbeat);
      running.delete(job.sid);
    }
  }

  async function slot() {
    while (!stopping) {
      let job;
      try {
        job = await claim();
      } catch (e) {
        if (!transient(e)) log(`taking a job: ${e.message}`);
        else stats.dbErrors += 1;
        await sleep(pollMs + Math.random() * pollMs);
        continue;
      }
      if (!job) { await sleep(pollMs / 2 + Math.random() * pollMs); continue; }
      if (job.skip) { stats.skipped += 1; continue; }
      await gradeOne(job);
    }
  }

  const reaper = setInterval(() => { reap(db, boss).catch(() => {}); }, reapEveryMs);
  reaper.unref();
  const slots = Array.from({ length: jobs }, () => slot());
  log(`${id} grades build ${build} from queue ${queue} with ${jobs} job${jobs === 1 ? '' : 's'}`);

  let stopped = null;
  return {
    id,
    build,
    queue,
    stats,
    running: () => running.size,
    /** Takes no new job; waits up to graceS for the ones under way, then withdraws them
     *  and puts them back in the queue; then closes the pool and the connections. */
    stop({ graceS: g = graceS } = {}) {
      stopped ??= (async () => {
        stopping = true;
        clearInterval(reaper);
        const deadline = Date.now() + g * 1000;
        while (running.size && Date.now() < deadline) await sleep(100);
        for (const { controller } of running.values()) controller.abort();
        await Promise.race([Promise.all(slots), sleep(10_000)]);
        await grader.close().catch(() => {});
        await boss.stop({ graceful: false, wait: true, timeout: 2000 }).catch(() => {});
        await db.end().catch(() => {});
      })();
      return stopped;
    },
  };
}

/** A worker's /healthz and /readyz, for a container's probes (--health-port). */
function serveHealth(port, worker) {
  const server = http.createServer((req, res) => {
    const body = JSON.stringify({ ok: true, id: worker.id, build: worker.build, running: worker.running(), ...worker.stats });
    res.writeHead(200, { 'Content-Type': 'application/json' });
    res.end(body);
  });
  server.listen(port, '0.0.0.0');
  return server;
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const { values: v } = parseOrExit(WORKER, process.argv.slice(2), 'worker');
  const o = {
    connectionString: v.queue ?? process.env.GRADING_QUEUE_URL, jobs: v.jobs, leaseS: v.lease, graceS: v.grace, pollMs: v['poll-ms'],
    ...(v.timeout !== undefined ? { timeoutS: v.timeout } : {}), ...(v['wall-factor'] !== undefined ? { wallFactor: v['wall-factor'] } : {}),
    ...(v.memory !== undefined ? { memoryMb: v.memory } : {}), sandbox: !v['no-sandbox'], claim: v.claim,
    ...(v['client-cap'] !== undefined ? { clientCap: v['client-cap'] } : {}),
  };
  const healthPort = v['health-port'] ?? null;
  if (!o.connectionString) { console.error(`worker: --queue (or GRADING_QUEUE_URL) is needed\n(${WORKER.prog} --help lists every option)`); process.exit(2); }
  // The signals are ours from the first line: a worker told to stop while it starts
  // (a deployment scaled down, a test ending) withdraws the start and exits 0,
  // instead of dying of the signal with its pool's sandboxes half made.
  const starting = new AbortController();
  let worker = null;
  let stopping = false;
  const stop = () => {
    if (!worker) { starting.abort(); return; }
    if (stopping) return;
    stopping = true;
    worker.stop().finally(() => {
      console.error(`queue worker: stopped: ${JSON.stringify(worker.stats)}`);
      process.exit(0);
    });
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
  // A test's hook (leases.test.mjs): the worker stops itself (SIGSTOP) once a job is
  // graded, before its report is written: a worker paused between its work and its
  // write, the zombie a fencing token is for. The test sends SIGCONT.
  if (process.env.GRADING_QUEUE_TEST_HOOK === 'stop-before-write') {
    o.beforeWrite = () => { console.error('queue worker: test hook: stopping before the write'); process.kill(process.pid, 'SIGSTOP'); };
  }
  try {
    worker = await startWorker({ ...o, signal: starting.signal });
  } catch (e) {
    if (e instanceof StartAborted) {
      console.error('queue worker: stopped while starting; it took no job');
      process.exit(0);
    }
    console.error(`worker: could not start: ${e.message}`);
    process.exit(2);
  }
  if (healthPort !== null) serveHealth(healthPort, worker).unref();
  console.log(`ready ${worker.id}`);
  // Told to stop in the last step of its start: it stops now.
  if (starting.signal.aborted) stop();
}
