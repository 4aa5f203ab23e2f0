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

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tachyon::Segment;

const HEAD_OFF: usize = 0;
const TAIL_OFF: usize = 128;
/// The slots may not start before this.
const MIN_DATA_OFF: usize = 256;

/// A raw ring of `nodes` slots of `size` bytes.
pub struct RawRing {
    seg: Segment,
    nodes: u64,
    size: usize,
    stride: usize,
    data_off: usize,
}

impl RawRing {
    /// `(stride, segment size)`.
    fn layout(nodes: usize, size: usize, data_off: usize) -> Result<(usize, usize), String> {
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
        let total = nodes.checked_mul(stride).and_then(|b| b.checked_add(data_off));
        Ok((stride, total.ok_or_else(|| format!("{nodes} slots of {size} bytes overflow"))?))
    }

    /// Creates the ring's segment, its slots starting `data_off` bytes
    /// into it.
    pub fn create(name: &str, nodes: usize, size: usize, data_off: usize) -> Result<RawRing, String> {
        let (stride, total) = Self::layout(nodes, size, data_off)?;
        let seg = Segment::create(name, total).map_err(|e| format!("cannot create the raw ring: {e}"))?;
        Ok(RawRing { seg, nodes: nodes as u64, size, stride, data_off })
    }

    /// Opens the ring another process created with this geometry.
    pub fn open(name: &str, nodes: usize, size: usize, data_off: usize) -> Result<RawRing, String> {
        let (stride, total) = Self::layout(nodes, size, data_off)?;
        let seg = Segment::open(name).map_err(|e| format!("cannot open the raw ring: {e}"))?;
        if seg.size() != total {
            return Err(format!("raw ring {name} has {} bytes, expected {total}", seg.size()));
        }
        Ok(RawRing { seg, nodes: nodes as u64, size, stride, data_off })
    }

    /// `(head, tail)`.
    fn cursors(&self) -> Result<(&AtomicU64, &AtomicU64), String> {
        let get = |off| self.seg.get::<AtomicU64>(off).map_err(|e| format!("raw ring cursor: {e}"));
        Ok((get(HEAD_OFF)?, get(TAIL_OFF)?))
    }

    fn slot(&self, i: u64) -> *mut u8 {
        let idx = (i % self.nodes) as usize;
        // SAFETY: `idx < nodes`, and the segment holds `data_off + nodes *
        // stride` bytes (checked at create/open), so the slot's `size <=
        // stride` bytes are inside the mapping.
        unsafe { self.seg.as_ptr().add(self.data_off + idx * self.stride) }
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
    next: u64,
    head: u64,
}

impl<'r> Writer<'r> {
    /// The writer of `ring` (there must be only one).
    pub fn new(ring: &'r RawRing) -> Result<Self, String> {
        let (shared_head, shared_tail) = ring.cursors()?;
        Ok(Writer { ring, shared_head, shared_tail, next: 0, head: 0 })
    }

    /// Copies `src` into the next slot, stamped with its sequence number,
    /// waiting (spinning) for a free slot.
    pub fn push(&mut self, src: &[u8], wait: &mut Patience<'_>) -> Result<(), String> {
        let ring = self.ring;
        assert_eq!(src.len(), ring.size, "writer buffer of the wrong size");
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
        let dst = ring.slot(self.next);
        let seq = self.next.to_le_bytes();
        // SAFETY: the slot of item `next` is the writer's until it stores
        // `tail = next + 1` below (see the invariant: `next - head < nodes`
        // was just checked); `src` is private memory of `size` bytes and the
        // slot holds `size >= MIN_ITEM` bytes (checked in `layout`), so all three copies stay in
        // bounds and do not overlap. No reference to shared memory is made.
        unsafe {
            std::ptr::copy_nonoverlapping(src.as_ptr(), dst, ring.size);
            std::ptr::copy_nonoverlapping(seq.as_ptr(), dst, 8);
            std::ptr::copy_nonoverlapping(seq.as_ptr(), dst.add(ring.size - 8), 8);
        }
        self.next += 1;
        self.shared_tail.store(self.next, Ordering::Release);
        Ok(())
    }
}

/// The reading end.
pub struct Reader<'r> {
    ring: &'r RawRing,
    shared_head: &'r AtomicU64,
    shared_tail: &'r AtomicU64,
    next: u64,
    tail: u64,
}

impl<'r> Reader<'r> {
    /// The reader of `ring` (there must be only one).
    pub fn new(ring: &'r RawRing) -> Result<Self, String> {
        let (shared_head, shared_tail) = ring.cursors()?;
        Ok(Reader { ring, shared_head, shared_tail, next: 0, tail: 0 })
    }

    /// Copies the next item into `dst` (of the ring's item size); the
    /// caller checks its stamps.
    pub fn pop(&mut self, dst: &mut [u8], wait: &mut Patience<'_>) -> Result<(), String> {
        let ring = self.ring;
        assert_eq!(dst.len(), ring.size, "reader buffer of the wrong size");
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
}
