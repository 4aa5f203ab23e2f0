//! A snapshot of a region for inspectors (`tyctl`) and monitoring.

use super::alloc::ClassStats;
use super::pool::{HELD, LOANED, QUARANTINE};
use super::region::Region;
use super::topic::{Topic, TopicInfo};
use crate::error::Result;
use crate::platform::atomic::Ordering;
use crate::platform::process::ProcessId;
use crate::sync::{Liveness, Token};

/// What [`Region::inspect`] saw. A snapshot: other processes go on while
/// it is taken, so counts may be off by the operations in flight.
#[derive(Debug, Clone)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct RegionReport {
    /// The region's backing file.
    pub path: std::path::PathBuf,
    /// Bytes of the region's data area.
    pub size: usize,
    /// The process that created it.
    pub creator: ProcessId,
    /// Its lease ([`RegionConfig::lease`](super::RegionConfig::lease)).
    pub lease: std::time::Duration,
    /// Every topic.
    pub topics: Vec<TopicReport>,
    /// Chunks and free chunks per size class.
    pub pool: [ClassStats; 8],
    /// Every attach slot in use or left in use by a dead process.
    pub processes: Vec<ProcessReport>,
    /// Chunks held by attachments whose slot has since been reused (their
    /// holders are dead; [`Region::recover`] returns them).
    pub orphaned_chunks: usize,
    /// Chunks set aside for good because their state word could not be
    /// trusted when a damaged free list was rebuilt (never handed out).
    pub quarantined_chunks: usize,
    /// Damaged ring cells and cursors repaired so far, all topics together
    /// (each topic's share is in its `corrupt` counter).
    pub ring_repairs: u64,
    /// Damaged words of the region's header and topic directory restored
    /// so far (from their second copy).
    pub directory_repairs: u64,
    /// Topic entries whose two copies are both damaged: those topics
    /// cannot be opened (their rings are left as they are).
    pub damaged_topics: usize,
}

/// One topic of a [`RegionReport`].
#[derive(Debug, Clone)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct TopicReport {
    /// Name and counters.
    pub info: TopicInfo,
    /// Each partition's positions (the default group's rings).
    pub partitions: Vec<PartitionReport>,
    /// Every consumer group in use on the topic, the default group
    /// included (slot 0, named ""), with its rings' positions.
    pub groups: Vec<GroupReport>,
}

/// One consumer group of a [`TopicReport`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct GroupReport {
    /// Its group slot (0: the default group).
    pub slot: usize,
    /// Its name ("" for the default group).
    pub name: String,
    /// The slot's generation.
    pub generation: u32,
    /// Whether it is being dropped.
    pub draining: bool,
    /// Its member processes' tokens (as `Token::raw`; dead ones until
    /// recovery forgets them). Empty for the default group, which has no
    /// membership record (its consumers are whoever calls
    /// `Topic::receive`).
    pub members: Vec<u32>,
    /// How many of `members` are alive now.
    pub live_members: usize,
    /// When the group was first seen without a live member, ns since the
    /// Unix epoch (0: it has one, or it is the default group). The group
    /// is dropped once this is older than the region's
    /// [`group_lease`](super::RegionConfig::group_lease).
    pub empty_since_unix_ns: u64,
    /// Messages consumed through the group's rings so far, all partitions
    /// (the sum of their heads).
    pub position: u64,
    /// Messages waiting for the group, all partitions (the sum of their
    /// depths).
    pub lag: u64,
    /// Messages of the group dropped unread by overrunning publishers
    /// (`TopicConfig::overrun`).
    pub missed: u64,
    /// Each partition's positions in the group's rings.
    pub partitions: Vec<PartitionReport>,
}

/// One partition's ring positions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct PartitionReport {
    /// Next position consumers read.
    pub head: u64,
    /// Next position producers write.
    pub tail: u64,
    /// Messages waiting (claimed cells included).
    pub depth: u64,
}

/// One attach slot of a [`RegionReport`].
#[derive(Debug, Clone, Copy)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct ProcessReport {
    /// The attach slot.
    pub slot: usize,
    /// The process (pid and start time).
    pub process: ProcessId,
    /// Whether it is alive (its slot's OFD lock is held).
    pub alive: bool,
    /// Its last heartbeat, ns since the Unix epoch (0: never).
    pub heartbeat_unix_ns: u64,
    /// Chunks it has loaned and not published.
    pub loans: usize,
    /// Messages it has received and not released.
    pub held: usize,
}

