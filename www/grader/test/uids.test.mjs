// Issue 28, item 2, for the grading pool and server: no learner process outlives
// its run or sees another's. Under root every sandbox runs as a uid of its own
// (jail.mjs sandboxUid), with bubblewrap or without it (--no-sandbox), so that no
// limit counted per user (RLIMIT_NPROC) is shared and no sandbox can open another's
// /proc/PID/mem; nothing of a uid is left once its sandbox, or its pool, is done;
// and a pool whose sandboxes fail to start retries with backoff, refuses meanwhile
// with a typed error (503 + Retry-After from the server), and grades again once the
// cause is gone.
// Run: cd www && node --test grader/test/uids.test.mjs   (the uid tests need root, as CI runs)
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { loadGrader } from '../../host/node_host.mjs';
import { createGradingPool } from '../pool.mjs';
import { jailCommand, killUid, RLIMITS, sandboxUid, SANDBOX_UID_BASE, UIDS_PER_OWNER } from '../jail.mjs';
import { createGradeHandler } from '../serve.mjs';
import { descendants } from '../procfs.mjs';
import { noProcessLeftAfterTests } from '../fixtures/leftovers.mjs';
import { until } from '../queue/test/until.mjs';

noProcessLeftAfterTests();

const WWW = fileURLToPath(new URL('../../', import.meta.url));
const GRADE = path.join(WWW, 'grader/grade.mjs');
const FAKE = fileURLToPath(new URL('../fixtures/fake_sandbox.mjs', import.meta.url));
const TMP = fs.mkdtempSync(path.join(os.tmpdir(), 'delivery-lab-uids-test-'));
fs.chmodSync(TMP, 0o755); // its probes run as sandbox uids
const LIMIT = { timeout: 180_000 };
const ROOT = process.getuid() === 0;
const NOBODY = 65534;
// uids of another owner's block (owner pid 1, init, which never owns sandboxes): the
// uids some other grader's, or real run's, sandbox would hold.
const OTHER_BLOCK = SANDBOX_UID_BASE + 1 * UIDS_PER_OWNER;

