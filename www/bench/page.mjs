// Prints figures about the page (not pass/fail):
//   1. the grader's WASM size, raw and gzip
//   2. a cached visit's time to "ready" (Python and grader loaded), each lab, against
//      a bare page that only calls loadPyodide(), both after a first visit; then a
//      first visit's (empty caches) against the bare page's first visit
//   3. a warm full run of every test with the reference solution (median of 20),
//      in the browser worker and in Node, against the same checks in pure Python
//      in Pyodide (the pytest anchor's, www/bench/anchor, without pytest)
//   4. the time from a click on Run to the first result drawn (median of 20)
//   5. the courier lab's full run in the worker and in Node, and in Node the share
//      of its differential tests (run alone with `only`, beside each whole run)
//   6. the courier lab's real run (./lab real): its wall time split into phases,
//      beside an anchor measured in the same bench: the same run with no kills and
//      no freezes. A shortened run by default (REAL_SHORT: a full one with fairness
//      takes about 3 minutes), the full one with --real-full, or a saved run's JSON
//      line with --real-json FILE (then no anchor); --real-only runs this part alone.
// Usage: node bench.mjs [--runs N] [--visits N] [--first N] [--real-full | --real-json FILE] [--real-only]
// (builds a fresh copy of the page from www/pkg first, like the e2e tests; Chromium at
// /usr/bin/chromium)
import { execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import zlib from 'node:zlib';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';
import { LAUNCH, startServer } from '../page/browser.mjs';
import { loadNodeEngine } from '../host/node_host.mjs';
import { parseOrExit } from '../grader/args.mjs';
import { BENCH } from '../grader/commands.mjs';

const WWW = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
// The command line, by ./lab bench's table (grader/commands.mjs BENCH).
const { values: opts } = parseOrExit(BENCH, process.argv.slice(2), 'bench');
const RUNS = opts.runs;
const VISITS = opts.visits;
const FIRST = opts.first;
const COURIER_REFERENCE = fs.readFileSync(new URL('../../src/courier/reference.py', import.meta.url), 'utf8');
const COURIER_RUNS = 3;
// The start of every courier differential test's name (src/courier/differential.rs PREFIX).
const DIFFERENTIAL = 'differential: ';
const REFERENCE = fs.readFileSync(path.join(WWW, '..', 'src', 'deliver_once', 'reference.py'), 'utf8');
const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};
const fmtMs = (xs) => `median ${median(xs).toFixed(0)} ms (min ${Math.min(...xs).toFixed(0)}, max ${Math.max(...xs).toFixed(0)}, n=${xs.length})`;
const ratio = (xs, anchor) => `${(median(xs) / median(anchor)).toFixed(2)}x`;
const kb = (n) => `${(n / 1024).toFixed(1)} KiB`;

// A bare page for comparison: Pyodide loaded by itself, on the page's thread.
const BARE_HTML = `<!doctype html><meta charset="utf-8"><title>bare loadPyodide</title>
<link rel="icon" href="data:,">
<script type="module">
const { loadPyodide } = await import('./pyodide/pyodide.mjs');
await loadPyodide({ indexURL: new URL('./pyodide/', location.href).href });
performance.mark('python-ready');
</script>`;

async function markTime(page, name, timeout = 60_000) {
  const handle = await page.waitForFunction(
    (n) => performance.getEntriesByName(n)[0]?.startTime, name, { timeout, polling: 50 });
  return handle.jsonValue();
}

/**
 * The anchor of a warm run: lab 1's checks as the pytest anchor writes them in plain
 * Python (www/bench/anchor/test_deliver_once.py: the same case files, comparison rules
 * and differential counts as the engine), in a Pyodide of their own, with the
 * reference as the learner. pytest itself is not in Pyodide: its two names that
 * the file uses (mark.parametrize, fail) are stood in for. Warm, like the worker's.
 */
