# ./lab real --fairness (www/real/fairness.py, fair_worker.py): the fairness
# benchmark in real time. Its arrivals are seeded per store, so the loads differ
# only in the noisy store; end to end, the reference passes its graded rows (a
# short run: 4 s of arrivals a load instead of 10) and the run leaves no process
# and no folder behind.
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import types

import pytest

REAL = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, REAL)

import fairness  # noqa: E402
import jail  # noqa: E402
from lab_files import REFERENCE  # noqa: E402


def test_the_loads_differ_only_in_the_noisy_store_and_are_seeded():
    equal, steady, bulk = (fairness.arrivals(7, load, 10) for load in fairness.LOADS)
    others = lambda arr: [a for a in arr if a[1] != 0]  # noqa: E731
    assert others(equal) == others(steady) == others(bulk) and len(others(equal)) > 150
    assert fairness.arrivals(7, fairness.LOADS[0], 10) == equal != fairness.arrivals(8, fairness.LOADS[0], 10)
    noisy = lambda arr: [a for a in arr if a[1] == 0]  # noqa: E731
    assert [t for t, _, _ in noisy(bulk)].count(2000) == 130  # its 10x share, all at 2 s
    assert 8 < len(noisy(steady)) and len(noisy(equal)) < len(noisy(steady))
    assert all(20 <= s <= 80 for _, _, s in equal)


def rows_of(base_ms, yours, fifo, number=1, again_ms=None):
    """A round's rows from p95s: `yours` and `fifo` are (steady, bulk) ratios;
    `again_ms` your baseline measured again at the round's end (else base_ms)."""
    out = []
    for claim, (steady, bulk) in (("yours", yours), ("fifo", fifo)):
        for load, ratio in zip(fairness.LOADS, (1.0, steady, bulk)):
            out.append({"load": load, "claim": claim, "graded": claim == "yours", "p95_ms": round(base_ms * ratio),
                        "base_p95_ms": base_ms, "ratio": ratio, "ok": ratio <= fairness.MAX_RATIO, "round": number,
                        **({"again_p95_ms": again_ms or base_ms} if (load, claim) == (fairness.LOADS[0], "yours")
                           else {})})
    return out


def a_round(number, rows):
    why = fairness.validity(rows)
    return {"number": number, "rows": rows, "valid": why is None, "why": why,
            "passed": all(r["ok"] for r in rows if r["graded"])}


def test_a_round_grades_only_when_it_checks_itself():
    assert fairness.validity(rows_of(90, (1.02, 1.01), (1.01, 4.4))) is None
    # the machine's load in the baseline: 8,645 ms was measured under a CPU hog
    assert fairness.validity(rows_of(8645, (1.0, 1.0), (1.0, 3.0))) == (
        "the every-store-equal load's p95 was 8645 ms with your claim, over 200 ms for actions of 20 to 80 ms: "
        "the machine is too loaded")
    # FIFO not told apart in the same round: 1.15x to 1.26x under load
    assert "FIFO's all-at-once load measured only 1.26x" in fairness.validity(rows_of(150, (1.0, 1.0), (1.0, 1.26)))
    # the machine changed during the round: the reference's steady load measured 3.82x
    # (608 ms) beside a CI, after a 159 ms baseline; measured again, the baseline moves
    assert fairness.validity(rows_of(159, (3.82, 2.5), (1.02, 2.73), again_ms=420)) == (
        "the every-store-equal load's p95 with your claim was 159 ms before the other loads and 420 ms after them, "
        "more than 1.25x apart, so the machine changed during the round: it is too loaded")
    # a slow baseline makes every ratio small (an unfair claim could pass): the same
    assert "was 190 ms before the other loads and 140 ms after" in fairness.validity(
        rows_of(190, (1.0, 1.0), (1.0, 3.0), again_ms=140))
    # within 1.25x either way, the round grades
    assert fairness.validity(rows_of(160, (1.0, 1.0), (1.0, 3.0), again_ms=200)) is None
    assert fairness.validity(rows_of(200, (1.0, 1.0), (1.0, 3.0), again_ms=160)) is None


