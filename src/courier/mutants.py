# Wrong solutions for "The courier challenge", built from reference.py.
#
# Each mutant is a list of (old, new) replacements applied in order with
# str.replace(old, new, 1) to the text of reference.py. Every `old` occurs in
# reference.py exactly once, and exactly once in the text it is applied to.
# `caught_by` names the test meant to catch it (it may fail others too), or the
# start of its name ("differential: claim" for "differential: claim over N worlds"):
# www/host/test/courier.test.mjs grades every mutant and checks that test fails;
# www/host/test/courier/grade-mutants.mjs grades them and prints what each fails.
# `sentence`, where there is one, quotes the sentence of lab.md the mutant breaks.
# A few entries carry `not_a_mistake`: a change a learner might write that no world
# the lab can reach tells apart from the reference (why, in its words); they are kept
# so that nobody adds them again as mistakes, and are not graded.
# Run this file to check that every mutant applies and compiles, and that every
# sentence is lab.md's.

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

    # Written from lab.md alone (issue 36): each breaks the one sentence it quotes
    # ("sentence", lab.md's words), as a learner who misread it would. Those that
    # show only under another cfg, another table shape or another world than the
    # scripted cases name the differential test of their piece ("differential:
    # claim", ...), which names the failing test by the start of its name.
    {
        "name": "claim-lease-literal",
        "mistake": "claim writes the lease as now_ms + 30000, the default, instead "
        "of now_ms + cfg.lease_ms.",
        "sentence": "lease until `now_ms + cfg.lease_ms`",
        "replace": [
            (
                "(worker, now_ms + cfg.lease_ms, action_id, seen_epoch, now_ms),",
                "(worker, now_ms + 30000, action_id, seen_epoch, now_ms),",
            ),
        ],
        "caught_by": "differential: claim",
    },
    {
        "name": "claim-cap-literal",
        "mistake": "claim compares a store's in-flight count with 4, the default, "
        "instead of cfg.in_flight_cap.",
        "sentence": "fewer than `cfg.in_flight_cap` actions in flight",
        "replace": [
            (
                "            (now_ms, now_ms, cfg.in_flight_cap),",
                "            (now_ms, now_ms, 4),",
            ),
        ],
        "caught_by": "differential: claim",
    },
    {
        "name": "claim-cap-inclusive",
        "mistake": "claim lets a store with exactly cfg.in_flight_cap actions in "
        "flight take one more (<= instead of <).",
        "sentence": "fewer than `cfg.in_flight_cap` actions in flight",
        "replace": [
            ("                 AND COALESCE(b.n, 0) < ?\n",
             "                 AND COALESCE(b.n, 0) <= ?\n"),
        ],
        "caught_by": "claim skips a store at the in-flight cap",
    },
    {
        "name": "claim-lease-as-duration",
        "mistake": "claim sets lease_until_ms to cfg.lease_ms, a duration, instead "
        "of the time now_ms + cfg.lease_ms.",
        "sentence": "a lease is a time, not a duration",
        "replace": [
            (
                "(worker, now_ms + cfg.lease_ms, action_id, seen_epoch, now_ms),",
                "(worker, cfg.lease_ms, action_id, seen_epoch, now_ms),",
            ),
        ],
        "caught_by": "claim serves the store that waited longest",
    },
    {
        "name": "claim-tie-by-name-length",
        "mistake": "On a tie of last_served_ms, claim takes the shorter store name "
        "first (store-9 before store-10), not the smaller name.",
        "sentence": "on a tie, the smaller store name",
        "replace": [
            (
                "ORDER BY COALESCE(s.last_served_ms, 0), a.store, a.id\n",
                "ORDER BY COALESCE(s.last_served_ms, 0), LENGTH(a.store), a.store, a.id\n",
            ),
        ],
        "caught_by": "differential: claim",
    },
    {
        "name": "claim-tie-by-larger-name",
        "mistake": "On a tie of last_served_ms, claim takes the larger store name "
        "(ORDER BY store DESC).",
        "sentence": "on a tie, the smaller store name",
        "replace": [
            (
                "ORDER BY COALESCE(s.last_served_ms, 0), a.store, a.id\n",
                "ORDER BY COALESCE(s.last_served_ms, 0), a.store DESC, a.id\n",
            ),
        ],
        "caught_by": "claim breaks a tie between stores by store name",
    },
    {
        "name": "claim-needs-a-stores-row",
        "not_a_mistake": "The lab makes a stores row for every store before any action exists (lab.md: one row per store, made by the lab), so an inner join finds every store: the same claim as the reference's in every world the lab can reach.",
        "mistake": "claim joins stores with an inner JOIN, so a store that has no "
        "row in stores (never served) is never picked.",
        "sentence": "`last_served_ms` (when one of its actions was last claimed; 0 if never)",
        "replace": [
            ("               LEFT JOIN stores AS s ON s.store = a.store\n",
             "               JOIN stores AS s ON s.store = a.store\n"),
        ],
        "caught_by": "differential: claim",
    },
    {
        "name": "claim-missing-store-row-first",
        "not_a_mistake": "Every store has its stores row (lab.md: one row per store, made by the lab), so last_served_ms is never NULL: the same order as the reference's in every world the lab can reach.",
        "mistake": "claim sorts on s.last_served_ms without COALESCE, so a store "
        "with no stores row sorts as NULL (before 0 in SQLite, after everything "
        "in PostgreSQL) instead of as 0.",
        "sentence": "`last_served_ms` (when one of its actions was last claimed; 0 if never)",
        "replace": [
            ("ORDER BY COALESCE(s.last_served_ms, 0), a.store, a.id\n",
             "ORDER BY s.last_served_ms, a.store, a.id\n"),
        ],
        "caught_by": "differential: claim",
    },
    {
        "name": "claim-store-update-only",
        "not_a_mistake": 'Every store has its stores row (lab.md: one row per store, made by the lab), so a plain UPDATE sets it as the upsert does.',
        "mistake": "claim sets last_served_ms with a plain UPDATE, so a store with "
        "no stores row yet is never marked served and keeps every worker.",
        "sentence": "set the store's `last_served_ms` to `now_ms`",
        "replace": [
            (
                '            """INSERT INTO stores (store, last_served_ms) VALUES (?, ?)\n'
                "               ON CONFLICT (store) DO UPDATE\n"
                '               SET last_served_ms = excluded.last_served_ms""",\n'
                "            (store, now_ms),\n",
                '            "UPDATE stores SET last_served_ms = ? WHERE store = ?",\n'
                "            (now_ms, store),\n",
            ),
        ],
        "caught_by": "differential: claim",
    },
    {
        "name": "claim-store-not-marked",
        "mistake": "claim never sets the store's last_served_ms, so the same store "
        "is picked again and again.",
        "sentence": "set the store's `last_served_ms` to `now_ms`",
        "replace": [
            (
                "        db.execute(\n"
                '            """INSERT INTO stores (store, last_served_ms) VALUES (?, ?)\n'
                "               ON CONFLICT (store) DO UPDATE\n"
                '               SET last_served_ms = excluded.last_served_ms""",\n'
                "            (store, now_ms),\n"
                "        )\n",
                "",
            ),
        ],
        "caught_by": "claim serves the store that waited longest",
    },
    {
        "name": "claim-two-transactions",
        "mistake": "claim commits the action's compare-and-set, then marks the "
        "store served in a second transaction.",
        "sentence": "Then, in one transaction, claim it with a compare-and-set",
        "replace": [
            (
                "            return None  # lost a race: the next step tries again\n"
                "        db.execute(\n",
                "            return None  # lost a race: the next step tries again\n"
                "        db.commit()  # the action is ours\n"
                "        db.execute(\n",
            ),
        ],
        "caught_by": "a claim is taken all or nothing",
    },
    {
        "name": "claim-returns-epoch-read",
        "mistake": "claim raises the epoch in the table but returns the epoch it "
        "read, so every fence of its own steps fails.",
        "sentence": "Return the action and its new epoch.",
        "replace": [
            ("return (action_id, seen_epoch + 1)", "return (action_id, seen_epoch)"),
        ],
        "caught_by": "claim serves the store that waited longest",
    },
    {
        "name": "claim-swallows-database-errors",
        "mistake": "claim catches every Exception, rolls back and returns None, so "
        "a database restart reads as no work.",
        "sentence": "Let it escape (if you catch it to roll back, raise it again)",
        "replace": [
            (
                "        return (action_id, seen_epoch + 1)\n"
                "    except Exception:\n"
                "        db.rollback()\n"
                "        raise\n",
                "        return (action_id, seen_epoch + 1)\n"
                "    except Exception:\n"
                "        db.rollback()\n"
                "        return None  # nothing to claim right now\n",
            ),
        ],
        "caught_by": "differential: claim",
    },
    {
        "name": "intent-fence-any-state",
        "mistake": "write_intent's compare-and-set checks the owner and the epoch "
        "but not state = 'claimed', so it writes an intent for an action already "
        "dispatched.",
        "sentence": "a compare-and-set that matches only while the action is "
        "`claimed` by this worker at this epoch",
        "replace": [
            (
                "               WHERE id = ? AND owner = ? AND epoch = ? AND state = 'claimed'\"\"\",\n"
                "            (action_id, worker, epoch),\n",
                "               WHERE id = ? AND owner = ? AND epoch = ?\"\"\",\n"
                "            (action_id, worker, epoch),\n",
            ),
        ],
        "caught_by": "differential: write_intent",
    },
    {
        "name": "intent-epoch-at-least",
        "mistake": "write_intent's fence accepts any epoch at or above the one it "
        "was given (epoch >= ?), so a worker that lost its claim and took it again "
        "passes with its old epoch.",
        "sentence": "a compare-and-set that matches only while the action is "
        "`claimed` by this worker at this epoch",
        "replace": [
            (
                "               WHERE id = ? AND owner = ? AND epoch = ? AND state = 'claimed'\"\"\",\n"
                "            (action_id, worker, epoch),\n",
                "               WHERE id = ? AND owner = ? AND epoch >= ? AND state = 'claimed'\"\"\",\n"
                "            (action_id, worker, epoch),\n",
            ),
        ],
        "caught_by": "write_intent at an older epoch of the same worker writes nothing",
    },
    {
        "name": "intent-key-per-epoch",
        "mistake": "write_intent makes the key from the action and the epoch, so "
        "every owner has its own key.",
        "sentence": "The key is `f\"action-{action_id}\"`, the same for every owner "
        "and every attempt.",
        "replace": [
            ('    key = f"action-{action_id}"\n', '    key = f"action-{action_id}-{epoch}"\n'),
        ],
        "caught_by": "write_intent records the outbox row with a stable key",
    },
    {
        "name": "intent-resets-existing-row",
        "mistake": "write_intent's insert starts the outbox row afresh when one "
        "exists (attempts 0, status sending), losing an earlier owner's send.",
        "sentence": "an insert of the outbox row that leaves an existing row alone",
        "replace": [
            (
                '            "INSERT INTO outbox (action_id, idem_key) VALUES (?, ?) '
                'ON CONFLICT DO NOTHING",\n',
                '            """INSERT INTO outbox (action_id, idem_key) VALUES (?, ?)\n'
                "               ON CONFLICT (action_id) DO UPDATE SET attempts = 0,\n"
                "               status = 'sending', message_id = NULL\"\"\",\n",
            ),
        ],
        "caught_by": "write_intent keeps the key an earlier owner wrote",
    },
    {
        "name": "intent-fenced-returns-key",
        "mistake": "A write_intent whose fence fails rolls back but still returns "
        "the key.",
        "sentence": "If the fence fails, write nothing and return `None`.",
        "replace": [
            (
                "        if cur.rowcount != 1:\n"
                "            db.rollback()\n"
                "            return None\n"
                "        db.execute(\n"
                '            "INSERT INTO outbox',
                "        if cur.rowcount != 1:\n"
                "            db.rollback()\n"
                "            return key\n"
                "        db.execute(\n"
                '            "INSERT INTO outbox',
            ),
        ],
        "caught_by": "a fenced write_intent writes nothing",
    },
    {
        "name": "intent-existing-key-before-fence",
        "mistake": "write_intent returns the key of an existing outbox row before "
        "its fence, so a worker that lost its claim still gets a key to send with.",
        "sentence": "If a previous owner already wrote the row, return the key stored there.",
        "replace": [
            (
                "        # The fence: matches only while the claim is still ours.",
                "        have = db.execute(\n"
                '            "SELECT idem_key FROM outbox WHERE action_id = ?", (action_id,)\n'
                "        ).fetchone()\n"
                "        if have is not None:\n"
                "            return have[0]  # a previous owner wrote it\n"
                "        # The fence: matches only while the claim is still ours.",
            ),
        ],
        "caught_by": "differential: write_intent",
    },
    {
        "name": "intent-fenced-left-open",
        "mistake": "A write_intent whose fence fails returns None without rolling "
        "back, leaving the transaction its UPDATE opened.",
        "sentence": "end every transaction with `db.commit()` or `db.rollback()`, on "
        "every path, the early returns included (a duplicate, a fence that fails)",
        "replace": [
            (
                "        if cur.rowcount != 1:\n"
                "            db.rollback()\n"
                "            return None\n"
                "        db.execute(\n"
                '            "INSERT INTO outbox',
                "        if cur.rowcount != 1:\n"
                "            return None\n"
                "        db.execute(\n"
                '            "INSERT INTO outbox',
            ),
        ],
        "caught_by": "a fenced write_intent writes nothing",
    },
    {
        "name": "lookup-timeout-wait-literal",
        "mistake": "After a lookup that times out, deliver_step waits 1000 ms, the "
        "default, instead of cfg.recheck_ms.",
        "sentence": "`timeout`: return `(\"wait\", cfg.recheck_ms)`, exactly that long.",
        "replace": [
            ('                return ("wait", cfg.recheck_ms)  # unknown is not "no"\n',
             '                return ("wait", 1000)  # unknown is not "no"\n'),
        ],
        "caught_by": "differential: deliver_step",
    },
    {
        "name": "send-timeout-wait-literal",
        "mistake": "After a send that times out, deliver_step waits 1000 ms, the "
        "default, instead of cfg.recheck_ms.",
        "sentence": "`timeout`: wait `cfg.recheck_ms`; the next step starts with a lookup.",
        "replace": [
            ("        # Timeout: it may or may not have gone out. Ask again later.\n"
             '        return ("wait", cfg.recheck_ms)\n',
             "        # Timeout: it may or may not have gone out. Ask again later.\n"
             '        return ("wait", 1000)\n'),
        ],
        "caught_by": "differential: deliver_step",
    },
    {
        "name": "lookup-only-after-two-attempts",
        "mistake": "deliver_step looks the key up only once attempts is above 1, "
        "so after one unknown send it sends again without asking.",
        "sentence": "If `attempts > 0`, a request may already be out there: look the "
        "key up before anything else.",
        "replace": [
            ("        if attempts > 0:\n", "        if attempts > 1:\n"),
        ],
        "caught_by": "after an unknown send, look the key up before sending again",
    },
    {
        "name": "attempts-set-to-one",
        "mistake": "deliver_step sets attempts to 1 before a send instead of adding "
        "one, so a resend leaves it at 1.",
        "sentence": "first add one to `attempts`, fenced on your owner and epoch, and commit",
        "replace": [
            ('            """UPDATE outbox SET attempts = attempts + 1\n',
             '            """UPDATE outbox SET attempts = 1\n'),
        ],
        "caught_by": "after an unknown send, look the key up before sending again",
    },
    {
        "name": "send-before-commit",
        "mistake": "deliver_step counts the attempt but calls provider.send before "
        "committing it, so a kill on the wire rolls the count back.",
        "sentence": "first add one to `attempts`, fenced on your owner and epoch, and "
        "commit; only then call `provider.send` with the stored key",
        "replace": [
            ("        db.commit()\n"
             "        answer = provider.send(key, phone, body)\n",
             "        answer = provider.send(key, phone, body)\n"
             "        db.commit()\n"),
        ],
        "caught_by": "a send killed on the wire leaves its attempt counted",
    },
    {
        "name": "not-found-waits",
        "mistake": "A lookup that answers not-found is taken as not yet, and "
        "deliver_step waits instead of sending again.",
        "sentence": "`not-found`: go on and send.",
        "replace": [
            ('            if seen["answer"] != "not-found":\n',
             '            if True:  # not found may mean not yet\n'),
        ],
        "caught_by": "after an unknown send, look the key up before sending again",
    },
    {
        "name": "lookup-timeout-sends",
        "mistake": "A lookup that times out is taken as not-found, and deliver_step "
        "sends again.",
        "sentence": "`timeout`: return `(\"wait\", cfg.recheck_ms)`, exactly that long.",
        "replace": [
            ('            if seen["answer"] != "not-found":\n',
             '            if seen["answer"] not in ("not-found", "timeout"):\n'),
        ],
        "caught_by": "a lookup that times out means wait, not send",
    },
    {
        "name": "done-before-settle",
        "mistake": "When the outbox status is already past sending, deliver_step "
        "returns done at once, without the fenced settle that marks the action "
        "dispatched.",
        "sentence": "If the outbox status is already past `sending` (a webhook or an "
        "earlier owner learnt the outcome), settle and return `(\"done\", status)`.",
        "replace": [
            ("            return _settle(db, action_id, worker, epoch, now_ms, None, None)\n",
             '            return ("done", status)\n'),
        ],
        "caught_by": "a status a webhook already merged settles without the provider",
    },
    {
        "name": "settle-keeps-lease",
        "mistake": "The settle marks the action dispatched but leaves its lease as "
        "it was.",
        "sentence": "To settle, fenced: `state = 'dispatched'` and `lease_until_ms = "
        "now_ms` (keep the owner), commit.",
        "replace": [
            (
                '        """UPDATE actions SET state = \'dispatched\', lease_until_ms = ?\n'
                "           WHERE id = ? AND owner = ? AND epoch = ?\"\"\",\n"
                "        (now_ms, action_id, worker, epoch),\n",
                '        """UPDATE actions SET state = \'dispatched\'\n'
                "           WHERE id = ? AND owner = ? AND epoch = ?\"\"\",\n"
                "        (action_id, worker, epoch),\n",
            ),
        ],
        "caught_by": "a lookup that finds the message settles without sending",
    },
    {
        "name": "settle-clears-owner",
        "mistake": "The settle clears the owner of the action it releases.",
        "sentence": "To settle, fenced: `state = 'dispatched'` and `lease_until_ms = "
        "now_ms` (keep the owner), commit.",
        "replace": [
            ('        """UPDATE actions SET state = \'dispatched\', lease_until_ms = ?\n',
             '        """UPDATE actions SET state = \'dispatched\', lease_until_ms = ?, owner = NULL\n'),
        ],
        "caught_by": "a lookup that finds the message settles without sending",
    },
    {
        "name": "settle-overwrites-message-id",
        "not_a_mistake": "A key's message id never changes while the provider remembers the key (it replays its first answer), and a row still sending has none: keeping or overwriting it writes the same id in every world the lab can reach.",
        "mistake": "The settle writes the message id it was given over one the "
        "outbox row already holds.",
        "sentence": "`accepted`: merge `accepted` and keep the message id, then settle.",
        "replace": [
            ('            """UPDATE outbox SET status = ?, message_id = COALESCE(message_id, ?)\n'
             "               WHERE action_id = ?\"\"\",\n",
             '            """UPDATE outbox SET status = ?, message_id = ?\n'
             "               WHERE action_id = ?\"\"\",\n"),
        ],
        "caught_by": "differential: deliver_step",
    },
    {
        "name": "settle-fenced-reports-done",
        "mistake": "A settle whose fence fails rolls back but reports the status as "
        "done instead of fenced.",
        "sentence": "Whenever a fence fails, return `(\"fenced\", None)`.",
        "replace": [
            ("    if cur.rowcount != 1:\n"
             "        db.rollback()\n"
             '        return ("fenced", None)\n'
             "    (status,) = db.execute(\n",
             "    (status,) = db.execute(\n"
             '        "SELECT status FROM outbox WHERE action_id = ?", (action_id,)\n'
             "    ).fetchone()\n"
             "    if cur.rowcount != 1:\n"
             "        db.rollback()\n"
             '        return ("done", status)  # nothing left to do here\n'
             "    (status,) = db.execute(\n"),
        ],
        "caught_by": "a settle at an older epoch of the same worker changes nothing",
    },
    {
        "name": "settle-fenced-left-open",
        "mistake": "A settle whose fence fails returns fenced without rolling back "
        "the transaction its UPDATE opened.",
        "sentence": "end every transaction with `db.commit()` or `db.rollback()`, on "
        "every path, the early returns included (a duplicate, a fence that fails)",
        "replace": [
            ("    if cur.rowcount != 1:\n"
             "        db.rollback()\n"
             '        return ("fenced", None)\n'
             "    (status,) = db.execute(\n",
             "    if cur.rowcount != 1:\n"
             '        return ("fenced", None)\n'
             "    (status,) = db.execute(\n"),
        ],
        "caught_by": "a settle at an older epoch of the same worker changes nothing",
    },
    {
        "name": "deliver-bare-except",
        "mistake": "deliver_step catches everything with a bare except and waits, "
        "so a kill is swallowed and the worker carries on.",
        "sentence": "your code sees an exception it cannot keep (so no bare `except:` "
        "and no `except BaseException`)",
        "replace": [
            ("        return (\"wait\", cfg.recheck_ms)\n"
             "    except Exception:\n"
             "        db.rollback()\n"
             "        raise\n",
             "        return (\"wait\", cfg.recheck_ms)\n"
             "    except:  # noqa: E722\n"
             "        db.rollback()\n"
             "        return (\"wait\", cfg.recheck_ms)\n"),
        ],
        "caught_by": "differential: deliver_step",
    },
    {
        "name": "merge-equal-rank-replaces",
        "mistake": "merge takes a report that ranks the same as the current status "
        "(>= instead of >), so a late failed replaces delivered.",
        "sentence": "A report that is not strictly ahead of `current` is dropped",
        "replace": [
            ("    if _RANK.get(reported, -1) > _RANK.get(current, -1):\n",
             "    if _RANK.get(reported, -1) >= _RANK.get(current, -1):\n"),
        ],
        "caught_by": "merge keeps the first final status",
    },
    {
        "name": "merge-unknown-is-final",
        "not_a_mistake": "merge only ever meets the five statuses lab.md lists (the provider reports no other): how an unknown one ranks is not the lab's question.",
        "mistake": "merge ranks a status it does not know as final (a learner's "
        "`else` branch meant for failed), so an unknown report replaces sending, "
        "accepted or sent.",
        "sentence": "Statuses only move forward: `sending`, `accepted`, `sent`, then "
        "`delivered` or `failed` (the two final ones rank the same).",
        "replace": [
            ("    if _RANK.get(reported, -1) > _RANK.get(current, -1):\n",
             "    if _RANK.get(reported, 3) > _RANK.get(current, 3):\n"),
        ],
        "caught_by": "differential: merge",
    },
    {
        "name": "merge-one-step-only",
        "mistake": "merge moves a status one step forward only, so a report that "
        "skips a step (delivered on sending) is dropped.",
        "sentence": "Statuses only move forward: `sending`, `accepted`, `sent`, then "
        "`delivered` or `failed` (the two final ones rank the same).",
        "replace": [
            ("    if _RANK.get(reported, -1) > _RANK.get(current, -1):\n",
             "    if _RANK.get(reported, -1) == _RANK.get(current, -1) + 1:\n"),
        ],
        "caught_by": "a webhook's status is merged and its event recorded",
    },
    {
        "name": "webhook-counted-before-dedup",
        "mistake": "on_webhook adds one to events_applied before it looks at "
        "whether the event was new, and commits that on a duplicate.",
        "sentence": "if it was there already, roll back and change nothing",
        "replace": [
            ("        if cur.rowcount == 0:\n"
             "            db.rollback()\n"
             "            return None\n"
             "        row = db.execute(\n",
             "        db.execute(\n"
             '            "UPDATE outbox SET events_applied = events_applied + 1 WHERE idem_key = ?",\n'
             "            (event.key,),\n"
             "        )\n"
             "        if cur.rowcount == 0:\n"
             "            db.commit()\n"
             "            return None\n"
             "        row = db.execute(\n"),
            ("                   SET status = ?, message_id = COALESCE(message_id, ?),\n"
             "                       events_applied = events_applied + 1\n",
             "                   SET status = ?, message_id = COALESCE(message_id, ?)\n"),
        ],
        "caught_by": "a duplicate webhook is a no-op",
    },
    {
        "name": "webhook-unmatched-not-recorded",
        "not_a_mistake": 'A webhook comes only for a key that was sent, and a send follows a committed outbox row with that key (rows are never deleted): no event without a row reaches on_webhook in the lab.',
        "mistake": "on_webhook rolls back when no outbox row has the event's key, "
        "so the event id is not recorded.",
        "sentence": "In one transaction: record\n`event.event_id` in `webhook_events`",
        "replace": [
            ("        if row is not None:\n"
             "            db.execute(\n"
             '                """UPDATE outbox\n',
             "        if row is None:\n"
             "            db.rollback()  # not ours\n"
             "            return None\n"
             "        if row is not None:\n"
             "            db.execute(\n"
             '                """UPDATE outbox\n'),
        ],
        "caught_by": "differential: on_webhook",
    },
    {
        "name": "webhook-overwrites-message-id",
        "not_a_mistake": "The provider reports one message id per key (it replays its first answer while it remembers the key), so the row's id and the event's are the same in every world the lab can reach.",
        "mistake": "on_webhook writes the event's message id over the one the "
        "outbox row holds.",
        "sentence": "merge `event.status` into the outbox row whose\n`idem_key` is `event.key`",
        "replace": [
            ("                   SET status = ?, message_id = COALESCE(message_id, ?),\n"
             "                       events_applied = events_applied + 1\n",
             "                   SET status = ?, message_id = ?,\n"
             "                       events_applied = events_applied + 1\n"),
        ],
        "caught_by": "differential: on_webhook",
    },
    {
        "name": "webhook-status-not-merged",
        "mistake": "on_webhook writes the event's status as it comes instead of "
        "merging it, so a late sent moves delivered back.",
        "sentence": "Every report goes through it: from a send, a lookup or a webhook.",
        "replace": [
            ("                (merge(row[0], event.status), event.message_id, event.key),\n",
             "                (event.status, event.message_id, event.key),\n"),
        ],
        "caught_by": "a late 'sent' after 'delivered' changes no status",
    },
    {
        "name": "webhook-counts-moves-only",
        "mistake": "on_webhook adds one to events_applied only when the status "
        "moved, not for every new event it merged.",
        "sentence": "add one to its `events_applied`",
        "replace": [
            ("                       events_applied = events_applied + 1\n"
             "                   WHERE idem_key = ?\"\"\",\n"
             "                (merge(row[0], event.status), event.message_id, event.key),\n",
             "                       events_applied = events_applied + CASE WHEN status = ? THEN 0 ELSE 1 END\n"
             "                   WHERE idem_key = ?\"\"\",\n"
             "                (merge(row[0], event.status), event.message_id,\n"
             "                 merge(row[0], event.status), event.key),\n"),
        ],
        "caught_by": "a late 'sent' after 'delivered' changes no status",
    },
    {
        "name": "webhook-swallows-database-errors",
        "mistake": "on_webhook catches every Exception, rolls back and returns "
        "None, so a webhook that met a database restart is lost.",
        "sentence": "Let it escape (if you catch it to roll back, raise it again)",
        "replace": [
            ("        db.commit()\n"
             "        return None\n"
             "    except Exception:\n"
             "        db.rollback()\n"
             "        raise\n",
             "        db.commit()\n"
             "        return None\n"
             "    except Exception:\n"
             "        db.rollback()\n"
             "        return None  # the provider will send it again\n"),
        ],
        "caught_by": "a webhook during a database restart changes nothing",
    },
    {
        "name": "heartbeat-lease-literal",
        "mistake": "heartbeat pushes the lease to now_ms + 30000, the default, "
        "instead of now_ms + cfg.lease_ms.",
        "sentence": "Push the\nlease to `now_ms + cfg.lease_ms`",
        "replace": [
            ("            (now_ms + cfg.lease_ms, action_id, worker, epoch),\n        )\n        if cur.rowcount != 1:\n            db.rollback()\n            return False\n",
             "            (now_ms + 30000, action_id, worker, epoch),\n        )\n        if cur.rowcount != 1:\n            db.rollback()\n            return False\n"),
        ],
        "caught_by": "differential: heartbeat",
    },
    {
        "name": "heartbeat-adds-to-lease",
        "mistake": "heartbeat adds cfg.lease_ms to the lease it finds instead of "
        "setting it to now_ms + cfg.lease_ms.",
        "sentence": "Push the\nlease to `now_ms + cfg.lease_ms`",
        "replace": [
            ('            """UPDATE actions SET lease_until_ms = ?\n'
             "               WHERE id = ? AND owner = ? AND epoch = ? AND state = 'claimed'\"\"\",\n"
             "            (now_ms + cfg.lease_ms, action_id, worker, epoch),\n",
             '            """UPDATE actions SET lease_until_ms = lease_until_ms + ?\n'
             "               WHERE id = ? AND owner = ? AND epoch = ? AND state = 'claimed'\"\"\",\n"
             "            (cfg.lease_ms, action_id, worker, epoch),\n"),
        ],
        "caught_by": "a heartbeat extends its own lease",
    },
    {
        "name": "heartbeat-lease-as-duration",
        "mistake": "heartbeat sets lease_until_ms to cfg.lease_ms, a duration.",
        "sentence": "a lease is a time, not a duration",
        "replace": [
            ("            (now_ms + cfg.lease_ms, action_id, worker, epoch),\n        )\n        if cur.rowcount != 1:\n            db.rollback()\n            return False\n",
             "            (cfg.lease_ms, action_id, worker, epoch),\n        )\n        if cur.rowcount != 1:\n            db.rollback()\n            return False\n"),
        ],
        "caught_by": "a heartbeat extends its own lease",
    },
    {
        "name": "heartbeat-any-state",
        "mistake": "heartbeat is fenced on the owner and the epoch but not on "
        "state = 'claimed', so it extends the lease of an action already "
        "dispatched and says it holds.",
        "sentence": "but only while the action is `claimed` by this\nworker at this epoch",
        "replace": [
            ("               WHERE id = ? AND owner = ? AND epoch = ? AND state = 'claimed'\"\"\",\n"
             "            (now_ms + cfg.lease_ms, action_id, worker, epoch),\n",
             "               WHERE id = ? AND owner = ? AND epoch = ?\"\"\",\n"
             "            (now_ms + cfg.lease_ms, action_id, worker, epoch),\n"),
        ],
        "caught_by": "differential: heartbeat",
    },
    {
        "name": "heartbeat-epoch-at-least",
        "mistake": "heartbeat's fence accepts any epoch at or above the one it was "
        "given (epoch >= ?).",
        "sentence": "but only while the action is `claimed` by this\nworker at this epoch",
        "replace": [
            ("               WHERE id = ? AND owner = ? AND epoch = ? AND state = 'claimed'\"\"\",\n"
             "            (now_ms + cfg.lease_ms, action_id, worker, epoch),\n",
             "               WHERE id = ? AND owner = ? AND epoch >= ? AND state = 'claimed'\"\"\",\n"
             "            (now_ms + cfg.lease_ms, action_id, worker, epoch),\n"),
        ],
        "caught_by": "a heartbeat at an older epoch of the same worker extends nothing",
    },
    {
        "name": "heartbeat-fenced-left-open",
        "mistake": "A heartbeat whose fence fails returns False without rolling "
        "back the transaction its UPDATE opened.",
        "sentence": "end every transaction with `db.commit()` or `db.rollback()`, on "
        "every path, the early returns included (a duplicate, a fence that fails)",
        "replace": [
            ("        if cur.rowcount != 1:\n"
             "            db.rollback()\n"
             "            return False\n",
             "        if cur.rowcount != 1:\n"
             "            return False\n"),
        ],
        "caught_by": "a fenced heartbeat says so and extends nothing",
    },
    {
        "name": "settle-swallows-restart",
        "mistake": "The settle's commit catches the database's error and returns "
        "done anyway: the provider has the message, so the step looks finished.",
        "sentence": "Let it escape (if you catch it to roll back, raise it again): the "
        "simulator treats it as a crash and restarts the worker.",
        "replace": [
            ("    db.commit()\n"
             '    return ("done", status)\n',
             "    try:\n"
             "        db.commit()\n"
             "    except Exception:\n"
             "        db.rollback()  # the message went out all the same\n"
             '    return ("done", status)\n'),
        ],
        "caught_by": "differential: deliver_step",
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
    with open(os.path.join(here, "lab.md"), encoding="utf-8") as f:
        lab = " ".join(f.read().split())  # a sentence may wrap anywhere
    names = [m["name"] for m in MUTANTS]
    assert len(names) == len(set(names)), "duplicate mutant names"
    for m in MUTANTS:
        assert m["mistake"].endswith("."), m["name"]
        # A change that no world the lab can reach tells apart from the reference:
        # kept, with why, and not graded (www/host/test/courier/mutants.mjs).
        assert m.get("not_a_mistake", ".").endswith("."), m["name"]
        assert m.get("caught_by"), f"{m['name']} names no test that must catch it"
        if "sentence" in m:
            assert " ".join(m["sentence"].split()) in lab, (m["name"], m["sentence"])
        source = apply(reference, m)
        assert source != reference, m["name"]
        compile(source, f"<mutant {m['name']}>", "exec")
    outside = sum(1 for m in MUTANTS if "not_a_mistake" in m)
    print(f"{len(MUTANTS) - outside} mutants apply and compile, and {outside} changes that are not mistakes")
