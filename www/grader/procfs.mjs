// What Linux's /proc says about a process or a thread: its CPU so far, its
// resident memory, its children. Read by the pool (a sandbox's tree) and by a
// grading thread (itself, /proc/thread-self); every reader answers 0 or nothing
// for a process that is gone.
import fs from 'node:fs';

/** User plus system CPU so far, in ms (clock ticks of 10 ms), of a pid or of
 *  'thread-self' (the calling thread alone). */
export function cpuMsOf(pid) {
  try {
    const f = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    const rest = f.slice(f.lastIndexOf(')') + 2).split(' ');
    return (Number(rest[11]) + Number(rest[12])) * 10;
  } catch {
    return 0;
  }
}

export function rssMb(pid) {
  try {
    const m = /VmRSS:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) / 1024 : 0;
  } catch {
    return 0;
  }
}

/** Every live process as { pid, uid } (the owner of /proc/PID), zombies included. */
export function* processes() {
  for (const d of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try { yield { pid: Number(d), uid: fs.statSync(`/proc/${d}`).uid }; } catch { /* gone */ }
  }
}

/** Whether `pid` is dead already (a zombie, or on its way out): its parent reaps it. */
export function isZombie(pid) {
  try {
    return /^\d+ \(.*\) [ZX]/s.test(fs.readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return true;
  }
}

/** The children of `pid` (of its main thread), or none when it is gone. */
export function childrenOf(pid) {
  try {
    return fs.readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number);
  } catch {
    return [];
  }
}

/** Every process under `pid`, deepest first. */
export function descendants(pid) {
  let out = [];
  for (const child of childrenOf(pid)) out = out.concat(descendants(child), [child]);
  return out;
}

/** A process's start time (clock ticks since boot), null when gone or dead (a
 *  zombie): two processes that held one pid in turn differ there. */
export function startTimeOf(pid) {
  try {
    const f = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    const rest = f.slice(f.lastIndexOf(')') + 2).split(' ');
    return rest[0] === 'Z' || rest[0] === 'X' ? null : rest[19];
  } catch {
    return null;
  }
}

/** `pid` and every process under it. */
export const treeOf = (pid) => [pid, ...descendants(pid)];
export const treeRss = (pid, tree = treeOf(pid)) => tree.reduce((n, p) => n + rssMb(p), 0);
export const treeCpuMs = (pid, tree = treeOf(pid)) => tree.reduce((n, p) => n + cpuMsOf(p), 0);
