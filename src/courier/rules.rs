//! The rules of `lab.md` the unit tests hold the learner to, each with an id (in
//! reports and in `hidden-tests/courier/README.md`) and the sentence a learner reads
//! when it is broken. The system runs (chaos, fairness) hold every rule at once.

use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Rule {
    FairClaim,
    Fence,
    OneKey,
    LookupBeforeResend,
    Settle,
    MergeForward,
    WebhookOnce,
    Heartbeat,
}

impl Rule {
    pub const ALL: [Rule; 8] = [
        Rule::FairClaim,
        Rule::Fence,
        Rule::OneKey,
        Rule::LookupBeforeResend,
        Rule::Settle,
        Rule::MergeForward,
        Rule::WebhookOnce,
        Rule::Heartbeat,
    ];

    pub fn id(self) -> &'static str {
        match self {
            Rule::FairClaim => "fair-claim",
            Rule::Fence => "fence",
            Rule::OneKey => "one-key",
            Rule::LookupBeforeResend => "lookup-before-resend",
            Rule::Settle => "settle",
            Rule::MergeForward => "merge-forward",
            Rule::WebhookOnce => "webhook-once",
            Rule::Heartbeat => "heartbeat",
        }
    }

    /// The rule in the learner's terms.
    pub fn text(self) -> &'static str {
        match self {
            Rule::FairClaim => "Fair claim: among stores with a claimable action and fewer than cfg.in_flight_cap actions in flight (claimed with a live lease), take the one with the smallest last_served_ms (ties: the smaller store name), then its claimable action with the smallest id; an expired lease is claimable, a live one is not. In one transaction, a compare-and-set on the epoch you read bumps the epoch, sets the owner and the lease, and sets the store's last_served_ms.",
            Rule::Fence => "Every write is fenced by (owner, epoch): a worker whose claim has moved on, to another worker or to a newer epoch of its own, changes nothing and returns (\"fenced\", None), None or False.",
            Rule::OneKey => "Write the intent in one transaction: the fenced compare-and-set and the outbox row, keyed f\"action-{action_id}\" for every owner and attempt; an outbox row already there stands, and its key is the one to return.",
            Rule::LookupBeforeResend => "A timeout means unknown: count the attempt (fenced, committed) before the request leaves; once an attempt was counted, look the key up first and send again, with the same key, only on a definite not-found; an unknown answer means (\"wait\", cfg.recheck_ms).",
            Rule::Settle => "A status already past sending settles without the provider; an accepted send or a found lookup is merged and settles. Settling is fenced and marks the action dispatched with lease_until_ms = now_ms, in one transaction.",
            Rule::MergeForward => "Merge reports through the order sending < accepted < sent < delivered = failed; a report that is not ahead of the current status changes nothing.",
            Rule::WebhookOnce => "Handle a webhook in one transaction: record its event id (a duplicate changes nothing), merge its status forward, count it in events_applied.",
            Rule::Heartbeat => "Heartbeat: extend your own lease to now_ms + cfg.lease_ms, fenced by (owner, epoch), and return whether it held.",
        }
    }
}
