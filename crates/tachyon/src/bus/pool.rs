//! The payload pool: one lock-free free list of chunk indices per size
//! class, and a state word per chunk that says at every instant who holds
//! it, so that a process killed at any instruction leaves nothing behind
//! that recovery cannot attribute.
//!
//! Source: the free lists are Treiber stacks (R. K. Treiber, "Systems
//! Programming: Coping with Parallelism", IBM RJ 5118, 1986) with a tag in
//! the head against ABA, made crash-safe by announcing each operation in
//! the head and letting anyone complete it (the "helping" of wait-free
//! constructions, M. Herlihy, "Wait-free synchronization", TOPLAS 1991):
//! see "Free lists: announce, then help".
//!
//! # The chunk word
//!
//! `tag << 32 | state << 30 | holder`: the state (FREE, LOANED, QUEUED,
//! HELD), the [`Token`] of the holder (0 while FREE), and the tag of the
//! free-list operation that last moved the chunk on or off its list. Every
//! change of holder is one compare-and-swap of the whole word.
//!
//! # Free lists: announce, then help
//!
//! A plain Treiber stack has two windows in which a killed process loses a
//! chunk for ever: a pop that swung the head but has not yet recorded its
//! holder, and a push that cleared its holder but has not yet swung the
//! head. Here an operation is first *announced* in the head word itself,
//! with one CAS, and then *completed*, by its owner or by anyone else who
//! finds it announced:
//!
//! ```text
//! head = tag:31 | pending slot:7 | pending kind:2 | top index + 1:24
//!
//! pop  by slot s: (i, none, t)  ->  (i, pop s, t+1)    announce: i is s's
//!                 word(i): FREE -> LOANED by journal[s], tag t+1
//!                 (i, pop s, t+1)  ->  (next(i), none, t+2)
//! push of i:      (j, none, t)  ->  (i, push, t+1)     next(i) = j beforehand
//!                 word(i): any -> FREE, holder 0, tag t+1
//!                 (i, push, t+1)  ->  (i, none, t+2)
//! ```
//!
//! An operation may move a *chain* of chunks at once, so that processes
//! exchange free chunks with the list in batches (one announcement and
//! one completion per batch, not per chunk: see "Chains" below).
//!
//! Whoever finds an announced head (a popper, a pusher, recovery, a process
//! attaching) completes it before doing anything else, so the head's CAS
//! is the one instant at which a chunk changes hands, and a process that
//! dies right after it is completed by the next one to touch the list.
//! `journal[s]` is the token of the process in attach slot `s`, written once
//! when it attaches (after it completed any announcement the slot's previous,
//! dead, occupant left), so a helper knows whom a pop is for.
//!
//! A helper reads the chunk word, then checks that the head is still the
//! announcement it is completing (head values never repeat: the tag moves
//! on every CAS), and only then CASes the word from what it read to the
//! outcome. While the announcement stands the word can only be the value
//! from before the operation or its outcome, so a helper that was delayed
//! past the completion fails its CAS: the word moved on, and it cannot come
//! back to the same value before the 31-bit tag wraps (2^31 operations on
//! one list while one helper stalls between two loads).
//!
//! # Chains
//!
//! A push announces a chain of `k` chunks (1 to [`MAX_CHAIN`]) that its
//! pusher linked beforehand, the last one to the old top: the head's slot
//! field, unused by a push, holds `k - 1`, and the completion turns all
//! `k` words FREE. A pop takes the first `b` chunks of the list (fewer if
//! the list is shorter), where `b = pool.batch(range)`: a function of the
//! class's chunk count and chunk size, the same in every process, so that
//! every helper completes the same chain; the completion turns all `b`
//! words LOANED by the popper and moves the head past the `b`-th. A helper walks
//! the chain's links and reads its words *before* it re-checks the head:
//! if the head is still the announcement, every link and word it read was
//! read while the announcement stood (head values never repeat), when
//! nobody but a completer writes them; then each word is CASed from what
//! was read to the outcome, as for one chunk. A chain that reaches a chunk
//! out of the class, a popped chunk that is not FREE or a pushed one its
//! pusher does not hold is damage. A chain damaged into a loop is walked
//! as it is (its second visit of a chunk fails its CAS); the popper takes
//! each chunk once ([`FreeList::claim_chain`]), and the loop's chunks,
//! LOANED now, are found by the next pop (a top that is not FREE) or by
//! the audit ([`FreeList::intact`]).
//!
//! Every index read from shared memory is checked against the class's
//! range; a bad one is reported (`Err(())`) as a damaged segment.

use crate::platform::atomic::{AtomicU32, AtomicU64, Ordering};
use crate::sync::Token;
use std::ops::Range;

// Chunk states.
/// On a free list (or being announced onto or off it).
pub(crate) const FREE: u32 = 0;
/// Lent to a producer.
pub(crate) const LOANED: u32 = 1;
/// Named by a descriptor in a ring (holder: whoever published it).
#[cfg_attr(tachyon_loom, allow(dead_code))]
pub(crate) const QUEUED: u32 = 2;
/// Received and not yet released (holder: the consumer).
#[cfg_attr(tachyon_loom, allow(dead_code))]
pub(crate) const HELD: u32 = 3;

/// The most chunks a region can have (indices fit the head's 24 bits).
#[cfg_attr(tachyon_loom, allow(dead_code))]
pub(crate) const MAX_CHUNKS: usize = (1 << 24) - 2;
// Inline descriptors carry a chunk index no chunk has.
const _: () = assert!(MAX_CHUNKS as u32 <= Descriptor::INLINE_CHUNK);

/// A chunk's state word: `tag << 32 | state << 30 | holder`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Word(pub u64);

impl Word {
    pub(crate) const fn new(tag: u32, state: u32, holder: u32) -> Word {
        Word(((tag as u64) << 32) | (((state & 3) as u64) << 30) | (holder & Token::MASK) as u64)
    }
    #[cfg_attr(tachyon_loom, allow(dead_code))]
    pub(crate) const fn tag(self) -> u32 {
        (self.0 >> 32) as u32
    }
    pub(crate) const fn state(self) -> u32 {
        (self.0 >> 30) as u32 & 3
    }
    pub(crate) const fn holder(self) -> u32 {
        self.0 as u32 & Token::MASK
    }
    /// The same chunk in `state`, held by `holder` (the tag is kept).
    #[cfg_attr(tachyon_loom, allow(dead_code))]
    pub(crate) const fn with(self, state: u32, holder: u32) -> Word {
        Word::new(self.tag(), state, holder)
    }
}

