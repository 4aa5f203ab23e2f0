//! Consumer groups' shared state: one chunk read by several groups, freed
//! exactly once when the last group that was joined at publish time lets it
//! go, with every hold attributed to a token at every instant so that a
//! process killed at any instruction leaves nothing recovery cannot repair.
//! The protocol, its crash windows and the flaws of simpler designs are in
//! docs/groups-design.md; this module is its core, which the bus drives
//! (publish and receive in `topic.rs`, the last release in `alloc.rs`,
//! recovery in `recovery.rs`) and the unit tests and loom models below
//! check.
//!
//! # The words
//!
//! Per chunk, besides its main word (`pool.rs`), one *group word* per group
//! slot, in the main word's encoding with the tag used as a publication
//! stamp: `stamp << 32 | state << 30 | holder`.
//!
//! ```text
//! main:   LOANED(me, t) -> SHARED(t) = HELD by SHARED_HOLDER   (publisher)
//!         SHARED(t) -> LOANED(me, t) -> free-list push          (last releaser)
//! group:  FREE(s) -> QUEUED(publisher, s')                       (publisher, main LOANED)
//!         QUEUED(_, s) -> HELD(member, s)                        (member, by descriptor stamp s)
//!         HELD(dead, s) -> HELD(recoverer, s) -> QUEUED(recoverer, s')    (redelivery)
//! (s': a new stamp, drawn from the chunk's publication count `version`)
//!         QUEUED | HELD -> FREE(s)                               (release, drop, at-most-once loss)
//! control (per group slot): VACANT(gen) -> ACTIVE(gen) -> DRAINING(gen) -> VACANT(gen+1)
//! ```
//!
//! # Invariant
//!
//! While the main word is SHARED(t), the chunk belongs to the group words
//! that are not FREE; once they are all FREE they stay FREE (no step sets a
//! group word while the main word is SHARED), so whoever then moves the main
//! word from SHARED(t) to LOANED by itself, one CAS, frees the chunk, and
//! exactly one can. A releaser reads the main word *before* it lets its
//! group word go (while its hold keeps the chunk out of the pool): the free
//! list changes a word's tag on every push and pop, so a releaser delayed
//! past the chunk's reuse fails its CAS instead of freeing a chunk that
//! other groups hold.

use super::pool::{ChunkMeta, Descriptor, FreeList, Pool, Word, FREE, HELD, LOANED, QUEUED, SHARED_HOLDER};
use crate::platform::atomic::{fence, AtomicU64, Ordering};
use crate::sync::Token;
use std::ops::Range;

/// A group slot nobody uses.
pub(crate) const VACANT: u64 = 0;
/// A group that publishers deliver to.
pub(crate) const ACTIVE: u64 = 1;
/// A group being dropped: publishers take back what they gave it, and the
/// dropper sweeps its holds off every chunk.
pub(crate) const DRAINING: u64 = 2;

/// The main word of a chunk shared by groups, at tag `tag`.
pub(crate) const fn shared(tag: u32) -> Word {
    Word::new(tag, HELD, SHARED_HOLDER)
}

/// Whether a main word is SHARED.
pub(crate) const fn is_shared(w: Word) -> bool {
    w.state() == HELD && w.holder() == SHARED_HOLDER
}

/// The low bits of a group word's stamp that a descriptor carries.
const STAMP_MASK: u32 = (1 << Descriptor::VERSION_BITS) - 1;

/// A group slot's control word: `generation << 2 | state`.
/// `repr(transparent)`: the bus finds these words in shared memory.
#[repr(transparent)]
pub(crate) struct Control(AtomicU64);

impl Control {
    pub(crate) fn new(gen: u32, state: u64) -> Control {
        Control(AtomicU64::new(((gen as u64) << 2) | state))
    }

    /// `(generation, state)`.
    pub(crate) fn load(&self) -> (u32, u64) {
        // SYNC: pairs with the AcqRel CASes below.
        let c = self.0.load(Ordering::Acquire);
        ((c >> 2) as u32, c & 3)
    }

    fn cas(&self, from: (u32, u64), to: (u32, u64)) -> bool {
        let enc = |(g, s): (u32, u64)| ((g as u64) << 2) | s;
        self.0.compare_exchange(enc(from), enc(to), Ordering::AcqRel, Ordering::Acquire).is_ok()
    }

    /// A group joins slot `gen` (VACANT -> ACTIVE). Done under the region's
    /// control mutex, like a drop.
    #[cfg_attr(tachyon_loom, allow(dead_code))]
    pub(crate) fn join(&self, gen: u32) -> bool {
        self.cas((gen, VACANT), (gen, ACTIVE))
    }

    /// Starts (or resumes, after a dropper died) dropping the group of
    /// generation `gen`: the word reads DRAINING(gen) afterwards, written by
    /// a read-modify-write of this caller, and a SeqCst fence follows, so
    /// that a publisher that set a group word before its own fence either
    /// sees the drop or has its group word seen by the sweep (see
    /// [`Shares::keep_joined`]). False if the slot is not this group's.
    /// Run under the region's control mutex: one dropper at a time.
    pub(crate) fn start_drop(&self, gen: u32) -> bool {
        let ok = self.cas((gen, ACTIVE), (gen, DRAINING)) || self.cas((gen, DRAINING), (gen, DRAINING));
        // SYNC: SeqCst fence, the dropper's side of the store-buffering pair
        // with the publisher's fence in `share`: our DRAINING store above,
        // then our loads of group words in `sweep`.
        fence(Ordering::SeqCst);
        ok
    }

    /// Ends a drop whose sweep is complete: the slot is free for a new
    /// group, of the next generation.
    pub(crate) fn vacate(&self, gen: u32) -> bool {
        self.cas((gen, DRAINING), (gen.wrapping_add(1), VACANT))
    }
}

/// Where the last releaser puts a chunk: its class's free list, never a
/// process's chunk cache (a cached chunk keeps its tag, and the tag is what
/// stops a stale releaser; see the module docs).
pub(crate) struct FreeTo<'a> {
    pub list: &'a FreeList,
    pub pool: Pool<'a>,
    pub range: Range<u32>,
    /// Set when this caller took a chunk (LOANED by it now) and the list
    /// refused the push (stopped for a rebuild, or damaged): the chunk is
    /// the caller's to push again through the path that rebuilds the list.
    /// Told here rather than guessed from the chunk's word afterwards, which
    /// another thread of the same process (same token) may have taken too.
    pub refused: std::cell::Cell<bool>,
}

impl FreeTo<'_> {
    /// Pushes chunk `index`, which the caller holds LOANED; records a
    /// refusal in `refused`.
    fn push(&self, index: u32) -> bool {
        let ok = self.list.push(&self.pool, &self.range, index).is_ok();
        if !ok {
            self.refused.set(true);
        }
        ok
    }
}

/// The cells of the groups' rings, as the protocol uses them (the bus's
/// `Ring`s once wired; one-cell mailboxes in the tests and models).
pub(crate) trait GroupRings {
    /// Claims a cell for writing in group `g`'s ring; `None` if full.
    fn claim(&self, g: usize, me: Token) -> Option<u64>;
    /// Commits a claimed cell with the descriptor of (`chunk`, `stamp`);
    /// false if the claim was repaired away (its claimant judged dead).
    fn commit(&self, g: usize, cell: u64, chunk: u32, stamp: u32, me: Token) -> bool;
    /// Gives a claimed cell up (a tombstone: readers skip it).
    fn abandon(&self, g: usize, cell: u64, me: Token);
    /// Whether a committed descriptor of (`chunk`, `stamp`) is in group
    /// `g`'s ring, unread or being read.
    fn named(&self, g: usize, chunk: u32, stamp: u32) -> bool;
}

/// What a recovery pass did to one chunk.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Recovered {
    /// Holds of dead members released (at-most-once: the message is lost
    /// to that group).
    pub lost: usize,
    /// Messages published again into a group (a dead member's, at least
    /// once; or a publication cut short after its commit point).
    pub redelivered: usize,
    /// Redeliveries left for a later pass (the group's ring was full).
    pub deferred: usize,
    /// The chunk was freed (every group had let it go).
    pub freed: bool,
}

/// One chunk's main word, its index and its group words (one per slot).
pub(crate) struct Shares<'a> {
    pub index: u32,
    pub main: &'a ChunkMeta,
    pub groups: &'a [AtomicU64],
}