async function purePython() {
  const { loadPyodide } = await import('pyodide');
  const py = await loadPyodide({ indexURL: path.join(WWW, 'node_modules', 'pyodide') + path.sep });
  const repo = path.join(WWW, '..');
  const tomls = (dir) => fs.readdirSync(path.join(repo, dir)).filter((f) => f.endsWith('.toml')).map((f) => `${dir}/${f}`);
  for (const f of ['www/bench/anchor/test_deliver_once.py', 'src/deliver_once/reference.py',
    ...tomls('src/deliver_once/examples'), ...tomls('hidden-tests/deliver-once')]) {
    py.FS.mkdirTree(path.posix.dirname(`/repo/${f}`));
    py.FS.writeFile(`/repo/${f}`, fs.readFileSync(path.join(repo, f), 'utf8'));
  }
  py.runPython(`
import importlib.util, sys, types
def _fail(message, pytrace=True):
    raise AssertionError(message)
sys.modules["pytest"] = types.SimpleNamespace(fail=_fail, mark=types.SimpleNamespace(parametrize=lambda *a, **k: (lambda f: f)))
def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
anchor = _load("anchor", "/repo/www/bench/anchor/test_deliver_once.py")
learner = _load("solution", "/repo/src/deliver_once/reference.py")
reference = _load("reference_solution", "/repo/src/deliver_once/reference.py")
def run_all():
    failed = 0
    for case in anchor.CASES:
        try:
            anchor.test_case(case, learner, reference, 1042)
        except AssertionError:
            failed += 1
    return failed
`);
  const runAll = py.globals.get('run_all');
  const tests = py.runPython('len(anchor.CASES)');
  let failed = runAll();
  const ms = [];
  for (let i = 0; i < RUNS; i++) {
    const t0 = performance.now();
    failed = Math.max(failed, runAll());
    ms.push(performance.now() - t0);
  }
  return { ms, tests, failed };
}

