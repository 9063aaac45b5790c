// Issue 39, item 3: sandboxes forked from a zygote (fork_server.mjs) keep every wall
// a spawned sandbox has, and grade the same. Each attack a forked sandbox's code
// can make on what it was forked from is made, and its exact outcome asserted:
// forking again, signalling or stopping the zygote, starting a process; from
// outside, each forked sandbox's uid (its own, under root), capabilities (none),
// no_new_privs and parent; and a zygote killed between submissions leaves the pool
// spawning instead, still grading right.
// Run: cd www && node --test grader/test/fork.test.mjs   (as root, as CI runs: a pool
// starts a fork server only under root)
import { test, before } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { loadGrader } from '../../host/node_host.mjs';
import { createGradingPool } from '../pool.mjs';
import { innerUid } from '../fork_server.mjs';
import { SANDBOX_UID_BASE } from '../jail.mjs';
import { nativesFit, SNAPSHOT_DIR } from '../snapshot.mjs';
import { noProcessLeftAfterTests } from '../fixtures/leftovers.mjs';
import { descendants } from '../procfs.mjs';
import { until } from '../queue/test/until.mjs';

noProcessLeftAfterTests();

const LIMIT = { timeout: 240_000 };
const ROOT = process.getuid() === 0;
// A pool starts a fork server only under root, where each forked sandbox gets a uid of its own.
const NO_ROOT = 'a fork server runs only under root (CI runs ./lab test as root)';
let REFERENCE;
before(async () => {
  REFERENCE = JSON.parse(new (await loadGrader()).Grader().lab('deliver-once')).reference_py;
});

// The way to JavaScript a hostile file takes (grader/test/hostile/js_kill_everything.py).
const JS = `
import gc
def _js():
    for o in gc.get_objects():
        try:
            if type(o).__name__ == "JsFinder":
                return o.jsproxies["js"]
        except Exception:
            pass
    raise RuntimeError("no way to JavaScript found")
`;

// Each attack, from inside a forked sandbox; what happened to each is raised at
// the end, so that the report's message carries it.
const ATTACKS = `${JS}
p = _js().process
out = []
def attempt(name, f):
    try:
        f()
        out.append(f"{name}: done")
    except Exception as e:
        text = str(e)
        code = ("EPERM" if "EPERM" in text else
                "refused by Node's permissions" if "has been restricted" in text else
                text.splitlines()[0].removeprefix("Error: ")[:80])
        out.append(f"{name}: {code}")
argv = list(p.argv)
forker = argv[argv.index("--zygote") + 1] if "--zygote" in argv else None
out.append("forked" if forker else "spawned")
if forker:
    req = p.getBuiltinModule("module").createRequire("/")
    attempt("fork again", lambda: req(forker).fork(-1, "/dev/null", "/dev/null", 1))
attempt("SIGSTOP to its parent", lambda: p.kill(p.ppid, "SIGSTOP"))
attempt("SIGKILL to its parent", lambda: p.kill(p.ppid, "SIGKILL"))
attempt("a process", lambda: p.getBuiltinModule("child_process").spawnSync("/bin/true"))
out.append("uid 0" if p.getuid() == 0 else "uid not 0")
raise RuntimeError("observed: " + "; ".join(out))
`;