impl Shares<'_> {
    /// Group `g`'s word.
    pub(crate) fn group(&self, g: usize) -> Word {
        // SYNC: pairs with the AcqRel CASes of `cas_group`: a member that
        // took the chunk, or released it, handed on what it did before.
        Word(self.groups[g].load(Ordering::Acquire))
    }

    pub(crate) fn cas_group(&self, g: usize, from: Word, to: Word) -> bool {
        // SYNC: AcqRel, as the main word's CAS: a release hands the member's
        // reads of the bytes on to whoever frees the chunk (through the
        // SeqCst fence and loads of `free_if_last`).
        self.groups[g].compare_exchange(from.0, to.0, Ordering::AcqRel, Ordering::Acquire).is_ok()
    }

    /// Publish, step 2 (the caller holds the chunk LOANED and has claimed a
    /// cell in the ring of every group in `to`): every group word of `to`
    /// from FREE to QUEUED(me, s), `s` a new stamp drawn from the chunk's
    /// publication count ([`next_stamp`](Self::next_stamp)), one for all
    /// groups as the bus draws it; the stamps go to `stamps`. A
    /// group word that is not FREE is damage: the words already set go back
    /// and `Err(())` says so.
    pub(crate) fn prepare(&self, me: Token, to: &[usize], stamps: &mut [u32]) -> Result<(), ()> {
        let m = self.main.word();
        if m.state() != LOANED || m.holder() != me.raw() || stamps.len() < to.len() {
            return Err(());
        }
        let stamp = self.next_stamp();
        self.prepare_stamped(me, to, stamp)?;
        stamps[..to.len()].fill(stamp);
        Ok(())
    }

    /// A new stamp for this chunk: its publication count, drawn with one
    /// read-modify-write, so that no two publications or redeliveries of the
    /// chunk (into any group, or through the single-group path) carry the
    /// same value (docs/groups-design.md, "Decided: stamps").
    pub(crate) fn next_stamp(&self) -> u32 {
        // SYNC: AcqRel, as the publisher's draw in `Topic::publish_shared`;
        // the group word's CAS that follows publishes the stamp.
        self.main.version.fetch_add(1, Ordering::AcqRel).wrapping_add(1)
    }

    /// Publish, step 2, as the bus does it: one stamp for every group of
    /// `to`, drawn by the caller from the chunk's publication count (so
    /// that no two descriptors of one chunk, of the single-group path or of
    /// a group, ever carry the same value): every group word of `to` from
    /// FREE to QUEUED(me, stamp). A group word that is not FREE is damage:
    /// the words already set go back and `Err(())` says so.
    pub(crate) fn prepare_stamped(&self, me: Token, to: &[usize], stamp: u32) -> Result<(), ()> {
        let m = self.main.word();
        if m.state() != LOANED || m.holder() != me.raw() {
            return Err(());
        }
        let q = Word::new(stamp, QUEUED, me.raw());
        for (i, &g) in to.iter().enumerate() {
            let w = self.groups.get(g).map(|a| Word(a.load(Ordering::Acquire))).ok_or(())?;
            if w.state() != FREE || w.holder() != 0 || w.tag() == stamp || !self.cas_group(g, w, q) {
                for &back in &to[..i] {
                    self.cas_group(back, q, Word::new(stamp, FREE, 0));
                }
                return Err(());
            }
        }
        Ok(())
    }

    /// Publish, step 3, the commit point: the main word from LOANED(me, t)
    /// to SHARED(t), then a SeqCst fence. From here every group of `to`
    /// gets the message (recovery completes a publisher cut short); before
    /// it, none does. Returns the SHARED word.
    pub(crate) fn share(&self, me: Token) -> Result<Word, ()> {
        let m = self.main.word();
        if m.state() != LOANED || m.holder() != me.raw() {
            return Err(());
        }
        let s = shared(m.tag());
        if !self.main.cas(m, s) {
            return Err(());
        }
        // SYNC: SeqCst fence, the publisher's side of the store-buffering
        // pair with `Control::start_drop`: our group-word stores (step 2)
        // and SHARED, then our loads of the control words in `keep_joined`.
        fence(Ordering::SeqCst);
        Ok(s)
    }

    /// Publish, step 4: looks at the control words of the groups the
    /// publisher saw joined (`to[i] = (slot, generation)`); a group that is
    /// no longer ACTIVE at that generation is being dropped, and its hold
    /// is let go here (the dropper's sweep may have done it already: one
    /// CAS decides). Returns a bit per entry of `to`: set if its cell is to
    /// be committed, clear if it is to be abandoned. If a group was let go,
    /// the chunk is freed here when no group holds it any more.
    pub(crate) fn keep_joined(
        &self,
        controls: &[Control],
        to: &[(usize, u32)],
        stamps: &[u32],
        me: Token,
        m: Word,
        free: &FreeTo<'_>,
    ) -> u64 {
        let mut keep = 0u64;
        let mut dropped = false;
        for (i, &(g, gen)) in to.iter().enumerate().take(64) {
            if controls.get(g).map(Control::load) == Some((gen, ACTIVE)) {
                keep |= 1 << i;
            } else {
                dropped = true;
                self.end_hold(g, Word::new(stamps[i], QUEUED, me.raw()), m, me, free);
            }
        }
        if dropped {
            self.free_if_last(m, me, free);
        }
        keep
    }

    /// A member of group `g` takes the chunk named by a descriptor of
    /// `stamp` that it read from a ring cell it claimed: QUEUED(_, s) ->
    /// HELD(me, s). False if the descriptor is stale (the group word was
    /// released, redelivered, or is another publication's).
    pub(crate) fn take(&self, g: usize, stamp: u32, me: Token) -> bool {
        let Some(a) = self.groups.get(g) else { return false };
        let w = Word(a.load(Ordering::Acquire));
        w.state() == QUEUED
            && w.tag() & STAMP_MASK == stamp & STAMP_MASK
            && self.cas_group(g, w, Word::new(w.tag(), HELD, me.raw()))
    }

    /// A member of group `g` releases the chunk it holds. `Ok(true)` if it
    /// was the last hold and the chunk is back on its free list;
    /// `Ok(false)` if other groups still hold it, or if the hold was no
    /// longer ours (taken over by recovery or a drop, which then did the
    /// rest); `Err(())` if the words are not what a holder can see.
    pub(crate) fn release(&self, g: usize, me: Token, free: &FreeTo<'_>) -> Result<bool, ()> {
        let v = self.groups.get(g).map(|a| Word(a.load(Ordering::Acquire))).ok_or(())?;
        if v.state() != HELD || v.holder() != me.raw() {
            return Ok(false);
        }
        // Read while our hold keeps the chunk out of the pool: SHARED(t) of
        // this very publication.
        let m = self.main.word();
        if !is_shared(m) {
            return Err(());
        }
        crate::platform::fault::point("groups-release-read");
        Ok(self.end_hold(g, v, m, me, free).unwrap_or(false))
    }

    /// Ends group `g`'s hold `v` (read before `m`, the main word of the same
    /// publication): `v` -> FREE, then frees the chunk if that was the last
    /// hold. `None` if the word was no longer `v` (someone else ended it).
    pub(crate) fn end_hold(&self, g: usize, v: Word, m: Word, me: Token, free: &FreeTo<'_>) -> Option<bool> {
        if !self.cas_group(g, v, Word::new(v.tag(), FREE, 0)) {
            return None;
        }
        crate::platform::fault::point("groups-hold-ended");
        Some(self.free_if_last(m, me, free))
    }

    /// If no group word holds the chunk, takes the main word from `m`
    /// (SHARED(t) of the publication the caller knows) to LOANED by `me`
    /// and pushes the chunk on its free list. Exactly one caller per
    /// publication succeeds; a caller whose `m` is stale (the chunk was
    /// freed and published again since) fails its CAS on the tag.
    pub(crate) fn free_if_last(&self, m: Word, me: Token, free: &FreeTo<'_>) -> bool {
        // SYNC: SeqCst fence: the store-buffering pair of two groups' last
        // releasers (each ended its hold above, then loads the others'):
        // at least one of them sees every group word FREE.
        fence(Ordering::SeqCst);
        if !is_shared(m) || self.groups.iter().any(|a| Word(a.load(Ordering::Acquire)).state() != FREE) {
            return false;
        }
        self.take_main(m, me, free)
    }

    /// The second half of [`free_if_last`](Self::free_if_last), for a
    /// caller that saw every group word FREE after `m`: SHARED(t) ->
    /// LOANED(me, t), then the free list. A caller delayed here past the
    /// chunk's reuse fails on the tag (the free list's push and pop changed
    /// it), even if the chunk is SHARED again.
    fn take_main(&self, m: Word, me: Token, free: &FreeTo<'_>) -> bool {
        let mine = m.with(LOANED, me.raw());
        if !self.main.cas(m, mine) {
            return false;
        }
        crate::platform::fault::point("groups-last-taken");
        // From here the chunk is LOANED by us: if we die, recovery reclaims
        // it as any dead process's loan. A push that fails (the list is
        // stopped for a rebuild, or damaged) leaves it so, attributed to
        // us, and says so in `free.refused`: the bus's free path
        // (`free_shared`) rebuilds and retries.
        free.push(self.index)
    }

    /// A dropper's sweep of group `g` over this chunk (after
    /// [`Control::start_drop`]): any hold of the group is let go, whatever
    /// its holder (a group is dropped only when none of its members lives).
    /// Idempotent: a dropper that dies mid-sweep is resumed by the next.
    pub(crate) fn sweep(&self, g: usize, me: Token, free: &FreeTo<'_>) -> bool {
        let v = self.group(g);
        if v.state() == FREE {
            return false;
        }
        // Read after the group word: if our CAS below succeeds, the word
        // was `v` throughout (stamps never repeat), so `m` is of the same
        // publication: SHARED(t), or LOANED by a publisher not yet at its
        // commit point, which then sees the drop (`keep_joined`).
        let m = self.main.word();
        self.end_hold(g, v, m, me, free).is_some()
    }

    /// Recovery of a chunk LOANED by a dead holder `dead` (`w`, read by the
    /// caller): takes it, clears the group words a publisher cut short
    /// before its commit point left, and frees it. False if another
    /// recoverer (or the free list) got there first; true if taken (a push
    /// the list refused is told in `free.refused`: the chunk is ours).
    pub(crate) fn reclaim_loan(&self, w: Word, me: Token, free: &FreeTo<'_>) -> bool {
        if w.state() != LOANED || !self.main.cas(w, w.with(LOANED, me.raw())) {
            return false;
        }
        // The main word is ours: no group word can be a live hold (none is
        // set after the commit point, and before it only by the loan's
        // holder, now dead); a dropper may clear them too, harmlessly.
        for g in 0..self.groups.len() {
            let v = self.group(g);
            if v.state() != FREE {
                self.cas_group(g, v, Word::new(v.tag(), FREE, 0));
            }
        }
        free.push(self.index);
        true
    }

    /// Recovery's take-over of a read claim in group `g`'s ring whose
    /// reader (`dead`) died before it took the chunk: QUEUED(_, stamp) ->
    /// HELD(dead, stamp), so that the message is treated like any a dead
    /// member held (lost at most once, delivered again at least once).
    pub(crate) fn adopt(&self, g: usize, stamp: u32, dead: Token) -> bool {
        self.take(g, stamp, dead)
    }

    /// Recovery of a SHARED chunk: each group word held by a dead token is
    /// dealt with (a dead member's hold: let go at most once, or published
    /// again into its group at least once; a hold a dead publisher or
    /// redeliverer left QUEUED that no descriptor names: at least once,
    /// published again, completing the publication; at most once, let go:
    /// the message never reached that group's ring, and publishing it now
    /// would put it behind messages of its key published since, so that
    /// group does not get it (nor was it acknowledged to its publisher));
    /// then, if no group holds the chunk any more (also when a releaser died
    /// between its two CASes), it is freed.
    pub(crate) fn recover(
        &self,
        me: Token,
        is_dead: &dyn Fn(u32) -> bool,
        at_least_once: bool,
        rings: &dyn GroupRings,
        free: &FreeTo<'_>,
    ) -> Recovered {
        let mut found = Recovered::default();
        if !is_shared(self.main.word()) {
            return found;
        }
        for g in 0..self.groups.len() {
            let v = self.group(g);
            if v.state() == FREE || !is_dead(v.holder()) {
                continue;
            }
            // Read after the group word, as the dropper does: if the CAS
            // that ends the hold succeeds, `m` is of the same publication.
            let m = self.main.word();
            if !is_shared(m) {
                break; // freed (and maybe reused) meanwhile: the next pass looks again
            }
            match v.state() {
                QUEUED if rings.named(g, self.index, v.tag() & STAMP_MASK) => {}
                QUEUED | HELD if !at_least_once => {
                    if let Some(freed) = self.end_hold(g, v, m, me, free) {
                        found.lost += 1;
                        found.freed |= freed;
                    }
                }
                QUEUED | HELD => match self.redeliver(g, v, me, rings) {
                    Some(true) => found.redelivered += 1,
                    Some(false) => found.deferred += 1,
                    None => {}
                },
                _ => {} // LOANED in a group word: no step writes it
            }
        }
        // Read now: the SHARED value of the publication whose group words
        // `free_if_last` then finds all FREE (they were set before it).
        found.freed |= self.free_if_last(self.main.word(), me, free);
        found
    }

    /// Publishes group `g`'s hold `v` (of a dead token) again into the
    /// group's ring. `Some(true)`: done; `Some(false)`: the ring is full,
    /// the hold is the dead's again (a later pass retries); `None`: someone
    /// else moved the word first.
    fn redeliver(&self, g: usize, v: Word, me: Token, rings: &dyn GroupRings) -> Option<bool> {
        let mine = Word::new(v.tag(), HELD, me.raw());
        if !self.cas_group(g, v, mine) {
            return None;
        }
        let Some(cell) = rings.claim(g, me) else {
            self.cas_group(g, mine, v);
            return Some(false);
        };
        let q = Word::new(self.next_stamp(), QUEUED, me.raw());
        if !self.cas_group(g, mine, q) {
            // A drop swept the hold meanwhile: nothing to deliver.
            rings.abandon(g, cell, me);
            return None;
        }
        crate::platform::fault::point("groups-redeliver-queued");
        if rings.commit(g, cell, self.index, q.tag() & STAMP_MASK, me) {
            return Some(true);
        }
        // Our claim was repaired away (another process judged us dead): no
        // descriptor names `q`, so the hold goes back to the dead for a
        // later pass (no descriptor names `v`'s stamp either: it was
        // consumed, or never committed).
        self.cas_group(g, q, v);
        Some(false)
    }
}

