//! `BroadcastBuffer`: a ring in which every reader sees every item, in
//! order, each reader with its own cursor.
//!
//! # Invariant
//!
//! Writers take turns through a robust [`Mutex`]; the holder writes position
//! `p = tail` into node `p % n` as a seqlock: the node's word goes to
//! `2p + 1` (being written), the bytes are stored, the word goes to `2p + 2`
//! (holds item `p`), and only then `tail` becomes `p + 1`. A reader at
//! cursor `c < tail` loads the word, copies the bytes, and loads the word
//! again: if both loads say `2c + 2`, the copy is item `c`; otherwise the
//! node was overwritten under it and the reader has fallen behind. All
//! shared bytes are read and written through atomics, so an overwrite
//! races nothing in the Rust memory model; it is only detected.
//!
//! Each reader owns an entry (token and cursor) in the reader table. With
//! [`Overflow::Block`] a writer does not write position `p` while a live
//! reader's cursor is `p - n` or less; a reader whose process died is
//! dropped from the table by the writer it blocks. With
//! [`Overflow::Overwrite`] writers never wait and a lagging reader skips to
//! the oldest item still there and is told how many it missed.
//!
//! A writer killed mid-item leaves `tail` unchanged: the next writer, which
//! gets the mutex with `owner_died`, writes the same position again.

use super::ring::Cell;
use crate::error::{Corruption, Error, Result};
use crate::platform::atomic::{fence, AtomicU32, AtomicU64, Ordering};
use crate::segment::{Kind, Segment, ShmSafe};
use crate::sync::{Liveness, Mutex, Token, WaitCell, WaitPolicy};
use std::time::{Duration, Instant};

const NODE_COUNT_OFF: usize = 0;
const NODE_SIZE_OFF: usize = 8;
const OVERFLOW_OFF: usize = 16;
const MUTEX_OFF: usize = 64;
const TAIL_OFF: usize = 128;
const NOT_EMPTY_OFF: usize = 192;
const NOT_FULL_OFF: usize = 256;
const READERS_OFF: usize = 320;
/// Most readers subscribed at once, across all processes.
pub const MAX_READERS: usize = 128;
const CELLS_OFF: usize = READERS_OFF + MAX_READERS * std::mem::size_of::<ReaderEntry>();
/// Most nodes a broadcast ring may have.
pub const MAX_NODES: usize = 1 << 30;

/// What a writer does when the slowest reader is a whole ring behind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Overflow {
    /// Wait (up to the write's timeout) until that reader moves on:
    /// back-pressure; no reader misses anything.
    #[default]
    Block,
    /// Overwrite its oldest item: writers never wait, a lagging reader is
    /// told how many items it missed.
    Overwrite,
}

/// One subscribed reader.
#[repr(C)]
struct ReaderEntry {
    /// The reader's segment token; 0 = free entry.
    owner: AtomicU32,
    _pad: AtomicU32,
    /// The next position the reader will read.
    cursor: AtomicU64,
}

// SAFETY: `repr(C)`, atomics only; any bits are valid.
unsafe impl ShmSafe for ReaderEntry {}

fn layout(nodes: usize, node_size: usize) -> Option<(usize, usize, usize)> {
    super::ring::nodes_layout(CELLS_OFF, nodes, node_size)
}

/// A broadcast ring between processes: every subscribed reader receives
/// every item, in order.
///
/// Any handle can write; [`subscribe`](Self::subscribe) gives a reader with
/// its own cursor. A reader that subscribes late starts at the newest item
/// already written (if any). See [`Overflow`] for what happens when a
/// reader falls a whole ring behind.
///
/// ```
/// use std::time::Duration;
/// use tachyon::primitives::{BroadcastBuffer, Overflow};
/// # let name = format!("doc-broadcast-{}", std::process::id());
/// let bus = BroadcastBuffer::create(&name, 8, 64, Overflow::Block)?;
/// let mut a = bus.subscribe()?;
/// let peer = BroadcastBuffer::open(&name)?; // usually in another process
/// let mut b = peer.subscribe()?;
/// bus.write(b"tick", None)?;
/// let mut buf = [0u8; 64];
/// let got = a.read(&mut buf, Some(Duration::from_secs(1)))?;
/// assert_eq!(&buf[..got.len], b"tick");
/// # let got = b.read(&mut buf, Some(Duration::from_secs(1)))?;
/// # assert_eq!((&buf[..got.len], got.missed), (&b"tick"[..], 0));
/// # Ok::<(), tachyon::Error>(())
/// ```
pub struct BroadcastBuffer {
    seg: Segment,
    nodes: usize,
    node_size: usize,
    stride: usize,
    data_off: usize,
    overflow: Overflow,
    policy: WaitPolicy,
}

