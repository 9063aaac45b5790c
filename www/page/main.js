// The lab page. The grader (WASM) also loads here, on the page's thread: it is
// small, gives the instructions and starter code at once, and writes the report
// for a run whose worker had to be killed. Python loads in the worker on the
// first run (or straight away when it is already stored on this device).
import { marked } from 'marked';
import { createEditor, createViewer, highlightPython } from './editor.js';
import { Runner } from './runner.js';
import { renderReport, summarySentence, h } from './results.js';
import { registerServiceWorker, offlineStatus, pyodideStored, topUp, formatBytes } from './offline.js';
import { loadLabGrader } from './grader_module.js';
import { themeSwitch, scrollBehavior } from './theme.js';
import { labStore } from './progress.js';
import { renderPredict, renderHints, renderYourTurn } from './journey.js';

// ?embed: the compact layout for a host page's iframe, talking to the host by
// postMessage (www/page/EMBED.md) if the build allows any origin (build.mjs --allow-origin);
// ?lab=ID picks the lab; ?host-origin=ORIGIN[ ORIGIN…] narrows the build's origins
// to those (it can never add one).
const params = new URLSearchParams(location.search);
const EMBED = params.has('embed');
// __DEFAULT_LAB__: the registry's first lab, written in by build.mjs.
const LAB_ID = params.get('lab') || __DEFAULT_LAB__;
const $ = (id) => document.getElementById(id);
// What the page keeps on this device (progress.js): code, XP, best run, answers, hints.
const store = labStore(LAB_ID);

const state = {
  build: null, grader: null, lab: null, editor: null, runner: null,
  pythonReady: false, running: 0, lastReport: null, lastRun: null, runs: 0, unsavedSaid: false,
  // The journey (journey.js): this lab's entry in build.json's course, and its parts.
  journey: null, predict: null, hintCounts: null, yourTurn: null, next: null,
};

/**
 * What the staff see of the learner's journey, in each `result` message (EMBED.md):
 * the Predict answer and whether it was right, hints opened per task (never a
 * penalty: the score is the tests' alone), the Your turn answer.
 */
function journeyReport() {
  if (!state.journey) return null;
  const answerOf = (q, a) => (a === null || a === undefined ? null : { answer: a + 1, correct: a === q.correct });
  return {
    predict: answerOf(state.journey.predict, state.predict?.answer()),
    hints: state.hintCounts ? state.hintCounts() : { opened: 0, byTask: [] },
    ...(state.yourTurn ? { yourTurn: answerOf(state.journey.yourTurn, state.yourTurn.answer()) } : {}),
  };
}

/** The page was built without hidden tests: the server grades them (POST grade). */
const hiddenOnServer = () => state.build?.hidden === false;

// Opened from a course's LMS (LTI 1.3, docs/lms.md): the launch page links here with
// the launch's id in the fragment (#lti-launch=ID: never sent to a server, nor in a
// Referer). It is kept for this tab only (sessionStorage, so a reload keeps it) and
// taken out of the address; Submit then sends the code to the launch's endpoint,
// whose server grades it and sends that grade to the course's gradebook. Only in a
// tab of its own: a page that frames the lab cannot slip it a launch of its choosing.
const LTI_LAUNCH_KEY = `delivery-lab:lti-launch:${LAB_ID}`;
const ltiLaunch = window.top !== window ? null : (() => {
  const m = /^#lti-launch=([A-Za-z0-9_-]{16,128})$/.exec(location.hash);
  if (m) {
    try { sessionStorage.setItem(LTI_LAUNCH_KEY, m[1]); } catch { /* kept for this page only */ }
    history.replaceState(history.state, '', location.pathname + location.search);
    return m[1];
  }
  try { return sessionStorage.getItem(LTI_LAUNCH_KEY); } catch { return null; }
})();

// ---------------------------------------------------------------------------
// Embedding: the postMessage API, version 1 (www/page/EMBED.md)

const PROTOCOL = { source: 'delivery-lab', version: 1 };
const HOST_SOURCE = 'delivery-lab-host';
const MAX_CODE = 64 * 1024;

