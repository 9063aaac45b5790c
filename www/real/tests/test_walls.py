# Issue 38: the real run's walls for time, memory and disk, whatever the learner's
# code does. Attacks found against main, each with its exact outcome here:
# - a worker that took a table lock and slept stalled the run forever, past its own
#   deadline (the run's own query waited on the lock): now the run ends that
#   session and stops, naming it;
# - a learner role grew the run's database to 3.9 GB and the run still passed: now
#   the run stops at its disk budget, naming it;
# - one SELECT made a database backend hold 3.3 GB: each server process has
#   pg.SERVER_AS_BYTES of address space, whatever work_mem its session SETs;
# - a worker held 4 GB through a shared mapping under its 3 GB data limit: each
#   learner process has jail.LEARNER_AS_BYTES of address space, shared mappings in.
# Every attack is bounded by itself too (at most 100 MB written, 2 GB asked of
# the kernel and refused), so a wall that fails cannot fill CI's disk or memory.
# About 60 s of CI in all, 35-50 s of it the two whole runs: the only check that the
# run's guard ends a run whatever its learner code holds, so worth the time.
import json
import re
import subprocess
import sys
import time

import psycopg
import pytest

import jail
import pg
import run
from lab_files import REFERENCE
from test_run import LEASE, real


def as_learner(cluster, role="w0"):
    return psycopg.connect(cluster.login(role), autocommit=True)


def test_each_learner_role_gets_the_runs_session_limits_and_the_run_its_own(audited):
    with as_learner(audited) as w0:
        assert {k: w0.execute(f"SHOW {k}").fetchone()[0] for k in pg.LEARNER_ROLE_SETTINGS} == pg.LEARNER_ROLE_SETTINGS
    with psycopg.connect(audited.dsn, autocommit=True) as su:
        assert {k: su.execute(f"SHOW {k}").fetchone()[0] for k in pg.RUN_SESSION_SETTINGS} == {
            "lock_timeout": "2s", "statement_timeout": "1min"}


def test_a_learner_cannot_lift_its_temp_file_limit_and_a_sort_past_it_fails_by_name(audited):
    with as_learner(audited) as w0:
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match='permission denied to set parameter "temp_file_limit"'):
            w0.execute("SET temp_file_limit = -1")
        w0.execute("SET statement_timeout = 0")  # its own to lift: the sort must end at the file limit
        with pytest.raises(psycopg.errors.ConfigurationLimitExceeded,
                           match=re.escape("temporary file size exceeds temp_file_limit (65536kB)")):
            w0.execute("SELECT count(*) FROM (SELECT g, md5(g::text) FROM generate_series(1, 3000000) g ORDER BY 2) x")


def test_a_statement_and_a_wait_for_a_lock_end_on_the_roles_own_timeouts(audited):
    with as_learner(audited, "w0") as w0, as_learner(audited, "w1") as w1:
        t = time.monotonic()
        with pytest.raises(psycopg.errors.QueryCanceled, match="canceling statement due to statement timeout"):
            w0.execute("SELECT pg_sleep(60)")
        assert time.monotonic() - t < 30
        with w0.transaction():
            w0.execute("LOCK TABLE outbox IN ACCESS EXCLUSIVE MODE")
            with pytest.raises(psycopg.errors.LockNotAvailable, match="canceling statement due to lock timeout"):
                w1.execute("SELECT count(*) FROM outbox")


def test_a_backend_gets_no_more_memory_than_its_address_space_whatever_work_mem_says(audited):
    with as_learner(audited) as w0:
        w0.execute("SET statement_timeout = 0")
        w0.execute("SET work_mem = '4GB'")
        t = time.monotonic()
        # about 3 GB of array in one backend (measured: 3.3 GB held before the cap)
        with pytest.raises(psycopg.errors.OutOfMemory, match="^out of memory"):
            w0.execute("SELECT count(*) FROM (SELECT array_agg(g) FROM generate_series(1, 400000000) g) x")
        assert time.monotonic() - t < 120
        # The server goes on: the next statement runs.
        assert w0.execute("SELECT 1").fetchone() == (1,)


