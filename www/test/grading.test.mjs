// Hidden tests that stay on the server:
//  - a --no-hidden build holds none of the hidden cases' names or data in any file
//    it serves (raw bytes, gzip-decoded files, and every response as served);
//  - serve.mjs --grading answers POST /grade, refuses bad requests with clear 4xx,
//    stays up under a burst of 50 concurrent submissions (each graded or 429);
//  - the no-hidden page in Chromium offers "Submit for grading" and shows the hidden
//    results the server returns.
// The HTTP tests run against a FAKE pool (the same engine in Node, from www/pkg with
// the hidden tests, one grade at a time: see fakePool below) so they test the
// server's behaviour on their own; the tests marked "real pool" use www/cli/pool.mjs,
// the grading CLI's sandboxed pool, and are skipped while it does not exist.
// Run: node --test test/grading.test.mjs   (builds the no-hidden grader with cargo)
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import zlib from 'node:zlib';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { chromium } from 'playwright-core';
import { serve } from '../serve.mjs';
import { loadNodeEngine } from '../src/node_host.mjs';

const WWW = fileURLToPath(new URL('../', import.meta.url));
const REPO = path.join(WWW, '..');
const REFERENCE = fs.readFileSync(path.join(REPO, 'src/deliver_once/reference.py'), 'utf8');
const NO_NX = REFERENCE.replace('ttl=policy.claim_ttl_s, nx=True)', 'ttl=policy.claim_ttl_s)');
const ROOT = fs.mkdtempSync(path.join(os.tmpdir(), 'delivery-lab-nohidden-'));
const POOL_FILE = path.join(WWW, 'cli', 'pool.mjs');
const REAL_POOL = fs.existsSync(POOL_FILE);
const LIMIT = { timeout: 120_000 };
const LAUNCH = {
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--no-first-run'],
};

// ---------------------------------------------------------------------------
// What must never reach the browser: every hidden case's name, and the task keys
// and kv keys the hidden cases use (those that appear nowhere outside hidden-tests/).

function hiddenNeedles() {
  const dir = path.join(REPO, 'hidden-tests', 'deliver-once');
  const text = fs.readdirSync(dir).filter((f) => f.endsWith('.toml')).map((f) => fs.readFileSync(path.join(dir, f), 'utf8')).join('\n');
  const names = [...text.matchAll(/^name\s*=\s*"((?:[^"\\]|\\.)*)"/gm)].map((m) => JSON.parse(`"${m[1]}"`));
  const keys = [...text.matchAll(/\bkey\s*=\s*"([^"]+)"/g)].map((m) => m[1].replace(/^sent:/, ''));
  // Data the page may legitimately carry (the examples, the lab text) is not a leak.
  const open = [path.join(REPO, 'src/deliver_once/lab.md'), ...fs.readdirSync(path.join(REPO, 'src/deliver_once/examples'))
    .map((f) => path.join(REPO, 'src/deliver_once/examples', f))].map((f) => fs.readFileSync(f, 'utf8')).join('\n');
  const data = [...new Set(keys)].filter((k) => !open.includes(k));
  // The courier lab's hidden cases are Rust data (hidden-tests/courier/cases.rs).
  const courier = fs.readFileSync(path.join(REPO, 'hidden-tests/courier/cases.rs'), 'utf8');
  names.push(...[...courier.matchAll(/^\s*name: "((?:[^"\\]|\\.)*)"/gm)].map((m) => JSON.parse(`"${m[1]}"`)));
  return { names, data };
}

/** Every needle found in `buf`, as "needle". */
function found(buf, needles) {
  return needles.filter((n) => buf.includes(Buffer.from(n, 'utf8')));
}

function walk(dir) {
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory()
    ? walk(path.join(dir, e.name)) : [path.join(dir, e.name)]));
}

// ---------------------------------------------------------------------------
// HTTP helpers: raw bytes in, status/headers/json out.