/// A whole publication of a chunk the caller holds LOANED, to the groups
/// `to` (`(slot, generation)` as the caller read them ACTIVE): claims a
/// cell in every group's ring (all or nothing: if one is full, the cells
/// claimed are given up and `Ok(None)` says so, the chunk still the
/// caller's), sets the group words, moves the main word to SHARED, takes
/// back what groups being dropped were given, and commits the cells.
/// Returns the bits of `to` that were committed. With no group to deliver
/// to, or if every group was dropped meanwhile, the chunk goes back to the
/// pool. The steps are separate functions so that the tests can stop a
/// publisher between any two.
pub(crate) fn publish(
    shares: &Shares<'_>,
    controls: &[Control],
    rings: &dyn GroupRings,
    to: &[(usize, u32)],
    me: Token,
    free: &FreeTo<'_>,
) -> Result<Option<u64>, ()> {
    const MAX: usize = 64;
    if to.len() > MAX {
        return Err(());
    }
    if to.is_empty() {
        // Nobody to deliver to: the message is dropped, the loan freed.
        let w = shares.main.word();
        let mine = w.state() == LOANED && w.holder() == me.raw();
        return if mine && free.list.push(&free.pool, &free.range, shares.index).is_ok() {
            Ok(Some(0))
        } else {
            Err(())
        };
    }
    let mut cells = [0u64; MAX];
    if !claim_all(rings, to, me, &mut cells) {
        return Ok(None);
    }
    let slots: [usize; MAX] = std::array::from_fn(|i| to.get(i).map_or(0, |t| t.0));
    let mut stamps = [0u32; MAX];
    let abandon_all = || to.iter().zip(&cells).for_each(|(&(g, _), &c)| rings.abandon(g, c, me));
    if shares.prepare(me, &slots[..to.len()], &mut stamps).is_err() {
        abandon_all();
        return Err(());
    }
    let Ok(m) = shares.share(me) else {
        // The main word is not ours (damage, or a recoverer that judged us
        // dead reclaimed the loan): take our group words back, give up.
        for (i, &(g, _)) in to.iter().enumerate() {
            shares.cas_group(g, Word::new(stamps[i], QUEUED, me.raw()), Word::new(stamps[i], FREE, 0));
        }
        abandon_all();
        return Err(());
    };
    let keep = shares.keep_joined(controls, to, &stamps, me, m, free);
    let mut committed = 0;
    let mut lost = false;
    for (i, &(g, _)) in to.iter().enumerate() {
        if keep & (1 << i) == 0 {
            rings.abandon(g, cells[i], me);
        } else if rings.commit(g, cells[i], shares.index, stamps[i] & STAMP_MASK, me) {
            committed |= 1 << i;
        } else {
            // Our claim was repaired away (another process judged us dead):
            // no descriptor names this hold, so it is let go here.
            lost = true;
            shares.end_hold(g, Word::new(stamps[i], QUEUED, me.raw()), m, me, free);
        }
    }
    if lost {
        shares.free_if_last(m, me, free);
    }
    Ok(Some(committed))
}

/// Claims one cell in the ring of every group of `to`, or none: on a full
/// ring the cells already claimed are given up.
pub(crate) fn claim_all(rings: &dyn GroupRings, to: &[(usize, u32)], me: Token, cells: &mut [u64]) -> bool {
    for (i, &(g, _)) in to.iter().enumerate() {
        match rings.claim(g, me) {
            Some(c) => cells[i] = c,
            None => {
                for (k, &(back, _)) in to[..i].iter().enumerate() {
                    rings.abandon(back, cells[k], me);
                }
                return false;
            }
        }
    }
    true
}

impl Shares<'_> {
    /// A dropper's sweep of group slot `g` over this chunk for the group of
    /// one topic (`topic`: the topic's route tag, its directory index + 1,
    /// as `ChunkMeta::route >> 16` holds it): as [`sweep`](Self::sweep),
    /// but a hold of slot `g` in another topic's publication is left alone
    /// (group words are per slot, and every topic has a slot `g`). Returns,
    /// if it ended the hold, the main word it read (the caller frees a
    /// chunk its push could not: LOANED by it with that tag) and whether
    /// that was the chunk's last hold.
    #[cfg_attr(tachyon_loom, allow(dead_code))] // the bus calls it (membership.rs)
    pub(crate) fn sweep_topic(
        &self,
        g: usize,
        topic: u32,
        me: Token,
        free: &FreeTo<'_>,
    ) -> Option<(Word, bool)> {
        let v = self.group(g);
        if v.state() == FREE {
            return None;
        }
        // Read after the group word (whose Acquire load saw the CAS of the
        // publication's group word, after its publisher stored the route):
        // while the word is `v` the chunk is not freed, so the route is that
        // publication's; if the CAS in `end_hold` succeeds, the word was `v`
        // throughout.
        if self.main.route.load(Ordering::Acquire) >> 16 != topic {
            return None;
        }
        let m = self.main.word();
        self.end_hold(g, v, m, me, free).map(|last| (m, last))
    }
}

/// One-cell rings and a small pool, for the tests and the loom models.
#[cfg(test)]
pub(crate) mod testing {
    use super::*;
    use crate::platform::atomic::AtomicU32;

    // A mailbox cell: `state:2 << 62 | token:30 << 24 | chunk:8 << 16 | stamp:16`.
    const CLAIMED: u64 = 1;
    const COMMITTED: u64 = 2;
    const READING: u64 = 3;

    fn cell(state: u64, tok: u32, chunk: u32, stamp: u32) -> u64 {
        (state << 62) | (u64::from(tok) << 24) | (u64::from(chunk & 0xFF) << 16) | u64::from(stamp & 0xFFFF)
    }

    /// One ring cell per group: free (0), claimed by a writer, committed
    /// with a descriptor, or claimed by a reader. Stands for a group's
    /// `Ring` (whose own crash safety is modelled in `sync/ring.rs`).
    pub(crate) struct Mailboxes(pub Vec<AtomicU64>);

    impl Mailboxes {
        pub(crate) fn new(groups: usize) -> Mailboxes {
            Mailboxes((0..groups).map(|_| AtomicU64::new(0)).collect())
        }
        /// A member's read claim: the descriptor `(chunk, stamp)`, if any.
        pub(crate) fn claim_read(&self, g: usize, me: Token) -> Option<(u32, u32)> {
            let c = self.0[g].load(Ordering::Acquire);
            if c >> 62 != COMMITTED {
                return None;
            }
            let (chunk, stamp) = (((c >> 16) & 0xFF) as u32, (c & 0xFFFF) as u32);
            let r = cell(READING, me.raw(), chunk, stamp);
            self.0[g]
                .compare_exchange(c, r, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
                .then_some((chunk, stamp))
        }
        /// The end of a read claim: the cell is free again.
        pub(crate) fn finish_read(&self, g: usize, chunk: u32, stamp: u32, me: Token) -> bool {
            let r = cell(READING, me.raw(), chunk, stamp);
            self.0[g].compare_exchange(r, 0, Ordering::AcqRel, Ordering::Acquire).is_ok()
        }
        /// What the ring's own repair does with a dead token's claims: a
        /// writer's cell becomes free (a tombstone), a reader's is handed to
        /// `adopt` and then freed.
        pub(crate) fn repair(&self, dead: Token, adopt: &dyn Fn(usize, u32, u32)) {
            for (g, a) in self.0.iter().enumerate() {
                let c = a.load(Ordering::Acquire);
                let tok = ((c >> 24) as u32) & Token::MASK;
                if tok != dead.raw() {
                    continue;
                }
                match c >> 62 {
                    CLAIMED => {
                        let _ = a.compare_exchange(c, 0, Ordering::AcqRel, Ordering::Acquire);
                    }
                    READING => {
                        adopt(g, ((c >> 16) & 0xFF) as u32, (c & 0xFFFF) as u32);
                        let _ = a.compare_exchange(c, 0, Ordering::AcqRel, Ordering::Acquire);
                    }
                    _ => {}
                }
            }
        }
    }