def test_the_lab_s_reference_claim_is_the_control_of_a_round_your_claim_fails():
    steady, bulk = fairness.LOADS[1:]
    control = lambda base_ms, ratios: [fairness.row(load, "control", (round(base_ms * ratio), 100), base_ms, 1)  # noqa: E731
                                       for load, ratio in ((fairness.LOADS[0], 1.0), *ratios)]
    # the reference passes the load your claim failed: the round grades your claim
    assert fairness.control_validity(control(110, [(steady, 1.04)])) is None
    # ci9: the reference as yours measured 1.43x on the steady load, baselines held,
    # FIFO 1.00x beside it; the reference failing it too means the machine could not
    assert fairness.control_validity(control(110, [(bulk, 1.02), (steady, 1.43)])) == (
        "the lab's reference claim, which is fair, measured 1.43x on the one store 10x, steady load in this round "
        "too (over 1.1x), so the round could not tell a fair claim from an unfair one: the machine is too loaded")
    # its own baseline too slow to measure anything
    assert fairness.control_validity(control(450, [(steady, 1.0)])) == (
        "the every-store-equal load's p95 was 450 ms with the lab's reference claim, over 200 ms: the machine is "
        "too loaded")


@pytest.mark.parametrize("yours, fifo, control, measured, valid", [
    # your claim passes: no control is measured
    ((1.02, 1.03), (1.0, 4.0), None, [], True),
    # your claim fails the steady load, the reference passes it: a valid, failed round
    ((1.43, 1.03), (1.0, 4.0), (1.02, None), [fairness.LOADS[0], fairness.LOADS[1]], True),
    # ... and the reference fails it too: not graded
    ((1.43, 1.03), (1.0, 4.0), (1.5, None), [fairness.LOADS[0], fairness.LOADS[1]], False),
    # both loads failed: the control measures both
    ((1.43, 3.0), (1.0, 4.0), (1.0, 1.05), list(fairness.LOADS), True),
    # a round the checks refuse already (FIFO not told apart): no control
    ((1.43, 3.0), (1.0, 1.2), None, [], False),
])
def test_a_round_measures_the_control_only_when_your_claim_fails_a_gradable_round(yours, fifo, control, measured,
                                                                                  valid):
    ratios = {"yours": (1.0, *yours), "fifo": (1.0, *fifo), "control": (1.0, *(control or (1.0, 1.0)))}
    loads = []

    def one_load(claim, load, load_s=None):
        loads.append((claim, load))
        return round(100 * ratios[claim][fairness.LOADS.index(load)]), 300

    f = fairness.Fairness(types.SimpleNamespace(dsn="unused"), "solution.py", None, 1, [])
    f.one_load = one_load
    r = f.one_round(1)
    assert [load for claim, load in loads if claim == "control"] == measured
    assert [x["load"] for x in r["control"]] == measured and r["valid"] is valid
    # every round: each load with each claim, interleaved, then your baseline again
    assert loads[:7] == [*((claim, load) for load in fairness.LOADS for claim in fairness.CLAIMS),
                         ("yours", fairness.LOADS[0])]
    assert r["passed"] is (max(yours) <= fairness.MAX_RATIO)


def test_the_control_runs_with_a_uid_of_its_own(tmp_path):
    tmp_path.chmod(0o755)
    learner = jail.Jail([str(tmp_path)])
    control = jail.Jail([str(tmp_path)], held=[learner.uid])
    if os.geteuid() != 0:
        assert learner.uid is None and control.uid is None  # not root: no uid to give (www/real/README.md)
        return
    assert learner.uid is not None and control.uid not in (None, learner.uid)
    # Without `held`, a second Jail gets the first one's uid when no process runs as it
    # yet: the learner's code could then reach the control's processes.
    assert jail.Jail([str(tmp_path)]).uid == learner.uid


