# Lab: The courier challenge
#
# Write the six functions below. Each call is one step: it runs to the end
# and never sleeps; to wait, return ("wait", ms). Use only the objects the
# grader passes in: no `time`, no globals that survive between calls.
#
# This starter runs, and it fails most of the tests: each body is a first
# draft with the hard parts missing.
#
# The tables (the lab creates them; you read and write rows):
#
#   actions(id INTEGER PRIMARY KEY, store TEXT, phone TEXT, body TEXT,
#           created_ms INTEGER,
#           state TEXT DEFAULT 'pending',   -- pending | claimed | dispatched
#           owner TEXT,                     -- worker holding the claim
#           epoch INTEGER DEFAULT 0,        -- +1 on every claim
#           lease_until_ms INTEGER DEFAULT 0)
#   stores(store TEXT PRIMARY KEY,
#          last_served_ms INTEGER DEFAULT 0) -- last claim of one of its actions
#   outbox(action_id INTEGER PRIMARY KEY,
#          idem_key TEXT UNIQUE,
#          attempts INTEGER DEFAULT 0,      -- sends counted before they leave
#          status TEXT DEFAULT 'sending',   -- sending | accepted | sent
#                                           --   | delivered | failed
#          message_id TEXT,
#          events_applied INTEGER DEFAULT 0) -- distinct webhook events merged
#   webhook_events(event_id TEXT PRIMARY KEY)
#
# Claimable: state = 'pending', or state = 'claimed' with
# lease_until_ms <= now_ms. In flight: state = 'claimed' with
# lease_until_ms > now_ms.


def claim(db, worker, now_ms, cfg):
    """Claim one action for `worker`; return (action_id, new_epoch) or None.

    Pick the store served least recently (ties: smaller name) among stores
    with a claimable action and fewer than cfg.in_flight_cap in flight;
    take its claimable action with the smallest id. In one transaction:
    compare-and-set on the epoch you read (owner, epoch + 1, lease until
    now_ms + cfg.lease_ms) and set the store's last_served_ms to now_ms.
    """
    # First draft: the oldest pending action anywhere, no compare-and-set.
    row = db.execute(
        "SELECT id, epoch FROM actions WHERE state = 'pending' "
        "ORDER BY id LIMIT 1"
    ).fetchone()
    if row is None:
        return None
    action_id, epoch = row
    db.execute(
        "UPDATE actions SET state = 'claimed', owner = ?, epoch = epoch + 1, "
        "lease_until_ms = ? WHERE id = ?",
        (worker, now_ms + cfg.lease_ms, action_id),
    )
    db.commit()
    return (action_id, epoch + 1)


def write_intent(db, action_id, worker, epoch):
    """Record the intent to send; return the idempotency key, or None.

    One transaction: write only while (owner, epoch) are still yours and
    the action is claimed, and add the outbox row with a key that stays
    the same for every owner and every attempt. If an earlier owner
    already wrote the row, return its key. Fenced: write nothing and
    return None.
    """
    # First draft: no fence, and a fresh key for every owner.
    key = f"action-{action_id}-{epoch}"
    db.execute(
        "INSERT INTO outbox (action_id, idem_key) VALUES (?, ?) ON CONFLICT DO NOTHING",
        (action_id, key),
    )
    db.commit()
    return key


def deliver_step(db, provider, action_id, worker, epoch, now_ms, cfg):
    """One step of delivery. Return ("wait", ms), ("done", status) or
    ("fenced", None).

    - Outbox status already past "sending": settle, done.
    - attempts > 0: look the key up first. found: merge and settle;
      not-found: send; timeout: wait cfg.recheck_ms.
    - Send: count the attempt (fenced) and commit before the request
      leaves, same key every time. accepted: merge, settle; timeout: wait.
    - Settle (fenced): state 'dispatched', lease_until_ms = now_ms.
    Any fence that fails: ("fenced", None).
    """
    # First draft: sends every time, never counts, never looks up.
    key, phone, body = db.execute(
        "SELECT o.idem_key, a.phone, a.body FROM outbox AS o "
        "JOIN actions AS a ON a.id = o.action_id WHERE o.action_id = ?",
        (action_id,),
    ).fetchone()
    answer = provider.send(key, phone, body)
    if answer["answer"] != "accepted":
        return ("wait", cfg.recheck_ms)
    db.execute(
        "UPDATE outbox SET status = 'accepted', message_id = ? "
        "WHERE action_id = ?",
        (answer["message_id"], action_id),
    )
    db.execute(
        "UPDATE actions SET state = 'dispatched' WHERE id = ?", (action_id,)
    )
    db.commit()
    return ("done", "accepted")


def merge(current, reported):
    """Return the status to keep: forward only.

    Order: sending < accepted < sent < delivered = failed. A report that
    is not strictly ahead of `current` is ignored.
    """
    # First draft: the last report wins.
    return reported


def on_webhook(db, event):
    """Apply one provider webhook (event.event_id, .key, .message_id,
    .status); return None.

    One transaction: record event.event_id (seen before: change nothing),
    merge the status into the outbox row with that key, and add 1 to its
    events_applied.
    """
    # First draft: no dedup, no merge.
    db.execute(
        "UPDATE outbox SET status = ?, events_applied = events_applied + 1 "
        "WHERE idem_key = ?",
        (event.status, event.key),
    )
    db.commit()


def heartbeat(db, action_id, worker, epoch, now_ms, cfg):
    """Extend the lease to now_ms + cfg.lease_ms while (owner, epoch) are
    yours and the action is claimed. Return True when it held.
    """
    # First draft: extends whoever holds the action.
    db.execute(
        "UPDATE actions SET lease_until_ms = ? WHERE id = ?",
        (now_ms + cfg.lease_ms, action_id),
    )
    db.commit()
    return True
