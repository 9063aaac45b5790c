"""The courier lab's Python side in the learner's interpreter: the objects the
learner's pieces receive (`db`, `provider`, `cfg`, the webhook's event) and how
each piece is called. The run's database is not here: it is the store's
(db_store.py, the trusted side), which `db` and `provider` reach through a port,
one statement or provider call at a time. Every host that runs learner code
imports this module beside the bridge (www/host/solution_runner.py, which loads the
learner's file and runs every call through `call`); the registry carries it
(`LabInfo::bridge_py`). What crosses the port (the names of the exceptions, the
caps, how a statement's text and parameters travel) is written once, here, and
the store imports it from here: the learner's interpreter never gets the store.
"""

import binascii
import json
import marshal

from delivery_lab_bridge import _Captured, _encode, _Record, _set, _type

# ---------------------------------------------------------------------------
# The port: what crosses between the learner's `db` and the store, whether the
# store is in this interpreter (the page) or a process away (the grading CLI's
# sandbox asks the grading thread's store through its call's world). The store
# imports these; what it answers is believed over anything the learner's side says.

ROWS_CAP = 100_000                 # rows one statement may answer or executemany take
# The exceptions a statement may raise in the learner's code, by name (the name
# is what crosses from the store to a sandbox).
SQL_ERRORS = ("Warning", "Error", "InterfaceError", "DatabaseError", "DataError",
              "OperationalError", "IntegrityError", "InternalError", "ProgrammingError",
              "NotSupportedError")


# A statement's text crosses from a sandbox once: the sandbox numbers each text it
# sends (up to SQL_KEPT of them, each at most SQL_KEPT_CHARS long) and sends the
# same text again as SQL_REF, its number and its CRC-32, which the store checks
# against what it kept. The texts repeat (a run sends about 75,000 statements of a
# few dozen texts), and were most of what a run sent the grading thread. A number
# the store does not hold, or whose CRC differs, is an error in the learner's code,
# never another statement. A text that starts with SQL_REF is sent as SQL_RAW + it.
SQL_REF = "\x00"
SQL_RAW = "\x00!"
SQL_KEPT = 1024
SQL_KEPT_CHARS = 8_000


def _keeps(text, kept):
    return len(kept) < SQL_KEPT and len(text) <= SQL_KEPT_CHARS and not text.startswith(SQL_REF)


_sql_sent = {}       # a sandbox's side: text -> what it sends for it again


# Parameters as JSON (the store parses what a sandbox sends with nothing more
# powerful); a blob (bytes) as {"blob": base64}. Blobs are rare,
# so the plain (fast) coders run first and the hooks only when one is there:
# measured in Pyodide, an object_hook alone makes json.loads five times slower.

def _dumps(v):
    try:
        return json.dumps(v)
    except TypeError:
        return json.dumps(v, default=_pack_blob)


def _loads(text):
    if '{"blob": ' in text:
        return json.loads(text, object_hook=_unpack_blob)
    return json.loads(text)


def _pack_blob(v):
    if isinstance(v, bytes):
        import base64
        return {"blob": base64.b64encode(v).decode("ascii")}
    raise TypeError(f"{_type(v)} cannot be a SQLite value")


def _unpack_blob(d):
    if len(d) == 1 and "blob" in d:
        import base64
        return base64.b64decode(d["blob"])
    return d


def _piece_worker(a):
    """The connection a piece's call runs on: None for merge (no database), else
    its worker's, the webhook receiver's ("webhooks") when it names none."""
    return None if a["piece"] == "merge" else a.get("worker", "webhooks")


# ---------------------------------------------------------------------------
# The learner's objects over the port.

PLAIN_ERRORS = {"TypeError": TypeError, "ValueError": ValueError,
                "OverflowError": OverflowError, "MemoryError": MemoryError}


class WorkerKilled(BaseException):
    """The simulator killed this worker here. Catching it changes nothing: the
    worker's connection is rolled back and its step's result is ignored."""


