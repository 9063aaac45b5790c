//! The chaos run's size: its actions, stores and workers, and the kills, freezes,
//! slow workers and database restart it deals out.

use serde::Serialize;

/// Where a worker was killed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
// The order is the order of `ChaosPlan::kills` (the enum's index is the slot).
pub enum KillKind {
    MidTransaction,
    BetweenCommitAndSend,
    RequestOnTheWire,
    FrozenPastLease,
}

/// The chaos run's size.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ChaosPlan {
    pub seed: u64,
    pub actions: u64,
    pub stores: u64,
    pub workers: u64,
    /// Arrivals are spread over this much lab time.
    pub arrivals_ms: u64,
    /// Kills per kind, in `KillKind` order (200 in all by default).
    pub kills: [u64; 4],
    /// Workers frozen past their lease that later resume (zombies).
    pub zombies: u64,
    /// Slow but healthy workers: their next step comes after twice the lease, and
    /// only their heartbeats keep the job theirs.
    pub slow: u64,
    pub db_restart_at_ms: u64,
    pub db_restart_ms: u64,
    /// Lab time a step takes, and a killed worker's restart.
    pub step_ms: u64,
    pub respawn_ms: u64,
    /// An idle worker asks for work again this often (expired leases have no arrival).
    pub idle_poll_ms: u64,
    /// The run stops at the latest here after the last arrival.
    pub drain_max_ms: u64,
}

impl ChaosPlan {
    pub fn full(seed: u64) -> ChaosPlan {
        ChaosPlan {
            seed,
            actions: 2_000,
            stores: 100,
            workers: 8,
            arrivals_ms: 40_000,
            kills: [70, 50, 50, 30],
            zombies: 20,
            slow: 20,
            db_restart_at_ms: 16_000,
            db_restart_ms: 3_000,
            step_ms: 4,
            respawn_ms: 500,
            idle_poll_ms: 2_000,
            drain_max_ms: 600_000,
        }
    }
}

/// Every kind, in its order (the index of a plan's or a report's counts).
pub const KILL_KINDS: [KillKind; 4] = [
    KillKind::MidTransaction,
    KillKind::BetweenCommitAndSend,
    KillKind::RequestOnTheWire,
    KillKind::FrozenPastLease,
];

pub fn kill_name(k: KillKind) -> &'static str {
    match k {
        KillKind::MidTransaction => "mid-transaction",
        KillKind::BetweenCommitAndSend => "between commit and send",
        KillKind::RequestOnTheWire => "with a request on the wire",
        KillKind::FrozenPastLease => "while frozen past the lease",
    }
}
