//! The misbehaving SMS provider: a seeded fake with the contract's rates. It ignores
//! epochs, remembers idempotency keys for an hour of lab time and replays the first
//! answer for a known key, lets its lookup lag behind its writes, and keeps its own
//! log of every request and every effect (a message actually sent). The chaos run's
//! checks read only this log.

use crate::rng::SeededRng;
use serde::Serialize;
use std::collections::BTreeMap;

/// How often the provider misbehaves, per request.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Rates {
    /// A request times out: the caller cannot tell whether the send happened.
    pub timeout: f64,
    /// A webhook is delivered twice, with the same event id.
    pub duplicate_webhook: f64,
    /// A message's webhooks arrive out of order ("delivered" before "sent").
    pub out_of_order: f64,
    /// A "failed" webhook arrives after "sent" (the final status is failed).
    pub late_failed: f64,
}

impl Default for Rates {
    fn default() -> Self {
        Rates {
            timeout: 0.05,
            duplicate_webhook: 0.02,
            out_of_order: 0.10,
            late_failed: 0.01,
        }
    }
}

/// The provider's timing, in lab seconds.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Timing {
    /// How long an idempotency key is remembered.
    pub key_memory_s: f64,
    /// A lookup sees a message up to this long after it was written.
    pub lookup_lag_max_s: f64,
    /// Webhooks follow an accepted send by up to this long.
    pub webhook_delay_max_s: f64,
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            key_memory_s: 3600.0,
            lookup_lag_max_s: 2.0,
            webhook_delay_max_s: 5.0,
        }
    }
}

/// A message's status at the provider, in the order the merge accepts them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Accepted,
    Sent,
    Delivered,
    Failed,
}

/// What the caller of `send` sees.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "answer", rename_all = "lowercase")]
pub enum SendAnswer {
    Accepted {
        message_id: String,
    },
    /// Unknown: the message may or may not have gone out.
    Timeout,
}

/// What the caller of `lookup` sees.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "answer", rename_all = "kebab-case")]
pub enum LookupAnswer {
    Found {
        message_id: String,
        status: Status,
    },
    /// Not known yet: never sent, or written so recently the lookup lags.
    NotFound,
    Timeout,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Webhook {
    pub event_id: String,
    pub key: String,
    pub message_id: String,
    pub status: Status,
    pub due_s: f64,
}

/// One line of the provider's own log.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "what", rename_all = "kebab-case")]
pub enum Entry {
    /// A send request arrived (or was lost on the way: `reached` is false).
    Send {
        t_s: f64,
        action: u64,
        key: String,
        reached: bool,
    },
    /// A message actually went out to a phone.
    Effect {
        t_s: f64,
        action: u64,
        key: String,
        message_id: String,
    },
    /// A known key was sent again within its memory: the first answer was replayed.
    Replay { t_s: f64, action: u64, key: String },
    Lookup {
        t_s: f64,
        key: String,
        answer: LookupAnswer,
    },
    WebhookOut {
        t_s: f64,
        event_id: String,
        key: String,
        status: Status,
    },
}

#[derive(Clone, Debug)]
struct Message {
    action: u64,
    message_id: String,
    first_seen_s: f64,
    visible_at_s: f64,
    /// (status, from when) in time order; the last is the final status.
    statuses: Vec<(Status, f64)>,
}

impl Message {
    fn status_at(&self, t_s: f64) -> Status {
        self.statuses
            .iter()
            .rev()
            .find(|(_, from)| *from <= t_s)
            .map_or(Status::Accepted, |s| s.0)
    }
}

pub struct Provider {
    rng: SeededRng,
    rates: Rates,
    timing: Timing,
    by_key: BTreeMap<String, Message>,
    pending: Vec<Webhook>,
    log: Vec<Entry>,
    next_message: u64,
    next_event: u64,
}

impl Provider {
    pub fn new(seed: u64, rates: Rates, timing: Timing) -> Provider {
        Provider {
            rng: SeededRng::new(seed),
            rates,
            timing,
            by_key: BTreeMap::new(),
            pending: Vec::new(),
            log: Vec::new(),
            next_message: 0,
            next_event: 0,
        }
    }

