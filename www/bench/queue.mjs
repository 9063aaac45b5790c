// The grading queue's figure (issue 31): submissions per second through the queue
// with one worker and with two, beside the anchor measured in the same run: the
// in-process pool (./lab grade's, www/grader/pool.mjs) with --jobs 1 and --jobs 2 on the
// same files, so the ratio is the queue's overhead (a front storing each submission
// in PostgreSQL, workers taking, leasing and reporting them in transactions).
//
// The files: the grading CLI bench's mix (www/bench/cli.mjs: correct, starter, mutants,
// prints, raises, a syntax error, import js), each made distinct by a comment (so
// neither the front's cache nor a worker's answers one from another's report), with
// the hidden inputs drawn from one secret for the queue and the anchor alike
// (`./lab grade --secret-file F --jobs 1` grades the same). The queue: a throwaway
// PostgreSQL cluster (test/pg_cluster.mjs: fsync and synchronous commit on), a database
// per pass, the front in this process (startFront, createQueueFront's HTTP server),
// workers as processes (`node www/grader/queue/worker.mjs --queue URL --jobs 1`, defaults
// otherwise), ready before the first POST. The files are POSTed one after another
// as fast as the front takes them (a deadline's burst); a pass's wall runs from the
// first POST to the last report stored. Each line says the load average (1 min) and
// how busy the machine's cores were during its pass: other work on the machine moves
// these figures, the anchor beside them shows by how much.
//
// The flood (issue 37): one client POSTs F files (--flood, default 200) at once, then a
// second client one file; one worker (--jobs 1) grades. The figure is how long the
// second client's file waited, stored to reported, in seconds and in jobs' time (the
// median grading time of the pass's reports), with the worker's fair claim (the
// default: the client served least recently first) and, beside it, FIFO (--claim
// fifo, the oldest first). The clients are two loopback addresses (127.0.0.1 and
// 127.0.0.2): without tokens the front's client is the address. A pass ends once the
// second client's file is reported (the fair pass does not wait for the flood).
//
// Run: node www/bench/queue.mjs [--n 40] [--flood 200] [--flood-only]   (./lab bench runs it after www/bench/cli.mjs)
import { spawn } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { Cluster, serverBinDir } from '../grader/queue/test/pg_cluster.mjs';
import { startFront } from '../grader/queue/front.mjs';
import { benchMix } from './mix.mjs';
import { createGradingPool } from '../grader/pool.mjs';
import { hiddenSeedOf } from '../grader/hidden.mjs';
import { jailProblem } from '../grader/jail.mjs';
import { jsonText } from '../grader/output.mjs';
import { loadGrader } from '../host/node_host.mjs';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const nAt = process.argv.indexOf('--n');
const N = nAt > 0 ? Number(process.argv[nAt + 1]) : 40;
const floodAt = process.argv.indexOf('--flood');
const FLOOD = floodAt > 0 ? Number(process.argv[floodAt + 1]) : 200;
const FLOOD_ONLY = process.argv.includes('--flood-only');
const LAB = 'deliver-once';

const skip = !serverBinDir() ? "PostgreSQL's server binaries are not installed (./lab bench installs them)"
  : jailProblem() ? `the sandbox does not work here: ${jailProblem()}` : null;
if (skip) {
  console.log(`grading queue bench skipped: ${skip}`);
  process.exit(0);
}

// The mix of www/bench/cli.mjs (bench/mix.mjs: compare the two benches' lines).
const registry = new (await loadGrader()).Grader();
const lab = JSON.parse(registry.lab(LAB));
const kinds = benchMix(lab);
const sources = Array.from({ length: N }, (_, i) => {
  const s = kinds[i % kinds.length][1];
  return `${s}${s.endsWith('\n') ? '' : '\n'}# submission ${i}\n`;
});

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'queue-bench-'));
const secretFile = path.join(tmp, 'secret');
const secret = crypto.randomBytes(32);
fs.writeFileSync(secretFile, secret, { mode: 0o600 });
const hiddenOf = (source) => ({ seed: lab.hidden_variants ? hiddenSeedOf(secret, LAB, source) : null, statuses: 'each' });

