"""The Python side of the delivery-lab host: it loads the learner's solution.py and
runs one learner function per call from the grader, with the lab's objects built
over the grader's world.

The engine (Rust, compiled to WASM) decides everything: which calls to make, what
the world answers, what was expected. This module only translates. Every kv, send
and draw goes to the world, so the engine sees and logs it; expected values never
come here.
"""

import json
import linecache
import math
import sys
import traceback
import types

SOLUTION_FILE = "solution.py"
OUTPUT_CAP = 2000   # characters of print output kept per test
REPR_CAP = 300      # characters of an unknown value's repr kept for messages
MESSAGE_CAP = 4000  # characters of a traceback kept (the engine caps a report's fields at 4096)
DEPTH_CAP = 20      # nesting of tuples/lists described before giving up

_solution = None    # the learner's module, fresh for each run
_timed_out = False  # once the run hit its limit, every later call ends at once
_limit_s = 8.0


# ---------------------------------------------------------------------------
# The contract's objects


class _Record:
    """A read-only record: the learner reads attributes, never changes them, so a
    test cannot be passed by editing its inputs."""

    __slots__ = ()
    _name = "record"

    def __setattr__(self, name, value):
        raise AttributeError(f"{self._name} is read-only: cannot set {self._name}.{name}")

    def __delattr__(self, name):
        raise AttributeError(f"{self._name} is read-only: cannot delete {self._name}.{name}")

    def __repr__(self):
        fields = ", ".join(f"{k}={getattr(self, k)!r}" for k in self.__slots__)
        return f"{type(self).__name__}({fields})"

    def __eq__(self, other):
        return type(self) is type(other) and all(
            getattr(self, k) == getattr(other, k) for k in self.__slots__
        )

    __hash__ = None


# Records are built once per learner call, so each has a positional __init__:
# measured in Pyodide, a third of the cost of a generic **fields one.
_set = object.__setattr__


class Task(_Record):
    __slots__ = ("key", "kind", "attempt", "expires_at", "fallback")
    _name = "task"

    def __init__(self, key, kind, attempt, expires_at, fallback):
        _set(self, "key", key)
        _set(self, "kind", kind)
        _set(self, "attempt", attempt)
        _set(self, "expires_at", expires_at)
        _set(self, "fallback", fallback)


class Policy(_Record):
    __slots__ = ("claim_ttl_s", "at_most_once", "min_delay_s", "base_delay_s", "max_attempts")
    _name = "policy"

    def __init__(self, claim_ttl_s, at_most_once, min_delay_s, base_delay_s, max_attempts):
        _set(self, "claim_ttl_s", claim_ttl_s)
        _set(self, "at_most_once", at_most_once)
        _set(self, "min_delay_s", min_delay_s)
        _set(self, "base_delay_s", base_delay_s)
        _set(self, "max_attempts", max_attempts)


class SendResult(_Record):
    __slots__ = ("ok", "permanent", "reason", "retry_after_s")
    _name = "result"

    def __init__(self, ok, permanent, reason, retry_after_s):
        _set(self, "ok", ok)
        _set(self, "permanent", permanent)
        _set(self, "reason", reason)
        _set(self, "retry_after_s", retry_after_s)


def _opt_float(x):
    return None if x is None else float(x)


def _task(d):
    # The engine's field is expires_at_s; the contract calls it expires_at.
    return Task(d["key"], d["kind"], int(d["attempt"]), float(d["expires_at_s"]), d.get("fallback"))


def _policy(d):
    return Policy(float(d["claim_ttl_s"]), bool(d["at_most_once"]), float(d["min_delay_s"]),
                  float(d["base_delay_s"]), int(d["max_attempts"]))


def _result(d):
    return SendResult(bool(d["ok"]), bool(d["permanent"]), d["reason"],
                      _opt_float(d.get("retry_after_s")))


def _type(x):
    return type(x).__name__


class _Call:
    """The world of one learner call. It is revoked when the call returns, so a
    kv, provider or rng kept in a global fails with a clear message in a later
    call instead of reaching a world that no longer exists."""

    __slots__ = ("world",)

    def __init__(self, world):
        self.world = world

    def __call__(self, name):
        if self.world is None:
            raise RuntimeError(f"this {name} belongs to an earlier call that has already returned; "
                               f"use the {name} passed to the current call")
        return self.world


def _number(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool)


