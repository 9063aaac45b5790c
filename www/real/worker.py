"""A real worker process of the courier lab's real run: the learner's pieces in a
loop, in real time, on the run's PostgreSQL (labdb) and the provider over HTTP.

    python worker.py --solution FILE --dsn DSN --provider URL --name w1 --t0 T0 [--password-stdin]

The loop is the simulator's (src/courier/sim.rs): with no job, claim one (or rest
IDLE_MS); with a job, write the intent, then deliver_step until it is done or
fenced, sleeping for real where it returns ("wait", ms); a heartbeat every third
of the lease. Any exception ends the process (a crash: the run restarts the
worker, which starts from scratch, as lab.md says). SIGTERM ends it between steps.
"""

import argparse
import signal
import sys
import time

import labdb
import pieces

IDLE_MS = 50       # rest between claims that found nothing
# The exit status of a worker that ended because the database could not be
# reached (labdb.DatabaseUnavailable escaped its pieces): a crash of the database,
# not of the learner's code. Any other exception exits 1.
EXIT_DB_UNAVAILABLE = 75


class Stop(Exception):
    pass


def _stop(*_):
    raise Stop()


def _shape(name, ok, value):
    if not ok:
        raise TypeError(f"{name} returned {value!r}, which is not what lab.md says it returns")
    return value


def run(solution, db, provider_url, name, clock, cfg):
    lease_beat_ms = cfg.lease_ms // 3
    while True:
        job = pieces_claim(solution, db, name, clock, cfg)
        if job is None:
            time.sleep(IDLE_MS / 1000)
            continue
        action, epoch = job
        provider = pieces.HttpProvider(provider_url, action)
        next_beat = clock.now_ms() + lease_beat_ms
        key = solution.write_intent(db, action, name, epoch)
        _shape("write_intent", key is None or isinstance(key, str), key)
        while key is not None:
            if clock.now_ms() >= next_beat:
                held = solution.heartbeat(db, action, name, epoch, clock.now_ms(), cfg)
                if not _shape("heartbeat", isinstance(held, bool), held):
                    break
                next_beat = clock.now_ms() + lease_beat_ms
            step = solution.deliver_step(db, provider, action, name, epoch, clock.now_ms(), cfg)
            ok = isinstance(step, tuple) and len(step) == 2 and step[0] in ("wait", "done", "fenced")
            kind, value = _shape("deliver_step", ok, step)
            if kind != "wait":
                break
            # Any finite number of ms above 0, an int or a float, as in the browser lab.
            _shape("deliver_step", isinstance(value, (int, float)) and not isinstance(value, bool)
                   and 0 < value < float("inf"), step)
            time.sleep(min(value, max(1, next_beat - clock.now_ms())) / 1000)


def pieces_claim(solution, db, name, clock, cfg):
    job = solution.claim(db, name, clock.now_ms(), cfg)
    ok = job is None or (isinstance(job, tuple) and len(job) == 2 and all(isinstance(x, int) for x in job))
    return _shape("claim", ok, job)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--solution", required=True)
    p.add_argument("--check", action="store_true", help="load the solution, check its six pieces, and exit")
    p.add_argument("--dsn", required=not ("--check" in (argv or sys.argv)))
    p.add_argument("--provider", required=not ("--check" in (argv or sys.argv)))
    p.add_argument("--name", required=not ("--check" in (argv or sys.argv)))
    p.add_argument("--t0", required=not ("--check" in (argv or sys.argv)), type=float)
    p.add_argument("--lease-ms", type=int, default=pieces.Cfg().lease_ms, help="cfg.lease_ms (default: lab.md's)")
    p.add_argument("--password-stdin", action="store_true", help="the role's password is stdin's first line")
    a = p.parse_args(argv)
    signal.signal(signal.SIGTERM, _stop)
    solution = pieces.load_solution(a.solution)
    if a.check:
        return 0
    db = labdb.Connection(labdb.dsn_with_password(a.dsn, sys.stdin.readline()) if a.password_stdin else a.dsn)
    try:
        run(solution, db, a.provider, a.name, pieces.Clock(a.t0), pieces.Cfg(lease_ms=a.lease_ms))
    except Stop:
        return 0
    except labdb.DatabaseUnavailable as e:
        print(f"{a.name}: the database could not be reached ({e}); the worker restarts", file=sys.stderr)
        return EXIT_DB_UNAVAILABLE
    finally:
        try:
            db.close()
        except Exception:
            pass


if __name__ == "__main__":
    sys.exit(main())
