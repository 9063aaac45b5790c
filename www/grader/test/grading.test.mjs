// Hidden tests that stay on the server:
//  - a --no-hidden build holds none of the hidden cases' names or data in any file
//    it serves (raw bytes, gzip-decoded files, and every response as served);
//  - serve.mjs --grading answers POST /grade, refuses bad requests with clear 4xx,
//    stays up under a burst of 50 concurrent submissions (each graded or 429);
//  - the no-hidden page in Chromium offers "Submit for grading" and shows the hidden
//    results the server returns;
//  - whom the server serves and how it holds up (no build needed, a fake pool): only
//    its Host names (421), POST /grade only from its own origin, no Origin, or an
//    allowed one (403, CORS), a client that disconnects frees its slot and its job at
//    once, each client address has a bounded share of the queue (429), slow headers
//    and bodies time out (408), malformed requests get 4xx. (grader/test/serve-fuzz.test.mjs
//    sends it a few thousand hostile requests.)
// The HTTP tests run against a FAKE pool (the same engine in Node, from www/pkg with
// the hidden tests, one grade at a time: see fakePool below) so they test the
// server's behaviour on their own; the tests marked "real pool" use www/grader/pool.mjs,
// the grading CLI's sandboxed pool, and are skipped while it does not exist.
// Run: node --test grader/test/grading.test.mjs   (builds the no-hidden grader with cargo)
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import zlib from 'node:zlib';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { chromium } from 'playwright-core';
import { serve, createGradeHandler, gradeRequestProblem } from '../serve.mjs';
import { loadGrader, loadNodeEngine } from '../../host/node_host.mjs';

const WWW = fileURLToPath(new URL('../../', import.meta.url));
const REPO = path.join(WWW, '..');
const REFERENCE = fs.readFileSync(path.join(REPO, 'src/deliver_once/reference.py'), 'utf8');
const NO_NX = REFERENCE.replace('ttl=policy.claim_ttl_s, nx=True)', 'ttl=policy.claim_ttl_s)');
// Lab 1's tests as the grader lists them: the counts below are the lab's, not copies.
const LAB1_TESTS = JSON.parse(new (await loadGrader()).Grader().lab('deliver-once')).tests;
const HIDDEN = LAB1_TESTS.filter((t) => t.kind === 'hidden').length;
const ROOT = fs.mkdtempSync(path.join(os.tmpdir(), 'delivery-lab-nohidden-'));
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
  // The courier lab's hidden cases: their names (its data is tables and ids, too
  // generic to search for).
  const cdir = path.join(REPO, 'hidden-tests', 'courier');
  const courier = fs.readdirSync(cdir).filter((f) => f.endsWith('.toml')).map((f) => fs.readFileSync(path.join(cdir, f), 'utf8')).join('\n');
  names.push(...[...courier.matchAll(/^name\s*=\s*"((?:[^"\\]|\\.)*)"/gm)].map((m) => JSON.parse(`"${m[1]}"`)));
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

/** Resolves `resolve` with {status, headers, text, json} once `res` has ended. */
function collect(res, resolve) {
  const chunks = [];
  res.on('data', (c) => chunks.push(c));
  res.on('end', () => {
    const text = Buffer.concat(chunks).toString('utf8');
    let json = null;
    try { json = JSON.parse(text); } catch { /* not JSON */ }
    resolve({ status: res.statusCode, headers: res.headers, text, json });
  });
}

// `from` is the client's own address, 127.0.0.x: the server counts each address's
// submissions (loopback is all of 127/8 on Linux).
function post(url, body, headers = { 'Content-Type': 'application/json' }, { method = 'POST', chunked = false, from, onRequest } = {}) {
  const buf = Buffer.isBuffer(body) ? body : Buffer.from(typeof body === 'string' ? body : JSON.stringify(body));
  return new Promise((resolve, reject) => {
    const req = http.request(new URL('grade', url), {
      method, headers: { ...headers, ...(chunked ? { 'Transfer-Encoding': 'chunked' } : { 'Content-Length': buf.length }) },
      ...(from ? { localAddress: from, agent: false } : {}),
    }, (res) => {
      collect(res, resolve);
    });
    // The server may answer (413) and close before the body is all sent.
    req.on('error', (e) => { if (!req.res) reject(e); });
    onRequest?.(req);
    if (method !== 'GET') {
      if (chunked) { for (let i = 0; i < buf.length; i += 16 * 1024) req.write(buf.subarray(i, i + 16 * 1024)); }
      else req.write(buf);
    }
    req.end();
  });
}

