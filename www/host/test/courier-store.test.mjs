// The courier lab's database store (src/courier/db_store.py's CourierStore) and
// the learner's `db` over it (learner_side.py), in Pyodide: SQL is hostile input
// too. Each attack on the store gets an exact outcome, and what crosses between a
// sandbox and the store (the grading CLI's remote port: JSON text) arrives as it
// left. The grader's own operations on the store take a path of their own, which
// no learner call can take.
// Run: node --test host/test/courier-store.test.mjs
import { test, before } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { courierStore } from './courier-store-fixture.mjs';

let py;
let bridge;
let store;
before(async () => {
  let pyodide;
  ({ pyodide, py, bridge, store } = await courierStore());
  pyodide.runPython(`
def attempt(sql, params=(), remote=False):
    fresh_store()
    db, _, _ = learner_db(remote)
    try:
        rows = db.execute(sql, params).fetchall()
        return json.dumps({"rows": [list(r) for r in rows]}, default=repr)
    except BaseException as e:
        return json.dumps({"raised": type(e).__name__, "message": str(e)})
`);
});

/** This process's peak RSS (VmHWM) in MB. */
const peakRssMb = () => Number(/VmHWM:\s+(\d+)/.exec(fs.readFileSync('/proc/self/status', 'utf8'))[1]) >> 10;
const attempt = (sql, params = '()', remote = false) => py(`attempt(${JSON.stringify(sql)}, ${params}, ${remote ? 'True' : 'False'})`);
const NOT_LAB = 'not authorized: only SELECT, INSERT, UPDATE and DELETE on the lab\'s tables (and transactions) are allowed';

