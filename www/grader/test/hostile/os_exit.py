# Attack: os._exit(0) inside a test, to end the host process without cleanup.
# Expected: the interpreter dies (or the call fails); the grader reports the truth and
# the next submissions are graded by a fresh interpreter; the status is never pass.
# expect-status: !pass
import os

def deliver_once(task, provider, kv, policy):
    os._exit(0)

def next_step(task, result, now, policy, rng):
    os._exit(0)
