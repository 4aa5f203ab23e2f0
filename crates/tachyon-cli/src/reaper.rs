//! One reaping pass over the user's segments, shared by `tachyond` (every
//! interval) and `tyctl reap` (once).
//!
//! A pass lists the segments ([`tachyon::segment::list`]), removes every
//! stale one ([`tachyon::segment::reap`], which checks again under the
//! segment's lock that every attacher is dead and that it is not
//! persistent), and on every region runs [`Region::recover`], which returns
//! to the pool the chunks dead processes held. Before recovering it takes
//! [`Region::inspect`], which tells whose chunks they were.
//!
//! `tachyond` keeps the regions it has opened ([`Reaper::holding`]): opening
//! a region runs recovery inside the library, and the library does not say
//! what that reclaimed; with the region held, a process that dies later is
//! seen by the daemon's own `recover()`, whose counts it logs. A held region
//! is let go when its name is removed or names another file.

use crate::text::{self, quoted};
use crate::FileId;
use serde::Serialize;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use tachyon::bus::{Recovered, Region};
use tachyon::platform::process::ProcessId;
use tachyon::segment::{self, SegmentInfo, SegmentStatus};
use tachyon::Kind;

/// A dead process that held chunks of a region when recovery ran. In
/// JSON: `pid`, `start_time`, `loans`, `held`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct DeadHolder {
    /// The process.
    #[serde(flatten)]
    pub process: ProcessId,
    /// Chunks it had loaned and not published.
    pub loans: usize,
    /// Messages it had received and not released.
    pub held: usize,
}

/// What a pass did or found, one item each. In JSON, an object whose
/// `"event"` names the kind ([`Event::kind`]), with the variant's fields.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// A stale segment was removed.
    Removed {
        /// Its name, as its creator gave it.
        name: String,
        /// Its file.
        path: PathBuf,
        /// What it held.
        kind: Kind,
        /// Size of the file.
        file_size: u64,
        /// The attachers it recorded, all dead.
        #[serde(rename = "dead_attachers")]
        dead: Vec<ProcessId>,
    },
    /// A stale segment was not removed: a process attached to it meanwhile
    /// (reported only when a single name was asked for).
    Kept {
        /// Its name.
        name: String,
        /// Its file.
        path: PathBuf,
        /// Why it was kept.
        reason: String,
    },
    /// A region was opened (and, by opening, recovered: the library does
    /// not report what that reclaimed).
    Opened {
        /// Its name.
        name: String,
        /// Its file.
        path: PathBuf,
        /// Attachers the listing showed dead just before it was opened.
        #[serde(rename = "dead_attachers")]
        dead: Vec<ProcessId>,
    },
    /// Recovery ran on a region.
    Recovered {
        /// Its name.
        name: String,
        /// Its file.
        path: PathBuf,
        /// What this pass's `recover()` returned to the pool.
        #[serde(flatten)]
        recovered: Recovered,
        /// Dead processes that held chunks just before.
        #[serde(rename = "dead_holders")]
        holders: Vec<DeadHolder>,
        /// Chunks held by dead attachments whose slot was reused since (the
        /// process is no longer known).
        #[serde(rename = "orphaned_chunks")]
        orphaned: usize,
    },
    /// A held region's name was removed or now names another file; the
    /// reaper let go of it.
    Released {
        /// Its name.
        name: String,
        /// Its former file.
        path: PathBuf,
    },
    /// A file that is not a valid segment; never touched.
    Invalid {
        /// Its name (from the file name).
        name: String,
        /// Its file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// Reaping or recovering this segment failed.
    Failed {
        /// Its name.
        name: String,
        /// Its file.
        path: PathBuf,
        /// What was being done.
        doing: &'static str,
        /// The error.
        error: String,
    },
}

impl Event {
    /// The file the event is about.
    pub fn path(&self) -> &Path {
        match self {
            Event::Removed { path, .. }
            | Event::Kept { path, .. }
            | Event::Opened { path, .. }
            | Event::Recovered { path, .. }
            | Event::Released { path, .. }
            | Event::Invalid { path, .. }
            | Event::Failed { path, .. } => path,
        }
    }

