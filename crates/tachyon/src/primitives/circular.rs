//! `CircularBuffer`: a ring of fixed-size nodes shared by any number of
//! writers and readers in any processes; each item goes to exactly one
//! reader. The lock-free protocol is in [`ring`](crate::sync::ring).

use crate::platform::copy;
use crate::error::{Corruption, Error, Result};
use crate::segment::{Kind, Segment};
use crate::sync::ring::{Cell, Cursors, Ring, Waits, TOMBSTONE};
use crate::sync::{WaitCell, WaitPolicy};
use std::ptr::NonNull;
use std::time::Duration;

// Layout of the data area.
const NODE_COUNT_OFF: usize = 0;
const NODE_SIZE_OFF: usize = 8;
/// Non-zero once [`CircularBuffer::close`] was called (u32).
const CLOSED_OFF: usize = 16;
/// Cells of dead claimants repaired so far (u64).
const REPAIRED_OFF: usize = 24;
/// The ring's options, set at creation (u64, the third geometry word):
/// [`LIGHT`] or 0. Rings made before it existed read 0.
const FLAGS_OFF: usize = 32;
/// [`CircularBufferBuilder::light_handovers`].
const LIGHT: u64 = 1;
const CURSORS_OFF: usize = 64;
const NOT_EMPTY_OFF: usize = 192;
const NOT_FULL_OFF: usize = 256;
/// The item whose hand-back wakes the writers sleeping for room (u64, a
/// hint: `Ring::wake_writers`); rings made before it existed read 0,
/// which wakes at every hand-back as before.
const ROOM_AT_OFF: usize = 264;
const CELLS_OFF: usize = 320;
/// Most nodes a ring may have (the protocol needs `n < 2^31`).
pub const MAX_NODES: usize = 1 << 30;

/// A snapshot of a [`CircularBuffer`]'s state, from
/// [`CircularBuffer::stats`]. The counts are read cell by cell while
/// other processes go on, so they need not add up exactly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct RingStats {
    /// How many items the ring holds when full: `node_count`.
    pub capacity: usize,
    /// Items written and not yet claimed by a reader.
    pub queued: usize,
    /// Nodes a writer has claimed and is filling now.
    pub being_written: usize,
    /// Nodes a reader has claimed and is reading now.
    pub being_read: usize,
    /// Nodes whose writer died (or panicked) mid-item and that readers
    /// have not skipped yet.
    pub abandoned: usize,
    /// Nodes left claimed by a dead process that waiters have repaired
    /// since the ring was created (all processes together).
    pub repaired: u64,
    /// Whether [`CircularBuffer::close`] was called.
    pub closed: bool,
}

/// `(data offset, stride, total size)` of a ring with this geometry.
fn layout(nodes: usize, node_size: usize) -> Option<(usize, usize, usize)> {
    crate::sync::ring::nodes_layout(CELLS_OFF, nodes, node_size)
}

/// A bounded multi-producer multi-consumer queue of byte items between
/// processes, each item at most `node_size` bytes, at most `node_count`
/// items queued.
///
/// * Lock-free: a writer or reader claims a node with one compare-and-swap
///   on the node's sequence word, then copies without any lock.
/// * Capacity is exactly `node_count` items: every node is usable.
/// * No system call on the fast path; waiting follows the [`WaitPolicy`]
///   (default [`WaitPolicy::Hybrid`]), and every timeout is a deadline for
///   the whole call. `Err(Error::Timeout { .. })` is never confused with an empty
///   item: zero-length items are items.
/// * A process killed while it holds a node does not wedge the ring: whoever
///   waits on that node notices the death (its attach slot is gone) within
///   about 50 ms and moves the node on. The crash loses at most the one
///   item that process was writing or reading.
/// * [`close`](Self::close) ends the ring for every process: writers get
///   [`Error::Closed`] at once, readers get the items still queued and then
///   [`Error::Closed`]; blocked calls wake.
///
/// ```
/// use std::time::Duration;
/// use tachyon::CircularBuffer;
/// # let name = format!("doc-circular-{}", std::process::id());
/// let ring = CircularBuffer::create(&name, 4, 64)?;
/// let peer = CircularBuffer::open(&name)?; // usually in another process
/// ring.write(b"hello", Some(Duration::from_millis(100)))?;
/// let mut buf = [0u8; 64];
/// let n = peer.read(&mut buf, Some(Duration::from_millis(100)))?;
/// assert_eq!(&buf[..n], b"hello");
/// assert_eq!(peer.try_read(&mut buf)?, None); // empty now
/// assert!(matches!(peer.read(&mut buf, Some(Duration::ZERO)), Err(tachyon::Error::Timeout { .. })));
/// # Ok::<(), tachyon::Error>(())
/// ```
pub struct CircularBuffer {
    seg: Segment,
    nodes: usize,
    node_size: usize,
    stride: usize,
    data_off: usize,
    cursors: NonNull<Cursors>,
    cells: NonNull<Cell>,
    policy: WaitPolicy,
    /// [`CircularBufferBuilder::light_handovers`], read from the ring.
    light: bool,
    /// [`CircularBufferBuilder::batch_reads`]: this handle's.
    batch_reads: bool,
}

// SAFETY: the pointers point into `seg`'s mapping, which lives as long as
// `self`; the shared state behind them is only touched atomically or under
// an exclusive node claim.
unsafe impl Send for CircularBuffer {}
// SAFETY: as above.
unsafe impl Sync for CircularBuffer {}

/// Options for [`CircularBuffer`], from [`CircularBuffer::builder`].
///
/// On [`create_or_open`](Self::create_or_open) and [`open`](Self::open),
/// the geometry set on the builder is checked against the existing ring
/// ([`Error::Incompatible`] names the field that differs); what is left
/// unset is taken from the ring.
///
/// ```
/// use tachyon::{CircularBuffer, Error};
/// # let name = format!("doc-circular-builder-{}", std::process::id());
/// let ring = CircularBuffer::builder(&name).node_count(8).node_size(256).create_or_open()?;
/// let same = CircularBuffer::builder(&name).node_count(8).create_or_open()?; // opens
/// assert_eq!(same.node_size(), 256);
/// let err = CircularBuffer::builder(&name).node_count(16).create_or_open().unwrap_err();
/// assert!(matches!(err, Error::Incompatible { field: "node_count", .. }));
/// # drop((ring, same));
/// # Ok::<(), tachyon::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct CircularBufferBuilder {
    name: String,
    nodes: usize,
    node_size: usize,
    /// Which of (node_count, node_size, light hand-overs) the caller set.
    set: (bool, bool, bool),
    policy: WaitPolicy,
    light: bool,
    batch_reads: bool,
}

impl CircularBufferBuilder {
    /// Number of nodes (at least 2; default 64).
    pub fn node_count(mut self, n: usize) -> Self {
        self.nodes = n;
        self.set.0 = true;
        self
    }

    /// Bytes per node: the largest item (at least 1; default 4096).
    pub fn node_size(mut self, size: usize) -> Self {
        self.node_size = size;
        self.set.1 = true;
        self
    }

