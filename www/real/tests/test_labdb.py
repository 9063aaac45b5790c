# labdb.Connection against a real PostgreSQL: each promise lab.md makes of `db`
# (sqlite3.Connection in its default mode), and each difference it hides.
import os
import sqlite3
import subprocess

import pytest

import labdb
import pg


def test_placeholders_become_psycopgs_outside_quotes_and_comments():
    assert labdb.translate("SELECT ? , '?', \"a?\" -- ?\n/* ? */ ?") == "SELECT %s , '?', \"a?\" -- ?\n/* ? */ %s"
    assert labdb.translate("SELECT '50%' || ? WHERE x LIKE 'a%'") == "SELECT '50%%' || %s WHERE x LIKE 'a%%'"
    assert labdb.translate("SELECT 'it''s ?', ?") == "SELECT 'it''s ?', %s"
    assert labdb.translate("SELECT 5 % 2") == "SELECT 5 %% 2"


def test_which_statements_open_a_transaction_is_sqlite3s_rule():
    for sql in ("INSERT INTO t VALUES (1)", "  update t set x = 1", "-- c\nDELETE FROM t", "/* c */ replace into t values (1)"):
        assert labdb.is_dml(sql), sql
    for sql in ("SELECT 1", "WITH x AS (SELECT 1) UPDATE t SET a = 1", "inserted", "BEGIN"):
        assert not labdb.is_dml(sql), sql


def test_a_write_opens_a_transaction_that_commit_ends(db, peek):
    assert not db.in_transaction
    cur = db.execute("INSERT INTO stores (store, last_served_ms) VALUES (?, ?)", ("store-001", 5))
    assert cur.rowcount == 1
    assert db.in_transaction
    assert peek("SELECT store FROM stores") == []
    assert db.execute("SELECT store, last_served_ms FROM stores").fetchall() == [("store-001", 5)]
    db.commit()
    assert not db.in_transaction
    assert peek("SELECT store FROM stores") == [("store-001",)]


def test_rollback_undoes_and_both_ends_are_harmless_without_a_transaction(db, peek):
    db.commit()
    db.rollback()
    db.execute("INSERT INTO stores (store) VALUES (?)", ("store-002",))
    db.rollback()
    assert peek("SELECT store FROM stores") == []
    assert db.execute("SELECT COUNT(*) FROM stores").fetchone() == (0,)


def test_a_select_outside_a_transaction_opens_none_and_its_rowcount_is_minus_one(db):
    cur = db.execute("SELECT 1, 'a'")
    assert cur.rowcount == -1
    assert not db.in_transaction
    assert cur.fetchone() == (1, "a")
    assert cur.fetchone() is None
    assert list(db.execute("SELECT ? UNION ALL SELECT ?", (1, 2))) == [(1,), (2,)]


def test_rowcount_counts_changed_rows_and_on_conflict_do_nothing_changes_none(db):
    db.executemany("INSERT INTO stores (store) VALUES (?)", [("a",), ("b",), ("c",)])
    db.commit()
    assert db.execute("UPDATE stores SET last_served_ms = ? WHERE store <> ?", (9, "a")).rowcount == 2
    assert db.execute("INSERT INTO stores (store) VALUES (?) ON CONFLICT DO NOTHING", ("a",)).rowcount == 0
    assert db.execute("INSERT INTO stores (store) VALUES (?) ON CONFLICT DO NOTHING", ("d",)).rowcount == 1
    db.commit()


def test_errors_are_sqlite3s_and_a_failed_statement_undoes_only_itself(db, peek):
    db.execute("INSERT INTO webhook_events (event_id) VALUES (?)", ("e1",))
    with pytest.raises(sqlite3.IntegrityError):
        db.execute("INSERT INTO webhook_events (event_id) VALUES (?)", ("e1",))
    # As in SQLite, the transaction goes on: the first row is still in it.
    assert db.in_transaction
    db.execute("INSERT INTO webhook_events (event_id) VALUES (?)", ("e2",))
    db.commit()
    assert peek("SELECT event_id FROM webhook_events ORDER BY 1") == [("e1",), ("e2",)]
    with pytest.raises(sqlite3.OperationalError):
        db.execute("SELECT nope FROM webhook_events")
    with pytest.raises(TypeError):
        db.execute(42)


def test_with_db_commits_on_success_and_rolls_back_on_an_exception(db, peek):
    with db:
        db.execute("INSERT INTO stores (store) VALUES (?)", ("kept",))
    with pytest.raises(ZeroDivisionError):
        with db:
            db.execute("INSERT INTO stores (store) VALUES (?)", ("lost",))
            1 / 0
    assert peek("SELECT store FROM stores") == [("kept",)]


