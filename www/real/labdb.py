"""The courier lab's `db` in the real run: a connection to PostgreSQL (psycopg 3)
that behaves as lab.md promises of `sqlite3.Connection` in its default mode, so
that one solution file runs in the browser lab and against a real database:

- `?` parameters;
- `execute` (and `executemany`) return a cursor with `rowcount` (-1 after a
  SELECT, as sqlite3 gives), `fetchone()`, `fetchall()`, and iteration;
- a statement that starts with INSERT, UPDATE, DELETE or REPLACE opens a
  transaction when none is open (sqlite3's own rule), and any other statement
  outside one runs on its own and opens none; `commit()` and
  `rollback()` end it (both harmless when none is open); `with db:` commits on
  success and rolls back on an exception;
- `BEGIN`, `COMMIT` (or `END`) and `ROLLBACK` through `execute` do what
  sqlite3 does with them (an OperationalError for a BEGIN inside a transaction
  and a COMMIT or ROLLBACK outside one), and a SAVEPOINT outside a transaction
  opens one; `RELEASE` of the savepoint that opened it does not end it here, as
  it would in SQLite (tests/test_labdb.py plays each against sqlite3 itself);
- a statement that fails inside a transaction undoes only itself, as in SQLite
  (a savepoint around it), so the transaction can go on or be rolled back;
- errors are sqlite3's classes (`sqlite3.IntegrityError`, `OperationalError`
  when the server is down or restarting, ...), so `except sqlite3.X` reads the
  same in both runs. After the server comes back, the next statement reconnects.
"""

import re
import sqlite3

import psycopg
from psycopg import errors as pg_errors

# What translate() looks at: a quoted string or identifier ('' and "" inside are
# escaped quotes; an unterminated one runs to the end), a comment, a `?`, a `%`.
_TOKENS = re.compile(r"""'(?:[^']|'')*'?|"(?:[^"]|"")*"?|--[^\n]*|/\*.*?(?:\*/|$)|[?%]""", re.DOTALL)


def translate(sql):
    """sqlite3's `?` placeholders as psycopg's `%s`, outside quotes and comments;
    every `%` doubled, since psycopg reads `%` anywhere in a query with parameters."""
    return _TOKENS.sub(lambda m: "%s" if m.group() == "?" else m.group().replace("%", "%%"), sql)


# White space and comments, as sqlite3 skips them before a statement's first word.
_SKIP = r"\s*(?:(?:--[^\n]*(?:\n|$)|/\*.*?\*/)\s*)*"

# sqlite3's own test (CPython's is_dml_statement): after white space and comments,
# the statement starts with one of these words. Only then does its default mode
# open a transaction (a WITH ... UPDATE does not), and only then is rowcount set.
_DML_START = re.compile(_SKIP + r"(?:insert|update|delete|replace)\b", re.IGNORECASE | re.DOTALL)


def is_dml(sql):
    return _DML_START.match(sql) is not None


# A transaction's own statements through execute(), as sqlite3's default mode runs
# them (its words after white space and comments): BEGIN [DEFERRED | IMMEDIATE |
# EXCLUSIVE] [TRANSACTION], COMMIT or END [TRANSACTION], ROLLBACK [TRANSACTION]
# (not ROLLBACK TO, a savepoint's).
_TX_STATEMENT = re.compile(
    _SKIP + r"(?P<verb>begin(?:\s+(?:deferred|immediate|exclusive))?|commit|end|rollback)"
    r"(?:\s+transaction)?" + _SKIP + r";?" + _SKIP + r"\Z", re.IGNORECASE | re.DOTALL)


# A savepoint's statements: SAVEPOINT name, RELEASE [SAVEPOINT] name, ROLLBACK
# [TRANSACTION] TO [SAVEPOINT] name. sqlite3 runs a SAVEPOINT outside a transaction
# by opening one; PostgreSQL takes them inside one only.
_SAVEPOINT_STATEMENT = re.compile(_SKIP + r"(?P<verb>savepoint|release|rollback(?:\s+transaction)?\s+to)\b",
                                  re.IGNORECASE | re.DOTALL)


