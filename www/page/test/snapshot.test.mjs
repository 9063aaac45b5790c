// The worker's memory snapshot (page/snapshot.js) in Chromium, both labs, one
// profile (one origin, so both labs' snapshots share the cache): the first visit
// boots Python and stores a snapshot, the next restores from it and grades
// identically, and a snapshot that is damaged, another lab's or stale is not
// restored: the page boots instead, still works, and stores a good one.
// Run: node --test page/test/snapshot.test.mjs   (builds its own copy of dist/ from www/pkg)
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { chromium } from 'playwright-core';
import { LAUNCH, buildPage, startServer } from '../browser.mjs';

const repo = new URL('../../../', import.meta.url);
const read = (f) => fs.readFileSync(new URL(f, repo), 'utf8');
const LABS = {
  'deliver-once': { query: '', reference: read('src/deliver_once/reference.py'), starter: read('src/deliver_once/starter.py') },
  courier: { query: '?lab=courier', reference: read('src/courier/reference.py'), starter: read('src/courier/starter.py') },
};
// Remembers, in the interpreter, that a run happened: a snapshot that held a
// learner's state would show "leak=set" on its first run.
const LEAK = `import sys
LEAK = getattr(sys, "_delivery_lab_leak", None)
sys._delivery_lab_leak = "set"

def deliver_once(task, provider, kv, policy):
    raise RuntimeError(f"leak={LEAK}")

def next_step(task, result, now, policy, rng):
    raise RuntimeError(f"leak={LEAK}")
`;
const ROOT = fs.mkdtempSync(path.join(os.tmpdir(), 'delivery-lab-snapshot-'));
const LIMIT = { timeout: 240_000 };
let browser;
let server;
let page;
const reports = {}; // lab -> { reference, starter } from a booted worker

/** Opens (or reloads into) `lab`; resolves to how its worker started, once Python is up. */
async function visit(lab) {
  await page.goto(server.url + LABS[lab].query);
  await page.waitForFunction(() => window.deliveryLab);
  await page.evaluate(() => window.deliveryLab.ready);
  const python = await page.evaluate(() => window.deliveryLab.python);
  assert.equal(await page.evaluate(() => document.documentElement.dataset.pythonBoot), python.mode);
  return python;
}

/** After a boot: waits for the worker to say it stored its snapshot. */
async function snapshotStored() {
  const handle = await page.waitForFunction(() => window.deliveryLab.python.snapshot, null, { timeout: 60_000 });
  const snapshot = await handle.jsonValue();
  assert.equal(snapshot.stored, true, `the snapshot was not stored: ${snapshot.error}`);
  assert.ok(snapshot.bytes > 1e6, `a snapshot of ${snapshot.bytes} bytes`);
}

async function run(source) {
  await page.evaluate((s) => window.deliveryLab.setCode(s), source);
  return page.evaluate(() => window.deliveryLab.run());
}

