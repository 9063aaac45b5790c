// The catalogue of wrong courier solutions (src/courier/mutants.py) as the JS tests
// read it: each mutant's source, and whether a report's failing tests include the one
// it names. Shared by courier.test.mjs and grade-mutants.mjs (not a test file itself).
import fs from 'node:fs';
import { execFileSync } from 'node:child_process';

const repo = new URL('../../../../', import.meta.url);
export const REFERENCE = fs.readFileSync(new URL('src/courier/reference.py', repo), 'utf8');

/** The catalogue: Python data, read by CPython (Pyodide runs learner code only). */
export function loadMutants() {
  return JSON.parse(execFileSync('python3', ['-c',
    'import json, runpy, sys; print(json.dumps(runpy.run_path(sys.argv[1])["MUTANTS"]))',
    new URL('src/courier/mutants.py', repo).pathname]));
}

/** `{ source }` of mutant `m` built from the reference, or `{ missing }`, the first
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