class _Cfg(_Record):
    __slots__ = ("lease_ms", "in_flight_cap", "recheck_ms")
    _name = "cfg"

    def __init__(self, lease_ms, in_flight_cap, recheck_ms):
        _set(self, "lease_ms", lease_ms)
        _set(self, "in_flight_cap", in_flight_cap)
        _set(self, "recheck_ms", recheck_ms)


class Event(_Record):
    __slots__ = ("event_id", "key", "message_id", "status")
    _name = "event"

    def __init__(self, event_id, key, message_id, status):
        _set(self, "event_id", event_id)
        _set(self, "key", key)
        _set(self, "message_id", message_id)
        _set(self, "status", status)


class _RemotePort:
    """The store a process away (the grading CLI's sandbox): each request is an
    operation of the call's world, which the coordinator answers from its store."""

    __slots__ = ("live", "start", "_op")

    def __init__(self, live):
        world = live("db")
        self.live = live
        self.start = json.loads(world.db)   # db_store.py's store_begin answered it
        # Looked up once (see db_store.py's _World); `live` is still asked at each request, so
        # a db kept from an earlier call fails as it should.
        self._op = world.op

    def fresh(self):
        return self.start["fresh"] is True

    def cfg(self):
        return self.start["cfg"]

    def sql(self, kind, sql, params):
        self.live("db")
        text = str.__str__(sql) if sql else ""
        wire = _sql_sent.get(text)
        if wire is None:
            wire = SQL_RAW + text if text.startswith(SQL_REF) else text
        answer = self._op("sql", kind, wire, _dumps(params))
        if wire is text and _keeps(text, _sql_sent):
            # The store kept it as it answered: the next time, its number.
            crc = binascii.crc32(text.encode("utf-8", "surrogatepass"))
            _sql_sent[text] = f"{SQL_REF}{len(_sql_sent)}:{crc}"
        return marshal.loads(binascii.a2b_base64(answer))

    def send(self, key, phone, body):
        self.live("provider")
        return self._op("send", key, phone, body)

    def lookup(self, key):
        self.live("provider")
        return self._op("lookup", key)


def _value(v, n):
    """A parameter as SQLite takes it (sqlite3's own rules, so both ports agree)."""
    if v is None or type(v) in (int, float, str, bytes):
        return v
    if isinstance(v, int):
        return int(v)       # bool and int subclasses bind as integers
    if isinstance(v, float):
        return float(v)
    if isinstance(v, str):
        return str.__str__(v)
    if isinstance(v, (bytearray, memoryview)):
        return bytes(v)
    import sqlite3
    raise sqlite3.ProgrammingError(f"Error binding parameter {n}: type '{_type(v)}' is not supported")


_PLAIN = (int, float, str, type(None))


def _params(p):
    if type(p) is tuple or type(p) is list:
        out = list(p)
        for v in out:
            if type(v) not in _PLAIN:   # rare: convert (or refuse) one by one
                return [_value(v, i + 1) for i, v in enumerate(p)]
        return out
    import sqlite3
    from collections.abc import Mapping, Sequence
    if isinstance(p, (tuple, list)) or (isinstance(p, Sequence) and not isinstance(p, Mapping)):
        return [_value(v, i + 1) for i, v in enumerate(p)]
    if isinstance(p, Mapping):
        out = {}
        for k in p:
            if not isinstance(k, str):
                raise sqlite3.ProgrammingError("named parameters must be given with str keys")
            out[k] = _value(p[k], k)
        return out
    raise sqlite3.ProgrammingError("parameters are of unsupported type")


def _many(seq):
    import sqlite3
    out = []
    for p in seq:
        out.append(_params(p))
        if len(out) > ROWS_CAP:
            raise sqlite3.OperationalError(f"executemany takes at most {ROWS_CAP} parameter sets")
    return out


_row_cursors = {}    # a description -> a real cursor with it (what sqlite3.Row needs)
_row_factories = {}  # worker -> the row_factory its connection has
_row_conn = None


