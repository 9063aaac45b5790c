"""What a real worker and the webhook receiver give the learner's six pieces: the
solution file loaded as a module, `cfg`, webhook events, the run's clock, and the
provider over HTTP (www/real/provider.mjs). The objects behave as the browser lab's
(lab.md "What you are given"); only time is real here.
"""

import http.client
import importlib.util
import json
import socket
import time
import urllib.parse

PIECES = ("claim", "write_intent", "deliver_step", "merge", "on_webhook", "heartbeat")
# How long a provider call may take before it counts as a timeout (the provider
# holds a timed-out request longer than this: www/real/provider.mjs holdMs).
PROVIDER_TIMEOUT_S = 1.0


def load_solution(path):
    """The learner's file as a module; a clear error when a piece is missing."""
    spec = importlib.util.spec_from_file_location("solution", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    missing = [p for p in PIECES if not callable(getattr(module, p, None))]
    if missing:
        raise SystemExit(f"{path} does not define {', '.join(missing)}: the real run needs all six pieces")
    return module


class _ReadOnly:
    __slots__ = ()

    def __setattr__(self, name, value):
        raise AttributeError(f"{type(self).__name__.lower()} is read-only")

    def __repr__(self):
        fields = ", ".join(f"{k}={getattr(self, k)!r}" for k in self.__slots__)
        return f"{type(self).__name__}({fields})"


class Cfg(_ReadOnly):
    __slots__ = ("lease_ms", "in_flight_cap", "recheck_ms")

    def __init__(self, lease_ms=30_000, in_flight_cap=4, recheck_ms=1_000):
        for k, v in zip(self.__slots__, (lease_ms, in_flight_cap, recheck_ms)):
            object.__setattr__(self, k, v)


class Event(_ReadOnly):
    __slots__ = ("event_id", "key", "message_id", "status")

    def __init__(self, event_id, key, message_id, status):
        for k, v in zip(self.__slots__, (event_id, key, message_id, status)):
            object.__setattr__(self, k, v)


class Clock:
    """The run's clock in ms, the same in every process: CLOCK_MONOTONIC from the
    run's start (`t0`, time.monotonic() in the process that started it)."""

    def __init__(self, t0):
        self.t0 = float(t0)

    def now_ms(self):
        return int((time.monotonic() - self.t0) * 1000)


class _UnixHTTPConnection(http.client.HTTPConnection):
    """http.client's own HTTP, over a Unix socket."""

    def __init__(self, path, timeout):
        super().__init__("provider", timeout=timeout)
        self.socket_path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.socket_path)


class HttpProvider:
    """`send(key, phone, body)` and `lookup(key)` over HTTP, answering the lab's
    dicts; no answer within PROVIDER_TIMEOUT_S (or no connection) is a timeout.
    `action` is the action the worker is delivering: the provider logs each send
    under it (the simulation's provider reads it from the message), and the run
    can hold back the answer to a request for it (provider.mjs's /hold)."""

    def __init__(self, url, action=None):
        # "unix:PATH": the provider's socket for sandboxed workers, which have no
        # network (provider.mjs's learnerSocket); else an http:// URL on loopback.
        if url.startswith("unix:"):
            self.connect = lambda: _UnixHTTPConnection(url[len("unix:"):], timeout=PROVIDER_TIMEOUT_S)
        else:
            u = urllib.parse.urlsplit(url)
            self.connect = lambda: http.client.HTTPConnection(u.hostname, u.port, timeout=PROVIDER_TIMEOUT_S)
        self.action = action

    def _ask(self, method, path, body=None):
        conn = self.connect()
        try:
            headers = {"Content-Type": "application/json"} if body is not None else {}
            conn.request(method, path, body=None if body is None else json.dumps(body), headers=headers)
            res = conn.getresponse()
            data = res.read()
            if res.status != 200:
                raise RuntimeError(f"the provider answered {res.status}: {data[:200]!r}")
            return json.loads(data)
        except (OSError, http.client.HTTPException):
            return {"answer": "timeout"}
        finally:
            conn.close()

    def send(self, key, phone, body):
        for name, v in (("key", key), ("phone", phone), ("body", body)):
            if not isinstance(v, str):
                raise TypeError(f"provider.send: {name} must be a str, not {type(v).__name__}")
        return self._ask("POST", "/send", {"action": self.action, "key": key, "phone": phone, "body": body})

    def lookup(self, key):
        if not isinstance(key, str):
            raise TypeError(f"provider.lookup: key must be a str, not {type(key).__name__}")
        query = {"key": key} if self.action is None else {"key": key, "action": self.action}
        return self._ask("GET", "/lookup?" + urllib.parse.urlencode(query))
