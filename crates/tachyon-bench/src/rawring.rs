//! The reference transport: a plain single-producer single-consumer ring
//! of memcpys over shared memory, written here in a few lines. It is the
//! practical floor of any shared-memory transport on this machine: one
//! copy in, one copy out, two cursors, no claims, no lengths, no crash
//! recovery, no blocking other than spinning.
//!
//! # Invariant
//!
//! The ring lives in a tachyon [`Segment`] used as raw memory (the same
//! kind of memory, `/dev/shm`, as a `CircularBuffer`'s). `tail` counts the
//! items the one writer has published and `head` the items the one reader
//! has consumed; `0 <= tail - head <= nodes`, and item `i` lives in slot
//! `i % nodes`. The writer owns the slot of item `i` from the moment it sees
//! `head > i - nodes` until it stores `tail = i + 1` (Release); the reader
//! owns it from the moment it sees `tail > i` (Acquire) until it stores
//! `head = i + 1` (Release). Each side caches the other's cursor and reads
//! the shared one only when the cached value says "wait". The cursors sit
//! 128 bytes apart so that neither the line nor its prefetch pair is shared.
//!
//! The slots start at `data_off`, which the benchmark sets to where a
//! `CircularBuffer` of as many nodes puts its first node (see
//! [`circular_node_offset`]): the two transports then copy between
//! identically aligned addresses, and their difference is the protocol's.
//! (On the machine this was written on, page-aligned 1 MiB slots made the
//! raw ring 30 % slower than slots 384 bytes further on.)
//!
//! # The multi-producer variants ([`Kind::Mpmc`], [`Kind::CellClaim`], [`Kind::CellClaimCas`])
//!
//! The same ring run by Dmitry Vyukov's bounded MPMC protocol (the design
//! of crossbeam's `ArrayQueue`): each slot has a sequence word, and a side
//! claims a position by one compare-and-swap of its cursor, then hands the
//! slot over with a plain release store of the slot's word. It is the
//! floor of any ring that lets several processes write (or read) one
//! queue: one atomic read-modify-write per message per side, and nothing
//! else; no crash attribution (a side that dies holding a slot blocks the
//! ring for ever). Slot `i`'s word is `i` when free for the writer of
//! position `i`, `i + 1` when full, and becomes `i + nodes` when read. The
//! words sit in their own page(s) before the slots, whose start keeps its
//! offset within the page (see [`RawRing::data_off_for`]).
//!
//! [`Kind::CellClaim`] claims the slot's word instead of the cursor: a
//! compare-and-swap sets [`CLAIMED`] in the word, then the cursor moves on
//! (a compare-and-swap, as in tachyon's ring: whoever finds the slot taken
//! helps it on), and the hand-over is the same plain release store. This
//! is the shape of a ring whose every claimed slot can name its claimant
//! (tachyon's puts the claimant's token where this puts one bit, which a
//! recovering process reads): its floor, without the recovery itself. The
//! difference from [`Kind::Mpmc`] is where the read-modify-write lands: on
//! the line the other side polls, rather than on a line only this side
//! writes.
//!
//! [`Kind::CellClaimCas`] hands the slot over by a compare-and-swap from
//! the claimed word instead of a store, as tachyon's ring does: a claim
//! that another process repaired (the word was scribbled on and fixed)
//! then fails its hand-over rather than overwrite the repair.
//!
//! # The leased variants ([`Kind::Leased`], [`Kind::LeasedFenced`])
//!
//! The MPMC protocol's slot words without its claims: each end of the
//! ring is *leased* to one process at a time, so a side finds its next
//! slot by its own private position, waits for the slot's word to say
//! it is its turn (a load), and hands the slot over by a release store;
//! no locked instruction per message. What a lease costs its holder per
//! message is modelled too: a busy word on a line of its own, set before
//! the message and cleared after it (and while the side waits for its
//! slot, as the design's holder does), with a look at whether another
//! process asks for the lease in between (the light half of an asymmetric
//! fence, a compiler fence; the heavy half, a `membarrier`, would be run
//! by the process asking, which then waits for the busy word to clear);
//! a look, after each hand-over, at whether the other side sleeps (the
//! light half again: a sleeper would run the heavy half before it
//! sleeps); and the side's position stored to its record, a line nobody
//! reads while the lease is held, from which a successor would go on.
//! [`Kind::LeasedFenced`] puts a full fence before the look at the
//! sleeper's word instead, as tachyon's wake-up checks do today. This is
//! the floor of a design tachyon does not have (see
//! `docs/leases-design.md`); no request for a lease and no sleeper ever
//! happens in a run (a set request word fails it).
//!
//! # The chunk-pool variant ([`Kind::ChunkPool`])
//!
//! The floor of a zero-copy bus whose every chunk names its holder, as
//! tachyon's topics do: [`Kind::CellClaimCas`]'s ring, its cells 16 bytes
//! (the word and a descriptor, as a topic's), carrying the index of a
//! payload chunk instead of the payload. A chunk's state word, on a cache
//! line of its own, moves `FREE -> LOANED -> QUEUED -> HELD -> FREE` by
//! four compare-and-swaps: the producer takes a free chunk, fills it,
//! queues it and writes its index into a claimed cell; the consumer claims
//! the cell, takes the chunk (`HELD`), hands the cell back, copies the
//! payload out and frees the chunk. Free chunks travel back in batches of
//! [`BATCH`] through a return ring (one cursor store per batch), the ideal
//! of per-process magazines with a transfer cache: no shared free-list
//! head is touched per message. What it leaves out is what a real bus
//! adds on top: holders' tokens, recovery, wake-up checks, partitions,
//! and a free list several processes can share. The pool has
//! [`pool_chunks`] chunks, enough that the producer never waits for a
//! batch while the consumer holds a partial one: a chunk rests a lap of
//! the pool (over a thousand messages) before it is written again, so its
//! lines have left the consumer's private cache by then.
//!
//! [`Kind::ChunkPoolHot`] is the same with a pool of `4 * BATCH` chunks:
//! each chunk is written again within about a hundred messages, while the
//! consumer's core still holds its lines, as a topic's per-process caches
//! and last-in-first-out free lists reuse chunks. The producer waits for a
//! batch when the ring holds about 60 messages (in a stream the ring is
//! near empty: the consumer keeps up).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tachyon::Segment;