def transaction_verb(sql):
    """'begin', 'commit' or 'rollback' when `sql` is a transaction's own statement
    (END is COMMIT), else None."""
    m = _TX_STATEMENT.match(sql)
    if m is None:
        return None
    verb = m.group("verb").split()[0].lower()
    return "commit" if verb == "end" else verb


# A run's password for a learner role: secrets.token_hex's alphabet and size.
_PASSWORD = re.compile(r"[0-9a-f]{16,128}")


def dsn_with_password(dsn, line):
    """`dsn` with the password its process was handed (`line`: the first line of its
    stdin, the run's; a password is never in a command line, where /proc shows it
    to every user of the machine)."""
    pw = line.strip()
    if not _PASSWORD.fullmatch(pw):
        raise SystemExit("no database password on the first line of stdin (the run writes it there)")
    return f"{dsn} password={pw}"


class DatabaseUnavailable(sqlite3.OperationalError):
    """The server cannot be reached (down, restarting, or the connection was cut):
    an sqlite3.OperationalError to the learner's code, as lab.md promises, and a
    type of its own to the run, which tells a crash of the database from a bug."""


def _sqlite_error(e, lost=False):
    """A psycopg error as the sqlite3 exception a learner's code would see: a server
    down or restarting (psycopg's OperationalError), or any error that left the
    connection broken (`lost`), is DatabaseUnavailable, wherever it was raised."""
    if lost or isinstance(e, psycopg.OperationalError):
        cls = DatabaseUnavailable
    elif isinstance(e, pg_errors.IntegrityError):
        cls = sqlite3.IntegrityError
    elif isinstance(e, (pg_errors.SyntaxError, pg_errors.UndefinedTable, pg_errors.UndefinedColumn)):
        cls = sqlite3.OperationalError  # sqlite3 says "no such table", "syntax error" as these
    elif isinstance(e, psycopg.ProgrammingError):
        cls = sqlite3.ProgrammingError
    elif isinstance(e, psycopg.DataError):
        cls = sqlite3.DataError
    else:
        cls = sqlite3.DatabaseError
    message = str(e).strip().split("\n")[0] or type(e).__name__
    return cls(message)


class Cursor:
    """What `execute` returns: the rows it read (all of them, read at once) and the
    rows it changed."""

    def __init__(self, rows, rowcount):
        self._rows = rows
        self._at = 0
        self.rowcount = rowcount

    def fetchone(self):
        if self._at >= len(self._rows):
            return None
        row = self._rows[self._at]
        self._at += 1
        return row

    def fetchall(self):
        rows = self._rows[self._at:]
        self._at = len(self._rows)
        return rows

    def fetchmany(self, size=1):
        rows = self._rows[self._at:self._at + size]
        self._at += len(rows)
        return rows

    def __iter__(self):
        while (row := self.fetchone()) is not None:
            yield row


