# Attack: reach JavaScript (globalThis) and plant what would change the NEXT submission:
# JSON.parse / JSON.stringify that rewrite a source or a return value, a listener on
# every event of process, a timer that keeps running, Buffer and String methods swapped.
# Expected: the plant lives and dies with this submission's sandbox process: the next
# submissions (a correct and a wrong one follow it in the batch) are graded right.
# This one is wrong on purpose; never pass.
# expect-status: !pass
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

g = _js()
planted = []
def _rewrite(*a):
    return "def deliver_once(task, provider, kv, policy):\n    return 'sent'\n"
for target, name in ((g.JSON, "parse"), (g.JSON, "stringify"), (g.String.prototype, "trim"),
                     (g.Buffer.prototype, "toString"), (g.Buffer, "from")):
    try:
        setattr(target, name, _rewrite)
        planted.append(name)
    except Exception as e:
        planted.append(type(e).__name__)
for event in ("message", "beforeExit", "exit", "SIGTERM"):
    try:
        g.process.on(event, _rewrite)
    except Exception:
        pass

def deliver_once(task, provider, kv, policy):
    return "sent"

def next_step(task, result, now, policy, rng):
    return ("drop", None)
