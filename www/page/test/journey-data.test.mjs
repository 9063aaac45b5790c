// Each lab's journey.toml as build.mjs reads it (page/journey_data.mjs): the labs' own
// files pass against the engine's lab(id), and each malformed file stops the build with
// its exact message. No browser. Run: node --test page/test/journey-data.test.mjs
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { checkJourney, courseOf, journeyPath, JourneyError } from '../journey_data.mjs';
import { loadGrader } from '../../host/node_host.mjs';

const SRC = fileURLToPath(new URL('../../../src/', import.meta.url));

async function engineLabs() {
  const { Grader } = await loadGrader();
  const g = new Grader();
  return JSON.parse(g.labs()).map((l) => JSON.parse(g.lab(l.id)));
}

test('every lab of the engine has a journey, read in the engine\'s order', async () => {
  const labs = await engineLabs();
  const course = courseOf(labs, SRC);
  assert.deepEqual(course.map((c) => c.id), labs.map((l) => l.id));
  for (const c of course) {
    assert.ok(c.practises.length > 0 && c.predict.answers.length >= 2);
    // Every task has its hints, and each names one of the lab's tasks by its heading.
    assert.deepEqual(c.hints.map((h) => h.task).sort((a, b) => a - b), c.tasks.map((_, i) => i));
  }
  assert.equal(course.find((c) => c.id === 'courier').yourTurn.patterns.map((p) => p.id).join(), 'spread,burst');
});

const LAB = {
  instructions_md: '# The lab\n\n## One question\n\nIts answer.\n\n## `f(x)`\n',
  tasks: ['`f(x)`', '`g(y)`'],
  tests: [{ name: 'an example', kind: 'example' }, { name: 'a hidden one', kind: 'hidden' }],
};
const GOOD = `practises = ["one thing"]
[predict]
question = "Q?"
answers = ["a", "b"]
correct = 2
explanation = "Because."
[[hints]]
task = "\`f(x)\`"
hints = ["h1", "h2"]
`;
const YOURS = `
[your_turn]
test = "an example"
baseline = "base"
question = "Q2?"
answers = ["a", "b", "c"]
correct = 1
explanation = "E."
[[your_turn.patterns]]
id = "one"
label = "One"
group = "g1"
[[your_turn.patterns]]
id = "two"
label = "Two"
group = "g2"
`;

test('a good journey is read as build.json carries it (answers counted from 0)', () => {
  const j = checkJourney(GOOD + YOURS, LAB);
  assert.deepEqual(j.predict, { question: 'Q?', answers: ['a', 'b'], correct: 1, explanation: 'Because.' });
  assert.deepEqual(j.hints, [{ task: 0, hints: ['h1', 'h2'] }]);
  assert.equal(j.yourTurn.correct, 0);
  assert.deepEqual(j.yourTurn.patterns.map((p) => p.group), ['g1', 'g2']);
  assert.equal(checkJourney(GOOD, LAB).yourTurn, null);
  assert.equal(checkJourney(GOOD.replace('[predict]', '[predict]\nsection = "One question"'), LAB).predict.section, 'One question');
});

const BAD = [
  ['not TOML', 'practises = [', /^lab\/journey\.toml: not TOML \(/],
  ['an unknown field', `next = "lab-3"\n${GOOD}`, 'lab/journey.toml: next: unknown field (fields: practises, predict, hints, your_turn)'],
  ['no practises', GOOD.replace('practises = ["one thing"]', 'practises = []'), 'lab/journey.toml: practises: must be a list of 1 or more non-empty strings'],
  ['no predict', GOOD.slice(0, GOOD.indexOf('[predict]')) + GOOD.slice(GOOD.indexOf('[[hints]]')), 'lab/journey.toml: predict: must be a table'],
  ['a correct answer out of range', GOOD.replace('correct = 2', 'correct = 3'), 'lab/journey.toml: predict.correct: must be the number of one of the 2 answers (from 1)'],
  ['a correct answer counted from 0', GOOD.replace('correct = 2', 'correct = 0'), 'lab/journey.toml: predict.correct: must be the number of one of the 2 answers (from 1)'],
  ['one answer only', GOOD.replace('answers = ["a", "b"]', 'answers = ["a"]'), 'lab/journey.toml: predict.answers: must be a list of 2 to 5 non-empty strings'],
  ['an empty explanation', GOOD.replace('"Because."', '" "'), 'lab/journey.toml: predict.explanation: must be a non-empty string'],
  ['hints for a task the lab lacks', GOOD.replace('task = "`f(x)`"', 'task = "f(x)"'), 'lab/journey.toml: hints[0].task: "f(x)" is not one of the lab\'s tasks ("`f(x)`", "`g(y)`")'],
  ['a task\'s hints twice', `${GOOD}[[hints]]\ntask = "\`f(x)\`"\nhints = ["again"]\n`, 'lab/journey.toml: hints[1].task: "`f(x)`" has hints already'],
  ['Your turn on a hidden test', GOOD + YOURS.replace('test = "an example"', 'test = "a hidden one"'), 'lab/journey.toml: your_turn.test: "a hidden one" is a hidden test; its figure never reaches the page'],
  ['Your turn on no test', GOOD + YOURS.replace('test = "an example"', 'test = "nope"'), 'lab/journey.toml: your_turn.test: "nope" is not one of the lab\'s tests'],
  ['a folded section that is no heading', GOOD.replace('[predict]', '[predict]\nsection = "Two questions"'), 'lab/journey.toml: predict.section: "Two questions" is no heading of the lab\'s instructions'],
  ['a pattern without an id', GOOD + YOURS.replace('id = "two"', 'id = "Two!"'), 'lab/journey.toml: your_turn.patterns[1].id: must be a short lowercase name'],
];

for (const [what, source, message] of BAD) {
  test(`a journey with ${what} stops the build, named`, () => {
    assert.throws(() => checkJourney(source, LAB, 'lab/journey.toml'), (e) => {
      assert.ok(e instanceof JourneyError);
      if (message instanceof RegExp) assert.match(e.message, message);
      else assert.equal(e.message, message);
      return true;
    });
  });
}

test('a lab without a journey.toml stops the build, named', () => {
  const src = fs.mkdtempSync(path.join(os.tmpdir(), 'delivery-lab-journey-src-'));
  try {
    assert.throws(() => courseOf([{ id: 'new-lab', ...LAB }], src),
      { name: 'Error', message: `${journeyPath(src, 'new-lab')}: missing (every lab has one: README.md, "Adding a lab")` });
    assert.equal(journeyPath(src, 'new-lab'), path.join(src, 'new_lab', 'journey.toml'));
  } finally {
    fs.rmSync(src, { recursive: true, force: true });
  }
});
