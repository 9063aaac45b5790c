# Correct courier solutions written differently (issue 36): each is the reference
# (src/courier/reference.py) written in one other style a learner may choose, as
# mutants.py's edits are: a list of (old, new) replacements applied in order, every
# old there once. Each must pass every test: courier.test.mjs grades them all. A
# style that fails is a fairness bug of the grader, not of the style.
# Run this file to check that every style applies and compiles.

# claim as two reads: first the store (the in-flight count a correlated
# subquery), then its smallest claimable id.
_CLAIM_QUERY = (
    '        row = db.execute(\n'
    '            """WITH busy AS (\n'
    "                 SELECT store, COUNT(*) AS n FROM actions\n"
    "                 WHERE state = 'claimed' AND lease_until_ms > ?\n"
    "                 GROUP BY store)\n"
    "               SELECT a.id, a.epoch, a.store\n"
    "               FROM actions AS a\n"
    "               LEFT JOIN stores AS s ON s.store = a.store\n"
    "               LEFT JOIN busy AS b ON b.store = a.store\n"
    "               WHERE (a.state = 'pending'\n"
    "                      OR (a.state = 'claimed' AND a.lease_until_ms <= ?))\n"
    "                 AND COALESCE(b.n, 0) < ?\n"
    "               ORDER BY COALESCE(s.last_served_ms, 0), a.store, a.id\n"
    '               LIMIT 1""",\n'
    "            (now_ms, now_ms, cfg.in_flight_cap),\n"
    "        ).fetchone()\n"
    "        if row is None:\n"
    "            return None\n"
    "        action_id, seen_epoch, store = row\n"
)

# reference.py's _settle and deliver_step, whole: the helper-class style replaces both.
import os

_SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "..", "src", "courier")
with open(os.path.join(_SRC, "reference.py"), encoding="utf-8") as _f:
    _REFERENCE = _f.read()
_SETTLE_AND_DELIVER = _REFERENCE[_REFERENCE.index("def _settle("):_REFERENCE.index("def merge(")]

