// The grading sandbox: one process that runs learners' Python, one submission
// at a time, each in a fresh interpreter. It is started by pool.mjs (never by
// hand) inside an empty network namespace, as user nobody, under Node's
// permission model (reads of its own code, the grader and Pyodide only; no
// writes, no child processes, no workers), with code generation from strings
// disabled and an empty environment. It talks to the coordinator over the IPC
// channel only; its stdout and stdin are /dev/null.
//
// Per submission it restores Pyodide from a memory snapshot taken once at start
// (the WebAssembly module is compiled once per process, with its memory capped),
// grades through the same engine.mjs and bridge.py as the page, and sends back
// the report with a transcript of every learner call. The coordinator replays the
// transcript against its own grader: its verdict, not this one, is printed.
import fs from 'node:fs';
import { capWasmMemory } from './wasm_memcap.mjs';
import { createEngine } from '../src/engine.mjs';

const WWW = new URL('../', import.meta.url);
const PYODIDE_DIR = new URL('node_modules/pyodide/', WWW).pathname;
// argv: MEMORY_MB SNAPSHOT_FILE, or --make-snapshot FILE (the pool's trusted
// first step: it writes the snapshot every sandbox then restores from).
const makeSnapshotTo = process.argv[2] === '--make-snapshot' ? process.argv[3] : null;
const memoryMb = makeSnapshotTo ? 512 : Number(process.argv[2] || 512);
const snapshotFile = makeSnapshotTo ? null : process.argv[3];
const send = makeSnapshotTo ? () => {} : process.send.bind(process);
const exit = process.exit.bind(process);

// Pyodide's binary, compiled once for the process with its memory capped; every
// fresh interpreter instantiates this same module.
const origInstantiate = WebAssembly.instantiate.bind(WebAssembly);
let pyodideModule = null;
const pyodideBytes = fs.readFileSync(`${PYODIDE_DIR}pyodide.asm.wasm`);
WebAssembly.instantiate = async function instantiate(src, imports) {
  const isPyodide = src && !(src instanceof WebAssembly.Module) && src.byteLength === pyodideBytes.byteLength;
  if (!isPyodide) return origInstantiate(src, imports);
  if (!pyodideModule) {
    pyodideModule = await WebAssembly.compile(capWasmMemory(pyodideBytes, memoryMb * 16).bytes);
  }
  const instance = await origInstantiate(pyodideModule, imports);
  return { module: pyodideModule, instance };
};

// Pyodide's NODEFS asks process.binding('constants') for the fs flags at start;
// the permission model denies process.binding, so it gets the same constants.
const denied = process.binding;
process.binding = (name) => (name === 'constants' ? { fs: fs.constants } : denied.call(process, name));

// Every restore would read Pyodide's 9.6 MB binary (unused: the compiled module
// above is instantiated instead) and the 2.5 MB standard library again; they are
// read once. The library is handed out as a copy, since the interpreter's
// in-memory file system keeps what it is given.
const stdlibPath = `${PYODIDE_DIR}python_stdlib.zip`;
const stdlibBytes = fs.readFileSync(stdlibPath);
const readFile = fs.promises.readFile;
fs.promises.readFile = function cachedRead(file, ...rest) {
  if (file === `${PYODIDE_DIR}pyodide.asm.wasm`) return Promise.resolve(pyodideBytes);
  if (file === stdlibPath) return Promise.resolve(Buffer.from(stdlibBytes));
  return readFile.call(this, file, ...rest);
};
const lockFileContents = JSON.parse(fs.readFileSync(`${PYODIDE_DIR}pyodide-lock.json`, 'utf8'));
const { loadPyodide } = await import(new URL('pyodide.mjs', `file://${PYODIDE_DIR}`).href);
const pkg = await import(new URL('pkg/delivery_lab.js', WWW).href);
await pkg.default({ module_or_path: fs.readFileSync(new URL('pkg/delivery_lab_bg.wasm', WWW)) });
const bridgeSource = fs.readFileSync(new URL('src/bridge.py', WWW), 'utf8');

const quiet = () => {};
const pyOptions = { indexURL: PYODIDE_DIR, lockFileContents, stdout: quiet, stderr: quiet, stdin: () => null, env: { HOME: '/home/pyodide' } };

// The snapshot: an interpreter with the bridge's imports done, taken once per
// pool (by `--make-snapshot`), or by this process when it was given none.
let snapshot;
if (snapshotFile) {
  snapshot = new Uint8Array(fs.readFileSync(snapshotFile));
} else {
  const maker = await loadPyodide({ ...pyOptions, _makeSnapshot: true });
  maker.runPython('import json, linecache, math, sys, traceback, types, random');
  // The bridge itself, compiled and imported once (engine.mjs finds it in
  // sys.modules); its state starts clean in every restored interpreter.
  maker.FS.mkdirTree('/delivery_lab');
  maker.FS.writeFile('/delivery_lab/delivery_lab_bridge.py', bridgeSource);
  maker.runPython('import sys\nsys.path.insert(0, "/delivery_lab")\nimport delivery_lab_bridge');
  snapshot = maker.makeMemorySnapshot();
  if (makeSnapshotTo) {
    fs.writeFileSync(makeSnapshotTo, snapshot);
    exit(0);
  }
}