const HEAD_OFF: usize = 0;
const TAIL_OFF: usize = 128;
/// A [`Kind::Leased`] side's lease words, from its cursor (which is its
/// position record): the word it holds non-zero while inside a call, then
/// the word a would-be holder sets to ask for the lease, on the next line
/// of the cursor's pair, and beside it the word the side sets before it
/// sleeps, which the other side looks at after each hand-over (neither is
/// set in a benchmark run: what is measured is the looks).
const LEASE_BUSY: usize = 8;
const LEASE_WANTED: usize = 64;
const LEASE_ASLEEP: usize = 72;
/// The slots may not start before this.
const MIN_DATA_OFF: usize = 256;

/// Which protocol runs the ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// One writer, one reader, cached cursors: the floor.
    Spsc,
    /// Vyukov's bounded MPMC queue: a CAS of the cursor per claim, a store
    /// per hand-over.
    Mpmc,
    /// The same, the claim a CAS of the slot's word (then the cursor's).
    CellClaim,
    /// [`Kind::CellClaim`], the hand-overs CASes from the claimed word.
    CellClaimCas,
    /// [`Kind::CellClaimCas`] carrying chunk indices, each chunk's state
    /// word moved by four CASes per message, chunks returned in batches.
    ChunkPool,
    /// [`Kind::ChunkPool`] with a small pool: chunks reused hot.
    ChunkPoolHot,
    /// Per-slot words as [`Kind::Mpmc`]'s, each side holding a *lease*
    /// (the writer's or the reader's end, for the whole run) instead of
    /// claiming each slot: a load and a store of the slot's word per
    /// message; around each message, the side's busy word set and cleared
    /// and a look at whether the lease is wanted (the light half of an
    /// asymmetric fence, whose heavy half a would-be holder runs); each
    /// side's position stored to a line of its own (the record a successor
    /// would take over from); after each hand-over, a look at whether the
    /// other side sleeps (behind a compiler fence: the light half of an
    /// asymmetric fence, the sleeper running the heavy half before it
    /// sleeps). No locked instruction, no fence instruction per message.
    Leased,
    /// [`Kind::Leased`] with a full fence (`SeqCst`) before each look at
    /// whether the other side sleeps, as tachyon's wake-up checks do today
    /// (the sleeper's half is a plain store and a look).
    LeasedFenced,
}

impl Kind {
    /// The protocol of a topics-group reference transport.
    pub fn of(via: crate::topics::Via) -> Kind {
        use crate::topics::Via;
        match via {
            Via::MpmcRing => Kind::Mpmc,
            Via::CellClaimRing => Kind::CellClaim,
            Via::CellClaimCasRing => Kind::CellClaimCas,
            Via::ChunkPoolRing => Kind::ChunkPool,
            Via::ChunkPoolHotRing => Kind::ChunkPoolHot,
            Via::LeasedRing => Kind::Leased,
            Via::LeasedFencedRing => Kind::LeasedFenced,
            _ => Kind::Spsc,
        }
    }

    /// Whether the ring carries chunk indices ([`Kind::ChunkPool`],
    /// [`Kind::ChunkPoolHot`]).
    fn is_pool(self) -> bool {
        matches!(self, Kind::ChunkPool | Kind::ChunkPoolHot)
    }

    /// Whether each end is leased ([`Kind::Leased`], [`Kind::LeasedFenced`]).
    fn is_leased(self) -> bool {
        matches!(self, Kind::Leased | Kind::LeasedFenced)
    }
}

/// The bit a claim of the cell-claim rings ([`Kind::CellClaim`],
/// [`Kind::CellClaimCas`], [`Kind::ChunkPool`]) sets in a slot's word.
const CLAIMED: u64 = 1 << 63;

/// Chunks a [`Kind::ChunkPool`] consumer frees before it returns them to
/// the producer, in one cursor store.
pub const BATCH: usize = 32;

/// The chunks of a [`Kind::ChunkPool`] ring of `nodes` cells: the producer
/// can find none to take only if the ring and the consumer's partial batch
/// hold them all, which is more than `nodes + BATCH - 1`. A
/// [`Kind::ChunkPoolHot`] ring has at most `4 * BATCH`: the producer waits
/// for the consumer's next batch when the others are queued or held.
pub fn pool_chunks(kind: Kind, nodes: usize) -> usize {
    let whole = nodes + 2 * BATCH + 2;
    if kind == Kind::ChunkPoolHot {
        whole.min(4 * BATCH)
    } else {
        whole
    }
}

// A chunk's states in a [`Kind::ChunkPool`] ring (a topic's, less the
// holder's token).
const FREE: u64 = 0;
const LOANED: u64 = 1;
const QUEUED: u64 = 2;
const HELD: u64 = 3;

/// Where a [`Kind::ChunkPool`] ring keeps its metadata, in bytes from the
/// start of its segment: the cells (16 bytes: word, descriptor), the
/// chunks' state words (64 bytes apart), the return ring's cursor (on a
/// line pair of its own) and its slots. `end` is where they end.
#[derive(Debug, Clone, Copy)]
struct PoolLayout {
    chunks: usize,
    words: usize,
    ret_tail: usize,
    ret_slots: usize,
    end: usize,
}

