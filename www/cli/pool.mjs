// The grading pool: the trusted side. It runs no learner code. It keeps its own
// WASM grader, starts `jobs` sandbox processes (sandbox.mjs), hands each one a
// submission at a time, enforces the time limit (SIGKILL, then a fresh sandbox),
// watches each sandbox's memory, and replays each sandbox's transcript against
// its own grader: the report it returns is that replay's, never the sandbox's.
//
//   const pool = createGradingPool({ jobs: 2 });
//   await pool.ready;
//   const line = await pool.grade({ lab: 'deliver-once', source, seed, format: 'json' });
//   await pool.close();
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { WORLD_OPS, COURIER_OPS } from '../src/engine.mjs';

const WWW = fileURLToPath(new URL('../', import.meta.url));
const SANDBOX = fileURLToPath(new URL('sandbox.mjs', import.meta.url));
const RECYCLE_AFTER = 50;          // submissions per sandbox process
const GRACE_S = 1.5;               // after the limit, before SIGKILL (covers the interpreter restore)
const OUTPUT_CAP = 4000;           // characters of one test's output a transcript may carry
export const FORMATS = ['json', 'text', 'exercism', 'gradescope', 'gradescope-hidden'];

let graderPkg = null;
async function loadGrader() {
  if (!graderPkg) {
    const wasm = `${WWW}pkg/delivery_lab_bg.wasm`;
    if (!fs.existsSync(wasm)) throw new Error(`${wasm} is missing: run ./lab build`);
    graderPkg = await import(new URL('pkg/delivery_lab.js', `file://${WWW}`).href);
    await graderPkg.default({ module_or_path: fs.readFileSync(wasm) });
  }
  return graderPkg;
}

/** Whether `unshare --net` works here (root, or user namespaces allowed). */
let unshareOk;
export function networkIsolation() {
  if (unshareOk === undefined) {
    const r = spawnSync('unshare', ['--net', '--pid', '--fork', '--kill-child', '--', 'true'], { stdio: 'ignore' });
    unshareOk = r.status === 0;
  }
  return unshareOk;
}

/** The sandbox's command line, for another script (the tests' probe). */
export function sandboxSpawnArgs(script) {
  return sandboxCommand(512, script, script);
}

function sandboxCommand(memoryMb, snapshotFile, script = SANDBOX, sharedCores = false) {
  const node = [
    '--experimental-permission',
    `--allow-fs-read=${snapshotFile}`,
    `--allow-fs-read=${WWW}cli/sandbox.mjs`,
    `--allow-fs-read=${WWW}cli/wasm_memcap.mjs`,
    `--allow-fs-read=${WWW}src/engine.mjs`,
    `--allow-fs-read=${WWW}src/bridge.py`,
    `--allow-fs-read=${WWW}pkg/*`,
    `--allow-fs-read=${WWW}node_modules/pyodide/*`,
    '--disallow-code-generation-from-strings',
    '--max-old-space-size=768',
    '--no-warnings',
    // V8's parallel GC lets a lone sandbox use an idle core; once there is a
    // sandbox per core its helper threads only take CPU from the other one
    // (measured: --jobs 2 went from 6.9 to 8.3 submissions/s on 2 cores).
    ...(sharedCores ? ['--single-threaded-gc'] : []),
    script, String(memoryMb), snapshotFile,
  ];
  if (!networkIsolation()) return { cmd: process.execPath, args: node, isolated: false };
  const drop = process.getuid && process.getuid() === 0
    ? ['/usr/bin/setpriv', '--reuid=65534', '--regid=65534', '--clear-groups', '--no-new-privs']
    : [];
  return {
    cmd: 'unshare',
    args: ['--net', '--pid', '--fork', '--kill-child', '--', ...drop, process.execPath, ...node],
    isolated: true,
  };
}

function rssMb(pid) {
  try {
    const m = /VmRSS:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) / 1024 : 0;
  } catch {
    return 0;
  }
}

/** The process tree under `pid` (unshare, then node), for the memory watch. */
function treeRss(pid) {
  let total = rssMb(pid);
  try {
    for (const child of fs.readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean)) {
      total += treeRss(Number(child));
    }
  } catch { /* gone */ }
  return total;
}

