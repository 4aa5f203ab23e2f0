//! Reclaiming what dead processes held in a region.
//!
//! A chunk records its holder (`owner`, an attach token) while it is
//! loaned (LOANED), being published (QUEUED before its descriptor is
//! committed) or received and not released (HELD). When that holder's
//! attachment is dead, nothing will ever release the chunk, so recovery
//! does: one compare-and-swap of the chunk's `owner` from the dead holder's
//! token to the recoverer's decides which of several concurrent recoverers
//! goes on (exactly one).
//!
//! A QUEUED chunk whose producer is dead is left alone while a committed
//! descriptor in some ring names it (the message is still to be delivered:
//! a producer may publish and exit); only one that no live descriptor names
//! (the producer died between marking it and committing) is reclaimed.
//!
//! A message a dead consumer had received is lost on an at-most-once topic
//! (counted), and published again into its partition on an at-least-once
//! one. Ring cells left claimed by dead processes are repaired by the rings
//! themselves, by whoever waits on them.

use super::pool::{FREE, HELD, LOANED, QUEUED};
use super::region::{Region, RECOVERY_INTERVAL};
use super::topic::Delivery;
use super::topic::Topic;
use crate::error::Result;
use crate::platform::atomic::Ordering;
use crate::primitives::ring::TOMBSTONE;
use crate::sync::{Liveness, Token};
use std::collections::HashSet;

/// What one [`Region::recover`] reclaimed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Recovered {
    /// Chunks a dead producer had loaned and not published.
    pub loans: usize,
    /// Messages a dead consumer had received and not released (lost).
    pub held: usize,
    /// Chunks a dead producer was publishing when it died (lost).
    pub unpublished: usize,
    /// Messages a dead consumer had received on an at-least-once topic,
    /// published again.
    pub redelivered: usize,
    /// Such messages whose partition is full now: left as they are, and
    /// published by a later recovery (not counted in [`total`](Self::total)).
    pub deferred: usize,
}

/// What became of a dead consumer's message on an at-least-once topic.
enum Redelivery {
    Done,
    Deferred,
    Lost,
}

impl Recovered {
    /// Chunks returned to the pool in all.
    pub fn total(&self) -> usize {
        self.loans + self.held + self.unpublished + self.redelivered
    }
}

impl Region {
    /// Returns to the pool every chunk held by a process that died: its
    /// loans, the messages it had received and not released, and a message
    /// it was publishing. Safe to run from several processes at once (each
    /// chunk is reclaimed by exactly one), and run by the library itself
    /// when a process opens the region and while a loan waits for the
    /// pool; the `tachyond` reaper may run it too.
    ///
    /// ```
    /// # use tachyon::bus::{Region, RegionConfig};
    /// # let name = format!("doc-recover-{}", std::process::id());
    /// let region = Region::create(&name, RegionConfig { size: 8 << 20, ring_arena: 1 << 20, ..Default::default() })?;
    /// assert_eq!(region.recover()?.total(), 0); // nobody died
    /// # drop(region); Region::remove(&name)?;
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn recover(&self) -> Result<Recovered> {
        self.last_recovery.store(self.opened.elapsed().as_nanos() as u64, Ordering::Relaxed);
        let metas = self.metas()?;
        let mut dead_cache = std::collections::HashMap::new();
        let mut is_dead = |owner: u32| {
            *dead_cache
                .entry(owner)
                .or_insert_with(|| Token::from_raw(owner).is_some_and(|t| self.seg.is_dead(t)))
        };
        let mut found = Recovered::default();
        let mut queued_dead = Vec::new();
        for (i, meta) in metas.iter().enumerate() {
            let state = meta.state.load(Ordering::Acquire);
            // FREE with an owner: off every list, between being popped and
            // marked loaned, or between being marked free and pushed back.
            if !matches!(state, FREE | LOANED | HELD | QUEUED) {
                continue;
            }
            let owner = meta.owner.load(Ordering::Acquire);
            if owner == 0 || !is_dead(owner) {
                continue;
            }
            if state == QUEUED {
                // Remember the dead owner seen *now*: the chunk may change
                // hands before the rings are scanned, and then must not be
                // touched (the CAS from this owner will fail).
                queued_dead.push((i as u32, owner));
                continue;
            }
            if state == HELD {
                let route = metas[i].route.load(Ordering::Acquire);
                match self.redeliver(i as u32, owner, route) {
                    Some(Redelivery::Done) => {
                        found.redelivered += 1;
                        continue;
                    }
                    Some(Redelivery::Deferred) => {
                        found.deferred += 1;
                        continue;
                    }
                    Some(Redelivery::Lost) => {
                        found.held += 1;
                        self.count_lost(route);
                        continue;
                    }
                    None => {}
                }
            }
            let route = metas[i].route.load(Ordering::Acquire);
            if self.reclaim(i as u32, state, owner) {
                match state {
                    FREE | LOANED => found.loans += 1,
                    _ => {
                        found.held += 1;
                        self.count_lost(route);
                    }
                }
            }
        }
        if !queued_dead.is_empty() {
            let live = self.referenced_chunks()?;
            for (i, owner) in queued_dead {
                if !live.contains(&i) && self.reclaim(i, QUEUED, owner) {
                    found.unpublished += 1;
                }
            }
        }
        Ok(found)
    }