let REFERENCE, STARTER;
before(async () => {
  const lab = JSON.parse(new (await loadGrader()).Grader().lab('deliver-once'));
  REFERENCE = lab.reference_py;
  STARTER = lab.starter_py;
});
after(() => fs.rmSync(TMP, { recursive: true, force: true }));

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** The real, effective, saved and filesystem uids of `pid`, or null when gone. */
function uidsOf(pid) {
  try {
    return fs.readFileSync(`/proc/${pid}/status`, 'utf8').match(/^Uid:\s+(.*)$/m)[1].trim().split(/\s+/).map(Number);
  } catch {
    return null;
  }
}
const commandOf = (pid) => { try { return fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8'); } catch { return ''; } };
/** The pids (zombies included) running as any of `uids`. */
function processesOf(uids) {
  const set = new Set(uids);
  return fs.readdirSync('/proc').filter((d) => /^\d+$/.test(d)).filter((d) => {
    try { return set.has(fs.statSync(`/proc/${d}`).uid); } catch { return false; }
  }).map(Number);
}
const statOf = (pid) => { try { return fs.readFileSync(`/proc/${pid}/stat`, 'utf8').replace(/^.*\) /s, '').split(' '); } catch { return ['gone']; } };
/**
 * The processes of `uids` still there after up to `ms` for them to go, each as
 * "pid state command". A zombie left to the machine's init is dead already (its
 * exit status waits for init to reap it) and is not counted; one whose parent is
 * anything else is.
 */
async function aliveOf(uids, ms = 5000) {
  const left = () => processesOf(uids).filter((p) => {
    const [state, ppid] = statOf(p);
    return state !== 'gone' && !(state === 'Z' && ppid === '1');
  });
  const end = performance.now() + ms;
  while (left().length && performance.now() < end) await sleep(50);
  return left().map((p) => `${p} ${statOf(p)[0]} ${commandOf(p).replace(/\0/g, ' ').slice(0, 100)}`);
}
/** The sandboxes' Node processes under this test process (the pools' ready spares). */
const sandboxProcesses = () => descendants(process.pid).filter((p) => {
  const argv = commandOf(p).split('\0');
  const i = argv.indexOf(path.join(WWW, 'grader/sandbox.mjs'));
  return argv[0] === process.execPath && i > 0 && /^\d+$/.test(argv[i + 1] ?? '');
});

test('each sandbox runs as a uid of its own: two of one pool, of two pools, with and without bubblewrap; never root or nobody; none left after close', LIMIT, async (t) => {
  if (!ROOT) return t.skip('needs root (CI runs ./lab test as root): without it every sandbox is the invoking user');
  const warnings = [];
  const a = createGradingPool({ jobs: 2 });
  const b = createGradingPool({ jobs: 1, sandbox: false, onWarning: (m) => warnings.push(m) });
  let used = [];
  try {
    await Promise.all([a.ready, b.ready]);
    assert.match(warnings.join('\n'), /--no-sandbox: each submission still gets a fresh process, as a uid of its own with the rlimits/);
    const [ua, ub] = [a.sandboxUids(), b.sandboxUids()];
    assert.equal(ua.length, 2, `pool a holds ${ua}`);
    assert.equal(ub.length, 1, `pool b holds ${ub}`);
    const all = [...ua, ...ub];
    assert.equal(new Set(all).size, 3, `every spare its own uid: ${all}`);
    for (const uid of all) {
      assert.ok(uid >= SANDBOX_UID_BASE, `${uid} is a sandbox uid`);
      assert.notEqual(uid, 0);
      assert.notEqual(uid, NOBODY);
    }
    // The processes themselves: each spare's Node runs as its pool's uid for it, in
    // every one of its uids (real, effective, saved, filesystem).
    const procs = sandboxProcesses();
    assert.equal(procs.length, 3, `three spares: ${procs}`);
    const seen = procs.map((p) => {
      const ids = uidsOf(p);
      assert.ok(ids && ids.every((u) => u === ids[0]), `pid ${p}: uids ${ids}`);
      return ids[0];
    });
    assert.deepEqual(seen.sort(), [...all].sort());
    // With bubblewrap and without, the rlimits hold (read from outside: /proc/PID/limits).
    for (const p of procs) {
      const limits = fs.readFileSync(`/proc/${p}/limits`, 'utf8');
      assert.match(limits, new RegExp(`Max file size\\s+${RLIMITS.fsize}\\s+${RLIMITS.fsize}\\s`), `pid ${p}`);
      assert.match(limits, new RegExp(`Max processes\\s+${RLIMITS.nproc}\\s+${RLIMITS.nproc}\\s`), `pid ${p}`);
      assert.match(limits, new RegExp(`Max data size\\s+${RLIMITS.data}\\s`), `pid ${p}`);
    }
    // A process of a spare's uid outside its sandbox's tree (its own session, another
    // parent): what a learner's process that escaped its tree would be.
    const escapee = spawn('setpriv', [`--reuid=${ua[0]}`, `--regid=${ua[0]}`, '--clear-groups', '--', 'sleep', '300'],
      { stdio: 'ignore', detached: true, cwd: '/' });
    const escapeeEnd = new Promise((resolve) => escapee.on('exit', (code, signal) => resolve(signal)));
    // Both pools grade (pool a's two spares take its two submissions).
    const lines = await Promise.all([
      a.grade({ source: REFERENCE }), a.grade({ source: STARTER }), b.grade({ source: REFERENCE }),
    ]);
    assert.deepEqual(lines.map((l) => l.status), ['pass', 'fail', 'pass']);
    // Their sandboxes discarded, nothing of their uids lives, the escapee included,
    // while the pools go on.
    assert.equal(await Promise.race([escapeeEnd, sleep(10_000).then(() => 'alive')]), 'SIGKILL');
    assert.deepEqual(await aliveOf(all), []);
    used = [...new Set([...all, ...a.sandboxUids(), ...b.sandboxUids()])];
  } finally {
    used = [...new Set([...used, ...a.sandboxUids(), ...b.sandboxUids()])];
    await Promise.all([a.close(), b.close()]);
  }
  // Closed: no process of any of their uids.
  assert.deepEqual(await aliveOf(used), []);
  assert.deepEqual([a.sandboxUids(), b.sandboxUids()], [[], []]);
});

test('one process limit for every sandbox no more: RLIMIT_NPROC\'s worth of processes under another sandbox\'s uid does not stop ./lab grade', LIMIT, async (t) => {
  if (!ROOT) return t.skip('needs root (setpriv to another uid)');
  // The attack of issue 28: a learner's process (a real run's receiver) holding the
  // process limit of the uid it runs as. Before, every sandbox was user nobody and
  // ./lab grade exited 2 ("Creating new namespace failed"). Here a process of a uid
  // of another owner's block (another grader's or run's sandbox) holds every process
  // RLIMIT_NPROC lets it have. (Not nobody: other tests grade as nobody beside this one.)
  const uid = OTHER_BLOCK + 7;
  // perl (Debian's perl-base is essential): forks until the kernel refuses, says
  // how many, and stays, reaping its children once they are killed.
  const hog = spawn('setpriv', [`--reuid=${uid}`, `--regid=${uid}`, '--clear-groups', '--',
    'prlimit', `--nproc=${RLIMITS.nproc}:${RLIMITS.nproc}`, '--',
    'perl', '-e', '$| = 1; $SIG{CHLD} = "IGNORE"; my $n = 0; for (1 .. 5000) { my $p = fork; last unless defined $p; if (!$p) { sleep 300; exit 0 } $n++ } print "held $n\\n"; sleep 300'],
  { stdio: ['ignore', 'pipe', 'ignore'], cwd: '/' });
  const killChildren = () => {
    for (const p of processesOf([uid])) if (p !== hog.pid) try { process.kill(p, 'SIGKILL'); } catch { /* gone */ }
  };
  try {
    const said = await new Promise((resolve) => {
      let out = '';
      hog.stdout.on('data', (d) => { out += d; if (out.includes('\n')) resolve(out); });
      hog.on('exit', () => resolve(out));
    });
    const held = Number(/held (\d+)/.exec(said)?.[1]);
    // The uid is at its limit: every process it may have (the parent and its children).
    assert.ok(held >= RLIMITS.nproc - 64 && held < RLIMITS.nproc, `the hog holds ${held} processes`);
    assert.ok(processesOf([uid]).length >= RLIMITS.nproc - 64);
    const file = path.join(TMP, 'alice.py');
    fs.writeFileSync(file, REFERENCE);
    const r = await new Promise((resolve) => {
      const cli = spawn(process.execPath, [GRADE, '--format', 'json', file], { stdio: ['ignore', 'pipe', 'pipe'] });
      let stdout = '';
      let stderr = '';
      cli.stdout.on('data', (d) => { stdout += d; });
      cli.stderr.on('data', (d) => { stderr += d; });
      cli.on('exit', (code) => resolve({ code, stdout, stderr }));
    });
    assert.equal(r.code, 0, r.stderr);
    assert.equal(JSON.parse(r.stdout).status, 'pass');
  } finally {
    // Its children first, which it reaps (none left to init as zombies), then it.
    killChildren();
    await until(() => { killChildren(); return processesOf([uid]).every((p) => p === hog.pid); }, 'the hog\'s children gone', 20_000, 50);
    hog.kill('SIGKILL');
    killUid(uid);
  }
  await until(() => processesOf([uid]).length === 0, 'the hog gone', 10_000, 50);
});

test('/proc/PID/mem and environ of another sandbox: a process of one sandbox uid cannot open them, outside any PID namespace', LIMIT, async (t) => {
  if (!ROOT) return t.skip('needs root (sandbox uids)');
  // The probe: what a learner's process reaches of another process by its pid, run
  // as a learner's process is without bubblewrap (--no-sandbox: jail.mjs, bwrap
  // false; the host's /proc, no namespace), under a uid of its own.
  const probe = path.join(TMP, 'mem_probe.mjs');
  fs.writeFileSync(probe, `
    import fs from 'node:fs';
    const pid = process.argv[2];
    const r = { uid: process.getuid() };
    const attempt = (f) => { try { return { ok: f() }; } catch (e) { return { code: e.code }; } };
    r.mem = attempt(() => { const fd = fs.openSync('/proc/' + pid + '/mem', 'r'); fs.closeSync(fd); return 'opened'; });
    r.environ = attempt(() => fs.readFileSync('/proc/' + pid + '/environ', 'latin1'));
    process.stdout.write(JSON.stringify(r));
  `);
  const run = (uid, pid) => new Promise((resolve) => {
    const { cmd, args } = jailCommand([process.execPath, probe, String(pid)], [probe], { uid, bwrap: false });
    const c = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'], env: {}, cwd: '/' });
    let out = '';
    let err = '';
    c.stdout.on('data', (d) => { out += d; });
    c.stderr.on('data', (d) => { err += d; });
    c.on('exit', () => resolve(out ? JSON.parse(out) : { err }));
  });
  const DENIED = ['EACCES', 'EPERM'];
  const SECRET = 'victim-secret-4242';

  // A victim outside any PID namespace: another sandbox's process (bwrap false), with
  // a secret in its environment.
  const victimUid = sandboxUid();
  const { cmd, args } = jailCommand([process.execPath, '-e', 'setInterval(() => {}, 1e6)'], [], { uid: victimUid, bwrap: false });
  const victim = spawn(cmd, args, { stdio: 'ignore', env: { SECRET }, cwd: '/' });
  const pool = createGradingPool({ jobs: 1 });
  try {
    await until(() => commandOf(victim.pid).includes('setInterval'), 'the victim runs node', 20_000, 50);
    const probeUid = sandboxUid();
    assert.notEqual(probeUid, victimUid);
    const other = await run(probeUid, victim.pid);
    assert.equal(other.uid, probeUid, JSON.stringify(other));
    assert.ok(DENIED.includes(other.mem.code), `mem: ${JSON.stringify(other.mem)}`);
    assert.ok(DENIED.includes(other.environ.code), `environ: ${JSON.stringify(other.environ)}`);
    // The control: under the victim's own uid the same probe reads its environment,
    // so the uid is what refused it above.
    const same = await run(victimUid, victim.pid);
    assert.ok(String(same.environ.ok).includes(SECRET), `same uid: ${JSON.stringify(same)}`);

    // A live sandbox of a pool (its ready spare, inside bubblewrap): the same refusals.
    await pool.ready;
    const [spare] = sandboxProcesses();
    assert.ok(spare, 'the pool has a spare sandbox');
    const fromOther = await run(sandboxUid(), spare);
    assert.ok(DENIED.includes(fromOther.mem.code), `spare's mem: ${JSON.stringify(fromOther.mem)}`);
    assert.ok(DENIED.includes(fromOther.environ.code), `spare's environ: ${JSON.stringify(fromOther.environ)}`);
    // And it still grades.
    assert.equal((await pool.grade({ source: REFERENCE })).status, 'pass');
  } finally {
    victim.kill('SIGKILL');
    killUid(victimUid);
    await pool.close();
  }
});

/** POSTs `body` to `url`; resolves to { status, headers, json }. */
function post(url, body) {
  const buf = Buffer.from(JSON.stringify(body));
  return new Promise((resolve, reject) => {
    const req = http.request(url, { method: 'POST', headers: { 'Content-Type': 'application/json', 'Content-Length': buf.length } }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => {
        let json = null;
        try { json = JSON.parse(Buffer.concat(chunks).toString('utf8')); } catch { /* not JSON */ }
        resolve({ status: res.statusCode, headers: res.headers, json });
      });
    });
    req.on('error', reject);
    req.end(buf);
  });
}