impl PoolLayout {
    fn of(kind: Kind, nodes: usize) -> PoolLayout {
        let chunks = pool_chunks(kind, nodes);
        let words = (MIN_DATA_OFF + nodes * 16).div_ceil(64) * 64;
        let ret_tail = (words + chunks * 64).div_ceil(128) * 128;
        let ret_slots = ret_tail + 128;
        PoolLayout { chunks, words, ret_tail, ret_slots, end: ret_slots + chunks * 8 }
    }
}

/// A raw ring of `nodes` slots of `size` bytes.
pub struct RawRing {
    seg: Segment,
    kind: Kind,
    nodes: u64,
    size: usize,
    stride: usize,
    data_off: usize,
}

impl RawRing {
    /// `(stride, segment size)` of a ring of `kind` whose slots (or
    /// chunks) start at `data_off`.
    fn layout(kind: Kind, nodes: usize, size: usize, data_off: usize) -> Result<(usize, usize), String> {
        if nodes == 0 || size < crate::payload::MIN_ITEM {
            return Err(format!(
                "a raw ring needs nodes and items of at least {} bytes",
                crate::payload::MIN_ITEM
            ));
        }
        if data_off < MIN_DATA_OFF || data_off % 64 != 0 {
            return Err(format!("raw ring slots cannot start at {data_off}"));
        }
        let stride = size.div_ceil(64) * 64;
        let slots = if kind.is_pool() { pool_chunks(kind, nodes) } else { nodes };
        let total = slots.checked_mul(stride).and_then(|b| b.checked_add(data_off));
        Ok((stride, total.ok_or_else(|| format!("{nodes} slots of {size} bytes overflow"))?))
    }

    /// Where a ring of `kind` with `nodes` slots puts them, for an SPSC
    /// ring's `data_off`: the same place for [`Kind::Spsc`]; for the
    /// others, as many whole pages further on as their sequence words (and
    /// a chunk pool's metadata) need: the slots, or chunks, keep their
    /// offset within the page.
    pub fn data_off_for(kind: Kind, nodes: usize, data_off: usize) -> usize {
        let meta_end = match kind {
            Kind::Spsc => return data_off,
            Kind::Mpmc | Kind::CellClaim | Kind::CellClaimCas | Kind::Leased | Kind::LeasedFenced => {
                MIN_DATA_OFF + nodes * 8
            }
            Kind::ChunkPool | Kind::ChunkPoolHot => PoolLayout::of(kind, nodes).end,
        };
        data_off + meta_end.div_ceil(4096) * 4096
    }

    /// Creates the ring's segment, its slots starting `data_off` bytes
    /// into it.
    pub fn create(name: &str, nodes: usize, size: usize, data_off: usize) -> Result<RawRing, String> {
        Self::create_kind(Kind::Spsc, name, nodes, size, data_off)
    }

    /// [`create`](Self::create), run by the protocol `kind`; `data_off` as
    /// for an SPSC ring (see [`data_off_for`](Self::data_off_for)).
    pub fn create_kind(
        kind: Kind,
        name: &str,
        nodes: usize,
        size: usize,
        data_off: usize,
    ) -> Result<RawRing, String> {
        let data_off = Self::data_off_for(kind, nodes, data_off);
        let (stride, total) = Self::layout(kind, nodes, size, data_off)?;
        let seg = Segment::create(name, total).map_err(|e| format!("cannot create the raw ring: {e}"))?;
        let ring = RawRing { seg, kind, nodes: nodes as u64, size, stride, data_off };
        let step = ring.cell_step();
        for (i, word) in ring.seqs()?.iter().step_by(step).enumerate() {
            word.store(i as u64, Ordering::Relaxed);
        }
        if let Some(pool) = ring.pool()? {
            // Every chunk FREE (the segment starts zeroed) and waiting in
            // the return ring for the producer.
            for (i, slot) in pool.ret_slots.iter().enumerate() {
                slot.store(i as u64, Ordering::Relaxed);
            }
            pool.ret_tail.store(pool.ret_slots.len() as u64, Ordering::Release);
        }
        Ok(ring)
    }

    /// Opens the ring another process created with this geometry.
    pub fn open(name: &str, nodes: usize, size: usize, data_off: usize) -> Result<RawRing, String> {
        Self::open_kind(Kind::Spsc, name, nodes, size, data_off)
    }

    /// [`open`](Self::open) a ring of protocol `kind`.
    pub fn open_kind(
        kind: Kind,
        name: &str,
        nodes: usize,
        size: usize,
        data_off: usize,
    ) -> Result<RawRing, String> {
        let data_off = Self::data_off_for(kind, nodes, data_off);
        let (stride, total) = Self::layout(kind, nodes, size, data_off)?;
        let seg = Segment::open(name).map_err(|e| format!("cannot open the raw ring: {e}"))?;
        if seg.size() != total {
            return Err(format!("raw ring {name} has {} bytes, expected {total}", seg.size()));
        }
        Ok(RawRing { seg, kind, nodes: nodes as u64, size, stride, data_off })
    }

    /// The slots' sequence words (empty for an SPSC ring), one every
    /// [`cell_step`](Self::cell_step) words.
    fn seqs(&self) -> Result<&[AtomicU64], String> {
        let n = if self.kind == Kind::Spsc { 0 } else { self.nodes as usize * self.cell_step() };
        self.seg.get_slice::<AtomicU64>(MIN_DATA_OFF, n).map_err(|e| format!("raw ring sequence words: {e}"))
    }

    /// Words per cell: 2 for a chunk pool's (the word, then the
    /// descriptor), else 1.
    fn cell_step(&self) -> usize {
        if self.kind.is_pool() {
            2
        } else {
            1
        }
    }

