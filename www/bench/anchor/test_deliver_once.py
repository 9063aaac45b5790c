"""Lab 1, "Deliver once, retry right", graded by plain CPython + pytest: the anchor
that `./lab bench` prints next to the real grader (README.md).

The tests are the real grader's, from the same files: the example cases
(src/deliver_once/examples/) and the hidden cases (hidden-tests/deliver-once/),
read here with tomllib, and the differential test with the counts its case file
gives. As in the engine (src/deliver_once/suite.rs, check.rs, differential.rs),
every call is played twice, in two identical worlds, by the reference
(src/deliver_once/reference.py) and by the learner's code, and compared effect by
effect (kv writes that wrote, deletes that removed, sends, draws) and then by return
value with its type; a scripted case's `expect` tables are checked as well.

The world is a small Python twin of src/deliver_once/world.rs: a kv whose TTLs run on
a clock that only the test moves, a provider answering from a script (the last
answer repeats) and a seeded rng. Its stream is Python's `random`, not the engine's
ChaCha8, so a draw's value differs from the engine's; the tests compare the
learner with the reference in the same world, never with a recorded value.
"""

import dataclasses
import pathlib
import random
import tomllib

import pytest

REPO = pathlib.Path(__file__).resolve().parents[3]
CASE_FOLDERS = (
    ("example", REPO / "src" / "deliver_once" / "examples"),
    ("hidden", REPO / "hidden-tests" / "deliver-once"),
)
DONE_TTL_S = 604800.0
SHRINK_BUDGET = 400  # candidate inputs tried while shrinking, as in differential.rs
KINDS = ("critical", "normal", "bulk")


# ---- The contract's objects (read-only, as in www/host/solution_runner.py) --------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Task:
    key: str
    kind: str
    attempt: int
    expires_at: float
    fallback: str | None


@dataclasses.dataclass(frozen=True, slots=True)
class Policy:
    claim_ttl_s: float
    at_most_once: bool
    min_delay_s: float
    base_delay_s: float
    max_attempts: int


@dataclasses.dataclass(frozen=True, slots=True)
class SendResult:
    ok: bool
    permanent: bool
    reason: str
    retry_after_s: float | None


OK = SendResult(True, False, "200 OK", None)
# The differential's draws (differential.rs): a failure's reasons, permanent-sounding
# and transient-sounding alike, and the policies' values.
REASONS = ("410 Unregistered", "400 InvalidToken", "404 NoSuchNumber",
           "503", "429", "500 Internal", "504 Timeout")
CLAIM_TTLS_S = (10.0, 30.0, 60.0)
MIN_DELAYS_S = (0.0, 0.5, 1.0, 5.0)
BASE_DELAYS_S = (0.5, 1.0, 2.0, 3.0)


def transient(reason, retry_after_s=None):
    return SendResult(False, False, reason, None if retry_after_s is None else float(retry_after_s))


def permanent(reason):
    return SendResult(False, True, reason, None)


# ---- The world --------------------------------------------------------------------------


class World:
    """One test's world. Every call is logged as a tuple: ("get", key, returned),
    ("set", key, value, ttl, nx, returned), ("delete", key, returned),
    ("send", task_key, returned), ("uniform", a, b, returned)."""

    def __init__(self, seed, script=()):
        self.now = 0.0
        self.kv = {}  # key -> (value, expires_at or None)
        self.script = list(script)
        self.sends = 0
        self.rng = random.Random(seed)
        self.log = []

    def preload(self, key, value, ttl_s, written_at_s):
        self.kv[key] = (value, None if ttl_s is None else written_at_s + ttl_s)

    def advance_to(self, t):
        assert t >= self.now, "the clock moves forward only"
        self.now = t

    def live(self, key):
        # A key written at s with ttl t is gone from s + t on, as in Redis.
        entry = self.kv.get(key)
        if entry is not None and (entry[1] is None or self.now < entry[1]):
            return entry
        return None

    def live_items(self):
        return {k: e[0] for k, e in self.kv.items() if self.live(k)}

    def take_log(self):
        log, self.log = self.log, []
        return log


def _number(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool)


