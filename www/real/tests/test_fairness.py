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

REAL = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
REFERENCE = os.path.join(REAL, "..", "..", "src", "courier", "reference.py")
sys.path.insert(0, REAL)

import fairness  # noqa: E402


def test_the_loads_differ_only_in_the_noisy_store_and_are_seeded():
    equal, steady, bulk = (fairness.arrivals(7, load, 10) for load in fairness.LOADS)
    others = lambda arr: [a for a in arr if a[1] != 0]  # noqa: E731
    assert others(equal) == others(steady) == others(bulk) and len(others(equal)) > 150
    assert fairness.arrivals(7, fairness.LOADS[0], 10) == equal != fairness.arrivals(8, fairness.LOADS[0], 10)
    noisy = lambda arr: [a for a in arr if a[1] == 0]  # noqa: E731
    assert [t for t, _, _ in noisy(bulk)].count(2000) == 130  # its 10x share, all at 2 s
    assert 8 < len(noisy(steady)) and len(noisy(equal)) < len(noisy(steady))
    assert all(20 <= s <= 80 for _, _, s in equal)


def test_p95_is_the_value_at_the_95th_percentile():
    assert fairness.p95(list(range(1, 101))) == 95
    assert fairness.p95([5]) == 5 and fairness.p95([]) == 0


def fairness_run(solution, seed):
    """A short run (4 s loads) of `solution`: its result and JSON report, once no
    process and no file of it is left."""
    # A temporary folder of this run's own (other runs may share /tmp), which the
    # cluster's user (nobody, under root) can enter.
    tmp = tempfile.mkdtemp(prefix="fairness-test-")
    os.chmod(tmp, 0o755)
    r = subprocess.run([sys.executable, os.path.join(REAL, "run.py"), solution, "--actions", "30", "--kills", "0",
                        "--freezes", "0", "--workers", "2", "--seed", str(seed), "--fairness", "--fairness-load-s", "4",
                        "--format", "json"], capture_output=True, text=True, timeout=300,
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
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    assert report["passed"] is True and report["replay"].endswith("--fairness --fairness-load-s 4 " + REFERENCE)
    rows = report["fairness"]["rows"]
    assert [(x["load"], x["claim"]) for x in rows] == [(load, claim) for claim in fairness.CLAIMS
                                                       for load in fairness.LOADS]
    for x in rows:
        # Each against its own round's every-store-equal load.
        assert x["p95_ms"] >= 20 and x["ratio"] == round(x["p95_ms"] / x["base_p95_ms"], 2)
        assert x["ok"] == (x["ratio"] <= 1.10) and x["graded"] == (x["claim"] == "yours")
    assert all(x["ok"] for x in rows if x["graded"])
    assert "FIFO (not graded)" in r.stderr and "one store 10x, all at once" in r.stderr


# The catalogue's fifo-claim (src/courier/mutants.py): the oldest action in the
# whole table, whatever its store, so one store's burst holds every other store up.
# It fails the all-at-once row in every round (FIFO measured 1.8x to 7.2x in every run here).
def test_a_fifo_claim_fails_the_all_at_once_row():
    sys.path.insert(0, os.path.join(REAL, "..", "..", "src", "courier"))
    import mutants
    with open(REFERENCE) as f:
        wrong = mutants.apply(f.read(), next(m for m in mutants.MUTANTS if m["name"] == "fifo-claim"))
    tmp = tempfile.mkdtemp(prefix="fifo-claim-")
    try:
        path = os.path.join(tmp, "fifo.py")
        with open(path, "w") as f:
            f.write(wrong)
        r, report = fairness_run(path, 23)
    finally:
        shutil.rmtree(tmp)
    assert r.returncode == 1, r.stdout + r.stderr[-3000:]
    assert all(row["ok"] for row in report["chaos"]["rows"]), "only fairness may fail"
    bulk = next(x for x in report["fairness"]["rows"] if x["claim"] == "yours" and x["load"] == fairness.LOADS[2])
    assert not bulk["ok"] and bulk["ratio"] > 1.5 and bulk["rounds"] == fairness.ROUNDS_MAX, bulk
    assert report["passed"] is False and f"measured in {fairness.ROUNDS_MAX} rounds" in r.stderr


def test_a_sigterm_in_the_middle_of_the_fairness_run_leaves_nothing_behind():
    tmp = tempfile.mkdtemp(prefix="fairness-test-")
    os.chmod(tmp, 0o755)
    p = subprocess.Popen([sys.executable, os.path.join(REAL, "run.py"), REFERENCE, "--actions", "20", "--kills", "0",
                          "--freezes", "0", "--workers", "2", "--seed", "22", "--fairness", "--fairness-load-s", "4"],
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
    assert p.returncode == 1 and "stopped; the cluster, the provider and every worker are gone" in err, err[-2000:]
    procs = subprocess.run(["pgrep", "-f", f"{REAL}/(fair_worker|worker|receiver|provider)"],
                           capture_output=True, text=True)
    assert not procs.stdout.strip(), f"the run left processes: {procs.stdout}"
    left = os.listdir(tmp)
    os.rmdir(tmp) if not left else None
    assert not left, f"the run left {left}"
