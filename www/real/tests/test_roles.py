# Issue 28's first wall of ./lab real: no learner code reaches a database role it
# was not given. Every role authenticates (pg.hba: the superuser by peer from root
# alone, or by a password only the run holds; each learner role by its own random
# password, handed to its one process on stdin), and a learner role is plain: it
# cannot run a program, read or write a server file, load code, or change what
# others see. Each attack found against main (the superuser reached over the trust
# socket, COPY ... PROGRAM run outside the sandbox) is a test here.
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

import psycopg
import pytest

import jail
import pg
import procfs
from lab_files import REFERENCE

REAL = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


@pytest.fixture()
def open_dir():
    """A folder the sandbox's and the server's users can enter (pytest's own tmp_path
    is root's alone)."""
    d = tempfile.mkdtemp(prefix="roles-test-")
    os.chmod(d, 0o755)
    yield pathlib.Path(d)
    shutil.rmtree(d, ignore_errors=True)


# Run inside the run's sandbox (as a worker is): tries each login and says which worked.
PROBE = r"""
import json, sys, psycopg
out = {}
for name, dsn in json.loads(sys.stdin.read()).items():
    try:
        with psycopg.connect(dsn, connect_timeout=5) as c:
            out[name] = "in as " + c.execute("SELECT session_user").fetchone()[0]
    except psycopg.OperationalError as e:
        out[name] = "refused"
print(json.dumps(out))
"""


def test_from_the_sandbox_only_a_roles_own_password_logs_it_in(audited, open_dir):
    probe = open_dir / "probe.py"
    probe.write_text(PROBE)
    probe.chmod(0o644)
    box = jail.Jail([audited.sockets, str(open_dir)])
    if os.geteuid() == 0:
        assert box.on and box.uid is not None and box.uid >= 2 ** 30, box.problem
    other_db = audited.dsn_as("w0").replace(f"dbname={pg.DATABASE}", "dbname=postgres")
    tries = {
        "superuser, no password": audited.dsn_as(pg.USER),
        "superuser, a learner's password": audited.dsn_as(pg.USER) + f" password={audited.password('w0')}",
        "superuser to the postgres database": audited.dsn_as(pg.USER).replace(f"dbname={pg.DATABASE}", "dbname=postgres"),
        "w0, no password": audited.dsn_as("w0"),
        "w1 with w0's password": audited.dsn_as("w1") + f" password={audited.password('w0')}",
        "w0 to the postgres database": other_db + f" password={audited.password('w0')}",
        "w0 with its own password": audited.login("w0"),
    }
    r = subprocess.run(box.argv([sys.executable, str(probe)]), input=json.dumps(tries), capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert got == {**{k: "refused" for k in tries}, "w0 with its own password": "in as w0"}, got
    jail.kill_uid(box.uid)


def test_learner_roles_are_plain(audited):
    with psycopg.connect(audited.dsn, autocommit=True) as admin:
        rows = admin.execute(
            "SELECT rolname, rolsuper, rolcreaterole, rolcreatedb, rolreplication, rolbypassrls, rolconnlimit "
            "FROM pg_roles WHERE rolname IN ('w0', 'w1', 'learner') ORDER BY rolname").fetchall()
        granted = admin.execute(
            "SELECT b.rolname FROM pg_auth_members m JOIN pg_roles b ON b.oid = m.roleid "
            "JOIN pg_roles r ON r.oid = m.member WHERE r.rolname = 'w0'").fetchall()
    assert rows == [("learner", False, False, False, False, False, -1),
                    ("w0", False, False, False, False, False, pg.LEARNER_CONNECTION_LIMIT),
                    ("w1", False, False, False, False, False, pg.LEARNER_CONNECTION_LIMIT)]
    assert granted == [("learner",)]


@pytest.mark.parametrize("sql", [
    "COPY actions TO '{out}'",
    "COPY actions TO PROGRAM 'touch {out}'",
    "COPY actions FROM PROGRAM 'touch {out}'",
    "COPY actions FROM '/etc/passwd'",
    "SELECT pg_read_file('/etc/passwd')",
    "SELECT pg_read_binary_file('/etc/passwd')",
    "SELECT pg_ls_dir('.')",
    "SELECT lo_import('/etc/passwd')",
    "SELECT lo_export(lo_create(0), '{out}')",
    "CREATE EXTENSION file_fdw",
    "CREATE EXTENSION adminpack",
    "LOAD 'auto_explain'",
    "ALTER SYSTEM SET fsync = off",
    "SET log_min_messages = debug5",
    "SET session_replication_role = replica",
    "CREATE TABLE mine (x integer)",
    "CREATE TEMP TABLE mine (x integer)",
    "CREATE FUNCTION f() RETURNS int LANGUAGE sql AS 'SELECT 1'",
    "CREATE ROLE another LOGIN",
    "CREATE DATABASE another",
    "ALTER ROLE w0 SUPERUSER",
    "ALTER ROLE w1 PASSWORD 'known'",
    "GRANT learner TO w1",
    "ALTER TABLE actions ADD COLUMN x integer",
    "TRUNCATE actions",
    "SELECT rolpassword FROM pg_authid",
    "SELECT pg_reload_conf()",
    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = 'w1'",
])
def test_a_learner_role_cannot_reach_the_machine_the_server_or_another_role(audited, sql, open_dir):
    out = open_dir / "written"
    os.chmod(open_dir, 0o777)  # the server could write here: only the privilege stops it
    with psycopg.connect(audited.login("w1"), autocommit=True):  # a session of w1's to aim at
        with psycopg.connect(audited.login("w0"), autocommit=True) as w0:
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                w0.execute(sql.format(out=out))
            assert w0.execute("SELECT count(*) FROM actions").fetchone()[0] == 1  # still open to it
    assert not out.exists()


def test_a_learner_role_holds_no_more_than_its_connection_limit(audited):
    held = [psycopg.connect(audited.login("w0")) for _ in range(pg.LEARNER_CONNECTION_LIMIT)]
    try:
        with pytest.raises(psycopg.OperationalError, match="too many connections"):
            psycopg.connect(audited.login("w0"))
        with psycopg.connect(audited.dsn, autocommit=True) as admin:  # the run's own still gets in
            assert admin.execute("SELECT 1").fetchone() == (1,)
    finally:
        for c in held:
            c.close()


def command_lines():
    return [b"\0".join(procfs.argv(pid)) for pid, _ in procfs.processes()]


def test_no_password_is_in_any_command_line_of_a_run(open_dir):
    """/proc/PID/cmdline is readable by every user of the machine: the run hands each
    role's password on its process's stdin."""
    solution = REFERENCE
    p = subprocess.Popen([sys.executable, os.path.join(REAL, "run.py"), solution, "--actions", "400", "--kills", "0",
                          "--freezes", "0", "--workers", "2", "--format", "json"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env={**os.environ, "TMPDIR": str(open_dir)})
    try:
        seen = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not any(b"--name" in a and b"worker.py" in a for a in seen):
            seen = command_lines()
            time.sleep(0.2)
        assert any(b"--name" in a and b"worker.py" in a for a in seen), "the run's workers did not start"
        assert any(b"receiver.py" in a for a in seen)
        assert not [a for a in seen if b"password=" in a]
    finally:
        p.terminate()
        p.communicate(timeout=60)
