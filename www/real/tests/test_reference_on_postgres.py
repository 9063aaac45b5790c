# The courier lab's reference.py, unchanged, on a real PostgreSQL through the lab's
# own `db` (labdb.Connection): the file a learner submits in the browser lab runs
# here too. Each piece's contract, checked on the rows it leaves.
import importlib.util
import os
from types import SimpleNamespace

import pytest

from lab_files import REFERENCE

CFG = SimpleNamespace(lease_ms=30_000, in_flight_cap=4, recheck_ms=1_000)


@pytest.fixture(scope="module")
def ref():
    spec = importlib.util.spec_from_file_location("courier_reference", REFERENCE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Provider:
    """Scripted answers, in order; remembers what was asked."""

    def __init__(self, sends=(), lookups=()):
        self.sends, self.lookups, self.asked = list(sends), list(lookups), []

    def send(self, key, phone, body):
        self.asked.append(("send", key))
        return self.sends.pop(0)

    def lookup(self, key):
        self.asked.append(("lookup", key))
        return self.lookups.pop(0)


def enqueue(peek_db, rows):
    with peek_db:
        for id_, store, created_ms in rows:
            peek_db.execute(
                "INSERT INTO actions (id, store, phone, body, created_ms) VALUES (?, ?, ?, ?, ?)",
                (id_, store, f"+1555{id_:07}", f"Order {id_} has shipped", created_ms))


def test_one_action_claimed_sent_and_confirmed_by_webhooks(ref, db, peek):
    enqueue(db, [(1, "store-001", 0), (2, "store-001", 5), (3, "store-002", 7)])
    # The least recently served store first (ties: name), its oldest action.
    assert ref.claim(db, "w1", 100, CFG) == (1, 1)
    assert not db.in_transaction
    assert ref.claim(db, "w2", 110, CFG) == (3, 1)
    key = ref.write_intent(db, 1, "w1", 1)
    assert key == "action-1"
    provider = Provider(sends=[{"answer": "accepted", "message_id": "m-1"}])
    assert ref.deliver_step(db, provider, 1, "w1", 1, 120, CFG) == ("done", "accepted")
    assert provider.asked == [("send", "action-1")]
    assert peek("SELECT state, owner, epoch FROM actions WHERE id = 1") == [("dispatched", "w1", 1)]
    assert peek("SELECT attempts, status, message_id FROM outbox") == [(1, "accepted", "m-1")]
    event = SimpleNamespace(event_id="e-1", key="action-1", message_id="m-1", status="delivered")
    ref.on_webhook(db, event)
    ref.on_webhook(db, event)  # delivered twice: merged once
    late = SimpleNamespace(event_id="e-2", key="action-1", message_id="m-1", status="sent")
    ref.on_webhook(db, late)
    assert peek("SELECT status, events_applied FROM outbox") == [("delivered", 2)]
    assert not db.in_transaction


def test_a_timeout_is_asked_about_before_any_resend_with_the_same_key(ref, db, peek):
    enqueue(db, [(7, "store-003", 0)])
    assert ref.claim(db, "w1", 0, CFG) == (7, 1)
    assert ref.write_intent(db, 7, "w1", 1) == "action-7"
    provider = Provider(sends=[{"answer": "timeout"}, {"answer": "accepted", "message_id": "m-7"}],
                        lookups=[{"answer": "timeout"}, {"answer": "not-found"}])
    assert ref.deliver_step(db, provider, 7, "w1", 1, 10, CFG) == ("wait", 1_000)
    assert ref.deliver_step(db, provider, 7, "w1", 1, 1_010, CFG) == ("wait", 1_000)
    assert ref.deliver_step(db, provider, 7, "w1", 1, 2_010, CFG) == ("done", "accepted")
    assert provider.asked == [("send", "action-7"), ("lookup", "action-7"), ("lookup", "action-7"), ("send", "action-7")]
    assert peek("SELECT attempts, status FROM outbox") == [(2, "accepted")]


def test_a_zombie_owner_is_fenced_by_the_epoch_after_a_takeover(ref, db, peek):
    enqueue(db, [(9, "store-004", 0)])
    assert ref.claim(db, "w1", 0, CFG) == (9, 1)
    assert ref.heartbeat(db, 9, "w1", 1, 10_000, CFG) is True
    # The lease runs out (40 s after the heartbeat at 10 s): w2 takes over.
    assert ref.claim(db, "w2", 40_001, CFG) == (9, 2)
    assert ref.heartbeat(db, 9, "w1", 1, 40_002, CFG) is False
    assert ref.write_intent(db, 9, "w1", 1) is None
    assert peek("SELECT COUNT(*) FROM outbox") == [(0,)]
    assert ref.write_intent(db, 9, "w2", 2) == "action-9"
    assert ref.deliver_step(db, Provider(), 9, "w1", 1, 40_003, CFG) == ("fenced", None)
    assert peek("SELECT owner, epoch, state FROM actions") == [("w2", 2, "claimed")]
    assert not db.in_transaction


def test_the_in_flight_cap_keeps_a_store_from_taking_every_worker(ref, db):
    enqueue(db, [(i, "store-005", i) for i in range(1, 7)])
    claimed = [ref.claim(db, f"w{i}", 100, CFG) for i in range(6)]
    assert claimed == [(1, 1), (2, 1), (3, 1), (4, 1), None, None]
