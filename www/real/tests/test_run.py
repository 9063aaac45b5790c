# ./lab real end to end (www/real/run.py), small: its own cluster, the provider, the
# receiver and four workers, with SIGKILLs and a database crash. The reference
# passes every row, in five more runs too; a resend without a lookup, a new key per
# attempt, an attempt counted after the send, a missing epoch fence and a claim that
# takes live leases each fail the row that names it.
# Each run
# leaves no process and no folder behind. (A run with kills takes at least one lease:
# a killed worker's claim is taken over only once it runs out.)
import json
import os
import re
import subprocess
import sys
import tempfile

import pytest

import procfs
from lab_files import REFERENCE

REAL = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))  # as run.py names its children
# A lease of 5 s, not lab.md's 30 (--lease-s): a killed worker's action waits that
# long for a taker, which is most of a small run's time.
LEASE = ["--lease-s", "5"]
SMALL = ["--actions", "120", "--kills", "12", "--workers", "4", "--freezes", "0", "--seed", "11", *LEASE]


def real(*args, timeout=400):
    before = set(os.listdir(tempfile.gettempdir()))
    r = subprocess.run([sys.executable, os.path.join(REAL, "run.py"), *args], capture_output=True, text=True,
                       timeout=timeout)
    left = [d for d in set(os.listdir(tempfile.gettempdir())) - before if d.startswith("delivery-lab-pg-")]
    assert not left, f"the run left {left}"
    procs = subprocess.run(["pgrep", "-f", f"{REAL}/(fair_worker|worker|receiver|provider)"], capture_output=True, text=True)
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
    for name in ("jobs claimed from a healthy worker", "writes to an action by a worker that no longer held it"):
        assert rows[name]["value"] == 0 and rows[name]["must"] == 0, name
    assert report["chaos"]["kills"] == 12 and report["chaos"]["db_restarts"] == 1
    assert report["replay"].startswith("./lab real --seed 11 ")
    # where the time went: the chaos run's phases add up to it, the run's parts to the whole
    phases, t = report["chaos"]["phases"], report["seconds"]
    assert list(phases) == ["before_crash_s", "database_down_s", "to_95_percent_s", "last_5_percent_s", "webhooks_s"]
    assert abs(sum(phases.values()) - report["chaos"]["seconds"]) < 2.0, (phases, report["chaos"]["seconds"])
    assert set(t) == {"setup", "chaos", "stop", "total"} and max(t["setup"], t["chaos"], t["stop"]) <= t["total"] <= t["setup"] + t["chaos"] + t["stop"] + 2
    assert "time: " in r.stderr and "database down" in r.stderr


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
# reach the provider's final word; an attempt counted after the send is lost when
# a kill lands between the send and that commit, and the next owner sends again
# without a lookup. That takes a kill in a window of a few milliseconds, so its
# run has more kills than the small one (measured with these arguments: 4, 5 and
# 5 such sends in three runs, about 39 s each).
MORE_KILLS = ["--actions", "200", "--kills", "40", "--workers", "4", "--freezes", "0", "--seed", "3", *LEASE]
# A missing epoch fence shows when a zombie writes after another worker took its
# action over. The run makes that moment certain: after the database's crash, it has
# the provider hold back the answer to the first request for a few pending actions,
# freezes the worker that waits for one (outside a transaction, nothing of its own
# on the wire), and wakes it once another worker has claimed that action (run.py's
# start_freeze, step_freeze, taken_over).
FREEZE = ["--actions", "120", "--kills", "12", "--workers", "4", "--freezes", "1", "--seed", "13", *LEASE]


@pytest.mark.parametrize("name, row, args", [
    ("resend-without-lookup", "FAIL sends with no lookup since the previous send:", SMALL),
    ("new-key-on-resend", "FAIL outbox statuses that differ from the provider's final one:", SMALL),
    ("attempt-after-send", "FAIL sends with no lookup since the previous send:", MORE_KILLS),
])
def test_a_wrong_solution_fails_its_named_row(tmp_path, name, row, args):
    wrong = tmp_path / f"{name}.py"
    wrong.write_text(_mutant(name))
    r = real(str(wrong), *args)
    assert r.returncode == 1, r.stdout + r.stderr[-2000:]
    assert row in r.stdout, r.stdout