class _Handle:
    """What the learner's code gets; revoked when its call returns, so one kept in a
    global fails in a later call instead of reaching a world that is gone."""

    __slots__ = ("_w",)
    _name = "handle"

    def __init__(self, world):
        self._w = world

    def _world(self):
        if self._w is None:
            raise RuntimeError(f"this {self._name} belongs to an earlier call that has already returned")
        return self._w


class KV(_Handle):
    __slots__ = ()
    _name = "kv"

    def get(self, key):
        if not isinstance(key, str):
            raise TypeError(f"kv.get(key): key must be a str, not {type(key).__name__}")
        w = self._world()
        entry = w.live(key)
        returned = None if entry is None else entry[0]
        w.log.append(("get", key, returned))
        return returned

    def set(self, key, value, ttl=None, nx=False):
        if not isinstance(key, str) or not isinstance(value, str):
            raise TypeError("kv.set(key, value, ttl=None, nx=False): key and value must be str")
        if ttl is not None and not _number(ttl):
            raise TypeError(f"kv.set(...): ttl must be None or a number, not {type(ttl).__name__}")
        if not isinstance(nx, bool):
            raise TypeError(f"kv.set(...): nx must be True or False, not {type(nx).__name__}")
        w = self._world()
        ttl = None if ttl is None else float(ttl)
        returned = not (nx and w.live(key))
        if returned:
            w.kv[key] = (value, None if ttl is None else w.now + ttl)
        w.log.append(("set", key, value, ttl, nx, returned))
        return returned

    def delete(self, key):
        if not isinstance(key, str):
            raise TypeError(f"kv.delete(key): key must be a str, not {type(key).__name__}")
        w = self._world()
        returned = w.live(key) is not None
        w.kv.pop(key, None)
        w.log.append(("delete", key, returned))
        return returned


class Provider(_Handle):
    __slots__ = ()
    _name = "provider"

    def send(self, task):
        key = getattr(task, "key", None)
        if not isinstance(key, str):
            raise TypeError("provider.send(task): pass the task you were given")
        w = self._world()
        if w.sends < len(w.script):
            answer = w.script[w.sends]
        else:
            answer = w.script[-1] if w.script else OK
        w.sends += 1
        w.log.append(("send", key, answer))
        return answer


class Rng(_Handle):
    __slots__ = ()
    _name = "rng"

    def uniform(self, a, b):
        if not (_number(a) and _number(b)):
            raise TypeError("rng.uniform(a, b): a and b must be numbers")
        w = self._world()
        returned = w.rng.uniform(float(a), float(b))
        w.log.append(("uniform", float(a), float(b), returned))
        return returned


# ---- One call, played by a solution in a world -----------------------------------------


def call_text(call):
    if call[0] == "deliver_once":
        return f"deliver_once({call[1]}, provider, kv, {call[2]})"
    return f"next_step({call[1]}, {call[2]}, {call[3]!r}, {call[4]}, rng)"


def run(module, world, call):
    """Calls the solution's function for `call` in `world`: (returned, ops logged)."""
    handles = (KV(world), Provider(world), Rng(world))
    kv, provider, rng = handles
    try:
        if call[0] == "deliver_once":
            _, task, policy = call
            returned = module.deliver_once(task, provider, kv, policy)
        else:
            _, task, result, now, policy = call
            returned = module.next_step(task, result, now, policy, rng)
    finally:
        for h in handles:
            h._w = None
    return returned, world.take_log()


def close(a, b):
    return a == b or abs(a - b) <= 1e-9 * max(abs(a), abs(b), 1.0)


def matches(actual, expected):
    """The engine's comparison of values (src/value.rs): numbers by value (an int
    matches a float), tuples item by item, anything else by type and value."""
    if _number(actual) and _number(expected):
        return close(float(actual), float(expected))
    if type(actual) is tuple and type(expected) is tuple:
        return len(actual) == len(expected) and all(map(matches, actual, expected))
    return type(actual) is type(expected) and actual == expected


def counts(op):
    """Writes that wrote, deletes that removed, every send and draw; reads are free."""
    if op[0] == "get":
        return False
    if op[0] in ("set", "delete"):
        return op[-1]
    return True


