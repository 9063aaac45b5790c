# Attack: patch the grader's Python bridge itself (found through gc) so every call looks
# like a right answer: its value encoding, its error reporting, and the lab module's call.
# Expected: the bridge only translates; verdicts are the coordinator's grader's, from the
# values the calls returned and what they did to its own world (no send, no claim):
# status fail. A bridge the attack cannot find ends the load (status error), so this
# file fails the suite when the bridge's names move and the attack goes stale.
# expect-status: fail
import gc

SENT = '{"ok": {"type": "str", "value": "sent"}}'
patched = []
for o in gc.get_objects():
    if isinstance(o, dict) and "_encode" in o and "BLOCKED_MODULES" in o:
        o["_encode"] = lambda v, depth=0: '{"type":"str","value":"sent"}'
        o["_exception"] = lambda e: SENT
        patched.append("bridge")
    elif isinstance(o, dict) and callable(o.get("call")) and "Provider" in o and "KV" in o:
        o["call"] = lambda fn_name, fn, a, live: SENT
        patched.append("lab")
if sorted(set(patched)) != ["bridge", "lab"]:
    raise SystemExit(f"poison_bridge: the bridge was not found to patch ({patched})")

def deliver_once(task, provider, kv, policy):
    raise ValueError("wrong on purpose")

def next_step(task, result, now, policy, rng):
    raise ValueError("wrong on purpose")
