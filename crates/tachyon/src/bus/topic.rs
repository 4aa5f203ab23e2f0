//! Topics: partitioned rings of 16-byte descriptors pointing into the
//! payload pool; loans, publishing, receiving.
//!
//! A descriptor is a ring cell (see `primitives/ring.rs`): the control word
//! (sequence and claimant token) and a second word naming one publication
//! of a chunk: its index, the low bits of its publication count, and the
//! message length (see `pool::Descriptor`). Producers contend
//! on one CAS per publish; consumers of a partition compete, each message
//! going to exactly one of them. Every descriptor read from a ring is
//! validated (chunk index in range, length within its chunk, chunk really
//! queued) before any payload byte is touched.

use super::pool::{Descriptor, HELD, LOANED, QUEUED};
use super::region::{Region, MAX_MESSAGE, RECOVERY_INTERVAL};
use crate::error::{Corruption, Error, Result};
use crate::platform::atomic::{AtomicU32, AtomicU64, Ordering};
use crate::primitives::ring::{Cell, Cursors, Ring, Waits};
use crate::segment::{Segment, ShmSafe};
use crate::sync::{Liveness, WaitPolicy};
use std::ops::{Deref, DerefMut};
use std::time::{Duration, Instant};

/// Bytes in front of each partition's cells: cursors and two wait cells.
pub(crate) const PARTITION_HEADER: usize = 192;
const NOT_EMPTY: usize = 128;
const NOT_FULL: usize = 136;
const MAX_NAME: usize = 64;
const READY: u32 = 1;
/// What a receive waits for.
const WAIT_MESSAGE: &str = "a message in the topic's partition";
/// What to do about a message larger than the largest chunk.
pub(crate) const TOO_LARGE: &str =
    "the largest pool chunk is 1 MiB: split the message, or send a reference to a SharedBuffer";
/// Most partitions per topic.
pub const MAX_PARTITIONS: u32 = 256;
/// Most descriptors per partition.
pub const MAX_CAPACITY: u32 = 1 << 20;

/// What happens to a message whose consumer dies before releasing it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize), serde(rename_all = "kebab-case"))]
pub enum Delivery {
    /// It is lost (and counted): each message is delivered at most once.
    #[default]
    AtMostOnce,
    /// It is delivered again, to another consumer of its partition, after
    /// the messages published meanwhile: each message is delivered at
    /// least once (consumers must tolerate duplicates).
    AtLeastOnce,
}

/// How a topic is built. `Default`: 1 partition of 1024 descriptors,
/// hybrid waiting, at-most-once delivery.
///
/// ```
/// use tachyon::bus::TopicConfig;
/// use tachyon::sync::WaitPolicy;
/// let cfg = TopicConfig { partitions: 4, capacity: 256, wait: WaitPolicy::Spin, ..Default::default() };
/// assert!(cfg.validate().is_ok());
/// assert!(TopicConfig { partitions: 3, ..cfg }.validate().is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TopicConfig {
    /// Partitions: a power of two, 1 to 256. A key always maps to the same
    /// partition, so messages with one key stay in order.
    pub partitions: u32,
    /// Descriptors per partition: a power of two, 2 to 2^20.
    pub capacity: u32,
    /// How producers and consumers of this topic wait.
    pub wait: WaitPolicy,
    /// What a consumer's death does to the message it held.
    pub delivery: Delivery,
}

impl Default for TopicConfig {
    fn default() -> Self {
        TopicConfig {
            partitions: 1,
            capacity: 1024,
            wait: WaitPolicy::Hybrid,
            delivery: Delivery::AtMostOnce,
        }
    }
}

