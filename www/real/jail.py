"""The real run's learner processes (workers, the webhook receiver, the fairness
workers) in `./lab grade`'s sandbox (www/grader/jail.mjs, through jail_command.mjs):
bubblewrap with no network (they reach PostgreSQL, the provider and the provider
reaches the receiver through Unix sockets bound in), a read-only view of only the
files they need, rlimits, and under root a uid of the run's own (jail.mjs's
sandboxUid: no other sandbox, run, server or coordinator has it), which
`kill_uid` empties at the end. Where the sandbox does not work (no bubblewrap, no
user namespaces), they run as plain processes, and the run says so.
"""

import json
import os
import signal
import shutil
import subprocess
import sys

import procfs

HERE = os.path.dirname(os.path.abspath(__file__))
# The address space of each learner process (RLIMIT_AS, issue 38): ./lab grade's
# limit is writable memory (RLIMIT_DATA, 3 GB), which a shared mapping escapes (a
# worker held 4 GB through one); a Python with psycopg and the learner's pieces maps
# about 300 MB. Past it, an allocation fails in the learner's code (MemoryError,
# OSError ENOMEM), which the run counts as that worker's crash.
LEARNER_AS_BYTES = 1 << 30


class Jail:
    def __init__(self, read_paths, use=True, held=()):
        """`read_paths`: what the processes read besides /usr (the venv and
        www/real are added). `use=False` runs them unjailed (the tests of the parts).
        `held`: the uids of the run's other Jails, which this one must not share
        (two of them may have no process running at the moment this one starts)."""
        paths = sorted({sys.prefix, HERE, *read_paths})
        self.uid = None
        if not use:
            self.prefix, self.problem = [], "--no-sandbox"
            return
        out = subprocess.run(["node", os.path.join(HERE, "jail_command.mjs"), "--owner-pid", str(os.getpid()),
                              *[x for uid in held if uid is not None for x in ("--held", str(uid))],
                              "--as", str(LEARNER_AS_BYTES), *paths],
                             capture_output=True, text=True, timeout=60)
        got = json.loads(out.stdout) if out.returncode == 0 else {"problem": out.stderr.strip()[-500:], "prefix": []}
        self.problem = got["problem"]
        self.prefix = got["prefix"] if not self.problem else []
        self.uid = got.get("uid") if not self.problem else None

    @property
    def on(self):
        return bool(self.prefix)

    def argv(self, argv):
        return [*self.prefix, *argv]


def readable_copy(path, folder):
    """`path` copied into a new `folder` that a sandbox's user (its own uid, under
    root) can read, wherever the original was; the copy's path."""
    os.mkdir(folder)
    os.chmod(folder, 0o755)
    copy = shutil.copy(path, os.path.join(folder, "solution.py"))
    os.chmod(copy, 0o644)
    return copy


def inner_pid(pid, script):
    """The pid of the process running `script` under `pid` (bubblewrap's, when
    jailed; `pid` itself when not): the one SIGSTOP must reach, since stopping
    bubblewrap would not stop what runs inside it. None when not (yet) there."""
    for p in [pid, *procfs.descendants(pid)]:
        # The interpreter running the script: its argv[1] (bubblewrap's own
        # command line holds the script's path too, further along).
        argv = procfs.argv(p)
        if len(argv) > 1 and argv[1].decode(errors="replace") == script:
            return p
    return None


def kill_tree(proc):
    """SIGKILL to `proc` (a Popen) and everything under it. Not left to bubblewrap's
    --die-with-parent alone: a sandbox killed while it starts can leave its inner
    bubblewrap behind (seen here, orphaned and asleep)."""
    for p in [*procfs.descendants(proc.pid), proc.pid]:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass


def kill_uid(uid):
    """SIGKILL to every process running as `uid` (a Jail's `uid`: the run's sandbox
    uid, which jail.mjs gave it and no one else has): whatever its learner code
    left, however it got away from its parent, until none is left (jail.mjs killUid:
    a process that forked while a pass went by is caught by the next). How many
    there were."""
    if not isinstance(uid, int) or uid <= 0:
        return 0
    out = subprocess.run(["node", os.path.join(HERE, "jail_command.mjs"), "--kill-uid", str(uid)],
                         capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise RuntimeError(f"jail_command.mjs --kill-uid {uid}: {out.stderr.strip()[-500:]}")
    return json.loads(out.stdout)["killed"]


def sweep(marker):
    """SIGKILL to every process whose command line holds `marker` (a run's own
    folder): what a kill at the wrong moment left orphaned. How many there were."""
    mark, n = marker.encode(), 0
    for pid, _ in procfs.processes():
        if pid != os.getpid() and any(mark in a for a in procfs.argv(pid)):
            try:
                os.kill(pid, signal.SIGKILL)
                n += 1
            except ProcessLookupError:
                pass
    return n