// The machine while a pass runs: the load average (1 min) at its start, its end and
// its highest, and the share of all cores busy (any process's, /proc/stat).
const loadavg1 = () => Number(fs.readFileSync('/proc/loadavg', 'utf8').split(' ')[0]);
function cpuTimes() {
  const f = fs.readFileSync('/proc/stat', 'utf8').split('\n')[0].trim().split(/\s+/).slice(1).map(Number);
  const idle = f[3] + (f[4] || 0);
  return { idle, total: f.slice(0, 8).reduce((a, b) => a + b, 0) };
}
function watchMachine() {
  const l0 = loadavg1();
  const c0 = cpuTimes();
  let max = l0;
  const timer = setInterval(() => { max = Math.max(max, loadavg1()); }, 1000);
  return () => {
    clearInterval(timer);
    const l1 = loadavg1();
    const c1 = cpuTimes();
    const busy = 1 - (c1.idle - c0.idle) / Math.max(1, c1.total - c0.total);
    return `load average ${l0.toFixed(2)} -> ${l1.toFixed(2)} (max ${Math.max(max, l1).toFixed(2)}), cores ${(busy * 100).toFixed(0)}% busy`;
  };
}

// CPU time (ms) from /proc. A sandbox killed after its submission is reaped outside
// the pool's tree (bubblewrap's inner process), so a tree's sum misses it: the figure
// compared is the CPU outside the sandboxes, the same sandboxes in both: the pool's
// process and its spawner (its direct child) for the anchor and each worker; for the
// queue also the front (this process, with the bench's own client) and PostgreSQL (the
// postmaster and its backends: each reaped by it, so its tree's sum holds them).
const TICK_MS = 10; // USER_HZ, 100 on Linux
function statOf(pid) {
  try {
    const f = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    return f.slice(f.lastIndexOf(')') + 2).split(' ').map(Number); // from field 3 (state) on
  } catch { return null; }
}
function childrenOf(pid) {
  const out = [];
  try {
    for (const t of fs.readdirSync(`/proc/${pid}/task`)) {
      try { out.push(...fs.readFileSync(`/proc/${pid}/task/${t}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number)); } catch { /* gone */ }
    }
  } catch { /* gone */ }
  return out;
}
const ownMs = (pid) => { const x = statOf(pid); return x ? (x[11] + x[12]) * TICK_MS : 0; };
/** A pool's process and its direct children (the spawner), without the sandboxes. */
const coordMs = (pid) => ownMs(pid) + childrenOf(pid).reduce((a, c) => a + ownMs(c), 0);
function treeCpuMs(pid) {
  const x = statOf(pid);
  return x ? (x[11] + x[12] + x[13] + x[14]) * TICK_MS + childrenOf(pid).reduce((a, c) => a + treeCpuMs(c), 0) : 0;
}

const strip = (line) => { const j = JSON.parse(line); delete j.duration_ms; return JSON.stringify(j); };
const countOf = (lines) => lines.reduce((m, l) => { const s = JSON.parse(l).status; return { ...m, [s]: (m[s] || 0) + 1 }; }, {});
const pct = (xs, p) => { const s = [...xs].sort((a, b) => a - b); return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]; };

/** The anchor: the in-process pool, the same files and hidden inputs, `jobs` at once. */
async function anchor(jobs) {
  const pool = createGradingPool({ jobs });
  await pool.ready;
  const done = watchMachine();
  const cpu0 = coordMs(process.pid);
  const t = performance.now();
  const lines = await Promise.all(sources.map((source) => pool.grade({ lab: LAB, source, seed: lab.default_seed, format: 'json', hidden: hiddenOf(source) })
    .then(jsonText)));
  const wall = (performance.now() - t) / 1000;
  const cpuMs = (coordMs(process.pid) - cpu0) / N;
  const machine = done();
  await pool.close();
  return { wall, perS: N / wall, lines, machine, cpuMs };
}

function startWorker(url, args = []) {
  const child = spawn(process.execPath, [path.join(HERE, '..', 'grader', 'queue', 'worker.mjs'), '--queue', url, '--jobs', '1', ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  child.log = '';
  child.stdout.on('data', (d) => { child.log += d; });
  child.stderr.on('data', (d) => { child.log += d; });
  child.ready = new Promise((resolve, reject) => {
    const on = () => { if (/^ready /m.test(child.log)) { child.stdout.off('data', on); resolve(); } };
    child.stdout.on('data', on);
    child.once('exit', (code, sig) => reject(new Error(`a worker exited (${code ?? sig}) before it was ready: ${child.log.slice(-1500)}`)));
  });
  return child;
}
const exited = (ch) => new Promise((res) => (ch.exitCode !== null || ch.signalCode !== null ? res() : ch.once('exit', res)));

const children = new Set();
/** The queue with `workers` worker processes, in a database of its own. */
async function queuePass(cluster, workers) {
  const db = `bench_${workers}w`;
  await cluster.createDatabase(db);
  const url = cluster.url(db);
  const { server, front, url: base } = await startFront({ connectionString: url, port: 0, secretFile, log: (m) => console.error(`queue bench front: ${m}`) });
  const procs = [];
  const c = new pg.Client({ connectionString: url });
  try {
    const tw = performance.now();
    for (let k = 0; k < workers; k++) { const w = startWorker(url); procs.push(w); children.add(w); }
    await Promise.all(procs.map((w) => w.ready));
    const readyS = (performance.now() - tw) / 1000;
    await c.connect();
    const done = watchMachine();
    const postmaster = Number(fs.readFileSync(path.join(cluster.data, 'postmaster.pid'), 'utf8').split('\n')[0]);
    const workersMs = () => procs.reduce((a, w) => a + coordMs(w.pid), 0);
    const cpu0 = { workers: workersMs(), front: ownMs(process.pid), pg: treeCpuMs(postmaster) };
    const t0 = Date.now();
    for (const source of sources) {
      const r = await fetch(`${base}grade`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ lab: LAB, source }) });
      const body = await r.json();
      if (r.status !== 202 || body.status !== 'queued') throw new Error(`POST /grade answered ${r.status} ${JSON.stringify(body)}`);
    }
    const postedS = (Date.now() - t0) / 1000;
    const deadline = Date.now() + 600_000;
    for (;;) {
      const { rows: [r] } = await c.query('SELECT count(*)::int AS n FROM grading.submissions WHERE report IS NOT NULL');
      if (r.n >= N) break;
      if (Date.now() > deadline) throw new Error(`only ${r.n} of ${N} reported after 10 min`);
      await new Promise((res) => setTimeout(res, 100));
    }
    const cpu1 = { workers: workersMs(), front: ownMs(process.pid), pg: treeCpuMs(postmaster) };
    const cpu = { front: (cpu1.front - cpu0.front) / N, pg: (cpu1.pg - cpu0.pg) / N, workers: (cpu1.workers - cpu0.workers) / N };
    cpu.ms = cpu.front + cpu.pg + cpu.workers;
    const machine = done();
    const { rows } = await c.query(`SELECT source_json, report, cached, graded_by, extract(epoch FROM reported_at) * 1000 AS at,
      extract(epoch FROM reported_at - created_at) AS lat FROM grading.submissions`);
    const wall = (Math.max(...rows.map((r) => Number(r.at))) - t0) / 1000;
    const bySource = new Map(rows.map((r) => [JSON.parse(r.source_json), r.report]));
    return {
      wall, perS: N / wall, postedS, readyS, machine, cpu, lines: sources.map((s) => bySource.get(s)),
      cached: rows.filter((r) => r.cached || r.graded_by === 'cache').length, workersSeen: new Set(rows.map((r) => r.graded_by)).size,
      p50: pct(rows.map((r) => Number(r.lat)), 50), p95: pct(rows.map((r) => Number(r.lat)), 95),
    };
  } finally {
    await c.end().catch(() => {});
    for (const w of procs) w.kill('SIGTERM');
    await Promise.race([Promise.all(procs.map(exited)), new Promise((res) => setTimeout(res, 40_000))]);
    for (const w of procs) { if (w.exitCode === null && w.signalCode === null) w.kill('SIGKILL'); children.delete(w); }
    server.close();
    server.closeAllConnections();
    await front.close();
  }
}

/** POST /grade from the loopback address `from` (a client of its own to the front). */
function postFrom(base, from, source) {
  return new Promise((resolve, reject) => {
    const body = JSON.stringify({ lab: LAB, source });
    const req = http.request(new URL('grade', base), { method: 'POST', localAddress: from, agent: false,
      headers: { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body) } }, (res) => {
      let text = '';
      res.on('data', (d) => { text += d; });
      res.on('end', () => (res.statusCode === 202 ? resolve(JSON.parse(text).id) : reject(new Error(`POST /grade answered ${res.statusCode} ${text}`))));
    });
    req.on('error', reject);
    req.end(body);
  });
}

/** The flood: FLOOD files of one client, then one of another; one worker claiming `claim`. */
async function floodPass(cluster, claim) {
  const db = `bench_flood_${claim}`;
  await cluster.createDatabase(db);
  const url = cluster.url(db);
  const { server, front, url: base } = await startFront({ connectionString: url, port: 0, secretFile, log: (m) => console.error(`queue bench front: ${m}`) });
  const w = startWorker(url, ['--claim', claim, '--grace', '0']);
  children.add(w);
  const c = new pg.Client({ connectionString: url });
  try {
    await w.ready;
    await c.connect();
    const done = watchMachine();
    for (let i = 0; i < FLOOD; i++) {
      const s = sources[i % sources.length];
      await postFrom(base, '127.0.0.1', `${s}# flood ${i}\n`);
    }
    const single = await postFrom(base, '127.0.0.2', `${sources[0]}# the other client's\n`);
    const deadline = Date.now() + 1_800_000;
    let row;
    for (;;) {
      ({ rows: [row] } = await c.query(`SELECT extract(epoch FROM reported_at - created_at) AS waited FROM grading.submissions WHERE id = $1 AND report IS NOT NULL`, [single]));
      if (row) break;
      if (Date.now() > deadline) throw new Error('the single submission was not reported in 30 min');
      await new Promise((res) => setTimeout(res, 100));
    }
    const { rows: [j] } = await c.query(`SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY grade_ms) / 1000 AS job_s, count(*)::int AS n
      FROM grading.submissions WHERE report IS NOT NULL AND graded_by <> 'cache'`);
    return { waited: Number(row.waited), jobS: Number(j.job_s), before: j.n - 1, machine: done() };
  } finally {
    await c.end().catch(() => {});
    w.kill('SIGTERM');
    await Promise.race([exited(w), new Promise((res) => setTimeout(res, 40_000))]);
    if (w.exitCode === null && w.signalCode === null) w.kill('SIGKILL');
    children.delete(w);
    server.close();
    server.closeAllConnections();
    await front.close();
  }
}

const floodLine = (name, f) => `${name}: the other client's one submission waited ${f.waited.toFixed(1)} s, stored to reported, ${(f.waited / f.jobS).toFixed(1)} jobs' time with its own `
  + `(median job ${f.jobS.toFixed(2)} s), behind ${FLOOD} of one client's; ${f.before} graded before it was reported; ${f.machine}`;

/** The flood's two lines: the fair claim, and FIFO beside it. */
async function floodLines(cluster) {
  console.log(floodLine('flood, fair claim (the default)', await floodPass(cluster, 'fair')));
  console.log(floodLine('flood, FIFO (--claim fifo)     ', await floodPass(cluster, 'fifo')));
}

if (FLOOD_ONLY) {
  const cluster = new Cluster();
  try {
    cluster.start();
    console.log(`grading queue flood bench: ${FLOOD} submissions of one client, then one of another; one worker --jobs 1`);
    await floodLines(cluster);
  } finally {
    for (const ch of children) ch.kill('SIGKILL');
    cluster.close();
    fs.rmSync(tmp, { recursive: true, force: true });
  }
  process.exit(0);
}

console.log(`grading queue bench: ${N} mixed submissions (the grading CLI bench's mix, each distinct), lab 1, ${os.cpus().length} cores; `
  + 'PostgreSQL 15 throwaway cluster (fsync on), the front in this process, workers `node www/grader/queue/worker.mjs --queue URL --jobs 1`');
const cluster = new Cluster();
const tAll = performance.now();
// Interrupted: no worker and no cluster (pg_ctl starts it detached) left behind.
for (const sig of ['SIGINT', 'SIGTERM']) {
  process.once(sig, () => {
    for (const ch of children) ch.kill('SIGKILL');
    try { cluster.close(); } catch { /* as far as it goes */ }
    fs.rmSync(tmp, { recursive: true, force: true });
    process.exit(130);
  });
}
try {
  cluster.start();
  const a1 = await anchor(1);
  const q1 = await queuePass(cluster, 1);
  const q2 = await queuePass(cluster, 2);
  const a2 = await anchor(2);
  const same = (q) => q.lines.filter((l, i) => l !== undefined && strip(l) === strip(a1.lines[i])).length;
  const aLine = (name, a) => `${name}: ${a.perS.toFixed(1)} submissions/s, ${a.wall.toFixed(1)} s for ${N}; CPU per submission outside the sandboxes ${a.cpuMs.toFixed(0)} ms (the pool and its spawner); `
    + `${a.machine}; ${JSON.stringify(countOf(a.lines))}`;
  const qLine = (name, q, a) => `${name}: ${q.perS.toFixed(1)} submissions/s (${(q.perS / a.perS).toFixed(2)} of the anchor's), `
    + `${q.wall.toFixed(1)} s for ${N} from the first POST to the last report (all POSTed in ${q.postedS.toFixed(1)} s); `
    + `stored to reported p50 ${q.p50.toFixed(1)} s, p95 ${q.p95.toFixed(1)} s; CPU per submission outside the sandboxes ${q.cpu.ms.toFixed(0)} ms (${(q.cpu.ms / a.cpuMs).toFixed(2)} times the anchor's: `
    + `workers ${q.cpu.workers.toFixed(0)}, front ${q.cpu.front.toFixed(0)}, PostgreSQL ${q.cpu.pg.toFixed(0)}); workers ready in ${q.readyS.toFixed(1)} s; ${q.machine}; `
    + `${same(q)}/${N} reports identical to the anchor's (duration aside), ${q.cached} from the cache`;
  console.log(aLine('anchor, the in-process pool --jobs 1 (./lab grade --jobs 1)', a1));
  console.log(qLine('queue, 1 worker  (--jobs 1)', q1, a1));
  console.log(qLine('queue, 2 workers (--jobs 1 each)', q2, a2));
  console.log(aLine('anchor, the in-process pool --jobs 2 (./lab grade --jobs 2)', a2));
  console.log(`the queue's rate over the pool's: 1 worker ${(q1.perS / a1.perS).toFixed(2)} of --jobs 1, 2 workers ${(q2.perS / a2.perS).toFixed(2)} of --jobs 2; `
    + `its CPU per submission outside the sandboxes ${(q1.cpu.ms / a1.cpuMs).toFixed(2)} and ${(q2.cpu.ms / a2.cpuMs).toFixed(2)} times the pool's; `
    + `two workers do ${(q2.perS / q1.perS).toFixed(2)} times one's rate (the pool: --jobs 2 ${(a2.perS / a1.perS).toFixed(2)} times --jobs 1); `
    + `${((performance.now() - tAll) / 1000).toFixed(0)} s in all`);
  await floodLines(cluster);
} finally {
  for (const ch of children) ch.kill('SIGKILL');
  cluster.close();
  fs.rmSync(tmp, { recursive: true, force: true });
}
