// The coordinator's side of the spawner (spawner.mjs): the one process that starts
// every sandbox, and the FIFO pairs each sandbox talks through (frames.mjs).
import { spawn, spawnSync } from 'node:child_process';
import { EventEmitter } from 'node:events';
import fs from 'node:fs';
import path from 'node:path';
import readline from 'node:readline';
import { fileURLToPath } from 'node:url';
import { cpuMsOf } from './procfs.mjs';
import { killTree } from './sandbox_procs.mjs';

const SPAWNER = fileURLToPath(new URL('spawner.mjs', import.meta.url));

/** An fd closed, if it is still open. */
export const closeFd = (fd) => { try { fs.closeSync(fd); } catch { /* closed */ } };

// FIFO pairs the spawner makes ahead, this many at a time: each mkfifo is a process.
const FIFO_BATCH = 8;

/**
 * The coordinator's ends of a FIFO pair, `down` to write and `up` to read (a
 * spawned sandbox's, or a forked one's: fork_server.mjs), opened without waiting for
 * the child, plus `hold`: a writer of `up` until the child has its own end, so that
 * a read of fdIn waits for the child instead of seeing the end of the pipe (closed
 * once the child has it). `discard()` closes all three and removes the pair. On
 * failure what was opened is closed, the pair removed, and the error thrown.
 */
export function openEnds(down, up) {
  const { O_RDWR, O_RDONLY, O_WRONLY } = fs.constants;
  const fds = [];
  const discard = () => {
    fds.forEach(closeFd);
    fs.rmSync(down, { force: true });
    fs.rmSync(up, { force: true });
  };
  try {
    // A FIFO's write end opens at once while a reader exists: a temporary one.
    const tmp = fs.openSync(down, O_RDWR);
    fds.push(fs.openSync(down, O_WRONLY));
    fs.closeSync(tmp);
    fds.push(fs.openSync(up, O_RDWR));
    fds.push(fs.openSync(up, O_RDONLY));
  } catch (e) {
    discard();
    throw e;
  }
  const [fdOut, hold, fdIn] = fds;
  return { fdIn, fdOut, hold, discard };
}

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
 * Returns { ready, start(cmd, args, uid) -> { child, fdIn, fdOut }, pair() -> [down, up]
 * (a fresh FIFO pair's paths, for a fork server), pipesDir, cpuMs(), close() }.
 */
export function spawnerOf(dir) {
  // Every FIFO pair in a folder of its own: a fork server's zygote sees this one
  // alone (fork_server.mjs), never the pool's other files. Each batch's folder may
  // be crossed (not read) by a zygote's uid, which opens only pairs made its own.
  const pipesDir = path.join(dir, 'pipes');
  fs.mkdirSync(pipesDir, { mode: 0o711 });
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
    const batch = fs.mkdtempSync(path.join(pipesDir, 'batch-'));
    fs.chmodSync(batch, 0o711);
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
    const batch = fs.mkdtempSync(path.join(pipesDir, 'batch-'));
    fs.chmodSync(batch, 0o711);
    const fifos = [path.join(batch, 'down'), path.join(batch, 'up')];
    const r = spawnSync('mkfifo', ['-m', '600', ...fifos]);
    if (r.status !== 0) throw new Error(`mkfifo failed: ${String(r.stderr || r.error)}`);
    return fifos;
  }

  function start(cmd, args, uid = null) {
    const [down, up] = pair();
    const child = new Sandboxed();
    const id = nextId++;
    const { fdIn, fdOut, hold } = openEnds(down, up);
    child.onSpawned = () => { child.onSpawned = null; closeFd(hold); };
    children.set(id, child);
    send({ t: 'spawn', id, cmd, args, down, up, uid });
    return { child, fdIn, fdOut };
  }

  return {
    ready: refill(),
    start,
    pair,
    pipesDir,
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
