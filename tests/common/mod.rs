//! Solutions the project's own tests grade: wrong ones (mutants) and correct ones
//! written differently from the reference.

#![allow(dead_code)] // each test binary uses its own part of this module

pub mod mutants;
pub mod variants;
