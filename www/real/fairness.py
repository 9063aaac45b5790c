"""`./lab real --fairness`: the fairness benchmark in real time, on the run's own
PostgreSQL, with real worker processes (fair_worker.py) claiming through the
learner's `claim`, and again through a plain first-in, first-out claim (the run's
own, FIFO_CLAIM in fair_worker.py) for comparison.

100 stores; three loads, each LOAD_S of real time: every store equal (the
baseline), one store at 10x spread out evenly ("steady"), and the same store's
10x share all at once ("bulk"). Arrivals are seeded per store, so the other 99
stores' arrivals and service times are the same in every load: only the noisy
store differs. For the other 99 stores the report gives the 95th percentile of
the time from arrival to the message's effect, against the same claim's
every-store-equal run. The learner's claim passes when it stays within 10%
(MAX_RATIO); FIFO's rows are shown beside it and not graded.

The effect here is the worker's dispatch after the action's service time (a real
sleep, SERVICE_MS): the benchmark measures the scheduler, so it leaves out the
provider's seeded faults (timeouts, lagging lookups), which would put seconds of
noise into a p95 measured in tens of ms.

Every time is the run's own: an action's arrival, claim and dispatch are read from
the database's record (pg.AUDIT_SQL: a trigger the learner's roles cannot reach,
the server's clock, the writer's login role), never from the workers, which run
the learner's code. Each worker has a role of its own, and the record must show
what an honest worker does (`served`): each action dispatched by the worker that
claimed it, at that claim's epoch, no sooner than its service time after the claim,
one action at a time. A load whose record shows otherwise is not measured: the
fairness run fails with what the record showed.
"""

import math
import os
import random
import subprocess
import sys
import threading
import time

import psycopg

from procs import stop_all

HERE = os.path.dirname(os.path.abspath(__file__))
STORES = 100
WORKERS = 12
LOAD_S = 10.0             # arrivals over this much real time, per load
PER_STORE_PER_S = 1.3     # each store's arrivals per second (Poisson)
NOISY_FACTOR = 10
BULK_AT_S = 2.0           # in the bulk load, the noisy store's whole share arrives here
SERVICE_MS = (20, 80)     # a worker's time on one action (uniform): ~54% busy
MAX_RATIO = 1.10
ROUNDS_MAX = 3            # rounds of the three loads while a graded row fails
ROLES = tuple(f"f{i}" for i in range(WORKERS))   # each fairness worker's own database role and name
SLACK_MS = 1              # the record's times are rounded floats of one clock
WARM_UP_S = 2.0           # a load before the measured ones, not counted
DRAIN_TIMEOUT_S = 60
LOADS = ("every store equal", "one store 10x, steady", "one store 10x, all at once")
CLAIMS = ("yours", "fifo")


def store_name(s):
    return f"store-{s:03}"


def arrivals(seed, load, load_s=LOAD_S):
    """[(t_ms, store, service_ms)], sorted: per-store seeded streams, so only the
    noisy store (0) differs between loads."""
    out = []
    for store in range(STORES):
        rng = random.Random(seed * 1_000_003 + store)
        noisy = store == 0
        rate = PER_STORE_PER_S * (NOISY_FACTOR if noisy and load == LOADS[1] else 1)
        t = 0.0
        while True:
            t += -math.log(1.0 - rng.random()) / rate * 1000.0
            if t >= load_s * 1000:
                break
            out.append((int(t), store, rng.randint(*SERVICE_MS)))
        if noisy and load == LOADS[2]:
            for _ in range(int(PER_STORE_PER_S * NOISY_FACTOR * load_s)):
                out.append((int(BULK_AT_S * 1000), 0, rng.randint(*SERVICE_MS)))
    out.sort()
    return out


def p95(xs):
    if not xs:
        return 0
    xs = sorted(xs)
    return xs[min(len(xs), max(1, math.ceil(len(xs) * 0.95))) - 1]


