"""The courier lab's run's database: the store (`CourierStore`), on the trusted
side. The grader seeds it, kills its connections, restarts it, dumps and loads its
tables through its own operations (`grader_op`: `StoreOp`, src/lab.rs, on a path
of their own, `LearnerHost::store`, never a learner call); the learner's `db` and
`provider` (learner_side.py) reach it through a port, one statement or provider
call at a time, and get rows and answers back. What the tables hold, what was
committed before a send, and whether a step left a transaction open are read by
the store itself: nothing the learner's side says about them is believed.

Only a host that keeps the store imports this module (as
`delivery_lab_courier_store`): the page's worker, where it lives beside the
learner's code (`local_port`), and the grading CLI's grading thread, in an
interpreter of its own, a process away from the learner's (`store_begin` and the
rest of the store's side of a sandbox's requests). A sandbox never gets it. The
registry carries it (`LabInfo::store_py`).
"""

import binascii
import json
import marshal
import re

# What crosses the port, written once on the learner's side (learner_side.py, the
# module engine.mjs names delivery_lab_courier): our code, imported beside this one.
from delivery_lab_courier import (ROWS_CAP, SQL_ERRORS, SQL_RAW, SQL_REF, _keeps, _loads,
                                  _piece_worker)

# What one learner statement may cost the store. SQL is hostile input as much as
# Python is: these bound its time and memory, and the authorizer below keeps it
# to the lab's rows.
STATEMENT_STEPS_CAP = 20_000_000   # SQLite VM instructions per statement
PROGRESS_EVERY = 10_000            # instructions between two checks of that cap
# What one statement's answer may weigh: each text or blob its length and 5, any
# other value 10, each row 5 (about its size in marshal, how the grading CLI's store
# sends it, which after base64 must fit www/grader/frames.mjs's 1 MB frame).
RESULT_CAP_BYTES = 600_000
DB_PAGES_CAP = 16_384              # pages of the database (64 MiB at 4 KiB)
# SQLite's own heap in this interpreter (a hard limit: sqlite3_hard_heap_limit64),
# which holds the database's pages and everything a statement keeps aside: its
# sorts, DISTINCT and GROUP BY, materialised CTEs, statement journals. Those are
# kept in that heap, not in temporary files (TEMP_STORE), since Pyodide's files are
# JavaScript memory outside the interpreter's capped WebAssembly memory: an ORDER
# BY over 2,000 values of 900 KB grew the grading process by 1.9 GB through them
# (issue 38). A statement past it fails by name (`query_memory_text`). Statements
# run one at a time, so this is each statement's budget beside the database.
HEAP_CAP_BYTES = 256 << 20
TEMP_STORE = "MEMORY"              # PRAGMA temp_store: temporary b-trees and sorts in the heap
VALUE_CAP_CHARS = 1_000_000        # the longest string or blob (SQLITE_LIMIT_LENGTH)
SQL_CAP_CHARS = 100_000            # the longest statement (SQLITE_LIMIT_SQL_LENGTH)
# A LIKE or GLOB costs its pattern's length times its text's in one step of SQLite's
# machine, out of the progress handler's reach: patterns stay short (the lab needs
# none at all). What still runs long is the grading CLI's to stop (it replaces a
# grading thread that does not answer after the time limit).
LIKE_PATTERN_CAP_CHARS = 100       # SQLITE_LIMIT_LIKE_PATTERN_LENGTH
# Functions whose answers come from outside the lab's world: its clock is `now_ms`
# and nothing in it is random.
DENIED_FUNCTIONS = ("random", "randomblob", "load_extension")


# ---------------------------------------------------------------------------
# SQL that runs on both. The same file runs here on SQLite and in the real run
# (`./lab real`, www/real/labdb.py) on PostgreSQL, which turns `?` into its own
# placeholder and runs the rest as written. What SQLite alone accepts is refused
# here, before it runs, with the form both accept: a typed refusal the store
# records (`CourierStore.refused`), so the call fails by name whatever the code
# does with the exception. Double-quoted strings, which SQLite alone takes for
# text, are off on the learners' connections (SQLITE_DBCONFIG_DQS_DML).