class Connection:
    """See the module's text. `dsn`: where the cluster is (pg.Cluster.dsn)."""

    def __init__(self, dsn, connect_timeout_s=5):
        self._dsn = dsn
        self._timeout_s = connect_timeout_s
        self._conn = None
        self.in_transaction = False

    def _connection(self):
        if self._conn is None or self._conn.closed or self._conn.broken:
            self._conn = None
            try:
                self._conn = psycopg.connect(self._dsn, autocommit=True, connect_timeout=self._timeout_s)
            except psycopg.Error as e:
                raise _sqlite_error(e, lost=True) from None
        return self._conn

    def _lost(self):
        # The server went away (a crash, a restart): the transaction is gone with it.
        self.in_transaction = False
        if self._conn is not None:
            try:
                self._conn.close()
            except psycopg.Error:
                pass
        self._conn = None

    def _error(self, conn, e):
        """The sqlite3 exception for psycopg's `e`, raised on `conn`; when it left the
        server gone (a broken connection, or psycopg's OperationalError), the
        connection and its transaction are dropped first."""
        lost = conn.broken or isinstance(e, psycopg.OperationalError)
        if lost:
            self._lost()
        return _sqlite_error(e, lost)

    def _run(self, sql, param_sets):
        if not isinstance(sql, str):
            raise TypeError(f"execute() argument 1 must be str, not {type(sql).__name__}")
        verb = transaction_verb(sql)
        if verb is not None:
            return self._transaction_statement(verb)
        conn = self._connection()
        query = translate(sql)
        savepoint = _SAVEPOINT_STATEMENT.match(sql)
        if savepoint:
            return self._savepoint_statement(conn, query, opens=savepoint.group("verb").lower() == "savepoint")
        try:
            dml = is_dml(sql)
            if dml and not self.in_transaction:
                conn.execute("BEGIN")
                self.in_transaction = True
            rows, count = [], 0
            with conn.cursor() as cur:
                if self.in_transaction:
                    cur.execute("SAVEPOINT lab_statement")
                try:
                    for params in param_sets:
                        cur.execute(query, params)
                        if cur.description is not None:
                            rows.extend(cur.fetchall())
                        count += max(cur.rowcount, 0)
                except psycopg.Error:
                    if self.in_transaction and not conn.broken:
                        cur.execute("ROLLBACK TO SAVEPOINT lab_statement")
                    raise
                if self.in_transaction:
                    cur.execute("RELEASE SAVEPOINT lab_statement")
            return Cursor(rows, count if dml else -1)
        except psycopg.Error as e:
            raise self._error(conn, e) from None

    def _transaction_statement(self, verb):
        """BEGIN, COMMIT or ROLLBACK through execute(), with sqlite3's answers: a
        BEGIN inside a transaction and a COMMIT or ROLLBACK outside one are
        OperationalErrors, as sqlite3 raises them (PostgreSQL would only warn)."""
        if verb == "begin":
            if self.in_transaction:
                raise sqlite3.OperationalError("cannot start a transaction within a transaction")
            conn = self._connection()
            try:
                conn.execute("BEGIN")
            except psycopg.Error as e:
                raise self._error(conn, e) from None
            self.in_transaction = True
        elif not self.in_transaction:
            raise sqlite3.OperationalError(f"cannot {verb} - no transaction is active")
        elif verb == "commit":
            self.commit()
        else:
            self.rollback()
        return Cursor([], -1)

    def _savepoint_statement(self, conn, query, opens):
        """A savepoint's statement inside the transaction (a SAVEPOINT opens one when
        none is open, as sqlite3 does), without the statement's own savepoint."""
        try:
            if opens and not self.in_transaction:
                conn.execute("BEGIN")
                self.in_transaction = True
            conn.execute(query)
        except psycopg.Error as e:
            raise self._error(conn, e) from None
        return Cursor([], -1)

    def execute(self, sql, parameters=()):
        return self._run(sql, [tuple(parameters)])

    def executemany(self, sql, seq_of_parameters):
        return self._run(sql, [tuple(p) for p in seq_of_parameters])

    # Both end the transaction on the connection that holds it (it is open while
    # in_transaction is: a lost connection clears both), never on a new one.
    def commit(self):
        if not self.in_transaction:
            return
        try:
            self._conn.execute("COMMIT")
        except psycopg.Error as e:
            error = self._error(self._conn, e)
            self._lost()  # a COMMIT that fails ends the transaction either way
            raise error from None
        self.in_transaction = False

    def rollback(self):
        if not self.in_transaction:
            return
        try:
            self._conn.execute("ROLLBACK")
        except psycopg.Error:
            # A server that is gone has rolled the transaction back itself.
            self._lost()
        self.in_transaction = False

    def close(self):
        self.rollback()
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.commit()
        else:
            self.rollback()
        return False