for (const remote of [false, true]) {
  const port = remote ? 'remote port' : 'local port';

  test(`${port}: the schema is not the learner's: CREATE, DROP, ALTER, views, triggers, PRAGMA and ATTACH are refused`, () => {
    for (const sql of [
      'CREATE TABLE mine (a)',
      'CREATE TEMP TABLE mine (a)',
      'DROP TABLE outbox',
      'ALTER TABLE outbox ADD COLUMN forged INTEGER',
      'CREATE VIEW fake AS SELECT 1',
      "CREATE TRIGGER t AFTER INSERT ON actions BEGIN UPDATE outbox SET attempts = 1; END",
      'PRAGMA writable_schema = 1',
      'PRAGMA max_page_count = 1000000000',
      "ATTACH DATABASE ':memory:' AS other",
    ]) {
      assert.deepEqual(attempt(sql, '()', remote), { raised: 'DatabaseError', message: NOT_LAB }, sql);
    }
  });

  test(`${port}: functions from outside the lab's world are refused with the reason`, () => {
    for (const fn of ['random()', 'randomblob(8)', "load_extension('x')"]) {
      const r = attempt(`SELECT ${fn}`, '()', remote);
      assert.equal(r.raised, 'OperationalError', fn);
      assert.match(r.message, /^not authorized: \w+\(\) is not available: the lab's clock is now_ms and nothing in its world is random$/, fn);
    }
  });

  test(`${port}: a statement that never ends is stopped at its step cap`, () => {
    const r = attempt('WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c', '()', remote);
    assert.deepEqual(r, { raised: 'OperationalError', message: "interrupted: the statement ran more than 20,000,000 steps of SQLite's machine" });
  });

  test(`${port}: values, results and the database have caps`, () => {
    assert.deepEqual(attempt('SELECT zeroblob(2000000)', '()', remote), { raised: 'DataError', message: 'string or blob too big' });
    assert.deepEqual(attempt('WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 200000) SELECT x FROM c', '()', remote),
      { raised: 'OperationalError', message: 'this statement answers more than 100000 rows or 600,000 bytes; select fewer' });
    assert.deepEqual(attempt("SELECT printf('%.600000d', 1)", '()', remote),
      { raised: 'OperationalError', message: 'this statement answers more than 100000 rows or 600,000 bytes; select fewer' });
    // Numbers weigh too: 90,000 rows of three integers are under the row cap but
    // would not fit the channel's 1 MB frame as the grading CLI's store sends them.
    assert.deepEqual(attempt('WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 90000) SELECT x, x, x FROM c', '()', remote),
      { raised: 'OperationalError', message: 'this statement answers more than 100000 rows or 600,000 bytes; select fewer' });
    // A LIKE costs pattern times text in one step of SQLite's machine: short patterns
    // only (GLOB, SQLite's own, is refused before it runs: courier-sql.test.mjs).
    assert.deepEqual(attempt(`SELECT 'a' LIKE printf('%.200c', 'a')`, '()', remote),
      { raised: 'OperationalError', message: 'LIKE or GLOB pattern too complex' });
    assert.deepEqual(attempt("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 1000000) INSERT INTO webhook_events SELECT printf('%.900d', x) FROM c", '()', remote),
      { raised: 'OperationalError', message: 'database or disk is full' });
  });

  // Issue 38: SQLite kept a statement's sorts and temporary tables in temporary
  // files, which in Pyodide are JavaScript memory outside the interpreter's capped
  // WebAssembly memory: the ORDER BY below took this process's peak RSS from 0.2 to
  // 3.6 GB (24 s), the DISTINCT and the recursive UNION ran to the end at 3.7 and
  // 4.9 GB. They are kept in SQLite's capped heap now, and each fails by name within
  // a second, its call refused whatever the code does with the exception.
  test(`${port}: a statement's sorts and temporary tables stay in SQLite's capped heap; past it, the call fails by name`, () => {
    const many = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 2000) ";
    const message = "your query used more than 256 MB of memory (SQLite's, for the lab's database and for what a statement "
      + 'sorts, groups or keeps aside), so the lab stopped it. Read only the rows you need: a piece reads a few rows, '
      + 'never a sort or a join over everything.';
    for (const sql of [
      `${many}SELECT length(v) FROM (SELECT printf('%.900000d', x) AS v FROM c ORDER BY v DESC) LIMIT 1`,
      `${many}SELECT count(*) FROM (SELECT DISTINCT printf('%.900000d', x) FROM c)`,
      "WITH RECURSIVE c(x, v) AS (SELECT 1, printf('%.900000d', 1) UNION SELECT x + 1, printf('%.900000d', x + 1) FROM c WHERE x < 2000) SELECT count(*) FROM c",
    ]) {
      fs.writeFileSync('/proc/self/clear_refs', '5'); // the peak RSS (VmHWM) starts again from now
      const before = { rss: peakRssMb(), buffers: process.memoryUsage().arrayBuffers };
      const r = py(`
fresh_store()
db, _, _ = learner_db(${remote ? 'True' : 'False'})
db.execute("INSERT INTO actions (id, store, phone, body, created_ms) VALUES (1, 's1', 'p', 'b', 0)")
try:
    db.execute(${JSON.stringify(sql)}).fetchall()
    raised = None
except Exception as e:
    raised = [type(e).__name__, str(e)]
end = s.store_end() if ${remote ? 'True' : 'False'} else s.local_end("w1", "claim")
json.dumps({"raised": raised, "in_tx": s._store.conns["w1"].in_transaction, "end": json.loads(end) if end else None,
            "rows": s._store.admin.execute("SELECT count(*) FROM actions").fetchone()[0]})
`);
      assert.deepEqual(r, {
        raised: ['OperationalError', message], in_tx: false, rows: 0,
        end: { error: { kind: 'refused', function: 'claim', rule: 'query-memory', message: `claim: ${message}` } },
      }, sql);
      // What grew is the interpreter's heap (up to SQLite's 256 MB cap), no file.
      assert.ok(peakRssMb() - before.rss < 400, `peak RSS ${before.rss} -> ${peakRssMb()} MB: ${sql}`);
      assert.ok(process.memoryUsage().arrayBuffers - before.buffers < 64 << 20, `JavaScript buffers grew: ${sql}`);
    }
  });

  test(`${port}: values cross as they are, and rows come by index, by name or from the learner's factory`, () => {
    const r = py(`
fresh_store()
db, _, _ = learner_db(${remote ? 'True' : 'False'})
row = db.execute("SELECT ? AS big, ? AS neg_zero, ? AS inf, ? AS blob, ? AS text, ? AS nothing, :n AS named",
                 {"1": 1} if False else None) if False else None
vals = (2 ** 62, -0.0, float("inf"), b"\\x00\\xff", "\\u00e9\\u2603", None)
row = db.execute("SELECT ?, ?, ?, ?, ?, ?", vals).fetchone()
same = [type(a) is type(c) and (a == c) and repr(a) == repr(c) for a, c in zip(row, vals)]
try:  # SQLite's own :name parameters are refused (courier-sql.test.mjs)
    named = db.execute("SELECT :a + :b AS total", {"a": 2, "b": 3}).fetchone()
except sqlite3.NotSupportedError as e:
    named = [str(e).split(" is SQL")[0]]
db.row_factory = sqlite3.Row
by_name = db.execute("SELECT 7 AS seven, 'x' AS ex").fetchone()
db.row_factory = lambda cur, r: {d[0]: v for d, v in zip(cur.description, r)}
as_dict = db.execute("SELECT 1 AS one").fetchone()
db.row_factory = None
json.dumps({"same": same, "named": list(named), "by_name": [by_name["seven"], by_name["ex"], type(by_name).__name__],
            "as_dict": as_dict, "plain": list(db.execute("SELECT 1, 2").fetchall()[0])})
`);
    assert.deepEqual(r, { same: [true, true, true, true, true, true], named: ['the parameter :a'], by_name: [7, 'x', 'Row'], as_dict: { one: 1 }, plain: [1, 2] });
  });

  test(`${port}: parameters sqlite3 would refuse are refused the same way`, () => {
    assert.deepEqual(attempt('SELECT ?', '([1],)', remote), { raised: 'ProgrammingError', message: "Error binding parameter 1: type 'list' is not supported" });
    assert.deepEqual(attempt('SELECT ?', '(2 ** 70,)', remote), { raised: 'OverflowError', message: 'Python int too large to convert to SQLite INTEGER' });
    assert.deepEqual(attempt('SELECT ?', '5', remote), { raised: 'ProgrammingError', message: 'parameters are of unsupported type' });
    assert.deepEqual(attempt('SELECT 1; SELECT 2', '()', remote), { raised: 'ProgrammingError', message: 'You can only execute one statement at a time.' });
  });

  test(`${port}: a kill at a statement rolls the transaction back in the store, and so does a restart`, () => {
    const r = py(`
fresh_store()
db, _, world = learner_db(${remote ? 'True' : 'False'}, World(["go", "kill"]))
db.execute("INSERT INTO actions (id, store, phone, body, created_ms) VALUES (1, 's1', 'p', 'b', 0)")
try:
    db.execute("SELECT 1")
    killed = False
except b.WorkerKilled:
    killed = True
after_kill = s._store.admin.execute("SELECT count(*) FROM actions").fetchone()[0]
db2, _, _ = learner_db(${remote ? 'True' : 'False'}, World(["go", "db-down"]), worker="w2")
db2.execute("INSERT INTO actions (id, store, phone, body, created_ms) VALUES (2, 's1', 'p', 'b', 0)")
try:
    db2.execute("SELECT 1")
    down = None
except sqlite3.OperationalError as e:
    down = str(e)
json.dumps({"killed": killed, "rows_after_kill": after_kill, "down": down, "in_tx": db2.in_transaction,
            "rows_after_down": s._store.admin.execute("SELECT count(*) FROM actions").fetchone()[0]})
`);
    assert.deepEqual(r, { killed: true, rows_after_kill: 0, down: 'database is restarting', in_tx: false, rows_after_down: 0 });
  });

  test(`${port}: the attempts a send carries are the store's committed ones, not what the learner's side says`, () => {
    const r = py(`
fresh_store()
db, provider, world = learner_db(${remote ? 'True' : 'False'})
provider.send("k1", "p", "b")                       # no outbox row
db.execute("INSERT INTO outbox (action_id, idem_key, attempts) VALUES (1, 'k1', 1)")
provider.send("k1", "p", "b")                       # counted, but not committed yet
db.commit()
provider.send("k1", "p", "b")                       # committed
json.dumps(world.sends)
`);
    assert.deepEqual(r, [null, null, 1]);
  });
}

