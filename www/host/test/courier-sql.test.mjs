// Issue 29: the courier store refuses SQL that only SQLite accepts (the real run,
// `./lab real`, runs the same file on PostgreSQL), before it runs, naming the form
// both accept; the refusal is the store's own record, so the call fails by name
// whatever the learner's code does with the exception. And a call's end: a
// transaction left open by a return is a typed failure, one left by a raise is
// rolled back quietly (the raise is the call's error).
// Run: node --test host/test/courier-sql.test.mjs
import { test, before } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { courierStore } from './courier-store-fixture.mjs';

let py;
before(async () => {
  let pyodide;
  ({ pyodide, py } = await courierStore());
  pyodide.globals.set('REFERENCE', fs.readFileSync(new URL('../../../src/courier/reference.py', import.meta.url), 'utf8'));
  pyodide.runPython(`
import re

def attempt(sql, remote):
    fresh_store()
    db, _, _ = learner_db(remote, piece="on_webhook")
    try:
        db.execute(sql, (1,) * sql.count("?")).fetchall()
        db.commit()
        r = {"ran": True}
    except BaseException as e:
        r = {"raised": type(e).__name__, "message": str(e)}
    r["end"] = json.loads((s.store_end() if remote else s._store.end("w1", "on_webhook")) or "null")
    return json.dumps(r)
`);
});

// Each SQLite-only form, what the message names, and the form both accept.
const SQLITE_ONLY = [
  ['INSERT OR IGNORE INTO webhook_events (event_id) VALUES (?)', 'INSERT OR IGNORE', 'INSERT ... ON CONFLICT DO NOTHING'],
  ['insert or replace into stores (store, last_served_ms) values (?, 5)', 'INSERT OR REPLACE', 'INSERT ... ON CONFLICT (column) DO UPDATE SET column = excluded.column'],
  ['REPLACE INTO stores (store, last_served_ms) VALUES (?, 5)', 'REPLACE INTO', 'ON CONFLICT (column) DO UPDATE'],
  ["INSERT INTO stores (store) VALUES ('s1') ON CONFLICT DO UPDATE SET last_served_ms = ?", 'ON CONFLICT DO UPDATE with no conflict target', 'ON CONFLICT (column) DO UPDATE'],
  ['UPDATE OR IGNORE stores SET last_served_ms = ?', 'UPDATE OR IGNORE', 'a plain UPDATE'],
  ['SELECT * FROM actions WHERE id = ?1', 'the parameter ?1', '? parameters'],
  ['SELECT * FROM actions WHERE id = :id', 'the parameter :id', '? parameters'],
  ['SELECT * FROM actions WHERE id == ?', '==', 'Write =:'],
  ['SELECT * FROM actions WHERE owner IS ?', 'IS between two values', 'IS NULL'],
  ['SELECT ifnull(owner, ?) FROM actions', 'ifnull()', 'COALESCE(a, b)'],
  ['SELECT max(lease_until_ms, ?) FROM actions', 'max(a, b) of two values', 'CASE WHEN'],
  ["SELECT datetime('now') WHERE ? = 1", 'datetime()', 'now_ms'],
  ['SELECT rowid FROM actions WHERE id = ?', 'rowid', "the table's own key column"],
  ['SELECT * FROM actions LIMIT ?, 1', 'LIMIT offset, count', 'LIMIT count OFFSET offset'],
  ['SELECT `id` FROM actions WHERE id = ?', 'the quoted name `id`', 'double quotes'],
  ["SELECT 'a' GLOB ?", 'GLOB', 'LIKE'],
];

// Portable statements (the reference's own shapes among them) that must still run.
const PORTABLE = [
  'INSERT INTO webhook_events (event_id) VALUES (?) ON CONFLICT DO NOTHING',
  "INSERT INTO stores (store, last_served_ms) VALUES ('s1', ?) ON CONFLICT (store) DO UPDATE SET last_served_ms = excluded.last_served_ms",
  "SELECT COALESCE(owner, 'x') || ' ' || ?, max(epoch), CASE WHEN 1 IS NULL THEN 0 ELSE 1 END FROM actions WHERE owner IS NOT NULL",
  "SELECT 'INSERT OR IGNORE == rowid' AS text -- REPLACE INTO :a @b\nWHERE ? = 1",
  'WITH x AS (SELECT id FROM actions LIMIT 1), y AS (SELECT 1 AS one) SELECT * FROM x, y WHERE ? = 1',
  "SELECT replace(body, 'a', ?) FROM actions LIMIT 1 OFFSET 0",
];

