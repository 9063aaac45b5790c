# The database's record of the claims (pg.AUDIT_SQL), which ./lab real counts two
# rows from: it records who changed an action's row, and the learner's code,
# connected as a worker's role, can use the lab's tables but cannot touch the
# record, silence it, or pass as another worker.

import psycopg
import pytest

import pg


def as_worker(cluster, role):
    return psycopg.connect(cluster.login(role), autocommit=True)


def test_each_change_to_an_action_is_recorded_with_its_writer_and_the_run_clock(audited):
    with as_worker(audited, "w0") as w0:
        w0.execute("UPDATE actions SET state = 'claimed', owner = 'w0', epoch = epoch + 1, lease_until_ms = 5000 "
                   "WHERE id = 1")
    with as_worker(audited, "w1") as w1:
        w1.execute("UPDATE actions SET lease_until_ms = 9000 WHERE id = 1")  # a write to w0's claim
    with psycopg.connect(audited.dsn, autocommit=True) as admin:
        rows = admin.execute("SELECT who, old_owner, old_epoch, new_owner, new_epoch, at_ms FROM audit.writes "
                             "WHERE op = 'UPDATE' ORDER BY seq").fetchall()
        inserted = admin.execute("SELECT who, action_id, new_state FROM audit.writes WHERE op = 'INSERT'").fetchall()
    assert inserted == [("lab", 1, "pending")]
    assert [r[:5] for r in rows] == [("w0", None, 0, "w0", 1), ("w1", "w0", 1, "w0", 1)]
    assert all(0 <= r[5] < 60_000 for r in rows), rows


@pytest.mark.parametrize("sql", [
    "SELECT count(*) FROM audit.writes",
    "DELETE FROM audit.writes",
    "INSERT INTO audit.writes (at_ms, who, tbl) VALUES (0, 'w1', 'actions')",
    "UPDATE audit.run SET t0_epoch_s = 0",
    "ALTER TABLE actions DISABLE TRIGGER audit_actions",
    "DROP TRIGGER audit_actions ON actions",
    "SET ROLE w1",
    "SET SESSION AUTHORIZATION w1",
    "SET session_replication_role = replica",
])
def test_the_learners_role_cannot_read_change_or_silence_the_record_or_pass_as_another(audited, sql):
    with as_worker(audited, "w0") as w0:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            w0.execute(sql)
        # The lab's own tables stay open to it.
        assert w0.execute("SELECT count(*) FROM actions").fetchone()[0] == 1
