// The grading pool: the trusted side. It runs no learner code. Per --jobs slot it
// keeps a grading thread (grader_thread.mjs: the WASM grader, the worlds, the
// verdict) and a sandbox process started ahead (sandbox.mjs in jail.mjs's walls;
// under root as a uid of its own, whose every process is killed before the uid
// goes to another sandbox), so that one is always ready. Each submission gets a fresh sandbox, used once and
// killed: nothing of one submission (its process, pipes, memory, interpreter) is
// ever reached by another. The main thread keeps the time limit, the memory watch
// and the queue, and never blocks: a sandbox that misbehaves ends its own
// submission as an error and the pool goes on.
//
//   const pool = createGradingPool({ jobs: 2 });
//   await pool.ready;
//   const line = await pool.grade({ lab, source, seed, format: 'json', signal });   // lab: an id, or the first
//   await pool.close();
import { spawn, spawnSync } from 'node:child_process';
import { EventEmitter } from 'node:events';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import readline from 'node:readline';
import { Worker } from 'node:worker_threads';
import { fileURLToPath } from 'node:url';
import { ENDED, JOB } from './frames.mjs';
import { ENGINE_FORMATS as FORMATS } from './formats.mjs';
import { jailCommand, jailProblem, killUid, PERMISSION_FLAG, sandboxUid, uidHasProcess } from './jail.mjs';
import { cpuMsOf, descendants, treeCpuMs, treeOf, treeRss } from './procfs.mjs';
import { labsFileOf, runsFileOf } from './python.mjs';
import { graderFiles, loadGrader } from '../src/node_host.mjs';
import { firstLab } from '../src/engine.mjs';

const WWW = fileURLToPath(new URL('../', import.meta.url));
const SANDBOX = fileURLToPath(new URL('sandbox.mjs', import.meta.url));
const SPAWNER = fileURLToPath(new URL('spawner.mjs', import.meta.url));
const THREAD = new URL('grader_thread.mjs', import.meta.url);
const BOOT_LIMIT_S = 30;           // a sandbox not ready by then is replaced
// After this many failed sandbox starts in a row a slot is down: it tries again
// after RETRY_MS.firstMs, then twice as long each time up to maxMs, and meanwhile,
// when every slot is down, submissions are refused with a SandboxStartError.
export const START_FAILURES = 4;
export const RETRY_MS = Object.freeze({ firstMs: 1000, maxMs: 30_000 });
// A grading thread still busy this long after its submission was ended (one
// SQLite statement can run long in a single step of its machine, out of the store's
// caps) is terminated and replaced: no submission holds a slot past its limit.
export const THREAD_GRACE_MS = 2000;
const MEMORY_SLACK_MB = 512;       // over --memory, the RSS watch's margin for Node itself
/**
 * The CLI's limit is CPU time: the sandbox's processes plus what its grading thread
 * spends on it (each courier statement runs there). CPU and not the clock, so that a
 * loaded machine (two jobs on two cores, a spare booting, CI beside it) grades the
 * same solution the same way: on the clock, the courier reference ran 30 s alone and
 * past 60 s on a busy machine, and failed there. A run that waits without running
 * (asleep, or blocked on a pipe) is ended at WALL_FACTOR times the limit.
 *
 * The default is the lab's time limit times this. A sandbox costs more CPU than the
 * page's worker: a fresh process whose Python runs without optimized code and
 * without code generation from strings, and whose every world operation crosses a
 * pipe to the grading thread (the courier lab's reference makes about 33,000 calls
 * and 75,000 SQL statements, each a round trip to the thread's database). Measured
 * on the 2-core development machine: the courier reference takes 13-15 s in a plain
 * Node process and 30-38 s of CPU under ./lab grade (sandbox and thread), about 2.5
 * times; and this VM's CPU accounting has shown twice that in a noisy minute. Four
 * times the limit keeps every solution that fits the page's limit inside it here,
 * with room for that; `--timeout` sets it outright.
 */
export const CLI_LIMIT_FACTOR = 4;
export const WALL_FACTOR = 3;
/** The longest JSON line of one submission (the report's fields are capped in the engine). */
export const LINE_CAP_BYTES = 64 * 1024;
/** The formats the engine renders: formats.mjs, the one list of report formats. */
export { ENGINE_FORMATS as FORMATS } from './formats.mjs';
export const INTERFERED = 'The submission interfered with the grader, so it could not be graded';

// What a sandbox may read: its own code, the bridge, Pyodide, the snapshot. Not the
// grader (www/pkg): the sandbox holds no tests and no reference.
export const SANDBOX_READS = [
  `${WWW}cli/sandbox.mjs`, `${WWW}cli/frames.mjs`, `${WWW}cli/python.mjs`, `${WWW}cli/wasm_memcap.mjs`,
  `${WWW}src/engine.mjs`, `${WWW}src/bridge.py`, `${WWW}node_modules/pyodide`,
];

/**
 * Node's flags of a sandbox, past its permissions. The pool's code-cache step runs
 * with the same ones: V8 takes a code cache only from a process with its own flags.
 */
function sandboxNodeFlags(sharedCores) {
  return [
    '--disallow-code-generation-from-strings',
    '--max-old-space-size=768',
    '--no-warnings',
    // A sandbox lives for one submission: optimizing Pyodide's hot functions in the
    // background (V8's TurboFan tier-up) costs more CPU than it saves in one run
    // (measured with bench.mjs: about 800 -> 260 ms of CPU for lab 1's run).
    '--liftoff-only',
    // Pyodide's 9.6 MB of wasm compiled, and validated, a function at a time when
    // first called rather than all of it at the start: a submission calls a small
    // part of it (measured, spawn to ready: 60-90 ms less CPU per start, a run's CPU
    // the same within noise). The binary is Pyodide's own, read-only to the sandbox.
    '--wasm-lazy-compilation',
    '--wasm-lazy-validation',
    // A start allocates about 20 MB of short-lived objects: with the young
    // generation at full size from the first allocation V8 scavenges twice instead
    // of seven times (measured: 40-70 ms less CPU per start, 8 MB more memory).
    '--min-semi-space-size=16',
    // Not here, measured: --no-opt (a start about 90 ms cheaper, the courier lab's
    // run 15% dearer), --single-threaded (no gain), --jitless (no WebAssembly).
    // With a sandbox per core, V8's helper threads only take CPU from the other one.
    ...(sharedCores ? ['--single-threaded-gc'] : []),
  ];
}