    /// A [`Kind::ChunkPool`] ring's pool (`None` for the others).
    fn pool(&self) -> Result<Option<Pool<'_>>, String> {
        if !self.kind.is_pool() {
            return Ok(None);
        }
        let at = PoolLayout::of(self.kind, self.nodes as usize);
        let err = |e| format!("raw ring chunk pool: {e}");
        Ok(Some(Pool {
            words: self.seg.get_slice::<AtomicU64>(at.words, at.chunks * 8).map_err(err)?,
            ret_tail: self.seg.get::<AtomicU64>(at.ret_tail).map_err(err)?,
            ret_slots: self.seg.get_slice::<AtomicU64>(at.ret_slots, at.chunks).map_err(err)?,
        }))
    }

    /// Chunk `idx` of a [`Kind::ChunkPool`] ring, if there is one.
    fn chunk(&self, idx: u64) -> Result<*mut u8, String> {
        if idx >= pool_chunks(self.kind, self.nodes as usize) as u64 {
            return Err(format!("a cell names chunk {idx}, which the pool does not have"));
        }
        // SAFETY: `idx < pool_chunks(nodes)`, and the segment holds
        // `data_off + pool_chunks(nodes) * stride` bytes (checked at
        // create/open), so the chunk's `size <= stride` bytes are inside
        // the mapping.
        Ok(unsafe { self.seg.as_ptr().add(self.data_off + idx as usize * self.stride) })
    }

    /// `(head, tail)`.
    fn cursors(&self) -> Result<(&AtomicU64, &AtomicU64), String> {
        let get = |off| self.seg.get::<AtomicU64>(off).map_err(|e| format!("raw ring cursor: {e}"));
        Ok((get(HEAD_OFF)?, get(TAIL_OFF)?))
    }

    /// The slot index of position `i`: a mask where the node count is a
    /// power of two (a division is on every message's path, 10 – 40
    /// cycles, as in tachyon's ring, which masks too).
    fn index(&self, i: u64) -> usize {
        if self.nodes.is_power_of_two() {
            (i & (self.nodes - 1)) as usize
        } else {
            (i % self.nodes) as usize
        }
    }

    fn slot(&self, i: u64) -> *mut u8 {
        let idx = self.index(i);
        // SAFETY: `idx < nodes`, and the segment holds `data_off + nodes *
        // stride` bytes (checked at create/open), so the slot's `size <=
        // stride` bytes are inside the mapping.
        unsafe { self.seg.as_ptr().add(self.data_off + idx * self.stride) }
    }
}

/// A [`Kind::ChunkPool`] ring's chunk state words (one in 8, each on a
/// line of its own) and return ring.
struct Pool<'r> {
    words: &'r [AtomicU64],
    ret_tail: &'r AtomicU64,
    ret_slots: &'r [AtomicU64],
}

impl Pool<'_> {
    fn word(&self, idx: u64) -> &AtomicU64 {
        &self.words[idx as usize * 8]
    }

    /// Moves chunk `idx`'s state from `from` to `to` (`Acquire`: the last
    /// holder's writes are seen; `Release`: ours are handed on).
    fn hand(&self, idx: u64, from: u64, to: u64) -> Result<(), String> {
        self.word(idx)
            .compare_exchange(from, to, Ordering::AcqRel, Ordering::Relaxed)
            .map(drop)
            .map_err(|now| format!("chunk {idx} is in state {now}, not {from}"))
    }
}

/// Where a `CircularBuffer` of `nodes` nodes puts its first node, in bytes
/// from the start of its segment's data area (asked of a small one, so this
/// follows the library's layout whatever it becomes).
pub fn circular_node_offset(nodes: usize) -> Result<usize, String> {
    let name = format!("tachyon-bench-probe-{}-{nodes}", std::process::id());
    let ring = tachyon::CircularBuffer::create(&name, nodes, 64).map_err(|e| format!("layout probe: {e}"))?;
    let base = ring.segment().as_ptr() as usize;
    let off = ring
        .write_with(1, Some(Duration::ZERO), |node| node.as_ptr() as usize - base)
        .map_err(|e| format!("layout probe: {e}"))?;
    Ok(off.max(MIN_DATA_OFF).div_ceil(64) * 64)
}

/// Bounded spinning: calls `check` about every 100 µs of waiting and
/// fails once the wait exceeds `limit`.
pub struct Patience<'a> {
    limit: Duration,
    check: &'a mut dyn FnMut() -> Result<(), String>,
}

impl<'a> Patience<'a> {
    /// Waits of at most `limit` each; `check` (for example "is the peer
    /// still alive?") is called while waiting.
    pub fn new(limit: Duration, check: &'a mut dyn FnMut() -> Result<(), String>) -> Self {
        Patience { limit, check }
    }

    /// Spins until `ready()` is true, failing after the limit.
    #[cold]
    pub fn spin_until(&mut self, what: &str, mut ready: impl FnMut() -> bool) -> Result<(), String> {
        let start = Instant::now();
        let mut last_check = start;
        loop {
            for _ in 0..1024 {
                if ready() {
                    return Ok(());
                }
                std::hint::spin_loop();
            }
            let now = Instant::now();
            if now.duration_since(last_check) > Duration::from_millis(100) {
                (self.check)()?;
                last_check = now;
            }
            if now.duration_since(start) > self.limit {
                return Err(format!("waited {:?}: {what}", self.limit));
            }
        }
    }
}

