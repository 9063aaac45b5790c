# Reference solution for "The courier challenge".
#
# Each function is one step: it runs to the end and never blocks; a step that
# has to wait returns ("wait", ms) and is called again later. Any statement can
# fail. A kill is a BaseException and is not ours to catch; an Exception (the
# database restarting) is rolled back here and propagates, so that no half
# transaction stays open on the connection for the next step to commit.

# Forward-only order of outbox statuses; delivered and failed are both final.
_RANK = {"sending": 0, "accepted": 1, "sent": 2, "delivered": 3, "failed": 3}


def claim(db, worker, now_ms, cfg):
    try:
        # Among stores with claimable work and room under the cap, the one
        # served least recently (ties: name); in it, the oldest action.
        row = db.execute(
            """WITH busy AS (
                 SELECT store, COUNT(*) AS n FROM actions
                 WHERE state = 'claimed' AND lease_until_ms > ?
                 GROUP BY store)
               SELECT a.id, a.epoch, a.store
               FROM actions AS a
               LEFT JOIN stores AS s ON s.store = a.store
               LEFT JOIN busy AS b ON b.store = a.store
               WHERE (a.state = 'pending'
                      OR (a.state = 'claimed' AND a.lease_until_ms <= ?))
                 AND COALESCE(b.n, 0) < ?
               ORDER BY COALESCE(s.last_served_ms, 0), a.store, a.id
               LIMIT 1""",
            (now_ms, now_ms, cfg.in_flight_cap),
        ).fetchone()
        if row is None:
            return None
        action_id, seen_epoch, store = row
        # Compare-and-set on the epoch we read: if the action moved on since,
        # this matches nothing. The new epoch fences the previous owner.
        cur = db.execute(
            """UPDATE actions
               SET state = 'claimed', owner = ?, epoch = epoch + 1,
                   lease_until_ms = ?
               WHERE id = ? AND epoch = ?
                 AND (state = 'pending'
                      OR (state = 'claimed' AND lease_until_ms <= ?))""",
            (worker, now_ms + cfg.lease_ms, action_id, seen_epoch, now_ms),
        )
        if cur.rowcount != 1:
            db.rollback()
            return None  # lost a race: the next step tries again
        db.execute(
            """INSERT INTO stores (store, last_served_ms) VALUES (?, ?)
               ON CONFLICT (store) DO UPDATE
               SET last_served_ms = excluded.last_served_ms""",
            (store, now_ms),
        )
        db.commit()
        return (action_id, seen_epoch + 1)
    except Exception:
        db.rollback()
        raise


def write_intent(db, action_id, worker, epoch):
    # One key per action, whoever sends and however often: the provider
    # replays a known key instead of sending a second text.
    key = f"action-{action_id}"
    try:
        # The fence: matches only while the claim is still ours. Being a write,
        # it also opens the transaction the outbox row joins.
        cur = db.execute(
            """UPDATE actions SET owner = owner
               WHERE id = ? AND owner = ? AND epoch = ? AND state = 'claimed'""",
            (action_id, worker, epoch),
        )
        if cur.rowcount != 1:
            db.rollback()
            return None
        db.execute(
            "INSERT INTO outbox (action_id, idem_key) VALUES (?, ?) ON CONFLICT DO NOTHING",
            (action_id, key),
        )
        # A previous owner may have written the intent: its row stands.
        (key,) = db.execute(
            "SELECT idem_key FROM outbox WHERE action_id = ?", (action_id,)
        ).fetchone()
        db.commit()
        return key
    except Exception:
        db.rollback()
        raise


def _settle(db, action_id, worker, epoch, now_ms, reported, message_id):
    # One transaction: the fence, the provider's report, the release.
    cur = db.execute(
        """UPDATE actions SET state = 'dispatched', lease_until_ms = ?
           WHERE id = ? AND owner = ? AND epoch = ?""",
        (now_ms, action_id, worker, epoch),
    )
    if cur.rowcount != 1:
        db.rollback()
        return ("fenced", None)
    (status,) = db.execute(
        "SELECT status FROM outbox WHERE action_id = ?", (action_id,)
    ).fetchone()
    if reported is not None:
        status = merge(status, reported)
        db.execute(
            """UPDATE outbox SET status = ?, message_id = COALESCE(message_id, ?)
               WHERE action_id = ?""",
            (status, message_id, action_id),
        )
    db.commit()
    return ("done", status)


