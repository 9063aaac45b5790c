"""The Python side of the delivery-lab host: it loads the learner's solution.py and
runs one learner function per call from the grader, through the lab's own Python
side (a module of the lab's folder, `LabInfo::bridge_py`: `src/deliver_once/bridge.py`,
`src/courier/learner_side.py`, which builds the learner's objects over the
grader's world).

The engine (Rust, compiled to WASM) decides everything: which calls to make, what
the world answers, what was expected. This module and the labs' only translate:
expected values never come here.

A lab's module (imported beside this one, chosen with `use_lab`) provides
`call(fn_name, fn, args, live)`: runs the learner's function `fn` on the grader's
arguments (parsed JSON) with the lab's objects over `live` (the call's world, see
`_Call`), answering JSON text. A lab whose calls get a database has a store
module too (`LabInfo::store_py`), imported only by the host that keeps the store;
the grader's own operations on it come through `store_op`, never through `call`.
"""

import functools
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
_lab = None         # the lab's module (use_lab)
_interrupts = True  # False where the host never interrupts (the grading CLI's sandbox):
                    # a KeyboardInterrupt there is the learner's own exception
_timed_out = False  # once the run hit its limit, every later call ends at once
_limit_s = None     # the lab's limit (its registry entry's time_limit_s), given by load


# ---------------------------------------------------------------------------
# The contract's objects


class _Record:
    """A read-only record: the learner reads attributes, never changes them, so a
    test cannot be passed by editing its inputs. Its fields are the slots of its
    classes (`_fields`), which may sit on a plain base: a lab's bridge fills such a
    base's instance and then gives it the record's class (`obj.__class__ = Record`),
    in a third of the time of an __init__ that must step around __setattr__
    (measured in Pyodide)."""

    __slots__ = ()
    _name = "record"
    _fields = ()

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls._fields = tuple(n for k in reversed(cls.__mro__) for n in k.__dict__.get("__slots__", ()))

    def __setattr__(self, name, value):
        raise AttributeError(f"{self._name} is read-only: cannot set {self._name}.{name}")

    def __delattr__(self, name):
        raise AttributeError(f"{self._name} is read-only: cannot delete {self._name}.{name}")

    def __repr__(self):
        fields = ", ".join(f"{k}={getattr(self, k)!r}" for k in self._fields)
        return f"{type(self).__name__}({fields})"

    def __eq__(self, other):
        return type(self) is type(other) and all(
            getattr(self, k) == getattr(other, k) for k in self._fields
        )

    __hash__ = None


# Records are built once per learner call, so each has a positional __init__:
# measured in Pyodide, a third of the cost of a generic **fields one.
_set = object.__setattr__


def _type(x):
    return type(x).__name__


class _WorldOp:
    """The host's world as Python sees it: `op(name, ...args)`, the host's function
    bound once (bind_world_op), which answers for the call under way only."""

    __slots__ = ("op",)


_bound_world = _WorldOp()
_bound_world.op = None


def bind_world_op(op):
    """Called once by the host (engine.mjs): the function every world operation
    goes through; call(..., True) then means "this call has the bound world"."""
    _bound_world.op = op


class _Call:
    """The world of one learner call. It is revoked when the call returns, so a
    kv, provider or rng kept in a global fails with a clear message in a later
    call instead of reaching a world that no longer exists."""

    __slots__ = ("world",)

    def __call__(self, name):
        if self.world is None:
            raise RuntimeError(f"this {name} belongs to an earlier call that has already returned; "
                               f"use the {name} passed to the current call")
        return self.world


def _number(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool)


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
        text = _sendable("".join(self.parts))
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
    text = _sendable("".join(_learner_only(te).format()))
    if len(text) > MESSAGE_CAP:
        text = text[:MESSAGE_CAP] + f"\n[cut at {MESSAGE_CAP} characters]\n"
    return text


def _sendable(text):
    """Learner text as it can travel as JSON to the engine: a lone surrogate
    (`"\\ud800"`, valid in a Python str) is no Unicode text, and the engine's JSON
    reader refuses it, so it is written out as its escape, as the learner typed it."""
    if text.isascii():
        return text
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


# ---------------------------------------------------------------------------
# Hardening: the learner's code has no business with the host


# Modules that lead from Python to JavaScript (the page, Node's process), the
# network or the interpreter's memory. solution.py cannot import them; this is
# the first wall only: the grading CLI also runs the interpreter in a sandboxed
# process and judges its behaviour outside it (www/grader/README.md).
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


def use_lab(module_name):
    """The lab whose learner code this interpreter runs: its module, imported."""
    global _lab
    _lab = sys.modules[module_name]


def no_interrupts():
    """Called once by the grading CLI's sandbox: its host never interrupts (the
    limit ends the process), so a KeyboardInterrupt is reported as the exception it
    is, never as the time limit, which only the grader says is reached."""
    global _interrupts
    _interrupts = False