function post(url, body, headers = { 'Content-Type': 'application/json' }, { method = 'POST', chunked = false } = {}) {
  const buf = Buffer.isBuffer(body) ? body : Buffer.from(typeof body === 'string' ? body : JSON.stringify(body));
  return new Promise((resolve, reject) => {
    const req = http.request(new URL('grade', url), {
      method, headers: { ...headers, ...(chunked ? { 'Transfer-Encoding': 'chunked' } : { 'Content-Length': buf.length }) },
    }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString('utf8');
        let json = null;
        try { json = JSON.parse(text); } catch { /* not JSON */ }
        resolve({ status: res.statusCode, headers: res.headers, text, json });
      });
    });
    // The server may answer (413) and close before the body is all sent.
    req.on('error', (e) => { if (!req.res) reject(e); });
    if (method !== 'GET') {
      if (chunked) { for (let i = 0; i < buf.length; i += 16 * 1024) req.write(buf.subarray(i, i + 16 * 1024)); }
      else req.write(buf);
    }
    req.end();
  });
}

// ---------------------------------------------------------------------------
// The fake pool: the API of www/cli/pool.mjs (grade({lab, source, seed}) → the CLI's
// json line, with file: null), graded one at a time by the engine in Node with the
// full grader (www/pkg, hidden tests included), plus an optional delay per job.

/** The CLI's json line for a report (the shape of cli/pool.mjs's jsonLine, file null). */
function cliLine(report) {
  return {
    file: null, lab: report.lab, status: report.status, passed: report.passed, failed: report.failed,
    total: report.total, score: report.score, max_score: report.max_score, seed: report.seed, duration_ms: 1,
    tests: report.tests.map((t) => ({ name: t.name, kind: t.kind, status: t.status, ...(t.kind === 'example' && t.message != null ? { message: t.message } : {}) })),
    replay: report.replay,
    ...(report.status === 'error' && report.message != null ? { message: report.message } : {}),
  };
}

const count = (line, kind, status) => line.tests.filter((t) => t.kind === kind && (!status || t.status === status)).length;

let engine;
function fakePool({ delayMs = 0 } = {}) {
  let chain = Promise.resolve();
  let waiting = 0;
  const pool = {
    ready: Promise.resolve(),
    grades: 0,
    grade({ lab, source, seed }) {
      waiting += 1;
      const job = chain.then(async () => {
        waiting -= 1;
        if (delayMs) await new Promise((r) => setTimeout(r, delayMs));
        if (lab !== 'deliver-once') throw new Error(`unknown lab ${lab}`);
        pool.grades += 1;
        return `${JSON.stringify(cliLine(engine.run(source, { seed })))}\n`;
      });
      chain = job.catch(() => {});
      return job;
    },
    queued: () => waiting,
    close() {},
  };
  return pool;
}

const started = [];
async function start(opts) {
  const s = await serve({ port: 0, root: ROOT, quiet: true, ...opts });
  started.push(s);
  return s;
}

let needles;
let usedRealPool = false;
before(async () => {
  // The no-hidden grader is built by cargo (cached after the first time) into
  // target/pkg-no-hidden; www/pkg, which the other tests use, is left alone.
  execFileSync(process.execPath, ['build.mjs', '--no-hidden', '--out', ROOT], { cwd: WWW, stdio: 'inherit' });
  needles = hiddenNeedles();
  engine = await loadNodeEngine();
});

after(async () => {
  for (const s of started) {
    s.server.closeAllConnections();
    await new Promise((r) => s.server.close(r));
    // The real pool's sandboxes must go, or this process cannot end (3 s at most).
    await Promise.race([s.grading?.pool?.close?.(), new Promise((r) => setTimeout(r, 3000).unref())]);
  }
  fs.rmSync(ROOT, { recursive: true, force: true });
  // cli/pool.mjs's close() kills each sandbox's `unshare`, but the node under it
  // (after setpriv) can outlive it and keep its IPC channel, and so this process,
  // open: end it once the results are out.
  if (usedRealPool) setTimeout(() => process.exit(), 2000).unref();
});