    impl GroupRings for Mailboxes {
        fn claim(&self, g: usize, me: Token) -> Option<u64> {
            let c = cell(CLAIMED, me.raw(), 0, 0);
            self.0[g].compare_exchange(0, c, Ordering::AcqRel, Ordering::Acquire).is_ok().then_some(0)
        }
        fn commit(&self, g: usize, _cell: u64, chunk: u32, stamp: u32, me: Token) -> bool {
            let c = cell(CLAIMED, me.raw(), 0, 0);
            let d = cell(COMMITTED, 0, chunk, stamp);
            self.0[g].compare_exchange(c, d, Ordering::AcqRel, Ordering::Acquire).is_ok()
        }
        fn abandon(&self, g: usize, _cell: u64, me: Token) {
            let c = cell(CLAIMED, me.raw(), 0, 0);
            let _ = self.0[g].compare_exchange(c, 0, Ordering::AcqRel, Ordering::Acquire);
        }
        fn named(&self, g: usize, chunk: u32, stamp: u32) -> bool {
            let c = self.0[g].load(Ordering::Acquire);
            matches!(c >> 62, COMMITTED | READING)
                && ((c >> 16) & 0xFF) as u32 == chunk & 0xFF
                && (c & 0xFFFF) as u32 == stamp & 0xFFFF
        }
    }

    /// The groups' rings as the bus will have them: one real `Ring` of
    /// `cells` cells per group, the descriptor in the cell's length word
    /// (as `topic.rs` commits it). Loom only (its cells are loom's).
    #[cfg(tachyon_loom)]
    pub(crate) struct RealRings(pub Vec<(crate::sync::ring::Cursors, Vec<crate::sync::ring::Cell>)>);

    #[cfg(tachyon_loom)]
    impl RealRings {
        pub(crate) fn new(groups: usize, cells: u64) -> RealRings {
            use crate::sync::ring::{Cell, Cursors};
            RealRings((0..groups).map(|_| (Cursors::new(), (0..cells).map(Cell::new).collect())).collect())
        }
        pub(crate) fn ring(&self, g: usize) -> crate::sync::ring::Ring<'_> {
            crate::sync::ring::Ring { cursors: &self.0[g].0, cells: &self.0[g].1 }
        }
        fn idx(&self, g: usize, pos: u64) -> usize {
            (pos % self.0[g].1.len() as u64) as usize
        }
        /// A member's receive: claims the next item, takes the chunk, ends
        /// the claim. `None` if the ring is empty; else the chunk and
        /// whether it was taken (false: a stale descriptor, skipped).
        pub(crate) fn receive(&self, w: &World, g: usize, me: Token) -> Option<(u32, bool)> {
            use crate::sync::ring::Claim;
            let Claim::Got { pos, idx, len } = self.ring(g).claim_read(me, u64::MAX, &mut false) else {
                return None;
            };
            let d = Descriptor::decode(len);
            let took = w.shares(d.chunk).take(g, d.version, me);
            assert!(self.ring(g).finish_read(pos, idx, me));
            Some((d.chunk, took))
        }
    }

    #[cfg(tachyon_loom)]
    impl GroupRings for RealRings {
        fn claim(&self, g: usize, me: Token) -> Option<u64> {
            match self.ring(g).claim_write(me) {
                crate::sync::ring::Claim::Got { pos, .. } => Some(pos),
                _ => None,
            }
        }
        fn commit(&self, g: usize, cell: u64, chunk: u32, stamp: u32, me: Token) -> bool {
            self.ring(g).commit_write(cell, self.idx(g, cell), Descriptor::new(chunk, stamp, 0).encode(), me)
        }
        fn abandon(&self, g: usize, cell: u64, me: Token) {
            self.ring(g).abandon_write(cell, self.idx(g, cell), me);
        }
        fn named(&self, g: usize, chunk: u32, stamp: u32) -> bool {
            let want = Descriptor::new(chunk, stamp, 0);
            (0..self.0[g].1.len()).any(|i| self.ring(g).committed(i).map(Descriptor::decode) == Some(want))
        }
    }

    /// A pool of `n` chunks with `groups` group slots (all ACTIVE at
    /// generation 1), one mailbox per group.
    pub(crate) struct World {
        pub metas: Vec<ChunkMeta>,
        pub words: Vec<AtomicU64>,
        pub controls: Vec<Control>,
        pub list: FreeList,
        pub journal: Vec<AtomicU32>,
        pub rings: Mailboxes,
        pub groups: usize,
    }

    pub(crate) fn tok(slot: usize) -> Token {
        Token::new(slot, 1)
    }

    impl World {
        pub(crate) fn new(n: u32, groups: usize) -> World {
            let w = World {
                metas: (0..n).map(|_| ChunkMeta::new()).collect(),
                words: (0..n as usize * groups).map(|_| AtomicU64::new(0)).collect(),
                controls: (0..groups).map(|_| Control::new(1, ACTIVE)).collect(),
                list: FreeList::new(),
                journal: (0..8).map(|s| AtomicU32::new(tok(s).raw())).collect(),
                rings: Mailboxes::new(groups),
                groups,
            };
            for i in 0..n {
                w.list.push(&w.pool(), &(0..n), i).unwrap();
            }
            w
        }
        pub(crate) fn pool(&self) -> Pool<'_> {
            Pool { metas: &self.metas, journal: &self.journal, batches: &[] }
        }
        pub(crate) fn free(&self) -> FreeTo<'_> {
            FreeTo {
                list: &self.list,
                pool: self.pool(),
                range: 0..self.metas.len() as u32,
                refused: std::cell::Cell::new(false),
            }
        }
        pub(crate) fn shares(&self, i: u32) -> Shares<'_> {
            let g = self.groups;
            Shares { index: i, main: &self.metas[i as usize], groups: &self.words[i as usize * g..][..g] }
        }
        pub(crate) fn loan(&self, me: Token) -> u32 {
            self.list.pop(&self.pool(), &(0..self.metas.len() as u32), me).unwrap().expect("a free chunk")
        }
        /// The groups ACTIVE now, as a publisher snapshots them.
        pub(crate) fn joined(&self) -> Vec<(usize, u32)> {
            (0..self.groups)
                .filter_map(|g| match self.controls[g].load() {
                    (gen, ACTIVE) => Some((g, gen)),
                    _ => None,
                })
                .collect()
        }
        /// A member of `g` receives (claims the cell, takes the chunk,
        /// ends the claim): the chunk, if it got one.
        pub(crate) fn receive(&self, g: usize, me: Token) -> Option<u32> {
            let (chunk, stamp) = self.rings.claim_read(g, me)?;
            let took = self.shares(chunk).take(g, stamp, me);
            self.rings.finish_read(g, chunk, stamp, me);
            took.then_some(chunk)
        }
        pub(crate) fn release(&self, g: usize, chunk: u32, me: Token) -> bool {
            self.shares(chunk).release(g, me, &self.free()).unwrap()
        }
        /// Everything a recovery pass does, for dead tokens `dead`.
        pub(crate) fn recover(&self, me: Token, dead: &[Token], at_least_once: bool) -> Recovered {
            let is_dead = |h: u32| dead.iter().any(|d| d.raw() == h);
            for &d in dead {
                self.rings.repair(d, &|g, chunk, stamp| {
                    self.shares(chunk).adopt(g, stamp, d);
                });
            }
            let mut all = Recovered::default();
            for i in 0..self.metas.len() as u32 {
                let s = self.shares(i);
                let w = s.main.word();
                if w.state() == LOANED && is_dead(w.holder()) {
                    let free = self.free();
                    all.freed |= s.reclaim_loan(w, me, &free) && !free.refused.get();
                    continue;
                }
                let r = s.recover(me, &is_dead, at_least_once, &self.rings, &self.free());
                all.lost += r.lost;
                all.redelivered += r.redelivered;
                all.deferred += r.deferred;
                all.freed |= r.freed;
            }
            all
        }
        /// Checks that every chunk is FREE, its group words FREE, and on
        /// the list exactly once.
        pub(crate) fn check_all_free(&self) {
            let n = self.metas.len() as u32;
            self.list.help(&self.pool(), &(0..n)).unwrap();
            for i in 0..n {
                assert_eq!(self.metas[i as usize].word().state(), FREE, "chunk {i} free");
                for g in 0..self.groups {
                    assert_eq!(self.shares(i).group(g).state(), FREE, "chunk {i} group {g}");
                }
            }
            let mut got = vec![];
            while let Some(i) = self.list.pop(&self.pool(), &(0..n), tok(7)).unwrap() {
                got.push(i);
            }
            got.sort();
            assert_eq!(got, (0..n).collect::<Vec<_>>(), "every chunk on the list once");
            for i in got {
                self.list.push(&self.pool(), &(0..n), i).unwrap();
            }
        }
    }
}

#[cfg(all(test, not(tachyon_loom)))]
mod tests {
    use super::testing::*;
    use super::*;

    const P: usize = 1; // publisher slot
    const A: usize = 2; // member of group 0
    const B: usize = 3; // member of group 1
    const R: usize = 4; // recoverer

    fn publish_all(w: &World, chunk: u32) -> u64 {
        publish(&w.shares(chunk), &w.controls, &w.rings, &w.joined(), tok(P), &w.free()).unwrap().unwrap()
    }

    #[test]
    fn two_groups_each_receive_once_and_the_last_release_frees() {
        let w = World::new(2, 2);
        let c = w.loan(tok(P));
        assert_eq!(publish_all(&w, c), 0b11);
        assert_eq!(w.shares(c).main.word(), shared(w.shares(c).main.word().tag()));
        assert_eq!(w.receive(0, tok(A)), Some(c));
        assert_eq!(w.receive(1, tok(B)), Some(c));
        assert_eq!(w.receive(0, tok(A)), None, "once per group");
        assert!(!w.release(0, c, tok(A)), "group 1 still holds it");
        assert!(w.release(1, c, tok(B)), "the last group frees it");
        w.check_all_free();
    }

    #[test]
    fn a_full_ring_publishes_to_no_group() {
        let w = World::new(2, 2);
        assert!(w.rings.claim(1, tok(5)).is_some()); // group 1's ring is full
        let c = w.loan(tok(P));
        let r = publish(&w.shares(c), &w.controls, &w.rings, &w.joined(), tok(P), &w.free()).unwrap();
        assert_eq!(r, None);
        assert_eq!(w.rings.0[0].load(Ordering::SeqCst), 0, "group 0's claim was given up");
        let m = w.shares(c).main.word();
        assert_eq!((m.state(), m.holder()), (LOANED, tok(P).raw()), "still the publisher's");
        assert_eq!(w.shares(c).group(0).state(), FREE);
    }

