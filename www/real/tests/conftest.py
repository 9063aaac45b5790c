# The real run's tests: a cluster of their own for the whole session (a start costs
# a few seconds), a fresh schema for each test that asks for `db`.
import os
import signal
import sys
import time

import psycopg
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import pg  # noqa: E402
import labdb  # noqa: E402


# The server is a daemon of its own (pg_ctl starts it in a new session), so a
# signal to this run does not reach it: stopped by one (./lab test's bound), the
# run ends through pytest's teardown, which stops the cluster and removes it.
signal.signal(signal.SIGTERM, lambda *_: pytest.exit("stopped by SIGTERM", returncode=1))


@pytest.fixture(scope="session")
def cluster():
    with pg.Cluster() as c:
        c.start()
        c.create_schema()
        yield c


@pytest.fixture(scope="module")
def audited():
    """A cluster of the module's own with the run's record (pg.AUDIT_SQL), two worker
    roles w0 and w1, and one pending action (id 1)."""
    with pg.Cluster() as c:
        c.start()
        c.create_schema()
        c.create_audit(["w0", "w1"], time.time())
        with psycopg.connect(c.dsn, autocommit=True) as admin:
            admin.execute("INSERT INTO actions (id, store, phone, body, created_ms) VALUES (1, 's', 'p', 'b', 0)")
        yield c


@pytest.fixture()
def db(cluster):
    with psycopg.connect(cluster.dsn, autocommit=True) as admin:
        admin.execute("TRUNCATE actions, stores, outbox, webhook_events")
    conn = labdb.Connection(cluster.dsn)
    yield conn
    conn.close()


@pytest.fixture()
def peek(cluster):
    """What another connection sees: committed rows only."""
    def rows(sql, *params):
        with psycopg.connect(cluster.dsn, autocommit=True) as conn:
            return conn.execute(sql, params).fetchall()
    return rows
