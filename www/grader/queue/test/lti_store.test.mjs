// The LTI tool's store (grader/lti/store.mjs, issue 41): one contract, both backends,
// the folder's files and the queue's PostgreSQL (a throwaway cluster, as the queue's
// other tests make: about 3 s). Platforms added, changed, listed, removed; a state taken
// once and never after it expired; at most so many logins waiting for their launch; a
// nonce used once, also when two launches race; a launch found until it expires; line
// items; grades added, updated, listed newest last.
// Here, beside the queue's tests, because the PostgreSQL backend needs a cluster; the
// LTI tool itself is tested in grader/test/lti.test.mjs on the file store.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { clusterWith, serverBinDir } from './pg_cluster.mjs';
import { createFileStore, createPgStore } from '../../lti/store.mjs';

const TMP = fs.mkdtempSync(path.join(os.tmpdir(), 'delivery-lab-lti-store-'));
let cluster = null;
let url = null;

before(async () => {
  if (serverBinDir()) ({ cluster, url } = await clusterWith('lti'));
});
after(() => {
  cluster?.close();
  fs.rmSync(TMP, { recursive: true, force: true });
});

const P = (n, extra = {}) => ({
  issuer: `https://lms${n}.example`, clientId: `client-${n}`, deploymentIds: ['d1'], authUrl: `https://lms${n}.example/auth`,
  tokenUrl: `https://lms${n}.example/token`, jwksUrl: `https://lms${n}.example/jwks`, ...extra,
});

async function contract(store) {
  assert.equal(await store.addPlatform(P(1)), 'added');
  assert.equal(await store.addPlatform(P(2)), 'added');
  assert.equal(await store.addPlatform(P(1, { deploymentIds: ['d1', 'd2'] })), 'updated');
  assert.deepEqual(await store.platformsOf('https://lms1.example'), [P(1, { deploymentIds: ['d1', 'd2'] })]);
  assert.equal((await store.listPlatforms()).length, 2);
  assert.equal(await store.removePlatform('https://lms2.example', 'client-2'), true);
  assert.equal(await store.removePlatform('https://lms2.example', 'client-2'), false);
  assert.deepEqual(await store.platformsOf('https://lms2.example'), []);

  const t = 1_000_000;
  assert.equal(await store.putState('s1', { nonce: 'n1', issuer: 'i' }, t + 100, t), true);
  assert.equal(await store.putState('s2', { nonce: 'n2', issuer: 'i' }, t + 100, t), true);
  assert.equal(await store.putState('s3', { nonce: 'n3', issuer: 'i' }, t + 100, t), true);
  assert.equal(await store.putState('s4', { nonce: 'n4', issuer: 'i' }, t + 100, t), false, 'past the live states\' cap (3 here): refused');
  assert.deepEqual(await store.takeState('s1', t), { nonce: 'n1', issuer: 'i' });
  assert.equal(await store.takeState('s1', t), null, 'a state is taken once');
  assert.equal(await store.takeState('s2', t + 100), null, 'an expired state is never taken');
  assert.equal(await store.putState('s5', { nonce: 'n5', issuer: 'i' }, t + 300, t + 100), true, 'the expired ones make room');
  assert.deepEqual(await store.takeState('s5', t + 200), { nonce: 'n5', issuer: 'i' });

  assert.equal(await store.useNonce('i', 'n', t + 100, t), true);
  assert.equal(await store.useNonce('i', 'n', t + 100, t), false);
  assert.equal(await store.useNonce('j', 'n', t + 100, t), true, 'nonces are per issuer');
  const raced = await Promise.all(Array.from({ length: 8 }, () => store.useNonce('i', 'race', t + 100, t)));
  assert.equal(raced.filter(Boolean).length, 1, 'of launches racing with one nonce, one wins');

  await store.putLaunch('L', { lab: 'deliver-once', ags: { scope: ['x'] } }, t + 100, t);
  assert.deepEqual(await store.getLaunch('L', t + 99), { lab: 'deliver-once', ags: { scope: ['x'] } });
  assert.equal(await store.getLaunch('L', t + 100), null);
  assert.equal(await store.getLaunch('nope', t), null);

  assert.equal(await store.getLineItem('k'), null);
  await store.putLineItem('k', 'https://lms1.example/li/1');
  assert.equal(await store.getLineItem('k'), 'https://lms1.example/li/1');

  const a = await store.addGrade({ userId: 'u1', scoreGiven: 3, sent: 'sending' });
  const b = await store.addGrade({ userId: 'u2', scoreGiven: 5, sent: 'sending' });
  await store.updateGrade(a, { sent: 'sent', attempts: 2 });
  const grades = await store.listGrades({ limit: 10 });
  assert.deepEqual(grades.map((g) => [g.id, g.userId, g.sent]), [[a, 'u1', 'sent'], [b, 'u2', 'sending']]);
  assert.equal(grades[0].attempts, 2);
  assert.deepEqual((await store.listGrades({ limit: 1 })).map((g) => g.id), [b], 'the newest');
}

test('the file store keeps the contract; its files are mode 0600', async () => {
  const dir = path.join(TMP, 'files');
  const store = createFileStore(dir, { maxLiveStates: 3 });
  await contract(store);
  await store.close();
  for (const f of fs.readdirSync(dir)) assert.equal(fs.statSync(path.join(dir, f)).mode & 0o777, 0o600, f);
  assert.equal(fs.statSync(dir).mode & 0o777, 0o700);
  // Another process's view (./lab lti grades): read from the files.
  assert.equal((await createFileStore(dir).listGrades()).length, 2);
});

test('the PostgreSQL store keeps the contract', { skip: serverBinDir() ? false : 'no PostgreSQL server binaries' }, async () => {
  const store = await createPgStore(url, { maxLiveStates: 3 });
  try {
    await contract(store);
  } finally {
    await store.close();
  }
});
