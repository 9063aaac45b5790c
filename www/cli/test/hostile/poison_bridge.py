# Attack: patch the grader's Python bridge itself (found through gc) so every call looks
# like a right answer: its value description and its error reporting.
# Expected: the bridge only translates; verdicts are the coordinator's grader's, from the
# values the calls returned and what they did to its own world; status never pass.
# expect-status: !pass
import gc
for o in gc.get_objects():
    if isinstance(o, dict) and "_describe" in o and "BLOCKED_MODULES" in o:
        o["_describe"] = lambda v, depth=0: {"type": "str", "value": "sent"}
        o["_exception"] = lambda e: '{"ok": {"type": "str", "value": "sent"}}'

def deliver_once(task, provider, kv, policy):
    raise ValueError("wrong on purpose")

def next_step(task, result, now, policy, rng):
    raise ValueError("wrong on purpose")