class KV:
    """The key-value store, backed by the engine's world (which expires keys on
    the lab clock). Arguments are checked here, with Python's own exceptions, so a
    mistake reads like one in any Python library."""

    __slots__ = ("_call",)

    def __init__(self, call):
        object.__setattr__(self, "_call", call)

    def __setattr__(self, name, value):
        raise AttributeError("kv has no attributes to set")

    def __repr__(self):
        return "<kv>"

    def get(self, key):
        if not isinstance(key, str):
            raise TypeError(f"kv.get(key): key must be a str, not {_type(key)}")
        value = self._call("kv").kv_get(str(key))
        return value if isinstance(value, str) else None

    def set(self, key, value, ttl=None, nx=False):
        if not isinstance(key, str):
            raise TypeError(f"kv.set(key, value, ttl=None, nx=False): key must be a str, not {_type(key)}")
        if not isinstance(value, str):
            raise TypeError(f"kv.set(key, value, ttl=None, nx=False): value must be a str, not {_type(value)}")
        if ttl is not None:
            if not _number(ttl):
                raise TypeError(f"kv.set(...): ttl must be None or a number of seconds (int or float), not {_type(ttl)}")
            if not math.isfinite(ttl):
                raise ValueError(f"kv.set(...): ttl must be a finite number of seconds, not {ttl!r}")
            ttl = float(ttl)
        if not isinstance(nx, bool):
            raise TypeError(f"kv.set(...): nx must be True or False, not {_type(nx)}")
        # Keywords were parsed here: the world takes positional arguments only.
        return bool(self._call("kv").kv_set(str(key), str(value), ttl, nx))

    def delete(self, key):
        if not isinstance(key, str):
            raise TypeError(f"kv.delete(key): key must be a str, not {_type(key)}")
        return bool(self._call("kv").kv_delete(str(key)))


class Provider:
    __slots__ = ("_call",)

    def __init__(self, call):
        object.__setattr__(self, "_call", call)

    def __setattr__(self, name, value):
        raise AttributeError("provider has no attributes to set")

    def __repr__(self):
        return "<provider>"

    def send(self, task):
        key = getattr(task, "key", None)
        if not isinstance(key, str):
            raise TypeError(f"provider.send(task): pass the task you were given, not {_type(task)}")
        return _result(json.loads(self._call("provider").send(str(key))))


class Rng:
    __slots__ = ("_call",)

    def __init__(self, call):
        object.__setattr__(self, "_call", call)

    def __setattr__(self, name, value):
        raise AttributeError("rng has no attributes to set")

    def __repr__(self):
        return "<rng>"

    def uniform(self, a, b):
        for name, x in (("a", a), ("b", b)):
            if not _number(x):
                raise TypeError(f"rng.uniform(a, b): {name} must be a number, not {_type(x)}")
            if not math.isfinite(x):
                raise ValueError(f"rng.uniform(a, b): {name} must be finite, not {x!r}")
        return float(self._call("rng").uniform(float(a), float(b)))


# ---------------------------------------------------------------------------
# Output capture


class _Output:
    """Collects what the learner prints during one test, up to OUTPUT_CAP
    characters; the engine takes it after each test."""

    def __init__(self):
        self.parts = []
        self.size = 0
        self.cut = False

    def write(self, s):
        if not isinstance(s, str):
            raise TypeError(f"write() argument must be str, not {_type(s)}")
        room = OUTPUT_CAP - self.size
        if len(s) > room:
            s, self.cut = s[:max(room, 0)], True
        if s:
            self.parts.append(s)
            self.size += len(s)
        return len(s)

    def flush(self):
        pass

    def isatty(self):
        return False

    def take(self):
        text = "".join(self.parts)
        if self.cut:
            text += f"\n[output cut at {OUTPUT_CAP} characters]"
        self.parts, self.size, self.cut = [], 0, False
        return text or None


_output = _Output()


class _Captured:
    """Routes print() to the capture while learner code runs."""

    def __enter__(self):
        self.saved = sys.stdout, sys.stderr
        sys.stdout = sys.stderr = _output

    def __exit__(self, *exc):
        sys.stdout, sys.stderr = self.saved
        return False


def take_output():
    return _output.take()


# ---------------------------------------------------------------------------
# Tracebacks that show the learner's code only