function parseOrigins(value) {
  const out = [];
  for (const o of (value || '').split(/[\s,]+/).filter(Boolean)) {
    try {
      const u = new URL(o);
      // An origin only: scheme, host, port; never "*" or "null".
      if (/^https?:$/.test(u.protocol) && u.origin !== 'null' && o.replace(/\/$/, '') === u.origin) out.push(u.origin);
      else console.warn(`delivery-lab: host-origin "${o}" is not an origin (https://host[:port]); ignored`);
    } catch {
      console.warn(`delivery-lab: host-origin "${o}" is not an origin; ignored`);
    }
  }
  return out;
}

// The build's facts (build.json), read once: boot() needs them, and so does every
// host message, which waits for them so that none is acted on before the lab knows
// whom it trusts.
const buildLoaded = fetch('build.json').then((r) => r.json());

const embed = {
  /** true once build.json is read, if some origin is trusted: the postMessage API is on. */
  enabled: false,
  /** The origins the build allows (build.mjs --allow-origin): set where the lab is deployed. */
  allowOrigins: [],
  /** The origins trusted here: allowOrigins, narrowed to ?host-origin when it is given. */
  hostOrigins: [],
  ignored: 0,
  log: [], // the last 50 ignored messages: {at, origin, type, reason}
  sent: 0,
  lastHeight: 0,
};

// Whoever frames the page writes its URL, host-origin included, so host-origin alone
// proves nothing: the trusted origins are the build's, and host-origin only narrows them.
const trusted = buildLoaded.then((build) => {
  const allowed = Array.isArray(build.allowOrigins) ? build.allowOrigins.filter((o) => typeof o === 'string') : [];
  embed.allowOrigins = allowed;
  if (!EMBED) return;
  const asked = params.has('host-origin') ? parseOrigins(params.get('host-origin')) : null;
  const outside = (asked || []).filter((o) => !allowed.includes(o));
  if (outside.length) console.warn(`delivery-lab: host-origin ${outside.join(' ')} is not among the origins this build allows; ignored`);
  embed.hostOrigins = asked ? asked.filter((o) => allowed.includes(o)) : [...allowed];
  embed.enabled = embed.hostOrigins.length > 0;
  if (!embed.enabled) {
    console.info(`delivery-lab: the postMessage API is off: ${allowed.length ? 'host-origin names none of the origins this build allows'
      : 'this build allows no origin (build.mjs --allow-origin)'}`);
  }
}, () => {}); // no build.json: nothing is trusted (and boot() reports it)

function toHost(type, data = {}) {
  if (!embed.enabled || window.parent === window) return;
  const message = { ...PROTOCOL, type, lab: LAB_ID, ...data };
  // An explicit target origin each time: postMessage drops a message whose target
  // is not the parent's origin, so only a trusted host ever receives one.
  for (const origin of embed.hostOrigins) window.parent.postMessage(message, origin);
  embed.sent += 1;
}

function ignoreMessage(e, reason) {
  embed.ignored += 1;
  const type = typeof e.data?.type === 'string' ? e.data.type.slice(0, 40) : typeof e.data;
  embed.log.push({ at: new Date().toISOString(), origin: e.origin, type, reason });
  if (embed.log.length > 50) embed.log.shift();
  console.debug(`delivery-lab: ignored a message (${reason}) from ${e.origin}: ${type}; ${embed.ignored} ignored so far`);
}

function onHostMessage(e) {
  // Nothing is decided before the build's origins are known; if build.json cannot be
  // read the page does not start, and no message is ever acted on.
  trusted.then(() => hostMessage(e), () => {});
}

