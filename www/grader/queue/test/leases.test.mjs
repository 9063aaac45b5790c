// Leases under faults (issue 37), on a cluster of the test's own, the front in this
// process and workers as processes:
// - fencing: a worker paused past its lease (SIGSTOP) after grading, whose job another
//   worker has taken since, is resumed (SIGCONT) before the new holder writes: its
//   result is dropped and counted (the front's grading_late_results_dropped_total),
//   the job it no longer holds is left alone, and the report stored is the new
//   holder's, written once, equal to ./lab grade's;
// - poison: a submission whose worker dies each time it takes it (the test SIGKILLs
//   the worker holding it) waits a back-off after each lost lease (another
//   submission posted meanwhile is graded first), and at the third is reported
//   "could not be graded" with the reason, never taken again.
// Each step waits for what it needs (a log line, a row, a process state), not for a
// time: the leases are short (2 s, --lease) and the waits generous, so a busy machine
// makes it slower, not different.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { loadGrader } from '../../../host/node_host.mjs';
import { jailProblem } from '../../jail.mjs';
import { BOSS_SCHEMA, POISON, SCHEMA } from '../common.mjs';
import { createQueueFront } from '../front.mjs';
import { startWorker } from '../worker.mjs';
import { clusterWith, serverBinDir } from './pg_cluster.mjs';
import { until } from './until.mjs';

const WWW = fileURLToPath(new URL('../../../', import.meta.url));
const LEASE_S = 2;
const skip = !serverBinDir() ? 'PostgreSQL server binaries are not installed' : jailProblem() ? `the sandbox does not work here: ${jailProblem()}` : false;

let cluster;
let url;
let front;
let server;
let base;
let db;
let lab;
const children = new Set();
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'queue-leases-'));