test('the no-hidden build holds no hidden case name or data in any file it serves', LIMIT, async () => {
  assert.ok(needles.names.length >= 18, `${needles.names.length} hidden case names`);
  for (const k of ['order-2001:shipped', 'invoice-77:paid']) assert.ok(needles.data.includes(k), k);
  // The search works: the full grader (www/pkg) holds every one of them.
  const full = fs.readFileSync(path.join(WWW, 'pkg', 'delivery_lab_bg.wasm'));
  assert.deepEqual(found(full, needles.names), needles.names);
  assert.ok(found(full, needles.data).length > 0);

  const all = [...needles.names, ...needles.data];
  const files = walk(ROOT);
  assert.ok(files.some((f) => f.endsWith('delivery_lab_bg.wasm')));
  for (const f of files) {
    const buf = fs.readFileSync(f);
    assert.deepEqual(found(buf, all), [], `${path.relative(ROOT, f)} holds hidden data`);
    if (buf[0] === 0x1f && buf[1] === 0x8b) assert.deepEqual(found(zlib.gunzipSync(buf), all), [], `${f} (gunzipped)`);
  }
  // As served: every file, gzip-decoded where the server compressed it.
  const { url } = await start({});
  for (const f of files) {
    const rel = path.relative(ROOT, f).split(path.sep).join('/');
    const res = await fetch(new URL(rel, url), { headers: { 'Accept-Encoding': 'gzip' } });
    assert.equal(res.status, 200, rel);
    const body = Buffer.from(await res.arrayBuffer()); // fetch decodes gzip
    assert.deepEqual(found(body, all), [], `${rel} as served holds hidden data`);
  }
  // The grader itself lists no hidden test; the page knows the server grades them.
  const pkg = await import(pathToFileURL(path.join(ROOT, 'pkg', 'labs', 'deliver-once', 'delivery_lab.js')).href);
  pkg.initSync({ module: fs.readFileSync(path.join(ROOT, 'pkg', 'labs', 'deliver-once', 'delivery_lab_bg.wasm')) });
  const lab = JSON.parse(new pkg.Grader().lab('deliver-once'));
  assert.equal(lab.tests.filter((t) => t.kind === 'hidden').length, 0);
  assert.equal(lab.tests.filter((t) => t.kind === 'example').length, 3);
  assert.equal(JSON.parse(fs.readFileSync(path.join(ROOT, 'build.json'), 'utf8')).hidden, false);
});

test('POST /grade returns the CLI json report with the hidden results (fake pool)', LIMIT, async () => {
  const { url } = await start({ grading: { pool: fakePool(), jobs: 1 } });
  const res = await post(url, { lab: 'deliver-once', source: REFERENCE });
  assert.equal(res.status, 200);
  assert.match(res.headers['content-type'], /application\/json/);
  assert.equal(res.json.status, 'pass');
  assert.equal(res.json.file, null);
  assert.equal(count(res.json, 'hidden'), 18);
  assert.equal(count(res.json, 'hidden', 'pass'), 18);
  assert.equal(res.json.passed, 21);
  const mutant = await post(url, { lab: 'deliver-once', source: NO_NX, seed: 7 });
  assert.equal(mutant.status, 200);
  assert.equal(mutant.json.status, 'fail');
  assert.equal(String(mutant.json.seed), '7');
  assert.equal(mutant.json.tests.find((t) => t.name === 'the claim uses nx and claim_ttl_s, and the done marker lives exactly DONE_TTL_S').status, 'fail');
});