function hostMessage(e) {
  if (!embed.hostOrigins.includes(e.origin)) return ignoreMessage(e, 'untrusted origin');
  if (e.source !== window.parent) return ignoreMessage(e, 'not from the host window');
  const m = e.data;
  if (!m || typeof m !== 'object' || m.source !== HOST_SOURCE) return ignoreMessage(e, 'not a delivery-lab host message');
  const reply = (type, data) => toHost(type, { ...(m.id !== undefined ? { requestId: m.id } : {}), ...data });
  if (m.version !== PROTOCOL.version) return reply('error', { message: `unsupported version ${m.version}; this lab speaks version ${PROTOCOL.version}` });
  booted.then(() => {
    switch (m.type) {
      case 'set-code':
        if (typeof m.code !== 'string' || m.code.length > MAX_CODE) return reply('error', { message: `set-code needs "code", a string of at most ${MAX_CODE} characters` });
        state.editor.setCode(m.code);
        return undefined;
      case 'reset':
        state.editor.setCode(state.lab.starter_py);
        setStatus('Starter code restored. Ctrl+Z brings your code back.');
        return undefined;
      case 'run':
        if (!busy('run')) runTests({ trigger: 'host', requestId: m.id });
        else reply('error', { message: 'a run is already going; wait for its result' });
        return undefined;
      case 'submit':
        if (!hiddenOnServer()) return reply('error', { message: 'this lab grades every test in the browser; send run' });
        if (!busy('submit')) submitForGrading({ trigger: 'host', requestId: m.id });
        else reply('error', { message: 'a submission is already going; wait for its result' });
        return undefined;
      case 'ping':
        return sendReady();
      default:
        return reply('error', { message: `unknown message type ${JSON.stringify(m.type)}` });
    }
  }, () => {});
  return undefined;
}

function sendReady() {
  const tests = state.lab.tests;
  toHost('ready', {
    title: state.lab.title,
    examples: tests.filter((t) => t.kind === 'example').length,
    hidden: tests.filter((t) => t.kind === 'hidden').length,
    hiddenOnServer: hiddenOnServer(),
    timeLimitS: state.lab.time_limit_s,
    crossOriginIsolated: !!globalThis.crossOriginIsolated,
  });
}

/** The `result` message: the report's figures, and each test by name and status. */
function resultMessage(report, extra) {
  return {
    status: report.status,
    passed: report.passed, failed: report.failed, total: report.total,
    score: report.score, maxScore: report.max_score, xp: report.xp,
    allPassed: report.status === 'pass' && report.total > 0 && !report.partial && (extra.via === 'server' || !hiddenOnServer()),
    // Only some tests ran ("Run this test"): the figures are theirs alone.
    partial: !!report.partial,
    examples: report.examples, hidden: report.hidden,
    seed: report.seed,
    message: report.message ?? null,
    tests: report.tests.map((t) => ({ name: t.name, kind: t.kind, status: t.status, points: t.points, maxPoints: t.max_points })),
    journey: journeyReport(),
    ...extra,
  };
}

/**
 * `resize`: the content's height, whenever it changes, so the host frame never
 * scrolls. Chromium does not render a cross-origin frame that is off screen (no
 * animation frames, no ResizeObserver callbacks), so DOM changes are watched too and
 * the height is measured with a timer: reading it forces the layout it needs.
 */
function watchHeight() {
  let timer = null;
  const measure = () => {
    timer = null;
    const height = Math.ceil(document.documentElement.getBoundingClientRect().height);
    if (height === embed.lastHeight) return;
    embed.lastHeight = height;
    toHost('resize', { height });
  };
  const soon = () => { if (timer === null) timer = setTimeout(measure, 30); };
  new ResizeObserver(soon).observe(document.documentElement);
  new MutationObserver(soon).observe(document.body, { subtree: true, childList: true, characterData: true, attributes: true });
  document.addEventListener('toggle', soon, true); // <details> opened or closed
  window.addEventListener('resize', soon);
  measure();
}

if (EMBED) {
  document.documentElement.classList.add('embed');
  if (params.get('instructions') === 'hide') document.documentElement.classList.add('no-instructions');
  window.addEventListener('message', onHostMessage);
}

// Run and Submit stay focusable while their work goes on (aria-disabled, not
// disabled): a focused button that becomes disabled drops the keyboard focus.
const busy = (id) => $(id).getAttribute('aria-disabled') === 'true';
function setBusy(id, on) {
  if (on) $(id).setAttribute('aria-disabled', 'true');
  else $(id).removeAttribute('aria-disabled');
}

// What work under way looks like (Run or Submit dimmed, the results faded; style.css,
// `.busy-shown`) is shown for a run only once it has taken BUSY_SHOW_MS. A warm run
// takes about 20 ms, and a frame drawn at its start (style, layout, paint, raster,
// compositing: about 15 ms of CPU on the page's other threads, traced) took the
// worker's CPU on a two-core machine; a fast run also no longer flickers. The
// attributes (aria-disabled, aria-busy) are set at once: only their look waits.
const BUSY_SHOW_MS = 250;
function showBusy(on) {
  document.documentElement.classList.toggle('busy-shown', on);
}

