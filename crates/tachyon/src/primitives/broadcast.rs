//! `BroadcastBuffer`: a ring in which every reader sees every item, in
//! order, each reader with its own cursor.
//!
//! Source: each node is a seqlock (the Linux kernel's `seqlock_t`; with
//! the reader's copy done through atomics and an acquire fence before the
//! second load, as H.-J. Boehm, "Can seqlocks get along with programming
//! language memory models?", MSPC 2012, shows is needed), in a ring with
//! per-reader cursors as in the LMAX Disruptor.
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
//!
//! Damage (words another process scribbled on), found on slow paths only:
//! a reader always has `cursor <= tail`, so one that finds `tail` behind
//! its cursor knows it was moved back, and moves it forward again under the
//! writers' turn, from its cursor and the node words that witness the items
//! written ([`BroadcastBuffer::repair_tail`]). A reader about to wait stores
//! its entry (owner, cursor) again if it shows something else (only it
//! writes it), so a Block writer never waits for a cursor damaged low, nor
//! overwrites what a reader whose owner word was damaged has not read.

use crate::error::{Corruption, Error, Result};
use crate::platform::atomic::{fence, AtomicU32, AtomicU64, Ordering};
use crate::segment::{Kind, Segment, ShmSafe};
use crate::sync::ring::Cell;
use crate::sync::{Liveness, Mutex, Token, WaitCell, WaitPolicy};
use std::mem::{offset_of, size_of};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Most readers subscribed at once, across all processes.
pub const MAX_READERS: usize = 128;
/// Where the cells (one [`Cell`] per node) start: right after the control
/// block. The nodes follow them (see [`layout`]).
const CELLS_OFF: usize = size_of::<Control>();
/// Most nodes a broadcast ring may have.
pub const MAX_NODES: usize = 1 << 30;
/// A waiting reader stores its cursor again at least this often (its entry
/// may have been damaged), and waits at most this long for the writers'
/// turn to repair a damaged `tail`.
const CURSOR_SLICE: Duration = Duration::from_millis(50);

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

/// A timeout of a wait inside a call, renamed for what the call waited for
/// (and the call's whole timeout); other errors as they are.
fn waited(e: Error, what: &'static str, timeout: Option<Duration>) -> Error {
    match e {
        Error::Timeout { .. } => Error::timeout(what, timeout),
        e => e,
    }
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

/// The control block at the start of the data area: the geometry, then the
/// writers' state and each wait cell on a cache line of its own, then the
/// reader table.
#[repr(C)]
struct Control {
    /// Number of nodes (sealed geometry word 0).
    node_count: AtomicU64,
    /// Bytes per node (geometry word 1).
    node_size: AtomicU64,
    /// The [`Overflow`] policy, 0 or 1 (geometry word 2).
    overflow: AtomicU64,
    /// Non-zero once [`BroadcastBuffer::close`] was called.
    closed: AtomicU32,
    _pad0: [AtomicU32; 9],
    /// The writers' turn.
    mutex: Mutex,
    _pad1: [AtomicU32; 15],
    /// The next position to write.
    tail: AtomicU64,
    _pad2: [AtomicU64; 7],
    /// Where readers wait for an item.
    not_empty: WaitCell,
    _pad3: [AtomicU32; 14],
    /// Where a blocked writer waits for the slowest reader.
    not_full: WaitCell,
    _pad4: [AtomicU32; 14],
    readers: [ReaderEntry; MAX_READERS],
}

// The layout in shared memory: these offsets are what every process that
// maps a broadcast ring expects.
const _: () = assert!(offset_of!(Control, node_count) == 0);
const _: () = assert!(offset_of!(Control, node_size) == 8);
const _: () = assert!(offset_of!(Control, overflow) == 16);
const _: () = assert!(offset_of!(Control, closed) == 24);
const _: () = assert!(offset_of!(Control, mutex) == 64);
const _: () = assert!(offset_of!(Control, tail) == 128);
const _: () = assert!(offset_of!(Control, not_empty) == 192);
const _: () = assert!(offset_of!(Control, not_full) == 256);
const _: () = assert!(offset_of!(Control, readers) == 320);
const _: () = assert!(size_of::<ReaderEntry>() == 16);
const _: () = assert!(size_of::<Control>() == 320 + 16 * MAX_READERS);

// SAFETY: `repr(C)` of atomics and of `ShmSafe` types (`Mutex`, `WaitCell`,
// `ReaderEntry`), with no padding (the offsets and size are asserted
// above): any bits are valid and all mutation is atomic.
unsafe impl ShmSafe for Control {}

fn layout(nodes: usize, node_size: usize) -> Option<(usize, usize, usize)> {
    crate::sync::ring::nodes_layout(CELLS_OFF, nodes, node_size)
}

/// A broadcast ring between processes: every subscribed reader receives
/// every item, in order.
///
/// Any handle can write; [`subscribe`](Self::subscribe) gives a reader with
/// its own cursor. A reader that subscribes late starts at the newest item
/// already written (if any). See [`Overflow`] for what happens when a
/// reader falls a whole ring behind.
///
/// `BroadcastBuffer` is a cheap handle: clones share one mapping, and it
/// is `Send + Sync + 'static`.
///
/// [`close`](Self::close) ends it for every process: writes fail with
/// [`Error::Closed`], each reader gets what it has not read yet and then
/// [`Error::Closed`]; blocked calls wake.
///
/// ```
/// use std::time::Duration;
/// use tachyon::{BroadcastBuffer, Overflow};
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
#[derive(Clone)]
pub struct BroadcastBuffer {
    inner: Arc<Inner>,
    policy: WaitPolicy,
}

/// What every handle cloned from one [`BroadcastBuffer`] shares: the
/// mapping and the geometry read (and checked) at open.
struct Inner {
    seg: Segment,
    nodes: usize,
    node_size: usize,
    stride: usize,
    data_off: usize,
    overflow: Overflow,
}

/// What a [`BroadcastReader::read`] got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Received {
    /// Length of the item copied into the buffer.
    pub len: usize,
    /// Items this reader missed just before this one because writers
    /// overwrote them ([`Overflow::Overwrite`]), or because another
    /// process damaged them (a read that met the damage returned
    /// [`Error::Corrupt`] and stepped over the item). Otherwise 0.
    pub missed: u64,
}

