// The catalogue of wrong courier solutions (src/courier/mutants.py) and of correct
// ones in other styles (correct.py) as the JS tests read them: each one's source, and
// whether a report's failing tests include the one a mutant names. Shared by courier.test.mjs and grade-mutants.mjs (not a test file itself).
import fs from 'node:fs';
import { execFileSync } from 'node:child_process';

const repo = new URL('../../../../', import.meta.url);
export const REFERENCE = fs.readFileSync(new URL('src/courier/reference.py', repo), 'utf8');

/** `name` of the Python file `url`: data, read by CPython (Pyodide runs learner code only). */
const pythonData = (url, name) => JSON.parse(execFileSync('python3', ['-c',
  'import json, runpy, sys; print(json.dumps(runpy.run_path(sys.argv[1])[sys.argv[2]]))',
  url.pathname, name]));

/** The catalogue of wrong solutions, src/courier/mutants.py, less the changes it keeps as
 *  `not_a_mistake` (no world the lab can reach tells them apart from the reference). */
export const loadMutants = () => pythonData(new URL('src/courier/mutants.py', repo), 'MUTANTS')
  .filter((m) => !m.not_a_mistake);

/** The correct solutions written in other styles, correct.py here (same edits). */
export const loadCorrect = () => pythonData(new URL('correct.py', import.meta.url), 'CORRECT');

/** `{ source }` of mutant (or style) `m` built from the reference, or `{ missing }`, the first
 *  replacement whose text is not there. */
export function applyMutant(m) {
  let source = REFERENCE;
  for (const [from, to] of m.replace) {
    if (!source.includes(from)) return { missing: from };
    source = source.replace(from, to);
  }
  return { source };
}

/** Whether the failing test `name` is the one `caughtBy` names: the same name, or
 *  one it begins, up to a word's end ("differential: claim" names "differential:
 *  claim over 200 worlds", not "differential: claims"). */
export function names(caughtBy, name) {
  return name === caughtBy
    || (name.startsWith(caughtBy) && !/[\w-]/.test(name[caughtBy.length]));
}

/** The names of the tests of report `r` that did not pass. */
export const failing = (r) => r.tests.filter((t) => t.status !== 'pass').map((t) => t.name);