    /// Killed after claiming cells, or after setting the group words:
    /// before the commit point, so no group gets the message; recovery
    /// repairs the cells and reclaims the loan, group words cleared.
    #[test]
    fn a_publisher_killed_before_its_commit_point_publishes_nothing() {
        for stop_after_prepare in [false, true] {
            let w = World::new(2, 2);
            let c = w.loan(tok(P));
            let to = w.joined();
            let mut cells = [0; 2];
            assert!(claim_all(&w.rings, &to, tok(P), &mut cells));
            if stop_after_prepare {
                w.shares(c).prepare(tok(P), &[0, 1], &mut [0; 2]).unwrap();
            }
            // Killed here.
            let r = w.recover(tok(R), &[tok(P)], true);
            assert!(r.freed);
            assert_eq!((w.receive(0, tok(A)), w.receive(1, tok(B))), (None, None));
            w.check_all_free();
            // The next publication of the chunk goes through.
            let c2 = w.loan(tok(P));
            assert_eq!(publish_all(&w, c2), 0b11);
        }
    }

    /// Killed after SHARED (the commit point), before any commit, or after
    /// committing to one group. At least once, recovery completes the
    /// publication: each group gets the message exactly once. At most once,
    /// the groups not committed to lose it (never delivered behind later
    /// messages), a group committed to gets it once.
    #[test]
    fn a_publisher_killed_after_its_commit_point() {
        for (commits, at_least_once) in [(0, false), (0, true), (1, false), (1, true)] {
            let w = World::new(2, 2);
            let c = w.loan(tok(P));
            let to = w.joined();
            let mut cells = [0; 2];
            let mut stamps = [0; 2];
            assert!(claim_all(&w.rings, &to, tok(P), &mut cells));
            let s = w.shares(c);
            s.prepare(tok(P), &[0, 1], &mut stamps).unwrap();
            let m = s.share(tok(P)).unwrap();
            assert_eq!(s.keep_joined(&w.controls, &to, &stamps, tok(P), m, &w.free()), 0b11);
            for g in 0..commits {
                assert!(w.rings.commit(g, cells[g], c, stamps[g], tok(P)));
            }
            // Killed here.
            let r = w.recover(tok(R), &[tok(P)], at_least_once);
            assert_eq!(r.deferred, 0, "a committed descriptor is left alone");
            if at_least_once {
                assert_eq!((r.redelivered, r.lost), (2 - commits, 0), "the groups not committed to get it");
                assert_eq!(w.receive(0, tok(A)), Some(c));
                assert_eq!(w.receive(1, tok(B)), Some(c));
                assert_eq!((w.receive(0, tok(A)), w.receive(1, tok(B))), (None, None), "no duplicate");
                w.release(0, c, tok(A));
                assert!(w.release(1, c, tok(B)));
            } else {
                assert_eq!((r.redelivered, r.lost), (0, 2 - commits), "lost to the groups not committed to");
                assert_eq!(r.freed, commits == 0, "freed at once if no group holds it");
                assert_eq!(w.receive(1, tok(B)), None, "group 1 never gets it");
                if commits == 1 {
                    assert_eq!(w.receive(0, tok(A)), Some(c));
                    assert!(w.release(0, c, tok(A)), "group 0's release frees it");
                }
                assert_eq!(w.receive(0, tok(A)), None, "no duplicate");
            }
            assert_eq!(w.recover(tok(R), &[tok(P)], at_least_once), Recovered::default());
            w.check_all_free();
        }
    }

    /// A member killed holding the message: at most once, its group's hold
    /// is let go (lost to that group) and the chunk is freed when the other
    /// group releases; at least once, it goes back into the same group with
    /// a new stamp, and the other group's descriptor stays current.
    #[test]
    fn a_member_killed_holding_loses_or_redelivers_within_its_group() {
        for at_least_once in [false, true] {
            let w = World::new(2, 2);
            let c = w.loan(tok(P));
            publish_all(&w, c);
            assert_eq!(w.receive(0, tok(A)), Some(c));
            // Killed holding it; group 1 has not received yet.
            let r = w.recover(tok(R), &[tok(A)], at_least_once);
            assert_eq!(
                (r.lost, r.redelivered, r.freed),
                (usize::from(!at_least_once), usize::from(at_least_once), false)
            );
            assert_eq!(w.receive(1, tok(B)), Some(c), "group 1's descriptor is still current");
            if at_least_once {
                assert_eq!(w.receive(0, tok(5)), Some(c), "another member of group 0 gets it");
                assert!(!w.release(0, c, tok(5)));
            }
            assert!(w.release(1, c, tok(B)));
            w.check_all_free();
        }
    }

    /// Redelivery stamps are drawn from the chunk's publication count, as
    /// the publisher's are: a redelivered hold's stamp is new for the chunk
    /// (no descriptor of any group or of the single-group path carries it),
    /// and a publication of the single-group path in between does not make
    /// it repeat.
    #[test]
    fn a_redelivery_draws_its_stamp_from_the_chunk_count() {
        let w = World::new(1, 2);
        let c = w.loan(tok(P));
        // An earlier single-group publication counted 5 (`Region::enqueue`).
        w.shares(c).main.version.store(5, Ordering::SeqCst);
        publish_all(&w, c);
        let s = w.shares(c);
        assert_eq!((s.group(0).tag(), s.group(1).tag()), (6, 6), "one stamp for the publication");
        assert_eq!(w.receive(0, tok(A)), Some(c));
        let r = w.recover(tok(R), &[tok(A)], true);
        assert_eq!(r.redelivered, 1);
        assert_eq!(s.group(0).tag(), 7, "the next count, not a group word's own s + 1");
        assert_eq!(s.main.version.load(Ordering::SeqCst), 7);
        assert_eq!(s.group(1).tag(), 6, "the other group's hold keeps its stamp");
        assert_eq!(w.receive(0, tok(5)), Some(c));
        assert_eq!(w.receive(1, tok(B)), Some(c));
        assert!(!w.release(0, c, tok(5)));
        assert!(w.release(1, c, tok(B)));
        w.check_all_free();
    }

    /// A member killed between its ring claim and its take: the ring's
    /// repair adopts the message as the dead member's (HELD), which is
    /// then lost or redelivered like any message a dead member held.
    #[test]
    fn a_member_killed_between_its_claim_and_its_take_is_adopted() {
        let w = World::new(2, 2);
        let c = w.loan(tok(P));
        publish_all(&w, c);
        let (chunk, _) = w.rings.claim_read(0, tok(A)).unwrap();
        assert_eq!(chunk, c);
        // Killed here.
        let r = w.recover(tok(R), &[tok(A)], true);
        assert_eq!(r.redelivered, 1);
        assert_eq!(w.receive(0, tok(5)), Some(c));
        assert_eq!(w.receive(1, tok(B)), Some(c));
        w.release(0, c, tok(5));
        assert!(w.release(1, c, tok(B)));
        w.check_all_free();
    }

    /// A recoverer killed mid-redelivery (at least once), after taking the
    /// dead member's hold over and claiming a cell, or after re-queueing
    /// it: the next pass, with both dead, repairs the cell and redelivers;
    /// group 0 gets the message once more, group 1's copy is untouched.
    #[test]
    fn a_recoverer_killed_mid_redelivery_is_completed_by_the_next() {
        for requeued in [false, true] {
            let w = World::new(2, 2);
            let c = w.loan(tok(P));
            publish_all(&w, c);
            assert_eq!(w.receive(0, tok(A)), Some(c));
            // A died holding it; recoverer R takes it over and dies.
            let s = w.shares(c);
            let v = s.group(0);
            let mine = Word::new(v.tag(), HELD, tok(R).raw());
            assert!(s.cas_group(0, v, mine));
            assert!(w.rings.claim(0, tok(R)).is_some());
            if requeued {
                assert!(s.cas_group(0, mine, Word::new(s.next_stamp(), QUEUED, tok(R).raw())));
            }
            let r = w.recover(tok(6), &[tok(A), tok(R)], true);
            assert_eq!((r.redelivered, r.deferred, r.lost), (1, 0, 0));
            assert_eq!(w.receive(0, tok(5)), Some(c));
            assert_eq!(w.receive(0, tok(5)), None, "once");
            assert!(!w.release(0, c, tok(5)));
            assert_eq!(w.receive(1, tok(B)), Some(c));
            assert!(w.release(1, c, tok(B)));
            w.check_all_free();
        }
    }

    /// A releaser killed between its two CASes (its group word FREE, the
    /// main word still SHARED), as the last or not the last group: the
    /// chunk is freed exactly once, by recovery or by the other releaser.
    #[test]
    fn a_releaser_killed_between_its_two_cases_is_completed() {
        for last in [false, true] {
            let w = World::new(2, 2);
            let c = w.loan(tok(P));
            publish_all(&w, c);
            w.receive(0, tok(A));
            w.receive(1, tok(B));
            if last {
                w.release(1, c, tok(B));
            }
            // A's release, killed after its group word went FREE.
            let s = w.shares(c);
            let v = s.group(0);
            assert!(s.cas_group(0, v, Word::new(v.tag(), FREE, 0)));
            let r = w.recover(tok(R), &[tok(A)], false);
            assert_eq!(r.freed, last, "recovery frees it only if no group holds it");
            if !last {
                assert!(w.release(1, c, tok(B)), "the other group's release frees it");
            }
            w.check_all_free();
        }
    }

    /// The last releaser killed after taking the main word (LOANED by it):
    /// an ordinary dead loan.
    #[test]
    fn a_last_releaser_killed_after_taking_the_main_word_leaves_a_loan() {
        let w = World::new(1, 1);
        let c = w.loan(tok(P));
        publish_all(&w, c);
        w.receive(0, tok(A));
        let s = w.shares(c);
        let m = s.main.word();
        let v = s.group(0);
        assert!(s.cas_group(0, v, Word::new(v.tag(), FREE, 0)));
        assert!(s.main.cas(m, m.with(LOANED, tok(A).raw())));
        // Killed here.
        assert!(w.recover(tok(R), &[tok(A)], false).freed);
        w.check_all_free();
    }