const isRoot = () => process.getuid?.() === 0;

/**
 * The command line of a sandbox running `script` (sandbox.mjs, or a test's probe):
 * Node under its permission model, reading only SANDBOX_READS, the snapshot (and its
 * index), the code cache and the script; inside jail.mjs's walls: bubblewrap when
 * `jailed`; without it (--no-sandbox), under root still as `uid` with the rlimits,
 * not root as the rlimits alone when prlimit works here, else Node's flags alone.
 * Under root `uid` is the sandbox's own (sandboxUid(); one is taken when not given).
 * Returns { cmd, args, uid }.
 */
export function sandboxCommand({ script = SANDBOX, memoryMb = 512, snapshotFile, codeCacheFile, sharedCores = false, jailed = true, uid }) {
  const files = snapshotFile ? [snapshotFile, runsFileOf(snapshotFile), labsFileOf(snapshotFile)] : [];
  if (codeCacheFile) files.push(codeCacheFile);
  const reads = [...SANDBOX_READS, ...files, ...(script === SANDBOX ? [] : [script])];
  const argv = [
    process.execPath,
    PERMISSION_FLAG,
    ...reads.map((p) => `--allow-fs-read=${p}${p.endsWith('pyodide') ? '/*' : ''}`),
    ...sandboxNodeFlags(sharedCores),
    script, String(memoryMb), snapshotFile ?? '', ...(codeCacheFile ? [codeCacheFile] : []),
  ];
  if (!jailed && !isRoot() && jailProblem({ bwrap: false })) return { cmd: argv[0], args: argv.slice(1), uid: null };
  return jailCommand(argv, reads, { uid: uid ?? (isRoot() ? sandboxUid() : null), bwrap: jailed });
}

/**
 * The pool cannot start sandboxes (every slot's last starts failed) and retries
 * with backoff: the submission was not graded. `retryAfterS`: when to try again.
 * Known by its `code` (ESANDBOXSTART), not its text: `./lab serve --grading`
 * answers it with 503 and Retry-After.
 */
export class SandboxStartError extends Error {
  constructor(cause, retryAfterS) {
    super(`sandboxes fail to start: ${cause}`);
    this.name = 'SandboxStartError';
    this.code = 'ESANDBOXSTART';
    this.retryAfterS = retryAfterS;
  }
}

// The sandbox uids this process holds (jail.mjs sandboxUid, in this process's
// block), from the spawn until nothing of the uid lives: a uid whose sandbox has
// not started yet is not seen in /proc, and two pools of one process share a block.
const heldUids = new Set();
/** A uid of its own for the next sandbox (null when none is free); null if not root. */
function takeUid() {
  const uid = sandboxUid(process.pid, { held: heldUids });
  if (uid !== null) heldUids.add(uid);
  return uid;
}
/** Every process of `uid` killed, then the uid free for another sandbox. */
function releaseUid(uid) {
  if (uid === null || uid === undefined) return;
  killUid(uid);
  heldUids.delete(uid);
}

// FIFO pairs the spawner makes ahead, this many at a time: each mkfifo is a process.
const FIFO_BATCH = 8;

/** A sandbox process as the pool sees it: started by the spawner, known by its pid
 *  once the spawner has told it (a kill asked for before then waits for the pid). */
class Sandboxed extends EventEmitter {
  pid = undefined;
  exitCode = null;
  signalCode = null;
  pendingKill = null;
  stderr = new EventEmitter();
  kill(signal) {
    if (this.pid === undefined) this.pendingKill = signal;
    else try { process.kill(this.pid, signal); } catch { /* gone */ }
  }
}

/**
 * The spawner (spawner.mjs), and the pipes of each sandbox it starts: two FIFOs of
 * the sandbox's own, made ahead in private folders under `dir` (removed with it),
 * each opened by the coordinator and by the spawner for the child, and unlinked at
 * once (the fds stay). Blocking fds on both sides: see frames.mjs.
 * Returns { ready, start(cmd, args, uid) -> { child, fdIn, fdOut }, cpuMs(), close() }.
 */