test('sandboxes that fail to start: the pool retries with backoff, the server answers 503 with Retry-After meanwhile, and grades once the cause is gone', LIMIT, async () => {
  let failing = false;
  const pool = createGradingPool({ jobs: 1, startFault: () => failing, retryMs: { firstMs: 200, maxMs: 800 } });
  const server = http.createServer(createGradeHandler({ pool, jobs: 1, labs: ['deliver-once'] }));
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  const url = `http://127.0.0.1:${server.address().port}/grade`;
  const uids = new Set();
  const note = () => pool.sandboxUids().forEach((u) => uids.add(u));
  try {
    await pool.ready;
    note();
    let r = await post(url, { lab: 'deliver-once', source: REFERENCE });
    assert.equal(r.status, 200);
    assert.equal(r.json.status, 'pass');
    // From now on every start fails. The spare already up grades one more; the
    // starts after it fail, START_FAILURES in a row, and the slot is down.
    failing = true;
    note();
    r = await post(url, { lab: 'deliver-once', source: REFERENCE });
    assert.equal(r.status, 200);
    await until(() => pool.unavailable(), 'the pool down', 30_000, 50);
    assert.ok(pool.stats.startFailures >= 4, `${pool.stats.startFailures} failed starts`);
    // The pool's own answer: a typed error, known by its code.
    await assert.rejects(pool.grade({ source: REFERENCE }), (e) => {
      assert.equal(e.code, 'ESANDBOXSTART');
      assert.equal(e.name, 'SandboxStartError');
      assert.ok(Number.isInteger(e.retryAfterS) && e.retryAfterS >= 1 && e.retryAfterS <= 31, `retryAfterS ${e.retryAfterS}`);
      assert.match(e.message, /^sandboxes fail to start: .*delivery-lab-start-fault/s);
      return true;
    });
    // The server's: 503, Retry-After, a JSON body saying so (not the cause: staff's, in its log).
    const failures = pool.stats.startFailures;
    r = await post(url, { lab: 'deliver-once', source: REFERENCE });
    assert.equal(r.status, 503);
    const after = Number(r.headers['retry-after']);
    assert.ok(Number.isInteger(after) && after >= 1 && after <= 31, `Retry-After: ${r.headers['retry-after']}`);
    assert.deepEqual(r.json, { error: `the grader is temporarily unable to start sandboxes; try again in ${after} s`, retry_after_s: after });
    // Still retrying (with backoff): more starts tried, all failed, still 503.
    await until(() => pool.stats.startFailures > failures, 'a retry', 10_000, 50);
    assert.equal((await post(url, { lab: 'deliver-once', source: REFERENCE })).status, 503);
    // The cause gone: within the backoff's cap, the next submission is graded.
    failing = false;
    await until(() => !pool.unavailable(), 'the pool up again', 30_000, 50);
    r = await post(url, { lab: 'deliver-once', source: STARTER });
    assert.equal(r.status, 200, JSON.stringify(r.json));
    assert.equal(r.json.status, 'fail');
    r = await post(url, { lab: 'deliver-once', source: REFERENCE });
    assert.equal(r.json.status, 'pass');
    note();
  } finally {
    await new Promise((r) => server.close(r));
    await pool.close();
  }
  if (ROOT) assert.deepEqual(await aliveOf([...uids]), [], 'a process of the pool\'s uids left after close');
});

