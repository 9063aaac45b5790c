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
    return "".join(_learner_only(te).format())


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
    live = _Call(world)
    try:
        fn = getattr(_solution, fn_name, None)
        if not callable(fn):
            return json.dumps({"error": {"kind": "missing-function", "function": fn_name}})
        a = json.loads(args_json)
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


def _exception(e):
    try:
        message = _format_exception(e).rstrip()
    except BaseException as f:  # a learner's exception whose str() raises
        message = f"{_type(e)} (its message could not be shown: {_type(f)})"
    return json.dumps({"error": {"kind": "exception", "message": message}})
