//! The courier lab's misbehaving provider: seeded, with the contract's rates, key
//! memory, lagging lookups and webhooks, and a log the chaos checks can trust.

use delivery_lab::courier::provider::{
    tally, Entry, LookupAnswer, Provider, Rates, SendAnswer, Status, Timing,
};

fn provider(seed: u64) -> Provider {
    Provider::new(seed, Rates::default(), Timing::default())
}

fn effects(p: &Provider) -> usize {
    p.log()
        .iter()
        .filter(|e| matches!(e, Entry::Effect { .. }))
        .count()
}

#[test]
fn the_same_seed_gives_the_same_log() {
    let run = |seed| {
        let mut p = provider(seed);
        for i in 0..500u64 {
            let t = i as f64 * 0.5;
            p.send(t, i, &format!("k{i}"));
            p.lookup(t + 0.1, &format!("k{}", i / 2));
            p.due_webhooks(t + 0.2);
        }
        serde_json::to_string(p.log()).unwrap()
    };
    assert_eq!(run(7), run(7));
    assert_ne!(run(7), run(8));
}

#[test]
fn timeouts_come_at_the_contract_rate_and_hide_whether_the_send_happened() {
    let mut p = provider(1);
    let n = 20_000u64;
    let (mut timeouts, mut effect_behind_timeout, mut lost) = (0, 0, 0);
    for i in 0..n {
        let key = format!("k{i}");
        let before = p.log().len();
        if p.send(i as f64, i, &key) == SendAnswer::Timeout {
            timeouts += 1;
            if p.log()[before..]
                .iter()
                .any(|e| matches!(e, Entry::Effect { .. }))
            {
                effect_behind_timeout += 1;
            } else {
                lost += 1;
            }
        }
    }
    let rate = timeouts as f64 / n as f64;
    assert!((0.044..0.056).contains(&rate), "timeout rate {rate}");
    // Both happen: a timeout tells the caller nothing.
    assert!(
        effect_behind_timeout > 300 && lost > 300,
        "{effect_behind_timeout} / {lost}"
    );
}

#[test]
fn a_known_key_is_replayed_for_an_hour_and_then_forgotten() {
    let mut p = Provider::new(
        3,
        Rates {
            timeout: 0.0,
            ..Rates::default()
        },
        Timing::default(),
    );
    let first = p.send(0.0, 1, "action-1");
    assert_eq!(
        p.send(3599.0, 1, "action-1"),
        first,
        "same key within the hour: same answer"
    );
    assert_eq!(effects(&p), 1, "a replay sends nothing");
    assert!(p.log().iter().any(|e| matches!(e, Entry::Replay { .. })));
    let later = p.send(3600.0, 1, "action-1");
    assert_ne!(later, first, "after an hour the key is new again");
    assert_eq!(
        effects(&p),
        2,
        "the known limit: a key must outlive every retry"
    );
}

#[test]
fn a_lookup_can_lag_its_writes_but_not_for_long() {
    let rates = Rates {
        timeout: 0.0,
        ..Rates::default()
    };
    let (mut lagged, mut total) = (0, 0);
    for seed in 0..200 {
        let mut p = Provider::new(seed, rates.clone(), Timing::default());
        p.send(10.0, 1, "k");
        total += 1;
        if p.lookup(10.0, "k") == LookupAnswer::NotFound {
            lagged += 1;
        }
        assert!(
            matches!(p.lookup(12.0, "k"), LookupAnswer::Found { .. }),
            "seed {seed}"
        );
    }
    assert!(
        lagged > total / 2,
        "{lagged} of {total} fresh writes were not yet visible"
    );
    let mut p = Provider::new(1, rates, Timing::default());
    assert_eq!(p.lookup(5.0, "never-sent"), LookupAnswer::NotFound);
}

#[test]
fn webhooks_come_late_duplicated_and_out_of_order_at_the_contract_rates() {
    let rates = Rates {
        timeout: 0.0,
        ..Rates::default()
    };
    let mut p = Provider::new(11, rates, Timing::default());
    let n = 10_000u64;
    for i in 0..n {
        p.send(i as f64, i, &format!("k{i}"));
    }
    let hooks = p.due_webhooks(f64::INFINITY);
    let mut by_key: std::collections::BTreeMap<&str, Vec<_>> = Default::default();
    for h in &hooks {
        by_key.entry(h.key.as_str()).or_default().push(h);
    }
    let (mut dup, mut backwards, mut failed) = (0, 0, 0);
    for hs in by_key.values() {
        let mut ids: Vec<_> = hs.iter().map(|h| h.event_id.as_str()).collect();
        let all = ids.len();
        ids.dedup();
        ids.sort();
        ids.dedup();
        dup += all - ids.len();
        let first_real = hs.iter().find(|h| h.status != Status::Sent).unwrap();
        let sent = hs.iter().find(|h| h.status == Status::Sent).unwrap();
        if first_real.due_s < sent.due_s {
            backwards += 1;
        }
        if hs.iter().any(|h| h.status == Status::Failed) {
            failed += 1;
        }
    }
    let per = |x: usize, of: u64| x as f64 / of as f64;
    // Two webhooks per message, each duplicated at 2%.
    assert!((0.03..0.05).contains(&per(dup, n)), "duplicates {dup}");
    assert!(
        (0.08..0.12).contains(&per(backwards, n)),
        "out of order {backwards}"
    );
    assert!(
        (0.005..0.016).contains(&per(failed, n)),
        "late failed {failed}"
    );
    let finals = p.final_statuses();
    assert_eq!(
        finals.values().filter(|s| **s == Status::Failed).count(),
        failed
    );
}

/// Two strategies against the same provider: resending with a new key on a timeout
/// (the mistake) and looking the key up before resending with the same key (the
/// contract). The chaos tally, read from the provider's log, tells them apart.
#[test]
fn the_chaos_tally_reads_exactly_once_from_the_log() {
    let actions: Vec<u64> = (0..2000).collect();
    let naive = {
        let mut p = provider(5);
        for &a in &actions {
            let mut attempt = 0;
            while p.send(a as f64, a, &format!("a{a}-try{attempt}")) == SendAnswer::Timeout {
                attempt += 1;
            }
        }
        tally(p.log(), actions.iter().copied())
    };
    assert!(naive.more_than_one_effect > 20, "{naive:?}");
    assert!(naive.resends_without_lookup > 50, "{naive:?}");

    let careful = {
        let mut p = provider(5);
        for &a in &actions {
            let key = format!("a{a}");
            let mut t = a as f64 * 10.0;
            let mut answer = p.send(t, a, &key);
            while answer == SendAnswer::Timeout {
                t += 3.0; // past the lookup's lag
                match p.lookup(t, &key) {
                    LookupAnswer::Found { .. } => break,
                    LookupAnswer::NotFound => answer = p.send(t, a, &key),
                    LookupAnswer::Timeout => {}
                }
            }
        }
        tally(p.log(), actions.iter().copied())
    };
    assert_eq!(careful.exactly_one_effect, 2000, "{careful:?}");
    assert_eq!((careful.more_than_one_effect, careful.no_effect), (0, 0));
    assert_eq!(careful.resends_without_lookup, 0, "{careful:?}");
}
