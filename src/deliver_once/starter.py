# Lab: Deliver once, retry right
#
# Write the two functions below. Use only the objects the grader
# passes in (task, policy, kv, provider, rng): no `random`, no
# `time`, no globals that survive between calls.

DONE_TTL_S = 7 * 24 * 3600  # a "done" marker lives seven days


def deliver_once(task, provider, kv, policy):
    """Deliver `task` once, even when the queue hands it out again.

    Use the key "sent:" + task.key.
    - Already "done"? Skip it: return "duplicate-skipped".
    - Claim the key (kv.set with nx and the claim's ttl). If another
      worker holds it: "retry-later" ("duplicate-skipped" when
      policy.at_most_once).
    - Send once. Success: mark "done" for DONE_TTL_S, return "sent".
      Failure: release the claim, return "failed".
    """
    raise NotImplementedError("deliver_once")


def next_step(task, result, now, policy, rng):
    """After a failed send, return a 2-tuple (action, value).

    action: "retry" (value: delay in seconds), "fallback" (value:
    the channel), "dlq" (value: the reason) or "drop" (the reason).
    1. A permanent failure is never retried.
    2. Pick the delay: the provider's retry_after_s if it sent one,
       else full jitter, one draw from rng, at least min_delay_s.
    3. Last attempt, or the retry would land at or after expiry?
       Give up.
    4. Otherwise retry after the delay.
    """
    raise NotImplementedError("next_step")
