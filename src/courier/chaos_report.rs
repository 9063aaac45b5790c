//! What a chaos run found: the provider log's tally, the kills dealt, the stories of
//! the actions that broke a row, and the rows the lab's text and page show.

use super::chaos_plan::{kill_name, KILL_KINDS};
use super::provider::ChaosTally;
use crate::report::FigureRow;
use serde::Serialize;
use std::collections::BTreeMap;

/// One line of an action's story, in lab time.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StoryLine {
    pub t_ms: u64,
    pub action: u64,
    pub what: String,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ChaosReport {
    pub seed: u64,
    pub tally: ChaosTally,
    /// Actions whose outbox status differs from the provider's final status.
    pub outcomes_differ: usize,
    /// Claims of an action a healthy, live worker still held.
    pub taken_from_healthy: usize,
    /// Kills per kind, in `KillKind` order (as the plan's).
    pub kills: [u64; 4],
    pub zombies: u64,
    pub slow: u64,
    pub db_restart: (u64, u64),
    /// Steps that raised or returned something other than the piece's contract; the
    /// worker crashed and restarted. The first few messages are kept.
    pub crashes: u64,
    /// Crashes with the database up: the learner's own errors.
    pub crashes_db_up: u64,
    pub crash_messages: Vec<String>,
    pub steps: u64,
    pub end_ms: u64,
    /// Actions that broke a row, first ones first, with their stories.
    pub failing: Vec<(u64, String)>,
    pub stories: BTreeMap<u64, Vec<StoryLine>>,
}

impl ChaosReport {
    pub fn kills_total(&self) -> u64 {
        self.kills.iter().sum()
    }

    /// Each kind of kill that happened, with its count, by name.
    pub fn kills_by_name(&self) -> Vec<(&'static str, u64)> {
        let mut out: Vec<_> = KILL_KINDS
            .iter()
            .map(|k| (kill_name(*k), self.kills[*k as usize]))
            .filter(|(_, n)| *n > 0)
            .collect();
        out.sort();
        out
    }

    /// The run's rows, each value against what it must be: what the text prints,
    /// the page draws as a table, and the run's pass (`passed`) is read from.
    pub fn rows(&self) -> Vec<FigureRow> {
        let t = &self.tally;
        let zero = |label: &str, n: u64| row(label, n.to_string(), "0", n == 0);
        vec![
            row(
                "actions with exactly one message sent",
                format!("{} of {}", t.exactly_one_effect, t.actions),
                &format!("{} of {}", t.actions, t.actions),
                t.exactly_one_effect == t.actions,
            ),
            zero(
                "actions with more than one message",
                t.more_than_one_effect as u64,
            ),
            zero("actions with no message", t.no_effect as u64),
            zero(
                "sends with no lookup since the previous send",
                t.resends_without_lookup as u64,
            ),
            zero(
                "outbox statuses that differ from the provider's final one",
                self.outcomes_differ as u64,
            ),
            zero(
                "jobs claimed from a healthy worker",
                self.taken_from_healthy as u64,
            ),
            zero(
                "steps that failed while the database was up",
                self.crashes_db_up,
            ),
        ]
    }

    /// Every row at its required value.
    pub fn passed(&self) -> bool {
        self.rows().iter().all(|r| r.ok)
    }
}

fn row(label: &str, value: String, must: &str, ok: bool) -> FigureRow {
    FigureRow {
        label: label.into(),
        value,
        must: must.into(),
        ok,
    }
}

impl ChaosReport {
    /// The chaos test's message: the run in a line, each row, the crashes, and the
    /// stories of the first actions that broke a row.
    pub fn text(&self, seed: u64) -> String {
        let r = self;
        let mut out = vec![
            format!("Seed {seed}; {} kills ({}), {} zombies, {} slow workers, the database down from {} to {} ms; {} steps, ended at {} ms of lab time.",
                r.kills_total(),
                r.kills_by_name().iter().map(|(k, v)| format!("{v} {k}")).collect::<Vec<_>>().join(", "),
                r.zombies, r.slow, r.db_restart.0, r.db_restart.1, r.steps, r.end_ms),
            String::new(),
        ];
        out.extend(r.rows().into_iter().map(|x| {
            let mark = if x.ok { "ok  " } else { "FAIL" };
            format!("{mark} {}: {} (must be {})", x.label, x.value, x.must)
        }));
        if r.crashes > 0 {
            out.push(String::new());
            out.push(format!(
                "{} steps raised or returned the wrong shape (the worker restarted):",
                r.crashes
            ));
            out.extend(
                r.crash_messages
                    .iter()
                    .map(|m| format!("  {}", crate::report::cap_chars(m, 1500))),
            );
        }
        for (a, why) in r.failing.iter().take(3) {
            out.push(String::new());
            out.push(format!("Action {a}: {why}. Its story, in lab time:"));
            // A long story keeps its start and its end.
            let lines: Vec<_> = r.stories.get(a).into_iter().flatten().collect();
            const HEAD: usize = 24;
            const TAIL: usize = 8;
            for (i, l) in lines.iter().enumerate() {
                if i == HEAD && lines.len() > HEAD + TAIL {
                    out.push(format!(
                        "  ... {} more lines ...",
                        lines.len() - HEAD - TAIL
                    ));
                }
                if i < HEAD || i + TAIL >= lines.len() || lines.len() <= HEAD + TAIL {
                    out.push(format!("  {:>9} ms  {}", l.t_ms, l.what));
                }
            }
        }
        if r.failing.len() > 3 {
            out.push(format!(
                "\n({} more actions broke a row.)",
                r.failing.len() - 3
            ));
        }
        out.join("\n")
    }
}