/// Options for creating or opening a [`BroadcastBuffer`], from
/// [`BroadcastBuffer::builder`].
///
/// Geometry and overflow policy are fixed at create. On
/// [`create_or_open`](Self::create_or_open) and [`open`](Self::open), every
/// option set on the builder is checked against the existing buffer
/// ([`Error::Incompatible`] names the first that differs); options left
/// unset are taken from it.
///
/// ```
/// use std::time::Duration;
/// use tachyon::{BroadcastBuffer, Overflow};
/// # let name = format!("doc-bc-builder-{}", std::process::id());
/// let bus = BroadcastBuffer::builder(&name)
///     .node_count(16)
///     .node_size(128)
///     .overflow(Overflow::Overwrite)
///     .create_or_open()?;
/// // Another process asks for the same thing and gets the same buffer.
/// let peer = BroadcastBuffer::builder(&name).node_count(16).create_or_open()?;
/// assert_eq!((peer.node_count(), peer.node_size()), (16, 128));
/// // Asking for another geometry is refused, naming the field.
/// let err = BroadcastBuffer::builder(&name).node_size(64).create_or_open().unwrap_err();
/// assert!(matches!(err, tachyon::Error::Incompatible { field: "node_size", .. }));
/// # drop((bus, peer));
/// # Ok::<(), tachyon::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct BroadcastBufferBuilder {
    name: String,
    node_count: Option<usize>,
    node_size: Option<usize>,
    overflow: Option<Overflow>,
    policy: WaitPolicy,
}

impl BroadcastBufferBuilder {
    /// Number of nodes: how far the slowest reader may fall behind (2 to
    /// 2^30; default 64).
    pub fn node_count(mut self, n: usize) -> Self {
        self.node_count = Some(n);
        self
    }

    /// Bytes per node: the largest item (at least 1; default 4096).
    pub fn node_size(mut self, size: usize) -> Self {
        self.node_size = Some(size);
        self
    }

    /// What a writer does when the slowest reader is a whole ring behind
    /// (default [`Overflow::Block`]).
    pub fn overflow(mut self, overflow: Overflow) -> Self {
        self.overflow = Some(overflow);
        self
    }

