// Issue 29 under `./lab grade`: what the courier lab fails must be wrong, and say
// why. The reference passes, and so does the reference with a float wait; a lease
// written as a duration is a fail naming the rule (it used to flood the pipe past
// 64 MB and be reported as interfering); a duplicate webhook that returns with its
// transaction open stops the chaos run naming the call; INSERT OR IGNORE, which the
// real run's PostgreSQL refuses, fails naming the portable form.
// Run: node --test www/grader/test/courier_correct.test.mjs   (needs www/pkg)
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { noProcessLeftAfterTests } from '../fixtures/leftovers.mjs';

noProcessLeftAfterTests();

const WWW = fileURLToPath(new URL('../../', import.meta.url));
const GRADE = path.join(WWW, 'grader/grade.mjs');
const REF = fs.readFileSync(path.join(WWW, '../src/courier/reference.py'), 'utf8');
const CHAOS = 'chaos run: 2,000 actions, 200 kills, a database restart';

/** `REF` with each [old, new] replaced, every old there exactly `times` times. */
function edit(pairs) {
  let s = REF;
  for (const [old, replacement, times = 1] of pairs) {
    assert.equal(s.split(old).length - 1, times, old);
    s = s.split(old).join(replacement);
  }
  return s;
}

const FILES = {
  'a_reference.py': REF,
  'b_float_wait.py': edit([['return ("wait", cfg.recheck_ms)', 'return ("wait", float(cfg.recheck_ms))', 2]]),
  'c_lease_duration.py': edit([['(worker, now_ms + cfg.lease_ms, action_id, seen_epoch, now_ms)', '(worker, cfg.lease_ms, action_id, seen_epoch, now_ms)']]),
  'd_webhook_left_open.py': edit([['        if cur.rowcount == 0:\n            db.rollback()\n            return None', '        if cur.rowcount == 0:\n            return None']]),
  'e_insert_or_ignore.py': edit([
    ['"INSERT INTO outbox (action_id, idem_key) VALUES (?, ?) ON CONFLICT DO NOTHING"', '"INSERT OR IGNORE INTO outbox (action_id, idem_key) VALUES (?, ?)"'],
    ['"INSERT INTO webhook_events (event_id) VALUES (?) ON CONFLICT DO NOTHING"', '"INSERT OR IGNORE INTO webhook_events (event_id) VALUES (?)"'],
  ]),
};

test('the courier lab under ./lab grade: correct styles pass, and each logic bug is a fail that says why', { timeout: 900_000 }, async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'delivery-lab-cli-courier-correct-'));
  for (const [name, text] of Object.entries(FILES)) fs.writeFileSync(path.join(dir, name), text);
  const r = await new Promise((resolve) => {
    execFile(process.execPath, [GRADE, '--lab', 'courier', '--jobs', '2', '--format', 'json', dir], { maxBuffer: 1 << 26 },
      (e, stdout, stderr) => resolve({ code: e ? e.code : 0, stdout, stderr }));
  });
  fs.rmSync(dir, { recursive: true, force: true });
  assert.equal(r.code, 1, r.stderr);
  const lines = Object.fromEntries(r.stdout.trim().split('\n').map((l) => JSON.parse(l)).map((l) => [path.basename(l.file), l]));
  assert.deepEqual(Object.entries(lines).map(([f, l]) => [f, l.status]), [
    ['a_reference.py', 'pass'], ['b_float_wait.py', 'pass'], ['c_lease_duration.py', 'fail'],
    ['d_webhook_left_open.py', 'fail'], ['e_insert_or_ignore.py', 'fail']]);
  const test = (file, name) => lines[file].tests.find((t) => t.name === name);

  // Every example test that fails says why (hidden ones show their name and status only).
  for (const l of Object.values(lines)) {
    for (const t of l.tests.filter((x) => x.status !== 'pass' && x.kind === 'example')) {
      assert.ok(t.message && t.message.trim(), `${l.file}: ${t.name}`);
    }
  }

  // A lease that is a duration: a fail with the rule, no interference.
  const lease = test('c_lease_duration.py', CHAOS);
  assert.equal(lease.status, 'fail');
  assert.match(lease.message, /^The chaos run stopped: at \d+ ms of lab time, `claim\(db, "w[\d.]+", \d+, cfg\)` took action \d+ from w[\d.]+, which was alive and working on it, and set its lease_until_ms to 30000\. A lease is a time, not a duration: lease_until_ms = now_ms \+ cfg\.lease_ms/);
  assert.match(test('c_lease_duration.py', 'claim serves the store that waited longest').message, /lease_until_ms should be 40000, is 30000/);

  // A duplicate webhook that returns with its transaction open: named, at the call.
  const open = test('d_webhook_left_open.py', CHAOS);
  assert.equal(open.status, 'fail');
  assert.match(open.message, /^The chaos run stopped: at \d+ ms of lab time, `on_webhook\(db, event\(event_id="evt-\d+", [^`]*\)\)`: on_webhook returned with its transaction still open, so the lab rolled it back/);
  assert.equal(test('d_webhook_left_open.py', 'a duplicate webhook is a no-op').status, 'fail');

  // INSERT OR IGNORE: the portable form is named, in the example tests and the chaos run.
  const PORTABLE = 'INSERT OR IGNORE is SQL that only SQLite accepts; the real run (./lab real) uses PostgreSQL, which refuses it or reads it otherwise. Write INSERT ... ON CONFLICT DO NOTHING: both run that';
  const hook = test('e_insert_or_ignore.py', "a webhook's status is merged and its event recorded");
  assert.equal(hook.status, 'fail');
  assert.ok(hook.message.startsWith(`on_webhook: ${PORTABLE}`), hook.message);
  const intent = test('e_insert_or_ignore.py', 'write_intent records the outbox row with a stable key');
  assert.ok(intent.message.startsWith(`write_intent: ${PORTABLE}`), intent.message);
  assert.ok(test('e_insert_or_ignore.py', CHAOS).message.includes(PORTABLE));
});
