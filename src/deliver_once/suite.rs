//! The runner: plays every case against a solution and turns what happened into test
//! results. A learner error is confined to the test it happened in.

use super::case::{Body, Call, Case, Scripted};
use super::differential;
use super::check::run_reference;
use super::play::{play, Outcome};
use super::world::World;
use super::Solution;

/// An example's code as a learner reads it beside the test (Exercism's `test_code`):
/// each call in Python with what it must return, the reference's answer in the case's
/// own world, after what the world holds before the first call.
pub fn code_of(case: &Case) -> String {
    let s = match &case.body {
        Body::Scripted(s) => s,
        Body::Differential { spec, .. } => {
            return format!(
            "# deliver_once and next_step compared with the reference on {} and {} random inputs",
            spec.deliver_once, spec.next_step
        )
        }
    };
    let mut lines = Vec::new();
    for k in &s.kv {
        let ttl = k.ttl_s.map_or("no ttl".into(), |t| {
            format!("ttl={} s", crate::value::float_repr(t))
        });
        lines.push(format!(
            "# kv holds {} = {} ({ttl}, written at t={} s)",
            crate::value::str_repr(&k.key),
            crate::value::str_repr(&k.value),
            crate::value::float_repr(k.written_at_s)
        ));
    }
    let sends = s
        .steps
        .iter()
        .any(|st| matches!(st.call, Call::DeliverOnce { .. }));
    match s.provider.as_slice() {
        _ if !sends => {}
        [] => {}
        [one] => lines.push(format!("# every provider.send answers {}", one.repr())),
        many => {
            let answers: Vec<String> = many.iter().map(|a| a.repr()).collect();
            lines.push(format!(
                "# provider.send answers {}, then the last again",
                answers.join(", then ")
            ));
        }
    }
    let world = new_world(s);
    let timed = s.steps.iter().any(|st| st.at_s != 0.0);
    for step in &s.steps {
        world.advance_to(step.at_s);
        let expected = run_reference(&world, &step.call).value;
        if timed {
            lines.push(format!(
                "# t={} s on the lab clock",
                crate::value::float_repr(step.at_s)
            ));
        }
        lines.push(format!("assert {} == {expected}", step.call.text()));
    }
    lines.join("\n")
}

/// Runs one case. `run_seed` feeds the differential case; scripted cases carry their own.
pub fn run_case(case: &Case, solution: &mut dyn Solution, run_seed: u64) -> Outcome {
    match &case.body {
        Body::Scripted(s) => run_scripted(s, solution),
        Body::Differential { seed, spec } => differential::run(solution, run_seed, *seed, spec),
    }
}

pub fn new_world(s: &Scripted) -> World {
    let world = World::new(s.seed, s.provider.clone());
    for k in &s.kv {
        world.preload(&k.key, &k.value, k.ttl_s, k.written_at_s);
    }
    world
}

fn run_scripted(s: &Scripted, solution: &mut dyn Solution) -> Outcome {
    let calls = s.steps.iter().map(|step| (step.at_s, &step.call));
    play(
        solution,
        &new_world(s),
        &new_world(s),
        calls,
        true,
        |i, t_s, call| {
            format!(
                "Step {} of {}, at t={} s on the lab clock: {}",
                i + 1,
                s.steps.len(),
                crate::value::float_repr(t_s),
                call.text()
            )
        },
    )
}
