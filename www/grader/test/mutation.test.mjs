// Mutation testing (grader/mutation.mjs, ./lab mutants): every lab has its list of
// equivalent mutants for each family, made for its current reference.py, each with a
// reason; lab 1's cosmic-ray and learner runs, redone here, kill every mutant that is
// not listed; the courier lab's families (minutes in full) are checked on a sample.
// Run: node --test grader/test/mutation.test.mjs   (needs www/pkg and .venv: ./lab test)
import { test } from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import { loadGrader } from '../../host/node_host.mjs';
import {
  COSMIC, FAMILIES, familyList, familyMutants, gradingSession, listFile, mutateFamily, mutateLab, problemsOf, readList, sha256, watchdog,
} from '../mutation.mjs';
import { noProcessLeftAfterTests } from '../fixtures/leftovers.mjs';

noProcessLeftAfterTests();

const grader = new (await loadGrader()).Grader();
const labs = JSON.parse(grader.labs()).map((l) => l.id);
const referenceOf = (lab) => JSON.parse(grader.lab(lab)).reference_py;

for (const lab of labs) {
  test(`${lab}: its list of equivalent mutants is made for the current reference, each with a reason`, () => {
    const list = readList(lab);
    assert.ok(list, `${listFile(lab)} is missing: ./lab mutants --update --lab ${lab}`);
    const reference = referenceOf(lab);
    assert.equal(list.reference_sha256, sha256(reference), `reference.py changed since ${listFile(lab)} was made: ./lab mutants --update --lab ${lab}`);
    assert.equal(list.killed + list.equivalent.length, list.mutants);
    const lines = reference.split('\n');
    for (const m of list.equivalent) {
      assert.ok(m.why && m.why.length > 20, `line ${m.line}, ${m.operator} #${m.occurrence}: say why it is equivalent`);
      assert.equal(lines[m.line - 1].trim(), m.before, `line ${m.line} of the reference is not the one listed`);
    }
  });

  test(`${lab}: each of our families is listed for the mutants it makes now, each equivalent one with a reason`, () => {
    const list = readList(lab);
    const made = familyMutants(lab, referenceOf(lab));
    const unexplained = [];
    for (const family of FAMILIES.filter((f) => f !== COSMIC)) {
      const mutants = made.families[family];
      const part = familyList(list, family);
      if (!mutants) {
        assert.equal(part, null, `${family}: listed, but the generator makes no such mutants for ${lab}`);
        continue;
      }
      assert.ok(part, `${family}: not in ${listFile(lab)}: ./lab mutants --update --lab ${lab} --family ${family}`);
      // sqlglot's version too: another one renders differently, so the control must pass again.
      assert.equal(part.tool, made.generator, `${family}: the list was made by ${part.tool}, the generator is ${made.generator} now: ./lab mutants --update --lab ${lab} --family ${family}`);
      assert.equal(part.mutants, mutants.length, `${family}: the generator makes ${mutants.length} mutants, the list was made for ${part.mutants}: ./lab mutants --update --lab ${lab} --family ${family}`);
      assert.equal(part.killed + part.equivalent.length, part.mutants);
      for (const m of part.equivalent) {
        const now = mutants.find((x) => x.id === m.id);
        assert.ok(now, `${m.id}: listed, but no longer made`);
        assert.equal(now.what, m.what, `${m.id}: the change listed is not the one made now`);
        if (!(m.why && m.why.length > 20)) unexplained.push(`${m.id}: ${m.what}`);
      }
    }
    // All of them at once: each is a mistake the lab's tests miss (kill it) or an
    // equivalent mutant (say why).
    assert.deepEqual(unexplained, [], 'survivors with no reason why they are equivalent');
  });
}

test('deliver-once: cosmic-ray over the reference, graded by the lab, kills every mutant not listed as equivalent', { timeout: 300_000 }, async () => {
  const run = await mutateLab('deliver-once');
  assert.ok(run.total >= 100, `${run.total} mutants`);
  assert.deepEqual(problemsOf(run, readList('deliver-once')), []);
  assert.equal(run.killed, readList('deliver-once').killed);
});

test('deliver-once: the learner-style mutants, graded by the lab, are all killed but the listed ones', { timeout: 300_000 }, async () => {
  const run = await mutateFamily('deliver-once', 'learner');
  assert.ok(run.total >= 20, `${run.total} mutants`);
  assert.deepEqual(problemsOf(run, readList('deliver-once')), []);
});

// The courier lab's families take minutes in full (./lab mutants --lab courier): here,
// one mutant of each not listed as equivalent, which must fail. A killed courier
// mutant still costs 0 to 50 s (measured at load 15: its verdict comes from the test
// that catches it, after those before it), so one each: about 40 s at that load with
// the engine's start, a third of it on an idle machine. The sample is the id with
// the smallest hash, so it stays put while the list does. The sql family's control
// (the reference as sqlglot renders it, which must pass) is graded by each full run,
// which the checks above ask for whenever the reference or sqlglot changes.
const SAMPLE_PER_FAMILY = 1;
test('courier: a sample of each family, not listed as equivalent, is killed', { timeout: 300_000 }, async () => {
  const lab = 'courier';
  const session = await gradingSession(lab, { checkReference: false });
  const made = familyMutants(lab, session.reference);
  const list = readList(lab);
  const hash = (id) => crypto.createHash('sha256').update(id).digest('hex');
  for (const family of Object.keys(made.families)) {
    const listed = familyList(list, family)?.equivalent ?? [];
    const only = made.families[family].map((m) => m.id).filter((id) => !listed.some((l) => l.id === id))
      .sort((a, b) => hash(a).localeCompare(hash(b))).slice(0, SAMPLE_PER_FAMILY);
    const run = await mutateFamily(lab, family, { session, made, only });
    assert.equal(run.total, only.length);
    assert.deepEqual(run.survivors.map((s) => s.id), [], `${family}: these survive and are not listed as equivalent`);
  }
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
