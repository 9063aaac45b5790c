# Attack: the functions raise SystemExit, KeyboardInterrupt and GeneratorExit, which
# `except Exception` in a host would not catch.
# Expected: each is contained by the bridge; the tests fail; status fail.
# expect-status: fail
calls = [0]

def deliver_once(task, provider, kv, policy):
    calls[0] += 1
    raise (SystemExit, GeneratorExit)[calls[0] % 2](1)

def next_step(task, result, now, policy, rng):
    raise KeyboardInterrupt
