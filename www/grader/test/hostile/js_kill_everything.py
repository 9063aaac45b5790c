# Attack: reach Node's process and SIGKILL every process it can name: pids 1 to 4096,
# its parent, its process group, and -1 (everything its user may signal), hoping to hit
# the coordinator or the sandbox grading a sibling submission at the same time.
# Expected: the sandbox has its own PID namespace and session: it can only kill itself.
# This submission is an error (it ended its own Python process); the siblings graded
# at the same moment (the batch runs with --jobs 2) keep their grades.
# expect-status: error
# expect-message: ended the grader's Python process
import gc

def _js():
    """globalThis, through the finder Pyodide keeps for JavaScript modules: the
    bridge takes it off sys.meta_path, but the object lives on (Pyodide is no wall)."""
    for o in gc.get_objects():
        try:
            if type(o).__name__ == "JsFinder":
                return o.jsproxies["js"]
        except Exception:
            pass
    raise RuntimeError("no way to JavaScript found")

def deliver_once(task, provider, kv, policy):
    p = _js().process
    for pid in list(range(4096, 2, -1)) + [p.ppid, -1, -p.pid]:
        try:
            p.kill(pid, "SIGKILL")
        except Exception:
            pass
    return "sent"

def next_step(task, result, now, policy, rng):
    return ("drop", None)