def _row_cursor(description):
    global _row_conn
    cur = _row_cursors.get(description)
    if cur is None:
        import sqlite3
        if _row_conn is None:
            _row_conn = sqlite3.connect(":memory:")
        cols = ", ".join('NULL AS "' + name.replace('"', '""') + '"' for name in description)
        cur = _row_cursors[description] = _row_conn.execute(f"SELECT {cols} LIMIT 0")
    return cur


class _Cursor:
    """A cursor over rows the store answered in full."""

    __slots__ = ("_db", "_rows", "_at", "_names", "rowcount", "lastrowid", "arraysize")

    def __init__(self, db):
        self._db, self._rows, self._at, self._names = db, [], 0, None
        self.rowcount, self.lastrowid, self.arraysize = -1, None, 1

    def execute(self, sql, parameters=()):
        if not isinstance(sql, str):
            raise TypeError(f"execute() argument 1 must be str, not {_type(sql)}")
        self._take(self._db._run("execute", sql, _params(parameters)))
        return self

    def executemany(self, sql, seq_of_parameters):
        if not isinstance(sql, str):
            raise TypeError(f"executemany() argument 1 must be str, not {_type(sql)}")
        self._take(self._db._run("executemany", sql, _many(seq_of_parameters)))
        return self

    def _take(self, r):
        _, self._rows, self.rowcount, self.lastrowid, self._names, _ = r
        self._at = 0

    @property
    def description(self):
        if self._names is None:
            return None
        return tuple((n, None, None, None, None, None, None) for n in self._names)

    def _row(self, raw):
        factory = _row_factories.get(self._db._worker)
        row = tuple(raw)
        if factory is None:
            return row
        import sqlite3
        if factory is sqlite3.Row:
            return sqlite3.Row(_row_cursor(self._names), row)
        return factory(self, row)

    def fetchone(self):
        if self._at >= len(self._rows):
            return None
        self._at += 1
        return self._row(self._rows[self._at - 1])

    def fetchmany(self, size=None):
        n = self.arraysize if size is None else size
        out = []
        while len(out) < n and self._at < len(self._rows):
            out.append(self.fetchone())
        return out

    def fetchall(self):
        out = [self._row(r) for r in self._rows[self._at:]]
        self._at = len(self._rows)
        return out

    def __iter__(self):
        return self

    def __next__(self):
        row = self.fetchone()
        if row is None:
            raise StopIteration
        return row

    def close(self):
        self._rows, self._at = [], 0


class DB:
    """The worker's connection, as sqlite3.Connection offers it (execute,
    executemany, cursor, commit, rollback, in_transaction, row_factory, `with
    db:`); every statement and every commit of an open transaction is a fault
    point, asked by the store."""

    __slots__ = ("_port", "_worker", "_in_tx")

    def __init__(self, port, worker):
        object.__setattr__(self, "_port", port)
        object.__setattr__(self, "_worker", worker)
        object.__setattr__(self, "_in_tx", False)

    def __setattr__(self, name, value):
        # row_factory is how rows by name (sqlite3.Row) are asked for; nothing
        # else of the connection is the learner's to change.
        if name == "row_factory":
            if value is not None and not callable(value):
                raise TypeError("db.row_factory must be callable (sqlite3.Row, say) or None")
            _row_factories[self._worker] = value
            return
        raise AttributeError(f"db.{name} cannot be set here; use SQL (db.row_factory may be set)")

    @property
    def row_factory(self):
        return _row_factories.get(self._worker)

    def __repr__(self):
        return "<db: sqlite3 connection>"

    def _run(self, kind, sql, params):
        r = self._port.sql(kind, sql, params)
        object.__setattr__(self, "_in_tx", r[5] is True)
        error = r[0]
        if error is None:
            return r
        if error == "killed":
            raise WorkerKilled()
        import sqlite3
        name, message = error
        raise (getattr(sqlite3, name) if name in SQL_ERRORS else PLAIN_ERRORS.get(name, sqlite3.DatabaseError))(message)

    def execute(self, sql, parameters=()):
        return _Cursor(self).execute(sql, parameters)

    def executemany(self, sql, seq_of_parameters):
        return _Cursor(self).executemany(sql, seq_of_parameters)

    def cursor(self):
        return _Cursor(self)

    def commit(self):
        self._run("commit", None, None)

    def rollback(self):
        self._run("rollback", None, None)

    @property
    def in_transaction(self):
        return self._in_tx

    def __enter__(self):
        return self

    def __exit__(self, kind, value, tb):
        if kind is None:
            self.commit()
        else:
            self.rollback()
        return False


