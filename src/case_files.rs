//! What the case files of every lab share: where they are, in what order, and how
//! a mistake in one is named. Like each lab's `case_format.rs`, not a module of the
//! engine: `build.rs` and the tests include it (`#[path]`), so it needs std only.

#![allow(dead_code)] // build.rs and each test use their own part of it

use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};

/// (lab id, folder of its example cases). Hidden cases live in `hidden-tests/<lab id>/`.
pub const LABS: &[(&str, &str)] = &[
    ("deliver-once", "src/deliver_once/examples"),
    ("courier", "src/courier/examples"),
];

/// A malformed case file, with everything needed to find the mistake.
#[derive(Clone, Debug, PartialEq)]
pub struct CaseError {
    pub file: String,
    /// The case's index and name, when the mistake is inside one.
    pub case: Option<(usize, String)>,
    /// The field's path, e.g. `case[2].step[0].call`; empty for a TOML syntax error.
    pub field: String,
    pub message: String,
}

impl fmt::Display for CaseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file)?;
        if let Some((i, name)) = &self.case {
            write!(f, ": case {i} ({name:?})")?;
        }
        if !self.field.is_empty() {
            write!(f, ": field `{}`", self.field)?;
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for CaseError {}

/// The case files of `lab`, examples first, then (with `hidden`) its hidden ones,
/// each folder in file-name order: the order of the tests in every report. Paths are
/// relative to `root`, the project's folder.
pub fn lab_files(root: &Path, lab: &str, hidden: bool) -> Vec<(PathBuf, bool)> {
    let Some((_, examples)) = LABS.iter().find(|(id, _)| *id == lab) else {
        return Vec::new();
    };
    let mut files: Vec<(PathBuf, bool)> = toml_files(root, Path::new(examples))
        .into_iter()
        .map(|p| (p, false))
        .collect();
    if hidden {
        let dir = Path::new("hidden-tests").join(lab);
        files.extend(toml_files(root, &dir).into_iter().map(|p| (p, true)));
    }
    files
}

fn toml_files(root: &Path, dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = fs::read_dir(root.join(dir)) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok())
        .map(|e| dir.join(e.file_name()))
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    files.sort(); // a stable order: reports list tests in file order
    files
}

/// Each case file of `lab` (see `lab_files`) with its name as errors give it
/// (relative to the project), its text and whether it is hidden.
pub fn read_lab_files(
    root: &Path,
    lab: &str,
    hidden: bool,
) -> Result<Vec<(String, String, bool)>, CaseError> {
    lab_files(root, lab, hidden)
        .into_iter()
        .map(|(path, is_hidden)| {
            let file = path.to_string_lossy().replace('\\', "/");
            let text = fs::read_to_string(root.join(&path)).map_err(|e| CaseError {
                file: file.clone(),
                case: None,
                field: String::new(),
                message: format!("cannot read: {e}"),
            })?;
            Ok((file, text, is_hidden))
        })
        .collect()
}

/// The index of the case a field path like `case[2].step[0]` is in.
pub fn case_index(path: &str) -> Option<usize> {
    let rest = path.strip_prefix("case[")?;
    rest[..rest.find(']')?].parse().ok()
}
