//! Lab 2, the courier challenge (in progress): exactly one SMS per action through a
//! provider that misbehaves, with killed workers, a restarting database and fair
//! claiming. Contract: the course's `labs/courier.md`.
//!
//! This module is not registered in `crate::labs()` yet: so far it holds the
//! misbehaving provider and the checks the chaos run reads from its log. The
//! simulator, the learner's pieces and their cases come next.

pub mod provider;