/// The writing end.
pub struct Writer<'r> {
    ring: &'r RawRing,
    shared_head: &'r AtomicU64,
    shared_tail: &'r AtomicU64,
    seqs: &'r [AtomicU64],
    next: u64,
    head: u64,
    /// A chunk pool's: its words and return ring, the chunks taken from
    /// the return ring and how many of them are used, and how far the
    /// return ring was taken.
    pool: Option<Pool<'r>>,
    cache: Vec<u64>,
    used: usize,
    returned: u64,
    /// A leased ring's write lease.
    lease: Option<Lease<'r>>,
}

impl<'r> Writer<'r> {
    /// The writer of `ring` (there must be only one).
    pub fn new(ring: &'r RawRing) -> Result<Self, String> {
        let (shared_head, shared_tail) = ring.cursors()?;
        let (seqs, pool) = (ring.seqs()?, ring.pool()?);
        Ok(Writer {
            ring,
            shared_head,
            shared_tail,
            seqs,
            next: 0,
            head: 0,
            pool,
            cache: vec![],
            used: 0,
            returned: 0,
            lease: Lease::of(ring, TAIL_OFF)?,
        })
    }

    /// Copies `src` into the next slot, stamped with its sequence number,
    /// waiting (spinning) for a free slot.
    pub fn push(&mut self, src: &[u8], wait: &mut Patience<'_>) -> Result<(), String> {
        let ring = self.ring;
        assert_eq!(src.len(), ring.size, "writer buffer of the wrong size");
        if ring.kind.is_pool() {
            return self.push_chunk(src, wait);
        }
        if ring.kind.is_leased() {
            return self.push_leased(src, wait);
        }
        if ring.kind != Kind::Spsc {
            return self.push_mpmc(src, wait);
        }
        let head = self.shared_head;
        if self.next - self.head >= ring.nodes {
            self.head = head.load(Ordering::Acquire);
            if self.next - self.head >= ring.nodes {
                let (next, nodes) = (self.next, ring.nodes);
                let mut seen = self.head;
                wait.spin_until("the ring stayed full (is the reader stuck?)", || {
                    seen = head.load(Ordering::Acquire);
                    next - seen < nodes
                })?;
                self.head = seen;
            }
        }
        // SAFETY: the slot of item `next` is the writer's until it stores
        // `tail = next + 1` below (see the invariant: `next - head < nodes`
        // was just checked); `src` is private memory of `size` bytes and the
        // slot holds `size >= MIN_ITEM` bytes (checked in `layout`), so the
        // copies stay in bounds and do not overlap. No reference to shared
        // memory is made.
        unsafe { stamped_copy(src, ring.slot(self.next), self.next) };
        self.next += 1;
        self.shared_tail.store(self.next, Ordering::Release);
        Ok(())
    }

    /// [`push`](Self::push) by the MPMC protocols.
    fn push_mpmc(&mut self, src: &[u8], wait: &mut Patience<'_>) -> Result<(), String> {
        let ring = self.ring;
        let full = "the ring stayed full (is the reader stuck?)";
        let (pos, word) = claim_slot(ring, self.seqs, self.shared_tail, 0, full, wait)?;
        // SAFETY: the CAS of `tail` (or, claiming on the cell, of the slot's
        // word) from `pos` made position `pos` ours, and its slot's word
        // said free for it (Acquire: the last lap's reader is done): nobody
        // touches the slot until our Release store below.
        // Bounds as in `push`; no reference to shared memory is made.
        unsafe { stamped_copy(src, ring.slot(pos), pos) };
        hand_over(ring, word, pos, pos + 1);
        Ok(())
    }

    /// [`push`](Self::push) by the writer's lease: no claim, the slot's
    /// word is the writer's to move once it says free for `next`.
    fn push_leased(&mut self, src: &[u8], wait: &mut Patience<'_>) -> Result<(), String> {
        let ring = self.ring;
        self.lease.as_ref().ok_or("no lease")?.enter()?;
        let pos = self.next;
        let word = &self.seqs[ring.index(pos)];
        if word.load(Ordering::Acquire) != pos {
            let lease = self.lease.as_ref().ok_or("no lease")?;
            lease.pause();
            wait.spin_until("the ring stayed full (is the reader stuck?)", || {
                word.load(Ordering::Acquire) == pos
            })?;
            lease.enter()?;
        }
        // SAFETY: the slot's word says free for `pos` (Acquire: the last
        // lap's reader is done with it) and this writer holds the ring's
        // only write lease: nobody touches the slot until our Release
        // store below. Bounds as in `push`; no reference to shared memory
        // is made.
        unsafe { stamped_copy(src, ring.slot(pos), pos) };
        word.store(pos + 1, Ordering::Release);
        self.next += 1;
        self.lease.as_ref().ok_or("no lease")?.leave(self.next);
        Ok(())
    }

    /// [`push`](Self::push) through a chunk of the pool.
    fn push_chunk(&mut self, src: &[u8], wait: &mut Patience<'_>) -> Result<(), String> {
        let ring = self.ring;
        let idx = self.take_chunk(wait)?;
        let pool = self.pool.as_ref().ok_or("no chunk pool")?;
        pool.hand(idx, FREE, LOANED)?;
        let dst = ring.chunk(idx)?;
        // SAFETY: the chunk is LOANED by us (our CAS above): the consumer
        // freed it (Release) before returning it, and nobody touches it
        // until it is QUEUED and named by a cell. `src` is private memory
        // of `size` bytes and the chunk holds `stride >= size` bytes;
        // `next` counts this writer's messages (its only writer: a
        // stream's position). No reference to shared memory is made.
        unsafe { stamped_copy(src, dst, self.next) };
        self.next += 1;
        pool.hand(idx, LOANED, QUEUED)?;
        let full = "the ring stayed full (is the reader stuck?)";
        let (pos, word) = claim_slot(ring, self.seqs, self.shared_tail, 0, full, wait)?;
        self.seqs[ring.index(pos) * 2 + 1].store(idx, Ordering::Relaxed);
        hand_over(ring, word, pos, pos + 1);
        Ok(())
    }

