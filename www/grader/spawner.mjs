// The pool's spawner: a small trusted process that starts every sandbox, so that
// the coordinator never forks itself. A fork copies the forking process's page
// tables and mappings, and the coordinator is large (the grader and an interpreter
// in every grading thread): measured with a CPU profile of bench.mjs, its main
// thread spent about 22 ms in child_process.spawn per sandbox and 25 ms per mkfifo
// batch; this process is a few tens of MB and forks in a few ms.
//
// It runs no learner code and reads nothing a sandbox writes except its stderr,
// which it caps and passes on as text. Its protocol is one JSON object per line,
// both ways, with the coordinator only (stdin and stdout; pool.mjs):
//   -> {t:'fifos', id, dir, names}           make these FIFOs (mode 0600) in dir
//   <- {t:'fifos', id, error?}
//   -> {t:'spawn', id, cmd, args, down, up, uid}  open the child's ends of the two
//                                            FIFOs (the coordinator holds the other ends),
//                                            start cmd with them as fds 3 and 4; `uid`:
//                                            the sandbox's own (under root), or null
//   <- {t:'spawned', id, pid} | {t:'failed', id, error}
//   <- {t:'stderr', id, data}                the child's stderr, at most STDERR_CAP bytes
//   <- {t:'exit', id, code, signal}
// When its stdin ends (the coordinator exited or was killed) it kills what is left
// of each sandbox (its process group and every process of its uid: bubblewrap's
// --die-with-parent, or setpriv's --pdeathsig without it, covers only its first
// process), waits for them to be reaped (no zombie left to an init that may not
// reap), and exits.
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import readline from 'node:readline';
import { SANDBOX_IN_FD, SANDBOX_OUT_FD } from './frames.mjs';
import { killUid } from './jail.mjs';

const STDERR_CAP = 8000;

const say = (m) => process.stdout.write(`${JSON.stringify(m)}\n`);
const closeFd = (fd) => { try { fs.closeSync(fd); } catch { /* closed */ } };
// The sandboxes started and not yet reaped: id -> { child, uid }.
const running = new Map();

function makeFifos({ id, dir, names }) {
  const r = spawnSync('mkfifo', ['-m', '600', ...names.map((n) => `${dir}/${n}`)], { encoding: 'utf8' });
  say(r.status === 0 ? { t: 'fifos', id } : { t: 'fifos', id, error: `mkfifo failed: ${String(r.stderr || r.error).slice(0, 500)}` });
}

function start({ id, cmd, args, down, up, uid = null }) {
  const fds = [];
  let child;
  try {
    // Neither open waits: the coordinator already holds the write end of `down`
    // and the read end of `up`.
    fds.push(fs.openSync(down, fs.constants.O_RDONLY), fs.openSync(up, fs.constants.O_WRONLY));
    const stdio = ['ignore', 'ignore', 'pipe'];
    stdio[SANDBOX_IN_FD] = fds[0];
    stdio[SANDBOX_OUT_FD] = fds[1];
    // detached: a process group of its own, which the pool kills whole.
    child = spawn(cmd, args, { stdio, env: {}, cwd: '/', detached: true });
  } catch (e) {
    say({ t: 'failed', id, error: String(e.message || e).slice(0, 500) });
    return;
  } finally {
    fds.forEach(closeFd);
    for (const f of [down, up]) fs.rmSync(f, { force: true });
  }
  let told = 0;
  child.stderr.on('data', (d) => {
    const n = Math.min(d.length, STDERR_CAP - told);
    if (n <= 0) return;
    told += n;
    say({ t: 'stderr', id, data: d.toString('utf8', 0, n) });
  });
  // Without a pid the process never started (its program missing, say); no kill or
  // message is ever sent to a started one, the other causes of 'error'.
  child.on('error', (e) => { if (child.pid === undefined) say({ t: 'failed', id, error: String(e.message || e).slice(0, 500) }); });
  child.on('exit', (code, signal) => {
    running.delete(id);
    say({ t: 'exit', id, code, signal });
  });
  if (child.pid !== undefined) {
    running.set(id, { child, uid });
    say({ t: 'spawned', id, pid: child.pid });
  }
}

const lines = readline.createInterface({ input: process.stdin });
lines.on('line', (line) => {
  let m;
  try { m = JSON.parse(line); } catch { return; }
  if (m.t === 'fifos') makeFifos(m);
  else if (m.t === 'spawn') start(m);
});
lines.on('close', () => {
  for (const { child, uid } of running.values()) {
    try { process.kill(-child.pid, 'SIGKILL'); } catch { /* gone */ }
    try { child.kill('SIGKILL'); } catch { /* gone */ }
    if (Number.isInteger(uid)) killUid(uid);
  }
  if (!running.size) process.exit(0);
  // Each 'exit' above removes its child; at most a second for all of them.
  const t = setInterval(() => { if (!running.size) process.exit(0); }, 10);
  setTimeout(() => { clearInterval(t); process.exit(0); }, 1000);
});