    /// The kind of event, as JSON names it: `removed`, `kept`, `opened`,
    /// `recovered`, `released`, `invalid` or `failed`.
    pub fn kind(&self) -> &'static str {
        match self {
            Event::Removed { .. } => "removed",
            Event::Kept { .. } => "kept",
            Event::Opened { .. } => "opened",
            Event::Recovered { .. } => "recovered",
            Event::Released { .. } => "released",
            Event::Invalid { .. } => "invalid",
            Event::Failed { .. } => "failed",
        }
    }

    /// Whether this is a failure.
    pub fn is_failure(&self) -> bool {
        matches!(self, Event::Failed { .. })
    }

    /// Whether the event reclaimed something (a removed segment, or chunks
    /// returned to a pool).
    pub fn reclaimed(&self) -> bool {
        match self {
            Event::Removed { .. } => true,
            Event::Recovered { recovered, .. } => {
                recovered.total()
                    + recovered.slots
                    + recovered.repaired
                    + recovered.quarantined
                    + recovered.directory
                    > 0
            }
            _ => false,
        }
    }

    /// One line for a person or a log.
    pub fn describe(&self) -> String {
        match self {
            Event::Removed { name, kind, file_size, dead, .. } => {
                let who = if dead.is_empty() {
                    "no attacher left".to_owned()
                } else {
                    format!("every attacher dead: {}", text::pids(dead.iter().map(|p| p.pid)))
                };
                format!("removed stale segment {} ({kind}, {}): {who}", quoted(name), text::bytes(*file_size))
            }
            Event::Kept { name, reason, .. } => format!("kept segment {}: {reason}", quoted(name)),
            Event::Opened { name, dead, .. } if dead.is_empty() => {
                format!("watching region {}", quoted(name))
            }
            Event::Opened { name, dead, .. } => format!(
                "region {}: opened; dead attachers: {}",
                quoted(name),
                text::pids(dead.iter().map(|p| p.pid))
            ),
            Event::Recovered { name, recovered, holders, orphaned, .. } => {
                let mut parts = Vec::new();
                for (n, one, many) in [
                    (recovered.loans, "loan", "loans"),
                    (recovered.cached, "chunk kept for a next loan", "chunks kept for next loans"),
                    (recovered.held, "unreleased message (lost)", "unreleased messages (lost)"),
                    (
                        recovered.redelivered,
                        "unreleased message (published again)",
                        "unreleased messages (published again)",
                    ),
                    (
                        recovered.unpublished,
                        "half-published message (lost)",
                        "half-published messages (lost)",
                    ),
                ] {
                    if n > 0 {
                        parts.push(text::count(n, one, many));
                    }
                }
                let mut line = format!(
                    "region {}: reclaimed {}",
                    quoted(name),
                    text::count(recovered.total(), "chunk", "chunks")
                );
                if !parts.is_empty() {
                    line.push_str(&format!(": {}", parts.join(", ")));
                }
                if !holders.is_empty() {
                    let list: Vec<String> = holders
                        .iter()
                        .map(|h| format!("pid {} ({} loaned, {} held)", h.process.pid, h.loans, h.held))
                        .collect();
                    line.push_str(&format!("; dead holders: {}", list.join(", ")));
                }
                if *orphaned > 0 {
                    line.push_str(&format!(
                        "; {} of processes whose slot was reused",
                        text::count(*orphaned, "chunk", "chunks")
                    ));
                }
                if recovered.repaired > 0 {
                    line.push_str(&format!(
                        "; repaired {} (damaged words)",
                        text::count(recovered.repaired, "ring cell or cursor", "ring cells or cursors")
                    ));
                }
                if recovered.directory > 0 {
                    line.push_str(&format!(
                        "; restored {} from their second copy",
                        text::count(
                            recovered.directory,
                            "damaged header or directory part",
                            "damaged header or directory parts"
                        )
                    ));
                }
                if recovered.quarantined > 0 {
                    line.push_str(&format!(
                        "; quarantined {} whose state could not be trusted",
                        text::count(recovered.quarantined, "chunk", "chunks")
                    ));
                }
                if recovered.deferred > 0 {
                    line.push_str(&format!(
                        "; {} to publish again when its partition has room",
                        text::count(recovered.deferred, "message", "messages")
                    ));
                }
                if recovered.slots > 0 {
                    line.push_str(&format!(
                        "; freed {} of dead processes",
                        text::count(recovered.slots, "attach slot", "attach slots")
                    ));
                }
                line
            }
            Event::Released { name, .. } => {
                format!("region {} was removed or replaced; let go of it", quoted(name))
            }
            Event::Invalid { name, path, reason } => {
                format!("ignoring {} ({}): {reason}", quoted(name), text::clean(&path.display().to_string()))
            }
            Event::Failed { name, doing, error, .. } => format!("{doing} {}: {error}", quoted(name)),
        }
    }
}