/// What a [`BroadcastReader::read`] got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Received {
    /// Length of the item copied into the buffer.
    pub len: usize,
    /// Items this reader missed just before this one because writers
    /// overwrote them ([`Overflow::Overwrite`] only; otherwise 0).
    pub missed: u64,
}

impl BroadcastBuffer {
    /// Creates a broadcast ring of `node_count` nodes of `node_size` bytes.
    pub fn create(name: &str, node_count: usize, node_size: usize, overflow: Overflow) -> Result<Self> {
        if !(2..=MAX_NODES).contains(&node_count) {
            return Err(Error::invalid(format!("node_count must be 2 to {MAX_NODES}, not {node_count}")));
        }
        if node_size == 0 || node_size > u32::MAX as usize {
            return Err(Error::invalid(format!("node_size must be 1 to {}, not {node_size}", u32::MAX)));
        }
        let (_, _, total) = layout(node_count, node_size).ok_or_else(|| {
            Error::invalid(format!("{node_count} nodes of {node_size} bytes do not fit in memory"))
        })?;
        let seg = Segment::builder(name).kind(Kind::BROADCAST).size(total).create_with(|seg| {
            seg.get::<AtomicU64>(NODE_COUNT_OFF)?.store(node_count as u64, Ordering::Relaxed);
            seg.get::<AtomicU64>(NODE_SIZE_OFF)?.store(node_size as u64, Ordering::Relaxed);
            seg.get::<AtomicU64>(OVERFLOW_OFF)?.store(overflow as u64, Ordering::Relaxed);
            Ok(())
        })?;
        Self::from_segment(seg)
    }

    /// Opens an existing broadcast ring.
    pub fn open(name: &str) -> Result<Self> {
        Self::from_segment(Segment::builder(name).kind(Kind::BROADCAST).open()?)
    }

    /// Sets how this handle waits (default [`WaitPolicy::Hybrid`]).
    pub fn set_wait_policy(&mut self, policy: WaitPolicy) {
        self.policy = policy;
    }

    fn from_segment(seg: Segment) -> Result<Self> {
        let bad = |field, value| Error::corrupt(Corruption::BadField { field, value });
        let nodes = seg.get::<AtomicU64>(NODE_COUNT_OFF)?.load(Ordering::Relaxed);
        let node_size = seg.get::<AtomicU64>(NODE_SIZE_OFF)?.load(Ordering::Relaxed);
        let overflow = match seg.get::<AtomicU64>(OVERFLOW_OFF)?.load(Ordering::Relaxed) {
            0 => Overflow::Block,
            1 => Overflow::Overwrite,
            v => return Err(bad("overflow policy", v)),
        };
        if !(2..=MAX_NODES as u64).contains(&nodes) {
            return Err(bad("node_count", nodes));
        }
        if node_size == 0 || node_size > u64::from(u32::MAX) {
            return Err(bad("node_size", node_size));
        }
        let (nodes, node_size) = (nodes as usize, node_size as usize);
        let (data_off, stride, total) =
            layout(nodes, node_size).ok_or_else(|| bad("node_count", nodes as u64))?;
        if total != seg.size() {
            return Err(bad("broadcast ring size", seg.size() as u64));
        }
        Ok(BroadcastBuffer {
            seg,
            nodes,
            node_size,
            stride,
            data_off,
            overflow,
            policy: WaitPolicy::default(),
        })
    }

    /// Number of nodes: how far a reader may fall behind.
    pub fn node_count(&self) -> usize {
        self.nodes
    }

    /// Bytes per node: the largest item.
    pub fn node_size(&self) -> usize {
        self.node_size
    }

    /// The overflow policy chosen at create.
    pub fn overflow(&self) -> Overflow {
        self.overflow
    }

