// Accessibility (WCAG 2.1 AA), end to end in Debian's Chromium: axe-core finds nothing
// on each lab's first view, results view (a failing example's details opened too) and
// embedded view (?embed), also 360 px wide and at 200% zoom; a run is started, its
// results reached and a failing example's details opened with the keyboard alone;
// every region that scrolls is reached by Tab and scrolled by keys; focus is visible
// at every tab stop; the result is said once per run by the page's one live region.
// Run: node --test page/test/a11y.test.mjs   (builds its own dist/ from www/pkg; needs /usr/bin/chromium)
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';
import { LAUNCH } from '../browser.mjs';
import { assertAxeClean } from '../axe.mjs';
import { serve } from '../../grader/serve.mjs';

const WWW = fileURLToPath(new URL('../../', import.meta.url));
const repo = new URL('../../../', import.meta.url);
const REFERENCE = fs.readFileSync(new URL('src/deliver_once/reference.py', repo), 'utf8');
const ROOT = fs.mkdtempSync(path.join(os.tmpdir(), 'delivery-lab-a11y-'));
const LIMIT = { timeout: 90_000 };
const DESKTOP = { width: 1400, height: 1000 };
// 360 px: a small phone. 200% zoom of a 1280 x 800 window: the page lays out in 640 x 400
// CSS pixels at a device pixel ratio of 2 (what the browser's zoom does).
const NARROW = { width: 360, height: 740, deviceScaleFactor: 1 };
const ZOOM_200 = { width: 640, height: 400, deviceScaleFactor: 2 };

let browser;
let server;

before(async () => {
  execFileSync(process.execPath, ['build.mjs', '--no-wasm', '--out', ROOT], { cwd: WWW, stdio: 'inherit' });
  server = await serve({ port: 0, root: ROOT, quiet: true }); // as ./lab serve sends it (COOP/COEP)
  browser = await chromium.launch(LAUNCH);
});

after(async () => {
  await browser?.close();
  if (server) {
    server.server.closeAllConnections();
    await new Promise((r) => server.server.close(r));
  }
  fs.rmSync(ROOT, { recursive: true, force: true });
});

/** A lab's page (`query`: ?lab=…, ?embed&lab=…) in a context of its own, Python loaded. */
async function openLab(query) {
  const ctx = await browser.newContext({ viewport: DESKTOP });
  const page = await ctx.newPage();
  page.on('pageerror', (e) => console.error('page error:', e.message));
  await page.goto(new URL(query, server.url).href);
  await page.waitForFunction(() => window.deliveryLab);
  await page.evaluate(() => window.deliveryLab.ready);
  return page;
}

const sessions = new WeakMap(); // page -> its CDP session (an override lasts as long as its session)

/** Lays the page out at `size` (CSS pixels, device pixel ratio) and waits for it to settle. */
async function layOut(page, { width, height, deviceScaleFactor = 1 }) {
  if (!sessions.has(page)) sessions.set(page, await page.context().newCDPSession(page));
  await sessions.get(page).send('Emulation.setDeviceMetricsOverride', { width, height, deviceScaleFactor, mobile: false });
  // Two frames: resize observers (the page's scrolling regions) have run.
  await page.evaluate(() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r))));
  assert.deepEqual(await page.evaluate(() => [innerWidth, devicePixelRatio]), [width, deviceScaleFactor]);
}

/** What has the focus, and whether its focus is visible; the element is kept in the page (__walk). */
async function focusNow() {
  const el = document.activeElement;
  if (!el || el === document.body || el === document.documentElement) return null;
  window.__walk ??= [];
  window.__walk.push(el);
  // The editor draws its ring on .cm-editor, around the gutter and the text, once it
  // has seen the focus (CodeMirror notes a focus change a few ms later).
  const ringed = el.classList.contains('cm-content') ? el.closest('.cm-editor') : el;
  if (ringed !== el) await new Promise((r) => setTimeout(r, 50));
  const s = getComputedStyle(ringed);
  const ring = (s.outlineStyle !== 'none' && parseFloat(s.outlineWidth) >= 2) || s.boxShadow !== 'none';
  const name = el.getAttribute('aria-label') || el.textContent.trim().replace(/\s+/g, ' ').slice(0, 40);
  return {
    at: window.__walk.indexOf(el), // where it was first reached
    what: `${el.tagName.toLowerCase()}${el.id ? `#${el.id}` : ''}${el.classList.length ? `.${[...el.classList].join('.')}` : ''} "${name}"`,
    editor: el.matches('.cm-content[contenteditable="true"]'),
    inResults: !!el.closest('#results'),
    visible: el.matches(':focus-visible') && ring,
  };
}

/**
 * One Tab. In the editor Tab indents, so it is left the way the page says (Escape,
 * then Tab): the walk must never change the learner's code.
 */
