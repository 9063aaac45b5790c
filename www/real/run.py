"""The courier challenge on real parts: `./lab real FILE`.

A PostgreSQL cluster of the run's own (pg.py), the misbehaving provider as an HTTP
server on loopback (provider.mjs), the webhook receiver (receiver.py) and worker
processes (worker.py) running the learner's six pieces in real time. The run
enqueues actions over 100 stores, SIGKILLs workers at seeded random moments
(restarting each), freezes some past their lease with SIGSTOP and wakes them as
zombies with SIGCONT, crashes PostgreSQL once (a power cut, then real crash
recovery), waits for the drain, and counts the chaos table from the provider's
own log. The learner's code runs here as real processes on this machine.

    python run.py FILE [--seed N] [--actions N] [--kills N] [--workers N] [--fairness] [--format text|json]

Exit 0 when every row holds, 1 when one does not, 3 when the fairness run could
grade nothing (the machine too loaded: fairness.validity), 2 for a usage error or
a file that cannot run, 130 when stopped (Ctrl+C, SIGTERM); with --format json the
last line of stdout is JSON for each of them. The seed makes every choice of the run (which worker, when,
which store); real timing still varies, so a run is not byte-identical, but a
correct solution passes every run and a wrong one fails a named row.
"""

import argparse
import json
import os
import random
import signal
import socket
import subprocess
import tempfile
import sys
import time

import psycopg

import fairness
import jail
import pg
import pieces
import procfs
from procs import first_line, http_json, stop_all
from worker import EXIT_DB_UNAVAILABLE

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "worker.py")
RECEIVER = "receiver"      # the webhook receiver's database role; each worker's is its name
# A claim is "from a healthy worker" when the lease it took had this much left or
# more by the database's clock: the claim's own statement and the two clocks (the
# workers' monotonic one, the server's wall clock) may differ by a few ms.
LEASE_SLACK_MS = 250
STORES = 100
# A frozen worker wakes as soon as another worker has taken its action over, or
# when none did though its action was the only one left to take (its lease over,
# no other action pending or free) for this long: the freeze then made no zombie.
FREEZE_GIVE_UP_S = 20
HOLD_WAIT_S = 4            # how long holds armed on pending actions wait for one's first request
HOLDS_ARMED = 4            # pending actions armed at once: one of them is soon claimed and sent
DRAIN_TIMEOUT_S = 600
# Your code crashing this many times with the database up ends the run early: the
# row has failed, and waiting for a drain that will not come tells nothing more.
CRASH_LIMIT = 20
CHECK_TIMEOUT_S = 60       # loading the file and finding its six pieces
# ./lab works in its checkout and names the folder it was run from in this variable
# (www/grader/args.mjs CALLER_DIR_ENV): FILE is taken from there. Read once, when
# the run starts, and taken out of the environment, so no process it starts reads it.
CALLER_DIR_ENV = "DELIVERY_LAB_CALLER_DIR"
POLL_S = 0.05
# Characters kept of a text read back from a table learner code may write (its role
# can UPDATE `actions`; PostgreSQL's text runs to 1 GB) when the report shows it.
REPORT_TEXT_CAP = 200
# The run's walls (issue 38), checked every GUARD_EVERY_S whatever the learner's code
# holds (the run's own sessions wait at most pg.RUN_SESSION_SETTINGS' lock_timeout
# for a lock, so a learner's lock cannot stall the run's loop): a learner session
# whose open transaction keeps others waiting for longer than LOCK_HOLD_S is ended,
# and so is the run, naming it (a worker that took a table lock and slept stalled
# the run forever); the lab's database past DB_BUDGET_MB (`--db-budget-mb`) ends the
# run too (one role grew it to 3.9 GB and the run passed). Each is a row of the table.
GUARD_EVERY_S = 0.5
LOCK_HOLD_S = 10
DB_BUDGET_MB = 512
# Learner sessions whose transaction began more than %(hold)s s ago and holds a lock
# another session waits for: the oldest first.
LOCK_HOLDERS_SQL = """
SELECT h.usename, h.pid FROM pg_stat_activity h
WHERE h.usename = ANY(%(roles)s) AND h.xact_start < clock_timestamp() - make_interval(secs => %(hold)s)
  AND EXISTS (SELECT 1 FROM pg_stat_activity w WHERE h.pid = ANY(pg_blocking_pids(w.pid)))
ORDER BY h.xact_start LIMIT 1
"""
# A report's verdict as the exit status: 3 when the machine was too loaded for the
# fairness run to grade anything (fairness.validity), never a pass or a fail.
EXIT_OF = {"pass": 0, "fail": 1, "inconclusive": 3}


def worker_name(i):
    return f"w{i}"