    /// How this handle waits (default [`WaitPolicy::Hybrid`]).
    pub fn wait_policy(mut self, policy: WaitPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// Batch reads for this handle (default off): a read that catches up
    /// with a writer in the middle of a stream of small items (the head's
    /// node being written, and its writer going straight on to the next)
    /// first waits until that writer is a batch of items ahead (an eighth
    /// of the ring, at most 32 items and 2 KiB of them; none for items of
    /// more than 256 bytes or rings of fewer than 64 nodes), then reads them
    /// one by one as before. A read that takes each item the moment it is
    /// committed claims nodes on the very line its writer is writing, and
    /// the two cores pass that line back and forth at every item: a
    /// stream of 64-byte items settles at a quarter to a half of the raw
    /// ring's rate that way on the Intel Xeons measured, and runs 1.2 to 2
    /// times as fast with batch reads (docs/rings.md, "Batch reads"; on an
    /// AMD EPYC of model 1, not faster). The price is latency: an item
    /// waits for the batch behind it, or, where its writer stops short,
    /// for the looks that tell it stopped (about 1 µs). Choose it for a reader that wants throughput, not for one
    /// that wants each item the moment it is written. A handle's option,
    /// like its wait policy: nothing in the ring changes, and other
    /// handles read as they choose.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tachyon::CircularBuffer;
    /// # let name = format!("doc-circular-batch-{}", std::process::id());
    /// let ring = CircularBuffer::builder(&name).node_count(256).node_size(64).create()?;
    /// let reader = CircularBuffer::builder(&name).batch_reads(true).open()?; // usually in another process
    /// assert!(reader.batch_reads() && !ring.batch_reads());
    /// ring.write(b"tick", None)?;
    /// let mut buf = [0u8; 64];
    /// assert_eq!(reader.read(&mut buf, Some(Duration::from_millis(100)))?, 4);
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn batch_reads(mut self, on: bool) -> Self {
        self.batch_reads = on;
        self
    }

    /// Light hand-overs (default off): a ring option, chosen at creation
    /// and used by every process that opens the ring.
    ///
    /// A writer hands its node over to the readers, and a reader the node
    /// back to the writers, with a plain store, and looks for sleepers
    /// without a fence: no locked instruction and no fence after the
    /// hand-over. On x86 that instruction waits until the hand-over's
    /// cache line, which the other side is reading, comes back, and costs
    /// a stream of small items about a third of its rate (docs/rings.md,
    /// "Light hand-overs", has the measurements). The price moves to
    /// sleepers: a reader or writer that goes to sleep runs
    /// `membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED)` first (about 0.6 µs),
    /// which interrupts every CPU that is running a process with a
    /// light ring open at that moment. Choose it for streams whose waiters
    /// spin, or sleep rarely (with `WaitPolicy::Futex` on a busy stream,
    /// each sleep interrupts the writer, and some runs went at a third of
    /// the plain ring's rate); leave it off where a core must never be
    /// interrupted (a busy-polling thread on an isolated core in a process
    /// that opens such a ring would be, at each sleep of any waiter of any
    /// light ring).
    ///
    /// Crash safety is unchanged: a process killed at any instruction
    /// leaves what it leaves today, repaired the same way. What a light
    /// ring gives up is narrower: when another process scribbles on a
    /// node's control word (or judges a claimant dead that still runs: a
    /// handle shared with a forked child whose parent died), a repair
    /// that lands within the few instructions between the claimant's last
    /// look and its store is overwritten, where a compare-and-swap would
    /// have failed and reported the loss; an item can then be lost or
    /// delivered twice (docs/CRASH-SAFETY.md). Where the kernel refuses
    /// `membarrier` (before Linux 4.16, or under a seccomp filter), the
    /// process keeps the full fences; a sleeper that cannot run the
    /// barrier looks again within its wait's slice (at most 50 ms).
    ///
    /// On [`create_or_open`](Self::create_or_open) and [`open`](Self::open)
    /// of an existing ring, a setting that differs from the ring's is
    /// [`Error::Incompatible`]; left unset, the ring's is taken.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tachyon::{CircularBuffer, Error};
    /// # let name = format!("doc-circular-light-{}", std::process::id());
    /// let ring = CircularBuffer::builder(&name).node_count(64).node_size(64).light_handovers(true).create()?;
    /// let peer = CircularBuffer::open(&name)?; // usually in another process
    /// assert!(peer.light_handovers());
    /// ring.write(b"hello", Some(Duration::from_millis(100)))?;
    /// let mut buf = [0u8; 64];
    /// assert_eq!(peer.read(&mut buf, Some(Duration::from_millis(100)))?, 5);
    /// let err = CircularBuffer::builder(&name).light_handovers(false).open().unwrap_err();
    /// assert!(matches!(err, Error::Incompatible { field: "light_handovers", .. }));
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn light_handovers(mut self, light: bool) -> Self {
        self.light = light;
        self.set.2 = true;
        self
    }

    /// Creates the ring; [`Error::AlreadyExists`] if it exists.
    pub fn create(&self) -> Result<CircularBuffer> {
        let (data_off, stride, total) = self.geometry()?;
        let seg = Segment::builder(&self.name)
            .kind(Kind::CIRCULAR)
            .size(total)
            .geometry([self.nodes as u64, self.node_size as u64, self.flags(), 0])
            .create_with(|seg| init(seg, self.nodes, self.node_size, self.flags()))?;
        self.handle(seg, Some((data_off, stride)))
    }

    /// The handle on `seg` as this builder sets it up.
    fn handle(&self, seg: Segment, known: Option<(usize, usize)>) -> Result<CircularBuffer> {
        let mut ring = CircularBuffer::from_segment(seg, self.policy, known)?;
        ring.batch_reads = self.batch_reads;
        Ok(ring)
    }

    /// Opens an existing ring, learning its geometry from it; geometry set
    /// on the builder must match ([`Error::Incompatible`]).
    pub fn open(&self) -> Result<CircularBuffer> {
        let seg = Segment::builder(&self.name).kind(Kind::CIRCULAR).open()?;
        self.check(self.handle(seg, None)?)
    }

    /// Opens the ring, or creates it with this geometry if there is none.
    /// [`Error::Incompatible`] if it exists with another node count or
    /// node size than one set on this builder.
    pub fn create_or_open(&self) -> Result<CircularBuffer> {
        let (_, _, total) = self.geometry()?;
        let seg = Segment::builder(&self.name)
            .kind(Kind::CIRCULAR)
            .size(total)
            .geometry([self.nodes as u64, self.node_size as u64, self.flags(), 0])
            .create_or_open_with(|seg| init(seg, self.nodes, self.node_size, self.flags()))?;
        self.check(self.handle(seg, None)?)
    }

    /// The ring if its geometry matches what was set on this builder.
    fn check(&self, ring: CircularBuffer) -> Result<CircularBuffer> {
        let differs = |field: &'static str, existing: usize, requested: usize| Error::Incompatible {
            name: self.name.clone(),
            field,
            existing: existing.to_string(),
            requested: requested.to_string(),
        };
        if self.set.0 && ring.nodes != self.nodes {
            return Err(differs("node_count", ring.nodes, self.nodes));
        }
        if self.set.1 && ring.node_size != self.node_size {
            return Err(differs("node_size", ring.node_size, self.node_size));
        }
        if self.set.2 && ring.light != self.light {
            return Err(Error::Incompatible {
                name: self.name.clone(),
                field: "light_handovers",
                existing: ring.light.to_string(),
                requested: self.light.to_string(),
            });
        }
        Ok(ring)
    }

    /// The ring's option word for its creation.
    fn flags(&self) -> u64 {
        if self.light {
            LIGHT
        } else {
            0
        }
    }

    fn geometry(&self) -> Result<(usize, usize, usize)> {
        if self.nodes < 2 || self.nodes > MAX_NODES {
            return Err(Error::invalid(format!("node_count must be 2 to {MAX_NODES}, not {}", self.nodes)));
        }
        if self.node_size == 0 || self.node_size > u32::MAX as usize {
            return Err(Error::invalid(format!(
                "node_size must be 1 to {}, not {}",
                u32::MAX,
                self.node_size
            )));
        }
        layout(self.nodes, self.node_size).ok_or_else(|| {
            Error::invalid(format!("{} nodes of {} bytes do not fit in memory", self.nodes, self.node_size))
        })
    }
}

/// Writes the geometry and the initial cell words; runs before the
/// segment is visible to anyone.
fn init(seg: &Segment, nodes: usize, node_size: usize, flags: u64) -> Result<()> {
    use crate::platform::atomic::{AtomicU64, Ordering};
    seg.get::<AtomicU64>(NODE_COUNT_OFF)?.store(nodes as u64, Ordering::Relaxed);
    seg.get::<AtomicU64>(NODE_SIZE_OFF)?.store(node_size as u64, Ordering::Relaxed);
    seg.get::<AtomicU64>(FLAGS_OFF)?.store(flags, Ordering::Relaxed);
    for (i, cell) in seg.get_slice::<Cell>(CELLS_OFF, nodes)?.iter().enumerate() {
        // Free for the writer of position i (seq = i, tag = 0).
        cell.word.store((i as u64) << 32, Ordering::Relaxed);
    }
    Ok(())
}

impl CircularBuffer {
    /// A builder, for the wait policy or `create_or_open`.
    pub fn builder(name: &str) -> CircularBufferBuilder {
        CircularBufferBuilder {
            name: name.to_owned(),
            nodes: 64,
            node_size: 4096,
            set: (false, false, false),
            policy: WaitPolicy::default(),
            light: false,
            batch_reads: false,
        }
    }

    /// Creates a ring of `node_count` nodes of `node_size` bytes.
    pub fn create(name: &str, node_count: usize, node_size: usize) -> Result<CircularBuffer> {
        Self::builder(name).node_count(node_count).node_size(node_size).create()
    }

    /// Opens an existing ring.
    pub fn open(name: &str) -> Result<CircularBuffer> {
        Self::builder(name).open()
    }

    fn from_segment(seg: Segment, policy: WaitPolicy, known: Option<(usize, usize)>) -> Result<Self> {
        use crate::platform::atomic::{AtomicU64, Ordering};
        // Geometry words damaged since creation: restored from their
        // sealed copy in the segment header.
        seg.restore_geometry(&[NODE_COUNT_OFF, NODE_SIZE_OFF, FLAGS_OFF])?;
        let nodes = seg.get::<AtomicU64>(NODE_COUNT_OFF)?.load(Ordering::Relaxed);
        let node_size = seg.get::<AtomicU64>(NODE_SIZE_OFF)?.load(Ordering::Relaxed);
        let flags = seg.get::<AtomicU64>(FLAGS_OFF)?.load(Ordering::Relaxed);
        let bad = |field, value| Error::corrupt(Corruption::BadField { field, value });
        if flags & !LIGHT != 0 {
            return Err(bad("ring options", flags));
        }
        let light = flags & LIGHT != 0;
        if light {
            // Before this process's first light notify (`WaitCell::announce`): refused, it
            // keeps full fences (always correct).
            crate::platform::membarrier::register();
        }
        if nodes < 2 || nodes > MAX_NODES as u64 {
            return Err(bad("node_count", nodes));
        }
        if node_size == 0 || node_size > u64::from(u32::MAX) {
            return Err(bad("node_size", node_size));
        }
        let (nodes, node_size) = (nodes as usize, node_size as usize);
        let (data_off, stride, total) =
            layout(nodes, node_size).ok_or_else(|| bad("node_count", nodes as u64))?;
        if total != seg.size() {
            return Err(bad("ring size", seg.size() as u64));
        }
        debug_assert!(known.is_none_or(|k| k == (data_off, stride)));
        let cursors = NonNull::from(seg.get::<Cursors>(CURSORS_OFF)?);
        let cells = NonNull::from(&seg.get_slice::<Cell>(CELLS_OFF, nodes)?[0]);
        seg.get::<WaitCell>(NOT_EMPTY_OFF)?;
        seg.get::<WaitCell>(NOT_FULL_OFF)?;
        seg.get::<crate::platform::atomic::AtomicU32>(CLOSED_OFF)?;
        seg.get::<crate::platform::atomic::AtomicU64>(REPAIRED_OFF)?;
        seg.get::<crate::platform::atomic::AtomicU64>(ROOM_AT_OFF)?;
        Ok(CircularBuffer { seg, nodes, node_size, stride, data_off, cursors, cells, policy, light, batch_reads: false })
    }

