// The grading worker: Pyodide and the grader live here, off the page's thread, so
// a learner's endless loop never freezes the page, and the page can stop it with
// an interrupt or throw the whole worker away.
//
// Messages (main -> worker):
//   {type:'init', interruptBuffer?, lab?}   load the grader, then Pyodide, for this lab
//   {type:'run', id, source, seed?}          grade source
//   {type:'timeout-report', id, message}     a report for a run stopped at the limit
//                                            (needs only the grader, not Pyodide)
// Messages (worker -> main):
//   {type:'progress', text}
//   {type:'ready', lab, ms}                  Pyodide and the grader are loaded
//   {type:'report', id, report, ms}
//   {type:'failed', text}                    loading failed (the page says so)
import bridgeSource from './bridge.py';
import { createEngine } from './engine.mjs';
import { loadLabGrader } from './grader_module.js';

const here = (p) => new URL(p, import.meta.url).href;
const post = (m) => self.postMessage(m);

let interruptBuffer = null;
// The build's first lab (the registry's course order) until init names one.
let labId = __DEFAULT_LAB__;
let graderReady = null; // Promise<Grader module>, for timeout reports before Python is up
let engineReady = null; // Promise<engine>

let Grader = null; // the class from this lab's grader module (pkg/labs/ID/)

async function loadGrader() {
  ({ Grader } = await loadLabGrader(labId, import.meta.url));
  return new Grader();
}

async function loadPython() {
  // Loaded at run time from our own origin, not bundled: Pyodide finds its other
  // files next to pyodide.mjs, and the service worker caches them as they are.
  const { loadPyodide } = await import(here('pyodide/pyodide.mjs'));
  return loadPyodide({
    indexURL: here('pyodide/'),
    // The learner's prints are captured by the bridge; anything else is ours.
    stdout: (s) => console.log('[python]', s),
    stderr: (s) => console.warn('[python]', s),
  });
}

async function loadEngine() {
  post({ type: 'progress', text: 'Loading Python…' });
  // The grader and Python load side by side.
  const [, pyodide] = await Promise.all([graderReady, loadPython()]);
  if (interruptBuffer) pyodide.setInterruptBuffer(interruptBuffer);
  post({ type: 'progress', text: 'Starting the grader…' });
  return createEngine({ pyodide, Grader, bridgeSource, labId });
}

async function start(msg) {
  const t0 = performance.now();
  interruptBuffer = msg.interruptBuffer || null;
  if (msg.lab) labId = msg.lab;
  graderReady = loadGrader();
  engineReady = loadEngine();
  try {
    const engine = await engineReady;
    post({ type: 'ready', lab: engine.lab, ms: Math.round(performance.now() - t0) });
  } catch (e) {
    post({ type: 'failed', text: `Python could not be loaded: ${e && e.message || e}` });
  }
}

async function run({ id, source, seed }) {
  const engine = await engineReady;
  // A stale interrupt (one that arrived after the last run ended) must not stop this one.
  if (interruptBuffer) interruptBuffer[0] = 0;
  const t0 = performance.now();
  let report;
  try {
    report = engine.run(source, { seed });
  } catch (e) {
    report = engine.errorReport(`The page could not grade this run: ${e && e.message || e}`, seed);
  }
  if (interruptBuffer) interruptBuffer[0] = 0;
  post({ type: 'report', id, report, ms: Math.round(performance.now() - t0) });
}

async function timeoutReport({ id, message, seed }) {
  const grader = await graderReady;
  const report = JSON.parse(grader.timeout_report(labId, seed ?? undefined, message));
  post({ type: 'report', id, report });
}

self.onmessage = (event) => {
  const msg = event.data || {};
  if (msg.type === 'init') start(msg);
  else if (msg.type === 'run') run(msg);
  else if (msg.type === 'timeout-report') timeoutReport(msg);
};