before(async () => {
  if (skip) return;
  ({ cluster, url } = await clusterWith());
  lab = JSON.parse(new (await loadGrader()).Grader().lab('deliver-once'));
  // The hidden cases as written (no secret): ./lab grade --hidden-seed none grades the same.
  front = await createQueueFront({ connectionString: url, hiddenOf: () => ({ seed: null, statuses: 'each' }), reapEveryMs: 300, log: () => {} });
  server = http.createServer((req, res) => { if (!front.handle(req, res)) { res.writeHead(404); res.end(); } });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${server.address().port}/`;
  db = new pg.Pool({ connectionString: url, max: 2 });
  // Every write of a report, counted by a trigger of the test's own.
  await db.query(`CREATE TABLE public.report_writes (id uuid NOT NULL, by text);
    CREATE FUNCTION public.count_report() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      IF NEW.report IS NOT NULL AND (TG_OP = 'INSERT' OR OLD.report IS DISTINCT FROM NEW.report) THEN
        INSERT INTO public.report_writes (id, by) VALUES (NEW.id, NEW.graded_by);
      END IF;
      RETURN NEW;
    END $$;
    CREATE TRIGGER count_report AFTER INSERT OR UPDATE ON ${SCHEMA}.submissions FOR EACH ROW EXECUTE FUNCTION public.count_report();`);
});

after(async () => {
  for (const c of children) { c.kill('SIGCONT'); c.kill('SIGKILL'); }
  server?.close();
  await front?.close();
  await db?.end();
  cluster?.close();
  fs.rmSync(tmp, { recursive: true, force: true });
});

function workerProcess(env = {}, args = []) {
  const child = spawn(process.execPath, [path.join(WWW, 'grader', 'queue', 'worker.mjs'), '--queue', url, '--jobs', '1', '--lease', String(LEASE_S),
    '--poll-ms', '100', '--grace', '0', ...args], { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, ...env } });
  child.log = '';
  child.stdout.on('data', (d) => { child.log += d; });
  child.stderr.on('data', (d) => { child.log += d; });
  child.ended = new Promise((resolve) => child.once('exit', resolve));
  children.add(child);
  return child;
}

const stateOf = (pid) => { try { return fs.readFileSync(`/proc/${pid}/stat`, 'utf8').replace(/^.*\) /s, '')[0]; } catch { return null; } };

/** POST /grade: the id. A 503 (the database did not answer within the front's bound,
 *  as on a machine too busy for a login to finish in time) is tried again, as a client does. */
async function post(source) {
  for (let i = 0; ; i++) {
    const r = await fetch(new URL('/grade', base), { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ lab: 'deliver-once', source }) });
    const body = await r.json();
    if (r.status === 503 && i < 20) { await new Promise((res) => setTimeout(res, 500)); continue; }
    assert.equal(r.status, 202, JSON.stringify(body));
    return body.id;
  }
}

async function row(id) {
  const { rows: [r] } = await db.query(`SELECT s.*, j.state AS job_state, j.start_after, (SELECT count(*)::int FROM public.report_writes w WHERE w.id = s.id) AS writes
    FROM ${SCHEMA}.submissions s LEFT JOIN ${BOSS_SCHEMA}.job j ON j.name = s.queue AND j.id = s.job_id WHERE s.id = $1`, [id]);
  return r;
}

async function metric(name) {
  let r;
  for (let i = 0; (r = await fetch(new URL('/metrics', base))).status === 503 && i < 20; i++) await new Promise((res) => setTimeout(res, 500));
  const text = await r.text();
  const m = new RegExp(`^${name} (\\S+)$`, 'm').exec(text);
  assert.ok(m, `${name} in /metrics`);
  return Number(m[1]);
}

/** ./lab grade --format json on `source` (node www/grader/grade.mjs, what ./lab grade runs after its build check). */
function cliReport(source) {
  const file = path.join(tmp, `cli-${Date.now()}.py`);
  fs.writeFileSync(file, source);
  const r = spawnSync(process.execPath, [path.join(WWW, 'grader', 'grade.mjs'), '--format', 'json', '--lab', 'deliver-once', '--hidden-seed', 'none', file],
    { encoding: 'utf8', timeout: 300_000 });
  assert.ok(r.status === 0 || r.status === 1, `./lab grade exited ${r.status}: ${r.stderr}`);
  return JSON.parse(r.stdout);
}
const comparable = (j) => ({ ...j, file: null, duration_ms: null });

test('fencing: a worker paused past its lease and resumed before the new holder writes has its result dropped and counted; the report is the new holder\'s, as ./lab grade\'s',
  { skip, timeout: 600_000 }, async () => {
    const source = `${lab.reference_py}\n# fencing\n`;
    const late0 = await metric('grading_late_results_dropped_total');
    // A: stops itself (SIGSTOP) once it has graded, before it writes (GRADING_QUEUE_TEST_HOOK).
    const a = workerProcess({ GRADING_QUEUE_TEST_HOOK: 'stop-before-write' });
    await until(() => /^ready /m.test(a.log) || a.exitCode !== null, 'worker A ready', 300_000);
    const id = await post(source);
    await until(() => stateOf(a.pid) === 'T' || a.exitCode !== null, 'worker A stopped before its write');
    assert.equal(stateOf(a.pid), 'T', a.log);
    const taken = await row(id);
    assert.equal(Number(taken.lease_epoch), 1);
    assert.equal(taken.report, null);
    const aWorker = taken.lease_worker;
    assert.match(aWorker, new RegExp(`:${a.pid}:`));

    // B, in this process: held after grading, before its write, until A has come back.
    let held;
    const holding = new Promise((r) => { held = r; });
    let release;
    const gate = new Promise((r) => { release = r; });
    const b = await startWorker({ connectionString: url, jobs: 1, leaseS: LEASE_S, pollMs: 100, reapEveryMs: 300, log: () => {},
      beforeWrite: async (job) => { held(job); await gate; } });
    try {
      // A's lease ran out (it is stopped), the reaper took it back, B took the job.
      const job = await holding;
      assert.equal(Number(job.epoch), 2, 'B holds the lease of the next epoch');
      const retaken = await row(id);
      assert.equal(retaken.lease_worker, b.id);
      assert.equal(Number(retaken.leases_lost), 1);
      assert.equal(retaken.job_state, 'active');

      // A comes back and tries to write its result: dropped, counted, the job left to B.
      a.kill('SIGCONT');
      await until(() => /the result is dropped/.test(a.log), `A's result dropped:\n${a.log}`);
      const during = await row(id);
      assert.equal(during.report, null, 'A wrote nothing');
      assert.equal(during.writes, 0);
      assert.equal(during.late_results, 1);
      assert.equal(during.job_state, 'active', 'A did not complete the job B holds');
      assert.equal(during.lease_worker, b.id);
      assert.equal(await metric('grading_late_results_dropped_total'), late0 + 1);

      // B writes.
      release();
      await until(async () => (await row(id)).report !== null, 'B\'s report');
      const done = await row(id);
      assert.equal(done.graded_by, b.id);
      assert.equal(done.writes, 1, 'one write of the report');
      assert.equal(done.job_state, 'completed');
      assert.equal(b.stats.graded, 1);
      assert.equal(b.stats.lateResults, 0);
      const got = JSON.parse(done.report);
      assert.equal(got.status, 'pass', done.report.slice(0, 500));
      assert.deepEqual(comparable(got), comparable(cliReport(source)), 'the stored report is ./lab grade\'s');
    } finally {
      release();
      await b.stop({ graceS: 0 });
      a.kill('SIGTERM');
      await a.ended;
      children.delete(a);
    }
  });

