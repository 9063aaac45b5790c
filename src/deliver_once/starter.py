# Lab: Deliver once, retry right
#
# Write the two functions below. The grader hands you the objects described in the
# lab: a task, a policy, a kv store, a provider and a seeded rng. Use only those:
# no `random`, no `time`, no globals that survive between calls.

DONE_TTL_S = 7 * 24 * 3600  # how long a "done" marker lives: seven days, in seconds


def deliver_once(task, provider, kv, policy):
    """Deliver `task` at most once, even when the queue hands it to you again.

    The dedup key is "sent:" + task.key.
      - Already marked "done"?             -> skip it: "duplicate-skipped"
      - Claim it (kv.set with nx and the claim ttl). Someone else holds it?
                                           -> "retry-later" ("duplicate-skipped" if
                                              policy.at_most_once)
      - Send once. It worked?              -> mark "done" for DONE_TTL_S: "sent"
      - It failed?                         -> release the claim: "failed"
    """
    raise NotImplementedError("deliver_once")


def next_step(task, result, now, policy, rng):
    """Decide what happens after a failed send; return a 2-tuple (action, value).

    action is one of "retry" (value: the delay in seconds), "fallback" (value: the
    channel), "dlq" (value: the reason) or "drop" (value: the reason).
      1. A permanent failure is never retried.
      2. Otherwise pick the delay: the provider's retry_after_s when it gave one,
         else full jitter drawn once from rng, never below policy.min_delay_s.
      3. Out of attempts, or the retry would land at or after expiry? Give up.
      4. Otherwise retry after the delay.
    """
    raise NotImplementedError("next_step")
