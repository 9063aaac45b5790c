// The pipe between the coordinator and a sandbox is hostile input (www/grader/README.md,
// "The channel"). A sandbox program that breaks the protocol on purpose
// (fake_sandbox.mjs, run in sandbox.mjs's place inside the same walls) must end
// its own submission with the exact outcome below, and the pool goes on grading.
// Run: cd www && node --test grader/test/channel.test.mjs
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { fileURLToPath } from 'node:url';
import { createGradingPool, INTERFERED } from '../pool.mjs';
import { PARAMS_DEPTH_CAP } from '../frames.mjs';
import { noProcessLeftAfterTests } from '../fixtures/leftovers.mjs';

noProcessLeftAfterTests();

const FAKE = fileURLToPath(new URL('../fixtures/fake_sandbox.mjs', import.meta.url));

// The clock's factor in the first test: wider than the CLI's WALL_FACTOR, because the
// busy sandboxes there share the two cores with the other test file ./lab test runs
// beside this one; at 3 (the default) a busy one that got less than a third of a core
// was ended by the clock, not by its CPU, and the count of stops below was off; at 8,
// with a CPU hog and a real run beside ./lab test (load 8 to 16), it was off again. At
// 15, a busy one needs 4 s of CPU in 60 s: a fifteenth of a core.
const WALL = 15;

// behaviour -> [status, what the message says, lab] (byte-flood has a test of its own)
const CASES = {
  'garbage': ['error', `${INTERFERED}: it sent a frame of 4022250974 bytes`],
  'huge-length': ['error', `${INTERFERED}: it sent a frame of 2147483647 bytes`],
  'not-json': ['error', `${INTERFERED}: it sent a frame that is not JSON`],
  'no-type': ['error', `${INTERFERED}: it sent a frame without a type`],
  'answer-before-asked': ['error', `${INTERFERED}: it did not answer the load`],
  'wrong-op-types': ['error', `${INTERFERED}: it asked for kv_get with arguments of the wrong types`],
  'unknown-op': ['error', `${INTERFERED}: it asked for a world operation this call does not have`],
  'ret-not-text': ['error', `${INTERFERED}: it answered a call with something other than text`],
  'dies-mid-call': ['error', 'Your code ended the grader\'s Python process'],
  'silent': ['fail', 'Stopped: the run took longer than the 4 s limit of CPU time.'],
  'op-flood': ['fail', 'longer than the 4 s limit'],
  'deep-params': ['error', `${INTERFERED}: it sent statement parameters nested deeper than ${PARAMS_DEPTH_CAP}.`, 'courier'],
  // The store's CPU counts: stopped at 4 s of it, not by the clock (below).
  'heavy-sql': ['fail', 'longer than the 4 s limit', 'courier'],
};

test('a sandbox that breaks the protocol ends its own submission, exactly, and the pool goes on', { timeout: 240_000 }, async () => {
  const pool = createGradingPool({ jobs: 2, timeoutS: 4, sandboxScript: FAKE, wallFactor: WALL });
  try {
    await pool.ready;
    const entries = Object.entries(CASES);
    const lines = await Promise.all(entries.map(([how, [, , lab]]) => pool.grade({ source: `# ${how}\n`, lab })));
    entries.forEach(([how, [status, says]], i) => {
      const line = lines[i];
      const text = [line.message ?? '', ...line.tests.map((t) => t.message ?? '')].join('\n');
      assert.equal(line.status, status, `${how}: ${text.slice(0, 300)}`);
      assert.ok(text.includes(says), `${how}: expected "${says}" in: ${text.slice(0, 300)}`);
    });
    // None was ended by the clock: silent, op-flood and heavy-sql by CPU (heavy-sql's
    // is the grading thread's: not counted, the clock would end it too).
    assert.equal(pool.stats.stoppedByClock, 0);
    assert.equal(pool.stats.stoppedByCpu, 3);
    // A sandbox that keeps the protocol and lies (every call "sent", no operation
    // on its world) is graded on what it did: it fails.
    const liar = await pool.grade({ source: '# liar\n' });
    assert.equal(liar.status, 'fail');
    assert.ok(liar.passed < liar.total);
    assert.equal(pool.stats.interfered, 9);
    // Waiting is not running: 6 s asleep, then graded on what it did.
    const late = await pool.grade({ source: '# slow-start\n' });
    assert.equal(late.status, 'fail');
    assert.ok(late.passed < late.total);
    assert.ok(late.tests.every((t) => !/Stopped/.test(t.message ?? '')), JSON.stringify(late).slice(0, 300));
    assert.equal(pool.queued(), 0);
  } finally {
    await pool.close();
  }
});

// CPU is the limit; a run that only waits is ended by the clock, at wallFactor times
// it. In a pool of its own with a short limit: in the pool above, at WALL times 4 s,
// the sleeper held a slot for 60 s of a CI's time.
test('a sandbox that only waits is ended by the clock at wallFactor times its limit', { timeout: 120_000 }, async () => {
  const pool = createGradingPool({ jobs: 1, timeoutS: 1, sandboxScript: FAKE, wallFactor: 3 });
  try {
    await pool.ready;
    const line = await pool.grade({ source: '# asleep\n' });
    const text = [line.message ?? '', ...line.tests.map((t) => t.message ?? '')].join('\n');
    assert.equal(line.status, 'fail', text.slice(0, 300));
    assert.ok(text.includes('Stopped: the run was still going after 3 s (it may wait 3 times its 1 s limit of CPU time).'), text.slice(0, 300));
    assert.equal(pool.stats.stoppedByClock, 1);
    assert.equal(pool.stats.stoppedByCpu, 0);
  } finally {
    await pool.close();
  }
});

test('a sandbox that floods the pipe with valid frames is stopped at the run\'s byte cap', { timeout: 120_000 }, async () => {
  // A limit far away, so that the cap and not the clock ends it.
  const pool = createGradingPool({ jobs: 1, timeoutS: 60, sandboxScript: FAKE });
  try {
    await pool.ready;
    const line = await pool.grade({ source: '# byte-flood\n' });
    assert.equal(line.status, 'error');
    assert.equal(line.message, `${INTERFERED}: it sent more than 64 MB to the grader.`);
  } finally {
    await pool.close();
  }
});
