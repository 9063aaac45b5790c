"""Lab 1's Python side (deliver-once): the contract's records, and the kv, provider
and rng the learner's functions receive, each over the call's world; and how each
learner function is called. The host imports it beside the bridge
(www/host/solution_runner.py, which loads the learner's file and runs every call through
this module's `call`); the registry carries it (`LabInfo::bridge_py`).

Expected values never come here: every kv operation, send and draw goes to the
world, so the engine sees and logs it.
"""

import json
import math
import sys

from delivery_lab_bridge import _encode, _number, _output, _Record, _set, _type


# ---------------------------------------------------------------------------
# The contract's objects


# Each record's fields sit on a plain base (see _Record): the bridge fills one of
# those per learner call and then gives it the record's class.
class _TaskFields:
    __slots__ = ("key", "kind", "attempt", "expires_at", "fallback")


class Task(_TaskFields, _Record):
    __slots__ = ()
    _name = "task"

    def __init__(self, key, kind, attempt, expires_at, fallback):
        _set(self, "key", key)
        _set(self, "kind", kind)
        _set(self, "attempt", attempt)
        _set(self, "expires_at", expires_at)
        _set(self, "fallback", fallback)


class _PolicyFields:
    __slots__ = ("claim_ttl_s", "at_most_once", "min_delay_s", "base_delay_s", "max_attempts")


class Policy(_PolicyFields, _Record):
    __slots__ = ()
    _name = "policy"

    def __init__(self, claim_ttl_s, at_most_once, min_delay_s, base_delay_s, max_attempts):
        _set(self, "claim_ttl_s", claim_ttl_s)
        _set(self, "at_most_once", at_most_once)
        _set(self, "min_delay_s", min_delay_s)
        _set(self, "base_delay_s", base_delay_s)
        _set(self, "max_attempts", max_attempts)


class _SendResultFields:
    __slots__ = ("ok", "permanent", "reason", "retry_after_s")


class SendResult(_SendResultFields, _Record):
    __slots__ = ()
    _name = "result"

    def __init__(self, ok, permanent, reason, retry_after_s):
        _set(self, "ok", ok)
        _set(self, "permanent", permanent)
        _set(self, "reason", reason)
        _set(self, "retry_after_s", retry_after_s)


def _opt_float(x):
    return None if x is None else float(x)


def _send_result(ok, permanent, reason, retry_after_s):
    r = _SendResultFields()
    r.ok, r.permanent, r.reason, r.retry_after_s = ok, permanent, reason, retry_after_s
    r.__class__ = SendResult
    return r


# A send's answer, by its text: a test's provider gives a few answers many times,
# and decoding the JSON cost more than the rest of a send (in Pyodide). The fields
# are kept, never a record: each send gets a record of its own.
_SENT_CAP = 256
_sent = {}


def _result(text):
    fields = _sent.get(text)
    if fields is None:
        d = json.loads(text)
        fields = (bool(d["ok"]), bool(d["permanent"]), d["reason"], _opt_float(d.get("retry_after_s")))
        if len(_sent) < _SENT_CAP:
            _sent[text] = fields
    return _send_result(*fields)


class _Handle:
    """The slot of the objects over the call's world (kv, provider, rng): like the
    records, made as this plain class and then given its own (see _Record)."""

    __slots__ = ("_call",)


class KV(_Handle):
    """The key-value store, backed by the engine's world (which expires keys on
    the lab clock). Arguments are checked here, with Python's own exceptions, so a
    mistake reads like one in any Python library."""

    __slots__ = ()

    def __setattr__(self, name, value):
        raise AttributeError("kv has no attributes to set")

    def __repr__(self):
        return "<kv>"

    def get(self, key):
        if not isinstance(key, str):
            raise TypeError(f"kv.get(key): key must be a str, not {_type(key)}")
        # The call's world read inline (here and below): _Call's __call__ per operation
        # cost more than the check.
        w = self._call.world
        if w is None:
            self._call("kv")  # raises: the call has returned
        value = w.op("kv_get", str(key))
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
        w = self._call.world
        if w is None:
            self._call("kv")  # raises: the call has returned
        # Keywords were parsed here: the world takes positional arguments only.
        return bool(w.op("kv_set", str(key), str(value), ttl, nx))

    def delete(self, key):
        if not isinstance(key, str):
            raise TypeError(f"kv.delete(key): key must be a str, not {_type(key)}")
        w = self._call.world
        if w is None:
            self._call("kv")  # raises: the call has returned
        return bool(w.op("kv_delete", str(key)))