# Measured with FREEZE and seeds 13 to 16: one zombie and 1 such write in each run;
# the reference's zombies write nothing (test_the_reference_passes_five_runs_in_a_row).
def test_a_missing_epoch_fence_fails_the_row_of_writes_by_a_worker_that_no_longer_held_it(tmp_path):
    wrong = tmp_path / "no-epoch-fence.py"
    wrong.write_text(_mutant("no-epoch-fence"))
    r = real(str(wrong), *FREEZE, "--format", "json")
    assert r.returncode == 1, r.stdout + r.stderr[-2000:]
    report = json.loads(r.stdout.strip().splitlines()[-1])
    assert report["chaos"]["freezes"] == 1 and report["chaos"]["zombies"] == 1, report["chaos"]
    rows = {row["name"]: row for row in report["chaos"]["rows"]}
    zombie = rows["writes to an action by a worker that no longer held it"]
    assert zombie["value"] >= 1 and not zombie["ok"], zombie
    # The provider replays the same key for the zombie: its own rows cannot tell.
    assert rows["actions with exactly one message sent"]["ok"], rows


# A claim that also takes an action still under its first owner's lease takes a job
# from a worker that is alive and working: the database's record of the claims says
# so. (Each action is taken so at most once, from its first owner: a claim that took
# every live lease could take jobs from each other forever and never drain.)
# Measured: 8, 8 and 11 such claims in runs of seeds 5 to 7, about 19 s each.
def test_a_claim_that_takes_live_leases_fails_the_healthy_worker_row(tmp_path):
    with open(REFERENCE) as f:
        ref = f.read()
    live = "a.lease_until_ms <= ?)", "lease_until_ms <= ?)"
    taken = [f"OR (a.state = 'claimed' AND {live[0]}", f"OR (state = 'claimed' AND {live[1]}"]
    assert all(ref.count(x) == 1 for x in taken), "the reference's claim changed: update this test"
    for x, lease in zip(taken, ("a.lease_until_ms", "lease_until_ms")):
        epoch = "a.epoch" if lease.startswith("a.") else "epoch"
        ref = ref.replace(x, x.replace(f"{lease} <= ?)", f"({epoch} = 1 OR {lease} <= ?))"))
    wrong = tmp_path / "steals.py"
    wrong.write_text(ref)
    r = real(str(wrong), "--actions", "200", "--kills", "0", "--workers", "4", "--freezes", "0", "--seed", "5", *LEASE)
    assert r.returncode == 1, r.stdout + r.stderr[-2000:]
    assert "FAIL jobs claimed from a healthy worker:" in r.stdout, r.stdout
    assert "ok   actions with exactly one message sent: 200" in r.stdout, r.stdout


