// The courier lab's hidden tests: compiled into the engine with the `hidden`
// feature (`src/courier/mod.rs` includes this file); learners see their names and
// pass/fail only. Each case is compared with the reference design from the same
// starting tables in the same scripted world (`src/courier/units.rs`).

fn hidden_cases() -> Vec<UnitCase> {
    let claim_rule = "Fair claim: among stores with claimable work and fewer than cfg.in_flight_cap actions in flight, the one served least recently; an expired lease is claimable, a live one is not; the claim bumps the epoch.";
    let fence_rule = "Every write is fenced by (owner, epoch): a worker whose epoch has moved on changes nothing and stops.";
    let deliver_rule = "Deliver: count the attempt (committed) before the request leaves; after an attempt, look up before any resend; unknown answers mean wait and ask again.";
    let webhook_rule = "Webhooks: record the event id in the merge's transaction so a duplicate is a no-op; merge only forward.";
    let heartbeat_rule = "Heartbeat: extend your own lease, fenced by (owner, epoch); say whether it held.";
    let claimed = |id: u64, owner: &str, epoch: i64| action(id, "store-a", "claimed", Some(owner), epoch, 40_000);
    let base = |actions: Vec<ActionState>, outbox: Vec<OutboxState>| Tables {
        actions,
        stores: stores(&[("store-a", 10_000), ("store-b", 2_000)]),
        outbox,
        webhook_events: Vec::new(),
    };
    let deliver = |epoch: i64, now_ms: u64| Call::DeliverStep {
        action_id: 7,
        worker: "w2".into(),
        epoch,
        now_ms,
    };
    let hidden = TestKind::Hidden;
    vec![
        UnitCase {
            name: "claim skips a store at the in-flight cap",
            kind: hidden,
            rule: claim_rule,
            setup: base(
                vec![
                    action(1, "store-b", "claimed", Some("w5"), 1, 90_000),
                    action(2, "store-b", "claimed", Some("w6"), 1, 90_000),
                    action(3, "store-b", "claimed", Some("w7"), 1, 90_000),
                    action(4, "store-b", "claimed", Some("w8"), 1, 90_000),
                    action(5, "store-b", "pending", None, 0, 0),
                    action(6, "store-a", "pending", None, 0, 0),
                ],
                vec![],
            ),
            call: Call::Claim { worker: "w1".into(), now_ms: 50_000 },
            script: Script::default(),
        },
        UnitCase {
            name: "claim takes over an expired lease at the next epoch",
            kind: hidden,
            rule: claim_rule,
            setup: base(vec![action(3, "store-b", "claimed", Some("w9"), 4, 20_000)], vec![outbox(3, 1, "sending")]),
            call: Call::Claim { worker: "w1".into(), now_ms: 25_000 },
            script: Script::default(),
        },
        UnitCase {
            name: "claim leaves a live lease alone",
            kind: hidden,
            rule: claim_rule,
            setup: base(vec![action(3, "store-b", "claimed", Some("w9"), 4, 30_000)], vec![]),
            call: Call::Claim { worker: "w1".into(), now_ms: 25_000 },
            script: Script::default(),
        },
        UnitCase {
            name: "claim finds nothing once everything is dispatched",
            kind: hidden,
            rule: claim_rule,
            setup: base(vec![action(3, "store-b", "dispatched", Some("w9"), 4, 10_000)], vec![outbox(3, 1, "delivered")]),
            call: Call::Claim { worker: "w1".into(), now_ms: 25_000 },
            script: Script::default(),
        },
        UnitCase {
            name: "a fenced write_intent writes nothing",
            kind: hidden,
            rule: fence_rule,
            setup: base(vec![claimed(7, "w3", 4)], vec![]),
            call: Call::WriteIntent { action_id: 7, worker: "w2".into(), epoch: 3 },
            script: Script::default(),
        },
        UnitCase {
            name: "write_intent keeps the key an earlier owner wrote",
            kind: hidden,
            rule: "The idempotency key must be the same for every owner and every attempt: reuse the outbox row that is already there.",
            setup: base(vec![claimed(7, "w2", 5)], vec![outbox(7, 2, "sending")]),
            call: Call::WriteIntent { action_id: 7, worker: "w2".into(), epoch: 5 },
            script: Script::default(),
        },
        UnitCase {
            name: "the first send is counted before it leaves",
            kind: hidden,
            rule: deliver_rule,
            setup: base(vec![claimed(7, "w2", 3)], vec![outbox(7, 0, "sending")]),
            call: deliver(3, 12_000),
            script: Script { sends: vec![accepted("msg-41")], ..Script::default() },
        },
        UnitCase {
            name: "a send killed on the wire leaves its attempt counted",
            kind: hidden,
            rule: deliver_rule,
            setup: base(vec![claimed(7, "w2", 3)], vec![outbox(7, 0, "sending")]),
            call: deliver(3, 12_000),
            script: Script { sends: vec![accepted("msg-41")], kill_after_send: true, ..Script::default() },
        },
        UnitCase {
            name: "a send that times out means wait",
            kind: hidden,
            rule: deliver_rule,
            setup: base(vec![claimed(7, "w2", 3)], vec![outbox(7, 0, "sending")]),
            call: deliver(3, 12_000),
            script: Script { sends: vec![SendAnswer::Timeout], ..Script::default() },
        },
        UnitCase {
            name: "a lookup that times out means wait, not send",
            kind: hidden,
            rule: deliver_rule,
            setup: base(vec![claimed(7, "w2", 3)], vec![outbox(7, 2, "sending")]),
            call: deliver(3, 12_000),
            script: Script { lookups: vec![LookupAnswer::Timeout], sends: vec![accepted("msg-41")], ..Script::default() },
        },
        UnitCase {
            name: "a lookup that finds the message settles without sending",
            kind: hidden,
            rule: deliver_rule,
            setup: base(vec![claimed(7, "w2", 3)], vec![outbox(7, 1, "sending")]),
            call: deliver(3, 12_000),
            script: Script { lookups: vec![found("msg-41", Status::Sent)], sends: vec![accepted("msg-99")], ..Script::default() },
        },
        UnitCase {
            name: "a status a webhook already merged settles without the provider",
            kind: hidden,
            rule: deliver_rule,
            setup: base(vec![claimed(7, "w2", 3)], vec![outbox(7, 1, "delivered")]),
            call: deliver(3, 12_000),
            script: Script { sends: vec![accepted("msg-99")], ..Script::default() },
        },
        UnitCase {
            name: "a zombie's deliver_step sends nothing",
            kind: hidden,
            rule: fence_rule,
            setup: base(vec![claimed(7, "w4", 4)], vec![outbox(7, 0, "sending")]),
            call: deliver(3, 12_000),
            script: Script { sends: vec![accepted("msg-41")], ..Script::default() },
        },
        UnitCase {
            name: "a duplicate webhook is a no-op",
            kind: hidden,
            rule: webhook_rule,
            setup: Tables {
                webhook_events: vec!["evt-1".into()],
                ..base(vec![action(7, "store-a", "dispatched", Some("w2"), 3, 12_000)], vec![OutboxState { events_applied: 1, ..outbox(7, 1, "sent") }])
            },
            call: Call::OnWebhook { event: webhook("evt-1", 7, Status::Sent) },
            script: Script::default(),
        },
        UnitCase {
            name: "a late 'sent' after 'delivered' changes no status",
            kind: hidden,
            rule: webhook_rule,
            setup: base(vec![action(7, "store-a", "dispatched", Some("w2"), 3, 12_000)], vec![outbox(7, 1, "delivered")]),
            call: Call::OnWebhook { event: webhook("evt-2", 7, Status::Sent) },
            script: Script::default(),
        },
        UnitCase {
            name: "a webhook during a database restart changes nothing",
            kind: hidden,
            rule: webhook_rule,
            setup: base(vec![action(7, "store-a", "dispatched", Some("w2"), 3, 12_000)], vec![outbox(7, 1, "accepted")]),
            call: Call::OnWebhook { event: webhook("evt-3", 7, Status::Delivered) },
            script: Script { db_down: true, ..Script::default() },
        },
        UnitCase {
            name: "a webhook is recorded and merged all or nothing",
            kind: hidden,
            rule: webhook_rule,
            setup: base(vec![action(7, "store-a", "dispatched", Some("w2"), 3, 12_000)], vec![outbox(7, 1, "accepted")]),
            call: Call::OnWebhook { event: webhook("evt-4", 7, Status::Delivered) },
            script: Script { all_or_nothing: true, ..Script::default() },
        },
        UnitCase {
            name: "a claim is taken all or nothing",
            kind: hidden,
            rule: claim_rule,
            setup: base(vec![action(5, "store-b", "pending", None, 0, 0)], vec![]),
            call: Call::Claim { worker: "w1".into(), now_ms: 50_000 },
            script: Script { all_or_nothing: true, ..Script::default() },
        },
        UnitCase {
            name: "an intent is written all or nothing",
            kind: hidden,
            rule: "Write the intent in one transaction: a compare-and-set on (owner, epoch) and the outbox row with a key that every later owner will reuse.",
            setup: base(vec![claimed(7, "w2", 3)], vec![]),
            call: Call::WriteIntent { action_id: 7, worker: "w2".into(), epoch: 3 },
            script: Script { all_or_nothing: true, ..Script::default() },
        },
        UnitCase {
            name: "merge keeps the first final status",
            kind: hidden,
            rule: "Merge reports through the order sending < accepted < sent < delivered = failed; a report that is not ahead of the current status changes nothing.",
            setup: Tables::default(),
            call: Call::Merge { current: "failed".into(), reported: "delivered".into() },
            script: Script::default(),
        },
        UnitCase {
            name: "merge moves accepted to sent",
            kind: hidden,
            rule: "Merge reports through the order sending < accepted < sent < delivered = failed; a report that is not ahead of the current status changes nothing.",
            setup: Tables::default(),
            call: Call::Merge { current: "accepted".into(), reported: "sent".into() },
            script: Script::default(),
        },
        UnitCase {
            name: "a heartbeat extends its own lease",
            kind: hidden,
            rule: heartbeat_rule,
            setup: base(vec![claimed(7, "w2", 3)], vec![outbox(7, 1, "sending")]),
            call: Call::Heartbeat { action_id: 7, worker: "w2".into(), epoch: 3, now_ms: 35_000 },
            script: Script::default(),
        },
        UnitCase {
            name: "a fenced heartbeat says so and extends nothing",
            kind: hidden,
            rule: heartbeat_rule,
            setup: base(vec![claimed(7, "w4", 4)], vec![outbox(7, 1, "sending")]),
            call: Call::Heartbeat { action_id: 7, worker: "w2".into(), epoch: 3, now_ms: 35_000 },
            script: Script::default(),
        },
        // Issue 11: the fences hold on the epoch too. The same worker at an older
        // epoch (it lost the claim and took it again) is as fenced as another worker.
        UnitCase {
            name: "a heartbeat at an older epoch of the same worker extends nothing",
            kind: hidden,
            rule: heartbeat_rule,
            setup: base(vec![claimed(7, "w2", 4)], vec![outbox(7, 1, "sending")]),
            call: Call::Heartbeat { action_id: 7, worker: "w2".into(), epoch: 3, now_ms: 35_000 },
            script: Script::default(),
        },
        UnitCase {
            name: "write_intent at an older epoch of the same worker writes nothing",
            kind: hidden,
            rule: fence_rule,
            setup: base(vec![claimed(7, "w2", 4)], vec![]),
            call: Call::WriteIntent { action_id: 7, worker: "w2".into(), epoch: 3 },
            script: Script::default(),
        },
        UnitCase {
            name: "deliver_step at an older epoch of the same worker counts and sends nothing",
            kind: hidden,
            rule: fence_rule,
            setup: base(vec![claimed(7, "w2", 4)], vec![outbox(7, 0, "sending")]),
            call: deliver(3, 12_000),
            script: Script { sends: vec![accepted("msg-41")], ..Script::default() },
        },
        UnitCase {
            name: "a settle at an older epoch of the same worker changes nothing",
            kind: hidden,
            rule: fence_rule,
            setup: base(vec![claimed(7, "w2", 4)], vec![outbox(7, 1, "delivered")]),
            call: deliver(3, 12_000),
            script: Script::default(),
        },
        UnitCase {
            name: "claim counts only live leases toward the in-flight cap",
            kind: hidden,
            rule: claim_rule,
            setup: base(
                vec![
                    action(1, "store-b", "claimed", Some("w5"), 1, 20_000),
                    action(2, "store-b", "claimed", Some("w6"), 1, 20_000),
                    action(3, "store-b", "claimed", Some("w7"), 1, 20_000),
                    action(4, "store-b", "claimed", Some("w8"), 1, 90_000),
                    action(5, "store-b", "claimed", Some("w9"), 1, 90_000),
                    action(6, "store-a", "pending", None, 0, 0),
                ],
                vec![],
            ),
            call: Call::Claim { worker: "w1".into(), now_ms: 50_000 },
            script: Script::default(),
        },
        UnitCase {
            name: "claim breaks a tie between stores by store name",
            kind: hidden,
            rule: claim_rule,
            setup: Tables {
                stores: stores(&[("store-a", 5_000), ("store-b", 5_000)]),
                ..base(
                    vec![
                        action(1, "store-b", "pending", None, 0, 0),
                        action(2, "store-a", "pending", None, 0, 0),
                    ],
                    vec![],
                )
            },
            call: Call::Claim { worker: "w1".into(), now_ms: 50_000 },
            script: Script::default(),
        },
        UnitCase {
            name: "merge keeps delivered when a late failed comes",
            kind: hidden,
            rule: "Merge reports through the order sending < accepted < sent < delivered = failed; a report that is not ahead of the current status changes nothing.",
            setup: Tables::default(),
            call: Call::Merge { current: "delivered".into(), reported: "failed".into() },
            script: Script::default(),
        },
    ]
}
