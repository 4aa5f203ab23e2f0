//! Reclaiming what dead processes held in a region.
//!
//! Every chunk's state word names its holder at every instant (see
//! `pool`): the producer while it is LOANED and while it is QUEUED, the
//! consumer once it is HELD; the free lists hand a chunk over in the same
//! instant as they move it. When the holder's attachment is dead, nothing
//! will ever release the chunk, so recovery does: one compare-and-swap of
//! the whole word from what it read (the dead holder) to itself decides
//! which of several concurrent recoverers goes on (exactly one).
//!
//! In order, a recovery pass:
//!
//! 1. takes over the read claims dead consumers hold in any ring cell, and
//!    makes a message such a consumer had claimed but not yet taken HELD by
//!    it (so it is not lost in that window: see step 4);
//! 2. reads every chunk word and keeps those whose holder is dead;
//! 3. completes the free-list operations announced now, so that a chunk a
//!    dead process was pushing reads FREE and is not pushed twice (its word
//!    changed, so the CAS of step 4 fails);
//! 4. returns LOANED chunks to the pool; returns QUEUED chunks that no
//!    committed descriptor names (the producer died before committing; a
//!    QUEUED chunk a descriptor names is still to be delivered: a producer
//!    may publish and exit); and for HELD chunks, publishes the message
//!    again on an at-least-once topic, or counts it lost and returns the
//!    chunk on an at-most-once one.
//!
//! Chunks shared by consumer groups (docs/groups-design.md) have no token
//! in their main word (SHARED): their holders are in their group words.
//! Step 1 covers the groups' rings too (a dead member's claimed message
//! becomes HELD by it in its group's word: `Shares::adopt`); step 4
//! reclaims a dead loan through `Shares::reclaim_loan` (a publisher killed
//! before its commit point left group words set); and a last step sweeps
//! the SHARED chunks a dead token holds a share of, or that no group holds
//! any more (`Shares::recover`): a dead member's hold is lost to its group
//! (at most once) or published again into it (at least once); a hold a
//! dead publisher or redeliverer queued that no descriptor names is
//! published at least once (completing a publication cut short after its
//! commit point, at the back of the group's ring) and let go at most once
//! (lost to that group rather than delivered behind later messages of its
//! key); and a chunk whose last releaser died between its two CASes is
//! freed.
//!
//! Ring cells a dead writer left claimed are repaired by the rings
//! themselves, by whoever waits on them.

use super::groups::{self, GroupRings};
use super::layout::CLASS_SIZES;
use super::pool::{ChunkMeta, Descriptor, Word, FREE, HELD, LOANED, QUEUED};
use super::recovered::Recovered;
use super::region::{Region, RECOVERY_INTERVAL};
use super::topic::Delivery;
use super::topic::Topic;
use crate::error::{Corruption, Error, Result};
use crate::platform::atomic::Ordering;
use crate::sync::ring::Ring;
use crate::sync::{Liveness, Token};
use std::cell::RefCell;
use std::collections::HashMap;
use std::collections::HashSet;

/// What became of a dead consumer's message on an at-least-once topic.
enum Redelivery {
    Done,
    Deferred,
    Lost,
}

impl Recovered {
    /// The `tachyon::recovery` event (`tracing` feature), when anything
    /// was reclaimed or deferred.
    #[cfg_attr(not(feature = "tracing"), allow(unused_variables))]
    fn trace(&self, region: &std::path::Path) {
        if self.total() + self.deferred + self.slots + self.repaired + self.quarantined + self.directory + self.group_lost
            > 0
        {
            crate::platform::trace::event!(
                info,
                "tachyon::recovery",
                region = %region.display(),
                total = self.total(),
                loans = self.loans,
                cached = self.cached,
                held = self.held,
                unpublished = self.unpublished,
                redelivered = self.redelivered,
                deferred = self.deferred,
                group_lost = self.group_lost,
                group_redelivered = self.group_redelivered,
                group_freed = self.group_freed,
                slots = self.slots,
                repaired = self.repaired,
                quarantined = self.quarantined,
                directory = self.directory,
                "reclaimed what dead processes held"
            );
        }
    }
}