function spawnerOf(dir) {
  let proc = null;
  let closing = false;
  let nextId = 1;
  const children = new Map();
  const waits = new Map();
  const stock = [];
  let refilling = null;

  function launch() {
    const p = spawn(process.execPath, ['--no-warnings', SPAWNER], { stdio: ['pipe', 'pipe', 'inherit'], env: {} });
    proc = p;
    p.stdin.on('error', () => {});
    readline.createInterface({ input: p.stdout }).on('line', (line) => {
      let m;
      try { m = JSON.parse(line); } catch { return; }
      if (m.t === 'fifos') waits.get(m.id)?.(m);
      const child = children.get(m.id);
      if (!child) return;
      if (m.t === 'spawned') {
        child.pid = m.pid;
        child.onSpawned?.();
        if (child.pendingKill) child.kill(child.pendingKill);
      } else if (m.t === 'failed') {
        child.onSpawned?.();
        child.emit('error', new Error(m.error));
        gone(m.id, null, 'SIGKILL');
      } else if (m.t === 'stderr') child.stderr.emit('data', Buffer.from(String(m.data)));
      else if (m.t === 'exit') gone(m.id, m.code, m.signal);
    });
    p.on('exit', () => {
      if (proc === p) proc = null;
      for (const w of waits.values()) w({ error: 'the spawner ended' });
      // Its sandboxes go with it (--die-with-parent); made sure of, and told.
      const orphans = [...children];
      for (const [, child] of orphans) killTree(child, { now: true });
      for (const [id, child] of orphans) {
        child.onSpawned?.();
        gone(id, null, 'SIGKILL');
      }
    });
  }
  function gone(id, code, signal) {
    const child = children.get(id);
    if (!child) return;
    children.delete(id);
    child.exitCode = code;
    child.signalCode = code === null ? (signal || 'SIGKILL') : null;
    child.emit('exit', child.exitCode, child.signalCode);
  }
  const send = (m) => {
    if (closing) throw new Error('the grading pool is closed');
    if (!proc) launch();
    proc.stdin.write(`${JSON.stringify(m)}\n`);
  };

  function refill() {
    if (refilling) return refilling;
    const batch = fs.mkdtempSync(path.join(dir, 'pipes-'));
    const pairs = Array.from({ length: FIFO_BATCH }, (_, i) => [`${i}-down`, `${i}-up`]);
    const id = nextId++;
    refilling = new Promise((resolve) => {
      waits.set(id, (m) => {
        waits.delete(id);
        refilling = null;
        if (!m.error) stock.push(...pairs.map(([d, u]) => [path.join(batch, d), path.join(batch, u)]));
        resolve();
      });
    });
    send({ t: 'fifos', id, dir: batch, names: pairs.flat() });
    return refilling;
  }
  /** A FIFO pair; made here, at a fork's cost, only if the spawner has none ready. */
  function pair() {
    if (stock.length <= FIFO_BATCH / 2) refill();
    if (stock.length) return stock.shift();
    const batch = fs.mkdtempSync(path.join(dir, 'pipes-'));
    const fifos = [path.join(batch, 'down'), path.join(batch, 'up')];
    const r = spawnSync('mkfifo', ['-m', '600', ...fifos]);
    if (r.status !== 0) throw new Error(`mkfifo failed: ${String(r.stderr || r.error)}`);
    return fifos;
  }

  function start(cmd, args, uid = null) {
    const [down, up] = pair();
    const { O_RDWR, O_RDONLY, O_WRONLY } = fs.constants;
    const child = new Sandboxed();
    const id = nextId++;
    let fdIn; let fdOut; let hold;
    try {
      // A FIFO's write end opens at once while a reader exists: a temporary one.
      const tmp = fs.openSync(down, O_RDWR);
      fdOut = fs.openSync(down, O_WRONLY);
      fs.closeSync(tmp);
      // `hold`, a writer of `up` until the child has its own end, so that a read of
      // fdIn waits for the child instead of seeing the end of the pipe.
      hold = fs.openSync(up, O_RDWR);
      fdIn = fs.openSync(up, O_RDONLY);
    } catch (e) {
      for (const fd of [fdIn, fdOut, hold]) if (fd !== undefined) closeFd(fd);
      fs.rmSync(down, { force: true });
      fs.rmSync(up, { force: true });
      throw e;
    }
    child.onSpawned = () => { child.onSpawned = null; closeFd(hold); };
    children.set(id, child);
    send({ t: 'spawn', id, cmd, args, down, up, uid });
    return { child, fdIn, fdOut };
  }

  return {
    ready: refill(),
    start,
    /** The spawner's own CPU so far, in ms (not its children's). */
    cpuMs: () => (proc ? cpuMsOf(proc.pid) : 0),
    close() {
      closing = true;
      const p = proc;
      if (!p) return Promise.resolve();
      return new Promise((resolve) => {
        const t = setTimeout(() => p.kill('SIGKILL'), 5000);
        p.on('exit', () => { clearTimeout(t); resolve(); });
        p.stdin.end();
      });
    },
  };
}

const closeFd = (fd) => { try { fs.closeSync(fd); } catch { /* closed */ } };

// Sandboxes never outlive the coordinator, however it ends (bubblewrap's
// --die-with-parent covers a coordinator that is killed).
const live = new Set();
const ended = (child) => child.exitCode !== null || child.signalCode !== null;
/** SIGKILL to the processes under `child`; how many there were. */
function killInner(child) {
  const inner = child.pid === undefined ? [] : descendants(child.pid);
  for (const pid of inner) {
    try { process.kill(pid, 'SIGKILL'); } catch { /* gone */ }
  }
  return inner.length;
}
function killOuter(child) {
  if (ended(child)) return;
  if (child.pid !== undefined) try { process.kill(-child.pid, 'SIGKILL'); } catch { /* gone */ }
  child.kill('SIGKILL');
}
/**
 * Kills a sandbox's processes. Under bubblewrap the first process (the child)
 * reaps the ones inside (its PID namespace ends with its init) and then exits by
 * itself: killed with them, it would leave them to the machine's init as zombies
 * of the sandbox's uid. So the ones inside are killed, again every 100 ms while it
 * lives (one that has not started them yet, booting), and the child itself only
 * if it has not ended 2 s later (a loaded machine may be that slow). Without
 * bubblewrap (no process inside), or when the coordinator exits (`now`), all at once.
 */
function killTree(child, { now = false } = {}) {
  if (!child || ended(child)) return;
  const found = killInner(child);
  if (now || (!found && !child.jailed)) {
    killOuter(child);
    return;
  }
  if (child.killing) return;
  child.killing = true;
  let steps = 0;
  const step = () => {
    if (ended(child)) return;
    killInner(child);
    if (++steps >= 20) killOuter(child);
    else setTimeout(step, 100).unref?.();
  };
  setTimeout(step, 100).unref?.();
}
process.on('exit', () => {
  for (const c of live) killTree(c, { now: true });
  for (const uid of heldUids) killUid(uid);
});

// Characters that move a terminal's cursor, recolour, erase or reorder text: C0
// (but newline and tab), DEL, C1, and the bidirectional and zero-width marks. The
// same set as report.rs terminal_safe, which a test holds them to.
const UNSAFE = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]/g;
const hex = (c, n) => c.charCodeAt(0).toString(16).padStart(n, '0');
/** Text fit for a terminal: each of those characters as an escape (`\x1b`, `\u202e`). */
export const terminalSafe = (s) => String(s).replace(UNSAFE, (c) => (c.charCodeAt(0) < 0x100 ? `\\x${hex(c, 2)}` : `\\u${hex(c, 4)}`));
/** A value as one line of JSON with each of those characters as a \u escape (the
 *  same JSON to a parser; JSON.stringify escapes only C0): what the CLI prints and
 *  serves, and what LINE_CAP_BYTES is measured on. */