    /// Whether the ring's hand-overs are light (see
    /// [`CircularBufferBuilder::light_handovers`]).
    ///
    /// ```
    /// # use tachyon::CircularBuffer;
    /// # let name = format!("doc-circular-is-light-{}", std::process::id());
    /// let ring = CircularBuffer::create(&name, 4, 16)?;
    /// assert!(!ring.light_handovers()); // the default
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn light_handovers(&self) -> bool {
        self.light
    }

    /// Whether this handle's reads wait for batches (see
    /// [`CircularBufferBuilder::batch_reads`]).
    ///
    /// ```
    /// # use tachyon::CircularBuffer;
    /// # let name = format!("doc-circular-is-batch-{}", std::process::id());
    /// let ring = CircularBuffer::create(&name, 4, 16)?;
    /// assert!(!ring.batch_reads()); // the default
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn batch_reads(&self) -> bool {
        self.batch_reads
    }

    /// Turns this handle's batch reads on or off (see
    /// [`CircularBufferBuilder::batch_reads`]): for a handle opened or
    /// created without the builder, such as the creator's own when it is
    /// the reader. Only this handle's later reads change.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tachyon::CircularBuffer;
    /// # let name = format!("doc-circular-set-batch-{}", std::process::id());
    /// let mut reader = CircularBuffer::create(&name, 256, 64)?;
    /// reader.set_batch_reads(true);
    /// assert!(reader.batch_reads());
    /// let writer = CircularBuffer::open(&name)?; // usually in another process
    /// writer.write(b"tick", None)?;
    /// let mut buf = [0u8; 64];
    /// assert_eq!(reader.read(&mut buf, Some(Duration::from_millis(100)))?, 4);
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn set_batch_reads(&mut self, on: bool) {
        self.batch_reads = on;
    }

    /// How this handle's waits wait (see
    /// [`CircularBufferBuilder::wait_policy`]; hybrid by default).
    ///
    /// ```
    /// use tachyon::sync::WaitPolicy;
    /// use tachyon::CircularBuffer;
    /// # let name = format!("doc-circular-policy-{}", std::process::id());
    /// let ring = CircularBuffer::create(&name, 4, 16)?;
    /// assert_eq!(ring.wait_policy(), WaitPolicy::Hybrid);
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn wait_policy(&self) -> WaitPolicy {
        self.policy
    }

    /// Changes how this handle's later waits wait: for a handle opened or
    /// created without the builder (as the C face's are). The handle's
    /// option, like [`set_batch_reads`](Self::set_batch_reads): writers and
    /// readers wake each other whatever each one's policy is.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tachyon::sync::WaitPolicy;
    /// use tachyon::CircularBuffer;
    /// # let name = format!("doc-circular-set-policy-{}", std::process::id());
    /// let mut reader = CircularBuffer::create(&name, 4, 16)?;
    /// reader.set_wait_policy(WaitPolicy::Futex); // sleeps at once
    /// let writer = CircularBuffer::open(&name)?; // usually in another process
    /// writer.write(b"tick", None)?;
    /// let mut buf = [0u8; 16];
    /// assert_eq!(reader.read(&mut buf, Some(Duration::from_millis(100)))?, 4);
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn set_wait_policy(&mut self, policy: WaitPolicy) {
        self.policy = policy;
    }

    /// Number of nodes.
    pub fn node_count(&self) -> usize {
        self.nodes
    }

    /// Bytes per node: the largest item.
    pub fn node_size(&self) -> usize {
        self.node_size
    }

    /// How many items the ring holds when full: exactly `node_count`.
    pub fn capacity(&self) -> usize {
        self.nodes
    }

    /// Items that no reader has claimed yet, a snapshot: items written,
    /// and items a writer is still filling. An item is no longer counted
    /// once a reader claims it, even while the reader is still copying it
    /// out (so during a [`read_with`](Self::read_with) the item being read
    /// is not counted). [`stats`](Self::stats) tells the states apart.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tachyon::CircularBuffer;
    /// # let name = format!("doc-circular-len-{}", std::process::id());
    /// let ring = CircularBuffer::create(&name, 4, 16)?;
    /// ring.write(b"a", None)?;
    /// ring.write(b"b", None)?;
    /// assert_eq!(ring.len(), 2);
    /// ring.read_with(Some(Duration::ZERO), |_item| {
    ///     assert_eq!(ring.len(), 1); // the item being read is not counted
    ///     assert_eq!(ring.stats().being_read, 1);
    /// })?;
    /// assert_eq!(ring.len(), 1);
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn len(&self) -> usize {
        self.ring().len() as usize
    }

    /// A snapshot of the ring's state: capacity, items queued, nodes being
    /// written and being read, nodes abandoned by a dead writer, dead
    /// claimants repaired so far, and whether it is closed. It reads every
    /// node's control word (no lock, no system call): cheap for a
    /// monitoring loop, not for every item.
    ///
    /// ```
    /// use tachyon::CircularBuffer;
    /// # let name = format!("doc-circular-stats-{}", std::process::id());
    /// let ring = CircularBuffer::create(&name, 8, 16)?;
    /// ring.write(b"x", None)?;
    /// let s = ring.stats();
    /// assert_eq!((s.capacity, s.queued, s.being_written, s.being_read), (8, 1, 0, 0));
    /// assert!(!s.closed);
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn stats(&self) -> RingStats {
        use crate::platform::atomic::Ordering;
        let ring = self.ring();
        let n = self.nodes as u64;
        // SYNC: head before tail, as `Ring::fix_cursors` reads them (a snapshot).
        let head = ring.cursors.head.load(Ordering::Acquire);
        let tail = ring.cursors.tail.load(Ordering::Acquire);
        // Positions a cell can hold now lie within a lap of the cursors.
        let lo = head.min(tail).saturating_sub(n);
        let mut s = RingStats {
            capacity: self.nodes,
            repaired: self.repaired().load(Ordering::Relaxed),
            closed: self.is_closed(),
            ..RingStats::default()
        };
        for (idx, cell) in ring.cells.iter().enumerate() {
            let w = cell.word.load(Ordering::Acquire);
            let (seq, tag) = ((w >> 32) as u32, w as u32);
            // The first position at or after `lo` that lives in this cell.
            let first = lo + (idx as u64 + n - lo % n) % n;
            // Whether `seq` is `p + off` for a position `p` of this cell.
            let at = |off: u64| (0..4).any(|k| (first + k * n).wrapping_add(off) as u32 == seq);
            match tag {
                0 if at(1) => s.queued += 1,
                0 => {} // free
                TOMBSTONE if at(1) => s.abandoned += 1,
                TOMBSTONE => {}
                _ if at(1) => s.being_read += 1,
                _ if at(0) => s.being_written += 1,
                _ => {}
            }
        }
        s
    }

    /// Closes the ring for every process that uses it: from now on
    /// writes fail with [`Error::Closed`], and reads return the items
    /// still queued, then [`Error::Closed`] instead of waiting. Calls
    /// blocked in any process wake at once (futex) and return
    /// [`Error::Closed`]. A write that was already past its check when
    /// `close` came may still add its item; it stays readable.
    ///
    /// Closing is for good: the ring stays closed until its segment is
    /// gone (the last handle dropped); dropping a handle does not close
    /// it. This is the .NET `CircularBuffer.Close()` / `ShuttingDown`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tachyon::{CircularBuffer, Error};
    /// # let name = format!("doc-circular-close-{}", std::process::id());
    /// let writer = CircularBuffer::create(&name, 4, 16)?;
    /// let reader = CircularBuffer::open(&name)?; // usually in another process
    /// writer.write(b"last", None)?;
    /// writer.close();
    /// assert!(matches!(writer.write(b"more", None), Err(Error::Closed)));
    /// let mut buf = [0u8; 16];
    /// assert_eq!(reader.read(&mut buf, None)?, 4); // what was queued comes first
    /// assert!(matches!(reader.read(&mut buf, None), Err(Error::Closed))); // no wait
    /// assert!(reader.is_closed());
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn close(&self) {
        use crate::platform::atomic::Ordering;
        // SYNC: SeqCst is more than needed (Release would do): the fences below give the order.
        self.closed_flag().store(1, Ordering::SeqCst);
        // SYNC: the waiters' predicate loads the flag (Acquire) after
        // registering; `notify_all` fences before it looks for sleepers.
        self.wait_cell(false).notify_all();
        self.wait_cell(true).notify_all();
    }

    /// Whether [`close`](Self::close) was called (by any process).
    ///
    /// ```
    /// # use tachyon::CircularBuffer;
    /// # let name = format!("doc-circular-is-closed-{}", std::process::id());
    /// let ring = CircularBuffer::create(&name, 2, 8)?;
    /// assert!(!ring.is_closed());
    /// ring.close();
    /// assert!(ring.is_closed());
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn is_closed(&self) -> bool {
        // SYNC: pairs with the store in `close` (which publishes nothing else).
        self.closed_flag().load(crate::platform::atomic::Ordering::Acquire) != 0
    }

    fn closed_flag(&self) -> &crate::platform::atomic::AtomicU32 {
        // SAFETY: checked in bounds and aligned in `from_segment`; an
        // atomic is ShmSafe; the mapping lives as long as `self`.
        unsafe { &*self.seg.as_ptr().add(CLOSED_OFF).cast() }
    }

