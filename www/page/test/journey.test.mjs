// The learner's journey (issue 40), end to end in Debian's Chromium: the course map
// from the engine's list, Predict, hints counted in the staff's `result`, jump to the
// code, the courier's Your turn, both themes (axe-clean in each), reduced motion, the
// keyboard alone, and offline after one visit. One build (trusting the example course
// page's origin), one lab server, one browser and one context for the whole file.
// Run: node --test page/test/journey.test.mjs   (builds its own copy from www/pkg; needs /usr/bin/chromium)
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
import { loadGrader } from '../../host/node_host.mjs';

const WWW = fileURLToPath(new URL('../../', import.meta.url));
const repo = new URL('../../../', import.meta.url);
const LAB1 = fs.readFileSync(new URL('src/deliver_once/reference.py', repo), 'utf8');
const COURIER = fs.readFileSync(new URL('src/courier/reference.py', repo), 'utf8');
const ROOT = fs.mkdtempSync(path.join(os.tmpdir(), 'delivery-lab-journey-'));
// A course's page on another origin: one frame of lab 1, every message from it kept.
const HOST_ROOT = fs.mkdtempSync(path.join(os.tmpdir(), 'delivery-lab-journey-host-'));
const HOST_PAGE = `<!doctype html><html lang="en"><title>course</title><iframe id="lab" title="Code lab" allow="cross-origin-isolated"></iframe>
<script type="module">
const lab = new URL(new URLSearchParams(location.search).get('lab'));
window.messages = [];
addEventListener('message', (e) => { if (e.origin === lab.origin && e.data?.source === 'delivery-lab') window.messages.push(e.data); });
document.getElementById('lab').src = new URL('index.html?embed&lab=deliver-once&host-origin=' + encodeURIComponent(location.origin), lab);
</script></html>`;
const LIMIT = { timeout: 90_000 };

let browser;
let lab; // the lab's server
let host; // the example course page, on another origin
let ctx;
let page;
let course; // build.json's course
let engineLabs; // the engine's own list, read from www/pkg in Node

const url = (q) => new URL(q, lab.url).href;

before(async () => {
  fs.writeFileSync(path.join(HOST_ROOT, 'index.html'), HOST_PAGE);
  host = await serve({ port: 0, root: HOST_ROOT, quiet: true, isolate: false });
  execFileSync(process.execPath, ['build.mjs', '--no-wasm', '--out', ROOT, '--allow-origin', new URL(host.url).origin], { cwd: WWW, stdio: 'inherit' });
  lab = await serve({ port: 0, root: ROOT, quiet: true });
  course = JSON.parse(fs.readFileSync(path.join(ROOT, 'build.json'), 'utf8')).course;
  const { Grader } = await loadGrader();
  const g = new Grader();
  engineLabs = JSON.parse(g.labs()).map((l) => JSON.parse(g.lab(l.id)));
  browser = await chromium.launch(LAUNCH);
  ctx = await browser.newContext({ viewport: { width: 1400, height: 1000 } });
  page = await ctx.newPage();
  page.on('pageerror', (e) => console.error('page error:', e.message));
});

after(async () => {
  await browser?.close();
  for (const s of [lab, host]) {
    if (!s) continue;
    s.server.closeAllConnections();
    await new Promise((r) => s.server.close(r));
  }
  for (const dir of [ROOT, HOST_ROOT]) fs.rmSync(dir, { recursive: true, force: true });
});

async function openLab(p, query) {
  await p.goto(url(query));
  await p.waitForFunction(() => window.deliveryLab);
  await p.evaluate(() => window.deliveryLab.loaded);
}

/** Presses Tab until `selector` has the focus (Esc first whenever the editor has it, as the page says). */
async function tabTo(p, selector, max = 120) {
  for (let i = 0; i < max; i++) {
    if (await p.evaluate((s) => !!document.activeElement?.matches(s), selector)) return;
    if (await p.evaluate(() => !!document.activeElement?.matches('.cm-content'))) await p.keyboard.press('Escape');
    await p.keyboard.press('Tab');
  }
  assert.fail(`no Tab reached ${selector}`);
}

