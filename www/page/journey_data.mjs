// Each lab's journey (src/<module>/journey.toml: what it practises, its Predict
// question, hints per task, and the courier's "Your turn"), read and checked for
// build.mjs, which writes it into build.json's `course` beside the lab's own facts
// (title, level, minutes, XP, tasks: the engine's `lab(id)`), in the engine's
// course order. A malformed file stops the build, naming the file and the field.
import fs from 'node:fs';
import path from 'node:path';
import { parse } from 'smol-toml';

export class JourneyError extends Error {}

/** The lab's folder: its module, the id with `_` (as build.rs's case files find it). */
export const journeyPath = (srcDir, labId) => path.join(srcDir, labId.replace(/-/g, '_'), 'journey.toml');

const isText = (v) => typeof v === 'string' && v.trim() !== '';

function checkKeys(obj, allowed, where, fail) {
  for (const k of Object.keys(obj)) if (!allowed.includes(k)) fail(`${where}${k}: unknown field (fields: ${allowed.join(', ')})`);
}

function text(obj, key, where, fail) {
  if (!isText(obj[key])) fail(`${where}${key}: must be a non-empty string`);
  return obj[key];
}

function texts(obj, key, where, fail, { min = 1, max = Infinity } = {}) {
  const v = obj[key];
  if (!Array.isArray(v) || v.length < min || v.length > max || !v.every(isText)) {
    fail(`${where}${key}: must be a list of ${min}${max === Infinity ? ' or more' : ` to ${max}`} non-empty strings`);
  }
  return v;
}

/** A multiple-choice question: question, answers (2 to 5), correct (from 1), explanation. */
function question(obj, where, fail, extra = []) {
  if (!obj || typeof obj !== 'object' || Array.isArray(obj)) fail(`${where.replace(/\.$/, '')}: must be a table`);
  checkKeys(obj, ['question', 'answers', 'correct', 'explanation', ...extra], where, fail);
  const answers = texts(obj, 'answers', where, fail, { min: 2, max: 5 });
  if (!Number.isInteger(obj.correct) || obj.correct < 1 || obj.correct > answers.length) {
    fail(`${where}correct: must be the number of one of the ${answers.length} answers (from 1)`);
  }
  return {
    question: text(obj, 'question', where, fail),
    answers,
    correct: obj.correct - 1, // from 0 in build.json
    explanation: text(obj, 'explanation', where, fail),
  };
}

/**
 * Checks a journey (TOML text) against its lab (the engine's `lab(id)` JSON: its
 * tasks and tests) and returns it as build.json carries it.
 */
export function checkJourney(source, lab, file = 'journey.toml') {
  const fail = (m) => { throw new JourneyError(`${file}: ${m}`); };
  let raw;
  try {
    raw = parse(source);
  } catch (e) {
    fail(`not TOML (${e.message.split('\n')[0]})`);
  }
  checkKeys(raw, ['practises', 'predict', 'hints', 'your_turn'], '', fail);
  const practises = texts(raw, 'practises', '', fail);
  const predict = question(raw.predict, 'predict.', fail, ['section']);
  if (raw.predict.section !== undefined) {
    // A section of the instructions that gives the answer away: folded until the explanation.
    const section = text(raw.predict, 'section', 'predict.', fail);
    const headings = [...lab.instructions_md.matchAll(/^#{1,6} +(.+?) *#* *$/gm)].map((m) => m[1]);
    if (!headings.includes(section)) fail(`predict.section: "${section}" is no heading of the lab's instructions`);
    predict.section = section;
  }
  const hints = (raw.hints ?? []).map((h, i) => {
    const where = `hints[${i}].`;
    checkKeys(h, ['task', 'hints'], where, fail);
    const task = lab.tasks.indexOf(text(h, 'task', where, fail));
    if (task < 0) fail(`${where}task: "${h.task}" is not one of the lab's tasks (${lab.tasks.map((t) => `"${t}"`).join(', ')})`);
    return { task, hints: texts(h, 'hints', where, fail) };
  });
  const seen = new Set();
  for (const [i, h] of hints.entries()) {
    if (seen.has(h.task)) fail(`hints[${i}].task: "${lab.tasks[h.task]}" has hints already`);
    seen.add(h.task);
  }
  let yourTurn = null;
  if (raw.your_turn !== undefined) {
    const y = raw.your_turn;
    const where = 'your_turn.';
    const q = question(y, where, fail, ['test', 'baseline', 'patterns']);
    const test = text(y, 'test', where, fail);
    const t = lab.tests.find((x) => x.name === test);
    if (!t) fail(`${where}test: "${test}" is not one of the lab's tests`);
    if (t.kind !== 'example') fail(`${where}test: "${test}" is a hidden test; its figure never reaches the page`);
    if (!Array.isArray(y.patterns) || y.patterns.length < 2) fail(`${where}patterns: must list two or more patterns`);
    const patterns = y.patterns.map((p, i) => {
      const w = `${where}patterns[${i}].`;
      checkKeys(p, ['id', 'label', 'group'], w, fail);
      if (!/^[a-z][a-z0-9-]*$/.test(p.id ?? '')) fail(`${w}id: must be a short lowercase name`);
      return { id: p.id, label: text(p, 'label', w, fail), group: text(p, 'group', w, fail) };
    });
    yourTurn = { ...q, test, baseline: text(y, 'baseline', where, fail), patterns };
  }
  return { practises, predict, hints, yourTurn };
}

/** The course, in the engine's order: each lab's facts from its `lab(id)` and its journey. */
export function courseOf(labs, srcDir) {
  return labs.map((lab) => {
    const file = journeyPath(srcDir, lab.id);
    if (!fs.existsSync(file)) throw new JourneyError(`${file}: missing (every lab has one: README.md, "Adding a lab")`);
    const journey = checkJourney(fs.readFileSync(file, 'utf8'), lab, path.relative(path.join(srcDir, '..'), file));
    return {
      id: lab.id, title: lab.title, level: lab.level, minutes: lab.minutes, xp: lab.xp, tasks: lab.tasks, ...journey,
    };
  });
}