def same_op(w, g):
    if w[0] != g[0]:
        return False
    if w[0] == "set":
        ttl_same = (w[3] is None and g[3] is None) or (
            w[3] is not None and g[3] is not None and close(w[3], g[3]))
        return w[1:3] == g[1:3] and w[4] == g[4] and ttl_same
    if w[0] == "uniform":
        return close(w[1], g[1]) and close(w[2], g[2])
    return w[1] == g[1]  # delete, send: the key


def op_text(op):
    if op is None:
        return "no such call"
    if op[0] == "set":
        return f"kv.set({op[1]!r}, {op[2]!r}, ttl={op[3]!r}, nx={op[4]})"
    if op[0] == "delete":
        return f"kv.delete({op[1]!r})"
    if op[0] == "send":
        return f"provider.send(task)  # task.key={op[1]!r}"
    if op[0] == "uniform":
        return f"rng.uniform({op[1]!r}, {op[2]!r})"
    return f"kv.get({op[1]!r})"


def compare(want_ops, got_ops, expected, returned):
    """The first difference, effects in order then the return value, or None."""
    want = [o for o in want_ops if counts(o)]
    got = [o for o in got_ops if counts(o)]
    for i in range(max(len(want), len(got))):
        w = want[i] if i < len(want) else None
        g = got[i] if i < len(got) else None
        if w is None or g is None or not same_op(w, g):
            return f"expected: {op_text(w)}\nactual:   {op_text(g)}"
    if not matches(returned, expected):
        return (f"expected: return {expected!r} ({type(expected).__name__})\n"
                f"actual:   return {returned!r} ({type(returned).__name__})")
    return None


def play(learner, reference, make_world, calls, check_step=None):
    """Plays `calls` ((time, call) pairs) in two identical worlds, the reference's and
    the learner's, up to the first difference: (message or None, learner's world)."""
    ref_world, world = make_world(), make_world()
    for i, (t, call) in enumerate(calls):
        ref_world.advance_to(t)
        world.advance_to(t)
        expected, want_ops = run(reference, ref_world, call)
        returned, got_ops = run(learner, world, call)
        problem = compare(want_ops, got_ops, expected, returned)
        if problem is None and check_step is not None:
            problem = check_step(i, got_ops, returned)
        if problem is not None:
            trace = "\n".join(f"  {op_text(o)} -> {o[-1]!r}" for o in got_ops)
            return (f"call {i + 1} of {len(calls)}, at t={t!r}: {call_text(call)}\n"
                    f"{problem}\nwhat the code did:\n{trace or '  nothing'}"), world
    return None, world


# ---- The scripted cases, from the case files (format: hidden-tests/README.md) ----------


def _task(fields):
    return Task(fields["key"], fields["kind"], int(fields["attempt"]),
                float(fields["expires_at_s"]), fields["fallback"] or None)


def _policy(fields):
    return Policy(float(fields["claim_ttl_s"]), bool(fields["at_most_once"]),
                  float(fields["min_delay_s"]), float(fields["base_delay_s"]),
                  int(fields["max_attempts"]))


def _answer(a):
    if a["answer"] == "ok":
        return OK
    if a["answer"] == "permanent":
        return permanent(a["reason"])
    return transient(a["reason"], a.get("retry_after_s"))


def _expected_value(v):
    # Arrays in a case file stand for tuples.
    return tuple(map(_expected_value, v)) if isinstance(v, list) else v


@dataclasses.dataclass
class Case:
    kind: str  # "example" or "hidden"
    file: str
    spec: dict
    defaults: dict

    @property
    def id(self):
        return f"{self.kind}: {self.spec['name']}"


def load_cases():
    cases = []
    for kind, folder in CASE_FOLDERS:
        for path in sorted(folder.glob("*.toml")):
            doc = tomllib.loads(path.read_text(encoding="utf-8"))
            for spec in doc["case"]:
                cases.append(Case(kind, str(path.relative_to(REPO)), spec, doc.get("defaults", {})))
    return cases