    /// Items written so far (the next position).
    pub fn written(&self) -> u64 {
        self.tail().load(Ordering::Acquire)
    }

    // The fixed offsets below are all in bounds and aligned: the segment's
    // size was checked against `layout` in `from_segment`. `get` re-checks,
    // so the `expect`s cannot fire on a validated ring.
    fn tail(&self) -> &AtomicU64 {
        self.seg.get(TAIL_OFF).expect("validated layout")
    }
    fn mutex(&self) -> &Mutex {
        self.seg.get(MUTEX_OFF).expect("validated layout")
    }
    fn wait_cell(&self, not_full: bool) -> &WaitCell {
        self.seg.get(if not_full { NOT_FULL_OFF } else { NOT_EMPTY_OFF }).expect("validated layout")
    }
    fn readers(&self) -> &[ReaderEntry] {
        self.seg.get_slice(READERS_OFF, MAX_READERS).expect("validated layout")
    }
    fn cell(&self, pos: u64) -> &Cell {
        let idx = (pos % self.nodes as u64) as usize;
        &self.seg.get_slice::<Cell>(CELLS_OFF, self.nodes).expect("validated layout")[idx]
    }
    fn node(&self, pos: u64) -> &[AtomicU64] {
        let idx = (pos % self.nodes as u64) as usize;
        self.seg.get_slice(self.data_off + idx * self.stride, self.stride / 8).expect("validated layout")
    }

    /// The smallest cursor of a live reader, dropping dead readers when
    /// `reap` is set (a system call per reader: slow path only).
    fn slowest(&self, reap: bool) -> Option<u64> {
        let mut min = None::<u64>;
        for e in self.readers() {
            let owner = e.owner.load(Ordering::SeqCst);
            if owner == 0 {
                continue;
            }
            if reap
                && Token::from_raw(owner).is_none_or(|t| self.seg.is_dead(t))
                && e.owner.compare_exchange(owner, 0, Ordering::SeqCst, Ordering::Relaxed).is_ok()
            {
                continue; // a dead reader: dropped
            }
            let c = e.cursor.load(Ordering::SeqCst);
            min = Some(min.map_or(c, |m| m.min(c)));
        }
        min
    }

