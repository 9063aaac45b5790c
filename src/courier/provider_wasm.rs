//! The courier lab's own WASM export: its misbehaving provider on its own, for the
//! real run's provider server. The engine's boundary (`src/wasm.rs`) knows nothing of
//! it; this module is compiled for wasm32 only, in a build that holds this lab.

use crate::wasm::{js_error, to_json};
use wasm_bindgen::prelude::*;

/// The courier lab's misbehaving provider on its own, for the real run's provider
/// server (`www/real/provider.mjs`): the simulation's provider, so its behaviour is
/// written once. Time is the caller's (seconds since the run began); answers and
/// logs are JSON of the engine's types.
#[wasm_bindgen]
pub struct CourierProvider {
    inner: crate::courier::provider::Provider,
}

#[wasm_bindgen]
impl CourierProvider {
    /// The provider with the lab's rates and timing, seeded.
    #[wasm_bindgen(constructor)]
    pub fn new(seed: u32) -> CourierProvider {
        use crate::courier::provider::{Provider, Rates, Timing};
        CourierProvider {
            inner: Provider::new(u64::from(seed), Rates::default(), Timing::default()),
        }
    }

    /// A send for `action` with idempotency key `key`: `{"answer": "accepted",
    /// "message_id"}` or `{"answer": "timeout"}`.
    pub fn send(&mut self, now_s: f64, action: f64, key: &str) -> Result<String, JsError> {
        if !(action.is_finite() && action >= 0.0 && action.fract() == 0.0) {
            return Err(js_error("send: the action must be a whole number"));
        }
        to_json(&self.inner.send(now_s, action as u64, key))
    }

    /// `{"answer": "found", "message_id", "status"}`, `{"answer": "not-found"}` or
    /// `{"answer": "timeout"}`.
    pub fn lookup(&mut self, now_s: f64, key: &str) -> Result<String, JsError> {
        to_json(&self.inner.lookup(now_s, key))
    }

    /// The webhooks due by `now_s`, in due order: `[{event_id, key, message_id, status, due_s}]`.
    pub fn due_webhooks(&mut self, now_s: f64) -> Result<String, JsError> {
        to_json(&self.inner.due_webhooks(now_s))
    }

    /// Webhooks made but not yet due.
    pub fn pending_webhooks(&self) -> u32 {
        self.inner.pending_webhooks() as u32
    }

    /// The provider's own log from entry `from` on (it only grows).
    pub fn log_since(&self, from: u32) -> Result<String, JsError> {
        let log = self.inner.log();
        to_json(&log.get(from as usize..).unwrap_or(&[]))
    }

    /// The chaos run's counts for these actions, read from the log alone.
    pub fn tally(&self, actions: Vec<f64>) -> Result<String, JsError> {
        let actions = actions.into_iter().map(|a| a as u64);
        to_json(&crate::courier::provider::tally(self.inner.log(), actions))
    }

    /// Each action's final status at the provider: `{action: status}`.
    pub fn final_statuses(&self) -> Result<String, JsError> {
        to_json(&self.inner.final_statuses())
    }
}