impl Region {
    /// Takes a snapshot of topics, partitions, pool and processes.
    ///
    /// ```
    /// # use tachyon::bus::{Region, RegionConfig, TopicConfig};
    /// # let name = format!("doc-inspect-{}", std::process::id());
    /// let region = Region::create(&name, RegionConfig::default().size(8 << 20).ring_arena(1 << 20))?;
    /// let topic = region.create_topic("t", TopicConfig::default())?;
    /// let _loan = topic.loan(100, None)?;
    /// let report = region.inspect()?;
    /// assert_eq!(report.topics[0].info.name, "t");
    /// assert_eq!(report.processes.iter().map(|p| p.loans).sum::<usize>(), 1);
    /// # drop(_loan); drop(topic); drop(region); Region::remove(&name)?;
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn inspect(&self) -> Result<RegionReport> {
        let mut topics = Vec::new();
        let mut ring_repairs = 0u64;
        let mut damaged_topics = 0;
        for (index, entry) in self.entries()?.iter().enumerate() {
            if entry.is_free() {
                continue;
            }
            // A directory entry damaged beyond repair: nothing reaches its
            // rings; the other topics are still reported.
            let Ok(topic) = Topic::attach(self, index) else {
                damaged_topics += 1;
                continue;
            };
            ring_repairs = ring_repairs.wrapping_add(topic.ring_repairs());
            let rings = |slot: usize| -> Result<Vec<PartitionReport>> {
                let mut partitions = Vec::new();
                for p in 0..topic.partitions() {
                    let ring = topic.ring_of(slot, p)?;
                    // SYNC: head before tail, as `Ring::fix_cursors` reads them (a snapshot).
                    let head = ring.cursors.head.load(Ordering::Acquire);
                    let tail = ring.cursors.tail.load(Ordering::Acquire);
                    partitions.push(PartitionReport { head, tail, depth: ring.len() });
                }
                Ok(partitions)
            };
            let mut groups = Vec::new();
            for (slot, name, generation, state) in topic.group_slots() {
                let draining = state == super::groups::DRAINING;
                let partitions = rings(slot)?;
                let (mut members, mut empty_since_unix_ns) = (Vec::new(), 0);
                if slot > 0 {
                    if let Ok(rec) = self.member_record(index, slot) {
                        if rec.is_of(generation) && !draining {
                            members = rec.members();
                            empty_since_unix_ns = rec.empty_since();
                        }
                    }
                }
                let live_members =
                    members.iter().filter(|&&t| Token::from_raw(t).is_some_and(|t| !self.is_dead(t))).count();
                groups.push(GroupReport {
                    slot,
                    name,
                    generation,
                    draining,
                    members,
                    live_members,
                    empty_since_unix_ns,
                    position: partitions.iter().map(|p| p.head).fold(0, u64::wrapping_add),
                    lag: partitions.iter().map(|p| p.depth).sum(),
                    missed: topic.missed_in(slot),
                    partitions,
                });
            }
            topics.push(TopicReport { info: topic.info(), partitions: rings(0)?, groups });
        }
        let seg = self.segment();
        let mut processes: Vec<ProcessReport> = seg
            .attach_slots()
            .into_iter()
            .map(|a| ProcessReport {
                slot: a.slot,
                process: a.process,
                alive: a.alive,
                heartbeat_unix_ns: self.heartbeat_of(a.slot).unwrap_or(0),
                loans: 0,
                held: 0,
            })
            .collect();
        let mut orphaned_chunks = 0;
        let mut quarantined_chunks = 0;
        for meta in self.metas()? {
            let w = meta.word();
            let state = w.state();
            if state == LOANED && w.holder() == QUARANTINE {
                quarantined_chunks += 1;
                continue;
            }
            if super::groups::is_shared(w) {
                continue; // held by groups' words, not by a process
            }
            if state != LOANED && state != HELD || super::alloc::is_free(meta) {
                continue; // free, or kept free by its process for a loan
            }
            let Some(owner) = Token::from_raw(w.holder()) else { continue };
            let current = seg.slot_generation(owner.slot()) == Some(owner.gen());
            match processes.iter_mut().find(|p| p.slot == owner.slot()).filter(|_| current) {
                Some(p) if state == LOANED => p.loans += 1,
                Some(p) => p.held += 1,
                None => orphaned_chunks += 1,
            }
        }
        Ok(RegionReport {
            path: seg.path().to_path_buf(),
            size: seg.size(),
            creator: seg.creator(),
            lease: self.lease(),
            topics,
            pool: self.pool_stats()?,
            processes,
            orphaned_chunks,
            quarantined_chunks,
            ring_repairs,
            directory_repairs: self.directory_repairs(),
            damaged_topics,
        })
    }
}
