"""A worker of `./lab real --fairness` (fairness.py): claims through the learner's
`claim` (or the run's FIFO claim), spends the action's service time (a real
sleep; the action's body says how long), then marks it dispatched.

    python fair_worker.py --solution FILE --dsn DSN --name f1 --claim yours|fifo

It reads its role's password from its stdin's first line; once loaded and
connected it prints "ready" and reads the run's clock start (t0, time.monotonic()
in the run) from the next: the load starts only when every worker is up, so no
worker's start-up time counts as waiting.

It measures nothing: it runs in the learner's sandbox, where the learner's code
could rewrite anything it does. The run takes every time from the database's own
record of the claims and dispatches (pg.AUDIT_SQL, written by a trigger with the
server's clock and the writer's login role) and checks that record for what an
honest worker does: one action at a time, each for its whole service time.
"""

import argparse
import signal
import sys
import time

import psycopg

import labdb
import pieces

IDLE_MS = 10

# The plain first-in, first-out claim the learner's is shown beside: the oldest
# claimable action in the table, whatever its store (compare-and-set on the epoch).
FIFO_PICK = """SELECT id, epoch FROM actions
               WHERE state = 'pending' OR (state = 'claimed' AND lease_until_ms <= ?)
               ORDER BY created_ms, id LIMIT 1"""
FIFO_TAKE = """UPDATE actions SET state = 'claimed', owner = ?, epoch = epoch + 1, lease_until_ms = ?
               WHERE id = ? AND epoch = ? AND (state = 'pending' OR (state = 'claimed' AND lease_until_ms <= ?))"""


def fifo_claim(db, worker, now_ms, cfg):
    row = db.execute(FIFO_PICK, (now_ms,)).fetchone()
    if row is None:
        return None
    cur = db.execute(FIFO_TAKE, (worker, now_ms + cfg.lease_ms, row[0], row[1], now_ms))
    if cur.rowcount != 1:
        db.rollback()
        return None
    db.commit()
    return (row[0], row[1] + 1)


class Stop(Exception):
    pass


def _stop(*_):
    raise Stop()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--solution", required=True)
    p.add_argument("--dsn", required=True)
    p.add_argument("--name", required=True)
    p.add_argument("--claim", choices=("yours", "fifo"), required=True)
    a = p.parse_args(argv)
    signal.signal(signal.SIGTERM, _stop)
    dsn = labdb.dsn_with_password(a.dsn, sys.stdin.readline())
    claim = pieces.load_solution(a.solution).claim if a.claim == "yours" else fifo_claim
    cfg = pieces.Cfg()
    db = labdb.Connection(dsn)
    try:
        with psycopg.connect(dsn, autocommit=True) as run:
            db.execute("SELECT 1").fetchone()
            print("ready", flush=True)
            clock = pieces.Clock(float(sys.stdin.readline()))
            while True:
                job = claim(db, a.name, clock.now_ms(), cfg)
                if job is None:
                    time.sleep(IDLE_MS / 1000)
                    continue
                if not (isinstance(job, tuple) and len(job) == 2 and all(isinstance(x, int) for x in job)):
                    raise TypeError(f"claim returned {job!r}, which is not what lab.md says it returns")
                action, epoch = job
                body = run.execute("SELECT body FROM actions WHERE id = %s", (action,)).fetchone()
                if body is None:
                    raise ValueError(f"claim returned action {action}, which does not exist")
                time.sleep(int(body[0].split()[1]) / 1000)
                run.execute("UPDATE actions SET state = 'dispatched' WHERE id = %s AND epoch = %s "
                            "AND state = 'claimed'", (action, epoch))
    except Stop:
        return 0
    finally:
        try:
            db.close()
        except Exception:
            pass


if __name__ == "__main__":
    sys.exit(main())
