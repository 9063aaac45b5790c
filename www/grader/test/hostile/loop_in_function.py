# Attack: an endless loop inside deliver_once (the page interrupts it; the CLI kills the sandbox).
# Expected: the run is stopped at the time limit; status fail, the tests are reported as timeouts.
# expect-status: fail
# expect-message: longer than
DONE_TTL_S = 604800

def deliver_once(task, provider, kv, policy):
    while True:
        pass

def next_step(task, result, now, policy, rng):
    while True:
        pass
