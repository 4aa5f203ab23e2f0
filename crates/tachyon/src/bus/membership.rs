//! Consumer groups' membership, leases and drops (docs/groups-design.md,
//! wiring step 6).
//!
//! Each group slot of each topic has a member record in the region
//! (`layout.rs`: after the group words, `max_topics x max_groups` records
//! of 128 bytes, none in a region without group slots):
//!
//! ```text
//!      0  generation of the group the record describes
//!      8  when the group was first seen without a live member (ns since
//!         the epoch; 0: it has one)
//!     16  messages the group missed (`TopicConfig::overrun`)
//!     24  the member processes' tokens                 (MAX_MEMBERS x u32)
//! ```
//!
//! A member is a process (its attach token), however many [`Group`]
//! handles and received messages of the group it has: the process stays a
//! member until the last of them is dropped (a process-local count), so a
//! group is never dropped while a message it delivered is still read in a
//! process that is alive.
//!
//! Every change to a record is made under the region's control mutex (a
//! robust lock; joins and topic creation take it too): joining, leaving,
//! and recovery's pass, which forgets dead members, starts the lease clock
//! of a group without live members and drops the groups whose lease ran
//! out. There is no lock-free transition here: the drop itself
//! (`Control::start_drop`, a sweep of the group's holds off the topic's
//! chunks, `Control::vacate`) is the core's, model-checked against
//! publishers in flight (`groups::loom_models::a_group_dropped_mid_publish`).
//!
//! Crash windows, all repaired by the next holder of the mutex:
//!
//! * a joiner killed before its slot's control CAS leaves the slot VACANT
//!   (the next joiner rewrites the record); after it, or after writing its
//!   token into an ACTIVE group's record, a dead token that recovery
//!   forgets;
//! * a leaver killed between removing its token and starting the lease
//!   clock leaves a group without live members whose clock recovery
//!   starts;
//! * a dropper killed mid-drop leaves the slot DRAINING, which the next
//!   pass resumes (the sweep is idempotent).
//!
//! [`Group`]: super::Group

use super::backlog::{self, JoinFrom};
use super::groups::{Control, ACTIVE, DRAINING, VACANT};
use super::layout::MEMBER_RECORD;
use super::pool::{HELD, LOANED};
use super::region::Region;
use super::topic::Topic;
use crate::error::{Corruption, Error, Result};
use crate::platform::atomic::{AtomicU32, AtomicU64, Ordering};
use crate::segment::ShmSafe;
use crate::sync::ring::Claim;
use crate::sync::{Liveness, Token};
use std::time::{Duration, SystemTime};

/// Most member processes of one group (the record's token entries).
pub const MAX_MEMBERS: usize = 26;

/// One group slot's member record (see the module docs).
#[repr(C)]
pub(crate) struct MemberRecord {
    gen: AtomicU64,
    empty_since: AtomicU64,
    /// Messages of the group dropped unread by overrunning publishers.
    pub(crate) missed: AtomicU64,
    tokens: [AtomicU32; MAX_MEMBERS],
}

const _: () = assert!(std::mem::size_of::<MemberRecord>() == MEMBER_RECORD);

// SAFETY: `repr(C)`, atomics only; any bits are valid (a record whose
// generation is not its slot's is not trusted: that group is never dropped).
unsafe impl ShmSafe for MemberRecord {}