test(`poison: a submission whose worker dies each time it holds it backs off between takes and is reported "could not be graded" after ${POISON.kills}`,
  { skip, timeout: 900_000 }, async () => {
    // It runs until its CPU limit (60 s): the test kills its holder long before that, as
    // a submission that kills its worker would.
    const poison = 'while True:\n    pass\n# poison\n';
    const workers = new Map(); // pid -> process
    const spawnWorker = () => { const w = workerProcess({}, ['--timeout', '60']); workers.set(w.pid, w); return w; };
    const ready = (w) => until(() => /^ready /m.test(w.log) || w.exitCode !== null, 'a worker ready', 300_000);
    await Promise.all([spawnWorker(), spawnWorker()].map(ready));
    const id = await post(poison);
    let innocent = null;
    for (let kill = 1; kill <= POISON.kills; kill++) {
      const holder = await until(async () => { const r = await row(id); return r.lease_worker && Number(r.lease_epoch) === kill ? r : null; }, `take ${kill} of the poison`);
      const w = workers.get(Number(holder.lease_worker.split(':').at(-2)));
      assert.ok(w, `the holder ${holder.lease_worker} is one of the test's workers`);
      w.kill('SIGKILL');
      await w.ended;
      workers.delete(w.pid);
      children.delete(w);
      spawnWorker();
      // Its lease runs out and the reaper takes it back.
      const back = await until(async () => { const r = await row(id); return Number(r.leases_lost) === kill ? r : null; }, `the poison's lease ${kill} taken back`);
      if (kill < POISON.kills) {
        // Not straight back: its job waits its back-off, doubled each time.
        assert.equal(back.report, null);
        assert.equal(back.job_state, 'retry');
        const { rows: [{ wait }] } = await db.query(`SELECT extract(epoch FROM start_after - now()) AS wait FROM ${BOSS_SCHEMA}.job WHERE id = $1`, [back.job_id]);
        const backoff = POISON.backoffS * 2 ** (kill - 1);
        assert.ok(Number(wait) > 0 && Number(wait) <= backoff, `the job waits (${wait} s of ${backoff})`);
        if (kill === 1) {
          // A submission posted after the poison's first lost lease is taken (by the
          // other worker, idle) before the poison is taken again.
          innocent = await post(`${lab.reference_py}\n# innocent\n`);
          await until(async () => Number((await row(innocent)).attempts) >= 1, 'the innocent one taken');
          assert.equal(Number((await row(id)).lease_epoch), 1, 'the poison was not taken again before it');
        }
      } else {
        assert.notEqual(back.report, null, `reported at its ${kill}th lost lease`);
      }
    }
    const p = await row(id);
    assert.equal(Number(p.lease_epoch), POISON.kills, `taken ${POISON.kills} times, no more`);
    assert.equal(p.graded_by, 'reaper');
    assert.equal(p.writes, 1);
    assert.equal(p.job_state, 'cancelled', 'its job is not taken again');
    const report = JSON.parse(p.report);
    assert.equal(report.status, 'error');
    assert.match(report.message, new RegExp(`could not be graded: the worker grading it stopped \\(it was killed or froze\\) ${POISON.kills} times`));
    const got = await fetch(new URL(`/grade/${id}`, base));
    assert.equal(got.status, 200);
    assert.equal(await got.text(), p.report);
    const innocentReport = JSON.parse((await until(async () => (await row(innocent)).report, 'the innocent one reported')));
    assert.equal(innocentReport.status, 'pass');
    for (const w of workers.values()) {
      await ready(w);
      w.kill('SIGTERM');
      assert.equal(await w.ended, 0, w.log);
      children.delete(w);
    }
  });
