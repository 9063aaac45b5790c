// The benchmark's anchor stays an honest grader (bench/anchor/README.md): through
// benchPytest, the reference passes every one of lab 1's cases, and the starter and a
// mutant of the bench's mix fail. Needs the project venv with pytest: ./lab test
// makes it (need_venv) before it runs these tests.
// Run: cd www && node --test bench/test/anchor.test.mjs
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { anchorAvailable, benchPytest, REPO, VENV_PYTHON } from '../anchor.mjs';
import { noProcessLeftAfterTests } from '../../grader/fixtures/leftovers.mjs';

noProcessLeftAfterTests();

const read = (p) => fs.readFileSync(path.join(REPO, p), 'utf8');

/** Every [[case]] of lab 1's example and hidden case files: the anchor's tests. */
function caseCount() {
  let n = 0;
  for (const dir of ['src/deliver_once/examples', 'hidden-tests/deliver-once']) {
    for (const f of fs.readdirSync(path.join(REPO, dir)).filter((f) => f.endsWith('.toml'))) {
      n += (read(path.join(dir, f)).match(/^\[\[case\]\]/gm) || []).length;
    }
  }
  return n;
}

test('the pytest anchor passes the reference and fails the starter and a mutant', { timeout: 120_000 }, async () => {
  assert.ok(anchorAvailable(), `${VENV_PYTHON} is missing: ./lab test makes the venv (need_venv in ./lab)`);
  const reference = read('src/deliver_once/reference.py');
  const noNx = 'ttl=policy.claim_ttl_s, nx=True)';
  assert.ok(reference.includes(noNx), 'the mutant no longer applies to reference.py');
  const sources = [reference, read('src/deliver_once/starter.py'), reference.replace(noNx, 'ttl=policy.claim_ttl_s)')];
  const { results, perS, wallS } = await benchPytest(sources, { jobs: 2 });
  const [ref, starter, mutant] = results;
  const n = caseCount();
  assert.ok(n >= 20, `only ${n} cases found`);
  const explain = (r) => `${r.summary}\n${r.output.slice(-3000)}`;

  assert.equal(ref.status, 'pass', explain(ref));
  assert.equal(ref.passed, n, `the reference should pass all ${n} cases: ${explain(ref)}`);

  assert.equal(starter.status, 'fail', explain(starter));
  assert.equal(starter.passed, 0, explain(starter));
  assert.equal(starter.failed, n, explain(starter));

  assert.equal(mutant.status, 'fail', explain(mutant));
  assert.ok(mutant.failed > 0 && mutant.passed > 0, explain(mutant));
  assert.match(mutant.output, /nx=True/, 'the failure names the missing nx=True');

  assert.ok(perS > 0 && wallS > 0);
});
