// The page's runner (page/runner.js): what stops a run is no progress, not a slow
// machine. A run whose learner code never returns is stopped at the lab's limit with
// the loop message; a run that keeps returning calls, however slowly, goes on past
// that limit, and is stopped only at the cap, with a message that says slow, never
// endless. First with a scripted worker on a clock the test drives (exact moments),
// then with the real engine (Pyodide and lab 1's grader) in a worker thread, each
// call slowed by the worker's test hook.
// Run: node --test page/test/runner.test.mjs   (needs www/pkg: ./lab build)
import { test, mock } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { isMainThread, parentPort, Worker } from 'node:worker_threads';
import { Runner, withProgress, stopMessage } from '../runner.js';

// In a worker thread this file is the page's grading worker (page/worker.js's run, on
// Node): the real engine, its grader counted by withProgress, messages as the page's.
if (!isMainThread) {
  const { loadGrader, paths } = await import('../../host/node_host.mjs');
  const { createEngine } = await import('../../host/engine.mjs');
  const { loadPyodide } = await import('pyodide');
  let current = null;
  let engine = null;
  parentPort.on('message', async (msg) => {
    if (msg.type === 'init') {
      const [pkg, pyodide] = await Promise.all([loadGrader({ dir: msg.pkgDir }), loadPyodide({ indexURL: paths.pyodide })]);
      if (msg.interruptBuffer) pyodide.setInterruptBuffer(msg.interruptBuffer);
      const Counted = withProgress(pkg.Grader, (p) => { if (current) parentPort.postMessage({ type: 'run-progress', id: current.id, ...p }); },
        { slowCallMs: () => current?.slowCallMs ?? 0 });
      engine = createEngine({ pyodide, Grader: Counted, bridgeSource: fs.readFileSync(paths.bridge, 'utf8'), labId: msg.lab });
      parentPort.postMessage({ type: 'ready', lab: engine.lab.id, ms: 0 });
    } else if (msg.type === 'run') {
      if (msg.interruptBuffer) msg.interruptBuffer[0] = 0;
      current = { id: msg.id, slowCallMs: msg.slowCallMs ?? 0 };
      const t0 = performance.now();
      let report;
      try {
        report = engine.run(msg.source, { seed: msg.seed });
      } finally {
        current = null;
      }
      parentPort.postMessage({ type: 'report', id: msg.id, report, ms: Math.round(performance.now() - t0) });
    }
  });
  await new Promise(() => {});
}

const LIMIT_S = 20;
const report = (status = 'pass') => ({ status, tests: [{ name: 't', status, message: status === 'timeout' ? 'Stopped: the tests ran longer than the 20 s limit. Look for a loop that never ends.' : '' }] });
const timeoutReport = (message) => ({ status: 'fail', tests: [{ name: 't', status: 'timeout', message }] });

/**
 * A scripted grading worker on the test's clock: `script(run)` is called at each of
 * its 100 ms ticks during a run with {t (ms into the run), interrupted, progress(calls),
 * done(report)}. It answers an interrupt (when the page has one) as the real worker
 * does: the run ends with its tests stopped.
 */
function scripted(script) {
  const clock = { t: 0 };
  let worker;
  const create = () => {
    worker = {
      terminated: false,
      postMessage(msg) {
        if (msg.type === 'init') {
          this.interrupt = msg.interruptBuffer;
          setTimeout(() => this.onmessage({ data: { type: 'ready', lab: 'x', ms: 0 } }), 0);
        } else if (msg.type === 'run') {
          const started = clock.t;
          let calls = 0;
          const tick = () => {
            if (this.terminated) return;
            let ended = false;
            const done = (r) => { ended = true; this.onmessage({ data: { type: 'report', id: msg.id, report: r, ms: clock.t - started } }); };
            if (this.interrupt && this.interrupt[0] === 2 && !script.swallows) return done(report('timeout'));
            script({
              t: clock.t - started,
              progress: (n = 1) => { calls += n; this.onmessage({ data: { type: 'run-progress', id: msg.id, calls, busyMs: 0, ms: clock.t - started } }); },
              done,
            });
            if (!ended) setTimeout(tick, 100);
          };
          setTimeout(tick, 100);
        }
      },
      terminate() { this.terminated = true; },
    };
    return worker;
  };
  return { clock, create };
}