// A restored interpreter; the engine for a submission's lab is made on it when
// the submission arrives (a few ms: the bridge is already imported).
async function freshEngine() {
  const pyodide = await loadPyodide({ ...pyOptions, _loadSnapshot: snapshot });
  const alarms = pyodide.pyimport('delivery_lab_bridge').alarms_json;
  return { pyodide, alarms };
}

// A fingerprint of the JavaScript realm (the global object, the built-in
// constructors and their prototypes, `process`): learner code that reached
// JavaScript and changed any of it leaves this process unfit for the next
// submission, so the process says so and the coordinator replaces it.
const INTRINSICS = [globalThis, Object, Function, Array, String, Number, Boolean, Symbol, JSON, Math,
  Reflect, Promise, Error, TypeError, RangeError, Map, Set, WeakMap, WeakRef, ArrayBuffer, Uint8Array,
  DataView, WebAssembly, WebAssembly.Module, WebAssembly.Instance, WebAssembly.Memory, Proxy, BigInt,
  process, Buffer, TextDecoder, TextEncoder, Date, RegExp];
const fingerprintTargets = [];
for (const o of INTRINSICS) {
  fingerprintTargets.push(o);
  if (typeof o === 'function' && o.prototype) fingerprintTargets.push(o.prototype);
  const proto = Object.getPrototypeOf(o);
  if (proto) fingerprintTargets.push(proto);
}
// EventEmitter bookkeeping on `process` that Pyodide's instances change; the
// listeners themselves are counted separately.
const VOLATILE = new Set(['_events', '_eventsCount', 'exitCode']);
function fingerprint() {
  return fingerprintTargets.map((o) => {
    const d = Object.getOwnPropertyDescriptors(o);
    return [Object.getPrototypeOf(o), Object.isExtensible(o),
      ...Reflect.ownKeys(d).filter((k) => !(o === process && VOLATILE.has(k)))
        .flatMap((k) => [k, d[k].value, d[k].get, d[k].set, d[k].writable])];
  });
}
function sameFingerprint(a, b) {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) {
    if (a[i].length !== b[i].length) { diff = `target ${i} length ${a[i].length} -> ${b[i].length}: ${b[i].filter((x) => typeof x === 'string' && !a[i].includes(x)).join(',')}`; return false; }
    for (let j = 0; j < a[i].length; j++) if (!Object.is(a[i][j], b[i][j])) { diff = `target ${i} at ${String(a[i][j - (j % 5) + 2] ?? '')}`; return false; }
  }
  return true;
}
let diff = '';

// The next submission's interpreter is restored while this process waits.
let next = freshEngine();
await next;
let queue = Promise.resolve();
process.on('message', (msg) => {
  if (!msg || msg.type !== 'grade') return;
  queue = queue.then(() => grade(msg));
});
process.on('disconnect', () => exit(0));
const clean = fingerprint();
send({ type: 'ready', pid: process.pid });

async function grade({ id, lab, source, seed }) {
  let engine, alarms, interpreter, compiles = true;
  try {
    interpreter = await next;
    const { pyodide } = interpreter;
    ({ alarms } = interpreter);
    // Python's own compile(), before the bridge runs anything of the submission: a
    // source it refuses never ran, so its interpreter stays as fresh as a restored
    // one. Decided here, so nothing a submission does can make it look unused.
    const builtins = pyodide.pyimport('builtins');
    try {
      builtins.compile(String(source), 'solution.py', 'exec').destroy();
    } catch {
      compiles = false;
    } finally {
      builtins.destroy();
    }
    engine = createEngine({ pyodide, Grader: pkg.Grader, bridgeSource, ...(lab ? { labId: lab } : {}) });
  } catch (e) {
    send({ type: 'result', id, report: null, transcript: [], failure: `no fresh interpreter: ${e && e.message}`, ms: 0, alarms: [], tainted: true });
    exit(4);
  }
  send({ type: 'started', id });
  const transcript = [];
  let report = null;
  let failure = null;
  const t0 = performance.now();
  try {
    report = engine.run(source, { seed, transcript });
  } catch (e) {
    failure = String((e && e.message) || e).slice(0, 500);
  }
  const ms = performance.now() - t0;
  let alarm = [];
  let unanswered = false;
  try {
    alarm = JSON.parse(alarms());
  } catch {
    alarm = ['the bridge could not be asked for its alarms'];
    unanswered = true;
  }
  const tainted = unanswered || !sameFingerprint(clean, fingerprint());
  try {
    send({ type: 'result', id, report: report && JSON.stringify(report), transcript, failure, ms, alarms: alarm, tainted, diff, kept: !compiles && !tainted });
  } catch (e) {
    send({ type: 'result', id, report: null, transcript: [], failure: `the result could not be sent: ${e && e.message}`, ms, alarms: alarm, tainted: true });
  }
  // A refused import (an alarm) means the first wall held; the process is kept
  // unless its JavaScript realm changed, since the next submission gets a fresh
  // interpreter and its verdict is replayed outside anyway.
  if (tainted) {
    // Unfit for another submission: the coordinator replaces this process.
    setTimeout(() => exit(3), 10);
    await new Promise(() => {});
  }
  // A source that did not compile ran nothing: its interpreter serves the next
  // submission, sparing a restore (about 150 ms of CPU).
  next = compiles ? freshEngine() : Promise.resolve(interpreter);
  next.catch(() => {});
}
