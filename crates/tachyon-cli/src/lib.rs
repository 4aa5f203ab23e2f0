//! The operator tools of tachyon, as a small library shared by two binaries:
//!
//! * `tyctl`, the inspector: `ls`, `info`, `watch`, `rm`, `reap`, each read
//!   command with `--json`;
//! * `tachyond`, the reaper daemon: removes stale segments and runs
//!   recovery on every region, logging each reclaim.
//!
//! Both are described, with example output, in `docs/tools.md`. This crate
//! is not published; its modules exist so that the two binaries share one
//! implementation of the reaping pass ([`reaper`]), the text helpers
//! ([`text`]) and the signal handling ([`signal`]). JSON is written by
//! `serde_json` from the library's own types (its `serde` feature).

#![cfg(target_os = "linux")]

pub mod reaper;
pub mod signal;
pub mod text;

use std::path::Path;

/// The identity of a file (device and inode), to tell whether a path still
/// names the file a handle was opened on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileId {
    dev: u64,
    ino: u64,
}

impl FileId {
    /// The identity of the file `path` names now (not following a final
    /// symbolic link), or `None` if there is none.
    pub fn of(path: &Path) -> Option<FileId> {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::symlink_metadata(path).ok()?;
        Some(FileId { dev: meta.dev(), ino: meta.ino() })
    }
}