class Provider(_Handle):
    __slots__ = ()

    def __setattr__(self, name, value):
        raise AttributeError("provider has no attributes to set")

    def __repr__(self):
        return "<provider>"

    def send(self, task):
        key = getattr(task, "key", None)
        if not isinstance(key, str):
            raise TypeError(f"provider.send(task): pass the task you were given, not {_type(task)}")
        w = self._call.world
        if w is None:
            self._call("provider")  # raises: the call has returned
        return _result(w.op("send", str(key)))


class Rng(_Handle):
    __slots__ = ()

    def __setattr__(self, name, value):
        raise AttributeError("rng has no attributes to set")

    def __repr__(self):
        return "<rng>"

    def uniform(self, a, b):
        ta, tb = type(a), type(b)
        # Two plain floats or ints (next_step's draw) go straight to the finite check.
        plain = (ta is float or ta is int) and (tb is float or tb is int)
        if not (plain and math.isfinite(a) and math.isfinite(b)):
            self._check_bounds(a, b)
        w = self._call.world
        if w is None:
            self._call("rng")  # raises: the call has returned
        return float(w.op("uniform", float(a), float(b)))

    @staticmethod
    def _check_bounds(a, b):
        for name, x in (("a", a), ("b", b)):
            if not _number(x):
                raise TypeError(f"rng.uniform(a, b): {name} must be a number, not {_type(x)}")
            if not math.isfinite(x):
                raise ValueError(f"rng.uniform(a, b): {name} must be finite, not {x!r}")


# ---------------------------------------------------------------------------
# The lab's functions


def call(fn_name, fn, a, live):
    """Runs the learner's `fn` on the arguments `a` (the grader's JSON, parsed: one
    flat list, src/deliver_once/learner.rs) with this lab's objects over `live`,
    the call's world; the answer's JSON."""
    # Each record and handle is built here, inline, not by a function of its own:
    # this runs once per learner call, about 750 times a run, and each Python call
    # in Pyodide costs more than the fields it sets. The fields are taken as the
    # grader wrote them: its JSON holds ints, floats, bools and null exactly where
    # the contract's types are (serde writes every f64 with a point or exponent).
    t = _TaskFields()
    t.key, t.kind, t.attempt, t.expires_at, t.fallback = a[0], a[1], a[2], a[3], a[4]
    t.__class__ = Task
    p = _PolicyFields()
    if fn_name == "next_step":
        r = _SendResultFields()
        r.ok, r.permanent, r.reason, r.retry_after_s = a[5], a[6], a[7], a[8]
        r.__class__ = SendResult
        p.claim_ttl_s, p.at_most_once, p.min_delay_s, p.base_delay_s, p.max_attempts = a[10:15]
        p.__class__ = Policy
        rng = _Handle()
        rng._call = live
        rng.__class__ = Rng
        args = (t, r, a[9], p, rng)
    elif fn_name == "deliver_once":
        p.claim_ttl_s, p.at_most_once, p.min_delay_s, p.base_delay_s, p.max_attempts = a[5:10]
        p.__class__ = Policy
        provider, kv = _Handle(), _Handle()
        provider._call = kv._call = live
        provider.__class__, kv.__class__ = Provider, KV
        args = (t, provider, kv, p)
    else:
        return json.dumps({"error": {"kind": "host", "message": f"the bridge does not know {fn_name}"}})
    # _Captured's work inline (prints go to the capture): a third of its cost, per call.
    saved = sys.stdout, sys.stderr
    sys.stdout = sys.stderr = _output
    try:
        value = fn(*args)
    finally:
        sys.stdout, sys.stderr = saved
    return '{"ok":' + _encode(value) + '}'