/// Per-chunk metadata.
#[repr(C)]
pub(crate) struct ChunkMeta {
    /// The chunk's [`Word`].
    word: AtomicU64,
    /// Free-list link: `index + 1` of the chunk below (0: none).
    next: AtomicU32,
    /// `(topic index + 1) << 16 | partition` of a queued or held message,
    /// written by its publisher; 0 if none.
    pub route: AtomicU32,
    /// Length of a queued or held message, written by its publisher.
    pub len: AtomicU32,
    /// How many times the chunk was published; the low bits travel in the
    /// descriptor, so a descriptor names one publication, not just a chunk.
    pub version: AtomicU32,
}

impl ChunkMeta {
    #[cfg(any(test, tachyon_loom))]
    pub(crate) fn new() -> Self {
        ChunkMeta {
            word: AtomicU64::new(0),
            next: AtomicU32::new(0),
            route: AtomicU32::new(0),
            len: AtomicU32::new(0),
            version: AtomicU32::new(0),
        }
    }

    pub(crate) fn word(&self) -> Word {
        // SYNC: pairs with the Release half of `cas`: the last holder's writes to the chunk
        // (bytes, route, len) are seen.
        Word(self.word.load(Ordering::Acquire))
    }

    /// Moves the word from `from` to `to`; false if it was not `from`.
    pub(crate) fn cas(&self, from: Word, to: Word) -> bool {
        // SYNC: AcqRel: each change of holder hands the chunk's bytes and metadata on
        // (`Region::enqueue`'s LOANED -> QUEUED to `check_descriptor`'s QUEUED -> HELD).
        self.word.compare_exchange(from.0, to.0, Ordering::AcqRel, Ordering::Acquire).is_ok()
    }
}

/// A descriptor, the 64-bit word a ring cell carries for a message:
/// `chunk:24 | publication:19 | length:21`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(tachyon_loom, allow(dead_code))]
pub(crate) struct Descriptor {
    pub chunk: u32,
    /// The low [`Descriptor::VERSION_BITS`] of the chunk's publication count.
    pub version: u32,
    pub len: u32,
}

#[cfg_attr(tachyon_loom, allow(dead_code))]
impl Descriptor {
    pub(crate) const VERSION_BITS: u32 = 19;
    const VERSION_MASK: u32 = (1 << Self::VERSION_BITS) - 1;

    /// The descriptor of publication `version` of `chunk` (`len <= 1 MiB`).
    pub(crate) const fn new(chunk: u32, version: u32, len: u32) -> Descriptor {
        Descriptor { chunk, version: version & Self::VERSION_MASK, len }
    }
    /// The bits of a descriptor word that hold the message's length: a
    /// ring's length mask for topics (`Ring::claim_read_within`).
    pub(crate) const LEN_MASK: u64 = 0x1F_FFFF;

    pub(crate) const fn encode(self) -> u64 {
        ((self.chunk as u64) << 40) | ((self.version as u64) << 21) | (self.len as u64 & Self::LEN_MASK)
    }
    pub(crate) const fn decode(word: u64) -> Descriptor {
        Descriptor {
            chunk: (word >> 40) as u32,
            version: (word >> 21) as u32 & Self::VERSION_MASK,
            len: (word & Self::LEN_MASK) as u32,
        }
    }
    /// The chunk index an inline descriptor carries (no chunk has it:
    /// indices stop below [`MAX_CHUNKS`]).
    pub(crate) const INLINE_CHUNK: u32 = (1 << 24) - 2;

    /// The descriptor of a message of `len` bytes written into the inline
    /// slot of the cell that carries it (`TopicConfig::inline_payload`).
    pub(crate) const fn inline(len: u32) -> Descriptor {
        Descriptor { chunk: Self::INLINE_CHUNK, version: 0, len }
    }

    /// Whether a cell's descriptor word says "inline" (its length still to
    /// be checked against the topic's slot).
    #[inline]
    pub(crate) const fn is_inline(word: u64) -> bool {
        (word >> 40) as u32 == Self::INLINE_CHUNK
    }

    /// Whether this descriptor names the chunk's current publication.
    pub(crate) fn is_current(self, meta: &ChunkMeta) -> bool {
        // SYNC: pairs with the Release store of `version` in `Region::enqueue` (recovery.rs).
        meta.version.load(Ordering::Acquire) & Self::VERSION_MASK == self.version
    }
}

// Announcements in a head word.
const NONE: u64 = 0;
const POP: u64 = 1;
const PUSH: u64 = 2;
/// Not an announcement: the list is stopped for a rebuild (see
/// [`FreeList::rebuild`]); every operation fails on it until the rebuild
/// ends, and a rebuilder that died leaves it for the next one.
const REBUILDING: u64 = 3;

/// The holder of a quarantined chunk (state LOANED): slot 127 at
/// generation 0, which no token is, so that recovery never reclaims it and
/// no free list takes it.
#[cfg_attr(tachyon_loom, allow(dead_code))]
pub(crate) const QUARANTINE: u32 = 0x7F;

/// The holder of a chunk that consumer groups share (state HELD): slot
/// 126 at generation 0, which no token is, so that today's recovery never
/// reclaims it; its group words say who holds it (see `bus/groups.rs` and
/// docs/groups-design.md). A rebuild trusts it: a SHARED chunk is in use.
#[cfg_attr(tachyon_loom, allow(dead_code))]
pub(crate) const SHARED_HOLDER: u32 = 0x7E;

/// Whether a rebuild may trust a chunk word: FREE with no holder, held by
/// a token, or SHARED by consumer groups. Anything else is quarantined.
fn trusted_holder(w: Word) -> bool {
    match w.state() {
        FREE => w.holder() == 0,
        HELD if w.holder() == SHARED_HOLDER => true,
        _ => Token::from_raw(w.holder()).is_some(),
    }
}

