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
pub mod shrink;
pub mod value;
#[cfg(target_arch = "wasm32")]
pub mod wasm;

pub use lab::{lab_by_id, Lab, LabInfo, RunMode};

/// A lab's reference solution in Python (`reference_py!("reference.py")`, beside the
/// lab's `mod.rs`), or "" in a build without it: `DELIVERY_LAB_NO_REFERENCE=1` (build.rs
/// sets the `no_reference` cfg), which the page's graders of `./lab build --no-reference`
/// and of every `--no-hidden` build use, so no served file carries the reference.
#[cfg(not(no_reference))]
macro_rules! reference_py {
    ($file:literal) => {
        include_str!($file)
    };
}
#[cfg(no_reference)]
macro_rules! reference_py {
    ($file:literal) => {
        ""
    };
}

/// The labs, from their one list (`src/labs.rs`): each lab's module, and `labs()`.
/// A build holds every lab, or those `DELIVERY_LAB_ONLY` names (build.rs sets the
/// `lab` cfg of each lab it holds): a page's grader holds its own lab only.
macro_rules! labs {
    ($($id:literal => $module:ident :: $lab:ident),* $(,)?) => {
        $(#[cfg(lab = $id)] pub mod $module;)*

        /// The labs this build holds, in course order.
        pub fn labs() -> &'static [&'static dyn Lab] {
            &[$(#[cfg(lab = $id)] &$module::$lab,)*]
        }
    };
}

include!("labs.rs");

pub use report::{Report, TestKind, TestStatus};
pub use value::{LearnerError, Value};