impl TopicConfig {
    /// Checks the values.
    pub fn validate(&self) -> Result<()> {
        if !self.partitions.is_power_of_two() || self.partitions > MAX_PARTITIONS {
            return Err(Error::invalid(format!(
                "partitions must be a power of two from 1 to {MAX_PARTITIONS}, not {}",
                self.partitions
            )));
        }
        if !self.capacity.is_power_of_two() || self.capacity < 2 || self.capacity > MAX_CAPACITY {
            return Err(Error::invalid(format!(
                "capacity must be a power of two from 2 to {MAX_CAPACITY}, not {}",
                self.capacity
            )));
        }
        Ok(())
    }

    fn block(&self) -> usize {
        (PARTITION_HEADER + 16 * self.capacity as usize).div_ceil(64) * 64
    }

    pub(crate) fn ring_bytes(&self) -> usize {
        self.block() * self.partitions as usize
    }
}

pub(crate) fn check_name(name: &str) -> Result<()> {
    if name.is_empty() || name.len() > MAX_NAME || name.contains('\0') {
        return Err(Error::InvalidName {
            name: name.to_owned(),
            reason: "a topic name is 1 to 64 bytes without NUL",
        });
    }
    Ok(())
}

/// A topic's directory entry in the region (128 bytes).
#[repr(C)]
pub(crate) struct TopicEntry {
    state: AtomicU32,
    partitions: AtomicU32,
    capacity: AtomicU32,
    wait: AtomicU32,
    ring_off: AtomicU64,
    name_len: AtomicU32,
    delivery: AtomicU32,
    published: AtomicU64,
    received: AtomicU64,
    corrupt: AtomicU64,
    pub(crate) lost: AtomicU64,
    name: [AtomicU64; 8],
}

const _: () = assert!(std::mem::size_of::<TopicEntry>() == 128);

// SAFETY: `repr(C)`, atomics only; any bits are valid.
unsafe impl ShmSafe for TopicEntry {}

/// A topic as listed by [`Region::topics`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct TopicInfo {
    /// Its name.
    pub name: String,
    /// Partitions.
    pub partitions: u32,
    /// Descriptors per partition.
    pub capacity: u32,
    /// How its producers and consumers wait (`None` if the entry holds a
    /// value this build does not know: a damaged entry).
    pub wait: Option<WaitPolicy>,
    /// What a consumer's death does to the message it held (`None`: as
    /// for `wait`).
    pub delivery: Option<Delivery>,
    /// Messages published so far.
    pub published: u64,
    /// Messages received so far.
    pub received: u64,
    /// Corrupt descriptors met by consumers.
    pub corrupt: u64,
    /// Messages lost with a consumer that died holding them (at-most-once).
    pub lost: u64,
}

fn policy_of(code: u32) -> Option<WaitPolicy> {
    match code {
        1 => Some(WaitPolicy::Spin),
        2 => Some(WaitPolicy::Futex),
        3 => Some(WaitPolicy::Hybrid),
        _ => None,
    }
}

fn delivery_of(code: u32) -> Option<Delivery> {
    match code {
        0 => Some(Delivery::AtMostOnce),
        1 => Some(Delivery::AtLeastOnce),
        _ => None,
    }
}

fn policy_code(p: WaitPolicy) -> u32 {
    match p {
        WaitPolicy::Spin => 1,
        WaitPolicy::Futex => 2,
        WaitPolicy::Hybrid => 3,
    }
}

impl TopicEntry {
    pub(crate) fn is_free(&self) -> bool {
        self.state.load(Ordering::Acquire) != READY
    }