    /// The next free chunk: from the batch taken last, or, when that is
    /// used up, from the batches the consumer returned since.
    fn take_chunk(&mut self, wait: &mut Patience<'_>) -> Result<u64, String> {
        if self.used == self.cache.len() {
            let pool = self.pool.as_ref().ok_or("no chunk pool")?;
            let (ret_tail, seen) = (pool.ret_tail, self.returned);
            let mut tail = ret_tail.load(Ordering::Acquire);
            if tail == seen {
                wait.spin_until("no chunk came back (is the reader stuck?)", || {
                    tail = ret_tail.load(Ordering::Acquire);
                    tail != seen
                })?;
            }
            let n = pool.ret_slots.len() as u64;
            self.cache.clear();
            self.cache.extend((seen..tail).map(|k| pool.ret_slots[(k % n) as usize].load(Ordering::Relaxed)));
            (self.used, self.returned) = (0, tail);
        }
        self.used += 1;
        Ok(self.cache[self.used - 1])
    }
}

/// Copies `src` to `dst`, stamped with `seq` in its first and last 8
/// bytes (see `payload::stamp`).
///
/// # Safety
///
/// `dst` is valid for writes of `src.len() >= 8` bytes, which nobody else
/// touches meanwhile and which do not overlap `src`.
unsafe fn stamped_copy(src: &[u8], dst: *mut u8, seq: u64) {
    let (seq, n) = (seq.to_le_bytes(), src.len());
    // SAFETY: the caller's promise; `n >= 8`, so both stamps lie within
    // the `n` bytes, and `seq` is a local.
    unsafe {
        std::ptr::copy_nonoverlapping(src.as_ptr(), dst, n);
        std::ptr::copy_nonoverlapping(seq.as_ptr(), dst, 8);
        std::ptr::copy_nonoverlapping(seq.as_ptr(), dst.add(n - 8), 8);
    }
}

/// The reading end.
pub struct Reader<'r> {
    ring: &'r RawRing,
    shared_head: &'r AtomicU64,
    shared_tail: &'r AtomicU64,
    seqs: &'r [AtomicU64],
    next: u64,
    tail: u64,
    /// A chunk pool's: its words and return ring, the chunks freed and
    /// not yet returned, and how many were returned in all.
    pool: Option<Pool<'r>>,
    freed: Vec<u64>,
    returned: u64,
    /// A leased ring's read lease.
    lease: Option<Lease<'r>>,
}

impl<'r> Reader<'r> {
    /// The reader of `ring` (there must be only one).
    pub fn new(ring: &'r RawRing) -> Result<Self, String> {
        let (shared_head, shared_tail) = ring.cursors()?;
        let (seqs, pool) = (ring.seqs()?, ring.pool()?);
        // The creator put every chunk in the return ring.
        let returned = pool.as_ref().map_or(0, |p| p.ret_slots.len() as u64);
        let freed = Vec::with_capacity(BATCH);
        let lease = Lease::of(ring, HEAD_OFF)?;
        Ok(Reader { ring, shared_head, shared_tail, seqs, next: 0, tail: 0, pool, freed, returned, lease })
    }

    /// Copies the next item into `dst` (of the ring's item size); the
    /// caller checks its stamps.
    pub fn pop(&mut self, dst: &mut [u8], wait: &mut Patience<'_>) -> Result<(), String> {
        let ring = self.ring;
        assert_eq!(dst.len(), ring.size, "reader buffer of the wrong size");
        if ring.kind.is_pool() {
            return self.pop_chunk(dst, wait);
        }
        if ring.kind.is_leased() {
            return self.pop_leased(dst, wait);
        }
        if ring.kind != Kind::Spsc {
            return self.pop_mpmc(dst, wait);
        }
        let tail = self.shared_tail;
        if self.tail == self.next {
            self.tail = tail.load(Ordering::Acquire);
            if self.tail == self.next {
                let next = self.next;
                let mut seen = self.tail;
                wait.spin_until("no item arrived (is the writer stuck?)", || {
                    seen = tail.load(Ordering::Acquire);
                    seen != next
                })?;
                self.tail = seen;
            }
        }
        // SAFETY: `tail > next` (Acquire), so the writer has finished the
        // slot of item `next` and will not touch it until we store `head =
        // next + 1`; `dst` is private memory of `size` bytes, the slot holds
        // `size` bytes. No reference to shared memory is made.
        unsafe { std::ptr::copy_nonoverlapping(ring.slot(self.next), dst.as_mut_ptr(), ring.size) };
        self.next += 1;
        self.shared_head.store(self.next, Ordering::Release);
        Ok(())
    }

    /// [`pop`](Self::pop) by the MPMC protocols.
    fn pop_mpmc(&mut self, dst: &mut [u8], wait: &mut Patience<'_>) -> Result<(), String> {
        let ring = self.ring;
        let empty = "no item arrived (is the writer stuck?)";
        let (pos, word) = claim_slot(ring, self.seqs, self.shared_head, 1, empty, wait)?;
        // SAFETY: the CAS of `head` (or of the slot's word) from `pos` made
        // position `pos` ours, and its slot's word said full (Acquire: its
        // writer is done): the next
        // lap's writer waits for our Release store below. Bounds as in
        // `pop`; no reference to shared memory is made.
        unsafe { std::ptr::copy_nonoverlapping(ring.slot(pos), dst.as_mut_ptr(), ring.size) };
        hand_over(ring, word, pos + 1, pos + ring.nodes);
        Ok(())
    }

