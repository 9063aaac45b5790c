//! Lab 2, the courier challenge (in progress): exactly one SMS per action through a
//! provider that misbehaves, with killed workers, a restarting database and fair
//! claiming. Contract: the course's `labs/courier.md`; the spec is `DESIGN.md`.
//!
//! Not registered in `crate::labs()` yet: so far it holds the misbehaving provider,
//! the simulator with its chaos and fairness runs, and a Rust reference host that
//! proves them natively. The learner's side (SQLite in Pyodide) comes next.

pub mod fairness;
pub mod provider;
pub mod reference;
pub mod sim;