/// What [`FreeList::rebuild`] made of a class.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[cfg_attr(tachyon_loom, allow(dead_code))]
pub(crate) struct Rebuilt {
    /// Chunks on the rebuilt list.
    pub free: usize,
    /// Chunks quarantined (now or by an earlier rebuild).
    pub quarantined: usize,
}
const TAG_MASK: u32 = (1 << 31) - 1;

/// A free list's head word: `tag:31 | slot:7 | kind:2 | top + 1:24`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Head(u64);

impl Head {
    const fn new(top: u32, kind: u64, slot: usize, tag: u32) -> Head {
        Head(
            (top as u64 & 0xFF_FFFF)
                | (kind << 24)
                | (((slot as u64) & 0x7F) << 26)
                | (((tag & TAG_MASK) as u64) << 33),
        )
    }
    /// `index + 1` of the top chunk; 0: empty.
    const fn top(self) -> u32 {
        (self.0 & 0xFF_FFFF) as u32
    }
    const fn kind(self) -> u64 {
        (self.0 >> 24) & 3
    }
    const fn slot(self) -> usize {
        ((self.0 >> 26) & 0x7F) as usize
    }
    const fn tag(self) -> u32 {
        (self.0 >> 33) as u32
    }
    const fn next_tag(self) -> u32 {
        self.tag().wrapping_add(1) & TAG_MASK
    }
}

/// One class's free list (16 bytes in the region).
#[repr(C)]
pub(crate) struct FreeList {
    head: AtomicU64,
    _reserved: AtomicU64,
}

/// The most chunks one operation moves: a push's chain, a pop's batch.
pub(crate) const MAX_CHAIN: usize = 32;

/// What the free-list operations work on.
pub(crate) struct Pool<'a> {
    /// Every chunk of the region.
    pub metas: &'a [ChunkMeta],
    /// The token of each attach slot's process (see the module docs).
    pub journal: &'a [AtomicU32],
    /// How many chunks one pop takes from each class (see "Chains"),
    /// computed by every process alike from the region's recorded
    /// configuration and code, not read from shared data. A range that is
    /// no class's here takes one chunk per pop.
    pub batches: &'a [ClassBatch],
}

/// How many chunks one pop takes from the class whose chunks are
/// `first .. first + chunks` ([`Pool::batches`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ClassBatch {
    pub first: u32,
    pub chunks: u32,
    pub batch: u32,
}

impl Pool<'_> {
    /// How many chunks one pop of the class whose chunks are `range` takes.
    pub(crate) fn batch(&self, range: &Range<u32>) -> usize {
        let class = self.batches.iter().find(|b| b.first == range.start && b.chunks as usize == range.len());
        class.map_or(1, |b| b.batch as usize).clamp(1, MAX_CHAIN)
    }
}

impl FreeList {
    #[cfg(any(test, tachyon_loom))]
    pub(crate) fn new() -> Self {
        FreeList { head: AtomicU64::new(0), _reserved: AtomicU64::new(0) }
    }

    /// Pops a chunk of the class whose chunks are `range` (global indices)
    /// for `me`: on return its word says LOANED by `me`. `Err(())` if the
    /// list or a chunk word is damaged. For a pool whose pops take one
    /// chunk at a time (no [`ClassBatch`] for `range`); see [`pop_chain`](Self::pop_chain).
    #[cfg(test)]
    pub(crate) fn pop(&self, pool: &Pool<'_>, range: &Range<u32>, me: Token) -> Result<Option<u32>, ()> {
        let mut got = [0; MAX_CHAIN];
        let n = self.pop_chain(pool, range, me, &mut got)?;
        debug_assert!(n <= 1, "a pop of one chunk from a pool that pops {n}");
        Ok((n > 0).then_some(got[0]))
    }

    /// Pops the first chunks of the list (as many as the pool's batch, or
    /// fewer if the list is shorter) for `me`, into `got`: on return their
    /// words say LOANED by `me`. Returns how many (0: the list is empty).
    /// `Err(())` if the list or a chunk word is damaged.
    pub(crate) fn pop_chain(
        &self,
        pool: &Pool<'_>,
        range: &Range<u32>,
        me: Token,
        got: &mut [u32; MAX_CHAIN],
    ) -> Result<usize, ()> {
        self.pop_chain_then(pool, range, me, got, |_| {})
    }

    /// [`pop_chain`](Self::pop_chain) that calls `won` with the first
    /// chunk's index (checked against `range`) once the pop is announced:
    /// from then on the chain is the popper's, and `won` runs before its
    /// chunks' words are walked and moved (the allocator prefetches them
    /// there, `Region::prefetch_chain`). Called at most once.
    pub(crate) fn pop_chain_then(
        &self,
        pool: &Pool<'_>,
        range: &Range<u32>,
        me: Token,
        got: &mut [u32; MAX_CHAIN],
        won: impl FnOnce(u32),
    ) -> Result<usize, ()> {
        let mut won = Some(won);
        loop {
            // SYNC: pairs with the AcqRel head CASes: a push's links (`next`) and the word CASes
            // of every completed operation are seen (here and in `push_chain`).
            let h = Head(self.head.load(Ordering::Acquire));
            if h.kind() != NONE {
                self.complete(pool, range, h)?;
                continue;
            }
            if h.top() == 0 {
                return Ok(0);
            }
            let first = check(range, pool, h.top() - 1)?;
            let announced = Head::new(h.top(), POP, me.slot(), h.next_tag());
            if self.head.compare_exchange_weak(h.0, announced.0, Ordering::AcqRel, Ordering::Acquire).is_ok()
            {
                // From here the chain is ours whatever happens to us.
                crate::platform::fault::point("pool-pop-announced");
                if let Some(won) = won.take() {
                    won(first);
                }
                self.complete(pool, range, announced)?;
                let mine = Word::new(announced.tag(), LOANED, me.raw());
                return match self.claim_chain(pool, range, first, mine, got) {
                    0 => Err(()),
                    n => Ok(n),
                };
            }
            crate::platform::atomic::spin_hint();
        }
    }