def test_the_verdict_comes_from_valid_rounds_only():
    fair, unfair, loaded = (1.02, 1.03), (1.01, 3.1), rows_of(5000, (1.0, 1.0), (1.0, 1.1))
    fifo = (1.0, 4.0)
    # a valid passing round passes at once; its rows are shown
    rounds_of = lambda d: {r["round"] for r in d["rows"]}  # noqa: E731
    d = fairness.decide([a_round(1, rows_of(90, fair, fifo))])
    assert d["done"] and d["verdict"] == "pass" and rounds_of(d) == {1}
    # a loaded round is not graded, whatever your claim's rows say
    d = fairness.decide([a_round(1, loaded)])
    assert not d["done"]
    d = fairness.decide([a_round(1, loaded), a_round(2, loaded), a_round(3, loaded)])
    assert d["verdict"] == "inconclusive" and "too loaded" in d["why"]
    # an unfair claim fails every valid round: not decided before ROUNDS_MAX, then a fail
    unfair_rounds = [a_round(1, rows_of(90, unfair, fifo)), a_round(2, loaded), a_round(3, rows_of(95, unfair, fifo, 3))]
    assert not fairness.decide(unfair_rounds[:2])["done"]
    d = fairness.decide(unfair_rounds)
    assert d["verdict"] == "fail" and rounds_of(d) <= {1, 3}
    # one valid fail, then a valid pass (a slow spell that kept the round valid): pass
    d = fairness.decide([a_round(1, rows_of(90, unfair, fifo)), a_round(2, rows_of(90, fair, fifo, 2))])
    assert d["verdict"] == "pass" and {r["round"] for r in d["rows"] if r["load"] == fairness.LOADS[2]} == {2}
    # each load from the valid round your claim did best in, both claims' rows from it:
    # steady passed in round 1 only, all-at-once in round 2 only (the hog's pattern)
    d = fairness.decide([a_round(1, rows_of(97, (1.05, 1.26), fifo)), a_round(2, rows_of(97, (1.20, 1.06), fifo, 2))])
    by = {(r["load"], r["claim"]): r["round"] for r in d["rows"]}
    assert d["verdict"] == "pass" and by[(fairness.LOADS[1], "yours")] == by[(fairness.LOADS[1], "fifo")] == 1
    assert by[(fairness.LOADS[2], "yours")] == by[(fairness.LOADS[2], "fifo")] == 2
    # one valid fail and two loaded rounds: not enough to fail (ci13: the reference as
    # yours at 1.15x and 1.17x in the one valid round, the control 0.92x beside it)
    d = fairness.decide([a_round(1, rows_of(90, unfair, fifo)), a_round(2, loaded), a_round(3, loaded)])
    assert d["verdict"] == "inconclusive" and rounds_of(d) == {1}
    assert d["why"].startswith("your claim failed the only round of 3 that could be graded, and a fail must be seen "
                               "in 2; the others: the every-store-equal load's p95 was 5000 ms")
    # two valid fails and a loaded round: a fail
    d = fairness.decide([a_round(1, rows_of(90, unfair, fifo)), a_round(2, loaded), a_round(3, rows_of(95, unfair, fifo, 3))])
    assert d["verdict"] == "fail" and rounds_of(d) <= {1, 3}


def test_p95_is_the_value_at_the_95th_percentile():
    assert fairness.p95(list(range(1, 101))) == 95
    assert fairness.p95([5]) == 5 and fairness.p95([]) == 0


def fairness_run(solution, seed):
    """A short run (4 s loads) of `solution`: its result and JSON report, once no
    process and no file of it is left."""
    # A temporary folder of this run's own (other runs may share /tmp), which the
    # cluster's user (postgres, under root) can enter.
    tmp = tempfile.mkdtemp(prefix="fairness-test-")
    os.chmod(tmp, 0o755)
    # --lease-s 5: the chaos run's database crash leaves its workers' actions to wait
    # out a lease (30 s of a 95 s run); the fairness workers keep lab.md's lease.
    r = subprocess.run([sys.executable, os.path.join(REAL, "run.py"), solution, "--actions", "30", "--kills", "0",
                        "--freezes", "0", "--workers", "2", "--seed", str(seed), "--lease-s", "5", "--fairness",
                        "--fairness-load-s", "4", "--format", "json"], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "TMPDIR": tmp})
    left = os.listdir(tmp)
    os.rmdir(tmp) if not left else None
    assert not left, f"the run left {left}"
    procs = subprocess.run(["pgrep", "-f", f"{REAL}/(fair_worker|worker|receiver|provider)"],
                           capture_output=True, text=True)
    assert not procs.stdout.strip(), f"the run left processes: {procs.stdout}"
    return r, json.loads(r.stdout.strip().splitlines()[-1])