# A verdict that does not flip: five more runs of the reference, each with a seed
# of its own (other kill moments, other stores), two at a time, all pass. Tiny runs:
# the leases of killed workers (30 s) are most of a run's time.
def test_the_reference_passes_five_runs_in_a_row():
    tiny = ["--actions", "100", "--kills", "8", "--workers", "3", "--freezes", "1", "--format", "json", *LEASE]
    seeds = [101, 102, 103, 104, 105]
    reports = []
    for pair in (seeds[0:2], seeds[2:4], seeds[4:]):
        procs = [subprocess.Popen([sys.executable, os.path.join(REAL, "run.py"), REFERENCE, *tiny, "--seed", str(s)],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for s in pair]
        for seed, p in zip(pair, procs):
            out, err = p.communicate(timeout=400)
            assert p.returncode == 0, f"seed {seed}: {err[-3000:]}"
            reports.append(json.loads(out.strip().splitlines()[-1]))
    assert [r["seed"] for r in reports] == seeds
    assert all(r["passed"] and r["chaos"]["db_restarts"] == 1 for r in reports)
    # Each run's freeze made a zombie (woken after a takeover), and it wrote nothing.
    assert [r["chaos"]["zombies"] for r in reports] == [1] * 5, \
        [(r["seed"], {k: v for k, v in r["chaos"].items() if k != "rows"}) for r in reports]
    procs = subprocess.run(["pgrep", "-f", f"{REAL}/(fair_worker|worker|receiver|provider)"], capture_output=True, text=True)
    assert not procs.stdout.strip(), f"the runs left processes: {procs.stdout}"


# --freezes 2, the default, which no test here ran before: the run armed a new set
# of holds on every pass of its loop while one was armed, and never let the old ones
# go, so after the crash nearly every action's first answer was held past the
# client's 1 s timeout (the full run's last two thirds went five times slower), and
# a freeze then waited longer than it would for a taker (chaos.gave_up). The
# provider counts the holds that waited for their request at once.
TWO_FREEZES = ["--actions", "300", "--kills", "12", "--workers", "4", "--freezes", "2", "--seed", "21", *LEASE]


def test_two_freezes_arm_one_set_of_holds_at_a_time_and_each_makes_a_zombie():
    r = real(REFERENCE, *TWO_FREEZES, "--format", "json")
    assert r.returncode == 0, r.stderr[-3000:]
    chaos = json.loads(r.stdout.strip().splitlines()[-1])["chaos"]
    assert chaos["holds"]["most_armed"] <= 4, chaos["holds"]   # run.py HOLDS_ARMED
    # A held answer is a freeze tried: a few, not one per action.
    assert chaos["holds"]["answers_held"] <= 12, chaos["holds"]
    assert chaos["zombies"] == 2 and "gave_up" not in chaos, {k: v for k, v in chaos.items() if k != "rows"}


@pytest.mark.parametrize("args, says", [
    (["/nonexistent.py"], "no file"),
    ([REFERENCE, "--actions", "0"], "--actions must be at least 1"),
    ([REFERENCE, "--format", "yaml"], "invalid choice"),
    ([REFERENCE, "--lease-s", "1"], "--lease-s must be between 2 and 600"),
])
def test_usage_errors_exit_2(args, says):
    r = real(*args, timeout=60)
    assert r.returncode == 2 and says in r.stderr, r.stderr
    # with --format json too, stdout's last line says so
    j = real(*args, "--format", "json", timeout=60) if "yaml" not in args else r
    if j is not r:
        line = json.loads(j.stdout.strip().splitlines()[-1])
        assert j.returncode == 2 and line["verdict"] == "error" and says in line["error"] and line["passed"] is False


def test_a_file_without_the_six_pieces_is_refused_with_what_is_missing(tmp_path):
    f = tmp_path / "half.py"
    f.write_text("def claim(db, worker, now_ms, cfg):\n    return None\n")
    r = real(str(f), timeout=60)
    assert r.returncode == 2
    assert "does not define write_intent, deliver_step, merge, on_webhook, heartbeat" in r.stderr, r.stderr


# The learner's code runs in ./lab grade's sandbox: every process of it (the check,
# the workers, the receiver) tries, at import, to write a file where the test can
# see it, to reach a TCP server the test runs on this machine's loopback, and to
# read the provider's log and hold an answer through the provider's socket (the
# run's own calls, on loopback only), to log in to PostgreSQL as the superuser or
# as another worker, and leaves a process of its own in a session of its own, to
# outlive the run. None gets through, nothing is left, and the run goes on: the
# pieces are the reference's.
HOSTILE = '''
import os, socket, sys, json, http.client, subprocess
_escaped = []
subprocess.Popen(["sleep", "600"], start_new_session=True, stdin=subprocess.DEVNULL,
                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
_dsn = next((sys.argv[i + 1] for i, a in enumerate(sys.argv[:-1]) if a == "--dsn"), None)
if _dsn:
    import psycopg
    for _who in ("lab", "w0", "w1", "receiver", "f0"):
        if "user=" + _who + " " in _dsn + " ":
            continue
        _other = " ".join(p for p in _dsn.split() if not p.startswith("user=")) + " user=" + _who
        for _pw in ("", " password=x"):
            try:
                psycopg.connect(_other + _pw, connect_timeout=3).close()
                _escaped.append("logged in as " + _who)
            except psycopg.OperationalError:
                pass
try:
    with open(MARKER, "w") as f:
        f.write("out")
    _escaped.append("wrote " + MARKER)
except OSError:
    pass
try:
    socket.create_connection(("127.0.0.1", PORT), timeout=1).close()
    _escaped.append("reached loopback")
except OSError:
    pass
_sock = next((a[len("unix:"):] for a in sys.argv if a.startswith("unix:")), None)
if _sock:
    for _method, _path, _body in (("GET", "/log", None), ("POST", "/hold", '{"action": 1}')):
        _c = http.client.HTTPConnection("provider")
        _c.sock = socket.socket(socket.AF_UNIX)
        _c.sock.connect(_sock)
        _c.request(_method, _path, body=_body)
        if _c.getresponse().status != 404:
            _escaped.append(_method + " " + _path)
if _escaped:
    raise RuntimeError("escaped the sandbox: " + ", ".join(_escaped))
'''


def test_the_learners_code_runs_in_the_sandbox_and_reaches_nothing_of_the_run(tmp_path):
    import socket
    import threading
    marker = os.path.join(tempfile.gettempdir(), f"delivery-lab-escape-{os.getpid()}")
    reached = []
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        server.settimeout(0.2)

        def serve():
            while server.fileno() != -1:
                try:
                    reached.append(server.accept()[0])
                except OSError:
                    if server.fileno() == -1:
                        return
        threading.Thread(target=serve, daemon=True).start()
        with open(REFERENCE) as f:
            hostile = HOSTILE.replace("MARKER", repr(marker)).replace("PORT", str(server.getsockname()[1])) + f.read()
        wrong = tmp_path / "hostile.py"
        wrong.write_text(hostile)
        r = real(str(wrong), "--actions", "40", "--kills", "0", "--freezes", "0", "--workers", "2", "--seed", "9",
                 "--format", "json")
    assert not os.path.exists(marker), "the learner's code wrote a file outside the sandbox"
    assert not reached, "the learner's code reached a server on this machine's loopback"
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    report = json.loads(r.stdout.strip().splitlines()[-1])
    assert report["sandbox"]["on"] is True and report["passed"] is True
    assert "Your code ran in ./lab grade's sandbox" in r.stderr
    if os.geteuid() == 0:
        # its own uid, and no process of it left: not the orphans its code started
        uid = report["sandbox"]["uid"]
        assert uid >= 2 ** 30 and report["sandbox"] == {"on": True, "uid": uid}
        # (a zombie runs nothing: a killed sandbox's inner bubblewrap, reparented,
        # may wait there to be reaped)
        assert not [p for p, u in procfs.processes() if u == uid and not procfs.is_zombie(p)]


def test_with_no_sandbox_the_report_says_so(tmp_path):
    r = real(REFERENCE, "--actions", "20", "--kills", "0", "--freezes", "0", "--workers", "2", "--seed", "9",
             "--no-sandbox", "--format", "json")
    assert r.returncode == 0, r.stderr[-3000:]
    report = json.loads(r.stdout.strip().splitlines()[-1])
    assert report["sandbox"] == {"on": False, "why_not": "--no-sandbox"} and report["passed"] is True
    assert "NOT sandboxed: --no-sandbox" in r.stderr and report["replay"].endswith("--no-sandbox " + REFERENCE)


def _with_piece(body_of_deliver_step):
    """The reference with deliver_step's body replaced."""
    with open(REFERENCE) as f:
        ref = f.read()
    head = "def deliver_step(db, provider, action_id, worker, epoch, now_ms, cfg):\n"
    assert ref.count(head) == 1, "the reference's deliver_step changed: update this test"
    return ref.replace(head, head + body_of_deliver_step + "\n\n\ndef _old_deliver_step(db, provider, action_id, worker, epoch, now_ms, cfg):\n")


# A piece that raises with the database up: the row says how often, the report shows
# the traceback, and the run stops once the crashes reach run.CRASH_LIMIT rather
# than wait for a drain that cannot come.
def test_a_piece_that_raises_is_reported_with_its_traceback_and_the_run_stops(tmp_path):
    wrong = tmp_path / "raises.py"
    wrong.write_text(_with_piece('    raise ValueError("boom in deliver_step")'))
    r = real(str(wrong), "--actions", "40", "--kills", "0", "--freezes", "0", "--workers", "2", "--seed", "9",
             *LEASE, timeout=200)
    assert r.returncode == 1, r.stdout + r.stderr[-2000:]
    crashes = re.search(r"FAIL workers that crashed while the database was up: (\d+)", r.stdout)
    assert crashes and int(crashes.group(1)) >= 20, r.stdout  # run.CRASH_LIMIT
    assert f"stopped early: your code crashed {crashes.group(1)} times while the database was up" in r.stdout
    assert "A worker failed while the database was up:" in r.stdout
    assert 'ValueError: boom in deliver_step' in r.stdout and "solution.py" in r.stdout


# A piece that never returns: its worker stops using the database, so after a lease
# the run counts it stuck and restarts it; when every call hangs, nothing is ever
# dispatched and the run stops after two leases and 20 s.
def test_a_piece_that_hangs_is_reported_and_the_run_stops(tmp_path):
    wrong = tmp_path / "hangs.py"
    wrong.write_text(_with_piece("    import time\n    time.sleep(3600)"))
    r = real(str(wrong), "--actions", "40", "--kills", "0", "--freezes", "0", "--workers", "2", "--seed", "9",
             *LEASE, "--format", "json", timeout=200)
    assert r.returncode == 1, r.stdout + r.stderr[-2000:]
    report = json.loads(r.stdout.strip().splitlines()[-1])
    rows = {row["name"]: row for row in report["chaos"]["rows"]}
    assert rows["workers stuck in your code for longer than a lease"]["value"] >= 2, rows
    assert report["chaos"]["stopped"] == "no action was dispatched for 30 s" and report["passed"] is False
    assert "stopped early: no action was dispatched for 30 s" in r.stderr


# Code at import that never ends: the check that the file has its six pieces gives
# up after run.CHECK_TIMEOUT_S, says so, and leaves no process.
def test_code_that_does_not_end_at_import_is_refused(tmp_path, monkeypatch, capsys):
    sys.path.insert(0, REAL)
    import run
    monkeypatch.setattr(run, "CHECK_TIMEOUT_S", 3)
    f = tmp_path / "forever.py"
    f.write_text("import time\ntime.sleep(3600)\n")
    assert run.main([str(f)]) == 2
    assert "took longer than 3 s (code that runs at import and does not end?)" in capsys.readouterr().err
    procs = subprocess.run(["pgrep", "-f", "delivery-lab-check-"], capture_output=True, text=True)
    assert not procs.stdout.strip(), f"the check left processes: {procs.stdout}"


# ./lab works in its checkout and names the folder it was run in (issue 39): FILE is
# taken from there, a name it lacks is not looked for in the current folder, and the
# variable is gone from the environment of everything the run starts.
def test_file_is_taken_from_the_callers_folder(tmp_path, monkeypatch, capsys):
    sys.path.insert(0, REAL)
    import run
    caller, cwd = tmp_path / "caller", tmp_path / "cwd"
    caller.mkdir()
    cwd.mkdir()
    (caller / "broken.py").write_text("def claim(:\n")
    (cwd / "only_here.py").write_text("x = 1\n")
    monkeypatch.chdir(cwd)
    monkeypatch.setenv(run.CALLER_DIR_ENV, str(caller))
    assert run.main(["broken.py"]) == 2
    assert f"./lab real: {caller / 'broken.py'} cannot run:" in capsys.readouterr().err
    assert run.CALLER_DIR_ENV not in os.environ
    monkeypatch.setenv(run.CALLER_DIR_ENV, str(caller))
    assert run.main(["only_here.py"]) == 2
    assert "./lab real: no file only_here.py" in capsys.readouterr().err