// ---------------------------------------------------------------------------
// The fake pool: the API of www/grader/pool.mjs (grade({lab, source, seed}) → the CLI's
// json line as an object, with file: null), graded one at a time by the engine in Node with the
// full grader (www/pkg, hidden tests included), plus an optional delay per job.

/** The CLI's json line for a report (the shape of grader/pool.mjs's jsonLine, file null). */
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
        return cliLine(engine.run(source, { seed }));
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
// The server's own tests need no build: a root with a page is enough.
const PLAIN = fs.mkdtempSync(path.join(os.tmpdir(), 'delivery-lab-serve-'));
fs.writeFileSync(path.join(PLAIN, 'index.html'), '<!doctype html><title>lab</title>\n');
async function start(opts) {
  const s = await serve({ port: 0, root: ROOT, quiet: true, ...opts });
  started.push(s);
  return s;
}

let needles;
let usedRealPool = false;
let setup = null;
/** The no-hidden build and the engine, made once for the tests that need them. */
function built() {
  // The no-hidden grader is built by cargo (cached after the first time) into
  // target/pkg-no-hidden; www/pkg, which the other tests use, is left alone.
  setup ??= (async () => {
    execFileSync(process.execPath, ['build.mjs', '--no-hidden', '--out', ROOT], { cwd: WWW, stdio: 'inherit' });
    needles = hiddenNeedles();
    engine = await loadNodeEngine();
  })();
  return setup;
}

after(async () => {
  for (const s of started) {
    s.server.closeAllConnections();
    await new Promise((r) => s.server.close(r));
    // The real pool's sandboxes must go, or this process cannot end (3 s at most).
    await Promise.race([s.grading?.pool?.close?.(), new Promise((r) => setTimeout(r, 3000).unref())]);
  }
  fs.rmSync(ROOT, { recursive: true, force: true });
  fs.rmSync(PLAIN, { recursive: true, force: true });
  // grader/pool.mjs's close() kills each sandbox's `unshare`, but the node under it
  // (after setpriv) can outlive it and keep its IPC channel, and so this process,
  // open: end it once the results are out.
  if (usedRealPool) setTimeout(() => process.exit(), 2000).unref();
});

// The first test to ask for the no-hidden build waits for it: from a clean clone,
// cargo builds the three graders in target dirs of their own (about 75 s here).
const BUILD_LIMIT = { timeout: 300_000 };

test('the no-hidden build holds no hidden case name or data in any file it serves', BUILD_LIMIT, async () => {
  await built();
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
  await built();
  const { url } = await start({ grading: { pool: fakePool(), jobs: 1 } });
  const res = await post(url, { lab: 'deliver-once', source: REFERENCE });
  assert.equal(res.status, 200);
  assert.match(res.headers['content-type'], /application\/json/);
  assert.equal(res.json.status, 'pass');
  assert.equal(res.json.file, null);
  assert.equal(count(res.json, 'hidden'), HIDDEN);
  assert.equal(count(res.json, 'hidden', 'pass'), HIDDEN);
  assert.equal(res.json.passed, LAB1_TESTS.length);
  const mutant = await post(url, { lab: 'deliver-once', source: NO_NX, seed: 7 });
  assert.equal(mutant.status, 200);
  assert.equal(mutant.json.status, 'fail');
  assert.equal(String(mutant.json.seed), '7');
  assert.equal(mutant.json.tests.find((t) => t.name === 'the claim uses nx and claim_ttl_s, and the done marker lives exactly DONE_TTL_S').status, 'fail');
});

// The request's shape is one schema (serve.mjs GRADE_REQUEST_SCHEMA, checked by ajv);
// each broken rule is said by field, in the words the server has always used.
test('a request body against the schema: each broken rule named by its field', () => {
  const object = 'the body must be a JSON object {"lab": "...", "source": "..."}';
  const lab = '"lab" must be a lab id, a string';
  const source = '"source" must be the Python source, a string';
  const seed = '"seed", when given, must be a whole number from 0 to 4294967295';
  for (const [body, problem] of [
    [{ lab: 'x', source: 'y' }, null], [{ lab: 'x', source: 'y', seed: 5 }, null], [{ lab: 'x', source: '', seed: 0 }, null],
    [null, object], [[], object], ['s', object], [7, object],
    [{}, lab], [{ lab: '' }, lab], [{ lab: 3, source: 's', z: 1 }, lab],
    [{ lab: 'a' }, source], [{ lab: 'a', source: 1 }, source],
    [{ lab: 'a', source: 's', seed: -1 }, seed], [{ lab: 'a', source: 's', seed: 1.5 }, seed], [{ lab: 'a', source: 's', seed: 2 ** 32 + 5 }, seed],
    [{ lab: 'a', source: 's', file: '/etc/passwd', x: 1 }, 'unknown field(s): file, x; send lab, source and optionally seed'],
    [JSON.parse('{"lab": "a", "source": "s", "__proto__": {"seed": 1}}'), 'unknown field(s): __proto__; send lab, source and optionally seed'],
  ]) assert.equal(gradeRequestProblem(body), problem, JSON.stringify(body));
});

