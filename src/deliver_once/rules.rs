//! The rules of the contract the tests hold the learner to, each with an id (used
//! in case files and reports) and a sentence the learner reads when it is broken.

use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Rule {
    DoneSkips,
    Claim,
    ClaimHeld,
    SendOnce,
    MarkDone,
    ReleaseOnFailure,
    Permanent,
    RetryAfter,
    Jitter,
    GiveUp,
    ReturnTypes,
}

impl Rule {
    pub const ALL: [Rule; 11] = [
        Rule::DoneSkips,
        Rule::Claim,
        Rule::ClaimHeld,
        Rule::SendOnce,
        Rule::MarkDone,
        Rule::ReleaseOnFailure,
        Rule::Permanent,
        Rule::RetryAfter,
        Rule::Jitter,
        Rule::GiveUp,
        Rule::ReturnTypes,
    ];

    pub fn id(self) -> &'static str {
        match self {
            Rule::DoneSkips => "done-skips",
            Rule::Claim => "claim",
            Rule::ClaimHeld => "claim-held",
            Rule::SendOnce => "send-once",
            Rule::MarkDone => "mark-done",
            Rule::ReleaseOnFailure => "release-on-failure",
            Rule::Permanent => "permanent",
            Rule::RetryAfter => "retry-after",
            Rule::Jitter => "jitter",
            Rule::GiveUp => "give-up",
            Rule::ReturnTypes => "return-types",
        }
    }

    /// The rule in the learner's terms.
    pub fn text(self) -> &'static str {
        match self {
            Rule::DoneSkips => "A task whose key already holds \"done\" was delivered before: skip it (no claim, no send) and return \"duplicate-skipped\".",
            Rule::Claim => "Before sending, claim the key with kv.set(\"sent:\" + task.key, \"sending\", ttl=policy.claim_ttl_s, nx=True).",
            Rule::ClaimHeld => "When the claim fails, another worker holds it: do not send. Return \"retry-later\", or \"duplicate-skipped\" when policy.at_most_once is set (bulk traffic counts as sent).",
            Rule::SendOnce => "After a successful claim, call provider.send(task) exactly once; never send a task you skipped.",
            Rule::MarkDone => "After a successful send, write \"done\" with ttl=DONE_TTL_S (604800 s, seven days) and return \"sent\".",
            Rule::ReleaseOnFailure => "After a failed send, delete the claim so a retry can claim it, and return \"failed\".",
            Rule::Permanent => "A permanent failure is never retried and draws no random number: return (\"fallback\", task.fallback) when the task has a fallback channel, else (\"dlq\", result.reason).",
            Rule::RetryAfter => "When the provider sent retry_after_s (0 included), that is the delay: use it and make no random draw.",
            Rule::Jitter => "Without retry_after_s, draw exactly once: delay = max(policy.min_delay_s, rng.uniform(0, policy.base_delay_s * 2 ** task.attempt)), even when you then give up.",
            Rule::GiveUp => "Give up when this was the last attempt (task.attempt + 1 >= policy.max_attempts) or the retry would land at or after expiry (now + delay >= task.expires_at): a bulk task returns (\"drop\", \"expired or out of attempts\"); any other (\"fallback\", task.fallback), or (\"dlq\", \"retries exhausted\") without a fallback. Otherwise return (\"retry\", delay).",
            Rule::ReturnTypes => "deliver_once returns exactly one of the strings \"sent\", \"duplicate-skipped\", \"retry-later\", \"failed\"; next_step returns a 2-tuple (action, value) whose action is \"retry\", \"fallback\", \"dlq\" or \"drop\".",
        }
    }
}
