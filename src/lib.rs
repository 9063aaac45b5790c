//! delivery-lab's engine: for each lab, its world of fakes, its reference solution,
//! its test cases and the checks, plus one report model with its output formats.
//!
//! The engine knows nothing of WASM, Python or wall clocks. Learner code reaches it
//! through a lab's `Solution` trait; hosts (the browser worker, the CLI) implement
//! that trait over their interpreter. Everything random comes from a seed and every
//! time from the world's clock, so the same submission gets the same report anywhere.

pub mod lab;
pub mod report;
pub mod rng;
pub mod value;
#[cfg(target_arch = "wasm32")]
pub mod wasm;

pub use lab::{lab_by_id, Lab, LabInfo, RunMode};

/// Each lab, in course order: its module (`src/<module>/`), the type implementing
/// `Lab`, and its id, which is also its cargo feature (Cargo.toml's `labs` feature
/// lists the ids in the same order; tests/labs.rs holds them together). Adding a lab
/// is one line here.
macro_rules! labs {
    ($($id:literal => $module:ident :: $lab:ident),* $(,)?) => {
        $(#[cfg(feature = $id)] pub mod $module;)*

        /// The labs this build holds, in course order (each is a cargo feature).
        pub fn labs() -> &'static [&'static dyn Lab] {
            &[$(#[cfg(feature = $id)] &$module::$lab,)*]
        }
    };
}

labs! {
    "deliver-once" => deliver_once::DeliverOnce,
    "courier" => courier::Courier,
}
pub use report::{Report, TestKind, TestStatus};
pub use value::{LearnerError, Value};
