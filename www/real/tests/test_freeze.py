# A freeze (run.py): when does a frozen worker stop waiting for a taker? Only when
# its action was the only one left to take, its lease over, for FREEZE_GIVE_UP_S.
# A fixed wait after the lease (the lease and 20 s, before) gave up on the
# reference in 2 of 4 full runs: a fair claim takes a freed action at its store's
# next turn, after every store served less recently, and a round of the 100 stores
# took longer than 20 s once the run was slow (run.go armed holds without end).
import psycopg
import pytest

import run

T0 = 1000.0  # the run's clock starts here (time.monotonic() values are made up)


@pytest.fixture()
def frozen_run(cluster):
    with psycopg.connect(cluster.dsn, autocommit=True) as admin:
        admin.execute("TRUNCATE actions, stores, outbox, webhook_events")
        admin.execute("INSERT INTO actions (id, store, phone, body, created_ms, state, owner, epoch, lease_until_ms) "
                      "VALUES (1, 'store-001', 'p', 'b', 0, 'claimed', 'w0', 1, 5000)")
        admin.execute("INSERT INTO actions (id, store, phone, body, created_ms) VALUES (2, 'store-002', 'p', 'b', 0)")
    r = run.Run.__new__(run.Run)
    r.cluster, r.t0, r._admin = cluster, T0, None
    yield r
    if r._admin is not None:
        r._admin.close()


def at(s):
    """The run's monotonic clock, `s` seconds into the run."""
    return T0 + s


def test_a_freeze_waits_while_its_action_is_still_leased(frozen_run):
    frozen = {"action": 1, "epoch": 1}
    assert not frozen_run.give_up(frozen, at(1))
    assert not frozen_run.give_up(frozen, at(4.9))


def test_a_freeze_does_not_give_up_while_other_actions_wait_to_be_taken_too(frozen_run):
    # The lease ran out at 5 s; action 2 is still pending: a fair claim may serve
    # its store first. The old rule gave up at 5 + 20 s.
    frozen = {"action": 1, "epoch": 1}
    for s in (5, 25, 26, 60, 300):
        assert not frozen_run.give_up(frozen, at(s)), s


def test_a_freeze_gives_up_once_its_action_was_the_only_one_to_take_for_long_enough(frozen_run, cluster):
    frozen = {"action": 1, "epoch": 1}
    assert not frozen_run.give_up(frozen, at(30))
    with psycopg.connect(cluster.dsn, autocommit=True) as admin:
        admin.execute("UPDATE actions SET state = 'dispatched' WHERE id = 2")
    assert not frozen_run.give_up(frozen, at(31))    # the only one from here
    assert not frozen_run.give_up(frozen, at(31 + run.FREEZE_GIVE_UP_S - 1))
    assert frozen_run.give_up(frozen, at(31 + run.FREEZE_GIVE_UP_S))


def test_the_wait_starts_again_when_another_action_becomes_free(frozen_run, cluster):
    frozen = {"action": 1, "epoch": 1}
    with psycopg.connect(cluster.dsn, autocommit=True) as admin:
        admin.execute("UPDATE actions SET state = 'dispatched' WHERE id = 2")
        assert not frozen_run.give_up(frozen, at(10))
        # Another worker's lease runs out (a kill): its action is free to take too.
        admin.execute("INSERT INTO actions (id, store, phone, body, created_ms, state, owner, epoch, lease_until_ms) "
                      "VALUES (3, 'store-003', 'p', 'b', 0, 'claimed', 'w2', 1, 12000)")
        assert not frozen_run.give_up(frozen, at(11))   # 3 still leased: 1 is the only one
        assert not frozen_run.give_up(frozen, at(13))   # 3 free too: the wait starts again
        assert not frozen_run.give_up(frozen, at(10 + run.FREEZE_GIVE_UP_S))
        admin.execute("UPDATE actions SET state = 'dispatched' WHERE id = 3")
    assert not frozen_run.give_up(frozen, at(40))
    assert frozen_run.give_up(frozen, at(40 + run.FREEZE_GIVE_UP_S))


def test_the_database_down_is_no_reason_to_give_up(frozen_run, cluster):
    frozen = {"action": 1, "epoch": 1, "free_since": at(0)}
    frozen_run.admin(None, lambda c: c.execute("SELECT 1"))
    cluster.crash()
    try:
        assert not frozen_run.give_up(frozen, at(100))
        assert "free_since" not in frozen
    finally:
        cluster.start()


def test_another_frozen_workers_action_is_not_one_to_wait_for(frozen_run, cluster):
    # Two freezes a claim passes over (its lease over too): each gives up in time,
    # not waiting on the other's action as if a claim might take that first.
    with psycopg.connect(cluster.dsn, autocommit=True) as admin:
        admin.execute("UPDATE actions SET state = 'claimed', owner = 'w1', epoch = 1, lease_until_ms = 6000 "
                      "WHERE id = 2")
    a, b = {"action": 1, "epoch": 1}, {"action": 2, "epoch": 1}
    assert not frozen_run.give_up(a, at(10), [1, 2])
    assert not frozen_run.give_up(b, at(10), [1, 2])
    assert frozen_run.give_up(a, at(10 + run.FREEZE_GIVE_UP_S), [1, 2])
    assert frozen_run.give_up(b, at(10 + run.FREEZE_GIVE_UP_S), [1, 2])