    /// How this handle (and the readers it subscribes) waits (default
    /// [`WaitPolicy::Hybrid`]). Not shared: each handle chooses its own.
    pub fn wait_policy(mut self, policy: WaitPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// Creates the buffer; [`Error::AlreadyExists`] if a live one has the
    /// name.
    ///
    /// ```
    /// use tachyon::{BroadcastBuffer, Error};
    /// # let name = format!("doc-bc-builder-create-{}", std::process::id());
    /// let bus = BroadcastBuffer::builder(&name).node_count(4).node_size(32).create()?;
    /// assert!(matches!(BroadcastBuffer::builder(&name).create(), Err(Error::AlreadyExists { .. })));
    /// # drop(bus);
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn create(&self) -> Result<BroadcastBuffer> {
        let (count, size, overflow, total) = self.geometry()?;
        let seg = Segment::builder(&self.name)
            .kind(Kind::BROADCAST)
            .size(total)
            .geometry([count as u64, size as u64, overflow as u64, 0])
            .create_with(|seg| init(seg, count, size, overflow))?;
        self.check(BroadcastBuffer::from_segment(seg, self.policy)?)
    }

    /// Opens an existing buffer, learning its geometry from it; options
    /// set on the builder must match ([`Error::Incompatible`]).
    ///
    /// ```
    /// use tachyon::{BroadcastBuffer, Error, Overflow};
    /// # let name = format!("doc-bc-builder-open-{}", std::process::id());
    /// assert!(matches!(BroadcastBuffer::builder(&name).open(), Err(Error::NotFound { .. })));
    /// let bus = BroadcastBuffer::builder(&name).overflow(Overflow::Overwrite).create()?;
    /// let peer = BroadcastBuffer::builder(&name).overflow(Overflow::Overwrite).open()?;
    /// assert_eq!(peer.node_count(), 64); // the default, from the segment
    /// # drop(bus);
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn open(&self) -> Result<BroadcastBuffer> {
        let seg = Segment::builder(&self.name).kind(Kind::BROADCAST).open()?;
        self.check(BroadcastBuffer::from_segment(seg, self.policy)?)
    }

    /// Opens the buffer, or creates it with these options if there is
    /// none. [`Error::Incompatible`] if it exists with another node count,
    /// node size or overflow policy than one set on this builder.
    ///
    /// ```
    /// use tachyon::{BroadcastBuffer, Error, Overflow};
    /// # let name = format!("doc-bc-builder-coo-{}", std::process::id());
    /// // Every process runs the same line; the first one creates.
    /// let open = || BroadcastBuffer::builder(&name).node_count(8).create_or_open();
    /// let (a, b) = (open()?, open()?);
    /// let other = BroadcastBuffer::builder(&name).overflow(Overflow::Overwrite).create_or_open();
    /// assert!(matches!(other, Err(Error::Incompatible { field: "overflow", .. })));
    /// # drop((a, b));
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn create_or_open(&self) -> Result<BroadcastBuffer> {
        let (count, size, overflow, total) = self.geometry()?;
        let seg = Segment::builder(&self.name)
            .kind(Kind::BROADCAST)
            .size(total)
            .geometry([count as u64, size as u64, overflow as u64, 0])
            .create_or_open_with(|seg| init(seg, count, size, overflow))?;
        self.check(BroadcastBuffer::from_segment(seg, self.policy)?)
    }

    fn geometry(&self) -> Result<(usize, usize, Overflow, usize)> {
        let node_count = self.node_count.unwrap_or(64);
        let node_size = self.node_size.unwrap_or(4096);
        if !(2..=MAX_NODES).contains(&node_count) {
            return Err(Error::invalid(format!("node_count must be 2 to {MAX_NODES}, not {node_count}")));
        }
        if node_size == 0 || node_size > u32::MAX as usize {
            return Err(Error::invalid(format!("node_size must be 1 to {}, not {node_size}", u32::MAX)));
        }
        let (_, _, total) = layout(node_count, node_size).ok_or_else(|| {
            Error::invalid(format!("{node_count} nodes of {node_size} bytes do not fit in memory"))
        })?;
        Ok((node_count, node_size, self.overflow.unwrap_or_default(), total))
    }

    /// The buffer if it matches every option set on this builder.
    fn check(&self, bus: BroadcastBuffer) -> Result<BroadcastBuffer> {
        let differs = |field: &'static str, existing: String, requested: String| Error::Incompatible {
            name: self.name.clone(),
            field,
            existing,
            requested,
        };
        if let Some(n) = self.node_count.filter(|&n| n != bus.node_count()) {
            return Err(differs("node_count", bus.node_count().to_string(), n.to_string()));
        }
        if let Some(n) = self.node_size.filter(|&n| n != bus.node_size()) {
            return Err(differs("node_size", bus.node_size().to_string(), n.to_string()));
        }
        if let Some(o) = self.overflow.filter(|&o| o != bus.overflow()) {
            return Err(differs("overflow", format!("{:?}", bus.overflow()), format!("{o:?}")));
        }
        Ok(bus)
    }
}

/// Writes the geometry; runs before the segment is visible to anyone.
fn init(seg: &Segment, node_count: usize, node_size: usize, overflow: Overflow) -> Result<()> {
    let ctl = seg.get::<Control>(0)?;
    ctl.node_count.store(node_count as u64, Ordering::Relaxed);
    ctl.node_size.store(node_size as u64, Ordering::Relaxed);
    ctl.overflow.store(overflow as u64, Ordering::Relaxed);
    Ok(())
}

impl BroadcastBuffer {
    /// A builder for the geometry, the overflow policy, the wait policy
    /// and `create_or_open`.
    ///
    /// ```
    /// use tachyon::{BroadcastBuffer, Overflow};
    /// use tachyon::sync::WaitPolicy;
    /// # let name = format!("doc-bc-builder-fn-{}", std::process::id());
    /// let bus = BroadcastBuffer::builder(&name)
    ///     .node_count(32)
    ///     .node_size(512)
    ///     .overflow(Overflow::Block)
    ///     .wait_policy(WaitPolicy::Futex)
    ///     .create()?;
    /// assert_eq!((bus.node_count(), bus.node_size()), (32, 512));
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn builder(name: &str) -> BroadcastBufferBuilder {
        BroadcastBufferBuilder {
            name: name.to_owned(),
            node_count: None,
            node_size: None,
            overflow: None,
            policy: WaitPolicy::default(),
        }
    }

