# Wrong solutions for "The courier challenge", built from reference.py.
#
# Each mutant is a list of (old, new) replacements applied in order with
# str.replace(old, new, 1) to the text of reference.py. Every `old` occurs in
# reference.py exactly once, and exactly once in the text it is applied to.
# `caught_by` names the test meant to catch it (it may fail others too):
# www/host/test/courier.test.mjs grades every mutant and checks that test fails.
# Run this file to check that every mutant applies and compiles.

# The in-flight cap checked on the claim's one pick only, after its query (None
# when that store is full), instead of in the query: two mutants' shared edits.
_CAP_ON_THE_PICK = (
            (
                "               SELECT a.id, a.epoch, a.store\n",
                "               SELECT a.id, a.epoch, a.store, COALESCE(b.n, 0)\n",
            ),
            (
                "            (now_ms, now_ms, cfg.in_flight_cap),",
                "            (now_ms, now_ms),",
            ),
            (
                "        action_id, seen_epoch, store = row\n",
                "        action_id, seen_epoch, store, in_flight = row\n"
                "        if in_flight >= cfg.in_flight_cap:\n"
                "            return None  # its store is full: wait for a free slot\n",
            ),
)

MUTANTS = [
    {
        "name": "resend-without-lookup",
        "mistake": "After an earlier attempt it sends again without first looking "
        "the key up.",
        "replace": [
            ("        if attempts > 0:\n", "        if False:  # sending is enough\n"),
        ],
        "caught_by": "chaos run: 2,000 actions, 200 kills, a database restart",
    },
    {
        "name": "new-key-on-resend",
        "mistake": "Every new owner uses a key that includes its epoch, so the "
        "provider cannot recognise a resend of the same action.",
        "replace": [
            (
                "        key, attempts, status, phone, body = row\n",
                "        key, attempts, status, phone, body = row\n"
                '        key = f"{key}-{epoch}"  # one key per owner\n',
            ),
        ],
        "caught_by": "chaos run: 2,000 actions, 200 kills, a database restart",
    },
    {
        "name": "intent-outside-cas",
        "mistake": "The outbox row is inserted and committed in its own "
        "transaction before the compare-and-set, so a fenced worker still "
        "writes it.",
        "replace": [
            (
                "        db.execute(\n"
                '            "INSERT INTO outbox (action_id, idem_key) '
                'VALUES (?, ?) ON CONFLICT DO NOTHING",\n'
                "            (action_id, key),\n"
                "        )\n",
                "",
            ),
            (
                "        # The fence: matches only while the claim is still ours.",
                "        db.execute(\n"
                '            "INSERT INTO outbox (action_id, idem_key) '
                'VALUES (?, ?) ON CONFLICT DO NOTHING",\n'
                "            (action_id, key),\n"
                "        )\n"
                "        db.commit()\n"
                "        # The fence: matches only while the claim is still ours.",
            ),
        ],
        "caught_by": "a fenced write_intent writes nothing",
    },
    {
        "name": "attempt-after-send",
        "mistake": "The attempt is counted after provider.send returns, so a "
        "crash in between leaves attempts at 0 and the next owner sends "
        "without a lookup.",
        "replace": [
            (
                "        # Count the attempt, committed, before the request leaves:",
                "        answer = provider.send(key, phone, body)\n"
                "        # Count the attempt, committed, before the request leaves:",
            ),
            (
                "        db.commit()\n"
                "        answer = provider.send(key, phone, body)\n",
                "        db.commit()\n",
            ),
        ],
        "caught_by": "a send killed on the wire leaves its attempt counted",
    },
    {
        "name": "no-epoch-fence",
        "mistake": "Writes check only the action id, so a zombie past its lease "
        "still writes the intent, counts attempts, settles and extends the "
        "lease.",
        "replace": [
            (
                '"""UPDATE actions SET owner = owner\n'
                "               WHERE id = ? AND owner = ? AND epoch = ? "
                "AND state = 'claimed'\"\"\",\n"
                "            (action_id, worker, epoch),",
                '"""UPDATE actions SET owner = owner WHERE id = ?""",\n'
                "            (action_id,),",
            ),
            (
                "           WHERE id = ? AND owner = ? AND epoch = ?\"\"\",\n"
                "        (now_ms, action_id, worker, epoch),",
                "           WHERE id = ?\"\"\",\n"
                "        (now_ms, action_id),",
            ),
            (
                "               WHERE action_id = ? AND EXISTS (\n"
                "                 SELECT 1 FROM actions\n"
                "                 WHERE id = ? AND owner = ? AND epoch = ?)\"\"\",\n"
                "            (action_id, action_id, worker, epoch),",
                "               WHERE action_id = ?\"\"\",\n"
                "            (action_id,),",
            ),
            (
                '"""UPDATE actions SET lease_until_ms = ?\n'
                "               WHERE id = ? AND owner = ? AND epoch = ? "
                "AND state = 'claimed'\"\"\",\n"
                "            (now_ms + cfg.lease_ms, action_id, worker, epoch),",
                '"""UPDATE actions SET lease_until_ms = ? WHERE id = ?""",\n'
                "            (now_ms + cfg.lease_ms, action_id),",
            ),
        ],
        "caught_by": "a zombie's deliver_step sends nothing",
    },
    {
        "name": "no-webhook-dedup",
        "mistake": "The event id is recorded but never checked, so a duplicate "
        "webhook is merged and counted again.",
        "replace": [
            ("        if cur.rowcount == 0:\n            db.rollback()\n"
             "            return None\n", ""),
        ],
        "caught_by": "a duplicate webhook is a no-op",
    },
    {
        "name": "backwards-merge",
        "mistake": "merge returns whatever was reported last, so a late or "
        "out-of-order report moves the status backwards.",
        "replace": [
            (
                "    if _RANK.get(reported, -1) > _RANK.get(current, -1):\n"
                "        return reported\n"
                "    return current\n",
                "    return reported\n",
            ),
        ],
        "caught_by": "merge only moves forward",
    },
    {
        "name": "fifo-claim",
        "mistake": "claim takes the oldest claimable action in the whole table, "
        "ignoring stores and the in-flight cap.",
        "replace": [
            (
                '            """WITH busy AS (\n'
                "                 SELECT store, COUNT(*) AS n FROM actions\n"
                "                 WHERE state = 'claimed' AND lease_until_ms > ?\n"
                "                 GROUP BY store)\n"
                "               SELECT a.id, a.epoch, a.store\n"
                "               FROM actions AS a\n"
                "               LEFT JOIN stores AS s ON s.store = a.store\n"
                "               LEFT JOIN busy AS b ON b.store = a.store\n",
                '            """SELECT a.id, a.epoch, a.store\n'
                "               FROM actions AS a\n",
            ),
            (
                "                 AND COALESCE(b.n, 0) < ?\n"
                "               ORDER BY COALESCE(s.last_served_ms, 0), a.store, "
                "a.id\n",
                "               ORDER BY a.id\n",
            ),
            (
                "            (now_ms, now_ms, cfg.in_flight_cap),",
                "            (now_ms,),",
            ),
        ],
        "caught_by": "fairness run: one store at 10x among 100",
    },
    {
        "name": "claim-ignores-last-served",
        "mistake": "claim orders the stores by name instead of by last_served_ms, "
        "so the first store by name that has work (store-000, the noisy one in the "
        "fairness run) is served first whenever it is under the cap.",
        "replace": [
            (
                "               ORDER BY COALESCE(s.last_served_ms, 0), a.store, a.id\n",
                "               ORDER BY a.store, a.id\n",
            ),
        ],
        "caught_by": "claim serves the store that waited longest",
    },
    {
        "name": "cap-on-the-first-pick-only",
        "mistake": "claim picks the least recently served store's oldest action "
        "first and checks the in-flight cap on that one only: when its store is "
        "at the cap it returns None instead of going on to the next store.",
        "replace": [
            ("                 AND COALESCE(b.n, 0) < ?\n", ""),
            *_CAP_ON_THE_PICK,
        ],
        "caught_by": "claim skips a store at the in-flight cap",
    },
    {
        "name": "cap-on-the-oldest-only",
        "mistake": "claim takes the oldest action in the whole table, whatever its "
        "store, and checks the in-flight cap on that one only: when its store is at "
        "the cap it returns None, so one store's burst holds every other store back.",
        "replace": [
            (
                "                 AND COALESCE(b.n, 0) < ?\n"
                "               ORDER BY COALESCE(s.last_served_ms, 0), a.store, "
                "a.id\n",
                "               ORDER BY a.id\n",
            ),
            *_CAP_ON_THE_PICK,
        ],
        "caught_by": "claim serves the store that waited longest",
    },
    {
        "name": "no-heartbeat",
        "mistake": "heartbeat reports success without extending the lease, so a "
        "slow but healthy worker loses its job.",
        "replace": [
            (
                "        # Extends only our own claim: after a takeover this matches "
                "nothing.\n",
                "        return True  # the lease is long enough\n",
            ),
        ],
        "caught_by": "a heartbeat extends its own lease",
    },
    {
        "name": "claim-ignores-expired-lease",
        "mistake": "claim only takes pending actions, so an action whose owner "
        "died or froze is never picked up again.",
        "replace": [
            (
                "               WHERE (a.state = 'pending'\n"
                "                      OR (a.state = 'claimed' AND "
                "a.lease_until_ms <= ?))\n",
                "               WHERE a.state = 'pending'\n",
            ),
            (
                "            (now_ms, now_ms, cfg.in_flight_cap),",
                "            (now_ms, cfg.in_flight_cap),",
            ),
        ],
        "caught_by": "claim takes over an expired lease at the next epoch",
    },
    {
        "name": "claim-keeps-epoch",
        "mistake": "claim takes over an action without bumping its epoch, so the "
        "previous owner's fence still holds.",
        "replace": [
            ("owner = ?, epoch = epoch + 1,", "owner = ?, epoch = epoch,"),
            ("return (action_id, seen_epoch + 1)", "return (action_id, seen_epoch)"),
        ],
        "caught_by": "claim takes over an expired lease at the next epoch",
    },
    {
        "name": "cap-ignored",
        "mistake": "claim never counts a store's actions in flight, so a store "
        "that was served long ago gets every free worker.",
        "replace": [
            ("                 AND COALESCE(b.n, 0) < ?\n", ""),
            (
                "            (now_ms, now_ms, cfg.in_flight_cap),",
                "            (now_ms, now_ms),",
            ),
        ],
        "caught_by": "claim skips a store at the in-flight cap",
    },
    {
        "name": "failed-on-timeout",
        "mistake": "A send that times out is recorded as failed and settled, "
        "although it may have gone out.",
        "replace": [
            (
                "        # Timeout: it may or may not have gone out. Ask again later.\n"
                '        return ("wait", cfg.recheck_ms)\n',
                "        # Timeout: the send failed.\n"
                "        return _settle(\n"
                '            db, action_id, worker, epoch, now_ms, "failed", None\n'
                "        )\n",
            ),
        ],
        "caught_by": "a send that times out means wait",
    },
    {
        "name": "not-found-means-failed",
        "mistake": "A lookup that answers not-found after an attempt is taken as "
        "a lost message and settled as failed, though the lookup may lag.",
        "replace": [
            (
                "            # A definite not-found: resending with the same key is "
                "safe.\n",
                "            return _settle(  # not there: the message was lost\n"
                '                db, action_id, worker, epoch, now_ms, "failed", None\n'
                "            )\n",
            ),
        ],
        "caught_by": "after an unknown send, look the key up before sending again",
    },
    {
        "name": "webhook-event-own-transaction",
        "mistake": "The webhook's event id is committed before the merge, so a "
        "crash in between marks the event as seen and loses its status.",
        "replace": [
            (
                "        row = db.execute(\n"
                '            "SELECT status FROM outbox WHERE idem_key = ?", '
                "(event.key,)\n",
                "        db.commit()  # remember the event first\n"
                "        row = db.execute(\n"
                '            "SELECT status FROM outbox WHERE idem_key = ?", '
                "(event.key,)\n",
            ),
        ],
        "caught_by": "a webhook is recorded and merged all or nothing",
    },
    {
        "name": "heartbeat-owner-only",
        "mistake": "The heartbeat is fenced on the owner but not on the epoch, so "
        "a worker that lost its claim and took it again extends the lease with "
        "its old epoch.",
        "replace": [
            (
                "               WHERE id = ? AND owner = ? AND epoch = ? AND state = 'claimed'\"\"\",\n"
                "            (now_ms + cfg.lease_ms, action_id, worker, epoch),\n",
                "               WHERE id = ? AND owner = ? AND state = 'claimed'\"\"\",\n"
                "            (now_ms + cfg.lease_ms, action_id, worker),\n",
            ),
        ],
        "caught_by": "a heartbeat at an older epoch of the same worker extends nothing",
    },
    {
        "name": "intent-owner-only",
        "mistake": "write_intent's compare-and-set checks the owner but not the "
        "epoch.",
        "replace": [
            (
                "               WHERE id = ? AND owner = ? AND epoch = ? AND state = 'claimed'\"\"\",\n"
                "            (action_id, worker, epoch),\n",
                "               WHERE id = ? AND owner = ? AND state = 'claimed'\"\"\",\n"
                "            (action_id, worker),\n",
            ),
        ],
        "caught_by": "write_intent at an older epoch of the same worker writes nothing",
    },
    {
        "name": "attempt-owner-only",
        "mistake": "The attempt is counted under a fence on the owner alone, so "
        "an older epoch of the same worker still counts and sends.",
        "replace": [
            (
                "                 WHERE id = ? AND owner = ? AND epoch = ?)\"\"\",\n"
                "            (action_id, action_id, worker, epoch),\n",
                "                 WHERE id = ? AND owner = ?)\"\"\",\n"
                "            (action_id, action_id, worker),\n",
            ),
        ],
        "caught_by": "deliver_step at an older epoch of the same worker counts and sends nothing",
    },
    {
        "name": "settle-unfenced",
        "mistake": "The settle releases the action without checking the fence, so "
        "a worker that lost the claim marks it dispatched.",
        "replace": [
            (
                "           WHERE id = ? AND owner = ? AND epoch = ?\"\"\",\n"
                "        (now_ms, action_id, worker, epoch),\n",
                "           WHERE id = ?\"\"\",\n"
                "        (now_ms, action_id),\n",
            ),
        ],
        "caught_by": "a settle at an older epoch of the same worker changes nothing",
    },
    {
        "name": "cap-counts-expired",
        "mistake": "Leases that ran out still count toward the in-flight cap, so "
        "a store whose workers died is never claimed again.",
        "replace": [
            (
                "                 WHERE state = 'claimed' AND lease_until_ms > ?\n",
                "                 WHERE state = 'claimed'\n",
            ),
            (
                "            (now_ms, now_ms, cfg.in_flight_cap),\n",
                "            (now_ms, cfg.in_flight_cap),\n",
            ),
        ],
        "caught_by": "claim counts only live leases toward the in-flight cap",
    },
    {
        "name": "tie-by-action-id",
        "mistake": "Stores served at the same time are ordered by action id "
        "instead of by store name.",
        "replace": [
            (
                "               ORDER BY COALESCE(s.last_served_ms, 0), a.store, a.id\n",
                "               ORDER BY COALESCE(s.last_served_ms, 0), a.id\n",
            ),
        ],
        "caught_by": "claim breaks a tie between stores by store name",
    },
    {
        "name": "failed-beats-delivered",
        "mistake": "merge ranks failed above delivered, so a late failed replaces "
        "a delivered message.",
        "replace": [
            ('"delivered": 3, "failed": 3}', '"delivered": 3, "failed": 4}'),
        ],
        "caught_by": "merge keeps delivered when a late failed comes",
    },
    {
        "name": "claim-lease-ends-now-live",
        "mistake": "claim takes over a lease only once it has ended before now_ms "
        "(lease_until_ms < now_ms), so a lease that ends exactly now is left alone.",
        "replace": [
            (
                "OR (a.state = 'claimed' AND a.lease_until_ms <= ?))",
                "OR (a.state = 'claimed' AND a.lease_until_ms < ?))",
            ),
            (
                "OR (state = 'claimed' AND lease_until_ms <= ?))",
                "OR (state = 'claimed' AND lease_until_ms < ?))",
            ),
        ],
        "caught_by": "claim takes over a lease that ends exactly now",
    },
    {
        "name": "cap-counts-lease-ending-now",
        "mistake": "The in-flight count takes a lease that ends exactly now as "
        "live (lease_until_ms >= now_ms).",
        "replace": [
            (
                "WHERE state = 'claimed' AND lease_until_ms > ?\n",
                "WHERE state = 'claimed' AND lease_until_ms >= ?\n",
            ),
        ],
        "caught_by": "claim does not count a lease that ends exactly now toward "
        "the in-flight cap",
    },
    {
        "name": "claim-oldest-created",
        "mistake": "In the chosen store, claim takes the action created first "
        "instead of the one with the smallest id.",
        "replace": [
            (
                "ORDER BY COALESCE(s.last_served_ms, 0), a.store, a.id\n",
                "ORDER BY COALESCE(s.last_served_ms, 0), a.store, a.created_ms\n",
            ),
        ],
        "caught_by": "claim takes the smallest id, whatever the order of creation",
    },
    {
        "name": "claim-lost-race-left-open",
        "mistake": "A claim whose compare-and-set matched nothing (another worker "
        "claimed the action since the SELECT) returns None with its transaction "
        "still open.",
        "replace": [
            (
                "        if cur.rowcount != 1:\n"
                "            db.rollback()\n"
                "            return None  # lost a race: the next step tries again\n",
                "        if cur.rowcount != 1:\n"
                "            return None  # lost a race: the next step tries again\n",
            ),
        ],
        "caught_by": "a claim that loses a race to another worker changes nothing "
        "and ends its transaction",
    },
    {
        "name": "claim-without-compare-and-set",
        "mistake": "claim updates the action it read by id alone, so a worker that "
        "lost the race overwrites the winner's claim.",
        "replace": [
            (
                "               WHERE id = ? AND epoch = ?\n"
                "                 AND (state = 'pending'\n"
                "                      OR (state = 'claimed' AND lease_until_ms <= ?))\"\"\",\n"
                "            (worker, now_ms + cfg.lease_ms, action_id, seen_epoch, now_ms),\n",
                "               WHERE id = ?\"\"\",\n"
                "            (worker, now_ms + cfg.lease_ms, action_id),\n",
            ),
        ],
        "caught_by": "a claim that loses a race to another worker changes nothing "
        "and ends its transaction",
    },
    {
        "name": "intent-computed-key",
        "mistake": "write_intent returns the key it computed, not the one an "
        "earlier owner's row holds.",
        "replace": [
            (
                "        # A previous owner may have written the intent: its row stands.\n"
                "        (key,) = db.execute(\n"
                '            "SELECT idem_key FROM outbox WHERE action_id = ?", (action_id,)\n'
                "        ).fetchone()\n",
                "",
            ),
        ],
        "caught_by": "write_intent returns the key stored in the outbox, not one it "
        "makes up",
    },
    {
        "name": "accepted-not-settled",
        "mistake": "deliver_step settles only on sent, delivered or failed; an "
        "accepted already recorded is looked up again.",
        "replace": [
            (
                '        if status != "sending":\n',
                '        if status in ("sent", "delivered", "failed"):\n',
            ),
        ],
        "caught_by": "an 'accepted' already recorded settles without the provider",
    },
    {
        "name": "found-failed-resends",
        "mistake": "A lookup that finds the message failed is taken as a reason to "
        "send again, instead of merging failed and settling.",
        "replace": [
            (
                '            if seen["answer"] == "found":\n',
                '            if seen["answer"] == "found" and seen["status"] != "failed":\n',
            ),
            (
                '            if seen["answer"] != "not-found":\n',
                '            if seen["answer"] == "timeout":\n',
            ),
        ],
        "caught_by": "a lookup that finds 'failed' settles as failed without sending",
    },
    {
        "name": "merge-forward-only-when-final",
        "mistake": "merge keeps a final status but otherwise takes whatever is "
        "reported, so a late accepted moves sent back.",
        "replace": [
            (
                "    if _RANK.get(reported, -1) > _RANK.get(current, -1):\n"
                "        return reported\n"
                "    return current\n",
                "    if _RANK.get(current, -1) == 3:\n"
                "        return current\n"
                "    return reported\n",
            ),
        ],
        "caught_by": "merge keeps sent when a late accepted comes",
    },
    {
        "name": "heartbeat-by-owner-and-epoch",
        "mistake": "heartbeat extends every claim of the worker at that epoch, not "
        "the action it names, and so revives other leases that ran out.",
        "replace": [
            (
                '            """UPDATE actions SET lease_until_ms = ?\n'
                "               WHERE id = ? AND owner = ? AND epoch = ? AND state = 'claimed'\"\"\",\n"
                "            (now_ms + cfg.lease_ms, action_id, worker, epoch),\n"
                "        )\n"
                "        if cur.rowcount != 1:\n",
                '            """UPDATE actions SET lease_until_ms = ?\n'
                "               WHERE owner = ? AND epoch = ? AND state = 'claimed'\"\"\",\n"
                "            (now_ms + cfg.lease_ms, worker, epoch),\n"
                "        )\n"
                "        if cur.rowcount == 0:\n",
            ),
        ],
        "caught_by": "a heartbeat extends only the action it names",
    },
    {
        "name": "heartbeat-refuses-expired",
        "mistake": "heartbeat refuses a lease that has run out even when nobody "
        "took the action since.",
        "replace": [
            (
                "               WHERE id = ? AND owner = ? AND epoch = ? AND state = 'claimed'\"\"\",\n"
                "            (now_ms + cfg.lease_ms, action_id, worker, epoch),\n",
                "               WHERE id = ? AND owner = ? AND epoch = ? AND state = 'claimed'\n"
                "                 AND lease_until_ms > ?\"\"\",\n"
                "            (now_ms + cfg.lease_ms, action_id, worker, epoch, now_ms),\n",
            ),
        ],
        "caught_by": "a heartbeat after the lease ran out still holds while nobody "
        "took the action",
    },
    {
        "name": "heartbeat-bare-except",
        "mistake": "heartbeat catches everything with a bare except and returns "
        "False, so a database restart reads as a lost job (and a kill is "
        "swallowed).",
        "replace": [
            (
                "        db.commit()\n"
                "        return True\n"
                "    except Exception:\n"
                "        db.rollback()\n"
                "        raise\n",
                "        db.commit()\n"
                "        return True\n"
                "    except:  # noqa: E722\n"
                "        db.rollback()\n"
                "        return False\n",
            ),
        ],
        "caught_by": "a heartbeat during a database restart lets the error escape",
    },
]


def apply(reference_text, mutant):
    """The source of `mutant`, built from the reference's source."""
    text = reference_text
    for old, new in mutant["replace"]:
        assert reference_text.count(old) == 1, (mutant["name"], old)
        assert text.count(old) == 1, (mutant["name"], old)
        text = text.replace(old, new, 1)
    return text


if __name__ == "__main__":
    import os

    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "reference.py"), encoding="utf-8") as f:
        reference = f.read()
    names = [m["name"] for m in MUTANTS]
    assert len(names) == len(set(names)), "duplicate mutant names"
    for m in MUTANTS:
        assert m["mistake"].endswith("."), m["name"]
        assert m.get("caught_by"), f"{m['name']} names no test that must catch it"
        source = apply(reference, m)
        assert source != reference, m["name"]
        compile(source, f"<mutant {m['name']}>", "exec")
    print(f"{len(MUTANTS)} mutants apply and compile")