/** The snapshot cache's entries, as paths (snapshots/LAB/KEY). */
const entries = () => page.evaluate(async () => {
  const cache = await caches.open('delivery-lab-snapshots');
  return (await cache.keys()).map((r) => new URL(r.url).pathname.replace(/^.*\/snapshots\//, ''));
});

/**
 * Replaces `lab`'s stored snapshot: 'garbage' (random bytes, its length kept),
 * 'truncated' (the first half; the length header still says the whole),
 * 'other-lab' (the other lab's snapshot, whole, under this lab's key), 'stale'
 * (the same bytes under another key, as an older build left it).
 */
function tamper(lab, how) {
  const other = Object.keys(LABS).find((l) => l !== lab);
  return page.evaluate(async ({ lab, other, how }) => {
    const cache = await caches.open('delivery-lab-snapshots');
    const keys = await cache.keys();
    const own = keys.find((r) => r.url.includes(`/snapshots/${lab}/`));
    let bytes = new Uint8Array(await (await cache.match(own)).arrayBuffer());
    let url = own.url;
    if (how === 'garbage') {
      for (let i = 0; i < bytes.length; i += 65536) crypto.getRandomValues(bytes.subarray(i, i + 65536));
    } else if (how === 'truncated') {
      const whole = bytes.length;
      await cache.put(url, new Response(bytes.slice(0, whole >> 1), { headers: { 'x-snapshot-bytes': String(whole) } }));
      return;
    } else if (how === 'other-lab') {
      bytes = new Uint8Array(await (await cache.match(keys.find((r) => r.url.includes(`/snapshots/${other}/`)))).arrayBuffer());
    } else if (how === 'stale') {
      await cache.delete(own);
      url = url.replace(/[^/]+$/, 'an-older-key');
    }
    await cache.put(url, new Response(bytes, { headers: { 'x-snapshot-bytes': String(bytes.length) } }));
  }, { lab, other, how });
}

before(async () => {
  buildPage(ROOT);
  server = await startServer(ROOT);
  browser = await chromium.launch(LAUNCH);
  const context = await browser.newContext();
  page = await context.newPage();
  page.on('pageerror', (e) => console.error('page error:', e.message));
});

after(async () => {
  await browser?.close();
  await server?.stop();
  fs.rmSync(ROOT, { recursive: true, force: true });
});

for (const lab of Object.keys(LABS)) {
  test(`${lab}: the first visit boots and stores a snapshot; the next restores it and grades identically`, LIMIT, async () => {
    const first = await visit(lab);
    assert.equal(first.mode, 'boot');
    assert.equal(first.why, 'none stored');
    await snapshotStored();
    assert.deepEqual((await entries()).filter((e) => e.startsWith(`${lab}/`)).length, 1);
    const booted = { reference: await run(LABS[lab].reference), starter: await run(LABS[lab].starter) };
    assert.equal(booted.reference.status, 'pass');
    assert.equal(booted.starter.status, 'fail');
    reports[lab] = booted;

    const second = await visit(lab);
    assert.equal(second.mode, 'snapshot', `the second visit did not restore: ${second.why}`);
    assert.equal(second.why, null);
    // A restored worker stores nothing (its snapshot is the one it came from).
    assert.equal(await page.evaluate(() => window.deliveryLab.python.snapshot), null);
    assert.deepEqual(await run(LABS[lab].reference), booted.reference);
    assert.deepEqual(await run(LABS[lab].starter), booted.starter);
  });
}

test('the snapshot is taken before any learner code: a restored worker starts clean', LIMIT, async () => {
  // A booted worker (the snapshot replaced by a stale one first), two runs: the
  // second sees the first's state, so the probe can tell.
  await tamper('deliver-once', 'stale');
  assert.equal((await visit('deliver-once')).mode, 'boot');
  const count = (report, what) => JSON.stringify(report).split(what).length - 1;
  const once = await run(LEAK);
  assert.ok(count(once, 'leak=None') > 0 && count(once, 'leak=set') === 0, 'the first run saw no earlier run');
  const twice = await run(LEAK);
  assert.ok(count(twice, 'leak=set') > 0, 'the probe sees an earlier run in the same interpreter');
  await snapshotStored();
  assert.equal((await visit('deliver-once')).mode, 'snapshot');
  const restored = await run(LEAK);
  assert.equal(count(restored, 'leak=set'), 0, 'the restored interpreter holds a learner\'s state');
  assert.ok(count(restored, 'leak=None') > 0);
});

// Each bad entry for lab 1; for the courier lab (whose boot costs about three times
// lab 1's), the one that depends on the lab, the other lab's snapshot: a random, cut
// or stale entry fails the same checks whatever the lab (snapshot.js: the entry's key
// and size, then the restore itself), and three courier boots were 33 s of a CI.
const BAD = [
  ['garbage', 'a snapshot of random bytes', /did not restore/],
  ['truncated', 'a snapshot cut short', /did not restore.*bytes/],
  ['other-lab', 'the other lab\'s snapshot', /did not restore.*made for/],
  ['stale', 'a stale snapshot (another key)', /stale/],
];
for (const lab of Object.keys(LABS)) {
  for (const [how, what, why] of BAD.filter(([how]) => lab === 'deliver-once' || how === 'other-lab')) {
    test(`${lab}: ${what} is not restored; the page boots, works and stores a good one`, LIMIT, async () => {
      // One good entry to start from (the tests before leave a restored page).
      if ((await visit(lab)).mode === 'boot') await snapshotStored();
      await tamper(lab, how);
      const python = await visit(lab);
      assert.equal(python.mode, 'boot');
      assert.match(python.why, why);
      await snapshotStored();
      // The bad entry was replaced: one entry for this lab, under this build's key.
      const own = (await entries()).filter((e) => e.startsWith(`${lab}/`));
      assert.equal(own.length, 1);
      assert.ok(!own[0].endsWith('an-older-key'));
      assert.deepEqual(await run(LABS[lab].starter), reports[lab].starter);
      const again = await visit(lab);
      assert.equal(again.mode, 'snapshot', `the replaced snapshot did not restore: ${again.why}`);
      assert.deepEqual(await run(LABS[lab].starter), reports[lab].starter);
    });
  }
}
