// Mutation testing (grader/mutation.mjs, ./lab mutants): every lab has its list of
// equivalent mutants, made for its current reference.py, each with a reason; and
// lab 1's run, redone here with cosmic-ray, kills every mutant that is not listed.
// Run: node --test grader/test/mutation.test.mjs   (needs www/pkg and .venv: ./lab test)
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { loadGrader } from '../../host/node_host.mjs';
import { listFile, mutateLab, problemsOf, readList, sha256, watchdog } from '../mutation.mjs';
import { noProcessLeftAfterTests } from '../fixtures/leftovers.mjs';

noProcessLeftAfterTests();

const grader = new (await loadGrader()).Grader();
const labs = JSON.parse(grader.labs()).map((l) => l.id);

for (const lab of labs) {
  test(`${lab}: its list of equivalent mutants is made for the current reference, each with a reason`, () => {
    const list = readList(lab);
    assert.ok(list, `${listFile(lab)} is missing: ./lab mutants --update --lab ${lab}`);
    const reference = JSON.parse(grader.lab(lab)).reference_py;
    assert.equal(list.reference_sha256, sha256(reference), `reference.py changed since ${listFile(lab)} was made: ./lab mutants --update --lab ${lab}`);
    assert.equal(list.killed + list.equivalent.length, list.mutants);
    const lines = reference.split('\n');
    for (const m of list.equivalent) {
      assert.ok(m.why && m.why.length > 20, `line ${m.line}, ${m.operator} #${m.occurrence}: say why it is equivalent`);
      assert.equal(lines[m.line - 1].trim(), m.before, `line ${m.line} of the reference is not the one listed`);
    }
  });
}

test('deliver-once: cosmic-ray over the reference, graded by the lab, kills every mutant not listed as equivalent', { timeout: 300_000 }, async () => {
  const run = await mutateLab('deliver-once');
  assert.ok(run.total >= 100, `${run.total} mutants`);
  assert.deepEqual(problemsOf(run, readList('deliver-once')), []);
  assert.equal(run.killed, readList('deliver-once').killed);
});

test('a grading past the time limit is stopped by the watchdog and fails; the next one runs in full', { timeout: 120_000 }, async () => {
  const { loadNodeEngine } = await import('../../host/node_host.mjs');
  const limit = watchdog(1);
  const engine = await loadNodeEngine({ labId: 'deliver-once', interruptBuffer: limit.interrupt });
  const { reference_py: reference } = JSON.parse(grader.lab('deliver-once'));
  const endless = `${reference}\ndef deliver_once(task, provider, kv, policy):\n    while True:\n        pass\n`;
  const started = performance.now();
  const stopped = limit.run(() => engine.run(endless, {}));
  const seconds = (performance.now() - started) / 1000;
  assert.equal(stopped.status, 'fail');
  assert.ok(stopped.tests.some((t) => t.status === 'timeout'), JSON.stringify(stopped.tests.map((t) => t.status)));
  assert.ok(seconds < 30, `stopped after ${seconds} s`);
  assert.equal(limit.run(() => engine.run(reference, {})).status, 'pass');
});