async function tab(page) {
  const now = await page.evaluate(() => document.activeElement?.matches('.cm-content[contenteditable="true"]'));
  if (now) await page.keyboard.press('Escape');
  await page.keyboard.press('Tab');
  return page.evaluate(focusNow);
}

/**
 * Tabs from the page's start until the focus comes round again: every stop must show
 * its focus. Returns the stops; the page keeps their elements for `assertScrollable`.
 */
async function tabWalk(page, max = 150) {
  await page.evaluate(() => {
    window.__walk = [];
    // The first Tab starts from the top of the page (or of an open modal dialog): from
    // a mark there that is no tab stop itself.
    const mark = Object.assign(document.createElement('span'), { tabIndex: -1, id: 'a11y-walk-start' });
    (document.querySelector('dialog[open]') ?? document.body).prepend(mark);
    mark.focus();
  });
  const stops = [];
  for (let i = 0; i < max; i++) {
    const stop = await tab(page);
    if (i === 0) await page.evaluate(() => document.getElementById('a11y-walk-start').remove());
    if (!stop) continue; // between the page's end and its start
    if (stop.at < stops.length) break; // round again
    stops.push(stop);
  }
  assert.ok(stops.length > 0 && stops.length < max, `the Tab walk did not come round (${stops.length} stops)`);
  const hidden = stops.filter((s) => !s.visible).map((s) => s.what);
  assert.deepEqual(hidden, [], 'tab stops whose focus is not visible');
  return stops;
}

/**
 * Every region that scrolls (overflow auto or scroll, content larger than the box) was
 * a tab stop or holds one, and keys scroll it: PageDown and ArrowRight on the region
 * itself; in the editor, the caret keys (the editor scrolls to its caret).
 */
async function assertScrollable(page) {
  const regions = await page.evaluate(() => {
    const scrollers = [...document.querySelectorAll('body *')].filter((el) => {
      const s = getComputedStyle(el);
      return el.getClientRects().length > 0 && !el.closest('[inert]')
        && ((/auto|scroll/.test(s.overflowY) && el.scrollHeight > el.clientHeight + 1)
          || (/auto|scroll/.test(s.overflowX) && el.scrollWidth > el.clientWidth + 1));
    }).filter((el) => !document.querySelector('dialog[open]') || el.closest('dialog[open]'));
    window.__regions = scrollers;
    return scrollers.map((el, i) => {
      const s = getComputedStyle(el);
      return {
        i,
        what: `${el.tagName.toLowerCase()}${el.id ? `#${el.id}` : ''}.${[...el.classList].join('.')} "${el.getAttribute('aria-label') ?? ''}"`,
        down: /auto|scroll/.test(s.overflowY) && el.scrollHeight > el.clientHeight + 1,
        right: /auto|scroll/.test(s.overflowX) && el.scrollWidth > el.clientWidth + 1,
        reached: window.__walk.some((stop) => stop === el || el.contains(stop)),
        editor: el.classList.contains('cm-scroller'),
      };
    });
  });
  for (const r of regions) {
    assert.ok(r.reached, `${r.what} scrolls, but no Tab reaches it`);
    // Keyboard scrolling is animated: wait for it to move.
    const scrolled = (key) => page.waitForFunction(([i, k]) => window.__regions[i][k] > 0, [r.i, key], { timeout: 3000 })
      .then(() => true, () => false);
    if (r.editor) {
      // The editor's text is its tab stop; the caret keys move the view.
      await page.evaluate((i) => window.__regions[i].querySelector('.cm-content').focus(), r.i);
      await page.keyboard.press('Control+Home');
      if (r.down) {
        await page.keyboard.press('PageDown');
        assert.ok(await scrolled('scrollTop'), `${r.what}: PageDown did not scroll it`);
        await page.keyboard.press('Control+Home');
      }
      if (r.right) {
        // Down to the first line wider than the editor, then to its end.
        const down = await page.evaluate((i) => {
          const el = window.__regions[i];
          const right = el.getBoundingClientRect().right;
          return [...el.querySelectorAll('.cm-line')].findIndex((line) => {
            const text = document.createRange(); // the line's text, not its box (as wide as the longest line)
            text.selectNodeContents(line);
            return text.getBoundingClientRect().right > right;
          });
        }, r.i);
        assert.ok(down >= 0, `${r.what}: no line wider than the editor`);
        for (let n = 0; n < down; n++) await page.keyboard.press('ArrowDown');
        await page.keyboard.press('End');
        assert.ok(await scrolled('scrollLeft'), `${r.what}: End on a long line did not scroll it sideways`);
        await page.keyboard.press('Control+Home');
      }
      continue;
    }
    await page.evaluate((i) => {
      const el = window.__regions[i];
      el.scrollTop = 0;
      el.scrollLeft = 0;
      // The region itself, or the first tab stop in it.
      (el.tabIndex >= 0 && el.hasAttribute('tabindex') ? el : window.__walk.find((s) => el.contains(s))).focus();
    }, r.i);
    if (r.down) {
      await page.keyboard.press('PageDown');
      assert.ok(await scrolled('scrollTop'), `${r.what}: PageDown did not scroll it`);
    }
    if (r.right) {
      await page.keyboard.press('ArrowRight');
      assert.ok(await scrolled('scrollLeft'), `${r.what}: ArrowRight did not scroll it sideways`);
    }
  }
  return regions;
}

