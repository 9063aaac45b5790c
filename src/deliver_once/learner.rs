//! The learner's code as a host runs it (`LearnerHost`: the page's worker, the
//! grading CLI), adapted to this lab's `Solution`: each function's arguments as
//! JSON, the world passed with the call.

use super::model::{Policy, SendResult, Task};
use super::world::World;
use super::Solution;
use crate::lab::{learner_call, LearnerHost};
use crate::value::{LearnerError, Value};
use serde::Serialize;

#[derive(Serialize)]
struct DeliverOnceArgs<'a> {
    task: &'a Task,
    policy: &'a Policy,
}

#[derive(Serialize)]
struct NextStepArgs<'a> {
    task: &'a Task,
    result: &'a SendResult,
    now_s: f64,
    policy: &'a Policy,
}

pub struct Learner<'a>(pub &'a mut dyn LearnerHost);

impl Solution for Learner<'_> {
    fn deliver_once(
        &mut self,
        world: &World,
        task: &Task,
        policy: &Policy,
    ) -> Result<Value, LearnerError> {
        learner_call(
            self.0,
            "deliver_once",
            &DeliverOnceArgs { task, policy },
            world,
        )
    }

    fn next_step(
        &mut self,
        world: &World,
        task: &Task,
        result: &SendResult,
        now_s: f64,
        policy: &Policy,
    ) -> Result<Value, LearnerError> {
        let args = NextStepArgs {
            task,
            result,
            now_s,
            policy,
        };
        learner_call(self.0, "next_step", &args, world)
    }

    fn take_output(&mut self) -> Option<String> {
        self.0.take_output()
    }
}