test('bad requests get clear 4xx answers (fake pool)', LIMIT, async () => {
  const pool = fakePool();
  const { url, grading } = await start({ grading: { pool, jobs: 1 } });
  const json = { 'Content-Type': 'application/json' };
  const cases = [
    ['too large', await post(url, { lab: 'deliver-once', source: 'x'.repeat(70 * 1024) }), 413, /larger than 65536 bytes/],
    ['too large, chunked', await post(url, { lab: 'deliver-once', source: 'x'.repeat(200 * 1024) }, json, { chunked: true }), 413, /larger than/],
    ['not UTF-8', await post(url, Buffer.concat([Buffer.from('{"lab":"deliver-once","source":"'), Buffer.from([0xff, 0xfe, 0x80]), Buffer.from('"}')])), 400, /not valid UTF-8/],
    ['not JSON', await post(url, '{"lab": "deliver-once", source'), 400, /not valid JSON/],
    ['not an object', await post(url, ['deliver-once', 'x']), 400, /JSON object/],
    ['no lab', await post(url, { source: 'x' }), 400, /"lab"/],
    ['source not a string', await post(url, { lab: 'deliver-once', source: 42 }), 400, /"source"/],
    ['bad seed', await post(url, { lab: 'deliver-once', source: 'x', seed: -1 }), 400, /"seed"/],
    ['extra field', await post(url, { lab: 'deliver-once', source: 'x', file: '/etc/passwd' }), 400, /unknown field/],
    ['unknown lab', await post(url, { lab: 'no-such-lab', source: 'x' }), 404, /unknown lab "no-such-lab"; this server grades: deliver-once/],
    ['not JSON content type', await post(url, 'lab=deliver-once', { 'Content-Type': 'application/x-www-form-urlencoded' }), 415, /Content-Type: application\/json/],
    ['GET', await post(url, '', {}, { method: 'GET' }), 405, /POST/],
  ];
  for (const [label, res, status, message] of cases) {
    assert.equal(res.status, status, `${label}: ${res.status} ${res.text}`);
    assert.match(res.json?.error ?? '', message, label);
  }
  assert.equal(pool.grades, 0, 'a bad request reached the grader');
  assert.equal(grading.stats().refused, cases.length);
  // Still up and grading.
  assert.equal((await post(url, { lab: 'deliver-once', source: REFERENCE })).status, 200);
});

/** 50 submissions at once; each must be graded (200) or refused with 429 + Retry-After. */
async function burst(url, n = 50) {
  const t0 = Date.now();
  const answers = await Promise.all(Array.from({ length: n }, (_, i) => post(url, { lab: 'deliver-once', source: i % 2 ? REFERENCE : NO_NX })));
  const ms = Date.now() - t0;
  for (const a of answers) {
    assert.ok(a.status === 200 || a.status === 429, `${a.status} ${a.text.slice(0, 200)}`);
    if (a.status === 200) assert.ok(['pass', 'fail'].includes(a.json.status));
    else {
      assert.match(a.headers['retry-after'] ?? '', /^\d+$/);
      assert.match(a.json.error, /too many submissions/);
    }
  }
  return { graded: answers.filter((a) => a.status === 200).length, refused: answers.filter((a) => a.status === 429).length, ms };
}

test('a burst of 50 concurrent submissions: each graded or 429, and the server stays up (fake pool)', LIMIT, async () => {
  const { url, grading } = await start({ grading: { pool: fakePool({ delayMs: 20 }), jobs: 2 } });
  const { graded, refused, ms } = await burst(url);
  console.log(`fake pool, jobs 2: ${graded} graded, ${refused} refused with 429, in ${ms} ms`);
  assert.equal(graded + refused, 50);
  assert.ok(graded >= 6, `${graded} graded`); // 2 grading + 4 waiting at least
  assert.ok(refused > 0);
  const stats = grading.stats();
  assert.ok(stats.peak <= stats.capacity, JSON.stringify(stats));
  assert.equal(stats.inFlight, 0);
  // Up, serving pages and grading.
  assert.equal((await fetch(url)).status, 200);
  assert.equal((await post(url, { lab: 'deliver-once', source: REFERENCE })).json.status, 'pass');
});

