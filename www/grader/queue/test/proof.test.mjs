// The queue's proof (issue 31): a PostgreSQL cluster of the test's own (as ./lab real
// makes one), one front, three workers; N submissions (correct, wrong, hostile) are
// posted while workers are SIGKILLed at seeded random moments (and started again) and
// PostgreSQL is crashed and restarted once. Then: every submission has exactly one
// report (a trigger counts each write of one), none is lost, and each report is the one
// `./lab grade --format json` makes for the same file, seed and hidden seed (duration
// and the staff-only fields aside).
//
//   node --test www/grader/queue/test/proof.test.mjs
//   QUEUE_PROOF_N=300 QUEUE_PROOF_SEED=7 node --test www/grader/queue/test/proof.test.mjs
//
// QUEUE_PROOF_N: submissions (default 60, about 3 min on the shared 2-core machine;
// 300, the figure, took about N min: README.md). The kills and the
// restart happen whatever N is: they are spread over the run by its progress.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { Cluster, serverBinDir } from './pg_cluster.mjs';
import { loadGrader } from '../../../host/node_host.mjs';
import { staffReplay } from '../../hidden.mjs';
import { jailProblem } from '../../jail.mjs';
import { buildId, POISON } from '../common.mjs';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const WWW = path.resolve(HERE, '..', '..', '..');
const N = Number(process.env.QUEUE_PROOF_N || 60);
const SEED = Number(process.env.QUEUE_PROOF_SEED || 31);
const WORKERS = 3;
const KILLS = Number(process.env.QUEUE_PROOF_KILLS || 6);
const TIMEOUT_S = 12; // CPU per submission, the same for ./lab grade and the workers (huge_raise needs more than 4 s)
const LEASE_S = 5;
const STOPPED = /^Stopped: the run (was still going after [\d.]+ s \(it may wait [\d.]+ times its [\d.]+ s limit of CPU time\)|took longer than the [\d.]+ s limit of CPU time)\.$/;