/// What one pass saw and did.
#[derive(Debug, Clone, Default)]
pub struct Pass {
    /// Segment files listed (invalid ones included).
    pub segments: usize,
    /// Regions recovered.
    pub regions: usize,
    /// Everything that happened, in order.
    pub events: Vec<Event>,
}

struct Held {
    name: String,
    file: FileId,
    region: Region,
}

/// Runs reaping passes; see the [module documentation](self).
pub struct Reaper {
    hold: bool,
    report_idle: bool,
    held: HashMap<PathBuf, Held>,
}

impl Reaper {
    /// A reaper for one-off passes: regions are opened and closed within
    /// each pass. With `report_idle`, every region is reported, even when
    /// recovery found nothing (`tyctl reap`); without, only what reclaimed
    /// something or failed (`tachyond --once`).
    pub fn once(report_idle: bool) -> Reaper {
        Reaper { hold: false, report_idle, held: HashMap::new() }
    }

    /// A reaper for a daemon: it keeps the regions it opened between
    /// passes, and reports only what reclaimed something, failed, or
    /// changed (`tachyond`).
    pub fn holding() -> Reaper {
        Reaper { hold: true, report_idle: false, held: HashMap::new() }
    }

    /// How many regions are held open now.
    pub fn held_regions(&self) -> usize {
        self.held.len()
    }

    /// One pass over every segment of the user, or only over the file
    /// `only` when given. `Err` only when the segments cannot be listed.
    pub fn pass(&mut self, only: Option<&Path>) -> tachyon::Result<Pass> {
        let infos = segment::list()?;
        let mut pass = Pass::default();
        let mut seen = HashSet::new();
        for info in &infos {
            if only.is_some_and(|p| p != info.path) {
                continue;
            }
            pass.segments += 1;
            seen.insert(info.path.clone());
            match &info.status {
                SegmentStatus::Invalid(reason) => pass.events.push(Event::Invalid {
                    name: info.name.clone(),
                    path: info.path.clone(),
                    reason: reason.clone(),
                }),
                SegmentStatus::Valid { kind, .. } => {
                    if info.is_stale() {
                        if self.reap(info, only.is_some(), &mut pass.events) {
                            continue;
                        }
                    } else if only.is_some() && *kind != Kind::REGION {
                        pass.events.push(Event::Kept {
                            name: info.name.clone(),
                            path: info.path.clone(),
                            reason: not_stale_reason(info),
                        });
                    }
                    if *kind == Kind::REGION {
                        pass.regions += 1;
                        self.recover(info, &mut pass.events);
                    }
                }
            }
        }
        if only.is_none() {
            let gone: Vec<PathBuf> = self.held.keys().filter(|p| !seen.contains(*p)).cloned().collect();
            for path in gone {
                if let Some(held) = self.held.remove(&path) {
                    pass.events.push(Event::Released { name: held.name, path });
                }
            }
        }
        Ok(pass)
    }

    /// Removes a stale segment; true if it is gone.
    fn reap(&mut self, info: &SegmentInfo, report_kept: bool, events: &mut Vec<Event>) -> bool {
        let SegmentStatus::Valid { kind, attachers, .. } = &info.status else { return false };
        match segment::reap(info) {
            Ok(true) => {
                events.push(Event::Removed {
                    name: info.name.clone(),
                    path: info.path.clone(),
                    kind: *kind,
                    file_size: info.file_size,
                    dead: attachers.iter().filter(|a| !a.alive).map(|a| a.process).collect(),
                });
                self.held.remove(&info.path);
                true
            }
            Ok(false) => {
                if report_kept {
                    events.push(Event::Kept {
                        name: info.name.clone(),
                        path: info.path.clone(),
                        reason: "a process attached to it meanwhile, or it was removed".to_owned(),
                    });
                }
                false
            }
            Err(e) => {
                events.push(Event::Failed {
                    name: info.name.clone(),
                    path: info.path.clone(),
                    doing: "remove stale segment",
                    error: e.to_string(),
                });
                false
            }
        }
    }

