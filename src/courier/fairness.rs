//! The fairness run: 100 stores, one of them sending 10x (steady, then all at once),
//! workers claiming through a backend's `claim`; the other 99 stores' p95 latency
//! (arrival to the message going out, lab ms) against the run where every store is
//! equal. Sized at about 40% busy so that the noisy store's extra 9% of traffic
//! barely moves the queue by itself: what moves p95 is the scheduler.

use super::sim::{action_row, read_claim, store_name, Call, Config, Backend, RunStop, StepWorld};
use crate::report::{Bar, BarGroup, Figure};
use crate::rng::SeededRng;
use serde::Serialize;
use std::collections::BTreeMap;

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FairPlan {
    pub seed: u64,
    pub stores: u64,
    pub workers: u64,
    pub duration_ms: u64,
    /// Each store's arrivals per second of lab time (Poisson).
    pub per_store_per_s: f64,
    pub noisy_factor: u64,
    /// In the bulk load the noisy store's whole share arrives at this instant.
    pub bulk_at_ms: u64,
    /// Time a worker spends on one action (uniform, lab ms).
    pub service_ms: (u64, u64),
    /// A claim passes when the other stores' p95 stays within this of the baseline.
    pub max_ratio: f64,
}

impl FairPlan {
    pub fn full(seed: u64) -> FairPlan {
        FairPlan {
            seed,
            stores: 100,
            workers: 20,
            duration_ms: 8_000,
            per_store_per_s: 2.0,
            noisy_factor: 10,
            bulk_at_ms: 2_000,
            service_ms: (20, 80),
            max_ratio: 1.10,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Load {
    Equal,
    Steady10x,
    Bulk10x,
}

pub const LOADS: [Load; 3] = [Load::Equal, Load::Steady10x, Load::Bulk10x];

pub fn load_name(l: Load) -> &'static str {
    match l {
        Load::Equal => "every store equal",
        Load::Steady10x => "one store 10x, steady",
        Load::Bulk10x => "one store 10x, all at once",
    }
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FairRow {
    pub load: Load,
    /// The other 99 stores' p95 latency, lab ms.
    pub p95_ms: u64,
    /// Against this claim's own every-store-equal run.
    pub ratio: f64,
    pub actions: u64,
    /// Claims that returned an action that was not waiting (or no such action).
    pub bad_claims: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FairnessReport {
    pub seed: u64,
    pub max_ratio: f64,
    pub rows: Vec<FairRow>,
    /// Why the run ended early: a claim raised, returned the wrong shape or reached
    /// the time limit (the load it happened in starts the message).
    pub error: Option<RunStop>,
}

impl FairnessReport {
    pub fn passed(&self) -> bool {
        self.error.is_none()
            && self
                .rows
                .iter()
                .all(|r| r.ratio <= self.max_ratio && r.bad_claims == 0)
    }
}

/// Arrivals: (time, store, service ms). The other stores' arrivals and every
/// action's service time come from per-store streams, so they are the same in
/// every load: only the noisy store differs.
fn arrivals(plan: &FairPlan, load: Load) -> Vec<(u64, u64, u64)> {
    let mut out = Vec::new();
    for store in 0..plan.stores {
        let mut rng = SeededRng::new(plan.seed.wrapping_mul(1_000_003).wrapping_add(store));
        let noisy = store == 0;
        let rate = match (noisy, load) {
            (true, Load::Steady10x) => plan.per_store_per_s * plan.noisy_factor as f64,
            _ => plan.per_store_per_s,
        };
        let mut t = 0.0;
        loop {
            t += -(1.0 - rng.unit()).ln() / rate * 1000.0;
            if t >= plan.duration_ms as f64 {
                break;
            }
            let service = plan.service_ms.0 + rng.below(plan.service_ms.1 - plan.service_ms.0 + 1);
            out.push((t as u64, store, service));
        }
        if noisy && load == Load::Bulk10x {
            let n = (plan.per_store_per_s * plan.noisy_factor as f64 * plan.duration_ms as f64
                / 1000.0) as u64;
            for _ in 0..n {
                let service =
                    plan.service_ms.0 + rng.below(plan.service_ms.1 - plan.service_ms.0 + 1);
                out.push((plan.bulk_at_ms, 0, service));
            }
        }
    }
    out.sort();
    out
}

fn p95(mut xs: Vec<u64>) -> u64 {
    if xs.is_empty() {
        return 0;
    }
    xs.sort_unstable();
    xs[((xs.len() as f64 * 0.95).ceil() as usize).clamp(1, xs.len()) - 1]
}

#[derive(Clone, Debug)]
enum Ev {
    Arrive(usize),
    Free(usize, u64),
}

/// One load through the backend's claim. Returns the other stores' latencies.
fn one_load(backend: &mut dyn Backend, plan: &FairPlan, load: Load) -> Result<(Vec<u64>, u64), RunStop> {
    let cfg = Config::default();
    let stores: Vec<String> = (0..plan.stores).map(store_name).collect();
    backend.reset(&cfg, &stores)?;
    let arr = arrivals(plan, load);
    let mut events: BTreeMap<(u64, u64), Ev> = BTreeMap::new();
    let mut seq = 0;
    for (i, a) in arr.iter().enumerate() {
        seq += 1;
        events.insert((a.0, seq), Ev::Arrive(i));
    }
    // Truth: which actions wait (id -> arrival index).
    let mut waiting: BTreeMap<u64, usize> = BTreeMap::new();
    let mut idle: Vec<bool> = vec![true; plan.workers as usize];
    let mut latencies = Vec::new();
    let mut bad_claims = 0;
    // The fairness run's claims touch no provider and never fault.
    let calm = StepWorld::calm();
    let claim = |backend: &mut dyn Backend, w: usize, now_ms: u64| -> Result<Option<u64>, RunStop> {
        let call = Call::Claim {
            worker: format!("w{w}"),
            now_ms,
        };
        let v = backend.call(&call, &calm)?;
        Ok(read_claim(&v).map_err(RunStop::Failed)?.map(|(id, _)| id))
    };
    while let Some(((t, _), ev)) = events.pop_first() {
        let worker = match ev {
            Ev::Arrive(i) => {
                let id = i as u64 + 1;
                backend.enqueue(&action_row(id, arr[i].1, t))?;
                waiting.insert(id, i);
                match idle.iter().position(|x| *x) {
                    Some(w) => w,
                    None => continue,
                }
            }
            Ev::Free(w, id) => {
                backend.settle(id, t)?;
                w
            }
        };
        // The worker asks for work until it gets some or there is none.
        loop {
            match claim(backend, worker, t)? {
                None => {
                    idle[worker] = true;
                    break;
                }
                Some(id) => match waiting.remove(&id) {
                    Some(i) => {
                        idle[worker] = false;
                        let done = t + arr[i].2;
                        if arr[i].1 != 0 {
                            latencies.push(done - arr[i].0);
                        }
                        seq += 1;
                        events.insert((done, seq), Ev::Free(worker, id));
                        break;
                    }
                    None => {
                        bad_claims += 1;
                        if bad_claims > 1000 {
                            return Err(RunStop::Failed(
                                "claim keeps returning actions that are not waiting".into(),
                            ));
                        }
                    }
                },
            }
        }
    }
    Ok((latencies, bad_claims))
}

/// The three loads through `backend`'s claim; ratios against its own equal load.
pub fn fairness_run(backend: &mut dyn Backend, plan: &FairPlan) -> FairnessReport {
    let mut report = FairnessReport {
        seed: plan.seed,
        max_ratio: plan.max_ratio,
        rows: Vec::new(),
        error: None,
    };
    let mut base = 0;
    for load in LOADS {
        match one_load(backend, plan, load) {
            Ok((lat, bad)) => {
                let n = lat.len() as u64;
                let p = p95(lat);
                if load == Load::Equal {
                    base = p.max(1);
                }
                report.rows.push(FairRow {
                    load,
                    p95_ms: p,
                    ratio: (p as f64 / base as f64 * 100.0).round() / 100.0,
                    actions: n,
                    bad_claims: bad,
                });
            }
            Err(e) => {
                report.error = Some(e.map(|m| format!("{}: {m}", load_name(load))));
                break;
            }
        }
    }
    report
}

/// `1.05x`, in integer hundredths (float formatting with a precision costs the
/// WASM ~8 KB).
fn times(ratio: f64) -> String {
    let c = (ratio * 100.0).round() as i64;
    format!("{}.{:02}x", c / 100, c % 100)
}

/// The fairness run as the page draws it: per load, your claim's ratio and FIFO's.
pub fn bars(yours: &FairnessReport, fifo: &FairnessReport) -> Figure {
    let bar = |label: &str, r: Option<&FairRow>| Bar {
        label: label.into(),
        ratio: r.map_or(0.0, |r| r.ratio),
        value: r.map_or_else(|| "not run".into(), |r| format!("{} ms", r.p95_ms)),
    };
    Figure::Bars {
        caption: "The other 99 stores' p95 latency against the run where every store is equal"
            .into(),
        limit: yours.max_ratio,
        groups: LOADS
            .iter()
            .enumerate()
            .map(|(i, load)| BarGroup {
                label: load_name(*load).into(),
                bars: vec![
                    bar("your claim", yours.rows.get(i)),
                    bar("FIFO", fifo.rows.get(i)),
                ],
            })
            .collect(),
    }
}

pub fn text(yours: &FairnessReport, fifo: &FairnessReport) -> String {
    let mut out = vec![format!(
        "The other 99 stores' p95 latency (arrival to the message going out, lab ms), against the run where every store is equal; passes within {}%.",
        ((yours.max_ratio - 1.0) * 100.0).round() as i64
    )];
    if let Some(e) = &yours.error {
        out.push(format!("Your claim could not finish the run: {e}"));
    }
    out.push(String::new());
    out.push(format!(
        "{:<30} {:>18} {:>18}",
        "load", "your claim", "FIFO"
    ));
    let bar = |ratio: f64| "#".repeat(((ratio * 10.0).round() as usize).min(40));
    for (i, y) in yours.rows.iter().enumerate() {
        let f = fifo.rows.get(i);
        out.push(format!(
            "{:<30} {:>9} ms {:>6} {:>9} ms {:>6}",
            load_name(y.load),
            y.p95_ms,
            times(y.ratio),
            f.map_or(0, |f| f.p95_ms),
            times(f.map_or(0.0, |f| f.ratio))
        ));
    }
    out.push(String::new());
    for (i, y) in yours.rows.iter().enumerate() {
        out.push(format!(
            "  yours {:<28} {} {}",
            load_name(y.load),
            bar(y.ratio),
            times(y.ratio)
        ));
        if let Some(f) = fifo.rows.get(i) {
            out.push(format!(
                "  FIFO  {:<28} {} {}",
                load_name(f.load),
                bar(f.ratio),
                times(f.ratio)
            ));
        }
    }
    if yours.rows.iter().any(|r| r.bad_claims > 0) {
        out.push(
            "\nYour claim returned actions that were not waiting (already claimed or dispatched)."
                .into(),
        );
    }
    out.join("\n")
}