def test_the_reference_passes_a_short_fairness_run_and_fifo_is_shown_beside_it():
    r, report = fairness_run(REFERENCE, 21)
    # Never a fail: a pass, or (only when no round could check itself) inconclusive.
    assert r.returncode in (0, 3), r.stdout + r.stderr[-3000:]
    f = report["fairness"]
    assert report["verdict"] == f["verdict"] == {0: "pass", 3: "inconclusive"}[r.returncode]
    assert report["replay"].endswith("--fairness --fairness-load-s 4 " + REFERENCE)
    rows = f["rows"]
    assert [(x["load"], x["claim"]) for x in rows] == [(load, claim) for claim in fairness.CLAIMS
                                                       for load in fairness.LOADS]
    for load in fairness.LOADS:  # a load's two rows come from one round
        assert len({x["round"] for x in rows if x["load"] == load}) == 1
    for x in rows:
        # Each against its own round's every-store-equal load.
        assert isinstance(x["p95_ms"], int) and x["p95_ms"] >= 20 and x["ratio"] == round(x["p95_ms"] / x["base_p95_ms"], 2)
        assert x["ok"] == (x["ratio"] <= 1.10) and x["graded"] == (x["claim"] == "yours")
    if r.returncode == 0:
        assert report["passed"] is True and all(x["ok"] for x in rows if x["graded"])
        assert fairness.validity(rows) is None
    else:
        assert report["passed"] is False and "INCONCLUSIVE fairness" in r.stderr and f["inconclusive"]
    assert "FIFO (not graded)" in r.stderr and "one store 10x, all at once" in r.stderr


def mutant_fairness_run(name, seed):
    """fairness_run of the catalogue's mutant `name` (src/courier/mutants.py)."""
    sys.path.insert(0, os.path.join(REAL, "..", "..", "src", "courier"))
    import mutants
    with open(REFERENCE) as f:
        wrong = mutants.apply(f.read(), next(m for m in mutants.MUTANTS if m["name"] == name))
    tmp = tempfile.mkdtemp(prefix=f"{name}-")
    try:
        path = os.path.join(tmp, name.replace("-", "_") + ".py")
        with open(path, "w") as f:
            f.write(wrong)
        return fairness_run(path, seed)
    finally:
        shutil.rmtree(tmp)