impl Region {
    /// Returns to the pool every chunk held by a process that died: its
    /// loans, the messages it had received and not released, and a message
    /// it was publishing; on at-least-once topics, publishes again the
    /// messages it had received. Safe to run from several processes at once
    /// (each chunk is reclaimed by exactly one), and run by the library
    /// itself when a process opens the region and while a loan or a receive
    /// waits; the `tachyond` reaper may run it too.
    ///
    /// ```
    /// # use tachyon::bus::{Region, RegionConfig};
    /// # let name = format!("doc-recover-{}", std::process::id());
    /// let region = Region::create(&name, RegionConfig::default().size(8 << 20).ring_arena(1 << 20))?;
    /// assert_eq!(region.recover()?.total(), 0); // nobody died
    /// # drop(region); Region::remove(&name)?;
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn recover(&self) -> Result<Recovered> {
        self.core.last_recovery.store(self.core.opened.elapsed().as_nanos() as u64, Ordering::Relaxed);
        let dead_cache = RefCell::new(HashMap::new());
        let is_dead = |holder: u32| {
            *dead_cache
                .borrow_mut()
                .entry(holder)
                .or_insert_with(|| Token::from_raw(holder).is_some_and(|t| self.is_dead(t)))
        };
        // Damage first: rings whose cells or cursors hold words no step of
        // the protocol writes are repaired, as their next claimant would.
        let mut found = Recovered {
            directory: self.repair_directory(),
            repaired: self.repair_rings(),
            ..Recovered::default()
        };
        // 0. Complete what processes dead by now announced on the free
        //    lists: a pop of theirs then reads LOANED by them below. A list
        //    that is damaged is rebuilt from the chunks' words instead.
        if self.help_free_lists().is_err() {
            // (A list damaged again meanwhile is rebuilt by its next user.)
            found.quarantined = self.core.rebuild_free_lists().unwrap_or(0);
        }
        // A head damaged into a valid empty list loses every chunk on it.
        found.quarantined += self.core.rebuild_lost_lists().unwrap_or(0);
        // 1. Read claims of dead consumers (of every group slot's rings).
        self.repair_dead_reads(&is_dead)?;
        // Consumer groups without live members past their lease are dropped.
        super::membership::expire(self, &is_dead);
        // 2. Chunks whose holder is dead, as they are now.
        let metas = self.metas()?;
        let dead: Vec<(u32, Word)> = metas
            .iter()
            .enumerate()
            .map(|(i, m)| (i as u32, m.word()))
            .filter(|(_, w)| w.state() != FREE && w.holder() != 0 && is_dead(w.holder()))
            .collect();
        // Chunks shared by groups that need recovery (a share held by a
        // dead token, or no share left).
        let shared = self.shared_to_recover(&is_dead)?;
        if dead.is_empty() && shared.is_empty() {
            found.slots = self.core.seg.release_dead_slots();
            found.trace(self.core.seg.path());
            return Ok(found);
        }
        let named = if dead.iter().any(|(_, w)| w.state() == QUEUED) {
            self.referenced_chunks()?
        } else {
            HashSet::new()
        };
        // 3. Complete what those found dead in step 2 announced.
        if self.help_free_lists().is_err() {
            found.quarantined += self.core.rebuild_free_lists().unwrap_or(0);
        }
        // 4. Reclaim (or deliver again).
        for (i, w) in dead {
            // SYNC: a QUEUED or HELD chunk's route was stored before the word CAS (`enqueue`) that
            // step 2's Acquire load saw; CACHED is stored after its CAS (`Region::keep`), by a
            // holder now dead: a stale read there only changes which count the chunk goes in.
            let route = metas[i as usize].route.load(Ordering::Acquire);
            match w.state() {
                LOANED if route == super::alloc::CACHED => found.cached += usize::from(self.reclaim_loan(i, w)),
                // A loan, maybe of a publisher cut short before the commit
                // point of a publication to groups (its group words set).
                LOANED => match self.group_words_of(i, w.holder()) {
                    0 if self.reclaim_loan(i, w) => found.loans += 1,
                    0 => {}
                    _ => found.unpublished += usize::from(self.reclaim_loan(i, w)),
                },
                QUEUED if named.contains(&i) => {}
                // A publication cut short before its commit (never
                // acknowledged to its producer).
                QUEUED if route & REDELIVERY == 0 => found.unpublished += usize::from(self.reclaim(i, w)),
                // A message a dead consumer held, or a redelivery of one cut
                // short: delivered again (at least once) or lost.
                QUEUED | HELD => match self.redeliver(i, w) {
                    Some(Redelivery::Done) => found.redelivered += 1,
                    Some(Redelivery::Deferred) => found.deferred += 1,
                    Some(Redelivery::Lost) => {
                        found.held += 1;
                        self.count_lost(route);
                    }
                    None => {
                        if self.reclaim(i, w) {
                            found.held += 1;
                            self.count_lost(route);
                        }
                    }
                },
                _ => {}
            }
        }
        // 5. Chunks shared by groups.
        for i in shared {
            self.recover_shared(i, &is_dead, &mut found);
        }
        // What the dead held is back (or deferred, still in their name,
        // and their tokens stay dead): their slots can go.
        found.slots = self.core.seg.release_dead_slots();
        found.trace(self.core.seg.path());
        Ok(found)
    }