// A small seeded rng (mulberry32): the kills' moments and victims are the seed's.
function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** N submissions: each of the hostile files once, the rest from the labs' reference and
 *  starter (the grader's registry) and wrong variants of the reference; each made
 *  distinct by a comment of its own, and a few exact copies (the cache). */
async function corpus(n) {
  const registry = new (await loadGrader()).Grader();
  const lab = JSON.parse(registry.lab('deliver-once'));
  const ref = lab.reference_py;
  const mut = (from, to) => { assert.ok(ref.includes(from), `the reference has ${from}`); return ref.replace(from, to); };
  const kinds = [
    ['correct', ref],
    ['starter', lab.starter_py],
    ['no-nx', mut('ttl=policy.claim_ttl_s, nx=True)', 'ttl=policy.claim_ttl_s)')],
    ['no-done-ttl', mut('ttl=DONE_TTL_S', 'ttl=None')],
    ['prints', ref.replace('def deliver_once(task, provider, kv, policy):\n', 'def deliver_once(task, provider, kv, policy):\n    print("delivering", task.key)\n')],
    ['raises', 'def deliver_once(task, provider, kv, policy):\n    raise ValueError("no")\n\ndef next_step(task, result, now, policy, rng):\n    return ("drop", None)\n'],
    ['syntax', 'def deliver_once(task, provider, kv, policy)\n    return "sent"\n'],
    ['import-js', 'import js\n'],
  ];
  const hostileDir = path.join(WWW, 'grader', 'test', 'hostile');
  const hostile = fs.readdirSync(hostileDir).filter((f) => f.endsWith('.py')).sort()
    .map((f) => [`hostile-${f.replace(/\.py$/, '')}`, fs.readFileSync(path.join(hostileDir, f), 'utf8')]);
  const subs = [];
  const r = rng(SEED);
  for (let i = 0; i < n; i++) {
    let kind;
    let source;
    if (i < hostile.length && i < n / 3) [kind, source] = hostile[i];
    else if (i % 23 === 22 && subs.length > 30) ({ kind, source } = { ...subs[Math.floor(r() * 30)], kind: 'copy' }); // an exact copy: the cache
    else [kind, source] = kinds[i % kinds.length];
    if (kind !== 'copy') source = `${source}${source.endsWith('\n') ? '' : '\n'}# submission ${i}\n`;
    subs.push({ i, kind, source, seed: i % 10 === 9 ? 7 : undefined });
  }
  // Hostile ones spread through the run rather than all first.
  for (let i = subs.length - 1; i > 0; i--) {
    const j = Math.floor(r() * (i + 1));
    [subs[i], subs[j]] = [subs[j], subs[i]];
  }
  return subs;
}

/** ./lab grade --format json over the files (node www/grader/grade.mjs, which ./lab grade
 *  execs after its build check: the test must not start a build), by file name. */
function cliReports(dir, files, { seed, secretFile }) {
  if (!files.length) return new Map();
  const sub = fs.mkdtempSync(path.join(dir, 'cli-'));
  for (const f of files) fs.copyFileSync(path.join(dir, f), path.join(sub, f));
  const args = [path.join(WWW, 'grader', 'grade.mjs'), '--format', 'json', '--jobs', '2', '--timeout', String(TIMEOUT_S), '--secret-file', secretFile,
    ...(seed !== undefined ? ['--seed', String(seed)] : []), sub];
  const r = spawnSync(process.execPath, args, { encoding: 'utf8', maxBuffer: 256 << 20, timeout: 900_000 });
  assert.ok(r.status === 0 || r.status === 1, `./lab grade exited ${r.status}: ${r.stderr.slice(-2000)}`);
  const out = new Map();
  for (const line of r.stdout.trim().split('\n')) {
    const j = JSON.parse(line);
    out.set(path.basename(j.file), j);
  }
  return out;
}

function startWorkerProcess(url, n) {
  const child = spawn(process.execPath, [path.join(WWW, 'grader', 'queue', 'worker.mjs'), '--queue', url, '--jobs', '1', '--lease', String(LEASE_S),
    '--timeout', String(TIMEOUT_S), '--wall-factor', '10', '--poll-ms', '200', '--grace', '10'], { stdio: ['ignore', 'pipe', 'pipe'] });
  child.log = '';
  child.stdout.on('data', (d) => { child.log += d; });
  child.stderr.on('data', (d) => { child.log += d; if (process.env.QUEUE_PROOF_VERBOSE) process.stderr.write(`[w${n}] ${d}`); });
  child.ready = new Promise((resolve) => {
    const on = () => { if (/^ready /m.test(child.log)) { child.stdout.off('data', on); resolve(); } };
    child.stdout.on('data', on);
    child.once('exit', resolve);
  });
  return child;
}

const skip = !serverBinDir() ? 'PostgreSQL server binaries are not installed' : jailProblem() ? `the sandbox does not work here: ${jailProblem()}` : false;

test(`queue proof: ${N} submissions, ${WORKERS} workers, ${KILLS} SIGKILLs, one PostgreSQL crash; every report once, identical to ./lab grade's`, { skip, timeout: 1_800_000 }, async () => {
  const t0 = performance.now();
  const secs = () => ((performance.now() - t0) / 1000).toFixed(1);
  const note = (m) => console.log(`# [${secs()} s] ${m}`);
  const build0 = buildId();
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'queue-proof-'));
  const secretFile = path.join(tmp, 'secret');
  fs.writeFileSync(secretFile, crypto.randomBytes(32), { mode: 0o600 });
  const subs = await corpus(N);
  for (const s of subs) fs.writeFileSync(path.join(tmp, `sub-${String(s.i).padStart(4, '0')}.py`), s.source);

  const cluster = new Cluster({ maxConnections: 150 });
  const children = new Set();
  let front;
  try {
    cluster.start();
    await cluster.createDatabase('grading');
    const url = cluster.url('grading');

    // The front, as a process of its own: ./lab serve --grading --queue (serve.mjs,
    // serving the page's build too, as a course runs it).
    front = spawn(process.execPath, [path.join(WWW, 'grader', 'serve.mjs'), '--grading', '--queue', url, '--port', '0', '--secret-file', secretFile],
      { stdio: ['ignore', 'pipe', 'pipe'] });
    children.add(front);
    let frontErr = '';
    front.stderr.on('data', (d) => { frontErr += d; });
    const base = await new Promise((resolve, reject) => {
      let out = '';
      front.stdout.on('data', (d) => { out += d; const m = /^(http:\/\/\S+)/m.exec(out); if (m) resolve(m[1]); });
      front.once('exit', (c) => reject(new Error(`the front exited ${c}: ${frontErr}`)));
    });

    // A trigger of the test's own counts every write of a report (insert with one, or update to one).
    const admin = new pg.Client({ connectionString: url });
    await admin.connect();
    await admin.query(`CREATE TABLE public.report_writes (id uuid NOT NULL, at timestamptz NOT NULL DEFAULT now());
      CREATE FUNCTION public.count_report() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        IF NEW.report IS NOT NULL AND (TG_OP = 'INSERT' OR OLD.report IS DISTINCT FROM NEW.report) THEN
          INSERT INTO public.report_writes (id) VALUES (NEW.id);
        END IF;
        RETURN NEW;
      END $$;
      CREATE TRIGGER count_report AFTER INSERT OR UPDATE ON grading.submissions FOR EACH ROW EXECUTE FUNCTION public.count_report();`);
    await admin.end();

    const workers = [];
    for (let n = 0; n < WORKERS; n++) { workers[n] = startWorkerProcess(url, n); children.add(workers[n]); }
    await Promise.all(workers.map((w) => w.ready));
    note(`front and ${WORKERS} workers up`);

    const post = async (s, extra = {}) => {
      for (let attempt = 0; ; attempt++) {
        try {
          const r = await fetch(`${base}grade`, {
            method: 'POST', headers: { 'content-type': 'application/json', 'idempotency-key': extra.key ?? `proof-${s.i}` },
            body: JSON.stringify({ lab: 'deliver-once', source: extra.source ?? s.source, ...(s.seed !== undefined ? { seed: s.seed } : {}) }),
          });
          const body = await r.json();
          if (r.status === 503 && attempt < 120) { await new Promise((res) => setTimeout(res, 500)); continue; } // the database restarting
          return { status: r.status, body };
        } catch (e) {
          if (attempt >= 120) throw e;
          await new Promise((res) => setTimeout(res, 500));
        }
      }
    };

    // The chaos: kills spread over the run by its progress, seeded; the crash at 40%.
    const r = rng(SEED * 7919);
    const killAt = Array.from({ length: KILLS }, () => 0.05 + r() * 0.8).sort((a, b) => a - b);
    const crashAt = 0.4;
    let crashed = false;
    let kills = 0;
    const ids = new Map(); // submission index -> id
    let reported = 0;
    const progress = () => reported / N;

    // Submissions go in one after another as fast as the front takes them (a deadline's
    // burst), the chaos runs beside.
    const submitting = (async () => {
      for (const s of subs) {
        const { status, body } = await post(s);
        assert.equal(status, 202, `submission ${s.i}: ${JSON.stringify(body)}`);
        ids.set(s.i, body.id);
      }
    })();

    let lastPoll = 0;
    const deadline = Date.now() + 1_500_000;
    const pg2 = new pg.Pool({ connectionString: url, max: 2 });
    pg2.on('error', () => {});
    while (true) {
      await new Promise((res) => setTimeout(res, 250));
      if (Date.now() - lastPoll > 1000) {
        lastPoll = Date.now();
        try { reported = Number((await pg2.query('SELECT count(*) FROM grading.submissions WHERE report IS NOT NULL')).rows[0].count); } catch { /* restarting */ }
      }
      while (kills < killAt.length && progress() >= killAt[kills]) {
        const n = Math.floor(r() * WORKERS);
        const victim = workers[n];
        // At a random moment within the next second: mid-grading more often than not.
        await new Promise((res) => setTimeout(res, Math.floor(r() * 1000)));
        victim.kill('SIGKILL');
        await new Promise((res) => victim.exitCode !== null || victim.signalCode !== null ? res() : victim.once('exit', res));
        children.delete(victim);
        kills += 1;
        note(`SIGKILLed worker ${n} (kill ${kills} of ${KILLS}) at ${reported}/${N} reported`);
        workers[n] = startWorkerProcess(url, n);
        children.add(workers[n]);
      }
      if (!crashed && progress() >= crashAt) {
        crashed = true;
        note(`crashing PostgreSQL (immediate stop) at ${reported}/${N} reported`);
        cluster.crash();
        await new Promise((res) => setTimeout(res, 2000));
        cluster.start();
        note('PostgreSQL started again (crash recovery done)');
      }
      if (reported >= N && ids.size === N) break;
      assert.ok(Date.now() < deadline, `not every submission was reported in time: ${reported}/${N}`);
    }
    await submitting;
    const queueS = secs();
    note(`every submission reported (queue part: ${queueS} s)`);

    // A repeated submission (its Idempotency-Key again) is not stored again; the same key
    // with another source is refused; a malformed or oversized one never reaches the table.
    const first = subs[0];
    const again = await post(first);
    assert.equal(again.status, 202);
    assert.equal(again.body.id, ids.get(first.i));
    assert.equal(again.body.repeated, true);
    const conflict = await post(first, { source: 'x = 2\n' });
    assert.equal(conflict.status, 409);
    const big = await fetch(`${base}grade`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ lab: 'deliver-once', source: 'x'.repeat(70_000) }) });
    assert.equal(big.status, 413);
    const bad = await fetch(`${base}grade`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"lab": "deliver-once"' });
    assert.equal(bad.status, 400);
    const unknown = await fetch(`${base}grade/00000000-0000-4000-8000-000000000000`);
    assert.equal(unknown.status, 404);
    const metrics = await (await fetch(`${base}metrics`)).text();
    assert.match(metrics, /^grading_queue_depth 0$/m);
    assert.match(metrics, /^grading_latency_p95_seconds \d/m);
    note(`metrics: ${metrics.split('\n').filter((l) => /^grading_(graded_per_second|latency_p\d+_seconds|leases_lost_total|workers_active|submissions_total) /.test(l)).join(', ')}`);

    // The database's record.
    const c = new pg.Client({ connectionString: url });
    await c.connect();
    const rows = (await c.query(`SELECT s.id, s.report, s.hidden_seed, s.cached, s.attempts, s.leases_lost, s.graded_by,
        (SELECT count(*) FROM public.report_writes w WHERE w.id = s.id)::int AS writes FROM grading.submissions s`)).rows;
    await c.end();
    await pg2.end();
    assert.equal(rows.length, N, 'one row per submission: no repeat stored, none lost');
    const byId = new Map(rows.map((x) => [x.id, x]));
    for (const [i, id] of ids) {
      const row = byId.get(id);
      assert.ok(row, `submission ${i} is stored`);
      assert.equal(row.writes, 1, `submission ${i}: its report was written ${row.writes} times`);
      // The front answers it.
      const g = await fetch(`${base}grade/${id}`);
      assert.equal(g.status, 200);
      assert.equal(await g.text(), row.report);
    }
    const retaken = rows.filter((x) => x.attempts > 1).length;
    const lost = rows.reduce((a, x) => a + x.leases_lost, 0);
    note(`${rows.filter((x) => x.cached).length} answered from the cache, ${retaken} taken more than once, ${lost} leases taken back, `
      + `graded by ${new Set(rows.map((x) => x.graded_by)).size} worker processes`);
    assert.ok(kills === KILLS && crashed, 'the chaos ran');

    // Stop the workers (SIGTERM: graceful), then the front. A worker restarted after the
    // last kill may still be starting; it stops as well (start.test.mjs), but one still
    // loading its modules has no handler yet: each is stopped once it said it is ready.
    await Promise.all(workers.map((w) => w.ready));
    for (const w of workers) w.kill('SIGTERM');
    await Promise.all(workers.map((w) => new Promise((res) => (w.exitCode !== null ? res() : w.once('exit', res)))));
    for (const w of workers) assert.equal(w.exitCode, 0, `a worker's SIGTERM exit: ${w.log.slice(-500)}`);
    front.kill('SIGTERM');
    await new Promise((res) => (front.exitCode !== null ? res() : front.once('exit', res)));
    children.clear();

    // ./lab grade over the same files, with the same secret (so the same hidden seeds) and seeds.
    const tc = performance.now();
    const files = (pred) => subs.filter(pred).map((s) => `sub-${String(s.i).padStart(4, '0')}.py`);
    const cli = new Map([
      ...cliReports(tmp, files((s) => s.seed === undefined), { secretFile }),
      ...cliReports(tmp, files((s) => s.seed !== undefined), { seed: 7, secretFile }),
    ]);
    note(`./lab grade over the same ${N} files: ${((performance.now() - tc) / 1000).toFixed(1)} s`);
    const differ = [];
    let clockStops = 0;
    let poisoned = 0;
    // ./lab grade's JSON is the staff's (each hidden test's message); the queue answers
    // learners: a hidden test is its name, kind, status and points.
    const learnerView = (j) => ({
      ...j,
      tests: j.tests.map((t) => (t.kind === 'hidden'
        ? Object.fromEntries(Object.entries(t).filter(([k]) => ['name', 'kind', 'status', 'points'].includes(k)))
        : t)),
    });
    for (const s of subs) {
      const name = `sub-${String(s.i).padStart(4, '0')}.py`;
      const row = byId.get(ids.get(s.i));
      const got = JSON.parse(row.report);
      // A submission whose worker died under it POISON.kills times is reported "could
      // not be graded" (issue 37, item 5), whoever killed the worker: here the chaos's
      // SIGKILLs can land on one slow submission that often. Counted.
      if (row.leases_lost >= POISON.kills) {
        assert.equal(got.status, 'error', `${name}: lost ${row.leases_lost} leases`);
        assert.match(got.message, /could not be graded/, `${name}: lost ${row.leases_lost} leases`);
        poisoned += 1;
        continue;
      }
      const want = learnerView(cli.get(name));
      const hs = row.hidden_seed === null ? null : Number(row.hidden_seed);
      assert.equal(want.hidden_seed ?? null, hs, `${name}: the hidden seed`);
      // A run that never ends is stopped by its CPU limit or, when its machine is too
      // busy to give it that CPU, by the clock (pool.mjs WALL_FACTOR): the same verdict
      // (timeout), said two ways. Counted, and the only difference allowed.
      const norm = (j, replay) => ({
        ...j, file: null, duration_ms: null, hidden_seed: undefined, replay,
        tests: j.tests.map((t) => (t.status === 'timeout' && t.message && STOPPED.test(t.message) ? { ...t, message: 'Stopped: <limit>' } : t)),
      });
      if (JSON.stringify(got.tests) !== JSON.stringify(norm(got).tests) || JSON.stringify(want.tests) !== JSON.stringify(norm(want).tests)) {
        if (JSON.stringify(got.tests.map((t) => t.message)) !== JSON.stringify(want.tests.map((t) => t.message))) clockStops += 1;
      }
      const a = JSON.stringify(norm(got, got.replay === undefined ? undefined : staffReplay(got.replay, hs, 'each')));
      const b = JSON.stringify(norm(want, want.replay));
      if (a !== b) {
        let k = 0;
        while (a[k] === b[k]) k++;
        differ.push(`${name} (${s.kind}), from character ${k}:\n  queue: ...${a.slice(Math.max(0, k - 200), k + 300)}\n  cli:   ...${b.slice(Math.max(0, k - 200), k + 300)}`);
      }
    }
    assert.deepEqual(differ, [], `reports that differ from ./lab grade's:\n${differ.join('\n')}`);
    assert.equal(buildId(), build0, 'www/pkg was rebuilt during the test: the reports compared come from two builds');
    assert.ok(poisoned <= KILLS / POISON.kills, `${poisoned} submissions poisoned by ${KILLS} kills`);
    note(`all ${N - poisoned} reports of submissions that kept their worker identical to ./lab grade's, learner's view (duration aside; ${clockStops} stopped by the other clock of the two; ${poisoned} reported could not be graded after ${POISON.kills} kills); total ${secs()} s`);
  } finally {
    for (const ch of children) ch.kill('SIGKILL');
    front?.kill('SIGKILL');
    await new Promise((res) => setTimeout(res, 300));
    cluster.close();
    fs.rmSync(tmp, { recursive: true, force: true });
  }
});