    fn repaired(&self) -> &crate::platform::atomic::AtomicU64 {
        // SAFETY: as for `closed_flag`.
        unsafe { &*self.seg.as_ptr().add(REPAIRED_OFF).cast() }
    }

    fn room_at(&self) -> &crate::platform::atomic::AtomicU64 {
        // SAFETY: as for `closed_flag`.
        unsafe { &*self.seg.as_ptr().add(ROOM_AT_OFF).cast() }
    }

    /// Whether no item is queued now (a snapshot).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether a reader polling this ring should try a claim now: the
    /// node at the read cursor holds an item (or a tombstone, or damage
    /// that a claim repairs). Unlike [`is_empty`](Self::is_empty) it does
    /// not read the write cursor, so a reader that polls it adds no cache
    /// line to a message's trip between two cores.
    pub(crate) fn readable_hint(&self) -> bool {
        self.ring().head_hint()
    }

    /// The segment behind the ring.
    pub fn segment(&self) -> &Segment {
        &self.seg
    }

    /// Repairs a dead claimant's cell in the way of a `writer` (else of a
    /// reader), as a blocked claim does between its sleeps; for futures,
    /// which do not block in `claim`.
    pub(crate) fn repair_in_the_way(&self, writer: bool) {
        if self.ring().recover_with(&self.seg, writer, &|_, _| {}) {
            self.repaired().fetch_add(1, crate::platform::atomic::Ordering::Relaxed);
            self.wait_cell(true).notify_all();
            self.wait_cell(false).notify_all();
        }
    }

