//! The courier lab's example tests: the learner sees these in full.

use super::provider::Status;
use super::rules::Rule;
use super::sim::{Call, Script, Tables};
use super::units::{accepted, action, outbox, stores, UnitCase};
use crate::report::TestKind;

pub fn examples() -> Vec<UnitCase> {
    vec![
        UnitCase {
            name: "claim serves the store that waited longest",
            kind: TestKind::Example,
            rule: Rule::FairClaim,
            setup: Tables {
                actions: vec![
                    action(1, "store-a", "pending", None, 0, 0),
                    action(2, "store-a", "pending", None, 0, 0),
                    action(3, "store-b", "pending", None, 0, 0),
                ],
                stores: stores(&[("store-a", 9_000), ("store-b", 4_000)]),
                ..Tables::default()
            },
            call: Call::Claim {
                worker: "w1".into(),
                now_ms: 10_000,
            },
            script: Script::default(),
        },
        UnitCase {
            name: "write_intent records the outbox row with a stable key",
            kind: TestKind::Example,
            rule: Rule::OneKey,
            setup: Tables {
                actions: vec![action(7, "store-a", "claimed", Some("w2"), 3, 40_000)],
                stores: stores(&[("store-a", 10_000)]),
                ..Tables::default()
            },
            call: Call::WriteIntent {
                action_id: 7,
                worker: "w2".into(),
                epoch: 3,
            },
            script: Script::default(),
        },
        UnitCase {
            name: "after an unknown send, look the key up before sending again",
            kind: TestKind::Example,
            rule: Rule::LookupBeforeResend,
            setup: Tables {
                actions: vec![action(7, "store-a", "claimed", Some("w2"), 3, 40_000)],
                stores: stores(&[("store-a", 10_000)]),
                outbox: vec![outbox(7, 1, "sending")],
                ..Tables::default()
            },
            call: Call::DeliverStep {
                action_id: 7,
                worker: "w2".into(),
                epoch: 3,
                now_ms: 12_000,
            },
            script: Script {
                lookups: vec![super::provider::LookupAnswer::NotFound],
                sends: vec![accepted("msg-41")],
                ..Script::default()
            },
        },
        UnitCase {
            name: "merge only moves forward",
            kind: TestKind::Example,
            rule: Rule::MergeForward,
            setup: Tables::default(),
            call: Call::Merge {
                current: "delivered".into(),
                reported: "sent".into(),
            },
            script: Script::default(),
        },
    ]
    .into_iter()
    .chain(std::iter::once(UnitCase {
        name: "a webhook's status is merged and its event recorded",
        kind: TestKind::Example,
        rule: Rule::WebhookOnce,
        setup: Tables {
            actions: vec![action(7, "store-a", "dispatched", Some("w2"), 3, 12_000)],
            stores: stores(&[("store-a", 10_000)]),
            outbox: vec![outbox(7, 1, "accepted")],
            ..Tables::default()
        },
        call: Call::OnWebhook {
            event: super::units::webhook("evt-1", 7, Status::Delivered),
        },
        script: Script::default(),
    }))
    .collect()
}