    pub fn log(&self) -> &[Entry] {
        &self.log
    }

    /// A send with an idempotency key, for an action (the provider reads the action from
    /// the message's body; it never sees our epochs).
    pub fn send(&mut self, now_s: f64, action: u64, key: &str) -> SendAnswer {
        let remembered = self
            .by_key
            .get(key)
            .filter(|m| now_s < m.first_seen_s + self.timing.key_memory_s)
            .map(|m| m.message_id.clone());
        let timed_out = self.rng.chance(self.rates.timeout);
        // A timeout loses the request on the way in or the answer on the way out.
        let reached = !(timed_out && self.rng.chance(0.5));
        self.log.push(Entry::Send {
            t_s: now_s,
            action,
            key: key.into(),
            reached,
        });
        if !reached {
            return SendAnswer::Timeout;
        }
        let message_id = match remembered {
            Some(id) => {
                self.log.push(Entry::Replay {
                    t_s: now_s,
                    action,
                    key: key.into(),
                });
                id
            }
            None => self.accept(now_s, action, key),
        };
        if timed_out {
            SendAnswer::Timeout
        } else {
            SendAnswer::Accepted { message_id }
        }
    }

    fn accept(&mut self, now_s: f64, action: u64, key: &str) -> String {
        self.next_message += 1;
        let message_id = format!("msg-{}", self.next_message);
        self.log.push(Entry::Effect {
            t_s: now_s,
            action,
            key: key.into(),
            message_id: message_id.clone(),
        });
        let delay = self.timing.webhook_delay_max_s;
        let sent_s = now_s + self.rng.uniform(0.0, delay / 2.0);
        let mut last_s = sent_s + self.rng.uniform(0.0, delay / 2.0);
        let mut statuses = vec![(Status::Accepted, now_s), (Status::Sent, sent_s)];
        let final_status = if self.rng.chance(self.rates.late_failed) {
            last_s += delay; // "failed" comes late, well after "sent"
            Status::Failed
        } else {
            Status::Delivered
        };
        statuses.push((final_status, last_s));
        let out_of_order = self.rng.chance(self.rates.out_of_order);
        for (status, at_s) in [(Status::Sent, sent_s), (final_status, last_s)] {
            // Out of order: the final status is announced before "sent".
            let due_s = match (out_of_order, status) {
                (true, Status::Sent) => last_s + 0.001,
                (true, _) => sent_s,
                _ => at_s,
            };
            self.next_event += 1;
            let hook = Webhook {
                event_id: format!("evt-{}", self.next_event),
                key: key.into(),
                message_id: message_id.clone(),
                status,
                due_s,
            };
            if self.rng.chance(self.rates.duplicate_webhook) {
                let mut again = hook.clone();
                again.due_s += self.rng.uniform(0.0, delay);
                self.pending.push(again);
            }
            self.pending.push(hook);
        }
        let visible_at_s = now_s + self.rng.uniform(0.0, self.timing.lookup_lag_max_s);
        self.by_key.insert(
            key.into(),
            Message {
                action,
                message_id: message_id.clone(),
                first_seen_s: now_s,
                visible_at_s,
                statuses,
            },
        );
        message_id
    }

    /// Looks a key up. It may lag: a message written moments ago can be "not found".
    pub fn lookup(&mut self, now_s: f64, key: &str) -> LookupAnswer {
        let answer = if self.rng.chance(self.rates.timeout) {
            LookupAnswer::Timeout
        } else {
            match self.by_key.get(key) {
                Some(m) if now_s >= m.visible_at_s => LookupAnswer::Found {
                    message_id: m.message_id.clone(),
                    status: m.status_at(now_s),
                },
                _ => LookupAnswer::NotFound,
            }
        };
        self.log.push(Entry::Lookup {
            t_s: now_s,
            key: key.into(),
            answer: answer.clone(),
        });
        answer
    }