def test_a_crash_loses_the_open_transaction_and_the_next_statement_reconnects(cluster, db, peek):
    db.execute("INSERT INTO stores (store) VALUES (?)", ("committed",))
    db.commit()
    db.execute("INSERT INTO stores (store) VALUES (?)", ("in-flight",))
    cluster.crash()
    try:
        # An sqlite3.OperationalError to the learner's code, and to the real run a
        # crash of the database, not of the code (labdb.DatabaseUnavailable).
        with pytest.raises(labdb.DatabaseUnavailable):
            db.execute("INSERT INTO stores (store) VALUES (?)", ("while-down",))
        assert not db.in_transaction
        with pytest.raises(labdb.DatabaseUnavailable):
            db.execute("SELECT 1")
    finally:
        cluster.start()  # crash recovery replays the log
    assert db.execute("SELECT store FROM stores ORDER BY 1").fetchall() == [("committed",)]
    assert peek("SELECT store FROM stores") == [("committed",)]


def test_a_commit_cut_by_a_crash_is_the_database_being_unavailable(cluster, db, peek):
    # The real run's workers met this: the server went away between the last
    # statement of a transaction and its commit.
    db.execute("INSERT INTO stores (store) VALUES (?)", ("in-flight",))
    cluster.crash()
    try:
        with pytest.raises(labdb.DatabaseUnavailable):
            db.commit()
        assert not db.in_transaction
    finally:
        cluster.start()
    assert peek("SELECT store FROM stores") == []


# A transaction's own statements on a connection the crash cut: the same answer as
# any statement's (each way through execute() reaches the server its own way).
@pytest.mark.parametrize("before, statement", [
    ("SELECT 1", "BEGIN"),
    ("SELECT 1", "SAVEPOINT s"),
    ("INSERT INTO stores (store) VALUES ('in-flight')", "SAVEPOINT s"),
    ("INSERT INTO stores (store) VALUES ('in-flight')", "SELECT 1"),
])
def test_any_statement_cut_by_a_crash_is_the_database_being_unavailable(cluster, db, peek, before, statement):
    db.execute(before)
    cluster.crash()
    try:
        with pytest.raises(labdb.DatabaseUnavailable):
            db.execute(statement)
        assert not db.in_transaction
    finally:
        cluster.start()
    assert db.execute(statement).rowcount == -1  # reconnected
    db.rollback()
    assert peek("SELECT store FROM stores") == []


def test_sqlite_only_sql_fails_on_postgresql_with_sqlite3s_error(db):
    # Why the lab's SQL is the kind both databases run: INSERT OR IGNORE is SQLite's.
    with pytest.raises(sqlite3.OperationalError, match="syntax error") as raised:
        db.execute("INSERT OR IGNORE INTO webhook_events (event_id) VALUES (?)", ("e",))
    # A mistake in the code, not the database being away.
    assert not isinstance(raised.value, labdb.DatabaseUnavailable)
    db.rollback()


# A transaction's own statements through execute() (lab.md's `db` is sqlite3's
# default mode, where they work): each sequence against sqlite3 itself and against
# the adapter on PostgreSQL, step by step (the error class, or none, and whether a
# transaction is open), and the rows committed at the end. Before, an explicit
# COMMIT through execute() broke the adapter's own savepoint, and a BEGIN inside a
# transaction or a COMMIT outside one was a warning on PostgreSQL, not an error.
A, B = "INSERT INTO stores (store) VALUES ('a')", "INSERT INTO stores (store) VALUES ('b')"
TRANSACTION_SEQUENCES = [
    ["BEGIN", A, "COMMIT"],
    ["BEGIN", "BEGIN"],
    ["COMMIT"], ["ROLLBACK"], ["END"],
    [A, "COMMIT"], [A, "ROLLBACK"], [A, "BEGIN", "COMMIT"],
    ["BEGIN TRANSACTION", A, "END TRANSACTION"], ["begin deferred", A, "rollback transaction", B, "commit"],
    ["-- mine\nBEGIN;", A, "/* done */ COMMIT;"],
    ["BEGIN", "SELECT COUNT(*) FROM stores", "COMMIT", "COMMIT"],
    [A, "SAVEPOINT s", B, "ROLLBACK TO s", "COMMIT"],
    ["SAVEPOINT s", A, "ROLLBACK TO SAVEPOINT s", B, "COMMIT"],
    [A, "SAVEPOINT s", B, "RELEASE SAVEPOINT s", "ROLLBACK"],
]


def play_transaction(conn, statements):
    steps = []
    for sql in statements:
        try:
            conn.execute(sql)
            steps.append(("ok", conn.in_transaction))
        except sqlite3.Error as e:
            steps.append((type(e).__name__, conn.in_transaction))
    conn.rollback()
    return steps, [r[0] for r in conn.execute("SELECT store FROM stores ORDER BY store").fetchall()]


@pytest.mark.parametrize("statements", TRANSACTION_SEQUENCES, ids=" | ".join)
def test_begin_commit_and_rollback_through_execute_as_sqlite3_runs_them(db, statements):
    lite = sqlite3.connect(":memory:")
    lite.execute("CREATE TABLE stores (store TEXT PRIMARY KEY, last_served_ms INTEGER)")
    lite.commit()
    assert play_transaction(db, statements) == play_transaction(lite, statements)


def test_a_closed_cluster_leaves_no_server_and_no_folder():
    with pg.Cluster() as c:
        c.start()
        c.crash()
        c.start()  # crash recovery
        root = c.root
        assert os.path.exists(os.path.join(c.data, "postmaster.pid"))
    assert not os.path.exists(root)
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert root not in ps