    /// Fills the entry and marks it ready (under the region's control lock).
    pub(crate) fn publish(&self, name: &str, cfg: &TopicConfig, ring_off: u64) {
        self.partitions.store(cfg.partitions, Ordering::Relaxed);
        self.capacity.store(cfg.capacity, Ordering::Relaxed);
        self.wait.store(policy_code(cfg.wait), Ordering::Relaxed);
        self.delivery.store(u32::from(cfg.delivery == Delivery::AtLeastOnce), Ordering::Relaxed);
        self.ring_off.store(ring_off, Ordering::Relaxed);
        self.name_len.store(name.len() as u32, Ordering::Relaxed);
        let mut bytes = [0u8; MAX_NAME];
        bytes[..name.len()].copy_from_slice(name.as_bytes());
        for (w, chunk) in self.name.iter().zip(bytes.chunks(8)) {
            w.store(u64::from_le_bytes(chunk.try_into().expect("8-byte chunks")), Ordering::Relaxed);
        }
        for c in [&self.published, &self.received, &self.corrupt, &self.lost] {
            c.store(0, Ordering::Relaxed);
        }
        self.state.store(READY, Ordering::Release);
    }

    fn name(&self) -> Option<String> {
        let len = self.name_len.load(Ordering::Relaxed) as usize;
        if len == 0 || len > MAX_NAME {
            return None;
        }
        let mut bytes = [0u8; MAX_NAME];
        for (w, chunk) in self.name.iter().zip(bytes.chunks_mut(8)) {
            chunk.copy_from_slice(&w.load(Ordering::Relaxed).to_le_bytes());
        }
        String::from_utf8(bytes[..len].to_vec()).ok()
    }

    pub(crate) fn info(&self) -> Option<TopicInfo> {
        if self.is_free() {
            return None;
        }
        Some(TopicInfo {
            name: self.name()?,
            partitions: self.partitions.load(Ordering::Relaxed),
            capacity: self.capacity.load(Ordering::Relaxed),
            wait: policy_of(self.wait.load(Ordering::Relaxed)),
            delivery: delivery_of(self.delivery.load(Ordering::Relaxed)),
            published: self.published.load(Ordering::Relaxed),
            received: self.received.load(Ordering::Relaxed),
            corrupt: self.corrupt.load(Ordering::Relaxed),
            lost: self.lost.load(Ordering::Relaxed),
        })
    }
}

/// Sets every cell of every partition free for its first writer.
pub(crate) fn init_rings(seg: &Segment, ring_off: usize, cfg: &TopicConfig) -> Result<()> {
    for p in 0..cfg.partitions as usize {
        let base = ring_off + p * cfg.block();
        let cells = seg.get_slice::<Cell>(base + PARTITION_HEADER, cfg.capacity as usize)?;
        for (i, c) in cells.iter().enumerate() {
            c.word.store((i as u64) << 32, Ordering::Relaxed);
            c.len.store(0, Ordering::Relaxed);
        }
        let cursors = seg.get::<Cursors>(base)?;
        cursors.tail.store(0, Ordering::Relaxed);
        cursors.head.store(0, Ordering::Relaxed);
    }
    Ok(())
}

/// The partition of a key: a 64-bit mix of the key, masked.
fn mix64(key: u64) -> u64 {
    let mut z = key;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A topic of a [`Region`]: `loan` / `publish` to produce, `receive` to
/// consume. See [`Region::create_topic`].
pub struct Topic<'r> {
    region: &'r Region,
    entry: &'r TopicEntry,
    name: String,
    partitions: u32,
    capacity: usize,
    block: usize,
    ring_off: usize,
    policy: WaitPolicy,
    index: usize,
    delivery: Delivery,
}

