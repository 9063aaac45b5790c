# Attack: print 30 MB in every test, and at import, to make the report enormous.
# Expected: the bridge keeps 2000 characters of output per test, the engine caps every
# field of a report at 4096 characters, and the CLI's JSON line stays under 64 KB.
# expect-status: fail
print("x" * (30 << 20))

def deliver_once(task, provider, kv, policy):
    print("y" * (30 << 20))
    return "sent"

def next_step(task, result, now, policy, rng):
    print("z" * (30 << 20))
    return ("drop", None)