/// Now, in ns since the Unix epoch (as heartbeats are kept).
fn now_ns() -> u64 {
    SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

impl MemberRecord {
    /// The member tokens (non-zero entries), as read now.
    pub(crate) fn members(&self) -> Vec<u32> {
        self.tokens.iter().map(|t| t.load(Ordering::Relaxed)).filter(|&t| t != 0).collect()
    }

    /// Whether the record describes the group of generation `gen`.
    pub(crate) fn is_of(&self, gen: u32) -> bool {
        self.gen.load(Ordering::Relaxed) == u64::from(gen)
    }

    /// When the group was first seen without a live member (ns since the
    /// epoch), 0 if it has one.
    pub(crate) fn empty_since(&self) -> u64 {
        self.empty_since.load(Ordering::Relaxed)
    }

    /// A new group of generation `gen` with one member (under the mutex,
    /// before the slot's control CAS).
    fn reset(&self, gen: u32, first: Option<Token>) {
        self.gen.store(u64::from(gen), Ordering::Relaxed);
        for t in &self.tokens {
            t.store(0, Ordering::Relaxed);
        }
        if let Some(me) = first {
            self.tokens[0].store(me.raw(), Ordering::Relaxed);
        }
        self.empty_since.store(0, Ordering::Relaxed);
        self.missed.store(0, Ordering::Relaxed);
    }

    /// Adds `me` (under the mutex): a free entry, or one of a dead (or
    /// invalid) token. False if the record is full of live members.
    fn add(&self, me: Token, is_dead: &dyn Fn(u32) -> bool) -> bool {
        if self.tokens.iter().any(|t| t.load(Ordering::Relaxed) == me.raw()) {
            return true;
        }
        let free = self.tokens.iter().find(|t| {
            let raw = t.load(Ordering::Relaxed);
            raw == 0 || is_dead(raw)
        });
        match free {
            Some(t) => {
                t.store(me.raw(), Ordering::Relaxed);
                true
            }
            None => false,
        }
    }

    /// Forgets the members `gone` says are gone (under the mutex); returns
    /// whether a member remains.
    fn forget(&self, gone: &dyn Fn(u32) -> bool) -> bool {
        let mut left = false;
        for t in &self.tokens {
            let raw = t.load(Ordering::Relaxed);
            if raw != 0 && gone(raw) {
                t.store(0, Ordering::Relaxed);
            } else if raw != 0 {
                left = true;
            }
        }
        left
    }
}

/// This process's count of handles (groups, messages) per membership:
/// `(region, topic index, slot, generation)` -> count. A process is one
/// member however many handles it has.
static LOCAL: std::sync::Mutex<Vec<(Key, usize)>> = std::sync::Mutex::new(Vec::new());

/// A membership of this process: `(region attachment, topic index, slot,
/// generation)`.
type Key = (usize, usize, usize, u32);

fn local() -> std::sync::MutexGuard<'static, Vec<(Key, usize)>> {
    LOCAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// One membership of this process: kept by every [`Group`](super::Group)
/// handle of one join and every message received through it; the last one
/// dropped ends the membership (see [`leave`]).
pub(crate) struct Member {
    topic: Topic,
    slot: usize,
    gen: u32,
    /// Whether this value still counts in `LOCAL` (false once left).
    counted: std::sync::atomic::AtomicBool,
}

impl Member {
    fn key(&self) -> Key {
        (self.topic.region().core_id(), self.topic.index(), self.slot, self.gen)
    }

    /// The group's generation.
    pub(crate) fn generation(&self) -> u32 {
        self.gen
    }

    /// Ends this value's share of the membership now; the membership ends
    /// with the last share (`Ok(true)`). See [`leave`].
    pub(crate) fn leave(&self) -> Result<bool> {
        if !self.counted.swap(false, std::sync::atomic::Ordering::AcqRel) {
            return Ok(false);
        }
        leave(&self.topic, self.slot, self.gen, self.key())
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        // An error (the control mutex not had within its timeout) leaves
        // this process in the record until it exits: the group is kept
        // for it, never dropped under it.
        let _ = self.leave();
    }
}

impl Region {
    /// An identity of this attachment, for this process's membership
    /// counts.
    fn core_id(&self) -> usize {
        std::sync::Arc::as_ptr(&self.core) as usize
    }

    /// The member record of group slot `slot` of topic `topic` (directory
    /// index).
    pub(crate) fn member_record(&self, topic: usize, slot: usize) -> Result<&MemberRecord> {
        let l = &self.core.layout;
        if topic >= l.max_topics || slot >= l.max_groups {
            return Err(Error::corrupt(Corruption::BadField { field: "group slot", value: slot as u64 }));
        }
        self.core.seg.get(l.members + (topic * l.max_groups + slot) * MEMBER_RECORD)
    }
}

/// Joins (or creates) the group `name` of `topic` for this process, under
/// the region's control mutex; returns its slot and this join's share of
/// the membership. The caller checked the name and that the topic has
/// named slots.
pub(crate) fn join(topic: &Topic, name: &str, from: JoinFrom) -> Result<(usize, std::sync::Arc<Member>)> {
    let region = topic.region();
    let me = region.segment().token();
    let controls = topic.controls();
    let index = topic.index();
    // This process's counts first, then the region's mutex (as `leave`).
    let mut counts = local();
    let guard = region.control().lock(region, Some(Duration::from_secs(5)))?;
    // A holder that died left at most what the module docs list: repaired
    // below or by recovery.
    let _ = guard.owner_died();
    let is_dead = |raw: u32| Token::from_raw(raw).is_none_or(|t| region.is_dead(t));
    let mut found = None;
    for (g, c) in controls.iter().enumerate().skip(1) {
        let (gen, state) = c.load();
        if state == ACTIVE && topic.group_name(g).as_deref() == Some(name) {
            let rec = region.member_record(index, g)?;
            if !rec.is_of(gen) {
                // Damaged: the tokens in it are kept (any may be a live
                // member's), the generation restored.
                rec.gen.store(u64::from(gen), Ordering::Relaxed);
            }
            if !rec.add(me, &is_dead) {
                return Err(Error::NoSpace {
                    what: format!(
                        "group {name:?} of topic {:?} has {MAX_MEMBERS} live member processes, the most a group has",
                        topic.name()
                    ),
                });
            }
            rec.empty_since.store(0, Ordering::Relaxed);
            found = Some((g, gen));
            break;
        }
    }
    if found.is_none() {
        for (g, c) in controls.iter().enumerate().skip(1) {
            let (gen, state) = c.load();
            if state != VACANT {
                continue;
            }
            let Some(words) = topic.group_name_words(g) else { continue };
            let mut bytes = [0u8; super::directory::MAX_NAME];
            bytes[..name.len()].copy_from_slice(name.as_bytes());
            for (w, b) in words[1..].iter().zip(bytes.chunks_exact(8)) {
                w.store(u64::from_le_bytes(b.try_into().expect("8 bytes")), Ordering::Relaxed);
            }
            words[0].store(name.len() as u64, Ordering::Relaxed);
            region.member_record(index, g)?.reset(gen, Some(me));
            crate::platform::fault::point("groups-join-recorded");
            // From the oldest: the slot's cells reserved for the backlog
            // before it goes ACTIVE (bus/backlog.rs).
            let reserved = match from {
                JoinFrom::Oldest => Some(backlog::reserve(topic, g, me)?),
                JoinFrom::Now => None,
            };
            // SYNC: the control word's AcqRel CAS publishes the name and the
            // record to whoever reads the slot ACTIVE (joiners and recovery
            // read them under the lock too).
            if c.join(gen) {
                if let Some(reserved) = reserved {
                    backlog::fill(topic, g, reserved, me);
                }
                found = Some((g, gen));
                break;
            }
            if let Some(reserved) = reserved {
                backlog::abandon(topic, g, reserved, me);
            }
        }
    }
    let Some((slot, gen)) = found else {
        return Err(Error::NoSpace {
            what: format!(
                "the {} named group slots of topic {:?} are all used; create the region with a larger max_groups",
                controls.len() - 1,
                topic.name()
            ),
        });
    };
    let member = Member {
        topic: topic.share(),
        slot,
        gen,
        counted: std::sync::atomic::AtomicBool::new(true),
    };
    let key = member.key();
    match counts.iter_mut().find(|(k, _)| *k == key) {
        Some((_, n)) => *n += 1,
        None => counts.push((key, 1)),
    }
    drop(guard);
    Ok((slot, std::sync::Arc::new(member)))
}

/// Ends one share of this process's membership of slot `slot` (of
/// generation `gen`) of `topic`; the last share ends the membership: under
/// the region's control mutex, the holds this process still has in the
/// group (none normally: its messages keep the membership) are released,
/// its token leaves the record, and if no live member is left the group's
/// lease starts. The group keeps its position (and the messages queued
/// for it) until a member joins again or the lease runs out.
fn leave(topic: &Topic, slot: usize, gen: u32, key: Key) -> Result<bool> {
    let mut counts = local();
    let Some(at) = counts.iter().position(|(k, _)| *k == key) else { return Ok(false) };
    counts[at].1 -= 1;
    if counts[at].1 > 0 {
        return Ok(false);
    }
    counts.swap_remove(at);
    let region = topic.region();
    let me = region.segment().token();
    let guard = region.control().lock(region, Some(Duration::from_secs(5)))?;
    let _ = guard.owner_died();
    let released = release_held(topic, slot, me);
    if released > 0 {
        region.freed().notify_all();
    }
    let rec = region.member_record(topic.index(), slot)?;
    if topic.controls().get(slot).map(Control::load) == Some((gen, ACTIVE)) && rec.is_of(gen) {
        crate::platform::fault::point("groups-leave");
        let is_dead = |raw: u32| Token::from_raw(raw).is_none_or(|t| region.is_dead(t));
        if !rec.forget(&|raw| raw == me.raw() || is_dead(raw)) && rec.empty_since() == 0 {
            rec.empty_since.store(now_ns().max(1), Ordering::Relaxed);
        }
    }
    Ok(true)
}

/// Releases the holds `me` has in group slot `slot` of `topic`'s
/// publications (as if their messages were dropped); returns how many.
fn release_held(topic: &Topic, slot: usize, me: Token) -> usize {
    let region = topic.region();
    let route = topic.index() as u32 + 1;
    let mut n = 0;
    for i in 0..region.core.layout.total_chunks as u32 {
        let Ok(shares) = region.shares(i) else { break };
        let w = shares.group(slot);
        // Only this process moves a word HELD by it (or recovery, once it is
        // dead): the route read while it holds the chunk is its topic's.
        if w.state() != HELD
            || w.holder() != me.raw()
            || shares.main.route.load(Ordering::Acquire) >> 16 != route
        {
            continue;
        }
        if let Some(class) = region.class_of(i) {
            region.release_shared(class, i, slot);
            n += 1;
        }
    }
    n
}

/// What one pass of [`expire`] did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Expired {
    /// Groups dropped (their lease ran out, or a dead dropper's drop was
    /// resumed).
    pub groups: usize,
    /// Chunks freed by their sweeps.
    pub freed: usize,
}