async function main() {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'delivery-lab-bench-'));
  execFileSync(process.execPath, ['build.mjs', '--no-wasm', '--out', root], { cwd: WWW, stdio: 'ignore' });
  fs.writeFileSync(path.join(root, 'bare.html'), BARE_HTML);
  const build = JSON.parse(fs.readFileSync(path.join(root, 'build.json'), 'utf8'));

  console.log(`delivery-lab bench  (${os.cpus().length} cores, Node ${process.version}, Pyodide ${build.pyodideVersion})\n`);

  // 1. Sizes
  // Each lab's page loads its own grader module.
  console.log('1. Grader WASM, one module per lab (pkg/labs/ID/delivery_lab_bg.wasm)');
  for (const id of build.labs) {
    const wasm = fs.readFileSync(path.join(root, 'pkg', 'labs', id, 'delivery_lab_bg.wasm'));
    console.log(`   ${id.padEnd(13)} raw ${kb(wasm.length)}, gzip -6 ${kb(zlib.gzipSync(wasm, { level: 6 }).length)}, gzip -9 ${kb(zlib.gzipSync(wasm, { level: 9 }).length)}`);
  }
  console.log(`   page total: app ${kb(build.totals.app.raw)} raw / ${kb(build.totals.app.gzip)} gzip; `
    + `Pyodide ${kb(build.totals.pyodide.raw)} raw / ${kb(build.totals.pyodide.gzip)} gzip (downloaded once)\n`);

  const server = await startServer(root);
  const browser = await chromium.launch(LAUNCH);
  try {
    // 2. Cached visits: a first visit fills the caches (and the worker stores its
    // snapshot once Python is up), then reloads are timed, each lab, then the bare page.
    const cached = async (query) => {
      const ctx = await browser.newContext();
      const page = await ctx.newPage();
      await page.goto(server.url + query);
      await page.evaluate(() => window.deliveryLab.ready);
      await page.waitForFunction(() => window.deliveryLab.python.snapshot, null, { timeout: 60_000 });
      await page.waitForFunction(() => document.querySelector('#offline-badge').textContent.startsWith('Ready offline'), null, { timeout: 60_000 });
      const ready = [];
      const up = [];
      const modes = new Set();
      for (let i = 0; i < VISITS; i++) {
        await page.reload();
        up.push(await markTime(page, 'page-ready'));
        ready.push(await markTime(page, 'python-ready'));
        modes.add(await page.evaluate(() => window.deliveryLab.python.mode));
      }
      return { ctx, page, ready, up, modes: [...modes].join(', ') };
    };
    const lab1 = await cached('');
    const { ctx, page } = lab1;
    const courierCached = await cached('?lab=courier');
    await courierCached.ctx.close();
    const bareCtx = await browser.newContext();
    const bare = await bareCtx.newPage();
    await bare.goto(`${server.url}bare.html`);
    await markTime(bare, 'python-ready');
    const bareReady = [];
    for (let i = 0; i < VISITS; i++) {
      await bare.reload();
      bareReady.push(await markTime(bare, 'python-ready'));
    }
    await bareCtx.close();
    console.log('2. Cached visit, navigation start to ready (Python restored from the worker\'s snapshot: boot mode in brackets)');
    console.log(`   lab page, instructions + editor shown:      ${fmtMs(lab1.up)}`);
    console.log(`   deliver-once, Python + grader ready [${lab1.modes}]: ${fmtMs(lab1.ready)}  = ${ratio(lab1.ready, bareReady)} the bare page`);
    console.log(`   courier, Python + grader ready [${courierCached.modes}]:      ${fmtMs(courierCached.ready)}  = ${ratio(courierCached.ready, bareReady)} the bare page`);
    console.log(`   bare page, loadPyodide() on main thread:    ${fmtMs(bareReady)}  (the anchor)`);

    // First visits: a new profile each (no service worker, caches or HTTP cache),
    // the lab's ready asked for at once (as a first Run would), lab and bare page in turn.
    const labFirst = [];
    const bareFirst = [];
    for (let i = 0; i < FIRST; i++) {
      const lctx = await browser.newContext();
      const lp = await lctx.newPage();
      await lp.goto(server.url);
      await lp.evaluate(() => { window.deliveryLab.ready; });
      labFirst.push(await markTime(lp, 'python-ready'));
      await lctx.close();
      const bctx = await browser.newContext();
      const bp = await bctx.newPage();
      await bp.goto(`${server.url}bare.html`);
      bareFirst.push(await markTime(bp, 'python-ready'));
      await bctx.close();
    }
    console.log('   first visit (empty caches), navigation start to ready:');
    console.log(`   deliver-once, Python + grader ready [boot]: ${fmtMs(labFirst)}  = ${ratio(labFirst, bareFirst)} the bare page`);
    console.log(`   bare page, loadPyodide() on main thread:    ${fmtMs(bareFirst)}  (the anchor)\n`);

    // 3. Warm full runs in the browser.
    await page.evaluate(() => window.deliveryLab.ready);
    await page.evaluate((s) => window.deliveryLab.setCode(s), REFERENCE);
    const first = await page.evaluate(() => window.deliveryLab.run());
    if (first.status !== 'pass') throw new Error(`the reference did not pass in the browser: ${first.status}`);
    const workerMs = [];
    const pageMs = [];
    for (let i = 0; i < RUNS; i++) {
      const { ms, wall } = await page.evaluate(async () => {
        const t0 = performance.now();
        await window.deliveryLab.run();
        return { ms: window.deliveryLab.lastRun.ms, wall: performance.now() - t0 };
      });
      workerMs.push(ms);
      pageMs.push(wall);
    }
    const engine = await loadNodeEngine();
    engine.run(REFERENCE);
    const nodeMs = [];
    for (let i = 0; i < RUNS; i++) {
      const t0 = performance.now();
      engine.run(REFERENCE);
      nodeMs.push(performance.now() - t0);
    }
    console.log(`3. Warm full run, reference solution, all ${first.total} tests (${first.examples.total} examples, ${first.hidden.total} hidden)`);
    console.log(`   in the worker (engine.run):                 ${fmtMs(workerMs)}`);
    console.log(`   page: run() call to report drawn:           ${fmtMs(pageMs)}`);
    console.log(`   Node host (the same host/):                 ${fmtMs(nodeMs)}`);
    const pure = await purePython();
    console.log(`   the same checks in pure Python, in Pyodide (Node): ${fmtMs(pure.ms)}  (the anchor: ${pure.tests} tests`
      + `${pure.failed ? `, ${pure.failed} FAILED` : ', all pass'}); the worker's run = ${ratio(workerMs, pure.ms)} it\n`);

    // 4. Click on Run to the first result drawn.
    const drawn = [];
    const painted = [];
    for (let i = 0; i < RUNS; i++) {
      await page.evaluate(() => performance.clearMarks() || performance.clearMeasures());
      await page.click('#run');
      drawn.push(await page.waitForFunction(() => performance.getEntriesByName('run-to-results')[0]?.duration, null, { polling: 20 }).then((h) => h.jsonValue()));
      const click = await markTime(page, 'run-click');
      painted.push((await markTime(page, 'results-painted')) - click);
      await page.waitForFunction(() => !document.querySelector('#run').disabled);
    }
    console.log('4. Click on Run to results (reference solution, Python already loaded)');
    console.log(`   to results in the DOM:                      ${fmtMs(drawn)}`);
    console.log(`   to the next frame (painted):                ${fmtMs(painted)}`);
    await ctx.close();

    // 5. The courier lab: a full run (unit tests, chaos run, fairness run) in the
    // page's worker, against its 20 s limit.
    const cctx = await browser.newContext();
    const cpage = await cctx.newPage();
    await cpage.goto(`${server.url}?lab=courier`);
    await cpage.evaluate(() => window.deliveryLab.ready);
    await cpage.evaluate((s) => window.deliveryLab.setCode(s), COURIER_REFERENCE);
    const courierMs = [];
    let courier;
    for (let i = 0; i < COURIER_RUNS; i++) {
      courier = await cpage.evaluate(() => window.deliveryLab.run());
      if (courier.status !== 'pass') throw new Error(`the courier reference did not pass in the browser: ${courier.status}`);
      courierMs.push(await cpage.evaluate(() => window.deliveryLab.lastRun.ms));
    }
    const cengine = await loadNodeEngine({ labId: 'courier' });
    // The differential tests' share of a grade (issue 36): the same engine runs them
    // alone (`only`), each run beside a whole one, so that both meet the same load.
    // Each run loads the source once, the whole one as the one of some tests only.
    const differential = cengine.lab.tests.map((t) => t.name).filter((n) => n.startsWith(DIFFERENTIAL));
    const cnodeMs = [];
    const cdiffMs = [];
    for (let i = 0; i < COURIER_RUNS; i++) {
      let t0 = performance.now();
      cengine.run(COURIER_REFERENCE);
      cnodeMs.push(performance.now() - t0);
      if (!differential.length) continue;
      t0 = performance.now();
      const r = cengine.run(COURIER_REFERENCE, { only: differential });
      cdiffMs.push(performance.now() - t0);
      if (!r.partial || r.tests.length !== differential.length || r.status !== 'pass') {
        throw new Error(`the courier reference's differential tests alone: ${r.tests.length} tests, status ${r.status}`);
      }
    }
    console.log(`\n5. Courier lab, full run of the reference: ${courier.total} tests (unit tests, chaos run, fairness run), limit ${cengine.lab.time_limit_s} s`);
    console.log(`   in the worker (engine.run):                 ${fmtMs(courierMs)}`);
    console.log(`   Node host:                                  ${fmtMs(cnodeMs)}`);
    console.log(differential.length
      ? `   its ${differential.length} differential tests alone (Node, only): ${fmtMs(cdiffMs)} = ${(100 * median(cdiffMs) / median(cnodeMs)).toFixed(0)}% of the Node run`
      : '   differential tests: none in this build (--no-hidden)');
    await cctx.close();
  } finally {
    await browser.close();
    server.stop();
    fs.rmSync(root, { recursive: true, force: true });
  }
}

