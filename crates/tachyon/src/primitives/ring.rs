//! The claim/commit protocol of the multi-producer multi-consumer ring
//! behind [`CircularBuffer`](crate::CircularBuffer), over plain memory (so
//! that `loom` can model it).
//!
//! # Invariant
//!
//! Positions are 64-bit counters: `tail` is the next position to write,
//! `head` the next to read. Position `p` lives in cell `p % n`. A cell's
//! `word` holds `(seq << 32) | tag`, where `seq` is the low 32 bits of a
//! position and `tag` is 0, [`TOMBSTONE`] or the [`Token`] of the process
//! working on the cell. For the cell of position `p` the states are, in
//! order:
//!
//! ```text
//! (p,   0)      free: the writer of p may claim it
//! (p,   W)      claimed by writer W, which is filling it
//! (p+1, 0)      full: a reader may claim it            (writer committed)
//! (p+1, TOMB)   full of nothing: readers skip it        (writer W died)
//! (p+1, R)      claimed by reader R, which is reading it
//! (p+n, 0)      free for the writer of p+n              (reader released)
//! ```
//!
//! Every transition is a compare-and-swap of the whole word, so exactly one
//! process makes it; a claimant owns the cell's bytes exclusively until it
//! moves the word on. `tail` and `head` only hint where to look: whoever
//! finds the cell at `tail` claimed or already written advances `tail`
//! (likewise `head`), so a claimant that dies before advancing them stalls
//! nobody. A claimant that dies while holding a cell is detected through
//! [`Liveness`] and its cell moved on by whoever waits on it: a dead writer's
//! cell becomes a tombstone (its item is lost), a dead reader's cell is
//! first taken over by the repairer (`(p+1, R) -> (p+1, repairer)`, so that
//! exactly one repairer handles the item, and a repairer that dies there is
//! repaired in turn), handed to the caller's `on_dead_read` (the bus
//! uses it to give the message back; a plain ring loses it: delivery is at
//! most once), and then freed.
//!
//! `seq` is 32 bits: the protocol stays correct as long as a process does
//! not stall between reading a word and its CAS for 2^32 positions (ABA),
//! and `n < 2^31`.

use crate::platform::atomic::{fence, AtomicU64, Ordering};
use crate::platform::trace;
use crate::sync::{Liveness, Token};

/// The tag of a cell whose writer died: readers skip it.
pub(crate) const TOMBSTONE: u32 = 0x8000_0000;

/// Positions, on their own cache lines.
#[repr(C)]
pub(crate) struct Cursors {
    pub tail: AtomicU64,
    _pad0: [u64; 7],
    pub head: AtomicU64,
    _pad1: [u64; 7],
}

impl Cursors {
    #[cfg(tachyon_loom)]
    pub(crate) fn new() -> Self {
        Cursors { tail: AtomicU64::new(0), _pad0: [0; 7], head: AtomicU64::new(0), _pad1: [0; 7] }
    }
}

/// One node's control word and item length.
#[repr(C)]
pub(crate) struct Cell {
    pub word: AtomicU64,
    pub len: AtomicU64,
}

impl Cell {
    /// The cell of position `i` in a fresh ring: free for writer `i`.
    #[cfg(tachyon_loom)]
    pub(crate) fn new(i: u64) -> Self {
        Cell { word: AtomicU64::new(join(i as u32, 0)), len: AtomicU64::new(0) }
    }
}

const fn join(seq: u32, tag: u32) -> u64 {
    ((seq as u64) << 32) | tag as u64
}

const fn split(w: u64) -> (u32, u32) {
    ((w >> 32) as u32, w as u32)
}

/// `seq - pos` as a signed distance (valid while `n < 2^31`).
fn dist(seq: u32, pos: u64) -> i32 {
    seq.wrapping_sub(pos as u32) as i32
}

