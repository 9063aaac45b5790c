//! The catalogue of plausible wrong solutions. Each is the contract with one mistake
//! a learner might make, and names the hidden test that must catch it.

use delivery_lab::deliver_once::model::{Policy, SendResult, Task, TaskKind, DONE_TTL_S};
use delivery_lab::deliver_once::world::World;
use delivery_lab::deliver_once::Solution;
use delivery_lab::rng::SeededRng;
use delivery_lab::{LearnerError, Value};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum M {
    // deliver_once
    NoDoneCheck,
    DoneCheckAnyValue,
    ClaimWithoutNx,
    ClaimWithoutTtl,
    ClaimTtlIsDoneTtl,
    ClaimResultIgnored,
    SendBeforeClaim,
    MarkDoneBeforeSend,
    NoReleaseOnFailure,
    ReleaseBySettingValue,
    BulkNotTreatedAsSent,
    AtMostOnceForAll,
    HeldBulkByKind,
    SecondSendOnFailure,
    DoneWithoutTtl,
    DoneTtlOneDay,
    UnderscoreStatus,
    GivesUpOutOfAttempts,
    // next_step
    PermanentRetried,
    PermanentIgnoresFallback,
    DrawBeforePermanentCheck,
    RetryAfterIgnored,
    RetryAfterTruthiness,
    JitterExponentOffByOne,
    NoFloor,
    FloorAdded,
    DrawFromMinDelay,
    OwnRandom,
    NoDrawOnLastAttempt,
    GtForLastAttempt,
    GtForExpiry,
    ExpiryIgnoresDelay,
    BulkFallsBack,
    DropByPolicy,
    DlqUsesProviderReason,
    ListInsteadOfTuple,
    RetryAfterBeforePermanent,
    PermanentByReason,
}

use M::*;

