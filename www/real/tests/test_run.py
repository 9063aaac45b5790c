# ./lab real end to end (www/real/run.py), small: its own cluster, the provider, the
# receiver and four workers, with SIGKILLs and a database crash. The reference
# passes every row; a resend without a lookup and a new key per attempt each fail
# the row that names it. Each run
# leaves no process and no folder behind. (A run with kills takes at least one lease,
# 30 s: a killed worker's claim is taken over only once it runs out.)
import json
import os
import subprocess
import sys
import tempfile

import pytest

REAL = os.path.join(os.path.dirname(__file__), "..")
REFERENCE = os.path.join(REAL, "..", "..", "src", "courier", "reference.py")
SMALL = ["--actions", "120", "--kills", "12", "--workers", "4", "--freezes", "0", "--seed", "11"]


def real(*args, timeout=400):
    before = set(os.listdir(tempfile.gettempdir()))
    r = subprocess.run([sys.executable, os.path.join(REAL, "run.py"), *args], capture_output=True, text=True,
                       timeout=timeout)
    left = [d for d in set(os.listdir(tempfile.gettempdir())) - before if d.startswith("delivery-lab-pg-")]
    assert not left, f"the run left {left}"
    procs = subprocess.run(["pgrep", "-f", f"{REAL}/(worker|receiver|provider)"], capture_output=True, text=True)
    assert not procs.stdout.strip(), f"the run left processes: {procs.stdout}"
    return r


def test_the_reference_passes_every_row_of_a_real_run():
    r = real(REFERENCE, *SMALL, "--format", "json")
    assert r.returncode == 0, r.stderr[-3000:]
    report = json.loads(r.stdout.strip().splitlines()[-1])
    assert report["lab"] == "courier" and report["mode"] == "real" and report["seed"] == 11
    assert report["passed"] is True
    rows = {row["name"]: row for row in report["chaos"]["rows"]}
    assert rows["actions with exactly one message sent"]["value"] == 120
    assert all(row["ok"] for row in rows.values())
    assert report["chaos"]["kills"] == 12 and report["chaos"]["db_restarts"] == 1
    assert report["replay"].startswith("./lab real --seed 11 ")


def _mutant(name):
    """A wrong solution from the lab's catalogue (src/courier/mutants.py)."""
    sys.path.insert(0, os.path.join(REAL, "..", "..", "src", "courier"))
    import mutants
    with open(REFERENCE) as f:
        ref = f.read()
    return mutants.apply(ref, next(m for m in mutants.MUTANTS if m["name"] == name))


# Each wrong solution fails the row that names its mistake, whatever the timing:
# a resend without a lookup is counted from the provider's log; a new key per
# attempt leaves the outbox's key unknown to the webhooks, so its statuses never
# reach the provider's final word.
@pytest.mark.parametrize("name, row", [
    ("resend-without-lookup", "FAIL sends with no lookup since the previous send:"),
    ("new-key-on-resend", "FAIL outbox statuses that differ from the provider's final one:"),
])
def test_a_wrong_solution_fails_its_named_row(tmp_path, name, row):
    wrong = tmp_path / f"{name}.py"
    wrong.write_text(_mutant(name))
    r = real(str(wrong), *SMALL)
    assert r.returncode == 1, r.stdout + r.stderr[-2000:]
    assert row in r.stdout, r.stdout


@pytest.mark.parametrize("args, says", [
    (["/nonexistent.py"], "no file"),
    ([REFERENCE, "--actions", "0"], "--actions must be at least 1"),
    ([REFERENCE, "--format", "yaml"], "invalid choice"),
])
def test_usage_errors_exit_2(args, says):
    r = real(*args, timeout=60)
    assert r.returncode == 2 and says in r.stderr, r.stderr


def test_a_file_without_the_six_pieces_is_refused_with_what_is_missing(tmp_path):
    f = tmp_path / "half.py"
    f.write_text("def claim(db, worker, now_ms, cfg):\n    return None\n")
    r = real(str(f), timeout=60)
    assert r.returncode == 2
    assert "does not define write_intent, deliver_step, merge, on_webhook, heartbeat" in r.stderr, r.stderr
