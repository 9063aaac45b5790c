// axe-core in a Chromium page, for the Chromium tests (a11y.test.mjs, journey.test.mjs):
// WCAG 2.1 A and AA rules on the page as it is, asserting no violation and naming each
// one (rule, impact, elements) when there is one. Outside test/: no test file of its own.
import assert from 'node:assert/strict';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const AXE = path.join(fileURLToPath(new URL('../', import.meta.url)), 'node_modules/axe-core/axe.min.js');
const AXE_TAGS = ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa'];

/** axe-core (WCAG 2.1 A and AA) on `page` (or a frame) as it is: no violation, or each one named. */
export async function assertAxeClean(page, where) {
  if (!await page.evaluate(() => !!window.axe)) await page.addScriptTag({ path: AXE });
  const violations = await page.evaluate((values) => window.axe.run(document, { runOnly: { type: 'tag', values } })
    .then((r) => r.violations.map((v) => ({
      id: v.id, impact: v.impact, help: v.help,
      nodes: v.nodes.map((n) => `${n.target.join(' ')}: ${n.failureSummary.replace(/\s*\n\s*/g, ' ')}`),
    }))), AXE_TAGS);
  const said = violations.map((v) => `${v.id} (${v.impact}): ${v.help}\n${v.nodes.map((n) => `    ${n}`).join('\n')}`);
  assert.equal(violations.length, 0, `axe on ${where}:\n${said.join('\n')}`);
}
