// The grading sandbox: one process for ONE submission, then it is killed. It is
// started by pool.mjs ahead of time (never by hand) inside bubblewrap (jail.mjs:
// its own user, PID, network, IPC and mount namespaces, a read-only view of the
// files below, rlimits), under Node's permission model, with code generation from
// strings disabled and an empty environment.
//
// It holds no grader: no tests, no reference, no expected values. It runs the
// learner's Python (Pyodide, restored from a memory snapshot, and bridge.py, as
// the page does) and nothing else. Over its two pipes (frames.mjs) the coordinator
// sends the source to load, then one learner call at a time; every operation the
// call makes on its world (kv, provider, rng, clock, database fault points) is a
// question to the coordinator, which owns the world and answers. So a sandbox that
// is taken over (Python reaching JavaScript, say) knows only the inputs of the calls
// made so far, and can hurt only itself.
//
// argv: MEMORY_MB SNAPSHOT_FILE, or --make-snapshot FILE (the pool's trusted first
// step, no learner code: it writes the snapshot every sandbox restores from).
import fs from 'node:fs';
import { capWasmMemory } from './wasm_memcap.mjs';
import { channel, FRAME_CAP_BYTES, SANDBOX_IN_FD, SANDBOX_OUT_FD } from './frames.mjs';
import { bridgeOf, WORLD_OPS } from '../src/engine.mjs';

const WWW = new URL('../', import.meta.url);
const PYODIDE_DIR = new URL('node_modules/pyodide/', WWW).pathname;
const makeSnapshotTo = process.argv[2] === '--make-snapshot' ? process.argv[3] : null;
const memoryMb = makeSnapshotTo ? 512 : Number(process.argv[2] || 512);
const snapshotFile = makeSnapshotTo ? null : process.argv[3];
const exit = process.exit.bind(process);

// Pyodide's binary, with its memory capped: Pyodide defines its memory inside the
// module, so the maximum is written into the bytes before they are compiled.
const origInstantiate = WebAssembly.instantiate.bind(WebAssembly);
const pyodideBytes = fs.readFileSync(`${PYODIDE_DIR}pyodide.asm.wasm`);
WebAssembly.instantiate = async function instantiate(src, imports) {
  const isPyodide = src && !(src instanceof WebAssembly.Module) && src.byteLength === pyodideBytes.byteLength;
  if (!isPyodide) return origInstantiate(src, imports);
  const module = await WebAssembly.compile(capWasmMemory(pyodideBytes, memoryMb * 16).bytes);
  return { module, instance: await origInstantiate(module, imports) };
};

// Pyodide's loader reads its binary again, for nothing: the capped module above is
// what gets instantiated. It is handed the bytes already read (9.6 MB less to read).
const readFile = fs.promises.readFile;
fs.promises.readFile = function cachedRead(file, ...rest) {
  if (file === `${PYODIDE_DIR}pyodide.asm.wasm`) return Promise.resolve(pyodideBytes);
  return readFile.call(this, file, ...rest);
};

// Pyodide's NODEFS asks process.binding('constants') for the fs flags at start;
// the permission model denies process.binding, so it gets the same constants.
const denied = process.binding;
process.binding = (name) => (name === 'constants' ? { fs: fs.constants } : denied.call(process, name));

const { loadPyodide } = await import(new URL('pyodide.mjs', `file://${PYODIDE_DIR}`).href);
const bridgeSource = fs.readFileSync(new URL('src/bridge.py', WWW), 'utf8');
const quiet = () => {};
const pyOptions = {
  indexURL: PYODIDE_DIR,
  lockFileContents: JSON.parse(fs.readFileSync(`${PYODIDE_DIR}pyodide-lock.json`, 'utf8')),
  stdout: quiet,
  stderr: quiet,
  stdin: () => null,
  env: { HOME: '/home/pyodide' },
};

if (makeSnapshotTo) {
  // An interpreter with the bridge's imports done and the bridge itself imported
  // (engine.mjs finds it in sys.modules); its state starts clean in every restore.
  const maker = await loadPyodide({ ...pyOptions, _makeSnapshot: true });
  maker.runPython('import json, linecache, math, sys, traceback, types, random, sqlite3');
  bridgeOf(maker, bridgeSource);
  fs.writeFileSync(makeSnapshotTo, maker.makeMemorySnapshot());
  exit(0);
}

const pyodide = await loadPyodide({ ...pyOptions, _loadSnapshot: new Uint8Array(fs.readFileSync(snapshotFile)) });
const py = bridgeOf(pyodide, bridgeSource);
const wire = channel(SANDBOX_IN_FD, SANDBOX_OUT_FD);

// A world whose every operation is a question to the coordinator. An answer that
// is not one ends this process: the coordinator has stopped trusting it anyway.
// One exception saves most of the courier lab's round trips: while the coordinator
// says its world's statements are free (no fault can land on one), a statement is
// answered "go" here and handed over, in order, with the next question or the
// call's answer (StepWorld::statements_free).
function remoteWorld(kind, free) {
  const world = { pending: [] };
  for (const op of Object.keys(WORLD_OPS[kind])) {
    world[op] = (...args) => {
      if (op === 'statement' && free) {
        world.pending.push(args[0] === true);
        return 'go';
      }
      const frame = { t: 'op', op, args: args.map((a) => (a === undefined ? null : a)) };
      if (world.pending.length) frame.pending = world.pending;
      try {
        wire.send(frame);
        // Handed over only once written: a frame refused as too large keeps them.
        world.pending = [];
      } catch (e) {
        // Nothing was written: the learner's code gets a clear error instead.
        if (e instanceof RangeError) throw new Error(`${op}: its arguments are larger than the ${CAP_MB} MB one operation may carry`);
        throw e;
      }
      const a = wire.receive();
      if (a.t !== 'ans') exit(5);
      free = a.free === true;
      if (typeof a.threw === 'string') throw new Error(a.threw);
      return a.v;
    };
  }
  return world;
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
  sendOr({ t: 'loaded', v: py.load(String(load.source), JSON.stringify(load.functions), limitS) },
    { t: 'loaded', v: JSON.stringify({ error: `Loading your code produced a message larger than ${CAP_MB} MB, so no test ran.` }) });
  for (;;) {
    const m = wire.receive();
    if (m.t === 'call') {
      const world = m.world ? remoteWorld(m.world, m.free === true) : null;
      const v = py.call(m.fn, m.args, world, limitS);
      // Not text: the interpreter ended under the call (os._exit, say); so does this
      // process, and the coordinator reports that.
      if (typeof v !== 'string') exit(6);
      const pending = world && world.pending.length ? { pending: world.pending } : {};
      sendOr({ t: 'ret', v, ...pending },
        { t: 'ret', v: hostError(`\`${m.fn}\` returned a value larger than the ${CAP_MB} MB the grader takes`), ...pending });
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