test('grading threads whose grader does not load: the slot is down with the typed error (no submission waits forever), and grades again once the cause is gone', LIMIT, async () => {
  let failing = false;
  const pool = createGradingPool({ jobs: 1, threadFault: () => failing, retryMs: { firstMs: 200, maxMs: 800 } });
  try {
    await pool.ready;
    // A courier submission uses its thread's store, so its thread is replaced after
    // it: that replacement, and every one after it, fails to load its grader.
    const courier = JSON.parse(new (await loadGrader()).Grader().lab('courier')).starter_py;
    failing = true;
    const first = await pool.grade({ lab: 'courier', source: courier });
    assert.equal(first.status, 'fail', first.message);
    assert.equal(pool.stats.storeReuses, 0);
    await until(() => pool.unavailable(), 'the pool down', 60_000, 50);
    assert.equal(pool.stats.threadStartFailures, 4);
    await assert.rejects(pool.grade({ source: REFERENCE }), (e) => {
      assert.equal(e.code, 'ESANDBOXSTART');
      assert.match(e.message, /^sandboxes fail to start: the grading thread did not start: .*no-such-grader/s);
      return true;
    });
    // Still retried with backoff while it fails.
    await until(() => pool.stats.threadStartFailures > 4, 'a retry', 10_000, 50);
    failing = false;
    await until(() => !pool.unavailable(), 'the pool up again', 30_000, 50);
    assert.equal((await pool.grade({ source: REFERENCE })).status, 'pass');
    assert.equal((await pool.grade({ source: STARTER })).status, 'fail');
  } finally {
    await pool.close();
  }
});

test('a pool that can never start a sandbox: ready rejects with the typed error and its cause (./lab grade exits 2 with it)', LIMIT, async () => {
  // A test's sandbox program (no snapshot to make), every start failing.
  const pool = createGradingPool({ jobs: 1, sandboxScript: FAKE, startFault: () => true, retryMs: { firstMs: 200, maxMs: 400 } });
  try {
    await assert.rejects(pool.ready, (e) => {
      assert.equal(e.code, 'ESANDBOXSTART');
      assert.match(e.message, /^sandboxes fail to start: .*ENOENT/s);
      return true;
    });
    await assert.rejects(pool.grade({ source: REFERENCE }), { code: 'ESANDBOXSTART' });
  } finally {
    await pool.close();
  }
});