/// Every mutant, what it gets wrong, and the hidden test that must catch it.
pub const CATALOGUE: &[(M, &str, &str)] = &[
    (
        NoDoneCheck,
        "never reads the done marker",
        "the claim uses nx and claim_ttl_s, and the done marker lives exactly DONE_TTL_S",
    ),
    (
        DoneCheckAnyValue,
        "treats any value (a live claim too) as done",
        "claim held by another worker: a critical task is retried later",
    ),
    (
        ClaimWithoutNx,
        "claims without nx=True, overwriting another worker's claim",
        "claim held by another worker: a critical task is retried later",
    ),
    (
        ClaimWithoutTtl,
        "claims without a ttl, so a crashed worker blocks forever",
        "a crashed worker's claim blocks until claim_ttl_s has passed, not longer",
    ),
    (
        ClaimTtlIsDoneTtl,
        "claims with DONE_TTL_S instead of claim_ttl_s",
        "the claim uses nx and claim_ttl_s, and the done marker lives exactly DONE_TTL_S",
    ),
    (
        ClaimResultIgnored,
        "sends even when the claim failed",
        "claim held by another worker: a critical task is retried later",
    ),
    (
        SendBeforeClaim,
        "sends first and claims afterwards",
        "the claim uses nx and claim_ttl_s, and the done marker lives exactly DONE_TTL_S",
    ),
    (
        MarkDoneBeforeSend,
        "writes done before sending",
        "a failed send frees the claim so the next delivery can claim and send",
    ),
    (
        NoReleaseOnFailure,
        "keeps the claim after a failed send",
        "a failed send frees the claim so the next delivery can claim and send",
    ),
    (
        ReleaseBySettingValue,
        "overwrites the claim with 'failed' instead of deleting it",
        "a failed send frees the claim so the next delivery can claim and send",
    ),
    (
        BulkNotTreatedAsSent,
        "returns retry-later for a held claim under at_most_once",
        "claim held by another worker: bulk traffic under at_most_once counts as sent",
    ),
    (
        AtMostOnceForAll,
        "treats every held claim as sent",
        "claim held by another worker: a critical task is retried later",
    ),
    (
        HeldBulkByKind,
        "decides a held claim by task.kind == 'bulk' instead of policy.at_most_once",
        "claim held: policy.at_most_once decides, not the task's kind",
    ),
    (
        SecondSendOnFailure,
        "sends a second time right after a failure",
        "a failed send frees the claim so the next delivery can claim and send",
    ),
    (
        DoneWithoutTtl,
        "writes the done marker without a ttl",
        "the claim uses nx and claim_ttl_s, and the done marker lives exactly DONE_TTL_S",
    ),
    (
        DoneTtlOneDay,
        "keeps the done marker one day instead of seven",
        "the claim uses nx and claim_ttl_s, and the done marker lives exactly DONE_TTL_S",
    ),
    (
        UnderscoreStatus,
        "returns 'duplicate_skipped' with an underscore",
        "return values are the exact strings and 2-tuples",
    ),
    (
        GivesUpOutOfAttempts,
        "does not send a task whose attempts are used up (attempt >= max_attempts), \
         returning 'failed' without a claim",
        DIFFERENTIAL,
    ),
    (
        PermanentRetried,
        "retries permanent failures like transient ones",
        "a permanent failure without a fallback goes to the dlq with the provider's reason",
    ),
    (
        PermanentIgnoresFallback,
        "sends every permanent failure to the dlq",
        "a permanent failure never draws, even for bulk on its last attempt",
    ),
    (
        DrawBeforePermanentCheck,
        "draws before checking for a permanent failure",
        "a permanent failure never draws, even for bulk on its last attempt",
    ),
    (
        RetryAfterIgnored,
        "ignores Retry-After and always draws",
        "Retry-After is honoured without a draw, 0 included",
    ),
    (
        RetryAfterTruthiness,
        "tests Retry-After by truthiness, so 0 is lost",
        "Retry-After is honoured without a draw, 0 included",
    ),
    (
        JitterExponentOffByOne,
        "uses 2 ** (attempt + 1) in the jitter cap",
        "full jitter draws once, from 0 to base_delay_s * 2 ** attempt",
    ),
    (
        NoFloor,
        "forgets the min_delay_s floor",
        "the delay never goes below min_delay_s",
    ),
    (
        FloorAdded,
        "adds min_delay_s to the draw instead of taking the max",
        "the delay never goes below min_delay_s",
    ),
    (
        DrawFromMinDelay,
        "draws from min_delay_s instead of 0",
        "the delay never goes below min_delay_s",
    ),
    (
        OwnRandom,
        "uses its own random numbers instead of rng",
        "full jitter draws once, from 0 to base_delay_s * 2 ** attempt",
    ),
    (
        NoDrawOnLastAttempt,
        "skips the draw on the last attempt",
        "the last attempt still draws once, then gives up",
    ),
    (
        GtForLastAttempt,
        "uses > instead of >= for the last attempt",
        "the last attempt is the one where attempt + 1 >= max_attempts",
    ),
    (
        GtForExpiry,
        "uses > instead of >= for expiry",
        "a retry that would land exactly at expiry gives up",
    ),
    (
        ExpiryIgnoresDelay,
        "checks now >= expires_at, ignoring the delay",
        "a retry that would land exactly at expiry gives up",
    ),
    (
        BulkFallsBack,
        "sends bulk to the fallback instead of dropping it",
        "bulk is dropped when out of attempts or out of time, even with a fallback",
    ),
    (
        DropByPolicy,
        "drops when policy.at_most_once is set instead of when the task is bulk",
        "giving up: the task's kind decides the drop, not policy.at_most_once",
    ),
    (
        DlqUsesProviderReason,
        "gives the provider's reason instead of 'retries exhausted'",
        "out of retries without a fallback goes to the dlq as 'retries exhausted'",
    ),
    (
        ListInsteadOfTuple,
        "returns a list instead of a tuple",
        "return values are the exact strings and 2-tuples",
    ),
    (
        RetryAfterBeforePermanent,
        "honours a Retry-After before looking at permanent, so a permanent failure \
         that carries one is retried",
        DIFFERENTIAL,
    ),
    (
        PermanentByReason,
        "tells a permanent failure by its reason's code (400, 404, 410) instead of \
         result.permanent",
        DIFFERENTIAL,
    ),
];

/// The differential test's name (hidden-tests/deliver-once/90-differential.toml): the
/// mistakes only some combinations of fields show, which no scripted case holds.
const DIFFERENTIAL: &str = "differential: 500 random failures for next_step, 100 random deliveries";

pub struct Mutant(pub M);

fn s(v: &str) -> Result<Value, LearnerError> {
    Ok(Value::str(v))
}

