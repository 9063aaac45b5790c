"""Lab 1's Python side (deliver-once): the contract's records, and the kv, provider
and rng the learner's functions receive, each over the call's world; and how each
learner function is called. The host imports it beside the bridge
(www/src/bridge.py, which loads the learner's file and runs every call through
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


def _result(d):
    return SendResult(bool(d["ok"]), bool(d["permanent"]), d["reason"],
                      _opt_float(d.get("retry_after_s")))


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
        value = self._call("kv").op("kv_get", str(key))
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
        return bool(self._call("kv").op("kv_set", str(key), str(value), ttl, nx))

    def delete(self, key):
        if not isinstance(key, str):
            raise TypeError(f"kv.delete(key): key must be a str, not {_type(key)}")
        return bool(self._call("kv").op("kv_delete", str(key)))


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
        return _result(json.loads(self._call("provider").op("send", str(key))))


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
        return float(self._call("rng").op("uniform", float(a), float(b)))


# ---------------------------------------------------------------------------
# The lab's functions


def call(fn_name, fn, a, live):
    """Runs the learner's `fn` on the arguments `a` (the grader's JSON, parsed: one
    flat list, src/deliver_once/learner.rs) with this lab's objects over `live`,
    the call's world; the answer's JSON."""
    if fn_name == "deliver_once":
        args = (Task(a[0], a[1], int(a[2]), float(a[3]), a[4]), Provider(live), KV(live),
                Policy(float(a[5]), bool(a[6]), float(a[7]), float(a[8]), int(a[9])))
    elif fn_name == "next_step":
        args = (Task(a[0], a[1], int(a[2]), float(a[3]), a[4]),
                SendResult(bool(a[5]), bool(a[6]), a[7], _opt_float(a[8])), float(a[9]),
                Policy(float(a[10]), bool(a[11]), float(a[12]), float(a[13]), int(a[14])), Rng(live))
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