    /// [`pop`](Self::pop) by the reader's lease: no claim, the slot's word
    /// is the reader's to move once it says full for `next`.
    fn pop_leased(&mut self, dst: &mut [u8], wait: &mut Patience<'_>) -> Result<(), String> {
        let ring = self.ring;
        self.lease.as_ref().ok_or("no lease")?.enter()?;
        let pos = self.next;
        let word = &self.seqs[ring.index(pos)];
        if word.load(Ordering::Acquire) != pos + 1 {
            let lease = self.lease.as_ref().ok_or("no lease")?;
            lease.pause();
            wait.spin_until("no item arrived (is the writer stuck?)", || {
                word.load(Ordering::Acquire) == pos + 1
            })?;
            lease.enter()?;
        }
        // SAFETY: the slot's word says full for `pos` (Acquire: its writer
        // is done) and this reader holds the ring's only read lease: the
        // next lap's writer waits for our Release store below. Bounds as
        // in `pop`; no reference to shared memory is made.
        unsafe { std::ptr::copy_nonoverlapping(ring.slot(pos), dst.as_mut_ptr(), ring.size) };
        word.store(pos + ring.nodes, Ordering::Release);
        self.next += 1;
        self.lease.as_ref().ok_or("no lease")?.leave(self.next);
        Ok(())
    }

    /// [`pop`](Self::pop) through a chunk of the pool.
    fn pop_chunk(&mut self, dst: &mut [u8], wait: &mut Patience<'_>) -> Result<(), String> {
        let ring = self.ring;
        let pool = self.pool.as_ref().ok_or("no chunk pool")?;
        let empty = "no item arrived (is the writer stuck?)";
        let (pos, word) = claim_slot(ring, self.seqs, self.shared_head, 1, empty, wait)?;
        let idx = self.seqs[ring.index(pos) * 2 + 1].load(Ordering::Relaxed);
        let src = ring.chunk(idx)?;
        pool.hand(idx, QUEUED, HELD)?;
        hand_over(ring, word, pos + 1, pos + ring.nodes);
        // SAFETY: the chunk is HELD by us (our CAS above, Acquire: its
        // producer's bytes are seen); nobody writes it until we free it
        // below. `dst` is private memory of `size` bytes, the chunk holds
        // `size` bytes. No reference to shared memory is made.
        unsafe { std::ptr::copy_nonoverlapping(src, dst.as_mut_ptr(), ring.size) };
        pool.hand(idx, HELD, FREE)?;
        self.freed.push(idx);
        if self.freed.len() == BATCH {
            let n = pool.ret_slots.len() as u64;
            for (k, &idx) in self.freed.iter().enumerate() {
                pool.ret_slots[((self.returned + k as u64) % n) as usize].store(idx, Ordering::Relaxed);
            }
            self.returned += BATCH as u64;
            // Release: the slots above, and the chunks' FREE words, before
            // the producer takes them.
            pool.ret_tail.store(self.returned, Ordering::Release);
            self.freed.clear();
        }
        Ok(())
    }
}

/// A [`Kind::Leased`] side's lease words: its position record (its
/// cursor), its busy word and the word that asks for its lease.
struct Lease<'r> {
    record: &'r AtomicU64,
    busy: &'r AtomicU64,
    wanted: &'r AtomicU64,
    /// The other side's word that says it sleeps.
    other_asleep: &'r AtomicU64,
    /// A full fence before the look at `other_asleep`.
    fenced: bool,
}

impl<'r> Lease<'r> {
    /// The lease of the side whose cursor is at `cursor` (`None` for a
    /// ring that is not leased).
    fn of(ring: &'r RawRing, cursor: usize) -> Result<Option<Lease<'r>>, String> {
        if !ring.kind.is_leased() {
            return Ok(None);
        }
        let get = |off| ring.seg.get::<AtomicU64>(off).map_err(|e| format!("raw ring lease word: {e}"));
        let other = if cursor == HEAD_OFF { TAIL_OFF } else { HEAD_OFF };
        Ok(Some(Lease {
            record: get(cursor)?,
            busy: get(cursor + LEASE_BUSY)?,
            wanted: get(cursor + LEASE_WANTED)?,
            other_asleep: get(other + LEASE_ASLEEP)?,
            fenced: ring.kind == Kind::LeasedFenced,
        }))
    }

    /// Before a message: the busy word set, then (in program order, a
    /// compiler fence: the light half of an asymmetric fence) a look at
    /// whether the lease is wanted, which fails the run if it is.
    #[inline]
    fn enter(&self) -> Result<(), String> {
        self.busy.store(1, Ordering::Relaxed);
        std::sync::atomic::compiler_fence(Ordering::SeqCst);
        if self.wanted.load(Ordering::Relaxed) != 0 {
            self.busy.store(0, Ordering::Release);
            return Err("another process asked for a lease of the leased ring".into());
        }
        Ok(())
    }

    /// Before a wait inside a call: the busy word cleared, so that a
    /// process asking for the lease need not wait for the wait to end
    /// ([`enter`](Self::enter) again after it).
    #[inline]
    fn pause(&self) {
        self.busy.store(0, Ordering::Release);
    }

    /// After a message: a look at whether the other side sleeps (it is
    /// never woken here: no benchmark side sleeps), the side's position
    /// recorded, then the busy word cleared.
    #[inline]
    fn leave(&self, next: u64) {
        if self.fenced {
            std::sync::atomic::fence(Ordering::SeqCst);
        } else {
            std::sync::atomic::compiler_fence(Ordering::SeqCst);
        }
        std::hint::black_box(self.other_asleep.load(Ordering::Relaxed));
        self.record.store(next, Ordering::Relaxed);
        self.busy.store(0, Ordering::Release);
    }
}

/// Claims the next position of `cursor` (the tail for a writer, `ready` 0;
/// the head for a reader, `ready` 1) by the ring's MPMC protocol: the
/// position `pos` whose slot word reads `pos + ready`. Returns `pos` and
/// its slot's word; waits (`what` if it waits too long) while the slot is
/// not ready.
fn claim_slot<'r>(
    ring: &RawRing,
    seqs: &'r [AtomicU64],
    cursor: &AtomicU64,
    ready: u64,
    what: &str,
    wait: &mut Patience<'_>,
) -> Result<(u64, &'r AtomicU64), String> {
    let on_cell =
        matches!(ring.kind, Kind::CellClaim | Kind::CellClaimCas | Kind::ChunkPool | Kind::ChunkPoolHot);
    let step = ring.cell_step();
    loop {
        let pos = cursor.load(Ordering::Relaxed);
        let word = &seqs[ring.index(pos) * step];
        let want = pos + ready;
        let seq = word.load(Ordering::Acquire);
        if seq == want {
            if on_cell {
                // Acquire: the slot's last hand-over happens before our use.
                if word.compare_exchange(want, want | CLAIMED, Ordering::Acquire, Ordering::Relaxed).is_ok() {
                    let _ = cursor.compare_exchange(pos, pos + 1, Ordering::Relaxed, Ordering::Relaxed);
                    return Ok((pos, word));
                }
            } else if cursor.compare_exchange_weak(pos, pos + 1, Ordering::Relaxed, Ordering::Relaxed).is_ok()
            {
                return Ok((pos, word));
            }
        } else if seq & !CLAIMED < want {
            // A writer's slot still holding the last lap's item (full), or
            // a reader's not written yet (empty).
            wait.spin_until(what, || {
                word.load(Ordering::Acquire) == want || cursor.load(Ordering::Relaxed) != pos
            })?;
        } else if on_cell {
            // Claimed by another claimant of this side, or done: the
            // cursor is behind; help it on.
            let _ = cursor.compare_exchange(pos, pos + 1, Ordering::Relaxed, Ordering::Relaxed);
        }
    }
}

