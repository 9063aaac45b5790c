# Reference solution for "Deliver once, retry right".

DONE_TTL_S = 7 * 24 * 3600  # 604800 s: how long a "done" marker lives


def deliver_once(task, provider, kv, policy):
    key = "sent:" + task.key
    # Delivered before: the phone must not buzz twice.
    if kv.get(key) == "done":
        return "duplicate-skipped"
    # Another worker holds the claim. Bulk may be lost, never doubled.
    if not kv.set(key, "sending", ttl=policy.claim_ttl_s, nx=True):
        if policy.at_most_once:
            return "duplicate-skipped"
        return "retry-later"
    result = provider.send(task)
    if result.ok:
        kv.set(key, "done", ttl=DONE_TTL_S)
        return "sent"
    # Free the claim so that a retry can take it.
    kv.delete(key)
    return "failed"


def next_step(task, result, now, policy, rng):
    # Retrying cannot help a permanent failure: no draw.
    if result.permanent:
        if task.fallback is not None:
            return ("fallback", task.fallback)
        return ("dlq", result.reason)

    if result.retry_after_s is not None:
        # The provider said when (0 counts).
        delay = result.retry_after_s
    else:
        # Full jitter: exactly one draw, even if we then give up.
        cap = policy.base_delay_s * 2 ** task.attempt
        delay = max(policy.min_delay_s, rng.uniform(0, cap))

    last_attempt = task.attempt + 1 >= policy.max_attempts
    too_late = now + delay >= task.expires_at
    if last_attempt or too_late:
        if task.kind == "bulk":
            return ("drop", "expired or out of attempts")
        if task.fallback is not None:
            return ("fallback", task.fallback)
        return ("dlq", "retries exhausted")

    return ("retry", delay)
