//! Listing this user's segments, for inspectors and tests.

use super::header::{slot_lock, Header, SlotCopy, HEADER_SIZE, SLOT_FREE, SLOT_SIZE};
use super::name::{self, Scope};
use super::Kind;
use crate::error::{Error, Result};
use crate::platform::fs;
use crate::platform::process::{euid, ProcessId};
use rustix::fd::AsFd;
use std::path::PathBuf;

/// One segment file, as [`list`] found it.
#[derive(Debug, Clone)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct SegmentInfo {
    /// The file's path.
    pub path: PathBuf,
    /// The name as its creator gave it (from the header; from the file name
    /// if the header cannot be read).
    pub name: String,
    /// Whose name space it is in.
    pub scope: Scope,
    /// Size of the file in bytes.
    pub file_size: u64,
    /// What the header says, or why it could not be read.
    pub status: SegmentStatus,
}

/// The state of a listed segment.
#[derive(Debug, Clone)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize), serde(rename_all = "snake_case"))]
pub enum SegmentStatus {
    /// A valid header.
    Valid {
        /// The kind recorded.
        kind: Kind,
        /// Size of its data area.
        data_size: u64,
        /// Its creator.
        creator: ProcessId,
        /// Creation time, ns since the Unix epoch.
        created_unix_ns: u64,
        /// Every slot that is held or was left attached by a dead process.
        attachers: Vec<AttacherInfo>,
        /// Kept when nobody is attached (removed only explicitly).
        persistent: bool,
    },
    /// The file could not be validated; the text says why.
    Invalid(String),
}

/// One attach slot of a listed segment.
#[derive(Debug, Clone, Copy)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct AttacherInfo {
    /// Slot index.
    pub slot: usize,
    /// The attached process.
    pub process: ProcessId,
    /// When it attached, ns since the Unix epoch.
    pub attached_unix_ns: u64,
    /// Whether its handle is still open (the slot's OFD lock is held).
    pub alive: bool,
}

impl SegmentInfo {
    /// Whether every attacher is gone (a crash left the file behind) and
    /// the segment is not persistent.
    pub fn is_stale(&self) -> bool {
        match &self.status {
            SegmentStatus::Valid { attachers, persistent, .. } => {
                !persistent && !attachers.iter().any(|a| a.alive)
            }
            SegmentStatus::Invalid(_) => false,
        }
    }
}

/// Lists the calling user's segments: the user's own name space and the
/// `Global\` names the user created. Reads only; changes nothing.
///
/// ```
/// use tachyon::{segment, Segment};
/// # let name = format!("doc-list-{}", std::process::id());
/// let seg = Segment::create(&name, 4096)?;
/// let mine = segment::list()?;
/// let info = mine.iter().find(|i| i.name == name).expect("listed");
/// assert!(!info.is_stale());
/// # Ok::<(), tachyon::Error>(())
/// ```
pub fn list() -> Result<Vec<SegmentInfo>> {
    let dir = name::dir();
    let me = euid();
    let user_prefix = name::scope_prefix(Scope::User(me));
    let global_prefix = name::scope_prefix(Scope::Global);
    let entries = std::fs::read_dir(&dir).map_err(|e| Error::io(format!("list {}", dir.display()), e))?;
    let mut out = Vec::new();
    for entry in entries.flatten() {
        let file_name = entry.file_name();
        let Some(file_name) = file_name.to_str() else { continue };
        let (scope, rest) = if let Some(rest) = file_name.strip_prefix(&user_prefix) {
            (Scope::User(me), rest)
        } else if let Some(rest) = file_name.strip_prefix(&global_prefix) {
            (Scope::Global, rest)
        } else {
            continue;
        };
        let path = entry.path();
        let Ok(fd) = fs::open_readonly(&path) else { continue };
        let Ok(info) = fs::info(fd.as_fd()) else { continue };
        if !info.regular || info.uid != me {
            continue;
        }
        let fallback = name::unescape(rest).unwrap_or_else(|| rest.to_owned());
        let mut head = [0u8; HEADER_SIZE];
        let n = info.size.min(HEADER_SIZE as u64) as usize;
        let header = fs::read_exact_at(fd.as_fd(), &mut head[..n], 0)
            .map_err(|e| Error::io("read header", e))
            .and_then(|()| Header::decode(&head[..n], info.size));
        let (name, status) = match header {
            Err(e) => (fallback, SegmentStatus::Invalid(e.to_string())),
            Ok(h) => {
                let mut table = vec![0u8; h.slots * SLOT_SIZE];
                let _ = fs::read_exact_at(fd.as_fd(), &mut table, HEADER_SIZE as u64);
                let attachers = (0..h.slots)
                    .filter_map(|i| {
                        let s = SlotCopy::decode(&table[i * SLOT_SIZE..]);
                        let alive = fs::locked_by_other(fd.as_fd(), slot_lock(i)).unwrap_or(true);
                        (alive || s.state != SLOT_FREE).then_some(AttacherInfo {
                            slot: i,
                            process: ProcessId { pid: s.pid, start_time: s.start_time },
                            attached_unix_ns: s.attached_unix_ns,
                            alive,
                        })
                    })
                    .collect();
                let name = if h.name.is_empty() { fallback } else { h.name.clone() };
                (
                    name,
                    SegmentStatus::Valid {
                        kind: h.kind,
                        data_size: h.data_size,
                        creator: ProcessId { pid: h.creator_pid, start_time: h.creator_start },
                        created_unix_ns: h.created_unix_ns,
                        attachers,
                        persistent: h.persistent,
                    },
                )
            }
        };
        out.push(SegmentInfo { path, name, scope, file_size: info.size, status });
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}