test('a step that returns with its transaction open fails, and the store rolls it back', () => {
  const r = py(`
fresh_store()
db, _, _ = learner_db(True)
db.execute("UPDATE stores SET last_served_ms = 5")
err = json.loads(s.store_end())
s.store_begin(json.dumps({"piece": "claim", "worker": "w1"}), World())
json.dumps({"err": err, "open": s._store.conns["w1"].in_transaction,
            "served": s._store.admin.execute("SELECT last_served_ms FROM stores").fetchone()[0],
            "again": s.store_end()})
`);
  assert.deepEqual([r.err.error.kind, r.err.error.function, r.err.error.rule], ['refused', 'claim', 'open-transaction']);
  assert.match(r.err.error.message, /^claim returned with its transaction still open, so the lab rolled it back/);
  assert.deepEqual({ ...r, err: null }, { err: null, open: false, served: 0, again: null });
});

test('what a sandbox sends the store is data: parameters that are not JSON get an error, not a crash', () => {
  const r = py(`
import marshal, binascii
fresh_store()
s.store_begin(json.dumps({"piece": "claim", "worker": "w1"}), World())
json.dumps(marshal.loads(binascii.a2b_base64(s.store_sql("execute", "SELECT ?", "[1"))))
`);
  assert.deepEqual(r, [['ProgrammingError', "the statement's parameters did not arrive"], [], -1, null, null, false]);
});

