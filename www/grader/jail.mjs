// The sandbox's walls, as a command line: bubblewrap (Debian's `bubblewrap`) with
// a new user, PID, network, IPC, UTS and mount namespace, a read-only view of only
// the files the sandbox reads, its own session (no signal or terminal reaches
// anything outside), killed with its parent; rlimits from `prlimit`. It needs no
// root: bubblewrap uses unprivileged user namespaces. Run as root, the coordinator
// first drops to a uid of the sandbox's own (setpriv; sandboxUid below), so the
// sandbox never holds root's uid on the host, and no two sandboxes share a uid:
// RLIMIT_NPROC is counted per uid, and a process may read another's memory
// (/proc/PID/mem, ptrace) only under the same uid. Without root every sandbox runs
// as the invoking user; the README says what that leaves shared.
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import { isZombie, processes } from './procfs.mjs';

/** The rlimits of a sandbox process tree (prlimit's names). */
export const RLIMITS = {
  // Writable memory (not address space: V8 reserves large guard regions for
  // WebAssembly memory, which RLIMIT_AS would count). The wasm memory itself is
  // capped lower (--memory); this is the whole process's backstop.
  data: 3 * 2 ** 30,
  nofile: 256,
  fsize: 0,        // no file of any size may be written
  core: 0,
  nproc: 1024,     // counted per user, so generous: it stops a fork or thread bomb
  cpu: 120,        // seconds; the coordinator's wall-time limit comes long before
};

/** Whether this process runs as root (then each sandbox runs as a uid of its own). */
export const isRoot = () => process.getuid?.() === 0;

// Sandbox uids: a block of UIDS_PER_OWNER per owning process (the pool's
// coordinator, a real run), at SANDBOX_UID_BASE + owner pid * UIDS_PER_OWNER. Two
// live owners have different pids, so their blocks never meet, with no file or
// lock to share; within a block a uid is taken again only when no process holds
// it. pid_max is at most 2^22, so every uid stays below 2^31 and clear of the
// system's (< 65536) and of the usual subordinate ranges (100000 + 65536 * n for
// a few users). No passwd entry is needed: nothing inside looks one up.
/**
 * Node's permission model, a layer inside the walls, not one of them (README):
 * stable since Node 22.13 (Node 20's was --experimental-permission).
 */
export const PERMISSION_FLAG = '--permission';

export const SANDBOX_UID_BASE = 2 ** 30;
export const UIDS_PER_OWNER = 64;
const PID_MAX = 2 ** 22;
let nextInBlock = 0;

/**
 * A uid of its own for the next sandbox of `ownerPid` (this process by default):
 * in the owner's block, one no live process holds and not in `held` (the owner's
 * uids taken but not yet running). Null when not root (setpriv cannot change uid
 * then) or when all UIDS_PER_OWNER are taken.
 */
export function sandboxUid(ownerPid = process.pid, { held = new Set() } = {}) {
  if (!isRoot() || !(Number.isInteger(ownerPid) && ownerPid > 0 && ownerPid < PID_MAX)) return null;
  const used = new Set(Array.from(processes(), (p) => p.uid));
  for (let i = 0; i < UIDS_PER_OWNER; i++) {
    const uid = SANDBOX_UID_BASE + ownerPid * UIDS_PER_OWNER + (nextInBlock++ % UIDS_PER_OWNER);
    if (!used.has(uid) && !held.has(uid)) return uid;
  }
  return null;
}

/** SIGKILL to every process running as `uid` (a sandbox's, after its run): what
 *  nothing else ended, whatever its parent. Pass after pass over /proc until one
 *  finds none alive (a process that forked while a pass went by is caught by the
 *  next; a killed process cannot fork), for up to KILL_WAIT_MS. A process killed
 *  already is not killed again but waited for: on a busy machine a killed process
 *  can take longer to exit than many passes take (ci16: 20 passes found the same
 *  two, still dying, and it returned with them alive). How many it killed. */
export function killUid(uid) {
  if (!Number.isInteger(uid) || uid < SANDBOX_UID_BASE) return 0;
  const killed = new Set();
  const until = Date.now() + KILL_WAIT_MS;
  for (;;) {
    const alive = Array.from(processes()).filter((p) => p.uid === uid && !isZombie(p.pid)).map((p) => p.pid);
    if (!alive.length || Date.now() > until) break;
    const fresh = alive.filter((pid) => !killed.has(pid));
    for (const pid of fresh) {
      try {
        process.kill(pid, 'SIGKILL');
        killed.add(pid);
      } catch { /* gone */ }
    }
    // Only processes killed already, still dying: a short pause before looking again.
    if (!fresh.length) Atomics.wait(PAUSE, 0, 0, 2);
  }
  return killed.size;
}
const KILL_WAIT_MS = 2000;
const PAUSE = new Int32Array(new SharedArrayBuffer(4));

/** Whether any process, a zombie included, runs as `uid`. */
export function uidHasProcess(uid) {
  for (const p of processes()) if (p.uid === uid) return true;
  return false;
}

/** `name`'s absolute path on this process's PATH, or null. */
function which(name) {
  for (const dir of (process.env.PATH || '').split(':').filter(Boolean)) {
    const p = `${dir}/${name}`;
    try {
      fs.accessSync(p, fs.constants.X_OK);
      if (fs.statSync(p).isFile()) return p;
    } catch { /* not here */ }
  }
  return null;
}
const TOOLS = { bwrap: 'bubblewrap', prlimit: 'util-linux', setpriv: 'util-linux' };