impl<'r> Topic<'r> {
    pub(crate) fn attach(region: &'r Region, index: usize) -> Result<Topic<'r>> {
        let bad = |field, value| Error::corrupt(Corruption::BadField { field, value });
        // `index` may come from shared memory (a chunk's route).
        let entry = region.entries()?.get(index).ok_or_else(|| bad("topic index", index as u64))?;
        let info = entry.info().ok_or_else(|| bad("topic entry", index as u64))?;
        let cfg = TopicConfig {
            partitions: info.partitions,
            capacity: info.capacity,
            wait: info
                .wait
                .ok_or_else(|| bad("topic wait policy", u64::from(entry.wait.load(Ordering::Relaxed))))?,
            delivery: info
                .delivery
                .ok_or_else(|| bad("topic delivery", u64::from(entry.delivery.load(Ordering::Relaxed))))?,
        };
        cfg.validate().map_err(|_| bad("topic geometry", u64::from(info.partitions)))?;
        let raw_off = entry.ring_off.load(Ordering::Relaxed);
        // The topic's rings must lie inside the ring arena.
        let arena = region.arena();
        let ring_off = usize::try_from(raw_off).map_err(|_| bad("topic ring offset", raw_off))?;
        if ring_off < arena.start || ring_off.checked_add(cfg.ring_bytes()).is_none_or(|end| end > arena.end)
        {
            return Err(bad("topic ring offset", raw_off));
        }
        Ok(Topic {
            region,
            entry,
            name: info.name,
            partitions: cfg.partitions,
            capacity: cfg.capacity as usize,
            block: cfg.block(),
            ring_off,
            policy: cfg.wait,
            index,
            delivery: cfg.delivery,
        })
    }

    /// What a consumer's death does to the message it held.
    pub fn delivery(&self) -> Delivery {
        self.delivery
    }

    /// The topic's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Number of partitions.
    pub fn partitions(&self) -> u32 {
        self.partitions
    }

    /// Descriptors per partition.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The partition messages with `key` go to.
    pub fn partition_of(&self, key: u64) -> u32 {
        (mix64(key) & u64::from(self.partitions - 1)) as u32
    }

    /// Counters of the topic.
    pub fn info(&self) -> TopicInfo {
        self.entry.info().unwrap_or_else(|| TopicInfo {
            name: self.name.clone(),
            partitions: self.partitions,
            capacity: self.capacity as u32,
            wait: Some(self.policy),
            delivery: Some(self.delivery),
            published: 0,
            received: 0,
            corrupt: 0,
            lost: 0,
        })
    }

    /// Messages waiting in `partition` now (a snapshot).
    pub fn depth(&self, partition: u32) -> Result<usize> {
        Ok(self.ring(partition)?.len() as usize)
    }

    pub(crate) fn ring(&self, partition: u32) -> Result<Ring<'r>> {
        if partition >= self.partitions {
            return Err(Error::invalid(format!("partition {partition} of a topic with {}", self.partitions)));
        }
        let seg = self.region.segment();
        let base = self.ring_off + partition as usize * self.block;
        Ok(Ring { cursors: seg.get(base)?, cells: seg.get_slice(base + PARTITION_HEADER, self.capacity)? })
    }

