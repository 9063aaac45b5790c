// A sandbox's processes and uid, from the pool's side: a uid of its own taken and
// freed (every process of it killed first), a sandbox's process tree killed the way
// bubblewrap needs, and nothing left when the coordinator exits.
import { killUid, sandboxUid } from './jail.mjs';
import { descendants } from './procfs.mjs';

// The sandbox uids this process holds (jail.mjs sandboxUid, in this process's
// block), from the spawn until nothing of the uid lives: a uid whose sandbox has
// not started yet is not seen in /proc, and two pools of one process share a block.
const heldUids = new Set();
/** A uid of its own for the next sandbox (null when none is free); null if not root. */
export function takeUid() {
  const uid = sandboxUid(process.pid, { held: heldUids });
  if (uid !== null) heldUids.add(uid);
  return uid;
}
/** Every process of `uid` killed, then the uid free for another sandbox. */
export function releaseUid(uid) {
  if (uid === null || uid === undefined) return;
  killUid(uid);
  heldUids.delete(uid);
}

// Sandboxes never outlive the coordinator, however it ends (bubblewrap's
// --die-with-parent covers a coordinator that is killed).
export const live = new Set();
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
export function killTree(child, { now = false } = {}) {
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