# A statement's tokens: strings, quoted names and comments are read whole, so
# that nothing inside them counts.
_SQL_TOKEN = re.compile(r"""
    '(?:[^']|'')*'?                       # a string
  | "(?:[^"]|"")*"?                       # a quoted name
  | `[^`]*`?                              # SQLite's `name`
  | \[[^\]]*\]?                            # SQLite's [name]
  | --[^\n]* | /\*.*?(?:\*/|$)              # comments
  | ==|!=|<>|<=|>=|\|\||::                  # operators of two characters
  | \?[0-9]*                              # ? and SQLite's ?NNN
  | [:@$][A-Za-z_][A-Za-z0-9_$]*          # SQLite's :name, @name, $name
  | [A-Za-z_][A-Za-z0-9_$]*               # a word
  | [0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)? | \.[0-9]+
  | \S
""", re.VERBOSE | re.DOTALL)

_IGNORE_FORM = "INSERT ... ON CONFLICT DO NOTHING"
_UPSERT_FORM = "INSERT ... ON CONFLICT (column) DO UPDATE SET column = excluded.column"
# SQLite's own functions, which PostgreSQL does not have, and what to write instead.
_SQLITE_FUNCTIONS = {
    "IFNULL": "COALESCE(a, b)",
    "IIF": "CASE WHEN ... THEN ... ELSE ... END",
    "DATETIME": "now_ms (the lab's clock) and numbers of ms",
    "JULIANDAY": "now_ms (the lab's clock) and numbers of ms",
    "STRFTIME": "now_ms (the lab's clock) and numbers of ms",
    "UNIXEPOCH": "now_ms (the lab's clock) and numbers of ms",
    "GROUP_CONCAT": "one row per value, joined in Python",
    "TOTAL": "COALESCE(SUM(x), 0)",
    "LAST_INSERT_ROWID": "INSERT ... RETURNING column",
    "CHANGES": "the cursor's rowcount",
    "TOTAL_CHANGES": "the cursor's rowcount",
    "GLOB": "LIKE",
}
_IS_OK = {"NULL", "NOT", "DISTINCT", "TRUE", "FALSE"}
_SQLITE_ONLY_CACHE = {}
_SQLITE_ONLY_CACHE_CAP = 4096


def sqlite_only(sql):
    """None when PostgreSQL takes the statement as SQLite does, else (what SQLite
    alone accepts, the form both accept). Statements repeat: the answer is kept."""
    hit = _SQLITE_ONLY_CACHE.get(sql, False)
    if hit is not False:
        return hit
    found = _sqlite_only(sql)
    if len(_SQLITE_ONLY_CACHE) < _SQLITE_ONLY_CACHE_CAP:
        _SQLITE_ONLY_CACHE[sql] = found
    return found