    pub(crate) fn ring(&self) -> Ring<'_> {
        // SAFETY: both pointers were validated against the segment in
        // `from_segment` (in bounds, aligned, `nodes` cells) and the mapping
        // lives as long as `self`.
        unsafe {
            Ring {
                cursors: self.cursors.as_ref(),
                cells: std::slice::from_raw_parts(self.cells.as_ptr(), self.nodes),
            }
        }
    }

    /// Waits on the readers' wait cell until `ready` says so (or
    /// `timeout`), as [`WaitCell::wait_until`] does, with the sleeper's
    /// half of the asymmetric fence if the ring's hand-overs are light:
    /// for a caller that waits for an item by its own condition (an
    /// `RpcBuffer` reader or requester).
    pub(crate) fn wait_for_items<T>(
        &self,
        policy: WaitPolicy,
        timeout: Option<Duration>,
        ready: impl FnMut() -> Option<T>,
    ) -> Result<T> {
        self.wait_cell(false).wait_until_with(self.light, policy, timeout, ready)
    }

    pub(crate) fn wait_cell(&self, writer: bool) -> &WaitCell {
        let off = if writer { NOT_FULL_OFF } else { NOT_EMPTY_OFF };
        // SAFETY: checked in bounds and aligned in `from_segment`; WaitCell
        // is ShmSafe; the mapping lives as long as `self`.
        unsafe { &*self.seg.as_ptr().add(off).cast::<WaitCell>() }
    }

    /// Wakes the writers sleeping for room once the readers have freed
    /// the gap they wait for, after this handle handed back the item at
    /// position `freed` (`Ring::wake_writers`).
    #[inline]
    fn wake_writers(&self, freed: u64) {
        self.ring().wake_writers(&self.waits(), freed);
    }

    /// The ring's wait cells and writers' mark, as this handle waits (no
    /// close flag, no repair count).
    #[inline]
    pub(crate) fn waits(&self) -> Waits<'_> {
        Waits {
            not_empty: self.wait_cell(false),
            not_full: self.wait_cell(true),
            policy: self.policy,
            closed: None,
            repaired: None,
            light: self.light,
            room_at: Some(self.room_at()),
            batch_reads: self.batch_reads,
        }
    }

    fn node_ptr(&self, idx: usize) -> *mut u8 {
        debug_assert!(idx < self.nodes);
        // SAFETY: `idx < nodes`, so the node lies inside the data area
        // (`layout` computed the segment's size from the geometry).
        unsafe { self.seg.as_ptr().add(self.data_off + idx * self.stride) }
    }

    /// Claims a node, waiting up to `timeout`, and repairing what a dead
    /// claimant left in the way.
    fn claim(&self, writer: bool, max_len: u64, timeout: Option<Duration>) -> Result<(u64, usize, u64)> {
        // The common case first, inlined, without the general claim's
        // set-up: the node at the cursor free for a writer, or holding an
        // item that fits for a reader (and fits a node: a longer length is
        // damage, which the general claim repairs). Everything else
        // (waits, repairs, an item too long) is the general claim's, which
        // looks again. An `RpcBuffer` round trip went from 0.37 – 0.385 to
        // 0.35 µs (docs/benchmark-history.md, "a waiting claim's quick looks").
        let me = crate::sync::Liveness::token(&self.seg);
        let most = max_len.min(self.node_size as u64);
        let common = if writer {
            self.ring().claim_write_now(me).map(|(pos, idx)| (pos, idx, 0))
        } else {
            self.ring().claim_read_now(me, |len| len <= most)
        };
        if let Some(got) = common {
            return Ok(got);
        }
        // A poll (zero timeout) of an open, empty ring ends here, as the
        // general claim would end it, without its set-up: a `try_read` of
        // an empty ring took 430 instructions, 331 with the claim's own
        // early end (`Ring::claim_waiting`), 160 with this (callgrind).
        if !writer
            && timeout.is_some_and(|t| t.is_zero())
            && self.closed_flag().load(crate::platform::atomic::Ordering::Acquire) == 0
            && self.ring().looks_empty()
        {
            return Err(crate::sync::ring::timed_out(false, timeout));
        }
        let waits = Waits { closed: Some(self.closed_flag()), repaired: Some(self.repaired()), ..self.waits() };
        let limit = self.node_size as u64;
        self.ring().claim_blocking(&self.seg, &waits, writer, (max_len, u64::MAX), limit, timeout, &|_, _| {})
    }

    /// Writes one item, waiting up to `timeout` for a free node, then
    /// [`Error::Timeout`] (`None`: for ever; `Some(Duration::ZERO)`: tries
    /// once without waiting, see [timeouts](crate#timeouts)). An item
    /// longer than `node_size` is [`Error::MessageTooLarge`]; nothing is
    /// cut. [`Error::Closed`] once the ring is [closed](Self::close).
    pub fn write(&self, item: &[u8], timeout: Option<Duration>) -> Result<()> {
        self.write_with(item.len(), timeout, |node| copy::copy(node, item))
    }

    /// Writes one item if a node is free now; [`Error::Full`] if not.
    ///
    /// ```
    /// use tachyon::{CircularBuffer, Error};
    /// # let name = format!("doc-try-write-{}", std::process::id());
    /// let ring = CircularBuffer::create(&name, 2, 16)?;
    /// ring.try_write(b"a")?;
    /// ring.try_write(b"b")?;
    /// assert!(matches!(ring.try_write(b"c"), Err(Error::Full { .. })));
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn try_write(&self, item: &[u8]) -> Result<()> {
        full_if_timeout(self.write(item, Some(Duration::ZERO)))
    }

    /// [`write_with`](Self::write_with) if a node is free now;
    /// [`Error::Full`] if not (and `fill` is not called).
    ///
    /// ```
    /// use tachyon::CircularBuffer;
    /// # let name = format!("doc-try-write-with-{}", std::process::id());
    /// let ring = CircularBuffer::create(&name, 2, 16)?;
    /// ring.try_write_with(2, |node| node.copy_from_slice(b"ok"))?;
    /// assert_eq!(ring.try_read_with(|item| item.to_vec())?, Some(b"ok".to_vec()));
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn try_write_with<R>(&self, len: usize, fill: impl FnOnce(&mut [u8]) -> R) -> Result<R> {
        full_if_timeout(self.write_with(len, Some(Duration::ZERO), fill))
    }

    /// Claims a node for an item of `len` bytes and lets `fill` build it in
    /// place (zero-copy); publishes it when `fill` returns. If `fill`
    /// panics, the node is skipped by readers and the panic goes on.
    ///
    /// ```
    /// # use tachyon::CircularBuffer;
    /// # let name = format!("doc-write-with-{}", std::process::id());
    /// let ring = CircularBuffer::create(&name, 2, 16)?;
    /// ring.write_with(3, None, |node| node.copy_from_slice(b"abc"))?;
    /// let first = ring.read_with(None, |item| item[0])?;
    /// assert_eq!(first, b'a');
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn write_with<R>(
        &self,
        len: usize,
        timeout: Option<Duration>,
        fill: impl FnOnce(&mut [u8]) -> R,
    ) -> Result<R> {
        if len > self.node_size {
            return Err(Error::MessageTooLarge {
                size: len,
                max: self.node_size,
                hint: "create the ring with larger nodes, or split the item",
            });
        }
        if self.is_closed() {
            return Err(Error::Closed);
        }
        // The common case inlined, as in `claim`; with it, for an item of
        // a line at most in a stream, the next node, whose line is asked
        // for after the commit (`Ring::claim_write_ahead`).
        let me = crate::sync::Liveness::token(&self.seg);
        let (pos, idx, ahead) = match self.ring().claim_write_ahead(me, len) {
            Some(got) => got,
            None => {
                let (pos, idx, _) = self.claim(true, 0, timeout)?;
                (pos, idx, None)
            }
        };
        let guard = Unfinished { ring: self, pos, idx, writer: true };
        // SAFETY: the node is claimed by this handle (its word carries our
        // token), so no other process touches these `len <= node_size`
        // bytes until `commit_write` below.
        let node = unsafe { std::slice::from_raw_parts_mut(self.node_ptr(idx), len) };
        let r = fill(node);
        std::mem::forget(guard);
        let committed = self.ring().commit_write_with(pos, idx, len as u64, me, self.light);
        self.wait_cell(false).notify_all_with(self.light);
        if !committed {
            return Err(claim_lost());
        }
        if let Some(next) = ahead {
            crate::sync::ring::Ring::prefetch_slot_line(self.node_ptr(next));
        }
        Ok(r)
    }

    /// Reads one item into `buf`, waiting up to `timeout` for one, then
    /// [`Error::Timeout`] (`None`: for ever; `Some(Duration::ZERO)`: tries
    /// once without waiting, see [timeouts](crate#timeouts)); returns its
    /// length. If the next item is longer than `buf`, it stays queued and
    /// the error is [`Error::BufferTooSmall`]. Once the ring is
    /// [closed](Self::close) and empty: [`Error::Closed`].
    pub fn read(&self, buf: &mut [u8], timeout: Option<Duration>) -> Result<usize> {
        self.read_impl(buf.len(), timeout, |item| {
            copy::copy(&mut buf[..item.len()], item);
            item.len()
        })
    }

    /// Reads one item into `buf` if one is queued now: `Ok(Some(len))`, or
    /// `Ok(None)` if the ring is empty (never [`Error::Timeout`];
    /// [`Error::Closed`] if it is empty and closed).
    ///
    /// ```
    /// use tachyon::CircularBuffer;
    /// # let name = format!("doc-try-read-{}", std::process::id());
    /// let ring = CircularBuffer::create(&name, 2, 16)?;
    /// let mut buf = [0u8; 16];
    /// assert_eq!(ring.try_read(&mut buf)?, None);
    /// ring.write(b"abc", None)?;
    /// assert_eq!(ring.try_read(&mut buf)?, Some(3));
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn try_read(&self, buf: &mut [u8]) -> Result<Option<usize>> {
        none_if_timeout(self.read(buf, Some(Duration::ZERO)))
    }

    /// Lends the next item to `f` in place (zero-copy), then frees its
    /// node; waits as [`read`](Self::read) does.
    pub fn read_with<R>(&self, timeout: Option<Duration>, f: impl FnOnce(&[u8]) -> R) -> Result<R> {
        self.read_impl(self.node_size, timeout, f)
    }

    /// [`read_with`](Self::read_with) if an item is queued now; `Ok(None)`
    /// if the ring is empty (and `f` is not called).
    ///
    /// ```
    /// use tachyon::CircularBuffer;
    /// # let name = format!("doc-try-read-with-{}", std::process::id());
    /// let ring = CircularBuffer::create(&name, 2, 16)?;
    /// assert_eq!(ring.try_read_with(|item| item.len())?, None);
    /// ring.write(b"abcd", None)?;
    /// assert_eq!(ring.try_read_with(|item| item.len())?, Some(4));
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn try_read_with<R>(&self, f: impl FnOnce(&[u8]) -> R) -> Result<Option<R>> {
        none_if_timeout(self.read_with(Some(Duration::ZERO), f))
    }

    fn read_impl<R>(&self, max: usize, timeout: Option<Duration>, f: impl FnOnce(&[u8]) -> R) -> Result<R> {
        let (pos, idx, len) = self.claim(false, max as u64, timeout)?;
        let guard = Unfinished { ring: self, pos, idx, writer: false };
        if len > self.node_size as u64 {
            drop(guard); // frees the node
            return Err(Error::corrupt(Corruption::BadField { field: "item length", value: len }));
        }
        // SAFETY: the node is claimed by this handle, and its writer
        // committed `len <= node_size` bytes before publishing it.
        let item = unsafe { std::slice::from_raw_parts(self.node_ptr(idx), len as usize) };
        let r = f(item);
        std::mem::forget(guard);
        let me = crate::sync::Liveness::token(&self.seg);
        let freed = self.ring().finish_read_with(pos, idx, me, self.light);
        self.wake_writers(pos);
        if !freed {
            return Err(claim_lost());
        }
        Ok(r)
    }

    /// Claims the next item if one is queued now, for a reader that keeps
    /// it claimed past this call (RpcBuffer hands a request to its handler
    /// in place); `Ok(None)` if the ring is empty. The claim must be moved
    /// on with [`finish_claimed_read`](Self::finish_claimed_read): nothing
    /// frees it on drop (a process that dies holding it is repaired by the
    /// ring's next waiter, as for any claim).
    pub(crate) fn claim_read_now(&self) -> Result<Option<Claim>> {
        let (pos, idx, len) = match self.claim(false, self.node_size as u64, Some(Duration::ZERO)) {
            Ok(c) => c,
            Err(Error::Timeout { .. }) => return Ok(None),
            Err(e) => return Err(e),
        };
        if len > self.node_size as u64 {
            drop(Unfinished { ring: self, pos, idx, writer: false }); // frees the node
            return Err(Error::corrupt(Corruption::BadField { field: "item length", value: len }));
        }
        Ok(Some(Claim { pos, idx, len: len as usize }))
    }

    /// The item of a read claim.
    ///
    /// # Safety
    ///
    /// `claim` came from this ring's [`claim_read_now`](Self::claim_read_now)
    /// and has not been moved on; the slice must not be used after it is.
    pub(crate) unsafe fn claimed_item(&self, claim: &Claim) -> &[u8] {
        // SAFETY: (the caller's contract) the node is claimed by this
        // handle and its writer committed `len <= node_size` bytes (checked
        // in `claim_read_now`) before publishing it; `idx < nodes`.
        unsafe { std::slice::from_raw_parts(self.node_ptr(claim.idx), claim.len) }
    }

    /// Starts to bring the first `len` bytes (up to 16 lines) of the node
    /// that this handle's next write will claim into this core's cache,
    /// for writing (a hint; see [`crate::sync::prefetch`]): a writer that
    /// has other work to do before it writes calls it first, so that the
    /// lines the reader's core read last come over meanwhile. Not the
    /// node's cell: a reader waiting for the next item polls that line,
    /// and would only take it back before the claim.
    pub(crate) fn prefetch_next_write(&self, len: usize) {
        let idx = self.ring().next_write();
        crate::sync::prefetch(self.node_ptr(idx), len.min(self.node_size), 16, true);
    }

    /// Frees the node of a read claim (see [`claim_read_now`](Self::claim_read_now)).
    pub(crate) fn finish_claimed_read(&self, claim: Claim) -> Result<()> {
        let me = crate::sync::Liveness::token(&self.seg);
        let freed = self.ring().finish_read_with(claim.pos, claim.idx, me, self.light);
        self.wake_writers(claim.pos);
        if freed {
            Ok(())
        } else {
            Err(claim_lost())
        }
    }

    /// Claims a node to write, waiting up to `timeout` as
    /// [`write_with`](Self::write_with) does, for a writer that fills it
    /// past this call (RpcBuffer's in-place responses). The claim must be
    /// moved on with [`commit_claimed_write`](Self::commit_claimed_write)
    /// or [`abandon_claimed_write`](Self::abandon_claimed_write).
    pub(crate) fn claim_write(&self, timeout: Option<Duration>) -> Result<Claim> {
        if self.is_closed() {
            return Err(Error::Closed);
        }
        let (pos, idx, _) = self.claim(true, 0, timeout)?;
        Ok(Claim { pos, idx, len: self.node_size })
    }

    /// The whole node (`node_size` bytes) of a write claim, to fill.
    ///
    /// # Safety
    ///
    /// `claim` came from this ring's [`claim_write`](Self::claim_write) and
    /// has not been moved on, and no other slice of its node is alive; the
    /// slice must not be used after the claim is moved on.
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn claimed_node(&self, claim: &Claim) -> &mut [u8] {
        // SAFETY: (the caller's contract) the node is claimed by this handle
        // (its word carries our token), so no other process touches its
        // `node_size` bytes until the claim is committed or abandoned, and
        // no other slice of it exists in this process.
        unsafe { std::slice::from_raw_parts_mut(self.node_ptr(claim.idx), claim.len) }
    }

    /// Publishes a write claim's node as an item of `len` bytes.
    pub(crate) fn commit_claimed_write(&self, claim: Claim, len: usize) -> Result<()> {
        debug_assert!(len <= self.node_size);
        let me = crate::sync::Liveness::token(&self.seg);
        let committed =
            self.ring().commit_write_with(claim.pos, claim.idx, len.min(self.node_size) as u64, me, self.light);
        self.wait_cell(false).notify_all_with(self.light);
        if committed {
            Ok(())
        } else {
            Err(claim_lost())
        }
    }

    /// Gives a write claim up: its node becomes a tombstone that readers
    /// step over (as when a `write_with` fill panics).
    pub(crate) fn abandon_claimed_write(&self, claim: Claim) {
        drop(Unfinished { ring: self, pos: claim.pos, idx: claim.idx, writer: true });
    }

    /// Writes a plain-old-data value as one item.
    pub fn write_value<T: bytemuck::NoUninit>(&self, value: &T, timeout: Option<Duration>) -> Result<()> {
        self.write(bytemuck::bytes_of(value), timeout)
    }

    /// Reads one item as a `T`. An item of another size is consumed and
    /// reported as [`Error::InvalidArgument`] (a longer one stays queued:
    /// [`Error::BufferTooSmall`]).
    pub fn read_value<T: bytemuck::AnyBitPattern + bytemuck::NoUninit>(
        &self,
        timeout: Option<Duration>,
    ) -> Result<T> {
        let mut v = T::zeroed();
        let n = self.read(bytemuck::bytes_of_mut(&mut v), timeout)?;
        if n != std::mem::size_of::<T>() {
            return Err(Error::invalid(format!(
                "item of {n} bytes is not a {} ({} bytes)",
                std::any::type_name::<T>(),
                std::mem::size_of::<T>()
            )));
        }
        Ok(v)
    }

    /// Writes a slice of plain-old-data values as one item.
    pub fn write_slice<T: bytemuck::NoUninit>(&self, values: &[T], timeout: Option<Duration>) -> Result<()> {
        self.write(bytemuck::cast_slice(values), timeout)
    }

    /// Reads one item into a slice of `T`s; returns how many values it
    /// held. An item that is not a whole number of `T`s is consumed and
    /// reported as [`Error::InvalidArgument`].
    pub fn read_slice<T: bytemuck::Pod>(&self, buf: &mut [T], timeout: Option<Duration>) -> Result<usize> {
        let n = self.read(bytemuck::cast_slice_mut(buf), timeout)?;
        let size = std::mem::size_of::<T>().max(1);
        if n % size != 0 {
            return Err(Error::invalid(format!(
                "item of {n} bytes is not a whole number of {size}-byte values"
            )));
        }
        Ok(n / size)
    }
}