    pub(crate) fn waits(&self, partition: u32) -> Result<Waits<'r>> {
        let seg = self.region.segment();
        let base = self.ring_off + partition as usize * self.block;
        Ok(Waits {
            not_empty: seg.get(base + NOT_EMPTY)?,
            not_full: seg.get(base + NOT_FULL)?,
            policy: self.policy,
        })
    }

    /// Borrows a writable chunk of at least `size` bytes from the pool,
    /// waiting up to `timeout` (`None`: for ever) for one to be free.
    /// Fails with [`Error::MessageTooLarge`] above 1 MiB, and
    /// [`Error::PoolExhausted`] when the timeout passes. Dropping the loan
    /// unpublished returns the chunk.
    pub fn loan(&self, size: usize, timeout: Option<Duration>) -> Result<Loan<'_, 'r>> {
        if size > MAX_MESSAGE {
            return Err(Error::MessageTooLarge { size, max: MAX_MESSAGE, hint: TOO_LARGE });
        }
        // The pool hands the chunk over already LOANED to this process.
        let (class, chunk) = self.region.alloc(size, timeout)?;
        self.region.beat_sometimes();
        Ok(Loan { topic: self, class, chunk, size, live: true })
    }

    /// [`loan`](Self::loan) without waiting.
    pub fn try_loan(&self, size: usize) -> Result<Loan<'_, 'r>> {
        self.loan(size, Some(Duration::ZERO))
    }

    /// Copies `data` into a loan and publishes it (the copy path).
    pub fn send(&self, data: &[u8], key: u64, timeout: Option<Duration>) -> Result<()> {
        // The clock is read only if the loan has to wait: the timeout is a
        // deadline for the whole call.
        let (mut loan, left) = match self.loan(data.len(), Some(Duration::ZERO)) {
            Ok(loan) => (loan, timeout),
            Err(Error::PoolExhausted { .. }) if timeout.is_none_or(|t| !t.is_zero()) => {
                let start = Instant::now();
                let loan = self.loan(data.len(), timeout)?;
                (loan, timeout.map(|t| t.saturating_sub(start.elapsed())))
            }
            Err(e) => return Err(e),
        };
        loan.copy_from_slice(data);
        loan.publish(data.len(), key, left)
    }

    /// [`send`](Self::send) without waiting (for a chunk or a free
    /// descriptor).
    pub fn try_send(&self, data: &[u8], key: u64) -> Result<()> {
        self.send(data, key, Some(Duration::ZERO))
    }

    /// Waits up to `timeout` for a message in `partition` and returns a
    /// read-only view of it in shared memory. Dropping the [`Message`]
    /// releases its chunk. A corrupt descriptor is dropped from the ring and
    /// reported as [`Error::Corrupt`]; the next call goes on.
    pub fn receive(&self, partition: u32, timeout: Option<Duration>) -> Result<Message<'_, 'r>> {
        let ring = self.ring(partition)?;
        let waits = self.waits(partition)?;
        let seg = self.region.segment();
        let me = seg.token();
        let (pos, idx, word) = match self.claim(&ring, &waits, false, Some(Duration::ZERO)) {
            Err(Error::Timeout { .. }) if timeout.is_none_or(|t| !t.is_zero()) => {
                // Waiting: in slices, between which messages that dead
                // consumers held are handed back (at-least-once topics).
                let deadline = timeout.map(|t| Instant::now() + t);
                loop {
                    let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
                    if left.is_some_and(|l| l.is_zero()) {
                        return Err(Error::timeout(WAIT_MESSAGE, timeout));
                    }
                    let slice = left.map_or(RECOVERY_INTERVAL, |l| l.min(RECOVERY_INTERVAL));
                    match self.claim(&ring, &waits, false, Some(slice)) {
                        Err(Error::Timeout { .. }) => {
                            self.region.heartbeat();
                            self.region.recover_now_and_then();
                        }
                        other => break other?,
                    }
                }
            }
            other => other?,
        };
        crate::platform::fault::point("receive-claimed");
        let checked = self.check_descriptor(word, me.raw());
        crate::platform::fault::point("receive-held");
        let released = ring.finish_read(pos, idx, me);
        topic_wake(&waits, waits.not_full);
        let (class, chunk, len) = match checked {
            Ok(c) => c,
            Err(e) => {
                self.entry.corrupt.fetch_add(1, Ordering::Relaxed);
                return Err(e);
            }
        };
        let msg = Message { topic: self, class, chunk, len };
        if !released {
            return Err(Error::corrupt(Corruption::BadField {
                field: "ring claim (repaired by another process)",
                value: 0,
            }));
        }
        self.entry.received.fetch_add(1, Ordering::Relaxed);
        self.region.beat_sometimes();
        Ok(msg)
    }

    /// Validates a descriptor (read from a cell this process has claimed)
    /// and takes its chunk from QUEUED to HELD by `me` with one CAS. Only
    /// the claimant of the cell naming a publication may take its chunk, so
    /// a descriptor that names the chunk's current publication cannot lose
    /// it between the check and the CAS.
    fn check_descriptor(&self, word: u64, me: u32) -> Result<(usize, u32, usize)> {
        let (class, desc, meta) = self.region.resolve(word)?;
        let bad = |field, value| Error::corrupt(Corruption::BadField { field, value });
        let w = meta.word();
        if w.state() != QUEUED || !desc.is_current(meta) || !meta.cas(w, w.with(HELD, me)) {
            // A corrupt, stale or duplicated descriptor: the chunk is not
            // this publication's (it may be on a free list); leave it be.
            return Err(bad("state of the descriptor's chunk", u64::from(w.state())));
        }
        Ok((class, desc.chunk, desc.len as usize))
    }

    /// [`receive`](Self::receive) without waiting.
    pub fn try_receive(&self, partition: u32) -> Result<Message<'_, 'r>> {
        self.receive(partition, Some(Duration::ZERO))
    }

    /// Receives a message into `buf` (replacing its contents) and releases
    /// it at once (the copy path); returns its length.
    pub fn recv_into(&self, partition: u32, buf: &mut Vec<u8>, timeout: Option<Duration>) -> Result<usize> {
        let msg = self.receive(partition, timeout)?;
        buf.clear();
        buf.extend_from_slice(&msg);
        Ok(msg.len())
    }

    /// [`recv_into`](Self::recv_into) without waiting.
    pub fn try_recv_into(&self, partition: u32, buf: &mut Vec<u8>) -> Result<usize> {
        self.recv_into(partition, buf, Some(Duration::ZERO))
    }

    /// Claims a cell of one of this topic's rings for writing or reading,
    /// waiting up to `timeout` (see `Ring::claim_blocking`). A read claim a
    /// dead consumer left in the way is taken over, and its message, if the
    /// consumer had not taken it yet, made the dead consumer's (so that
    /// recovery delivers it again on an at-least-once topic).
    pub(crate) fn claim(
        &self,
        ring: &Ring<'_>,
        waits: &Waits<'_>,
        writer: bool,
        timeout: Option<Duration>,
    ) -> Result<(u64, usize, u64)> {
        let adopt = |word: u64, dead| self.region.adopt_dead_read(word, dead);
        let max_len = if writer { 0 } else { u64::MAX };
        ring.claim_blocking(self.region, waits, writer, max_len, timeout, &adopt)
    }

    /// Publishes a raw descriptor, bypassing the pool. For tests of the
    /// library's defences against corrupt rings only.
    #[doc(hidden)]
    pub fn publish_raw_descriptor(&self, partition: u32, chunk: u32, len: u32) -> Result<()> {
        let ring = self.ring(partition)?;
        let waits = self.waits(partition)?;
        let seg = self.region.segment();
        let (pos, idx, _) = self.claim(&ring, &waits, true, Some(Duration::from_secs(1)))?;
        ring.commit_write(pos, idx, Descriptor::new(chunk, 0, len).encode(), seg.token());
        topic_wake(&waits, waits.not_empty);
        Ok(())
    }
}