/// Recovery's pass over every topic's named groups: forgets dead members,
/// starts the lease clock of a group without live members, drops the
/// groups whose lease ran out and resumes drops a dead dropper left. Takes
/// the control mutex only where there is something to change, and only if
/// it is free now (a busy mutex: the next pass).
pub(crate) fn expire(region: &Region, is_dead: &dyn Fn(u32) -> bool) -> Expired {
    let mut done = Expired::default();
    if region.config().max_groups < 2 {
        return done;
    }
    let Ok(entries) = region.entries() else { return done };
    let gone = |raw: u32| Token::from_raw(raw).is_none() || is_dead(raw);
    for (index, entry) in entries.iter().enumerate() {
        if entry.is_free() {
            continue;
        }
        let Ok(topic) = Topic::attach(region, index) else { continue };
        let lease = region.config().group_lease.as_nanos() as u64;
        // A look without the lock first: is there anything to change?
        let wanted = topic.controls().iter().enumerate().skip(1).any(|(g, c)| match c.load() {
            (_, DRAINING) => true,
            (gen, ACTIVE) => region.member_record(index, g).is_ok_and(|rec| {
                let members = rec.members();
                let live = members.iter().any(|&t| !gone(t));
                let since = rec.empty_since();
                rec.is_of(gen)
                    && (members.iter().any(|&t| gone(t))
                        || (live && since != 0)
                        || (!live && (since == 0 || now_ns().saturating_sub(since) >= lease)))
            }),
            _ => false,
        });
        if !wanted {
            continue;
        }
        let Ok(Some(guard)) = region.control().try_lock(region) else { continue };
        let _ = guard.owner_died();
        let now = now_ns().max(1);
        for (g, c) in topic.controls().iter().enumerate().skip(1) {
            let (gen, state) = c.load();
            let Ok(rec) = region.member_record(index, g) else { continue };
            let drop_it = match state {
                DRAINING => true,
                // A record that is not this generation's (damage) is not
                // trusted: the group is kept.
                ACTIVE if rec.is_of(gen) => {
                    if rec.forget(&gone) {
                        rec.empty_since.store(0, Ordering::Relaxed);
                        false
                    } else {
                        let since = match rec.empty_since() {
                            0 => {
                                rec.empty_since.store(now, Ordering::Relaxed);
                                now
                            }
                            s => s,
                        };
                        now.saturating_sub(since) >= lease
                    }
                }
                _ => false,
            };
            if drop_it {
                if let Some(freed) = drop_group(&topic, g, gen) {
                    done.groups += 1;
                    done.freed += freed;
                }
            }
        }
    }
    done
}