/** Every process under `pid`, deepest first. */
function descendants(pid) {
  let out = [];
  try {
    for (const child of fs.readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean)) {
      out = out.concat(descendants(Number(child)), [Number(child)]);
    }
  } catch { /* gone */ }
  return out;
}

/**
 * SIGKILLs a sandbox: the node process itself, then unshare. (unshare's
 * --kill-child cannot be relied on: setpriv's change of user clears the
 * parent-death signal, so the sandbox would outlive unshare.)
 */
function killSandbox(child) {
  if (!child || child.exitCode !== null || child.signalCode !== null) return;
  for (const pid of descendants(child.pid)) {
    try { process.kill(pid, 'SIGKILL'); } catch { /* gone */ }
  }
  child.kill('SIGKILL');
}

// Sandboxes never outlive the coordinator, however it ends.
const live = new Set();
process.on('exit', () => { for (const c of live) killSandbox(c); });

const INTERFERED = 'The submission interfered with the grader, so it could not be graded';

/**
 * A JS solution for the coordinator's grader that answers from a sandbox's
 * transcript: each call must be the next recorded one (same function, same
 * arguments); its world operations are performed on the real world and must get
 * the recorded answers; then the recorded return value is given.
 */
export function replaySolution(transcript) {
  let i = 0;
  const state = { problem: null };
  const mismatch = (why) => {
    if (!state.problem) state.problem = why;
    return JSON.stringify({ error: { kind: 'host', message: INTERFERED } });
  };
  const same = (a, b) => a === b || (Number.isNaN(a) && Number.isNaN(b)) || JSON.stringify(a) === JSON.stringify(b);
  const solution = {
    call(fn, argsJson, world) {
      try {
        if (state.problem) return mismatch(state.problem);
        const e = transcript[i++];
        if (!e || e.t !== 'call' || e.fn !== fn || e.args !== argsJson || !Array.isArray(e.ops) || !['string', 'undefined'].includes(typeof e.ret)) {
          return mismatch(`call ${i} is not the one the grader made (${fn})`);
        }
        for (const op of e.ops) {
          if (!op || !(WORLD_OPS.includes(op.op) || COURIER_OPS.includes(op.op)) || !Array.isArray(op.args) || !world || typeof world[op.op] !== 'function') {
            return mismatch(`call ${i}: an unknown world operation`);
          }
          let result, threw = null;
          try {
            result = world[op.op](...op.args);
            if (result === undefined) result = null;
          } catch (err) {
            threw = String((err && err.message) || err);
          }
          if (threw !== null ? threw !== op.threw : (op.threw !== undefined || !same(result, op.result))) {
            return mismatch(`call ${i}: the world answered ${op.op} differently`);
          }
        }
        return e.ret;
      } finally {
        if (world && typeof world.free === 'function') world.free();
      }
    },
    take_output() {
      if (state.problem) return undefined;
      const e = transcript[i++];
      if (!e || e.t !== 'out' || (e.out !== null && typeof e.out !== 'string')) {
        mismatch(`output ${i} is not where the grader asked for it`);
        return undefined;
      }
      if (e.out && e.out.length > OUTPUT_CAP) {
        mismatch('a test printed more than the bridge lets through');
        return undefined;
      }
      return e.out ?? undefined;
    },
  };
  return { solution, state, done: () => i === transcript.length };
}

/** The CLI's JSON line for one report (the engine's JSON, parsed). */
export function jsonLine(report, { file = null, durationMs = null } = {}) {
  const line = {
    file,
    lab: report.lab,
    status: report.status,
    passed: report.passed,
    failed: report.failed,
    total: report.total,
    score: report.score,
    max_score: report.max_score,
    seed: report.seed,
    duration_ms: durationMs,
    tests: report.tests.map((t) => {
      const o = { name: t.name, kind: t.kind, status: t.status };
      if (t.kind === 'example' && t.message != null) o.message = t.message;
      return o;
    }),
    replay: report.replay,
  };
  if (report.status === 'error' && report.message != null) line.message = report.message;
  return line;
}

/**
 * @param {object} [o]
 * @param {number} [o.jobs]      sandbox processes (default 1)
 * @param {number} [o.timeoutS]  wall time per submission (default: the lab's, 8 s)
 * @param {number} [o.memoryMb]  memory per submission (default 512)
 */