/**
 * The command that runs `argv` (an absolute program and its arguments) jailed,
 * seeing only `readPaths` (absolute files or folders, bound read-only at the same
 * place), as `uid` under root (sandboxUid(): one of its own; required then).
 * `bwrap: false` leaves bubblewrap out (where a container forbids user
 * namespaces): the uid and the rlimits still hold. `rlimits` overrides some of
 * RLIMITS (the pool's trusted steps, which write files). Returns { cmd, args, uid }.
 */
export function jailCommand(argv, readPaths, { uid = null, bwrap = true, rlimits = {}, userBlock = null } = {}) {
  const limits = Object.entries({ ...RLIMITS, ...rlimits }).map(([k, v]) => `--${k}=${v}:${v}`);
  const binds = [];
  // /usr holds node and the libraries it links; on a merged-/usr system /lib and
  // friends are links into it.
  binds.push('--ro-bind', '/usr', '/usr');
  for (const top of ['/lib', '/lib64', '/bin', '/sbin']) {
    let st;
    try { st = fs.lstatSync(top); } catch { continue; }
    if (st.isSymbolicLink()) binds.push('--symlink', fs.readlinkSync(top), top);
    else binds.push('--ro-bind', top, top);
  }
  // A Node outside /usr (./lab's, from the lockfile: use_node) is one file.
  if (argv[0] === process.execPath && !process.execPath.startsWith('/usr/')) binds.push('--ro-bind', argv[0], argv[0]);
  for (const p of readPaths) binds.push('--ro-bind', p, p);
  // A fork server's zygote (userBlock, under root): bubblewrap runs as root of the
  // user namespace nsrun made (its block of uids), keeps only the capabilities to
  // give its children those uids, and makes the other namespaces there.
  // It is the namespace's first process itself (--as-pid-1), which bubblewrap's
  // outer process waits for: with an init of bubblewrap's own between them, that
  // init was left a zombie to the host's init when the zygote ended. As PID 1 it
  // also takes no signal from its children that it does not handle.
  const user = userBlock
    ? ['--uid', '0', '--gid', '0', '--cap-drop', 'ALL', '--cap-add', 'CAP_SETUID', '--cap-add', 'CAP_SETGID', '--as-pid-1']
    : ['--unshare-user'];
  const jail = [
    which('bwrap') ?? 'bwrap',
    ...user, '--unshare-pid', '--unshare-net', '--unshare-ipc', '--unshare-uts', '--unshare-cgroup-try',
    '--die-with-parent', '--new-session', '--clearenv',
    ...binds,
    '--proc', '/proc', '--dev', '/dev',
    '--remount-ro', '/',
    '--chdir', '/',
    '--', ...argv,
  ];
  const prlimit = [which('prlimit') ?? 'prlimit', ...limits, '--'];
  if (userBlock) {
    if (!isRoot() || !bwrap) throw new Error('jailCommand: a user block needs root and bubblewrap');
    const { nsrun, root, base, count } = userBlock;
    return { cmd: nsrun, args: [String(root), String(base), String(count), ...prlimit, ...jail], uid: root };
  }
  if (isRoot() && !(Number.isInteger(uid) && uid >= SANDBOX_UID_BASE)) {
    throw new Error('jailCommand: under root a sandbox needs a uid of its own (sandboxUid())');
  }
  // Without bubblewrap's --die-with-parent, the kernel's parent-death signal
  // (set by setpriv after it drops to the uid, kept through the execs).
  const prefix = isRoot()
    ? [which('setpriv') ?? 'setpriv', `--reuid=${uid}`, `--regid=${uid}`, '--clear-groups', '--no-new-privs',
      ...(bwrap ? [] : ['--pdeathsig=KILL']), '--', ...prlimit]
    : prlimit;
  const inner = bwrap ? jail : argv;
  return { cmd: prefix[0], args: [...prefix.slice(1), ...inner], uid: isRoot() ? uid : null };
}

const probed = new Map();
/**
 * Whether the jail works here: '' when it does, else why not (bubblewrap missing,
 * user namespaces disabled, ...). Probed once, with node itself inside. With
 * `bwrap: false` (--no-sandbox), whether its other walls work: prlimit, and under
 * root setpriv dropping to a sandbox uid.
 */
export function jailProblem({ bwrap = true } = {}) {
  if (!probed.has(bwrap)) probed.set(bwrap, probe(bwrap));
  return probed.get(bwrap);
}

function probe(bwrap) {
  const missing = Object.keys(TOOLS).filter((t) => (t !== 'setpriv' || isRoot()) && (t !== 'bwrap' || bwrap) && !which(t));
  if (missing.length) {
    return `${missing.join(', ')} not found on PATH (Debian's ${[...new Set(missing.map((t) => TOOLS[t]))].join(', ')})`;
  }
  const uid = sandboxUid();
  if (isRoot() && uid === null) return 'no sandbox uid is free';
  const check = bwrap ? 'process.pid === 2' : `process.getuid() === ${uid ?? process.getuid()}`;
  const { cmd, args } = jailCommand([process.execPath, '-e', `process.exit(${check} ? 0 : 3)`], [], { uid, bwrap });
  const r = spawnSync(cmd, args, { stdio: ['ignore', 'ignore', 'pipe'], env: {}, cwd: '/', timeout: 20000 });
  killUid(uid);
  if (r.error) return `${cmd} could not be started (${r.error.code || r.error.message})`;
  if (r.status === 0) return '';
  const what = bwrap ? 'bubblewrap did not start a sandbox' : `${isRoot() ? 'setpriv and prlimit' : 'prlimit'} did not start a process`;
  return `${what} (exit ${r.status ?? r.signal}): ${String(r.stderr).trim().slice(0, 500)}`;
}
