"""What Linux's /proc says about the real run's processes: the one place the
Python side reads it, as www/grader/procfs.mjs is for Node (each reader answers
None or nothing for a process that is gone). Killing a uid's processes is Node's
alone (www/grader/jail.mjs killUid, through jail_command.mjs): jail.kill_uid asks it.
"""

import os


def processes():
    """Every live process as (pid, uid): the owner of /proc/PID; zombies included."""
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                yield int(d), os.stat(f"/proc/{d}").st_uid
            except FileNotFoundError:
                pass


def _stat(pid):
    """The fields of /proc/PID/stat after the command's closing parenthesis
    (state first, then the parent's pid, ...), or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rpartition(b")")[2].split()
    except OSError:
        return None


def state(pid):
    """The one-letter state ("R", "S", "T" stopped, "Z" zombie, ...), or None."""
    fields = _stat(pid)
    return fields[0].decode() if fields else None


def is_zombie(pid):
    """Whether `pid` is dead already (gone, a zombie, or on its way out)."""
    return state(pid) in (None, "Z", "X")


def argv(pid):
    """Its command line as bytes, one per argument; [] when it is gone."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().split(b"\0")
    except OSError:
        return []


def descendants(pid):
    """Every process under `pid`, nearest first (one pass over /proc: a parent's
    children file lists only its main thread's, and learner code may fork from
    any thread)."""
    children = {}
    for p, _ in processes():
        fields = _stat(p)
        if fields and len(fields) > 1:
            children.setdefault(int(fields[1]), []).append(p)
    out, todo = [], [pid]
    while todo:
        kids = children.get(todo.pop(0), [])
        out += kids
        todo += kids
    return out
