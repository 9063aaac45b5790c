// The lab page. The grader (WASM) also loads here, on the page's thread: it is
// small, gives the instructions and starter code at once, and writes the report
// for a run whose worker had to be killed. Python loads in the worker on the
// first run (or straight away when it is already stored on this device).
import init, { Grader } from '../pkg/delivery_lab.js';
import { marked } from 'marked';
import { createEditor, createViewer, highlightPython } from './editor.js';
import { Runner } from './runner.js';
import { renderReport, h } from './results.js';
import { registerServiceWorker, offlineStatus, pyodideStored, topUp, formatBytes } from './offline.js';

const LAB_ID = 'deliver-once';
const $ = (id) => document.getElementById(id);
const storageKey = (k) => `delivery-lab:${LAB_ID}:${k}`;

// localStorage can throw (storage disabled, quota); the page works without it.
const store = {
  get(k) { try { return localStorage.getItem(storageKey(k)); } catch { return null; } },
  set(k, v) { try { localStorage.setItem(storageKey(k), v); return true; } catch { return false; } },
};

const state = {
  build: null, grader: null, lab: null, editor: null, runner: null,
  pythonReady: false, running: 0, lastReport: null, lastRun: null,
};

function setStatus(text, kind = '') {
  const el = $('status');
  el.textContent = text;
  el.dataset.kind = kind;
}

function limitS() {
  return state.lab ? state.lab.time_limit_s : 8;
}

/** The status line between runs: what Python costs, and the time limit. */
function showIdle() {
  const limit = `each run stops after ${limitS()} s`;
  if (state.pythonReady) setStatus(`Python is ready. Ctrl+Enter (⌘+Enter) runs the tests; ${limit}.`);
  else if (state.runner?.started) setStatus(`Loading Python, stored on this device… (${limit})`, 'busy');
  else {
    setStatus(`Python runs in your browser. Your first run downloads it once (about ${formatBytes(state.build.totals.pyodide.gzip)}), `
      + `then it is kept for offline use; ${limit}.`);
  }
}

// ---------------------------------------------------------------------------
// XP and the reference solution

function earnedXp() {
  try { return JSON.parse(store.get('xp') || 'null'); } catch { return null; }
}

function showXp() {
  const earned = earnedXp();
  const badge = $('xp-badge');
  badge.hidden = false;
  badge.classList.toggle('earned', !!earned);
  badge.textContent = earned ? `★ ${earned.xp} XP earned` : `${state.lab.xp} XP for a full pass`;
  $('compare').hidden = !earned;
}

function openCompare() {
  const view = $('compare-view');
  $('view-mine').replaceChildren();
  $('view-ref').replaceChildren();
  createViewer($('view-mine'), state.editor.getCode());
  createViewer($('view-ref'), state.lab.reference_py);
  view.showModal();
}

// ---------------------------------------------------------------------------
// Offline status

async function showOffline() {
  const badge = $('offline-badge');
  const s = await offlineStatus(state.build);
  badge.classList.toggle('ready', s.ready);
  if (!s.supported) {
    badge.textContent = 'Offline use not available';
    badge.title = 'This browser has no service workers here (they need https or localhost).';
  } else if (s.ready) {
    badge.textContent = `Ready offline · ${formatBytes(s.bytes)} stored`;
    badge.title = `The page, the grader and Python are stored on this device${s.usage ? ` (this site uses ${formatBytes(s.usage)} in all)` : ''}.`;
  } else if (s.app) {
    badge.textContent = 'Offline after your first run';
    badge.title = 'The page is stored; Python is stored the first time it loads.';
  } else {
    badge.textContent = 'Not yet stored for offline use';
    badge.title = 'The page is being stored for offline use.';
  }
  return s;
}

// ---------------------------------------------------------------------------
// Running

function startPython() {
  const first = !state.runner.started;
  const ready = state.runner.start();
  if (first) {
    const t0 = performance.now();
    ready.then(async () => {
      state.pythonReady = true;
      performance.mark('python-ready');
      console.info(`delivery-lab: Python ready in ${Math.round(performance.now() - t0)} ms`);
      await booted.catch(() => {}); // the status line needs the lab
      if (!state.running) showIdle();
      // Store anything the service worker missed, then say what is stored.
      await topUp(state.build);
      state.pyodideStored = true;
      showOffline();
    }, (e) => {
      setStatus(`${e.message} Reload the page to try again.`, 'error');
    });
  }
  return ready;
}

