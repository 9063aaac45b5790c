"""The SQL-aware mutants of ./lab mutants (www/grader/mutant_families.py) are SQL that
PostgreSQL reads too: each changed statement, and each of the reference's statements
as sqlglot renders them, is prepared on the lab's tables (the generator checks SQLite
and the lab's own refusal of SQLite-only forms; sqlglot's PostgreSQL reading is
lenient, this is the server's). A mutant PostgreSQL refused would be a mistake no
learner's file could make run in the real run, so a grade that kills it says nothing."""

import importlib.util
import pathlib

import psycopg
import pytest

REPO = pathlib.Path(__file__).resolve().parents[3]


def _generated():
    spec = importlib.util.spec_from_file_location("mutant_families", REPO / "www/grader/mutant_families.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.generate("courier")


def _dollars(sql):
    """`?` as $1, $2, ... (outside strings and quoted names), PostgreSQL's PREPARE form."""
    out, n, quote = [], 0, None
    for c in sql:
        if quote:
            quote = None if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c == "?":
            n += 1
            out.append(f"${n}")
            continue
        out.append(c)
    return "".join(out)


MADE = _generated()
STATEMENTS = [("reference", s) for s in MADE["statements"]] + \
    [(m["id"], m["sql"]) for m in MADE["families"]["sql"]]


def test_the_sql_family_is_there():
    assert len(MADE["statements"]) >= 10
    assert len(MADE["families"]["sql"]) >= 50


@pytest.mark.parametrize("name,sql", STATEMENTS, ids=[f"{i}-{n}" for i, (n, _) in enumerate(STATEMENTS)])
def test_postgres_prepares_it(cluster, name, sql):
    with psycopg.connect(cluster.dsn, autocommit=True) as conn:
        conn.execute(f"PREPARE mutant AS {_dollars(sql)}")
        conn.execute("DEALLOCATE mutant")