    /// Runs recovery on a region, opening it first if needed.
    fn recover(&mut self, info: &SegmentInfo, events: &mut Vec<Event>) {
        let fail = |doing, error: String| Event::Failed {
            name: info.name.clone(),
            path: info.path.clone(),
            doing,
            error,
        };
        let current = FileId::of(&info.path);
        if self.held.get(&info.path).is_some_and(|held| Some(held.file) != current) {
            if let Some(held) = self.held.remove(&info.path) {
                events.push(Event::Released { name: held.name, path: info.path.clone() });
            }
        }
        let mut opened = None;
        if !self.held.contains_key(&info.path) {
            let Some(before) = current else { return }; // removed since the listing
                                                        // Who held what, seen before opening: opening runs recovery,
                                                        // which returns their chunks and frees their slots.
            let seen = Region::inspect_name(&info.name).ok();
            let region = match Region::open(&info.name) {
                Ok(r) => r,
                Err(tachyon::Error::NotFound { .. }) => return, // removed since the listing
                Err(e) => return events.push(fail("open region", e.to_string())),
            };
            if region.segment().path() != info.path {
                // The name recorded in the header does not lead back to
                // this file (a name longer than the header keeps).
                return events.push(fail(
                    "open region",
                    format!(
                        "its recorded name leads to {}, not to this file",
                        text::clean(&region.segment().path().display().to_string())
                    ),
                ));
            }
            if FileId::of(&info.path) != Some(before) {
                return; // replaced while opening: next pass
            }
            let dead = match &info.status {
                SegmentStatus::Valid { attachers, .. } => {
                    attachers.iter().filter(|a| !a.alive).map(|a| a.process).collect()
                }
                SegmentStatus::Invalid(_) => Vec::new(),
            };
            if self.hold || !dead.is_empty() {
                events.push(Event::Opened { name: info.name.clone(), path: info.path.clone(), dead });
            }
            opened = Some((region.recovered_on_open(), seen));
            self.held.insert(info.path.clone(), Held { name: info.name.clone(), file: before, region });
        }
        let Some(held) = self.held.get(&info.path) else { return };
        let region = &held.region;
        // Shows the reaper alive in `tyctl info` (it holds the region).
        region.heartbeat();
        let me = region.segment().slot();
        let dead_holders = |report: &tachyon::bus::RegionReport| -> (Vec<DeadHolder>, usize) {
            let holders = report
                .processes
                .iter()
                .filter(|p| !p.alive && p.slot != me && p.loans + p.held > 0)
                .map(|p| DeadHolder { process: p.process, loans: p.loans, held: p.held })
                .collect();
            (holders, report.orphaned_chunks)
        };
        let report = |recovered: tachyon::bus::Recovered, holders, orphaned| Event::Recovered {
            name: info.name.clone(),
            path: info.path.clone(),
            recovered,
            holders,
            orphaned,
        };
        if let Some((on_open, seen)) = opened {
            // What opening reclaimed, with the holders seen just before.
            let (holders, orphaned) = seen.as_ref().map(dead_holders).unwrap_or_default();
            if on_open.total() + on_open.slots > 0 {
                events.push(report(on_open, holders, orphaned));
            }
        }
        let (holders, orphaned) = match region.inspect() {
            Ok(seen) => dead_holders(&seen),
            Err(e) => {
                events.push(fail("inspect region", e.to_string()));
                (Vec::new(), 0)
            }
        };
        match region.recover() {
            Ok(recovered) if recovered.total() + recovered.slots > 0 || self.report_idle => {
                events.push(report(recovered, holders, orphaned))
            }
            Ok(_) => {}
            Err(e) => events.push(fail("recover region", e.to_string())),
        }
        if !self.hold {
            self.held.remove(&info.path);
        }
    }
}

/// Why a segment that is not stale is kept.
fn not_stale_reason(info: &SegmentInfo) -> String {
    match &info.status {
        SegmentStatus::Valid { persistent: true, .. } => {
            "it is persistent (kept until removed with `tyctl rm`)".to_owned()
        }
        SegmentStatus::Valid { attachers, .. } => {
            let live: Vec<u32> = attachers.iter().filter(|a| a.alive).map(|a| a.process.pid).collect();
            format!("it is in use ({} alive)", text::pids(live))
        }
        SegmentStatus::Invalid(reason) => reason.clone(),
    }
}