    /// Runs [`recover`](Self::recover) if this handle has not for a while;
    /// returns how many chunks it reclaimed.
    pub(crate) fn recover_now_and_then(&self) -> usize {
        let now = self.core.opened.elapsed().as_nanos() as u64;
        let last = self.core.last_recovery.load(Ordering::Relaxed);
        if last != u64::MAX && now.saturating_sub(last) < RECOVERY_INTERVAL.as_nanos() as u64 {
            return 0;
        }
        self.recover().map_or(0, |r| r.total())
    }

    /// Validates a descriptor read from a ring: its chunk's class, the
    /// descriptor, and the chunk's metadata.
    #[inline]
    pub(crate) fn resolve(&self, word: u64) -> Result<(usize, Descriptor, &ChunkMeta)> {
        let desc = Descriptor::decode(word);
        let bad = |field, value| Error::corrupt(Corruption::BadField { field, value });
        let class =
            self.class_of(desc.chunk).ok_or_else(|| bad("descriptor chunk index", u64::from(desc.chunk)))?;
        if desc.len as usize > CLASS_SIZES[class] {
            return Err(bad("descriptor length", u64::from(desc.len)));
        }
        Ok((class, desc, &self.metas()?[desc.chunk as usize]))
    }

    /// Marks chunk `chunk` (held by the caller in state `from`) QUEUED for a
    /// new publication of `len` bytes into `route`, and returns the
    /// descriptor that names that publication.
    pub(crate) fn enqueue(&self, chunk: u32, route: u32, len: u32, from: u32) -> Result<Descriptor> {
        let meta = &self.metas()?[chunk as usize];
        let me = self.token();
        meta.route.store(route, Ordering::Relaxed);
        meta.len.store(len, Ordering::Relaxed);
        let version = meta.version.load(Ordering::Relaxed).wrapping_add(1);
        // SYNC: pairs with the Acquire load in `Descriptor::is_current` (pool.rs): route
        // and len above go with it (and with the word CAS below).
        meta.version.store(version, Ordering::Release);
        let w = meta.word();
        if w.state() != from || w.holder() != me || !meta.cas(w, w.with(QUEUED, me)) {
            return Err(Error::corrupt(Corruption::BadField {
                field: "state of a chunk this process holds",
                value: u64::from(w.state()),
            }));
        }
        Ok(Descriptor::new(chunk, version, len))
    }

    /// Takes back a chunk [`enqueue`](Self::enqueue)d by the caller whose
    /// descriptor never made it into a ring: LOANED again.
    pub(crate) fn unqueue(&self, chunk: u32) {
        if let Ok(metas) = self.metas() {
            let meta = &metas[chunk as usize];
            let w = meta.word();
            if w.state() == QUEUED && w.holder() == self.token() {
                meta.cas(w, w.with(LOANED, w.holder()));
            }
        }
    }

    /// Called for the item of a read claim taken over from `dead` in a ring
    /// of group slot `slot`: if the consumer died before taking the message
    /// (its chunk still QUEUED for this very publication), makes it HELD by
    /// the dead consumer, so that recovery treats it like any message a
    /// dead consumer held. Only the claimant of the cell acts on its
    /// publication, so nobody else moves the chunk between the check and
    /// the CAS. A chunk shared by groups is adopted through the group's
    /// word (`Shares::adopt`: QUEUED of the descriptor's stamp to HELD by
    /// the dead member); the single-group path is slot 0's only.
    pub(crate) fn adopt_dead_read(&self, word: u64, dead: Token, slot: usize) {
        let Ok((_, desc, meta)) = self.resolve(word) else { return };
        let w = meta.word();
        if groups::is_shared(w) {
            if let Ok(shares) = self.shares(desc.chunk) {
                shares.adopt(slot, desc.version, dead);
            }
        } else if slot == 0 && w.state() == QUEUED && desc.is_current(meta) {
            meta.cas(w, w.with(HELD, dead.raw()));
        }
    }