// The grader's operations on the store used to travel as learner calls named with
// a prefix (`__courier_reset` and the like). Now they reach the store only on a
// path of their own (the solution's `store`, bridge.py's `store_op`): a learner
// call of any name is the learner's function or none, and the store stays as it was.
test('a learner call named like a store operation is a learner call: it cannot reset, dump or load the store', () => {
  const schema = fs.readFileSync(new URL('../../../src/courier/schema.sql', import.meta.url), 'utf8');
  const reset = (stores) => JSON.stringify({ cfg: { lease_ms: 1000, in_flight_cap: 2, recheck_ms: 500 }, stores, schema });
  const ids = () => JSON.parse(store.op('dump', 'null')).ok.actions.map((a) => a.id);
  assert.deepEqual(JSON.parse(store.op('reset', reset(['s1']))), { ok: null });
  assert.deepEqual(JSON.parse(store.op('enqueue', JSON.stringify({ id: 7, store: 's1', phone: 'p', body: 'b', created_ms: 0 }))), { ok: null });
  assert.deepEqual(ids(), [7]);

  const source = 'def claim(db, worker, now_ms, cfg):\n    return None\n\n'
    + 'def __courier_reset(current, reported):\n    return "the learner\'s own function"\n';
  assert.deepEqual(JSON.parse(bridge.load(source, JSON.stringify(['claim']), 20)), { ok: ['claim'] });
  // Names the solution does not define, the old ones and the new: an unknown function.
  const TABLES = JSON.stringify({ actions: [], stores: [], outbox: [], webhook_events: [] });
  for (const [name, args] of [['__courier_dump', 'null'], ['__courier_load', TABLES], ['__courier_kill', '"w1"'],
    ['__courier_restart', 'null'], ['__courier_enqueue', '{"id": 8}'], ['reset', reset([])], ['dump', 'null'], ['load', TABLES]]) {
    assert.deepEqual(JSON.parse(bridge.call(name, args, null, 20)), { error: { kind: 'missing-function', function: name } }, name);
  }
  // A name the solution defines: its own function runs, not the store's reset.
  assert.deepEqual(JSON.parse(bridge.call('__courier_reset', reset([]).replace('{', '{"piece": "merge", "current": "a", "reported": "b", '), null, 20)),
    { ok: { type: 'str', value: "the learner's own function" } });
  assert.deepEqual(ids(), [7], 'the store still holds its row');
  // The store's own path still answers the grader.
  assert.deepEqual(JSON.parse(store.op('reset', reset([]))), { ok: null });
  assert.deepEqual(ids(), []);
});