/// Drops group slot `g` (generation `gen`) of `topic`, whose members are
/// all gone: DRAINING, its holds swept off the topic's chunks, its rings
/// emptied (a producer blocked on one goes on), VACANT of the next
/// generation. The caller holds the control mutex. `None` if the slot is
/// not that group's; else the chunks freed.
fn drop_group(topic: &Topic, g: usize, gen: u32) -> Option<usize> {
    let region = topic.region();
    let me = region.segment().token();
    let control = topic.controls().get(g)?;
    if !control.start_drop(gen) {
        return None;
    }
    crate::platform::fault::point("groups-drop-started");
    let route = topic.index() as u32 + 1;
    let mut freed = 0;
    for i in 0..region.core.layout.total_chunks as u32 {
        let (Ok(shares), Some(class)) = (region.shares(i), region.class_of(i)) else { continue };
        let Ok(free) = region.free_to(class) else { continue };
        if let Some((m, last)) = shares.sweep_topic(g, route, me, &free) {
            if shares.main.word() == m.with(LOANED, me.raw()) {
                // Taken by us, but the push met a stopped or damaged list.
                region.free_shared(class, i);
                freed += 1;
            } else if last {
                freed += 1;
            }
        }
    }
    // What the dropped group left in its rings names no hold any more:
    // read and dropped, so that producers blocked on a full ring go on and
    // the slot's next group starts with empty rings.
    for p in 0..topic.partitions() {
        drain(topic, g, p, me);
    }
    region.freed().notify_all();
    crate::platform::fault::point("groups-drop-swept");
    if !control.vacate(gen) {
        return None;
    }
    if let Ok(rec) = region.member_record(topic.index(), g) {
        rec.reset(gen.wrapping_add(1), None);
    }
    Some(freed)
}