/** axe, the Tab walk and the scrolling regions of the view as it is now. */
async function assertViewAccessible(page, where) {
  await assertAxeClean(page, where);
  const stops = await tabWalk(page);
  const regions = await assertScrollable(page);
  console.log(`a11y: ${where}: axe clean; ${stops.length} tab stops, focus visible at each; ${regions.length} scrolling regions, each reached by Tab and scrolled by keys`);
  return { stops, regions };
}

/** The document itself never scrolls sideways. */
async function assertNoSideways(page, where) {
  const [scrollWidth, clientWidth] = await page.evaluate(() => [document.documentElement.scrollWidth, document.documentElement.clientWidth]);
  assert.ok(scrollWidth <= clientWidth, `${where}: the page scrolls sideways (${scrollWidth} px in ${clientWidth} px)`);
}

/**
 * Keeps what every live region says from now on (page: __said): a region's text each
 * time it changes, regions added later included.
 */
async function listen(page) {
  await page.evaluate(() => {
    const live = () => [...document.querySelectorAll('[aria-live]:not([aria-live="off"]), [role="status"], [role="alert"], [role="log"]')];
    const last = new Map(live().map((r) => [r, r.textContent.trim()]));
    window.__said = [];
    window.__listener?.disconnect();
    window.__listener = new MutationObserver(() => {
      for (const r of live()) {
        const text = r.textContent.trim();
        if (last.get(r) === text) continue;
        last.set(r, text);
        if (text) window.__said.push({ region: r.id || r.className, text });
      }
    });
    window.__listener.observe(document.body, { subtree: true, childList: true, characterData: true, attributes: true });
  });
}

/** Tabs (leaving the editor the documented way) until `selector` has the focus. */
async function tabTo(page, selector, max = 150) {
  for (let i = 0; i < max; i++) {
    if (await page.evaluate((s) => !!document.activeElement?.matches(s), selector)) return;
    await tab(page);
  }
  assert.fail(`no Tab reached ${selector}`);
}

/**
 * From the page's start, Tab to Run and press `key`: the run starts, the focus stays
 * on Run, and the live region says the result, once; before it, "Running N tests…"
 * exactly when the run was slow enough for the page to show that it is busy (a run
 * of a few tens of ms shows and says nothing until its result: main.js, BUSY_SHOW_MS).
 */
async function runByKeyboard(page, key) {
  await page.evaluate(() => { window.__before = window.deliveryLab.lastReport; });
  await tabTo(page, '#run');
  await listen(page);
  await page.keyboard.press(key);
  await page.waitForFunction(() => window.deliveryLab.lastReport !== window.__before
    && !document.querySelector('#run').hasAttribute('aria-disabled'), null, { timeout: 60_000 });
  assert.equal(await page.evaluate(() => document.activeElement.id), 'run', 'Run lost the focus during the run');
  const tests = await page.evaluate(() => window.deliveryLab.lastReport.tests.length);
  const said = await page.evaluate(() => window.__said);
  const headline = await page.locator('#results .summary .headline').innerText();
  // However many tests: the result, once, and before it that the run is under way
  // when (and only when) the page showed it.
  const { busyShown, wallMs } = await page.evaluate(() => window.deliveryLab.lastRun);
  if (wallMs < 100) assert.equal(busyShown, false, `a ${wallMs} ms run showed the busy look`);
  assert.deepEqual(said.map((s) => s.region), busyShown ? ['status', 'status'] : ['status'], JSON.stringify(said));
  if (busyShown) assert.equal(said[0].text, `Running ${tests} tests…`);
  const result = said.at(-1).text;
  assert.ok(result.startsWith(`${headline}: examples `), `the result said: ${result}`);
  assert.equal(await page.locator('#results [aria-live], #results [role="status"], #results [role="alert"]').count(), 0,
    'a live region inside the results would say them again');
  return page.evaluate(() => window.deliveryLab.lastReport);
}

/**
 * After a run, with Run focused: Tab (out of the editor: Escape, Tab) reaches the
 * results; Tab on to `summary` (a failing example's details) and open it with Enter.
 */