/// Hands a claimed slot over (Release: our bytes before the next side's
/// use): its word from `ready` (claimed) to `next`, by a store, or for
/// [`Kind::CellClaimCas`] and [`Kind::ChunkPool`] by a CAS from the
/// claimed word (which succeeds: nothing here repairs a claim).
fn hand_over(ring: &RawRing, word: &AtomicU64, ready: u64, next: u64) {
    if matches!(ring.kind, Kind::CellClaimCas | Kind::ChunkPool | Kind::ChunkPoolHot) {
        let _ = word.compare_exchange(ready | CLAIMED, next, Ordering::Release, Ordering::Relaxed);
    } else {
        word.store(next, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::payload;

    const KINDS: [Kind; 8] = [
        Kind::Spsc,
        Kind::Mpmc,
        Kind::CellClaim,
        Kind::CellClaimCas,
        Kind::ChunkPool,
        Kind::ChunkPoolHot,
        Kind::Leased,
        Kind::LeasedFenced,
    ];

    fn ring(kind: Kind, tag: &str) -> (RawRing, String) {
        let name = format!("tachyon-bench-rawring-{tag}-{kind:?}-{}", std::process::id());
        let _ = Segment::remove(&name);
        let ring = RawRing::create_kind(kind, &name, 64, 64, MIN_DATA_OFF).expect("ring");
        (ring, name)
    }

    #[test]
    fn every_kind_carries_a_stream_whole_and_in_order() {
        for kind in KINDS {
            let (ring, name) = ring(kind, "stream");
            let n = 20_000u64;
            std::thread::scope(|s| {
                s.spawn(|| {
                    let mut writer = Writer::new(&ring).expect("writer");
                    let mut ok = || Ok(());
                    let mut wait = Patience::new(Duration::from_secs(20), &mut ok);
                    let buf = payload::buffer(64);
                    for _ in 0..n {
                        writer.push(&buf, &mut wait).expect("push");
                    }
                });
                let mut reader = Reader::new(&ring).expect("reader");
                let mut ok = || Ok(());
                let mut wait = Patience::new(Duration::from_secs(20), &mut ok);
                let mut got = vec![0; 64];
                for seq in 0..n {
                    reader.pop(&mut got, &mut wait).expect("pop");
                    payload::check(&got, seq).unwrap_or_else(|e| panic!("{kind:?}: {e}"));
                }
            });
            drop(ring);
            let _ = Segment::remove(&name);
        }
    }

    #[test]
    fn a_leased_side_whose_lease_is_asked_for_stops() {
        let (ring, name) = ring(Kind::Leased, "wanted");
        let mut ok = || Ok(());
        let mut wait = Patience::new(Duration::from_secs(5), &mut ok);
        let (buf, mut got) = (payload::buffer(64), vec![0; 64]);
        let mut writer = Writer::new(&ring).expect("writer");
        let mut reader = Reader::new(&ring).expect("reader");
        writer.push(&buf, &mut wait).expect("push");
        let ask = |off| ring.seg.get::<AtomicU64>(off).expect("word").store(1, Ordering::Relaxed);
        ask(TAIL_OFF + LEASE_WANTED);
        let e = writer.push(&buf, &mut wait).expect_err("a wanted write lease");
        assert!(e.contains("asked for a lease"), "{e}");
        reader.pop(&mut got, &mut wait).expect("the first item");
        payload::check(&got, 0).expect("the first item whole");
        ask(HEAD_OFF + LEASE_WANTED);
        let e = reader.pop(&mut got, &mut wait).expect_err("a wanted read lease");
        assert!(e.contains("asked for a lease"), "{e}");
        drop(writer);
        drop(reader);
        drop(ring);
        let _ = Segment::remove(&name);
    }
}