export function createGradingPool({ jobs = 1, timeoutS, memoryMb = 512, onWarning } = {}) {
  const warn = onWarning || ((m) => process.stderr.write(`grade: warning: ${m}\n`));
  const queue = [];
  const slots = [];
  let closed = false;
  let grader = null;
  let labCache = new Map();
  // kept: interpreters a sandbox kept for the next submission (a source that did not compile ran nothing)
  const stats = { spawned: 0, recycled: 0, peakRssMb: 0, kept: 0 };

  // The interpreter snapshot every sandbox restores from, made once per pool by a
  // trusted run of sandbox.mjs (no learner code) that may write this file only.
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'delivery-lab-grade-'));
  fs.chmodSync(tmp, 0o755);
  const snapshotFile = path.join(tmp, 'pyodide.snapshot');
  const command = sandboxCommand(memoryMb, snapshotFile, SANDBOX, jobs > 1);
  if (!command.isolated) warn('`unshare --net` does not work here: the sandboxes run WITHOUT network isolation');

  function makeSnapshot() {
    return new Promise((resolve, reject) => {
      const child = spawn(process.execPath, [
        '--experimental-permission', '--no-warnings',
        `--allow-fs-read=${WWW}*`, `--allow-fs-write=${snapshotFile}`,
        SANDBOX, '--make-snapshot', snapshotFile,
      ], { stdio: ['ignore', 'ignore', 'pipe'], env: {} });
      let err = '';
      child.stderr.on('data', (d) => { err += d; });
      child.on('exit', (code) => {
        if (code === 0 && fs.existsSync(snapshotFile)) {
          fs.chmodSync(snapshotFile, 0o444);
          resolve();
        } else reject(new Error(`the interpreter snapshot could not be made: ${err.slice(-2000)}`));
      });
    });
  }

  function labInfo(lab) {
    if (!labCache.has(lab)) labCache.set(lab, JSON.parse(grader.lab(lab)));
    return labCache.get(lab);
  }

  function spawnSlot(slot) {
    stats.spawned++;
    const child = spawn(command.cmd, command.args, { stdio: ['ignore', 'ignore', 'pipe', 'ipc'], env: {}, cwd: '/', serialization: 'advanced' });
    slot.child = child;
    live.add(child);
    child.on('exit', () => live.delete(child));
    slot.ready = false;
    slot.count = 0;
    slot.stderr = '';
    child.stderr.on('data', (d) => { if (slot.stderr.length < 8000) slot.stderr += d.toString('utf8', 0, 8000); });
    let resolveReady, rejectReady;
    slot.readyPromise = new Promise((res, rej) => { resolveReady = res; rejectReady = rej; });
    slot.readyPromise.catch(() => {});
    child.on('message', (m) => {
      if (slot.child !== child || !m || typeof m !== 'object') return;
      if (m.type === 'ready' && !slot.ready) {
        slot.ready = true;
        resolveReady();
        pump();
      } else if (m.type === 'started' && slot.job && m.id === slot.job.id && !slot.job.startedAt) {
        slot.job.startedAt = performance.now();
      } else if (m.type === 'result' && slot.job && m.id === slot.job.id) {
        if (m.kept === true) stats.kept++;
        finish(slot, { result: m });
      }
    });
    child.on('error', (e) => { slot.stderr += String(e); });
    child.on('exit', (code, signal) => {
      if (slot.child !== child) return;
      slot.child = null;
      if (!slot.ready) rejectReady(new Error(`a sandbox failed to start (${code ?? signal}): ${slot.stderr.slice(-2000)}`));
      if (slot.job) finish(slot, { crashed: `the sandbox ended (${signal || `exit ${code}`}) while running it` });
      if (!closed) {
        if (!slot.ready && slot.failures++ > 3) {
          for (const job of queue.splice(0)) job.reject(new Error(`sandboxes fail to start: ${slot.stderr.slice(-2000)}`));
          return;
        }
        spawnSlot(slot);
      }
    });
  }

  function recycle(slot) {
    stats.recycled++;
    const child = slot.child;
    slot.child = null;
    killSandbox(child);
    if (!closed) spawnSlot(slot);
  }

  function pump() {
    for (const slot of slots) {
      if (!queue.length) return;
      if (slot.ready && slot.child && !slot.job) start(slot, queue.shift());
    }
  }

  function start(slot, job) {
    slot.job = job;
    slot.count++;
    job.sentAt = performance.now();
    job.startedAt = null;
    const limitMs = job.limitS * 1000;
    // The limit counts from the moment the sandbox starts the run; the restore
    // of a fresh interpreter before it is the grace's.
    job.timer = setInterval(() => {
      const now = performance.now();
      const ranMs = job.startedAt ? now - job.startedAt : now - job.sentAt - GRACE_S * 1000;
      if (ranMs > limitMs + GRACE_S * 1000) {
        finish(slot, { timeout: true });
      } else if (slot.child) {
        const rss = treeRss(slot.child.pid);
        stats.peakRssMb = Math.max(stats.peakRssMb, rss);
        if (slot.baseRss === undefined && rss) slot.baseRss = rss;
        if (rss > slot.baseRss + memoryMb + 512) finish(slot, { memory: rss });
      }
    }, 50);
    slot.child.send({ type: 'grade', id: job.id, lab: job.lab, source: job.source, seed: job.seed });
  }

  function finish(slot, outcome) {
    const job = slot.job;
    if (!job) return;
    clearInterval(job.timer);
    slot.job = null;
    const durationMs = Math.round(performance.now() - (job.startedAt ?? job.sentAt));
    let out;
    try {
      out = verdict(job, outcome, durationMs);
    } catch (e) {
      try {
        out = render(job, grader.error_report(job.lab, job.seed, `The grader failed on this submission: ${e.message}`, 'json'), durationMs);
      } catch (f) {
        job.reject(f);
        return;
      }
    }
    const r = outcome.result;
    // Refused imports alone (r.alarms) keep the sandbox: see sandbox.mjs.
    const unfit = !r || r.tainted || out.interfered || slot.count >= RECYCLE_AFTER;
    if (unfit && slot.child) recycle(slot);
    job.resolve(out.text);
    pump();
  }

  // The outputs a job asked for, from the coordinator's own report (json) and,
  // for other formats, `other(format)` (a replay) or the grader's error or
  // timeout report.
  function render(job, reportJson, durationMs, other) {
    const report = JSON.parse(reportJson);
    const out = {};
    for (const format of job.formats) {
      if (format === 'json') out.json = JSON.stringify(jsonLine(report, { file: null, durationMs }));
      else if (other) out[format] = other(format);
      else if (report.status === 'error') out[format] = grader.error_report(job.lab, job.seed, report.message ?? '', format);
      else out[format] = grader.timeout_report(job.lab, job.seed, timeoutMessage(job), format);
    }
    return { text: out, report };
  }

  function timeoutMessage(job) {
    return `Stopped: the run took longer than the ${job.limitS} s limit.`;
  }

  function verdict(job, outcome, durationMs) {
    const errorOut = (message) => render(job, grader.error_report(job.lab, job.seed, message, 'json'), durationMs);
    if (outcome.timeout) return render(job, grader.timeout_report(job.lab, job.seed, timeoutMessage(job), 'json'), durationMs);
    if (outcome.memory) return errorOut(`Stopped: the run used more than ${memoryMb} MB of memory, so it could not be graded.`);
    if (outcome.crashed) return errorOut(`Your code ended the grader's Python process (${outcome.crashed}), so it could not be graded.`);
    const r = outcome.result;
    if (r.ms > job.limitS * 1000) return render(job, grader.timeout_report(job.lab, job.seed, timeoutMessage(job), 'json'), durationMs);
    if (typeof r.report !== 'string') return errorOut(`The grader's sandbox could not grade this submission: ${r.failure || 'no report'}`);
    const sandboxReport = JSON.parse(r.report);
    const transcript = Array.isArray(r.transcript) ? r.transcript : [];
    if (transcript.length === 0) {
      // Nothing ran (error or timeout while loading): the report must be one the
      // coordinator can make itself from the message, and nothing else.
      const mine = sandboxReport.status === 'error'
        ? grader.error_report(job.lab, job.seed, String(sandboxReport.message ?? ''), 'json')
        : grader.timeout_report(job.lab, job.seed, String(sandboxReport.message ?? ''), 'json');
      if (normal(mine) !== r.report) return { ...errorOut(`${INTERFERED}: its report does not match the grader's.`), interfered: true };
      return render(job, mine, durationMs, (format) => (
        sandboxReport.status === 'error'
          ? grader.error_report(job.lab, job.seed, String(sandboxReport.message ?? ''), format)
          : grader.timeout_report(job.lab, job.seed, String(sandboxReport.message ?? ''), format)));
    }
    const replay = (format) => {
      const rp = replaySolution(transcript);
      const text = grader.grade(job.lab, rp.solution, job.seed, format);
      if (rp.state.problem) throw new Interference(rp.state.problem);
      if (!rp.done()) throw new Interference('the transcript has calls the grader never made');
      return text;
    };
    let mine;
    try {
      mine = replay('json');
    } catch (e) {
      if (e instanceof Interference) return { ...errorOut(`${INTERFERED}: ${e.message}.`), interfered: true };
      throw e;
    }
    if (normal(mine) !== r.report) return { ...errorOut(`${INTERFERED}: the sandbox's report differs from the replay's.`), interfered: true };
    return render(job, mine, durationMs, (format) => replay(format));
  }

  let nextId = 1;
  const ready = (async () => {
    const [pkg] = await Promise.all([loadGrader(), makeSnapshot()]);
    grader = new pkg.Grader();
    for (let i = 0; i < Math.max(1, jobs); i++) {
      const slot = { child: null, job: null, count: 0, failures: 0 };
      slots.push(slot);
      spawnSlot(slot);
    }
    await Promise.all(slots.map((s) => s.readyPromise));
  })();
  ready.catch(() => {});

  return {
    ready,
    stats,
    isolated: command.isolated,
    /** Grades one submission; resolves to its report in `format` (json: the CLI's line, file null). */
    async grade({ lab = 'deliver-once', source, seed, format = 'json' }) {
      return (await this.gradeMany({ lab, source, seed, formats: [format] }))[format];
    },
    /** Like grade, in several formats at once: resolves to { [format]: text }. */
    async gradeMany({ lab = 'deliver-once', source, seed, formats = ['json'] }) {
      if (closed) throw new Error('the grading pool is closed');
      for (const f of formats) if (!FORMATS.includes(f)) throw new Error(`unknown format ${f}: use ${FORMATS.join(', ')}`);
      await ready;
      const info = labInfo(lab);
      seed = seed === undefined || seed === null ? info.default_seed : seed;
      const limitS = timeoutS ?? info.time_limit_s;
      const pre = precheck(source);
      if (pre) return this.errorReports({ lab, seed, message: pre, formats });
      return new Promise((resolve, reject) => {
        queue.push({ id: nextId++, lab, source: String(source), seed, formats, limitS, resolve, reject });
        pump();
      });
    },
    /** The reports for a submission that cannot be graded at all (no sandbox needed). */
    async errorReports({ lab = 'deliver-once', seed, message, formats = ['json'] }) {
      await ready;
      seed = seed === undefined || seed === null ? labInfo(lab).default_seed : seed;
      const out = {};
      for (const f of formats) {
        out[f] = f === 'json'
          ? JSON.stringify(jsonLine(JSON.parse(grader.error_report(lab, seed, message, 'json')), { durationMs: 0 }))
          : grader.error_report(lab, seed, message, f);
      }
      return out;
    },
    queued: () => queue.length + slots.filter((s) => s.job).length,
    async close() {
      closed = true;
      for (const job of queue.splice(0)) job.reject(new Error('the grading pool was closed'));
      for (const slot of slots) {
        const child = slot.child;
        slot.child = null;
        killSandbox(child);
      }
      fs.rmSync(tmp, { recursive: true, force: true });
    },
  };
}

class Interference extends Error {}

// The sandbox sends JSON.stringify of the engine's parsed report; the same
// round trip makes the coordinator's comparable (Rust writes 1.0, JS 1).
const normal = (json) => JSON.stringify(JSON.parse(json));

/** Submissions that cannot be graded without running anything: the message, or null. */
export function precheck(source) {
  if (typeof source !== 'string') return 'The submission is not text, so no test ran.';
  if (source.trim() === '') return 'The submission is empty, so no test ran.';
  return null;
}