impl std::fmt::Debug for Topic<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Topic")
            .field("name", &self.name)
            .field("partitions", &self.partitions)
            .field("capacity", &self.capacity)
            .field("wait", &self.policy)
            .finish()
    }
}

/// Wakes the sleepers of `cell`, one of a topic's wait cells. A topic's
/// wait policy is recorded in the region and every handle waits with it,
/// so on a `Spin` topic nobody ever sleeps on these cells and the wake-up
/// (a full fence and a load) is skipped.
pub(crate) fn topic_wake(waits: &Waits<'_>, cell: &crate::sync::WaitCell) {
    if waits.policy != WaitPolicy::Spin {
        cell.notify_all();
    }
}

/// A chunk of the pool lent for writing. Dereferences to `&mut [u8]` of
/// the size asked for; [`publish`](Loan::publish) sends it; dropping it
/// unpublished returns the chunk.
pub struct Loan<'t, 'r> {
    topic: &'t Topic<'r>,
    class: usize,
    chunk: u32,
    size: usize,
    live: bool,
}

impl Loan<'_, '_> {
    /// Publishes the first `len` bytes with `key`: one descriptor goes into
    /// the key's partition, waiting up to `timeout` if it is full. If it
    /// fails, the chunk goes back to the pool and the message is dropped.
    pub fn publish(mut self, len: usize, key: u64, timeout: Option<Duration>) -> Result<()> {
        if len > self.size {
            return Err(Error::invalid(format!("publishing {len} bytes of a {}-byte loan", self.size)));
        }
        let topic = self.topic;
        let partition = topic.partition_of(key);
        let ring = topic.ring(partition)?;
        let waits = topic.waits(partition)?;
        let seg = topic.region.segment();
        // QUEUED before the cell is claimed: a producer that dies from here
        // until its commit leaves a QUEUED chunk no descriptor names, which
        // recovery reclaims. The chunk keeps its producer as holder until a
        // consumer takes it.
        let route = ((topic.index as u32 + 1) << 16) | partition;
        let desc = topic.region.enqueue(self.chunk, route, len as u32, LOANED)?;
        crate::platform::fault::point("publish-queued");
        let (pos, idx, _) = match topic.claim(&ring, &waits, true, timeout) {
            Ok(claimed) => claimed,
            Err(e) => {
                topic.region.unqueue(self.chunk);
                return Err(e); // the loan's drop frees the chunk
            }
        };
        self.live = false;
        let committed = ring.commit_write(pos, idx, desc.encode(), seg.token());
        topic_wake(&waits, waits.not_empty);
        if !committed {
            return Err(Error::corrupt(Corruption::BadField {
                field: "ring claim (repaired by another process)",
                value: 0,
            }));
        }
        topic.entry.published.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// [`publish`](Self::publish) without waiting.
    pub fn try_publish(self, len: usize, key: u64) -> Result<()> {
        self.publish(len, key, Some(Duration::ZERO))
    }
}

impl std::fmt::Debug for Loan<'_, '_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loan").field("size", &self.size).field("chunk", &self.chunk).finish()
    }
}

