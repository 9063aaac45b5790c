# Attack: unbounded recursion with the recursion limit raised, to overflow the stack.
# Expected: RecursionError (or a stack overflow that ends the interpreter); the grader
# reports the truth and carries on. Never pass.
# expect-status: !pass
import sys
sys.setrecursionlimit(10 ** 6)

def down(n):
    return down(n + 1) + 1

def deliver_once(task, provider, kv, policy):
    return down(0)

def next_step(task, result, now, policy, rng):
    return down(0)
