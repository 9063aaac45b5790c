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
//   process.stdout.write(`${jsonText(line)}\n`);   // json: the line as an object; each caller serialises it
//   await pool.close();
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Worker } from 'node:worker_threads';
import { ENDED, JOB } from './frames.mjs';
import { ENGINE_FORMATS as FORMATS } from './formats.mjs';
import { isRoot, jailProblem, killUid, SANDBOX_UID_BASE, uidHasProcess, UIDS_PER_OWNER } from './jail.mjs';
import { jsonLine } from './output.mjs';
import { cpuMsOf, treeCpuMs, treeOf, treeRss } from './procfs.mjs';
import { labsFileOf, runsFileOf } from './python.mjs';
import {
  codeCacheName, fits, KEY_FILE, labsOf, makeCodeCacheIn, makeSnapshotIn, nativesFit, SNAPSHOT_DIR, SNAPSHOT_NAME, snapshotFiles, snapshotKey,
} from './snapshot.mjs';
import { SANDBOX, sandboxCommand, tiersUp, zygoteCommand } from './sandbox_command.mjs';
import { killTree, live, releaseUid, takeUid } from './sandbox_procs.mjs';
import { closeFd, spawnerOf } from './spawner_client.mjs';
import { forkServerOf, NATIVES } from './fork_server.mjs';
import { precheck } from './submissions.mjs';
import { graderFiles, loadGrader } from '../host/node_host.mjs';
import { firstLab } from '../host/engine.mjs';

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
/** How many times a pool starts its fork server again after it stopped serving. */
export const FORK_SERVER_RESTARTS = 5;
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
/** Whom a report is for (the engine's `audience`): the learner (every caller but one,
 *  the default) or the staff (./lab grade's own json and text, which carry each hidden
 *  test's message; a platform's format is the learner's whatever is asked). */
export const AUDIENCES = Object.freeze(['learner', 'staff']);

/** The formats the engine renders: formats.mjs, the one list of report formats. */
export { ENGINE_FORMATS as FORMATS } from './formats.mjs';
/**
 * What one slot's grading thread may hold (issue 38): the JavaScript heap of the
 * thread (its isolate), and the WebAssembly memory of the courier store's
 * interpreter in it (SQLite's heap and the database have caps of their own inside:
 * src/courier/db_store.py HEAP_CAP_BYTES, TEMP_STORE, DB_PAGES_CAP). ./lab bench
 * prints what a slot reached with a query past the store's memory.
 */
export const THREAD_HEAP_MB = 1024;
export const STORE_MEMORY_MB = 1024;
export const INTERFERED = 'The submission interfered with the grader, so it could not be graded';

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
 * @param {boolean} [o.fork]     start a fork server for the sandboxes (fork_server.mjs; default
 *                               true): worth its own start (about 0.4 s of CPU, once) only
 *                               when the pool grades more files than it has slots
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
 * @param {string} [o.lab]     the lab most of its submissions will be (./lab grade's --lab):
 *                               its sandboxes start with that lab's flags (tiersUp), and
 *                               its grading threads load that lab's store when it has one
 *                               as they start (else when a submission of it comes)
 * @param {string} [o.snapshotDir] the build's interpreter snapshot (default www/snapshot,
 *                               snapshot.mjs): used when it is that grader's, else one is
 *                               made for this pool, with a warning
 */
