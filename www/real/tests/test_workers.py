# Real processes: the provider server (www/real/provider.mjs), the webhook receiver
# and worker processes running the lab's reference.py, unchanged, in real time on
# the session's PostgreSQL. Every action must be delivered exactly once, counted
# from the provider's own log, and every outbox row must end at the provider's
# final status. No process of the run may be left behind.
import json
import os
import subprocess
import sys
import time

import psycopg
import pytest

from lab_files import REFERENCE
from procs import first_line, http_json, stop_all

REAL = os.path.join(os.path.dirname(__file__), "..")
ACTIONS = 40
STORES = 8


@pytest.fixture()
def run(cluster, tmp_path):
    with psycopg.connect(cluster.dsn, autocommit=True) as admin:
        admin.execute("TRUNCATE actions, stores, outbox, webhook_events")
    procs = []
    env = {**os.environ, "PYTHONPATH": REAL}
    try:
        receiver = subprocess.Popen(
            [sys.executable, os.path.join(REAL, "receiver.py"), "--solution", REFERENCE, "--dsn", cluster.dsn],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        procs.append(receiver)
        hook_url = first_line(receiver, "the receiver")
        provider = subprocess.Popen(
            ["node", os.path.join(REAL, "provider.mjs"), "--seed", "7", "--webhook", hook_url,
             "--log", str(tmp_path / "provider.log")],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        procs.append(provider)
        provider_url = first_line(provider, "the provider")
        t0 = time.monotonic()

        def worker(name):
            p = subprocess.Popen(
                [sys.executable, os.path.join(REAL, "worker.py"), "--solution", REFERENCE, "--dsn", cluster.dsn,
                 "--provider", provider_url, "--name", name, "--t0", repr(t0)],
                stderr=subprocess.PIPE, text=True, env=env)
            procs.append(p)
            return p

        yield {"provider": provider_url, "worker": worker, "log": tmp_path / "provider.log", "t0": t0}
    finally:
        stop_all(procs)
        left = [p.pid for p in procs if p.poll() is None]
        assert not left, f"processes left running: {left}"


def test_workers_deliver_each_action_exactly_once_through_the_real_provider(cluster, run):
    with psycopg.connect(cluster.dsn, autocommit=True) as admin:
        admin.cursor().executemany("INSERT INTO stores (store, last_served_ms) VALUES (%s, 0)",
                          [(f"store-{s:02}",) for s in range(STORES)])
        admin.cursor().executemany(
            "INSERT INTO actions (id, store, phone, body, created_ms) VALUES (%s, %s, %s, %s, 0)",
            [(a, f"store-{a % STORES:02}", f"+1555{a:07}", f"order {a} shipped") for a in range(1, ACTIONS + 1)])
    workers = [run["worker"](f"w{i}") for i in range(3)]

    def dispatched():
        with psycopg.connect(cluster.dsn, autocommit=True) as c:
            return c.execute("SELECT count(*) FROM actions WHERE state = 'dispatched'").fetchone()[0]

    deadline = time.monotonic() + 120
    while dispatched() < ACTIONS:
        crashed = [w for w in workers if w.poll() is not None]
        assert not crashed, f"a worker crashed: {crashed[0].stderr.read()[-3000:]}"
        assert time.monotonic() < deadline, f"{dispatched()} of {ACTIONS} dispatched after 120 s"
        time.sleep(0.2)

    # The chaos table's first rows, counted from the provider's own log.
    tally = http_json(f"{run['provider']}/tally", {"actions": list(range(1, ACTIONS + 1))})
    assert tally == {"actions": ACTIONS, "exactly_one_effect": ACTIONS, "more_than_one_effect": 0,
                     "no_effect": 0, "resends_without_lookup": 0}
    # The webhooks, merged by the receiver, bring each row to the provider's final word.
    final = http_json(f"{run['provider']}/final")
    assert sorted(int(a) for a in final) == list(range(1, ACTIONS + 1))
    deadline = time.monotonic() + 60
    while True:
        with psycopg.connect(cluster.dsn, autocommit=True) as c:
            rows = dict(c.execute("SELECT action_id, status FROM outbox").fetchall())
        if {str(a): s for a, s in rows.items()} == final:
            break
        assert time.monotonic() < deadline, f"outbox {rows} vs the provider's final statuses {final}"
        time.sleep(0.5)
    # The log on disk is the provider's log, line for line.
    on_disk = [json.loads(line) for line in run["log"].read_text().splitlines()]
    assert on_disk == http_json(f"{run['provider']}/log")[: len(on_disk)]
    assert sum(1 for e in on_disk if e["what"] == "effect") == ACTIONS