    /// The chunks a completed pop gave its popper, from `first` on: as
    /// `complete` walked them, as long as their words say `mine` (the
    /// pop's outcome). Their links do not change meanwhile: nobody but
    /// their holder writes them. 0 only if `first` is not the popper's:
    /// damage.
    fn claim_chain(
        &self,
        pool: &Pool<'_>,
        range: &Range<u32>,
        first: u32,
        mine: Word,
        got: &mut [u32; MAX_CHAIN],
    ) -> usize {
        let (batch, mut n, mut at) = (pool.batch(range), 0, first);
        // One bit per index modulo 64 of the chunks taken so far: a chunk
        // whose bit is clear cannot be among them (a damaged link that
        // loops); only when it is set is `got` searched.
        let mut seen = 0u64;
        loop {
            let meta = &pool.metas[at as usize];
            if meta.word() != mine {
                return n;
            }
            got[n] = at;
            n += 1;
            seen |= 1 << (at % 64);
            // SYNC: the link was published by the push's announcing CAS, seen
            // through the pop's Acquire loads of the head.
            let next = meta.next.load(Ordering::Acquire);
            if n == batch || next == 0 {
                return n;
            }
            match check(range, pool, next - 1) {
                Ok(i) if seen & (1 << (i % 64)) == 0 || !got[..n].contains(&i) => at = i,
                _ => return n,
            }
        }
    }

    /// Pushes chunk `idx` (a global index in `range`, held by the caller):
    /// on return its word says FREE.
    pub(crate) fn push(&self, pool: &Pool<'_>, range: &Range<u32>, idx: u32) -> Result<(), ()> {
        self.push_chain(pool, range, &[idx])
    }

    /// Pushes `chunks` (1 to [`MAX_CHAIN`] distinct global indices in
    /// `range`, all held by the caller) in one operation: on return their
    /// words say FREE, and the list has them on top, in this order.
    pub(crate) fn push_chain(&self, pool: &Pool<'_>, range: &Range<u32>, chunks: &[u32]) -> Result<(), ()> {
        let (Some(&first), Some(&last)) = (chunks.first(), chunks.last()) else { return Ok(()) };
        if chunks.len() > MAX_CHAIN {
            return Err(());
        }
        for pair in chunks.windows(2) {
            check(range, pool, pair[1])?;
            // SYNC: published by the Release of the announcing CAS below;
            // `complete` reads the links after an Acquire of the head.
            pool.metas[check(range, pool, pair[0])? as usize].next.store(pair[1] + 1, Ordering::Relaxed);
        }
        let last = &pool.metas[check(range, pool, last)? as usize];
        loop {
            let h = Head(self.head.load(Ordering::Acquire));
            if h.kind() != NONE {
                self.complete(pool, range, h)?;
                continue;
            }
            // SYNC: as the links above.
            last.next.store(h.top(), Ordering::Relaxed);
            let announced = Head::new(first + 1, PUSH, chunks.len() - 1, h.next_tag());
            if self.head.compare_exchange_weak(h.0, announced.0, Ordering::AcqRel, Ordering::Acquire).is_ok()
            {
                crate::platform::fault::point("pool-push-announced");
                return self.complete(pool, range, announced);
            }
            crate::platform::atomic::spin_hint();
        }
    }

    /// Completes the operation announced in the head now, if any (run by
    /// recovery after it found a process dead, and by a process attaching
    /// to a slot, so that the dead leave no announcement behind).
    /// `Err(())` if the list is damaged at its head (a top out of the class,
    /// an announcement that cannot be completed, a stopped rebuild).
    pub(crate) fn help(&self, pool: &Pool<'_>, range: &Range<u32>) -> Result<(), ()> {
        let h = Head(self.head.load(Ordering::Acquire));
        if h.kind() == NONE {
            return if h.top() == 0 { Ok(()) } else { check(range, pool, h.top() - 1).map(|_| ()) };
        }
        self.complete(pool, range, h)
    }

    /// Completes announcement `h`: sets its chunks' words to the outcome
    /// and takes the announcement off the head. Idempotent, and harmless
    /// if `h` was completed already (see the module docs, "Chains").
    fn complete(&self, pool: &Pool<'_>, range: &Range<u32>, h: Head) -> Result<(), ()> {
        if h.top() == 0 {
            return Err(());
        }
        let (len, outcome) = match h.kind() {
            POP => {
                // SYNC: pairs with the Release store of the journal in `Region::new`
                // (region.rs); the pop's announcing CAS orders it too.
                let holder = pool.journal.get(h.slot()).ok_or(())?.load(Ordering::Acquire);
                (pool.batch(range), Word::new(h.tag(), LOANED, holder))
            }
            // No pusher announces more than `MAX_CHAIN`.
            PUSH if h.slot() < MAX_CHAIN => (h.slot() + 1, Word::new(h.tag(), FREE, 0)),
            _ => return Err(()),
        };
        let mut chain = [(0u32, Word(0)); MAX_CHAIN];
        let (mut n, mut at, mut after) = (0, h.top() - 1, 0);
        // Walk the chain, reading each word and link, then re-check the
        // head: if it still is `h`, all of it was read while `h` stood.
        let walked = loop {
            let Ok(i) = check(range, pool, at) else { break false };
            let meta = &pool.metas[i as usize];
            // SYNC: Acquire: a word written by a later operation's completer carries the later
            // head it saw (head values never repeat), so the re-check below cannot still read `h`.
            chain[n] = (i, meta.word());
            n += 1;
            // SYNC: a link was published by its push's announcing CAS,
            // seen through the Acquire load of `h`.
            after = meta.next.load(Ordering::Acquire);
            if n == len || (h.kind() == POP && after == 0) {
                break true;
            }
            if after == 0 {
                break false; // a push's chain shorter than announced
            }
            at = after - 1;
        };
        if self.head.load(Ordering::Acquire) != h.0 {
            return Ok(()); // completed by someone else
        }
        let chain = &chain[..n];
        // While a pop stands its chunks are FREE or already the outcome; a
        // chain's pushed chunks are held, all by its pusher, or already the
        // outcome (a push of one chunk, which walks no link, may push any
        // word: a new region's). Anything else is a damaged link that led
        // elsewhere (maybe to a chunk in use, which must not be handed out
        // twice).
        let pusher = chain.iter().find(|(_, w)| *w != outcome).map(|(_, w)| w.holder());
        let sound = |&(_, w): &(u32, Word)| match h.kind() {
            POP => w == outcome || w.state() == FREE,
            _ => len == 1 || w == outcome || (w.state() != FREE && Some(w.holder()) == pusher),
        };
        if !walked || !chain.iter().all(sound) {
            return Err(());
        }
        for &(i, w) in chain {
            if w != outcome {
                // Fails only if another helper of `h` got there first.
                pool.metas[i as usize].cas(w, outcome);
            }
        }
        let top = if h.kind() == POP { after } else { h.top() };
        let done = Head::new(top, NONE, 0, h.next_tag());
        // SYNC: Release: the word CASes above are seen by whoever reads this head (see the
        // re-check above).
        let _ = self.head.compare_exchange(h.0, done.0, Ordering::AcqRel, Ordering::Acquire);
        Ok(())
    }
}