impl Solution for Mutant {
    fn deliver_once(
        &mut self,
        w: &World,
        task: &Task,
        policy: &Policy,
    ) -> Result<Value, LearnerError> {
        let m = self.0;
        let key = format!("sent:{}", task.key);
        if m == GivesUpOutOfAttempts && task.attempt >= policy.max_attempts {
            return s("failed");
        }
        if m != NoDoneCheck {
            let v = w.kv_get(&key);
            let done = if m == DoneCheckAnyValue {
                v.is_some()
            } else {
                v.as_deref() == Some("done")
            };
            if done {
                return s(if m == UnderscoreStatus {
                    "duplicate_skipped"
                } else {
                    "duplicate-skipped"
                });
            }
        }
        let early = (m == SendBeforeClaim).then(|| w.send(&task.key));
        let ttl = match m {
            ClaimWithoutTtl => None,
            ClaimTtlIsDoneTtl => Some(DONE_TTL_S),
            _ => Some(policy.claim_ttl_s),
        };
        let claimed = w.kv_set(&key, "sending", ttl, m != ClaimWithoutNx);
        if !claimed && m != ClaimResultIgnored {
            let skip = match m {
                BulkNotTreatedAsSent => false,
                AtMostOnceForAll => true,
                HeldBulkByKind => task.kind == TaskKind::Bulk,
                _ => policy.at_most_once,
            };
            return s(if skip {
                "duplicate-skipped"
            } else {
                "retry-later"
            });
        }
        if m == MarkDoneBeforeSend {
            w.kv_set(&key, "done", Some(DONE_TTL_S), false);
        }
        let result = early.unwrap_or_else(|| w.send(&task.key));
        if result.ok {
            let ttl = match m {
                DoneWithoutTtl => None,
                DoneTtlOneDay => Some(86_400.0),
                _ => Some(DONE_TTL_S),
            };
            if m != MarkDoneBeforeSend {
                w.kv_set(&key, "done", ttl, false);
            }
            return s("sent");
        }
        if m == SecondSendOnFailure {
            w.send(&task.key);
        }
        match m {
            NoReleaseOnFailure => {}
            ReleaseBySettingValue => {
                w.kv_set(&key, "failed", Some(policy.claim_ttl_s), false);
            }
            _ => {
                w.kv_delete(&key);
            }
        }
        s("failed")
    }

    fn next_step(
        &mut self,
        w: &World,
        task: &Task,
        result: &SendResult,
        now_s: f64,
        policy: &Policy,
    ) -> Result<Value, LearnerError> {
        let m = self.0;
        let exponent = task.attempt as i32 + i32::from(m == JitterExponentOffByOne);
        let cap_s = policy.base_delay_s * 2f64.powi(exponent);
        let early_draw = (m == DrawBeforePermanentCheck && result.retry_after_s.is_none())
            .then(|| w.uniform(0.0, cap_s));
        let pair = |a: &str, v: Value| {
            let items = vec![Value::str(a), v];
            Ok(if m == ListInsteadOfTuple {
                Value::List(items)
            } else {
                Value::Tuple(items)
            })
        };
        let permanent = match m {
            PermanentRetried => false,
            RetryAfterBeforePermanent => result.permanent && result.retry_after_s.is_none(),
            PermanentByReason => ["400", "404", "410"]
                .iter()
                .any(|code| result.reason.split(' ').next() == Some(code)),
            _ => result.permanent,
        };
        if permanent {
            return match &task.fallback {
                Some(f) if m != PermanentIgnoresFallback => pair("fallback", Value::str(f)),
                _ => pair("dlq", Value::str(&result.reason)),
            };
        }
        let retry_after = match m {
            RetryAfterIgnored => None,
            RetryAfterTruthiness => result.retry_after_s.filter(|x| *x != 0.0),
            _ => result.retry_after_s,
        };
        let last = if m == GtForLastAttempt {
            task.attempt + 1 > policy.max_attempts
        } else {
            task.attempt + 1 >= policy.max_attempts
        };
        let delay_s = match retry_after {
            Some(r) => r,
            None if m == NoDrawOnLastAttempt && last => 0.0,
            None => {
                let draw = match (m, early_draw) {
                    (_, Some(d)) => d,
                    (OwnRandom, _) => SeededRng::new(7).uniform(0.0, cap_s),
                    (DrawFromMinDelay, _) => w.uniform(policy.min_delay_s, cap_s),
                    _ => w.uniform(0.0, cap_s),
                };
                match m {
                    NoFloor => draw,
                    FloorAdded => policy.min_delay_s + draw,
                    _ => policy.min_delay_s.max(draw),
                }
            }
        };
        let expired = match m {
            GtForExpiry => now_s + delay_s > task.expires_at_s,
            ExpiryIgnoresDelay => now_s >= task.expires_at_s,
            _ => now_s + delay_s >= task.expires_at_s,
        };
        if last || expired {
            let drop = match m {
                BulkFallsBack => false,
                DropByPolicy => policy.at_most_once,
                _ => task.kind == TaskKind::Bulk,
            };
            if drop {
                return pair("drop", Value::str("expired or out of attempts"));
            }
            return match &task.fallback {
                Some(f) => pair("fallback", Value::str(f)),
                None if m == DlqUsesProviderReason => pair("dlq", Value::str(&result.reason)),
                None => pair("dlq", Value::str("retries exhausted")),
            };
        }
        pair("retry", Value::Float(delay_s))
    }
}
