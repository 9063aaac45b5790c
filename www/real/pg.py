"""A PostgreSQL cluster of the real run's own: made with Debian's server binaries in
a temporary folder, reached only through a Unix socket there (no TCP port), crashed
on purpose (`crash`: `pg_ctl stop -m immediate`, then `start` runs real crash
recovery) and gone, folder and processes, when it is closed. Commits wait for their
WAL to be written, not flushed to the disk (fsync off: the server crashes, never the
machine, so the kernel keeps what it wrote).

Who may log in (HBA below): every role authenticates. Under root the server runs as
Debian's `postgres` user (PostgreSQL refuses root, and needs a user it can look
up), never a uid any sandbox has; the superuser logs in only by peer
authentication from root, which no sandbox is; each learner role (`create_audit`)
by scram-sha-256 with a random password of the run's, handed to its one process
alone (on its stdin, never in a command line). Without root the server runs as the
invoking user, and the superuser has a random password too, held only in the run's
own memory. Learner roles are plain (no superuser, role, database or replication
rights), may use only the lab's four tables, and connect to no other database.
"""

import glob
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import tempfile

import psycopg
import psycopg.sql

from lab_files import SCHEMA_SQL

# The schema's one place is the lab's own file (src/courier/schema.sql).
DATABASE = "courier"
USER = "lab"
SERVER_OS_USER = "postgres"   # Debian's, made by its `postgresql` package
# Connections a learner role may hold at once: its process's own, with room for a
# reconnect; so the learner's roles together cannot fill max_connections, and the
# superuser keeps reserved connections of its own anyway.
LEARNER_CONNECTION_LIMIT = 4
# Each learner role's session settings (issue 38), set on the role (ALTER ROLE ...
# SET): a statement, a wait for a lock and an idle open transaction each end on their
# own, and a statement's sorts and hashes stay small in memory and on disk. The
# learner's code may SET the first four lower or off in its own session (PostgreSQL
# lets any role), so they are defaults, not walls; temp_file_limit only a superuser
# may change. The walls are the run's: it ends a session that holds a lock past
# run.LOCK_HOLD_S and stops at the database's disk budget (run.py), and each server
# process has SERVER_AS_BYTES of address space.
LEARNER_ROLE_SETTINGS = {
    "statement_timeout": "5s",
    "lock_timeout": "2s",
    "idle_in_transaction_session_timeout": "10s",
    "work_mem": "4MB",
    "temp_file_limit": "64MB",
}
# The run's own sessions (the superuser's): never wait on a learner's lock for long,
# and no statement of the run's runs away. Set on the superuser role at creation.
RUN_SESSION_SETTINGS = {"lock_timeout": "2s", "statement_timeout": "60s"}
# Address space of each server process (the postmaster and every backend inherit it:
# prlimit on pg_ctl): a query that asks for more, whatever work_mem its session SET,
# fails with PostgreSQL's "out of memory" (one SELECT held 3.3 GB in a backend).
# shared_buffers (32 MB) and the server's code fit well within it.
SERVER_AS_BYTES = 1 << 30


def hba(superuser_by_peer):
    """pg_hba.conf: the only lines there are. No TCP (the server listens on none),
    no trust anywhere; the superuser by peer from root (a map, `run`) or by
    password; every other role by password, to the lab's database only."""
    su = f"local all {USER} peer map=run" if superuser_by_peer else f"local all {USER} scram-sha-256"
    return (f"# delivery-lab's real run: every role authenticates.\n{su}\n"
            f"local {DATABASE} all scram-sha-256\n")


# The run's record of every change to an action's row (its claim, lease and state),
# kept by a trigger the learner's roles cannot
# reach (they are not the tables' owner, so they cannot drop or disable a trigger,
# and the `audit` schema is closed to them). `who` is the session's login role:
# SET ROLE and SET SESSION AUTHORIZATION are not open to them either. Times are the
# run's clock (ms since its start), from the server's clock.
AUDIT_SQL = """
CREATE ROLE learner NOLOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS;
REVOKE ALL ON DATABASE courier FROM PUBLIC;
GRANT CONNECT ON DATABASE courier TO learner;
REVOKE ALL ON DATABASE postgres FROM PUBLIC;
REVOKE ALL ON DATABASE template1 FROM PUBLIC;
REVOKE ALL ON SCHEMA public FROM PUBLIC;
GRANT USAGE ON SCHEMA public TO learner;
GRANT SELECT, INSERT, UPDATE, DELETE ON actions, stores, outbox, webhook_events TO learner;
CREATE SCHEMA audit;
REVOKE ALL ON SCHEMA audit FROM PUBLIC;
CREATE TABLE audit.run (t0_epoch_s double precision NOT NULL);
CREATE TABLE audit.writes (
  seq                bigserial PRIMARY KEY,
  at_ms              double precision NOT NULL,
  who                text NOT NULL,
  tbl                text NOT NULL,
  action_id          integer,
  old_state          text,
  old_owner          text,
  old_epoch          integer,
  old_lease_until_ms bigint,
  new_owner          text,
  new_epoch          integer,
  op                 text NOT NULL,
  new_state          text
);
CREATE FUNCTION audit.now_ms() RETURNS double precision LANGUAGE sql STABLE AS
  $$ SELECT (extract(epoch FROM clock_timestamp()) - t0_epoch_s) * 1000 FROM audit.run $$;
CREATE FUNCTION audit.log_action() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  IF TG_OP = 'INSERT' THEN
    INSERT INTO audit.writes (at_ms, who, tbl, action_id, new_owner, new_epoch, op, new_state)
    VALUES (audit.now_ms(), session_user, 'actions', NEW.id, NEW.owner, NEW.epoch, TG_OP, NEW.state);
  ELSE
    INSERT INTO audit.writes (at_ms, who, tbl, action_id, old_state, old_owner, old_epoch,
                              old_lease_until_ms, new_owner, new_epoch, op, new_state)
    VALUES (audit.now_ms(), session_user, 'actions', NEW.id, OLD.state, OLD.owner, OLD.epoch,
            OLD.lease_until_ms, NEW.owner, NEW.epoch, TG_OP, NEW.state);
  END IF;
  RETURN NEW;
END $$;
-- Inserts too: the fairness run reads each action's arrival from here.
CREATE TRIGGER audit_actions AFTER INSERT OR UPDATE ON actions FOR EACH ROW EXECUTE FUNCTION audit.log_action();
"""


