// The sandbox's walls, as a command line: bubblewrap (Debian's `bubblewrap`) with
// a new user, PID, network, IPC, UTS and mount namespace, a read-only view of only
// the files the sandbox reads, its own session (no signal or terminal reaches
// anything outside), killed with its parent; rlimits from `prlimit`. It needs no
// root: bubblewrap uses unprivileged user namespaces. Run as root, the coordinator
// first drops to user nobody (setpriv), so the sandbox never holds root's uid on
// the host either.
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';

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

const root = () => process.getuid && process.getuid() === 0;

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
 * place). Returns { cmd, args }.
 */
export function jailCommand(argv, readPaths) {
  const limits = Object.entries(RLIMITS).map(([k, v]) => `--${k}=${v}:${v}`);
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
  for (const p of readPaths) binds.push('--ro-bind', p, p);
  const bwrap = [
    which('bwrap') ?? 'bwrap',
    '--unshare-user', '--unshare-pid', '--unshare-net', '--unshare-ipc', '--unshare-uts', '--unshare-cgroup-try',
    '--die-with-parent', '--new-session', '--clearenv',
    ...binds,
    '--proc', '/proc', '--dev', '/dev',
    '--remount-ro', '/',
    '--chdir', '/',
    '--', ...argv,
  ];
  const prlimit = [which('prlimit') ?? 'prlimit', ...limits, '--'];
  const prefix = root()
    ? [which('setpriv') ?? 'setpriv', '--reuid=65534', '--regid=65534', '--clear-groups', '--no-new-privs', '--', ...prlimit]
    : prlimit;
  return { cmd: prefix[0], args: [...prefix.slice(1), ...bwrap] };
}

let probed;
/**
 * Whether the jail works here: '' when it does, else why not (bubblewrap missing,
 * user namespaces disabled, ...). Probed once, with node itself inside.
 */
export function jailProblem() {
  if (probed === undefined) {
    const missing = Object.keys(TOOLS).filter((t) => (t !== 'setpriv' || root()) && !which(t));
    if (missing.length) {
      probed = `${missing.join(', ')} not found on PATH (Debian's ${[...new Set(missing.map((t) => TOOLS[t]))].join(', ')})`;
      return probed;
    }
    const { cmd, args } = jailCommand([process.execPath, '-e', 'process.exit(process.pid === 2 ? 0 : 3)'], []);
    const r = spawnSync(cmd, args, { stdio: ['ignore', 'ignore', 'pipe'], env: {}, timeout: 20000 });
    if (r.error) probed = `${cmd} could not be started (${r.error.code || r.error.message})`;
    else if (r.status === 0) probed = '';
    else probed = `bubblewrap did not start a sandbox (exit ${r.status ?? r.signal}): ${String(r.stderr).trim().slice(0, 500)}`;
  }
  return probed;
}