    /// Runs [`recover`](Self::recover) if this handle has not for a while;
    /// returns how many chunks it reclaimed.
    pub(crate) fn recover_now_and_then(&self) -> usize {
        let now = self.opened.elapsed().as_nanos() as u64;
        let last = self.last_recovery.load(Ordering::Relaxed);
        if last != u64::MAX && now.saturating_sub(last) < RECOVERY_INTERVAL.as_nanos() as u64 {
            return 0;
        }
        self.recover().map_or(0, |r| r.total())
    }

    /// Moves chunk `i` from `state` (held by dead `owner`) to the free list;
    /// false if another recoverer (or a live consumer) got there first.
    fn reclaim(&self, i: u32, state: u32, owner: u32) -> bool {
        let Ok(metas) = self.metas() else { return false };
        let meta = &metas[i as usize];
        // The owner CAS picks exactly one recoverer.
        let me = self.seg.token().raw();
        if meta.owner.compare_exchange(owner, me, Ordering::AcqRel, Ordering::Relaxed).is_err() {
            return false;
        }
        if meta.state.load(Ordering::Acquire) != state {
            // Cannot happen while the holder is dead; leave it be.
            let _ = meta.owner.compare_exchange(me, owner, Ordering::AcqRel, Ordering::Relaxed);
            return false;
        }
        match self.class_of(i) {
            Some(class) => {
                self.free(class, i);
                true
            }
            None => false,
        }
    }

    /// If chunk `i` (HELD by dead `owner`) came from an at-least-once topic,
    /// takes it and publishes it again into its partition. Never waits: if
    /// the partition is full, the chunk is left to the dead owner and a
    /// later recovery tries again. `None` if the topic is at-most-once (or
    /// the route unknown), or another recoverer took the chunk.
    fn redeliver(&self, i: u32, owner: u32, route: u32) -> Option<Redelivery> {
        let topic_index = (route >> 16).checked_sub(1)? as usize;
        let partition = route & 0xFFFF;
        let topic = Topic::attach(self, topic_index).ok()?;
        if topic.delivery() != Delivery::AtLeastOnce || partition >= topic.partitions() {
            return None;
        }
        let metas = self.metas().ok()?;
        let meta = &metas[i as usize];
        let me = self.seg.token();
        meta.owner.compare_exchange(owner, me.raw(), Ordering::AcqRel, Ordering::Relaxed).ok()?;
        let give_back = || {
            let _ = meta.owner.compare_exchange(me.raw(), owner, Ordering::AcqRel, Ordering::Relaxed);
        };
        // State and owner are read apart: make sure it is still the dead
        // consumer's held message.
        if meta.state.load(Ordering::Acquire) != HELD {
            give_back();
            return None;
        }
        let class = self.class_of(i)?;
        let len = u64::from(meta.len.load(Ordering::Relaxed)).min(super::region::CLASS_SIZES[class] as u64);
        let (Ok(ring), Ok(waits)) = (topic.ring(partition), topic.waits(partition)) else {
            give_back();
            return None;
        };
        let Ok((pos, idx, _)) =
            ring.claim_blocking(&self.seg, &waits, true, 0, Some(std::time::Duration::ZERO))
        else {
            give_back();
            return Some(Redelivery::Deferred);
        };
        // The cell names us now; the chunk is ours and queued.
        meta.state.store(QUEUED, Ordering::Release);
        let ok = ring.commit_write(pos, idx, (u64::from(i) << 32) | len, me);
        waits.not_empty.notify_all();
        if ok {
            Some(Redelivery::Done)
        } else {
            self.free(class, i);
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

    /// Chunks named by a committed, not yet consumed descriptor in any ring.
    fn referenced_chunks(&self) -> Result<HashSet<u32>> {
        let mut live = HashSet::new();
        for (index, entry) in self.entries()?.iter().enumerate() {
            if entry.is_free() {
                continue;
            }
            let topic = Topic::attach(self, index)?;
            let n = topic.capacity() as u64;
            for p in 0..topic.partitions() {
                let ring = topic.ring(p)?;
                for (idx, cell) in ring.cells.iter().enumerate() {
                    let word = cell.word.load(Ordering::Acquire);
                    let (seq, tag) = ((word >> 32) as u32, word as u32);
                    // Full (or being read): the cell's sequence is one past
                    // a position of this cell; a tombstone delivers nothing.
                    let full = u64::from(seq.wrapping_sub(1)) % n == idx as u64;
                    if full && tag != TOMBSTONE {
                        live.insert((cell.len.load(Ordering::Relaxed) >> 32) as u32);
                    }
                }
            }
        }
        Ok(live)
    }
}
