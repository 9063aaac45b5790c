# A correct courier solution written differently from src/courier/reference.py:
# rows by name (sqlite3.Row), the choice of store made in Python, `with db:`
# transactions, explicit BEGIN-free compare-and-sets checked by re-reading, and a
# webhook dedup that catches the primary-key violation. It must pass everything.
import sqlite3

ORDER = ["sending", "accepted", "sent", "delivered"]


def rank(status):
    if status == "failed":
        return 3
    return ORDER.index(status) if status in ORDER else -1


def merge(current, reported):
    return reported if rank(reported) > rank(current) else current


def claim(db, worker, now_ms, cfg):
    db.row_factory = sqlite3.Row
    rows = db.execute("SELECT * FROM actions WHERE state != 'dispatched'").fetchall()
    served = {r["store"]: r["last_served_ms"] for r in db.execute("SELECT * FROM stores")}
    busy = {}
    for r in rows:
        if r["state"] == "claimed" and r["lease_until_ms"] > now_ms:
            busy[r["store"]] = busy.get(r["store"], 0) + 1
    open_rows = [
        r for r in rows
        if (r["state"] == "pending" or r["lease_until_ms"] <= now_ms)
        and busy.get(r["store"], 0) < cfg.in_flight_cap
    ]
    if not open_rows:
        return None
    best = min(open_rows, key=lambda r: (served.get(r["store"], 0), r["store"], r["id"]))
    with db:
        cur = db.execute(
            "UPDATE actions SET state = 'claimed', owner = ?, epoch = ?, lease_until_ms = ? "
            "WHERE id = ? AND epoch = ?",
            (worker, best["epoch"] + 1, now_ms + cfg.lease_ms, best["id"], best["epoch"]),
        )
        if cur.rowcount == 0:
            return None
        if best["store"] in served:
            db.execute("UPDATE stores SET last_served_ms = ? WHERE store = ?", (now_ms, best["store"]))
        else:
            db.execute("INSERT INTO stores VALUES (?, ?)", (best["store"], now_ms))
    return best["id"], best["epoch"] + 1


def _ours(db, action_id, worker, epoch):
    row = db.execute(
        "SELECT 1 FROM actions WHERE id = ? AND owner = ? AND epoch = ? AND state = 'claimed'",
        (action_id, worker, epoch),
    ).fetchone()
    return row is not None


def write_intent(db, action_id, worker, epoch):
    with db:
        # The touch makes the fence a write inside this transaction.
        db.execute("UPDATE actions SET epoch = epoch WHERE id = ?", (action_id,))
        if not _ours(db, action_id, worker, epoch):
            db.rollback()
            return None
        have = db.execute("SELECT idem_key FROM outbox WHERE action_id = ?", (action_id,)).fetchone()
        if have:
            return have[0]
        key = "action-%d" % action_id
        db.execute("INSERT INTO outbox (action_id, idem_key) VALUES (?, ?)", (action_id, key))
        return key


def _settle(db, action_id, worker, epoch, now_ms, report=None, message_id=None):
    with db:
        db.execute("UPDATE actions SET epoch = epoch WHERE id = ?", (action_id,))
        if db.execute("SELECT owner, epoch FROM actions WHERE id = ?", (action_id,)).fetchone() != (worker, epoch):
            db.rollback()
            return "fenced", None
        status, mid = db.execute("SELECT status, message_id FROM outbox WHERE action_id = ?", (action_id,)).fetchone()
        if report is not None:
            status = merge(status, report)
            db.execute("UPDATE outbox SET status = ?, message_id = ? WHERE action_id = ?",
                       (status, mid if mid is not None else message_id, action_id))
        db.execute("UPDATE actions SET state = 'dispatched', lease_until_ms = ? WHERE id = ?", (now_ms, action_id))
    return "done", status


def deliver_step(db, provider, action_id, worker, epoch, now_ms, cfg):
    db.row_factory = None
    out = db.execute("SELECT idem_key, attempts, status FROM outbox WHERE action_id = ?", (action_id,)).fetchone()
    if out is None:
        return "fenced", None
    key, attempts, status = out
    if status != "sending":
        return _settle(db, action_id, worker, epoch, now_ms)
    if attempts:
        answer = provider.lookup(key)
        kind = answer["answer"]
        if kind == "timeout":
            return "wait", cfg.recheck_ms
        if kind == "found":
            return _settle(db, action_id, worker, epoch, now_ms, answer["status"], answer["message_id"])
    with db:
        db.execute("UPDATE actions SET epoch = epoch WHERE id = ?", (action_id,))
        mine = db.execute("SELECT owner = ? AND epoch = ? FROM actions WHERE id = ?", (worker, epoch, action_id)).fetchone()
        if not mine or not mine[0]:
            db.rollback()
            return "fenced", None
        db.execute("UPDATE outbox SET attempts = attempts + 1 WHERE action_id = ?", (action_id,))
    phone, body = db.execute("SELECT phone, body FROM actions WHERE id = ?", (action_id,)).fetchone()
    sent = provider.send(key, phone, body)
    if sent["answer"] != "accepted":
        return "wait", cfg.recheck_ms
    return _settle(db, action_id, worker, epoch, now_ms, "accepted", sent["message_id"])


def on_webhook(db, event):
    try:
        with db:
            db.execute("INSERT INTO webhook_events VALUES (?)", (event.event_id,))
            cur = db.cursor()
            cur.execute("SELECT status, message_id FROM outbox WHERE idem_key = ?", (event.key,))
            row = cur.fetchone()
            if row:
                db.execute(
                    "UPDATE outbox SET status = ?, message_id = ?, events_applied = events_applied + 1 "
                    "WHERE idem_key = ?",
                    (merge(row[0], event.status), row[1] or event.message_id, event.key),
                )
    except sqlite3.IntegrityError:
        pass  # seen before: `with db` rolled it back


def heartbeat(db, action_id, worker, epoch, now_ms, cfg):
    with db:
        cur = db.execute(
            "UPDATE actions SET lease_until_ms = ? WHERE id = ? AND owner = ? AND epoch = ? AND state = 'claimed'",
            (now_ms + cfg.lease_ms, action_id, worker, epoch),
        )
        return cur.rowcount == 1
