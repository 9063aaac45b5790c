// The grading sandbox: one process for ONE submission, then it is killed. It is
// started by pool.mjs ahead of time (never by hand) inside bubblewrap (jail.mjs:
// its own user, PID, network, IPC and mount namespaces, a read-only view of the
// files below, rlimits), under Node's permission model, with code generation from
// strings disabled and an empty environment.
//
// It holds no grader: no tests, no reference, no expected values. It runs the
// learner's Python (Pyodide, restored from a memory snapshot, and solution_runner.py, as
// the page does) and nothing else. Over its two pipes (frames.mjs) the coordinator
// sends the source to load, then one learner call at a time; every operation the
// call makes on its world (kv, provider, rng, clock, and each of the courier lab's
// SQL statements, whose database is the coordinator's too) is a question to the
// coordinator, which owns the world and answers. So a sandbox that is taken over
// (Python reaching JavaScript, say) knows only the inputs of the calls made so
// far and the rows its statements read, and can hurt only itself.
//
// argv: MEMORY_MB SNAPSHOT_FILE [CODE_CACHE_FILE]; or --make-snapshot FILE (the
// pool's trusted first step, no learner code: it writes the snapshot every sandbox
// restores from, and its index); or --make-code-cache SNAPSHOT_FILE FILE (the
// second: a sandbox's own start, then V8's compiled code of Pyodide's JS to FILE).
import fs from 'node:fs';
import { channel, FRAME_CAP_BYTES, SANDBOX_IN_FD, SANDBOX_OUT_FD } from './frames.mjs';
import { bridgeOf } from '../host/engine.mjs';
import { BRIDGE_FILE, labsFileOf, loadPython, pyodideCodeCache, SNAPSHOT_IMPORTS, writeSnapshot } from './python.mjs';

// --zygote FORKER MEMORY_MB SNAPSHOT_FILE [CODE_CACHE_FILE]: a fork server (issue
// 39): restored once, it forks a fresh sandbox per request (forker/forker.c).
const zygote = process.argv[2] === '--zygote' ? process.argv[3] : null;
const argv = zygote ? process.argv.slice(2) : process.argv;
const mode = argv[2];
const makeSnapshotTo = mode === '--make-snapshot' ? argv[3] : null;
const makeCodeCacheTo = mode === '--make-code-cache' ? argv[4] : null;
const memoryMb = makeSnapshotTo || makeCodeCacheTo ? 512 : Number(argv[2] || 512);
const snapshotFile = makeSnapshotTo ? null : argv[3];
const codeCacheFile = makeSnapshotTo || makeCodeCacheTo ? null : argv[4] || null;
const exit = process.exit.bind(process);

// Pyodide's NODEFS asks process.binding('constants') for the fs flags at start;
// the permission model denies process.binding, so it gets the same constants.
const denied = process.binding;
process.binding = (name) => (name === 'constants' ? { fs: fs.constants } : denied.call(process, name));

const bridgeSource = fs.readFileSync(BRIDGE_FILE, 'utf8');
// The labs' Python sides, which the pool wrote beside the snapshot.
const labs = JSON.parse(fs.readFileSync(labsFileOf(makeSnapshotTo ?? argv[3]), 'utf8'));

if (makeSnapshotTo) {
  // An interpreter with the bridge's imports done and the bridge itself imported
  // (engine.mjs finds it in sys.modules); its state starts clean in every restore.
  const maker = await loadPython({ memoryMb, makeSnapshot: true });
  maker.runPython(SNAPSHOT_IMPORTS);
  bridgeOf(maker, bridgeSource, labs);
  writeSnapshot(makeSnapshotTo, maker.makeMemorySnapshot());
  exit(0);
}

const codeCache = makeCodeCacheTo ? new Uint8Array(0) : codeCacheFile ? fs.readFileSync(codeCacheFile) : null;
const pyodide = await loadPython({ memoryMb, snapshotFile, sparse: true, codeCache });
const py = bridgeOf(pyodide, bridgeSource, labs);
if (makeCodeCacheTo) {
  fs.writeFileSync(makeCodeCacheTo, pyodideCodeCache());
  exit(0);
}
// A lab's database (its store) is the coordinator's: this interpreter never gets
// its module (the labs' file holds only their learner sides), and the lab's `db`
// asks the call's world.
py.noInterrupts();

