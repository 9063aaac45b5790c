// A fork server for the pool's sandboxes (issue 39, item 3): one process of the
// sandbox's program, restored once (the zygote: sandbox.mjs --zygote), forks a fresh
// sandbox per submission instead of a new Node starting and restoring Pyodide. A
// spawned sandbox's start is most of what a lab-1 file costs (about 250 ms of CPU to
// `loaded`); a forked one's is a few ms (bench/cli.mjs prints it per submission).
//
// Every submission still gets a process of its own, used once and killed, with
// nothing of another submission in it: the zygote never runs learner code, and each
// child is a copy of the zygote as it was after its restore. The walls (jail.mjs) are
// the zygote's, made once: bubblewrap's namespaces and read-only view, the rlimits,
// Node's permission model; under root the zygote is root of a user namespace mapping
// only the pool's block of sandbox uids (nsrun.c), and each child drops to a uid of
// its own from that block before any learner code runs (forker.c: no capabilities,
// no new privileges, not dumpable). So, as for a spawned sandbox, no two live
// sandboxes share a uid, and none can signal, trace or read the zygote.
//
// The coordinator's side: the zygote is started by the spawner like a sandbox; its
// pipes carry `fork` frames (frames.mjs) and its answers, read without blocking the
// main thread. `start(uid)` answers at once, as the spawner's does, with a child
// object whose pid comes with the zygote's answer.
import { spawnSync } from 'node:child_process';
import crypto from 'node:crypto';
import { EventEmitter } from 'node:events';
import fs from 'node:fs';
import path from 'node:path';
import { encodeFrame, FRAME_CAP_BYTES } from './frames.mjs';
import { RLIMITS } from './jail.mjs';
import { childrenOf, cpuMsOf, descendants, startTimeOf } from './procfs.mjs';
import { closeFd, openEnds } from './spawner_client.mjs';

/** How long a zygote may take to say `ready` (a sandbox's BOOT_LIMIT_S, in ms). */
export const ZYGOTE_BOOT_LIMIT_MS = 30_000;
/** How long a closed zygote has to end by itself, then once killed. */
const CLOSE_WAIT_MS = 1000;
/** How often a forked sandbox is looked for in /proc, once its run may be over. */
const EXIT_POLL_MS = 50;

/** The host's pid of `nsPid`, a child of `parent` in its PID namespace; null when none. */
function hostPidOf(parent, nsPid) {
  for (const pid of childrenOf(parent)) {
    try {
      const m = /^NSpid:\s+(.*)$/m.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
      if (m && Number(m[1].trim().split(/\s+/).pop()) === nsPid) return pid;
    } catch { /* gone */ }
  }
  return null;
}

/** The zygote's own node process: the one running --zygote under what the spawner started. */
function zygoteNode(rootPid) {
  const queue = [rootPid];
  while (queue.length) {
    const pid = queue.shift();
    try {
      const argv = fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
      if (argv[0] === process.execPath && argv.includes('--zygote')) return pid;
    } catch { /* gone */ }
    queue.push(...childrenOf(pid));
  }
  return null;
}

/** The uid of its user namespace (nsrun.c's map) that is the host's `uid`, or -1 for
 *  none (no block, not root); throws for a uid the namespace does not map. */
export function innerUid(block, uid) {
  if (block === null || uid === null) return -1;
  const at = uid - block.base;
  if (!Number.isInteger(uid) || uid === block.root || at < 0 || at >= block.count) throw new Error(`uid ${uid} is not one of the fork server's`);
  return 1 + at;
}

/** A forked sandbox as the pool sees it: like the spawner's (spawner_client.mjs). */
class Forked extends EventEmitter {
  pid = undefined;
  exitCode = null;
  signalCode = null;
  jailed = false;   // the process itself, no bubblewrap of its own: killTree kills it at once
  stderr = new EventEmitter();
  startTime = null;
  pendingKill = null;
  kill(signal) {
    if (this.pid === undefined) {
      this.pendingKill = signal;
      return;
    }
    // Only the process it was: a pid reused after it ended is someone else's.
    if (this.pid > 0 && this.startTime !== null && this.exitCode === null && this.signalCode === null
      && startTimeOf(this.pid) === this.startTime) {
      try { process.kill(this.pid, signal); } catch { /* gone */ }
    }
  }
  ended(signal = 'SIGKILL') {
    if (this.exitCode !== null || this.signalCode !== null) return;
    clearInterval(this.poll);
    this.signalCode = signal;
    this.emit('exit', null, signal);
  }
}