def _sqlite_only(sql):
    toks = [t for t in _SQL_TOKEN.findall(sql) if not t.startswith(("'", '"', "--", "/*"))]
    words = [t.upper() for t in toks]
    n = len(words)

    def at(i):
        return words[i] if i < n else ""

    depth = 0
    limit_depth = None   # the depth of a LIMIT whose comma we look for
    for i, (t, w) in enumerate(zip(toks, words)):
        c = t[0]
        if c == "`" or c == "[":
            return (f"the quoted name {t}", 'a name as it is, or in double quotes: "name"')
        if c == "?" and len(t) > 1 or c in ":@$" and t != "::":
            return (f"the parameter {t}", "? parameters, given in order")
        if t == "==":
            return ("==", "=")
        if t == "(":
            depth += 1
        elif t == ")":
            depth -= 1
            if limit_depth is not None and depth < limit_depth:
                limit_depth = None
        elif t == ",":
            if limit_depth == depth:
                return ("LIMIT offset, count", "LIMIT count OFFSET offset")
        elif w == "REPLACE" and i == 0:
            return ("REPLACE INTO", _UPSERT_FORM)
        elif w in ("INSERT", "UPDATE") and at(i + 1) == "OR":
            what = f"{w} OR {at(i + 2)}"
            if w == "UPDATE":
                return (what, "a plain UPDATE")
            return (what, _IGNORE_FORM if at(i + 2) == "IGNORE" else
                    _UPSERT_FORM if at(i + 2) == "REPLACE" else "a plain INSERT")
        elif w == "CONFLICT" and at(i + 1) == "DO" and at(i + 2) == "UPDATE":
            return ("ON CONFLICT DO UPDATE with no conflict target", _UPSERT_FORM)
        elif w == "BEGIN" and at(i + 1) in ("DEFERRED", "IMMEDIATE", "EXCLUSIVE"):
            return (f"BEGIN {at(i + 1)}",
                    "no BEGIN at all: the first INSERT, UPDATE or DELETE opens the transaction, "
                    "db.commit() or db.rollback() ends it")
        elif w == "IS" and (at(i + 1) not in _IS_OK or
                            at(i + 1) == "NOT" and at(i + 2) not in _IS_OK - {"NOT"}):
            return ("IS between two values", "= (and IS NULL, IS NOT NULL for NULL)")
        elif w in ("ROWID", "_ROWID_", "OID"):
            return (t, "the table's own key column (actions.id, outbox.action_id)")
        elif w == "LIMIT":
            limit_depth = depth
        elif w in ("MAX", "MIN") and at(i + 1) == "(":
            # Two or more arguments: SQLite's scalar max/min (GREATEST/LEAST elsewhere).
            d = 0
            for u in toks[i + 1:]:
                d += (u == "(") - (u == ")")
                if d == 0:
                    break
                if d == 1 and u == ",":
                    return (f"{w.lower()}(a, b) of two values",
                            f"CASE WHEN a {'>' if w == 'MAX' else '<'}= b THEN a ELSE b END")
        elif w in _SQLITE_FUNCTIONS and (at(i + 1) == "(" or w == "GLOB"):
            return (f"{w.lower()}()" if w != "GLOB" else "GLOB", _SQLITE_FUNCTIONS[w])
        elif w == "REGEXP":
            return ("REGEXP", "LIKE")
    return None


# What CourierStore.sql answers without rows (see there): the rest of a result.
NOTHING = ((), -1, None, None)
DONE = (None,) + NOTHING
KILLED = ("killed",) + NOTHING


class _Guard:
    """A learner connection's authorizer and progress handler: rows of the lab's
    tables may be read and written, nothing else (no schema changes, no PRAGMA, no
    ATTACH, no functions from outside the world), and no statement runs past its
    cap. `why` keeps the reason of the last refusal for the learner's message."""

    __slots__ = ("allowed", "function", "why", "checks")

    def __init__(self, sqlite3):
        self.function = sqlite3.SQLITE_FUNCTION
        self.allowed = {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_INSERT,
                        sqlite3.SQLITE_UPDATE, sqlite3.SQLITE_DELETE,
                        sqlite3.SQLITE_TRANSACTION, sqlite3.SQLITE_SAVEPOINT,
                        sqlite3.SQLITE_RECURSIVE, sqlite3.SQLITE_FUNCTION}
        self.why = None
        self.checks = 0

    def authorize(self, action, arg1, arg2, db_name, trigger):
        if action not in self.allowed:
            self.why = "only SELECT, INSERT, UPDATE and DELETE on the lab's tables (and transactions) are allowed"
            return 1  # SQLITE_DENY
        if action == self.function and isinstance(arg2, str) and arg2.lower() in DENIED_FUNCTIONS:
            self.why = (f"{arg2}() is not available: the lab's clock is now_ms and nothing in "
                        "its world is random")
            return 1
        return 0

    def progress(self):
        self.checks += 1
        return self.checks * PROGRESS_EVERY > STATEMENT_STEPS_CAP