    /// The webhooks due by `now_s`, in due order (ties in the order they were made).
    pub fn due_webhooks(&mut self, now_s: f64) -> Vec<Webhook> {
        let (mut due, rest): (Vec<Webhook>, Vec<Webhook>) = std::mem::take(&mut self.pending)
            .into_iter()
            .partition(|w| w.due_s <= now_s);
        self.pending = rest;
        due.sort_by(|a, b| a.due_s.total_cmp(&b.due_s));
        for w in &due {
            self.log.push(Entry::WebhookOut {
                t_s: now_s,
                event_id: w.event_id.clone(),
                key: w.key.clone(),
                status: w.status,
            });
        }
        due
    }

    /// Webhooks made but not yet due.
    pub fn pending_webhooks(&self) -> usize {
        self.pending.len()
    }

    /// The provider's final word on each action's messages: its last status.
    pub fn final_statuses(&self) -> BTreeMap<u64, Status> {
        self.by_key
            .values()
            .map(|m| {
                (
                    m.action,
                    m.statuses.last().map_or(Status::Accepted, |s| s.0),
                )
            })
            .collect()
    }
}

/// The chaos run's checks, read from the provider's log alone.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ChaosTally {
    pub actions: usize,
    pub exactly_one_effect: usize,
    pub more_than_one_effect: usize,
    pub no_effect: usize,
    /// Sends of an action after an earlier send of it with no lookup in between.
    pub resends_without_lookup: usize,
}

/// What the provider's log says of one action.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ActionLog {
    /// Messages that actually went out.
    pub effects: usize,
    /// Sends after an earlier send of it with no lookup in between.
    pub resends_without_lookup: usize,
}

/// The log read per action (lookups are attributed through the keys sent so far).
pub fn per_action(log: &[Entry]) -> BTreeMap<u64, ActionLog> {
    let mut out: BTreeMap<u64, ActionLog> = BTreeMap::new();
    let mut keys: BTreeMap<&str, u64> = BTreeMap::new();
    // Per action: whether a send happened since the last lookup.
    let mut sent_since_lookup: BTreeMap<u64, bool> = BTreeMap::new();
    for e in log {
        match e {
            Entry::Effect { action, .. } => out.entry(*action).or_default().effects += 1,
            Entry::Send { action, key, .. } => {
                keys.insert(key, *action);
                if sent_since_lookup.insert(*action, true) == Some(true) {
                    out.entry(*action).or_default().resends_without_lookup += 1;
                }
            }
            Entry::Lookup { key, .. } => {
                if let Some(action) = keys.get(key.as_str()) {
                    sent_since_lookup.insert(*action, false);
                }
            }
            Entry::Replay { .. } | Entry::WebhookOut { .. } => {}
        }
    }
    out
}

pub fn tally(log: &[Entry], actions: impl IntoIterator<Item = u64>) -> ChaosTally {
    tally_of(&per_action(log), actions)
}

/// The chaos rows from a log already read per action.
pub fn tally_of(
    per: &BTreeMap<u64, ActionLog>,
    actions: impl IntoIterator<Item = u64>,
) -> ChaosTally {
    let mut t = ChaosTally {
        resends_without_lookup: per.values().map(|a| a.resends_without_lookup).sum(),
        ..ChaosTally::default()
    };
    for action in actions {
        t.actions += 1;
        match per.get(&action).map_or(0, |a| a.effects) {
            0 => t.no_effect += 1,
            1 => t.exactly_one_effect += 1,
            _ => t.more_than_one_effect += 1,
        }
    }
    t
}

/// A status as the lab's tables and texts write it.
pub fn status_name(s: Status) -> &'static str {
    match s {
        Status::Accepted => "accepted",
        Status::Sent => "sent",
        Status::Delivered => "delivered",
        Status::Failed => "failed",
    }
}