/** Tabs from the top: every stop shows a focus ring; returns how many stops there are. */
async function focusRings(p) {
  await p.evaluate(() => { document.activeElement?.blur(); window.__stops = []; });
  for (let i = 0; i < 200; i++) {
    if (await p.evaluate(() => !!document.activeElement?.matches('.cm-content'))) await p.keyboard.press('Escape');
    await p.keyboard.press('Tab');
    const stop = await p.evaluate(() => {
      const el = document.activeElement;
      if (!el || el === document.body) return null;
      if (window.__stops.includes(el)) return 'again';
      window.__stops.push(el);
      const ringed = el.classList.contains('cm-content') ? el.closest('.cm-editor') : el;
      const s = getComputedStyle(ringed);
      return { what: `${el.tagName} ${el.id || el.className} "${el.textContent.trim().slice(0, 30)}"`, ring: s.outlineStyle !== 'none' && parseFloat(s.outlineWidth) >= 2 };
    });
    if (stop === 'again') break;
    if (stop && !stop.ring && !stop.what.startsWith('DIV cm-content')) assert.fail(`no visible focus on ${stop.what}`);
  }
  return p.evaluate(() => window.__stops.length);
}

/** What the editor has selected (jump to the code selects the def line). */
const selectedLine = (p) => p.evaluate(() => document.querySelector('.cm-content').contains(document.activeElement)
  && window.getSelection().toString());