class CourierStore:
    """The run's database: an in-memory SQLite shared by name (shared cache), the
    store's own connection for setup and reading, and one guarded connection per
    worker. Every learner statement goes through `sql`, every provider call through
    `send` and `lookup`; each asks the world first (a fault point)."""

    n = 0

    def __init__(self, cfg, stores, schema):
        import sqlite3
        CourierStore.n += 1
        self.sqlite3 = sqlite3
        self.uri = f"file:courier-{CourierStore.n}?mode=memory&cache=shared"
        self.admin = sqlite3.connect(self.uri, uri=True)
        self.admin.execute(f"PRAGMA hard_heap_limit = {HEAP_CAP_BYTES}")
        self.admin.execute(f"PRAGMA max_page_count = {DB_PAGES_CAP}")
        self.admin.execute(f"PRAGMA temp_store = {TEMP_STORE}")
        # The lab's tables, as the grader sends them (src/courier/schema.sql).
        self.admin.executescript(schema)
        self.admin.executemany("INSERT INTO stores (store) VALUES (?)", [(s,) for s in stores])
        self.admin.commit()
        self.conns = {}
        self.guards = {}
        # worker -> (rule, message): why its current call fails whatever its code does
        # with the exception (SQL only SQLite accepts, a statement past the heap).
        self.refused = {}
        self.cfg = cfg
        self.cfg_json = json.dumps(cfg)

    def fresh(self, worker):
        """Whether the worker's next statement opens a new connection."""
        return worker not in self.conns

    def conn(self, worker):
        c = self.conns.get(worker)
        if c is None:
            sqlite3 = self.sqlite3
            c = self.conns[worker] = sqlite3.connect(self.uri, uri=True)
            c.execute(f"PRAGMA max_page_count = {DB_PAGES_CAP}")
            # Per connection: a learner's sort or temporary table stays in the capped heap.
            c.execute(f"PRAGMA temp_store = {TEMP_STORE}")
            c.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, VALUE_CAP_CHARS)
            c.setlimit(sqlite3.SQLITE_LIMIT_SQL_LENGTH, SQL_CAP_CHARS)
            c.setlimit(sqlite3.SQLITE_LIMIT_LIKE_PATTERN_LENGTH, LIKE_PATTERN_CAP_CHARS)
            c.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
            g = self.guards[worker] = _Guard(sqlite3)
            c.set_authorizer(g.authorize)
            c.set_progress_handler(g.progress, PROGRESS_EVERY)
            dqs = getattr(sqlite3, "SQLITE_DBCONFIG_DQS_DML", None)
            if dqs is not None:
                # "text" is a name, as in PostgreSQL: a string is 'text'.
                c.setconfig(dqs, False)
        return c

    def drop(self, worker):
        c = self.conns.pop(worker, None)
        self.guards.pop(worker, None)
        self.refused.pop(worker, None)
        if c is not None:
            c.rollback()
            c.close()

    def close(self):
        for worker in list(self.conns):
            try:
                self.drop(worker)
            except Exception:
                pass
        self.admin.close()

    def _fault(self, conn, world):
        """None to go on, or the result the statement ends with."""
        verdict = world.statement(conn.in_transaction)
        if verdict == "go":
            return None
        if verdict[:1] == "[":
            # A unit case's other worker: its statements commit here, on a
            # connection of their own, before this one runs (step_world.rs).
            for other_sql, other_params in json.loads(verdict):
                self.admin.execute(other_sql, other_params)
            self.admin.commit()
            return None
        conn.rollback()
        if verdict == "kill":
            return KILLED
        return (("OperationalError", "database is restarting"),) + NOTHING

    def sql(self, worker, kind, sql, params, world):
        """One statement (`execute`, `executemany`), `commit` or `rollback` on the
        worker's connection. Answers (error, rows, rowcount, lastrowid,
        description, in_tx): error None, "killed", or (exception name, message);
        the rows are read in full here. A tuple, since it crosses to a sandbox as
        it is (marshal: four times cheaper than JSON, measured in Pyodide)."""
        return self._sql(worker, kind, sql, params, world) + (self.conns[worker].in_transaction,)

    def _sql(self, worker, kind, sql, params, world):
        conn = self.conn(worker)
        if kind == "rollback":
            conn.rollback()
            return DONE
        if kind == "commit" and not conn.in_transaction:
            # Nothing to commit is not a statement: no fault lands on it.
            return DONE
        if kind in ("execute", "executemany") and type(sql) is str:
            found = sqlite_only(sql)
            if found is not None:
                # Not run, and not a fault point: the call fails by name at its end.
                self.refused.setdefault(worker, ("sqlite-only", _sqlite_only_text(*found)))
                return (("NotSupportedError", _sqlite_only_text(*found)),) + NOTHING
        ended = self._fault(conn, world)
        if ended is not None:
            return ended
        guard = self.guards[worker]
        guard.why, guard.checks = None, 0
        sqlite3 = self.sqlite3
        try:
            if kind == "commit":
                conn.commit()
                return DONE
            if kind == "execute":
                cur = conn.execute(sql, params)
            elif kind == "executemany":
                cur = conn.executemany(sql, params)
            else:
                return (("ProgrammingError", f"unknown statement kind {kind!r}"),) + NOTHING
            # Read in batches, counting as they come: most statements answer one
            # row or none, and a huge answer stops before it is all in memory.
            rows, weight, size = [], 0, 16
            while True:
                batch = cur.fetchmany(size)
                rows += batch
                weight += sum([len(v) + 5 if type(v) in (str, bytes) else 10 for r in batch for v in r]) \
                    + 5 * len(batch)
                if len(rows) > ROWS_CAP or weight > RESULT_CAP_BYTES:
                    cur.close()
                    return (("OperationalError", "this statement answers more than "
                             f"{ROWS_CAP} rows or {RESULT_CAP_BYTES:,} bytes; select fewer"),) + NOTHING
                if len(batch) < size:
                    break
                size = 1000
            description = None if cur.description is None else tuple([d[0] for d in cur.description])
            return (None, rows, cur.rowcount, cur.lastrowid, description)
        except sqlite3.Error as e:
            name = type(e).__name__ if type(e).__name__ in SQL_ERRORS else "DatabaseError"
            message = str(e)
            if guard.why and message.startswith("not authorized"):
                message = f"not authorized: {guard.why}"
            elif guard.checks * PROGRESS_EVERY > STATEMENT_STEPS_CAP and message == "interrupted":
                message = (f"interrupted: the statement ran more than {STATEMENT_STEPS_CAP:,} steps "
                           "of SQLite's machine")
            return ((name, message),) + NOTHING
        except MemoryError:
            # SQLite's heap is full (SQLITE_NOMEM: sqlite3 raises MemoryError), or this
            # interpreter's memory while the rows were read: the statement's, either way.
            # SQLite has undone the statement; the call fails by name at its end.
            self.refused.setdefault(worker, ("query-memory", query_memory_text()))
            return (("OperationalError", query_memory_text()),) + NOTHING
        except (TypeError, ValueError, OverflowError) as e:
            return ((type(e).__name__, str(e)),) + NOTHING

    def committed(self, worker, key):
        """The outbox's `attempts` for this key as committed, or None (no row, or
        the worker's own transaction is open: nothing of it is committed yet)."""
        if self.conn(worker).in_transaction:
            return None
        row = self.admin.execute("SELECT attempts FROM outbox WHERE idem_key = ?", (key,)).fetchone()
        return None if row is None else row[0]

    def _provider(self, worker, text):
        # The world's answer, as JSON text; a kill there ends the transaction.
        if '"killed"' in text and json.loads(text).get("answer") == "killed":
            self.conn(worker).rollback()
        return text

    def send(self, worker, key, phone, body, world):
        return self._provider(worker, world.send(key, phone, body, self.committed(worker, key)))

    def lookup(self, worker, key, world):
        return self._provider(worker, world.lookup(key))

    def end(self, worker, piece, raised=False):
        """After a piece: None, or the typed error it ends with, whatever its code
        answered: it ran SQL that only SQLite accepts, or it returned with its
        transaction open. A transaction left open is rolled back here, after a
        raise too (the raise is then the call's error), so that no later call on
        the connection commits what this one left."""
        found = self.refused.pop(worker, None)
        c = self.conns.get(worker)
        left_open = c is not None and c.in_transaction
        if left_open:
            c.rollback()
        if found is not None:
            rule, message = found
            return _refused(piece, rule, f"{piece}: {message}")
        if left_open and not raised:
            return _refused(piece, "open-transaction",
                f"{piece} returned with its transaction still open, so the lab rolled it back: "
                "nothing it wrote after its last commit is kept. End every transaction with "
                "db.commit() or db.rollback() before the function returns, on every path "
                "(a duplicate, a fence that fails, nothing to do), as \"How your code runs\" "
                "in the lab says.")
        return None

    def dump(self):
        a = self.admin
        return {
            "actions": [
                {"id": r[0], "store": r[1], "phone": r[2], "body": r[3], "created_ms": r[4],
                 "state": r[5], "owner": r[6], "epoch": r[7], "lease_until_ms": r[8]}
                for r in a.execute("SELECT id, store, phone, body, created_ms, state, owner, epoch, "
                                   "lease_until_ms FROM actions ORDER BY id")],
            "stores": [{"store": r[0], "last_served_ms": r[1]}
                       for r in a.execute("SELECT store, last_served_ms FROM stores ORDER BY store")],
            "outbox": [
                {"action_id": r[0], "idem_key": r[1], "attempts": r[2], "status": r[3],
                 "message_id": r[4], "events_applied": r[5]}
                for r in a.execute("SELECT action_id, idem_key, attempts, status, message_id, "
                                   "events_applied FROM outbox ORDER BY action_id")],
            "webhook_events": [r[0] for r in a.execute(
                "SELECT event_id FROM webhook_events ORDER BY event_id")],
        }

    def load(self, t):
        a = self.admin
        for table in ("actions", "stores", "outbox", "webhook_events"):
            a.execute(f"DELETE FROM {table}")
        a.executemany("INSERT INTO actions VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", [
            (r["id"], r["store"], r["phone"], r["body"], r["created_ms"], r["state"], r["owner"],
             r["epoch"], r["lease_until_ms"]) for r in t["actions"]])
        a.executemany("INSERT INTO stores VALUES (?, ?)",
                      [(r["store"], r["last_served_ms"]) for r in t["stores"]])
        a.executemany("INSERT INTO outbox VALUES (?, ?, ?, ?, ?, ?)", [
            (r["action_id"], r["idem_key"], r["attempts"], r["status"], r["message_id"],
             r["events_applied"]) for r in t["outbox"]])
        a.executemany("INSERT INTO webhook_events VALUES (?)", [(e,) for e in t["webhook_events"]])