# A wrong claim order from the catalogue, failing the all-at-once row in every
# valid round. (fifo-claim, the oldest action whatever its store and no cap, was
# here too: it is the FIFO claim every round measures beside yours, and a round is
# valid only when FIFO's all-at-once ratio is past FIFO_APART_RATIO, so every valid
# round of every run already shows it failing; as a learner's file it took a CI
# about 150 s, its three rounds always run in full, for what the one below shows.)
# - cap-on-the-oldest-only: the oldest action in the whole table, whatever its store,
#   and the cap checked on it alone (None when its store is full): FIFO with a cap,
#   so the burst's store still holds the other 99 back (measured with seed 23: 6.14x
#   on the all-at-once load, the best of three valid rounds, FIFO 2.72x beside it);
#   its unit test is "claim serves the store that waited longest".
# Two of the catalogue's wrong orders are not here, because the real run cannot tell
# them from a fair claim beyond its noise. The simulation's unit tests catch each one
# exactly.
# - cap-on-the-first-pick-only: the cap is checked on the least recently served store
#   only, None when that store is full. It passes a valid run (seed 23: 0.96x and
#   0.98x), since a store at the cap heads the fair order only when every store with
#   work was served after it, and the other stores then wait a few ms. Its unit test is
#   "claim skips a store at the in-flight cap".
# - claim-ignores-last-served: stores by name, so store-000, the noisy store, goes
#   first whenever it is under the in-flight cap. Its burst holds 4 of the 12 workers,
#   and the other 99 stores share 8 (about 89% busy for them). `fairness_model.py
#   --byname --overhead-ms 10 --seeds 20 --load-s 4` (and 10) puts its all-at-once ratio, over seeds 1 to 20, at
#   1.01x to 1.53x with a median of 1.08x for 4 s loads, and a median of 1.12x for
#   10 s loads; 16 and 14 seeds of the 20 fall under 1.2x. This test had it with
#   seed 23 (1.44x in the model), and ci15 measured 1.51x, 1.11x and 1.09x in three
#   valid rounds: the best valid round decides a pass, so it passed. Its unit test is
#   "claim serves the store that waited longest".
# It must fail the all-at-once row past FIFO_APART_RATIO.
@pytest.mark.parametrize("name, seed", [
    ("cap-on-the-oldest-only", 23),
])
def test_a_wrong_claim_order_fails_valid_rounds(name, seed):
    r, report = mutant_fairness_run(name, seed)
    # Never a pass: a fail in valid rounds, or (only when none could check itself) inconclusive.
    assert r.returncode in (1, 3), r.stdout + r.stderr[-3000:]
    assert all(row["ok"] for row in report["chaos"]["rows"]), "only fairness may fail"
    assert report["passed"] is False
    f = report["fairness"]
    if r.returncode == 1:
        assert f["verdict"] == "fail" and fairness.validity(f["rows"]) is None
        assert len(f["rounds"]) == fairness.ROUNDS_MAX and not any(x["passed"] for x in f["rounds"] if x["valid"])
        assert sum(x["valid"] for x in f["rounds"]) >= fairness.FAIL_ROUNDS_MIN
        bulk = next(x for x in f["rows"] if x["claim"] == "yours" and x["load"] == fairness.LOADS[2])
        assert not bulk["ok"] and bulk["ratio"] > fairness.FIFO_APART_RATIO, bulk
        assert any(not x["ok"] and x["ratio"] > fairness.MAX_RATIO for x in f["rows"] if x["graded"]), f["rows"]
        # each valid round failed beside the lab's reference claim passing the same loads
        for x in f["rounds"]:
            failed = [y["load"] for y in x["rows"] if y["graded"] and not y["ok"]]
            if x["valid"]:
                assert [c["load"] for c in x["control"]] == [fairness.LOADS[0], *failed]
                assert all(c["ok"] for c in x["control"]) and fairness.control_validity(x["control"]) is None
    else:
        assert f["verdict"] == "inconclusive"
        assert sum(x["valid"] for x in f["rounds"]) < fairness.FAIL_ROUNDS_MIN


def test_a_sigterm_in_the_middle_of_the_fairness_run_leaves_nothing_behind():
    tmp = tempfile.mkdtemp(prefix="fairness-test-")
    os.chmod(tmp, 0o755)
    p = subprocess.Popen([sys.executable, os.path.join(REAL, "run.py"), REFERENCE, "--actions", "20", "--kills", "0",
                          "--freezes", "0", "--workers", "2", "--seed", "22", "--fairness", "--fairness-load-s", "4",
                          "--format", "json"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "TMPDIR": tmp})
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and p.poll() is None:
            up = subprocess.run(["pgrep", "-f", f"{REAL}/fair_worker"], capture_output=True, text=True).stdout.split()
            if len(up) >= 6:
                break
            time.sleep(0.2)
        assert p.poll() is None, "the run ended before its fairness workers started"
        time.sleep(1.0)  # mid-load
        p.terminate()
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 130 and "stopped; the cluster, the provider and every worker are gone" in err, err[-2000:]
    assert json.loads(out.strip().splitlines()[-1])["verdict"] == "stopped"
    procs = subprocess.run(["pgrep", "-f", f"{REAL}/(fair_worker|worker|receiver|provider)"],
                           capture_output=True, text=True)
    assert not procs.stdout.strip(), f"the run left processes: {procs.stdout}"
    left = os.listdir(tmp)
    os.rmdir(tmp) if not left else None
    assert not left, f"the run left {left}"


