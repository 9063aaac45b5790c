// The grading CLI's interpreter snapshot is made once per build (snapshot.mjs,
// issue 39): a pool restores the build's when it is its grader's, and one that meets
// another build's (or none) says so and makes its own for its run, never grading with
// a snapshot of another build. About 10 s: one pool makes its snapshot.
// Run: cd www && node --test grader/test/snapshot.test.mjs   (needs ./lab build)
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createGradingPool } from '../pool.mjs';
import { codeCacheName, complete, fits, FLAVOURS, KEY_FILE, nativesFit, SNAPSHOT_DIR, snapshotFiles, snapshotKey } from '../snapshot.mjs';
import { NATIVES } from '../fork_server.mjs';
import { loadGrader } from '../../host/node_host.mjs';
import { noProcessLeftAfterTests } from '../fixtures/leftovers.mjs';

noProcessLeftAfterTests();

const LIMIT = { timeout: 120_000 };
const lab = JSON.parse(new (await loadGrader()).Grader().lab('deliver-once'));

test('the build\'s snapshot is its grader\'s: every file there, read-only, its key this build\'s', LIMIT, () => {
  assert.ok(complete(SNAPSHOT_DIR), `${SNAPSHOT_DIR} is not this build's: ./lab build makes it`);
  const key = JSON.parse(fs.readFileSync(path.join(SNAPSHOT_DIR, KEY_FILE), 'utf8'));
  assert.equal(key.snapshot, snapshotKey());
  // The fork server's natives too, unless this machine could not make them (key.natives null).
  const natives = key.natives === null ? [] : Object.values(NATIVES);
  if (key.natives !== null) assert.ok(nativesFit(SNAPSHOT_DIR), 'the natives are this build\'s');
  const names = [...snapshotFiles(), ...FLAVOURS.map(({ jobs, tierUp }) => codeCacheName(jobs, tierUp)), ...natives, KEY_FILE];
  assert.deepEqual(fs.readdirSync(SNAPSHOT_DIR).sort(), names.sort());
  for (const name of names) assert.equal(fs.statSync(path.join(SNAPSHOT_DIR, name)).mode & 0o222, 0, `${name} is writable`);
});

test('a snapshot of another build, or none, does not fit, and says why', LIMIT, () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'delivery-lab-snapshot-'));
  try {
    assert.deepEqual(fits(dir, null, 1), { snapshot: false, codeCache: false, why: `${dir} holds no snapshot` });
    for (const f of fs.readdirSync(SNAPSHOT_DIR)) fs.copyFileSync(path.join(SNAPSHOT_DIR, f), path.join(dir, f));
    assert.equal(fits(dir, null, 2, true).codeCache, true);
    // Another grader (one byte of its key's inputs changed): its key differs.
    const key = JSON.parse(fs.readFileSync(path.join(dir, KEY_FILE), 'utf8'));
    fs.chmodSync(path.join(dir, KEY_FILE), 0o644);
    fs.writeFileSync(path.join(dir, KEY_FILE), JSON.stringify({ ...key, snapshot: key.snapshot.replace(/^./, (c) => (c === '0' ? '1' : '0')) }));
    assert.deepEqual(fits(dir, null, 1), { snapshot: false, codeCache: false, why: `the snapshot in ${dir} was made for another build` });
    // Another Node, or other flags: the snapshot fits, its code cache does not.
    fs.writeFileSync(path.join(dir, KEY_FILE), JSON.stringify({ ...key, codeCaches: {} }));
    const f = fits(dir, null, 1);
    assert.equal(f.snapshot, true);
    assert.equal(f.codeCache, false);
    assert.match(f.why, /code cache was made for another Node or other flags/);
    assert.equal(complete(dir), false);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('a pool restores the build\'s snapshot without a word; one that meets none makes its own, says so, and grades the same', LIMIT, async () => {
  const empty = fs.mkdtempSync(path.join(os.tmpdir(), 'delivery-lab-no-snapshot-'));
  try {
    const lines = {};
    for (const [name, snapshotDir] of [['build', SNAPSHOT_DIR], ['none', empty]]) {
      const warnings = [];
      const pool = createGradingPool({ jobs: 1, snapshotDir, onWarning: (m) => warnings.push(m) });
      try {
        lines[name] = await pool.grade({ source: lab.reference_py, seed: 1, hidden: { seed: 5, statuses: 'each' } });
      } finally {
        await pool.close();
      }
      if (name === 'build') assert.deepEqual(warnings, []);
      else assert.deepEqual(warnings, [`${empty} holds no snapshot: made again for this run (./lab build makes it once)`]);
    }
    assert.equal(lines.build.status, 'pass');
    const strip = (l) => ({ ...l, duration_ms: 0 });
    assert.deepEqual(strip(lines.none), strip(lines.build));
  } finally {
    fs.rmSync(empty, { recursive: true, force: true });
  }
});
