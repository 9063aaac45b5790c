# Reference solution for "Deliver once, retry right".

DONE_TTL_S = 7 * 24 * 3600  # 604800 s: how long a "done" marker lives


def deliver_once(task, provider, kv, policy):
    key = "sent:" + task.key
    if kv.get(key) == "done":
        return "duplicate-skipped"          # delivered before: the phone must not buzz twice
    if not kv.set(key, "sending", ttl=policy.claim_ttl_s, nx=True):
        # Another worker holds the claim. Bulk traffic may be lost, never doubled.
        return "duplicate-skipped" if policy.at_most_once else "retry-later"
    result = provider.send(task)
    if result.ok:
        kv.set(key, "done", ttl=DONE_TTL_S)
        return "sent"
    kv.delete(key)                          # free the claim so a retry can take it
    return "failed"


def next_step(task, result, now, policy, rng):
    if result.permanent:                    # retrying cannot help: no draw
        if task.fallback is not None:
            return ("fallback", task.fallback)
        return ("dlq", result.reason)

    if result.retry_after_s is not None:    # the provider said when (0 counts)
        delay = result.retry_after_s
    else:                                   # full jitter: one draw, even if we give up
        delay = max(policy.min_delay_s, rng.uniform(0, policy.base_delay_s * 2 ** task.attempt))

    if task.attempt + 1 >= policy.max_attempts or now + delay >= task.expires_at:
        if task.kind == "bulk":
            return ("drop", "expired or out of attempts")
        if task.fallback is not None:
            return ("fallback", task.fallback)
        return ("dlq", "retries exhausted")

    return ("retry", delay)
