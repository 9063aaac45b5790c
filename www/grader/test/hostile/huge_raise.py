# Attack: raise exceptions whose messages are 30 MB, in every test (and a 30 MB value
# returned), to make the report enormous.
# Expected: tracebacks are cut at 4000 characters in the bridge, a value over 1 MB does not
# cross to the grader, every field of a report is capped at 4096 characters, and the CLI's
# JSON line stays under 64 KB.
# expect-status: fail
def deliver_once(task, provider, kv, policy):
    raise ValueError("v" * (30 << 20))

def next_step(task, result, now, policy, rng):
    return "w" * (30 << 20)