    /// Creates a broadcast ring of `node_count` nodes of `node_size` bytes
    /// (shorthand for the [`builder`](Self::builder)).
    ///
    /// ```
    /// use tachyon::{BroadcastBuffer, Overflow};
    /// # let name = format!("doc-bc-create-{}", std::process::id());
    /// let bus = BroadcastBuffer::create(&name, 8, 64, Overflow::Block)?;
    /// assert_eq!(bus.node_count(), 8);
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn create(name: &str, node_count: usize, node_size: usize, overflow: Overflow) -> Result<Self> {
        Self::builder(name).node_count(node_count).node_size(node_size).overflow(overflow).create()
    }

    /// Opens an existing broadcast ring.
    ///
    /// ```
    /// use tachyon::{BroadcastBuffer, Overflow};
    /// # let name = format!("doc-bc-open-{}", std::process::id());
    /// let bus = BroadcastBuffer::create(&name, 8, 64, Overflow::Overwrite)?;
    /// let peer = BroadcastBuffer::open(&name)?; // usually in another process
    /// assert_eq!(peer.overflow(), Overflow::Overwrite);
    /// # drop(bus);
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn open(name: &str) -> Result<Self> {
        Self::builder(name).open()
    }

    /// Sets how this handle waits (default [`WaitPolicy::Hybrid`]).
    pub fn set_wait_policy(&mut self, policy: WaitPolicy) {
        self.policy = policy;
    }