async function driven(script, { isolated = true, runOpts = {}, ...opts } = {}) {
  mock.timers.enable({ apis: ['setTimeout'] });
  const had = globalThis.crossOriginIsolated;
  globalThis.crossOriginIsolated = isolated;
  try {
    const { clock, create } = scripted(script);
    const runner = new Runner({ workerUrl: 'x', labId: 'x', limitS: LIMIT_S, timeoutReport, now: () => clock.t, createWorker: create, ...opts });
    let result = null;
    runner.run('source', runOpts).then((r) => { result = r; });
    const flush = async () => { for (let i = 0; i < 5; i++) await Promise.resolve(); };
    while (result === null && clock.t < 1_000_000) {
      await flush();
      clock.t += 50;
      mock.timers.tick(50);
      await flush();
    }
    return { ...result, at: clock.t };
  } finally {
    globalThis.crossOriginIsolated = had;
    mock.timers.reset();
  }
}

test('an endless loop from the start is stopped at the limit, with the loop message', async () => {
  const r = await driven(() => {});
  assert.equal(r.stopped, 'interrupted');
  assert.equal(r.stop.why, 'stuck');
  assert.ok(r.at >= LIMIT_S * 1000 && r.at <= LIMIT_S * 1000 + 500, `stopped at ${r.at} ms`);
  assert.match(r.report.tests[0].message, /no call of your code returned for 20 s\. Look for a loop that never ends\./);
});

test('an endless loop after some progress is stopped at the limit, or half a limit after the last call', async () => {
  // Calls return until 5 s: stuck from then, stopped at the limit (20 s), as before.
  const early = await driven(({ t, progress }) => { if (t <= 5000) progress(); });
  assert.equal(early.stop.why, 'stuck');
  assert.ok(early.at >= 20_000 && early.at <= 20_500, `stopped at ${early.at} ms`);
  assert.match(early.report.tests[0].message, /no call of your code returned for 1\d s\. Look for a loop that never ends/);
  assert.match(early.report.tests[0].message, /Before it, 5\d calls of your functions had returned\./);
  // Calls return until 25 s (past the limit): stopped 10 s after the last one.
  const late = await driven(({ t, progress }) => { if (t <= 25_000) progress(); });
  assert.equal(late.stop.why, 'stuck');
  assert.ok(late.at >= 35_000 && late.at <= 35_500, `stopped at ${late.at} ms`);
  assert.match(late.report.tests[0].message, /no call of your code returned for 10 s\. Look for a loop that never ends/);
});

test('a run of some tests ended with the worker: its report is asked for those tests alone', async () => {
  const script = () => {};
  script.swallows = true;
  const asked = [];
  const only = ['t'];
  const r = await driven(script, {
    graceMs: 1000, runOpts: { only },
    timeoutReport: (message, seed, o) => { asked.push(o); return { ...timeoutReport(message), partial: true }; },
  });
  assert.equal(r.stopped, 'terminated');
  assert.deepEqual(asked, [only]);
  assert.equal(r.report.partial, true);
});

test('a loop that swallows the interrupt is ended with the worker, and said to be a loop', async () => {
  const script = () => {};
  script.swallows = true;
  const r = await driven(script, { graceMs: 1000 });
  assert.equal(r.stopped, 'terminated');
  assert.ok(r.at >= 21_000 && r.at <= 21_500, `ended at ${r.at} ms`);
  assert.match(r.report.tests[0].message, /so the grader was restarted\. Look for a loop that never ends \(or one that catches KeyboardInterrupt\)\./);
});

