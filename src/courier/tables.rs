//! The courier lab's tables as the engine reads and writes them (their columns are
//! `schema.sql`'s: `tests/courier_sim.rs` checks that), and the numbers the pieces
//! get as `cfg`.

use serde::Serialize;

/// The numbers the learner's pieces get as `cfg`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Config {
    pub lease_ms: u64,
    pub in_flight_cap: u32,
    pub recheck_ms: u64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            lease_ms: 30_000,
            in_flight_cap: 4,
            recheck_ms: 1_000,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ActionRow {
    pub id: u64,
    pub store: String,
    pub phone: String,
    pub body: String,
    pub created_ms: u64,
}

/// The lab's tables, row by row, in key order (what `Backend::dump` reads and
/// `Backend::load` writes).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Tables {
    pub actions: Vec<ActionState>,
    pub stores: Vec<StoreState>,
    pub outbox: Vec<OutboxState>,
    pub webhook_events: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ActionState {
    pub id: u64,
    pub store: String,
    pub phone: String,
    pub body: String,
    pub created_ms: u64,
    pub state: String,
    pub owner: Option<String>,
    pub epoch: i64,
    pub lease_until_ms: u64,
}

/// A row of `actions` as a fence reads it: this table's rows, and the reference
/// backend's own (`reference.rs`).
pub trait Holder {
    /// The row's `state`, `owner` and `epoch`.
    fn claim(&self) -> (&str, Option<&str>, i64);

    /// lab.md's "claimed by this worker at this epoch": what every holder's write is
    /// fenced on (the reference's fences, a stale step, a differential world's caller).
    fn held_by(&self, worker: &str, epoch: i64) -> bool {
        let (state, owner, at) = self.claim();
        state == "claimed" && owner == Some(worker) && at == epoch
    }
}

impl Holder for ActionState {
    fn claim(&self) -> (&str, Option<&str>, i64) {
        (&self.state, self.owner.as_deref(), self.epoch)
    }
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StoreState {
    pub store: String,
    pub last_served_ms: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OutboxState {
    pub action_id: u64,
    pub idem_key: String,
    pub attempts: i64,
    pub status: String,
    pub message_id: Option<String>,
    pub events_applied: i64,
}

/// Reading a host's tables by hand: serde's derive costs the WASM ~20 KB here.
impl Tables {
    pub fn from_json(v: &serde_json::Value) -> Result<Tables, String> {
        fn rows<'a>(
            v: &'a serde_json::Value,
            table: &str,
        ) -> Result<&'a Vec<serde_json::Value>, String> {
            v.get(table)
                .and_then(|t| t.as_array())
                .ok_or_else(|| format!("no {table} list"))
        }
        fn u(r: &serde_json::Value, k: &str) -> Result<u64, String> {
            r.get(k)
                .and_then(|x| x.as_u64())
                .ok_or_else(|| format!("{k} is not a whole number >= 0"))
        }
        fn i(r: &serde_json::Value, k: &str) -> Result<i64, String> {
            r.get(k)
                .and_then(|x| x.as_i64())
                .ok_or_else(|| format!("{k} is not a whole number"))
        }
        fn st(r: &serde_json::Value, k: &str) -> Result<String, String> {
            r.get(k)
                .and_then(|x| x.as_str())
                .map(String::from)
                .ok_or_else(|| format!("{k} is not text"))
        }
        fn opt(r: &serde_json::Value, k: &str) -> Result<Option<String>, String> {
            match r.get(k) {
                None | Some(serde_json::Value::Null) => Ok(None),
                Some(x) => x
                    .as_str()
                    .map(|s| Some(s.to_string()))
                    .ok_or_else(|| format!("{k} is not text or null")),
            }
        }
        let actions = rows(v, "actions")?
            .iter()
            .map(|r| {
                Ok(ActionState {
                    id: u(r, "id")?,
                    store: st(r, "store")?,
                    phone: st(r, "phone")?,
                    body: st(r, "body")?,
                    created_ms: u(r, "created_ms")?,
                    state: st(r, "state")?,
                    owner: opt(r, "owner")?,
                    epoch: i(r, "epoch")?,
                    lease_until_ms: u(r, "lease_until_ms")?,
                })
            })
            .collect::<Result<_, String>>()?;
        let stores = rows(v, "stores")?
            .iter()
            .map(|r| {
                Ok(StoreState {
                    store: st(r, "store")?,
                    last_served_ms: u(r, "last_served_ms")?,
                })
            })
            .collect::<Result<_, String>>()?;
        let outbox = rows(v, "outbox")?
            .iter()
            .map(|r| {
                Ok(OutboxState {
                    action_id: u(r, "action_id")?,
                    idem_key: st(r, "idem_key")?,
                    attempts: i(r, "attempts")?,
                    status: st(r, "status")?,
                    message_id: opt(r, "message_id")?,
                    events_applied: i(r, "events_applied")?,
                })
            })
            .collect::<Result<_, String>>()?;
        let webhook_events = rows(v, "webhook_events")?
            .iter()
            .map(|e| {
                e.as_str()
                    .map(String::from)
                    .ok_or_else(|| "an event id is not text".to_string())
            })
            .collect::<Result<_, String>>()?;
        Ok(Tables {
            actions,
            stores,
            outbox,
            webhook_events,
        })
    }
}
