//! The learner's code as a host runs it (`LearnerHost`: the page's worker, the
//! grading CLI), adapted to this lab's `Backend`: each piece's call with its step's
//! world, and the grader's own operations on the run's database, which the host
//! keeps (`db_store.py`): typed `StoreOp`s on a path of their own
//! (`LearnerHost::store`), never a learner call.

use super::sim::{ActionRow, Call, Config, Backend, RunStop, StepWorld, Tables};
use crate::lab::{learner_call, LearnerHost, StoreOp};
use crate::value::{LearnerError, Value};
use serde::Serialize;

pub struct LearnerBackend<'a>(pub &'a mut dyn LearnerHost);

#[derive(Serialize)]
struct ResetArgs<'a> {
    cfg: &'a Config,
    stores: &'a [String],
    /// The tables, from the one place they are defined.
    schema: &'static str,
}

impl LearnerBackend<'_> {
    /// A store operation: `{"ok": ...}` or `{"error": {"message": ...}}`.
    fn store(&mut self, op: StoreOp, args: &impl Serialize) -> Result<serde_json::Value, RunStop> {
        let name = op.name();
        let failed = |why: String| RunStop::Failed(format!("{name} on the run's database: {why}"));
        let args = serde_json::to_string(args).map_err(|e| failed(e.to_string()))?;
        let text = self.0.store(op, &args).map_err(failed)?;
        let v: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| failed(format!("the host's answer is not JSON ({e})")))?;
        match (v.get("ok"), v.get("error")) {
            (Some(ok), None) => Ok(ok.clone()),
            // The limit can land while the host works for the lab.
            (None, Some(e)) if e.get("kind").and_then(|k| k.as_str()) == Some("timeout") => {
                Err(RunStop::TimedOut(format!(
                    "{name} on the run's database: the run reached its time limit"
                )))
            }
            (None, Some(e)) => Err(failed(
                e.get("message")
                    .and_then(|m| m.as_str())
                    .unwrap_or("failed")
                    .to_string(),
            )),
            _ => Err(failed("the host's answer is neither ok nor error".into())),
        }
    }
}

impl Backend for LearnerBackend<'_> {
    fn reset(&mut self, cfg: &Config, stores: &[String]) -> Result<(), RunStop> {
        let args = ResetArgs {
            cfg,
            stores,
            schema: super::SCHEMA_SQL,
        };
        self.store(StoreOp::Reset, &args).map(|_| ())
    }

    fn enqueue(&mut self, action: &ActionRow) -> Result<(), RunStop> {
        self.store(StoreOp::Enqueue, action).map(|_| ())
    }

    fn settle(&mut self, action_id: u64, now_ms: u64) -> Result<(), RunStop> {
        self.store(StoreOp::Settle, &(action_id, now_ms))
            .map(|_| ())
    }

    fn call(&mut self, call: &Call, world: &StepWorld) -> Result<Value, LearnerError> {
        learner_call(self.0, call.function(), call, world)
    }

    fn kill(&mut self, worker: &str) {
        // A host that cannot close the connection still loses the worker's
        // transaction at its next reset; nothing to report here.
        let _ = self.store(StoreOp::Kill, &worker);
    }

    fn restart_db(&mut self) {
        let _ = self.store(StoreOp::Restart, &());
    }

    fn dump(&mut self) -> Result<Tables, RunStop> {
        let v = self.store(StoreOp::Dump, &())?;
        Tables::from_json(&v)
            .map_err(|e| RunStop::Failed(format!("the host's tables do not read: {e}")))
    }

    fn load(&mut self, tables: &Tables) -> Result<(), RunStop> {
        self.store(StoreOp::Load, tables).map(|_| ())
    }

    fn take_output(&mut self) -> Option<String> {
        self.0.take_output()
    }
}