for (const remote of [false, true]) {
  const port = remote ? 'remote port' : 'local port';

  test(`${port}: SQLite-only SQL is refused before it runs, naming the form both accept; the call fails by name`, () => {
    for (const [sql, what, portable] of SQLITE_ONLY) {
      const r = py(`attempt(${JSON.stringify(sql)}, ${remote ? 'True' : 'False'})`);
      assert.equal(r.raised, 'NotSupportedError', sql);
      assert.ok(r.message.startsWith(`${what} is SQL that only SQLite accepts; the real run (./lab real) uses PostgreSQL`), `${sql}: ${r.message}`);
      assert.ok(r.message.includes(portable), `${sql}: ${r.message}`);
      assert.deepEqual([r.end.error.kind, r.end.error.function, r.end.error.rule], ['refused', 'on_webhook', 'sqlite-only'], sql);
      assert.equal(r.end.error.message, `on_webhook: ${r.message}`, sql);
    }
  });

  test(`${port}: portable SQL runs, and the call ends with no verdict`, () => {
    for (const sql of PORTABLE) {
      assert.deepEqual(py(`attempt(${JSON.stringify(sql)}, ${remote ? 'True' : 'False'})`), { ran: true, end: null }, sql);
    }
  });

  test(`${port}: a double-quoted "string" is a name, as in PostgreSQL`, () => {
    const r = py(`attempt('SELECT * FROM actions WHERE state = "pending" AND ? = 1', ${remote ? 'True' : 'False'})`);
    assert.deepEqual({ ...r, message: r.message.split(':')[0] }, { raised: 'OperationalError', message: 'no such column', end: null });
  });
}

test("every statement of reference.py runs on both: none is refused", () => {
  const found = py(`
stmts = re.findall(r'"""(.*?)"""|"((?:INSERT|SELECT|UPDATE|DELETE)[^"]*)"', REFERENCE, re.S)
json.dumps([[t, s.sqlite_only(t)] for t in (a or c for a, c in stmts)])
`);
  assert.ok(found.length >= 12, `${found.length} statements`);
  assert.deepEqual(found.filter(([, f]) => f !== null), []);
});

test('the refusal stands when the code swallows the exception, and a raise leaves nothing open', () => {
  const r = py(`
fresh_store()
db, _, _ = learner_db(False, piece="on_webhook")
try:
    db.execute("INSERT OR IGNORE INTO webhook_events (event_id) VALUES ('e1')")
except Exception:
    pass
swallowed = json.loads(s._store.end("w1", "on_webhook"))["error"]["rule"]
db.execute("INSERT INTO webhook_events (event_id) VALUES ('e2')")
raised_open = s._store.end("w1", "on_webhook", raised=True)
json.dumps({"swallowed": swallowed, "raised_open": raised_open,
            "open_after": s._store.conns["w1"].in_transaction,
            "kept": s._store.admin.execute("SELECT count(*) FROM webhook_events").fetchone()[0]})
`);
  assert.deepEqual(r, { swallowed: 'sqlite-only', raised_open: null, open_after: false, kept: 0 });
});

test("remote port: a statement's text crosses once, then as its number; a number the store does not hold runs nothing", () => {
  const r = py(`
import binascii, marshal
fresh_store()
wires = []
class Recording(Loopback):
    def sql(self, kind, sql, params):
        wires.append(sql)
        return s.store_sql(kind, sql, params)
world = World()
loop = Recording("w1", world)
db = b.DB(b._RemotePort(lambda name: loop), "w1")
rows = [db.execute("SELECT ? + 1", (n,)).fetchone()[0] for n in range(3)]
ref = wires[1]
unknown = marshal.loads(binascii.a2b_base64(s.store_sql("execute", "\\x00999:1", "[]")))[0]
wrong_crc = marshal.loads(binascii.a2b_base64(s.store_sql("execute", ref.split(":")[0] + ":1", "[]")))[0]
json.dumps({"rows": rows, "first": wires[0], "again": [w.startswith("\\x00") for w in wires[1:]],
            "unknown": list(unknown), "wrong_crc": list(wrong_crc)})
`);
  assert.deepEqual(r, {
    rows: [1, 2, 3], first: 'SELECT ? + 1', again: [true, true],
    unknown: ['ProgrammingError', 'the statement did not arrive'],
    wrong_crc: ['ProgrammingError', 'the statement did not arrive'],
  });
});