    /// A releaser whose main word is stale (the chunk was freed and
    /// published again since it read it) cannot free the new publication:
    /// the free list changed the tag. (A chunk recycled through a process's
    /// chunk cache keeps its tag: that is why the last release never uses
    /// the cache.)
    #[test]
    fn a_stale_releaser_cannot_free_a_recycled_chunk() {
        let w = World::new(1, 2);
        let c = w.loan(tok(P));
        publish_all(&w, c);
        let stale = w.shares(c).main.word();
        w.receive(0, tok(A));
        w.receive(1, tok(B));
        w.release(0, c, tok(A));
        assert!(w.release(1, c, tok(B)));
        let c2 = w.loan(tok(P));
        assert_eq!(c2, c);
        publish(&w.shares(c), &w.controls, &w.rings, &[(0, 1)], tok(P), &w.free()).unwrap();
        assert_ne!(w.shares(c).main.word(), stale, "the tag moved on");
        // Group 0 received the new publication; group 1 (not in it) is FREE:
        // every word but group 0's is FREE. Drain group 0's ring so that only
        // the hold of the member matters.
        w.receive(0, tok(A));
        // A releaser of the first publication that saw every group word
        // FREE and was delayed before its CAS fails on the tag.
        assert!(!w.shares(c).take_main(stale, tok(B), &w.free()));
        // One that looks now sees group 0's hold.
        assert!(!w.shares(c).free_if_last(stale, tok(B), &w.free()));
        assert_eq!(w.shares(c).group(0).state(), HELD, "the new publication is untouched");
        assert!(w.release(0, c, tok(A)));
        w.check_all_free();
    }

    /// A group dropped while a publisher is between its group words and its
    /// commit point: the sweep clears the group word; the publisher, seeing
    /// the drop, abandons that group's cell; the other group still gets the
    /// message and the chunk is freed once. And a drop that completes
    /// before the publisher even reads the control words is a no-op for it.
    #[test]
    fn a_group_dropped_mid_publish_holds_nothing() {
        let w = World::new(2, 2);
        let c = w.loan(tok(P));
        let to = w.joined();
        let mut cells = [0; 2];
        let mut stamps = [0; 2];
        assert!(claim_all(&w.rings, &to, tok(P), &mut cells));
        let s = w.shares(c);
        s.prepare(tok(P), &[0, 1], &mut stamps).unwrap();
        // Group 1 is dropped now (its members are gone).
        assert!(w.controls[1].start_drop(1));
        assert!(s.sweep(1, tok(R), &w.free()));
        assert!(w.controls[1].vacate(1));
        let m = s.share(tok(P)).unwrap();
        let keep = s.keep_joined(&w.controls, &to, &stamps, tok(P), m, &w.free());
        assert_eq!(keep, 0b01);
        w.rings.commit(0, cells[0], c, stamps[0], tok(P));
        w.rings.abandon(1, cells[1], tok(P));
        assert_eq!(w.rings.0[1].load(Ordering::SeqCst), 0);
        assert_eq!(w.receive(0, tok(A)), Some(c));
        assert!(w.release(0, c, tok(A)));
        w.check_all_free();
        // Every group dropped: the publisher's own check frees the chunk.
        let c = w.loan(tok(P));
        let to = w.joined();
        assert_eq!(to, [(0, 1)]);
        let s = w.shares(c);
        let mut stamps = [0; 1];
        assert!(claim_all(&w.rings, &to, tok(P), &mut cells));
        s.prepare(tok(P), &[0], &mut stamps).unwrap();
        assert!(w.controls[0].start_drop(1));
        let m = s.share(tok(P)).unwrap();
        assert_eq!(s.keep_joined(&w.controls, &to, &stamps, tok(P), m, &w.free()), 0);
        assert!(!s.sweep(0, tok(R), &w.free()), "already let go by the publisher");
        w.check_all_free();
    }

    /// A dropper killed mid-sweep (after DRAINING, having swept one chunk
    /// of two): the next dropper resumes and finishes; holds of the dropped
    /// group are gone, the chunks free once the other group releases.
    #[test]
    fn a_dropper_killed_mid_sweep_is_resumed() {
        let w = World::new(2, 2);
        let (c1, c2) = (w.loan(tok(P)), w.loan(tok(P)));
        publish_all(&w, c1);
        w.receive(0, tok(A));
        w.receive(1, tok(B));
        publish_all(&w, c2);
        assert!(w.controls[1].start_drop(1));
        w.shares(c1).sweep(1, tok(5), &w.free());
        // Killed here; the next dropper resumes.
        assert!(w.controls[1].start_drop(1));
        for i in [c1, c2] {
            w.shares(i).sweep(1, tok(R), &w.free());
        }
        assert!(w.controls[1].vacate(1));
        // B (a dead member of the dropped group) releases nothing now.
        assert!(!w.release(1, c1, tok(B)));
        assert!(w.release(0, c1, tok(A)));
        assert_eq!(w.receive(0, tok(A)), Some(c2));
        assert!(w.release(0, c2, tok(A)));
        w.check_all_free();
        // The slot is reused by a new group, of the next generation, which
        // receives what is published after it joined.
        assert!(!w.controls[1].join(1), "not the old generation");
        assert!(w.controls[1].join(2));
        // The dropped group's descriptor of c2 is still in the slot's ring:
        // stale (its group word was swept), the new group skips it.
        assert_eq!(w.receive(1, tok(6)), None);
        assert_eq!(w.rings.0[1].load(Ordering::SeqCst), 0);
        let c3 = w.loan(tok(P));
        assert_eq!(w.joined(), [(0, 1), (1, 2)]);
        publish_all(&w, c3);
        assert_eq!(w.receive(1, tok(6)), Some(c3));
        assert!(!w.release(1, c3, tok(6)));
        assert_eq!(w.receive(0, tok(A)), Some(c3));
        assert!(w.release(0, c3, tok(A)));
        w.check_all_free();
    }

    /// A group word that is not FREE at publish (damage) fails the
    /// publication; the words already set go back.
    #[test]
    fn a_damaged_group_word_fails_the_publication_cleanly() {
        let w = World::new(1, 2);
        let c = w.loan(tok(P));
        w.shares(c).groups[1].store(Word::new(9, HELD, 0x7D).0, Ordering::SeqCst);
        let r = publish(&w.shares(c), &w.controls, &w.rings, &w.joined(), tok(P), &w.free());
        assert_eq!(r, Err(()));
        assert_eq!(w.shares(c).group(0).state(), FREE);
        assert_eq!((w.rings.0[0].load(Ordering::SeqCst), w.rings.0[1].load(Ordering::SeqCst)), (0, 0));
        assert_eq!(w.shares(c).main.word().state(), LOANED);
    }
}

/// Loom models of the races (`--cfg tachyon_loom`). A "killed" process is
/// one whose steps stop; recovery treats it as dead only afterwards (a
/// death is noticed after it happens), so a killed step runs before the
/// threads that race its repair. Each model names the fence or CAS it
/// relies on; each was run with that fence or CAS taken out and failed,
/// then restored (see docs/groups-design.md, "Checked").
#[cfg(all(test, tachyon_loom))]
mod loom_models {
    use super::testing::*;
    use super::*;
    use crate::platform::atomic::AtomicU32;
    use loom::sync::Arc;

    fn model(bound: usize, f: impl Fn() + Sync + Send + 'static) {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(bound);
        b.check(f);
    }

    const P: usize = 1;
    const A: usize = 2;
    const B: usize = 3;
    const C: usize = 4;
    const R1: usize = 5;
    const R2: usize = 6;

    /// One chunk published to both groups and held by A (group 0) and B
    /// (group 1).
    fn held_by_two(groups: usize) -> Arc<World> {
        held_by_two_of(1, groups).0
    }

    /// The same in a pool of `chunks`; also the chunk's index.
    fn held_by_two_of(chunks: u32, groups: usize) -> (Arc<World>, u32) {
        let w = World::new(chunks, groups);
        let c = w.loan(tok(P));
        assert_eq!(
            publish(&w.shares(c), &w.controls, &w.rings, &w.joined(), tok(P), &w.free()),
            Ok(Some(0b11))
        );
        assert_eq!(w.receive(0, tok(A)), Some(c));
        assert_eq!(w.receive(1, tok(B)), Some(c));
        (Arc::new(w), c)
    }

    /// Two groups' last releasers race: the chunk is freed exactly once.
    /// Relies on the SeqCst fence in `free_if_last`: without it both can
    /// read the other's group word still held (store buffering) and the
    /// chunk leaks ("freed 0 times").
    #[test]
    fn two_groups_last_releasers_free_once() {
        model(3, || {
            let w = held_by_two(2);
            let t = {
                let w = w.clone();
                loom::thread::spawn(move || w.release(0, 0, tok(A)))
            };
            let mine = w.release(1, 0, tok(B));
            let theirs = t.join().unwrap();
            assert_eq!(usize::from(mine) + usize::from(theirs), 1, "freed exactly once");
            w.check_all_free();
        });
    }

    /// A live member's release races two recoverers of a dead member of
    /// the other group (at most once): one recoverer ends the dead hold,
    /// the chunk is freed exactly once, the loss counted once. Relies on
    /// the CAS of the main word in `take_main`: made a load-check-store,
    /// the releaser and a recoverer both take the chunk ("freed 2 times").
    #[test]
    fn a_release_races_two_recoverers_of_a_dead_member() {
        model(2, || {
            let w = held_by_two(2);
            // A (group 0) is dead.
            let rec = {
                let w = w.clone();
                loom::thread::spawn(move || w.recover(tok(R1), &[tok(A)], false))
            };
            let rel = {
                let w = w.clone();
                loom::thread::spawn(move || w.release(1, 0, tok(B)))
            };
            let mine = w.recover(tok(R2), &[tok(A)], false);
            let theirs = rec.join().unwrap();
            let released = rel.join().unwrap();
            let freed = usize::from(mine.freed) + usize::from(theirs.freed) + usize::from(released);
            assert_eq!(freed, 1, "freed {freed} times");
            assert_eq!(mine.lost + theirs.lost, 1, "the dead hold ended once");
            w.check_all_free();
        });
    }