export const jsonText = (value) => JSON.stringify(value).replace(UNSAFE, (c) => `\\u${hex(c, 4)}`);

/** The CLI's JSON line for one report (the engine's JSON, parsed), within LINE_CAP_BYTES. */
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
  // The engine caps every field, so this holds already; kept as the last word,
  // since a file name or a future field could still make a line long.
  if (Buffer.byteLength(jsonText(line)) > LINE_CAP_BYTES) {
    for (const t of line.tests) if (t.message) t.message = `${t.message.slice(0, 200)}\n[cut: the report was over 64 KB]`;
    if (line.message) line.message = line.message.slice(0, 2000);
  }
  return line;
}

/** The .py files at the top of `dir`, sorted: files, and links too (which
 *  readSubmission then refuses, so they are reported rather than passed over). */
export function pyFilesIn(dir) {
  const fileOrLink = (n) => {
    try {
      const st = fs.lstatSync(path.join(dir, n));
      return st.isFile() || st.isSymbolicLink();
    } catch {
      return false;
    }
  };
  return fs.readdirSync(dir).filter((n) => n.endsWith('.py') && fileOrLink(n)).sort();
}

/** The longest submission read (a learner's file is a few KB). */
export const SUBMISSION_CAP_BYTES = 1 << 20;

/**
 * A submission's text, or why it cannot be graded. Only a regular file is read, and
 * never through a link: submissions come from learners' archives, and a link would
 * have the coordinator, with staff's rights, read and grade whatever it points to
 * (the lab's reference, a hidden case file).
 */
export function readSubmission(file) {
  let fd;
  try {
    fd = fs.openSync(file, fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW | fs.constants.O_NONBLOCK);
  } catch (e) {
    if (e.code === 'ELOOP') return { error: 'The submission is a link, not a file, so no test ran. Submit the file itself.' };
    throw e;
  }
  let bytes;
  try {
    const st = fs.fstatSync(fd);
    if (!st.isFile()) return { error: 'The submission is not a regular file, so no test ran.' };
    if (st.size > SUBMISSION_CAP_BYTES) return { error: `The submission is larger than ${SUBMISSION_CAP_BYTES >> 20} MB, so no test ran.` };
    bytes = fs.readFileSync(fd);
  } finally {
    fs.closeSync(fd);
  }
  try {
    return { text: new TextDecoder('utf-8', { fatal: true }).decode(bytes) };
  } catch {
    return { error: 'The file is not valid UTF-8 text, so no test ran. Save it as UTF-8.' };
  }
}

/** Submissions that cannot be graded without running anything: the message, or null. */
export function precheck(source) {
  if (typeof source !== 'string') return 'The submission is not text, so no test ran.';
  if (source.trim() === '') return 'The submission is empty, so no test ran.';
  return null;
}

function abortError() {
  const e = new Error('the submission was withdrawn');
  e.name = 'AbortError';
  return e;
}

/**
 * @param {object} [o]
 * @param {number} [o.jobs]      submissions graded at once (default 1)
 * @param {number} [o.timeoutS]  CPU time per submission (default: the lab's limit times
 *                               CLI_LIMIT_FACTOR); ended on the clock at wallFactor times it
 * @param {number} [o.wallFactor] how many times its CPU limit a run may last on the clock
 *                               (default WALL_FACTOR)
 * @param {number} [o.memoryMb]  memory for one submission's Python (default 512)
 * @param {boolean} [o.sandbox]  false: no bubblewrap (`--no-sandbox`); a process per
 *                               submission, its own uid under root, the rlimits (and
 *                               the permission model, which is no boundary) still hold
 * @param {string} [o.sandboxScript] another sandbox program, for the tests' misbehaving
 *                               sandboxes (then no interpreter snapshot is made)
 * @param {number} [o.bootLimitS] how long a sandbox may take to be ready once awaited
 * @param {{firstMs:number, maxMs:number}} [o.retryMs] after START_FAILURES failed starts in
 *                               a row a slot is down, and tries again after firstMs, then
 *                               twice as long each time, at most maxMs (default 1 s, 30 s)
 * @param {() => boolean} [o.startFault] tests only: while it returns true, each sandbox
 *                               start fails (its program does not exist)
 * @param {() => boolean} [o.threadFault] tests only: while it returns true, each grading
 *                               thread's start fails (its grader's folder does not exist)
 * @param {string} [o.pkgDir]    the grader's folder (default www/pkg): copied at the
 *                               start, and only that copy is graded with
 */
