# What ./lab real's report copies from the database that learner code may write
# (the `learner` role can UPDATE `actions`): a freeze that found no taker shows its
# action's state and owner (Run.action_now), cut at REPORT_TEXT_CAP characters, so a
# submission cannot make the report as large as a PostgreSQL text (1 GB; `owner` is
# in no index, which would have bounded it).
import time
import types

import psycopg

import run


def test_a_cut_text_says_so_and_short_ones_and_none_are_kept():
    cap = run.REPORT_TEXT_CAP
    assert run.capped(None) is None
    assert run.capped("claimed") == "claimed"
    assert run.capped("x" * cap) == "x" * cap
    assert run.capped("x" * (cap + 1)) == "x" * cap + f"... [cut at {cap} characters]"


def test_a_learners_huge_state_and_owner_reach_the_report_cut(cluster):
    cap = run.REPORT_TEXT_CAP
    with psycopg.connect(cluster.dsn, autocommit=True) as c:
        c.execute("TRUNCATE actions, stores, outbox, webhook_events")
        c.execute("INSERT INTO actions (id, store, phone, body, created_ms, state, owner, epoch, lease_until_ms)"
                  " VALUES (7, 'shop-1', '+1', 'hi', 0, %s, %s, 3, 1234)", ("s" * (cap + 1), "o" * 1_000_000))
    the_run = types.SimpleNamespace(cluster=cluster, t0=time.monotonic(), _admin=None)  # Run.admin's connection
    the_run.admin = lambda default, work: run.Run.admin(the_run, default, work)
    try:
        seen = run.Run.action_now(the_run, {"action": 7, "epoch": 2})
    finally:
        if the_run._admin is not None:
            the_run._admin.close()
    cut = f"... [cut at {cap} characters]"
    assert seen["state"] == "s" * cap + cut
    assert seen["owner"] == "o" * cap + cut
    assert (seen["action"], seen["epoch_frozen"], seen["epoch"], seen["lease_until_ms"]) == (7, 2, 3, 1234)
