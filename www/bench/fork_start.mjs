// A fork server's start beside a spawned sandbox's (issue 39, item 3), both in
// jail.mjs's walls: CPU from a sandbox's first instruction to its `loaded` answer
// for lab 1's reference (/proc, its whole tree). The spawned one is what every
// submission pays today (Node's start, Pyodide restored); the forked one is a
// child of a zygote (sandbox.mjs --zygote) that did that once.
//
// Run: node bench/fork_start.mjs [N]    (needs a C compiler: cc, as cargo does)
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { channel } from '../grader/frames.mjs';
import { isRoot, jailCommand, killUid, PERMISSION_FLAG, sandboxUid } from '../grader/jail.mjs';
import { cpuMsOf, treeCpuMs } from '../grader/procfs.mjs';
import { labsFileOf, runsFileOf } from '../grader/python.mjs';
import { SANDBOX, SANDBOX_READS, sandboxCommand, sandboxNodeFlags } from '../grader/sandbox_command.mjs';
import { loadGrader } from '../host/node_host.mjs';

const WWW = fileURLToPath(new URL('../', import.meta.url));
const N = Number(process.argv[2] || 10);
const snap = path.join(WWW, 'snapshot', 'pyodide.snapshot');
const cache = path.join(WWW, 'snapshot', 'pyodide.code-cache-1');
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'fork-start-'));
fs.chmodSync(tmp, 0o755);
const lab = JSON.parse(new (await loadGrader()).Grader().lab('deliver-once'));
const load = { t: 'load', lab: lab.id, source: lab.reference_py, functions: lab.functions ?? [], limit_s: 8, ops: [] };

const forker = path.join(tmp, 'forker.node');
const cc = spawnSync('cc', ['-shared', '-fPIC', '-O2', `-I${path.join(path.dirname(process.execPath), '..', 'include', 'node')}`,
  path.join(WWW, 'grader', 'forker', 'forker.c'), '-o', forker], { encoding: 'utf8' });
if (cc.status !== 0) throw new Error(`cc failed: ${cc.stderr}`);

function fifoPair(dir, uid) {
  fs.mkdirSync(dir, { mode: 0o755 });
  const names = ['down', 'up'].map((n) => path.join(dir, n));
  const r = spawnSync('mkfifo', ['-m', '600', ...names]);
  if (r.status !== 0) throw new Error('mkfifo failed');
  if (uid !== null) for (const n of names) fs.chownSync(n, uid, uid);
  return names;
}
// Our ends of a pair: down to write, up to read (blocking opens: each waits for the other side).
const ends = ([down, up]) => {
  const out = fs.openSync(down, fs.constants.O_WRONLY);
  const inn = fs.openSync(up, fs.constants.O_RDONLY);
  return { wire: channel(inn, out), close: () => { fs.closeSync(out); fs.closeSync(inn); } };
};
const med = (xs) => [...xs].sort((a, b) => a - b)[xs.length >> 1];

// Spawned: the pool's own command line, with its FIFOs as fds 3 and 4.
async function spawned(i) {
  const uid = isRoot() ? sandboxUid() : null;
  const dir = path.join(tmp, `s${i}`);
  const pair = fifoPair(dir, null);
  const { cmd, args } = sandboxCommand({ snapshotFile: snap, codeCacheFile: cache, uid });
  const fdIn = fs.openSync(pair[0], fs.constants.O_RDWR);
  const fdOut = fs.openSync(pair[1], fs.constants.O_RDWR);
  const child = spawn(cmd, args, { stdio: ['ignore', 'ignore', 'inherit', fdIn, fdOut], env: {}, cwd: '/' });
  fs.closeSync(fdIn); fs.closeSync(fdOut);
  const { wire, close } = ends(pair);
  if (wire.receive().t !== 'ready') throw new Error('no ready');
  wire.send(load);
  if (wire.receive().t !== 'loaded') throw new Error('no loaded');
  const ms = treeCpuMs(child.pid);
  close();
  child.kill('SIGKILL');
  if (uid !== null) killUid(uid);
  return ms;
}

// The zygote: started once, in the same walls plus the addon and the FIFOs' folder.
const zUid = isRoot() ? sandboxUid() : null;
const ctl = fifoPair(path.join(tmp, 'z'), zUid);
const reads = [...SANDBOX_READS, snap, runsFileOf(snap), labsFileOf(snap), cache, forker, tmp];
const zArgv = [process.execPath, PERMISSION_FLAG, '--allow-addons', ...reads.map((p) => `--allow-fs-read=${p}${p.endsWith('pyodide') || p === tmp ? '/*' : ''}`),
  `--allow-fs-write=${tmp}/*`,
  ...sandboxNodeFlags(false, false), '--single-threaded',
  SANDBOX, '--zygote', forker, '512', snap, cache];
const z = jailCommand(zArgv, reads, { uid: zUid });
const zFdIn = fs.openSync(ctl[0], fs.constants.O_RDWR);
const zFdOut = fs.openSync(ctl[1], fs.constants.O_RDWR);
const zygote = spawn(z.cmd, z.args, { stdio: ['ignore', 'ignore', 'inherit', zFdIn, zFdOut], env: {}, cwd: '/' });
fs.closeSync(zFdIn); fs.closeSync(zFdOut);
const zc = ends(ctl);
if (zc.wire.receive().t !== 'ready') throw new Error('the zygote did not start');
// The zygote's own node: the deepest process of the jail's tree (setpriv, prlimit, bwrap exec in place).
const zygoteNode = () => {
  // Breadth-first under the spawned process, for the node running --zygote.
  const queue = [zygote.pid];
  while (queue.length) {
    const pid = queue.shift();
    try {
      const cmd = fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
      if (cmd[0] === process.execPath && cmd.includes('--zygote')) return pid;
      queue.push(...fs.readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number));
    } catch { /* gone */ }
  }
  throw new Error('the zygote\'s node was not found');
};
const zPid = zygoteNode();
const zBootMs = cpuMsOf(zPid);

async function forked(i) {
  const dir = path.join(tmp, `f${i}`);
  const pair = fifoPair(dir, zUid);
  const before = new Set(fs.readFileSync(`/proc/${zPid}/task/${zPid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean));
  zc.wire.send({ t: 'fork', dir, uid: -1 });
  const { wire, close } = ends(pair);
  if (zc.wire.receive().t !== 'forked') throw new Error('no forked');
  const pid = fs.readFileSync(`/proc/${zPid}/task/${zPid}/children`, 'utf8').trim().split(/\s+/).filter((p) => p && !before.has(p))[0];
  if (wire.receive().t !== 'ready') throw new Error('no ready');
  wire.send(load);
  if (wire.receive().t !== 'loaded') throw new Error('no loaded');
  const ms = cpuMsOf(pid);
  close();
  try { process.kill(Number(pid), 'SIGKILL'); } catch { /* gone */ }
  return ms;
}

const rows = { spawned: [], forked: [] };
for (let i = 0; i < N; i++) {
  rows.spawned.push(await spawned(i));
  rows.forked.push(await forked(i));
}
console.log(`to a loaded lab-1 reference, ms of CPU (median of ${N}, interleaved): spawned ${med(rows.spawned)} [${rows.spawned.join(' ')}], `
  + `forked ${med(rows.forked)} [${rows.forked.join(' ')}]; the zygote's own start ${zBootMs}`);
zc.close();
zygote.kill('SIGKILL');
if (zUid !== null) killUid(zUid);
fs.rmSync(tmp, { recursive: true, force: true });