impl FreeList {
    /// The head word if the list is empty now (no top, no announcement).
    #[cfg_attr(tachyon_loom, allow(dead_code))]
    pub(crate) fn empty_head(&self) -> Option<u64> {
        let h = Head(self.head.load(Ordering::Acquire));
        (h.top() == 0 && h.kind() == NONE).then_some(h.0)
    }

    /// Whether the head word is still `h` (every operation changes it).
    #[cfg_attr(tachyon_loom, allow(dead_code))]
    pub(crate) fn head_is(&self, h: u64) -> bool {
        self.head.load(Ordering::Acquire) == h
    }

    /// Whether the list reaches exactly the chunks of its class whose words
    /// say FREE, looked at while no operation is announced and the head
    /// stays the same (every operation changes it, and every change of a
    /// chunk to or from FREE happens inside an announcement, so an
    /// unchanged head means one list was seen). `false` only for a list
    /// that, unchanged throughout, reaches a chunk twice, a chunk that is
    /// not FREE or out of its class, or fewer chunks than read FREE: a link
    /// damaged into another valid-looking one, or into 0. `true` if it is
    /// whole, or if it changed meanwhile (another look will tell).
    #[cfg_attr(tachyon_loom, allow(dead_code))]
    pub(crate) fn intact(&self, pool: &Pool<'_>, range: &Range<u32>) -> bool {
        let h = Head(self.head.load(Ordering::Acquire));
        if h.kind() != NONE || range.end as usize > pool.metas.len() {
            return true; // an operation in flight (or a head `help` refuses)
        }
        let mut seen = vec![0u64; range.len().div_ceil(64)];
        let (mut top, mut reached, mut whole) = (h.top(), 0usize, true);
        while top != 0 {
            let Ok(idx) = check(range, pool, top - 1) else {
                whole = false;
                break;
            };
            let (k, meta) = ((idx - range.start) as usize, &pool.metas[idx as usize]);
            if seen[k / 64] & (1 << (k % 64)) != 0 || meta.word().state() != FREE {
                whole = false;
                break;
            }
            seen[k / 64] |= 1 << (k % 64);
            reached += 1;
            top = meta.next.load(Ordering::Acquire);
        }
        let free = range.clone().filter(|&i| pool.metas[i as usize].word().state() == FREE).count();
        !self.head_is(h.0) || (whole && free == reached)
    }

    /// Rebuilds the list from the chunks' own state words, for a list whose
    /// head or links are damaged (an operation on it failed). The caller
    /// holds the region's control mutex, so rebuilders take turns; live
    /// poppers and pushers do not take it, so the list is first *stopped*:
    /// an announcement that can be completed is completed, then one CAS
    /// puts [`REBUILDING`] in the head, on which every operation fails (its
    /// caller waits for the mutex and tries again). Then every chunk of the
    /// class whose word says FREE is chained, lowest index on top; a chunk
    /// whose word cannot be trusted (FREE with a holder, or held by
    /// something that is neither a token nor [`SHARED_HOLDER`]) is quarantined: LOANED by
    /// [`QUARANTINE`], never handed out. One CAS restarts the list.
    ///
    /// A rebuilder killed at any point leaves the list stopped (or already
    /// restarted), the chain half-linked (unreachable) and some chunks
    /// quarantined: the next rebuild starts over from the words, which
    /// every step left attributed.
    #[cfg_attr(tachyon_loom, allow(dead_code))]
    pub(crate) fn rebuild(&self, pool: &Pool<'_>, range: &Range<u32>) -> Result<Rebuilt, ()> {
        if range.end as usize > pool.metas.len() {
            return Err(());
        }
        // The restart CAS fails only if the stopped head was written meanwhile
        // (more damage): start over, a few times.
        for _ in 0..3 {
            if let Some(found) = self.rebuild_once(pool, range) {
                return Ok(found);
            }
        }
        Err(())
    }

    fn rebuild_once(&self, pool: &Pool<'_>, range: &Range<u32>) -> Option<Rebuilt> {
        let stopped = loop {
            let h = Head(self.head.load(Ordering::Acquire));
            if h.kind() == REBUILDING {
                break h; // a dead rebuilder's (the mutex says so): go on
            }
            if h.kind() != NONE && self.complete(pool, range, h).is_ok() {
                continue; // a sound announcement: done, look again
            }
            let stop = Head::new(0, REBUILDING, 0, h.next_tag());
            if self.head.compare_exchange(h.0, stop.0, Ordering::AcqRel, Ordering::Acquire).is_ok() {
                break stop;
            }
        };
        crate::platform::fault::point("pool-rebuild-stopped");
        let mut found = Rebuilt::default();
        let mut top = 0;
        for i in range.clone().rev() {
            let meta = &pool.metas[i as usize];
            let w = meta.word();
            let trusted = trusted_holder(w);
            if w.state() == FREE && trusted {
                meta.next.store(top, Ordering::Relaxed);
                top = i + 1;
                found.free += 1;
            } else if !trusted {
                let q = Word::new(w.tag(), LOANED, QUARANTINE);
                // Fails only if the word changed: then it was alive (a
                // recoverer's or holder's CAS), and the next rebuild sees it.
                if w == q || meta.cas(w, q) {
                    found.quarantined += 1;
                }
            }
        }
        // SYNC: the links above are published by this Release (AcqRel)
        // CAS; a popper reads them after its Acquire load of the head.
        let done = Head::new(top, NONE, 0, stopped.next_tag());
        self.head.compare_exchange(stopped.0, done.0, Ordering::AcqRel, Ordering::Acquire).ok()?;
        Some(found)
    }
}