/** The status line, the page's one live region (index.html): say each thing once. */
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
  // A build without the reference (--no-reference, --no-hidden) offers no comparison.
  $('compare').hidden = !earned || !state.lab.reference_py;
}

function openCompare() {
  if (!state.lab.reference_py) return;
  const view = $('compare-view');
  $('view-mine').replaceChildren();
  $('view-ref').replaceChildren();
  createViewer($('view-mine'), state.editor.getCode(), 'Your solution.py');
  createViewer($('view-ref'), state.lab.reference_py, 'Reference solution');
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

/**
 * How the worker's Python started, for the tests and the bench: `mode` 'snapshot'
 * (restored) or 'boot' (with `why`), `ms`; after a boot, `snapshot` says whether
 * it stored one ({stored, bytes, ms} or {stored: false, error}).
 */
const python = { mode: null, ms: null, why: null, snapshot: null };

function watchWorker(worker) {
  worker.addEventListener('message', ({ data }) => {
    if (data.type === 'ready') {
      Object.assign(python, { mode: data.boot, ms: data.ms, why: data.why ?? null, snapshot: null });
      document.documentElement.dataset.pythonBoot = data.boot;
    } else if (data.type === 'snapshot') {
      python.snapshot = { stored: data.stored, bytes: data.bytes, ms: data.ms, error: data.error };
      document.documentElement.dataset.pythonSnapshot = data.stored ? 'stored' : 'failed';
    }
  });
}

function startPython() {
  const first = !state.runner.started;
  const ready = state.runner.start();
  if (state.runner.worker && state.runner.worker !== state.watched) {
    state.watched = state.runner.worker;
    watchWorker(state.watched);
  }
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

/**
 * Runs the tests on the editor's code: all of them, or `only` those named (a test's
 * "Run this test", Your turn's fairness load): such a report says `partial: true`,
 * earns no XP and is no best run.
 */
async function runTests({ trigger = 'learner', requestId, only } = {}) {
  performance.mark('run-click');
  const runId = ++state.runs;
  const ids = { runId, trigger, ...(requestId !== undefined ? { requestId } : {}) };
  toHost('run-started', { ...ids, via: 'browser' });
  state.running += 1;
  setBusy('run', true);
  $('results').setAttribute('aria-busy', 'true');
  const source = state.editor.getCode();
  const count = only ? only.length : state.lab.tests.length;
  const running = () => setStatus(`Running ${count} test${count === 1 ? '' : 's'}…`, 'busy');
  let shown = false;
  const show = () => {
    shown = true;
    showBusy(true);
  };
  if (!state.runner.loaded) {
    show();
    setStatus(state.pyodideStored ? 'Loading Python…'
      : `Downloading Python (about ${formatBytes(state.build.totals.pyodide.gzip)}, only this once)…`, 'busy');
  }
  // Said and shown once the run is slow enough to be seen (BUSY_SHOW_MS).
  const later = setTimeout(() => {
    if (!shown) show();
    if (state.runner.loaded) running();
  }, BUSY_SHOW_MS);
  let outcome;
  try {
    await startPython();
    if (shown) running();
    outcome = await state.runner.run(source, only ? { only } : {});
  } catch (e) {
    const report = JSON.parse(state.grader.error_report(LAB_ID, undefined,
      `The page could not run your code: ${e.message || e}`));
    outcome = { report, ms: null, stopped: null, failed: true };
  } finally {
    clearTimeout(later);
    state.running -= 1;
    setBusy('run', state.running > 0);
    $('results').removeAttribute('aria-busy');
    if (!state.running && !busy('submit')) showBusy(false);
  }
  const { report, ms, stopped } = outcome;
  state.lastReport = report;
  state.lastRun = { ms, wallMs: outcome.wallMs ?? null, stopped, stop: outcome.stop ?? null, busyShown: shown };
  const results = $('results');
  results.hidden = false;
  renderReport(results, report, {
    ms, stopped, stop: outcome.stop ?? null, limitS: limitS(), onGoToLine: (n) => state.editor.goToLine(n), onJumpToCode: jumpFor, onRunOne: runOne, hiddenOnServer: hiddenOnServer(), via: 'browser',
  });
  afterRun(report);
  performance.mark('results-drawn');
  performance.measure('run-to-results', 'run-click', 'results-drawn');
  // The next frame is when the learner can see it.
  requestAnimationFrame(() => performance.mark('results-painted'));

  // Without the hidden tests a pass is the examples only: the XP waits for the server.
  if (report.status === 'pass' && !report.partial && !hiddenOnServer()) earnXp(report);
  // Results below the fold are scrolled to, without a jump when they are in view
  // (not when a host page asked for the run: its page is not ours to scroll).
  if (trigger !== 'host') results.querySelector('.summary')?.scrollIntoView({ block: 'nearest', behavior: scrollBehavior() });
  // The result, announced once: the summary, then what to do next.
  const said = summarySentence(report, { limitS: limitS(), hiddenOnServer: hiddenOnServer() });
  if (outcome.failed) setStatus(`${said}. ${report.message}`, 'error');
  else if (report.status === 'error') setStatus(`${said}; the message below says why.`, 'error');
  else if (stopped === 'terminated' && outcome.stop?.why !== 'slow') setStatus(`${said}. Python was stopped and restarted; your code is unchanged: fix the loop and run again.`, 'error');
  else if (stopped) setStatus(`${said}. Your code is unchanged.`, 'error');
  else if (hiddenOnServer() && report.status === 'pass') setStatus(`${said}. “Submit for grading” runs the hidden tests on the course’s server.`);
  else setStatus(`${said}. Graded in ${(ms / 1000).toFixed(2)} s; Ctrl+Enter runs again, each run stops after ${limitS()} s.`);
  toHost('result', resultMessage(report, { ...ids, via: 'browser', stopped: stopped ?? null }));
  return report;
}

/** "Run this test" on a test's row: the test alone; then the focus goes back to that row's button. */
async function runOne(name) {
  if (busy('run')) return;
  await runTests({ only: [name] });
  const row = [...$('results').querySelectorAll('[data-test]')].find((el) => el.dataset.test === name);
  row?.querySelector('button.run-one')?.focus();
}

/** After every run: the best run kept (the course map's progress), Predict's explanation opened, Your turn redrawn. */
function afterRun(report) {
  if (report.status !== 'error' && report.total > 0 && !report.partial) {
    const best = store.json('best');
    if (!best || report.passed > best.passed || best.total !== report.total) {
      store.set('best', JSON.stringify({ passed: report.passed, total: report.total }));
    }
  }
  state.predict?.reveal();
  state.yourTurn?.update(report);
  // A full pass leads on to the next lab of the course.
  if (report.status === 'pass' && state.next) {
    $('results').querySelector('.summary')?.after(h('p.next-lab', 'On to the next lab: ',
      h('a', { href: `index.html?lab=${encodeURIComponent(state.next.id)}` }, state.next.title)));
  }
}

/** The editor at the first of `functions` the code defines (a task's, or a test's task's). */
function jumpToFunctions(functions) {
  for (const fn of functions) {
    const line = state.editor.lineOfFunction(fn);
    if (line) {
      state.editor.goToLine(line);
      setStatus(`The editor is at def ${fn}, line ${line}.`);
      return;
    }
  }
  setStatus(`Your code defines no ${functions.join(' or ')} yet: Reset brings back the starter.`, 'error');
}

/** For a test row: its task's function, and a jump there (null when the lab does not say). */
function jumpFor(name) {
  const task = state.lab.tests.find((t) => t.name === name)?.task;
  const functions = task ? state.lab.task_functions?.[task - 1] : null;
  if (!functions?.length) return null;
  return { fn: functions[0], jump: () => jumpToFunctions(functions) };
}

function earnXp(report) {
  if (!earnedXp()) store.set('xp', JSON.stringify({ xp: report.xp, at: new Date().toISOString() }));
  showXp();
}

// ---------------------------------------------------------------------------
// Submit for grading (a page built without hidden tests; serve.mjs --grading)

/** What the server's answer means for the learner, when it is not a report. */
async function submitError(res) {
  let error = '';
  try { error = (await res.json()).error || ''; } catch { /* not JSON */ }
  if (res.status === 429) {
    const after = Number(res.headers.get('Retry-After')) || 2;
    return `The grading server is busy; try again in ${after} s.`;
  }
  // Its sandboxes fail to start for now (it retries with backoff): not the learner's code.
  if (res.status === 503) {
    const after = Number(res.headers.get('Retry-After')) || 5;
    return `The grading server cannot grade right now (not because of your code); try again in ${after} s.`;
  }
  if (res.status === 413) return 'Your code is too large to submit.';
  if (res.status === 405 && !error) return 'This page\'s server does not grade submissions (it is started with ./lab serve --no-hidden --grading).';
  return `The grading server refused the submission (${res.status})${error ? `: ${error}` : '.'}`;
}

/**
 * The server answers with the grading CLI's json line (file, lab, status, passed,
 * failed, total, score, max_score, seed, duration_ms, tests [{name, kind, status,
 * message?}], replay): the tallies and XP the page draws are worked out from it.
 */
function fromServer(line) {
  const tally = (kind) => {
    const tests = line.tests.filter((t) => t.kind === kind);
    return { passed: tests.filter((t) => t.status === 'pass').length, total: tests.length };
  };
  return {
    ...line,
    examples: line.examples ?? tally('example'),
    hidden: line.hidden ?? tally('hidden'),
    xp: line.xp ?? (line.status === 'pass' ? state.lab.xp : 0),
  };
}

async function submitForGrading({ trigger = 'learner', requestId } = {}) {
  const runId = ++state.runs;
  const ids = { runId, trigger, ...(requestId !== undefined ? { requestId } : {}) };
  setBusy('submit', true);
  $('results').setAttribute('aria-busy', 'true');
  showBusy(true); // a server's grading takes seconds
  toHost('run-started', { ...ids, via: 'server' });
  setStatus('Submitted: the server is running every test, hidden ones included…', 'busy');
  let report = null;
  let problem = null;
  let gradebook = '';
  try {
    const source = state.editor.getCode();
    const res = await fetch(new URL(ltiLaunch ? 'lti/submit' : 'grade', location.href), {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      // To the course, also how many hints the learner opened: staff see it beside the grade, never in it.
      body: JSON.stringify(ltiLaunch ? { launch: ltiLaunch, source, hintsOpened: journeyReport()?.hints.opened ?? 0 } : { lab: LAB_ID, source }),
    });
    if (res.ok) {
      const answer = await res.json();
      // The launch's endpoint answers { report, grade }: the report, and what became of the grade.
      report = fromServer(ltiLaunch ? answer.report : answer);
      if (ltiLaunch) gradebook = answer.grade?.status === 'not_sent'
        ? ` Your course's gradebook did not get it: ${answer.grade.why || 'the course gave this lab no grade column'}.`
        : ' The score is on its way to your course\'s gradebook.';
    } else problem = await submitError(res);
  } catch (e) {
    problem = `The grading server could not be reached (${e.message || e}). Your code is unchanged; try again when you are online.`;
  } finally {
    setBusy('submit', false);
    $('results').removeAttribute('aria-busy');
    if (!state.running) showBusy(false);
  }
  if (!report) {
    setStatus(problem, 'error');
    toHost('error', { ...ids, via: 'server', message: problem });
    return { error: problem };
  }
  state.lastReport = report;
  const results = $('results');
  results.hidden = false;
  renderReport(results, report, { limitS: limitS(), onGoToLine: (n) => state.editor.goToLine(n), onJumpToCode: jumpFor, via: 'server' });
  afterRun(report);
  if (trigger !== 'host') results.querySelector('.summary')?.scrollIntoView({ block: 'nearest', behavior: scrollBehavior() });
  if (report.status === 'pass') earnXp(report);
  setStatus(report.status === 'error' ? 'Your code could not be graded; the message below says why.'
    : `Graded by the server: ${report.passed} of ${report.total} tests pass, hidden ones included.${gradebook}`, report.status === 'pass' ? '' : 'error');
  toHost('result', resultMessage(report, { ...ids, via: 'server', stopped: null }));
  return report;
}

// ---------------------------------------------------------------------------
// Start-up

/**
 * A box that scrolls must be reachable and scrollable by keyboard (WCAG 2.1.1): while
 * its content overflows it is a tab stop, with `name` as a region's name when given;
 * while it fits (a wider or taller window) it is none, so no tab stop leads nowhere.
 */
function keyboardScrollable(el, name) {
  const update = () => {
    const style = getComputedStyle(el);
    const scrolls = (/auto|scroll/.test(style.overflowX) && el.scrollWidth > el.clientWidth)
      || (/auto|scroll/.test(style.overflowY) && el.scrollHeight > el.clientHeight);
    if (scrolls) el.tabIndex = 0;
    else el.removeAttribute('tabindex');
    if (!name) return;
    if (scrolls) {
      el.setAttribute('role', 'region');
      el.setAttribute('aria-label', name);
    } else {
      el.removeAttribute('role');
      el.removeAttribute('aria-label');
    }
  };
  new ResizeObserver(update).observe(el);
}

/** The heading of the instructions' section that holds `el`. */
function sectionOf(el) {
  for (let n = el.previousElementSibling; n; n = n.previousElementSibling) {
    if (/^H[1-3]$/.test(n.tagName)) return n.textContent.trim();
  }
  return 'the lab';
}

function renderInstructions(md) {
  const el = $('instructions');
  el.innerHTML = marked.parse(md); // our own Markdown, from the grader
  for (const code of el.querySelectorAll('pre code.language-python')) highlightPython(code, code.textContent);
  for (const table of el.querySelectorAll('table')) {
    // Wide tables scroll on their own instead of widening the column.
    table.replaceWith(h('div.table-wrap', table.cloneNode(true)));
  }
  keyboardScrollable(el); // the card scrolls beside the editor on a wide screen (named in index.html)
  for (const wrap of el.querySelectorAll('.table-wrap')) keyboardScrollable(wrap, `Table: ${sectionOf(wrap)}`);
  for (const pre of el.querySelectorAll('pre')) keyboardScrollable(pre, `Code: ${sectionOf(pre)}`);
}

/** The header's place in the course, Predict, the hints, Your turn (journey.js). */
function startJourney(build, lab) {
  const course = Array.isArray(build.course) ? build.course : [];
  const i = course.findIndex((c) => c.id === lab.id);
  themeSwitch($('theme'));
  if (i < 0) return;
  const journey = course[i];
  state.journey = journey;
  const next = course[i + 1];
  state.next = next ?? null;
  $('course-nav').append(h('span.part', `Lab ${i + 1} of ${course.length}`));
  if (next) $('course-nav').append(h('a.next', { href: `index.html?lab=${encodeURIComponent(next.id)}` }, `Next: ${next.title}`));
  const instructions = $('instructions');
  instructions.prepend(h('div.lab-course', h('p.practises-head', 'Practises'), h('ul.practises', journey.practises.map((x) => h('li', x)))));
  state.hintCounts = renderHints(instructions, journey, lab, store, jumpToFunctions);
  state.predict = renderPredict(instructions, journey, store);
  if (journey.yourTurn) {
    state.yourTurn = renderYourTurn($('your-turn'), journey, store, {
      // The fairness load alone: its test, your claim and FIFO on the same arrivals.
      run: () => (busy('run') ? Promise.resolve(state.lastReport) : runTests({ only: [journey.yourTurn.test] })),
    });
  }
}

async function boot() {
  // Python's worker first, before anything else the page waits for: when Pyodide is
  // stored, a cached visit's wait is mostly the worker's, so it starts now, beside
  // build.json and the grader. Otherwise the download waits for the first run.
  state.runner = new Runner({
    workerUrl: new URL('worker.js', location.href),
    labId: LAB_ID,
    limitS: 8, // until the lab says (below); nothing runs before then
    timeoutReport: (message, seed, only) => JSON.parse(state.grader.timeout_report(LAB_ID, seed ?? undefined, message, undefined, undefined, only ?? undefined)),
    onProgress: (text) => {
      if (!state.running) return;
      const download = !state.pyodideStored && text.startsWith('Loading Python');
      setStatus(download ? `Downloading Python (about ${formatBytes(state.build.totals.pyodide.gzip)}, only this once)…` : text, 'busy');
    },
  });
  const stored = pyodideStored({ caches: { pyodide: __PYODIDE_CACHE__.name }, pyodideFiles: __PYODIDE_CACHE__.files }).then((yes) => {
    state.pyodideStored = yes;
    if (yes) startPython();
  });
  const graderLoaded = loadLabGrader(LAB_ID, location.href);
  graderLoaded.catch(() => {}); // reported below, with the labs this build has
  const build = await buildLoaded;
  await trusted;
  state.build = build;

  if (!build.labs.includes(LAB_ID)) throw new Error(`there is no lab "${LAB_ID}" here (labs: ${build.labs.join(', ')})`);
  const { Grader } = await graderLoaded;
  state.grader = new Grader();
  const known = JSON.parse(state.grader.labs()).map((l) => l.id);
  if (!known.includes(LAB_ID)) throw new Error(`there is no lab "${LAB_ID}" here (labs: ${known.join(', ')})`);
  const lab = JSON.parse(state.grader.lab(LAB_ID));
  state.lab = lab;
  state.runner.limitS = lab.time_limit_s;

  $('lab-meta').replaceChildren(
    h('span.chip', lab.level), h('span.chip', `about ${lab.minutes} min`),
    h('span.chip', hiddenOnServer() ? `${lab.tests.filter((t) => t.kind === 'example').length} examples here, hidden tests on the server`
      : `${lab.tests.filter((t) => t.kind === 'example').length} examples, ${lab.tests.filter((t) => t.kind === 'hidden').length} hidden tests`));
  renderInstructions(lab.instructions_md);
  startJourney(build, lab);

  const saved = store.get('code');
  let savedTimer = null;
  state.editor = createEditor($('editor'), saved ?? lab.starter_py, {
    onRun: () => { if (!busy('run')) runTests(); },
    help: 'editor-help',
    onChange: (code) => {
      // Saved on every change: a reload or a crash never loses what was typed.
      const ok = store.set('code', code);
      $('saved').textContent = ok ? 'saved' : 'not saved (storage unavailable)';
      // #saved is not a live region (it changes on every key); a failure is said once.
      if (!ok && !state.unsavedSaid) {
        state.unsavedSaid = true;
        setStatus('Your code cannot be saved on this device (storage is unavailable); copy it before you leave.', 'error');
      }
      clearTimeout(savedTimer);
      savedTimer = setTimeout(() => { $('saved').textContent = ''; }, 1500);
    },
  });

  $('run').addEventListener('click', () => { if (!busy('run')) runTests(); });
  if (hiddenOnServer() || ltiLaunch) {
    $('submit').hidden = false;
    if (ltiLaunch) {
      $('submit').textContent = 'Submit to the course';
      $('submit').title = 'Send your code to the course\'s server: it runs every test, hidden ones included, and sends your score to the course\'s gradebook';
    }
    $('submit').addEventListener('click', () => { if (!busy('submit')) submitForGrading(); });
  }
  $('reset').addEventListener('click', () => {
    state.editor.setCode(lab.starter_py);
    setStatus('Starter code restored. Ctrl+Z brings your code back.');
    state.editor.focus();
  });
  $('compare').addEventListener('click', openCompare);
  if (embed.enabled) {
    watchHeight();
    sendReady();
  }
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
  toHost('error', { message: `The lab could not start: ${e.message || e}` });
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
  /** Runs the tests on the editor's code (`{only: [names]}`: those alone); resolves to the report (the engine's JSON, parsed). */
  run({ only } = {}) {
    if (only !== undefined && !(Array.isArray(only) && only.every((n) => typeof n === 'string'))) {
      return Promise.reject(new TypeError('deliveryLab.run({only}): only is a list of test names'));
    }
    return booted.then(() => runTests(only ? { only } : {}));
  },
  /** A page built without hidden tests: sends the code to POST grade; resolves to the server's report (or {error}). */
  submit() { return booted.then(() => submitForGrading()); },
  /** The journey as the staff's `result` message carries it: Predict, hints opened, Your turn. */
  get journey() { return journeyReport(); },
  /** How Python started in the worker: { mode: 'snapshot'|'boot', ms, why, snapshot } (see watchWorker). */
  get python() { return { ...python }; },
  /** Embedding: { enabled, allowOrigins, hostOrigins, ignored, log, sent }; ignored counts messages not acted on. */
  get embed() { return embed; },
  get lastReport() { return state.lastReport; },
  /** Timings of the last run: ms in the worker's engine, wallMs from posting it to its report. */
  get lastRun() { return state.lastRun; },
};
