# Attack: reach JavaScript and break the sandbox's own messages to the coordinator:
# JSON.stringify answers bytes that are not JSON, so every frame after this is garbage.
# Expected: the coordinator parses each frame defensively: this submission ends as an
# error ("interfered with the grader"), and the coordinator goes on with the next one.
# expect-status: error
# expect-message: interfered with the grader
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
    _js().JSON.stringify = lambda *a: "\x00\x01not json{{{"
    return "sent"

def next_step(task, result, now, policy, rng):
    return ("drop", None)
