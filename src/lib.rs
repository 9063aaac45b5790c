//! delivery-lab's engine: for each lab, its world of fakes, its reference solution,
//! its test cases and the checks, plus one report model with its output formats.
//!
//! The engine knows nothing of WASM, Python or wall clocks. Learner code reaches it
//! through a lab's `Solution` trait; hosts (the browser worker, the CLI) implement
//! that trait over their interpreter. Everything random comes from a seed and every
//! time from the world's clock, so the same submission gets the same report anywhere.

#[cfg(feature = "courier")]
pub mod courier;
#[cfg(feature = "deliver-once")]
pub mod deliver_once;
pub mod lab;
pub mod report;
pub mod rng;
pub mod value;
#[cfg(target_arch = "wasm32")]
pub mod wasm;

pub use lab::{lab_by_id, labs, Lab, LabInfo, RunMode};
pub use report::{Report, TestKind, TestStatus};
pub use value::{LearnerError, Value};