export function createGradingPool({ jobs = 1, timeoutS, memoryMb = 512, sandbox = true, sandboxScript = SANDBOX, onWarning, bootLimitS = BOOT_LIMIT_S, wallFactor = WALL_FACTOR,
  retryMs = RETRY_MS, startFault = null, threadFault = null, pkgDir = null, snapshotDir = SNAPSHOT_DIR, lab: poolLab = null, fork = true } = {}) {
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
    // forked: sandboxes the fork server started (the rest of `spawned` were spawned);
    // forkServer: '' while it serves, else why it does not (not yet up, none here).
    forked: 0, forkServer: 'not started', forkServerRestarts: 0,
  };

  const problem = sandbox ? jailProblem() : '';
  if (problem) {
    throw new Error(`the grading sandbox does not work here: ${problem}. Install bubblewrap (Debian's \`bubblewrap\`) `
      + 'and allow unprivileged user namespaces, or pass --no-sandbox to grade without it (see www/grader/README.md)');
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
      : `--no-sandbox: each submission still gets a fresh process, but no namespaces, ${without ? 'no rlimits, ' : ''}and it runs as this same user (uid ${process.getuid?.()}), beside the grader's files and processes (see www/grader/README.md)`);
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
  const snapshotFile = path.join(tmp, SNAPSHOT_NAME);
  // A sandbox's code cache, for its flags: with the optimizing tier or not (tiersUp).
  const codeCacheFileOf = (tierUp) => (sandboxScript === SANDBOX ? path.join(tmp, codeCacheName(jobs, tierUp)) : null);
  const sharedCores = jobs > 1;
  // Each sandbox's command line is its own (its uid, its flags): made at each start, from these.
  const commandOptions = { script: sandboxScript, memoryMb, snapshotFile, sharedCores, jailed: sandbox };
  // The uids this pool's sandboxes hold (all of them free again once it is closed),
  // and its sandboxes' processes not ended yet.
  const poolUids = new Set();
  // The fork server's own uid (its zygote's; no learner code runs as it), freed with the pool.
  const serverUids = new Set();
  const running = new Set();
  // The fork server (fork_server.mjs): started once the snapshot is in place, when
  // the build made its natives and the sandboxes are jailed; its sandboxes serve
  // the labs that do not tier up (a long run such as the courier lab's pays its
  // start many times over, and its optimizing tier needs V8's helper threads).
  let natives = false;
  let forkServer = null;
  function startForkServer() {
    // Only under root, where each forked sandbox gets a uid of its own: forked
    // sandboxes share their zygote's PID namespace, so with one uid for all they
    // could signal each other (spawned ones each have a namespace of their own).
    if (!fork || !natives || !sandbox || sandboxScript !== SANDBOX || closed || !isRoot()) return;
    // The root of its user namespace: a uid of this process's block, its own for as
    // long as the pool lives; the block's others are its children's, as the pool
    // gives them (fork_server.mjs).
    const root = takeUid();
    if (root === null) return;
    serverUids.add(root);
    const block = { root, base: SANDBOX_UID_BASE + process.pid * UIDS_PER_OWNER, count: UIDS_PER_OWNER };
    const command = zygoteCommand({
      memoryMb, snapshotFile, codeCacheFile: null, sharedCores, forkerFile: path.join(tmp, NATIVES.forker),
      pipesDir: spawner.pipesDir,
      userBlock: { nsrun: path.join(tmp, NATIVES.nsrun), ...block },
    });
    // A zygote that dies takes its children with it: a ready spare it forked is
    // replaced now by a spawned one, never handed a submission.
    // Another is started a second later, FORK_SERVER_RESTARTS times at most; meanwhile,
    // and after, sandboxes are spawned.
    const onDown = (old, why) => {
      stats.forkServer = why;
      for (const slot of slots) {
        const sb = slot.spare;
        if (sb?.forked && !slot.job && !closed) {
          slot.spare = null;
          discard(sb);
          spawnSandbox(slot);
        }
      }
      old.close().then(() => {
        for (const uid of serverUids) releaseUid(uid);
        serverUids.clear();
        if (closed || stats.forkServerRestarts >= FORK_SERVER_RESTARTS) return;
        stats.forkServerRestarts++;
        setTimeout(() => { if (!closed && forkServer === old) startForkServer(); }, 1000).unref?.();
      });
    };
    const server = forkServerOf({ spawner, command, block, onDown: (why) => onDown(server, why) });
    forkServer = server;
    stats.forkServer = 'starting';
    server.ready.then((ok) => { if (forkServer === server) stats.forkServer = ok ? '' : server.why; });
  }

  // The files every sandbox reads, read-only to them: the interpreter snapshot it
  // restores from (with its index of non-zero pages and the labs' learner sides),
  // and the code cache of Pyodide's JS for a sandbox's flags. The build's
  // (snapshot.mjs, made once per build) when it is this pinned grader's: copied into
  // the pool's folder (a build made while the pool runs changes nothing it restores);
  // else made for this run, as trusted steps (no learner code), and said. The
  // grading threads restore the same snapshot.
  async function makeSnapshot() {
    if (sandboxScript !== SANDBOX) {
      // A test's sandbox program: the files it may read exist, empty.
      fs.writeFileSync(labsFileOf(snapshotFile), JSON.stringify(labsOf(grader)), { mode: 0o444 });
      for (const f of [snapshotFile, runsFileOf(snapshotFile)]) fs.writeFileSync(f, '');
      return;
    }
    const keyText = () => {
      try { return fs.readFileSync(path.join(snapshotDir, KEY_FILE), 'utf8'); } catch { return null; }
    };
    const checked = keyText();
    const key = snapshotKey(graderDir);
    const fit = fits(snapshotDir, graderDir, jobs, false, key);
    // Copied, and still the folder whose key was checked (a build moves a new one
    // into place whole): else made here instead.
    const copied = (names) => {
      try {
        for (const [from, to] of names) {
          fs.copyFileSync(path.join(snapshotDir, from), to);
          fs.chmodSync(to, 0o444);
        }
        return keyText() === checked;
      } catch {
        return false;
      }
    };
    let snapshotMade = false;
    if (!(fit.snapshot && copied(snapshotFiles().map((f) => [f, path.join(tmp, f)])))) {
      warn(`${fit.why || 'the build\'s snapshot could not be read'}: made again for this run (./lab build makes it once)`);
      await makeSnapshotIn(tmp, labsOf(grader));
      snapshotMade = true;
    }
    natives = nativesFit(snapshotDir) && copied(Object.values(NATIVES).map((f) => [f, path.join(tmp, f)]));
    if (natives) fs.chmodSync(path.join(tmp, NATIVES.nsrun), 0o500);
    await Promise.all([false, true].map(async (tierUp) => {
      const name = codeCacheName(jobs, tierUp);
      if (snapshotMade || !fits(snapshotDir, graderDir, jobs, tierUp, key).codeCache || !copied([[name, path.join(tmp, name)]])) {
        await makeCodeCacheIn(tmp, jobs, tierUp);
      }
    }));
  }

  /** The pool's lab (`lab`) as the registry describes it; null when none was given
   *  or the registry has no such lab (its submissions are refused as before). */
  function poolLabInfo() {
    try {
      return labInfo(poolLab ?? firstLab(grader));
    } catch {
      return null;
    }
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
    let tierUp = true;
    if (startFault?.()) command = { cmd: '/nonexistent/delivery-lab-start-fault', args: [] };
    else if (isRoot() && (uid = takeUid()) === null) command = { cmd: '/nonexistent/no-free-sandbox-uid', args: [] };
    else {
      // Its flags for the lab it will most likely grade: the next queued submission's,
      // else the one running's, else the pool's (`lab`).
      const next = queue[0]?.lab ?? slot.job?.lab;
      tierUp = tiersUp(next ? labInfo(next) : poolLabInfo());
      command = sandboxCommand({ ...commandOptions, tierUp, codeCacheFile: codeCacheFileOf(tierUp), uid });
    }
    if (uid !== null) poolUids.add(uid);
    const fork = forkServer?.up() && !command.cmd.startsWith('/nonexistent/') && !tierUp;
    if (fork) stats.forked++;
    const { child, fdIn, fdOut } = fork ? forkServer.start(uid) : spawner.start(command.cmd, command.args, uid);
    const sb = { sid: nextSid++, uid, child, fdIn, fdOut, ready: false, stderr: '', bootCpuMs: 0, forked: Boolean(fork) };
    // A forked sandbox is the process itself (its jail is its zygote's): killed at once.
    child.jailed = sandbox && !fork;
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
    const thread = new Worker(THREAD, { workerData: { snapshotFile, graderDir: dir, storeMemoryMb: STORE_MEMORY_MB }, resourceLimits: { maxOldGenerationSizeMb: THREAD_HEAP_MB } });
    stats.threadsStarted++;
    slot.thread = thread;
    slot.threadUp = false;
    slot.threadError = null;
    // Its courier store (an interpreter of its own) is loaded when a submission of a
    // lab with a store is to come: asked (`load-stores`) before one is handed over,
    // so the load's CPU is no submission's.
    slot.storesUp = false;
    slot.storesAsked = false;
    thread.on('message', (m) => {
      if (slot.thread !== thread || !m) return;
      if (m.t === 'up') {
        slot.threadUp = true;
        slot.task = typeof m.task === 'string' ? m.task : null;
        // A thread replacing one that graded with its store: the next is likely such a
        // submission too. Up once its store is, then (a store that never loads is a
        // thread that never starts).
        if (slot.wantsStores || queue.some(needsStore) || poolLabInfo()?.store) askStores(slot);
        else slot.threadFailures = 0;
        if (slot.spare) { slot.spare.awaited = false; awaitSpare(slot); } else spawnSandbox(slot);
      } else if (m.t === 'stores-up') {
        slot.storesUp = true;
        slot.threadFailures = 0;
        pump();
      } else if (m.t === 'ready') onReady(slot, m);
      else if (m.t === 'graded' && slot.job && m.id === slot.job.id) {
        if (m.storeSubmissions > 1) stats.storeReuses++;
        // Its store ran this submission's SQL: no other submission meets it.
        slot.wantsStores = Boolean(m.retire);
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
      if (slot.threadUp && !(slot.storesAsked && !slot.storesUp)) startThread(slot);
      else threadFailed(slot, `the grading thread did not start: ${slot.threadError || 'it ended'}`);
    });
  }

  // --- jobs ----------------------------------------------------------------

  const needsStore = (job) => Boolean(labInfo(job.lab).store);
  function askStores(slot) {
    if (slot.storesAsked || !slot.thread) return;
    slot.storesAsked = true;
    slot.thread.postMessage({ t: 'load-stores' });
  }

  function pump() {
    for (const slot of slots) {
      if (!queue.length) return;
      if (slot.job || !slot.thread || !slot.threadUp) continue;
      if (needsStore(queue[0]) && !slot.storesUp) {
        askStores(slot);
        continue;
      }
      if (slot.spare?.ready) start(slot, queue.shift());
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
      t: 'grade', id: job.id, lab: job.lab, seed: job.seed, hidden: job.hidden, audience: job.audience, formats: job.formats, source: job.source,
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

  /** The outputs a job asked for, from one report source: json as the CLI's line
   *  (an object, output.mjs jsonLine), the other formats as the engine's text. */
  function reportsFor(job, kind, message, durationMs) {
    const out = {};
    for (const format of job.formats) {
      out[format] = format === 'json'
        ? jsonLine(JSON.parse(grader[kind](job.lab, job.seed, message, 'json', job.hidden?.statuses)), { durationMs, staff: job.audience === 'staff' })
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
    if (out.json !== undefined) out.json = jsonLine(JSON.parse(out.json), { durationMs, staff: job.audience === 'staff' });
    return out;
  }

  let nextId = 1;
  const ready = (async () => {
    grader = new (await loadGrader({ dir: graderDir })).Grader();
    await Promise.all([makeSnapshot(), spawner.ready]);
    startForkServer();
    for (let i = 0; i < jobs; i++) {
      const slot = { thread: null, spare: null, job: null, bootFailures: 0, threadFailures: 0, down: null, retryMs: 0, retryTimer: null };
      // Resolved by its first ready sandbox, rejected when sandboxes fail to start.
      slot.up = new Promise((resolve, reject) => { slot.resolveUp = resolve; slot.rejectUp = reject; });
      slots.push(slot);
      startThread(slot);
      // Its first sandbox starts beside the thread (awaited once the thread is up).
      spawnSandbox(slot);
    }
    await Promise.all(slots.map((s) => s.up));
  })();
  ready.catch(() => {});

  return {
    ready,
    stats,
    isolated: sandbox,
    /** Grades one submission; resolves to its report in `format`: json, the CLI's line as an
     *  object (output.mjs jsonLine, file null; serialise it with output.mjs jsonText, which
     *  keeps it within LINE_CAP_BYTES as sent), any other format the engine's text. */
    async grade({ lab, source, seed, format = 'json', signal, hidden, audience }) {
      return (await this.gradeMany({ lab, source, seed, formats: [format], signal, hidden, audience }))[format];
    },
    /**
     * Like grade, in several formats at once: resolves to { [format]: report } (json's
     * the line object, the others' text).
     * `signal` (an AbortSignal) withdraws the submission: out of the queue, or its
     * sandbox killed at once; the promise then rejects with an AbortError.
     */
    async gradeMany({ lab, source, seed, formats = ['json'], signal, hidden, audience = 'learner' }) {
      if (closed) throw new Error('the grading pool is closed');
      for (const f of formats) if (!FORMATS.includes(f)) throw new Error(`unknown format ${f}: use ${FORMATS.join(', ')}`);
      if (!AUDIENCES.includes(audience)) throw new Error(`unknown audience ${audience}: use ${AUDIENCES.join(' or ')}`);
      await ready;
      lab ??= firstLab(grader);
      if (signal?.aborted) throw abortError();
      const info = labInfo(lab);
      seed = seed === undefined || seed === null ? info.default_seed : seed;
      const limitS = timeoutS ?? info.time_limit_s * CLI_LIMIT_FACTOR;
      const pre = precheck(source);
      if (pre) return this.errorReports({ lab, seed, message: pre, formats, hidden, audience });
      if (slots.every((s) => s.down)) throw unavailable();
      return new Promise((resolve, reject) => {
        const job = { id: nextId++, lab, source: String(source), seed, hidden, audience, formats, limitS, resolve, reject };
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
    async errorReports({ lab, seed, message, formats = ['json'], hidden, audience = 'learner' }) {
      await ready;
      lab ??= firstLab(grader);
      seed = seed === undefined || seed === null ? labInfo(lab).default_seed : seed;
      return reportsFor({ lab, seed, formats, hidden, audience }, 'error_report', message, 0);
    },
    queued: () => queue.length + slots.filter((s) => s.job).length,
    /** The uids this pool's sandboxes hold now (under root; [] otherwise). */
    sandboxUids: () => [...poolUids],
    /** Whether every slot is down (its sandboxes fail to start; retried with backoff). */
    unavailable: () => slots.length > 0 && slots.every((s) => s.down),
    /** The spawner's CPU so far, in ms: the coordinator's share that is not its own process's. */
    spawnerCpuMs: () => spawner.cpuMs(),
    /** The fork server's zygote's CPU so far, in ms (its start included): the coordinator's share too. */
    forkServerCpuMs: () => forkServer?.cpuMs() ?? 0,
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
      await forkServer?.close();
      await spawner.close();
      // No process of any of its sandboxes' uids is left (the spawner has reaped its
      // children): each killed again, then free.
      const uids = [...poolUids, ...serverUids];
      for (const uid of uids) killUid(uid);
      for (let i = 0; i < 100 && uids.some(uidHasProcess); i++) await new Promise((r) => setTimeout(r, 20));
      for (const uid of uids) releaseUid(uid);
      poolUids.clear();
      serverUids.clear();
      fs.rmSync(tmp, { recursive: true, force: true });
    },
  };
}
