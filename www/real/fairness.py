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

import jail
from lab_files import REFERENCE
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
ROUNDS_MAX = 3            # rounds measured at most, while none is decided (decide)
# A round grades only when it checks itself (validity): its every-store-equal p95
# stays under this (an idle machine here: 84 to 112 ms; under a CPU hog, seconds). At
# 400, rounds with 263 and 315 ms baselines (a CI beside) passed a by-name claim and
# FIFO itself, their ratios well under 1x: a slow spell that fell on one claim's loads...
BASELINE_MAX_MS = 200
# ...and FIFO, measured in the same round, is told apart (here 1.8x to 7x when the
# machine is not swamped; 1.15x to 1.26x when it was, beside an 8.6 s baseline).
FIFO_APART_RATIO = 1.5
# ...and the machine stays the same through the round: your claim's every-store-equal
# load is measured again after the others, and the two agree within this. A CI beside
# (CLI tests, load 8-16) made the reference's steady load 3.82x and 4.78x in rounds
# that passed both checks above, on a slow spell of tens of seconds that began after
# the baseline; an idle machine's baselines differ by about 10%.
AGAIN_MAX_RATIO = 1.25
# ...and, when your claim fails a load in a round that passed every check above, the
# lab's reference claim (CONTROL: fair by design, and in a sandbox of its own) is
# measured on that load and on its own every-store-equal load, then and there: the
# round grades your claim only if the reference passes the load. The checks above
# did not see this: beside the CLI tests, the reference as yours measured 1.43x and
# 1.50x on the steady load in two rounds whose baselines held (117 then 113 ms) with
# FIFO 1.00x beside it: a claim's heavier SQL near the claim path's capacity, twelve
# workers racing for one row, on a machine busy enough to bring that capacity down.
CONTROL = REFERENCE
# A fail must be seen in this many valid rounds (with fewer, after ROUNDS_MAX, the run
# is inconclusive): a slow spell can fall on one of your loads and spare the control
# measured seconds later (ci13, 4 s loads: the reference as yours 1.15x and 1.17x in
# the one valid round of three, the reference as the control 0.92x and 0.91x right
# after it); an unfair claim fails every valid round.
FAIL_ROUNDS_MIN = 2
ROLES = tuple(f"f{i}" for i in range(WORKERS))   # each fairness worker's own database role and name
SLACK_MS = 1              # the record's times are rounded floats of one clock
WARM_UP_S = 2.0           # a load before the measured ones, not counted
DRAIN_TIMEOUT_S = 60
LOADS = ("every store equal", "one store 10x, steady", "one store 10x, all at once")
CLAIMS = ("yours", "fifo")   # measured in every round; "control" (CONTROL) only when needed
CLAIM_NAMES = {"yours": "your claim", "fifo": "the FIFO claim", "control": "the lab's reference claim"}


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
    """The passes (three loads, two claims, and your baseline again) on `dsn`; `procs` is the run's list
    of child processes, so Ctrl+C ends the fairness workers too."""

    def __init__(self, cluster, solution, learner_jail, seed, procs, load_s=LOAD_S):
        self.cluster, self.dsn, self.solution, self.jail, self.seed, self.procs, self.load_s = (
            cluster, cluster.dsn, solution, learner_jail, seed, procs, load_s)
        self.control = None   # (solution, Jail) of the CONTROL claim, made when first needed

    def _runs(self, claim):
        """Where `claim`'s workers run: (solution file, Jail). Yours and FIFO's (the
        run's own code, which reads no solution) in the learner's sandbox; the
        control's in one of its own, with a uid of its own: the learner's code must
        not read the reference, nor reach its processes."""
        if claim != "control":
            return self.solution, self.jail
        if self.control is None:
            folder = os.path.join(self.cluster.root, "control")
            self.control = (jail.readable_copy(CONTROL, folder),
                            jail.Jail([folder, self.cluster.sockets], use=self.jail.on, held=[self.jail.uid]))
        return self.control

    def close(self):
        """Whatever the control's sandbox left (its uid's processes)."""
        if self.control is not None:
            jail.kill_uid(self.control[1].uid)

    def one_load(self, claim, load, load_s=None):
        solution, sandbox = self._runs(claim)
        arr = arrivals(self.seed, load, load_s or self.load_s)
        with psycopg.connect(self.dsn, autocommit=True) as admin:
            admin.execute("TRUNCATE actions, stores, outbox, webhook_events")
            admin.cursor().executemany("INSERT INTO stores (store, last_served_ms) VALUES (%s, 0)",
                                       [(store_name(s),) for s in range(STORES)])
            since = admin.execute("SELECT coalesce(max(seq), 0) FROM audit.writes").fetchone()[0]
        # The workers run the learner's claim, each as a login role of its own (like
        # the chaos run's workers, pg.create_audit), never the cluster's superuser.
        workers = [subprocess.Popen(
            sandbox.argv([sys.executable, os.path.join(HERE, "fair_worker.py"), "--solution", solution,
                          "--dsn", self.cluster.dsn_as(role), "--name", role,
                          "--claim", "fifo" if claim == "fifo" else "yours"]),
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
                        raise FairnessError(f"a worker ended with {CLAIM_NAMES[claim]}: "
                                            f"{crashed[0].stderr.read()[-1500:].strip()}")
                    time.sleep(0.1)
                else:
                    raise FairnessError(f"the {load} load did not drain within {DRAIN_TIMEOUT_S} s with "
                                        f"{CLAIM_NAMES[claim]} ({done} of {len(arr)})")
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
            raise FairnessError(f"the {load} load with {CLAIM_NAMES[claim]} was not measured: {e}") from None
        # ids are 1.. in arrival order (see _arrive); the noisy store is store 0
        others = [round(waits[i + 1]) for i, (_, store, _) in enumerate(arr) if store != 0]
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
        rounds = []
        try:
            while len(rounds) < ROUNDS_MAX:
                rounds.append(self.one_round(len(rounds) + 1))
                if decide(rounds)["done"]:
                    break
        finally:
            self.close()
        d = decide(rounds)
        return {"rows": d["rows"], "verdict": d["verdict"], "passed": d["verdict"] == "pass",
                **({"inconclusive": d["why"]} if d["verdict"] == "inconclusive" else {}),
                "rounds": [{k: r[k] for k in ("number", "valid", "why", "passed", "rows", "control")} for r in rounds],
                "max_ratio": MAX_RATIO, "baseline_max_ms": BASELINE_MAX_MS, "fifo_apart_ratio": FIFO_APART_RATIO,
                "workers": WORKERS, "load_s": self.load_s, "seconds": round(time.monotonic() - started, 1)}

    def one_round(self, number):
        """The three loads with each claim, interleaved (a slow spell of the machine
        then falls on both), each against the same claim's every-store-equal load of
        this round, whose baseline is measured again last; then, only if your claim
        failed a load of a round that could grade it, the control on that load; and
        whether the round can be graded (`validity`, `control_validity`)."""
        p95s = {(load, claim): self.one_load(claim, load) for load in LOADS for claim in CLAIMS}
        again_ms = self.one_load(CLAIMS[0], LOADS[0])[0]
        rows = []
        for claim in CLAIMS:
            for load in LOADS:
                rows.append({**row(load, claim, p95s[(load, claim)], p95s[(LOADS[0], claim)][0], number),
                             **({"again_p95_ms": again_ms} if (load, claim) == (LOADS[0], "yours") else {})})
        why = validity(rows)
        failed = [r["load"] for r in rows if r["graded"] and not r["ok"]]
        control = []
        if why is None and failed:
            base = self.one_load("control", LOADS[0])
            control = [row(load, "control", base if load == LOADS[0] else self.one_load("control", load), base[0],
                           number) for load in [LOADS[0], *failed]]
            why = control_validity(control)
        return {"number": number, "rows": rows, "control": control, "valid": why is None, "why": why,
                "passed": all(r["ok"] for r in rows if r["graded"])}


def row(load, claim, measured, base_p95_ms, number):
    """A load's row: its p95 (`measured`: (p95 ms, actions)) against the same claim's
    every-store-equal p95 in the same round."""
    p, n = measured
    base = max(base_p95_ms, 1)
    ratio = round(p / base, 2)
    return {"load": load, "claim": claim, "graded": claim == "yours", "p95_ms": p, "base_p95_ms": base,
            "ratio": ratio, "ok": ratio <= MAX_RATIO, "actions": n, "round": number}


def validity(rows):
    """Why a round's rows cannot grade a claim (None when they can): a baseline p95
    over BASELINE_MAX_MS measures the machine's load, not the claim; and a round in
    which FIFO's all-at-once ratio stays under FIFO_APART_RATIO could not have told
    an unfair claim from a fair one, whatever it says of yours; and a round whose
    every-store-equal load, measured again at its end, moved past AGAIN_MAX_RATIO was
    not measured on one machine."""
    by = {(r["load"], r["claim"]): r for r in rows}
    slow = [c for c in CLAIMS if by[(LOADS[0], c)]["p95_ms"] > BASELINE_MAX_MS]
    if slow:
        return (f"the every-store-equal load's p95 was {by[(LOADS[0], slow[0])]['p95_ms']} ms with "
                f"{'the FIFO' if slow[0] == 'fifo' else 'your'} claim, over {BASELINE_MAX_MS} ms for actions of "
                f"{SERVICE_MS[0]} to {SERVICE_MS[1]} ms: the machine is too loaded")
    first, again = by[(LOADS[0], "yours")]["p95_ms"], by[(LOADS[0], "yours")]["again_p95_ms"]
    if max(first, again) > AGAIN_MAX_RATIO * max(1, min(first, again)):
        return (f"the every-store-equal load's p95 with your claim was {first} ms before the other loads and "
                f"{again} ms after them, more than {AGAIN_MAX_RATIO:g}x apart, so the machine changed during the "
                "round: it is too loaded")
    fifo_bulk = by[(LOADS[2], "fifo")]["ratio"]
    if fifo_bulk < FIFO_APART_RATIO:
        return (f"FIFO's all-at-once load measured only {fifo_bulk:.2f}x (under {FIFO_APART_RATIO:g}x), so this "
                "round could not tell an unfair claim from a fair one: the machine is too loaded")
    return None


def control_validity(control):
    """Why the control's rows (CONTROL's every-store-equal load, then each load your
    claim failed) keep a round from grading your claim (None when they do not): a
    machine on which the lab's own fair claim fails a load, or whose every-store-equal
    p95 went past BASELINE_MAX_MS, could not tell a fair claim from an unfair one
    there."""
    base = control[0]
    if base["p95_ms"] > BASELINE_MAX_MS:
        return (f"the every-store-equal load's p95 was {base['p95_ms']} ms with {CLAIM_NAMES['control']}, over "
                f"{BASELINE_MAX_MS} ms: the machine is too loaded")
    bad = [r for r in control[1:] if not r["ok"]]
    if bad:
        return (f"{CLAIM_NAMES['control']}, which is fair, measured {bad[0]['ratio']:.2f}x on the {bad[0]['load']} "
                f"load in this round too (over {MAX_RATIO:g}x), so the round could not tell a fair claim from an "
                "unfair one: the machine is too loaded")
    return None


def best_rows(valid):
    """Each load's rows (your claim's and FIFO's, from one round) from the valid round
    in which your claim did best on it: a CPU hog beside a run moved a fair claim's
    ratio to 1.20x and 1.26x in two valid rounds in a row (baselines 97 ms, FIFO 2.29x),
    a slow spell a round-wide check does not see; an unfair claim fails every round."""
    row = lambda r, load, claim: next(x for x in r["rows"] if x["load"] == load and x["claim"] == claim)  # noqa: E731
    pick = {load: min(valid, key=lambda r: row(r, load, "yours")["ratio"]) for load in LOADS}
    return [row(pick[load], load, claim) for claim in CLAIMS for load in LOADS]


def decide(rounds):
    """The verdict of the rounds so far, and whether to stop measuring: your claim
    passes when each load's best valid round passes it (best_rows); it fails when
    that is not so after ROUNDS_MAX rounds, FAIL_ROUNDS_MIN of them valid; with
    fewer valid rounds, nothing is graded ("inconclusive"). Invalid rounds count for
    nothing."""
    valid = [r for r in rounds if r["valid"]]
    rows = best_rows(valid) if valid else None
    if rows and all(r["ok"] for r in rows if r["graded"]):
        return {"done": True, "verdict": "pass", "rows": rows}
    if len(rounds) < ROUNDS_MAX:
        return {"done": False}
    if len(valid) >= FAIL_ROUNDS_MIN:
        return {"done": True, "verdict": "fail", "rows": rows}
    if valid:
        return {"done": True, "verdict": "inconclusive", "rows": rows,
                "why": f"your claim failed the only round of {len(rounds)} that could be graded, and a fail must be "
                       f"seen in {FAIL_ROUNDS_MIN}; the others: " + "; ".join(r["why"] for r in rounds if not r["valid"])}
    return {"done": True, "verdict": "inconclusive", "rows": rounds[-1]["rows"], "why": rounds[-1]["why"]}


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


def control_text(r):
    """What the control measured in a failed, valid round."""
    return "" if not r.get("control") else (
        f" ({CLAIM_NAMES['control']} beside it: "
        + ", ".join(f"{x['load']} {x['ratio']:.2f}x" for x in r["control"][1:]) + ")")


def text(f):
    out = [f"fairness, real time: {STORES} stores, {WORKERS} workers, {f['load_s']:g} s a load; the other 99 stores' "
           f"p95 from arrival to the message going out; {f['seconds']} s", "",
           f"{'load':<28} {'your claim':>18} {'FIFO (not graded)':>22}"]
    by = {(r["load"], r["claim"]): r for r in f["rows"]}
    for load in LOADS:
        y, q = by[(load, "yours")], by[(load, "fifo")]
        mark = ("ok  " if y["ok"] else "FAIL") if f["verdict"] != "inconclusive" else "  - "
        out.append(f"{load:<28} {y['p95_ms']:>6} ms {y['ratio']:>5.2f}x {mark}"
                   f" {q['p95_ms']:>8} ms {q['ratio']:>5.2f}x")
    if len(f["rounds"]) > 1:
        out += [""] + [f"round {r['number']}: " + ("not graded: " + r["why"] if not r["valid"] else
                                                   "passed" if r["passed"] else "failed" + control_text(r))
                       for r in f["rounds"]]
        out.append("Each load shows the valid round your claim did best in: "
                   + ", ".join(f"{load}: round {by[(load, 'yours')]['round']}" for load in LOADS) + ".")
    out += ["", f"Your claim must keep the other stores' p95 within {round((MAX_RATIO - 1) * 100)}% of its own "
            f"every-store-equal run, in a round that can be graded: its every-store-equal p95 under "
            f"{BASELINE_MAX_MS} ms, and FIFO's all-at-once load at {FIFO_APART_RATIO:g}x or more; a load it fails, "
            "the lab's reference claim passes in the same round."]
    if f["verdict"] == "inconclusive":
        out += ["", f"INCONCLUSIVE fairness: too few rounds could be graded ({f['inconclusive']}). Run it again "
                "on a machine with less else to do; nothing was passed or failed."]
    return "\n".join(out)