    /// Writes one item to every reader. With [`Overflow::Block`], waits up
    /// to `timeout` for the slowest reader to make room.
    pub fn write(&self, item: &[u8], timeout: Option<Duration>) -> Result<()> {
        if item.len() > self.node_size {
            return Err(Error::MessageTooLarge {
                size: item.len(),
                max: self.node_size,
                hint: "create the buffer with larger nodes, or split the item",
            });
        }
        let deadline = timeout.map(|t| Instant::now() + t);
        let remaining = || deadline.map(|d| d.saturating_duration_since(Instant::now()));
        // A previous writer that died mid-item left `tail` where it was; we
        // simply write that position again.
        let _turn = self.mutex().lock(&self.seg, remaining())?;
        let pos = self.tail().load(Ordering::SeqCst);
        let n = self.nodes as u64;
        if self.overflow == Overflow::Block && pos >= n {
            let mut slice = Duration::from_millis(1);
            let mut reap = false;
            loop {
                let until = remaining().map_or(slice, |r| r.min(slice));
                let room = self.wait_cell(true).wait_until(self.policy, Some(until), || {
                    self.slowest(std::mem::take(&mut reap))
                        .is_none_or(|c| c.saturating_add(n) > pos)
                        .then_some(())
                });
                match room {
                    Ok(()) => break,
                    Err(Error::Timeout { .. }) if remaining().is_none_or(|r| !r.is_zero()) => {
                        reap = true; // still blocked after a while: is that reader dead?
                        slice = (slice * 2).min(Duration::from_millis(50));
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        let cell = self.cell(pos);
        cell.word.store(pos.wrapping_mul(2).wrapping_add(1), Ordering::Relaxed);
        fence(Ordering::Release);
        for (word, chunk) in self.node(pos).iter().zip(item.chunks(8)) {
            let mut b = [0u8; 8];
            b[..chunk.len()].copy_from_slice(chunk);
            word.store(u64::from_le_bytes(b), Ordering::Relaxed);
        }
        cell.len.store(item.len() as u64, Ordering::Relaxed);
        cell.word.store(pos.wrapping_mul(2).wrapping_add(2), Ordering::Release);
        self.tail().store(pos.wrapping_add(1), Ordering::SeqCst);
        self.wait_cell(false).notify_all();
        Ok(())
    }

    /// Subscribes a reader. It starts at the newest item already written,
    /// or at the first one to come if none was. [`Error::NoSpace`] if
    /// [`MAX_READERS`] readers are subscribed.
    pub fn subscribe(&self) -> Result<BroadcastReader<'_>> {
        let me = self.seg.token().raw();
        for reap in [false, true] {
            for (i, e) in self.readers().iter().enumerate() {
                let owner = e.owner.load(Ordering::SeqCst);
                let free = owner == 0 || (reap && Token::from_raw(owner).is_none_or(|t| self.seg.is_dead(t)));
                if !free {
                    continue;
                }
                // Write nothing into an entry before owning it. Until the
                // start cursor is stored, the entry shows a cursor at or
                // below any real position (0, or a dead reader's), which
                // only makes writers wait a moment longer.
                if e.owner.compare_exchange(owner, me, Ordering::SeqCst, Ordering::Relaxed).is_err() {
                    continue;
                }
                let start = self.tail().load(Ordering::SeqCst).saturating_sub(1);
                e.cursor.store(start, Ordering::SeqCst);
                self.wait_cell(true).notify_all();
                return Ok(BroadcastReader { bus: self, entry: i, cursor: start, missed: 0 });
            }
        }
        Err(Error::NoSpace { what: format!("all {MAX_READERS} reader entries are in use by live readers") })
    }
}

impl std::fmt::Debug for BroadcastBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BroadcastBuffer")
            .field("name", &self.seg.name())
            .field("node_count", &self.nodes)
            .field("node_size", &self.node_size)
            .field("overflow", &self.overflow)
            .finish()
    }
}

/// A subscribed reader of a [`BroadcastBuffer`], with its own cursor.
/// Dropping it unsubscribes.
pub struct BroadcastReader<'a> {
    bus: &'a BroadcastBuffer,
    entry: usize,
    cursor: u64,
    missed: u64,
}

impl BroadcastReader<'_> {
    /// The position of the next item this reader will get.
    pub fn position(&self) -> u64 {
        self.cursor
    }

    /// Copies the next item into `buf`, waiting up to `timeout` for one.
    /// If it is longer than `buf`, it stays next and the error is
    /// [`Error::MessageTooLarge`].
    pub fn read(&mut self, buf: &mut [u8], timeout: Option<Duration>) -> Result<Received> {
        let bus = self.bus;
        let n = bus.nodes as u64;
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            let c = self.cursor;
            let remaining = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            let tail = bus.wait_cell(false).wait_until(bus.policy, remaining, || {
                let t = bus.tail().load(Ordering::Acquire);
                (t > c).then_some(t)
            })?;
            if tail.wrapping_sub(c) > n {
                // Overwritten already: skip to the oldest item still there.
                self.move_to(tail - n, false);
                continue;
            }
            let cell = bus.cell(c);
            let before = cell.word.load(Ordering::Acquire);
            let want = c.wrapping_mul(2).wrapping_add(2);
            if before != want {
                if before > want {
                    // The node already holds a later item: `c` is gone.
                    self.move_to(c + 1, false);
                    continue;
                }
                if before + 1 == want {
                    // Item `c` is still being stored (only ever seen for a
                    // moment): look again, within the deadline.
                    if deadline.is_some_and(|d| Instant::now() >= d) {
                        return Err(Error::timeout("an item being written to the broadcast buffer", timeout));
                    }
                    std::hint::spin_loop();
                    continue;
                }
                return Err(Error::corrupt(Corruption::BadField {
                    field: "broadcast node word",
                    value: before,
                }));
            }
            let len = cell.len.load(Ordering::Relaxed);
            let fits = len as usize <= buf.len();
            if fits {
                for (word, chunk) in bus.node(c).iter().zip(buf[..len as usize].chunks_mut(8)) {
                    chunk.copy_from_slice(&word.load(Ordering::Relaxed).to_le_bytes()[..chunk.len()]);
                }
            }
            fence(Ordering::Acquire);
            if cell.word.load(Ordering::Relaxed) != before {
                // Overwritten while copying: `c` is gone.
                self.move_to(c + 1, false);
                continue;
            }
            if len as usize > bus.node_size {
                return Err(Error::corrupt(Corruption::BadField {
                    field: "broadcast item length",
                    value: len,
                }));
            }
            if !fits {
                return Err(Error::BufferTooSmall { item: len as usize, buffer: buf.len() });
            }
            self.move_to(c + 1, true);
            return Ok(Received { len: len as usize, missed: std::mem::take(&mut self.missed) });
        }
    }

    /// Moves the cursor to `pos`; items skipped on the way count as missed
    /// unless `read_one` (the item at the old cursor was just read).
    fn move_to(&mut self, pos: u64, read_one: bool) {
        self.missed =
            self.missed.saturating_add(pos.saturating_sub(self.cursor).saturating_sub(u64::from(read_one)));
        self.cursor = pos;
        self.bus.readers()[self.entry].cursor.store(pos, Ordering::SeqCst);
        self.bus.wait_cell(true).notify_all();
    }
}