    fn from_segment(seg: Segment, policy: WaitPolicy) -> Result<Self> {
        let bad = |field, value| Error::corrupt(Corruption::BadField { field, value });
        // Geometry words damaged since creation: restored from their
        // sealed copy in the segment header.
        seg.restore_geometry(&[
            offset_of!(Control, node_count),
            offset_of!(Control, node_size),
            offset_of!(Control, overflow),
        ])?;
        let ctl = seg.get::<Control>(0).map_err(|_| bad("broadcast ring size", seg.size() as u64))?;
        let nodes = ctl.node_count.load(Ordering::Relaxed);
        let node_size = ctl.node_size.load(Ordering::Relaxed);
        let overflow = match ctl.overflow.load(Ordering::Relaxed) {
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
            inner: Arc::new(Inner { seg, nodes, node_size, stride, data_off, overflow }),
            policy,
        })
    }

    /// Number of nodes: how far a reader may fall behind.
    pub fn node_count(&self) -> usize {
        self.inner.nodes
    }

    /// Bytes per node: the largest item.
    pub fn node_size(&self) -> usize {
        self.inner.node_size
    }

    /// The overflow policy chosen at create.
    pub fn overflow(&self) -> Overflow {
        self.inner.overflow
    }

    /// Items written so far (the next position).
    pub fn written(&self) -> u64 {
        self.tail().load(Ordering::Acquire)
    }

    /// Closes the buffer for every process that uses it: from now on
    /// writes fail with [`Error::Closed`], and each reader gets the items
    /// it has not read yet, then [`Error::Closed`] instead of waiting.
    /// Blocked writers and readers, in any process, wake at once (futex).
    /// Closing is for good, until the segment is gone; dropping a handle
    /// does not close.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tachyon::{BroadcastBuffer, Error, Overflow};
    /// # let name = format!("doc-bc-close-{}", std::process::id());
    /// let bus = BroadcastBuffer::create(&name, 4, 16, Overflow::Block)?;
    /// let mut reader = bus.subscribe()?;
    /// bus.write(b"bye", None)?;
    /// bus.close();
    /// assert!(matches!(bus.write(b"more", None), Err(Error::Closed)));
    /// let mut buf = [0u8; 16];
    /// assert_eq!(reader.read(&mut buf, None)?.len, 3); // unread items first
    /// assert!(matches!(reader.read(&mut buf, None), Err(Error::Closed)));
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn close(&self) {
        self.closed_flag().store(1, Ordering::SeqCst);
        // SYNC: waiters load the flag in their predicate after they
        // register; `notify_all` fences before it looks for sleepers.
        self.wait_cell(false).notify_all();
        self.wait_cell(true).notify_all();
    }

    /// Whether [`close`](Self::close) was called (by any process).
    ///
    /// ```
    /// # use tachyon::{BroadcastBuffer, Overflow};
    /// # let name = format!("doc-bc-is-closed-{}", std::process::id());
    /// let bus = BroadcastBuffer::create(&name, 2, 8, Overflow::Overwrite)?;
    /// assert!(!bus.is_closed());
    /// bus.close();
    /// assert!(bus.is_closed());
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn is_closed(&self) -> bool {
        self.closed_flag().load(Ordering::Acquire) != 0
    }

    // The control block, the cells and the nodes are all in bounds and
    // aligned: the segment's size was checked against `layout` in
    // `from_segment`. `get` re-checks, so the `expect`s cannot fire on a
    // validated ring.
    fn ctl(&self) -> &Control {
        self.inner.seg.get(0).expect("validated layout")
    }
    fn closed_flag(&self) -> &AtomicU32 {
        &self.ctl().closed
    }
    fn tail(&self) -> &AtomicU64 {
        &self.ctl().tail
    }
    fn mutex(&self) -> &Mutex {
        &self.ctl().mutex
    }
    pub(crate) fn wait_cell(&self, not_full: bool) -> &WaitCell {
        let ctl = self.ctl();
        if not_full {
            &ctl.not_full
        } else {
            &ctl.not_empty
        }
    }
    fn readers(&self) -> &[ReaderEntry] {
        &self.ctl().readers
    }
    fn cell(&self, pos: u64) -> &Cell {
        let idx = (pos % self.inner.nodes as u64) as usize;
        &self.inner.seg.get_slice::<Cell>(CELLS_OFF, self.inner.nodes).expect("validated layout")[idx]
    }
    fn node(&self, pos: u64) -> &[AtomicU64] {
        let idx = (pos % self.inner.nodes as u64) as usize;
        self.inner
            .seg
            .get_slice(self.inner.data_off + idx * self.inner.stride, self.inner.stride / 8)
            .expect("validated layout")
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
                && Token::from_raw(owner).is_none_or(|t| self.inner.seg.is_dead(t))
                && e.owner.compare_exchange(owner, 0, Ordering::SeqCst, Ordering::Relaxed).is_ok()
            {
                continue; // a dead reader: dropped
            }
            let c = e.cursor.load(Ordering::SeqCst);
            min = Some(min.map_or(c, |m| m.min(c)));
        }
        min
    }

    /// Moves `tail` forward to the position its witnesses say the writers
    /// reached, after a reader found it behind its own cursor `floor`
    /// (damaged: the reader moved past a position only after it saw `tail`
    /// past it, so the writers reached `floor` at least).
    ///
    /// Done under the writers' turn (waiting at most `wait` for it), so no
    /// writer stores `tail` meanwhile. The witnesses are the reader's
    /// cursor and the node words: a writer stores `2p + 2` in node `p % n`
    /// (item `p` written) before it moves `tail` past `p`. From `floor`
    /// (or the damaged value, if above), the walk steps over each node
    /// holding item `t` exactly, and over a node holding a later item `p`
    /// of the same node (`p ≡ t` mod n) when the node before holds item
    /// `p - 1` as well (two witnesses: one damaged node word cannot carry
    /// `tail` away); at most `2n` steps. The result is stored by one CAS
    /// from the damaged value. Returns whether `tail` moved.
    fn repair_tail(&self, floor: u64, wait: Duration) -> bool {
        let Ok(_turn) = self.mutex().lock(&self.inner.seg, Some(wait)) else { return false };
        let n = self.inner.nodes as u64;
        let damaged = self.tail().load(Ordering::SeqCst);
        if damaged >= floor {
            return false; // repaired by another reader meanwhile, or written up to it
        }
        let holds = |pos: u64| self.cell(pos).word.load(Ordering::Acquire) == pos.wrapping_mul(2).wrapping_add(2);
        let mut t = floor;
        for _ in 0..2 * n {
            if holds(t) {
                t += 1;
                continue;
            }
            let w = self.cell(t).word.load(Ordering::Acquire);
            let later = (w / 2).wrapping_sub(1); // the item of an even word
            if w >= 2 && w % 2 == 0 && later > t && (later - t) % n == 0 && holds(later - 1) {
                t = later + 1;
                continue;
            }
            break;
        }
        // SYNC: SeqCst, as every store of `tail` (readers Acquire it, after
        // the node words the walk read, which the writers stored first).
        if self.tail().compare_exchange(damaged, t, Ordering::SeqCst, Ordering::Relaxed).is_err() {
            return false;
        }
        crate::platform::trace::ring_damage!(damaged, t);
        self.wait_cell(false).notify_all();
        true
    }

    /// Writes one item to every reader. With [`Overflow::Block`], waits up
    /// to `timeout` for the slowest reader to make room, then fails with
    /// [`Error::Timeout`] (`None`: for ever; `Some(Duration::ZERO)`: tries
    /// once without waiting, see [timeouts](crate#timeouts)). An item
    /// longer than the node size is [`Error::MessageTooLarge`];
    /// [`Error::Closed`] once the buffer is [closed](Self::close).
    pub fn write(&self, item: &[u8], timeout: Option<Duration>) -> Result<()> {
        if item.len() > self.inner.node_size {
            return Err(Error::MessageTooLarge {
                size: item.len(),
                max: self.inner.node_size,
                hint: "create the buffer with larger nodes, or split the item",
            });
        }
        let deadline = timeout.and_then(crate::platform::deadline_after);
        let remaining = || deadline.map(|d| d.saturating_duration_since(Instant::now()));
        // A previous writer that died mid-item left `tail` where it was; we
        // simply write that position again.
        let _turn = self
            .mutex()
            .lock(&self.inner.seg, remaining())
            .map_err(|e| waited(e, "the broadcast buffer's writer turn (another writer has it)", timeout))?;
        if self.is_closed() {
            return Err(Error::Closed);
        }
        let pos = self.tail().load(Ordering::SeqCst);
        let n = self.inner.nodes as u64;
        if self.inner.overflow == Overflow::Block && pos >= n {
            let mut slice = Duration::from_millis(1);
            // A call that will not wait looks for dead readers at once.
            let mut reap = timeout.is_some_and(|t| t.is_zero());
            loop {
                let until = remaining().map_or(slice, |r| r.min(slice));
                let room = self.wait_cell(true).wait_until(self.policy, Some(until), || {
                    if self.is_closed() {
                        return Some(Err(Error::Closed));
                    }
                    self.slowest(std::mem::take(&mut reap))
                        .is_none_or(|c| c.saturating_add(n) > pos)
                        .then_some(Ok(()))
                });
                match room {
                    Ok(Ok(())) => break,
                    Ok(Err(e)) => return Err(e),
                    Err(Error::Timeout { .. }) if remaining().is_none_or(|r| !r.is_zero()) => {
                        reap = true; // still blocked after a while: is that reader dead?
                        slice = (slice * 2).min(Duration::from_millis(50));
                    }
                    Err(e) => {
                        return Err(waited(
                            e,
                            "room in the broadcast buffer (its slowest reader is a whole ring behind)",
                            timeout,
                        ))
                    }
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

    /// Writes one item if that needs no wait: [`Error::Full`] if the
    /// slowest live reader is a whole ring behind ([`Overflow::Block`]; a
    /// dead reader in the way is dropped first) or another writer holds
    /// the writers' turn at this moment.
    ///
    /// ```
    /// use tachyon::{BroadcastBuffer, Error, Overflow};
    /// # let name = format!("doc-bc-try-write-{}", std::process::id());
    /// let bus = BroadcastBuffer::create(&name, 2, 16, Overflow::Block)?;
    /// let _reader = bus.subscribe()?;
    /// bus.try_write(b"a")?;
    /// bus.try_write(b"b")?;
    /// assert!(matches!(bus.try_write(b"c"), Err(Error::Full { .. })));
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn try_write(&self, item: &[u8]) -> Result<()> {
        match self.write(item, Some(Duration::ZERO)) {
            Err(Error::Timeout { .. }) => Err(Error::Full { what: "the broadcast buffer" }),
            other => other,
        }
    }

    /// Subscribes a reader. It starts at the newest item already written,
    /// or at the first one to come if none was. [`Error::NoSpace`] if
    /// [`MAX_READERS`] readers are subscribed.
    ///
    /// The reader owns a handle to the buffer (it is `'static` and
    /// `Send`): move it into a thread or a task.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tachyon::{BroadcastBuffer, Overflow};
    /// # let name = format!("doc-bc-subscribe-{}", std::process::id());
    /// let bus = BroadcastBuffer::create(&name, 8, 64, Overflow::Block)?;
    /// let mut reader = bus.subscribe()?;
    /// let t = std::thread::spawn(move || {
    ///     let mut buf = [0u8; 64];
    ///     let got = reader.read(&mut buf, Some(Duration::from_secs(5)))?;
    ///     Ok::<_, tachyon::Error>(buf[..got.len].to_vec())
    /// });
    /// bus.write(b"hi", None)?;
    /// assert_eq!(t.join().expect("reader thread")?, b"hi");
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn subscribe(&self) -> Result<BroadcastReader> {
        let me = self.inner.seg.token().raw();
        for reap in [false, true] {
            for (i, e) in self.readers().iter().enumerate() {
                let owner = e.owner.load(Ordering::SeqCst);
                let free =
                    owner == 0 || (reap && Token::from_raw(owner).is_none_or(|t| self.inner.seg.is_dead(t)));
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
                return Ok(BroadcastReader {
                    bus: self.clone(),
                    at: Cursor { entry: i, cursor: start, missed: 0 },
                });
            }
        }
        Err(Error::NoSpace { what: format!("all {MAX_READERS} reader entries are in use by live readers") })
    }
}

impl std::fmt::Debug for BroadcastBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BroadcastBuffer")
            .field("name", &self.inner.seg.name())
            .field("node_count", &self.inner.nodes)
            .field("node_size", &self.inner.node_size)
            .field("overflow", &self.inner.overflow)
            .field("closed", &self.is_closed())
            .finish()
    }
}

/// A subscribed reader of a [`BroadcastBuffer`], with its own cursor.
/// Dropping it unsubscribes.
///
/// It holds its own handle to the buffer: it is `'static` and `Send`, so
/// it can be moved into a thread or an async task (a read blocks its
/// thread; in async code, use [`try_read`](Self::try_read) or
/// `spawn_blocking`).
pub struct BroadcastReader {
    bus: BroadcastBuffer,
    at: Cursor,
}

/// Where a reader is.
struct Cursor {
    entry: usize,
    cursor: u64,
    missed: u64,
}

impl BroadcastReader {
    /// The position of the next item this reader will get.
    ///
    /// ```
    /// use tachyon::{BroadcastBuffer, Overflow};
    /// # let name = format!("doc-bc-position-{}", std::process::id());
    /// let bus = BroadcastBuffer::create(&name, 4, 8, Overflow::Block)?;
    /// let mut reader = bus.subscribe()?;
    /// bus.write(b"a", None)?;
    /// reader.try_read(&mut [0u8; 8])?;
    /// assert_eq!(reader.position(), 1);
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn position(&self) -> u64 {
        self.at.cursor
    }

    /// The buffer this reader reads (the handle it owns).
    ///
    /// ```
    /// use tachyon::{BroadcastBuffer, Overflow};
    /// # let name = format!("doc-bc-reader-buffer-{}", std::process::id());
    /// let reader = BroadcastBuffer::create(&name, 4, 8, Overflow::Block)?.subscribe()?;
    /// assert_eq!(reader.buffer().node_count(), 4); // the buffer lives on in the reader
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn buffer(&self) -> &BroadcastBuffer {
        &self.bus
    }

    /// Copies the next item into `buf`, waiting up to `timeout` for one,
    /// then [`Error::Timeout`] (`None`: for ever; `Some(Duration::ZERO)`:
    /// tries once without waiting, see [timeouts](crate#timeouts)). If the
    /// item is longer than `buf`, it stays next and the error is
    /// [`Error::BufferTooSmall`]. Once the buffer is
    /// [closed](BroadcastBuffer::close) and this reader has read every
    /// item: [`Error::Closed`].
    pub fn read(&mut self, buf: &mut [u8], timeout: Option<Duration>) -> Result<Received> {
        let (bus, at) = (&self.bus, &mut self.at);
        let n = bus.inner.nodes as u64;
        let deadline = timeout.and_then(crate::platform::deadline_after);
        let remaining = || deadline.map(|d| d.saturating_duration_since(Instant::now()));
        // One repair of a `tail` found behind this reader per call: if the
        // node words cannot witness the real tail (damaged too), the reader
        // waits for the writers as before.
        let mut may_repair = true;
        loop {
            let c = at.cursor;
            let ready = || {
                let t = bus.tail().load(Ordering::Acquire);
                if t > c {
                    Some(Ok(t))
                } else if bus.is_closed() {
                    Some(Err(Error::Closed))
                } else if t < c && may_repair {
                    // Behind this reader's cursor: damaged (see below).
                    Some(Ok(t))
                } else {
                    None
                }
            };
            let mut tail = bus.wait_cell(false).wait_until(bus.policy, Some(Duration::ZERO), ready);
            // Nothing to read now: this reader is about to wait (the slow
            // path). Its entry must show it and its cursor, or a Block
            // writer may wait for a cursor damaged low for ever (the reader
            // stores it only when it moves): restored before the wait and
            // after every slice of it.
            while matches!(tail, Err(Error::Timeout { .. })) && remaining().is_none_or(|r| !r.is_zero()) {
                at.publish(bus);
                let slice = remaining().map_or(CURSOR_SLICE, |r| r.min(CURSOR_SLICE));
                tail = bus.wait_cell(false).wait_until(bus.policy, Some(slice), ready);
            }
            let tail = tail.map_err(|e| waited(e, "an item in the broadcast buffer", timeout))??;
            if tail < c {
                // No step of the protocol moves `tail` back, and this reader
                // moved past a position only after it saw `tail` past it:
                // another process damaged `tail`. Repaired from its witness.
                may_repair = false;
                let wait = remaining().map_or(CURSOR_SLICE, |r| r.min(CURSOR_SLICE));
                bus.repair_tail(c, wait);
                continue;
            }
            if tail.wrapping_sub(c) > n {
                // Overwritten already: skip to the oldest item still there.
                at.move_to(bus, tail - n, false);
                continue;
            }
            let cell = bus.cell(c);
            let before = cell.word.load(Ordering::Acquire);
            let want = c.wrapping_mul(2).wrapping_add(2);
            if before != want {
                if before > want {
                    // The node already holds a later item: `c` is gone.
                    at.move_to(bus, c + 1, false);
                    continue;
                }
                // Below `2c + 2` with `c < tail`: no step of the protocol
                // leaves that (the writer stored `2c + 2` before it moved
                // `tail` past `c`, and this reader's load of `tail`
                // acquired it), so another process scribbled on the word.
                // Item `c` is lost: the reader steps over it (counted in
                // `missed`) and says so once; its next read goes on.
                at.move_to(bus, c + 1, false);
                return Err(Error::corrupt(Corruption::BadField {
                    field: "broadcast node word (damaged; the item is skipped)",
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
                at.move_to(bus, c + 1, false);
                continue;
            }
            if len as usize > bus.inner.node_size {
                // Damaged as above: skipped, said once.
                at.move_to(bus, c + 1, false);
                return Err(Error::corrupt(Corruption::BadField {
                    field: "broadcast item length (damaged; the item is skipped)",
                    value: len,
                }));
            }
            if !fits {
                return Err(Error::BufferTooSmall { item: len as usize, buffer: buf.len() });
            }
            at.move_to(bus, c + 1, true);
            return Ok(Received { len: len as usize, missed: std::mem::take(&mut at.missed) });
        }
    }

    /// Copies the next item into `buf` if there is one now: `Ok(None)` if
    /// not (never [`Error::Timeout`]; [`Error::Closed`] if the buffer is
    /// closed and this reader has read everything).
    ///
    /// ```
    /// use tachyon::{BroadcastBuffer, Overflow};
    /// # let name = format!("doc-bc-try-read-{}", std::process::id());
    /// let bus = BroadcastBuffer::create(&name, 4, 32, Overflow::Block)?;
    /// let mut reader = bus.subscribe()?;
    /// let mut buf = [0u8; 32];
    /// assert_eq!(reader.try_read(&mut buf)?, None);
    /// bus.write(b"x", None)?;
    /// assert_eq!(reader.try_read(&mut buf)?.map(|got| got.len), Some(1));
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn try_read(&mut self, buf: &mut [u8]) -> Result<Option<Received>> {
        match self.read(buf, Some(Duration::ZERO)) {
            Ok(got) => Ok(Some(got)),
            Err(Error::Timeout { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

impl Cursor {
    /// Stores the reader's entry again where it shows something else than
    /// this reader (only the reader writes its entry while it owns it, and
    /// only a writer that judged it dead drops it), each word by one CAS
    /// from what it shows; wakes blocked writers then. Slow path only (a
    /// reader about to wait).
    ///
    /// The owner: taken back if it is no token (damaged) or 0 (dropped by a
    /// writer that found it damaged); another reader's token means the
    /// entry went to a new subscriber, and nothing is written. The cursor:
    /// stored again if it differs (damaged low, a Block writer would wait
    /// for it for ever; high, writers would overwrite what it has not read).
    fn publish(&self, bus: &BroadcastBuffer) {
        let entry = &bus.readers()[self.entry];
        let me = bus.inner.seg.token().raw();
        let mut repaired = false;
        let owner = entry.owner.load(Ordering::SeqCst);
        if owner != me {
            // SYNC: SeqCst, as every store of an owner (`subscribe`, `slowest`).
            if Token::from_raw(owner).is_some()
                || entry.owner.compare_exchange(owner, me, Ordering::SeqCst, Ordering::Relaxed).is_err()
            {
                return; // another reader's entry now: not ours to write
            }
            crate::platform::trace::ring_damage!(u64::from(owner), u64::from(me));
            repaired = true;
        }
        let shown = entry.cursor.load(Ordering::SeqCst);
        // SYNC: SeqCst, as every store of a cursor: against the writer's loads in `slowest`.
        if shown != self.cursor
            && entry.cursor.compare_exchange(shown, self.cursor, Ordering::SeqCst, Ordering::Relaxed).is_ok()
        {
            crate::platform::trace::ring_damage!(shown, self.cursor);
            repaired = true;
        }
        if repaired {
            bus.wait_cell(true).notify_all();
        }
    }

    /// Moves the cursor to `pos`; items skipped on the way count as missed
    /// unless `read_one` (the item at the old cursor was just read).
    fn move_to(&mut self, bus: &BroadcastBuffer, pos: u64, read_one: bool) {
        self.missed =
            self.missed.saturating_add(pos.saturating_sub(self.cursor).saturating_sub(u64::from(read_one)));
        self.cursor = pos;
        bus.readers()[self.entry].cursor.store(pos, Ordering::SeqCst);
        bus.wait_cell(true).notify_all();
    }
}

impl std::fmt::Debug for BroadcastReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BroadcastReader")
            .field("name", &self.bus.inner.seg.name())
            .field("position", &self.at.cursor)
            .finish()
    }
}

impl Drop for BroadcastReader {
    fn drop(&mut self) {
        // The next owner starts from cursor 0 (see `subscribe`).
        self.bus.readers()[self.at.entry].cursor.store(0, Ordering::SeqCst);
        self.bus.readers()[self.at.entry].owner.store(0, Ordering::SeqCst);
        self.bus.wait_cell(true).notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Barrier;

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
            let turn = dying.mutex().lock(&dying.inner.seg, None).unwrap();
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
                        let shared = bus.readers()[r.at.entry].cursor.load(Ordering::SeqCst);
                        assert_eq!(shared, r.at.cursor);
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