test('bad requests get clear 4xx answers (fake pool)', LIMIT, async () => {
  await built();
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
    // The grader takes 32 bits: 2^32 + 5 would be graded as seed 5.
    ['seed past 32 bits', await post(url, { lab: 'deliver-once', source: 'x', seed: 2 ** 32 + 5 }), 400, /"seed", when given, must be a whole number from 0 to 4294967295/],
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

/**
 * 50 submissions at once from 10 client addresses (each address has a bounded share of
 * the queue); each must be graded (200) or refused with 429 + Retry-After.
 */
async function burst(url, n = 50) {
  const t0 = Date.now();
  const answers = await Promise.all(Array.from({ length: n }, (_, i) => post(url, { lab: 'deliver-once', source: i % 2 ? REFERENCE : NO_NX },
    undefined, { from: `127.0.0.${2 + (i % 10)}` })));
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
  await built();
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
    assert.equal(report.hidden.total, HIDDEN);
    assert.equal(report.status, 'fail');
    assert.equal(await page.locator('.hidden-tests li').count(), HIDDEN);
    assert.equal(await page.locator('.hidden-tests li[data-test="the claim uses nx and claim_ttl_s, and the done marker lives exactly DONE_TTL_S"]').getAttribute('data-status'), 'fail');
    assert.match(await page.locator('.summary').innerText(), /graded by the server/);
    assert.match(await page.locator('#status').innerText(), /Graded by the server/);
    // The reference through the API: every test, 90 XP.
    await page.evaluate((s) => window.deliveryLab.setCode(s), REFERENCE);
    const full = await page.evaluate(() => window.deliveryLab.submit());
    assert.equal(full.status, 'pass');
    assert.equal(full.total, LAB1_TESTS.length);
    assert.match(await page.locator('#xp-badge').innerText(), /90 XP earned/);
  } finally {
    await browser.close();
  }
}

test('the no-hidden page: Submit for grading shows the hidden results the server returns (fake pool)', LIMIT, async () => {
  await built();
  const { url } = await start({ grading: { pool: fakePool(), jobs: 1 } });
  await submitInPage(url);
});

test('the page says so when the grading server is busy or absent (fake pool)', LIMIT, async () => {
  await built();
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

test('real pool: the page submits to serve --grading and shows the hidden results', LIMIT, async () => {
  await built();
  usedRealPool = true;
  const { url } = await start({ grading: { jobs: 2 } });
  await submitInPage(url);
});

test('real pool: a burst of 50 concurrent submissions, each graded or 429', LIMIT, async () => {
  await built();
  usedRealPool = true;
  const { url, grading } = await start({ grading: { jobs: 2 } });
  const { graded, refused, ms } = await burst(url);
  console.log(`real pool, jobs 2: ${graded} graded, ${refused} refused with 429, in ${ms} ms`);
  assert.equal(graded + refused, 50);
  assert.ok(graded >= 6, `${graded} graded`);
  assert.equal(grading.stats().inFlight, 0);
  assert.equal((await post(url, { lab: 'deliver-once', source: REFERENCE })).json.status, 'pass');
});

// Issue 28: a submission that passes or fails each hidden test on one bit of its
// task key reads the keys out of the server's answers. The server draws each
// submission's hidden inputs from its secret and the submission (grader/hidden.mjs), so
// another submission reads other bits; the same file, the same ones; no answer
// carries the hidden seed. (The secret is a file here, so the outcome is fixed.)
const LEAKER = REFERENCE
  .replace('def deliver_once(task, provider, kv, policy):\n', 'def deliver_once(task, provider, kv, policy):\n    _leak(task)\n')
  .replace('def next_step(task, result, now, policy, rng):\n', 'def next_step(task, result, now, policy, rng):\n    _leak(task)\n')
  + '\ndef _leak(task):\n    if task.key != "order-1042:shipped" and sum(map(ord, task.key)) % 2:\n        raise ValueError("a bit")\n';
const hiddenBits = (line) => line.tests.filter((t) => t.kind === 'hidden').map((t) => (t.status === 'pass' ? 1 : 0)).join('');

test('real pool: each submission\'s hidden inputs are drawn from the server\'s secret, never shown', LIMIT, async () => {
  await built();
  usedRealPool = true;
  assert.equal(LEAKER.split('    _leak(task)\n').length, 3);
  const secretFile = path.join(ROOT, '..', `${path.basename(ROOT)}.secret`);
  fs.writeFileSync(secretFile, 'a course secret of 32 bytes or so');
  try {
    const { url } = await start({ grading: { jobs: 1 }, secretFile });
    const a = (await post(url, { lab: 'deliver-once', source: LEAKER })).json;
    const b = (await post(url, { lab: 'deliver-once', source: `${LEAKER}# another submission\n` })).json;
    const again = (await post(url, { lab: 'deliver-once', source: LEAKER })).json;
    assert.equal(a.tests.filter((t) => t.kind === 'hidden').length, HIDDEN);
    assert.notEqual(hiddenBits(a), hiddenBits(b));
    assert.equal(hiddenBits(again), hiddenBits(a));
    for (const line of [a, b]) {
      assert.equal(line.hidden_seed, undefined);
      assert.doesNotMatch(JSON.stringify(line), /hidden.seed/);
      // A learner's answer: a hidden test by name and status, never its message (the
      // staff's ./lab grade carries it: grade.test 'staff see why').
      assert.ok(line.tests.some((t) => t.kind === 'hidden' && t.status !== 'pass'), 'a hidden test failed');
      for (const t of line.tests.filter((x) => x.kind === 'hidden')) assert.deepEqual(Object.keys(t).sort(), ['kind', 'name', 'status'], JSON.stringify(t));
      assert.doesNotMatch(JSON.stringify(line), /one bit of the task key/);
    }
    // aggregate: only the count of hidden tests passed reaches the learner
    const { url: agg } = await start({ grading: { jobs: 1 }, secretFile, hiddenStatuses: 'aggregate' });
    const c = (await post(agg, { lab: 'deliver-once', source: LEAKER })).json;
    const counted = c.tests.filter((t) => t.kind === 'hidden');
    assert.equal(counted.length, 1);
    assert.match(counted[0].name, new RegExp(`^hidden tests: ${hiddenBits(a).split('').filter((x) => x === '1').length} of ${HIDDEN} passed$`));
  } finally {
    fs.rmSync(secretFile, { force: true });
  }
});

// ---------------------------------------------------------------------------
// Whom the server serves, and how it holds up. No build: PLAIN and a fake pool that
// honours grader/pool.mjs's contract exactly: grade({lab, source, seed, format, signal})
// → the json line (an object); when `signal` aborts, a waiting job leaves the queue and a running
// one is stopped at once, and the promise rejects with an Error named AbortError.
// Here a job runs until release() (or `ms`), `jobs` at a time; `log` says what
// became of each ('start', 'done', 'left-queue', 'killed').

function abortablePool({ jobs = 1, ms = null } = {}) {
  const waiting = [];
  const running = new Set();
  const pool = {
    ready: Promise.resolve(),
    calls: [],
    log: [],
    grade(args) {
      pool.calls.push(args);
      const { lab, source, seed, signal } = args;
      return new Promise((resolve, reject) => {
        const aborted = () => Object.assign(new Error('the client went away'), { name: 'AbortError' });
        if (signal?.aborted) {
          pool.log.push(['left-queue', source]);
          return reject(aborted());
        }
        const job = { source };
        const onAbort = () => {
          const i = waiting.indexOf(job);
          if (i >= 0) { waiting.splice(i, 1); pool.log.push(['left-queue', source]); }
          if (running.delete(job)) { clearTimeout(job.timer); pool.log.push(['killed', source]); }
          reject(aborted());
          pump();
        };
        job.finish = () => {
          running.delete(job);
          signal?.removeEventListener('abort', onAbort);
          pool.log.push(['done', source]);
          resolve({ file: null, lab, status: 'pass', source, seed: seed ?? 1 });
          pump();
        };
        signal?.addEventListener('abort', onAbort, { once: true });
        waiting.push(job);
        pump();
      });
    },
    /** Finishes the jobs running now. */
    release() { for (const job of [...running]) job.finish(); },
    queued: () => waiting.length + running.size,
    close() {},
  };
  function pump() {
    while (running.size < jobs && waiting.length) {
      const job = waiting.shift();
      running.add(job);
      pool.log.push(['start', job.source]);
      if (ms !== null) job.timer = setTimeout(job.finish, ms);
    }
  }
  return pool;
}

async function until(what, fn, ms = 2000) {
  const t0 = Date.now();
  while (!fn()) {
    if (Date.now() - t0 > ms) throw new Error(`not within ${ms} ms: ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
  return Date.now() - t0;
}

/** A request with the given headers (Host included); resolves to {status, headers, text, json}. */
function request(url, { method = 'GET', path: p = '/', headers = {}, body } = {}) {
  return new Promise((resolve, reject) => {
    const req = http.request(new URL(p, url), { method, headers: { ...headers, ...(body ? { 'Content-Length': Buffer.byteLength(body) } : {}) }, agent: false }, (res) => {
      collect(res, resolve);
    });
    req.on('error', reject);
    req.end(body);
  });
}

/**
 * Raw bytes over a socket (a number is a pause in ms). Resolves to "<statuses>|<end>":
 * the status of each complete response in order, then closed (by the server) or open
 * (a kept-alive response came and we hung up), or hung after `waitMs`.
 */
function raw(url, steps, { waitMs = 4000, keepReading = false } = {}) {
  return new Promise((resolve) => {
    const sock = net.connect(Number(new URL(url).port), '127.0.0.1');
    let buf = '';
    const statuses = [];
    let done = false;
    const finish = (end) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      sock.destroy();
      resolve(`${statuses.join(',')}|${end}`);
    };
    const timer = setTimeout(() => finish('hung'), waitMs);
    sock.on('data', (d) => {
      buf += d.toString('latin1');
      for (;;) {
        const end = buf.indexOf('\r\n\r\n');
        if (end < 0) return;
        const head = buf.slice(0, end);
        // Node's own refusals (400 without Host, 417) have an empty chunked body.
        const length = /\r\ntransfer-encoding: *chunked/i.test(head) ? buf.indexOf('0\r\n\r\n', end + 4) + 5
          : end + 4 + Number(/\r\ncontent-length: *(\d+)/i.exec(head)?.[1] ?? 0);
        if (length < end + 4 || buf.length < length) return;
        buf = buf.slice(length);
        statuses.push(Number(head.split(' ')[1]));
        if (!/\r\nconnection: *close/i.test(head) && !keepReading) return finish('open');
      }
    });
    sock.on('end', () => finish('closed'));
    sock.on('error', (e) => finish(e.code));
    (async () => {
      for (const s of steps) {
        if (done) return;
        if (typeof s === 'number') await new Promise((r) => setTimeout(r, s));
        else sock.write(s);
      }
    })();
  });
}

const GOOD = (source = 'def deliver_once(task, provider, kv, policy):\n    pass\n') => ({ lab: 'deliver-once', source });

test('the server answers only to its Host names (421 otherwise), pages and POST /grade alike', LIMIT, async () => {
  const pool = abortablePool({ ms: 0 });
  const { url, grading } = await start({ root: PLAIN, hosts: ['lab.example'], grading: { pool, labs: ['deliver-once'] } });
  const port = new URL(url).port;
  for (const host of [`127.0.0.1:${port}`, `localhost:${port}`, `[::1]:${port}`, '127.0.0.1', 'localhost', `LOCALHOST:${port}`, 'lab.example', `lab.example:${port}`]) {
    assert.equal((await request(url, { headers: { Host: host } })).status, 200, host);
  }
  // DNS rebinding: a page on evil.example, its name pointed at 127.0.0.1, is
  // same-origin with what it loads from there; it gets nothing, the page included.
  for (const host of ['evil.example', `evil.example:${port}`, `127.0.0.1:${Number(port) + 1}`, 'lab.example:1', `localhost.evil.example:${port}`, `127.0.0.2:${port}`]) {
    for (const p of ['/', '/index.html', '/nothing']) {
      const res = await request(url, { path: p, headers: { Host: host } });
      assert.equal(res.status, 421, `${host} ${p}`);
      assert.equal(res.headers.connection, 'close');
    }
    const posted = await request(url, { method: 'POST', path: '/grade', headers: { Host: host, Origin: `http://${host}`, 'Content-Type': 'application/json' }, body: JSON.stringify(GOOD()) });
    assert.equal(posted.status, 421, `${host} POST /grade`);
  }
  assert.equal(pool.calls.length, 0, 'a foreign Host reached the grader');
  // No Host: HTTP/1.1 requires one (node answers 400); HTTP/1.0 without one is not ours.
  assert.equal(await raw(url, ['GET / HTTP/1.1\r\n\r\n']), '400|closed');
  assert.equal(await raw(url, ['GET / HTTP/1.0\r\n\r\n']), '421|closed');
  assert.equal(await raw(url, ['GET / HTTP/1.1\r\nHost: \r\n\r\n']), '421|closed');
  assert.equal((await post(url, GOOD())).status, 200);
  assert.equal(grading.stats().graded, 1);
});

test('without a lab list in the root (no build.json), --grading takes the labs of the grader it loaded: the grader is loaded once', LIMIT, async () => {
  // A load of the grader reads its WASM, once per folder and process (node_host.mjs
  // loadGrader); this file loaded www/pkg's already (LAB1_TESTS), so a start
  // that loads it again reads nothing (a second folder, or an unshared load, would).
  const wasm = path.join(WWW, 'pkg', 'delivery_lab_bg.wasm');
  const readFileSync = fs.readFileSync;
  let reads = 0;
  fs.readFileSync = function counted(file, ...rest) {
    if (typeof file === 'string' && path.resolve(file) === wasm) reads += 1;
    return readFileSync.call(this, file, ...rest);
  };
  let started;
  try {
    started = await start({ root: PLAIN, grading: { pool: abortablePool({ ms: 0 }) } });
  } finally {
    fs.readFileSync = readFileSync;
  }
  assert.equal(reads, 0, 'the grader\'s WASM was read again');
  const ids = JSON.parse(new (await loadGrader()).Grader().labs()).map((l) => l.id);
  const unknown = await post(started.url, { lab: 'no-such-lab', source: 'x' });
  assert.equal(unknown.status, 404);
  assert.equal(unknown.json.error, `unknown lab "no-such-lab"; this server grades: ${ids.join(', ')}`);
  assert.equal((await post(started.url, GOOD())).status, 200);
});

test('POST /grade only without an Origin, from its own origin or an --allow-origin one (403 otherwise); CORS for those', LIMIT, async () => {
  const pool = abortablePool({ ms: 0 });
  const { url } = await start({ root: PLAIN, allowOrigins: ['https://course.example'], grading: { pool, labs: ['deliver-once'] } });
  const port = new URL(url).port;
  const json = { 'Content-Type': 'application/json' };
  const grade = (origin, host) => post(url, GOOD(`# from ${origin}`), { ...json, ...(origin ? { Origin: origin } : {}), ...(host ? { Host: host } : {}) });
  // curl and the CLI send no Origin; the page posts from its own origin.
  for (const [origin, host] of [[null], [`http://127.0.0.1:${port}`], [`http://localhost:${port}`, `localhost:${port}`]]) {
    const res = await grade(origin, host);
    assert.equal(res.status, 200, `${origin}: ${res.text}`);
    assert.equal(res.headers['access-control-allow-origin'], undefined, `${origin}`);
  }
  const course = await grade('https://course.example');
  assert.equal(course.status, 200);
  assert.equal(course.headers['access-control-allow-origin'], 'https://course.example');
  assert.equal(course.headers['access-control-expose-headers'], 'Retry-After');
  assert.match(course.headers.vary, /Origin/);
  const before = pool.calls.length;
  for (const origin of ['http://evil.example', 'null', `http://localhost:${port}`, 'https://course.example:8443', 'http://course.example', 'https://course.example.evil.example']) {
    const res = await grade(origin);
    assert.equal(res.status, 403, origin);
    assert.match(res.json.error, /only for its own pages and the origins given with --allow-origin/);
    assert.equal(res.headers['access-control-allow-origin'], undefined, origin);
  }
  assert.equal(pool.calls.length, before, 'a foreign origin reached the grader');
  // The browser's preflight for a cross-origin JSON POST.
  const preflight = (origin) => request(url, { method: 'OPTIONS', path: '/grade', headers: { Origin: origin, 'Access-Control-Request-Method': 'POST', 'Access-Control-Request-Headers': 'content-type' } });
  const ok = await preflight('https://course.example');
  assert.equal(ok.status, 204);
  assert.equal(ok.headers['access-control-allow-origin'], 'https://course.example');
  assert.equal(ok.headers['access-control-allow-methods'], 'POST');
  assert.equal(ok.headers['access-control-allow-headers'], 'Content-Type');
  assert.equal(ok.headers['access-control-max-age'], '600');
  const evil = await preflight('http://evil.example');
  assert.equal(evil.status, 403);
  assert.equal(evil.headers['access-control-allow-origin'], undefined);
  // Pages are for embedding anywhere: an Origin does not matter there.
  assert.equal((await request(url, { headers: { Origin: 'http://evil.example' } })).status, 200);
});

test('a client that disconnects frees its slots and its jobs at once (queued ones leave, the running one is killed)', LIMIT, async () => {
  const pool = abortablePool({ jobs: 1 });
  const { url, grading } = await start({ root: PLAIN, grading: { pool, jobs: 1, maxWaiting: 2, perClient: 3, labs: ['deliver-once'] } });
  // The bug: three slow submissions from one client, which then goes away.
  const gone = [];
  const answers = ['A1', 'A2', 'A3'].map((s) => post(url, GOOD(s), undefined, { from: '127.0.0.2', onRequest: (r) => gone.push(r) }).catch((e) => e));
  await until('one of them grading, two waiting', () => pool.queued() === 3);
  assert.equal(pool.log.length, 1);
  const [[, first]] = pool.log; // the one that arrived first runs
  for (const c of pool.calls) {
    assert.ok(c.signal instanceof AbortSignal);
    assert.equal(c.format, 'json');
  }
  // Full: 1 grading, 2 waiting.
  const full = await post(url, GOOD('B0'), undefined, { from: '127.0.0.3' });
  assert.equal(full.status, 429);
  for (const r of gone) r.destroy();
  const ms = await until('every slot free', () => pool.queued() === 0 && grading.stats().inFlight === 0, 1000);
  console.log(`three submissions freed ${ms} ms after their client left`);
  assert.deepEqual(pool.log.slice(1).sort(), ['A1', 'A2', 'A3'].map((s) => [s === first ? 'killed' : 'left-queue', s]).sort());
  assert.ok(pool.calls.every((c) => c.signal.aborted));
  for (const a of await Promise.all(answers)) assert.ok(a instanceof Error, 'a client that left got an answer');
  const stats = grading.stats();
  assert.equal(stats.aborted, 3);
  assert.equal(stats.clients, 0);
  assert.equal(stats.graded, 0);
  // The next learner gets in, and is graded.
  const next = post(url, GOOD('B1'), undefined, { from: '127.0.0.3' });
  await until('B1 grading', () => pool.queued() === 1);
  pool.release();
  const res = await next;
  assert.equal(res.status, 200);
  assert.equal(res.json.source, 'B1');
  assert.equal(grading.stats().inFlight, 0);
});

test('each client address holds a bounded share of the queue (429 past it); other addresses still get in', LIMIT, async () => {
  const pool = abortablePool({ jobs: 1 });
  // --jobs 1: 1 grading + 2 waiting, a quarter of that (at least 1) per address.
  const { url, grading } = await start({ root: PLAIN, grading: { pool, jobs: 1, labs: ['deliver-once'] } });
  assert.equal(grading.stats().perClient, 1);
  const a1 = post(url, GOOD('A1'), undefined, { from: '127.0.0.2' });
  await until('A1 in', () => pool.queued() === 1);
  const a2 = await post(url, GOOD('A2'), undefined, { from: '127.0.0.2' });
  assert.equal(a2.status, 429);
  assert.equal(a2.headers['retry-after'], '2');
  assert.match(a2.json.error, /too many submissions at once from this address \(at most 1 waiting or grading\); try again in 2 s/);
  const b1 = post(url, GOOD('B1'), undefined, { from: '127.0.0.3' });
  const c1 = post(url, GOOD('C1'), undefined, { from: '127.0.0.4' });
  await until('B1 and C1 in', () => pool.queued() === 3);
  const d1 = await post(url, GOOD('D1'), undefined, { from: '127.0.0.5' });
  assert.equal(d1.status, 429);
  assert.match(d1.json.error, /too many submissions at once \(1 grading, 2 waiting\); try again in 2 s/);
  for (let i = 0; i < 3; i++) {
    await until(`job ${i} running`, () => pool.log.filter(([e]) => e === 'start').length === i + 1);
    pool.release();
  }
  assert.deepEqual((await Promise.all([a1, b1, c1])).map((r) => [r.status, r.json.source]), [[200, 'A1'], [200, 'B1'], [200, 'C1']]);
  assert.equal(grading.stats().clients, 0);
  // A's turn again, now that its submission is done.
  const again = post(url, GOOD('A3'), undefined, { from: '127.0.0.2' });
  await until('A3 in', () => pool.queued() === 1);
  pool.release();
  assert.equal((await again).status, 200);
  assert.equal(grading.stats().busy, 2);
  // The share by --jobs (3×jobs places), and set outright.
  for (const [opts, share] of [[{ jobs: 2 }, 2], [{ jobs: 4 }, 3], [{ jobs: 8 }, 6], [{ jobs: 1, maxWaiting: -1 }, 1], [{ jobs: 4, perClient: 5 }, 5]]) {
    assert.equal(createGradeHandler({ pool, ...opts }).stats().perClient, share, JSON.stringify(opts));
  }
});

test('slow headers, slow bodies and silent connections time out (408); malformed requests get 4xx; the server stays up', LIMIT, async () => {
  const pool = abortablePool({ ms: 0 });
  const { url, grading } = await start({
    root: PLAIN, headersTimeoutMs: 300, requestTimeoutMs: 600, grading: { pool, labs: ['deliver-once'], bodyTimeoutMs: 300 },
  });
  const H = `Host: ${new URL(url).host}\r\n`;
  const t0 = Date.now();
  const slow = await Promise.all([
    raw(url, []), // says nothing
    raw(url, ['GET / HTTP/1.1\r\n', ...Array.from({ length: 50 }, (_, i) => [50, `X-Slow-${i}: 1\r\n`]).flat()]), // slowloris
    raw(url, [`POST /grade HTTP/1.1\r\n${H}Content-Type: application/json\r\nContent-Length: 500\r\n\r\n`, ...Array(40).fill([50, '{"a"']).flat()]),
    raw(url, [`POST /grade HTTP/1.1\r\n${H}Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n`, ...Array(40).fill([50, '1\r\n{\r\n']).flat()]),
    // The page is answered at once; the body that never comes then times the connection out.
    raw(url, [`GET / HTTP/1.1\r\n${H}Content-Length: 1000\r\n\r\nab`], { keepReading: true }),
  ]);
  assert.deepEqual(slow, ['408|closed', '408|closed', '408|closed', '408|closed', '200,408|closed']);
  assert.ok(Date.now() - t0 < 3000, `${Date.now() - t0} ms`);
  assert.equal(pool.calls.length, 0);
  assert.equal(grading.stats().refused, 2); // the two /grade bodies, answered {error} by the handler
  const cases = [
    ['NUL, encoded', `GET /%00 HTTP/1.1\r\n${H}\r\n`, '400|open'],
    ['NUL, raw', `GET /a\0b HTTP/1.1\r\n${H}\r\n`, '400|closed'],
    ['a lone %', `GET /% HTTP/1.1\r\n${H}\r\n`, '400|open'],
    ['%zz', `GET /%zz HTTP/1.1\r\n${H}\r\n`, '400|open'],
    ['overlong UTF-8', `GET /%c0%af HTTP/1.1\r\n${H}\r\n`, '400|open'],
    ['traversal', `GET /..%2f..%2f..%2fetc%2fpasswd HTTP/1.1\r\n${H}\r\n`, '404|open'],
    ['a header over 16 KB', `GET / HTTP/1.1\r\n${H}X-Big: ${'b'.repeat(17 * 1024)}\r\n\r\n`, '431|closed'],
    ['10k headers', `GET / HTTP/1.1\r\n${H}${'X-R: v\r\n'.repeat(10_000)}\r\n`, '431|closed'],
    ['two Content-Lengths', `POST /grade HTTP/1.1\r\n${H}Content-Length: 1\r\nContent-Length: 2\r\n\r\nab`, '400|closed'],
    ['a negative Content-Length', `POST /grade HTTP/1.1\r\n${H}Content-Length: -1\r\n\r\n`, '400|closed'],
    ['a bad chunk size', `POST /grade HTTP/1.1\r\n${H}Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n`, '400|closed'],
    ['a declared body over 64 KB', `POST /grade HTTP/1.1\r\n${H}Content-Type: application/json\r\nContent-Length: 99999999\r\n\r\n{`, '413|closed'],
    ['HTTP/0.9', 'GET /\r\n\r\n', '421|closed'],
    ['an invalid method', `FOO / HTTP/1.1\r\n${H}\r\n`, '400|closed'],
    ['CONNECT', `CONNECT 127.0.0.1:22 HTTP/1.1\r\n${H}\r\n`, '|closed'],
    ['garbage after a good request', `GET / HTTP/1.1\r\n${H}\r\n\x00\x01\x02garbage`, '200|closed'],
  ];
  for (const [label, bytes, want] of cases) {
    assert.equal(await raw(url, [bytes], { keepReading: label.startsWith('garbage') }), want, label);
  }
  // Up: the page, and a good submission graded.
  assert.equal((await request(url)).status, 200);
  const res = await post(url, GOOD());
  assert.equal(res.status, 200);
  assert.equal(res.json.status, 'pass');
  assert.equal(grading.stats().inFlight, 0);
});