def _set_role(conn, role, settings):
    """Each of `settings` as `role`'s own, for its sessions from now on."""
    for name, value in settings.items():
        conn.execute(psycopg.sql.SQL("ALTER ROLE {} SET {} = {}").format(
            psycopg.sql.Identifier(role), psycopg.sql.Identifier(name), psycopg.sql.Literal(value)))


def database_bytes(conn):
    """The lab's database on disk, as the server counts it (its tables, indexes and
    TOAST; not the write-ahead log, which the server recycles)."""
    return conn.execute("SELECT pg_database_size(%s)", (DATABASE,)).fetchone()[0]


class PostgresMissing(RuntimeError):
    """Debian's PostgreSQL server binaries are not installed (./lab installs them)."""


def server_bin_dir():
    """The newest /usr/lib/postgresql/N/bin that holds initdb, pg_ctl and postgres."""
    found = []
    for d in glob.glob("/usr/lib/postgresql/*/bin"):
        if all(os.access(os.path.join(d, b), os.X_OK) for b in ("initdb", "pg_ctl", "postgres")):
            try:
                found.append((int(d.split("/")[-2]), d))
            except ValueError:
                pass
    if not found:
        raise PostgresMissing("PostgreSQL's server binaries were not found under /usr/lib/postgresql "
                              "(Debian's `postgresql`; ./lab installs it)")
    return max(found)[1]


