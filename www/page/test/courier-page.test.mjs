// The courier lab in the page (dist/ in Debian's Chromium, ?lab=courier): the
// reference passes every test including the chaos and fairness runs, within the
// lab's 20 s limit (not stopped: a run stops when it makes no progress, runner.js); the
// starter fails readably, and the system runs' tables show.
// Run: node --test page/test/courier-page.test.mjs   (builds dist/ first; needs www/pkg)
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { chromium } from 'playwright-core';
import { LAUNCH, buildPage, startServer } from '../browser.mjs';

const repo = new URL('../../../', import.meta.url);
const REFERENCE = fs.readFileSync(new URL('src/courier/reference.py', repo), 'utf8');
const STARTER = fs.readFileSync(new URL('src/courier/starter.py', repo), 'utf8');
const ROOT = fs.mkdtempSync(path.join(os.tmpdir(), 'delivery-lab-courier-'));
const LIMIT = { timeout: 120_000 };
let browser;
let server;
let page;

before(async () => {
  buildPage(ROOT);
  server = await startServer(ROOT);
  browser = await chromium.launch(LAUNCH);
  const context = await browser.newContext({ viewport: { width: 1400, height: 1000 } });
  page = await context.newPage();
  page.on('pageerror', (e) => console.error('page error:', e.message));
  await page.goto(new URL('?lab=courier', server.url).href);
  await page.waitForFunction(() => window.deliveryLab);
  await page.evaluate(() => window.deliveryLab.ready);
});

after(async () => {
  await browser?.close();
  await server?.stop();
  fs.rmSync(ROOT, { recursive: true, force: true });
});

async function run(source) {
  await page.evaluate((s) => window.deliveryLab.setCode(s), source);
  return page.evaluate(() => window.deliveryLab.run());
}

test('the courier lab opens with its text, its starter and its 20 s limit', LIMIT, async () => {
  assert.match(await page.locator('#instructions').innerText(), /courier/i);
  assert.match(await page.locator('#status').innerText(), /20 s/);
  assert.equal(await page.evaluate(() => window.deliveryLab.getCode()), STARTER);
});

test('the reference passes every test in the browser, chaos and fairness included', LIMIT, async () => {
  const report = await run(REFERENCE);
  const failed = report.tests.filter((t) => t.status !== 'pass').map((t) => `${t.name}: ${t.message}`);
  assert.deepEqual(failed, []);
  const { ms, stopped } = await page.evaluate(() => window.deliveryLab.lastRun);
  console.log(`courier full run in the page's worker: ${ms} ms`);
  // Not a race with the clock: the page stops a run that makes no progress, and a
  // loaded machine's slow run that does is not stopped (page/runner.js; measured here:
  // 4.7 s idle, 17.8 s beside a real run and its tests).
  assert.equal(stopped, null, `stopped after ${ms} ms`);
  const chaos = page.locator('[data-test^="chaos run"]');
  assert.equal(await chaos.getAttribute('data-status'), 'pass');
  // Pictures: the chaos rows as a table, the fairness run as bars with the limit line.
  assert.equal(await chaos.locator('table.figure-rows tbody tr.ok').count(), 7);
  assert.equal(await chaos.locator('table.figure-rows tbody tr.bad').count(), 0);
  const fairness = page.locator('[data-test^="fairness run"]');
  assert.equal(await fairness.locator('svg[role="img"] rect.bar.yours.within').count(), 3);
  assert.equal(await fairness.locator('svg rect.bar.other').count(), 3);
  assert.equal(await fairness.locator('svg line.limit').count(), 1);
  assert.match(await fairness.locator('svg desc').textContent(), /every store equal: your claim 1\.\d\dx \(\d+ ms\), FIFO \d\.\d\dx/);
  // FIFO is over the limit in a load: the picture shows it past the line.
  const fifoRight = await fairness.locator('svg rect.bar.other').evaluateAll((rs) => Math.max(...rs.map((r) => Number(r.getAttribute('x')) + Number(r.getAttribute('width')))));
  const limitX = Number(await fairness.locator('svg line.limit').getAttribute('x1'));
  assert.ok(fifoRight > limitX, `FIFO's longest bar ends at ${fifoRight}, the limit is at ${limitX}`);
  await page.screenshot({ path: '/tmp/delivery-lab-courier.png', fullPage: true });
});

test('the starter fails, and the chaos run shows its rows and a failing action', LIMIT, async () => {
  const report = await run(STARTER);
  assert.equal(report.status, 'fail');
  const chaos = report.tests.find((t) => t.name.startsWith('chaos run'));
  assert.equal(chaos.status, 'fail');
  assert.match(chaos.message, /actions with exactly one message sent/);
  const text = await page.locator('[data-test^="chaos run"]').innerText();
  assert.match(text, /must be 0/);
  // The rows the starter breaks are marked in the table; the text is open below it.
  assert.ok(await page.locator('[data-test^="chaos run"] table.figure-rows tbody tr.bad').count() > 0);
  assert.equal(await page.locator('[data-test^="chaos run"] details.as-text').getAttribute('open'), '');
  // A unit test names its rule by id and text, where it broke, and what went wrong.
  const claim = page.locator('[data-test="claim serves the store that waited longest"]');
  assert.equal(await claim.locator('.rule-id').innerText(), 'fair-claim');
  assert.match(await claim.locator('.rule').innerText(), /Fair claim: among stores/);
  assert.match(await claim.locator('.where').innerText(), /^Where it broke: After `claim\(db, "w1", 10000, cfg\)`\.$/);
  assert.match(await claim.locator('.message pre').innerText(), /^- /);
  await page.locator('[data-test^="chaos run"]').screenshot({ path: '/tmp/delivery-lab-courier-chaos.png' });
  await page.locator('[data-test^="fairness run"]').screenshot({ path: '/tmp/delivery-lab-courier-fairness.png' });
});

test('an endless loop in a piece is stopped at the 20 s limit, and the next run passes', LIMIT, async () => {
  const endless = REFERENCE.replace('def heartbeat(db, action_id, worker, epoch, now_ms, cfg):\n',
    'def heartbeat(db, action_id, worker, epoch, now_ms, cfg):\n    while True:\n        pass\n');
  assert.notEqual(endless, REFERENCE);
  const t0 = Date.now();
  const report = await run(endless);
  const s = (Date.now() - t0) / 1000;
  assert.ok(s < 30, `stopped after ${s} s`);
  assert.ok(report.tests.some((t) => t.status === 'timeout'), report.tests.map((t) => t.status).join());
  assert.equal((await run(REFERENCE)).status, 'pass');
});
