// The grading worker: Pyodide and the grader live here, off the page's thread, so
// a learner's endless loop never freezes the page, and the page can stop it with
// an interrupt or throw the whole worker away.
//
// Messages (main -> worker):
//   {type:'init', interruptBuffer?, lab?}   load the grader, then Pyodide, for this lab
//   {type:'run', id, source, seed?, slowCallMs?, only?}  grade source (only: test names run alone; slowCallMs: tests only, each
//                                            call of the learner's code made that much slower)
//   {type:'timeout-report', id, message, only?}  a report for a run stopped at the limit (only: its tests)
//                                            (needs only the grader, not Pyodide)
// Messages (worker -> main):
//   {type:'progress', text}
//   {type:'ready', lab, ms, boot, why?}      Pyodide and the grader are loaded; boot says how:
//                                            'snapshot' (restored) or 'boot' (why: no snapshot)
//   {type:'snapshot', stored, bytes?, ms?, error?}  after a boot: the snapshot made and stored
//   {type:'run-progress', id, calls, busyMs, ms}  during a run, at most every 200 ms while
//                                            the learner's calls return (runner.js withProgress):
//                                            the page tells a slow run from a stuck one by it
//   {type:'report', id, report, ms}
//   {type:'failed', text}                    loading failed (the page says so)
import bridgeSource from '../host/solution_runner.py';
import { createEngine } from '../host/engine.mjs';
import { loadLabGrader } from './grader_module.js';
import { checkMark, findSnapshot, markSnapshot, SNAPSHOT_IMPORTS, storeSnapshot } from './snapshot.js';
import { withProgress } from './runner.js';

const here = (p) => new URL(p, import.meta.url).href;
const post = (m) => self.postMessage(m);

let interruptBuffer = null;
// The build's first lab (the registry's course order) until init names one.
let labId = __DEFAULT_LAB__;
let graderReady = null; // Promise<Grader module>, for timeout reports before Python is up
let engineReady = null; // Promise<engine>

let Grader = null; // the class from this lab's grader module (pkg/labs/ID/)
let current = null; // the run under way: {id, slowCallMs}

async function loadGrader() {
  ({ Grader } = await loadLabGrader(labId, import.meta.url));
  return new Grader();
}

// This lab's snapshot key (build.mjs: Pyodide version and the bridge's sources).
const snapshotKey = () => __SNAPSHOT_KEYS__[labId];

// Loaded at run time from our own origin, not bundled: Pyodide finds its other
// files next to pyodide.mjs, and the service worker caches them as they are. Its
// two scripts are imported side by side (Pyodide would import the second only
// after the first), and, when a snapshot is to be restored, its WASM is compiled
// while they load and the snapshot is read (Pyodide would start only after both).
let pyodideModule = null;
let asmModule = null;
const importPyodide = () => {
  asmModule ??= import(here('pyodide/pyodide.asm.mjs'));
  asmModule.catch(() => {}); // awaited (and reported) by createModule
  return (pyodideModule ??= import(here('pyodide/pyodide.mjs')));
};
let compiledWasm = null; // Promise<WebAssembly.Module>, once a snapshot is found
const WASM_URL = here('pyodide/pyodide.asm.wasm');

/**
 * Pyodide's module factory, with its WASM instantiated from `compiledWasm` when
 * there is one: Pyodide instantiates by WebAssembly.instantiateStreaming, which is
 * swapped for the time of the call, for that file only (the grader's WASM may be
 * instantiated meanwhile).
 */
async function createModule(settings) {
  const create = (await asmModule).default;
  if (!compiledWasm) return create(settings);
  const streaming = WebAssembly.instantiateStreaming;
  WebAssembly.instantiateStreaming = async function fromCompiled(source, imports) {
    const response = await source;
    if (response.url !== WASM_URL) return streaming.call(this, response, imports);
    let module;
    try {
      module = await compiledWasm;
    } catch {
      return streaming.call(this, response, imports); // compiled from Pyodide's own fetch instead
    }
    return { module, instance: await WebAssembly.instantiate(module, imports) };
  };
  try {
    return await create(settings);
  } finally {
    WebAssembly.instantiateStreaming = streaming;
  }
}

async function loadPython(snapshot) {
  const { loadPyodide } = await importPyodide();
  return loadPyodide({
    indexURL: here('pyodide/'),
    createPyodideModule: createModule,
    // The learner's prints are captured by the bridge; anything else is ours.
    stdout: (s) => console.log('[python]', s),
    stderr: (s) => console.warn('[python]', s),
    // A promise: the snapshot's bytes are read while Pyodide's files load.
    ...(snapshot ? { _loadSnapshot: snapshot } : { _makeSnapshot: true }),
  });
}