impl std::fmt::Debug for CircularBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CircularBuffer")
            .field("name", &self.seg.name())
            .field("node_count", &self.nodes)
            .field("node_size", &self.node_size)
            .field("len", &self.len())
            .field("closed", &self.is_closed())
            .finish()
    }
}

/// A node claimed by this handle past the call that claimed it (see
/// [`CircularBuffer::claim_read_now`], [`CircularBuffer::claim_write`]):
/// its position, index, and length (a read: the item's; a write: the
/// node's). Deliberately not `Clone`: it is moved on exactly once.
#[derive(Debug)]
pub(crate) struct Claim {
    pos: u64,
    idx: usize,
    len: usize,
}

/// Moves a claimed node on if the code using it panics: a writer's node
/// becomes a tombstone, a reader's node is freed.
struct Unfinished<'a> {
    ring: &'a CircularBuffer,
    pos: u64,
    idx: usize,
    writer: bool,
}

impl Drop for Unfinished<'_> {
    fn drop(&mut self) {
        use crate::platform::atomic::Ordering;
        let ring = self.ring.ring();
        let me = crate::sync::Liveness::token(&self.ring.seg);
        if self.writer {
            // Only if the claim is still ours (see `Ring::commit_write`).
            let claimed = ((self.pos as u32 as u64) << 32) | u64::from(me.raw());
            let word = ((self.pos.wrapping_add(1) as u32 as u64) << 32) | u64::from(TOMBSTONE);
            // SYNC: Release pairs with the readers' Acquire load of the cell
            // (`Ring::claim_read_within`, TOMBSTONE arm), which frees it.
            let _ = ring.cells[self.idx].word.compare_exchange(
                claimed,
                word,
                Ordering::Release,
                Ordering::Relaxed,
            );
            self.ring.wait_cell(false).notify_all();
        } else {
            ring.finish_read(self.pos, self.idx, me);
            self.ring.wait_cell(true).notify_all();
        }
    }
}