test('lab 1 by keyboard: Predict kept and explained after the first run, hints one at a time, jump to the code', LIMIT, async () => {
  await openLab(page, '?lab=deliver-once');
  const journey = course.find((c) => c.id === 'deliver-once');
  // The question is there, unanswered, the explanation not shown, and the editor is free.
  assert.equal(await page.locator('.predict .question').innerText(), journey.predict.question);
  assert.equal(await page.locator('.predict .explanation').isHidden(), true);
  await page.evaluate(() => window.deliveryLab.setCode('# first\n'));
  assert.equal(await page.evaluate(() => window.deliveryLab.getCode()), '# first\n');
  // Answer by keyboard: Tab to the first answer, arrow down to the right one.
  await tabTo(page, '.predict input[type=radio]');
  for (let i = 0; i < journey.predict.correct; i++) await page.keyboard.press('ArrowDown');
  assert.deepEqual(await page.evaluate(() => window.deliveryLab.journey.predict), { answer: journey.predict.correct + 1, correct: true });

  // Hints for task 1, one per press; the count is what the staff see.
  const tools = page.locator('.task-tools[data-task="1"]');
  await tabTo(page, '.task-tools[data-task="1"] button.secondary');
  assert.equal(await tools.locator('.hint-list li').count(), 0);
  await page.keyboard.press('Enter');
  assert.equal(await tools.locator('.hint-list li').count(), 1);
  assert.equal(await tools.locator('.hint-list li').first().innerText(), journey.hints[0].hints[0]);
  await tabTo(page, '.task-tools[data-task="1"] button.secondary');
  await page.keyboard.press('Enter');
  assert.equal(await tools.locator('.hint-list li').count(), 2);
  assert.equal(await page.locator('.task-tools[data-task="2"] .hint-list li').count(), 0, 'another task\'s hints opened');
  const hints = await page.evaluate(() => window.deliveryLab.journey.hints);
  assert.deepEqual(hints.byTask.map((t) => t.opened), [2, 0]);
  assert.equal(hints.opened, 2);

  // Jump to the code from the task: the editor selects the learner's def line.
  await page.evaluate((s) => window.deliveryLab.setCode(s), LAB1);
  await tabTo(page, '.task-tools[data-task="2"] button.jump');
  await page.keyboard.press('Enter');
  assert.match(await selectedLine(page), /^def next_step\(/);

  // A reload keeps the answer and the hints opened.
  await page.reload();
  await page.waitForFunction(() => window.deliveryLab);
  await page.evaluate(() => window.deliveryLab.loaded);
  assert.equal(await page.locator('.predict input:checked').getAttribute('value'), String(journey.predict.correct));
  assert.equal(await tools.locator('.hint-list li').count(), 2);
  assert.equal(await page.locator('.predict .explanation').isHidden(), true);

  // The first run (Run by keyboard) opens the explanation, and says the answer was right.
  await tabTo(page, '#run');
  await page.keyboard.press('Enter');
  await page.waitForFunction(() => window.deliveryLab.lastReport?.status === 'pass', null, { timeout: 60_000 });
  assert.equal(await page.locator('.predict .explanation').isVisible(), true);
  assert.match(await page.locator('.predict .explanation').innerText(), /^Your answer was right\./);
  // A full pass leads on to the next lab.
  assert.equal(await page.locator('#results .next-lab a').getAttribute('href'), `index.html?lab=${course[1].id}`);
  // A test row's jump: the example's task's function.
  const first = page.locator('article.test.example').first();
  const { task } = engineLabs[0].tests.find((t) => t.kind === 'example');
  const fn = engineLabs[0].task_functions[task - 1][0];
  await first.locator('button.jump').focus();
  await page.keyboard.press('Enter');
  assert.match(await selectedLine(page), new RegExp(`^def ${fn}\\(`));
});

test('run one test from its row, by keyboard: the test alone, no XP or best run from it, the focus back on its row', LIMIT, async () => {
  // Lab 1 passed in full in the test before; now a mutant fails some tests.
  const xp = await page.evaluate(() => localStorage.getItem('delivery-lab:deliver-once:xp'));
  const best = await page.evaluate(() => localStorage.getItem('delivery-lab:deliver-once:best'));
  await page.evaluate((s) => window.deliveryLab.setCode(s), LAB1.replace('nx=True)', ')'));
  // The full results of the test before: the hidden tests' buttons are one tab stop,
  // and the arrow keys move between them.
  assert.equal(await page.locator('ul.hidden-tests button[tabindex="0"]').count(), 1);
  await page.locator('ul.hidden-tests button[tabindex="0"]').focus();
  await page.keyboard.press('ArrowDown');
  await page.keyboard.press('ArrowRight');
  const hidden = engineLabs[0].tests.filter((t) => t.kind === 'hidden')[1].name;
  const focused = await page.evaluate(() => [document.activeElement.closest('li').dataset.test, document.activeElement.className]);
  assert.deepEqual(focused, [hidden, 'link run-one']);
  await page.keyboard.press('Enter');
  await page.waitForFunction((n) => window.deliveryLab.lastReport?.partial && window.deliveryLab.lastReport.tests[0].name === n, hidden, { timeout: 30_000 });
  let report = await page.evaluate(() => window.deliveryLab.lastReport);
  assert.deepEqual(report.tests.map((t) => t.name), [hidden]);
  assert.equal(await page.locator('article.test.example').count(), 0);
  assert.equal(await page.evaluate(() => document.activeElement.closest('li')?.dataset.test), hidden);
  assert.match(await page.locator('#status').innerText(), /\(only this test ran\)/);
  assert.equal(await page.locator('#results .note.partial').count(), 1);
  // An example's row, after a full run.
  await page.evaluate(() => window.deliveryLab.run());
  const example = engineLabs[0].tests.find((t) => t.kind === 'example').name;
  const row = page.locator('article.test.example').first();
  assert.equal(await row.getAttribute('data-test'), example);
  await row.locator('button.run-one').focus();
  await page.keyboard.press('Enter');
  await page.waitForFunction((n) => window.deliveryLab.lastReport?.partial && window.deliveryLab.lastReport.tests[0].name === n, example, { timeout: 30_000 });
  report = await page.evaluate(() => window.deliveryLab.lastReport);
  assert.deepEqual([report.total, report.tests.length, report.xp], [1, 1, 0]);
  assert.match(await page.locator('#results .summary .headline').innerText(), new RegExp(`^“${example}” (passes|failed|error)`));
  // The focus is back on the same test's button, in the new results.
  assert.deepEqual(await page.evaluate(() => [document.activeElement.closest('[data-test]')?.dataset.test, document.activeElement.className]),
    [example, 'link run-one']);
  // The page's API runs the same way, and refuses what is not a list of names.
  assert.deepEqual(await page.evaluate((n) => window.deliveryLab.run({ only: [n] }).then((r) => [r.partial, r.total]), example), [true, 1]);
  assert.match(await page.evaluate(() => window.deliveryLab.run({ only: 'all' }).then(() => 'ran', (e) => e.message)), /only is a list of test names/);
  // Neither partial run touched the XP or the best run.
  assert.equal(await page.evaluate(() => localStorage.getItem('delivery-lab:deliver-once:xp')), xp);
  assert.equal(await page.evaluate(() => localStorage.getItem('delivery-lab:deliver-once:best')), best);
  await page.evaluate((s) => window.deliveryLab.setCode(s), LAB1);
});

test('the course map: the engine\'s labs in order, their facts and journeys, progress and XP from this device', LIMIT, async () => {
  // build.json's course is the engine's list with each lab's own facts.
  assert.deepEqual(course.map((c) => c.id), engineLabs.map((l) => l.id));
  for (const [i, c] of course.entries()) {
    const l = engineLabs[i];
    assert.deepEqual([c.title, c.level, c.minutes, c.xp, c.tasks], [l.title, l.level, l.minutes, l.xp, l.tasks]);
  }
  await page.goto(url('course.html'));
  await page.evaluate(() => window.deliveryCourse.loaded);
  const items = page.locator('.course-lab');
  assert.deepEqual(await items.evaluateAll((els) => els.map((e) => e.dataset.lab)), course.map((c) => c.id));
  for (const [i, c] of course.entries()) {
    const item = items.nth(i);
    assert.equal(await item.locator('h2 a').getAttribute('href'), `index.html?lab=${c.id}`);
    assert.deepEqual(await item.locator('.facts li').allInnerTexts(), [`level: ${c.level}`, `about ${c.minutes} min`, `${c.xp} XP`]);
    assert.deepEqual(await item.locator('.practises li').allInnerTexts(), c.practises);
    const next = course[i + 1];
    if (next) assert.equal(await item.locator('.next a').getAttribute('href'), `index.html?lab=${next.id}`);
    else assert.equal(await item.locator('.next a').count(), 0);
  }
  // Lab 1 passed in the test before: done, and its XP counted; lab 2 not started.
  assert.match(await items.nth(0).locator('.state').innerText(), /Done/);
  assert.equal(await items.nth(1).locator('.state').innerText(), 'Not started');
  const total = course.reduce((n, c) => n + c.xp, 0);
  assert.equal(await page.locator('#course-xp').innerText(), `${course[0].xp} of ${total} XP`);
  // The lab page links back to the map and on to the next lab.
  await openLab(page, '?lab=deliver-once');
  assert.equal(await page.locator('#course-nav a[href="course.html"]').count(), 1);
  assert.equal(await page.locator('#course-nav a.next').getAttribute('href'), `index.html?lab=${course[1].id}`);
  assert.equal(await page.locator('#course-nav .part').innerText(), `Lab 1 of ${course.length}`);
});

test('embedded: the staff\'s result carries the Predict answer and the hints opened, and the score is the tests\' alone', LIMIT, async () => {
  // A course's page frames lab 1 (same browser profile: the learner's answer and
  // hints from the first test are theirs here too).
  const p = await ctx.newPage();
  try {
    await p.goto(`${host.url}/?lab=${encodeURIComponent(lab.url + '/')}`);
    const frame = await (await p.waitForSelector('#lab')).contentFrame();
    await frame.waitForURL(/embed/);
    await frame.waitForFunction(() => window.deliveryLab);
    await frame.evaluate(() => window.deliveryLab.loaded);
    // One more hint, for task 2, in the frame.
    await frame.locator('.task-tools[data-task="2"] button.secondary').click();
    const result = await frame.evaluate(async (src) => {
      window.deliveryLab.setCode(src);
      return window.deliveryLab.run();
    }, LAB1);
    assert.equal(result.status, 'pass');
    await p.waitForFunction(() => window.messages.some((m) => m.type === 'result'), null, { timeout: 30_000 });
    const m = await p.evaluate(() => window.messages.find((x) => x.type === 'result'));
    const journey = course.find((c) => c.id === 'deliver-once');
    assert.deepEqual(m.journey, {
      predict: { answer: journey.predict.correct + 1, correct: true },
      hints: { opened: 3, byTask: journey.hints.map((h, i) => ({ task: journey.tasks[h.task], opened: [2, 1][i], of: h.hints.length })) },
    });
    // Hints are never a penalty: every point of every test.
    assert.equal(m.score, m.maxScore);
    assert.equal(m.allPassed, true);
  } finally {
    await p.close();
  }
});

test('courier: Your turn runs the fairness load, the pattern moves the chart and the p95 table, and its question', LIMIT, async () => {
  await openLab(page, '?lab=courier');
  const y = course.find((c) => c.id === 'courier').yourTurn;
  // lab.md's own discussion of the Predict question stays folded until the first run.
  const fold = page.locator('#instructions details.answer-section');
  assert.equal(await fold.count(), 1);
  assert.equal(await fold.evaluate((d) => d.open), false);
  assert.equal(await fold.evaluate((d) => d.previousElementSibling.textContent), course[1].predict.section);
  await page.evaluate((s) => window.deliveryLab.setCode(s), COURIER);
  const turn = page.locator('#your-turn');
  assert.equal(await turn.locator('table.p95').count(), 0);
  // Choose the burst by keyboard (the group's Tab stop is its checked answer: the first), then run.
  await tabTo(page, '#your-turn .patterns input');
  assert.equal(await page.evaluate(() => document.activeElement.value), y.patterns[0].id);
  const burst = y.patterns.findIndex((x) => x.id === 'burst');
  for (let i = 0; i < burst; i++) await page.keyboard.press('ArrowDown');
  assert.equal(await turn.locator('.patterns input:checked').getAttribute('value'), 'burst');
  await tabTo(page, '#your-turn button.primary');
  await page.keyboard.press('Enter');
  await turn.locator('table.p95').waitFor({ timeout: 60_000 });
  // The fairness load alone (the engine's only): its test and nothing else.
  const alone = await page.evaluate(() => window.deliveryLab.lastReport);
  assert.equal(alone.partial, true);
  assert.deepEqual(alone.tests.map((t) => t.name), [y.test]);
  const rows = () => turn.locator('table.p95 tbody tr').evaluateAll((trs) => trs.map((tr) => [...tr.children].map((c) => c.textContent)));
  const burstRows = await rows();
  assert.deepEqual(burstRows.map((r) => r[0]), [y.baseline, y.patterns[burst].group]);
  const ratio = (cell) => Number(/\(([\d.]+)x\)/.exec(cell)[1]);
  // The reference's claim stays within 10% under the burst; FIFO's does not.
  assert.ok(ratio(burstRows[1][1]) <= 1.1, `your claim under the burst: ${burstRows[1][1]}`);
  assert.ok(ratio(burstRows[1][2]) > 1.5, `FIFO under the burst: ${burstRows[1][2]}`);
  assert.equal(await turn.locator('figure.bars svg').count(), 1);
  assert.equal(await fold.evaluate((d) => d.open), true, 'the first run did not open the answer');
  // The chart and the table are the fairness test's figure, as the results show it.
  const fig = (await page.evaluate(() => window.deliveryLab.lastReport)).tests.find((t) => t.name === y.test).figure;
  const group = fig.groups.find((g) => g.label === y.patterns[burst].group);
  assert.equal(burstRows[1][2], `${group.bars[1].value} (${group.bars[1].ratio.toFixed(2)}x)`);
  // The other pattern, without another run.
  const clicks = () => page.evaluate(() => performance.getEntriesByName('run-click').length);
  const runs = await clicks();
  await tabTo(page, '#your-turn .patterns input:checked');
  await page.keyboard.press('ArrowUp');
  const spreadRows = await rows();
  const spread = y.patterns.findIndex((x) => x.id === 'spread');
  assert.equal(spreadRows[1][0], y.patterns[spread].group);
  assert.ok(ratio(spreadRows[1][2]) < ratio(burstRows[1][2]), 'FIFO moves less when the noise is spread');
  assert.equal(await clicks(), runs, 'the pattern started a run');
  // The question, answered and explained.
  await turn.locator('.your-turn-question input').nth(y.correct).check();
  await turn.locator('.your-turn-question button').click();
  assert.match(await turn.locator('.your-turn-question .explanation').innerText(), /^Your answer was right\./);
  assert.deepEqual((await page.evaluate(() => window.deliveryLab.journey)).yourTurn, { answer: y.correct + 1, correct: true });
});

test('both themes are axe-clean (course map, lab 1, the courier with Your turn); the switch is kept; reduced motion', LIMIT, async () => {
  // The system's scheme first (no choice stored), then the switch by keyboard.
  const themeIs = (t) => page.waitForFunction((x) => document.documentElement.dataset.theme === x, t, { timeout: 5000 });
  await page.emulateMedia({ colorScheme: 'dark' });
  await themeIs('dark');
  await page.emulateMedia({ colorScheme: 'light' });
  await themeIs('light');
  for (const theme of ['light', 'dark']) {
    if (await page.evaluate(() => document.documentElement.dataset.theme) !== theme) {
      await tabTo(page, '#theme');
      await page.keyboard.press(' ');
    }
    assert.equal(await page.locator('#theme').getAttribute('aria-pressed'), String(theme === 'dark'));
    // The courier page as the last test left it: results, Your turn drawn, a question explained.
    await page.locator('.task-tools[data-task="1"] button.secondary').click(); // a hint shown
    await assertAxeClean(page, `courier, ${theme}`);
    await openLab(page, '?lab=deliver-once');
    assert.equal(await page.evaluate(() => document.documentElement.dataset.theme), theme, 'the switch was not kept');
    await page.evaluate(() => window.deliveryLab.run());
    await assertAxeClean(page, `deliver-once with results, ${theme}`);
    // a11y.test.mjs walks the light lab page; the dark ring is walked here.
    if (theme === 'dark') assert.ok(await focusRings(page) > 20);
    await page.goto(url('course.html'));
    await page.evaluate(() => window.deliveryCourse.loaded);
    await assertAxeClean(page, `course map, ${theme}`);
    assert.ok(await focusRings(page) >= course.length + 2);
    await openLab(page, '?lab=courier');
    await page.locator('#your-turn button.primary').waitFor();
  }
  // Reduced motion: the busy spinner does not spin.
  const spin = () => page.evaluate(() => {
    const s = document.getElementById('status');
    s.dataset.kind = 'busy';
    return parseFloat(getComputedStyle(s, '::before').animationDuration);
  });
  assert.ok(await spin() > 0.5);
  await page.emulateMedia({ reducedMotion: 'reduce' });
  assert.ok(await spin() < 0.01);
  await page.emulateMedia({ reducedMotion: 'no-preference' });
});

test('the theme is set before the page\'s modules run (no light page before a dark one), and an embedding page may set it', LIMIT, async () => {
  // main.js and course.js never load here: what the first paint gets is theme.js's alone.
  const c = await browser.newContext({ colorScheme: 'dark' });
  await c.route(/\/(main|course)\.js$/, (r) => r.abort());
  const p = await c.newPage();
  const themeAt = async (q) => {
    await p.goto(url(q), { waitUntil: 'domcontentloaded' });
    return p.evaluate(() => document.documentElement.dataset.theme);
  };
  try {
    for (const q of ['index.html?lab=deliver-once', 'course.html']) {
      assert.equal(await themeAt(q), 'dark', `${q}: the system's dark scheme`);
    }
    // A learner's stored choice wins over the system's, from the first paint too.
    await p.evaluate(() => localStorage.setItem('delivery-lab:theme', 'light'));
    for (const q of ['index.html?lab=courier', 'course.html']) {
      assert.equal(await themeAt(q), 'light', `${q}: the stored choice`);
    }
    assert.equal(await p.evaluate(() => typeof window.deliveryLab), 'undefined', 'main.js was not blocked');
    // Embedded, the host page's theme wins over the stored choice and the system's;
    // on the lab's own page (no ?embed) the parameter is not asked.
    assert.equal(await themeAt('index.html?embed&lab=deliver-once&theme=dark'), 'dark', 'embedded, theme=dark');
    await p.emulateMedia({ colorScheme: 'light' });
    await p.evaluate(() => localStorage.setItem('delivery-lab:theme', 'dark'));
    assert.equal(await themeAt('index.html?embed&lab=deliver-once&theme=light'), 'light', 'embedded, theme=light');
    assert.equal(await themeAt('index.html?lab=deliver-once&theme=light'), 'dark', 'not embedded: the stored choice');
    assert.equal(await themeAt('index.html?embed&lab=deliver-once&theme=purple'), 'dark', 'an unknown theme is not one');
  } finally {
    await c.close();
  }
});

test('after one visit the course map and both labs open offline, answers and progress kept', LIMIT, async () => {
  await page.goto(url('course.html'));
  await page.evaluate(() => window.deliveryCourse.loaded);
  await page.waitForFunction(() => navigator.serviceWorker.controller);
  await ctx.setOffline(true);
  try {
    await page.reload();
    await page.evaluate(() => window.deliveryCourse.loaded);
    assert.equal(await page.locator('.course-lab').count(), course.length);
    assert.match(await page.locator('.course-lab').first().locator('.state').innerText(), /Done/);
    await openLab(page, '?lab=deliver-once');
    assert.equal(await page.locator('.predict input:checked').getAttribute('value'), String(course[0].predict.correct));
    await openLab(page, '?lab=courier');
    assert.equal(await page.locator('.your-turn-question input:checked').getAttribute('value'), String(course[1].yourTurn.correct));
  } finally {
    await ctx.setOffline(false);
  }
});