/// Where the two sides of a ring sleep, and how.
#[cfg(not(tachyon_loom))]
pub(crate) struct Waits<'a> {
    /// Readers wait here for an item.
    pub not_empty: &'a crate::sync::WaitCell,
    /// Writers wait here for a free cell.
    pub not_full: &'a crate::sync::WaitCell,
    /// Spin, sleep, or both.
    pub policy: crate::sync::WaitPolicy,
    /// A flag (non-zero: closed) that ends a blocked claim with
    /// `Error::Closed` once nothing can be claimed (`CircularBuffer::close`).
    pub closed: Option<&'a crate::platform::atomic::AtomicU32>,
    /// Counts the dead claimants' cells repaired while waiting.
    pub repaired: Option<&'a AtomicU64>,
}

/// The layout of a ring whose `nodes` cells start at `cells_off`, each
/// followed (after the cells) by a node of `node_size` bytes padded to a
/// cache line: `(data offset, stride, total size)`, or `None` on overflow.
#[cfg(not(tachyon_loom))]
pub(crate) fn nodes_layout(
    cells_off: usize,
    nodes: usize,
    node_size: usize,
) -> Option<(usize, usize, usize)> {
    const LINE: usize = 64;
    let round_up = |v: usize| Some(v.checked_add(LINE - 1)? / LINE * LINE);
    let data_off = round_up(cells_off.checked_add(nodes.checked_mul(std::mem::size_of::<Cell>())?)?)?;
    let stride = round_up(node_size)?;
    Some((data_off, stride, data_off.checked_add(nodes.checked_mul(stride)?)?))
}

/// What a claim attempt found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Claim {
    /// The cell of `pos` (index `idx`) is the caller's.
    Got { pos: u64, idx: usize, len: u64 },
    /// Nothing to do now (ring full for a writer, empty for a reader);
    /// `blocker` is the live-or-dead claimant in the way, if any.
    Wait { blocker: Option<Token> },
    /// The next item is longer than the caller can take (readers only).
    TooLong { len: u64 },
    /// A word held a tag that is no token: the segment is damaged.
    Corrupt,
}

/// The ring protocol over a cursor pair and `n` cells.
pub(crate) struct Ring<'a> {
    pub cursors: &'a Cursors,
    pub cells: &'a [Cell],
}