if (zygote) {
  // The fork server (fork_server.mjs): nothing of a submission ever runs here. Each
  // `fork` frame on its own pipes asks for a sandbox on a FIFO pair (`down`, `up`),
  // as `uid` of this jail's user namespace (-1: this process's), with `cpu_s` its
  // limit of CPU (jail.mjs RLIMITS, which the zygote itself is not held to); the answer is the
  // child's pid in this jail's PID namespace. forker.c reduces the child before it
  // returns here; it then serves one submission as a sandbox started alone does.
  const { createRequire } = await import('node:module');
  const forker = createRequire(import.meta.url)(zygote);
  const control = channel(SANDBOX_IN_FD, SANDBOX_OUT_FD);
  control.send({ t: 'ready' });
  for (;;) {
    let m;
    try { m = control.receive(); } catch { exit(0); }
    if (m.t !== 'fork' || !Number.isInteger(m.uid) || typeof m.down !== 'string' || typeof m.up !== 'string' || !Number.isInteger(m.cpu_s)) exit(0);
    let pid;
    try {
      pid = forker.fork(m.uid, m.down, m.up, m.cpu_s);
    } catch (e) {
      control.send({ t: 'failed', error: String(e.message).slice(0, 200) });
      continue;
    }
    if (pid === 0) break;
    control.send({ t: 'forked', pid });
  }
}
serve(channel(SANDBOX_IN_FD, SANDBOX_OUT_FD));

function serve(wire) {

  // A world whose every operation is a question to the coordinator: `op(name,
  // ...args)`, as the grader's own world object is called. An answer that is not one
  // ends this process: the coordinator has stopped trusting it anyway. `ops` are the
  // names the load frame lists (the lab's world's, or the store's); `extra` carries
  // what the call frame says of the world beyond its operations (a store's `db`: its
  // settings, and whether the connection is new).
  function remoteWorld(ops, extra) {
    return {
      ...extra,
      op(op, ...args) {
        if (!ops.includes(op)) throw new Error(`the world has no operation ${String(op).slice(0, 40)}`);
        try {
          wire.send({ t: 'op', op, args: args.map((a) => (a === undefined ? null : a)) });
        } catch (e) {
          // Nothing was written: the learner's code gets a clear error instead.
          if (e instanceof RangeError) throw new Error(`${op}: its arguments are larger than the ${CAP_MB} MB one operation may carry`);
          throw e;
        }
        const a = wire.receive();
        if (a.t !== 'ans') exit(5);
        if (typeof a.threw === 'string') throw new Error(a.threw);
        return a.v;
      },
    };
  }

  const CAP_MB = FRAME_CAP_BYTES >> 20;
  // A frame over the cap is never sent (frames.mjs checks before writing): a value
  // or a message that large is answered as what it is instead.
  function sendOr(frame, instead) {
    try {
      wire.send(frame);
    } catch (e) {
      if (!(e instanceof RangeError)) throw e;
      wire.send(instead);
    }
  }
  const hostError = (message) => JSON.stringify({ error: { kind: 'host', message } });

  try {
    wire.send({ t: 'ready' });
    const load = wire.receive();
    if (load.t !== 'load') exit(5);
    const limitS = load.limit_s;
    py.useLab(String(load.lab));
    const ops = Array.isArray(load.ops) ? load.ops.map(String) : [];
    sendOr({ t: 'loaded', v: py.load(String(load.source), JSON.stringify(load.functions), limitS) },
      { t: 'loaded', v: JSON.stringify({ error: `Loading your code produced a message larger than ${CAP_MB} MB, so no test ran.` }) });
    for (;;) {
      const m = wire.receive();
      if (m.t === 'call') {
        const world = m.world === true ? remoteWorld(ops, { db: String(m.db ?? '') }) : null;
        const v = py.call(m.fn, m.args, world, limitS);
        // Not text: the interpreter ended under the call (os._exit, say); so does this
        // process, and the coordinator reports that.
        if (typeof v !== 'string') exit(6);
        sendOr({ t: 'ret', v },
          { t: 'ret', v: hostError(`\`${m.fn}\` returned a value larger than the ${CAP_MB} MB the grader takes`) });
      } else if (m.t === 'out') {
        let v = null;
        try { v = py.takeOutput() ?? null; } catch { /* an interpreter that exited: no output */ }
        wire.send({ t: 'out', v });
      } else {
        exit(0);
      }
    }
  } catch {
    // The pipe closed (the coordinator is done with it) or the interpreter ended.
    exit(0);
  }
}