/**
 * A fork server started by `spawner` (spawner_client.mjs) with `command`
 * (sandbox_command.mjs zygoteCommand). `block`: { root, base, count }, its user
 * namespace's root and the pool's block of uids it maps (nsrun.c), from which the
 * pool gives each child its own; or null (not root: every child keeps the zygote's).
 * `onDown(why)`: it stopped serving (its children die with it). Returns { ready (a promise: true
 * once it serves, false if it never will), up(), start(uid) -> { child, fdIn, fdOut },
 * cpuMs(), why }.
 */
export function forkServerOf({ spawner, command, block = null, onDown = () => {} }) {
  const { child: zygote, fdIn, fdOut } = spawner.start(command.cmd, command.args, command.uid ?? null);
  const pending = [];   // callbacks for the zygote's answers, in order
  let up = false;
  let node = null;      // the zygote's node process (host pid)
  let why = '';
  let resolveReady;
  const ready = new Promise((resolve) => { resolveReady = resolve; });
  const down = (reason) => {
    if (!up && why) return;
    const wasUp = up;
    up = false;
    why ||= reason;
    resolveReady(false);
    if (wasUp) onDown(why);
    for (const p of pending.splice(0)) p({ t: 'failed', error: why });
    closeFd(fdIn);
    closeFd(fdOut);
  };
  zygote.on('exit', () => down(`the fork server ended ${zygote.stderr.text ? `(${zygote.stderr.text.slice(-500)})` : ''}`.trim()));
  zygote.stderr.text = '';
  zygote.stderr.on('data', (d) => { if (zygote.stderr.text.length < 4000) zygote.stderr.text += d; });
  const bootTimer = setTimeout(() => { if (!up) { zygote.kill('SIGKILL'); down('the fork server did not start in time'); } }, ZYGOTE_BOOT_LIMIT_MS);
  bootTimer.unref?.();

  // Its answers, read off the main thread (the threadpool's blocking read), one
  // frame after another; anything but a frame ends it.
  const head = Buffer.alloc(4);
  function readFully(buf, n, then) {
    let off = 0;
    const step = () => fs.read(fdIn, buf, off, n - off, null, (err, r) => {
      if (err || r === 0) return down(err ? `its pipe failed (${err.code})` : 'it closed its pipe');
      off += r;
      if (off < n) step(); else then();
    });
    step();
  }
  function next() {
    readFully(head, 4, () => {
      const n = head.readUInt32LE(0);
      if (n > FRAME_CAP_BYTES) return down('it sent an oversized frame');
      const body = Buffer.alloc(n);
      readFully(body, n, () => {
        let m;
        try { m = JSON.parse(body.toString('utf8')); } catch { return down('it sent a frame that is not JSON'); }
        if (!up) {
          if (m?.t !== 'ready') return down('it did not start');
          clearTimeout(bootTimer);
          node = zygoteNode(zygote.pid);
          if (!node) return down('its process was not found');
          up = true;
          resolveReady(true);
        } else {
          const p = pending.shift();
          if (!p) return down('it answered what was not asked');
          p(m);
        }
        if (up) next();
      });
    });
  }
  next();

  /** A sandbox forked for `uid` (the pool's, from its block; null: the zygote's own). */
  function start(uid) {
    if (!up) throw new Error(`the fork server is down: ${why}`);
    const [downFifo, upFifo] = spawner.pair();
    const child = new Forked();
    const ends = openEnds(downFifo, upFifo);
    const { fdIn: fdInChild, fdOut: fdOutChild, hold } = ends;
    try {
      // The zygote opens the child's ends as itself.
      if (block !== null) for (const f of [downFifo, upFifo]) fs.chownSync(f, block.root, block.root);
      const inner = innerUid(block, uid);
      fs.writeSync(fdOut, encodeFrame({ t: 'fork', uid: inner, down: downFifo, up: upFifo, cpu_s: RLIMITS.cpu }));
    } catch (e) {
      ends.discard();
      throw e;
    }
    pending.push((m) => {
      for (const f of [downFifo, upFifo]) fs.rmSync(f, { force: true });
      const pid = m.t === 'forked' && Number.isInteger(m.pid) ? hostPidOf(node, m.pid) : null;
      const startTime = pid === null ? null : startTimeOf(pid);
      // Once it has its ends, ours of `up` is the only other writer: closed, so that
      // a read sees the end of the pipe when the child is gone.
      closeFd(hold);
      if (startTime === null) {
        child.emit('error', new Error(m.t === 'failed' ? String(m.error) : 'the forked sandbox was not found'));
        child.pid = -1;
        child.ended();
        return;
      }
      child.pid = pid;
      child.startTime = startTime;
      child.poll = setInterval(() => { if (startTimeOf(pid) !== startTime) child.ended(); }, EXIT_POLL_MS);
      child.poll.unref?.();
      if (child.pendingKill) child.kill(child.pendingKill);
    });
    return { child, fdIn: fdInChild, fdOut: fdOutChild };
  }

  return {
    ready,
    up: () => up,
    get why() { return why; },
    start,
    /** The zygote's CPU so far, in ms (its start is the pool's, not a submission's). */
    cpuMs: () => (node === null ? 0 : cpuMsOf(node)),
    zygote,
    /** Ends the zygote the way it ends itself (its pipes closed: it exits, and its
     *  jail unwinds and reaps, the last of it by nsrun, a subreaper), so that no
     *  zombie is left to an init that may not reap. One that has not ended within
     *  CLOSE_WAIT_MS (still starting, say) is killed: every process under the one
     *  the spawner started, deepest first, then that one. */
    async close() {
      up = false;
      why ||= 'closed';
      closeFd(fdIn);
      closeFd(fdOut);
      const ended = () => zygote.exitCode !== null || zygote.signalCode !== null;
      const exited = (ms) => (ended() ? Promise.resolve(true) : new Promise((resolve) => {
        const t = setTimeout(() => resolve(false), ms);
        zygote.once('exit', () => { clearTimeout(t); resolve(true); });
      }));
      if (await exited(CLOSE_WAIT_MS)) return;
      if (zygote.pid !== undefined) {
        for (const pid of descendants(zygote.pid)) {
          try { process.kill(pid, 'SIGKILL'); } catch { /* gone */ }
        }
      }
      if (!(await exited(CLOSE_WAIT_MS))) zygote.kill('SIGKILL');
    },
  };
}