async function runTests() {
  performance.mark('run-click');
  state.running += 1;
  $('run').disabled = true;
  $('results').setAttribute('aria-busy', 'true');
  const source = state.editor.getCode();
  if (!state.runner.loaded) {
    setStatus(state.pyodideStored ? 'Loading Python…'
      : `Downloading Python (about ${formatBytes(state.build.totals.pyodide.gzip)}, only this once)…`, 'busy');
  }
  let outcome;
  try {
    await startPython();
    setStatus(`Running ${state.lab.tests.length} tests…`, 'busy');
    outcome = await state.runner.run(source);
  } catch (e) {
    const report = JSON.parse(state.grader.error_report(LAB_ID, undefined,
      `The page could not run your code: ${e.message || e}`));
    outcome = { report, ms: null, stopped: null, failed: true };
  } finally {
    state.running -= 1;
    $('run').disabled = state.running > 0;
    $('results').removeAttribute('aria-busy');
  }
  const { report, ms, stopped } = outcome;
  state.lastReport = report;
  state.lastRun = { ms, wallMs: outcome.wallMs ?? null, stopped };
  const results = $('results');
  results.hidden = false;
  renderReport(results, report, { ms, stopped, limitS: limitS(), onGoToLine: (n) => state.editor.goToLine(n) });
  performance.mark('results-drawn');
  performance.measure('run-to-results', 'run-click', 'results-drawn');
  // The next frame is when the learner can see it.
  requestAnimationFrame(() => performance.mark('results-painted'));

  if (report.status === 'pass') {
    if (!earnedXp()) store.set('xp', JSON.stringify({ xp: report.xp, at: new Date().toISOString() }));
    showXp();
  }
  // Results below the fold are scrolled to, without a jump when they are in view.
  results.querySelector('.summary')?.scrollIntoView({ block: 'nearest', behavior: 'smooth' });
  if (outcome.failed) setStatus(report.message, 'error');
  else if (report.status === 'error') setStatus('Your code could not be graded; the message below says why.', 'error');
  else if (stopped === 'terminated') setStatus(`Stopped after ${limitS()} s and restarted Python. Your code is unchanged; fix the loop and run again.`, 'error');
  else if (stopped) setStatus(`Interrupted at the ${limitS()} s limit. Your code is unchanged.`, 'error');
  else setStatus(`Graded in ${(ms / 1000).toFixed(2)} s. Ctrl+Enter runs again; each run stops after ${limitS()} s.`);
  return report;
}

// ---------------------------------------------------------------------------
// Start-up

function renderInstructions(md) {
  const el = $('instructions');
  el.innerHTML = marked.parse(md); // our own Markdown, from the grader
  for (const code of el.querySelectorAll('pre code.language-python')) highlightPython(code, code.textContent);
  for (const table of el.querySelectorAll('table')) {
    // Wide tables scroll on their own instead of widening the column.
    table.replaceWith(h('div.table-wrap', table.cloneNode(true)));
  }
}

async function boot() {
  const graderLoaded = init({ module_or_path: new URL('pkg/delivery_lab_bg.wasm', location.href) });
  const build = await fetch('build.json').then((r) => r.json());
  state.build = build;
  state.runner = new Runner({
    workerUrl: new URL('worker.js', location.href),
    limitS: 8, // until the lab says (below); nothing runs before then
    timeoutReport: (message, seed) => JSON.parse(state.grader.timeout_report(LAB_ID, seed ?? undefined, message)),
    onProgress: (text) => {
      if (!state.running) return;
      const download = !state.pyodideStored && text.startsWith('Loading Python');
      setStatus(download ? `Downloading Python (about ${formatBytes(build.totals.pyodide.gzip)}, only this once)…` : text, 'busy');
    },
  });
  // Stored already: load it now, side by side with the page, so the first run
  // does not wait. Otherwise the download waits for the learner's first run.
  const stored = pyodideStored(build).then((yes) => {
    state.pyodideStored = yes;
    if (yes) startPython();
  });

  await graderLoaded;
  state.grader = new Grader();
  const lab = JSON.parse(state.grader.lab(LAB_ID));
  state.lab = lab;
  state.runner.limitS = lab.time_limit_s;

  $('lab-meta').replaceChildren(
    h('span.chip', lab.level), h('span.chip', `about ${lab.minutes} min`),
    h('span.chip', `${lab.tests.filter((t) => t.kind === 'example').length} examples, ${lab.tests.filter((t) => t.kind === 'hidden').length} hidden tests`));
  renderInstructions(lab.instructions_md);

  const saved = store.get('code');
  let savedTimer = null;
  state.editor = createEditor($('editor'), saved ?? lab.starter_py, {
    onRun: () => { if (!$('run').disabled) runTests(); },
    onChange: (code) => {
      // Saved on every change: a reload or a crash never loses what was typed.
      const ok = store.set('code', code);
      $('saved').textContent = ok ? 'saved' : 'not saved (storage unavailable)';
      clearTimeout(savedTimer);
      savedTimer = setTimeout(() => { $('saved').textContent = ''; }, 1500);
    },
  });

  $('run').addEventListener('click', () => runTests());
  $('reset').addEventListener('click', () => {
    state.editor.setCode(lab.starter_py);
    setStatus('Starter code restored. Ctrl+Z brings your code back.');
    state.editor.focus();
  });
  $('compare').addEventListener('click', openCompare);
  $('compare-close').addEventListener('click', () => $('compare-view').close());
  showXp();

  await stored;
  if (!state.running) showIdle();

  registerServiceWorker().then(() => showOffline());
  navigator.serviceWorker?.addEventListener('controllerchange', () => showOffline());
  performance.mark('page-ready');
}

const booted = boot();
booted.catch((e) => {
  console.error(e);
  $('instructions').replaceChildren(h('p.error', `The lab could not start: ${e.message || e}`));
});

function needEditor() {
  if (!state.editor) throw new Error('deliveryLab: the page has not started yet; await deliveryLab.ready first');
}

// The page's small API, for tests, embedding and the benchmark.
window.deliveryLab = {
  /** Resolves once the page is up (instructions, editor); Python may not be loaded yet. */
  loaded: booted.then(() => undefined),
  /** Resolves once the page is up and Python and the grader are loaded; reading it starts the load, as a first run would. */
  get ready() {
    return booted.then(() => startPython()).then(() => undefined);
  },
  setCode(source) { needEditor(); state.editor.setCode(source); },
  getCode() { needEditor(); return state.editor.getCode(); },
  /** Runs the tests on the editor's code; resolves to the report (the engine's JSON, parsed). */
  run() { return booted.then(() => runTests()); },
  get lastReport() { return state.lastReport; },
  /** Timings of the last run: ms in the worker's engine, wallMs from posting it to its report. */
  get lastRun() { return state.lastRun; },
};
