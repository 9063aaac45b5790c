//! Builds what the engine compiles in from outside Rust, for each lab of the one
//! list (`src/labs.rs`, read here through `labs!` as the engine reads it):
//!
//! - the lab's cases: its case files (TOML, written by people) become Rust source
//!   that builds the engine's cases, so the engine (and its WASM) carries no case
//!   parser at all. Each lab's `case_source.rs` parses and checks them with the code
//!   the tests use (its `case_format.rs`): a malformed file fails the build, naming
//!   the file, the case and the field. The `expect` tables are not compiled in;
//!   `cargo test` checks them against the reference.
//! - which labs the build holds: every lab, or those the environment variable
//!   `DELIVERY_LAB_ONLY` names (comma-separated ids), as the cfg `lab = "<id>"`. A
//!   page's grader holds its own lab only (scripts/build-wasm.sh).
//! - whether the build carries each lab's reference solution in Python: not when
//!   `DELIVERY_LAB_NO_REFERENCE` is set (the cfg `no_reference`), as the page's graders
//!   of a `--no-hidden` or `--no-reference` build are made.

// Each lab's case format includes src/case_files.rs itself, and so does this script:
// private copies, each used by its own includer.
#![allow(clippy::duplicate_mod)]

#[path = "src/case_files.rs"]
mod case_files;

use std::env;
use std::fs;
use std::path::{Path, PathBuf};

/// A lab of the list: its id, its module, and its cases as Rust source.
struct LabBuild {
    id: &'static str,
    module: &'static str,
    cases_source: fn(&Path, &str, bool) -> Result<String, String>,
}

// Each lab's `case_source.rs`, in a module named as the lab's.
macro_rules! labs {
    ($($id:literal => $module:ident :: $lab:ident),* $(,)?) => {
        $(
            #[allow(dead_code)]
            mod $module {
                include!(concat!(env!("CARGO_MANIFEST_DIR"), "/src/", stringify!($module), "/case_source.rs"));
            }
        )*
        const LABS: &[LabBuild] = &[$(LabBuild {
            id: $id,
            module: stringify!($module),
            cases_source: $module::cases_source,
        }),*];
    };
}

include!("src/labs.rs");

const ONLY: &str = "DELIVERY_LAB_ONLY";
/// Set (to anything but "" or "0"): the build leaves each lab's reference solution in
/// Python out (the `no_reference` cfg; `reference_py!` in src/lib.rs).
const NO_REFERENCE: &str = "DELIVERY_LAB_NO_REFERENCE";

fn main() {
    let hidden = env::var_os("CARGO_FEATURE_HIDDEN").is_some();
    let root = Path::new(".");
    println!("cargo:rerun-if-changed=src/labs.rs");
    println!("cargo:rerun-if-env-changed={ONLY}");
    println!("cargo:rerun-if-env-changed={NO_REFERENCE}");
    println!("cargo::rustc-check-cfg=cfg(no_reference)");
    if env::var(NO_REFERENCE).is_ok_and(|v| !v.trim().is_empty() && v.trim() != "0") {
        println!("cargo::rustc-cfg=no_reference");
    }
    let ids: Vec<String> = LABS.iter().map(|l| format!("{:?}", l.id)).collect();
    println!(
        "cargo::rustc-check-cfg=cfg(lab, values({}))",
        ids.join(", ")
    );
    for lab in held() {
        println!("cargo::rustc-cfg=lab={:?}", lab.id);
        compile_cases(root, lab, hidden);
    }
}

/// The labs this build holds: every lab, or the ones `DELIVERY_LAB_ONLY` names.
fn held() -> Vec<&'static LabBuild> {
    let Some(only) = env::var(ONLY).ok().filter(|v| !v.trim().is_empty()) else {
        return LABS.iter().collect();
    };
    only.split(',')
        .map(|id| {
            LABS.iter().find(|l| l.id == id.trim()).unwrap_or_else(|| {
                let known: Vec<_> = LABS.iter().map(|l| l.id).collect();
                eprintln!(
                    "error: {ONLY} names `{}`, which is no lab; the labs are: {}",
                    id.trim(),
                    known.join(", ")
                );
                std::process::exit(1);
            })
        })
        .collect()
}

/// Watches `lab`'s case folders (for added and removed files) and every file in them,
/// loads its cases (a malformed file ends the build, named) and writes them as Rust
/// source to `OUT_DIR/<module>_cases.rs`.
fn compile_cases(root: &Path, lab: &LabBuild, hidden: bool) {
    for dir in [
        case_files::examples_dir(lab.id),
        Path::new("hidden-tests").join(lab.id),
    ] {
        println!("cargo:rerun-if-changed={}", dir.display());
    }
    for (path, _) in case_files::lab_files(root, lab.id, hidden) {
        println!("cargo:rerun-if-changed={}", path.display());
    }
    let source = (lab.cases_source)(root, lab.id, hidden).unwrap_or_else(|e| {
        eprintln!("error: malformed case file: {e}");
        std::process::exit(1);
    });
    let dest = PathBuf::from(env::var("OUT_DIR").unwrap()).join(format!("{}_cases.rs", lab.module));
    fs::write(dest, source).unwrap();
}
