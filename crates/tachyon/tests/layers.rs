//! The layers of the core import downward only: platform, then segment,
//! then sync, then the primitives and the bus side by side (neither uses
//! the other), then what composes them (the wait set). This test reads
//! the sources and fails on a path that points up or sideways, so that
//! `docs/ARCHITECTURE.md`'s rule holds without anyone re-checking it.
#![cfg(not(tachyon_loom))]

use std::path::{Path, PathBuf};

/// A layer's rank; a module may use modules of a lower rank, and its own.
fn rank(module: &str) -> Option<u32> {
    Some(match module {
        // The error type is everyone's, and so is the root's switch for
        // loom builds.
        "error" | "Error" | "Result" | "Corruption" | "without_loom" => 0,
        "platform" => 1,
        "segment" => 2,
        "sync" => 3,
        "primitives" | "bus" => 4,
        "waitset" | "fuzzing" => 5,
        _ => return None,
    })
}

/// The `.rs` files under `dir`.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Every `crate::NAME` in the code of `text` (comments left out), with its
/// line number.
fn crate_paths(text: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let code = line.split("//").next().unwrap_or("");
        let mut rest = code;
        while let Some(at) = rest.find("crate::") {
            let after = &rest[at + "crate::".len()..];
            if let Some(group) = after.strip_prefix('{') {
                // `use crate::{Error, Result};`
                let inner = group.split('}').next().unwrap_or("");
                for name in inner.split(',') {
                    let name: String =
                        name.trim().chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                    found.push((n + 1, name));
                }
            } else {
                let name: String = after.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                found.push((n + 1, name));
            }
            rest = after;
        }
    }
    found
}

#[test]
fn imports_point_down() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let mut wrong = Vec::new();
    for file in &files {
        let rel = file.strip_prefix(&src).unwrap();
        let top = rel.components().next().unwrap().as_os_str().to_str().unwrap().trim_end_matches(".rs");
        // lib.rs, the crate's root, uses everything; error.rs is the
        // crate's vocabulary of failures and names what fails in any layer
        // (a segment's `Kind`, the trace of a corruption).
        if top == "lib" || top == "error" {
            continue;
        }
        let mine =
            rank(top).unwrap_or_else(|| panic!("{}: a module of no layer: give it one here", rel.display()));
        let text = std::fs::read_to_string(file).unwrap();
        for (line, name) in crate_paths(&text) {
            let ok = name == top || rank(&name).is_some_and(|r| r < mine);
            if !ok {
                wrong.push(format!("{}:{line}: crate::{name}", rel.display()));
            }
        }
    }
    assert!(wrong.is_empty(), "imports that do not point down:\n{}", wrong.join("\n"));
}

#[test]
fn the_check_sees_an_upward_import() {
    let paths = crate_paths(
        "use crate::bus::Region; // crate::sync in a comment\nlet x = crate::Error::Closed;\nuse crate::{sync::Mutex, Result};",
    );
    let names: Vec<_> = paths.iter().map(|(line, name)| (*line, name.as_str())).collect();
    assert_eq!(names, [(1, "bus"), (2, "Error"), (3, "sync"), (3, "Result")]);
    assert!(rank("bus") > rank("sync"));
}