test('without an interrupt (no crossOriginIsolated) a stuck run ends with the worker at the limit', async () => {
  const r = await driven(() => {}, { isolated: false });
  assert.equal(r.stopped, 'terminated');
  assert.ok(r.at >= 20_000 && r.at <= 20_500, `ended at ${r.at} ms`);
  assert.match(r.report.tests[0].message, /Look for a loop that never ends\./);
});

test('a slow run that keeps progressing runs past the limit and is not stopped', async () => {
  // A call returns every 2 s (a very slow machine): 50 s in all, 2.5 times the limit.
  const r = await driven(({ t, progress, done }) => {
    if (t % 2000 === 0) progress();
    if (t >= 50_000) done(report('pass'));
  });
  assert.equal(r.stopped, null);
  assert.equal(r.stop, null);
  assert.equal(r.report.status, 'pass');
  assert.equal(r.calls, 25);
  assert.ok(r.at >= 50_000, `${r.at}`);
});

test('a run that progresses past the cap is stopped as slow, never as an endless loop', async () => {
  const r = await driven(({ progress }) => progress(3));
  assert.equal(r.stopped, 'interrupted');
  assert.equal(r.stop.why, 'slow');
  assert.ok(r.at >= 80_000 && r.at <= 80_500, `stopped at ${r.at} ms`);
  const message = r.report.tests[0].message;
  assert.doesNotMatch(message, /Look for a loop that never ends/);
  assert.match(message, /^Stopped after 80 s, the most a run may take, while your code was still making progress: 2,[34]\d\d calls of your functions had returned, the last 0\.\d s before the stop/);
  assert.match(message, /This is not an endless loop: the machine is too busy, or your code too slow/);
});

test('a run still progressing at the cap is slow; one that went quiet before it is stuck', async () => {
  const slow = await driven(({ t, progress }) => { if (t < 70_000) progress(); }, { capFactor: 3 });
  assert.equal(slow.stop.why, 'slow');
  assert.ok(slow.at >= 60_000 && slow.at <= 60_500, `stopped at ${slow.at} ms`);
  const stuck = await driven(({ t, progress }) => { if (t < 30_000) progress(); }, { capFactor: 3 });
  assert.equal(stuck.stop.why, 'stuck');
  assert.ok(stuck.at >= 39_800 && stuck.at <= 40_500, `stopped at ${stuck.at} ms`);
});

test('a page starved past a deadline reads the progress waiting for it before calling a run stuck', async () => {
  // The page's thread gets no time from 10 s to 40 s (a loaded machine), while the
  // worker's calls go on returning; their messages wait until it runs again, after
  // the deadline's timer.
  mock.timers.enable({ apis: ['setTimeout'] });
  const had = globalThis.crossOriginIsolated;
  globalThis.crossOriginIsolated = true;
  try {
    const clock = { t: 0 };
    let w;
    const runner = new Runner({ workerUrl: 'x', labId: 'x', limitS: LIMIT_S, timeoutReport, now: () => clock.t,
      createWorker: () => (w = { postMessage(m) { if (m.type === 'init') setTimeout(() => this.onmessage({ data: { type: 'ready' } }), 0); else this.id = m.id; }, terminate() {} }) });
    let result = null;
    runner.run('source').then((r) => { result = r; });
    const flush = async () => { for (let i = 0; i < 5; i++) await Promise.resolve(); };
    const advance = async (ms) => { for (let i = 0; i < ms / 50; i++) { await flush(); clock.t += 50; mock.timers.tick(50); await flush(); } };
    await advance(10_000);
    w.onmessage({ data: { type: 'run-progress', id: w.id, calls: 10, busyMs: 0, ms: 10_000 } });
    clock.t += 30_000; // starved: no timer ran, no message was read
    mock.timers.tick(30_000); // the deadline's timer runs first, late
    await flush();
    assert.equal(result, null, 'called stuck before the waiting progress was read');
    w.onmessage({ data: { type: 'run-progress', id: w.id, calls: 900, busyMs: 0, ms: 40_000 } });
    await advance(5_000);
    assert.equal(result, null);
    w.onmessage({ data: { type: 'report', id: w.id, report: report('pass'), ms: 45_000 } });
    await flush();
    assert.equal(result.stopped, null);
    assert.equal(result.report.status, 'pass');
  } finally {
    globalThis.crossOriginIsolated = had;
    mock.timers.reset();
  }
});

