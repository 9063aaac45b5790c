# Attack: allocate memory without end.
# Expected: the interpreter's memory is capped at 512 MB (the Wasm memory maximum), so
# Python raises MemoryError inside the test; the RSS watchdog is the backstop. status fail.
# expect-status: fail
# expect-message: MemoryError
hog = []

def deliver_once(task, provider, kv, policy):
    while True:
        hog.append(bytearray(32 * 1024 * 1024))

def next_step(task, result, now, policy, rng):
    return deliver_once(task, None, None, policy)
