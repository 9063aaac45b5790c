//! The learner's code as a host runs it (`LearnerHost`: the page's worker, the
//! grading CLI), adapted to this lab's `Host`: each piece's call with its step's
//! world, and the host's trusted operations on the run's database, named here
//! (`__courier_reset` and the like: calls with no world, never the learner's).

use super::sim::{ActionRow, Call, Config, Host, RunStop, StepWorld, Tables};
use crate::lab::{learner_call, LearnerHost};
use crate::value::{LearnerError, Value};
use serde::Serialize;

pub struct Learner<'a>(pub &'a mut dyn LearnerHost);

#[derive(Serialize)]
struct ResetArgs<'a> {
    cfg: &'a Config,
    stores: &'a [String],
    /// The tables, from the one place they are defined.
    schema: &'static str,
}

impl Learner<'_> {
    /// A trusted operation: `{"ok": ...}` or `{"error": {"message": ...}}`.
    fn trusted(&mut self, op: &str, args: &impl Serialize) -> Result<serde_json::Value, RunStop> {
        let failed = |why: String| RunStop::Failed(format!("{op}: {why}"));
        let args = serde_json::to_string(args).map_err(|e| failed(e.to_string()))?;
        let text = self.0.call(op, &args, None).map_err(failed)?;
        let v: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| failed(format!("the host's answer is not JSON ({e})")))?;
        match (v.get("ok"), v.get("error")) {
            (Some(ok), None) => Ok(ok.clone()),
            // The limit can land while the host works for the lab.
            (None, Some(e)) if e.get("kind").and_then(|k| k.as_str()) == Some("timeout") => Err(
                RunStop::TimedOut(format!("{op}: the run reached its time limit")),
            ),
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

impl Host for Learner<'_> {
    fn reset(&mut self, cfg: &Config, stores: &[String]) -> Result<(), RunStop> {
        let args = ResetArgs {
            cfg,
            stores,
            schema: super::SCHEMA_SQL,
        };
        self.trusted("__courier_reset", &args).map(|_| ())
    }

    fn enqueue(&mut self, action: &ActionRow) -> Result<(), RunStop> {
        self.trusted("__courier_enqueue", action).map(|_| ())
    }

    fn settle(&mut self, action_id: u64, now_ms: u64) -> Result<(), RunStop> {
        self.trusted("__courier_settle", &(action_id, now_ms))
            .map(|_| ())
    }

    fn call(&mut self, call: &Call, world: &StepWorld) -> Result<Value, LearnerError> {
        learner_call(self.0, call.function(), call, world)
    }

    fn kill(&mut self, worker: &str) {
        // A host that cannot close the connection still loses the worker's
        // transaction at its next reset; nothing to report here.
        let _ = self.trusted("__courier_kill", &worker);
    }

    fn restart_db(&mut self) {
        let _ = self.trusted("__courier_restart", &());
    }

    fn dump(&mut self) -> Result<Tables, RunStop> {
        let v = self.trusted("__courier_dump", &())?;
        Tables::from_json(&v)
            .map_err(|e| RunStop::Failed(format!("the host's tables do not read: {e}")))
    }

    fn load(&mut self, tables: &Tables) -> Result<(), RunStop> {
        self.trusted("__courier_load", tables).map(|_| ())
    }

    fn take_output(&mut self) -> Option<String> {
        self.0.take_output()
    }
}