def _learner_only(te):
    te.stack = traceback.StackSummary.from_list(
        [f for f in te.stack if f.filename == SOLUTION_FILE])
    for nested in (te.__cause__, te.__context__):
        if nested is not None:
            _learner_only(nested)
    for sub in getattr(te, "exceptions", None) or ():
        _learner_only(sub)
    return te


def _format_exception(exc):
    te = traceback.TracebackException.from_exception(exc)
    text = "".join(_learner_only(te).format())
    if len(text) > MESSAGE_CAP:
        text = text[:MESSAGE_CAP] + f"\n[cut at {MESSAGE_CAP} characters]\n"
    return text


# ---------------------------------------------------------------------------
# Hardening: the learner's code has no business with the host


# Modules that lead from Python to JavaScript (the page, Node's process), the
# network or the interpreter's memory. solution.py cannot import them; this is
# the first wall only: the grading CLI also runs the interpreter in a sandboxed
# process and judges its behaviour outside it (www/cli/README.md).
BLOCKED_MODULES = ("js", "pyodide_js", "pyodide", "_pyodide", "micropip", "pyodide_http",
                   "ctypes", "_ctypes")
_alarms = []        # what the learner tried that the hardening refused
_hardened = False


def _is_blocked(name):
    return isinstance(name, str) and name.partition(".")[0] in BLOCKED_MODULES


class _ImportGuard:
    """First on sys.meta_path: refuses the blocked modules with a clear message."""

    def find_spec(self, name, path=None, target=None):
        if _is_blocked(name):
            _alarms.append(name)
            raise ImportError(
                f"solution.py cannot import `{name}`: the lab's code runs without access to the "
                "host (JavaScript, the network, the file system, packages). Use the objects your "
                "functions receive and the standard library.", name=name)
        return None

    def invalidate_caches(self):
        pass


def _harden():
    """Applied once per interpreter, before the learner's module first runs: the
    blocked modules leave sys.modules (so `import js` cannot be served from the
    cache) and Pyodide's finder for JavaScript modules leaves sys.meta_path."""
    global _hardened
    if not _hardened:
        _hardened = True
        sys.meta_path[:] = [_ImportGuard()] + [
            f for f in sys.meta_path if type(f).__name__ != "JsFinder"]
    for name in [n for n in sys.modules if _is_blocked(n)]:
        del sys.modules[name]


def alarms_json():
    """What the hardening refused so far, as a JSON list (the CLI's sandbox asks)."""
    return json.dumps(_alarms)


# ---------------------------------------------------------------------------
# Loading and calling