class CourierProvider:
    """The SMS provider: send(key, phone, body) and lookup(key), answering dicts."""

    __slots__ = ("_port",)

    def __init__(self, port):
        object.__setattr__(self, "_port", port)

    def __setattr__(self, name, value):
        raise AttributeError("provider has no attributes to set")

    def __repr__(self):
        return "<provider>"

    def send(self, key, phone, body):
        for name, v in (("key", key), ("phone", phone), ("body", body)):
            if not isinstance(v, str):
                raise TypeError(f"provider.send: {name} must be a str, not {_type(v)}")
        return self._answer(self._port.send(str.__str__(key), str.__str__(phone), str.__str__(body)))

    def lookup(self, key):
        if not isinstance(key, str):
            raise TypeError(f"provider.lookup: key must be a str, not {_type(key)}")
        return self._answer(self._port.lookup(str.__str__(key)))

    def _answer(self, text):
        # The world's answer as a dict, or the worker's end: killed at this call
        # (the store has rolled its transaction back).
        answer = json.loads(text)
        if answer.get("answer") == "killed":
            raise WorkerKilled()
        return answer


# The store in this interpreter, when its host keeps it here (the page's worker:
# db_store.py, given by use_local_store); else None, and the store is a process
# away (the grading CLI's sandbox, whose interpreter never gets the store).
_local = None


def use_local_store(store):
    """Called once by a host that keeps the store beside the learner's code (the
    page's engine, www/host/engine.mjs): `store` is db_store.py's module."""
    global _local
    _local = store


def call(fn_name, fn, a, live):
    """One learner piece with its objects. A transaction left open is rolled
    back and fails the step (the store checks: here, when it is in this
    interpreter; under the grading CLI the coordinator asks its store the same
    question after the call)."""
    piece = a["piece"]
    worker = _piece_worker(a)
    if worker is None:
        with _Captured():
            return '{"ok":' + _encode(fn(a["current"], a["reported"])) + '}'
    local = _local
    port = _RemotePort(live) if local is None else local.local_port(worker, live)
    if port.fresh():
        _row_factories.pop(worker, None)
    db = DB(port, worker)
    c = port.cfg()
    cfg = _Cfg(c["lease_ms"], c["in_flight_cap"], c["recheck_ms"])
    if piece == "claim":
        args = (db, worker, a["now_ms"], cfg)
    elif piece == "write_intent":
        args = (db, a["action_id"], worker, a["epoch"])
    elif piece == "deliver_step":
        args = (db, CourierProvider(port), a["action_id"], worker, a["epoch"], a["now_ms"], cfg)
    elif piece == "heartbeat":
        args = (db, a["action_id"], worker, a["epoch"], a["now_ms"], cfg)
    else:
        e = a["event"]
        args = (db, Event(e["event_id"], e["key"], e["message_id"], e["status"]))
    try:
        with _Captured():
            value = fn(*args)
    except WorkerKilled:
        # The kill escaped, as it must: the grader tells this apart from a call that
        # kept it (a bare `except:`) and returned.
        return '{"error":{"kind":"host","message":"killed"}}'
    except Exception:
        # A crash: its exception is the call's error, unless the store refused
        # something of the call; what it left open is rolled back either way.
        if local is not None:
            refused = local.local_end(worker, piece, raised=True)
            if refused is not None:
                return refused
        raise
    if local is not None:
        refused = local.local_end(worker, piece)
        if refused is not None:
            return refused
    return '{"ok":' + _encode(value) + '}'