def load(source, functions_json, limit_s):
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
        detail = _sendable("".join(traceback.format_exception_only(e)).rstrip())
        return json.dumps({"error": "Your code could not be compiled, so no test ran.\n" + detail})
    module = types.ModuleType("solution")
    module.__file__ = SOLUTION_FILE
    sys.modules["solution"] = module
    try:
        with _Captured():
            exec(code, module.__dict__)
    except BaseException as e:  # SystemExit too: the learner's file must not end the host
        if isinstance(e, KeyboardInterrupt) and _interrupts:
            _timed_out = True
            return json.dumps({"timeout": f"Stopped: loading solution.py took longer than the {_limit_s:g} s limit."})
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
# The decoder's own scanner (C), which raw_decode wraps in Python.
_scan = json.JSONDecoder().scan_once


def _args(text):
    """The grader's arguments (JSON text it wrote) parsed: json.loads's result
    without its wrappers, which cost more than half of it per call in Pyodide;
    anything the scanner does not take whole goes through json.loads, and its
    error."""
    try:
        value, end = _scan(text, 0)
        if end == len(text):
            return value
    except (StopIteration, ValueError):
        pass
    return json.loads(text)


def _encode(v, depth=0):
    """A returned value as the engine's Value JSON text. Subclasses of str and
    tuple count as their base type, since that is what the learner meant. Written
    by hand: this runs once per learner call, and building dicts for json.dumps
    cost several times more (measured in Pyodide)."""
    # The values learners return most, of exactly these types, first: the same
    # text as the general path below, in about a third of its time (a `("retry",
    # 1.5)` tuple: 1.4 us against 3.7 in Pyodide). ASCII text holds no lone surrogate.
    t = type(v)
    if t is str and v.isascii():
        return '{"type":"str","value":' + _json_str(v) + '}'
    if t is tuple and depth < DEPTH_CAP:
        # A pair of an ASCII str and a float or ASCII str (next_step's answer), whole.
        if len(v) == 2 and type(v[0]) is str and v[0].isascii():
            a, b = v
            tb = type(b)
            if tb is float and math.isfinite(b):
                return ('{"type":"tuple","value":[{"type":"str","value":' + _json_str(a)
                        + '},{"type":"float","value":' + float.__repr__(b) + '}]}')
            if tb is str and b.isascii():
                return ('{"type":"tuple","value":[{"type":"str","value":' + _json_str(a)
                        + '},{"type":"str","value":' + _json_str(b) + '}]}')
        return '{"type":"tuple","value":[' + ",".join([_encode(x, depth + 1) for x in v]) + ']}'
    if t is float and math.isfinite(v):
        return '{"type":"float","value":' + float.__repr__(v) + '}'
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


def bound_caller(fn_name):
    """`call(fn_name, ...)` for the host to keep per learner function, called with
    `(args_json, True)`: each argument of a call from JavaScript is converted on its
    way into Python, on every call (measured in Chromium: a tenth of a warm run's
    time went to such conversions). A partial, not a function of ours: no Python
    frame of its own, in which an interrupt would land outside call's try."""
    return functools.partial(call, fn_name)


def call(fn_name, args_json, world):
    """Runs one learner function for the engine; returns {"ok": Value} or
    {"error": LearnerError} as a JSON string. `world`: True for the world bound
    with bind_world_op, else an object with `op` (or None: no world)."""
    global _timed_out
    if _timed_out:
        return _timeout()
    # No __init__: set after, the object is made without a Python frame.
    live = _Call()
    live.world = _bound_world if world is True else world
    try:
        fn = getattr(_solution, fn_name, None)
        if not callable(fn):
            return json.dumps({"error": {"kind": "missing-function", "function": fn_name}})
        return _lab.call(fn_name, fn, _args(args_json), live)
    except BaseException as e:
        if isinstance(e, KeyboardInterrupt) and _interrupts:
            # The host raised it at the time limit (pyodide.setInterruptBuffer).
            _timed_out = True
            return _timeout()
        return _exception(e)
    finally:
        live.world = None


def store_op(store, op, args_json):
    """Runs the grader's operation `op` (`StoreOp`, src/lab.rs) on the lab's store:
    `store` is the lab's store module (its `grader_op`). A path of its own, which
    no learner call takes. Answers JSON text as `call` does; the time limit ends
    it as it ends a call (on the page, the store is in this interpreter)."""
    global _timed_out
    if _timed_out:
        return _timeout()
    try:
        return store.grader_op(op, json.loads(args_json))
    except KeyboardInterrupt:
        _timed_out = True
        return _timeout()
    except Exception as e:
        return json.dumps({"error": {"kind": "host", "message": f"{_type(e)}: {e}"}})


def _exception(e):
    try:
        message = _format_exception(e).rstrip()
    except BaseException as f:  # a learner's exception whose str() raises
        message = f"{_type(e)} (its message could not be shown: {_type(f)})"
    return json.dumps({"error": {"kind": "exception", "message": message}})