// --- its two native pieces, made once per build ------------------------------

const FORKER_DIR = new URL('forker/', import.meta.url).pathname;
/** The files `./lab build` makes beside the snapshot (snapshot.mjs), by name. */
export const NATIVES = Object.freeze({ forker: 'forker.node', nsrun: 'nsrun' });
const SOURCES = { forker: 'forker.c', nsrun: 'nsrun.c' };

/** What the natives are made from: their sources and this Node (its addon ABI and headers). */
export function nativesKey() {
  const h = crypto.createHash('sha256').update(`${process.version}\0`);
  for (const f of Object.values(SOURCES)) h.update(fs.readFileSync(path.join(FORKER_DIR, f))).update('\0');
  return h.digest('hex');
}

/**
 * Compiles the natives into `dir` with the system's C compiler (cc: cargo links
 * with it, so a machine that builds the grader has one). '' when made, else why not;
 * a pool without them spawns every sandbox, as before.
 */
export function buildNatives(dir) {
  const include = path.join(path.dirname(process.execPath), '..', 'include', 'node');
  if (!fs.existsSync(path.join(include, 'node_api.h'))) return `Node's headers are not beside it (${include})`;
  const runs = [
    ['-shared', '-fPIC', '-O2', `-I${include}`, path.join(FORKER_DIR, SOURCES.forker), '-o', path.join(dir, NATIVES.forker)],
    ['-O2', path.join(FORKER_DIR, SOURCES.nsrun), '-o', path.join(dir, NATIVES.nsrun)],
  ];
  for (const args of runs) {
    const r = spawnSync('cc', args, { encoding: 'utf8' });
    if (r.status !== 0) return `cc failed: ${String(r.stderr || r.error).slice(0, 500)}`;
  }
  // Read-only, as every file beside the snapshot.
  fs.chmodSync(path.join(dir, NATIVES.forker), 0o444);
  fs.chmodSync(path.join(dir, NATIVES.nsrun), 0o555);
  return '';
}
