// The pipe between the coordinator and a sandbox is hostile input (www/cli/README.md,
// "The channel"). A sandbox program that breaks the protocol on purpose
// (fake_sandbox.mjs, run in sandbox.mjs's place inside the same walls) must end
// its own submission with the exact outcome below, and the pool goes on grading.
// Run: cd www && node --test cli/test/channel.test.mjs
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { fileURLToPath } from 'node:url';
import { createGradingPool, INTERFERED } from '../pool.mjs';

const FAKE = fileURLToPath(new URL('../fixtures/fake_sandbox.mjs', import.meta.url));

// behaviour -> [status, what the message says] (byte-flood has a test of its own)
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
  'silent': ['fail', 'longer than the 4 s limit'],
  'op-flood': ['fail', 'longer than the 4 s limit'],
};

test('a sandbox that breaks the protocol ends its own submission, exactly, and the pool goes on', { timeout: 120_000 }, async () => {
  const pool = createGradingPool({ jobs: 2, timeoutS: 4, sandboxScript: FAKE });
  try {
    await pool.ready;
    const entries = Object.entries(CASES);
    const lines = await Promise.all(entries.map(([how]) => pool.grade({ source: `# ${how}\n` }).then(JSON.parse)));
    entries.forEach(([how, [status, says]], i) => {
      const line = lines[i];
      const text = [line.message ?? '', ...line.tests.map((t) => t.message ?? '')].join('\n');
      assert.equal(line.status, status, `${how}: ${text.slice(0, 300)}`);
      assert.ok(text.includes(says), `${how}: expected "${says}" in: ${text.slice(0, 300)}`);
    });
    // A sandbox that keeps the protocol and lies (every call "sent", no operation
    // on its world) is graded on what it did: it fails.
    const liar = JSON.parse(await pool.grade({ source: '# liar\n' }));
    assert.equal(liar.status, 'fail');
    assert.ok(liar.passed < liar.total);
    assert.equal(pool.stats.interfered, 8);
    assert.equal(pool.queued(), 0);
  } finally {
    await pool.close();
  }
});

test('a sandbox that floods the pipe with valid frames is stopped at the run\'s byte cap', { timeout: 120_000 }, async () => {
  // A limit far away, so that the cap and not the clock ends it.
  const pool = createGradingPool({ jobs: 1, timeoutS: 60, sandboxScript: FAKE });
  try {
    await pool.ready;
    const line = JSON.parse(await pool.grade({ source: '# byte-flood\n' }));
    assert.equal(line.status, 'error');
    assert.equal(line.message, `${INTERFERED}: it sent more than 64 MB to the grader.`);
  } finally {
    await pool.close();
  }
});