    /// A releaser killed between its two CASes (group word FREE, main
    /// word SHARED) while the other group's member releases and a
    /// recoverer runs: freed exactly once. Relies on recovery's sweep of
    /// SHARED chunks (`free_if_last` at the end of `Shares::recover`):
    /// without it, when the live releaser looked first, the chunk leaks.
    #[test]
    fn a_releaser_killed_between_its_two_cases() {
        model(3, || {
            let w = held_by_two(2);
            // A's release, killed after its first CAS, races B's release.
            let a = {
                let w = w.clone();
                loom::thread::spawn(move || {
                    let s = w.shares(0);
                    let v = s.group(0);
                    assert!(s.cas_group(0, v, Word::new(v.tag(), FREE, 0)));
                })
            };
            let t = {
                let w = w.clone();
                loom::thread::spawn(move || w.release(1, 0, tok(B)))
            };
            // A's death is noticed once it happened: recovery races B.
            a.join().unwrap();
            let r = w.recover(tok(R1), &[tok(A)], false);
            let released = t.join().unwrap();
            assert_eq!(usize::from(r.freed) + usize::from(released), 1, "freed exactly once");
            w.check_all_free();
        });
    }

    /// A publish to two groups races a member of each: each group gets the
    /// message exactly once and the chunk is freed exactly once. Relies on
    /// the order "SHARED, then commit" in `publish`: with the commits moved
    /// before `share`, a member can release while the main word is still
    /// LOANED, and its release fails on a word a holder cannot see.
    #[test]
    fn a_publish_to_two_groups_races_their_members() {
        model(2, || {
            let w = Arc::new(World::new(1, 2));
            let got = Arc::new([AtomicU32::new(0), AtomicU32::new(0)]);
            let c = w.loan(tok(P));
            let publisher = {
                let w = w.clone();
                loom::thread::spawn(move || {
                    let r = publish(&w.shares(c), &w.controls, &w.rings, &w.joined(), tok(P), &w.free());
                    assert_eq!(r, Ok(Some(0b11)));
                })
            };
            let member = |g: usize, me: Token, w: &World, got: &[AtomicU32; 2]| {
                if let Some(i) = w.receive(g, me) {
                    got[g].fetch_add(1, Ordering::SeqCst);
                    w.release(g, i, me);
                }
            };
            let t = {
                let (w, got) = (w.clone(), got.clone());
                loom::thread::spawn(move || member(0, tok(A), &w, &got))
            };
            member(1, tok(B), &w, &got);
            publisher.join().unwrap();
            t.join().unwrap();
            member(0, tok(A), &w, &got);
            member(1, tok(B), &w, &got);
            for g in 0..2 {
                assert_eq!(got[g].load(Ordering::SeqCst), 1, "group {g} got it once");
            }
            w.check_all_free();
        });
    }

    /// The same race over the real rings (`sync/ring.rs`, two cells per
    /// group) instead of one-cell mailboxes, with one group's ring already
    /// holding a stale descriptor (of the same chunk, another stamp): the
    /// publisher's claims and commits and the members' read claims are the
    /// bus's own. Each group gets the message once (the stale descriptor is
    /// skipped), the chunk is freed once.
    #[test]
    fn a_publish_to_two_groups_races_their_members_on_real_rings() {
        model(2, || {
            let w = Arc::new(World::new(2, 2));
            let rings = Arc::new(RealRings::new(2, 2));
            let got = Arc::new([AtomicU32::new(0), AtomicU32::new(0)]);
            // Group 1's ring holds a stale descriptor (of no live hold).
            let other = Token::new(6, 1);
            let Some(pos) = rings.claim(1, other) else { panic!("an empty ring") };
            assert!(rings.commit(1, pos, 1, 77, other));
            let c = w.loan(tok(P));
            let publisher = {
                let (w, rings) = (w.clone(), rings.clone());
                loom::thread::spawn(move || {
                    let r = publish(&w.shares(c), &w.controls, &*rings, &w.joined(), tok(P), &w.free());
                    assert_eq!(r, Ok(Some(0b11)));
                })
            };
            let member = move |g: usize, me: Token, w: &World, rings: &RealRings, got: &[AtomicU32; 2]| {
                while let Some((i, took)) = rings.receive(w, g, me) {
                    if took {
                        assert_eq!(i, c);
                        got[g].fetch_add(1, Ordering::SeqCst);
                        w.shares(i).release(g, me, &w.free()).unwrap();
                    }
                }
            };
            let t = {
                let (w, rings, got) = (w.clone(), rings.clone(), got.clone());
                loom::thread::spawn(move || member(0, tok(A), &w, &rings, &got))
            };
            member(1, tok(B), &w, &rings, &got);
            publisher.join().unwrap();
            t.join().unwrap();
            member(0, tok(A), &w, &rings, &got);
            member(1, tok(B), &w, &rings, &got);
            for g in 0..2 {
                assert_eq!(got[g].load(Ordering::SeqCst), 1, "group {g} got it once");
            }
            w.check_all_free();
        });
    }

    /// Overrun (`TopicConfig::overrun`): a publisher that finds group 1's
    /// ring full takes its oldest message as a member would (with its own
    /// token) and releases it, racing group 1's member for the same cells;
    /// then the next message goes to both groups. Each message reaches group
    /// 1 exactly once, as received or as missed; every chunk is freed once
    /// (the last release, the member's or the publisher's, frees it).
    #[test]
    fn an_overrunning_publisher_races_the_groups_member() {
        model(2, || {
            let w = Arc::new(World::new(3, 2));
            let rings = Arc::new(RealRings::new(2, 2));
            // Two messages to both groups; group 0 reads its own at once,
            // group 1's ring stays full.
            let mut sent = Vec::new();
            for _ in 0..2 {
                let c = w.loan(tok(P));
                let r = publish(&w.shares(c), &w.controls, &*rings, &w.joined(), tok(P), &w.free());
                assert_eq!(r, Ok(Some(0b11)));
                let (i, took) = rings.receive(&w, 0, tok(A)).unwrap();
                assert!(took && i == c);
                assert!(!w.release(0, i, tok(A)), "group 1 still holds it");
                sent.push(c);
            }
            let seen = Arc::new([AtomicU32::new(0), AtomicU32::new(0), AtomicU32::new(0)]);
            // The next message's chunk (loaned first: a chunk freed during
            // the race is not reused, so `seen` counts messages).
            let c = w.loan(tok(P));
            let publisher = {
                let (w, rings, seen) = (w.clone(), rings.clone(), seen.clone());
                loom::thread::spawn(move || {
                    // Full: take the oldest for group 1, as a member.
                    let (i, took) = rings.receive(&w, 1, tok(P)).expect("two queued, two readers");
                    assert!(took);
                    seen[i as usize].fetch_add(1, Ordering::SeqCst);
                    w.release(1, i, tok(P));
                })
            };
            if let Some((i, took)) = rings.receive(&w, 1, tok(B)) {
                if took {
                    seen[i as usize].fetch_add(1, Ordering::SeqCst);
                    w.release(1, i, tok(B));
                }
            }
            publisher.join().unwrap();
            // Room made: the next message goes to both groups.
            let r = publish(&w.shares(c), &w.controls, &*rings, &w.joined(), tok(P), &w.free());
            assert_eq!(r, Ok(Some(0b11)));
            // Drain both groups.
            for (g, me) in [(0, tok(A)), (1, tok(B))] {
                while let Some((i, took)) = rings.receive(&w, g, me) {
                    assert!(took);
                    if g == 1 {
                        seen[i as usize].fetch_add(1, Ordering::SeqCst);
                    }
                    w.release(g, i, me);
                }
            }
            for i in sent.iter().chain([&c]) {
                assert_eq!(seen[*i as usize].load(Ordering::SeqCst), 1, "message {i} reached group 1 once");
            }
            w.check_all_free();
        });
    }

    /// A group dropped while a publisher publishes to it and a member of
    /// the other group receives: the dropped group keeps no hold, the other
    /// gets the message once, the chunk is freed once. Relies on the SeqCst
    /// fences in `share` and in `start_drop`: without either, the publisher
    /// can miss the drop while the sweep misses its group word, which then
    /// holds the chunk for the dropped group (a member of the slot still
    /// takes it: "the dropped group holds nothing" fails).
    #[test]
    fn a_group_dropped_mid_publish() {
        model(2, || {
            let w = Arc::new(World::new(1, 2));
            let got = Arc::new(AtomicU32::new(0));
            let c = w.loan(tok(P));
            let publisher = {
                let w = w.clone();
                loom::thread::spawn(move || {
                    let to = w.joined();
                    publish(&w.shares(c), &w.controls, &w.rings, &to, tok(P), &w.free()).unwrap();
                })
            };
            let dropper = {
                let w = w.clone();
                loom::thread::spawn(move || {
                    assert!(w.controls[1].start_drop(1));
                    w.shares(c).sweep(1, tok(R1), &w.free());
                    assert!(w.controls[1].vacate(1));
                })
            };
            if let Some(i) = w.receive(0, tok(A)) {
                got.fetch_add(1, Ordering::SeqCst);
                w.release(0, i, tok(A));
            }
            publisher.join().unwrap();
            dropper.join().unwrap();
            if let Some(i) = w.receive(0, tok(A)) {
                got.fetch_add(1, Ordering::SeqCst);
                w.release(0, i, tok(A));
            }
            assert_eq!(w.receive(1, tok(B)), None, "the dropped group holds nothing");
            assert_eq!(got.load(Ordering::SeqCst), 1, "group 0 got it once");
            w.check_all_free();
        });
    }