def test_a_learner_process_cannot_map_more_than_its_address_space():
    box = jail.Jail([])
    assert box.on, box.problem
    code = ("import mmap, resource, psycopg\n"
            "print(resource.getrlimit(resource.RLIMIT_AS)[0])\n"
            "try:\n    mmap.mmap(-1, 2 << 30, flags=mmap.MAP_SHARED)\n    print('mapped')\n"
            "except OSError as e:\n    print(type(e).__name__, e.errno)\n")
    try:
        r = subprocess.run(box.argv([sys.executable, "-c", code]), capture_output=True, text=True, timeout=60)
    finally:
        jail.kill_uid(box.uid)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split("\n")[:2] == [str(jail.LEARNER_AS_BYTES), "OSError 12"], r.stdout


def _with_claim(body):
    """The reference with a claim of the test's in front of its own."""
    with open(REFERENCE) as f:
        ref = f.read()
    return ref + "\n\n_claim = claim\n\n\ndef claim(db, worker, now_ms, cfg):\n" + body + "\n"


# The nasty form: its own timeouts lifted first (the role's are only defaults), then
# a lock every other session must wait for, then a sleep. Every worker runs it: the
# first takes the lock, the others wait on it, and so did the run's own query.
LOCK_AND_SLEEP = """    import time
    for name in ("lock_timeout", "statement_timeout", "idle_in_transaction_session_timeout"):
        db.execute(f"SET {name} = 0")
    db.execute("BEGIN")
    db.execute("LOCK TABLE actions IN ACCESS EXCLUSIVE MODE")
    time.sleep(3600)"""


def _stopped_run(path, claim, actions, *args):
    """A small real run of the reference with `claim` in front of its claim, which
    must fail: its JSON report and its `stopped`, and how long it took."""
    path.write_text(_with_claim(claim))
    t = time.monotonic()
    r = real(str(path), "--actions", str(actions), "--kills", "0", "--freezes", "0", "--workers", "2", "--seed", "9",
             *args, *LEASE, "--format", "json", timeout=300)
    assert r.returncode == 1, r.stdout + r.stderr[-2000:]
    report = json.loads(r.stdout.strip().splitlines()[-1])
    assert report["passed"] is False and report["verdict"] == "fail"
    assert f"stopped early: {report['chaos']['stopped']}" in r.stderr
    return report, report["chaos"]["stopped"], time.monotonic() - t


def test_a_worker_that_holds_a_lock_and_sleeps_ends_the_run_naming_it(tmp_path):
    report, stopped, took = _stopped_run(tmp_path / "locks.py", LOCK_AND_SLEEP, 40)
    assert re.fullmatch(rf"w[01] held a lock for more than {run.LOCK_HOLD_S} s \(its open transaction kept others "
                        r"waiting\); the run ended its session", stopped), stopped
    rows = {row["name"]: row for row in report["chaos"]["rows"]}
    assert rows[f"sessions that held a lock others waited for longer than {run.LOCK_HOLD_S} s"] == {
        "name": f"sessions that held a lock others waited for longer than {run.LOCK_HOLD_S} s",
        "value": 1, "must": 0, "ok": False}
    # The lock's own 10 s, the setup and the stop: nowhere near the drain's 600 s.
    assert took < 200, took


# Rows of about 1 MB that do not compress (os.urandom's hex, in a column with no
# index), one per claim, at most 100 per worker process: bounded even if the wall
# failed. Outbox rows of no action: nothing the run counts looks at them.
GROW = """    import os
    global _grown
    _grown = globals().get("_grown", 0) + 1
    if _grown <= 100:
        pad = -1 - int.from_bytes(os.urandom(4), "big") % 2 ** 31   # pids repeat in each sandbox
        db.execute("INSERT INTO outbox (action_id, idem_key, message_id) VALUES (?, ?, ?)",
                   (pad, f"pad{pad}", os.urandom(512 * 1024).hex()))
        db.commit()
    return _claim(db, worker, now_ms, cfg)"""


def test_a_database_grown_past_its_budget_ends_the_run_naming_it(tmp_path):
    report, stopped, _ = _stopped_run(tmp_path / "grows.py", GROW, 400, "--db-budget-mb", "32")
    assert re.fullmatch(r"your code grew the run's database past its budget of 32 MB \((\d+\.\d) MB\); the run ended "
                        r"its sessions", stopped), stopped
    rows = {row["name"]: row for row in report["chaos"]["rows"]}
    assert rows["times the database grew past its budget of 32 MB"]["value"] == 1
    # The guard looks every run.GUARD_EVERY_S: the database stops a few MB past it.
    assert 32 < report["chaos"]["database_peak_mb"] < 32 + 100, report["chaos"]["database_peak_mb"]
    assert "--db-budget-mb 32" in report["replay"]