// ---- 6. the real run ----

const REPO = path.join(WWW, '..');
const VENV_PY = path.join(REPO, '.venv', 'bin', 'python');
// The shortened run: a fifth of the actions and kills, a 5 s lease (a killed worker's
// action waits one for a taker), fairness loads of 4 s; the seed and the rest as the
// full run's defaults.
const REAL_SHORT = ['--actions', '400', '--kills', '40', '--lease-s', '5', '--fairness-load-s', '4'];

/** The machine's CPU time so far, all processes (/proc/stat): busy and total jiffies. */
function machineCpu() {
  const f = fs.readFileSync('/proc/stat', 'utf8').split('\n')[0].trim().split(/\s+/).slice(1).map(Number);
  const idle = f[3] + (f[4] || 0);
  const total = f.reduce((a, b) => a + b, 0);
  return { busy: total - idle, total };
}

/** `./lab real ARGS --format json` on the reference: {report, wallS, busy} (busy: the
 *  share of the machine's cores in use meanwhile, whoever used them). */
function realRun(args) {
  return new Promise((resolve, reject) => {
    const cpu0 = machineCpu();
    const t0 = performance.now();
    const child = spawn(VENV_PY, [path.join(REPO, 'www', 'real', 'run.py'), ...args, '--format', 'json',
      path.join(REPO, 'src', 'courier', 'reference.py')], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.on('data', (d) => { out += d; });
    child.stderr.on('data', (d) => { err += d; });
    child.on('error', reject);
    child.on('close', (code) => {
      const cpu = machineCpu();
      const line = out.trim().split('\n').pop();
      let report;
      try { report = JSON.parse(line); } catch { return reject(new Error(`./lab real ${args.join(' ')} exited ${code}: ${err.slice(-1500)}`)); }
      if (!report.seconds) return reject(new Error(`./lab real ${args.join(' ')}: ${report.error || report.stopped || line}`));
      resolve({ report, wallS: (performance.now() - t0) / 1000, busy: (cpu.busy - cpu0.busy) / Math.max(1, cpu.total - cpu0.total) });
    });
  });
}

const PHASE_WORDS = {
  before_crash_s: 'before the crash', database_down_s: 'database down', to_95_percent_s: 'to 95%',
  last_5_percent_s: 'last 5%', webhooks_s: 'webhooks',
};

/** One report's time, as a line: the parts, and the chaos run's phases. */
function realTimeLine(report) {
  const t = report.seconds;
  const phases = Object.entries(report.chaos.phases).map(([k, v]) => `${PHASE_WORDS[k] ?? k} ${v}`).join(', ');
  return `${t.total} s: setting up ${t.setup}, the chaos run ${t.chaos} (${phases})`
    + `${'fairness' in t ? `, fairness ${t.fairness}` : ''}, stopping ${t.stop}`;
}

async function realBench() {
  const saved = opts['real-json'];
  if (saved) {
    const report = JSON.parse(fs.readFileSync(saved, 'utf8').trim().split('\n').pop());
    console.log(`\n6. Courier lab, the real run, from ${saved} (seed ${report.seed}; ${report.replay ?? ''}): no anchor`);
    console.log(`   ${realTimeLine(report)}; ${report.verdict}`);
    return;
  }
  if (!fs.existsSync(VENV_PY)) {
    console.log('\n6. Courier lab, the real run: skipped, .venv/bin/python is missing (./lab real makes it)');
    return;
  }
  const size = opts['real-full'] ? [] : REAL_SHORT;
  const what = opts['real-full'] ? 'the full run (2,000 actions, 200 kills, 8 workers, fairness loads of 10 s)'
    : `shortened (${REAL_SHORT.join(' ')}; --real-full for the full run)`;
  try {
    // The anchor first: the same actions, seed and lease with no kills and no freezes
    // (the database's crash stays: every run has it), and no fairness run.
    const anchor = await realRun([...size, '--kills', '0', '--freezes', '0']);
    const run = await realRun([...size, '--fairness']);
    const r = run.report;
    console.log(`\n6. Courier lab, the real run (./lab real), ${what}, seed ${r.seed}`);
    console.log(`   ${realTimeLine(r)}; ${r.chaos.kills} kills, ${r.chaos.zombies} zombie${r.chaos.zombies === 1 ? '' : 's'}; ${r.verdict}`
      + `; the machine's cores ${Math.round(run.busy * 100)}% busy meanwhile (every process on it)`);
    console.log(`   anchor, the same run with no kills and no freezes: ${realTimeLine(anchor.report)}`
      + `; cores ${Math.round(anchor.busy * 100)}% busy`);
    console.log(`   the chaos run took ${(r.seconds.chaos / anchor.report.seconds.chaos).toFixed(2)}x the anchor's`
      + ' (its kills and freezes: a killed worker\'s action waits out a lease, a frozen one a lease and a takeover)');
  } catch (e) {
    console.log(`\n6. Courier lab, the real run: could not run (${e.message.split('\n')[0]})`);
  }
}

if (opts['real-only']) await realBench();
else {
  await main();
  await realBench();
}
