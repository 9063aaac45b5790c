// End to end: the built page (dist/) in Debian's Chromium, served by serve.mjs.
// Run: node --test page/test/e2e.test.mjs   (builds dist/ first; needs www/pkg and /usr/bin/chromium)
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { chromium } from 'playwright-core';
import { LAUNCH, buildPage, startServer } from '../browser.mjs';

const repo = new URL('../../../', import.meta.url);
const REFERENCE = fs.readFileSync(new URL('src/deliver_once/reference.py', repo), 'utf8');
const STARTER = fs.readFileSync(new URL('src/deliver_once/starter.py', repo), 'utf8');
const SCREENSHOT = '/tmp/delivery-lab-results.png';
// The tests build and serve their own copy, so they never race a build of www/dist.
const ROOT = fs.mkdtempSync(path.join(os.tmpdir(), 'delivery-lab-e2e-'));
// No test may hang the suite: each fails after this long.
const LIMIT = { timeout: 90_000 };
function mutate(from, to) {
  assert.ok(REFERENCE.includes(from), `mutation anchor not found: ${from}`);
  return REFERENCE.replace(from, to);
}

const NO_NX = mutate('ttl=policy.claim_ttl_s, nx=True)', 'ttl=policy.claim_ttl_s)');
const NO_RETRY_AFTER = mutate(
  '    if result.retry_after_s is not None:\n        # The provider said when (0 counts).\n        delay = result.retry_after_s\n    else:',
  '    if True:',
);
const ENDLESS = mutate('    key = "sent:" + task.key\n', '    while True:\n        pass\n');
const SWALLOWS = mutate('    key = "sent:" + task.key\n',
  '    while True:\n        try:\n            while True:\n                pass\n        except KeyboardInterrupt:\n            pass\n');
const SYNTAX = 'DONE_TTL_S = 604800\n\ndef deliver_once(task, provider, kv, policy):\n    return "sent"\n\ndef next_step(task, result, now, policy, rng)\n    return ("retry", 1.0)\n';

let browser;
let server;
let context;
let page;
const requests = []; // every URL any page, worker or service worker asked for

function watch(ctx) {
  ctx.on('request', (r) => requests.push({ url: r.url(), origin: server.url }));
}

async function openLab(ctx, url) {
  const p = await ctx.newPage();
  p.on('pageerror', (e) => console.error('page error:', e.message));
  await p.goto(url);
  await p.waitForFunction(() => window.deliveryLab);
  await p.evaluate(() => window.deliveryLab.loaded);
  return p;
}

/** Puts code in the editor and runs it through the page's API. */
async function run(p, source) {
  await p.evaluate((s) => window.deliveryLab.setCode(s), source);
  return p.evaluate(() => window.deliveryLab.run());
}

const statusOf = (p, name) => p.locator(`[data-test="${name.replace(/"/g, '\\"')}"]`).getAttribute('data-status');

before(async () => {
  // www/pkg as it is (npm test builds it first): no cargo run inside the test.
  buildPage(ROOT);
  server = await startServer(ROOT);
  browser = await chromium.launch(LAUNCH);
  context = await browser.newContext({ viewport: { width: 1400, height: 1000 } });
  watch(context);
  page = await openLab(context, server.url);
  await page.evaluate(() => window.deliveryLab.ready);
});

after(async () => {
  await browser?.close();
  await server?.stop();
  fs.rmSync(ROOT, { recursive: true, force: true });
});

test('the page is cross-origin isolated and says what Python costs', LIMIT, async () => {
  assert.equal(await page.evaluate(() => crossOriginIsolated), true);
  const instructions = await page.locator('#instructions').innerText();
  assert.match(instructions, /Deliver once, retry right/);
  assert.match(instructions, /next_step/);
  assert.match(await page.locator('#status').innerText(), /8 s/);
  assert.equal(await page.evaluate(() => window.deliveryLab.getCode()), STARTER);
});

test('the starter code fails with readable messages', LIMIT, async () => {
  const report = await run(page, STARTER);
  assert.equal(report.status, 'fail');
  const examples = page.locator('article.test.example');
  assert.equal(await examples.count(), report.examples.total);
  for (let i = 0; i < await examples.count(); i++) {
    const text = await examples.nth(i).innerText();
    assert.match(text, /NotImplementedError/);
    assert.match(text, /File "solution\.py", line \d+/);
  }
  assert.match(await page.locator('.summary').innerText(), /examples 0\/3/);
});

test('a correct solution passes every test and earns the XP', LIMIT, async () => {
  const report = await run(page, REFERENCE);
  assert.equal(report.status, 'pass');
  assert.equal(report.xp, 90);
  const summary = await page.locator('.summary').innerText();
  assert.match(summary, new RegExp(`All ${report.total} tests pass`));
  assert.match(summary, /\+90 XP/);
  assert.match(await page.locator('#xp-badge').innerText(), /90 XP earned/);
  assert.equal(await page.evaluate(() => JSON.parse(localStorage.getItem('delivery-lab:deliver-once:xp')).xp), 90);
  // The timeline is drawn from the report's trace, coloured by kind.
  assert.ok(await page.locator('.event.kind-send').count() > 0);
  // After a full pass the reference can be shown beside the learner's code.
  await page.click('#compare');
  await page.locator('#compare-view').waitFor({ state: 'visible' });
  assert.match(await page.locator('#view-ref').innerText(), /def next_step/);
  assert.match(await page.locator('#view-mine').innerText(), /def deliver_once/);
  await page.click('#compare-close');
  await page.locator('#compare-view').waitFor({ state: 'hidden' });
});