def _sqlite_only_text(what, portable):
    return (f"{what} is SQL that only SQLite accepts; the real run (./lab real) uses "
            f"PostgreSQL, which refuses it or reads it otherwise. Write {portable}: "
            "both run that (the lab's \"SQL that runs on both\").")


def query_memory_text():
    """What a statement past HEAP_CAP_BYTES is told, and its call's verdict."""
    return (f"your query used more than {HEAP_CAP_BYTES >> 20} MB of memory (SQLite's, for the "
            "lab's database and for what a statement sorts, groups or keeps aside), so the lab "
            "stopped it. Read only the rows you need: a piece reads a few rows, never a sort or a "
            "join over everything.")


def _refused(piece, rule, message):
    return json.dumps({"error": {"kind": "refused", "function": piece, "rule": rule,
                                 "message": message}})


_store = None        # the run's CourierStore, when it lives in this interpreter


def grader_op(op, a):
    """The grader's own operations on the run's database, by their `StoreOp` names
    (www/host/solution_runner.py's store_op calls this): a path of their own, never a
    learner call."""
    global _store
    if op == "reset":
        if _store is not None:
            _store.close()
        _store = CourierStore(a["cfg"], a["stores"], a["schema"])
    elif op == "enqueue":
        _store.admin.execute(
            "INSERT INTO actions (id, store, phone, body, created_ms) VALUES (?, ?, ?, ?, ?)",
            (a["id"], a["store"], a["phone"], a["body"], a["created_ms"]))
    elif op == "settle":
        _store.admin.execute(
            "UPDATE actions SET state = 'dispatched', lease_until_ms = ? WHERE id = ?", (a[1], a[0]))
    elif op == "kill":
        _store.drop(a)
    elif op == "restart":
        for c in _store.conns.values():
            c.rollback()
    elif op == "dump":
        return '{"ok":' + json.dumps(_store.dump()) + '}'
    elif op == "load":
        _store.load(a)
    else:
        raise ValueError(f"unknown store operation {op}")
    _store.admin.commit()
    return '{"ok":null}'