async function engineOn(pyodide) {
  // Set either way: a restored memory holds the flag of the worker that made it.
  pyodide.setInterruptBuffer(interruptBuffer || undefined);
  post({ type: 'progress', text: 'Starting the grader…' });
  await graderReady;
  // Every call of the learner's code counted: the page stops a run that makes no
  // progress, and lets a slow one that does go on (runner.js).
  const Counted = withProgress(Grader, (p) => { if (current) post({ type: 'run-progress', id: current.id, ...p }); },
    { slowCallMs: () => current?.slowCallMs ?? 0 });
  return createEngine({ pyodide, Grader: Counted, bridgeSource, labId });
}

/** Restores the stored snapshot; null, saying why, when there is none or it fails. */
async function restore(found) {
  if (found.missing) return { why: found.missing };
  // Pyodide is stored (a boot that loaded it made the snapshot): one more read of
  // its WASM costs little, and compiling it now takes it off the critical path.
  compiledWasm = WebAssembly.compileStreaming(fetch(WASM_URL));
  compiledWasm.catch(() => {}); // createModule then compiles from Pyodide's own fetch
  try {
    const pyodide = await loadPython(found.bytes);
    checkMark(pyodide, snapshotKey());
    return { engine: await engineOn(pyodide) };
  } catch (e) {
    console.warn('delivery-lab: the stored snapshot did not restore; booting Python instead:', e);
    return { why: `it did not restore (${e && e.message || e})` };
  }
}

async function loadEngine() {
  post({ type: 'progress', text: 'Loading Python…' });
  if (!snapshotKey()) {
    await graderReady; // says which lab is missing
    throw new Error(`there is no lab "${labId}" here`);
  }
  // The grader, Pyodide's scripts and the snapshot's lookup load side by side.
  importPyodide().catch(() => {}); // awaited (and reported) by loadPython
  const restored = await restore(await findSnapshot(self.location.href, labId, snapshotKey()));
  if (restored.engine) return { engine: restored.engine, boot: 'snapshot' };
  const pyodide = await loadPython(null);
  return { engine: await engineOn(pyodide), boot: 'boot', why: restored.why, pyodide };
}

/**
 * After a normal boot, before any learner code: the interpreter as it is now (the
 * bridge and its imports loaded, nothing run), stored for the next visit. The
 * imports and the copy are synchronous, so a run that is already waiting starts
 * after them; the cache write goes on beside it.
 */
function makeSnapshot(pyodide) {
  const t0 = performance.now();
  let bytes;
  try {
    pyodide.runPython(SNAPSHOT_IMPORTS);
    markSnapshot(pyodide, snapshotKey());
    bytes = pyodide.makeMemorySnapshot();
  } catch (e) {
    post({ type: 'snapshot', stored: false, error: String(e && e.message || e) });
    return;
  }
  storeSnapshot(self.location.href, labId, snapshotKey(), bytes).then(
    () => post({ type: 'snapshot', stored: true, bytes: bytes.byteLength, ms: Math.round(performance.now() - t0) }),
    (e) => post({ type: 'snapshot', stored: false, error: String(e && e.message || e) }));
}

async function start(msg) {
  const t0 = performance.now();
  interruptBuffer = msg.interruptBuffer || null;
  if (msg.lab) labId = msg.lab;
  graderReady = loadGrader();
  // Runs wait for this promise, so for the snapshot too: it must never hold a
  // learner's state.
  engineReady = loadEngine().then(({ engine, boot, why, pyodide }) => {
    post({ type: 'ready', lab: engine.lab, ms: Math.round(performance.now() - t0), boot, ...(why ? { why } : {}) });
    if (pyodide) makeSnapshot(pyodide);
    return engine;
  });
  engineReady.catch((e) => post({ type: 'failed', text: `Python could not be loaded: ${e && e.message || e}` }));
}

async function run({ id, source, seed, slowCallMs, only }) {
  const engine = await engineReady;
  // A stale interrupt (one that arrived after the last run ended) must not stop this one.
  if (interruptBuffer) interruptBuffer[0] = 0;
  const t0 = performance.now();
  let report;
  current = { id, slowCallMs: Number.isFinite(slowCallMs) && slowCallMs > 0 ? slowCallMs : 0 };
  try {
    // `only`: the page's "Run this test" (a list of names; the engine refuses any it lacks).
    report = engine.run(source, { seed, ...(Array.isArray(only) ? { only: only.map(String) } : {}) });
  } catch (e) {
    report = engine.errorReport(`The page could not grade this run: ${e && e.message || e}`, seed);
  } finally {
    current = null;
  }
  if (interruptBuffer) interruptBuffer[0] = 0;
  post({ type: 'report', id, report, ms: Math.round(performance.now() - t0) });
}

async function timeoutReport({ id, message, seed, only }) {
  const grader = await graderReady;
  const report = JSON.parse(grader.timeout_report(labId, seed ?? undefined, message, undefined, undefined, only ?? undefined));
  post({ type: 'report', id, report });
}

self.onmessage = (event) => {
  const msg = event.data || {};
  if (msg.type === 'init') start(msg);
  else if (msg.type === 'run') run(msg);
  else if (msg.type === 'timeout-report') timeoutReport(msg);
};