/// `idx` if it lies in `range` and in `metas`.
fn check(range: &Range<u32>, pool: &Pool<'_>, idx: u32) -> Result<u32, ()> {
    if range.contains(&idx) && (idx as usize) < pool.metas.len() {
        Ok(idx)
    } else {
        Err(())
    }
}

#[cfg(all(test, not(tachyon_loom)))]
mod tests {
    use super::*;

    /// A rebuild leaves a chunk that consumer groups share (HELD by
    /// [`SHARED_HOLDER`]) alone: under the old rule (trust tokens only) it
    /// was quarantined, and the last group's release, whose CAS expects the
    /// SHARED word, could then never free it.
    #[test]
    fn a_rebuild_trusts_a_shared_chunk() {
        let metas: Vec<ChunkMeta> = (0..3).map(|_| ChunkMeta::new()).collect();
        let journal: Vec<AtomicU32> = (0..2).map(|s| AtomicU32::new(Token::new(s, 1).raw())).collect();
        let pool = Pool { metas: &metas, journal: &journal, batches: &[] };
        let list = FreeList::new();
        for i in 0..3 {
            list.push(&pool, &(0..3), i).unwrap();
        }
        let i = list.pop(&pool, &(0..3), Token::new(1, 1)).unwrap().unwrap();
        let loaned = metas[i as usize].word();
        let shared = loaned.with(HELD, SHARED_HOLDER);
        assert!(metas[i as usize].cas(loaned, shared));
        // A word no process writes is still quarantined.
        let j = list.pop(&pool, &(0..3), Token::new(1, 1)).unwrap().unwrap();
        let w = metas[j as usize].word();
        assert!(metas[j as usize].cas(w, w.with(HELD, 0x7D)));
        let found = list.rebuild(&pool, &(0..3)).unwrap();
        assert_eq!(found, Rebuilt { free: 1, quarantined: 1 });
        assert_eq!(metas[i as usize].word(), shared, "the SHARED chunk is untouched");
        assert_eq!(metas[j as usize].word().holder(), QUARANTINE);
        // The last group's release can still take it and free it.
        assert!(metas[i as usize].cas(shared, shared.with(LOANED, Token::new(1, 1).raw())));
        list.push(&pool, &(0..3), i).unwrap();
        assert_eq!(metas[i as usize].word().state(), FREE);
    }

    /// A chain pop hands out distinct chunks whose indices agree modulo 64
    /// (the filter of `claim_chain` says "maybe seen" for them, and the
    /// search says no), and stops at a link damaged into a loop.
    #[test]
    fn a_chain_pop_tells_a_loop_from_indices_alike_modulo_64() {
        let metas: Vec<ChunkMeta> = (0..130).map(|_| ChunkMeta::new()).collect();
        let journal: Vec<AtomicU32> = (0..2).map(|s| AtomicU32::new(Token::new(s, 1).raw())).collect();
        let batches = [ClassBatch { first: 0, chunks: 130, batch: 4 }];
        let pool = Pool { metas: &metas, journal: &journal, batches: &batches };
        let (range, me) = (0..130, Token::new(1, 1));
        // A chain is pushed by the process that holds its chunks.
        for i in [1, 65, 129, 2, 3, 67, 4] {
            let w = metas[i].word();
            assert!(metas[i].cas(w, Word::new(w.tag(), LOANED, me.raw())));
        }
        let list = FreeList::new();
        list.push_chain(&pool, &range, &[1, 65, 129, 2]).unwrap();
        let mut got = [0; MAX_CHAIN];
        assert_eq!(list.pop_chain(&pool, &range, me, &mut got), Ok(4));
        assert_eq!(got[..4], [1, 65, 129, 2]);

        let list = FreeList::new();
        list.push_chain(&pool, &range, &[3, 67, 4]).unwrap();
        // Damage: 67's link leads back to 3.
        metas[67].next.store(3 + 1, Ordering::Relaxed);
        let n = list.pop_chain(&pool, &range, me, &mut got).unwrap();
        assert_eq!(got[..n], [3, 67], "each chunk once, the loop cut");
    }
}

/// Loom models of the free list (`--cfg tachyon_loom`): no chunk is ever
/// held by two threads at once, none is lost, and an operation cut short
/// after its announcement is completed by others with the right holder.
#[cfg(all(test, tachyon_loom))]
mod loom_models {
    use super::*;
    use crate::sync::loom_model as model;
    use loom::sync::Arc;

    struct Model {
        list: FreeList,
        metas: Vec<ChunkMeta>,
        journal: Vec<AtomicU32>,
        /// 1 while a thread holds the chunk.
        held: Vec<AtomicU32>,
        /// The pool's pop batch, for the model's one class.
        batch: [ClassBatch; 1],
    }