# The store's side of a sandbox's requests (the grading CLI's grading thread):
# JSON text in and out, so nothing a sandbox sends is more than data. A call's
# connection and world are set once as it starts (store_begin), not sent with
# every request.

_store_call = None   # (worker, piece, world) of the call in progress


def store_begin(args_json, world):
    """A learner call starts: "" when it has no database (merge), else the JSON
    the sandbox's port starts from: whether its connection is new, and cfg."""
    global _store_call
    a = json.loads(args_json)
    worker = _piece_worker(a)
    if worker is None:
        _store_call = None
        return ""
    _store_call = (worker, a["piece"], _World(world))
    return '{"fresh":' + ("true" if _store.fresh(worker) else "false") + ',"cfg":' + _store.cfg_json + '}'


class _World:
    """The call's world (its operations by name, `op`), with `op` looked up once: on
    a JavaScript object, each lookup costs more than the call (measured in Pyodide)."""

    __slots__ = ("op",)

    def __init__(self, world):
        self.op = world.op

    def statement(self, in_tx):
        return self.op("statement", in_tx)

    def send(self, key, phone, body, committed):
        return self.op("send", key, phone, body, committed)

    def lookup(self, key):
        return self.op("lookup", key)


_sql_kept = []       # the store's side: (text, crc) by number, as a sandbox sent them


