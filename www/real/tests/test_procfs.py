# www/real/procfs.py (the Python side's one reader of /proc) and jail.kill_uid
# (which asks jail.mjs's killUid, through jail_command.mjs).
import os
import signal
import subprocess
import sys
import time

import jail
import procfs


def test_each_reader_sees_a_process_as_it_is():
    me = os.getpid()
    assert (me, os.getuid()) in procfs.processes()
    assert procfs.argv(me)[0] and os.path.basename(sys.executable).encode() in os.path.basename(procfs.argv(me)[0])
    shell = subprocess.Popen(["sh", "-c", "sleep 30 & wait"])
    try:
        # Until the shell's child has exec'd sleep: forked, and before its exec, it is
        # a copy of the shell (seen beside a CPU hog).
        for _ in range(1000):
            kids = procfs.descendants(shell.pid)
            if kids and procfs.argv(kids[0])[:1] == [b"sleep"]:
                break
            time.sleep(0.01)
        assert len(kids) == 1 and procfs.argv(kids[0])[:2] == [b"sleep", b"30"]
        assert shell.pid in procfs.descendants(os.getpid())  # nearest first, then theirs
        assert procfs.descendants(os.getpid()).index(shell.pid) < procfs.descendants(os.getpid()).index(kids[0])
        os.kill(shell.pid, signal.SIGSTOP)
        for _ in range(1000):
            if procfs.state(shell.pid) == "T":
                break
            time.sleep(0.01)
        assert procfs.state(shell.pid) == "T" and not procfs.is_zombie(shell.pid)
        os.kill(kids[0], signal.SIGKILL)
        os.kill(shell.pid, signal.SIGKILL)
        for _ in range(1000):  # dead, not yet reaped by us: a zombie
            if procfs.is_zombie(shell.pid):
                break
            time.sleep(0.01)
        assert procfs.state(shell.pid) == "Z" and procfs.is_zombie(shell.pid)
    finally:
        shell.kill()
        shell.wait()
    # gone: every reader answers nothing
    assert procfs.state(shell.pid) is None and procfs.is_zombie(shell.pid) and procfs.argv(shell.pid) == []
    assert procfs.descendants(shell.pid) == []


def test_kill_uid_ends_every_process_of_a_sandbox_uid_and_nothing_else():
    box = jail.Jail([])
    if os.geteuid() != 0 or not box.on:
        assert jail.kill_uid(box.uid) == 0  # no uid of its own: nothing to end
        return
    sandboxed = subprocess.Popen(box.argv(["sleep", "300"]))
    mine = subprocess.Popen(["sleep", "300"])
    try:
        left = lambda: [p for p, u in procfs.processes() if u == box.uid and not procfs.is_zombie(p)]  # noqa: E731
        for _ in range(500):
            if any(procfs.argv(p)[:1] == [b"sleep"] for p in left()):
                break
            time.sleep(0.01)
        assert left(), "the sandbox's processes should run as its uid"
        assert jail.kill_uid(box.uid) >= 1 and left() == []
        assert sandboxed.wait(timeout=10) == -signal.SIGKILL
        assert mine.poll() is None  # a process of another uid lives on
        assert jail.kill_uid(0) == 0 and mine.poll() is None  # never a uid outside the sandboxes' range
    finally:
        for p in (sandboxed, mine):
            p.kill()
            p.wait()