CORRECT = [
    {
        "name": "two-reads",
        "style": "claim reads twice: the store to serve (in-flight counted by a "
        "correlated subquery), then the smallest claimable id in it (None if "
        "another worker took it in between).",
        "replace": [
            (
                _CLAIM_QUERY,
                '        row = db.execute(\n'
                '            """SELECT a.store FROM actions AS a\n'
                "               LEFT JOIN stores AS s ON s.store = a.store\n"
                "               WHERE (a.state = 'pending'\n"
                "                      OR (a.state = 'claimed' AND a.lease_until_ms <= ?))\n"
                "                 AND (SELECT COUNT(*) FROM actions AS c\n"
                "                      WHERE c.store = a.store AND c.state = 'claimed'\n"
                "                        AND c.lease_until_ms > ?) < ?\n"
                "               ORDER BY COALESCE(s.last_served_ms, 0), a.store\n"
                '               LIMIT 1""",\n'
                "            (now_ms, now_ms, cfg.in_flight_cap),\n"
                "        ).fetchone()\n"
                "        if row is None:\n"
                "            return None\n"
                "        (store,) = row\n"
                "        row = db.execute(\n"
                '            """SELECT id, epoch FROM actions\n'
                "               WHERE store = ? AND (state = 'pending'\n"
                "                 OR (state = 'claimed' AND lease_until_ms <= ?))\n"
                '               ORDER BY id LIMIT 1""",\n'
                "            (store, now_ms),\n"
                "        ).fetchone()\n"
                "        if row is None:\n"
                "            return None  # taken since the first read\n"
                "        action_id, seen_epoch = row\n",
            ),
        ],
    },
    {
        "name": "subquery-not-cte",
        "style": "claim's in-flight counts are a subquery in FROM instead of a WITH.",
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
                "               FROM actions AS a\n"
                "               LEFT JOIN (SELECT store, COUNT(*) AS n FROM actions\n"
                "                          WHERE state = 'claimed' AND lease_until_ms > ?\n"
                "                          GROUP BY store) AS b ON b.store = a.store\n"
                "               LEFT JOIN stores AS s ON s.store = a.store\n",
            ),
        ],
    },
    {
        "name": "explicit-begin",
        "style": "claim, on_webhook and heartbeat open and end their transactions "
        "with db.execute('BEGIN'), 'COMMIT' and 'ROLLBACK'.",
        "replace": [
            (
                "        action_id, seen_epoch, store = row\n",
                "        action_id, seen_epoch, store = row\n"
                '        db.execute("BEGIN")\n',
            ),
            (
                "        if cur.rowcount != 1:\n"
                "            db.rollback()\n"
                "            return None  # lost a race: the next step tries again\n",
                "        if cur.rowcount != 1:\n"
                '            db.execute("ROLLBACK")\n'
                "            return None  # lost a race: the next step tries again\n",
            ),
            (
                "            (store, now_ms),\n"
                "        )\n"
                "        db.commit()\n",
                "            (store, now_ms),\n"
                "        )\n"
                '        db.execute("COMMIT")\n',
            ),
            (
                "        # The event id goes in with the merge, in the same transaction: a\n",
                '        db.execute("BEGIN")\n'
                "        # The event id goes in with the merge, in the same transaction: a\n",
            ),
            (
                "        if cur.rowcount == 0:\n"
                "            db.rollback()\n"
                "            return None\n",
                "        if cur.rowcount == 0:\n"
                '            db.execute("ROLLBACK")\n'
                "            return None\n",
            ),
            (
                "                (merge(row[0], event.status), event.message_id, event.key),\n"
                "            )\n"
                "        db.commit()\n",
                "                (merge(row[0], event.status), event.message_id, event.key),\n"
                "            )\n"
                '        db.execute("COMMIT")\n',
            ),
            (
                "        # Extends only our own claim: after a takeover this matches nothing.\n",
                '        db.execute("BEGIN")\n'
                "        # Extends only our own claim: after a takeover this matches nothing.\n",
            ),
            (
                "        if cur.rowcount != 1:\n"
                "            db.rollback()\n"
                "            return False\n"
                "        db.commit()\n"
                "        return True\n",
                "        if cur.rowcount != 1:\n"
                '            db.execute("ROLLBACK")\n'
                "            return False\n"
                '        db.execute("COMMIT")\n'
                "        return True\n",
            ),
        ],
    },
    {
        "name": "returning",
        "style": "Writes say what they did with RETURNING instead of rowcount: the "
        "claim's new epoch, write_intent's inserted key, on_webhook's new event id, "
        "heartbeat's id.",
        "replace": [
            (
                "               SET state = 'claimed', owner = ?, epoch = epoch + 1,\n"
                "                   lease_until_ms = ?\n"
                "               WHERE id = ? AND epoch = ?\n"
                "                 AND (state = 'pending'\n"
                "                      OR (state = 'claimed' AND lease_until_ms <= ?))\"\"\",\n"
                "            (worker, now_ms + cfg.lease_ms, action_id, seen_epoch, now_ms),\n"
                "        )\n"
                "        if cur.rowcount != 1:\n",
                "               SET state = 'claimed', owner = ?, epoch = epoch + 1,\n"
                "                   lease_until_ms = ?\n"
                "               WHERE id = ? AND epoch = ?\n"
                "                 AND (state = 'pending'\n"
                "                      OR (state = 'claimed' AND lease_until_ms <= ?))\n"
                '               RETURNING epoch""",\n'
                "            (worker, now_ms + cfg.lease_ms, action_id, seen_epoch, now_ms),\n"
                "        ).fetchone()\n"
                "        if cur is None:\n",
            ),
            ("        return (action_id, seen_epoch + 1)\n", "        return (action_id, cur[0])\n"),
            (
                "        db.execute(\n"
                '            "INSERT INTO outbox (action_id, idem_key) VALUES (?, ?) ON CONFLICT DO NOTHING",\n'
                "            (action_id, key),\n"
                "        )\n"
                "        # A previous owner may have written the intent: its row stands.\n"
                "        (key,) = db.execute(\n"
                '            "SELECT idem_key FROM outbox WHERE action_id = ?", (action_id,)\n'
                "        ).fetchone()\n",
                "        new = db.execute(\n"
                '            """INSERT INTO outbox (action_id, idem_key) VALUES (?, ?)\n'
                '               ON CONFLICT DO NOTHING RETURNING idem_key""",\n'
                "            (action_id, key),\n"
                "        ).fetchone()\n"
                "        if new is None:  # a previous owner wrote the intent: its row stands\n"
                "            (key,) = db.execute(\n"
                '                "SELECT idem_key FROM outbox WHERE action_id = ?", (action_id,)\n'
                "            ).fetchone()\n",
            ),
            (
                '            "INSERT INTO webhook_events (event_id) VALUES (?) ON CONFLICT DO NOTHING",\n'
                "            (event.event_id,),\n"
                "        )\n"
                "        if cur.rowcount == 0:\n",
                '            "INSERT INTO webhook_events (event_id) VALUES (?) ON CONFLICT DO NOTHING "\n'
                '            "RETURNING event_id",\n'
                "            (event.event_id,),\n"
                "        ).fetchone()\n"
                "        if cur is None:\n",
            ),
            (
                "               WHERE id = ? AND owner = ? AND epoch = ? AND state = 'claimed'\"\"\",\n"
                "            (now_ms + cfg.lease_ms, action_id, worker, epoch),\n"
                "        )\n"
                "        if cur.rowcount != 1:\n",
                "               WHERE id = ? AND owner = ? AND epoch = ? AND state = 'claimed'\n"
                '               RETURNING id""",\n'
                "            (now_ms + cfg.lease_ms, action_id, worker, epoch),\n"
                "        ).fetchone()\n"
                "        if cur is None:\n",
            ),
        ],
    },
    {
        "name": "early-returns-commit",
        "style": "Every early return that wrote nothing (a fence that failed, a "
        "lost race, a duplicate webhook) ends its transaction with db.commit() "
        "instead of db.rollback().",
        "replace": [
            (
                "            db.rollback()\n"
                "            return None  # lost a race: the next step tries again\n",
                "            db.commit()  # nothing was written\n"
                "            return None  # lost a race: the next step tries again\n",
            ),
            (
                "        if cur.rowcount != 1:\n"
                "            db.rollback()\n"
                "            return None\n"
                "        db.execute(\n"
                '            "INSERT INTO outbox',
                "        if cur.rowcount != 1:\n"
                "            db.commit()\n"
                "            return None\n"
                "        db.execute(\n"
                '            "INSERT INTO outbox',
            ),
            (
                "    if cur.rowcount != 1:\n"
                "        db.rollback()\n"
                '        return ("fenced", None)\n'
                "    (status,) = db.execute(\n",
                "    if cur.rowcount != 1:\n"
                "        db.commit()\n"
                '        return ("fenced", None)\n'
                "    (status,) = db.execute(\n",
            ),
            (
                "        if cur.rowcount != 1:\n"
                "            db.rollback()\n"
                '            return ("fenced", None)\n'
                "        db.commit()\n"
                "        answer = provider.send(key, phone, body)\n",
                "        if cur.rowcount != 1:\n"
                "            db.commit()\n"
                '            return ("fenced", None)\n'
                "        db.commit()\n"
                "        answer = provider.send(key, phone, body)\n",
            ),
            (
                "        if cur.rowcount == 0:\n"
                "            db.rollback()\n"
                "            return None\n",
                "        if cur.rowcount == 0:\n"
                "            db.commit()  # the event was there: nothing changed\n"
                "            return None\n",
            ),
            (
                "        if cur.rowcount != 1:\n"
                "            db.rollback()\n"
                "            return False\n",
                "        if cur.rowcount != 1:\n"
                "            db.commit()\n"
                "            return False\n",
            ),
        ],
    },
    {
        "name": "merge-by-list",
        "style": "merge without a rank table: the order as a list, the two final "
        "statuses tested by name.",
        "replace": [
            (
                "    if _RANK.get(reported, -1) > _RANK.get(current, -1):\n"
                "        return reported\n"
                "    return current\n",
                '    order = ["sending", "accepted", "sent"]\n'
                '    final = ("delivered", "failed")\n'
                "    if current in final:\n"
                "        return current\n"
                "    if reported in final:\n"
                "        return reported\n"
                "    if reported in order and (\n"
                "        current not in order or order.index(reported) > order.index(current)\n"
                "    ):\n"
                "        return reported\n"
                "    return current\n",
            ),
        ],
    },
    {
        "name": "float-waits",
        "style": "Waits returned as floats, which lab.md allows (an int or a float).",
        "replace": [
            (
                'return ("wait", cfg.recheck_ms)  # unknown is not "no"',
                'return ("wait", float(cfg.recheck_ms))  # unknown is not "no"',
            ),
            (
                '        return ("wait", cfg.recheck_ms)\n',
                '        return ("wait", cfg.recheck_ms / 1)\n',
            ),
        ],
    },
    {
        "name": "state-in-every-fence",
        "style": "Every fence checks state = 'claimed' as well as owner and epoch, "
        "the settle's and the attempt's too.",
        "replace": [
            (
                "           WHERE id = ? AND owner = ? AND epoch = ?\"\"\",\n"
                "        (now_ms, action_id, worker, epoch),\n",
                "           WHERE id = ? AND owner = ? AND epoch = ? AND state = 'claimed'\"\"\",\n"
                "        (now_ms, action_id, worker, epoch),\n",
            ),
            (
                "                 WHERE id = ? AND owner = ? AND epoch = ?)\"\"\",\n",
                "                 WHERE id = ? AND owner = ? AND epoch = ? AND state = 'claimed')\"\"\",\n",
            ),
        ],
    },
    {
        "name": "helper-class",
        "style": "deliver_step through a small class: a Job holds the db, the action "
        "and the claim, with one method per fenced write and a context manager "
        "that commits or rolls back.",
        "replace": [
            (
                _SETTLE_AND_DELIVER,
                "class _Job:\n"
                '    """One claim of one action: every write it makes is fenced on it."""\n'
                "\n"
                "    FENCE = \"SELECT 1 FROM actions WHERE id = ? AND owner = ? AND epoch = ?\"\n"
                "\n"
                "    def __init__(self, db, action_id, worker, epoch):\n"
                "        self.db, self.id, self.worker, self.epoch = db, action_id, worker, epoch\n"
                "\n"
                "    def outbox(self):\n"
                "        return self.db.execute(\n"
                '            """SELECT o.idem_key, o.attempts, o.status, a.phone, a.body\n'
                "               FROM outbox AS o JOIN actions AS a ON a.id = o.action_id\n"
                '               WHERE o.action_id = ?""",\n'
                "            (self.id,),\n"
                "        ).fetchone()\n"
                "\n"
                "    def count_attempt(self):\n"
                "        cur = self.db.execute(\n"
                '            "UPDATE outbox SET attempts = attempts + 1 "\n'
                '            "WHERE action_id = ? AND EXISTS (" + self.FENCE + ")",\n'
                "            (self.id, self.id, self.worker, self.epoch),\n"
                "        )\n"
                "        return cur.rowcount == 1\n"
                "\n"
                "    def release(self, now_ms):\n"
                "        cur = self.db.execute(\n"
                "            \"UPDATE actions SET state = 'dispatched', lease_until_ms = ? \"\n"
                '            "WHERE id = ? AND owner = ? AND epoch = ?",\n'
                "            (now_ms, self.id, self.worker, self.epoch),\n"
                "        )\n"
                "        return cur.rowcount == 1\n"
                "\n"
                "    def record(self, reported, message_id):\n"
                "        (status,) = self.db.execute(\n"
                '            "SELECT status FROM outbox WHERE action_id = ?", (self.id,)\n'
                "        ).fetchone()\n"
                "        if reported is None:\n"
                "            return status\n"
                "        status = merge(status, reported)\n"
                "        self.db.execute(\n"
                '            "UPDATE outbox SET status = ?, message_id = COALESCE(message_id, ?) "\n'
                '            "WHERE action_id = ?",\n'
                "            (status, message_id, self.id),\n"
                "        )\n"
                "        return status\n"
                "\n"
                "    def __enter__(self):\n"
                "        return self\n"
                "\n"
                "    def __exit__(self, kind, error, tb):\n"
                "        if kind is None:\n"
                "            self.db.commit()\n"
                "        elif issubclass(kind, Exception):\n"
                "            self.db.rollback()\n"
                "        return False\n"
                "\n"
                "    def settle(self, now_ms, reported=None, message_id=None):\n"
                "        with self:\n"
                "            if not self.release(now_ms):\n"
                '                return ("fenced", None)\n'
                '            return ("done", self.record(reported, message_id))\n'
                "\n"
                "\n"
                "def deliver_step(db, provider, action_id, worker, epoch, now_ms, cfg):\n"
                "    job = _Job(db, action_id, worker, epoch)\n"
                "    row = job.outbox()\n"
                "    if row is None:\n"
                '        return ("fenced", None)\n'
                "    key, attempts, status, phone, body = row\n"
                '    if status != "sending":\n'
                "        return job.settle(now_ms)\n"
                "    if attempts > 0:\n"
                "        seen = provider.lookup(key)\n"
                '        if seen["answer"] == "found":\n'
                '            return job.settle(now_ms, seen["status"], seen["message_id"])\n'
                '        if seen["answer"] != "not-found":\n'
                '            return ("wait", cfg.recheck_ms)\n'
                "    with job:\n"
                "        if not job.count_attempt():\n"
                '            return ("fenced", None)\n'
                "    answer = provider.send(key, phone, body)\n"
                '    if answer["answer"] == "accepted":\n'
                '        return job.settle(now_ms, "accepted", answer["message_id"])\n'
                '    return ("wait", cfg.recheck_ms)\n'
                "\n"
                "\n",
            ),
        ],
    },
]


if __name__ == "__main__":
    import runpy

    apply = runpy.run_path(os.path.join(_SRC, "mutants.py"))["apply"]
    reference = _REFERENCE
    names = [c["name"] for c in CORRECT]
    assert len(names) == len(set(names)), "duplicate style names"
    for c in CORRECT:
        assert c["style"].endswith("."), c["name"]
        source = apply(reference, c)
        assert source != reference, c["name"]
        compile(source, f"<style {c['name']}>", "exec")
    print(f"{len(CORRECT)} styles apply and compile")