class Fairness:
    """The six passes (three loads, two claims) on `dsn`; `procs` is the run's list
    of child processes, so Ctrl+C ends the fairness workers too."""

    def __init__(self, cluster, solution, jail, seed, procs, load_s=LOAD_S):
        self.cluster, self.dsn, self.solution, self.jail, self.seed, self.procs, self.load_s = (
            cluster, cluster.dsn, solution, jail, seed, procs, load_s)

    def one_load(self, claim, load, load_s=None):
        arr = arrivals(self.seed, load, load_s or self.load_s)
        with psycopg.connect(self.dsn, autocommit=True) as admin:
            admin.execute("TRUNCATE actions, stores, outbox, webhook_events")
            admin.cursor().executemany("INSERT INTO stores (store, last_served_ms) VALUES (%s, 0)",
                                       [(store_name(s),) for s in range(STORES)])
            since = admin.execute("SELECT coalesce(max(seq), 0) FROM audit.writes").fetchone()[0]
        # The workers run the learner's claim, each as a login role of its own (like
        # the chaos run's workers, pg.create_audit), never the cluster's superuser.
        workers = [subprocess.Popen(
            self.jail.argv([sys.executable, os.path.join(HERE, "fair_worker.py"), "--solution", self.solution,
                            "--dsn", self.cluster.dsn_as(role), "--name", role, "--claim", claim]),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for role in ROLES]
        self.procs.extend(workers)
        try:
            for w, role in zip(workers, ROLES):
                w.stdin.write(self.cluster.password(role) + "\n")
                w.stdin.flush()
            # Every worker up and connected before the load's clock starts.
            for w in workers:
                if w.stdout.readline().strip() != "ready":
                    raise FairnessError(f"a fairness worker did not start: {w.stderr.read()[-1500:].strip()}")
            t0 = time.monotonic()
            for w in workers:
                w.stdin.write(repr(t0) + "\n")
                w.stdin.close()
            self._arrive(arr, t0)
            deadline = time.monotonic() + DRAIN_TIMEOUT_S
            with psycopg.connect(self.dsn, autocommit=True) as admin:
                while time.monotonic() < deadline:
                    done = admin.execute("SELECT count(*) FROM actions WHERE state = 'dispatched'").fetchone()[0]
                    if done >= len(arr):
                        break
                    crashed = [w for w in workers if w.poll() is not None]
                    if crashed:
                        raise FairnessError(f"a worker ended with your claim ({claim}): "
                                            f"{crashed[0].stderr.read()[-1500:].strip()}")
                    time.sleep(0.1)
                else:
                    raise FairnessError(f"the {load} load did not drain within {DRAIN_TIMEOUT_S} s with the "
                                        f"{'FIFO' if claim == 'fifo' else 'your'} claim ({done} of {len(arr)})")
                writes = admin.execute(
                    "SELECT at_ms, who, action_id, op, old_state, old_owner, old_epoch, new_owner, new_epoch, "
                    "new_state FROM audit.writes WHERE seq > %s ORDER BY seq", (since,)).fetchall()
        finally:
            stop_all(workers)
            for w in workers:
                self.procs.remove(w)
        try:
            waits = served(writes, arr)
        except UntrustedRecord as e:
            raise FairnessError(f"the {load} load with the {'FIFO' if claim == 'fifo' else 'your'} claim was not "
                                f"measured: {e}") from None
        # ids are 1.. in arrival order (see _arrive); the noisy store is store 0
        others = [waits[i + 1] for i, (_, store, _) in enumerate(arr) if store != 0]
        return p95(others), len(arr)

    def _arrive(self, arr, t0):
        with psycopg.connect(self.dsn, autocommit=True) as admin:
            i = 0
            while i < len(arr):
                now_ms = (time.monotonic() - t0) * 1000
                batch = []
                while i < len(arr) and arr[i][0] <= now_ms:
                    t, store, service = arr[i]
                    i += 1
                    batch.append((i, store_name(store), f"+1555{i:07}", f"service {service}", t))
                if batch:
                    admin.cursor().executemany(
                        "INSERT INTO actions (id, store, phone, body, created_ms) VALUES (%s, %s, %s, %s, %s)", batch)
                if i < len(arr):
                    time.sleep(max(0.0, min(0.005, (arr[i][0] - (time.monotonic() - t0) * 1000) / 1000)))

    def go(self):
        started = time.monotonic()
        # The scheduler, not the disk: with every commit waiting for its WAL flush,
        # an occasional slow flush stalls all of them at once and swamps the
        # difference measured (the challenge's own note). The chaos run is over, and
        # nothing here crashes, so the cluster stops waiting from now on.
        with psycopg.connect(self.dsn, autocommit=True) as admin:
            admin.execute("ALTER SYSTEM SET synchronous_commit = off")
            admin.execute("SELECT pg_reload_conf()")
        # A short load first, not counted: the first load after the chaos run
        # measured up to 1.6x slower than the same load again (caches, the chaos
        # run's dead rows), and it was the baseline every ratio is read against.
        self.one_load(CLAIMS[0], LOADS[0], WARM_UP_S)
        rows = []
        for claim in CLAIMS:
            graded = claim == "yours"
            got = self.one_round(claim, 1)
            # Real time on a shared machine moves a p95 by several per cent, and a
            # slow spell of the machine lasts longer than a round; while a graded
            # row fails, all three loads are measured again (baseline too), up to
            # ROUNDS_MAX rounds, and each load keeps its best round. A scheduler
            # that is not fair fails them all (FIFO's bulk load measured 1.8x to 7x
            # here; the reference's, in CI's slowest spell, 1.13x in two rounds).
            rounds = 1
            while graded and rounds < ROUNDS_MAX and not all(r["ok"] for r in got):
                rounds += 1
                got = [min(a, b, key=lambda r: r["ratio"]) for a, b in zip(got, self.one_round(claim, rounds))]
            rows += [{**r, "claim": claim, "graded": graded, "rounds": rounds} for r in got]
        return {"rows": rows, "max_ratio": MAX_RATIO, "workers": WORKERS, "load_s": self.load_s,
                "seconds": round(time.monotonic() - started, 1),
                "passed": all(r["ok"] for r in rows if r["graded"])}

    def one_round(self, claim, number):
        """The three loads with `claim`, each against this round's baseline."""
        out, base = [], None
        for load in LOADS:
            p, n = self.one_load(claim, load)
            base = base or max(p, 1)
            ratio = round(p / base, 2)
            out.append({"load": load, "p95_ms": p, "base_p95_ms": base, "ratio": ratio, "ok": ratio <= MAX_RATIO,
                        "actions": n, "round": number})
        return out


class FairnessError(RuntimeError):
    """A fairness pass could not finish: a worker crashed, a load did not drain, or
    its record shows work no honest worker does."""


class UntrustedRecord(ValueError):
    """A load's record (pg.AUDIT_SQL) shows what no honest fairness worker does."""


def served(writes, arr):
    """Each action's wait, from its arrival to its dispatch, in ms, read from a load's
    record alone: `writes` are audit.writes rows (at_ms, who, action_id, op,
    old_state, old_owner, old_epoch, new_owner, new_epoch, new_state) in order;
    `arr` the load's arrivals (action i + 1 is arr[i], its service time arr[i][2]).
    Raises UntrustedRecord when an action was not served by an honest worker: a
    dispatch by anyone but the claim's own worker at its epoch, one sooner than the
    service time after its claim, or a worker serving two actions at once."""
    arrived, claims, done, spans = {}, {}, {}, {}
    for at, who, action, op, old_state, old_owner, old_epoch, new_owner, new_epoch, new_state in writes:
        if op == "INSERT":
            arrived.setdefault(action, at)
        elif new_state == "claimed" and new_owner == who and old_epoch is not None and new_epoch > old_epoch:
            claims[(action, new_epoch)] = (who, at)
        elif old_state == "claimed" and new_state == "dispatched":
            claim = claims.get((action, new_epoch))
            if claim is None or claim[0] != who or old_owner != who or new_epoch != old_epoch or action in done:
                raise UntrustedRecord(f"action {action} was marked dispatched by {who!r}, which did not hold its "
                                      "claim at that epoch")
            if not 0 < action <= len(arr):
                raise UntrustedRecord(f"action {action} is not one of the load's")
            service_ms = arr[action - 1][2]
            if at - claim[1] < service_ms - SLACK_MS:
                raise UntrustedRecord(f"worker {who!r} dispatched action {action} {at - claim[1]:.0f} ms after "
                                      f"claiming it, before its {service_ms} ms service time was over")
            done[action] = at
            spans.setdefault(who, []).append((claim[1], at, action))
    for who, ss in spans.items():
        ss.sort()
        for (_, end, a), (start, _, b) in zip(ss, ss[1:]):
            if start < end - SLACK_MS:
                raise UntrustedRecord(f"worker {who!r} claimed action {b} while it still served action {a}")
    missing = [i for i in range(1, len(arr) + 1) if i not in done or i not in arrived]
    if missing:
        raise UntrustedRecord(f"{len(missing)} of the load's {len(arr)} actions (the first: {missing[0]}) were not "
                              "dispatched by a worker that had claimed them")
    return {a: done[a] - arrived[a] for a in done}


def text(f):
    out = [f"fairness, real time: {STORES} stores, {WORKERS} workers, {f['load_s']:g} s a load; the other 99 stores' "
           f"p95 from arrival to the message going out; {f['seconds']} s", "",
           f"{'load':<28} {'your claim':>18} {'FIFO (not graded)':>22}"]
    by = {(r["load"], r["claim"]): r for r in f["rows"]}
    for load in LOADS:
        y, q = by[(load, "yours")], by[(load, "fifo")]
        out.append(f"{load:<28} {y['p95_ms']:>6} ms {y['ratio']:>5.2f}x {'ok  ' if y['ok'] else 'FAIL'}"
                   f" {q['p95_ms']:>8} ms {q['ratio']:>5.2f}x")
    rounds = max(r["rounds"] for r in f["rows"] if r["graded"])
    if rounds > 1:
        out += ["", f"Your claim failed a load in the first round and was measured in {rounds} rounds; each load "
                "shows its best round."]
    out += ["", f"Your claim must keep the other stores' p95 within {round((MAX_RATIO - 1) * 100)}% of its own "
            "every-store-equal run."]
    return "\n".join(out)
