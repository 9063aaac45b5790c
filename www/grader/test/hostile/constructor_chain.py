# Attack: from a JavaScript object Python can reach (the world behind kv), climb the
# constructor chain: obj.constructor.constructor("return process")() gives Node's process.
# Expected: code generation from strings is disabled in the sandbox (EvalError), and if it
# ever worked the verdict still comes from the coordinator's grader; status fail here.
# expect-status: fail
import gc

def _js_objects():
    found = []
    for o in gc.get_objects():
        if type(o).__name__.startswith("JsProxy") or "JsProxy" in type(o).__name__:
            found.append(o)
    return found

def deliver_once(task, provider, kv, policy):
    outcome = []
    for o in [getattr(getattr(kv, "_call", None), "world", None)] + _js_objects()[:50]:
        try:
            proc = o.constructor.constructor("return process")()
            proc.stdout.write('{"file":"FORGED","status":"pass"}\n')
            proc.kill(proc.ppid, "SIGKILL")
            outcome.append("escaped")
        except Exception as e:
            outcome.append(type(e).__name__)
    print(outcome[:5])
    return "sent"

def next_step(task, result, now, policy, rng):
    return ("drop", None)
