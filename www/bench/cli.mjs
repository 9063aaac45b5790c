// The grading CLI's benchmark: 50 mixed submissions (correct, wrong, mutants,
// errors, prints), graded through the pool (a fresh sandbox per submission, the
// grader outside it: everything the CLI does) with --jobs 1 and --jobs 2, beside
// the anchor: a CPython + pytest grader of lab 1, one process per file, on the
// same files. Prints submissions per second (and per core), latency p50/p95 (from
// hand-over to report), peak memory, and the CPU of one submission split into the
// sandbox's start (a fresh Node, Pyodide restored), its run, and the coordinator.
// Run: node bench/cli.mjs [--n 50]   (./lab bench runs it after www/bench/page.mjs)
import fs from 'node:fs';
import os from 'node:os';
import { benchMix } from './mix.mjs';
import { createGradingPool } from '../grader/pool.mjs';
import { loadGrader } from '../host/node_host.mjs';

const nAt = process.argv.indexOf('--n');
const N = nAt > 0 ? Number(process.argv[nAt + 1]) : 50;

const pkg = await loadGrader();
const lab = JSON.parse(new pkg.Grader().lab('deliver-once'));
const kinds = benchMix(lab);
const subs = Array.from({ length: N }, (_, i) => kinds[i % kinds.length]);

function treeRssMb(pid) {
  let total = 0;
  try {
    total = Number(/VmRSS:\s+(\d+)/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'))[1]) / 1024;
    for (const c of fs.readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean)) total += treeRssMb(Number(c));
  } catch { /* gone */ }
  return total;
}

const pct = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
};

console.log(`grading CLI bench: ${N} mixed submissions (${[...new Set(kinds.map((k) => k[0]))].join(', ')}), ${os.cpus().length} cores`);
for (const jobs of [1, 2]) {
  let peak = 0;
  const sampler = setInterval(() => { peak = Math.max(peak, treeRssMb(process.pid)); }, 50);
  let t = performance.now();
  const pool = createGradingPool({ jobs });
  await pool.ready;
  const startMs = performance.now() - t;
  t = performance.now();
  const cpu0 = process.cpuUsage();
  const spawner0 = pool.spawnerCpuMs();
  const lines = await Promise.all(subs.map(([, source]) => pool.grade({ source })));
  const wall = (performance.now() - t) / 1000;
  const cpu = process.cpuUsage(cpu0);
  // The spawner's CPU and the fork server's zygote's (its own start included) are the coordinator's share.
  const coordCpu = (cpu.user + cpu.system) / 1e6 + (pool.spawnerCpuMs() - spawner0 + pool.forkServerCpuMs()) / 1000;
  clearInterval(sampler);
  await pool.close();
  const lat = lines.filter((l) => l.duration_ms > 0).map((l) => l.duration_ms);
  const counts = lines.reduce((m, l) => ({ ...m, [l.status]: (m[l.status] || 0) + 1 }), {});
  const st = pool.stats;
  const perSub = (ms, n) => (n ? (ms / n).toFixed(0) : '?');
  console.log(`--jobs ${jobs}: ${(N / wall).toFixed(1)} submissions/s (${(N / wall / jobs).toFixed(1)} per core), `
    + `${wall.toFixed(1)} s for ${N}; latency p50 ${pct(lat, 50)} ms, p95 ${pct(lat, 95)} ms; `
    + `startup ${(startMs / 1000).toFixed(1)} s; peak memory ${peak.toFixed(0)} MB (coordinator + sandboxes); `
    + `sandboxes started ${st.spawned} (${st.forked} forked); ${JSON.stringify(counts)}`);
  console.log(`  CPU per submission: sandbox start ${perSub(st.bootCpuMs, st.booted)} ms (spawned: a fresh Node, Pyodide restored; forked: a copy of the zygote), `
    + `sandbox run ${perSub(st.runCpuMs, st.booted)} ms, coordinator ${perSub(coordCpu * 1000, N)} ms (grader, worlds, pipes; `
    + `pre-checked submissions need no sandbox: ${N - st.booted} of ${N})`);
}

// The grading process's memory per slot (issue 38): a courier submission whose
// query needs more than the store allows (grader/fixtures/query_memory.mjs), one per
// slot at once. The coordinator's own RSS (its grading threads and their stores; the
// sandboxes are other processes), its peak against its level once the pool was ready.
{
  const { QUERY_MEMORY_BOMB } = await import('../grader/fixtures/query_memory.mjs');
  const { STORE_MEMORY_MB, THREAD_HEAP_MB } = await import('../grader/pool.mjs');
  const ownRssMb = () => Number(/VmRSS:\s+(\d+)/.exec(fs.readFileSync('/proc/self/status', 'utf8'))[1]) / 1024;
  for (const jobs of [1, 2]) {
    const pool = createGradingPool({ jobs });
    await pool.ready;
    const base = ownRssMb();
    let peak = base;
    const sampler = setInterval(() => { peak = Math.max(peak, ownRssMb()); }, 50);
    const lines = await Promise.all(Array.from({ length: jobs }, () => pool.grade({ lab: 'courier', source: QUERY_MEMORY_BOMB })));
    clearInterval(sampler);
    await pool.close();
    const refused = lines.filter((l) => l.tests.some((t) => t.message?.includes('your query used more than'))).length;
    console.log(`grading process memory, --jobs ${jobs}, a query past the courier store's memory in each slot: `
      + `peak ${peak.toFixed(0)} MB, ${((peak - base) / jobs).toFixed(0)} MB per slot over the ready pool's ${base.toFixed(0)} MB `
      + `(walls per slot: the store's interpreter ${STORE_MEMORY_MB} MB, the thread's JS heap ${THREAD_HEAP_MB} MB); `
      + `refused by name: ${refused} of ${jobs}`);
  }
}

// The anchor (bench/anchor/README.md): the same submissions graded by CPython + pytest,
// one process per file, in the project venv that ./lab bench makes.
{
  const { anchorAvailable, benchPytest } = await import('./anchor.mjs');
  if (!anchorAvailable()) {
    console.log('pytest anchor skipped: .venv/bin/python is missing (./lab bench installs it)');
  } else {
    for (const jobs of [1, 2]) {
      const r = await benchPytest(subs.map(([, source]) => source), { jobs });
      const counts = r.results.reduce((m, x) => ({ ...m, [x.status]: (m[x.status] || 0) + 1 }), {});
      console.log(`pytest anchor (CPython + pytest, one process per file) --jobs ${jobs}: `
        + `${r.perS.toFixed(1)} submissions/s (${(r.perS / jobs).toFixed(1)} per core), `
        + `${r.wallS.toFixed(1)} s for ${N}; CPU ${r.cpuS === null ? '?' : r.cpuS.toFixed(1)} s; ${JSON.stringify(counts)}`);
    }
  }
}