def deliver_step(db, provider, action_id, worker, epoch, now_ms, cfg):
    try:
        row = db.execute(
            """SELECT o.idem_key, o.attempts, o.status, a.phone, a.body
               FROM outbox AS o JOIN actions AS a ON a.id = o.action_id
               WHERE o.action_id = ?""",
            (action_id,),
        ).fetchone()
        if row is None:
            # No intent, no key to repeat safely: never send without one.
            return ("fenced", None)
        key, attempts, status, phone, body = row
        if status != "sending":
            # A webhook or an earlier owner already knows how it went.
            return _settle(db, action_id, worker, epoch, now_ms, None, None)
        if attempts > 0:
            # A request may already have left: ask before sending again.
            seen = provider.lookup(key)
            if seen["answer"] == "found":
                return _settle(
                    db, action_id, worker, epoch, now_ms,
                    seen["status"], seen["message_id"],
                )
            if seen["answer"] != "not-found":
                return ("wait", cfg.recheck_ms)  # unknown is not "no"
            # A definite not-found: resending with the same key is safe.
        # Count the attempt, committed, before the request leaves: whoever
        # comes next sees attempts > 0 and looks up first.
        cur = db.execute(
            """UPDATE outbox SET attempts = attempts + 1
               WHERE action_id = ? AND EXISTS (
                 SELECT 1 FROM actions
                 WHERE id = ? AND owner = ? AND epoch = ?)""",
            (action_id, action_id, worker, epoch),
        )
        if cur.rowcount != 1:
            db.rollback()
            return ("fenced", None)
        db.commit()
        answer = provider.send(key, phone, body)
        if answer["answer"] == "accepted":
            return _settle(
                db, action_id, worker, epoch, now_ms,
                "accepted", answer["message_id"],
            )
        # Timeout: it may or may not have gone out. Ask again later.
        return ("wait", cfg.recheck_ms)
    except Exception:
        db.rollback()
        raise


def merge(current, reported):
    # Only a report strictly ahead moves the status: "sent" after "delivered"
    # is a late echo, and the first final status wins. Unknown names rank
    # below everything and are ignored.
    if _RANK.get(reported, -1) > _RANK.get(current, -1):
        return reported
    return current


def on_webhook(db, event):
    try:
        # The event id goes in with the merge, in the same transaction: a
        # redelivered event finds its id and changes nothing.
        cur = db.execute(
            "INSERT INTO webhook_events (event_id) VALUES (?) ON CONFLICT DO NOTHING",
            (event.event_id,),
        )
        if cur.rowcount == 0:
            db.rollback()
            return None
        row = db.execute(
            "SELECT status FROM outbox WHERE idem_key = ?", (event.key,)
        ).fetchone()
        if row is not None:
            db.execute(
                """UPDATE outbox
                   SET status = ?, message_id = COALESCE(message_id, ?),
                       events_applied = events_applied + 1
                   WHERE idem_key = ?""",
                (merge(row[0], event.status), event.message_id, event.key),
            )
        db.commit()
        return None
    except Exception:
        db.rollback()
        raise


def heartbeat(db, action_id, worker, epoch, now_ms, cfg):
    try:
        # Extends only our own claim: after a takeover this matches nothing.
        cur = db.execute(
            """UPDATE actions SET lease_until_ms = ?
               WHERE id = ? AND owner = ? AND epoch = ? AND state = 'claimed'""",
            (now_ms + cfg.lease_ms, action_id, worker, epoch),
        )
        if cur.rowcount != 1:
            db.rollback()
            return False
        db.commit()
        return True
    except Exception:
        db.rollback()
        raise