async function submitInPage(url) {
  const browser = await chromium.launch(LAUNCH);
  try {
    const page = await browser.newPage({ viewport: { width: 1300, height: 1000 } });
    page.on('pageerror', (e) => console.error('page error:', e.message));
    await page.goto(url);
    await page.waitForFunction(() => window.deliveryLab);
    await page.evaluate(() => window.deliveryLab.loaded);
    // The page runs the examples only, and says the server grades the rest.
    await page.locator('#submit').waitFor({ state: 'visible' });
    assert.match(await page.locator('#submit').innerText(), /Submit for grading/);
    assert.match(await page.locator('#lab-meta').innerText(), /hidden tests on the server/);
    await page.evaluate((s) => window.deliveryLab.setCode(s), REFERENCE);
    const local = await page.evaluate(() => window.deliveryLab.run());
    assert.equal(local.status, 'pass');
    assert.equal(local.total, 3);
    assert.equal(local.hidden.total, 0);
    assert.match(await page.locator('.summary').innerText(), /All 3 examples pass/);
    assert.equal(await page.locator('.hidden-tests li').count(), 0);
    // Submit: the server's report, hidden results included, drawn on the page.
    await page.evaluate((s) => window.deliveryLab.setCode(s), NO_NX);
    await page.click('#submit');
    await page.waitForFunction(() => document.querySelectorAll('.hidden-tests li').length > 0, null, { timeout: 60_000 });
    const report = await page.evaluate(() => window.deliveryLab.lastReport);
    assert.equal(report.hidden.total, 18);
    assert.equal(report.status, 'fail');
    assert.equal(await page.locator('.hidden-tests li').count(), 18);
    assert.equal(await page.locator('.hidden-tests li[data-test="the claim uses nx and claim_ttl_s, and the done marker lives exactly DONE_TTL_S"]').getAttribute('data-status'), 'fail');
    assert.match(await page.locator('.summary').innerText(), /graded by the server/);
    assert.match(await page.locator('#status').innerText(), /Graded by the server/);
    // The reference through the API: every test, 90 XP.
    await page.evaluate((s) => window.deliveryLab.setCode(s), REFERENCE);
    const full = await page.evaluate(() => window.deliveryLab.submit());
    assert.equal(full.status, 'pass');
    assert.equal(full.total, 21);
    assert.match(await page.locator('#xp-badge').innerText(), /90 XP earned/);
  } finally {
    await browser.close();
  }
}

test('the no-hidden page: Submit for grading shows the hidden results the server returns (fake pool)', LIMIT, async () => {
  const { url } = await start({ grading: { pool: fakePool(), jobs: 1 } });
  await submitInPage(url);
});

test('the page says so when the grading server is busy or absent (fake pool)', LIMIT, async () => {
  // No room at all: every submission is refused with 429.
  const { url } = await start({ grading: { pool: fakePool(), jobs: 1, maxWaiting: -1 } });
  const browser = await chromium.launch(LAUNCH);
  try {
    const page = await browser.newPage();
    await page.goto(url);
    await page.waitForFunction(() => window.deliveryLab);
    await page.evaluate(() => window.deliveryLab.loaded);
    const answer = await page.evaluate(() => window.deliveryLab.submit());
    assert.match(answer.error, /busy; try again in 2 s/);
    assert.match(await page.locator('#status').innerText(), /busy/);
    // A server started without --grading: the page says so.
    const plain = await start({});
    await page.goto(plain.url);
    await page.waitForFunction(() => window.deliveryLab);
    await page.evaluate(() => window.deliveryLab.loaded);
    assert.match((await page.evaluate(() => window.deliveryLab.submit())).error, /does not grade submissions/);
  } finally {
    await browser.close();
  }
});

test('real pool: the page submits to serve --grading and shows the hidden results', { ...LIMIT, skip: !REAL_POOL && 'www/cli/pool.mjs does not exist yet' }, async () => {
  usedRealPool = true;
  const { url } = await start({ grading: { jobs: 2 } });
  await submitInPage(url);
});

test('real pool: a burst of 50 concurrent submissions, each graded or 429', { ...LIMIT, skip: !REAL_POOL && 'www/cli/pool.mjs does not exist yet' }, async () => {
  usedRealPool = true;
  const { url, grading } = await start({ grading: { jobs: 2 } });
  const { graded, refused, ms } = await burst(url);
  console.log(`real pool, jobs 2: ${graded} graded, ${refused} refused with 429, in ${ms} ms`);
  assert.equal(graded + refused, 50);
  assert.ok(graded >= 6, `${graded} graded`);
  assert.equal(grading.stats().inFlight, 0);
  assert.equal((await post(url, { lab: 'deliver-once', source: REFERENCE })).json.status, 'pass');
});