const statusOf = (pid) => {
  try { return fs.readFileSync(`/proc/${pid}/status`, 'utf8'); } catch { return ''; }
};
const field = (status, name) => new RegExp(`^${name}:\\s+(.*)$`, 'm').exec(status)?.[1].trim();
const cmdline = (pid) => { try { return fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0'); } catch { return []; } };

/** The zygotes of this process's pools, and their children (forked sandboxes), as host pids. */
function zygotesAndChildren() {
  const all = descendants(process.pid);
  // A forked sandbox has its zygote's command line: the zygote is the one whose parent has not.
  const nodes = all.filter((pid) => cmdline(pid)[0] === process.execPath && cmdline(pid).includes('--zygote'));
  const parent = (pid) => Number(field(statusOf(pid), 'PPid'));
  const zygotes = nodes.filter((pid) => !nodes.includes(parent(pid)));
  const children = nodes.filter((pid) => zygotes.includes(parent(pid)));
  return { zygotes, children };
}

const WAIT_MS = 30_000;
const serving = (pool) => until(() => pool.stats.forkServer === '', 'the fork server serves', WAIT_MS, 50);

/** `body(pool)` with a pool of `options` (its fork server serving, unless `fork: false`), closed after. */
async function withPool(options, body) {
  const pool = createGradingPool({ onWarning: () => {}, ...options });
  try {
    await pool.ready;
    if (options.fork !== false) await serving(pool);
    return await body(pool);
  } finally {
    await pool.close();
  }
}

test('the build made the fork server\'s natives (./lab build), so the tests below run forked sandboxes', () => {
  assert.ok(nativesFit(SNAPSHOT_DIR), 'www/snapshot has no natives of this build: ./lab build makes them (cc)');
});

test('innerUid: the pool\'s uids map into the zygote\'s namespace one to one; its root and uids outside the block are refused', () => {
  const block = { root: SANDBOX_UID_BASE + 70, base: SANDBOX_UID_BASE + 64, count: 64 };
  assert.equal(innerUid(null, 5), -1);
  assert.equal(innerUid(block, null), -1);
  assert.equal(innerUid(block, block.base), 1);
  assert.equal(innerUid(block, block.base + 63), 64);
  assert.throws(() => innerUid(block, block.root), /not one of the fork server's/);
  assert.throws(() => innerUid(block, block.base - 1), /not one of the fork server's/);
  assert.throws(() => innerUid(block, block.base + 64), /not one of the fork server's/);
});

test('a forked sandbox may not fork, signal or stop the zygote, or start a process; the zygote serves on and the reference passes after', LIMIT, async (t) => {
  if (!ROOT) return t.skip(NO_ROOT);
  // The fork server starts beside the first sandboxes; every later one is forked.
  await withPool({ jobs: 2 }, async (pool) => {
    const lines = await Promise.all(Array.from({ length: 6 }, () => pool.grade({ source: ATTACKS })));
    // The last line of the message (the error's), not the traceback's source line.
    const observed = (l) => /RuntimeError: observed: (.*)$/m.exec(l.message)?.[1] ?? '';
    const forked = lines.filter((l) => observed(l).startsWith('forked'));
    assert.ok(forked.length >= 2, `forked: ${forked.length} of 6 (${lines.map((l) => l.message).join(' | ').slice(0, 500)})`);
    for (const l of forked) {
      assert.equal(l.status, 'error');
      assert.equal(observed(l), [
        'forked',
        'fork again: a forked sandbox may not fork',
        // Its parent, the zygote, is another uid's: the kernel refuses.
        'SIGSTOP to its parent: EPERM',
        'SIGKILL to its parent: EPERM',
        "a process: refused by Node's permissions",
        'uid not 0',
      ].join('; '));
    }
    const after = await pool.grade({ source: REFERENCE });
    assert.equal(after.status, 'pass', JSON.stringify(after).slice(0, 500));
    assert.equal(pool.stats.forkServer, '', 'the fork server still serves');
  });
});

test('from outside: each forked sandbox runs as a uid of its own (under root), with no capabilities and no new privileges, a child of the zygote', LIMIT, async (t) => {
  if (!ROOT) return t.skip(NO_ROOT);
  await withPool({ jobs: 2 }, async (pool) => {
    // Two submissions that wait (a busy loop of 2 s at import), once the spares are forked.
    await pool.grade({ source: REFERENCE });
    await pool.grade({ source: REFERENCE });
    const busy = 'import time\nt = time.time()\nwhile time.time() - t < 2:\n    pass\n' + REFERENCE;
    const running = Promise.all([pool.grade({ source: busy }), pool.grade({ source: busy })]);
    const seen = await until(() => {
      const { zygotes, children } = zygotesAndChildren();
      return zygotes.length === 1 && children.length >= 2 && { zygote: zygotes[0], children };
    }, 'two forked sandboxes running under one zygote', WAIT_MS, 50);
    const zygoteUid = Number(field(statusOf(seen.zygote), 'Uid').split(/\s+/)[0]);
    const uids = new Set();
    for (const pid of seen.children) {
      const status = statusOf(pid);
      const ids = field(status, 'Uid').split(/\s+/).map(Number);
      assert.ok(ids.every((u) => u === ids[0]), `real, effective, saved and fs uid alike: ${ids}`);
      assert.ok(ids[0] >= SANDBOX_UID_BASE && ids[0] !== zygoteUid, `its own sandbox uid: ${ids[0]} (zygote ${zygoteUid})`);
      assert.equal(field(status, 'CapEff'), '0000000000000000');
      assert.equal(field(status, 'CapPrm'), '0000000000000000');
      assert.equal(field(status, 'NoNewPrivs'), '1');
      uids.add(ids[0]);
    }
    assert.equal(uids.size, seen.children.length, 'no two forked sandboxes share a uid');
    const results = await running;
    for (const r of results) assert.equal(r.status, 'pass');
  });
});

test('a zygote that dies between submissions: the pool spawns sandboxes meanwhile, grades right, and starts another', LIMIT, async (t) => {
  if (!ROOT) return t.skip(NO_ROOT);
  await withPool({ jobs: 1 }, async (pool) => {
    assert.equal((await pool.grade({ source: REFERENCE })).status, 'pass');
    const { zygotes } = zygotesAndChildren();
    assert.equal(zygotes.length, 1);
    process.kill(zygotes[0], 'SIGKILL');
    await until(() => pool.stats.forkServer !== '', 'the pool knows its fork server is gone', WAIT_MS, 50);
    // The spare forked before the kill died with the zygote and was replaced by a
    // spawned one, which grades the next submission.
    const forked = pool.stats.forked;
    assert.equal((await pool.grade({ source: REFERENCE })).status, 'pass');
    await serving(pool);   // another one
    assert.equal(pool.stats.forkServerRestarts, 1);
    for (let i = 0; i < 3; i++) assert.equal((await pool.grade({ source: REFERENCE })).status, 'pass');
    assert.ok(pool.stats.forked > forked, 'sandboxes are forked again');
    assert.equal(zygotesAndChildren().zygotes.length, 1, 'one zygote, the new one');
  });
});

test('the spawner killed: the zygote and every sandbox it forked go with it, and the pool grades on', LIMIT, async (t) => {
  if (!ROOT) return t.skip(NO_ROOT);
  await withPool({ jobs: 1 }, async (pool) => {
    assert.equal((await pool.grade({ source: REFERENCE })).status, 'pass');
    const { zygotes, children } = zygotesAndChildren();
    assert.equal(zygotes.length, 1);
    assert.equal(children.length, 1, 'its forked spare');
    const spawner = descendants(process.pid).find((pid) => cmdline(pid).some((a) => a.endsWith('spawner.mjs')));
    const gone = [...zygotes, ...children];
    process.kill(spawner, 'SIGKILL');
    await until(() => gone.every((pid) => !statusOf(pid) || /^State:\s+Z/m.test(statusOf(pid))), 'the zygote and its child are gone', WAIT_MS, 50);
    assert.equal((await pool.grade({ source: REFERENCE })).status, 'pass');
  });
});

test('a forked sandbox stopped at the limit ends at once: its thread is not replaced, and the report is a spawned sandbox\'s', LIMIT, async (t) => {
  if (!ROOT) return t.skip(NO_ROOT);
  const loop = fs.readFileSync(new URL('hostile/loop_swallows_interrupt.py', import.meta.url), 'utf8');
  const reports = {};
  for (const fork of [true, false]) {
    await withPool({ jobs: 1, timeoutS: 3, fork }, async (pool) => {
      if (fork) await pool.grade({ source: REFERENCE });   // the spare after it is forked
      const forked = pool.stats.forked;
      reports[fork] = await pool.grade({ source: loop, seed: 1, hidden: { seed: 5, statuses: 'each' } });
      if (fork) assert.equal(pool.stats.forked, forked + 1, 'a forked sandbox graded it (and its spare was forked)');
      assert.equal(pool.stats.threadsHung, 0, 'no grading thread waited past the stop');
    });
  }
  const strip = (l) => ({ ...l, duration_ms: 0 });
  assert.deepEqual(strip(reports.true), strip(reports.false));
  assert.match(reports.true.tests[0].message, /^Step 1 of 1/);
});
