-- The courier lab's tables: the one place they are defined. The grader hands this
-- to the store (www/host/solution_runner.py's CourierStore) at every reset; lab.md describes
-- them to the learner, and tests/courier_sim.rs checks that lab.md and the rows the
-- engine reads and writes (sim.rs's Tables) have exactly these columns.
CREATE TABLE actions (
  id             INTEGER PRIMARY KEY,
  store          TEXT    NOT NULL,
  phone          TEXT    NOT NULL,
  body           TEXT    NOT NULL,
  created_ms     INTEGER NOT NULL,
  state          TEXT    NOT NULL DEFAULT 'pending', -- pending | claimed | dispatched
  owner          TEXT,                               -- worker id of the current claim
  epoch          INTEGER NOT NULL DEFAULT 0,         -- +1 on every claim
  lease_until_ms INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX actions_by_state ON actions (state, store, id);
CREATE TABLE stores (
  store          TEXT    PRIMARY KEY,
  last_served_ms INTEGER NOT NULL DEFAULT 0           -- when one of its actions was last claimed
);
CREATE TABLE outbox (
  action_id      INTEGER PRIMARY KEY,
  idem_key       TEXT    NOT NULL UNIQUE,
  attempts       INTEGER NOT NULL DEFAULT 0,          -- sends counted before they leave
  status         TEXT    NOT NULL DEFAULT 'sending',  -- sending | accepted | sent | delivered | failed
  message_id     TEXT,
  events_applied INTEGER NOT NULL DEFAULT 0           -- distinct webhook events merged
);
CREATE TABLE webhook_events (
  event_id       TEXT    PRIMARY KEY
);
