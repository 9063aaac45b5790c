# Attack: look for the expected values in the caller's frames and on the heap (gc), and
# return whatever looks like an answer.
# Expected: expected values never enter the sandbox (the grader and its cases live in the
# coordinator only); nothing is found; status fail.
# expect-status: fail
import gc, sys

def _loot():
    found = []
    f = sys._getframe(1)
    while f is not None:
        for k, v in f.f_locals.items():
            if "expect" in str(k).lower():
                found.append(v)
        f = f.f_back
    for o in gc.get_objects():
        if isinstance(o, dict) and "expected" in o:
            found.append(o["expected"])
    return found

def deliver_once(task, provider, kv, policy):
    loot = _loot()
    return loot[0] if loot else "failed"

def next_step(task, result, now, policy, rng):
    loot = _loot()
    return loot[0] if loot else ("drop", None)
