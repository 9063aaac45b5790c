//! What the case files of every lab share: where they are, in what order, how one is
//! parsed and how a mistake in one is named. Like each lab's `case_format.rs`, not a
//! module of the engine: `build.rs` and the tests include it (`#[path]`), so it needs
//! std, serde, toml and serde_path_to_error only.

#![allow(dead_code)] // build.rs and each test use their own part of it

use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};

/// The folder of a lab's example cases: `src/<module>/examples`, the module being
/// the lab id with `_` for `-` (a lab is one folder). Hidden cases live in
/// `hidden-tests/<lab id>/`.
pub fn examples_dir(lab: &str) -> PathBuf {
    Path::new("src")
        .join(lab.replace('-', "_"))
        .join("examples")
}

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
    let mut files: Vec<(PathBuf, bool)> = toml_files(root, &examples_dir(lab))
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

/// A checked case of some lab: where it is, so that a mistake in it can be named.
pub trait FileCase {
    /// Its file (relative to the project), its index in that file and its name.
    fn place(&self) -> (&str, usize, &str);

    /// Describes a mistake inside this case; `field` is relative to the case.
    fn error(&self, field: &str, message: String) -> CaseError {
        let (file, index, name) = self.place();
        CaseError {
            file: file.into(),
            case: Some((index, name.into())),
            field: format!("case[{index}].{field}"),
            message,
        }
    }
}

/// Reads and checks every case of `lab` (see `lab_files`) with the lab's `parse_file`,
/// and that no two share a name.
pub fn load_lab<C: FileCase>(
    root: &Path,
    lab: &str,
    hidden: bool,
    parse_file: impl Fn(&str, &str, bool) -> Result<Vec<C>, CaseError>,
) -> Result<Vec<C>, CaseError> {
    let mut all: Vec<C> = Vec::new();
    for (file, text, is_hidden) in read_lab_files(root, lab, hidden)? {
        all.extend(parse_file(&file, &text, is_hidden)?);
        unique_names(&all)?;
    }
    Ok(all)
}

/// A test's name is how reports and learners tell it apart: no two cases of a lab
/// share one. Names the first case whose name was already taken.
pub fn unique_names<C: FileCase>(cases: &[C]) -> Result<(), CaseError> {
    for (i, case) in cases.iter().enumerate() {
        if cases[..i].iter().any(|c| c.place().2 == case.place().2) {
            return Err(case.error("name", "another case already has this name".into()));
        }
    }
    Ok(())
}

/// Parses one case file's TOML into the lab's file type `T`. `file` names it in
/// errors, with the case (index and name) and the field of a mistake inside one.
pub fn parse_toml<T: serde::de::DeserializeOwned>(file: &str, text: &str) -> Result<T, CaseError> {
    let raw: toml::Value = toml::from_str(text).map_err(|e| CaseError {
        file: file.into(),
        case: None,
        field: String::new(),
        message: format!("not valid TOML: {e}"),
    })?;
    let case_at = |index: usize| {
        let name = raw
            .get("case")
            .and_then(|c| c.get(index))
            .and_then(|c| c.get("name"))
            .and_then(toml::Value::as_str)
            .unwrap_or("unnamed")
            .to_string();
        (index, name)
    };
    serde_path_to_error::deserialize(raw.clone()).map_err(|e| {
        let field = e.path().to_string();
        CaseError {
            file: file.into(),
            case: case_index(&field).map(case_at),
            field,
            message: e.into_inner().message().to_string(),
        }
    })
}

/// The index of the case a field path like `case[2].step[0]` is in.
pub fn case_index(path: &str) -> Option<usize> {
    let rest = path.strip_prefix("case[")?;
    rest[..rest.find(']')?].parse().ok()
}