class Worker:
    """One worker process, restarted when it ends: `crashes_db_up` counts the ends
    that were crashes of the learner's code (not of the database)."""

    def __init__(self, run, name):
        self.run, self.name = run, name
        self.proc = None
        self.frozen = None          # while SIGSTOPped: its action, epoch, and when to give up
        self.crashes_db_up = 0
        self.stuck = 0              # times found stuck in the learner's code (and restarted)
        self.woken_until = 0.0      # a zombie just woken has not used the database yet: not stuck
        self.last_error = ""
        self.start()

    def start(self):
        self.proc = subprocess.Popen(
            self.run.jail.argv([sys.executable, WORKER, "--solution", self.run.solution,
                                "--dsn", self.run.cluster.dsn_as(self.name), "--provider", self.run.learner_provider,
                                "--name", self.name, "--t0", repr(self.run.t0), "--lease-ms", str(self.run.lease_ms),
                                "--password-stdin"]),
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        hand_password(self.proc, self.run.cluster.password(self.name))
        self.frozen = None

    def own_pid(self):
        """The worker's own process: inside the sandbox, when there is one (stopping
        the sandbox's bubblewrap would not stop it); None when it is not there (yet)."""
        return jail.inner_pid(self.proc.pid, WORKER) if self.run.jail.on else self.proc.pid

    def signal(self, sig):
        """`sig` to the worker's own process; False when it is not there (yet)."""
        pid = self.own_pid()
        if pid is None:
            return False
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return False
        return True

    def stopped(self):
        """Whether the worker's own process is seen stopped (after a SIGSTOP, which
        takes effect as the kernel gets to it): the freeze holds only then."""
        pid = self.own_pid()
        if pid is None:
            return False
        for _ in range(100):
            st = procfs.state(pid)
            if st is None:
                return False
            if st == "T":
                return True
            time.sleep(0.005)
        return False

    def kill(self):
        jail.kill_tree(self.proc)
        self.proc.wait()
        self.proc.stderr.close()
        self.start()

    def check(self):
        """Restarts a worker that ended by itself: the database was unreachable
        (its own exit status, worker.EXIT_DB_UNAVAILABLE), or a crash of the
        learner's code, which the run counts."""
        code = self.proc.poll()
        if code is None:
            return
        err = self.proc.stderr.read()
        self.proc.stderr.close()
        if code != EXIT_DB_UNAVAILABLE:
            self.crashes_db_up += 1
            self.last_error = err[-1500:]
        self.start()

    def stop(self):
        if self.proc.poll() is None and self.frozen is not None:
            self.signal(signal.SIGCONT)  # a stopped process cannot end on SIGTERM
        stop_all([self.proc])


def hand_password(proc, password):
    """`password` on `proc`'s stdin, which then closes: its database role's, for it
    alone (not in its command line, which /proc shows to every user)."""
    try:
        proc.stdin.write(password + "\n")
        proc.stdin.close()
    except (BrokenPipeError, OSError):
        pass  # it ended already: the run sees that as it sees any end


def capped(text):
    """`text` (None, or read back with at most REPORT_TEXT_CAP + 1 characters) as the
    report shows it: longer than REPORT_TEXT_CAP, it is cut there and says so."""
    if isinstance(text, str) and len(text) > REPORT_TEXT_CAP:
        return text[:REPORT_TEXT_CAP] + f"... [cut at {REPORT_TEXT_CAP} characters]"
    return text


class Run:
    def __init__(self, solution, seed, actions, kills, workers, freezes, sandbox=True, lease_ms=pieces.Cfg().lease_ms,
                 db_budget_mb=DB_BUDGET_MB):
        self.source, self.seed, self.actions, self.kills, self.n_workers = solution, seed, actions, kills, workers
        self.lease_ms = lease_ms  # the workers' cfg.lease_ms: a freeze past it makes a zombie
        self.sandbox = sandbox
        self.freezes = freezes
        self.rng = random.Random(seed)
        self.cluster = None
        self.jail = None
        self.procs = []
        self.workers = []
        self.done = {"kills": 0, "freezes": 0, "db_restarts": 0, "zombies": 0}
        self.hold = None   # pending actions armed with a hold (start_freeze), and until when
        self._admin = None  # the run's own connection (admin)
        self.gave_up = []  # the freezes that found no taker: their action as it was then
        self.db_budget_mb = db_budget_mb
        self.walls = {"locks": 0, "disk": 0}   # the walls the learner's code reached (guard)
        self.db_peak_bytes = 0                 # the lab's database at its largest, as the guard saw it

    # -- the parts ----------------------------------------------------------

    def start(self):
        self.cluster = pg.Cluster()
        self.cluster.start()
        self.cluster.create_schema()
        # The run's clock starts here, for the workers (monotonic) and for the
        # database's record of the claims (wall clock, read at the same moment).
        self.t0, t0_wall = time.monotonic(), time.time()
        self.learner_roles = [worker_name(i) for i in range(self.n_workers)] + [RECEIVER, *fairness.ROLES]
        self.cluster.create_audit(self.learner_roles, t0_wall)
        # The learner's code sees the run's sockets and its own file, nothing else
        # of the run's (not the provider's log, not the cluster's files).
        learner = os.path.join(self.cluster.root, "learner")
        self.solution = jail.readable_copy(self.source, learner)
        self.jail = jail.Jail([learner, self.cluster.sockets], use=self.sandbox)
        # The receiver's socket is made here and handed to it: the sandbox cannot
        # make one where the provider, outside, can reach it.
        hooks = os.path.join(self.cluster.sockets, "receiver.sock")
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
            listener.bind(hooks)
            listener.listen(64)
            receiver = subprocess.Popen(
                self.jail.argv([sys.executable, os.path.join(HERE, "receiver.py"), "--solution", self.solution,
                                "--dsn", self.cluster.dsn_as(RECEIVER), "--listen-fd", str(listener.fileno()),
                                "--password-stdin"]),
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                pass_fds=[listener.fileno()])
            hand_password(receiver, self.cluster.password(RECEIVER))
        self.procs.append(receiver)
        first_line(receiver, "the webhook receiver")
        self.log_file = os.path.join(self.cluster.root, "provider.log")
        # The provider: the run's own calls (holds, the log, the tally) on loopback,
        # which the sandbox cannot reach; the learner's (send, lookup) on a socket.
        learner_socket = os.path.join(self.cluster.sockets, "provider.sock")
        provider = subprocess.Popen(
            ["node", os.path.join(HERE, "provider.mjs"), "--seed", str(self.seed), "--webhook-socket", hooks,
             "--socket", learner_socket, "--log", self.log_file],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.procs.append(provider)
        self.provider_url = first_line(provider, "the provider")
        self.learner_provider = f"unix:{learner_socket}"
        self.enqueue()
        self.workers = [Worker(self, worker_name(i)) for i in range(self.n_workers)]

    def enqueue(self):
        stores = [f"store-{s:03}" for s in range(STORES)]
        with psycopg.connect(self.cluster.dsn, autocommit=True) as admin:
            admin.cursor().executemany("INSERT INTO stores (store, last_served_ms) VALUES (%s, 0)", [(s,) for s in stores])
            admin.cursor().executemany(
                "INSERT INTO actions (id, store, phone, body, created_ms) VALUES (%s, %s, %s, %s, 0)",
                [(a, self.rng.choice(stores), f"+1555{a:07}", f"Your order {a} has shipped.")
                 for a in range(1, self.actions + 1)])

    def stop(self):
        for w in self.workers:
            w.stop()
        stop_all(self.procs)
        if self._admin is not None:
            self._admin.close()
            self._admin = None
        if self.cluster:
            self.cluster.close()
            # Whatever a kill at a sandbox's start left orphaned names the run's folder;
            # whatever the learner's code left runs as the run's sandbox uid.
            jail.sweep(self.cluster.root)
            if self.jail is not None:
                jail.kill_uid(self.jail.uid)

    # -- the chaos ----------------------------------------------------------

    def admin(self, default, work):
        """`work(connection)` on the run's own autocommit connection, or `default`
        while the database cannot be reached (its crash, its restart). One
        connection, kept: the loop asks several times every POLL_S, and a new
        connection each time (a server process forked, a login) was most of the
        cluster's CPU time after the workers' own."""
        try:
            if self._admin is None or self._admin.closed or self._admin.broken:
                self._admin = None
                self._admin = psycopg.connect(self.cluster.dsn, autocommit=True, connect_timeout=2)
            return work(self._admin)
        except psycopg.OperationalError:
            if self._admin is not None:
                self._admin.close()
                self._admin = None
            return default

    def arm(self, action):
        """The provider holds back the answer to the next request for `action`."""
        http_json(f"{self.provider_url}/hold", {"action": action})

    def release(self, action):
        """The provider lets the answer it holds for `action` go (and holds no more)."""
        http_json(f"{self.provider_url}/release", {"action": action})

    def dispatched(self):
        return self.admin(None, lambda c: c.execute(
            "SELECT count(*) FROM actions WHERE state = 'dispatched'").fetchone()[0])

    def go(self):
        # The kills come at seeded random moments while work remains, a few a
        # second (so some land mid-transaction, between a commit and the send, and
        # with a request on the wire); the database crashes once, a third of the
        # way; after it, a worker that holds an action freezes past its lease and
        # wakes as a zombie once another worker has taken that action over.
        next_kill = time.monotonic() + self.rng.uniform(0.02, 0.2)
        self.next_freeze = time.monotonic()
        crash_at = max(1, self.actions // 3)
        deadline = time.monotonic() + DRAIN_TIMEOUT_S
        # No action dispatched for this long (a piece that hangs on every call,
        # say) ends the run early too.
        stall_s = 2 * self.lease_ms / 1000 + 20
        n, progress, last_n, next_stuck_check = 0, time.monotonic(), -1, time.monotonic()
        self.stopped = None
        # Where the time goes (issue 29: the same seed took 76 to 314 s): the moments
        # the phases end, on the run's clock; `phases` turns them into seconds.
        self.marks = {"start": time.monotonic()}
        next_guard = time.monotonic()
        while time.monotonic() < deadline:
            if time.monotonic() >= next_guard:
                next_guard = time.monotonic() + GUARD_EVERY_S
                wall = self.guard()
                if wall is not None:
                    self.stopped = wall
                    break
            for w in self.workers:
                if w.frozen is not None:
                    took = self.taken_over(w)
                    if took or self.give_up(w.frozen, time.monotonic(),
                                            [v.frozen["action"] for v in self.workers if v.frozen is not None]):
                        if not took:
                            self.gave_up.append(self.action_now(w.frozen))
                        self.wake(w)
                        self.done["zombies"] += took
                w.check()
            if self.hold is not None:
                self.step_freeze()
            n = self.dispatched()
            if n is None:
                time.sleep(POLL_S)
                continue
            # Freezes under way: the frozen workers, and one more while holds are armed.
            freezing = sum(w.frozen is not None for w in self.workers) + (self.hold is not None)
            if n >= self.actions and not any(w.frozen for w in self.workers):
                break
            now = time.monotonic()
            if n != last_n:
                progress, last_n = now, n
            crashes = sum(w.crashes_db_up for w in self.workers)
            if crashes >= CRASH_LIMIT:
                self.stopped = f"your code crashed {crashes} times while the database was up"
                break
            if now - progress > stall_s:
                self.stopped = f"no action was dispatched for {stall_s:g} s"
                break
            if now >= next_stuck_check:
                next_stuck_check = now + 1
                for w in self.stuck_workers():
                    w.stuck += 1
                    w.kill()
            running = [w for w in self.workers if w.frozen is None]
            if self.done["kills"] < self.kills and now >= next_kill and running:
                victim = self.rng.choice(running)
                victim.kill()
                self.done["kills"] += 1
                next_kill = now + self.rng.uniform(0.02, 0.3)
            # Freezes come after the database's crash (a crash during one would
            # end the zombie's connection, and with it the zombie), one worker at
            # least always left running to take the frozen one's action over, and
            # one set of holds at a time: arming another while one is armed left the
            # first set held for good (every run with --freezes 2 did that, until
            # nearly every action's first answer was held for the client's 1 s
            # timeout, and the run after the crash went five times slower).
            if (self.hold is None and self.done["db_restarts"] and self.done["zombies"] + freezing < self.freezes
                    and freezing < self.n_workers - 1 and now >= self.next_freeze and running):
                if not self.start_freeze():
                    self.next_freeze = now + self.rng.uniform(0.02, 0.1)
            if not self.done["db_restarts"] and n >= crash_at:
                self.marks["crash"] = time.monotonic()
                self.cluster.crash()
                time.sleep(self.rng.uniform(0.2, 1.0))
                self.cluster.start()
                self.marks["back"] = time.monotonic()
                self.done["db_restarts"] = 1
            if n * 20 >= self.actions * 19 and "most" not in self.marks:
                self.marks["most"] = time.monotonic()
            time.sleep(POLL_S)
        drained = n is not None and n >= self.actions
        self.marks["drained"] = time.monotonic()
        if self.hold is not None:  # armed, and no request came: nothing waits on it
            self.let_go(self.hold["actions"])
        # The webhooks still on their way, then the provider's final word.
        while drained and time.monotonic() < deadline and http_json(f"{self.provider_url}/pending")["undelivered"]:
            time.sleep(0.2)
        self.marks["webhooks"] = time.monotonic()
        # Nothing of the learner's may hold a lock the report's queries wait for.
        self.end_learner_sessions()
        return self.report(drained)

    def guard(self):
        """None, or why the run stops at one of its walls (GUARD_EVERY_S): a learner
        session that held a lock others wait for longer than LOCK_HOLD_S, or the lab's
        database past its budget. Then every learner session is ended and every
        worker with it, so nothing of the learner's holds the run or its report."""
        def look(c):
            held = c.execute(LOCK_HOLDERS_SQL, {"roles": self.learner_roles, "hold": LOCK_HOLD_S}).fetchone()
            return held, pg.database_bytes(c)
        got = self.admin(None, look)
        if got is None:
            return None
        held, size = got
        self.db_peak_bytes = max(self.db_peak_bytes, size)
        if held is not None:
            self.walls["locks"] += 1
            why = (f"{held[0]} held a lock for more than {LOCK_HOLD_S} s (its open transaction kept others "
                   "waiting); the run ended its session")
        elif size > self.db_budget_mb << 20:
            self.walls["disk"] += 1
            why = (f"your code grew the run's database past its budget of {self.db_budget_mb} MB "
                   f"({size / 2 ** 20:.1f} MB); the run ended its sessions")
        else:
            return None
        self.end_learner_sessions()
        return why

    def end_learner_sessions(self):
        """Every worker killed (not restarted) and every learner session ended."""
        for w in self.workers:
            if w.frozen is not None:
                w.signal(signal.SIGCONT)
            jail.kill_tree(w.proc)
            w.proc.wait()
        self.admin(None, lambda c: c.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = ANY(%s)",
            (self.learner_roles,)).fetchall())

    def phases(self):
        """The chaos run's time, split: before the database's crash, the crash and
        its recovery, from then until 95% of the actions were dispatched, the last
        5% (actions whose worker was killed wait a lease for a taker), and the
        webhooks still on their way. Seconds; a phase that did not happen is left out."""
        m, out = self.marks, {}
        order = [("start", "crash", "before_crash_s"), ("crash", "back", "database_down_s"),
                 ("back", "most", "to_95_percent_s"), ("most", "drained", "last_5_percent_s"),
                 ("drained", "webhooks", "webhooks_s")]
        for a, b, name in order:
            if a in m and b in m:
                out[name] = round(m[b] - m[a], 1)
        if "crash" not in m and "most" in m:
            out["to_95_percent_s"] = round(m["most"] - m["start"], 1)
        return out

    def stuck_workers(self):
        """Workers that have not used the database for longer than a lease, though
        running and not frozen: stuck in the learner's code (a piece that never
        returns). A working worker uses it at least every third of a lease (its
        heartbeat), and an idle one every IDLE_MS (its claim)."""
        now = time.monotonic()
        by_name = {w.name: w for w in self.workers
                   if w.frozen is None and w.proc.poll() is None and now >= w.woken_until}
        rows = self.admin([], lambda c: c.execute(
            "SELECT usename, bool_and(state <> 'active' AND state_change < now() - make_interval(secs => %s)) "
            "FROM pg_stat_activity WHERE usename = ANY(%s) GROUP BY usename",
            (self.lease_ms / 1000, list(by_name))).fetchall())
        return [by_name[name] for name, stuck in rows if stuck]

    def start_freeze(self):
        """Has the provider hold back the answer to the first request for each of a
        few pending actions (step_freeze freezes the worker that makes one, while
        it waits for that answer): True when there were any. Pending, not claimed:
        a claimed action's request has mostly left already (a claim, an intent and
        a send take a few ms), and a hold armed after it catches nothing."""
        pending = self.admin([], lambda c: [a for (a,) in c.execute(
            "SELECT id FROM actions WHERE state = 'pending' ORDER BY id")])
        if not pending:
            return False
        actions = self.rng.sample(pending, min(HOLDS_ARMED, len(pending)))
        for action in actions:
            self.arm(action)
        self.hold = {"actions": actions, "until": time.monotonic() + HOLD_WAIT_S}
        return True

    def step_freeze(self):
        """A held request: its action's owner waits for the answer, outside any
        transaction of its own, with nothing of its own on the wire. SIGSTOP it
        now, and the zombie's later writes and sends are only those its code makes
        after it wakes; the other holds are let go. Otherwise (the owner is not seen
        stopped, its wait ran out, it waits inside a transaction, which would keep
        the action's row locked, or the action is no longer its) that hold is let
        go. All are let go after HOLD_WAIT_S, and new ones armed."""
        h = self.hold
        for action in list(h["actions"]):
            if not self.holding(action):
                continue
            row = self.admin(None, lambda c: c.execute(
                "SELECT owner, epoch FROM actions WHERE id = %s AND state = 'claimed'", (action,)).fetchone())
            w = next((w for w in self.workers if row and w.name == row[0] and w.frozen is None), None)
            # Asked again once stopped: a worker whose wait ran out (its client's 1 s)
            # has moved on, to anywhere in its code.
            if w is not None and w.proc.poll() is None and w.signal(signal.SIGSTOP):
                if (w.stopped() and self.holding(action) and not self.in_transaction(w)
                        and self.still_holds(w, action, row[1])):
                    h["actions"].remove(action)
                    self.let_go(h["actions"])
                    w.frozen = {"action": action, "epoch": row[1]}
                    self.done["freezes"] += 1
                    self.next_freeze = time.monotonic() + self.rng.uniform(1.0, 5.0)
                    return
                w.signal(signal.SIGCONT)
            h["actions"].remove(action)
            self.release(action)
        if not h["actions"] or time.monotonic() >= h["until"]:
            self.let_go(h["actions"])
            self.next_freeze = time.monotonic() + self.rng.uniform(0.02, 0.1)

    def let_go(self, actions):
        """The holds on `actions` let go (an answer held goes out), and none armed."""
        for action in actions:
            self.release(action)
        self.hold = None

    def holding(self, action):
        """Whether the provider holds an answer for `action` whose client waits."""
        return http_json(f"{self.provider_url}/holding?action={action}")["holding"]

    def still_holds(self, w, action, epoch):
        """Whether `w` still has `action` claimed at `epoch` (it may have finished
        it just before the stop, and then no one ever takes it over)."""
        return self.admin(False, lambda c: c.execute(
            "SELECT 1 FROM actions WHERE id = %s AND owner = %s AND epoch = %s AND state = 'claimed'",
            (action, w.name, epoch)).fetchone() is not None)

    def in_transaction(self, w):
        """Whether `w`'s connection has a transaction open (or cannot be seen)."""
        def open_transaction(c):
            for _ in range(50):  # a statement sent just before the stop still finishes
                states = [s for (s,) in c.execute("SELECT state FROM pg_stat_activity WHERE usename = %s",
                                                  (w.name,))]
                if "active" not in states:
                    return any(s != "idle" for s in states)
                time.sleep(0.01)
            return True
        return self.admin(True, open_transaction)

    def give_up(self, frozen, now, frozen_actions=()):
        """Whether a freeze whose action nobody has taken over yet should end
        (the worker woken, no zombie made): only when the action was free to take,
        its lease over, and nothing else was, for FREEZE_GIVE_UP_S. While other
        actions wait too, a claim may rightly take them first: a fair claim takes
        the freed action only at its store's next turn, after every store served
        less recently, so a fixed wait after the lease (the lease and 20 s, before)
        gave up whenever a round of the 100 stores took longer than that (below
        5 actions a second). `frozen["free_since"]` keeps when it last started being
        the only one; `now` is on the run's monotonic clock; the actions of the other
        frozen workers (`frozen_actions`) do not count as others (two freezes a
        claim passes over would wait for each other for good)."""
        now_ms = round((now - self.t0) * 1000)
        row = self.admin(None, lambda c: c.execute(
            "SELECT bool_or(id = %(a)s), count(*) FILTER (WHERE id <> ALL(%(frozen)s)) FROM actions "
            "WHERE state = 'pending' OR (state = 'claimed' AND lease_until_ms <= %(now)s)",
            {"a": frozen["action"], "frozen": [frozen["action"], *frozen_actions], "now": now_ms}).fetchone())
        if row is None:  # the database is down: nothing can take it now
            frozen.pop("free_since", None)
            return False
        ours_free, others = bool(row[0]), row[1]
        if not ours_free or others:
            frozen.pop("free_since", None)
            return False
        frozen.setdefault("free_since", now)
        return now - frozen["free_since"] >= FREEZE_GIVE_UP_S

    def taken_over(self, w):
        """Whether another worker has claimed `w`'s action since `w` froze."""
        return self.admin(False, lambda c: c.execute(
            "SELECT epoch FROM actions WHERE id = %s", (w.frozen["action"],)).fetchone()[0] > w.frozen["epoch"])

    def action_now(self, frozen):
        """What became of a frozen worker's action that no other worker took over:
        the report shows it beside the freeze that made no zombie."""
        # Cut in the query: a learner's 1 GB state never leaves the server.
        row = self.admin(None, lambda c: c.execute(
            f"SELECT left(state, {REPORT_TEXT_CAP + 1:d}), left(owner, {REPORT_TEXT_CAP + 1:d}), epoch, lease_until_ms"
            " FROM actions WHERE id = %s", (frozen["action"],)).fetchone())
        now_ms = round((time.monotonic() - self.t0) * 1000)
        if row:
            row = (capped(row[0]), capped(row[1]), *row[2:])
        return {"action": frozen["action"], "epoch_frozen": frozen["epoch"], "at_ms": now_ms,
                **(dict(zip(("state", "owner", "epoch", "lease_until_ms"), row)) if row else {"state": None})}

    def wake(self, w):
        """The held answer goes out (as from a very slow network), and `w` wakes:
        a zombie, when its action was taken over meanwhile."""
        self.release(w.frozen["action"])
        w.signal(signal.SIGCONT)
        w.woken_until = time.monotonic() + self.lease_ms / 1000
        w.frozen = None

    # -- the table ------------------------------------------------------------

    def report(self, drained):
        ids = list(range(1, self.actions + 1))
        tally = http_json(f"{self.provider_url}/tally", {"actions": ids})
        final = http_json(f"{self.provider_url}/final")
        holds = http_json(f"{self.provider_url}/holds")
        with psycopg.connect(self.cluster.dsn, autocommit=True) as c:
            outbox = dict(c.execute("SELECT action_id, status FROM outbox").fetchall())
            dispatched = c.execute("SELECT count(*) FROM actions WHERE state = 'dispatched'").fetchone()[0]
            # From the database's own record (pg.AUDIT_SQL), which the learner's
            # code cannot write: a claim is a write that makes its writer the owner
            # at a newer epoch; any other write is its writer's, and must be to an
            # action it owned (a zombie that lost its claim writes nothing).
            claim = "new_owner = who AND new_epoch > old_epoch"
            healthy_steals = c.execute(
                f"SELECT count(*) FROM audit.writes WHERE op = 'UPDATE' AND {claim} AND old_state = 'claimed' "
                "AND old_lease_until_ms > at_ms + %s", (LEASE_SLACK_MS,)).fetchone()[0]
            foreign_writes = c.execute(
                f"SELECT count(*) FROM audit.writes WHERE op = 'UPDATE' AND NOT ({claim}) "
                "AND old_owner IS DISTINCT FROM who").fetchone()[0]
        differ = sum(1 for a, s in final.items() if outbox.get(int(a)) != s)
        crashes_db_up = sum(w.crashes_db_up for w in self.workers)
        zero = lambda name, v: {"name": name, "value": v, "must": 0, "ok": v == 0}  # noqa: E731
        rows = [
            {"name": "actions with exactly one message sent", "value": tally["exactly_one_effect"],
             "must": self.actions, "ok": tally["exactly_one_effect"] == self.actions},
            zero("actions with more than one message", tally["more_than_one_effect"]),
            zero("actions with no message", tally["no_effect"]),
            zero("sends with no lookup since the previous send", tally["resends_without_lookup"]),
            zero("outbox statuses that differ from the provider's final one", differ),
            zero("jobs claimed from a healthy worker", healthy_steals),
            zero("writes to an action by a worker that no longer held it", foreign_writes),
            zero("workers that crashed while the database was up", crashes_db_up),
            zero("workers stuck in your code for longer than a lease", sum(w.stuck for w in self.workers)),
            zero(f"sessions that held a lock others waited for longer than {LOCK_HOLD_S} s", self.walls["locks"]),
            zero(f"times the database grew past its budget of {self.db_budget_mb} MB", self.walls["disk"]),
            {"name": "actions dispatched", "value": dispatched, "must": self.actions, "ok": dispatched == self.actions},
        ]
        errors = [w.last_error for w in self.workers if w.last_error]
        return {
            "lab": "courier", "mode": "real", "seed": self.seed,
            "passed": drained and all(r["ok"] for r in rows),
            "verdict": "pass" if drained and all(r["ok"] for r in rows) else "fail",
            "sandbox": {"on": self.jail.on, **({"uid": self.jail.uid} if self.jail.uid is not None else {}),
                        **({} if self.jail.on else {"why_not": self.jail.problem})},
            "chaos": {"rows": rows, "kills": self.done["kills"], "freezes": self.done["freezes"],
                      "zombies": self.done["zombies"], **({"gave_up": self.gave_up} if self.gave_up else {}),
                      "db_restarts": self.done["db_restarts"], "seconds": round(time.monotonic() - self.t0, 1),
                      "database_peak_mb": round(self.db_peak_bytes / 2 ** 20, 1),
                      # The freezes' holds (provider.mjs /holds): at most HOLDS_ARMED at once.
                      "holds": {"most_armed": holds["most_armed"], "answers_held": holds["answers_held"]},
                      "phases": self.phases(),
                      "drained": drained, **({"crash": errors[0]} if errors else {}),
                      **({"stopped": self.stopped} if self.stopped else {})},
        }


def text(report, replay):
    c = report["chaos"]
    out = [f"courier, real run: seed {report['seed']}; {c['kills']} kills, {c['freezes']} freezes past the lease, "
           f"{c['zombies']} of them woken after a takeover, {c['db_restarts']} database crash; {c['seconds']} s"
           + ("" if c["drained"] else "; did NOT drain") + (f"; stopped early: {c['stopped']}" if "stopped" in c else ""), ""]
    sb = report["sandbox"]
    out += ["Your code ran in ./lab grade's sandbox (no network, a read-only view of its own files)." if sb["on"]
            else f"Your code ran as plain processes, NOT sandboxed: {sb['why_not']}", ""]
    for r in c["rows"]:
        out.append(f"{'ok  ' if r['ok'] else 'FAIL'} {r['name']}: {r['value']} (must be {r['must']})")
    if "crash" in c:
        out += ["", "A worker failed while the database was up:", c["crash"].rstrip()]
    if "fairness" in report:
        f = report["fairness"]
        out += [""] + ([f"FAIL fairness: {f['error']}"] if "error" in f else [fairness.text(f)])
    if "seconds" in report:
        t, ph = report["seconds"], c.get("phases", {})
        out += ["", f"time: {t['total']} s: setting up {t['setup']} s, the chaos run {t['chaos']} s ("
                + ", ".join(f"{k[:-2].replace('_', ' ')} {v} s" for k, v in ph.items()) + ")"
                + (f", fairness {t['fairness']} s" if "fairness" in t else "") + f", stopping {t['stop']} s"]
    out += ["", report["verdict"].upper() + f"; replay: {replay}"]
    return "\n".join(out)


class Exit(Exception):
    """The run ends before a report: `code` is its exit status (2: usage or a file
    that cannot run), `verdict` what its JSON line says ("error")."""

    def __init__(self, code, message, verdict="error"):
        super().__init__(message)
        self.code, self.verdict = code, verdict


class Parser(argparse.ArgumentParser):
    def error(self, message):
        raise Exit(2, f"{self.prog}: {message} (see ./lab real --help)")


def main(argv=None):
    """Every exit says why on stderr; with --format json, stdout's last line is JSON
    whatever the exit: a report (0 pass, 1 fail, 3 inconclusive), or {verdict:
    "error"} (2) or {verdict: "stopped"} (130, Ctrl+C or SIGTERM)."""
    argv = sys.argv[1:] if argv is None else argv
    caller = os.environ.pop(CALLER_DIR_ENV, "")
    caller_dir = caller if os.path.isabs(caller) else os.getcwd()
    as_json = any(a in ("--format=json",) or (a == "--format" and b == "json") for a, b in zip(argv, argv[1:] + [""]))
    ended = lambda verdict, message: print(json.dumps(  # noqa: E731
        {"lab": "courier", "mode": "real", "passed": False, "verdict": verdict, verdict: message})) if as_json else None
    try:
        return _main(argv, ended, caller_dir)
    except Exit as e:
        print(str(e), file=sys.stderr)
        ended(e.verdict, str(e))
        return e.code


def _main(argv, ended, caller_dir):
    p = Parser(
        prog="./lab real", description="The courier challenge on real parts: PostgreSQL, worker processes, "
        "SIGKILLs, a database crash. Your code runs as real processes on this machine, inside ./lab grade's "
        "sandbox (bubblewrap: no network, a read-only view of its own files) where that works here; the "
        "report says whether it did.")
    p.add_argument("file")
    p.add_argument("--seed", type=int, default=1042)
    p.add_argument("--actions", type=int, default=2000)
    p.add_argument("--kills", type=int, default=200)
    p.add_argument("--workers", type=int, default=8)
    p.add_argument("--freezes", type=int, default=2,
                   help="zombies to make: a worker frozen (SIGSTOP) while it holds an action, woken once another "
                   "worker has taken that action over (default 2)")
    p.add_argument("--lease-s", type=int, default=pieces.Cfg().lease_ms // 1000,
                   help="cfg.lease_ms given to your pieces, in seconds (default: lab.md's); a killed worker's "
                   "action waits this long, so a short lease makes a short run")
    p.add_argument("--db-budget-mb", type=int, default=DB_BUDGET_MB,
                   help=f"the lab's database may grow to this many MB; past it the run stops (default {DB_BUDGET_MB})")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.add_argument("--no-sandbox", action="store_true",
                   help="run your code as plain processes, outside the sandbox (for debugging it)")
    p.add_argument("--fairness", action="store_true",
                   help="after the chaos run, the fairness benchmark in real time (about 80 s)")
    p.add_argument("--fairness-load-s", type=float, default=fairness.LOAD_S,
                   help=f"real seconds of arrivals per fairness load (default {fairness.LOAD_S:g}; seven loads a round)")
    try:
        a = p.parse_args(argv)
    except SystemExit as e:  # --help
        return 2 if e.code else 0
    for name in ("actions", "workers"):
        if getattr(a, name) < 1:
            raise Exit(2, f"./lab real: --{name} must be at least 1")
    if a.kills < 0 or a.freezes < 0 or a.seed < 0:
        raise Exit(2, "./lab real: --seed, --kills and --freezes must not be negative")
    if not 2 <= a.lease_s <= 600:
        raise Exit(2, "./lab real: --lease-s must be between 2 and 600")
    if not 16 <= a.db_budget_mb <= 64 * 1024:
        raise Exit(2, "./lab real: --db-budget-mb must be between 16 and 65536")
    if not 1 <= a.fairness_load_s <= 60:
        raise Exit(2, "./lab real: --fairness-load-s must be between 1 and 60")
    solution = os.path.join(caller_dir, a.file)  # a.file itself when it is absolute
    if not os.path.isfile(solution):
        raise Exit(2, f"./lab real: no file {a.file}")
    solution = os.path.abspath(solution)
    with tempfile.TemporaryDirectory(prefix="delivery-lab-check-") as tmp:
        os.chmod(tmp, 0o755)
        folder = os.path.join(tmp, "learner")
        copy = jail.readable_copy(solution, folder)
        checker = jail.Jail([folder], use=not a.no_sandbox)
        try:
            check = subprocess.run(checker.argv([sys.executable, WORKER, "--check", "--solution", copy]),
                                   capture_output=True, text=True, timeout=CHECK_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            jail.sweep(tmp)
            raise Exit(2, f"./lab real: loading {solution} took longer than {CHECK_TIMEOUT_S} s (code that runs at "
                       "import and does not end?)") from None
        finally:
            jail.kill_uid(checker.uid)  # what the code at import started, wherever it went
    if check.returncode != 0:
        raise Exit(2, f"./lab real: {solution} cannot run:\n{check.stderr.strip()[-3000:]}")
    replay = (f"./lab real --seed {a.seed} --actions {a.actions} --kills {a.kills} --workers {a.workers} "
              f"--freezes {a.freezes}{f' --lease-s {a.lease_s}' if a.lease_s != p.get_default('lease_s') else ''}"
              f"{f' --db-budget-mb {a.db_budget_mb}' if a.db_budget_mb != DB_BUDGET_MB else ''}"
              f"{' --no-sandbox' if a.no_sandbox else ''}{f' --fairness --fairness-load-s {a.fairness_load_s:g}' if a.fairness else ''} {a.file}")
    run = Run(solution, a.seed, a.actions, a.kills, a.workers, a.freezes, sandbox=not a.no_sandbox,
              lease_ms=a.lease_s * 1000, db_budget_mb=a.db_budget_mb)
    # Ctrl+C and SIGTERM end the run: every process and the cluster go first.
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    started = time.monotonic()
    try:
        run.start()
        setup_s = time.monotonic() - started
        report = run.go()
        if a.fairness:
            for w in run.workers:
                w.stop()
            try:
                fair = fairness.Fairness(run.cluster, run.solution, run.jail, a.seed, run.procs, a.fairness_load_s).go()
            except fairness.FairnessError as e:
                fair = {"rows": [], "passed": False, "verdict": "fail", "error": str(e)}
            except psycopg.errors.LockNotAvailable:
                # The run's own query waited out its lock_timeout (pg.RUN_SESSION_SETTINGS).
                fair = {"rows": [], "passed": False, "verdict": "fail",
                        "error": "your code held a lock the run's own query waited on for more than "
                                 f"{pg.RUN_SESSION_SETTINGS['lock_timeout']}"}
            report["fairness"] = fair
            report["passed"] = report["passed"] and fair["passed"]
            # A fairness run that could grade nothing grades nothing: not a pass, not a
            # fail, unless the chaos run failed already.
            if report["verdict"] == "pass" and fair["verdict"] == "inconclusive":
                report["verdict"] = "inconclusive"
            elif not fair["passed"]:
                report["verdict"] = "fail"
    except KeyboardInterrupt:
        message = "./lab real: stopped; the cluster, the provider and every worker are gone"
        print(message, file=sys.stderr)
        ended("stopped", message)
        return 130
    finally:
        held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        stopping = time.monotonic()
        try:
            run.stop()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)
    report["seconds"] = {"setup": round(setup_s, 1), "chaos": report["chaos"]["seconds"],
                         **({"fairness": report["fairness"].get("seconds", 0)} if "fairness" in report else {}),
                         "stop": round(time.monotonic() - stopping, 1), "total": round(time.monotonic() - started, 1)}
    if a.format == "json":
        print(text(report, replay), file=sys.stderr)
        print(json.dumps({**report, "replay": replay}))
    else:
        print(text(report, replay))
    return EXIT_OF[report["verdict"]]


if __name__ == "__main__":
    sys.exit(main())