class Cluster:
    """One cluster, started by `start()`; `dsn` reaches it while it is up."""

    def __init__(self, parent=None):
        self.bin = server_bin_dir()
        self.root = tempfile.mkdtemp(prefix="delivery-lab-pg-", dir=parent)
        self.data = os.path.join(self.root, "data")
        self.log = os.path.join(self.root, "server.log")
        # The sockets, in a folder of their own: the run's sandbox sees this folder
        # (a bound socket file would go stale when the server restarts and makes
        # its socket again) and nothing else of the cluster's.
        self.sockets = os.path.join(self.root, "sockets")
        os.mkdir(self.sockets)
        self._as = []
        self.by_peer = os.geteuid() == 0
        self._passwords = {}
        try:
            if self.by_peer:
                try:
                    server = pwd.getpwnam(SERVER_OS_USER)
                except KeyError:
                    raise PostgresMissing(f"the OS user {SERVER_OS_USER!r} that Debian's `postgresql` makes is "
                                          "missing: the server runs as it under root") from None
                for d in (self.root, self.sockets):
                    os.chown(d, server.pw_uid, server.pw_gid)
                self._as = ["setpriv", f"--reuid={server.pw_uid}", f"--regid={server.pw_gid}", "--clear-groups"]
            os.chmod(self.root, 0o755)
            os.chmod(self.sockets, 0o755)
            self._base = f"host={self.sockets} port=5432 dbname={DATABASE}"
            # The superuser's password (used only without root) is set by initdb from
            # a file that lives for that one command.
            pw_file = os.path.join(self.root, "superuser-password")
            fd = os.open(pw_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(self._password(USER) + "\n")
            if self._as:
                os.chown(pw_file, server.pw_uid, server.pw_gid)
            try:
                self._run("initdb", "-D", self.data, "-U", USER, f"--pwfile={pw_file}", "--auth=scram-sha-256",
                          "-E", "UTF8", "--no-instructions", "--no-sync")
            finally:
                os.unlink(pw_file)
            with open(os.path.join(self.data, "pg_hba.conf"), "w") as f:
                f.write(hba(self.by_peer))
            with open(os.path.join(self.data, "pg_ident.conf"), "w") as f:
                f.write("# the run's superuser: root alone (peer)\nrun root " + USER + "\n")
            with open(os.path.join(self.data, "postgresql.conf"), "a") as conf:
                conf.write(
                    "\n# delivery-lab's real run: a socket in the cluster's own folder, no TCP.\n"
                    f"listen_addresses = ''\nunix_socket_directories = '{self.sockets}'\n"
                    # A throwaway cluster on a shared machine: its crash is the server's
                    # (crash()), never the machine's, so what a commit wrote stays in the
                    # kernel's page cache and crash recovery replays it all the same;
                    # an fsync per commit (and full pages after each checkpoint) would
                    # guard only against the machine's own crash. Commits still wait for
                    # their WAL to be written (synchronous_commit): with it off, a commit
                    # a worker was told of could vanish in the crash, and a correct
                    # solution fail (an attempt counted, the send made, the count lost).
                    "fsync = off\nfull_page_writes = off\nsynchronous_commit = on\nmax_connections = 50\n"
                    "shared_buffers = 32MB\nlog_min_messages = warning\n"
                    "password_encryption = 'scram-sha-256'\n")
        except BaseException:
            shutil.rmtree(self.root, ignore_errors=True)
            raise

    def _password(self, role):
        """`role`'s password, drawn once per run (secrets), never written anywhere
        but the server's own (hashed) record."""
        return self._passwords.setdefault(role, secrets.token_hex(24))

    @property
    def dsn(self):
        """The superuser's connection, for the run's own (trusted) use in this process."""
        return self._base + f" user={USER}" + ("" if self.by_peer else f" password={self._password(USER)}")

    def password(self, role):
        """A learner role's password: handed to that role's process alone, on its stdin."""
        if role not in self._passwords or role == USER:
            raise KeyError(f"no learner role {role!r} in this run")
        return self._passwords[role]

    def _run(self, tool, *args, prefix=()):
        r = subprocess.run([*self._as, *prefix, os.path.join(self.bin, tool), *args],
                           stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, timeout=120)
        if r.returncode != 0:
            raise RuntimeError(f"{tool} failed ({r.returncode}): {r.stdout[-2000:]}")
        return r.stdout

    def start(self):
        """Starts the server and waits until it takes connections (after a crash:
        once its recovery is done). Every server process gets SERVER_AS_BYTES of
        address space."""
        self._run("pg_ctl", "-D", self.data, "-l", self.log, "-w", "-t", "60", "start",
                  prefix=["prlimit", f"--as={SERVER_AS_BYTES}:{SERVER_AS_BYTES}", "--"])

    def crash(self):
        """Stops the server the way a power cut would: no checkpoint, every open
        transaction lost; the next start replays the write-ahead log."""
        self._run("pg_ctl", "-D", self.data, "-m", "immediate", "-w", "stop")

    def create_schema(self):
        """Creates the lab's database and its tables."""
        with psycopg.connect(self.dsn.replace(f"dbname={DATABASE}", "dbname=postgres"), autocommit=True) as admin:
            admin.execute(f"CREATE DATABASE {DATABASE}")
        with psycopg.connect(self.dsn, autocommit=True) as conn, open(SCHEMA_SQL) as schema:
            conn.execute(schema.read())
            _set_role(conn, USER, RUN_SESSION_SETTINGS)

    def create_audit(self, roles, t0_epoch_s):
        """The run's own record of every change to an action's row (AUDIT_SQL), and a
        login role for each of `roles` (each worker, the receiver): the learner's
        code connects as its process's role (`dsn_as`), which may read and write
        the lab's tables but not the record, and cannot change who it is, so the
        record says which process wrote what. `t0_epoch_s`: the run's start as
        wall-clock seconds, which the record's times count from (the run's clock)."""
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(AUDIT_SQL)
            conn.execute("INSERT INTO audit.run (t0_epoch_s) VALUES (%s)", (t0_epoch_s,))
            for role in roles:
                conn.execute(psycopg.sql.SQL(
                    "CREATE ROLE {} LOGIN PASSWORD {} IN ROLE learner CONNECTION LIMIT {} "
                    "NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS").format(
                    psycopg.sql.Identifier(role), psycopg.sql.Literal(self._password(role)),
                    psycopg.sql.Literal(LEARNER_CONNECTION_LIMIT)))
                _set_role(conn, role, LEARNER_ROLE_SETTINGS)

    def dsn_as(self, role):
        """The cluster's DSN for a login role of `create_audit`, without its password
        (`password(role)`, which its process reads from its stdin)."""
        return self._base + f" user={role}"

    def login(self, role):
        """`dsn_as(role)` with the password in it: for this process's own use (tests)."""
        return self.dsn_as(role) + f" password={self.password(role)}"

    def close(self):
        """Stops the server (fast, or immediate if that fails) and removes its folder.
        Ctrl+C or a SIGTERM waits until that is done: a clean-up cut short would
        leave a server or a folder behind."""
        held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        try:
            self._stop_and_remove()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)

    def _stop_and_remove(self):
        try:
            if os.path.exists(os.path.join(self.data, "postmaster.pid")):
                try:
                    self._run("pg_ctl", "-D", self.data, "-m", "fast", "-w", "-t", "30", "stop")
                except (RuntimeError, subprocess.TimeoutExpired):
                    self._run("pg_ctl", "-D", self.data, "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