impl Ring<'_> {
    fn n(&self) -> u64 {
        self.cells.len() as u64
    }

    fn cell(&self, pos: u64) -> (usize, &Cell) {
        let idx = (pos % self.n()) as usize;
        (idx, &self.cells[idx])
    }

    /// One attempt to claim the next free cell for writing.
    pub(crate) fn claim_write(&self, me: Token) -> Claim {
        loop {
            let pos = self.cursors.tail.load(Ordering::Acquire);
            let (idx, cell) = self.cell(pos);
            let w = cell.word.load(Ordering::Acquire);
            let (seq, tag) = split(w);
            let d = dist(seq, pos);
            if d == 0 && tag == 0 {
                if cell
                    .word
                    .compare_exchange(w, join(seq, me.raw()), Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
                {
                    self.advance(&self.cursors.tail, pos);
                    return Claim::Got { pos, idx, len: 0 };
                }
            } else if d >= 0 {
                // Claimed by another writer, or already written: the tail
                // is behind. Help it on and look again.
                self.advance(&self.cursors.tail, pos);
            } else {
                // The cell still holds the previous lap: the ring is full.
                if self.cursors.tail.load(Ordering::Acquire) != pos {
                    continue;
                }
                return match tag {
                    0 | TOMBSTONE => Claim::Wait { blocker: None },
                    t => match Token::from_raw(t) {
                        Some(t) => Claim::Wait { blocker: Some(t) },
                        None => Claim::Corrupt,
                    },
                };
            }
        }
    }

    /// Publishes a claimed cell with an item of `len` bytes. `false` if
    /// the claim is no longer ours (another process repaired the cell,
    /// judging its claimant dead): then nothing was published.
    pub(crate) fn commit_write(&self, pos: u64, idx: usize, len: u64, me: Token) -> bool {
        let cell = &self.cells[idx];
        cell.len.store(len, Ordering::Relaxed);
        cell.word
            .compare_exchange(
                join(pos as u32, me.raw()),
                join(pos.wrapping_add(1) as u32, 0),
                Ordering::Release,
                Ordering::Relaxed,
            )
            .is_ok()
    }

    /// One attempt to claim the next full cell for reading, if its item is
    /// at most `max_len` bytes long. Sets `freed` if it freed cells on the
    /// way (tombstones), so that the caller can wake writers.
    pub(crate) fn claim_read(&self, me: Token, max_len: u64, freed: &mut bool) -> Claim {
        loop {
            let pos = self.cursors.head.load(Ordering::Acquire);
            let (idx, cell) = self.cell(pos);
            let w = cell.word.load(Ordering::Acquire);
            let (seq, tag) = split(w);
            let d = dist(seq, pos.wrapping_add(1));
            if d == 0 {
                match tag {
                    0 => {
                        let len = cell.len.load(Ordering::Relaxed);
                        if len > max_len {
                            // Check that `len` belongs to this lap's item.
                            fence(Ordering::Acquire);
                            if cell.word.load(Ordering::Relaxed) == w {
                                return Claim::TooLong { len };
                            }
                            continue;
                        }
                        if cell
                            .word
                            .compare_exchange(w, join(seq, me.raw()), Ordering::AcqRel, Ordering::Relaxed)
                            .is_ok()
                        {
                            self.advance(&self.cursors.head, pos);
                            return Claim::Got { pos, idx, len };
                        }
                    }
                    TOMBSTONE => {
                        // A dead writer's cell: free it and move on.
                        *freed |= cell
                            .word
                            .compare_exchange(
                                w,
                                join(pos.wrapping_add(self.n()) as u32, 0),
                                Ordering::AcqRel,
                                Ordering::Relaxed,
                            )
                            .is_ok();
                        self.advance(&self.cursors.head, pos);
                    }
                    // Claimed by another reader: the head is behind.
                    _ => self.advance(&self.cursors.head, pos),
                }
            } else if d > 0 {
                // Already read: the head is behind.
                self.advance(&self.cursors.head, pos);
            } else {
                if self.cursors.head.load(Ordering::Acquire) != pos {
                    continue;
                }
                // Empty, or its writer is still filling it.
                return match (dist(seq, pos), tag) {
                    (0, t) if t != 0 => match Token::from_raw(t) {
                        Some(t) => Claim::Wait { blocker: Some(t) },
                        None => Claim::Corrupt,
                    },
                    _ => Claim::Wait { blocker: None },
                };
            }
        }
    }

    /// Frees a cell after its item was read. `false` if the claim is no
    /// longer ours (another process repaired the cell).
    pub(crate) fn finish_read(&self, pos: u64, idx: usize, me: Token) -> bool {
        self.cells[idx]
            .word
            .compare_exchange(
                join(pos.wrapping_add(1) as u32, me.raw()),
                join(pos.wrapping_add(self.n()) as u32, 0),
                Ordering::Release,
                Ordering::Relaxed,
            )
            .is_ok()
    }

    /// Repairs what a dead claimant left at the cell a waiter is stuck on:
    /// the cell at `tail` for writers, at `head` for readers. Returns
    /// whether something was repaired. Exactly one of several concurrent
    /// repairers succeeds (CAS); the others see the new state.
    #[cfg(tachyon_loom)]
    pub(crate) fn recover(&self, live: &dyn Liveness, writer_side: bool) -> bool {
        self.recover_with(live, writer_side, &|_, _| {})
    }

    /// [`recover`](Self::recover), handing the length word of an item a
    /// dead reader was reading to `on_dead_read` before its cell is freed.
    pub(crate) fn recover_with(
        &self,
        live: &dyn Liveness,
        writer_side: bool,
        on_dead_read: &dyn Fn(u64, Token),
    ) -> bool {
        let cursor = if writer_side { &self.cursors.tail } else { &self.cursors.head };
        let pos = cursor.load(Ordering::Acquire);
        // The cell that blocks: for a writer at `tail` it still holds the
        // previous lap, for a reader at `head` it is being written.
        let (_, cell) = self.cell(pos);
        let w = cell.word.load(Ordering::Acquire);
        let (seq, tag) = split(w);
        let Some(holder) = Token::from_raw(tag) else { return false };
        if !live.is_dead(holder) {
            return false;
        }
        trace::ring_repair!(holder, pos, writer_side);
        if dist(seq, pos) == 0 || dist(seq, pos.wrapping_sub(self.n())) == 0 {
            // A writer died filling the cell (this lap or the last one):
            // leave a tombstone for readers to skip.
            let new = join(seq.wrapping_add(1), TOMBSTONE);
            cell.word.compare_exchange(w, new, Ordering::AcqRel, Ordering::Relaxed).is_ok()
        } else if dist(seq, pos.wrapping_add(1)) == 0
            || dist(seq, pos.wrapping_sub(self.n()).wrapping_add(1)) == 0
        {
            // A reader died reading it.
            self.take_over_read(cell, w, live.token(), on_dead_read)
        } else {
            false
        }
    }

    /// Takes over the read claim `w` (of a dead reader) on `cell`, hands
    /// the item's length word and the dead reader to `on_dead_read`, and
    /// frees the cell. False
    /// if another repairer took it first.
    pub(crate) fn take_over_read(
        &self,
        cell: &Cell,
        w: u64,
        me: Token,
        on_dead_read: &dyn Fn(u64, Token),
    ) -> bool {
        let (seq, tag) = split(w);
        let Some(dead) = Token::from_raw(tag) else { return false };
        let mine = join(seq, me.raw());
        if cell.word.compare_exchange(w, mine, Ordering::AcqRel, Ordering::Relaxed).is_err() {
            return false;
        }
        on_dead_read(cell.len.load(Ordering::Relaxed), dead);
        let free = join(seq.wrapping_sub(1).wrapping_add(self.n() as u32), 0);
        cell.word.compare_exchange(mine, free, Ordering::Release, Ordering::Relaxed).is_ok()
    }

    /// Claims a cell (`writer`: for writing, else for reading an item of
    /// at most `max_len` bytes), sleeping on `waits` up to `timeout`. While
    /// blocked it asks `live`, after 1 ms and then at growing intervals up
    /// to 50 ms, whether the claimant in the way is dead, and repairs its
    /// cell if so (an item a dead reader held goes to `on_dead_read`).
    /// Returns `(position, cell index, length word)`.
    #[cfg(not(tachyon_loom))]
    pub(crate) fn claim_blocking(
        &self,
        live: &dyn Liveness,
        waits: &Waits<'_>,
        writer: bool,
        max_len: u64,
        timeout: Option<std::time::Duration>,
        on_dead_read: &dyn Fn(u64, Token),
    ) -> crate::Result<(u64, usize, u64)> {
        use crate::error::{Corruption, Error};
        use std::time::{Duration, Instant};
        let me = live.token();
        let freed = std::cell::Cell::new(false);
        let attempt = || {
            if writer {
                self.claim_write(me)
            } else {
                let mut f = false;
                let c = self.claim_read(me, max_len, &mut f);
                freed.set(freed.get() | f);
                c
            }
        };
        let own = if writer { waits.not_full } else { waits.not_empty };
        let done = |claim: Claim| -> Option<crate::Result<(u64, usize, u64)>> {
            match claim {
                Claim::Got { pos, idx, len } => Some(Ok((pos, idx, len))),
                Claim::TooLong { len } => {
                    Some(Err(Error::BufferTooSmall { item: len as usize, buffer: max_len as usize }))
                }
                Claim::Corrupt => {
                    Some(Err(Error::corrupt(Corruption::BadField { field: "ring cell tag", value: 0 })))
                }
                Claim::Wait { .. } => None,
            }
        };
        // The fast path: one attempt, no clock read, no system call.
        if let Some(r) = done(attempt()) {
            if freed.replace(false) {
                waits.not_full.notify_all();
            }
            return r;
        }
        let closed = || waits.closed.is_some_and(|c| c.load(Ordering::Acquire) != 0);
        if closed() {
            return Err(Error::Closed);
        }
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut slice = Duration::from_millis(1);
        loop {
            let slice_end = Instant::now() + slice;
            let until = deadline.map_or(slice_end, |d| d.min(slice_end));
            let got =
                own.wait_until(waits.policy, Some(until.saturating_duration_since(Instant::now())), || {
                    match attempt() {
                        Claim::Wait { .. } if closed() => Some(None),
                        Claim::Wait { .. } => None,
                        other => Some(Some(other)),
                    }
                });
            if freed.replace(false) {
                // Tombstones were cleared on the way: writers may go on.
                waits.not_full.notify_all();
            }
            match got {
                Ok(Some(claim)) => return done(claim).expect("only non-waiting claims end the wait"),
                Ok(None) => return Err(Error::Closed),
                Err(Error::Timeout { .. }) => {
                    if deadline.is_some_and(|d| Instant::now() >= d) {
                        return Err(Error::timeout(
                            if writer { "a free node in the ring" } else { "an item in the ring" },
                            timeout,
                        ));
                    }
                    // Still blocked after a while: is the blocker dead?
                    if self.recover_with(live, writer, on_dead_read) {
                        if let Some(r) = waits.repaired {
                            r.fetch_add(1, Ordering::Relaxed);
                        }
                        waits.not_full.notify_all();
                        waits.not_empty.notify_all();
                    }
                    slice = (slice * 2).min(Duration::from_millis(50));
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// `(word, reader)` if cell `idx` is claimed by a reader now. For
    /// rings whose size is a power of two (so that a 32-bit sequence tells
    /// the cell's lap phase).
    #[cfg(not(tachyon_loom))]
    pub(crate) fn read_claim(&self, idx: usize) -> Option<(u64, Token)> {
        let w = self.cells[idx].word.load(Ordering::Acquire);
        let (seq, tag) = split(w);
        if tag == 0 || tag == TOMBSTONE || u64::from(seq.wrapping_sub(1)) % self.n() != idx as u64 {
            return None;
        }
        Some((w, Token::from_raw(tag)?))
    }

    /// The length word of cell `idx` if it holds a committed item not yet
    /// released (unread or being read). Power-of-two rings, as `read_claim`.
    #[cfg(not(tachyon_loom))]
    pub(crate) fn committed(&self, idx: usize) -> Option<u64> {
        let cell = &self.cells[idx];
        let (seq, tag) = split(cell.word.load(Ordering::Acquire));
        (tag != TOMBSTONE && u64::from(seq.wrapping_sub(1)) % self.n() == idx as u64)
            .then(|| cell.len.load(Ordering::Relaxed))
    }

    fn advance(&self, cursor: &AtomicU64, from: u64) {
        let _ = cursor.compare_exchange(from, from.wrapping_add(1), Ordering::AcqRel, Ordering::Relaxed);
    }

    /// Items in the ring now (a snapshot; claimed cells count).
    #[cfg_attr(tachyon_loom, allow(dead_code))]
    pub(crate) fn len(&self) -> u64 {
        let tail = self.cursors.tail.load(Ordering::Acquire);
        let head = self.cursors.head.load(Ordering::Acquire);
        tail.saturating_sub(head).min(self.n())
    }
}

/// Loom models of the claim/commit protocol (`--cfg tachyon_loom`, run by
/// `.ci/test`): exactly-once delivery between concurrent writers and a
/// reader, and recovery of cells held by dead claimants.
#[cfg(all(test, tachyon_loom))]
mod loom_models {
    use super::*;
    use loom::cell::UnsafeCell;
    use loom::sync::Arc;

    struct Model {
        cursors: Cursors,
        cells: Vec<Cell>,
        data: Vec<UnsafeCell<u64>>,
    }

    impl Model {
        fn new(n: u64) -> Arc<Self> {
            Arc::new(Model {
                cursors: Cursors::new(),
                cells: (0..n).map(Cell::new).collect(),
                data: (0..n).map(|_| UnsafeCell::new(0)).collect(),
            })
        }
        fn ring(&self) -> Ring<'_> {
            Ring { cursors: &self.cursors, cells: &self.cells }
        }
        /// Writes `value`, repairing cells of the dead token in `live`.
        fn write(&self, me: Token, value: u64, live: &Dead) {
            loop {
                match self.ring().claim_write(me) {
                    Claim::Got { pos, idx, .. } => {
                        // SAFETY: the claim makes this cell's data ours
                        // until the commit; loom checks that no access races.
                        self.data[idx].with_mut(|p| unsafe { *p = value });
                        assert!(self.ring().commit_write(pos, idx, 8, me));
                        return;
                    }
                    Claim::Wait { .. } => {
                        self.ring().recover(live, true);
                        loom::thread::yield_now();
                    }
                    other => panic!("{other:?}"),
                }
            }
        }
        fn read(&self, me: Token, live: &Dead) -> u64 {
            loop {
                match self.ring().claim_read(me, 8, &mut false) {
                    Claim::Got { pos, idx, .. } => {
                        // SAFETY: the claim makes this cell's data ours
                        // until `finish_read`; loom checks the ordering.
                        let v = self.data[idx].with(|p| unsafe { *p });
                        assert!(self.ring().finish_read(pos, idx, me));
                        return v;
                    }
                    Claim::Wait { .. } => {
                        self.ring().recover(live, false);
                        loom::thread::yield_now();
                    }
                    other => panic!("{other:?}"),
                }
            }
        }
    }

    /// A liveness oracle in which exactly one token is dead.
    struct Dead(Token);

    impl Liveness for Dead {
        fn token(&self) -> Token {
            Token::new(0, 1)
        }
        fn is_dead(&self, token: Token) -> bool {
            token == self.0
        }
    }

    /// Bounded exploration: spin-and-yield loops make the full state
    /// space infinite; three preemptions find the classic interleaving bugs.
    fn model(f: impl Fn() + Sync + Send + 'static) {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(3);
        b.check(f);
    }

    #[test]
    fn two_writers_one_reader_exactly_once() {
        model(|| {
            let m = Model::new(2);
            let w = {
                let m = m.clone();
                loom::thread::spawn(move || m.write(Token::new(1, 1), 1, &Dead(Token::new(9, 1))))
            };
            let dead = Dead(Token::new(9, 1));
            m.write(Token::new(2, 1), 2, &dead);
            let a = m.read(Token::new(3, 1), &dead);
            let b = m.read(Token::new(3, 1), &dead);
            w.join().unwrap();
            let mut got = [a, b];
            got.sort();
            assert_eq!(got, [1, 2]);
        });
    }

    #[test]
    fn a_writer_and_a_reader_race_on_a_full_ring() {
        model(|| {
            let m = Model::new(2);
            let dead = Dead(Token::new(9, 1));
            m.write(Token::new(1, 1), 1, &dead);
            m.write(Token::new(1, 1), 2, &dead);
            // Full: the third write needs the reader to free a cell.
            let w = {
                let m = m.clone();
                loom::thread::spawn(move || m.write(Token::new(1, 1), 3, &Dead(Token::new(9, 1))))
            };
            let got: Vec<u64> = (0..3).map(|_| m.read(Token::new(3, 1), &dead)).collect();
            w.join().unwrap();
            assert_eq!(got, [1, 2, 3]);
        });
    }

    #[test]
    fn a_dead_writers_cell_is_skipped_exactly_once() {
        model(|| {
            let m = Model::new(2);
            let dead = Token::new(7, 1);
            // The dead writer claimed position 0 and never committed.
            assert!(matches!(m.ring().claim_write(dead), Claim::Got { pos: 0, .. }));
            m.write(Token::new(1, 1), 42, &Dead(dead));
            // A second process repairs concurrently with the reader.
            let r = {
                let m = m.clone();
                loom::thread::spawn(move || m.ring().recover(&Dead(dead), false))
            };
            assert_eq!(m.read(Token::new(2, 1), &Dead(dead)), 42);
            r.join().unwrap();
            // Nothing else is left: the tombstone was consumed, not delivered.
            assert!(matches!(
                m.ring().claim_read(Token::new(2, 1), 8, &mut false),
                Claim::Wait { blocker: None }
            ));
        });
    }

    #[test]
    fn a_dead_readers_cell_is_freed_exactly_once() {
        model(|| {
            let m = Model::new(2);
            let dead = Token::new(7, 1);
            m.write(Token::new(1, 1), 1, &Dead(dead));
            // The dead reader claimed position 0 and never released it.
            assert!(matches!(m.ring().claim_read(dead, 8, &mut false), Claim::Got { pos: 0, .. }));
            m.write(Token::new(1, 1), 2, &Dead(dead));
            // Position 2 maps onto the dead reader's cell: two processes
            // race to repair it while one of them writes.
            let r = {
                let m = m.clone();
                loom::thread::spawn(move || m.ring().recover(&Dead(dead), true))
            };
            let live = Dead(dead);
            m.write(Token::new(1, 1), 3, &live);
            r.join().unwrap();
            assert_eq!(m.read(Token::new(2, 1), &live), 2);
            assert_eq!(m.read(Token::new(2, 1), &live), 3);
        });
    }

    /// A dead reader of the previous lap blocks a reader at `head`
    /// (branch `dist(seq, pos - n + 1)` of `recover`), while a writer that
    /// needs the same cell repairs from the other side.
    #[test]
    fn a_dead_reader_of_the_last_lap_is_repaired_from_both_sides() {
        model(|| {
            let m = Model::new(2);
            let dead = Token::new(7, 1);
            let live = Dead(dead);
            m.write(Token::new(1, 1), 1, &live);
            m.write(Token::new(1, 1), 2, &live);
            assert!(matches!(m.ring().claim_read(dead, 8, &mut false), Claim::Got { pos: 0, .. }));
            assert_eq!(m.read(Token::new(2, 1), &live), 2);
            let w = {
                let m = m.clone();
                loom::thread::spawn(move || m.write(Token::new(1, 1), 3, &Dead(Token::new(7, 1))))
            };
            assert_eq!(m.read(Token::new(2, 1), &live), 3);
            w.join().unwrap();
            assert!(matches!(m.ring().claim_read(Token::new(2, 1), 8, &mut false), Claim::Wait { .. }));
        });
    }

    /// A dead writer of the previous lap blocks a writer at `tail`
    /// (branch `dist(seq, pos - n)`), a reader skips the tombstone.
    #[test]
    fn a_dead_writer_of_the_last_lap_blocks_a_writer_until_repaired() {
        model(|| {
            let m = Model::new(2);
            let dead = Token::new(7, 1);
            let live = Dead(dead);
            assert!(matches!(m.ring().claim_write(dead), Claim::Got { pos: 0, .. }));
            m.write(Token::new(1, 1), 2, &live);
            let w = {
                let m = m.clone();
                loom::thread::spawn(move || m.write(Token::new(1, 1), 3, &Dead(Token::new(7, 1))))
            };
            let r = {
                let m = m.clone();
                loom::thread::spawn(move || m.ring().recover(&Dead(Token::new(7, 1)), true))
            };
            assert_eq!(m.read(Token::new(2, 1), &live), 2);
            assert_eq!(m.read(Token::new(2, 1), &live), 3);
            w.join().unwrap();
            r.join().unwrap();
        });
    }
}