impl Deref for Loan<'_, '_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: the chunk was popped from the free list by this loan and
        // is owned by it alone until published or dropped; `size` is at
        // most its class's chunk size.
        unsafe { std::slice::from_raw_parts(self.topic.region.chunk_ptr(self.class, self.chunk), self.size) }
    }
}

impl DerefMut for Loan<'_, '_> {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`; `&mut self` makes the view unique here.
        unsafe {
            std::slice::from_raw_parts_mut(self.topic.region.chunk_ptr(self.class, self.chunk), self.size)
        }
    }
}

impl Drop for Loan<'_, '_> {
    fn drop(&mut self) {
        if self.live {
            self.topic.region.free(self.class, self.chunk);
        }
    }
}

/// A received message: a read-only view into shared memory. Dropping it
/// (or [`release`](Message::release)) returns its chunk to the pool.
pub struct Message<'t, 'r> {
    topic: &'t Topic<'r>,
    class: usize,
    chunk: u32,
    len: usize,
}

impl Message<'_, '_> {
    /// Returns the chunk to the pool now.
    pub fn release(self) {}
}

impl Deref for Message<'_, '_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: the descriptor was validated (chunk in range, `len` within
        // its class) and the chunk taken from QUEUED to HELD by this
        // receiver alone; its producer no longer writes it.
        unsafe { std::slice::from_raw_parts(self.topic.region.chunk_ptr(self.class, self.chunk), self.len) }
    }
}

impl Drop for Message<'_, '_> {
    fn drop(&mut self) {
        self.topic.region.free(self.class, self.chunk);
    }
}

impl std::fmt::Debug for Message<'_, '_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Message").field("len", &self.len).field("chunk", &self.chunk).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_spread_over_partitions() {
        let mut seen = [0u32; 8];
        for k in 0..8000u64 {
            seen[(mix64(k) & 7) as usize] += 1;
        }
        assert!(seen.iter().all(|&n| n > 800), "{seen:?}");
    }
}