def load(source, functions_json, limit_s=8.0):
    """Compiles and runs the learner's file as a fresh module `solution`.

    Returns a JSON string: {"ok": [functions found]}, {"error": message} when it
    cannot be graded at all, or {"timeout": message} when loading hit the limit."""
    global _solution, _timed_out, _limit_s
    _solution, _timed_out, _limit_s = None, False, float(limit_s)
    _harden()
    _output.take()
    functions = json.loads(functions_json)
    # linecache lets tracebacks quote the learner's lines.
    lines = source.splitlines(True)
    linecache.cache[SOLUTION_FILE] = (len(source), None, lines, SOLUTION_FILE)
    try:
        code = compile(source, SOLUTION_FILE, "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as e:
        detail = "".join(traceback.format_exception_only(e)).rstrip()
        return json.dumps({"error": "Your code could not be compiled, so no test ran.\n" + detail})
    module = types.ModuleType("solution")
    module.__file__ = SOLUTION_FILE
    sys.modules["solution"] = module
    try:
        with _Captured():
            exec(code, module.__dict__)
    except KeyboardInterrupt:
        _timed_out = True
        return json.dumps({"timeout": f"Stopped: loading solution.py took longer than the {_limit_s:g} s limit."})
    except BaseException as e:  # SystemExit too: the learner's file must not end the host
        return json.dumps({"error": "Your code raised an exception while it was loading, so no test ran.\n"
                           + _format_exception(e).rstrip()})
    found = [f for f in functions if callable(module.__dict__.get(f))]
    if not found:
        names = " nor ".join(f"`{f}`" for f in functions)
        return json.dumps({"error": f"solution.py defines neither {names}, so no test ran. "
                           "Define them at the top level of the file, with the signatures from the lab."})
    _solution = module
    return json.dumps({"ok": found})


# JSON for a str, as json.dumps writes it (the C encoder).
_json_str = json.encoder.encode_basestring_ascii


def _encode(v, depth=0):
    """A returned value as the engine's Value JSON text. Subclasses of str and
    tuple count as their base type, since that is what the learner meant. Written
    by hand: this runs once per learner call, and building dicts for json.dumps
    cost several times more (measured in Pyodide)."""
    if v is None:
        return '{"type":"none"}'
    if isinstance(v, bool):
        return '{"type":"bool","value":true}' if v else '{"type":"bool","value":false}'
    if isinstance(v, int) and -(2 ** 63) <= v < 2 ** 63:
        return '{"type":"int","value":' + int.__repr__(int(v)) + '}'
    if isinstance(v, float) and math.isfinite(v):
        return '{"type":"float","value":' + float.__repr__(float(v)) + '}'
    if isinstance(v, str):
        s = str.__str__(v)
        try:
            s.encode("utf-8")
            return '{"type":"str","value":' + _json_str(s) + '}'
        except UnicodeEncodeError:
            pass  # a lone surrogate cannot travel as JSON text: describe it below
    elif isinstance(v, (tuple, list)) and depth < DEPTH_CAP:
        kind = "tuple" if isinstance(v, tuple) else "list"
        items = ",".join([_encode(x, depth + 1) for x in v])
        return '{"type":"' + kind + '","value":[' + items + ']}'
    try:
        r = repr(v)
    except Exception as e:
        r = f"<{_type(v)} whose repr raised {_type(e)}>"
    if len(r) > REPR_CAP:
        r = r[:REPR_CAP] + "..."
    return json.dumps({"type": "other", "value": {"type_name": _type(v), "repr": r}})


def _timeout():
    return json.dumps({"error": {"kind": "timeout", "limit_s": _limit_s}})


def call(fn_name, args_json, world):
    """Runs one learner function for the engine; returns {"ok": Value} or
    {"error": LearnerError} as a JSON string."""
    global _timed_out
    if _timed_out:
        return _timeout()
    if fn_name.startswith("__courier_"):
        try:
            return _courier_host(fn_name, json.loads(args_json))
        except KeyboardInterrupt:
            _timed_out = True
            return _timeout()
        except Exception as e:
            return json.dumps({"error": {"kind": "host", "message": f"{_type(e)}: {e}"}})
    live = _Call(world)
    try:
        fn = getattr(_solution, fn_name, None)
        if not callable(fn):
            return json.dumps({"error": {"kind": "missing-function", "function": fn_name}})
        a = json.loads(args_json)
        if fn_name in _COURIER_PIECES:
            return _courier_call(fn, a, live)
        if fn_name == "deliver_once":
            args = (_task(a["task"]), Provider(live), KV(live), _policy(a["policy"]))
        elif fn_name == "next_step":
            args = (_task(a["task"]), _result(a["result"]), float(a["now_s"]),
                    _policy(a["policy"]), Rng(live))
        else:
            return json.dumps({"error": {"kind": "host", "message": f"the bridge does not know {fn_name}"}})
        with _Captured():
            value = fn(*args)
        return '{"ok":' + _encode(value) + '}'
    except KeyboardInterrupt:
        # The host raised it at the time limit (pyodide.setInterruptBuffer).
        _timed_out = True
        return _timeout()
    except BaseException as e:
        return _exception(e)
    finally:
        live.world = None


# ---------------------------------------------------------------------------
# The courier lab: a SQLite database per run, a connection per worker, and every
# statement and provider call asked of the engine's world first (src/courier/).


COURIER_SCHEMA = """
CREATE TABLE actions (
  id             INTEGER PRIMARY KEY,
  store          TEXT    NOT NULL,
  phone          TEXT    NOT NULL,
  body           TEXT    NOT NULL,
  created_ms     INTEGER NOT NULL,
  state          TEXT    NOT NULL DEFAULT 'pending',
  owner          TEXT,
  epoch          INTEGER NOT NULL DEFAULT 0,
  lease_until_ms INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX actions_by_state ON actions (state, store, id);
CREATE TABLE stores (
  store          TEXT    PRIMARY KEY,
  last_served_ms INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE outbox (
  action_id      INTEGER PRIMARY KEY,
  idem_key       TEXT    NOT NULL UNIQUE,
  attempts       INTEGER NOT NULL DEFAULT 0,
  status         TEXT    NOT NULL DEFAULT 'sending',
  message_id     TEXT,
  events_applied INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE webhook_events (
  event_id       TEXT    PRIMARY KEY
);
"""


class WorkerKilled(BaseException):
    """The simulator killed this worker here. Catching it changes nothing: the
    worker's connection is rolled back and its step's result is ignored."""


class _Courier:
    """The run's database: an in-memory SQLite shared by name (shared cache), the
    host's own connection for setup and reading, and one per worker."""

    n = 0

    def __init__(self, cfg):
        import sqlite3
        _Courier.n += 1
        self.sqlite3 = sqlite3
        self.uri = f"file:courier-{_Courier.n}?mode=memory&cache=shared"
        self.admin = sqlite3.connect(self.uri, uri=True)
        self.admin.executescript(COURIER_SCHEMA)
        self.conns = {}
        self.cfg = _Cfg(cfg["lease_ms"], cfg["in_flight_cap"], cfg["recheck_ms"])

    def conn(self, worker):
        c = self.conns.get(worker)
        if c is None:
            c = self.conns[worker] = self.sqlite3.connect(self.uri, uri=True)
        return c

    def close(self):
        for c in list(self.conns.values()) + [self.admin]:
            try:
                c.rollback()
                c.close()
            except Exception:
                pass
        self.conns = {}


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


_courier = None


def _fault(conn, live):
    verdict = live("db").statement(conn.in_transaction)
    if verdict == "go":
        return
    conn.rollback()
    if verdict == "kill":
        raise WorkerKilled()
    raise _courier.sqlite3.OperationalError("database is restarting")


class _Cursor:
    """A cursor whose statements are fault points too."""

    __slots__ = ("_cur", "_conn", "_live")

    def __init__(self, cur, conn, live):
        object.__setattr__(self, "_cur", cur)
        object.__setattr__(self, "_conn", conn)
        object.__setattr__(self, "_live", live)

    def execute(self, sql, parameters=()):
        _fault(self._conn, self._live)
        self._cur.execute(sql, parameters)
        return self

    def executemany(self, sql, seq):
        _fault(self._conn, self._live)
        self._cur.executemany(sql, seq)
        return self

    def fetchone(self):
        return self._cur.fetchone()

    def fetchall(self):
        return self._cur.fetchall()

    def fetchmany(self, size=None):
        return self._cur.fetchmany(self._cur.arraysize if size is None else size)

    def __iter__(self):
        return iter(self._cur)

    def close(self):
        self._cur.close()

    rowcount = property(lambda self: self._cur.rowcount)
    lastrowid = property(lambda self: self._cur.lastrowid)
    description = property(lambda self: self._cur.description)


class DB:
    """The worker's connection, as sqlite3.Connection offers it (execute,
    executemany, cursor, commit, rollback, in_transaction, `with db:`); every
    statement and every commit of an open transaction is a fault point."""

    __slots__ = ("_conn", "_live")

    def __init__(self, conn, live):
        object.__setattr__(self, "_conn", conn)
        object.__setattr__(self, "_live", live)

    def __setattr__(self, name, value):
        # row_factory is how rows by name (sqlite3.Row) are asked for; nothing
        # else of the connection is the learner's to change.
        if name == "row_factory":
            self._conn.row_factory = value
            return
        raise AttributeError(f"db.{name} cannot be set here; use SQL (db.row_factory may be set)")

    @property
    def row_factory(self):
        return self._conn.row_factory

    def __repr__(self):
        return "<db: sqlite3 connection>"

    def execute(self, sql, parameters=()):
        return _Cursor(self._conn.cursor(), self._conn, self._live).execute(sql, parameters)

    def executemany(self, sql, seq):
        return _Cursor(self._conn.cursor(), self._conn, self._live).executemany(sql, seq)

    def cursor(self):
        return _Cursor(self._conn.cursor(), self._conn, self._live)

    def commit(self):
        if self._conn.in_transaction:
            _fault(self._conn, self._live)
        self._conn.commit()

    def rollback(self):
        self._conn.rollback()

    @property
    def in_transaction(self):
        return self._conn.in_transaction

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

    __slots__ = ("_conn", "_live")

    def __init__(self, conn, live):
        object.__setattr__(self, "_conn", conn)
        object.__setattr__(self, "_live", live)

    def __setattr__(self, name, value):
        raise AttributeError("provider has no attributes to set")

    def __repr__(self):
        return "<provider>"

    def send(self, key, phone, body):
        for name, v in (("key", key), ("phone", phone), ("body", body)):
            if not isinstance(v, str):
                raise TypeError(f"provider.send: {name} must be a str, not {_type(v)}")
        # What the outbox holds for this key, committed, as the request leaves
        # (the engine checks the attempt was counted first). An open transaction
        # means nothing of it is committed yet.
        committed = None
        if not self._conn.in_transaction:
            row = _courier.admin.execute(
                "SELECT attempts FROM outbox WHERE idem_key = ?", (key,)).fetchone()
            committed = None if row is None else row[0]
        return self._answer(self._live("provider").send(key, phone, body, committed))

    def lookup(self, key):
        if not isinstance(key, str):
            raise TypeError(f"provider.lookup: key must be a str, not {_type(key)}")
        return self._answer(self._live("provider").lookup(key))

    def _answer(self, text):
        # The world's answer as a dict, or the worker's end: killed at this call.
        answer = json.loads(text)
        if answer.get("answer") == "killed":
            self._conn.rollback()
            raise WorkerKilled()
        return answer


def _courier_dump():
    a = _courier.admin
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


def _courier_load(t):
    a = _courier.admin
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


def _courier_host(op, a):
    """The host's trusted operations on the run's database."""
    global _courier
    if op == "__courier_reset":
        if _courier is not None:
            _courier.close()
        _courier = _Courier(a["cfg"])
        _courier.admin.executemany("INSERT INTO stores (store) VALUES (?)", [(s,) for s in a["stores"]])
    elif op == "__courier_enqueue":
        _courier.admin.execute(
            "INSERT INTO actions (id, store, phone, body, created_ms) VALUES (?, ?, ?, ?, ?)",
            (a["id"], a["store"], a["phone"], a["body"], a["created_ms"]))
    elif op == "__courier_settle":
        _courier.admin.execute(
            "UPDATE actions SET state = 'dispatched', lease_until_ms = ? WHERE id = ?", (a[1], a[0]))
    elif op == "__courier_kill":
        c = _courier.conns.pop(a, None)
        if c is not None:
            c.rollback()
            c.close()
    elif op == "__courier_restart":
        for c in _courier.conns.values():
            c.rollback()
    elif op == "__courier_dump":
        return '{"ok":' + json.dumps(_courier_dump()) + '}'
    elif op == "__courier_load":
        _courier_load(a)
    else:
        raise ValueError(f"unknown host operation {op}")
    _courier.admin.commit()
    return '{"ok":null}'


_COURIER_PIECES = ("claim", "write_intent", "deliver_step", "merge", "on_webhook", "heartbeat")


def _courier_call(fn, a, live):
    """One learner piece with its objects; the worker's connection must not be
    left inside a transaction."""
    piece = a["piece"]
    if piece == "merge":
        with _Captured():
            return '{"ok":' + _encode(fn(a["current"], a["reported"])) + '}'
    worker = a.get("worker", "webhooks")
    conn = _courier.conn(worker)
    db = DB(conn, live)
    cfg = _courier.cfg
    if piece == "claim":
        args = (db, worker, a["now_ms"], cfg)
    elif piece == "write_intent":
        args = (db, a["action_id"], worker, a["epoch"])
    elif piece == "deliver_step":
        args = (db, CourierProvider(conn, live), a["action_id"], worker, a["epoch"], a["now_ms"], cfg)
    elif piece == "heartbeat":
        args = (db, a["action_id"], worker, a["epoch"], a["now_ms"], cfg)
    else:
        e = a["event"]
        args = (db, Event(e["event_id"], e["key"], e["message_id"], e["status"]))
    try:
        with _Captured():
            value = fn(*args)
    except WorkerKilled:
        return '{"ok":{"type":"none"}}'
    finally:
        left_open = conn.in_transaction
        if left_open:
            conn.rollback()
    if left_open:
        return json.dumps({"error": {"kind": "exception", "message":
            f"{piece} returned with a transaction still open; it was rolled back. "
            "Commit (or roll back) before a step returns."}})
    return '{"ok":' + _encode(value) + '}'


def _exception(e):
    try:
        message = _format_exception(e).rstrip()
    except BaseException as f:  # a learner's exception whose str() raises
        message = f"{_type(e)} (its message could not be shown: {_type(f)})"
    return json.dumps({"error": {"kind": "exception", "message": message}})