def check_expect(expect, ops, returned):
    """A step's `expect` table against what the learner's call did."""
    if "returns" in expect and not matches(returned, _expected_value(expect["returns"])):
        return f"expect.returns: {_expected_value(expect['returns'])!r}, got {returned!r}"
    if "sends" in expect:
        sends = sum(1 for o in ops if o[0] == "send")
        if sends != expect["sends"]:
            return f"expect.sends: {expect['sends']}, got {sends}"
    if "draws" in expect:
        draws = [(o[1], o[2]) for o in ops if o[0] == "uniform"]
        want = expect["draws"]
        if len(draws) != len(want) or not all(close(d[0], w[0]) and close(d[1], w[1])
                                              for d, w in zip(draws, want)):
            return f"expect.draws: {want}, got {draws}"
    if "writes" in expect:
        got = [o for o in ops if o[0] in ("set", "delete") and counts(o)]
        want = expect["writes"]

        def same(g, w):
            if g[0] != w["op"] or g[1] != w["key"]:
                return False
            if g[0] == "delete":
                return True
            ttl = w.get("ttl_s")
            ttl_same = (g[3] is None) if ttl is None else (g[3] is not None and close(g[3], ttl))
            return g[2] == w["value"] and g[4] == w.get("nx", False) and ttl_same

        if len(got) != len(want) or not all(map(same, got, want)):
            return f"expect.writes: {want}, got {[op_text(g) for g in got]}"
    return None


def run_scripted(case, learner, reference):
    d, c = case.defaults, case.spec
    task = {**d.get("task", {}), **c.get("task", {})}
    policy = {**d.get("policy", {}), **c.get("policy", {})}
    seed = c.get("seed", d.get("seed"))

    def make_world():
        world = World(seed, [_answer(a) for a in c.get("provider", [])])
        for k in c.get("kv", []):
            world.preload(k["key"], k["value"], k.get("ttl_s"), k["written_at_s"])
        return world

    steps = c["step"]
    calls = []
    for s in steps:
        t = float(s["at_s"])
        step_task = _task({**task, **s.get("task", {})})
        step_policy = _policy({**policy, **s.get("policy", {})})
        if s["call"] == "deliver_once":
            calls.append((t, ("deliver_once", step_task, step_policy)))
        else:
            calls.append((t, ("next_step", step_task, _answer(s["result"]), t, step_policy)))

    problem, world = play(learner, reference, make_world, calls,
                          lambda i, ops, returned: check_expect(steps[i].get("expect", {}), ops, returned))
    if problem is None and "kv" in c.get("expect", {}):
        if world.live_items() != c["expect"]["kv"]:
            problem = f"expect.kv: the kv ends as {world.live_items()}, not {c['expect']['kv']}"
    if problem is not None:
        pytest.fail(f"{case.file}: {c['name']}\n{problem}", pytrace=False)


# ---- The differential test (src/deliver_once/differential.rs) ---------------------------


class Gen:
    def __init__(self, seed):
        self.r = random.Random(seed)

    def below(self, n):
        return self.r.randrange(max(n, 1))

    def chance(self, p):
        return self.r.random() < p

    def pick(self, items):
        return items[self.below(len(items))]

    def small_seed(self):
        return self.r.getrandbits(64) % 1000


def _with(x, **fields):
    return dataclasses.replace(x, **fields)