    /// Repairs damaged cells and cursors in every ring (see
    /// `Ring::repair_damaged`); returns how many.
    fn repair_rings(&self) -> usize {
        let mut repaired = 0;
        let _ = self.for_each_ring(|topic, slot, p, ring| {
            let n = ring.repair_damaged();
            if n > 0 {
                repaired += n as usize;
                let waits = topic.waits_of(slot, p)?;
                waits.not_full.notify_all();
                waits.not_empty.notify_all();
            }
            Ok(())
        });
        repaired
    }

    /// Runs `each` on every partition's ring of every group slot of every
    /// topic (a topic whose directory entry is damaged is left out: nothing
    /// can reach its rings), with the slot and the partition.
    fn for_each_ring(
        &self,
        mut each: impl FnMut(&Topic, usize, u32, &Ring<'_>) -> Result<()>,
    ) -> Result<()> {
        let slots = self.config().max_groups.max(1);
        for (index, entry) in self.entries()?.iter().enumerate() {
            if entry.is_free() {
                continue;
            }
            let Ok(topic) = Topic::attach(self, index) else { continue };
            for slot in 0..slots {
                for p in 0..topic.partitions() {
                    each(&topic, slot, p, &topic.ring_of(slot, p)?)?;
                }
            }
        }
        Ok(())
    }

    /// Takes over every read claim a dead consumer holds in any ring.
    fn repair_dead_reads(&self, is_dead: &dyn Fn(u32) -> bool) -> Result<()> {
        let me = self.core.seg.token();
        self.for_each_ring(|topic, slot, p, ring| {
            let adopt = |word: u64, dead| topic.adopt_dead_read(word, dead, slot);
            let mut freed = false;
            for idx in 0..ring.cells.len() {
                let Some((w, reader)) = ring.read_claim(idx) else { continue };
                if is_dead(reader.raw()) {
                    freed |= ring.take_over_read(&ring.cells[idx], w, me, &adopt);
                }
            }
            if freed {
                let waits = topic.waits_of(slot, p)?;
                super::topic::topic_wake(&waits, waits.not_full);
            }
            Ok(())
        })
    }

    /// Moves chunk `i` (whose word was `w`, with a dead holder) to the free
    /// list; false if another recoverer (or the free list's completion of
    /// the dead holder's push) changed it first.
    fn reclaim(&self, i: u32, w: Word) -> bool {
        let Ok(metas) = self.metas() else { return false };
        if !metas[i as usize].cas(w, w.with(w.state(), self.token())) {
            return false;
        }
        match self.class_of(i) {
            Some(class) => {
                self.free_shared(class, i);
                true
            }
            None => false,
        }
    }

    /// Reclaims chunk `i`, LOANED by a dead holder (word `w`), through
    /// `Shares::reclaim_loan`: the group words a publisher cut short before
    /// its commit point set are cleared before the push. False if another
    /// recoverer (or the free list's completion of the dead holder's push)
    /// changed it first.
    fn reclaim_loan(&self, i: u32, w: Word) -> bool {
        let Some(class) = self.class_of(i) else { return false };
        let (Ok(shares), Ok(free)) = (self.shares(i), self.free_to(class)) else {
            return self.reclaim(i, w);
        };
        if !shares.reclaim_loan(w, self.core.seg.token(), &free) {
            return false;
        }
        if free.refused.get() {
            self.push_refused(&free, class, i);
        } else {
            self.freed().notify_all();
        }
        true
    }

    /// How many of chunk `i`'s group words `holder` holds (a publisher cut
    /// short before its commit point).
    fn group_words_of(&self, i: u32, holder: u32) -> usize {
        let Ok(shares) = self.shares(i) else { return 0 };
        (0..shares.groups.len())
            .filter(|&g| {
                let v = shares.group(g);
                v.state() != FREE && v.holder() == holder
            })
            .count()
    }

    /// Chunks shared by groups (main word SHARED) that recovery has work
    /// on: a group word held by a dead token, or no group word held at all
    /// (a last releaser died between its two CASes; or a live one is
    /// between them now, which `free_if_last`'s CAS settles).
    fn shared_to_recover(&self, is_dead: &dyn Fn(u32) -> bool) -> Result<Vec<u32>> {
        if self.config().max_groups == 0 {
            return Ok(Vec::new());
        }
        let metas = self.metas()?;
        let mut todo = Vec::new();
        for i in 0..metas.len() as u32 {
            if !groups::is_shared(metas[i as usize].word()) {
                continue;
            }
            let Ok(shares) = self.shares(i) else { continue };
            let words = (0..shares.groups.len()).map(|g| shares.group(g));
            let (mut held, mut dead) = (false, false);
            for v in words.filter(|v| v.state() != FREE) {
                held = true;
                dead |= is_dead(v.holder());
            }
            if dead || !held {
                todo.push(i);
            }
        }
        Ok(todo)
    }

    /// Recovery of chunk `i`, shared by groups (`Shares::recover`): each
    /// group word a dead token holds is lost to its group (at-most-once
    /// topic: a dead member's, or one a dead publisher queued and no
    /// committed descriptor names; counted in the topic's `lost`),
    /// published again into its group (at least once: a dead member's, or
    /// one queued by a dead publisher or redeliverer and named by no
    /// committed descriptor in the group's ring), or left (queued and
    /// named); then the chunk is freed if no group holds it any more.
    fn recover_shared(&self, i: u32, is_dead: &dyn Fn(u32) -> bool, found: &mut Recovered) {
        let (Some(class), Ok(shares), Ok(metas)) = (self.class_of(i), self.shares(i), self.metas()) else {
            return;
        };
        let Ok(free) = self.free_to(class) else { return };
        let meta = &metas[i as usize];
        // SYNC: the publisher stored the route and length before its group
        // words' AcqRel CASes, which `shared_to_recover`'s Acquire loads saw.
        let route = meta.route.load(Ordering::Acquire);
        let len = meta.len.load(Ordering::Relaxed).min(CLASS_SIZES[class] as u32);
        let topic = (route >> 16).checked_sub(1).and_then(|t| Topic::attach(self, t as usize).ok());
        let partition = route & !REDELIVERY & 0xFFFF;
        let topic = topic.filter(|t| partition < t.partitions());
        // A route that names no topic (damage): its holds are ended, never
        // published again (there is no ring to publish into).
        let at_least_once = topic.as_ref().is_some_and(|t| t.delivery() == Delivery::AtLeastOnce);
        let rings = TopicRings { topic: topic.as_ref(), partition, len };
        let r = shares.recover(self.core.seg.token(), is_dead, at_least_once, &rings, &free);
        found.group_lost += r.lost;
        found.group_redelivered += r.redelivered;
        found.deferred += r.deferred;
        for _ in 0..r.lost {
            self.count_lost(route);
        }
        if r.freed {
            found.group_freed += 1;
            self.freed().notify_all();
        } else if free.refused.get() {
            // Taken by us as the last hold; the list refused the push.
            found.group_freed += 1;
            self.push_refused(&free, class, i);
        }
    }

    /// If chunk `i` (HELD by a dead consumer, or QUEUED by a dead
    /// redeliverer and named by no descriptor: word `w`) came from an
    /// at-least-once topic, takes it and publishes it again into its
    /// partition. Never waits: if the partition is full, the chunk is left
    /// to the dead consumer and a later recovery tries again. `None` if the
    /// topic is at-most-once (or the route unknown), or another recoverer
    /// took the chunk.
    fn redeliver(&self, i: u32, w: Word) -> Option<Redelivery> {
        let metas = self.metas().ok()?;
        let meta = &metas[i as usize];
        // SYNC: the route was stored before the word CAS (`enqueue`)
        // that the caller's Acquire load saw.
        let route = meta.route.load(Ordering::Acquire);
        let topic_index = (route >> 16).checked_sub(1)? as usize;
        let partition = route & !REDELIVERY & 0xFFFF;
        let topic = Topic::attach(self, topic_index).ok()?;
        if topic.delivery() != Delivery::AtLeastOnce || partition >= topic.partitions() {
            return None;
        }
        let class = self.class_of(i)?;
        let len = meta.len.load(Ordering::Relaxed).min(CLASS_SIZES[class] as u32);
        let me = self.token();
        let mine = w.with(HELD, me);
        if !meta.cas(w, mine) {
            return None;
        }
        let (Ok(ring), Ok(waits)) = (topic.ring(partition), topic.waits(partition)) else {
            meta.cas(mine, w);
            return None;
        };
        let Ok((pos, idx, _)) = topic.claim(&ring, &waits, true, Some(std::time::Duration::ZERO)) else {
            meta.cas(mine, w);
            return Some(Redelivery::Deferred);
        };
        // The cell is ours: the chunk goes QUEUED and its descriptor in.
        // (A chunk word that changed under us would be a damaged segment;
        // the cell then carries a descriptor of no chunk, which readers
        // report as corrupt, rather than stalling the ring.)
        let desc = self.enqueue(i, route | REDELIVERY, len, HELD).map_or(NO_CHUNK, Descriptor::encode);
        crate::platform::fault::point("redeliver-queued");
        let ok = ring.commit_write(pos, idx, desc, self.core.seg.token());
        super::topic::topic_wake(&waits, waits.not_empty);
        if ok && desc != NO_CHUNK {
            Some(Redelivery::Done)
        } else {
            self.free_shared(class, i);
            Some(Redelivery::Lost)
        }
    }

    /// Counts a lost message in the topic it came from (if known).
    fn count_lost(&self, route: u32) {
        let Some(index) = (route >> 16).checked_sub(1) else { return };
        if let Some(entry) = self.entries().ok().and_then(|e| e.get(index as usize)) {
            entry.lost.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Chunks named by a committed, not yet consumed descriptor in any ring
    /// of the single-group path (slot 0; including those a live consumer is
    /// reading).
    fn referenced_chunks(&self) -> Result<HashSet<u32>> {
        let mut live = HashSet::new();
        self.for_each_ring(|_, slot, _, ring| {
            if slot != 0 {
                return Ok(());
            }
            live.extend(
                (0..ring.cells.len())
                    .filter_map(|idx| ring.committed(idx))
                    .map(|w| Descriptor::decode(w).chunk),
            );
            Ok(())
        })?;
        Ok(live)
    }
}

/// A flag in a chunk's route: the message is being published again by
/// recovery (partitions stop at 256, so the bit is free).
const REDELIVERY: u32 = 0x8000;

/// A descriptor that names no chunk (chunk indices stop at `MAX_CHUNKS`).
const NO_CHUNK: u64 = Descriptor::new((1 << 24) - 1, 0, 0).encode();

/// The rings of one partition of a topic's group slots, as
/// `Shares::recover` publishes into them: claims never wait (a full ring
/// defers the redelivery to a later pass), commits wake the ring's readers,
/// and a hold is "named" by a committed descriptor of its chunk and stamp
/// still in the group's ring (unread, or being read).
struct TopicRings<'a> {
    /// `None` for a route that names no topic (damage): nothing is claimed
    /// or named.
    topic: Option<&'a Topic>,
    partition: u32,
    /// The message's length, for the descriptors.
    len: u32,
}

impl TopicRings<'_> {
    fn ring(&self, g: usize) -> Option<(Ring<'_>, crate::sync::ring::Waits<'_>)> {
        let t = self.topic?;
        Some((t.ring_of(g, self.partition).ok()?, t.waits_of(g, self.partition).ok()?))
    }
}

impl GroupRings for TopicRings<'_> {
    fn claim(&self, g: usize, _me: Token) -> Option<u64> {
        let (ring, waits) = self.ring(g)?;
        let t = self.topic?;
        t.claim_in(g, &ring, &waits, true, Some(std::time::Duration::ZERO)).ok().map(|(pos, _, _)| pos)
    }

    fn commit(&self, g: usize, cell: u64, chunk: u32, stamp: u32, me: Token) -> bool {
        let Some((ring, waits)) = self.ring(g) else { return false };
        let idx = (cell % ring.cells.len() as u64) as usize;
        let ok = ring.commit_write(cell, idx, Descriptor::new(chunk, stamp, self.len).encode(), me);
        super::topic::topic_wake(&waits, waits.not_empty);
        ok
    }

    fn abandon(&self, g: usize, cell: u64, me: Token) {
        if let Some((ring, waits)) = self.ring(g) {
            let idx = (cell % ring.cells.len() as u64) as usize;
            ring.abandon_write(cell, idx, me);
            super::topic::topic_wake(&waits, waits.not_empty);
        }
    }

    fn named(&self, g: usize, chunk: u32, stamp: u32) -> bool {
        let Some((ring, _)) = self.ring(g) else { return false };
        let want = Descriptor::new(chunk, stamp, 0);
        (0..ring.cells.len())
            .filter_map(|idx| ring.committed(idx))
            .map(Descriptor::decode)
            .any(|d| d.chunk == want.chunk && d.version == want.version)
    }
}