async function openDetailsByKeyboard(page, summary) {
  await tabTo(page, '#run');
  assert.ok((await tab(page))?.editor, 'Tab from Run did not go into the editor');
  const next = await tab(page);
  assert.ok(next?.inResults, `after the editor the focus went to ${next?.what}, not to the results`);
  await tabTo(page, summary);
  const open = () => page.evaluate(() => document.activeElement.parentElement.open);
  if (await open()) {
    await page.keyboard.press('Enter');
    assert.equal(await open(), false, 'Enter did not close the details');
  }
  await page.keyboard.press('Enter');
  assert.equal(await open(), true, 'Enter did not open the details');
}

const LABS = [
  // The starter: every example ends in an error; its timeline is the details opened.
  { id: 'deliver-once', key: 'Enter', details: 'article.test.example:not([data-status="pass"]) details.trace > summary' },
  // The starter fails the fairness run: its text (closed under the chart) is opened.
  { id: 'courier', key: ' ', details: '[data-test^="fairness run"] details.as-text > summary' },
];

for (const lab of LABS) {
  test(`${lab.id}: first view, a run and its results by keyboard, at 1400, 360 px and 200% zoom`, LIMIT, async () => {
    const page = await openLab(`?lab=${lab.id}`);
    try {
      const code = await page.evaluate(() => window.deliveryLab.getCode());
      const { stops, regions } = await assertViewAccessible(page, `${lab.id}, first view`);
      assert.ok(stops.some((s) => s.what.startsWith('button#run')), 'Run is not a tab stop');
      assert.ok(stops.some((s) => s.editor), 'the editor is not a tab stop');
      // A wide screen: the instructions scroll beside the editor, and so does the editor.
      assert.ok(regions.some((r) => r.what.startsWith('article#instructions')), JSON.stringify(regions));
      assert.ok(regions.some((r) => r.editor), JSON.stringify(regions));

      const report = await runByKeyboard(page, lab.key);
      assert.equal(report.status, 'fail');
      await assertAxeClean(page, `${lab.id}, results view`);
      await openDetailsByKeyboard(page, lab.details);
      await assertViewAccessible(page, `${lab.id}, results view with a failing example's details opened`);

      for (const [size, label] of [[NARROW, '360 px wide'], [ZOOM_200, '200% zoom']]) {
        await layOut(page, size);
        await assertNoSideways(page, `${lab.id} at ${label}`);
        await assertViewAccessible(page, `${lab.id}, results view at ${label}`);
      }
      assert.equal(await page.evaluate(() => window.deliveryLab.getCode()), code, 'the keyboard changed the code');
    } finally {
      await page.context().close();
    }
  });
}

test('deliver-once: each run says its result once; after a pass the comparison opens, reads and closes by keyboard', LIMIT, async () => {
  const page = await openLab('?lab=deliver-once');
  try {
    // Once per run, not per test: two runs, two results said (runByKeyboard checks each).
    await runByKeyboard(page, 'Enter');
    await page.evaluate((s) => window.deliveryLab.setCode(s), REFERENCE);
    assert.equal((await runByKeyboard(page, ' ')).status, 'pass');
    assert.match(await page.locator('#status').innerText(), /^All \d+ tests pass: examples 3 of 3, hidden \d+ of \d+\. Graded in/);
    await tabTo(page, '#compare');
    await page.keyboard.press('Enter');
    await page.locator('#compare-view').waitFor({ state: 'visible' });
    const { stops, regions } = await assertViewAccessible(page, 'deliver-once, the comparison dialog');
    // The modal dialog keeps the focus: its button and its two files.
    assert.deepEqual(stops.map((s) => s.what.split(' ')[0]).sort(),
      ['button#compare-close.secondary', 'div.cm-content', 'div.cm-content'], JSON.stringify(stops));
    assert.equal(regions.filter((r) => r.editor).length, 2, 'both files scroll in the dialog');
    await page.keyboard.press('Escape');
    await page.locator('#compare-view').waitFor({ state: 'hidden' });
    assert.equal(await page.evaluate(() => document.activeElement.id), 'compare', 'the focus did not come back to Compare');
  } finally {
    await page.context().close();
  }
});

test('the embedded view (?embed): both labs, first view and results, also 360 px wide', LIMIT, async () => {
  for (const lab of LABS) {
    const page = await openLab(`?embed&lab=${lab.id}`);
    try {
      assert.equal(await page.evaluate(() => document.documentElement.classList.contains('embed')), true);
      await assertViewAccessible(page, `${lab.id} embedded, first view`);
      await runByKeyboard(page, lab.key);
      await openDetailsByKeyboard(page, lab.details);
      await assertViewAccessible(page, `${lab.id} embedded, results view`);
      await layOut(page, NARROW);
      await assertNoSideways(page, `${lab.id} embedded at 360 px`);
      await assertViewAccessible(page, `${lab.id} embedded, results view at 360 px wide`);
    } finally {
      await page.context().close();
    }
  }
});