    impl Model {
        fn new(n: u32) -> Arc<Model> {
            Self::with_batch(n, 1)
        }
        fn with_batch(n: u32, batch: u32) -> Arc<Model> {
            let m = Model {
                list: FreeList::new(),
                metas: (0..n).map(|_| ChunkMeta::new()).collect(),
                journal: (0..4).map(|s| AtomicU32::new(tok(s).raw())).collect(),
                held: (0..n).map(|_| AtomicU32::new(0)).collect(),
                batch: [ClassBatch { first: 0, chunks: n, batch }],
            };
            for i in 0..n {
                m.list.push(&m.pool(), &m.range(), i).unwrap();
            }
            Arc::new(m)
        }
        fn pool(&self) -> Pool<'_> {
            Pool { metas: &self.metas, journal: &self.journal, batches: &self.batch }
        }
        /// Pops a batch for `slot`, marking each chunk held (once).
        fn take_chain(&self, slot: usize) -> Vec<u32> {
            let mut got = [0; MAX_CHAIN];
            let n = self.list.pop_chain(&self.pool(), &self.range(), tok(slot), &mut got).expect("in range");
            for &i in &got[..n] {
                assert_eq!(self.held[i as usize].swap(1, Ordering::SeqCst), 0, "chunk {i} handed out twice");
                let w = self.metas[i as usize].word();
                assert_eq!((w.state(), w.holder()), (LOANED, tok(slot).raw()), "chunk {i} names its popper");
            }
            got[..n].to_vec()
        }
        /// Gives `chunks` back in one push.
        fn give_chain(&self, chunks: &[u32]) {
            for &i in chunks {
                assert_eq!(self.held[i as usize].swap(0, Ordering::SeqCst), 1);
            }
            self.list.push_chain(&self.pool(), &self.range(), chunks).unwrap();
        }
        fn range(&self) -> Range<u32> {
            0..self.metas.len() as u32
        }
        fn take(&self, slot: usize) -> Option<u32> {
            let i = self.list.pop(&self.pool(), &self.range(), tok(slot)).expect("in range")?;
            assert_eq!(self.held[i as usize].swap(1, Ordering::SeqCst), 0, "chunk {i} handed out twice");
            Some(i)
        }
        fn give(&self, i: u32) {
            assert_eq!(self.held[i as usize].swap(0, Ordering::SeqCst), 1);
            self.list.push(&self.pool(), &self.range(), i).unwrap();
        }
        /// A pop by `slot` that dies right after its announcement.
        fn die_popping(&self, slot: usize) -> Option<u32> {
            loop {
                let h = Head(self.list.head.load(Ordering::Acquire));
                if h.kind() != NONE {
                    self.list.complete(&self.pool(), &self.range(), h).unwrap();
                    continue;
                }
                if h.top() == 0 {
                    return None;
                }
                let a = Head::new(h.top(), POP, slot, h.next_tag());
                if self.list.head.compare_exchange(h.0, a.0, Ordering::AcqRel, Ordering::Acquire).is_ok() {
                    return Some(h.top() - 1);
                }
            }
        }
        /// A push of `i` that dies right after its announcement.
        fn die_pushing(&self, i: u32) {
            self.die_pushing_chain(&[i]);
        }
        /// A push of the chain `chunks` that dies right after its
        /// announcement.
        fn die_pushing_chain(&self, chunks: &[u32]) {
            for pair in chunks.windows(2) {
                self.metas[pair[0] as usize].next.store(pair[1] + 1, Ordering::Relaxed);
            }
            let last = *chunks.last().unwrap();
            loop {
                let h = Head(self.list.head.load(Ordering::Acquire));
                if h.kind() != NONE {
                    self.list.complete(&self.pool(), &self.range(), h).unwrap();
                    continue;
                }
                self.metas[last as usize].next.store(h.top(), Ordering::Relaxed);
                let a = Head::new(chunks[0] + 1, PUSH, chunks.len() - 1, h.next_tag());
                if self.list.head.compare_exchange(h.0, a.0, Ordering::AcqRel, Ordering::Acquire).is_ok() {
                    return;
                }
            }
        }
        /// Pops everything left (completing what is announced) and checks
        /// that every chunk is on the list exactly once with a FREE word,
        /// except `out` (held elsewhere).
        fn drain_and_check(&self, out: &[u32]) {
            self.list.help(&self.pool(), &self.range()).unwrap();
            let mut all = vec![];
            for i in 0..self.metas.len() as u32 {
                if !out.contains(&i) {
                    assert_eq!(self.metas[i as usize].word().state(), FREE, "chunk {i} free");
                }
            }
            let mut got = [0; MAX_CHAIN];
            loop {
                match self.list.pop_chain(&self.pool(), &self.range(), tok(3), &mut got).unwrap() {
                    0 => break,
                    n => all.extend_from_slice(&got[..n]),
                }
            }
            all.extend_from_slice(out);
            all.sort();
            let want: Vec<u32> = (0..self.metas.len() as u32).collect();
            assert_eq!(all, want, "every chunk is back, once");
        }
    }

    fn tok(slot: usize) -> Token {
        Token::new(slot, 1)
    }

    #[test]
    fn pop_push_races_hand_out_each_chunk_once() {
        model(|| {
            let p = Model::new(2);
            let t = {
                let p = p.clone();
                loom::thread::spawn(move || {
                    if let Some(i) = p.take(1) {
                        p.give(i);
                    }
                })
            };
            // The ABA shape: pop A, pop B, push A while the other thread
            // may hold a stale view of the head.
            let a = p.take(0);
            let b = p.take(0);
            if let Some(a) = a {
                p.give(a);
            }
            if let Some(b) = b {
                p.give(b);
            }
            t.join().unwrap();
            p.drain_and_check(&[]);
        });
    }

    #[test]
    fn a_pop_cut_short_is_completed_for_its_popper() {
        model(|| {
            let p = Model::new(2);
            let t = {
                let p = p.clone();
                loom::thread::spawn(move || {
                    if let Some(i) = p.take(1) {
                        p.give(i);
                    }
                })
            };
            let victim = p.die_popping(2);
            t.join().unwrap();
            p.list.help(&p.pool(), &p.range()).unwrap();
            let v = victim.expect("a chunk was free");
            let w = p.metas[v as usize].word();
            assert_eq!((w.state(), w.holder()), (LOANED, tok(2).raw()), "the dead popper holds it");
            // Recovery: the holder is dead, its chunk goes back.
            p.list.push(&p.pool(), &p.range(), v).unwrap();
            p.drain_and_check(&[]);
        });
    }

    #[test]
    fn a_push_cut_short_is_completed() {
        model(|| {
            let p = Model::new(2);
            let mine = p.take(0).unwrap();
            let t = {
                let p = p.clone();
                loom::thread::spawn(move || {
                    if let Some(i) = p.take(1) {
                        p.give(i);
                    }
                })
            };
            p.held[mine as usize].store(0, Ordering::SeqCst);
            p.die_pushing(mine);
            t.join().unwrap();
            p.drain_and_check(&[]);
        });
    }

    /// A rebuild (as after damage was found) races a thread popping and
    /// pushing: the stop completes the pop in flight for its popper, a push
    /// that meets the stopped list retries after the rebuild (as
    /// `free_shared` does), and afterwards every chunk is on the list once
    /// or held: none handed out twice, none lost.
    #[test]
    fn a_rebuild_racing_pops_and_pushes_loses_and_duplicates_nothing() {
        model(|| {
            let p = Model::new(2);
            let t = {
                let p = p.clone();
                loom::thread::spawn(move || {
                    let Ok(Some(i)) = p.list.pop(&p.pool(), &p.range(), tok(1)) else { return };
                    assert_eq!(p.held[i as usize].swap(1, Ordering::SeqCst), 0, "chunk {i} handed out twice");
                    assert_eq!(p.held[i as usize].swap(0, Ordering::SeqCst), 1);
                    while p.list.push(&p.pool(), &p.range(), i).is_err() {
                        loom::thread::yield_now(); // the rebuilder holds the mutex
                    }
                })
            };
            let found = p.list.rebuild(&p.pool(), &p.range()).unwrap();
            assert_eq!(found.quarantined, 0);
            t.join().unwrap();
            p.drain_and_check(&[]);
        });
    }

    /// The audit walk (`intact`) racing a thread that pops and pushes
    /// (and one that dies mid-pop, leaving an announcement) never calls a
    /// healthy list damaged: it either saw one list or saw the head move.
    /// Quiet again, a link cut short is found.
    #[test]
    fn the_audit_walk_never_calls_a_healthy_list_damaged() {
        model(|| {
            let p = Model::new(3);
            let t = {
                let p = p.clone();
                loom::thread::spawn(move || {
                    if let Some(i) = p.take(1) {
                        p.give(i);
                    }
                })
            };
            assert!(p.list.intact(&p.pool(), &p.range()), "a healthy list called damaged");
            t.join().unwrap();
            assert!(p.list.intact(&p.pool(), &p.range()));
            // Quiet: the top chunk's link cut to 0 loses the two below it.
            let top = Head(p.list.head.load(Ordering::SeqCst)).top() - 1;
            p.metas[top as usize].next.store(0, Ordering::SeqCst);
            assert!(!p.list.intact(&p.pool(), &p.range()), "a cut link not found");
        });
    }

    /// A damaged link (to a chunk in use) is refused by the pop that meets
    /// it, never handed out twice; the rebuild then chains exactly the free
    /// chunks and quarantines a word it cannot trust.
    #[test]
    fn a_damaged_link_is_refused_and_rebuilt() {
        model(|| {
            let p = Model::new(3);
            // The list is 2 -> 1 -> 0; chunk 2 goes into use.
            let a = p.take(0).unwrap();
            assert_eq!(a, 2);
            // Chunk 1, now on top, links to the chunk in use.
            p.metas[1].next.store(a + 1, Ordering::Relaxed);
            // Chunk 0: a word no process wrote (HELD by no token).
            p.metas[0].word.store(Word::new(0, HELD, 0).0, Ordering::Relaxed);
            let t = {
                let p = p.clone();
                loom::thread::spawn(move || {
                    // Takes chunk 1 (sound) or fails on the damage.
                    let r = p.list.pop(&p.pool(), &p.range(), tok(1));
                    if let Ok(Some(i)) = r {
                        assert_eq!(i, 1);
                    }
                    r
                })
            };
            let second = p.list.pop(&p.pool(), &p.range(), tok(2));
            let first = t.join().unwrap();
            // Nobody got chunk 2 (in use) or 0 (damaged).
            for r in [first, second] {
                assert!(matches!(r, Ok(Some(1)) | Ok(None) | Err(())), "{r:?}");
            }
            let found = p.list.rebuild(&p.pool(), &p.range()).unwrap();
            assert_eq!(found.quarantined, 1);
            let w = p.metas[0].word();
            assert_eq!((w.state(), w.holder()), (LOANED, QUARANTINE));
            // Chunk 1 is free again unless a pop took it.
            let held1 = p.metas[1].word().state() != FREE;
            assert_eq!(found.free, usize::from(!held1));
        });
    }

    /// A thread that pops a batch for `slot` and pushes it back in one
    /// chain.
    fn cycle_a_chain(p: &Arc<Model>, slot: usize) -> loom::thread::JoinHandle<()> {
        let p = p.clone();
        loom::thread::spawn(move || {
            let got = p.take_chain(slot);
            p.give_chain(&got);
        })
    }

    /// Chains: a thread popping a batch of two and pushing it back in one
    /// chain races another doing the same: no chunk is handed out twice,
    /// each names its popper, and all come back.
    #[test]
    fn chain_pops_and_pushes_hand_out_each_chunk_once() {
        model(|| {
            let p = Model::with_batch(3, 2);
            let t = cycle_a_chain(&p, 1);
            let got = p.take_chain(0);
            p.give_chain(&got);
            t.join().unwrap();
            p.drain_and_check(&[]);
        });
    }

    /// A chain pop cut short after its announcement is completed by
    /// others for its popper: both chunks of the batch are LOANED by it,
    /// with the announcement's tag, and nobody else got them.
    #[test]
    fn a_chain_pop_cut_short_is_completed_for_its_popper() {
        model(|| {
            let p = Model::with_batch(3, 2);
            let t = cycle_a_chain(&p, 1);
            let first = p.die_popping(2).expect("a chunk was free");
            t.join().unwrap();
            p.list.help(&p.pool(), &p.range()).unwrap();
            let w = p.metas[first as usize].word();
            assert_eq!((w.state(), w.holder()), (LOANED, tok(2).raw()), "the dead popper holds its first");
            let mut got = [0; MAX_CHAIN];
            let n = p.list.claim_chain(&p.pool(), &p.range(), first, w, &mut got);
            // Two, or one if the other thread held two when it announced.
            let dead: Vec<u32> =
                (0..3).filter(|&i| p.metas[i as usize].word().holder() == tok(2).raw()).collect();
            assert!(n >= 1 && n == dead.len(), "the dead popper's batch is what it holds: {n} of {dead:?}");
            for &i in &got[..n] {
                assert_eq!(
                    p.held[i as usize].load(Ordering::SeqCst),
                    0,
                    "chunk {i} also held by a live thread"
                );
            }
            // Recovery: the holder is dead, its chunks go back.
            p.list.push_chain(&p.pool(), &p.range(), &got[..n]).unwrap();
            p.drain_and_check(&[]);
        });
    }

    /// A chain push cut short after its announcement is completed by
    /// others: both chunks are FREE and on the list.
    #[test]
    fn a_chain_push_cut_short_is_completed() {
        model(|| {
            let p = Model::with_batch(3, 2);
            let mine = p.take_chain(0);
            assert_eq!(mine.len(), 2);
            let t = cycle_a_chain(&p, 1);
            for &i in &mine {
                p.held[i as usize].store(0, Ordering::SeqCst);
            }
            p.die_pushing_chain(&mine);
            t.join().unwrap();
            p.drain_and_check(&[]);
        });
    }
}