@dataclasses.dataclass(frozen=True)
class NextStepInput:
    seed: int
    task: Task
    result: SendResult
    now: float
    policy: Policy

    @staticmethod
    def random(g):
        max_attempts = 1 + g.below(6)
        kind = g.pick(KINDS)
        # Every field of the failure on its own: only `permanent` decides.
        is_permanent = g.chance(0.15)
        reason = g.pick(REASONS)
        retry_after = g.pick((0.0, 0.5, 1.0, 2.0, 5.0, 30.0, 120.0)) if g.chance(0.4) else None
        result = SendResult(False, is_permanent, reason, retry_after)
        now = g.below(2000) / 2.0
        # A quarter of the inputs sit exactly on the expiry boundary when they can.
        if result.retry_after_s is not None and g.chance(0.25):
            ahead = result.retry_after_s
        else:
            ahead = g.pick((0.0, 1.0, 2.5, 10.0, 60.0, 600.0, 3600.0))
        seed = g.small_seed()
        task = Task(f"order-{1000 + g.below(9000)}:shipped", kind, g.below(max_attempts + 1),
                    now + ahead, g.pick((None, "sms", "email")))
        policy = Policy(g.pick(CLAIM_TTLS_S), False, g.pick(MIN_DELAYS_S),
                        g.pick(BASE_DELAYS_S), max_attempts)
        # Apart from the kind: next_step decides a drop by the kind alone.
        policy = _with(policy, at_most_once=g.chance(0.5))
        return NextStepInput(seed, task, result, now, policy)

    def simpler(self):
        t, r, p = self.task, self.result, self.policy
        return [
            _with(self, task=_with(t, attempt=0)),
            _with(self, task=_with(t, attempt=max(t.attempt - 1, 0))),
            _with(self, task=_with(t, fallback=None)),
            _with(self, task=_with(t, kind="normal")),
            _with(self, task=_with(t, key="t")),
            _with(self, result=_with(r, permanent=False)),
            _with(self, result=_with(r, retry_after_s=None)),
            _with(self, result=_with(r, retry_after_s=None if r.retry_after_s is None else 0.0)),
            _with(self, result=_with(r, reason="503")),
            _with(self, policy=_with(p, claim_ttl_s=30.0)),
            _with(self, task=_with(t, expires_at=t.expires_at - self.now), now=0.0),
            _with(self, task=_with(t, expires_at=float(int(t.expires_at)))),
            _with(self, task=_with(t, expires_at=3600.0)),
            _with(self, policy=_with(p, min_delay_s=0.0)),
            _with(self, policy=_with(p, base_delay_s=1.0)),
            _with(self, policy=_with(p, max_attempts=5)),
            _with(self, policy=_with(p, at_most_once=False)),
            _with(self, seed=0),
        ]

    def world(self):
        return World(self.seed)

    def calls(self):
        return [(self.now, ("next_step", self.task, self.result, self.now, self.policy))]

    def describe(self):
        return f"  rng seed {self.seed}\n  {call_text(self.calls()[0][1])}"


@dataclasses.dataclass(frozen=True)
class DeliverInput:
    seed: int
    task: Task
    policy: Policy
    preload: tuple  # ("empty",), ("done", age_s) or ("claim", age_s)
    answers: tuple
    times: tuple

    @staticmethod
    def random(g):
        claim_ttl = g.pick(CLAIM_TTLS_S)
        which = g.below(4)
        if which < 2:
            preload = ("empty",)
        elif which == 2:
            preload = ("done", g.pick((1.0, 3600.0, DONE_TTL_S - 1.0, DONE_TTL_S)))
        else:
            preload = ("claim", g.pick((0.0, 5.0, claim_ttl - 0.5, claim_ttl, claim_ttl + 1.0)))

        def answer():  # a failure's fields each on their own
            if g.chance(0.5):
                return OK
            is_permanent = g.chance(0.4)
            reason = g.pick(REASONS)
            return SendResult(False, is_permanent, reason, 2.0 if g.chance(0.3) else None)

        answers = tuple(answer() for _ in range(1 + g.below(3)))
        times = [0.0]
        for _ in range(g.below(3)):
            times.append(times[-1] + g.pick((0.5, 5.0, claim_ttl - 0.5, claim_ttl, claim_ttl + 1.0, DONE_TTL_S)))
        kind = g.pick(KINDS)
        # Fields deliver_once has no use for, drawn too: it must send whatever they say.
        max_attempts = 1 + g.below(6)
        seed = g.small_seed()
        key = f"order-{1000 + g.below(9000)}:shipped"
        attempt = g.below(max_attempts + 2)
        expires_at = g.pick((0.0, 10.0, 3600.0))
        task = Task(key, kind, attempt, expires_at, "sms" if g.chance(0.5) else None)
        at_most_once = g.chance(0.3)
        policy = Policy(claim_ttl, at_most_once, g.pick(MIN_DELAYS_S), g.pick(BASE_DELAYS_S),
                        max_attempts)
        return DeliverInput(seed, task, policy, preload, answers, tuple(times))

    def simpler(self):
        return [
            _with(self, times=self.times[:1]),
            _with(self, times=self.times[:-1] if len(self.times) > 1 else self.times),
            _with(self, preload=("empty",)),
            _with(self, answers=self.answers[:1]),
            _with(self, answers=(OK,)),
            _with(self, policy=_with(self.policy, at_most_once=False)),
            _with(self, task=_with(self.task, kind="normal")),
            _with(self, task=_with(self.task, fallback=None)),
            _with(self, task=_with(self.task, key="t")),
            _with(self, task=_with(self.task, attempt=0)),
            _with(self, task=_with(self.task, expires_at=3600.0)),
            _with(self, policy=_with(self.policy, min_delay_s=1.0)),
            _with(self, policy=_with(self.policy, base_delay_s=2.0)),
            _with(self, policy=_with(self.policy, max_attempts=5)),
            _with(self, seed=0),
        ]

    def world(self):
        world = World(self.seed, self.answers)
        key = "sent:" + self.task.key
        if self.preload[0] == "done":
            world.preload(key, "done", DONE_TTL_S, -self.preload[1])
        elif self.preload[0] == "claim":
            world.preload(key, "sending", self.policy.claim_ttl_s, -self.preload[1])
        return world

    def calls(self):
        return [(t, ("deliver_once", self.task, self.policy)) for t in self.times]

    def describe(self):
        return (f"  rng seed {self.seed}; kv preload {self.preload}\n"
                f"  the provider answers, in order: {list(self.answers)}\n"
                f"  deliver_once is called at t = {list(self.times)} s with\n"
                f"  {self.task}\n  {self.policy}")