# The load's record as fairness.served reads it: (at_ms, who, action, op, old_state,
# old_owner, old_epoch, new_owner, new_epoch, new_state).
def arrived(at, action):
    return (at, "lab", action, "INSERT", None, None, None, None, 0, "pending")


def claimed(at, who, action, epoch=1):
    return (at, who, action, "UPDATE", "pending", None, epoch - 1, who, epoch, "claimed")


def dispatched(at, who, action, epoch=1, owner=None):
    return (at, who, action, "UPDATE", "claimed", owner or who, epoch, owner or who, epoch, "dispatched")


ARR = [(0, 1, 30), (5, 2, 40)]   # action 1: store 1, 30 ms of service; action 2: store 2, 40 ms


def test_served_reads_each_wait_from_the_record_alone():
    rec = [arrived(0.0, 1), arrived(5.0, 2), claimed(1.0, "f0", 1), claimed(6.0, "f1", 2),
           dispatched(31.5, "f0", 1), dispatched(47.0, "f1", 2)]
    assert fairness.served(rec, ARR) == {1: 31.5, 2: 42.0}


@pytest.mark.parametrize("why, rec", [
    ("before its 30 ms service time", [arrived(0, 1), arrived(5, 2), claimed(1, "f0", 1), dispatched(2, "f0", 1),
                                       claimed(6, "f1", 2), dispatched(47, "f1", 2)]),
    ("while it still served action 1", [arrived(0, 1), arrived(5, 2), claimed(1, "f0", 1), claimed(6, "f0", 2),
                                        dispatched(31, "f0", 1), dispatched(47, "f0", 2)]),
    ("which did not hold its claim", [arrived(0, 1), arrived(5, 2), claimed(1, "f0", 1), dispatched(31, "f1", 1, owner="f0"),
                                      claimed(6, "f1", 2), dispatched(47, "f1", 2)]),
    ("1 of the load's 2 actions", [arrived(0, 1), arrived(5, 2), claimed(1, "f0", 1), dispatched(31, "f0", 1)]),
    # marked dispatched in the claim's own write: never served
    ("1 of the load's 2 actions", [arrived(0, 1), arrived(5, 2), claimed(1, "f0", 1), dispatched(31, "f0", 1),
                                   (6, "f1", 2, "UPDATE", "pending", None, 0, "f1", 1, "dispatched")]),
])
def test_served_refuses_a_record_no_honest_worker_leaves(why, rec):
    with pytest.raises(fairness.UntrustedRecord, match=why):
        fairness.served(rec, ARR)


# A claim that, in a fairness worker, switches its process's sleep off: the worker
# then "serves" every action at once. Before, the worker's own measurements were
# the result (and the learner's role could INSERT them outright); now the run reads
# the record, which shows each dispatch sooner than its service time.
NO_SERVICE = """
import sys, time
_claim = claim
def claim(db, worker, now_ms, cfg):
    if sys.argv[0].endswith("fair_worker.py"):
        time.sleep = lambda s: None
    return _claim(db, worker, now_ms, cfg)
"""


def test_a_fairness_worker_that_skips_its_service_time_fails_the_run_unmeasured():
    folder = tempfile.mkdtemp(prefix="fairness-hostile-")
    try:
        path = os.path.join(folder, "no_service.py")
        with open(REFERENCE) as f:
            src = f.read()
        with open(path, "w") as f:
            f.write(src + NO_SERVICE)
        r, report = fairness_run(path, 24)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    assert all(row["ok"] for row in report["chaos"]["rows"]), "only fairness may fail"
    assert report["passed"] is False and report["fairness"]["passed"] is False
    assert "was not measured" in report["fairness"]["error"] and "before its" in report["fairness"]["error"], report