    /// A publisher killed after its commit point (SHARED) having committed
    /// to group 0 only; in the at-least-once run, group 0's member A also
    /// died holding it. A recoverer deals with group 1's hold while members
    /// of both groups receive: at least once it completes the publication
    /// (group 1 gets the message exactly once; group 0 once, plus once more
    /// after A's death), at most once it lets group 1's hold go (the
    /// message never reached group 1's ring: it is lost to group 1, never
    /// delivered behind later messages), group 0 gets it once. The chunk is
    /// freed once. Relies on the CAS that takes a dead hold
    /// over before redelivering (`redeliver`): made a store, a recoverer
    /// that read group 0's word QUEUED before member C took it overwrites
    /// C's hold and delivers the message to group 0 twice (the at-most-once
    /// run fails so; the at-least-once run does not catch that mutation:
    /// there group 0's hold is dead A's, which only the recoverer touches).
    fn publisher_killed_after_shared(at_least_once: bool) {
        model(2, move || {
            let w = Arc::new(World::new(1, 2));
            let got = Arc::new([AtomicU32::new(0), AtomicU32::new(0)]);
            let c = w.loan(tok(P));
            let to = w.joined();
            let (mut cells, mut stamps) = ([0; 2], [0; 2]);
            let s = w.shares(c);
            assert!(claim_all(&w.rings, &to, tok(P), &mut cells));
            s.prepare(tok(P), &[0, 1], &mut stamps).unwrap();
            let m = s.share(tok(P)).unwrap();
            assert_eq!(s.keep_joined(&w.controls, &to, &stamps, tok(P), m, &w.free()), 0b11);
            assert!(w.rings.commit(0, cells[0], c, stamps[0], tok(P)));
            // P is killed here. At least once: A takes it and is killed too.
            let mut dead = vec![tok(P)];
            if at_least_once {
                assert_eq!(w.receive(0, tok(A)), Some(c));
                got[0].fetch_add(1, Ordering::SeqCst);
                dead.push(tok(A));
            }
            let member = |g: usize, me: Token, w: &World, got: &[AtomicU32; 2]| {
                if let Some(i) = w.receive(g, me) {
                    got[g].fetch_add(1, Ordering::SeqCst);
                    w.release(g, i, me);
                }
            };
            let recoverer = {
                let (w, dead) = (w.clone(), dead.clone());
                loom::thread::spawn(move || w.recover(tok(R1), &dead, at_least_once))
            };
            let t = {
                let (w, got) = (w.clone(), got.clone());
                loom::thread::spawn(move || member(0, tok(C), &w, &got))
            };
            member(1, tok(B), &w, &got);
            let r = recoverer.join().unwrap();
            t.join().unwrap();
            // Later: another pass (deferred work), the members again.
            let r2 = w.recover(tok(R2), &dead, at_least_once);
            member(0, tok(C), &w, &got);
            member(1, tok(B), &w, &got);
            let r3 = w.recover(tok(R2), &dead, at_least_once);
            member(0, tok(C), &w, &got);
            member(1, tok(B), &w, &got);
            let g0 = got[0].load(Ordering::SeqCst);
            let g1 = got[1].load(Ordering::SeqCst);
            if at_least_once {
                assert_eq!(g1, 1, "group 1 got it once");
                assert_eq!(g0, 2, "group 0: A (dead) and its redelivery");
                assert_eq!(r.lost + r2.lost + r3.lost, 0);
            } else {
                assert_eq!(g1, 0, "group 1: lost, never reordered");
                assert_eq!(g0, 1, "group 0 got it once");
                assert_eq!(r.lost + r2.lost + r3.lost, 1, "lost to group 1");
            }
            w.check_all_free();
        });
    }

    /// A free-list rebuild (after damage was found elsewhere on the list)
    /// races the last release of a SHARED chunk: the rebuild leaves the
    /// SHARED chunk alone (and chains the other, free, chunk), the release
    /// frees it once (its push, meeting the stopped list, retries after the
    /// rebuild, as `free_shared` does). Relies on the rebuild trusting
    /// `SHARED_HOLDER` (`pool.rs`, `trusted_holder`): under the old rule
    /// the rebuild quarantines the chunk (`quarantined == 0` fails) and the
    /// release could never take it.
    #[test]
    fn a_rebuild_races_the_last_release_of_a_shared_chunk() {
        model(3, || {
            let (w, c) = held_by_two_of(2, 2);
            assert!(!w.release(0, c, tok(A)));
            let t = {
                let w = w.clone();
                loom::thread::spawn(move || {
                    if !w.release(1, c, tok(B)) {
                        // Taken, but the push met the stopped list.
                        let m = w.shares(c).main.word();
                        assert_eq!((m.state(), m.holder()), (LOANED, tok(B).raw()), "ours to push");
                        while w.list.push(&w.pool(), &(0..2), c).is_err() {
                            loom::thread::yield_now();
                        }
                    }
                })
            };
            let found = w.list.rebuild(&w.pool(), &(0..2)).unwrap();
            assert_eq!(found.quarantined, 0);
            t.join().unwrap();
            w.check_all_free();
        });
    }

    /// A recoverer (R1) redelivering dead A's message (at least once) is
    /// judged dead while it runs (a stale heartbeat where the kernel cannot
    /// tell): a second recoverer (R2) repairs R1's claimed cell, which can
    /// make R1's commit fail (R1 then gives the hold back to the dead,
    /// `redeliver`), and recovers with R1 dead, racing R1's take-over,
    /// re-queue and give-back. Later passes still count R1 dead. Group 0
    /// gets the message exactly once more, group 1's copy is untouched, the
    /// chunk is freed once. (Were R1 judged alive again, a hold R2 gave
    /// back to it after a full ring would wait for R1's real death: the
    /// limit of a process wrongly judged dead, docs/groups-design.md.)
    #[test]
    fn a_redeliverer_judged_dead_while_it_runs() {
        model(2, || {
            let w = held_by_two(2);
            let r2 = {
                let w = w.clone();
                loom::thread::spawn(move || w.recover(tok(R2), &[tok(A), tok(R1)], true))
            };
            w.recover(tok(R1), &[tok(A)], true);
            r2.join().unwrap();
            let mut got = 0;
            for _ in 0..2 {
                w.recover(tok(R2), &[tok(A), tok(R1)], true);
                while let Some(i) = w.receive(0, tok(C)) {
                    got += 1;
                    w.release(0, i, tok(C));
                }
            }
            assert_eq!(got, 1, "group 0 got it once more");
            assert!(w.release(1, 0, tok(B)), "group 1's release frees it");
            w.check_all_free();
        });
    }

    #[test]
    fn a_publisher_killed_after_shared_at_most_once() {
        publisher_killed_after_shared(false);
    }

    #[test]
    fn a_publisher_killed_after_shared_at_least_once() {
        publisher_killed_after_shared(true);
    }

    /// Joining "from the oldest" (`bus/backlog.rs`) racing a publisher of
    /// two messages (1 then 2, same key) whose first look at the groups
    /// may come before the join: the joiner reserves the new group's ring
    /// (slot 1, two cells), goes ACTIVE, fences (the model of its
    /// `membarrier`), and copies the source ring's (slot 0) committed
    /// cells, waiting for marked ones and skipping unmarked claims; the
    /// publisher claims, marks, fences (the model of its compiler fence
    /// under the joiner's barrier), looks again, and publishes again with
    /// the group if it joined meanwhile (waiting for room in the group's
    /// ring while holding its other claim, unmarked). The new group gets 1
    /// and then 2, each once: no gap between backlog and live stream, no
    /// duplicate, no deadlock. Fails with the publisher's second look taken
    /// out (the group misses 1 or 2), with the joiner skipping marked
    /// cells instead of waiting for them, and with it waiting for marked
    /// cells only (a commit writes the item over the mark before its
    /// word moves: a committing cell then looks unmarked).
    #[test]
    fn a_stale_publisher_races_a_join_from_the_oldest() {
        use crate::sync::ring::{Claim, Look};
        model(3, || {
            let rings = Arc::new(RealRings::new(2, 4));
            let (src, g) = (0usize, 1usize);
            // Slot 1's ring has two cells: rebuild it so.
            let rings = {
                let mut r = Arc::try_unwrap(rings).ok().unwrap();
                r.0[g] =
                    (crate::sync::ring::Cursors::new(), (0..2).map(crate::sync::ring::Cell::new).collect());
                Arc::new(r)
            };
            let control = Arc::new(Control::new(1, VACANT));
            let publisher = {
                let (rings, control) = (rings.clone(), control.clone());
                loom::thread::spawn(move || {
                    let me = tok(P);
                    for m in 1..=2u64 {
                        loop {
                            let joined = control.load() == (1, ACTIVE);
                            let Claim::Got { pos, idx, .. } = rings.ring(src).claim_write(me) else {
                                panic!("room")
                            };
                            let mut cells = vec![(src, pos, idx)];
                            if joined {
                                loop {
                                    if let Claim::Got { pos, idx, .. } = rings.ring(g).claim_write(me) {
                                        cells.push((g, pos, idx));
                                        break;
                                    }
                                    loom::thread::yield_now();
                                }
                            }
                            for &(r, _, idx) in &cells {
                                rings.ring(r).mark_intent(idx);
                            }
                            fence(Ordering::SeqCst);
                            if !joined && control.load() == (1, ACTIVE) {
                                for &(r, pos, idx) in &cells {
                                    assert!(rings.ring(r).abandon_write(pos, idx, me));
                                }
                                continue;
                            }
                            for &(r, pos, idx) in &cells {
                                assert!(rings.ring(r).commit_write(pos, idx, m, me));
                            }
                            break;
                        }
                    }
                })
            };
            // The joiner.
            let me = tok(A);
            let reserved: Vec<(u64, usize)> = (0..2)
                .map(|_| match rings.ring(g).claim_write(me) {
                    Claim::Got { pos, idx, .. } => (pos, idx),
                    _ => panic!("an empty ring"),
                })
                .collect();
            assert!(control.join(1));
            fence(Ordering::SeqCst);
            let source = rings.ring(src);
            let mut backlog = Vec::new();
            let head = source.cursors.head.load(Ordering::SeqCst);
            'scan: for pos in head..head + 4 {
                loop {
                    match source.look(pos) {
                        Look::Committed(m) => backlog.push(m),
                        Look::Free => break 'scan,
                        // Marked, or committing (a message's value over
                        // the mark): wait. (Unmarked: 0, the initial value.)
                        Look::Writing { len, .. } if len != 0 => {
                            loom::thread::yield_now();
                            continue;
                        }
                        Look::Writing { .. } | Look::Gone => {}
                    }
                    break;
                }
            }
            let lead = reserved.len() - backlog.len();
            for &(pos, idx) in &reserved[..lead] {
                assert!(rings.ring(g).abandon_write(pos, idx, me));
            }
            rings.ring(g).skip_tombstones();
            for (&(pos, idx), &m) in reserved[lead..].iter().zip(&backlog) {
                assert!(rings.ring(g).commit_write(pos, idx, m, me));
            }
            publisher.join().unwrap();
            let mut got = Vec::new();
            while let Claim::Got { pos, idx, len } = rings.ring(g).claim_read(tok(B), u64::MAX, &mut false) {
                got.push(len);
                assert!(rings.ring(g).finish_read(pos, idx, tok(B)));
            }
            assert_eq!(got, [1, 2], "the new group gets 1 then 2, once each (backlog {backlog:?})");
        });
    }
}
