# Attack: an endless loop that swallows KeyboardInterrupt (and every other exception),
# so an interrupt cannot stop it.
# Expected: the coordinator kills the sandbox at the limit; status fail (timeouts).
# expect-status: fail
# expect-message: longer than
def deliver_once(task, provider, kv, policy):
    while True:
        try:
            while True:
                pass
        except BaseException:
            pass

def next_step(task, result, now, policy, rng):
    return deliver_once(task, None, None, policy)