/// Reads and drops every item of slot `g`'s ring of `partition` (a dead
/// claimant's cell in the way is repaired), then wakes its writers.
pub(super) fn drain(topic: &Topic, g: usize, partition: u32, me: Token) {
    let (Ok(ring), Ok(waits)) = (topic.ring_of(g, partition), topic.waits_of(g, partition)) else { return };
    let region = topic.region();
    for _ in 0..=2 * topic.capacity() + 2 {
        let mut freed = false;
        match ring.claim_read_within(me, u64::MAX, u64::MAX, u64::MAX, &mut freed) {
            Claim::Got { pos, idx, .. } => {
                ring.finish_read(pos, idx, me);
            }
            _ => {
                if !ring.recover_with(region, false, &|_, _| {}) {
                    break;
                }
            }
        }
    }
    waits.not_full.notify_all();
    waits.not_empty.notify_all();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bus::layout::{cfg_copy_at, GROUP_LEASE_COPY, OFF_GROUP_LEASE};
    use crate::bus::{Key, RegionConfig, TopicConfig};

    fn region(tag: &str, cfg: RegionConfig) -> (String, Region) {
        let name = format!("t-membership-{tag}-{}", std::process::id());
        let _ = Region::remove(&name);
        (name.clone(), Region::create(&name, cfg).unwrap())
    }

    fn small() -> RegionConfig {
        RegionConfig::default().size(8 << 20).ring_arena(1 << 20)
    }

    /// A hold the process still has in a group when its membership ends
    /// (taken here without a `Message`, as a release that failed would
    /// leave it) is released by the leave; the member leaves the record and
    /// the group's lease clock starts.
    #[test]
    fn leaving_releases_a_hold_left_behind() {
        let (name, r) = region("orphan", small().max_groups(2));
        let t = r.create_topic("t", TopicConfig::default().default_group(false)).unwrap();
        let initial = r.pool_stats().unwrap();
        let g = t.join_group("g").unwrap();
        t.send(b"x", Key(0), None).unwrap();
        let (chunk, _) = t.take_message_in(g.slot(), 0, None, None).unwrap();
        assert_eq!(chunk.group, Some(1));
        assert_ne!(r.pool_stats().unwrap(), initial);
        let rec = r.member_record(t.index(), g.slot()).unwrap();
        assert_eq!((rec.members().len(), rec.empty_since()), (1, 0));
        assert!(g.leave().unwrap());
        assert_eq!(r.pool_stats().unwrap(), initial, "the hold was released");
        assert!(rec.members().is_empty() && rec.empty_since() != 0);
        drop((t, r));
        Region::remove(&name).unwrap();
    }

    /// The group lease is recorded twice, each copy under its own seal: a
    /// damaged copy is read past and repaired; both damaged is `Corrupt`;
    /// a region without group slots leaves the words 0 (layout 3's bytes).
    #[test]
    fn the_group_lease_is_sealed_twice() {
        let lease = Duration::from_millis(1234);
        let cfg = small().max_groups(3).group_lease(lease);
        let (name, r) = region("lease", cfg.clone());
        let first = r.segment().get::<AtomicU64>(OFF_GROUP_LEASE).unwrap();
        let second = r.segment().get::<AtomicU64>(cfg_copy_at(cfg.max_topics) + GROUP_LEASE_COPY).unwrap();
        let good = first.load(Ordering::Relaxed);
        assert_eq!((good, second.load(Ordering::Relaxed)), (1_234_000_000, 1_234_000_000));
        first.store(good ^ 1, Ordering::Relaxed);
        let (opened, fixed) = Region::open_attached(&name).unwrap();
        assert_eq!((opened.config().group_lease, fixed), (lease, 1));
        assert_eq!(first.load(Ordering::Relaxed), good, "repaired from the second copy");
        first.store(good ^ 1, Ordering::Relaxed);
        second.store(good ^ 2, Ordering::Relaxed);
        let err = Region::open_attached(&name).map(|_| ()).unwrap_err();
        assert!(err.to_string().contains("group lease"), "{err}");
        drop((r, opened));
        Region::remove(&name).unwrap();
        let (name, r) = region("nolease", small().group_lease(lease));
        assert_eq!(r.segment().get::<AtomicU64>(OFF_GROUP_LEASE).unwrap().load(Ordering::Relaxed), 0);
        // Not recorded without group slots; an open with another value is
        // not refused for it.
        assert_eq!(Region::open(&name).unwrap().config().group_lease, RegionConfig::default().group_lease);
        drop(Region::create_or_open(&name, small().group_lease(lease)).unwrap());
        drop(r);
        Region::remove(&name).unwrap();
    }
}