def check(inp, learner, reference):
    problem, _ = play(learner, reference, inp.world, inp.calls())
    return problem


def shrink(inp, problem, learner, reference):
    tries = steps = 0
    while tries < SHRINK_BUDGET:
        for candidate in inp.simpler():
            if candidate == inp:
                continue
            tries += 1
            try:
                found = check(candidate, learner, reference)
            except Exception:  # an error is not the failure being shrunk
                found = None
            if found is not None:
                inp, problem, steps = candidate, found, steps + 1
                break
            if tries >= SHRINK_BUDGET:
                return inp, problem, steps
        else:
            return inp, problem, steps
    return inp, problem, steps


def first_failure(function, inputs, learner, reference, run_seed):
    for i, inp in enumerate(inputs):
        header = (f"{function} differs from the contract on random input {i + 1} of "
                  f"{len(inputs)} (run seed {run_seed}).")
        try:
            problem = check(inp, learner, reference)
        except Exception as e:
            return f"{header}\nInput:\n{inp.describe()}\n{type(e).__name__}: {e}"
        if problem is not None:
            small, problem, steps = shrink(inp, problem, learner, reference)
            return (f"{header}\nSmallest failing input found ({steps} simplifications):\n"
                    f"{small.describe()}\n\n{problem}")
    return None


def run_differential(case, learner, reference, run_seed):
    c = case.spec
    spec = c["differential"]
    case_seed = c.get("seed", case.defaults.get("seed", 0))
    g = Gen(((run_seed * 0x9E3779B97F4A7C15) % 2**64) ^ case_seed)
    next_inputs = [NextStepInput.random(g) for _ in range(spec.get("next_step", 0))]
    deliver_inputs = [DeliverInput.random(g) for _ in range(spec.get("deliver_once", 0))]
    problem = (first_failure("next_step", next_inputs, learner, reference, run_seed)
               or first_failure("deliver_once", deliver_inputs, learner, reference, run_seed))
    if problem is not None:
        pytest.fail(f"{case.file}: {c['name']}\n{problem}", pytrace=False)


# ---- The tests: one per case, examples first, as in the real grader's report ------------

CASES = load_cases()


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_case(case, learner, reference, run_seed):
    if "differential" in case.spec:
        run_differential(case, learner, reference, run_seed)
    else:
        run_scripted(case, learner, reference)