impl Drop for BroadcastReader<'_> {
    fn drop(&mut self) {
        // The next owner starts from cursor 0 (see `subscribe`).
        self.bus.readers()[self.entry].cursor.store(0, Ordering::SeqCst);
        self.bus.readers()[self.entry].owner.store(0, Ordering::SeqCst);
        self.bus.wait_cell(true).notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Barrier};

    fn unique(tag: &str) -> String {
        use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
        static N: AtomicUsize = AtomicUsize::new(0);
        format!("unit-{tag}-{}-{}", std::process::id(), N.fetch_add(1, Relaxed))
    }

    /// A writer died right after marking the node of a reader's cursor as
    /// being rewritten: the reader counts that item as missed and goes on,
    /// and a later read honours its timeout (it used to spin).
    #[test]
    fn a_node_rewritten_by_a_dead_writer_counts_as_missed() {
        let name = unique("bc-dead-mid-item");
        let bus = BroadcastBuffer::create(&name, 2, 8, Overflow::Overwrite).unwrap();
        let mut r = bus.subscribe().unwrap();
        bus.write(&[10], None).unwrap();
        bus.write(&[11], None).unwrap();
        {
            let dying = BroadcastBuffer::open(&name).unwrap();
            let turn = dying.mutex().lock(&dying.seg, None).unwrap();
            let pos = dying.tail().load(Ordering::SeqCst);
            dying.cell(pos).word.store(2 * pos + 1, Ordering::Relaxed);
            std::mem::forget(turn); // dies holding the writers' mutex
        }
        let mut buf = [0u8; 8];
        assert_eq!(r.read(&mut buf, Some(Duration::from_secs(5))).unwrap(), Received { len: 1, missed: 1 });
        assert_eq!(buf[0], 11);
        assert!(matches!(r.read(&mut buf, Some(Duration::from_millis(20))), Err(Error::Timeout { .. })));
        // The next writer takes the mutex over and rewrites the position.
        bus.write(&[12], Some(Duration::from_secs(5))).unwrap();
        assert_eq!(r.read(&mut buf, Some(Duration::from_secs(5))).unwrap(), Received { len: 1, missed: 0 });
        assert_eq!(buf[0], 12);
    }

    /// Racing subscribers never leave a reader's shared cursor different
    /// from its own (a Block-mode writer must see where it really is).
    #[test]
    fn racing_subscribers_publish_their_own_cursor() {
        let bus = Arc::new(BroadcastBuffer::create(&unique("bc-sub-race"), 4, 8, Overflow::Block).unwrap());
        let barrier = Arc::new(Barrier::new(2));
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let (bus, barrier) = (Arc::clone(&bus), Arc::clone(&barrier));
                std::thread::spawn(move || {
                    for _ in 0..2000 {
                        barrier.wait();
                        let r = bus.subscribe().unwrap();
                        barrier.wait();
                        let shared = bus.readers()[r.entry].cursor.load(Ordering::SeqCst);
                        assert_eq!(shared, r.cursor);
                        barrier.wait();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
    }
}
