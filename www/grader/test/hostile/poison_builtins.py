# Attack: poison the interpreter for whoever comes next: builtins (isinstance, len, str,
# print), the random module, json, sys.settrace / sys.setprofile, sys.meta_path and
# sys.modules, so the next submission in the batch would be graded wrongly.
# Expected: this submission fails; the next one gets a fresh interpreter and is graded
# right (the test puts a correct and a wrong submission after it).
# expect-status: !pass
import builtins, json, random, sys
builtins.isinstance = lambda *a: False
builtins.len = lambda x: 0
builtins.print = lambda *a, **k: None
random.random = lambda: 0.0
random.uniform = lambda a, b: a
random.seed(0)
json.dumps = lambda *a, **k: '{"ok": {"type": "str", "value": "sent"}}'
json.loads = lambda *a, **k: {}
def tracer(frame, event, arg):
    return tracer
sys.settrace(tracer)
sys.setprofile(lambda *a: None)
sys.meta_path.clear()
for name in list(sys.modules):
    if name.startswith("delivery_lab"):
        sys.modules[name] = None

def deliver_once(task, provider, kv, policy):
    return "sent"

def next_step(task, result, now, policy, rng):
    return ("drop", None)