export function createGradingPool({ jobs = 1, timeoutS, memoryMb = 512, sandbox = true, sandboxScript = SANDBOX, onWarning, bootLimitS = BOOT_LIMIT_S, wallFactor = WALL_FACTOR,
  retryMs = RETRY_MS, startFault = null, threadFault = null, pkgDir = null } = {}) {
  const warn = onWarning || ((m) => process.stderr.write(`grade: warning: ${m}\n`));
  jobs = Math.max(1, jobs);
  const queue = [];
  const slots = [];
  let closed = false;
  let grader = null;
  const labCache = new Map();
  // stoppedByCpu / stoppedByClock: runs ended at the limit, and which stop ended them.
  // threadsStarted / storeReuses: grading threads started (a thread whose courier
  // store was used is replaced after that submission), and submissions graded with a
  // store that had served another (none, ever: a test holds the pool to it);
  // threadsHung: threads replaced because they were still busy after a stop.
  const stats = {
    spawned: 0, graded: 0, bootCpuMs: 0, runCpuMs: 0, booted: 0, peakRssMb: 0, interfered: 0, stoppedByCpu: 0, stoppedByClock: 0,
    threadsStarted: 0, storeReuses: 0, threadsHung: 0, startFailures: 0, threadStartFailures: 0,
  };

  const problem = sandbox ? jailProblem() : '';
  if (problem) {
    throw new Error(`the grading sandbox does not work here: ${problem}. Install bubblewrap (Debian's \`bubblewrap\`) `
      + 'and allow unprivileged user namespaces, or pass --no-sandbox to grade without it (see www/cli/README.md)');
  }
  if (!sandbox) {
    // Without bubblewrap, under root, a uid of each sandbox's own and the rlimits are
    // the walls: refused when they cannot hold, never learner code run as root.
    const without = jailProblem({ bwrap: false });
    if (isRoot() && without) {
      throw new Error(`--no-sandbox as root needs setpriv and prlimit (util-linux) to run each submission as a uid of its own: ${without}`);
    }
    warn(isRoot()
      ? '--no-sandbox: each submission still gets a fresh process, as a uid of its own with the rlimits, but no namespaces: it sees the machine\'s files, processes and network as any unprivileged user does'
      : `--no-sandbox: each submission still gets a fresh process, but no namespaces, ${without ? 'no rlimits, ' : ''}and it runs as this same user (uid ${process.getuid?.()}), beside the grader's files and processes (see www/cli/README.md)`);
  }

  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'delivery-lab-grade-'));
  fs.chmodSync(tmp, 0o755);
  // The grader this pool grades with, pinned: a copy of its two files made now, which
  // every grading thread loads (one started later too), so a build made while a
  // server runs changes nothing it grades with (issue 28). Root's alone: no sandbox
  // reads it.
  const graderDir = path.join(tmp, 'grader');
  fs.mkdirSync(graderDir, { mode: 0o700 });
  for (const [, file] of Object.entries(graderFiles(pkgDir))) fs.copyFileSync(file, path.join(graderDir, path.basename(file)));
  const spawner = spawnerOf(tmp);
  const snapshotFile = path.join(tmp, 'pyodide.snapshot');
  const codeCacheFile = path.join(tmp, 'pyodide.code-cache');
  const sharedCores = jobs > 1;
  // Each sandbox's command line is its own (its uid): made at each start, from these.
  const commandOptions = {
    script: sandboxScript, memoryMb, snapshotFile, codeCacheFile: sandboxScript === SANDBOX ? codeCacheFile : null, sharedCores, jailed: sandbox,
  };
  // The uids this pool's sandboxes hold (all of them free again once it is closed),
  // and its sandboxes' processes not ended yet.
  const poolUids = new Set();
  const running = new Set();

  /**
   * A trusted run of sandbox.mjs (no learner code) that may write only `outs`.
   * Under root it runs as a sandbox uid too (not bubblewrap: it writes into the
   * pool's folder): `outs` are made first, empty and that uid's alone; once it has
   * ended they are root's again and read-only (0444) to every sandbox uid, in a
   * folder that is root's (0755), so no sandbox can write or replace them.
   */
  function makeFiles(outs, flags, args, what) {
    const argv = [
      process.execPath, PERMISSION_FLAG, ...flags, '--no-warnings',
      `--allow-fs-read=${WWW}*`, `--allow-fs-read=${tmp}/*`, ...outs.map((f) => `--allow-fs-write=${f}`),
      SANDBOX, ...args,
    ];
    let uid = null;
    let cmd = argv[0];
    let cmdArgs = argv.slice(1);
    if (isRoot()) {
      uid = takeUid();
      if (uid === null) return Promise.reject(new Error(`the ${what} could not be made: no sandbox uid is free`));
      for (const f of outs) {
        fs.writeFileSync(f, '', { mode: 0o600 });
        fs.chownSync(f, uid, uid);
      }
      // Its files are written by it: no file-size limit.
      ({ cmd, args: cmdArgs } = jailCommand(argv, [], { uid, bwrap: false, rlimits: { fsize: 'unlimited' } }));
    }
    return new Promise((resolve, reject) => {
      const child = spawn(cmd, cmdArgs, { stdio: ['ignore', 'ignore', 'pipe'], env: {}, cwd: '/' });
      let err = '';
      child.stderr.on('data', (d) => { if (err.length < 8000) err += d; });
      child.on('error', (e) => { err += String(e); });
      child.on('close', (code) => {
        releaseUid(uid);
        const made = code === 0 && outs.every((f) => fs.existsSync(f) && (uid === null || fs.statSync(f).size > 0));
        for (const f of outs) {
          try {
            if (uid !== null) fs.chownSync(f, 0, 0);
            fs.chmodSync(f, 0o444);
          } catch { /* not made */ }
        }
        if (made) resolve();
        else reject(new Error(`the ${what} could not be made: ${err.slice(-2000)}`));
      });
    });
  }

  // The files every sandbox reads, made before any sandbox starts and read-only to
  // them: the interpreter snapshot it restores from (with its index of non-zero
  // pages), then the code cache of Pyodide's JS (made by a sandbox's own start,
  // with a sandbox's flags). The grading threads restore the same snapshot.
  async function makeSnapshot() {
    // The labs' Python sides, from the registry: the snapshot imports them, and
    // every sandbox reads them (it holds no grader to ask).
    const labs = JSON.parse(grader.labs()).map(({ id }) => ({ id, bridge_py: labInfo(id).bridge_py }));
    fs.writeFileSync(labsFileOf(snapshotFile), JSON.stringify(labs), { mode: 0o444 });
    if (sandboxScript !== SANDBOX) {
      // A test's sandbox program: the files it may read exist, empty.
      for (const f of [snapshotFile, runsFileOf(snapshotFile)]) fs.writeFileSync(f, '');
      return;
    }
    await makeFiles([snapshotFile, runsFileOf(snapshotFile)], [], ['--make-snapshot', snapshotFile], 'interpreter snapshot');
    await makeFiles([codeCacheFile], sandboxNodeFlags(sharedCores), ['--make-code-cache', snapshotFile, codeCacheFile], 'code cache');
  }

  function labInfo(lab) {
    if (!labCache.has(lab)) labCache.set(lab, JSON.parse(grader.lab(lab)));
    return labCache.get(lab);
  }

  // --- sandboxes -----------------------------------------------------------

  let nextSid = 1;
  function spawnSandbox(slot) {
    if (closed) return null;
    stats.spawned++;
    // A uid of its own under root, so its command line is its own: made here (a
    // scan of /proc and an array of strings, well under a millisecond).
    let command;
    let uid = null;
    if (startFault?.()) command = { cmd: '/nonexistent/delivery-lab-start-fault', args: [] };
    else if (isRoot() && (uid = takeUid()) === null) command = { cmd: '/nonexistent/no-free-sandbox-uid', args: [] };
    else command = sandboxCommand({ ...commandOptions, uid });
    if (uid !== null) poolUids.add(uid);
    const { child, fdIn, fdOut } = spawner.start(command.cmd, command.args, uid);
    const sb = { sid: nextSid++, uid, child, fdIn, fdOut, ready: false, stderr: '', bootCpuMs: 0 };
    child.jailed = sandbox;
    live.add(child);
    running.add(child);
    child.stderr.on('data', (d) => { if (sb.stderr.length < 8000) sb.stderr += d.toString('utf8', 0, 8000); });
    child.on('error', (e) => { sb.stderr += String(e); });
    child.on('exit', () => {
      live.delete(child);
      running.delete(child);
      sb.exited = true;
      if (sb.discarded) freeUid(sb);
      // A ready spare that died while it waited (the spawner gone, say) is replaced
      // now, not handed a submission. Not one the thread is still reading: that one
      // reports itself as not ready.
      if (slot.spare === sb && sb.ready && !slot.job && !closed) {
        slot.spare = null;
        discard(sb);
        spawnSandbox(slot);
      }
    });
    slot.spare = sb;
    if (!slot.job) awaitSpare(slot);
    return sb;
  }

  function awaitSpare(slot) {
    const sb = slot.spare;
    // A thread that is still starting is asked once it says `up`.
    if (!sb || sb.awaited || !slot.threadUp) return;
    sb.awaited = true;
    // Counted from when the grading thread starts waiting for it: while the thread
    // grades a long submission, its spare waits too, and is not late.
    clearTimeout(sb.bootTimer);
    sb.bootTimer = setTimeout(() => { if (!sb.ready) killTree(sb.child); }, bootLimitS * 1000);
    slot.thread.postMessage({ t: 'await-ready', sid: sb.sid, fdIn: sb.fdIn, fdOut: sb.fdOut });
  }

  function discard(sb) {
    if (!sb) return;
    clearTimeout(sb.bootTimer);
    killTree(sb.child);
    // Whatever of its uid the tree did not hold is killed once its process ended.
    sb.discarded = true;
    if (sb.exited) freeUid(sb);
    // The fds go when the thread is done with them: the caller knows it is.
    closeFd(sb.fdIn);
    closeFd(sb.fdOut);
  }

  /** Once a discarded sandbox's process has ended: nothing of its uid lives, and
   *  the uid may go to another sandbox. */
  function freeUid(sb) {
    if (sb.uid === null) return;
    releaseUid(sb.uid);
    poolUids.delete(sb.uid);
    sb.uid = null;
  }

  function onReady(slot, { sid, problem: why }) {
    const sb = slot.spare;
    if (!sb || sb.sid !== sid) return;
    clearTimeout(sb.bootTimer);
    if (why) {
      slot.spare = null;
      discard(sb);
      startFailed(slot, `${why}; ${sb.stderr.slice(-2000)}`);
      return;
    }
    slot.bootFailures = 0;
    slot.down = null;
    slot.retryMs = 0;
    clearTimeout(slot.retryTimer);
    sb.ready = true;
    sb.bootCpuMs = treeCpuMs(sb.child.pid);
    slot.resolveUp?.();
    pump();
  }

  /**
   * A sandbox of `slot` did not start. Started again at once, START_FAILURES times
   * in a row; then the slot is down and tries again after its backoff (a start that
   * fails doubles it). While every slot is down, the queue and new submissions get
   * a SandboxStartError saying when to try again. A start that works ends it.
   */
  function startFailed(slot, cause) {
    if (closed) return;
    stats.startFailures++;
    if (++slot.bootFailures < START_FAILURES && !slot.down) {
      spawnSandbox(slot);
      return;
    }
    slotDown(slot, cause, () => { if (!slot.spare) spawnSandbox(slot); });
  }

  /**
   * A grading thread of `slot` ended before it was up (its grader did not load): as
   * a failed sandbox start, started again at once START_FAILURES times in a row, then
   * the slot is down with the same backoff, so that submissions get a
   * SandboxStartError instead of waiting in the queue for a thread that never comes.
   */
  function threadFailed(slot, cause) {
    if (closed) return;
    stats.threadStartFailures++;
    if (++slot.threadFailures < START_FAILURES && !slot.down) {
      startThread(slot);
      return;
    }
    slotDown(slot, cause, () => { if (!slot.thread) startThread(slot); });
  }

  /** `slot` is down: `retry` runs after its backoff; while every slot is down the
   *  queue is refused with a SandboxStartError saying when to try again. */
  function slotDown(slot, cause, retry) {
    slot.retryMs = slot.retryMs ? Math.min(retryMs.maxMs, slot.retryMs * 2) : retryMs.firstMs;
    slot.down = { cause: String(cause).trim().slice(0, 2000), retryAt: Date.now() + slot.retryMs };
    clearTimeout(slot.retryTimer);
    slot.retryTimer = setTimeout(() => {
      slot.retryTimer = null;
      if (!closed) retry();
    }, slot.retryMs);
    slot.rejectUp?.(unavailable());
    if (slots.every((s) => s.down)) {
      const e = unavailable();
      for (const job of queue.splice(0)) job.reject(e);
    }
  }

  /** The error of a submission while every slot is down. */
  function unavailable() {
    const down = slots.filter((s) => s.down);
    const next = Math.min(...down.map((s) => s.down.retryAt));
    // Seconds to the next try, and one for that start to be ready.
    return new SandboxStartError(down[0]?.down.cause ?? 'unknown', Math.max(1, Math.ceil((next - Date.now()) / 1000) + 1));
  }

  // --- grading threads -----------------------------------------------------

  /** A fresh thread for `slot`; the spare sandbox is kept (it holds nothing of the
   *  thread's) and awaited by the new thread once it is up. */
  function replaceThread(slot) {
    const old = slot.thread;
    slot.thread = null;
    old?.terminate();
    startThread(slot);
  }

  function startThread(slot) {
    const dir = threadFault?.() ? path.join(tmp, 'no-such-grader') : graderDir;
    const thread = new Worker(THREAD, { workerData: { snapshotFile, graderDir: dir }, resourceLimits: { maxOldGenerationSizeMb: 1024 } });
    stats.threadsStarted++;
    slot.thread = thread;
    slot.threadUp = false;
    slot.threadError = null;
    thread.on('message', (m) => {
      if (slot.thread !== thread || !m) return;
      if (m.t === 'up') {
        slot.threadUp = true;
        slot.threadFailures = 0;
        slot.task = typeof m.task === 'string' ? m.task : null;
        if (slot.spare) { slot.spare.awaited = false; awaitSpare(slot); } else spawnSandbox(slot);
      } else if (m.t === 'ready') onReady(slot, m);
      else if (m.t === 'graded' && slot.job && m.id === slot.job.id) {
        if (m.storeSubmissions > 1) stats.storeReuses++;
        // Its store ran this submission's SQL: no other submission meets it.
        if (m.retire && !closed) replaceThread(slot);
        finish(slot, m);
      }
    });
    thread.on('error', (e) => { slot.threadError = String((e && e.stack) || e).slice(0, 2000); });
    thread.on('exit', () => {
      if (slot.thread !== thread) return;
      slot.thread = null;
      // A thread that died (a trap in the grader, out of memory) is not reused;
      // the submission it was grading is an error, the pool goes on.
      if (slot.job) finish(slot, { failure: slot.threadError || 'the grading thread ended' });
      if (slot.spare) { discard(slot.spare); slot.spare = null; }
      if (closed) return;
      if (slot.threadUp) startThread(slot);
      else threadFailed(slot, `the grading thread did not start: ${slot.threadError || 'it ended'}`);
    });
  }

  // --- jobs ----------------------------------------------------------------

  function pump() {
    for (const slot of slots) {
      if (!queue.length) return;
      if (!slot.job && slot.thread && slot.spare?.ready) start(slot, queue.shift());
    }
  }

  function start(slot, job) {
    const sb = slot.spare;
    slot.spare = null;
    slot.job = job;
    job.sandbox = sb;
    job.flag = new SharedArrayBuffer(4 * JOB.slots);
    const shared = new Int32Array(job.flag);
    job.startedAt = performance.now();
    const limitMs = job.limitS * 1000;
    const baseRss = treeRss(sb.child.pid);
    // The grading thread's CPU for this job (each courier statement runs there),
    // read from /proc as the sandbox's is.
    const threadCpu = () => (slot.task ? cpuMsOf(slot.task) : 0);
    const threadCpu0 = threadCpu();
    const end = (why) => {
      clearInterval(job.timer);
      Atomics.store(shared, JOB.ended, why);
      killTree(sb.child);
      // Its thread answers at once when the sandbox's pipe closes; one that does
      // not (inside one long statement) is replaced, and the job ends without it.
      job.grace = setTimeout(() => {
        if (slot.job !== job) return;
        stats.threadsHung++;
        replaceThread(slot);
        finish(slot, {});
      }, THREAD_GRACE_MS);
      job.grace.unref?.();
    };
    job.end = end;
    job.timer = setInterval(() => {
      // The sandbox's processes, walked once per tick for both watches.
      const tree = treeOf(sb.child.pid);
      const cpuMs = treeCpuMs(sb.child.pid, tree) - sb.bootCpuMs + threadCpu() - threadCpu0;
      if (cpuMs > limitMs) {
        stats.stoppedByCpu++;
        return end(ENDED.timeout);
      }
      if (performance.now() - job.startedAt > limitMs * wallFactor) {
        job.waited = true;
        stats.stoppedByClock++;
        return end(ENDED.timeout);
      }
      const rss = treeRss(sb.child.pid, tree);
      stats.peakRssMb = Math.max(stats.peakRssMb, rss);
      if (rss > baseRss + memoryMb + MEMORY_SLACK_MB) end(ENDED.memory);
    }, 50);
    slot.thread.postMessage({
      t: 'grade', id: job.id, lab: job.lab, seed: job.seed, hidden: job.hidden, formats: job.formats, source: job.source,
      functions: labInfo(job.lab).functions, limitS: job.limitS, fdIn: sb.fdIn, fdOut: sb.fdOut, flag: job.flag,
    });
    // The next submission's sandbox boots now, while this one runs.
    if (!closed) spawnSandbox(slot);
  }

  function finish(slot, m) {
    const job = slot.job;
    if (!job) return;
    slot.job = null;
    clearInterval(job.timer);
    clearTimeout(job.grace);
    const sb = job.sandbox;
    const why = Atomics.load(new Int32Array(job.flag), JOB.ended);
    if (!sb.exited) stats.runCpuMs += Math.max(0, treeCpuMs(sb.child.pid) - sb.bootCpuMs);
    stats.bootCpuMs += sb.bootCpuMs;
    stats.booted++;
    discard(sb);
    const durationMs = Math.round(performance.now() - job.startedAt);
    if (why === ENDED.aborted) job.reject(abortError());
    else {
      try {
        job.resolve(verdict(job, m, why, durationMs));
      } catch (e) {
        job.reject(e);
      }
    }
    stats.graded++;
    awaitSpare(slot);
    pump();
  }

  const limitMessage = (job) => (job.waited
    ? `Stopped: the run was still going after ${job.limitS * wallFactor} s (it may wait ${wallFactor} times its ${job.limitS} s limit of CPU time).`
    : `Stopped: the run took longer than the ${job.limitS} s limit of CPU time.`);

  /** The outputs a job asked for, from one report source. */
  function reportsFor(job, kind, message, durationMs) {
    const out = {};
    for (const format of job.formats) {
      out[format] = format === 'json'
        ? jsonText(jsonLine(JSON.parse(grader[kind](job.lab, job.seed, message, 'json', job.hidden?.statuses)), { durationMs }))
        : grader[kind](job.lab, job.seed, message, format, job.hidden?.statuses);
    }
    return out;
  }

  function verdict(job, m, why, durationMs) {
    const error = (message) => reportsFor(job, 'error_report', message, durationMs);
    if (m.failure) return error(`The grader failed on this submission, so it could not be graded: ${m.failure.split('\n')[0]}`);
    if (m.problem) {
      stats.interfered++;
      return error(`${INTERFERED}: ${m.problem}.`);
    }
    if (why === ENDED.memory) return error(`Stopped: the run used more than ${memoryMb} MB of memory, so it could not be graded.`);
    if (m.loadError != null) return error(m.loadError);
    if (why === ENDED.timeout && !m.outputs) return reportsFor(job, 'timeout_report', limitMessage(job), durationMs);
    if (m.closed && why !== ENDED.timeout) {
      return error('Your code ended the grader\'s Python process, so it could not be graded.');
    }
    if (!m.outputs) return error('The grader\'s sandbox ended before it answered, so the submission could not be graded.');
    // The grader's own reports; at the limit, the tests that finished before it
    // keep their results, as on the page.
    const out = { ...m.outputs };
    if (out.json !== undefined) out.json = jsonText(jsonLine(JSON.parse(out.json), { durationMs }));
    return out;
  }

  let nextId = 1;
  const ready = (async () => {
    grader = new (await loadGrader({ dir: graderDir })).Grader();
    await Promise.all([makeSnapshot(), spawner.ready]);
    for (let i = 0; i < jobs; i++) {
      const slot = { thread: null, spare: null, job: null, bootFailures: 0, threadFailures: 0, down: null, retryMs: 0, retryTimer: null };
      // Resolved by its first ready sandbox, rejected when sandboxes fail to start.
      slot.up = new Promise((resolve, reject) => { slot.resolveUp = resolve; slot.rejectUp = reject; });
      slots.push(slot);
      startThread(slot);
    }
    await Promise.all(slots.map((s) => s.up));
  })();
  ready.catch(() => {});

  return {
    ready,
    stats,
    isolated: sandbox,
    /** Grades one submission; resolves to its report in `format` (json: the CLI's line, file null). */
    async grade({ lab, source, seed, format = 'json', signal, hidden }) {
      return (await this.gradeMany({ lab, source, seed, formats: [format], signal, hidden }))[format];
    },
    /**
     * Like grade, in several formats at once: resolves to { [format]: text }.
     * `signal` (an AbortSignal) withdraws the submission: out of the queue, or its
     * sandbox killed at once; the promise then rejects with an AbortError.
     */
    async gradeMany({ lab, source, seed, formats = ['json'], signal, hidden }) {
      if (closed) throw new Error('the grading pool is closed');
      for (const f of formats) if (!FORMATS.includes(f)) throw new Error(`unknown format ${f}: use ${FORMATS.join(', ')}`);
      await ready;
      lab ??= firstLab(grader);
      if (signal?.aborted) throw abortError();
      const info = labInfo(lab);
      seed = seed === undefined || seed === null ? info.default_seed : seed;
      const limitS = timeoutS ?? info.time_limit_s * CLI_LIMIT_FACTOR;
      const pre = precheck(source);
      if (pre) return this.errorReports({ lab, seed, message: pre, formats, hidden });
      if (slots.every((s) => s.down)) throw unavailable();
      return new Promise((resolve, reject) => {
        const job = { id: nextId++, lab, source: String(source), seed, hidden, formats, limitS, resolve, reject };
        if (signal) {
          const onAbort = () => {
            const i = queue.indexOf(job);
            if (i >= 0) {
              queue.splice(i, 1);
              reject(abortError());
            } else if (job.end) job.end(ENDED.aborted);
          };
          signal.addEventListener('abort', onAbort, { once: true });
          const done = () => signal.removeEventListener('abort', onAbort);
          job.resolve = (v) => { done(); resolve(v); };
          job.reject = (e) => { done(); reject(e); };
        }
        queue.push(job);
        pump();
      });
    },
    /** The reports for a submission that cannot be graded at all (no sandbox needed). */
    async errorReports({ lab, seed, message, formats = ['json'], hidden }) {
      await ready;
      lab ??= firstLab(grader);
      seed = seed === undefined || seed === null ? labInfo(lab).default_seed : seed;
      return reportsFor({ lab, seed, formats, hidden }, 'error_report', message, 0);
    },
    queued: () => queue.length + slots.filter((s) => s.job).length,
    /** The uids this pool's sandboxes hold now (under root; [] otherwise). */
    sandboxUids: () => [...poolUids],
    /** Whether every slot is down (its sandboxes fail to start; retried with backoff). */
    unavailable: () => slots.length > 0 && slots.every((s) => s.down),
    /** The spawner's CPU so far, in ms: the coordinator's share that is not its own process's. */
    spawnerCpuMs: () => spawner.cpuMs(),
    async close() {
      closed = true;
      for (const job of queue.splice(0)) job.reject(new Error('the grading pool was closed'));
      // Kill first: a thread blocked on a sandbox's pipe returns when it closes.
      for (const slot of slots) {
        slot.job?.end?.(ENDED.aborted);
        if (slot.spare) killTree(slot.spare.child);
      }
      await Promise.all(slots.map((s) => s.thread?.terminate()));
      for (const slot of slots) {
        clearTimeout(slot.retryTimer);
        slot.thread = null;
        if (slot.spare) { discard(slot.spare); slot.spare = null; }
        if (slot.job) { discard(slot.job.sandbox); slot.job.reject(new Error('the grading pool was closed')); slot.job = null; }
      }
      // Each sandbox's process reaps what it started (killTree), then the spawner it.
      for (let i = 0; i < 150 && running.size; i++) await new Promise((r) => setTimeout(r, 20));
      await spawner.close();
      // No process of any of its sandboxes' uids is left (the spawner has reaped its
      // children): each killed again, then free.
      for (const uid of poolUids) killUid(uid);
      for (let i = 0; i < 100 && [...poolUids].some(uidHasProcess); i++) await new Promise((r) => setTimeout(r, 20));
      for (const uid of poolUids) releaseUid(uid);
      poolUids.clear();
      fs.rmSync(tmp, { recursive: true, force: true });
    },
  };
}