test('stopMessage tells the two apart', () => {
  const base = { limitS: 8, capS: 32, calls: 1234, busyMs: 30_000, afterMs: 32_000, quietMs: 40, interruptible: true };
  assert.match(stopMessage({ ...base, why: 'stuck', quietMs: 8000 }), /^Stopped: no call of your code returned for 8 s\. Look for a loop that never ends\./);
  assert.doesNotMatch(stopMessage({ ...base, why: 'slow' }), /never ends/);
  assert.match(stopMessage({ ...base, why: 'slow' }, { restarted: true }), /1,234 calls .* \(30 s inside them\), so the grader was restarted\. This is not an endless loop/);
});

// ---- the real engine in a worker thread: lab 1 (deliver-once, limit 8 s; here 6 s) ----

const repo = new URL('../../../', import.meta.url);
const LAB1 = fs.readFileSync(new URL('src/deliver_once/reference.py', repo), 'utf8');

function threadRunner(opts) {
  return new Runner({
    workerUrl: new URL(import.meta.url), labId: 'deliver-once', limitS: 6, capFactor: 20, graceMs: 2000,
    timeoutReport, createWorker: (url) => {
      const t = new Worker(url);
      const w = {
        postMessage: (m) => t.postMessage(m),
        terminate: () => t.terminate(),
      };
      t.on('message', (data) => w.onmessage?.({ data }));
      t.on('error', (e) => w.onerror?.(e));
      return w;
    },
    ...opts,
  });
}

test('the real engine: a run slowed in every call goes on past the limit and passes', { timeout: 180_000 }, async () => {
  globalThis.crossOriginIsolated = true;
  const runner = threadRunner();
  try {
    await runner.start();
    // About 740 calls of 15 ms more each: 11 s or more in all, past the 6 s limit,
    // though no call takes long.
    const r = await runner.run(LAB1, { slowCallMs: 15 });
    assert.equal(r.stopped, null, JSON.stringify(r.stop));
    assert.equal(r.report.status, 'pass');
    assert.ok(r.wallMs > 6000, `${r.wallMs} ms: not past the limit`);
    assert.ok(r.calls > 500, `${r.calls} calls`);
  } finally {
    runner.stop();
    delete globalThis.crossOriginIsolated;
  }
});

test('the real engine: an endless loop is interrupted at the limit with the loop message', { timeout: 180_000 }, async () => {
  globalThis.crossOriginIsolated = true;
  const runner = threadRunner();
  try {
    await runner.start();
    const endless = LAB1.replace('    key = "sent:" + task.key\n', '    while True:\n        pass\n');
    assert.notEqual(endless, LAB1);
    const r = await runner.run(endless);
    assert.equal(r.stopped, 'interrupted');
    assert.equal(r.stop.why, 'stuck');
    assert.ok(r.wallMs >= 6000 && r.wallMs < 6000 + 2000 + 5000, `${r.wallMs} ms`);
    const stopped = r.report.tests.filter((t) => t.status === 'timeout');
    assert.ok(stopped.length > 0);
    assert.match(stopped[0].message, /no call of your code returned for [56] s\. Look for a loop that never ends\./);
    // The next run, in the same worker, passes.
    assert.equal((await runner.run(LAB1)).report.status, 'pass');
  } finally {
    runner.stop();
    delete globalThis.crossOriginIsolated;
  }
});