def _sql_text(wire):
    """The statement a sandbox means by `wire`, or None (a reference that holds none)."""
    if wire.startswith(SQL_RAW):
        return wire[len(SQL_RAW):]
    if wire.startswith(SQL_REF):
        n, _, crc = wire[len(SQL_REF):].partition(":")
        if not (n.isdigit() and crc.isdigit() and len(n) < 8 and int(n) < len(_sql_kept)):
            return None
        text, kept_crc = _sql_kept[int(n)]
        return text if str(kept_crc) == crc else None
    if _keeps(wire, _sql_kept):
        _sql_kept.append((wire, binascii.crc32(wire.encode("utf-8", "surrogatepass"))))
    return wire


def store_sql(kind, sql, params_json):
    """The result as marshal's bytes in base64 text: it goes to the sandbox, which
    reads it with marshal (the sandbox is the untrusted side, never the store)."""
    worker, _, world = _store_call
    text = _sql_text(sql)
    try:
        params = _loads(params_json)
        arrived = text is not None
    except ValueError:
        arrived = False
    if not arrived:
        what = "statement" if text is None else "statement's parameters"
        result = (("ProgrammingError", f"the {what} did not arrive"),) + NOTHING \
            + (_store.conn(worker).in_transaction,)
    else:
        result = _store.sql(worker, kind, text, params, world)
    return binascii.b2a_base64(marshal.dumps(result), newline=False).decode("ascii")


def store_send(key, phone, body):
    worker, _, world = _store_call
    return _store.send(worker, key, phone, body, world)


def store_lookup(key):
    worker, _, world = _store_call
    return _store.lookup(worker, key, world)


def store_end(answer=None):
    """The call ended with `answer` (the sandbox's JSON text): the store's typed
    error for it (CourierStore.end), or None. Whether it raised is the sandbox's
    word; either way a transaction left open is rolled back and the call fails."""
    global _store_call
    worker, piece, _ = _store_call
    _store_call = None
    raised = isinstance(answer, str) and not answer.startswith('{"ok":')
    return _store.end(worker, piece, raised)


# The store beside the learner's code (the page): learner_side.py's `call` takes
# its port from here (use_local_store) and asks for the store's verdict after it.

class _LocalPort:
    """The store in this interpreter (the page)."""

    __slots__ = ("worker", "live", "world")

    def __init__(self, worker, live):
        self.worker, self.live = worker, live
        # `live` is still asked at each request, so a db kept from an earlier call
        # fails as it should.
        self.world = _World(live("db"))

    def fresh(self):
        return _store.fresh(self.worker)

    def cfg(self):
        return _store.cfg

    def sql(self, kind, sql, params):
        self.live("db")
        return _store.sql(self.worker, kind, sql, params, self.world)

    def send(self, key, phone, body):
        self.live("provider")
        return _store.send(self.worker, key, phone, body, self.world)

    def lookup(self, key):
        self.live("provider")
        return _store.lookup(self.worker, key, self.world)


def local_port(worker, live):
    """The port of a call on `worker`'s connection, in this interpreter."""
    return _LocalPort(worker, live)


def local_end(worker, piece, raised=False):
    """The store's verdict on the call that ended (CourierStore.end)."""
    return _store.end(worker, piece, raised)