/// A `try_*` read: an empty ring is `Ok(None)`, not a timeout.
fn none_if_timeout<R>(r: Result<R>) -> Result<Option<R>> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(Error::Timeout { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// A `try_*` write: a full ring is [`Error::Full`], not a timeout.
fn full_if_timeout<R>(r: Result<R>) -> Result<R> {
    match r {
        Err(Error::Timeout { .. }) => Err(Error::Full { what: "the ring" }),
        other => other,
    }
}

/// A claim that another process repaired because it judged this handle
/// dead (possible only if the handle was shared with a forked child, or
/// used after the process began to exit).
fn claim_lost() -> Error {
    Error::corrupt(Corruption::BadField { field: "ring claim (repaired by another process)", value: 0 })
}

#[cfg(all(test, not(tachyon_loom)))]
mod tests {
    use super::CircularBuffer;
    use crate::sync::ring::hooks;
    use crate::Error;
    use std::time::Duration;

    /// A reader that found the ring empty, then the flag closed, still gets
    /// what the closing writer wrote in between (the interleaving made
    /// deterministic by the hook): `close` promises what was queued comes
    /// first. Before the fix the read returned `Closed` with the item
    /// queued: at the first look at the flag (the wait's fast path), and at
    /// a later one (inside the wait).
    #[test]
    fn a_close_right_after_a_write_does_not_hide_the_item() {
        for look in [1, 2] {
            let name = format!("circular-close-race-{}-{look}", std::process::id());
            let writer = std::rc::Rc::new(CircularBuffer::create(&name, 4, 16).unwrap());
            let reader = CircularBuffer::open(&name).unwrap();
            let w = writer.clone();
            hooks::at_closed_look(look, move || {
                w.write(b"last", Some(Duration::ZERO)).unwrap();
                w.close();
            });
            let mut buf = [0u8; 16];
            let got = reader.read(&mut buf, Some(Duration::from_secs(5)));
            assert!(matches!(got, Ok(4)), "look {look}: {got:?}");
            assert_eq!(&buf[..4], b"last");
            assert!(matches!(reader.read(&mut buf, Some(Duration::from_secs(5))), Err(Error::Closed)));
            drop(reader);
            drop(writer);
            let _ = crate::segment::Segment::remove(&name);
        }
    }

    /// A spinning or hybrid reader's first looks at an empty ring (the
    /// quick looks of a waiting claim) make one full attempt, not one a
    /// look: they make another only once the read cursor or the cell
    /// there has moved. An item too long for the reader's buffer that
    /// comes right after that attempt is such a move: the next look makes
    /// the second full attempt, which reports it. (Checked to fail with
    /// the cell looked at after the attempt rather than before it: the
    /// item's arrival is then taken for what the attempt saw; and with a
    /// full attempt at every look.)
    #[test]
    fn a_waiting_claims_quick_looks_attempt_again_only_after_a_move() {
        use crate::sync::WaitPolicy;
        for policy in [WaitPolicy::Spin, WaitPolicy::Hybrid] {
            let name = format!("circular-quick-{}-{policy:?}", std::process::id());
            let writer = std::rc::Rc::new(
                CircularBuffer::builder(&name).node_count(4).node_size(16).wait_policy(policy).create().unwrap(),
            );
            let reader = CircularBuffer::builder(&name).wait_policy(policy).open().unwrap();
            let mut small = [0u8; 4];
            hooks::quick_attempts();
            let got = reader.read(&mut small, Some(Duration::from_millis(1)));
            assert!(matches!(got, Err(Error::Timeout { .. })), "{policy:?}: {got:?}");
            assert_eq!(hooks::quick_attempts(), 1, "{policy:?}: an empty ring that never moved");

            let w = writer.clone();
            hooks::at_quick_wait(move || w.write(b"too long", Some(Duration::ZERO)).unwrap());
            let got = reader.read(&mut small, Some(Duration::from_secs(5)));
            assert!(matches!(got, Err(Error::BufferTooSmall { item: 8, buffer: 4 })), "{policy:?}: {got:?}");
            assert_eq!(hooks::quick_attempts(), 2, "{policy:?}: the item's arrival is a move");
            drop((reader, writer));
            let _ = crate::segment::Segment::remove(&name);
        }
    }

    /// A writer of items of one line at most asks, after its commit, for
    /// the line of the next node when its reader is behind it (a stream)
    /// and that node is free, looking only at the cells on the line of
    /// the cell it claims: in a ring that fills up, after the items whose
    /// neighbours both share their cell's line, except the last (whose
    /// next node holds the first item); never for larger items, nor in
    /// a round trip (each item read before the next is written).
    #[test]
    fn a_streaming_writer_asks_for_the_next_free_nodes_line() {
        use crate::sync::ring::hooks;
        let name = format!("circular-next-line-{}", std::process::id());
        let ring = CircularBuffer::create(&name, 8, 128).unwrap();
        let mut buf = [0u8; 128];
        let node = |i: usize| ring.node_ptr(i) as usize;
        let line = |i: usize| &ring.ring().cells[i] as *const _ as usize / 64;
        let shares = |p: usize| p > 0 && p < 7 && line(p - 1) == line(p) && line(p + 1) == line(p);
        for (round, len) in [(0, 64), (1, 65), (2, 0)] {
            hooks::prefetched();
            let mut want = Vec::new();
            for p in 0..8 {
                ring.write(&vec![p as u8; len], None).unwrap();
                if len <= 64 && shares(p) {
                    want.push(node(p + 1));
                }
            }
            assert!(len > 64 || !want.is_empty(), "an 8-node ring has cells with both neighbours on their line");
            assert_eq!(hooks::prefetched(), want, "round {round}: a full ring of {len}-byte items");
            for _ in 0..8 {
                assert_eq!(ring.read(&mut buf, None).unwrap(), len);
            }
        }
        hooks::prefetched();
        for p in 0..16u8 {
            ring.write(&[p; 8], None).unwrap();
            assert_eq!(ring.read(&mut buf, None).unwrap(), 8);
        }
        assert_eq!(hooks::prefetched(), [], "a round trip");
    }

    /// A poll (zero timeout) of an open, empty ring ends at its first
    /// look, with the general claim's verdict (`Timeout`); a closed one
    /// still reports `Closed`; the look says "empty" only for a cell free
    /// for this lap's writer at the head, never for a claim, an item or a
    /// head left behind (which the general claim deals with).
    #[test]
    fn a_poll_of_an_empty_ring_ends_at_its_first_look() {
        use crate::sync::Liveness;
        let name = format!("circular-poll-{}", std::process::id());
        let ring = CircularBuffer::create(&name, 8, 16).unwrap();
        let mut buf = [0u8; 16];
        assert!(ring.ring().looks_empty(), "a fresh ring");
        let got = ring.read(&mut buf, Some(Duration::ZERO));
        assert!(matches!(got, Err(Error::Timeout { what: "an item in the ring", waited: Some(d) }) if d.is_zero()), "{got:?}");
        assert!(matches!(ring.try_read(&mut buf), Ok(None)));

        // A writer's claim at the head: not empty (its writer may be dead).
        let me = ring.seg.token();
        let (pos, idx) = ring.ring().claim_write_now(me).unwrap();
        assert!(!ring.ring().looks_empty(), "a writer's claim");
        assert!(matches!(ring.try_read(&mut buf), Ok(None)), "nothing to read yet");
        assert!(ring.ring().commit_write_with(pos, idx, 3, me, false));
        assert!(!ring.ring().looks_empty(), "an item");
        assert_eq!(ring.try_read(&mut buf).unwrap(), Some(3));
        assert!(ring.ring().looks_empty(), "read: the next cell is this lap's writer's");

        // A head left behind (a hint another reader did not move on): not
        // "empty" for the look; the general claim moves it and finds the
        // ring empty.
        ring.ring().cursors.head.store(pos, crate::platform::atomic::Ordering::Relaxed);
        assert!(!ring.ring().looks_empty(), "a stale head");
        assert!(matches!(ring.try_read(&mut buf), Ok(None)));
        assert!(ring.ring().looks_empty(), "the head moved on");

        ring.close();
        assert!(matches!(ring.read(&mut buf, Some(Duration::ZERO)), Err(Error::Closed)), "closed and empty");
        drop(ring);
        let _ = crate::segment::Segment::remove(&name);
    }

    /// A reader with batch reads that finds its writer in the middle of an
    /// item waits for a batch of items only while that writer goes on
    /// (looks only, counted by the hooks), and that wait is bounded:
    ///
    /// * an empty ring whose head node nobody writes: no looks at all (the
    ///   reader of a round trip waits for its item as before);
    /// * a writer in the middle of the head's item that claims nothing
    ///   more: the wait gives up after its most looks, and the item is read
    ///   once it is committed;
    /// * a writer at the head's item and another at the next (a stream that
    ///   stops there): the reader gives the writers a line's looks to reach
    ///   the next line of nodes, then reads;
    /// * the same without batch reads (the default): no looks at all.
    ///
    /// Each round's writers sleep 20 ms in the middle of their items. A
    /// reader preempted longer than that finds them committed and waits
    /// less, or not at all: that round says nothing, and is run again, 5
    /// times at most, until one gives the count. (Checked to fail with the first wait unbounded: it
    /// looked until the commit, 1,447,360 times; and with the bound of a
    /// line's looks left out: the stopped stream waited the most looks.)
    #[test]
    fn a_batch_reader_that_finds_its_writer_mid_item_waits_for_a_batch_but_not_for_ever() {
        use crate::sync::ring::{hooks, GAP_LOOKS, LINE_LOOKS};
        use crate::sync::WaitPolicy;
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::sync::Arc;
        for policy in [WaitPolicy::Spin, WaitPolicy::Hybrid] {
            let name = format!("circular-batch-idle-{}-{policy:?}", std::process::id());
            let ring = CircularBuffer::builder(&name).node_count(64).node_size(16).wait_policy(policy).create().unwrap();
            let reader = CircularBuffer::builder(&name).wait_policy(policy).batch_reads(true).open().unwrap();
            let mut buf = [0u8; 16];
            hooks::run_looks();
            assert!(matches!(reader.read(&mut buf, Some(Duration::from_millis(2))), Err(Error::Timeout { .. })));
            assert_eq!(hooks::run_looks(), 0, "{policy:?}: an empty ring nobody writes");
            drop((ring, reader));
            let _ = crate::segment::Segment::remove(&name);

            for (batch, writers, looks) in
                [(true, 1, GAP_LOOKS), (true, 2, LINE_LOOKS), (false, 2, 0)]
            {
                let mut seen = Vec::new();
                for round in 0..5 {
                    let name = format!("circular-batch-{}-{policy:?}-{batch}-{writers}-{round}", std::process::id());
                    let ring = Arc::new(
                        CircularBuffer::builder(&name).node_count(64).node_size(16).wait_policy(policy).create().unwrap(),
                    );
                    let reader = CircularBuffer::builder(&name).wait_policy(policy).batch_reads(batch).open().unwrap();
                    // Each writer claims the next node and sleeps in the
                    // middle of its item; the next starts once it is there.
                    let mid = Arc::new(AtomicUsize::new(0));
                    let handles: Vec<_> = (0..writers)
                        .map(|w| {
                            while mid.load(Ordering::SeqCst) < w {
                                std::thread::sleep(Duration::from_millis(1));
                            }
                            let (ring, mid) = (Arc::clone(&ring), Arc::clone(&mid));
                            std::thread::spawn(move || {
                                ring.write_with(1, Some(Duration::from_secs(5)), |item| {
                                    item[0] = w as u8;
                                    mid.fetch_add(1, Ordering::SeqCst);
                                    std::thread::sleep(Duration::from_millis(20));
                                })
                                .unwrap()
                            })
                        })
                        .collect();
                    while mid.load(Ordering::SeqCst) < writers {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    hooks::run_looks();
                    assert_eq!(reader.read(&mut buf, Some(Duration::from_secs(10))).unwrap(), 1);
                    seen.push(hooks::run_looks());
                    assert_eq!(buf[0], 0, "the head's item first");
                    for h in handles {
                        h.join().unwrap();
                    }
                    drop((ring, reader));
                    let _ = crate::segment::Segment::remove(&name);
                    if seen.last() == Some(&looks) {
                        break;
                    }
                }
                assert_eq!(
                    seen.last(),
                    Some(&looks),
                    "{policy:?}, batch reads {batch}, {writers} writers: looks in each round {seen:?}"
                );
            }
        }
    }

    /// A writer that finds the ring full waits for its reader to free a
    /// gap of cells before it claims (looks only, counted by the hooks),
    /// and that wait is bounded: a reader that frees one node and stops
    /// does not keep the writer from that node. A ring too small for a
    /// gap has the writer wait at the tail's node at once. (Checked to
    /// fail with the wait for the gap unbounded: the write never returns.)
    #[test]
    fn a_full_rings_writer_waits_for_a_gap_but_not_for_ever() {
        use crate::sync::WaitPolicy;
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::Arc;
        for (nodes, policy, looks) in
            [(64, WaitPolicy::Spin, 256), (64, WaitPolicy::Hybrid, 256), (8, WaitPolicy::Spin, 0)]
        {
            // The reader frees its node 20 ms after the writer is about to
            // write. A writer preempted longer than that in between finds
            // the node free and never waits (no looks): that round says
            // nothing, and is run again, 5 times at most. (A ring too small
            // for a gap expects no looks: one round.)
            let mut seen = Vec::new();
            for round in 0..5 {
                let name = format!("circular-gap-{}-{nodes}-{policy:?}-{round}", std::process::id());
                let writer = CircularBuffer::builder(&name)
                    .node_count(nodes)
                    .node_size(16)
                    .wait_policy(policy)
                    .create()
                    .unwrap();
                for i in 0..nodes {
                    writer.write(&[i as u8], Some(Duration::ZERO)).unwrap();
                }
                assert!(matches!(writer.try_write(b"full"), Err(Error::Full { .. })));
                let writing = Arc::new(AtomicBool::new(false));
                let reading = {
                    let (name, writing) = (name.clone(), Arc::clone(&writing));
                    // Frees the oldest node only, once the writer waits.
                    std::thread::spawn(move || {
                        let reader = CircularBuffer::builder(&name).wait_policy(policy).open().unwrap();
                        while !writing.load(Ordering::SeqCst) {
                            std::thread::sleep(Duration::from_millis(1));
                        }
                        std::thread::sleep(Duration::from_millis(20));
                        let mut buf = [0u8; 16];
                        assert_eq!(reader.read(&mut buf, Some(Duration::ZERO)).unwrap(), 1);
                        buf[0]
                    })
                };
                hooks::gap_looks();
                writing.store(true, Ordering::SeqCst);
                writer.write(b"next", Some(Duration::from_secs(10))).unwrap();
                seen.push(hooks::gap_looks());
                assert_eq!(reading.join().unwrap(), 0, "the oldest item was read");
                drop(writer);
                let _ = crate::segment::Segment::remove(&name);
                if looks == 0 || seen.last() != Some(&0) {
                    break;
                }
            }
            assert_eq!(seen.last(), Some(&looks), "{nodes} nodes, {policy:?}: looks in each round {seen:?}");
        }
    }

    /// A spinning writer whose reader keeps moving waits for the whole
    /// gap, past [`GAP_LOOKS`](crate::sync::ring::GAP_LOOKS) looks: here
    /// the reader is the writer's own thread, which reads one item at each
    /// of the writer's looks at the readers' progress (the hook, after
    /// each round of looks), so that the count is exact. A ring of 64 has
    /// a gap of 8: the cell of position 72 is free once items 0 to 8 are
    /// read, 9 reads, each after a round of looks, and one look more finds
    /// it free. The wait ends when the reader stops moving (the test
    /// above: one round), after 100 µs (a reader that takes 1 ms a step:
    /// one step), after the bound a test sets (5 ms, steps of 2 ms: one to
    /// three steps, fewer if the thread is preempted, never the nine the
    /// whole gap takes), no later than the write's timeout (5 ms, the
    /// bound lifted: the same), and a hybrid writer never looks past its
    /// first round (it sleeps for the gap instead). The first case lifts
    /// the bound too: a test thread preempted for 100 µs would end its
    /// wait early. (Checked to fail without the rounds after the first:
    /// the reader never steps, and the first write times out; and without
    /// the time bound: the 1 ms reader takes all nine steps.)
    #[test]
    fn a_spinning_writer_waits_for_its_gap_while_the_reader_moves() {
        use crate::sync::ring::{hooks, GAP_LOOKS};
        use crate::sync::WaitPolicy;
        use std::cell::Cell;
        use std::rc::Rc;
        let (long, lifted) = (Some(Duration::from_secs(10)), Some(Duration::from_secs(60)));
        let ms = Duration::from_millis;
        // (policy, step, timeout, bound, the reader's steps)
        let cases = [
            (WaitPolicy::Spin, Duration::ZERO, long, lifted, 9..=9),
            (WaitPolicy::Spin, ms(1), long, None, 1..=1),
            (WaitPolicy::Spin, ms(2), long, Some(ms(5)), 1..=3),
            (WaitPolicy::Spin, ms(2), Some(ms(5)), lifted, 1..=3),
            (WaitPolicy::Hybrid, Duration::ZERO, Some(ms(20)), lifted, 0..=0),
        ];
        for (case, (policy, step, timeout, most, steps)) in cases.into_iter().enumerate() {
            let name = format!("circular-gap-moving-{}-{case}", std::process::id());
            let writer =
                CircularBuffer::builder(&name).node_count(64).node_size(16).wait_policy(policy).create().unwrap();
            let reader = CircularBuffer::builder(&name).wait_policy(policy).open().unwrap();
            for i in 0..64u8 {
                writer.write(&[i], Some(Duration::ZERO)).unwrap();
            }
            let read = Rc::new(Cell::new(0u32));
            let count = Rc::clone(&read);
            hooks::at_gap_checks(move || {
                std::thread::sleep(step);
                let mut buf = [0u8; 16];
                assert_eq!(reader.read(&mut buf, Some(Duration::ZERO)).unwrap(), 1);
                assert_eq!(u32::from(buf[0]), count.get(), "items are read in order");
                count.set(count.get() + 1);
            });
            if let Some(most) = most {
                hooks::set_gap_wait_most(most);
            }
            hooks::gap_looks();
            let wrote = writer.write(b"next", timeout);
            let looks = hooks::gap_looks();
            hooks::no_gap_checks();
            let read = read.get();
            assert!(steps.contains(&read), "case {case}: the reader's steps: {read}, not in {steps:?}");
            if read == 0 {
                assert!(matches!(wrote, Err(Error::Timeout { .. })), "nobody read: {wrote:?}");
                assert_eq!(looks, GAP_LOOKS, "case {case}: one round");
            } else {
                wrote.unwrap();
                let rounds = if read == 9 { 9 * GAP_LOOKS + 1 } else { read * GAP_LOOKS };
                assert_eq!(looks, rounds, "case {case}: a round of looks before each step");
            }
            drop(writer);
            let _ = crate::segment::Segment::remove(&name);
        }
    }

    /// A writer that sleeps on a full ring asks to be woken once the
    /// readers have freed the gap (an eighth of the ring: item 8 of a ring
    /// of 64), and the readers' hand-backs before it wake nobody: the
    /// "not full" word does not move while the writer sleeps. The writer
    /// still gets through, woken at the mark or by its own slice. A mark
    /// at or behind the freed item, or more than a lap ahead of it (no
    /// writer's), wakes.
    #[test]
    fn a_sleeping_writer_is_woken_past_the_gap_not_at_every_hand_back() {
        use crate::sync::ring::room_reached;
        use crate::sync::WaitPolicy;
        assert!(!room_reached(8, 7, 64) && room_reached(8, 8, 64) && room_reached(8, 9, 64));
        assert!(room_reached(0, 70, 64), "a mark left behind (stale)");
        assert!(room_reached(1 << 40, 9, 64), "a mark more than a lap ahead (damage)");
        let name = format!("circular-room-at-{}", std::process::id());
        let ring = CircularBuffer::builder(&name).node_count(64).node_size(16).wait_policy(WaitPolicy::Futex).create().unwrap();
        for i in 0..64u8 {
            ring.write(&[i], Some(Duration::ZERO)).unwrap();
        }
        assert!(matches!(ring.write(b"x", Some(Duration::from_millis(3))), Err(Error::Timeout { .. })));
        assert_eq!(ring.room_at().load(crate::platform::atomic::Ordering::Relaxed), 8, "the mark of a full ring of 64");
        std::thread::scope(|s| {
            let writer = s.spawn(|| ring.write(b"next", Some(Duration::from_secs(20))));
            let not_full = ring.wait_cell(true);
            let registered = (0..2000).any(|_| {
                std::thread::sleep(Duration::from_millis(1));
                not_full.snapshot().1 != 0
            });
            assert!(registered, "the writer sleeps on the full ring");
            let before = not_full.snapshot().0;
            let mut buf = [0u8; 16];
            for i in 0..8u8 {
                assert_eq!(ring.read(&mut buf, Some(Duration::ZERO)).unwrap(), 1);
                assert_eq!(buf[0], i);
            }
            // Marks only grow (a writer that got a cell through its slice
            // and sleeps again asks for a later item), so items 0 - 7 are
            // short of every mark a writer here stores.
            assert_eq!(not_full.snapshot().0, before, "a hand-back short of the mark woke the writer");
            writer.join().unwrap().unwrap();
        });
        drop(ring);
        let _ = crate::segment::Segment::remove(&name);
    }

    /// The option word of a light ring, scribbled on, comes back from the
    /// sealed copy of the geometry at the next open, and the ring works;
    /// a ring with a plain option word opens as a ring without light
    /// hand-overs, and an option no build knows is refused.
    #[test]
    fn a_damaged_option_word_is_restored_or_refused() {
        use crate::platform::atomic::{AtomicU64, Ordering};
        let name = format!("circular-options-{}", std::process::id());
        let ring = CircularBuffer::builder(&name).node_count(4).node_size(16).light_handovers(true).create().unwrap();
        let word = ring.segment().get::<AtomicU64>(super::FLAGS_OFF).unwrap();
        word.store(0, Ordering::Relaxed);
        let again = CircularBuffer::open(&name).unwrap();
        assert!(again.light_handovers(), "restored from the sealed geometry");
        assert_eq!(word.load(Ordering::Relaxed), super::LIGHT);
        again.write(b"x", Some(Duration::ZERO)).unwrap();
        assert_eq!(ring.try_read_with(|item| item.to_vec()).unwrap(), Some(b"x".to_vec()));
        drop((ring, again));
        let _ = crate::segment::Segment::remove(&name);

        // Without a sealed copy (a raw segment laid out as a ring, as a
        // ring made before the copy existed): the word is taken as it is.
        let name = format!("circular-options-raw-{}", std::process::id());
        let (_, _, total) = super::layout(4, 16).unwrap();
        let seg = crate::segment::Segment::builder(&name)
            .kind(crate::segment::Kind::CIRCULAR)
            .size(total)
            .create_with(|seg| super::init(seg, 4, 16, 0))
            .unwrap();
        assert!(!CircularBuffer::open(&name).unwrap().light_handovers());
        seg.get::<AtomicU64>(super::FLAGS_OFF).unwrap().store(6, Ordering::Relaxed);
        let err = CircularBuffer::open(&name).unwrap_err();
        assert!(matches!(&err, Error::Corrupt { .. }), "{err:?}");
        assert!(err.to_string().contains("ring options"), "{err}");
        drop(seg);
        let _ = crate::segment::Segment::remove(&name);
    }

    /// The reader's poll hint says "try a claim" exactly when a claim has
    /// something to do at the head: an item committed, or a tombstone to
    /// step over; not while the ring is empty, nor while the next item is
    /// still being written (a claim would find nothing), and again not once
    /// the head item was read, wrapping around the ring more than once.
    #[test]
    fn the_read_hint_follows_the_node_at_the_head() {
        let name = format!("circular-read-hint-{}", std::process::id());
        let ring = CircularBuffer::create(&name, 4, 16).unwrap();
        let mut buf = [0u8; 16];
        assert!(!ring.readable_hint(), "empty");
        for lap in 0..3u8 {
            let claim = ring.claim_write(Some(Duration::ZERO)).unwrap();
            assert!(!ring.readable_hint(), "lap {lap}: being written");
            assert!(!ring.is_empty(), "the write cursor already counts it");
            ring.commit_claimed_write(claim, 1).unwrap();
            assert!(ring.readable_hint(), "lap {lap}: committed");
            assert_eq!(ring.read(&mut buf, Some(Duration::ZERO)).unwrap(), 1);
            assert!(!ring.readable_hint(), "lap {lap}: read");
            let claim = ring.claim_write(Some(Duration::ZERO)).unwrap();
            ring.abandon_claimed_write(claim);
            assert!(ring.readable_hint(), "lap {lap}: a tombstone to step over");
            ring.write(&[lap], Some(Duration::ZERO)).unwrap();
            assert_eq!(ring.read(&mut buf, Some(Duration::ZERO)).unwrap(), 1, "the tombstone stepped over");
            assert_eq!(buf[0], lap);
            assert!(!ring.readable_hint() && ring.is_empty(), "lap {lap}: drained");
        }
        drop(ring);
        let _ = crate::segment::Segment::remove(&name);
    }
}