test('a mutant that claims without nx fails the claim tests', LIMIT, async () => {
  const report = await run(page, NO_NX);
  assert.equal(report.status, 'fail');
  assert.equal(await statusOf(page, 'the claim uses nx and claim_ttl_s, and the done marker lives exactly DONE_TTL_S'), 'fail');
  const first = page.locator('[data-test="a fresh task is claimed, sent and marked done"]');
  assert.equal(await first.getAttribute('data-status'), 'fail');
  const text = await first.innerText();
  assert.match(text, /claim/);
  assert.match(text, /expected\s+kv\.set\('sent:order-1042:shipped', 'sending', ttl=30\.0, nx=True\)/);
  assert.match(text, /actual\s+kv\.set\('sent:order-1042:shipped', 'sending', ttl=30\.0, nx=False\)/);
  await page.locator('.results').screenshot({ path: SCREENSHOT });
});

test('a mutant that ignores Retry-After fails the Retry-After test', LIMIT, async () => {
  const report = await run(page, NO_RETRY_AFTER);
  assert.equal(report.status, 'fail');
  assert.equal(await statusOf(page, 'Retry-After is honoured without a draw, 0 included'), 'fail');
  assert.equal(await statusOf(page, 'a fresh task is claimed, sent and marked done'), 'pass');
});

test('a syntax error shows its line', LIMIT, async () => {
  const report = await run(page, SYNTAX);
  assert.equal(report.status, 'error');
  const message = await page.locator('.results .message').first().innerText();
  assert.match(message, /line 6/);
  assert.match(message, /SyntaxError/);
  await page.getByRole('button', { name: 'Go to line 6' }).first().click();
  // The editor selects the line the message points at.
  const selected = await page.evaluate(() => window.getSelection().toString());
  assert.match(selected, /def next_step\(task, result, now, policy, rng\)/);
});

for (const [label, source] of [['an endless loop', ENDLESS], ['a loop that swallows KeyboardInterrupt', SWALLOWS]]) {
  test(`${label} is stopped within 10 s; the page stays responsive and the next run passes`, LIMIT, async () => {
    await page.evaluate((s) => window.deliveryLab.setCode(s), source);
    const t0 = Date.now();
    const pending = page.evaluate(() => window.deliveryLab.run());
    // While Python spins, the page still answers at once.
    await page.waitForTimeout(1500);
    const p0 = Date.now();
    await page.evaluate(() => document.querySelector('#run').disabled);
    assert.ok(Date.now() - p0 < 1000, 'the page did not answer during the run');
    const report = await pending;
    const took = Date.now() - t0;
    assert.ok(took < 10_000, `stopped after ${took} ms`);
    assert.ok(report.tests.some((t) => t.status === 'timeout'));
    assert.match(await page.locator('.results').innerText(), /8 s/);
    assert.equal(await page.evaluate(() => window.deliveryLab.getCode()), source, 'the code was not kept');
    assert.equal((await run(page, REFERENCE)).status, 'pass');
  });
}

test('the code is saved as typed and restored on reload', LIMIT, async () => {
  await page.locator('#editor .cm-content').click();
  await page.keyboard.press('Control+End');
  await page.keyboard.type('\n# typed by a person');
  await page.reload();
  await page.waitForFunction(() => window.deliveryLab);
  await page.evaluate(() => window.deliveryLab.loaded);
  assert.ok((await page.evaluate(() => window.deliveryLab.getCode())).endsWith('# typed by a person'));
});

test('after one visit the page reloads and grades with no network', LIMIT, async () => {
  // Its own server and context: a clean origin, and a server we can switch off.
  const own = await startServer(ROOT);
  const ctx = await browser.newContext();
  ctx.on('request', (r) => requests.push({ url: r.url(), origin: own.url }));
  try {
    const p = await openLab(ctx, own.url);
    assert.equal((await run(p, REFERENCE)).status, 'pass');
    await p.waitForFunction(() => document.querySelector('#offline-badge').textContent.startsWith('Ready offline'), null, { timeout: 30_000 });
    assert.match(await p.locator('#offline-badge').innerText(), /Ready offline · [\d.]+ MB stored/);
    await own.stop();
    await ctx.setOffline(true);
    await p.reload();
    await p.waitForFunction(() => window.deliveryLab);
    await p.evaluate(() => window.deliveryLab.ready);
    await p.waitForFunction(() => document.querySelector('#offline-badge').textContent.startsWith('Ready offline'));
    const report = await run(p, NO_NX);
    assert.equal(report.status, 'fail');
    assert.equal((await run(p, REFERENCE)).status, 'pass');
  } finally {
    await ctx.close();
    await own.stop();
  }
});

test('every request goes to the page\'s own origin', LIMIT, () => {
  assert.ok(requests.length > 10);
  const foreign = requests.filter(({ url, origin }) => !url.startsWith(origin) && !/^(data|blob):/.test(url));
  assert.deepEqual(foreign.map((r) => r.url), []);
});
