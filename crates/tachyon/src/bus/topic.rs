//! Topics: partitioned rings of 16-byte descriptors pointing into the
//! payload pool; loans, publishing, receiving.
//!
//! A descriptor is a ring cell (see `sync/ring.rs`): the control word
//! (sequence and claimant token) and a second word naming one publication
//! of a chunk: its index, the low bits of its publication count, and the
//! message length (see `pool::Descriptor`). Producers contend
//! on one CAS per publish; consumers of a partition compete, each message
//! going to exactly one of them. Every descriptor read from a ring is
//! validated (chunk index in range, length within its chunk, chunk really
//! queued) before any payload byte is touched.
//!
//! On a topic with inline slots (`TopicConfig::inline_payload`) each cell
//! has a slot of its own after the cells, and a copy-path message that
//! fits travels there: the descriptor then says "inline, *n* bytes"
//! (`Descriptor::inline`) instead of naming a chunk, and a receive copies
//! the slot out between its claim and `finish_read` (docs/bus.md, "Inline
//! payloads").

use super::backlog::JoinFrom;
use super::directory::{Record, TopicEntry, MAX_NAME};
use super::layout::{CLASS_SIZES, MAX_MESSAGE, TOO_LARGE};
use super::partition;
use super::pool::{Descriptor, Word, FREE, HELD, LOANED, QUEUED};
use super::region::{Region, RECOVERY_INTERVAL};
use crate::error::{Corruption, Error, Result};
use super::groups::{self, Control};
use crate::platform::atomic::{AtomicU32, AtomicU64, Ordering};
use crate::platform::copy;
use std::sync::atomic::AtomicU8;
use crate::segment::Segment;
use crate::sync::ring::{Cell, Cursors, Ring, Waits};
use crate::sync::{Liveness, WaitPolicy};
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What a receive waits for.
const WAIT_MESSAGE: &str = "a message in the topic's partition";

/// How long an overrunning publisher waits, whatever its timeout, for the
/// oldest cell of a full partition that someone holds at that moment
/// (`Topic::claim_publish`): a consumer reading it gives it back within
/// instructions, unless descheduled.
const OVERRUN_GRACE: Duration = Duration::from_millis(10);

/// Most partitions per topic.
pub const MAX_PARTITIONS: u32 = 256;
/// Most descriptors per partition.
pub const MAX_CAPACITY: u32 = 1 << 20;
/// Largest inline slot ([`TopicConfig::inline_payload`]): 64 KiB.
pub const MAX_INLINE: u32 = 64 << 10;

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
/// let cfg = TopicConfig::default().partitions(4).capacity(256).wait(WaitPolicy::Spin);
/// assert!(cfg.validate().is_ok());
/// assert!(cfg.partitions(3).validate().is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
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
    /// Whether the topic has its default group (group slot 0: what
    /// [`Topic::receive`] reads). See [`default_group`](Self::default_group).
    pub(crate) default_group: bool,
    /// Whether a full partition drops its oldest message instead of holding
    /// the publisher back (see [`overrun`](Self::overrun)).
    pub(crate) overrun: bool,
    /// Bytes of each cell's inline slot, a multiple of 64 (0: none; see
    /// [`inline_payload`](Self::inline_payload)).
    pub(crate) inline: u32,
    /// Whether the rings' hand-overs are light (see
    /// [`light_handovers`](Self::light_handovers)).
    pub(crate) light: bool,
}

impl Default for TopicConfig {
    fn default() -> Self {
        TopicConfig {
            partitions: 1,
            capacity: 1024,
            wait: WaitPolicy::Hybrid,
            delivery: Delivery::AtMostOnce,
            default_group: true,
            overrun: false,
            inline: 0,
            light: false,
        }
    }
}

impl TopicConfig {
    /// Sets [`partitions`](Self::partitions).
    pub fn partitions(mut self, n: u32) -> Self {
        self.partitions = n;
        self
    }

    /// Sets [`capacity`](Self::capacity).
    pub fn capacity(mut self, n: u32) -> Self {
        self.capacity = n;
        self
    }

    /// Sets [`wait`](Self::wait).
    pub fn wait(mut self, policy: WaitPolicy) -> Self {
        self.wait = policy;
        self
    }

    /// Sets [`delivery`](Self::delivery).
    pub fn delivery(mut self, delivery: Delivery) -> Self {
        self.delivery = delivery;
        self
    }

    /// Whether the topic has its default group (default `true`). Without
    /// it, [`Topic::receive`] and the other receives that do not name a
    /// group fail, and a message published while no group is joined is
    /// delivered to nobody (its chunk goes back to the pool, counted in
    /// [`TopicInfo::undelivered`]). Needs a region with
    /// [`max_groups`](super::RegionConfig::max_groups) of at least 1.
    pub fn default_group(mut self, on: bool) -> Self {
        self.default_group = on;
        self
    }

    /// Whether the topic has its default group (see `default_group`).
    pub fn default_group_enabled(&self) -> bool {
        self.default_group
    }

    /// What a publisher does when a group's ring of its partition is full
    /// (default `false`: it waits, so a slow group holds producers back).
    /// With `true` it drops that group's oldest message of the partition
    /// (received and released on the group's behalf, as a member would) and
    /// publishes; the group is told how many it missed ([`Topic::missed`]
    /// for the default group, `Group::missed` for a named one), and
    /// [`TopicInfo::missed`] counts them for all groups. Every other group
    /// and the order of what is delivered are unaffected. For data where
    /// the latest matters more than every message (market data, sensor
    /// readings, telemetry). Not with [`Delivery::AtLeastOnce`], which
    /// promises the opposite ([`Error::InvalidArgument`] at creation).
    ///
    /// The one room a publisher cannot take is the oldest cell held at that
    /// very moment (a consumer between its claim and handing the cell back,
    /// instructions later): for that it waits, up to 10 ms whatever its
    /// timeout, rather than fail for room while a consumer is reading.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tachyon::bus::{Key, Region, RegionConfig, TopicConfig};
    /// # let name = format!("doc-overrun-{}", std::process::id());
    /// let region = Region::create(&name, RegionConfig::default().size(8 << 20).ring_arena(1 << 20))?;
    /// let topic = region.create_topic("quotes", TopicConfig::default().capacity(4).overrun(true))?;
    /// for i in 0..10u8 {
    ///     topic.send(&[i], Key(0), Some(Duration::ZERO))?; // never waits, never fails for room
    /// }
    /// assert_eq!(topic.missed(), 6);
    /// assert_eq!(&*topic.receive(0, Some(Duration::ZERO))?, &[6]); // the newest four are kept
    /// # drop(topic); drop(region); Region::remove(&name)?;
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn overrun(mut self, on: bool) -> Self {
        self.overrun = on;
        self
    }

    /// Whether a full partition drops its oldest message (see
    /// [`overrun`](Self::overrun)).
    pub fn overruns(&self) -> bool {
        self.overrun
    }

    /// Gives every ring cell an inline slot of `bytes` (rounded up to a
    /// multiple of 64, at most [`MAX_INLINE`]; 0, the default: none). A
    /// message of up to that size sent by copy ([`Topic::send`]) is then
    /// written into the slot of the cell it is published in, and read out
    /// of it by [`Topic::recv_into`]: no chunk is taken from the pool, no
    /// chunk state changes hands, nothing goes back to a free list. This is
    /// the copy path at the speed of a [`CircularBuffer`](crate::CircularBuffer)
    /// (a 1 KiB stream two to three times the chunk path's; see
    /// `docs/bus.md`, "Inline payloads"). The ring's claims still name
    /// their claimants, so a process killed at any instruction leaves what
    /// a killed publisher or consumer leaves on any topic.
    ///
    /// What does not change: loans (they are chunks, zero-copy), messages
    /// larger than a slot (chunks), and publishing while a named consumer
    /// group is joined (chunks, shared by the groups). [`Topic::receive`]
    /// of an inline message copies it into a chunk of the receiver's own
    /// (so a receive on such a topic needs a free chunk of the slot's
    /// size). The cost is memory: `capacity * bytes` per partition per
    /// group slot, out of the region's
    /// [`ring_arena`](super::RegionConfig::ring_arena), and a cache line
    /// more per cell when `bytes` is a multiple of 256 above 256 (such
    /// slots lie a line further apart than their size, so that they do not
    /// all sit at a few offsets of a page: see docs/bus.md). Not with
    /// [`Delivery::AtLeastOnce`] (a message in a slot has no chunk that
    /// recovery could deliver again; [`Error::InvalidArgument`] at
    /// creation).
    ///
    /// ```
    /// use tachyon::bus::{Key, Region, RegionConfig, TopicConfig};
    /// # let name = format!("doc-inline-{}", std::process::id());
    /// let region = Region::create(&name, RegionConfig::default().size(8 << 20).ring_arena(1 << 20))?;
    /// let cfg = TopicConfig::default().capacity(256).inline_payload(1024); // 272 KiB of slots
    /// let topic = region.create_topic("frames", cfg)?;
    /// assert_eq!(topic.config().inline_payload_size(), 1024);
    ///
    /// topic.send(b"fits a slot", Key(0), None)?; // no chunk taken
    /// let mut buf = Vec::new();
    /// topic.recv_into(0, &mut buf, None)?;
    /// assert_eq!(buf, b"fits a slot");
    /// # drop(topic); drop(region); Region::remove(&name)?;
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn inline_payload(mut self, bytes: u32) -> Self {
        self.inline = bytes.saturating_add(63) & !63;
        self
    }

    /// Bytes of each cell's inline slot (0: none; see
    /// [`inline_payload`](Self::inline_payload)).
    pub fn inline_payload_size(&self) -> u32 {
        self.inline
    }

    /// Makes the hand-overs of the topic's ring cells light (default
    /// `false`), as [`CircularBufferBuilder::light_handovers`] does for a
    /// ring (docs/rings.md, "Light hand-overs"; docs/bus.md, "Light
    /// hand-overs"): a publisher's commit and a consumer's hand-back are a
    /// look and a plain store instead of a compare-and-swap, and a wake-up
    /// check after them has no fence; a process that sleeps on the topic
    /// runs the fence's other half (`membarrier`) instead. With
    /// [`inline_payload`](Self::inline_payload) this takes a stream of small
    /// messages from about 0.4 to about 0.6 of the raw ring's speed, and
    /// one of 1 KiB messages from about 0.7 – 0.8 to 0.8 – 1.0 of it
    /// (docs/benchmark-history.md). Through chunks, [`Topic::send`] then claims
    /// its cell before it copies the message into the chunk (1 KiB: about
    /// 0.75 to 0.85 of the raw ring; readers of the partition wait behind
    /// the cell while the bytes are copied).
    ///
    /// It is a property of the topic: every process that opens it uses it,
    /// and an open that asks for the other setting fails with
    /// [`Error::Incompatible`] (`field: "light_handovers"`). What it costs,
    /// as for a ring:
    ///
    /// * each sleep of a waiter on the topic (futex waits, hybrid waits
    ///   past their spin, a wait set, an async task) interrupts every CPU
    ///   that runs a process with a light ring or topic open. A consumer
    ///   that sleeps at every message interrupts its producer at every
    ///   message (with futex waits a 1 KiB stream measured slower than on
    ///   a plain topic); spinning waiters never sleep. Meant for spin and
    ///   hybrid topics;
    /// * a repair of a live claim's damaged word (a stray write into the
    ///   ring) that lands between a hand-over's look and its store is
    ///   overwritten where a compare-and-swap would have failed: that cell
    ///   may lose a message or deliver one twice. Crashes are not
    ///   affected: a process killed at any instruction leaves what it
    ///   leaves on any topic, repaired the same way (docs/CRASH-SAFETY.md);
    /// * the counters [`TopicInfo::published`] and [`TopicInfo::received`]
    ///   count a message before its hand-over, not after (a locked
    ///   instruction after a light hand-over would cost what it saves): a
    ///   publisher killed between its claim and its commit is counted as
    ///   having published its message, which nobody receives, and a
    ///   consumer killed between its copy and its hand-back as having
    ///   received a message that recovery then counts lost (or, on an
    ///   at-least-once topic, delivers again).
    ///
    /// ```
    /// use tachyon::bus::{Key, Region, RegionConfig, TopicConfig};
    /// use tachyon::{sync::WaitPolicy, Error};
    /// # let name = format!("doc-topic-light-{}", std::process::id());
    /// let region = Region::create(&name, RegionConfig::default().size(8 << 20).ring_arena(1 << 20))?;
    /// let cfg = TopicConfig::default().wait(WaitPolicy::Spin).inline_payload(64).light_handovers(true);
    /// let topic = region.create_or_open_topic("ticks", cfg)?;
    /// assert!(topic.config().uses_light_handovers());
    /// topic.send(b"tick", Key(0), None)?;
    /// let mut buf = Vec::new();
    /// topic.recv_into(0, &mut buf, None)?;
    /// assert_eq!(buf, b"tick");
    /// let err = region.create_or_open_topic("ticks", cfg.light_handovers(false)).unwrap_err();
    /// assert!(matches!(err, Error::Incompatible { field: "light_handovers", .. }));
    /// # drop(topic); drop(region); Region::remove(&name)?;
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    ///
    /// [`CircularBufferBuilder::light_handovers`]: crate::CircularBufferBuilder::light_handovers
    pub fn light_handovers(mut self, on: bool) -> Self {
        self.light = on;
        self
    }

    /// Whether the topic's hand-overs are light (see
    /// [`light_handovers`](Self::light_handovers)).
    pub fn uses_light_handovers(&self) -> bool {
        self.light
    }

    /// [`Error::Incompatible`] naming the first field of `want` that this
    /// (an existing topic's) configuration does not have.
    pub(crate) fn check_same(&self, want: &TopicConfig, what: &str) -> Result<()> {
        Error::check_same(
            what,
            [
                ("partitions", self.partitions.to_string(), want.partitions.to_string()),
                ("capacity", self.capacity.to_string(), want.capacity.to_string()),
                ("wait", format!("{:?}", self.wait), format!("{:?}", want.wait)),
                ("delivery", format!("{:?}", self.delivery), format!("{:?}", want.delivery)),
                ("default_group", self.default_group.to_string(), want.default_group.to_string()),
                ("overrun", self.overrun.to_string(), want.overrun.to_string()),
                ("inline_payload", self.inline.to_string(), want.inline.to_string()),
                ("light_handovers", self.light.to_string(), want.light.to_string()),
            ],
        )
    }

    /// Checks the values.
    pub fn validate(&self) -> Result<()> {
        if self.overrun && self.delivery == Delivery::AtLeastOnce {
            return Err(Error::invalid(
                "overrun drops messages nobody received: not with Delivery::AtLeastOnce, which never loses one",
            ));
        }
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
        if self.inline > MAX_INLINE || self.inline % 64 != 0 {
            return Err(Error::invalid(format!(
                "inline_payload must be at most {MAX_INLINE} bytes (a multiple of 64), not {}",
                self.inline
            )));
        }
        if self.inline > 0 && self.delivery == Delivery::AtLeastOnce {
            return Err(Error::invalid(
                "inline_payload: a message in a ring slot has no chunk that recovery could deliver again; \
                 not with Delivery::AtLeastOnce",
            ));
        }
        Ok(())
    }

    fn block(&self) -> usize {
        partition::block(self.capacity, self.inline as usize)
    }

    /// Bytes of the topic's rings in a region of `max_groups` group slots:
    /// the partitions of every slot (at least slot 0) and the group block.
    pub(crate) fn ring_bytes(&self, max_groups: usize) -> usize {
        self.block() * self.partitions as usize * max_groups.max(1) + partition::group_block(max_groups)
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
    /// Messages published while no group was joined on a topic without its
    /// default group: delivered to nobody, their chunks back in the pool.
    pub undelivered: u64,
    /// Messages dropped unread from full partitions on a topic with
    /// [`TopicConfig::overrun`], counted once per group that missed them.
    pub missed: u64,
    /// Bytes of each ring cell's inline slot (0: none; see
    /// [`TopicConfig::inline_payload`]).
    pub inline_payload: u32,
    /// Whether its hand-overs are light (see
    /// [`TopicConfig::light_handovers`]).
    pub light_handovers: bool,
}

fn policy_of(code: u32) -> Option<WaitPolicy> {
    match code {
        1 => Some(WaitPolicy::Spin),
        2 => Some(WaitPolicy::Futex),
        3 => Some(WaitPolicy::Hybrid),
        _ => None,
    }
}

/// The bits of the sealed delivery word: bit 0 the delivery, bit 1 the
/// overrun option, bit 2 set for a topic without its default group, bit 3
/// set for light hand-overs, bits 8 to 19 the inline slot's size in
/// 64-byte units ([`INLINE_BITS`]). A word with other bits is unknown
/// (damage).
const DELIVERY_BITS: u32 = 0b1111;
/// Bits 8 to 19 of the delivery word: the inline slot's bytes / 64.
const INLINE_BITS: u32 = 0xFFF << 8;
/// Bit 1 of the delivery word: the topic overruns (`TopicConfig::overrun`).
const OVERRUN: u32 = 0b010;
/// Bit 2 of the delivery word: the topic has no default group.
const NO_DEFAULT_GROUP: u32 = 0b100;
/// Bit 3 of the delivery word: the topic's hand-overs are light
/// (`TopicConfig::light_handovers`).
const LIGHT: u32 = 0b1000;

fn delivery_of(code: u32) -> Option<Delivery> {
    if code & !(DELIVERY_BITS | INLINE_BITS) != 0 {
        return None;
    }
    Some(if code & 1 == 0 { Delivery::AtMostOnce } else { Delivery::AtLeastOnce })
}

/// The inline slot's bytes a sealed delivery word records.
fn inline_of(code: u32) -> u32 {
    ((code & INLINE_BITS) >> 8) * 64
}

fn policy_code(p: WaitPolicy) -> u32 {
    match p {
        WaitPolicy::Spin => 1,
        WaitPolicy::Futex => 2,
        WaitPolicy::Hybrid => 3,
    }
}

/// The directory record of a new topic.
pub(crate) fn record_of(name: &str, cfg: &TopicConfig, ring_off: u64) -> Record {
    let delivery = u32::from(cfg.delivery == Delivery::AtLeastOnce)
        | if cfg.default_group { 0 } else { NO_DEFAULT_GROUP }
        | if cfg.overrun { OVERRUN } else { 0 }
        | if cfg.light { LIGHT } else { 0 }
        | ((cfg.inline / 64) << 8 & INLINE_BITS);
    Record::new(name, cfg.partitions, cfg.capacity, policy_code(cfg.wait), delivery, ring_off)
}

/// What the directory says of a topic (from whichever copy of its entry
/// holds), `None` for a free entry or one damaged beyond repair.
pub(crate) fn info_of(entry: &TopicEntry) -> Option<TopicInfo> {
    let r = entry.record()?;
    Some(TopicInfo {
        name: r.name()?,
        partitions: r.partitions,
        capacity: r.capacity,
        wait: policy_of(r.wait),
        delivery: delivery_of(r.delivery),
        published: entry.published.load(Ordering::Relaxed),
        received: entry.received.load(Ordering::Relaxed),
        corrupt: entry.corrupt.load(Ordering::Relaxed),
        lost: entry.lost.load(Ordering::Relaxed),
        undelivered: entry.undelivered.load(Ordering::Relaxed),
        missed: entry.missed.load(Ordering::Relaxed),
        inline_payload: inline_of(r.delivery),
        light_handovers: r.delivery & LIGHT != 0,
    })
}

/// Sets every cell of every partition of every group slot free for its
/// first writer, and the slots' control words: slot 0 (the default group)
/// ACTIVE unless the topic has none, the others VACANT, all at generation 0.
pub(crate) fn init_rings(seg: &Segment, ring_off: usize, cfg: &TopicConfig, max_groups: usize) -> Result<()> {
    partition::init(seg, ring_off, cfg.partitions * max_groups.max(1) as u32, cfg.capacity, cfg.inline as usize)?;
    if max_groups > 0 {
        let at = ring_off + cfg.block() * cfg.partitions as usize * max_groups;
        let words = seg.get_slice::<AtomicU64>(at, partition::group_block(max_groups) / 8)?;
        for w in words {
            w.store(0, Ordering::Relaxed);
        }
        let first = if cfg.default_group { groups::ACTIVE } else { groups::VACANT };
        words[0].store(first, Ordering::Relaxed);
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

/// The key of a message: messages with one key go to one partition and
/// stay in the order they were published. A newtype, so that a key and a
/// length cannot be swapped silently.
///
/// ```
/// use tachyon::bus::Key;
/// let k = Key(42);
/// assert_eq!(k, Key::from(42u64));
/// assert_eq!(u64::from(k), 42);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct Key(pub u64);

impl From<u64> for Key {
    fn from(k: u64) -> Key {
        Key(k)
    }
}

impl From<Key> for u64 {
    fn from(k: Key) -> u64 {
        k.0
    }
}

/// A topic of a [`Region`]: `loan` / `publish` to produce, `receive` to
/// consume. See [`Region::create_topic`].
///
/// A `Topic` is an owned handle: it keeps its region mapped, it is
/// `Clone`, `Send` and `Sync`, so it can live in a struct, move into a
/// thread or a tokio task, and be shared by threads. [`Loan`]s and
/// [`Message`]s are owned too (`'static + Send`): each counts on the handle
/// it came from. A clone is a handle of its own (one small allocation),
/// so give each thread its own clone, as below, rather than one handle by
/// reference: threads that share one handle pass its count's cache line
/// between their cores on every loan and message.
///
/// ```
/// use std::time::Duration;
/// use tachyon::bus::{Key, Region, RegionConfig, Topic, TopicConfig};
/// # let name = format!("doc-topic-{}", std::process::id());
///
/// struct Publisher {
///     topic: Topic, // no lifetime: the topic keeps its region alive
/// }
///
/// let region = Region::create(&name, RegionConfig::default().size(8 << 20).ring_arena(1 << 20))?;
/// let publisher = Publisher { topic: region.create_topic("ticks", TopicConfig::default())? };
/// let consumer = publisher.topic.clone();
/// let reader = std::thread::spawn(move || -> tachyon::Result<Vec<u8>> {
///     Ok(consumer.receive(0, Some(Duration::from_secs(5)))?.to_vec())
/// });
/// publisher.topic.send(b"tick", Key(1), None)?;
/// assert_eq!(reader.join().unwrap()?, b"tick");
/// # drop(publisher); drop(region);
/// # Region::remove(&name)?;
/// # Ok::<(), tachyon::Error>(())
/// ```
pub struct Topic {
    core: Arc<TopicCore>,
}

/// A handle of its own on the same topic: a copy of the attached topic's
/// read-only state (one allocation; the partition table and the name are
/// shared), not a second count on the original's. The loans and messages
/// made through a handle count on it alone, so threads that each hold a
/// clone do not pass one reference count's line between their cores on
/// every message (a two-thread loan stream ran 0.89 × as fast when they
/// did; docs/benchmark-history.md, "a handle of its own for each clone").
///
/// ```
/// use tachyon::bus::{Key, Region, RegionConfig, TopicConfig};
/// # let name = format!("doc-topic-clone-{}", std::process::id());
/// let region = Region::create(&name, RegionConfig::default().size(8 << 20).ring_arena(1 << 20))?;
/// let producer = region.create_topic("frames", TopicConfig::default())?;
/// let consumer = producer.clone(); // the consumer thread's own handle
/// let reader = std::thread::spawn(move || -> tachyon::Result<usize> {
///     let mut n = 0;
///     for _ in 0..100 {
///         n += consumer.receive(0, None)?.len(); // counts on `consumer`
///     }
///     Ok(n)
/// });
/// for i in 0..100u8 {
///     let mut loan = producer.loan(8, None)?; // counts on `producer`
///     loan.fill(i);
///     loan.publish(Key(0), None)?;
/// }
/// assert_eq!(reader.join().unwrap()?, 800);
/// # drop(producer); drop(region); Region::remove(&name)?;
/// # Ok::<(), tachyon::Error>(())
/// ```
impl Clone for Topic {
    fn clone(&self) -> Topic {
        Topic { core: Arc::new(TopicCore::clone(&self.core)) }
    }
}

/// What a handle of one opened topic reads: immutable once attached.
/// Each [`Clone`] of a [`Topic`] gets a copy of its own (its large parts
/// shared), so that the loans and messages of handles in different
/// threads count on different lines. Aligned to a cache line so that the
/// reference count (in front of it, inside the `Arc`) has a line of its
/// own: loans and messages count on it, the data path reads the fields.
#[derive(Clone)]
#[repr(align(64))]
struct TopicCore {
    region: Region,
    /// The topic's directory entry, inside the mapping `region` keeps.
    entry: NonNull<TopicEntry>,
    name: Arc<str>,
    partitions: u32,
    capacity: usize,
    policy: WaitPolicy,
    index: usize,
    delivery: Delivery,
    /// Each partition's ring and wait cells, checked once at attach, slot
    /// by slot (`slot * partitions + partition`; slot 0 first).
    parts: Arc<[Partition]>,
    /// The group slots' control words (none in a region without group
    /// slots), checked at attach.
    controls: Option<NonNull<[Control]>>,
    /// The group slots' names (`partition::GROUP_NAME_WORDS` words each).
    names: Option<NonNull<[AtomicU64]>>,
    /// Whether the topic has its default group (slot 0).
    default_group: bool,
    /// Whether a full partition drops its oldest message.
    overrun: bool,
    /// Bytes of each cell's inline slot (0: none).
    inline: usize,
    /// Whether the rings' hand-overs are light
    /// (`TopicConfig::light_handovers`).
    light: bool,
    /// Bytes from one inline slot to the next (`partition::slot_stride`).
    stride: usize,
    /// This handle's receives wait for a batch of messages when they catch
    /// up with a publisher in mid-stream ([`Topic::with_batch_reads`]).
    batch_reads: bool,
}

/// Where one partition's shared state lies inside the region's mapping
/// (found with the segment's checked accessors when the topic is
/// attached, so the data path only indexes this table).
#[derive(Clone, Copy)]
struct Partition {
    cursors: NonNull<Cursors>,
    cells: NonNull<[Cell]>,
    /// The first of the cells' inline slots (`capacity * stride` bytes,
    /// checked at attach; dangling-free but empty on a topic without them).
    slots: NonNull<u8>,
    not_empty: NonNull<crate::sync::WaitCell>,
    not_full: NonNull<crate::sync::WaitCell>,
    /// The item whose hand-back wakes the producers (`Ring::wake_writers`).
    room_at: NonNull<AtomicU64>,
}

// SAFETY: `entry`, `controls`, `names` and the partitions' pointers point
// into the region's mapping, which `region` keeps mapped for as long as
// this value lives (the copies of one core share `parts`, and each holds a
// `region` of its own); all of them are atomics only (`Sync`), so they may
// be reached from any thread. Every other field is `Send + Sync`.
unsafe impl Send for TopicCore {}
// SAFETY: as for `Send`: only `&TopicEntry` is ever formed from `entry`.
unsafe impl Sync for TopicCore {}

/// Where a receive puts a message it finds in an inline slot
/// ([`TopicConfig::inline_payload`]).
enum Sink<'b> {
    /// Into a chunk of the receiver's own, taken before the claim: the
    /// message is then handed out as any other ([`Message`], raw chunks).
    Chunk,
    /// Into this buffer, its contents replaced: the copy path.
    Buf(&'b mut Vec<u8>),
    /// Into the start of this slice: the copy path into a buffer of fixed
    /// size (a longer message is not claimed: it stays queued).
    Slice(&'b mut [u8]),
    /// Nowhere: an overrunning publisher drops the oldest message.
    Drop,
}

impl Sink<'_> {
    /// The longest message the sink takes: a fixed buffer's length (a
    /// longer message is not claimed), else any.
    #[inline(always)]
    fn max_len(&self) -> u64 {
        match self {
            Sink::Slice(buf) => buf.len() as u64,
            _ => u64::MAX,
        }
    }
}

/// The chunk a receive on a topic with inline slots takes before its
/// claim (see `Topic::take_in`): given back when dropped unless an inline
/// message was copied into it (`chunk` taken out).
struct Spare<'t> {
    topic: &'t Topic,
    chunk: Option<Chunk>,
}

impl Drop for Spare<'_> {
    fn drop(&mut self) {
        if let Some(c) = self.chunk.take() {
            self.topic.region().free(c.class, c.index);
        }
    }
}

/// A chunk taken from the pool for one message (no handle attached).
#[derive(Debug, Clone, Copy)]
pub(super) struct Chunk {
    pub(super) class: usize,
    pub(super) index: u32,
    /// Its first byte, inside the region's mapping.
    pub(super) data: NonNull<u8>,
    /// The group slot whose group word holds it, for a message taken from a
    /// SHARED chunk (released through the group: `Region::release_shared`);
    /// `None` for a loan or a message of the single-group path.
    pub(super) group: Option<u8>,
}

impl Topic {
    pub(crate) fn attach(region: &Region, index: usize) -> Result<Topic> {
        let bad = |field, value| Error::corrupt(Corruption::BadField { field, value });
        // `index` may come from shared memory (a chunk's route).
        let entry = region.entries()?.get(index).ok_or_else(|| bad("topic index", index as u64))?;
        // Read from whichever copy holds (recovery restores the other: an
        // inspector attaches too, and writes nothing).
        let record = entry.record().ok_or_else(|| bad("topic entry", index as u64))?;
        let info = info_of(entry).ok_or_else(|| bad("topic name", index as u64))?;
        let cfg = TopicConfig {
            partitions: info.partitions,
            capacity: info.capacity,
            wait: info.wait.ok_or_else(|| bad("topic wait policy", u64::from(record.wait)))?,
            delivery: info.delivery.ok_or_else(|| bad("topic delivery", u64::from(record.delivery)))?,
            default_group: record.delivery & NO_DEFAULT_GROUP == 0,
            overrun: record.delivery & OVERRUN != 0,
            inline: inline_of(record.delivery),
            light: record.delivery & LIGHT != 0,
        };
        cfg.validate().map_err(|_| bad("topic geometry", u64::from(info.partitions)))?;
        let raw_off = record.ring_off;
        // The topic's rings must lie inside the ring arena.
        let arena = region.arena();
        let ring_off = usize::try_from(raw_off).map_err(|_| bad("topic ring offset", raw_off))?;
        let max_groups = region.config().max_groups;
        if ring_off < arena.start
            || ring_off.checked_add(cfg.ring_bytes(max_groups)).is_none_or(|end| end > arena.end)
        {
            return Err(bad("topic ring offset", raw_off));
        }
        if cfg.light {
            // Before this process's first light notify on the topic
            // (`WaitCell::notify_all_with`): refused, it keeps full fences
            // (always correct).
            crate::platform::membarrier::register();
        }
        let seg = region.segment();
        let slots = max_groups.max(1);
        let stride = partition::slot_stride(cfg.inline as usize);
        let parts = (0..cfg.partitions as usize * slots)
            .map(|p| -> Result<Partition> {
                let base = ring_off + p * cfg.block();
                let (header, cells) = partition::at(seg, base, cfg.capacity)?;
                let slots = seg.get_slice::<AtomicU8>(
                    base + partition::slots_off(cfg.capacity),
                    cfg.capacity as usize * stride,
                )?;
                Ok(Partition {
                    cursors: NonNull::from(&header.cursors),
                    cells: NonNull::from(cells),
                    slots: NonNull::from(slots).cast::<u8>(),
                    not_empty: NonNull::from(&header.not_empty),
                    not_full: NonNull::from(&header.not_full),
                    room_at: NonNull::from(&header.room_at),
                })
            })
            .collect::<Result<Arc<[Partition]>>>()?;
        let group_at = ring_off + cfg.block() * cfg.partitions as usize * slots;
        let controls = if max_groups == 0 {
            None
        } else {
            Some(NonNull::from(seg.get_slice::<Control>(group_at, max_groups)?))
        };
        let names = if max_groups == 0 {
            None
        } else {
            let words = max_groups * partition::GROUP_NAME_WORDS;
            Some(NonNull::from(seg.get_slice::<AtomicU64>(group_at + 8 * max_groups, words)?))
        };
        let core = TopicCore {
            parts,
            controls,
            names,
            default_group: cfg.default_group,
            overrun: cfg.overrun,
            inline: cfg.inline as usize,
            light: cfg.light,
            stride,
            batch_reads: false,
            region: region.clone(),
            entry: NonNull::from(entry),
            name: info.name.into(),
            partitions: cfg.partitions,
            capacity: cfg.capacity as usize,
            policy: cfg.wait,
            index,
            delivery: cfg.delivery,
        };
        Ok(Topic { core: Arc::new(core) })
    }

    /// Another count on this same handle, for a value made per operation
    /// (a loan, a message, a future, a waiting receive): no allocation,
    /// and the value lives on this handle's count line.
    #[inline]
    pub(super) fn share(&self) -> Topic {
        Topic { core: Arc::clone(&self.core) }
    }

    fn entry(&self) -> &TopicEntry {
        // SAFETY: `entry` was formed from a `&TopicEntry` inside the region's
        // mapping, which `self.core.region` keeps mapped (see `TopicCore`).
        unsafe { self.core.entry.as_ref() }
    }

    /// The region the topic lives in (clone it for a handle of your own).
    pub fn region(&self) -> &Region {
        &self.core.region
    }

    /// The configuration the topic was created with.
    pub fn config(&self) -> TopicConfig {
        TopicConfig {
            partitions: self.core.partitions,
            capacity: self.core.capacity as u32,
            wait: self.core.policy,
            delivery: self.core.delivery,
            default_group: self.core.default_group,
            overrun: self.core.overrun,
            inline: self.core.inline as u32,
            light: self.core.light,
        }
    }

    /// What a consumer's death does to the message it held.
    pub fn delivery(&self) -> Delivery {
        self.core.delivery
    }

    /// The topic's name.
    pub fn name(&self) -> &str {
        &self.core.name
    }

    /// The topic's directory index.
    pub(crate) fn index(&self) -> usize {
        self.core.index
    }

    /// Number of partitions.
    pub fn partitions(&self) -> u32 {
        self.core.partitions
    }

    /// Descriptors per partition.
    pub fn capacity(&self) -> usize {
        self.core.capacity
    }

    /// This handle with batch reads on or off (default off): a receive
    /// that catches up with a publisher in the middle of a stream of small
    /// messages (the head's cell being written, and its publisher going
    /// straight on to the next) first waits until that publisher is a
    /// batch of messages ahead (at most 32, and 2 KiB of them; none for
    /// messages of more than 256 bytes), then takes them one by one as
    /// before.
    /// A receive that takes each message the moment it is committed claims
    /// cells on the very line its publisher is writing, and the two cores
    /// pass that line back and forth at every message; a stream of 64-byte
    /// messages in inline slots settles at a quarter to two fifths of the
    /// raw ring's rate that way on the Intel Xeons measured, and runs 1.2
    /// to 2 times as fast with batch reads (docs/rings.md, "Batch reads";
    /// on an AMD EPYC of model 1, not faster). The price is latency: a
    /// message waits for the batch behind it, or, where its publisher stops
    /// short, for the looks that tell it stopped (about 1 µs): turn it on
    /// for a consumer that wants throughput, not for one that wants each
    /// message the moment it is sent. It changes how this handle's
    /// receives wait, nothing in shared memory, and nothing for other
    /// handles (a clone keeps the setting; [`Clone`] it first to keep one
    /// of each).
    ///
    /// ```
    /// use tachyon::bus::{Key, Region, RegionConfig, TopicConfig};
    /// # let name = format!("doc-topic-batch-{}", std::process::id());
    /// let region = Region::create(&name, RegionConfig::default())?;
    /// let producer = region.create_topic("ticks", TopicConfig::default().inline_payload(64))?;
    /// let consumer = region.topic("ticks")?.with_batch_reads(true);
    /// assert!(consumer.batch_reads() && !producer.batch_reads());
    /// producer.send(b"tick", Key(0), None)?;
    /// let mut buf = Vec::new();
    /// assert_eq!(consumer.recv_into(0, &mut buf, None)?, 4);
    /// # drop((producer, consumer)); drop(region); Region::remove(&name)?;
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn with_batch_reads(mut self, on: bool) -> Topic {
        Arc::make_mut(&mut self.core).batch_reads = on;
        self
    }

    /// Whether this handle's receives wait for batches
    /// ([`with_batch_reads`](Self::with_batch_reads)).
    pub fn batch_reads(&self) -> bool {
        self.core.batch_reads
    }

    /// The partition messages with `key` go to.
    pub fn partition_of(&self, key: Key) -> u32 {
        (mix64(key.0) & u64::from(self.core.partitions - 1)) as u32
    }

    /// Counters of the topic. `corrupt` includes the ring cells and
    /// cursors of its partitions repaired after damage.
    pub fn info(&self) -> TopicInfo {
        let mut info = info_of(self.entry()).unwrap_or_else(|| TopicInfo {
            name: self.core.name.to_string(),
            partitions: self.core.partitions,
            capacity: self.core.capacity as u32,
            wait: Some(self.core.policy),
            delivery: Some(self.core.delivery),
            published: 0,
            received: 0,
            corrupt: 0,
            lost: 0,
            undelivered: 0,
            missed: 0,
            inline_payload: self.core.inline as u32,
            light_handovers: self.core.light,
        });
        info.corrupt = info.corrupt.wrapping_add(self.ring_repairs());
        info
    }

    /// Repairs of damaged cells and cursors in the topic's rings so far.
    pub(crate) fn ring_repairs(&self) -> u64 {
        (0..self.core.partitions)
            .filter_map(|p| self.ring(p).ok())
            .map(|r| r.cursors.repairs.load(Ordering::Relaxed))
            .fold(0, u64::wrapping_add)
    }

    /// Messages waiting in `partition` now (a snapshot).
    pub fn depth(&self, partition: u32) -> Result<usize> {
        Ok(self.ring(partition)?.len() as usize)
    }

    fn slot_partition(&self, slot: usize, partition: u32) -> Result<&Partition> {
        let at = slot * self.core.partitions as usize + partition as usize;
        match self.core.parts.get(at) {
            Some(p) if partition < self.core.partitions => Ok(p),
            _ => Err(self.no_partition(partition)),
        }
    }

    /// The group slots' control words (empty in a region without group
    /// slots).
    pub(crate) fn controls(&self) -> &[Control] {
        match self.core.controls {
            // SAFETY: formed at attach from a checked slice of the region's
            // mapping, which `self.core.region` keeps mapped; atomics only.
            Some(c) => unsafe { c.as_ref() },
            None => &[],
        }
    }

    /// The name words of group slot `slot` (`partition::GROUP_NAME_WORDS`).
    pub(crate) fn group_name_words(&self, slot: usize) -> Option<&[AtomicU64]> {
        // SAFETY: as in `controls`.
        let names = unsafe { self.core.names?.as_ref() };
        names.get(slot * partition::GROUP_NAME_WORDS..(slot + 1) * partition::GROUP_NAME_WORDS)
    }

    /// The name of group slot `slot` as written by its join (the default
    /// group's is empty); `None` if it is no name (never written, damaged).
    pub(crate) fn group_name(&self, slot: usize) -> Option<String> {
        let w = self.group_name_words(slot)?;
        let len = w[0].load(Ordering::Relaxed) as usize;
        if len > MAX_NAME {
            return None;
        }
        let bytes: Vec<u8> =
            w[1..].iter().flat_map(|x| x.load(Ordering::Relaxed).to_le_bytes()).take(len).collect();
        String::from_utf8(bytes).ok()
    }

    /// The group slots in use (ACTIVE or DRAINING): `(slot, name,
    /// generation, state)`, slot 0 (the default group, named "") included.
    pub(crate) fn group_slots(&self) -> Vec<(usize, String, u32, u64)> {
        let mut slots = Vec::new();
        for (g, c) in self.controls().iter().enumerate() {
            let (gen, state) = c.load();
            if state != groups::VACANT {
                slots.push((g, self.group_name(g).unwrap_or_default(), gen, state));
            }
        }
        if self.controls().is_empty() {
            slots.push((0, String::new(), 0, groups::ACTIVE));
        }
        slots
    }

    #[cold]
    pub(super) fn no_default_group(&self) -> Error {
        Error::invalid(format!(
            "topic {:?} was created without its default group (TopicConfig::default_group(false)): receive through a group (Topic::join_group)",
            self.core.name
        ))
    }

    #[cold]
    fn no_partition(&self, partition: u32) -> Error {
        Error::invalid(format!(
            "partition {partition} of topic {:?}, which has {} (0 to {})",
            self.core.name,
            self.core.partitions,
            self.core.partitions - 1
        ))
    }

    pub(crate) fn ring(&self, partition: u32) -> Result<Ring<'_>> {
        self.ring_of(0, partition)
    }

    /// The ring of `partition` in group slot `slot`.
    pub(crate) fn ring_of(&self, slot: usize, partition: u32) -> Result<Ring<'_>> {
        let p = self.slot_partition(slot, partition)?;
        // SAFETY: both were formed at attach from checked references into
        // the region's mapping, which `self.core.region` keeps mapped while
        // `self` lives; cursors and cells are atomics (shared access only).
        Ok(unsafe { Ring { cursors: p.cursors.as_ref(), cells: p.cells.as_ref() } })
    }

    pub(crate) fn waits(&self, partition: u32) -> Result<Waits<'_>> {
        self.waits_of(0, partition)
    }

    /// A partition's wait cells and producers' mark, as this topic waits.
    #[inline]
    fn waits_with<'a>(
        &self,
        not_empty: &'a crate::sync::WaitCell,
        not_full: &'a crate::sync::WaitCell,
        room_at: &'a AtomicU64,
    ) -> Waits<'a> {
        let (policy, light, batch_reads) = (self.core.policy, self.core.light, self.core.batch_reads);
        Waits { not_empty, not_full, policy, closed: None, repaired: None, light, room_at: Some(room_at), batch_reads }
    }

    /// The wait cells of `partition` in group slot `slot`.
    pub(crate) fn waits_of(&self, slot: usize, partition: u32) -> Result<Waits<'_>> {
        let p = self.slot_partition(slot, partition)?;
        // SAFETY: as in `ring`: checked at attach, kept mapped by the
        // region; wait cells are atomics.
        let (not_empty, not_full, room_at) = unsafe { (p.not_empty.as_ref(), p.not_full.as_ref(), p.room_at.as_ref()) };
        Ok(self.waits_with(not_empty, not_full, room_at))
    }

    /// Takes a chunk for `size` bytes, LOANED to this process.
    pub(super) fn take_chunk(&self, size: usize, timeout: Option<Duration>) -> Result<Chunk> {
        if size > MAX_MESSAGE {
            return Err(Error::MessageTooLarge { size, max: MAX_MESSAGE, hint: TOO_LARGE });
        }
        // The pool hands the chunk over already LOANED to this process.
        let (class, index) = self.region().alloc(size, timeout)?;
        self.region().beat_sometimes();
        Ok(self.chunk(class, index))
    }

    /// Borrows a writable chunk of at least `size` bytes from the pool,
    /// waiting up to `timeout` (`None`: for ever) for one to be free.
    /// Fails with [`Error::MessageTooLarge`] above 1 MiB, and
    /// [`Error::PoolExhausted`] when the timeout passes. Dropping the loan
    /// unpublished returns the chunk. The loan's bytes start 64-byte
    /// aligned. In a hot loop, [`send_with`](Self::send_with) does the same
    /// zero-copy work without a value to move.
    ///
    /// ```
    /// use std::io::Write;
    /// use tachyon::bus::{Key, Region, RegionConfig, TopicConfig};
    /// # let name = format!("doc-loan-{}", std::process::id());
    /// let region = Region::create(&name, RegionConfig::default().size(8 << 20).ring_arena(1 << 20))?;
    /// let topic = region.create_topic("log", TopicConfig::default())?;
    ///
    /// let mut loan = topic.loan(5, None)?;   // exactly 5 bytes
    /// loan.copy_from_slice(b"hello");
    /// loan.publish(Key(1), None)?;
    ///
    /// let mut loan = topic.loan(1024, None)?; // at most 1 KiB, written as a stream
    /// write!(loan, "{} + {} = {}", 1, 2, 3)?;
    /// loan.publish(Key(1), None)?;            // publishes what was written
    ///
    /// assert_eq!(&*topic.receive(0, None)?, b"hello");
    /// assert_eq!(&*topic.receive(0, None)?, b"1 + 2 = 3");
    /// # drop(topic); drop(region);
    /// # Region::remove(&name)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn loan(&self, size: usize, timeout: Option<Duration>) -> Result<Loan> {
        let chunk = self.take_chunk(size, timeout)?;
        Ok(Loan { topic: self.share(), chunk, size, written: None, live: true })
    }

    /// [`loan`](Self::loan) without waiting: [`Error::PoolExhausted`] if no
    /// chunk is free now.
    pub fn try_loan(&self, size: usize) -> Result<Loan> {
        self.loan(size, Some(Duration::ZERO))
    }

    /// Loans a chunk for one `T`, zeroed, to be filled in place and
    /// published: the typed form of [`loan`](Self::loan).
    ///
    /// ```
    /// use tachyon::bus::{Key, Region, RegionConfig, TopicConfig};
    /// # let name = format!("doc-loan-value-{}", std::process::id());
    /// #[derive(Clone, Copy, Debug, PartialEq, tachyon::bytemuck::Pod, tachyon::bytemuck::Zeroable)]
    /// #[bytemuck(crate = "tachyon::bytemuck")]
    /// #[repr(C)]
    /// struct Quote { bid: f64, ask: f64, venue: u32, _pad: u32 }
    ///
    /// let region = Region::create(&name, RegionConfig::default().size(8 << 20).ring_arena(1 << 20))?;
    /// let topic = region.create_topic("quotes", TopicConfig::default())?;
    /// let mut quote = topic.loan_value::<Quote>(None)?;
    /// quote.bid = 101.25;
    /// quote.ask = 101.5;
    /// quote.publish(Key(7), None)?;
    ///
    /// let msg = topic.receive(topic.partition_of(Key(7)), None)?;
    /// assert_eq!(msg.value::<Quote>()?.ask, 101.5);
    /// # drop(msg); drop(topic); drop(region);
    /// # Region::remove(&name)?;
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn loan_value<T: bytemuck::Pod>(&self, timeout: Option<Duration>) -> Result<ValueLoan<T>> {
        check_alignment::<T>()?;
        let mut loan = self.loan(std::mem::size_of::<T>(), timeout)?;
        loan.fill(0);
        Ok(ValueLoan { loan, _type: PhantomData })
    }

    /// Copies `data` into a chunk and publishes it with `key` (the copy
    /// path), waiting up to `timeout` in all for a chunk and for room in
    /// the key's partition. On a topic with [inline
    /// slots](TopicConfig::inline_payload) that `data` fits, it is copied
    /// into its cell's slot instead. On a topic with [light
    /// hand-overs](TopicConfig::light_handovers) a chunk's cell is claimed
    /// before the copy (a timeout copies nothing), and readers of the
    /// partition wait behind it while the bytes are copied; elsewhere the
    /// copy comes first.
    pub fn send(&self, data: &[u8], key: Key, timeout: Option<Duration>) -> Result<()> {
        if self.core.inline > 0 && data.len() <= self.core.inline {
            let fill = |dst: &mut [u8]| {
                debug_assert_eq!(dst.len(), data.len());
                // SAFETY: `send_inline` lends exactly `data.len()` bytes of
                // the slot of a cell this call claimed (never memory `data`
                // can point into: a received message's bytes are in a chunk
                // or a slot its receiver holds); `data` is a `&[u8]`, so
                // initialized. A copy that cannot unwind
                // lets the compiler drop `send_inline`'s unwind guard.
                unsafe { copy::copy_raw(data.as_ptr(), dst.as_mut_ptr(), data.len()) }
            };
            if let Ok(sent) = self.send_inline(data.len(), key, timeout, fill) {
                return sent;
            }
        }
        let (chunk, left) = self.take_chunk_within(data.len(), timeout)?;
        if self.core.light {
            return self.send_chunk_claimed(chunk, data, key, left);
        }
        self.copy_into(chunk, data);
        self.publish_chunk(chunk, data.len(), key, left)
    }

    /// Copies `data` into the start of `chunk`, a chunk this process holds
    /// LOANED (or QUEUED with its cell claimed and not yet committed) for
    /// a message of `data.len()` bytes.
    #[inline]
    fn copy_into(&self, chunk: Chunk, data: &[u8]) {
        // SAFETY: the chunk is this process's (LOANED, or QUEUED with its
        // descriptor not yet committed): nobody else reads or writes its
        // bytes; `data.len()` fits its class (`take_chunk` chose it), and
        // `data` cannot point into it (a received message's bytes are in
        // a chunk or a slot its receiver holds).
        copy::copy(unsafe { self.chunk_mut(chunk, data.len()) }, data);
    }

    /// [`send`](Self::send)'s chunk path on a light topic: the cell is
    /// claimed before the bytes are copied into the chunk, as an inline
    /// message is built in its slot between its claim and its commit. No
    /// locked instruction then follows the copy's stores (it would wait
    /// for the chunk's lines to come back from the reader's core;
    /// docs/bus.md, "Light hand-overs"). Only the copy runs between the
    /// claim and the commit: no caller code, nothing that unwinds. Readers
    /// of the partition wait behind the cell for that long. On a topic
    /// with a named group joined the message goes through the groups, as
    /// any chunk does.
    fn send_chunk_claimed(&self, chunk: Chunk, data: &[u8], key: Key, timeout: Option<Duration>) -> Result<()> {
        let (grouped, to_groups) = self.publish_route();
        if to_groups {
            self.copy_into(chunk, data);
            return self.publish_chunk(chunk, data.len(), key, timeout);
        }
        let partition = self.partition_of(key);
        let (ring, waits, pos, idx, desc) = match self.queue_and_claim(chunk, data.len(), partition, timeout) {
            Ok(claimed) => claimed,
            Err(e) => {
                self.region().free(chunk.class, chunk.index);
                return Err(e);
            }
        };
        let me = self.region().segment().token();
        // Counted right after the claim, as `send_inline` counts.
        let published = &self.entry().published;
        published.fetch_add(1, Ordering::Relaxed);
        if grouped && self.second_look(&ring, idx) {
            // A named group joined since the first look: give the cell up
            // and publish through the groups (the chunk is LOANED again).
            published.fetch_sub(1, Ordering::Relaxed);
            ring.abandon_write(pos, idx, me);
            topic_wake(&waits, waits.not_empty);
            self.region().unqueue(chunk.index);
            self.copy_into(chunk, data);
            return self.publish_chunk(chunk, data.len(), key, timeout);
        }
        self.copy_into(chunk, data);
        crate::platform::fault::point("chunk-copied-claimed");
        let committed = ring.commit_write_with(pos, idx, desc.encode(), me, true);
        topic_wake(&waits, waits.not_empty);
        if !committed {
            // Repaired by another process that judged us dead: a tombstone
            // now, and the chunk (QUEUED, named by no committed
            // descriptor) is recovery's to reclaim, no longer ours.
            published.fetch_sub(1, Ordering::Relaxed);
            return Err(claim_repaired());
        }
        Ok(())
    }

    /// How a publish goes: `(grouped, to_groups)`. `grouped`: the topic
    /// has named group slots (a publish on the single-group path must take
    /// its second look, `second_look`); `to_groups`: a named group is
    /// joined, or the topic has no default group, so the message goes
    /// through the groups protocol in a chunk.
    #[inline]
    fn publish_route(&self) -> (bool, bool) {
        let grouped = self.core.controls.is_some() && (self.controls().len() > 1 || !self.core.default_group);
        let to_groups = grouped
            && (!self.core.default_group || self.controls().iter().skip(1).any(|c| c.load().1 == groups::ACTIVE));
        (grouped, to_groups)
    }

    /// Builds a message of `len` bytes in place and publishes it with
    /// `key`: `fill` writes the message's `len` bytes where receivers will
    /// read them, and it is published when `fill` returns. Zero-copy, like
    /// [`loan`](Self::loan) + [`publish`](Loan::publish), but without a
    /// [`Loan`] value to carry: `loan` returns a `Result<Loan>` of 88 bytes
    /// through memory, which its caller copies, and a loop that publishes
    /// in place runs faster this way (by 6 – 15 % in the benchmark's 1 KiB
    /// stream; `docs/BENCHMARK.md`, "the loan path"). [`send`](Self::send)
    /// does the same with a copy of a slice. Returns what `fill` returned.
    ///
    /// Waits up to `timeout` in all for a chunk (or, on a topic with
    /// [inline slots](TopicConfig::inline_payload) that `len` fits, for a
    /// cell) and for room in the key's partition; `fill` runs once they
    /// were found. On a topic with inline slots a message that fits is
    /// built in its cell's slot, and readers of the partition wait behind
    /// it until `fill` returns: keep `fill` short there, and do not publish
    /// to the same partition from inside it (with the partition full, that
    /// publish would wait for readers who wait for this one, until its
    /// timeout). If `fill` panics,
    /// nothing is published (the chunk goes back to the pool, a cell is
    /// skipped by readers) and the panic goes on. If the publish fails (the
    /// partition stayed full), the message is dropped.
    ///
    /// ```
    /// use tachyon::bus::{Key, Region, RegionConfig, TopicConfig};
    /// # let name = format!("doc-send-with-{}", std::process::id());
    /// let region = Region::create(&name, RegionConfig::default().size(8 << 20).ring_arena(1 << 20))?;
    /// let topic = region.create_topic("frames", TopicConfig::default())?;
    /// let p = topic.partition_of(Key(3));
    ///
    /// topic.send_with(16, Key(3), None, |frame| {
    ///     frame[..8].copy_from_slice(&7u64.to_le_bytes());
    ///     frame[8..].fill(0xff);
    /// })?;
    /// let sum: u32 = topic.receive_with(p, None, |frame| frame.iter().map(|&b| u32::from(b)).sum())?;
    /// assert_eq!(sum, 7 + 8 * 0xff);
    /// # drop(topic); drop(region);
    /// # Region::remove(&name)?;
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    #[inline]
    pub fn send_with<R>(
        &self,
        len: usize,
        key: Key,
        timeout: Option<Duration>,
        fill: impl FnOnce(&mut [u8]) -> R,
    ) -> Result<R> {
        let mut fill = CallOnce::new(fill);
        self.send_with_dyn(len, key, timeout, &mut |buf: &mut [u8]| fill.call(buf))?;
        // `send_with_dyn` returns `Ok` only after calling `fill`.
        Ok(fill.result("a publish that succeeded ran its fill"))
    }

    /// [`send_with`](Self::send_with)'s work, compiled here once, out of
    /// line, with `fill` called through a reference. Generic, the whole
    /// send was compiled in each caller's crate, where the taking of the
    /// chunk, the view of its bytes and the publish were separate calls
    /// whose results went through memory: an in-place 1 KiB stream ran
    /// 0.88 – 0.92 × the copy path's `send`, which does the same steps
    /// compiled here. Through this function it runs 0.98 – 1.05 ×, and
    /// the in-place round trip 0.32 µs instead of 0.35 – 0.39 (AMD EPYC
    /// guest; docs/benchmark-history.md, "the in-place path compiled in the
    /// library"). The indirect call costs a few instructions.
    #[inline(never)]
    fn send_with_dyn(
        &self,
        len: usize,
        key: Key,
        timeout: Option<Duration>,
        fill: &mut dyn FnMut(&mut [u8]),
    ) -> Result<()> {
        let fill = if self.core.inline > 0 && len <= self.core.inline {
            match self.send_inline(len, key, timeout, fill) {
                Ok(sent) => return sent,
                Err(fill) => fill,
            }
        } else {
            fill
        };
        let (chunk, left) = self.take_chunk_within(len, timeout)?;
        let unpublished = FreeOnUnwind { topic: self, chunk };
        // SAFETY: the chunk was just taken LOANED by this process and nobody
        // else reads or writes it until the publish below (or the guard
        // frees it); `len` fits its class (take_chunk chose it). The slice
        // dies with `fill`'s call.
        fill(unsafe { self.chunk_mut(chunk, len) });
        std::mem::forget(unpublished);
        self.publish_chunk(chunk, len, key, left)
    }

    /// [`send_with`](Self::send_with) without waiting:
    /// [`Error::PoolExhausted`] if no chunk is free, [`Error::Full`] if the
    /// key's partition is full. `fill` is not called if no chunk or cell
    /// was free; a message it built is dropped if the partition was full.
    #[inline]
    pub fn try_send_with<R>(&self, len: usize, key: Key, fill: impl FnOnce(&mut [u8]) -> R) -> Result<R> {
        self.send_with(len, key, Some(Duration::ZERO), fill).map_err(full_if_timeout)
    }

    /// A chunk for a message of `len` bytes, waiting up to `timeout` for
    /// one, and what is left of `timeout` for the publish: the timeout is a
    /// deadline for the whole call. The clock is read only if the pool has
    /// no chunk now. Always inlined: with two callers in the crate
    /// (`send`, `send_with_dyn`) it was compiled out of line, and `send`'s
    /// 1 KiB stream lost 5 % to the call and its result's trip through
    /// memory.
    #[inline(always)]
    fn take_chunk_within(&self, len: usize, timeout: Option<Duration>) -> Result<(Chunk, Option<Duration>)> {
        match self.take_chunk(len, Some(Duration::ZERO)) {
            Ok(chunk) => Ok((chunk, timeout)),
            Err(Error::PoolExhausted { .. }) if timeout.is_none_or(|t| !t.is_zero()) => {
                let start = Instant::now();
                let chunk = self.take_chunk(len, timeout)?;
                Ok((chunk, timeout.map(|t| t.saturating_sub(start.elapsed()))))
            }
            Err(e) => Err(e),
        }
    }

    /// A message of `len` bytes that fits the topic's inline slots, built
    /// by `fill` in the slot of the cell claimed for it, between the claim
    /// and the commit (see "Inline payloads" in `docs/bus.md`). `Err(fill)`,
    /// `fill` not called, when the message must travel in a chunk after
    /// all: a named group is joined (groups share one chunk), or one joined
    /// between the claim and the commit (the second look; the cell is given
    /// up). If `fill` panics, the cell is given up (readers skip it) and
    /// the panic goes on.
    #[inline]
    fn send_inline<R, F: FnOnce(&mut [u8]) -> R>(
        &self,
        len: usize,
        key: Key,
        timeout: Option<Duration>,
        fill: F,
    ) -> std::result::Result<Result<R>, F> {
        let (grouped, to_groups) = self.publish_route();
        if to_groups {
            return Err(fill);
        }
        let partition = self.partition_of(key);
        let rings = self.ring(partition).and_then(|ring| Ok((ring, self.waits(partition)?)));
        let (ring, waits) = match rings {
            Ok(r) => r,
            Err(e) => return Ok(Err(e)),
        };
        let me = self.region().segment().token();
        // The common case, the cell at the tail free, claimed at once; the
        // general claim (waits, repairs, overrun) for anything else.
        let claimed = match ring.claim_write_now(me) {
            Some(got) => Ok(got),
            None => self.claim_publish(0, partition, &ring, &waits, timeout).map(|(pos, idx, _)| (pos, idx)),
        };
        let (pos, idx) = match claimed {
            Ok(got) => got,
            Err(Error::Timeout { .. }) => return Ok(Err(Error::timeout("room in the topic's partition", timeout))),
            Err(e) => return Ok(Err(e)),
        };
        // On a light topic the message is counted here, and the count taken
        // back if it is not published: right after the claim's
        // compare-and-swap this process's store buffer is empty, where
        // after the slot's stores and the light hand-over a locked
        // instruction would wait for their lines to come back from the
        // reader's core (docs/bus.md, "Light hand-overs"). Elsewhere after
        // the commit, so that a publisher killed before it is not counted.
        let light = self.core.light;
        let published = &self.entry().published;
        if light {
            published.fetch_add(1, Ordering::Relaxed);
        }
        crate::platform::fault::point("inline-claimed");
        if grouped && self.second_look(&ring, idx) {
            if light {
                published.fetch_sub(1, Ordering::Relaxed);
            }
            ring.abandon_write(pos, idx, me);
            topic_wake(&waits, waits.not_empty);
            return Err(fill);
        }
        let dst = self.inline_slot(0, partition, idx);
        let unfinished = AbandonOnUnwind { ring: &ring, waits: &waits, pos, idx, me, counted: light.then_some(published) };
        // SAFETY: `dst` is the first of the `inline >= len` bytes of cell
        // `idx`'s slot, inside the mapping `self` keeps (checked at attach).
        // The cell is claimed for writing by this process (its word carries
        // our token): its last reader has finished with the slot (a cell is
        // free for a writer only after `finish_read`, or after recovery took
        // a dead reader's claim over), and no reader claims it before the
        // commit below publishes it (Release), or the guard gives it up. The
        // slice dies with `fill`'s call.
        let r = fill(unsafe { std::slice::from_raw_parts_mut(dst, len) });
        std::mem::forget(unfinished);
        crate::platform::fault::point("inline-written");
        let committed = ring.commit_write_with(pos, idx, Descriptor::inline(len as u32).encode(), me, light);
        topic_wake(&waits, waits.not_empty);
        if !committed {
            // Repaired by another process that judged us dead: a tombstone
            // now, never read.
            if light {
                published.fetch_sub(1, Ordering::Relaxed);
            }
            return Ok(Err(claim_repaired()));
        }
        if !light {
            published.fetch_add(1, Ordering::Relaxed);
        }
        Ok(Ok(r))
    }

    /// The first byte of the inline slot of cell `idx` of `partition` in
    /// group slot `slot` (a topic with inline slots; `idx` below the
    /// capacity, as every claim's is).
    #[inline]
    fn inline_slot(&self, slot: usize, partition: u32, idx: usize) -> *mut u8 {
        debug_assert!(self.core.inline > 0 && idx < self.core.capacity);
        let base = self.core.parts[slot * self.core.partitions as usize + partition as usize].slots;
        // SAFETY: attach checked that `capacity * stride` bytes from `slots`
        // lie inside the mapping, `idx < capacity` and `inline <= stride`.
        unsafe { base.as_ptr().add(idx * self.core.stride) }
    }

    /// The inline slot of position `pos` of group slot `slot`'s ring of
    /// `partition`, if the topic has slots of at least `len` bytes and the
    /// ring exists; for a look that claims nothing (`bus/backlog.rs`).
    pub(super) fn inline_slot_at(&self, slot: usize, partition: u32, pos: u64, len: usize) -> Option<*mut u8> {
        if self.core.inline == 0 || len > self.core.inline {
            return None;
        }
        self.slot_partition(slot, partition).ok()?;
        let idx = (pos % self.core.capacity as u64) as usize;
        Some(self.inline_slot(slot, partition, idx))
    }

    /// [`send`](Self::send) without waiting: [`Error::PoolExhausted`] if no
    /// chunk is free, [`Error::Full`] if the key's partition is full.
    pub fn try_send(&self, data: &[u8], key: Key) -> Result<()> {
        self.send(data, key, Some(Duration::ZERO)).map_err(full_if_timeout)
    }

    /// Sends one `T` (its bytes) with `key`: the typed form of
    /// [`send`](Self::send). Read it with [`Message::value`].
    pub fn send_value<T: bytemuck::NoUninit>(
        &self,
        value: &T,
        key: Key,
        timeout: Option<Duration>,
    ) -> Result<()> {
        self.send(bytemuck::bytes_of(value), key, timeout)
    }

    /// Chunk `index` of class `class` (checked by the pool or by the
    /// descriptor's validation).
    fn chunk(&self, class: usize, index: u32) -> Chunk {
        let data = NonNull::new(self.region().chunk_ptr(class, index)).expect("a chunk inside the mapping");
        Chunk { class, index, data, group: None }
    }

    /// The first `len` bytes of `chunk`, writable.
    ///
    /// # Safety
    /// The caller holds `chunk` LOANED and no other reference to its bytes
    /// lives while the slice does (nobody else reads or writes it), and
    /// `len` is at most its class's size.
    #[allow(clippy::mut_from_ref)]
    pub(super) unsafe fn chunk_mut(&self, chunk: Chunk, len: usize) -> &mut [u8] {
        assert!(len <= CLASS_SIZES[chunk.class], "chunk view past its class");
        // SAFETY: the caller's contract; `chunk.data` points at the chunk's
        // `CLASS_SIZES[class]` bytes inside the mapping `self` keeps.
        unsafe { std::slice::from_raw_parts_mut(chunk.data.as_ptr(), len) }
    }

    /// The first `len` bytes of `chunk`, read-only.
    ///
    /// # Safety
    /// The caller holds `chunk` (LOANED or HELD) and nobody writes it while
    /// the slice lives; `len` is at most its class's size.
    unsafe fn chunk_ref(&self, chunk: Chunk, len: usize) -> &[u8] {
        assert!(len <= CLASS_SIZES[chunk.class], "chunk view past its class");
        // SAFETY: the caller's contract; as in `chunk_mut`.
        unsafe { std::slice::from_raw_parts(chunk.data.as_ptr(), len) }
    }

    /// Publishes the first `len` bytes of a chunk this process holds
    /// LOANED: one descriptor goes into the key's partition, waiting up to
    /// `timeout` if it is full. On failure the chunk goes back to the pool.
    pub(super) fn publish_chunk(
        &self,
        chunk: Chunk,
        len: usize,
        key: Key,
        timeout: Option<Duration>,
    ) -> Result<()> {
        self.publish_chunk_or_keep(chunk, len, key, timeout, false)
    }

    /// [`publish_chunk`](Self::publish_chunk); with `keep_on_timeout`, a
    /// timeout leaves the chunk LOANED to the caller (to publish again)
    /// instead of freeing it.
    pub(super) fn publish_chunk_or_keep(
        &self,
        chunk: Chunk,
        len: usize,
        key: Key,
        timeout: Option<Duration>,
        keep_on_timeout: bool,
    ) -> Result<()> {
        let partition = self.partition_of(key);
        let grouped = self.core.controls.is_some() && (self.controls().len() > 1 || !self.core.default_group);
        if grouped {
            if let Some(r) = self.publish_to_groups(chunk, len, partition, timeout, keep_on_timeout) {
                return r;
            }
        }
        // Until its descriptor is committed the chunk is this caller's: any
        // failure before that gives it back (`queue_and_claim` made it
        // LOANED again).
        let (ring, waits, pos, idx, desc) = match self.queue_and_claim(chunk, len, partition, timeout) {
            Ok(claimed) => claimed,
            Err(e @ Error::Timeout { .. }) if keep_on_timeout => return Err(e),
            Err(e) => {
                self.region().free(chunk.class, chunk.index);
                return Err(e);
            }
        };
        // The second look at the groups (`bus/backlog.rs`, "Publishers"): a
        // named group that joined since the first goes through the groups
        // path, with this message (the chunk is LOANED again, ours).
        if grouped && self.second_look(&ring, idx) {
            ring.abandon_write(pos, idx, self.region().segment().token());
            topic_wake(&waits, waits.not_empty);
            self.region().unqueue(chunk.index);
            return self.publish_chunk_or_keep(chunk, len, key, timeout, keep_on_timeout);
        }
        // Counted before a light commit, taken back if it fails: no locked
        // instruction after a light hand-over (as in `send_inline`).
        let light = self.core.light;
        let published = &self.entry().published;
        if light {
            published.fetch_add(1, Ordering::Relaxed);
        }
        let committed = ring.commit_write_with(pos, idx, desc.encode(), self.region().segment().token(), light);
        topic_wake(&waits, waits.not_empty);
        if !committed {
            // The claim was repaired by another process that judged us dead:
            // the chunk is no longer ours to free.
            if light {
                published.fetch_sub(1, Ordering::Relaxed);
            }
            return Err(claim_repaired());
        }
        if !light {
            published.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Publishes through the groups protocol (docs/groups-design.md,
    /// "Transitions") when a named group is ACTIVE or the topic has no
    /// default group: `None` when only the default group is ACTIVE (the
    /// caller publishes as it always did: no SHARED, no fence). Claims a
    /// cell in `partition`'s ring of every ACTIVE group (waiting up to
    /// `timeout` in all; on a full ring the cells claimed are given up as
    /// tombstones and nothing is published), sets the group words, moves
    /// the main word to SHARED (the commit point), gives back what groups
    /// dropped meanwhile were given, and commits the cells. With no group
    /// ACTIVE the message is delivered to nobody: the chunk goes back to
    /// the pool, counted in `undelivered`. A publisher killed anywhere in
    /// here is repaired by recovery (`recovery.rs`: before the commit point
    /// nothing is published, after it every group gets the message).
    fn publish_to_groups(
        &self,
        chunk: Chunk,
        len: usize,
        partition: u32,
        timeout: Option<Duration>,
        keep_on_timeout: bool,
    ) -> Option<Result<()>> {
        let mut to = [(0usize, 0u32); super::config::MAX_GROUPS];
        loop {
            let mut n = 0;
            for (g, c) in self.controls().iter().enumerate() {
                let (gen, state) = c.load();
                if state == groups::ACTIVE && n < to.len() {
                    to[n] = (g, gen);
                    n += 1;
                }
            }
            if n == 1 && to[0].0 == 0 {
                return None;
            }
            match self.publish_shared(chunk, len, partition, timeout, keep_on_timeout, &to[..n]) {
                Ok(true) => return Some(Ok(())),
                // A group joined since the look above: look again.
                Ok(false) => continue,
                Err(e) => return Some(Err(e)),
            }
        }
    }

    /// A publisher's second look at the groups, after it claimed its cell
    /// `idx` of `ring` (the only one, on the single-group path) and before
    /// it commits: marks it (the intent a joiner "from the oldest" waits
    /// for) and says whether a named group is ACTIVE now (it read none at
    /// first: the single-group path is taken only then). True: the
    /// publisher gives its cell up and publishes again (see
    /// `bus/backlog.rs`, "Publishers").
    fn second_look(&self, ring: &Ring<'_>, idx: usize) -> bool {
        ring.mark_intent(idx);
        // SYNC: as in `joined_since`.
        std::sync::atomic::compiler_fence(Ordering::SeqCst);
        self.controls().iter().skip(1).any(|c| c.load().1 == groups::ACTIVE)
    }

    /// The groups path's second look, over the marks already made: whether
    /// a group is ACTIVE now that is not in `to` (the groups the publisher
    /// read at first, `(slot, generation)`).
    fn joined_since(&self, to: &[(usize, u32)]) -> bool {
        // SYNC: the mark stores come before the control loads in program
        // order and, with this compiler fence, in the instructions: the
        // joiner's `membarrier` (a full barrier on every CPU between its
        // ACTIVE store and its look at the cells) makes it see our marks, or
        // us see its ACTIVE (the asymmetric Dekker pair, bus/backlog.rs).
        std::sync::atomic::compiler_fence(Ordering::SeqCst);
        self.controls().iter().enumerate().any(|(g, c)| {
            let (gen, state) = c.load();
            state == groups::ACTIVE && !to.contains(&(g, gen))
        })
    }

    fn publish_shared(
        &self,
        chunk: Chunk,
        len: usize,
        partition: u32,
        timeout: Option<Duration>,
        keep_on_timeout: bool,
        to: &[(usize, u32)],
    ) -> Result<bool> {
        let region = self.region();
        let me = region.segment().token();
        if to.is_empty() {
            // Nobody to deliver to: the chunk, still LOANED by us (never
            // SHARED), goes back to the pool.
            region.free(chunk.class, chunk.index);
            self.entry().undelivered.fetch_add(1, Ordering::Relaxed);
            return Ok(true);
        }
        let corrupt = |field| Error::corrupt(Corruption::BadField { field, value: 0 });
        let give_back = |e: Error| {
            if !(keep_on_timeout && matches!(e, Error::Timeout { .. })) {
                region.free(chunk.class, chunk.index);
            }
            e
        };
        // Everything that can fail on damage is looked up before the first
        // claim: after the commit point nothing may fail (a live publisher's
        // QUEUED group words and claimed cells are nobody else's to repair).
        let (shares, free) = match region.shares(chunk.index).and_then(|s| Ok((s, region.free_to(chunk.class)?))) {
            Ok(s) => s,
            Err(e) => return Err(give_back(e)),
        };
        let meta = shares.main;
        meta.route.store(((self.core.index as u32 + 1) << 16) | partition, Ordering::Relaxed);
        meta.len.store(len as u32, Ordering::Relaxed);
        // The stamp of every group word of this publication: the chunk's
        // publication count, which the single-group path draws from too.
        // SYNC: AcqRel, as the Release store in `Region::enqueue`: route and
        // len above go with it (and with the group words' CASes).
        let stamp = meta.version.fetch_add(1, Ordering::AcqRel).wrapping_add(1);
        // 1. A cell in every group's ring, or none.
        let mut cells = [(0u64, 0usize); super::config::MAX_GROUPS];
        let deadline = timeout.filter(|t| !t.is_zero()).and_then(crate::platform::deadline_after);
        let abandon = |upto: usize, cells: &[(u64, usize)]| {
            for (&(g, _), &(pos, idx)) in to[..upto].iter().zip(cells) {
                if let Ok(ring) = self.ring_of(g, partition) {
                    ring.abandon_write(pos, idx, me);
                }
                if let Ok(waits) = self.waits_of(g, partition) {
                    topic_wake(&waits, waits.not_empty);
                }
            }
        };
        for (i, &(g, _)) in to.iter().enumerate() {
            let claimed = self.ring_of(g, partition).and_then(|ring| {
                let waits = self.waits_of(g, partition)?;
                let left = match deadline {
                    Some(d) => Some(d.saturating_duration_since(Instant::now())),
                    None => timeout,
                };
                self.claim_publish(g, partition, &ring, &waits, left)
            });
            match claimed {
                Ok((pos, idx, _)) => cells[i] = (pos, idx),
                Err(e) => {
                    abandon(i, &cells);
                    let e = match e {
                        Error::Timeout { .. } => Error::timeout("room in the topic's partition", timeout),
                        e => e,
                    };
                    return Err(give_back(e));
                }
            }
        }
        crate::platform::fault::point("groups-publish-claimed");
        // The second look (`bus/backlog.rs`, "Publishers"): every cell
        // marked, then the groups read again; a group that joined since the
        // first look means giving the cells up and publishing again, with
        // it (the chunk is still ours: nothing is published).
        for (&(g, _), &(_, idx)) in to.iter().zip(&cells) {
            if let Ok(ring) = self.ring_of(g, partition) {
                ring.mark_intent(idx);
            }
        }
        if self.joined_since(to) {
            abandon(to.len(), &cells);
            return Ok(false);
        }
        // 2. The group words.
        let mut slots = [0usize; super::config::MAX_GROUPS];
        for (s, &(g, _)) in slots.iter_mut().zip(to) {
            *s = g;
        }
        if shares.prepare_stamped(me, &slots[..to.len()], stamp).is_err() {
            abandon(to.len(), &cells);
            return Err(give_back(corrupt("group word of a chunk this process holds")));
        }
        crate::platform::fault::point("groups-publish-prepared");
        // 3. The commit point.
        let Ok(m) = shares.share(me) else {
            // Not ours any more (damage, or judged dead and reclaimed).
            for &g in &slots[..to.len()] {
                shares.cas_group(g, Word::new(stamp, QUEUED, me.raw()), Word::new(stamp, FREE, 0));
            }
            abandon(to.len(), &cells);
            return Err(corrupt("state of a chunk this process holds"));
        };
        // 4. Groups dropped since the snapshot give back their hold.
        let stamps = [stamp; super::config::MAX_GROUPS];
        let keep = shares.keep_joined(self.controls(), to, &stamps[..to.len()], me, m, &free);
        crate::platform::fault::point("groups-publish-shared");
        // 5. The commits.
        let desc = Descriptor::new(chunk.index, stamp, len as u32).encode();
        let mut lost = false;
        for (i, &(g, _)) in to.iter().enumerate() {
            let (pos, idx) = cells[i];
            let rings = self.ring_of(g, partition).and_then(|r| Ok((r, self.waits_of(g, partition)?)));
            let kept = keep & (1 << i) != 0;
            let done = match &rings {
                Ok((ring, _)) if kept => ring.commit_write_with(pos, idx, desc, me, self.core.light),
                Ok((ring, _)) => {
                    ring.abandon_write(pos, idx, me);
                    true
                }
                // (Found at the claim; never after it but on damage.)
                Err(_) => !kept,
            };
            if !done {
                // Our claim was repaired away (judged dead): no descriptor
                // names this hold, so it is let go here.
                lost = true;
                shares.end_hold(g, Word::new(stamp, QUEUED, me.raw()), m, me, &free);
            }
            if i == 0 {
                crate::platform::fault::point("groups-publish-committed");
            }
            if let Ok((_, waits)) = &rings {
                topic_wake(waits, waits.not_empty);
            }
        }
        if lost {
            shares.free_if_last(m, me, &free);
        }
        region.push_refused(&free, chunk.class, chunk.index);
        if lost || keep.count_ones() as usize != to.len() {
            region.freed().notify_all();
        }
        self.entry().published.fetch_add(1, Ordering::Relaxed);
        Ok(true)
    }

    /// Marks `chunk` QUEUED for `partition` and claims a cell of its ring,
    /// waiting up to `timeout` for room; on failure the chunk is LOANED
    /// again (the caller frees it).
    #[allow(clippy::type_complexity)]
    fn queue_and_claim(
        &self,
        chunk: Chunk,
        len: usize,
        partition: u32,
        timeout: Option<Duration>,
    ) -> Result<(Ring<'_>, Waits<'_>, u64, usize, Descriptor)> {
        let ring = self.ring(partition)?;
        let waits = self.waits(partition)?;
        // QUEUED before the cell is claimed: a producer that dies from here
        // until its commit leaves a QUEUED chunk no descriptor names, which
        // recovery reclaims. The chunk keeps its producer as holder until a
        // consumer takes it.
        let route = ((self.core.index as u32 + 1) << 16) | partition;
        let desc = self.region().enqueue(chunk.index, route, len as u32, LOANED)?;
        crate::platform::fault::point("publish-queued");
        // The common case, the cell at the tail free, claimed at once (as
        // an inline copy's); the general claim (waits, repairs, overrun)
        // for anything else.
        let claimed = match ring.claim_write_now(self.region().segment().token()) {
            Some((pos, idx)) => Ok((pos, idx, 0)),
            None => self.claim_publish(0, partition, &ring, &waits, timeout),
        };
        match claimed {
            Ok((pos, idx, _)) => Ok((ring, waits, pos, idx, desc)),
            Err(e) => {
                self.region().unqueue(chunk.index);
                Err(match e {
                    Error::Timeout { .. } => Error::timeout("room in the topic's partition", timeout),
                    e => e,
                })
            }
        }
    }

    /// Waits up to `timeout` for a message in `partition` and returns a
    /// read-only view of it in shared memory. Dropping the [`Message`]
    /// releases its chunk. A corrupt descriptor is dropped from the ring and
    /// reported as [`Error::Corrupt`]; the next call goes on. A timeout of
    /// `Some(Duration::ZERO)` looks once ([`Error::Timeout`] if empty; see
    /// [`try_receive`](Self::try_receive) for `Ok(None)` instead).
    pub fn receive(&self, partition: u32, timeout: Option<Duration>) -> Result<Message> {
        let (chunk, len) = self.take_message(partition, timeout)?;
        Ok(Message { topic: self.share(), chunk, len, partition, member: None })
    }

    /// Lends the next message of `partition` to `f` in place (zero-copy),
    /// then releases it: [`receive`](Self::receive) without a [`Message`]
    /// value to carry (see [`send_with`](Self::send_with), its twin, for an
    /// example). Waits and fails as `receive` does; returns what `f`
    /// returned. The message is released also if `f` panics.
    #[inline]
    pub fn receive_with<R>(&self, partition: u32, timeout: Option<Duration>, f: impl FnOnce(&[u8]) -> R) -> Result<R> {
        if !self.core.default_group {
            return Err(self.no_default_group());
        }
        self.receive_with_in(0, partition, timeout, f)
    }

    /// [`receive_with`](Self::receive_with) without waiting: `Ok(None)` if
    /// the partition is empty now (and `f` is not called).
    #[inline]
    pub fn try_receive_with<R>(&self, partition: u32, f: impl FnOnce(&[u8]) -> R) -> Result<Option<R>> {
        none_if_empty(self.receive_with(partition, Some(Duration::ZERO), f))
    }

    /// [`receive_with`](Self::receive_with) from group slot `slot`'s ring:
    /// a message in an inline slot is lent from the slot itself. Through
    /// [`receive_with_dyn`](Self::receive_with_dyn), so that the receive's
    /// own code is compiled here, once, and not in each caller's crate.
    #[inline]
    fn receive_with_in<R>(
        &self,
        slot: usize,
        partition: u32,
        timeout: Option<Duration>,
        f: impl FnOnce(&[u8]) -> R,
    ) -> Result<R> {
        let mut f = CallOnce::new(f);
        self.receive_with_dyn(slot, partition, timeout, &mut |bytes: &[u8]| f.call(bytes))?;
        // `receive_with_dyn` returns `Ok` only after calling `f`.
        Ok(f.result("a receive that succeeded lent its message"))
    }

    /// [`receive_with_in`](Self::receive_with_in)'s work, compiled here
    /// once, out of line, with `f` called through a reference (see
    /// [`send_with_dyn`](Self::send_with_dyn), its twin, for why).
    #[inline(never)]
    fn receive_with_dyn(
        &self,
        slot: usize,
        partition: u32,
        timeout: Option<Duration>,
        f: &mut dyn FnMut(&[u8]),
    ) -> Result<()> {
        // SAFETY: `bytes` is used by `f` only, before the cell is handed
        // back (below, or by the guard if `f` unwinds).
        if let Some((ring, at, me, bytes)) = unsafe { self.claim_inline_now(slot, partition, usize::MAX) } {
            let reading = FinishOnUnwind { topic: self, ring: &ring, at, me };
            f(bytes);
            std::mem::forget(reading);
            crate::platform::fault::point("inline-read");
            return self.finish_inline_read(&ring, at, me);
        }
        let (chunk, len) = self.take_message_in(slot, partition, timeout, None)?;
        let _release = ReleaseOnDrop { topic: self, chunk };
        // SAFETY: the chunk is HELD by this process (taken by
        // `take_message`, its descriptor validated: `len` within its class);
        // its producer no longer writes it, and it is released only once `f`
        // returned or unwound, when the slice is gone.
        f(unsafe { self.chunk_ref(chunk, len) });
        Ok(())
    }

    /// [`receive`](Self::receive) that another thread can end early with
    /// [`ReceiveStop::stop`]: it then returns [`Error::Interrupted`] (a
    /// message already in the partition is still received). For callers
    /// that cancel waits from another thread (a Go `context.Context`, an
    /// abandoned request), without polling. Not from a signal handler:
    /// `stop` takes a lock.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tachyon::bus::{ReceiveStop, Region, RegionConfig, TopicConfig};
    /// # let name = format!("doc-receive-until-{}", std::process::id());
    /// let region = Region::create(&name, RegionConfig::default().size(8 << 20).ring_arena(1 << 20))?;
    /// let topic = region.create_topic("t", TopicConfig::default())?;
    /// let stop = ReceiveStop::new();
    /// std::thread::scope(|s| {
    ///     s.spawn(|| {
    ///         std::thread::sleep(Duration::from_millis(20));
    ///         stop.stop(); // wakes the receive below at once
    ///     });
    ///     let r = topic.receive_until(0, None, &stop); // would wait for ever
    ///     assert!(matches!(r, Err(tachyon::Error::Interrupted)));
    /// });
    /// # drop(topic); drop(region); Region::remove(&name)?;
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn receive_until(
        &self,
        partition: u32,
        timeout: Option<Duration>,
        stop: &ReceiveStop,
    ) -> Result<Message> {
        let (chunk, len) = self.take_message_until(partition, timeout, Some(stop))?;
        Ok(Message { topic: self.share(), chunk, len, partition, member: None })
    }

    /// Takes the next message of `partition` HELD by this process.
    pub(super) fn take_message(&self, partition: u32, timeout: Option<Duration>) -> Result<(Chunk, usize)> {
        self.take_message_until(partition, timeout, None)
    }

    /// [`take_message`](Self::take_message), ended early with
    /// [`Error::Interrupted`] once `stop` is stopped (a message there now
    /// is still taken).
    pub(super) fn take_message_until(
        &self,
        partition: u32,
        timeout: Option<Duration>,
        stop: Option<&ReceiveStop>,
    ) -> Result<(Chunk, usize)> {
        if !self.core.default_group {
            return Err(self.no_default_group());
        }
        self.take_message_in(0, partition, timeout, stop)
    }

    /// [`take_message_until`](Self::take_message_until) from group slot
    /// `slot`'s ring of `partition` (slot 0: the default group's).
    pub(super) fn take_message_in(
        &self,
        slot: usize,
        partition: u32,
        timeout: Option<Duration>,
        stop: Option<&ReceiveStop>,
    ) -> Result<(Chunk, usize)> {
        let (chunk, len) = self.take_in(slot, partition, timeout, stop, true, Sink::Chunk)?;
        // (A `Sink::Chunk` receive always hands a chunk out.)
        let chunk = chunk.ok_or_else(|| Error::corrupt(Corruption::BadField { field: "inline receive", value: 0 }))?;
        Ok((chunk, len))
    }

    /// A writer's claim of a cell in group slot `slot`'s ring of
    /// `partition`, waiting up to `timeout`. On an overrunning topic a full
    /// ring first gives up its oldest message: received and released on
    /// the group's behalf exactly as a member would (so a publisher killed
    /// in the middle leaves what a killed member leaves, repaired the same
    /// way), counted as missed; until a cell is free, or until the oldest
    /// is not there to take (a member or another publisher has it, or its
    /// writer has not committed it): then it waits as any publisher.
    fn claim_publish(
        &self,
        slot: usize,
        partition: u32,
        ring: &Ring<'_>,
        waits: &Waits<'_>,
        timeout: Option<Duration>,
    ) -> Result<(u64, usize, u64)> {
        if self.core.overrun {
            for _ in 0..=self.core.capacity {
                match self.claim_in(slot, ring, waits, true, Some(Duration::ZERO)) {
                    Err(Error::Timeout { .. }) => {}
                    claimed => return claimed,
                }
                match self.take_in(slot, partition, Some(Duration::ZERO), None, false, Sink::Drop) {
                    Ok((chunk, _)) => {
                        crate::platform::fault::point("overrun-taken");
                        if let Some(chunk) = chunk {
                            self.release_chunk(chunk);
                        }
                        self.count_missed(slot);
                    }
                    // A corrupt descriptor dropped (and counted): room too.
                    Err(Error::Corrupt { .. }) => {}
                    Err(Error::Timeout { .. }) => break,
                    Err(e) => return Err(e),
                }
            }
            // Nothing left to drop, yet no room: the oldest cell is held
            // this very moment (a consumer between its claim and handing
            // the cell back, or a publisher a lap behind between claim and
            // commit). It comes free within instructions, so the publisher
            // waits for it, up to `OVERRUN_GRACE` whatever its timeout: an
            // overrunning publisher does not fail for room because a
            // consumer was reading (a dead holder is repaired meanwhile).
            return self.claim_in(slot, ring, waits, true, timeout.map(|t| t.max(OVERRUN_GRACE)));
        }
        self.claim_in(slot, ring, waits, true, timeout)
    }

    /// Counts a message group slot `slot` missed (overrun): in the topic's
    /// total and in the slot's member record (regions with group slots).
    pub(super) fn count_missed(&self, slot: usize) {
        self.entry().missed.fetch_add(1, Ordering::Relaxed);
        if let Some(r) = self.slot_record(slot) {
            r.missed.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The member record of group slot `slot` (`None` in a region without
    /// group slots).
    fn slot_record(&self, slot: usize) -> Option<&super::membership::MemberRecord> {
        self.core.controls?;
        self.region().member_record(self.core.index, slot).ok()
    }

    /// Messages of group slot `slot` dropped unread by overrunning
    /// publishers (the topic's total in a region without group slots,
    /// where the default group is the only one).
    pub(crate) fn missed_in(&self, slot: usize) -> u64 {
        match self.slot_record(slot) {
            Some(r) => r.missed.load(Ordering::Relaxed),
            None => self.entry().missed.load(Ordering::Relaxed),
        }
    }

    /// Messages the default group missed: dropped unread from its full
    /// partitions by publishers of a topic with [`TopicConfig::overrun`]
    /// (0 on other topics). [`TopicInfo::missed`] counts every group's.
    pub fn missed(&self) -> u64 {
        self.missed_in(0)
    }

    /// [`take_message_in`](Self::take_message_in); `received` false for an
    /// overrunning publisher's take (counted as missed, not received). A
    /// message in an inline slot goes where `sink` says, before the cell is
    /// handed back; the chunk returned is then `None` but for
    /// [`Sink::Chunk`].
    fn take_in(
        &self,
        slot: usize,
        partition: u32,
        timeout: Option<Duration>,
        stop: Option<&ReceiveStop>,
        received: bool,
        sink: Sink<'_>,
    ) -> Result<(Option<Chunk>, usize)> {
        if let Some(taken) = self.take_chunk_now(slot, partition, sink.max_len(), received) {
            return taken;
        }
        self.take_after_look(slot, partition, timeout, stop, received, sink)
    }

    /// [`take_in`](Self::take_in) after [`take_chunk_now`](Self::take_chunk_now)
    /// found nothing to take at once: for a caller that made that look
    /// itself (the copy-path receives), so that a miss is not looked at
    /// twice.
    fn take_after_look(
        &self,
        slot: usize,
        partition: u32,
        timeout: Option<Duration>,
        stop: Option<&ReceiveStop>,
        received: bool,
        sink: Sink<'_>,
    ) -> Result<(Option<Chunk>, usize)> {
        // A poll (zero timeout) of an empty ring ends here, as the claim
        // would end it, without the set-up below (a spare chunk taken and
        // given back, the waits, the claim's machinery): a `try_recv_into`
        // of an empty partition took 654 instructions, 557 with the
        // claim's own early end (`Ring::claim_waiting`), 262 with this
        // (callgrind).
        if stop.is_none() && timeout.is_some_and(|t| t.is_zero()) && self.ring_of(slot, partition)?.looks_empty() {
            return Err(Error::timeout(WAIT_MESSAGE, timeout));
        }
        // A chunk for a message in an inline slot is taken before the cell
        // is claimed: nothing can fail between the claim and the copy.
        let mut spare = Spare {
            topic: self,
            chunk: match sink {
                Sink::Chunk if self.core.inline > 0 => Some(self.spare_chunk(timeout)?),
                _ => None,
            },
        };
        // Whatever happens below, a spare not used goes back when `spare`
        // is dropped, once.
        self.take_claimed(slot, partition, timeout, stop, received, sink, &mut spare)
    }

    /// A chunk of the inline slot's size for [`take_in`](Self::take_in),
    /// LOANED to this process; waits up to `timeout` only if none is free.
    fn spare_chunk(&self, timeout: Option<Duration>) -> Result<Chunk> {
        match self.take_chunk(self.core.inline, Some(Duration::ZERO)) {
            Err(Error::PoolExhausted { .. }) if timeout.is_none_or(|t| !t.is_zero()) => {
                self.take_chunk(self.core.inline, timeout)
            }
            got => got,
        }
    }

    /// [`take_in`](Self::take_in) once its spare chunk (if any) is taken:
    /// an inline message taken into it takes it out of `spare`, which gives
    /// back what is left in it when dropped.
    #[allow(clippy::too_many_arguments)]
    fn take_claimed(
        &self,
        slot: usize,
        partition: u32,
        timeout: Option<Duration>,
        stop: Option<&ReceiveStop>,
        received: bool,
        sink: Sink<'_>,
        spare: &mut Spare<'_>,
    ) -> Result<(Option<Chunk>, usize)> {
        let ring = self.ring_of(slot, partition)?;
        let mut waits = self.waits_of(slot, partition)?;
        let _watch = match stop {
            Some(stop) => {
                waits.closed = Some(&stop.stopped);
                Some(stop.watch(self, slot, partition))
            }
            None => None,
        };
        let stopped = |e: Error| match e {
            Error::Closed if stop.is_some() => Error::Interrupted,
            e => e,
        };
        let seg = self.region().segment();
        let me = seg.token();
        // Waiting: in slices, between which messages that dead consumers
        // held are handed back (at-least-once topics). The first slice
        // reads no clock here: a message that comes at once is taken at once.
        let first = timeout.map_or(RECOVERY_INTERVAL, |t| t.min(RECOVERY_INTERVAL));
        let max_len = sink.max_len();
        let (pos, idx, word) = match self.claim_fitting(slot, &ring, &waits, false, max_len, Some(first)) {
            Err(Error::Timeout { .. }) if !first.is_zero() => {
                // The first slice lasted `first` at least.
                let deadline = timeout.and_then(|t| crate::platform::deadline_after(t.saturating_sub(first)));
                loop {
                    self.region().heartbeat();
                    self.region().recover_now_and_then();
                    let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
                    if left.is_some_and(|l| l.is_zero()) {
                        return Err(Error::timeout(WAIT_MESSAGE, timeout));
                    }
                    let slice = left.map_or(RECOVERY_INTERVAL, |l| l.min(RECOVERY_INTERVAL));
                    match self.claim_fitting(slot, &ring, &waits, false, max_len, Some(slice)) {
                        Err(Error::Timeout { .. }) => {}
                        other => break other.map_err(stopped)?,
                    }
                }
            }
            Err(Error::Timeout { .. }) => return Err(Error::timeout(WAIT_MESSAGE, timeout)),
            other => other.map_err(stopped)?,
        };
        crate::platform::fault::point("receive-claimed");
        if Descriptor::is_inline(word) {
            let len = Descriptor::decode(word).len as usize;
            return self.take_inline(slot, partition, (&ring, &waits), (pos, idx, len), received, sink, spare);
        }
        self.take_claimed_chunk(slot, (&ring, &waits), (pos, idx, word), me, received)
    }

    /// The common case of [`take_in`](Self::take_in), without its set-up
    /// (the spare chunk, the stop, the waits): the cell at the head of
    /// group slot `slot`'s ring of `partition` holds a committed
    /// descriptor of a chunk (not an inline message) of at most `max_len`
    /// bytes. It is claimed at once and taken as `take_claimed` takes it
    /// (the same tail, [`take_claimed_chunk`](Self::take_claimed_chunk)).
    /// `None` for anything else, with nothing claimed: the general path
    /// looks again, waits, repairs or reports.
    #[inline(always)]
    fn take_chunk_now(
        &self,
        slot: usize,
        partition: u32,
        max_len: u64,
        received: bool,
    ) -> Option<Result<(Option<Chunk>, usize)>> {
        let p = self.slot_partition(slot, partition).ok()?;
        // SAFETY: as in `ring_of` and `waits_of`: formed at attach from
        // checked references into the mapping `self` keeps; atomics only.
        let (ring, not_empty, not_full, room_at) = unsafe {
            let ring = Ring { cursors: p.cursors.as_ref(), cells: p.cells.as_ref() };
            (ring, p.not_empty.as_ref(), p.not_full.as_ref(), p.room_at.as_ref())
        };
        let me = self.region().segment().token();
        let fits = |word: u64| !Descriptor::is_inline(word) && word & Descriptor::LEN_MASK <= max_len;
        let claimed = ring.claim_read_now(me, fits)?;
        crate::platform::fault::point("receive-claimed");
        let waits = self.waits_with(not_empty, not_full, room_at);
        Some(self.take_claimed_chunk(slot, (&ring, &waits), claimed, me, received))
    }

    /// The rest of a receive that claimed cell `idx` (position `pos`) of
    /// group slot `slot`'s ring and found `word`, a chunk's descriptor:
    /// takes the chunk (QUEUED to HELD by `me`, or its group's hold),
    /// hands the cell back, wakes a writer waiting for room, counts.
    #[inline(always)]
    fn take_claimed_chunk(
        &self,
        slot: usize,
        (ring, waits): (&Ring<'_>, &Waits<'_>),
        (pos, idx, word): (u64, usize, u64),
        me: crate::sync::Token,
        received: bool,
    ) -> Result<(Option<Chunk>, usize)> {
        let checked = self.check_descriptor(word, me, slot);
        crate::platform::fault::point("receive-held");
        // On a light topic counted before the hand-back, taken back if it
        // fails: no locked instruction after a light hand-over (docs/bus.md,
        // "Light hand-overs"). Elsewhere after it.
        let light = self.core.light;
        let counted = received && light && checked.is_ok();
        if counted {
            self.entry().received.fetch_add(1, Ordering::Relaxed);
        }
        let released = ring.finish_read_with(pos, idx, me, light);
        topic_wake_writers(ring, waits, pos);
        let (class, index, len, group) = match checked {
            Ok(c) => c,
            Err(e) => {
                self.entry().corrupt.fetch_add(1, Ordering::Relaxed);
                return Err(e);
            }
        };
        let chunk = Chunk { group, ..self.chunk(class, index) };
        if !released {
            if counted {
                self.entry().received.fetch_sub(1, Ordering::Relaxed);
            }
            self.release_chunk(chunk);
            return Err(claim_repaired());
        }
        if received && !light {
            self.entry().received.fetch_add(1, Ordering::Relaxed);
        }
        self.region().beat_sometimes();
        Ok((Some(chunk), len))
    }

    /// The rest of a receive that claimed cell `idx` (position `pos`) of
    /// group slot `slot`'s ring of `partition` and found an inline message
    /// of `len` bytes: copies it where `sink` says (into `spare` for
    /// [`Sink::Chunk`]), then hands the cell back. A length past the slot,
    /// or an inline descriptor on a topic without slots, is damage: the
    /// cell is handed back unread and counted corrupt.
    #[allow(clippy::too_many_arguments)]
    fn take_inline(
        &self,
        slot: usize,
        partition: u32,
        (ring, waits): (&Ring<'_>, &Waits<'_>),
        (pos, idx, len): (u64, usize, usize),
        received: bool,
        sink: Sink<'_>,
        spare: &mut Spare<'_>,
    ) -> Result<(Option<Chunk>, usize)> {
        let me = self.region().segment().token();
        let corrupt = |field, value| Error::corrupt(Corruption::BadField { field, value });
        let mut out = None;
        let bad = if self.core.inline == 0 || len > self.core.inline {
            Some(corrupt("inline descriptor length", len as u64))
        } else {
            // SAFETY: the cell is claimed for reading by this process (its
            // word carries our token), so no writer touches its slot until
            // `finish_read` below; its writer copied the `len <= inline`
            // bytes into the slot before its commit (Release), which our
            // claim read (Acquire). `inline_slot` points inside the mapping
            // `self` keeps, `idx` is below the capacity.
            let bytes = unsafe { std::slice::from_raw_parts(self.inline_slot(slot, partition, idx), len) };
            match sink {
                Sink::Buf(buf) => {
                    buf.clear();
                    copy::extend(buf, bytes);
                    None
                }
                // The claim took only a message that fits (its length is
                // the descriptor's, checked before the claim).
                Sink::Slice(buf) => match buf.get_mut(..len) {
                    Some(dst) => {
                        copy::copy(dst, bytes);
                        None
                    }
                    None => Some(corrupt("inline receive into a shorter buffer", len as u64)),
                },
                Sink::Drop => None,
                // The spare is ours from here: freed below if the receive
                // fails, handed out if it does not.
                Sink::Chunk => match spare.chunk.take() {
                    Some(chunk) => {
                        // SAFETY: `chunk` was loaned to this process by
                        // `spare_chunk` and is not published; its class
                        // holds `inline >= len` bytes.
                        copy::copy(unsafe { self.chunk_mut(chunk, len) }, bytes);
                        out = Some(chunk);
                        None
                    }
                    None => Some(corrupt("inline receive without a chunk", 0)),
                },
            }
        };
        crate::platform::fault::point("inline-read");
        // On a light topic counted before the hand-back, taken back if it
        // fails (as in `take_claimed_chunk`).
        let light = self.core.light;
        let counted = received && light && bad.is_none();
        if counted {
            self.entry().received.fetch_add(1, Ordering::Relaxed);
        }
        let released = ring.finish_read_with(pos, idx, me, light);
        topic_wake_writers(ring, waits, pos);
        let failed = bad.or_else(|| (!released).then(claim_repaired));
        if let Some(e) = failed {
            if counted {
                self.entry().received.fetch_sub(1, Ordering::Relaxed);
            }
            if let Some(chunk) = out {
                self.region().free(chunk.class, chunk.index);
            }
            self.entry().corrupt.fetch_add(1, Ordering::Relaxed);
            return Err(e);
        }
        if received && !light {
            self.entry().received.fetch_add(1, Ordering::Relaxed);
        }
        self.region().beat_sometimes();
        Ok((out, len))
    }

    /// The common case of a copy receive (`recv_into`, `recv_into_slice`)
    /// on a topic with inline slots, without the general path's set-up:
    /// the cell at the head of group slot `slot`'s ring of `partition`
    /// holds a committed inline message of at most `max_len` bytes. It is
    /// claimed ([`claim_inline_now`](Self::claim_inline_now)), its bytes
    /// given to `copy`, the cell handed back and the message counted
    /// ([`finish_inline_read`](Self::finish_inline_read)), exactly as
    /// [`take_inline`](Self::take_inline) does after the general claim.
    /// `None` for anything else (nothing there yet, a chunk, a message too
    /// long, damage, a bad partition), with nothing claimed: the general
    /// path ([`take_in`](Self::take_in)) looks again, waits, repairs or
    /// reports. (`receive_with` lends through the same two steps, with a
    /// guard for a lender that unwinds; `copy` does not unwind, and a guard
    /// here cost the copy about 20 instructions a message.)
    ///
    /// Its tail (release, wake, counts) repeats `take_inline`'s on purpose:
    /// the same fast path routed through `take_in` and `take_inline`
    /// measured slower than no fast path at all at 1 KiB (docs/benchmark-history.md,
    /// "the common path of an inline copy"). A change to one is a change
    /// to both.
    #[inline]
    fn recv_inline_now(
        &self,
        slot: usize,
        partition: u32,
        max_len: usize,
        copy: impl FnOnce(&[u8]),
    ) -> Option<Result<usize>> {
        // SAFETY: `bytes` is used by `copy` only, before the cell is
        // handed back below.
        let (ring, at, me, bytes) = unsafe { self.claim_inline_now(slot, partition, max_len) }?;
        let len = bytes.len();
        copy(bytes);
        crate::platform::fault::point("inline-read");
        Some(self.finish_inline_read(&ring, at, me).map(|()| len))
    }

    /// The claim of [`recv_inline_now`](Self::recv_inline_now): the ring,
    /// `(slot, partition, pos, idx)` of the cell claimed for reading, the
    /// claimant's token and the message's bytes in the cell's slot; `None`,
    /// nothing claimed, unless the cell at the head holds a committed
    /// inline message of at most `max_len` bytes.
    ///
    /// # Safety
    ///
    /// The bytes are the slot's only while the cell is claimed: the caller
    /// uses the slice only until it hands the cell back
    /// ([`finish_inline_read`](Self::finish_inline_read)), after which a
    /// writer may fill the slot again.
    #[inline(always)]
    #[allow(clippy::type_complexity)]
    unsafe fn claim_inline_now(
        &self,
        slot: usize,
        partition: u32,
        max_len: usize,
    ) -> Option<(Ring<'_>, (usize, u32, u64, usize), crate::sync::Token, &[u8])> {
        let inline = self.core.inline;
        if inline == 0 {
            return None;
        }
        let ring = self.ring_of(slot, partition).ok()?;
        let me = self.region().segment().token();
        let most = max_len.min(inline) as u64;
        let fits = |word: u64| Descriptor::is_inline(word) && word & Descriptor::LEN_MASK <= most;
        let (pos, idx, word) = ring.claim_read_now(me, fits)?;
        crate::platform::fault::point("receive-claimed");
        let len = (word & Descriptor::LEN_MASK) as usize;
        // SAFETY: as in `take_inline`: the cell is claimed for reading by
        // this process, so no writer touches its slot until the caller's
        // `finish_inline_read`, after its last use of the slice (this
        // function's contract); its writer
        // copied the `len <= inline` bytes (checked by `fits`) before its
        // commit (Release), which our claim read (Acquire). `inline_slot`
        // points inside the mapping `self` keeps, `idx` is below the
        // capacity.
        let bytes = unsafe { std::slice::from_raw_parts(self.inline_slot(slot, partition, idx), len) };
        Some((ring, (slot, partition, pos, idx), me, bytes))
    }

    /// The tail of [`recv_inline_now`](Self::recv_inline_now) and of a
    /// lend from an inline slot ([`receive_with`](Self::receive_with)): hands back
    /// the cell at `(slot, partition, pos, idx)` that this process claimed
    /// for reading, wakes writers waiting for room and counts the message.
    /// Always inlined: out of line it cost the inline copy path about 50
    /// instructions a message (callgrind).
    #[inline(always)]
    fn finish_inline_read(&self, ring: &Ring<'_>, at: (usize, u32, u64, usize), me: crate::sync::Token) -> Result<()> {
        let (slot, partition, pos, idx) = at;
        // On a light topic counted before the hand-back, taken back if it
        // fails (as in `take_claimed_chunk`).
        let light = self.core.light;
        if light {
            self.entry().received.fetch_add(1, Ordering::Relaxed);
        }
        let released = ring.finish_read_with(pos, idx, me, light);
        if let Ok(waits) = self.waits_of(slot, partition) {
            topic_wake_writers(ring, &waits, pos);
        }
        if !released {
            if light {
                self.entry().received.fetch_sub(1, Ordering::Relaxed);
            }
            self.entry().corrupt.fetch_add(1, Ordering::Relaxed);
            return Err(claim_repaired());
        }
        if !light {
            self.entry().received.fetch_add(1, Ordering::Relaxed);
        }
        self.region().beat_sometimes();
        Ok(())
    }

    /// Releases a received chunk: through its group if it was taken from a
    /// SHARED chunk (the last hold goes to the free list, never the
    /// cache), else as a single-group message.
    #[inline]
    pub(super) fn release_chunk(&self, chunk: Chunk) {
        match chunk.group {
            None => self.region().free(chunk.class, chunk.index),
            Some(g) => self.region().release_shared(chunk.class, chunk.index, usize::from(g)),
        }
    }

    /// Validates a descriptor (read from a cell this process has claimed)
    /// and takes its chunk from QUEUED to HELD by `me` with one CAS. Only
    /// the claimant of the cell naming a publication may take its chunk, so
    /// a descriptor that names the chunk's current publication cannot lose
    /// it between the check and the CAS.
    ///
    /// A descriptor of a SHARED chunk (published to groups) is taken
    /// through group slot `slot`'s word instead (`Shares::take`: QUEUED of
    /// its stamp to HELD by `me`); the chunk's group is returned with it.
    #[allow(clippy::type_complexity)]
    #[inline(always)]
    fn check_descriptor(
        &self,
        word: u64,
        me: crate::sync::Token,
        slot: usize,
    ) -> Result<(usize, u32, usize, Option<u8>)> {
        let (class, desc, meta) = self.region().resolve(word)?;
        crate::sync::prefetch(self.region().chunk_ptr(class, desc.chunk), desc.len as usize, 16, false);
        let bad = |field, value| Error::corrupt(Corruption::BadField { field, value });
        let w = meta.word();
        if groups::is_shared(w) {
            let shares = self.region().shares(desc.chunk)?;
            if !shares.take(slot, desc.version, me) {
                // Stale (another publication's, released, redelivered).
                return Err(bad("group word of the descriptor's chunk", u64::from(w.state())));
            }
            return Ok((class, desc.chunk, desc.len as usize, Some(slot as u8)));
        }
        let me = me.raw();
        if slot != 0 {
            // A group's ring only ever names SHARED chunks.
            return Err(bad("state of the descriptor's chunk", u64::from(w.state())));
        }
        if w.state() != QUEUED || !desc.is_current(meta) || !meta.cas(w, w.with(HELD, me)) {
            // A corrupt, stale or duplicated descriptor: the chunk is not
            // this publication's (it may be on a free list); leave it be.
            return Err(bad("state of the descriptor's chunk", u64::from(w.state())));
        }
        Ok((class, desc.chunk, desc.len as usize, None))
    }

    /// [`receive`](Self::receive) without waiting: `Ok(None)` if the
    /// partition is empty now.
    pub fn try_receive(&self, partition: u32) -> Result<Option<Message>> {
        none_if_empty(self.receive(partition, Some(Duration::ZERO)))
    }

    /// Receives a message into `buf` (replacing its contents) and releases
    /// it at once (the copy path); returns its length.
    pub fn recv_into(&self, partition: u32, buf: &mut Vec<u8>, timeout: Option<Duration>) -> Result<usize> {
        if !self.core.default_group {
            return Err(self.no_default_group());
        }
        self.recv_into_in(0, partition, buf, timeout)
    }

    /// [`recv_into`](Self::recv_into) from group slot `slot`'s ring: a
    /// message in an inline slot is copied straight into `buf`.
    fn recv_into_in(&self, slot: usize, partition: u32, buf: &mut Vec<u8>, timeout: Option<Duration>) -> Result<usize> {
        let take = |bytes: &[u8]| {
            buf.clear();
            copy::extend(buf, bytes);
        };
        if let Some(r) = self.recv_inline_now(slot, partition, usize::MAX, take) {
            return r;
        }
        // The common case, a chunk at the head, taken here; the rest of
        // `take_in` for anything else (it waits, repairs or reports). Each
        // arm has its own `?`: joined into one `Result` first (a shared
        // helper), the fast arm's result went through memory too, 16 – 24
        // instructions a message more (docs/benchmark-history.md, "a
        // copy-path receive without `take_in`'s frame").
        let (chunk, len) = match self.take_chunk_now(slot, partition, u64::MAX, true) {
            Some(taken) => taken?,
            None => self.take_after_look(slot, partition, timeout, None, true, Sink::Buf(buf))?,
        };
        let Some(chunk) = chunk else { return Ok(len) };
        buf.clear();
        // SAFETY: the chunk is HELD by this process (taken by
        // `take_chunk_now` or `take_after_look`, its descriptor validated
        // by `check_descriptor`: `len` within its class) and is only read here
        // before it is freed.
        copy::extend(buf, unsafe { self.chunk_ref(chunk, len) });
        self.release_chunk(chunk);
        Ok(len)
    }

    /// [`recv_into`](Self::recv_into) without waiting: `Ok(None)` if the
    /// partition is empty now.
    pub fn try_recv_into(&self, partition: u32, buf: &mut Vec<u8>) -> Result<Option<usize>> {
        none_if_empty(self.recv_into(partition, buf, Some(Duration::ZERO)))
    }

    /// Receives a message into the start of `buf`, a buffer of fixed size,
    /// and releases it at once (the copy path); returns its length. A
    /// message longer than `buf` is left queued, untouched, and the call
    /// fails with [`Error::BufferTooSmall`], which names its length: call
    /// again with a buffer that large (the C face's `ty_recv`).
    ///
    /// On a topic with [inline slots](TopicConfig::inline_payload) an
    /// inline message goes from its slot straight into `buf`: no chunk.
    ///
    /// ```
    /// # use tachyon::bus::{Key, Region, RegionConfig, TopicConfig};
    /// # use tachyon::Error;
    /// # use std::time::Duration;
    /// # let name = format!("doc-recv-slice-{}", std::process::id());
    /// let region = Region::create(&name, RegionConfig::default())?;
    /// let topic = region.create_topic("ticks", TopicConfig::default().inline_payload(64))?;
    /// topic.send(b"a tick", Key(0), None)?;
    /// topic.send(&[7; 100], Key(0), None)?;
    /// let mut buf = [0u8; 64];
    /// let n = topic.recv_into_slice(0, &mut buf, Some(Duration::from_secs(1)))?;
    /// assert_eq!(&buf[..n], b"a tick");
    /// // Too long for the buffer: it stays queued.
    /// let e = topic.recv_into_slice(0, &mut buf, None).unwrap_err();
    /// assert!(matches!(e, Error::BufferTooSmall { item: 100, buffer: 64 }));
    /// let mut big = [0u8; 128];
    /// assert_eq!(topic.recv_into_slice(0, &mut big, None)?, 100);
    /// # drop(topic); drop(region); Region::remove(&name)?;
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn recv_into_slice(&self, partition: u32, buf: &mut [u8], timeout: Option<Duration>) -> Result<usize> {
        if !self.core.default_group {
            return Err(self.no_default_group());
        }
        self.recv_into_slice_in(0, partition, buf, timeout)
    }

    /// [`recv_into_slice`](Self::recv_into_slice) without waiting:
    /// `Ok(None)` if the partition is empty now.
    pub fn try_recv_into_slice(&self, partition: u32, buf: &mut [u8]) -> Result<Option<usize>> {
        none_if_empty(self.recv_into_slice(partition, buf, Some(Duration::ZERO)))
    }

    /// [`recv_into_slice`](Self::recv_into_slice) from group slot `slot`'s
    /// ring.
    fn recv_into_slice_in(&self, slot: usize, partition: u32, buf: &mut [u8], timeout: Option<Duration>) -> Result<usize> {
        let cap = buf.len();
        // (The claim took only a message of at most `cap` bytes.)
        let take = |bytes: &[u8]| copy::copy(&mut buf[..bytes.len()], bytes);
        if let Some(r) = self.recv_inline_now(slot, partition, cap, take) {
            return r;
        }
        // As in `recv_into_in`: a chunk at the head that fits, taken here.
        let (chunk, len) = match self.take_chunk_now(slot, partition, cap as u64, true) {
            Some(taken) => taken?,
            None => self.take_after_look(slot, partition, timeout, None, true, Sink::Slice(&mut *buf))?,
        };
        let Some(chunk) = chunk else { return Ok(len) };
        // SAFETY: the chunk is HELD by this process (taken by
        // `take_chunk_now` or `take_after_look`, validated, `len` within its
        // class) and is only read here before it is released.
        let bytes = unsafe { self.chunk_ref(chunk, len) };
        // The claim took only a message whose descriptor's length fits.
        let copied = buf.get_mut(..len).map(|dst| copy::copy(dst, bytes)).is_some();
        self.release_chunk(chunk);
        if copied {
            Ok(len)
        } else {
            Err(Error::corrupt(Corruption::BadField { field: "message length past the buffer", value: len as u64 }))
        }
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
        self.claim_in(0, ring, waits, writer, timeout)
    }

    /// [`claim`](Self::claim) on a ring of group slot `slot` (a dead
    /// member's message is adopted through that group's word).
    pub(crate) fn claim_in(
        &self,
        slot: usize,
        ring: &Ring<'_>,
        waits: &Waits<'_>,
        writer: bool,
        timeout: Option<Duration>,
    ) -> Result<(u64, usize, u64)> {
        self.claim_fitting(slot, ring, waits, writer, if writer { 0 } else { u64::MAX }, timeout)
    }

    /// [`claim_in`](Self::claim_in) of a message of at most `max_len`
    /// bytes for a reader (the length its descriptor says): a longer one
    /// is not claimed (it stays queued) and the claim fails with
    /// [`Error::BufferTooSmall`].
    fn claim_fitting(
        &self,
        slot: usize,
        ring: &Ring<'_>,
        waits: &Waits<'_>,
        writer: bool,
        max_len: u64,
        timeout: Option<Duration>,
    ) -> Result<(u64, usize, u64)> {
        let adopt = |word: u64, dead| self.adopt_dead_read(word, dead, slot);
        ring.claim_blocking(self.region(), waits, writer, (max_len, Descriptor::LEN_MASK), u64::MAX, timeout, &adopt)
    }

    /// What becomes of the message of a read claim taken over from `dead`
    /// in group slot `slot`'s ring: a chunk's is made the dead consumer's
    /// (`Region::adopt_dead_read`); one in an inline slot dies with it
    /// (counted lost: inline slots are at-most-once).
    pub(crate) fn adopt_dead_read(&self, word: u64, dead: crate::sync::Token, slot: usize) {
        if Descriptor::is_inline(word) {
            self.entry().lost.fetch_add(1, Ordering::Relaxed);
        } else {
            self.region().adopt_dead_read(word, dead, slot);
        }
    }

    /// Repairs what dead claimants left in the way in `partition` (as a
    /// blocked receive does between its sleeps; see `Ring::recover_with`)
    /// and wakes the partition's sleepers if anything was repaired. For
    /// waits that do not go through `claim` (subscriptions, futures).
    pub(crate) fn repair_partition(&self, partition: u32) {
        self.repair_partition_in(0, partition)
    }

    /// [`repair_partition`](Self::repair_partition) of group slot `slot`'s
    /// ring of `partition`.
    pub(crate) fn repair_partition_in(&self, slot: usize, partition: u32) {
        if let (Ok(ring), Ok(waits)) = (self.ring_of(slot, partition), self.waits_of(slot, partition)) {
            let adopt = |word: u64, dead| self.adopt_dead_read(word, dead, slot);
            if ring.recover_with(self.region(), false, &adopt) {
                waits.not_full.notify_all();
                waits.not_empty.notify_all();
            }
        }
    }

    /// Publishes a raw descriptor, bypassing the pool. For tests of the
    /// library's defences against corrupt rings only (`testing` feature).
    #[cfg(feature = "testing")]
    pub fn publish_raw_descriptor(&self, partition: u32, chunk: u32, len: u32) -> Result<()> {
        let ring = self.ring(partition)?;
        let waits = self.waits(partition)?;
        let seg = self.region().segment();
        let (pos, idx, _) = self.claim(&ring, &waits, true, Some(Duration::from_secs(1)))?;
        ring.commit_write(pos, idx, Descriptor::new(chunk, 0, len).encode(), seg.token());
        topic_wake(&waits, waits.not_empty);
        Ok(())
    }
}

/// A consumer group's member on a topic (see [`Topic::join_group`]): every
/// group joined to a topic receives every message published after it
/// joined; the members of one group compete, each message going to one of
/// them. The payload is not copied however many groups read it.
///
/// **Membership.** A member is a process: it stays one while it has a
/// `Group` handle of the group (clones and other joins in the same process
/// count) or a [`Message`] received through one; the last of them dropped
/// (or [`leave`](Group::leave)) ends the membership. Leaving keeps the
/// group and its position (the messages queued for it stay queued) for
/// [`RegionConfig::group_lease`](super::RegionConfig::group_lease), as a
/// Kafka consumer group's offsets survive its members: a member that joins
/// within the lease goes on where the group was. A group whose members all
/// left or died (a SIGKILLed process is noticed by recovery) for longer
/// than the lease is dropped by recovery ([`Region::recover`](super::Region::recover),
/// which the library runs now and then): the messages it held go back to
/// the pool once no other group holds them, and it no longer holds
/// producers back. A group with a live member is never dropped.
///
/// **Crash safety.** A member killed at any instruction loses at most the
/// message it held, for its own group only (none on an at-least-once
/// topic, where it is delivered again within the group); the other groups
/// get it exactly once; the chunk returns to the pool once every group
/// let it go. See `docs/groups-design.md` and `docs/CRASH-SAFETY.md`.
///
/// ```
/// use std::time::Duration;
/// use tachyon::bus::{Key, Region, RegionConfig, TopicConfig};
/// # let name = format!("doc-group-{}", std::process::id());
/// let cfg = RegionConfig::default().size(8 << 20).ring_arena(1 << 20).max_groups(4);
/// let region = Region::create(&name, cfg)?;
/// let topic = region.create_topic("orders", TopicConfig::default().default_group(false))?;
/// let billing = topic.join_group("billing")?;
/// let audit = topic.join_group("audit")?;
/// topic.send(b"order 1", Key(1), None)?;
/// let p = topic.partition_of(Key(1));
/// assert_eq!(&*billing.receive(p, Some(Duration::from_secs(1)))?, b"order 1");
/// assert_eq!(&*audit.receive(p, Some(Duration::from_secs(1)))?, b"order 1");
/// assert_eq!(billing.members()?.len(), 1); // this process
/// assert!(billing.leave()?); // its last handle: the membership ends
/// # drop(audit); drop(topic); drop(region); Region::remove(&name)?;
/// # Ok::<(), tachyon::Error>(())
/// ```
pub struct Group {
    topic: Topic,
    slot: usize,
    name: String,
    member: Arc<GroupHandle>,
}

/// One [`Group`] handle's share of its process's membership. Each clone of
/// a `Group` has its own (as each clone of a [`Topic`] has its own core),
/// and the messages received through a handle count on it: threads that
/// each hold a clone do not update one count on every message.
struct GroupHandle(Arc<super::membership::Member>);

/// Another handle of the same membership (and a [`Topic`] handle of its
/// own): the messages received through it count on it alone. The
/// membership ends when the last handle, and the last message received
/// through one, is gone (see [`leave`](Group::leave)).
impl Clone for Group {
    fn clone(&self) -> Group {
        Group {
            topic: self.topic.clone(),
            slot: self.slot,
            name: self.name.clone(),
            member: Arc::new(GroupHandle(Arc::clone(&self.member.0))),
        }
    }
}

impl Group {
    /// Waits up to `timeout` for the group's next message in `partition`
    /// (as [`Topic::receive`] does for the default group). Dropping the
    /// [`Message`] releases the group's hold; the chunk goes back to the
    /// pool once every group it was published to has released it.
    pub fn receive(&self, partition: u32, timeout: Option<Duration>) -> Result<Message> {
        let (chunk, len) = self.topic.take_message_in(self.slot, partition, timeout, None)?;
        Ok(Message { topic: self.topic.share(), chunk, len, partition, member: Some(self.member.clone()) })
    }

    /// [`receive`](Self::receive) without waiting: `Ok(None)` if the
    /// group's ring of `partition` is empty now.
    pub fn try_receive(&self, partition: u32) -> Result<Option<Message>> {
        none_if_empty(self.receive(partition, Some(Duration::ZERO)))
    }

    /// [`receive`](Self::receive) that another thread can end early with
    /// [`ReceiveStop::stop`]: it then returns [`Error::Interrupted`] (a
    /// message there already is still received), woken at once.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tachyon::bus::{ReceiveStop, Region, RegionConfig, TopicConfig};
    /// # let name = format!("doc-group-until-{}", std::process::id());
    /// let cfg = RegionConfig::default().size(8 << 20).ring_arena(1 << 20).max_groups(2);
    /// let region = Region::create(&name, cfg)?;
    /// let topic = region.create_topic("t", TopicConfig::default().default_group(false))?;
    /// let audit = topic.join_group("audit")?;
    /// let stop = ReceiveStop::new();
    /// std::thread::scope(|s| {
    ///     s.spawn(|| {
    ///         std::thread::sleep(Duration::from_millis(20));
    ///         stop.stop();
    ///     });
    ///     let r = audit.receive_until(0, Some(Duration::from_secs(10)), &stop);
    ///     assert!(matches!(r, Err(tachyon::Error::Interrupted)));
    /// });
    /// # drop((audit, topic, region)); Region::remove(&name)?;
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn receive_until(&self, partition: u32, timeout: Option<Duration>, stop: &ReceiveStop) -> Result<Message> {
        let (chunk, len) = self.topic.take_message_in(self.slot, partition, timeout, Some(stop))?;
        Ok(Message { topic: self.topic.share(), chunk, len, partition, member: Some(self.member.clone()) })
    }

    /// Lends the group's next message of `partition` to `f` in place, then
    /// releases the group's hold: [`receive`](Self::receive) without a
    /// [`Message`] value (as [`Topic::receive_with`]). Returns what `f`
    /// returned; the hold is released also if `f` panics.
    ///
    /// ```
    /// # use tachyon::bus::{Key, Region, RegionConfig, TopicConfig};
    /// # let name = format!("doc-group-receive-with-{}", std::process::id());
    /// let region = Region::create(&name, RegionConfig::default().max_groups(4))?;
    /// let topic = region.create_topic("orders", TopicConfig::default())?;
    /// let audit = topic.join_group("audit")?;
    /// topic.send(b"buy 100", Key(0), None)?;
    /// let p = topic.partition_of(Key(0));
    /// assert_eq!(audit.receive_with(p, None, |order| order.starts_with(b"buy"))?, true);
    /// assert_eq!(audit.try_receive_with(p, |order| order.len())?, None);
    /// # drop(audit); drop(topic); drop(region); Region::remove(&name)?;
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    #[inline]
    pub fn receive_with<R>(&self, partition: u32, timeout: Option<Duration>, f: impl FnOnce(&[u8]) -> R) -> Result<R> {
        self.topic.receive_with_in(self.slot, partition, timeout, f)
    }

    /// [`receive_with`](Self::receive_with) without waiting: `Ok(None)` if
    /// the group has no message in `partition` now (and `f` is not called).
    #[inline]
    pub fn try_receive_with<R>(&self, partition: u32, f: impl FnOnce(&[u8]) -> R) -> Result<Option<R>> {
        none_if_empty(self.receive_with(partition, Some(Duration::ZERO), f))
    }

    /// Receives the group's next message of `partition` into `buf`
    /// (replacing its contents) and releases it at once; returns its
    /// length.
    pub fn recv_into(&self, partition: u32, buf: &mut Vec<u8>, timeout: Option<Duration>) -> Result<usize> {
        self.topic.recv_into_in(self.slot, partition, buf, timeout)
    }

    /// [`recv_into`](Self::recv_into) without waiting: `Ok(None)` if the
    /// group has no message in `partition` now.
    ///
    /// ```
    /// # use tachyon::bus::{Key, Region, RegionConfig, TopicConfig};
    /// # let name = format!("doc-group-try-recv-{}", std::process::id());
    /// let region = Region::create(&name, RegionConfig::default().max_groups(4))?;
    /// let topic = region.create_topic("orders", TopicConfig::default())?;
    /// let audit = topic.join_group("audit")?;
    /// let mut buf = Vec::new();
    /// assert_eq!(audit.try_recv_into(0, &mut buf)?, None);
    /// topic.send(b"buy 100", Key(0), None)?;
    /// assert_eq!(audit.try_recv_into(topic.partition_of(Key(0)), &mut buf)?, Some(7));
    /// let mut fixed = [0u8; 4];
    /// topic.send(b"sell 5", Key(0), None)?;
    /// assert!(audit.try_recv_into_slice(0, &mut fixed).is_err(), "6 bytes: too long, left queued");
    /// assert_eq!(audit.try_recv_into(0, &mut buf)?, Some(6));
    /// # drop(audit); drop(topic); drop(region); tachyon::bus::Region::remove(&name)?;
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn try_recv_into(&self, partition: u32, buf: &mut Vec<u8>) -> Result<Option<usize>> {
        none_if_empty(self.recv_into(partition, buf, Some(Duration::ZERO)))
    }

    /// Receives the group's next message of `partition` into the start of
    /// `buf` and releases it at once; returns its length. A message longer
    /// than `buf` stays queued: [`Error::BufferTooSmall`] (as
    /// [`Topic::recv_into_slice`]).
    ///
    /// ```
    /// # use tachyon::bus::{Key, Region, RegionConfig, TopicConfig};
    /// # let name = format!("doc-group-slice-{}", std::process::id());
    /// let region = Region::create(&name, RegionConfig::default().max_groups(4))?;
    /// let topic = region.create_topic("orders", TopicConfig::default())?;
    /// let audit = topic.join_group("audit")?;
    /// topic.send(b"buy 100", Key(1), None)?;
    /// let mut buf = [0u8; 32];
    /// let n = audit.recv_into_slice(topic.partition_of(Key(1)), &mut buf, None)?;
    /// assert_eq!(&buf[..n], b"buy 100");
    /// # drop(audit); drop(topic); drop(region); tachyon::bus::Region::remove(&name)?;
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn recv_into_slice(&self, partition: u32, buf: &mut [u8], timeout: Option<Duration>) -> Result<usize> {
        self.topic.recv_into_slice_in(self.slot, partition, buf, timeout)
    }

    /// [`recv_into_slice`](Self::recv_into_slice) without waiting:
    /// `Ok(None)` if the group has no message in `partition` now.
    pub fn try_recv_into_slice(&self, partition: u32, buf: &mut [u8]) -> Result<Option<usize>> {
        none_if_empty(self.recv_into_slice(partition, buf, Some(Duration::ZERO)))
    }

    /// The group's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The group's slot in the topic (1 to `max_groups - 1`).
    pub fn slot(&self) -> usize {
        self.slot
    }

    /// The topic.
    pub fn topic(&self) -> &Topic {
        &self.topic
    }

    /// Messages waiting for the group in `partition` now (a snapshot).
    pub fn depth(&self, partition: u32) -> Result<usize> {
        Ok(self.topic.ring_of(self.slot, partition)?.len() as usize)
    }

    /// Messages of this group dropped unread from its full partitions by
    /// publishers of a topic with
    /// [`TopicConfig::overrun`](super::TopicConfig::overrun) since the
    /// group was created (0 on other topics). The other groups' counts are
    /// their own: a slow group misses messages, a fast one does not.
    pub fn missed(&self) -> u64 {
        self.topic.missed_in(self.slot)
    }

    /// The group's generation in its slot (a group dropped and created
    /// again in the same slot has the next one).
    pub fn generation(&self) -> u32 {
        self.member.0.generation()
    }

    /// The tokens of the group's member processes, as its record holds
    /// them now (dead ones until recovery forgets them); empty once the
    /// group was dropped.
    pub fn members(&self) -> Result<Vec<u32>> {
        let rec = self.topic.region().member_record(self.topic.index(), self.slot)?;
        let live = self.topic.controls().get(self.slot).map(Control::load) == Some((self.generation(), groups::ACTIVE));
        Ok(if live && rec.is_of(self.generation()) { rec.members() } else { Vec::new() })
    }

    /// Drops this handle, returning whether that ended this process's
    /// membership (`false` while other handles of the group, or messages
    /// received through one, are alive in this process: the last of them
    /// ends it). Ending it releases any hold the process still has in the
    /// group and takes its token out of the group's record; if no live
    /// member is left, the group's lease starts (see [`Group`]). Dropping
    /// the handle does the same, but cannot report an error (the region's
    /// control mutex not had within 5 s: the process then stays a member
    /// until it exits).
    ///
    /// ```
    /// # use tachyon::bus::{Region, RegionConfig, TopicConfig};
    /// # let name = format!("doc-group-leave-{}", std::process::id());
    /// # let region = Region::create(&name, RegionConfig::default().size(8 << 20).ring_arena(1 << 20).max_groups(2))?;
    /// # let topic = region.create_topic("t", TopicConfig::default())?;
    /// let a = topic.join_group("g")?;
    /// let b = a.clone();
    /// assert!(!a.leave()?); // `b` still keeps the membership
    /// assert!(b.leave()?);
    /// # drop(topic); drop(region); Region::remove(&name)?;
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn leave(self) -> Result<bool> {
        // Not while a message received through this handle lives; then
        // not while another handle (or its messages) shares the membership.
        match Arc::try_unwrap(self.member).map(|handle| Arc::try_unwrap(handle.0)) {
            Ok(Ok(member)) => member.leave(),
            _ => Ok(false),
        }
    }
}

impl std::fmt::Debug for Group {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Group").field("topic", &self.topic.core.name).field("name", &self.name).finish()
    }
}

impl Topic {
    /// Joins the consumer group `name` of this topic, creating it if no
    /// group of that name is joined: from now on every message published
    /// to the topic is delivered to the group too (once, to one of its
    /// members). Group names are 1 to 64 bytes without NUL
    /// ([`Error::InvalidName`]); a topic has `max_groups - 1` named groups
    /// at most ([`RegionConfig::max_groups`](super::RegionConfig::max_groups);
    /// [`Error::NoSpace`] when they are all used, [`Error::InvalidArgument`]
    /// in a region without named group slots).
    ///
    /// A process joins a group once however many handles it takes
    /// (another join returns a handle of the same membership); a group has
    /// [`MAX_MEMBERS`](super::MAX_MEMBERS) member processes at most
    /// ([`Error::NoSpace`]; dead members' places are reused). Membership,
    /// leaving and the group lease: see [`Group`].
    pub fn join_group(&self, name: &str) -> Result<Group> {
        self.join_group_from(name, JoinFrom::Now)
    }

    /// [`join_group`](Self::join_group), saying where a group this join
    /// creates starts: with the next message published
    /// ([`JoinFrom::Now`], as `join_group`), or with the oldest message
    /// still queued for any group of the topic ([`JoinFrom::Oldest`]: that
    /// backlog is copied into the new group, ahead of the live stream,
    /// once; see [`JoinFrom`]). Joining a group that exists already
    /// continues from its position, whatever `from` says.
    ///
    /// ```
    /// use tachyon::bus::{JoinFrom, Key, Region, RegionConfig, TopicConfig};
    /// # let name = format!("doc-join-from-{}", std::process::id());
    /// let region = Region::create(&name, RegionConfig::default().size(8 << 20).ring_arena(1 << 20).max_groups(4))?;
    /// let topic = region.create_topic("jobs", TopicConfig::default())?;
    /// for i in 0u32..3 {
    ///     topic.send(&i.to_le_bytes(), Key(7), None)?;
    /// }
    /// let replay = topic.join_group_from("replay", JoinFrom::Oldest)?;
    /// let p = topic.partition_of(Key(7));
    /// for i in 0u32..3 {
    ///     assert_eq!(&*replay.receive(p, None)?, i.to_le_bytes());
    /// }
    /// # drop(replay); drop(topic); drop(region);
    /// # Region::remove(&name)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn join_group_from(&self, name: &str, from: JoinFrom) -> Result<Group> {
        if name.is_empty() || name.len() > MAX_NAME || name.contains('\0') {
            return Err(Error::InvalidName {
                name: name.to_owned(),
                reason: "a group name is 1 to 64 bytes without NUL",
            });
        }
        if self.controls().len() < 2 {
            return Err(Error::invalid(format!(
                "region {:?} has no named group slots: create it with RegionConfig::max_groups of at least 2",
                self.region().name()
            )));
        }
        let (slot, member) = super::membership::join(self, name, from)?;
        Ok(Group { topic: self.clone(), slot, name: name.to_owned(), member: Arc::new(GroupHandle(member)) })
    }
}

/// `Ok(None)` for the timeout of a one-look receive.
pub(super) fn none_if_empty<T>(r: Result<T>) -> Result<Option<T>> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(Error::Timeout { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// [`Error::Full`] for the timeout of a one-look publish.
pub(super) fn full_if_timeout(e: Error) -> Error {
    match e {
        Error::Timeout { .. } => Error::Full { what: "the key's partition of the topic" },
        e => e,
    }
}

/// Chunks start 64-byte aligned: a type that needs more cannot be viewed
/// in place.
fn check_alignment<T>() -> Result<()> {
    if std::mem::align_of::<T>() > CHUNK_ALIGN {
        return Err(Error::invalid(format!(
            "{} needs {}-byte alignment; pool chunks are {CHUNK_ALIGN}-byte aligned",
            std::any::type_name::<T>(),
            std::mem::align_of::<T>()
        )));
    }
    Ok(())
}

/// The alignment of every pool chunk's first byte.
pub const CHUNK_ALIGN: usize = 64;

impl std::fmt::Debug for Topic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Topic")
            .field("name", &self.core.name)
            .field("partitions", &self.core.partitions)
            .field("capacity", &self.core.capacity)
            .field("wait", &self.core.policy)
            .finish()
    }
}

/// A hand-over or commit that found its claim repaired by another process
/// (which judged this one dead, or its claim's word damaged): nothing was
/// published or handed back by this call.
fn claim_repaired() -> Error {
    Error::corrupt(Corruption::BadField { field: "ring claim (repaired by another process)", value: 0 })
}

/// Wakes the sleepers of `cell`, one of a topic's wait cells. A topic's
/// wait policy is recorded in the region and every handle waits with it,
/// so on a `Spin` topic nobody ever sleeps on these cells and the wake-up
/// (a fence and a load) is skipped. On a topic with light hand-overs the
/// fence is the light half of an asymmetric one: its sleepers run the
/// other (`Waits::light`).
pub(crate) fn topic_wake(waits: &Waits<'_>, cell: &crate::sync::WaitCell) {
    if waits.policy != WaitPolicy::Spin {
        cell.notify_all_with(waits.light);
    }
}

/// [`topic_wake`] of the producers of `ring` after this process handed
/// back the item at position `freed`: only once the readers have freed
/// the gap the producers sleep for (`Ring::wake_writers`).
#[inline]
fn topic_wake_writers(ring: &Ring<'_>, waits: &Waits<'_>, freed: u64) {
    if waits.policy != WaitPolicy::Spin {
        ring.wake_writers(waits, freed);
    }
}

/// A caller's `FnOnce` closure, called at most once through the `FnMut`
/// that [`Topic::send_with`] and [`Topic::receive_with`] hand to their
/// non-generic halves, and what it returned.
struct CallOnce<F, R> {
    f: Option<F>,
    out: Option<R>,
}

impl<F, R> CallOnce<F, R> {
    #[inline]
    fn new(f: F) -> Self {
        CallOnce { f: Some(f), out: None }
    }

    /// Calls the closure with `arg` the first time; does nothing after.
    #[inline]
    fn call<A>(&mut self, arg: A)
    where
        F: FnOnce(A) -> R,
    {
        if let Some(f) = self.f.take() {
            self.out = Some(f(arg));
        }
    }

    /// What the closure returned; `called` says why it must have been
    /// called (an invariant of the caller's, not an input).
    #[inline]
    fn result(self, called: &str) -> R {
        self.out.expect(called)
    }
}

/// Gives the chunk taken for [`Topic::send_with`] back to the pool if its
/// `fill` unwinds (forgotten once `fill` returned).
struct FreeOnUnwind<'a> {
    topic: &'a Topic,
    chunk: Chunk,
}

impl Drop for FreeOnUnwind<'_> {
    fn drop(&mut self) {
        self.topic.region().free(self.chunk.class, self.chunk.index);
    }
}

/// Gives up the cell claimed for an inline message if its `fill` unwinds
/// (a tombstone that readers skip; forgotten once `fill` returned).
struct AbandonOnUnwind<'a, 'r> {
    ring: &'a Ring<'r>,
    waits: &'a Waits<'r>,
    pos: u64,
    idx: usize,
    me: crate::sync::Token,
    /// The topic's count of published messages if it counted this one at
    /// its claim (a light topic).
    counted: Option<&'a AtomicU64>,
}

impl Drop for AbandonOnUnwind<'_, '_> {
    fn drop(&mut self) {
        if let Some(published) = self.counted {
            published.fetch_sub(1, Ordering::Relaxed);
        }
        self.ring.abandon_write(self.pos, self.idx, self.me);
        topic_wake(self.waits, self.waits.not_empty);
    }
}

/// Hands back the cell of an inline message lent by
/// [`Topic::receive_with`] if its `f` unwinds (the message counts as
/// received, as a dropped [`Message`] would; forgotten once `f` returned).
struct FinishOnUnwind<'a, 'r> {
    topic: &'a Topic,
    ring: &'a Ring<'r>,
    /// Group slot, partition, position and cell index.
    at: (usize, u32, u64, usize),
    me: crate::sync::Token,
}

impl Drop for FinishOnUnwind<'_, '_> {
    fn drop(&mut self) {
        // A claim repaired meanwhile is counted corrupt there; the panic
        // going on is the caller's news.
        let _ = self.topic.finish_inline_read(self.ring, self.at, self.me);
    }
}

/// Releases the message lent by [`Topic::receive_with`] once its `f`
/// returned or unwound.
struct ReleaseOnDrop<'a> {
    topic: &'a Topic,
    chunk: Chunk,
}

impl Drop for ReleaseOnDrop<'_> {
    #[inline]
    fn drop(&mut self) {
        self.topic.release_chunk(self.chunk);
    }
}

/// A chunk of the pool lent for writing (see [`Topic::loan`]).
///
/// It dereferences to `&mut [u8]` of the size asked for, or, once written
/// through [`std::io::Write`], to the bytes written so far. [`publish`]
/// sends exactly what it dereferences to; dropping it unpublished returns
/// the chunk. Its first byte is 64-byte aligned ([`CHUNK_ALIGN`]).
///
/// [`publish`]: Loan::publish
pub struct Loan {
    topic: Topic,
    chunk: Chunk,
    size: usize,
    /// Bytes written through `io::Write`, once it was used.
    written: Option<usize>,
    live: bool,
}

impl Loan {
    /// Publishes the loan's bytes ([`len`](Self::len) of them) with `key`:
    /// one descriptor goes into the key's partition, waiting up to
    /// `timeout` if it is full. If it fails, the chunk goes back to the pool
    /// and the message is dropped.
    pub fn publish(mut self, key: Key, timeout: Option<Duration>) -> Result<()> {
        self.live = false;
        let len = self.len();
        self.topic.publish_chunk(self.chunk, len, key, timeout)
    }

    /// [`publish`](Self::publish) without waiting: [`Error::Full`] if the
    /// key's partition is full (the chunk goes back to the pool).
    pub fn try_publish(self, key: Key) -> Result<()> {
        self.publish(key, Some(Duration::ZERO)).map_err(full_if_timeout)
    }

    /// Bytes that [`publish`](Self::publish) sends: the size asked for, or
    /// what was written through `io::Write`, or what
    /// [`truncate`](Self::truncate) left.
    #[allow(clippy::len_without_is_empty)] // `is_empty` comes from the slice
    pub fn len(&self) -> usize {
        self.written.unwrap_or(self.size)
    }

    /// The size asked for: the most the loan can hold.
    pub fn capacity(&self) -> usize {
        self.size
    }

    /// Shortens the message to `len` bytes (no effect if it is shorter).
    pub fn truncate(&mut self, len: usize) {
        self.written = Some(len.min(self.len()));
    }

    /// The topic the loan will be published on.
    pub fn topic(&self) -> &Topic {
        &self.topic
    }

    /// One try to publish (for `publish_async`): `None` if the key's
    /// partition is full (the loan stays live, its chunk LOANED, to try
    /// again), else the result (the loan is spent either way).
    pub(super) fn publish_now(&mut self, key: Key) -> Option<Result<()>> {
        if !self.live {
            return Some(Err(Error::invalid("this loan was already published")));
        }
        let len = self.len();
        match self.topic.publish_chunk_or_keep(self.chunk, len, key, Some(Duration::ZERO), true) {
            Err(Error::Timeout { .. }) => None,
            r => {
                self.live = false;
                Some(r)
            }
        }
    }
}

/// Appends to the message: the first write starts it at byte 0, and
/// [`Loan::publish`] then sends what was written. A write past the loan's
/// capacity writes what fits (`write_all` then fails with `WriteZero`).
///
/// ```
/// use std::io::Write;
/// use tachyon::bus::{Key, Region, RegionConfig, TopicConfig};
/// # let name = format!("doc-loan-write-{}", std::process::id());
/// let region = Region::create(&name, RegionConfig::default().size(8 << 20).ring_arena(1 << 20))?;
/// let topic = region.create_topic("t", TopicConfig::default())?;
/// let mut loan = topic.loan(4, None)?;
/// loan.write_all(b"abc")?;
/// assert_eq!(loan.len(), 3);
/// assert!(loan.write_all(b"de").is_err()); // only one more byte fits
/// # drop(loan); drop(topic); drop(region); Region::remove(&name)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
impl std::io::Write for Loan {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let at = self.written.unwrap_or(0);
        let n = buf.len().min(self.size - at);
        // SAFETY: the chunk is LOANED by this loan alone; `at + n <= size`,
        // which fits the chunk's class.
        let bytes = unsafe { self.topic.chunk_mut(self.chunk, self.size) };
        copy::copy(&mut bytes[at..at + n], &buf[..n]);
        self.written = Some(at + n);
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl std::fmt::Debug for Loan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loan").field("len", &self.len()).field("capacity", &self.size).finish()
    }
}

impl Deref for Loan {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: the chunk was popped from the free list for this loan and
        // is LOANED by it alone until published or dropped; `len() <= size`,
        // at most its class's chunk size.
        unsafe { self.topic.chunk_ref(self.chunk, self.len()) }
    }
}

impl DerefMut for Loan {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`; `&mut self` makes the view unique here.
        unsafe { self.topic.chunk_mut(self.chunk, self.len()) }
    }
}

impl Drop for Loan {
    fn drop(&mut self) {
        if self.live {
            self.topic.region().free(self.chunk.class, self.chunk.index);
        }
    }
}

// SAFETY: a loan's chunk is LOANED by this process to this value alone
// (nobody else reads or writes its bytes until it is published or
// dropped), and `topic` keeps the mapping `chunk.data` points into alive;
// moving it to another thread moves that exclusive access with it.
unsafe impl Send for Loan {}
// SAFETY: `&Loan` gives only `&[u8]` of the chunk (writing needs `&mut`).
unsafe impl Sync for Loan {}

/// A loan holding one `T`, built in place (see [`Topic::loan_value`]).
/// Dereferences to `&mut T`.
pub struct ValueLoan<T> {
    loan: Loan,
    _type: PhantomData<T>,
}

impl<T: bytemuck::Pod> ValueLoan<T> {
    /// Publishes the value with `key` (see [`Loan::publish`]).
    pub fn publish(self, key: Key, timeout: Option<Duration>) -> Result<()> {
        self.loan.publish(key, timeout)
    }

    /// [`publish`](Self::publish) without waiting: [`Error::Full`] if the
    /// key's partition is full.
    pub fn try_publish(self, key: Key) -> Result<()> {
        self.loan.try_publish(key)
    }
}

impl<T: bytemuck::Pod> Deref for ValueLoan<T> {
    type Target = T;
    fn deref(&self) -> &T {
        // Size and alignment were checked by `loan_value` (chunks are
        // 64-byte aligned, `align_of::<T>() <= 64`).
        bytemuck::from_bytes(&self.loan)
    }
}

impl<T: bytemuck::Pod> DerefMut for ValueLoan<T> {
    fn deref_mut(&mut self) -> &mut T {
        bytemuck::from_bytes_mut(&mut self.loan)
    }
}

impl<T: bytemuck::Pod + std::fmt::Debug> std::fmt::Debug for ValueLoan<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("ValueLoan").field(&**self).finish()
    }
}

/// A received message: a read-only view into shared memory. Dropping it
/// (or [`release`](Message::release)) returns its chunk to the pool. Owned
/// (`'static + Send + Sync`): it may outlive the `Topic` value it came from
/// and move to another thread.
pub struct Message {
    topic: Topic,
    chunk: Chunk,
    len: usize,
    partition: u32,
    /// For a message received through a consumer group: the membership it
    /// keeps (a group is never dropped while a live process reads one of
    /// its messages). Dropped after the release (field order).
    member: Option<Arc<GroupHandle>>,
}

impl Message {
    /// Returns the chunk to the pool now.
    pub fn release(self) {}

    /// The message as one `T`: [`Error::InvalidArgument`] if its length is
    /// not `size_of::<T>()` (chunks are 64-byte aligned, so alignment up
    /// to 64 always holds). Written by [`Topic::send_value`] or
    /// [`Topic::loan_value`].
    pub fn value<T: bytemuck::AnyBitPattern>(&self) -> Result<&T> {
        check_alignment::<T>()?;
        bytemuck::try_from_bytes(self).map_err(|_| {
            Error::invalid(format!(
                "a message of {} bytes is not a {} ({} bytes); check what the producer sends",
                self.len,
                std::any::type_name::<T>(),
                std::mem::size_of::<T>()
            ))
        })
    }

    /// The topic it was received from.
    pub fn topic(&self) -> &Topic {
        &self.topic
    }

    /// The partition it was received from (a [`Subscription`](super::Subscription)
    /// receives from several).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tachyon::bus::{Key, Partitions, Region, RegionConfig, TopicConfig};
    /// # let name = format!("doc-msg-partition-{}", std::process::id());
    /// let region = Region::create(&name, RegionConfig::default().size(8 << 20).ring_arena(1 << 20))?;
    /// let topic = region.create_topic("t", TopicConfig::default().partitions(4))?;
    /// topic.send(b"x", Key(7), None)?;
    /// let all = topic.subscribe(Partitions::All)?;
    /// let msg = all.receive(Some(Duration::from_secs(1)))?;
    /// assert_eq!(msg.partition(), topic.partition_of(Key(7)));
    /// # drop((msg, all, topic, region)); Region::remove(&name)?;
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn partition(&self) -> u32 {
        self.partition
    }

    /// The chunk and length, the chunk still HELD (no `Drop`: its release
    /// is the caller's, as for the raw interface's messages).
    pub(super) fn into_parts(self) -> (Chunk, usize) {
        let this = std::mem::ManuallyDrop::new(self);
        // SAFETY: `this.topic` and `this.member` are read once each and
        // never dropped in place (ManuallyDrop): their references move to
        // the copies, which drop them.
        let (_topic, _member) = unsafe { (std::ptr::read(&this.topic), std::ptr::read(&this.member)) };
        // A group message leaving for the raw interface gives up its share
        // of the membership (nothing tells when its raw release comes):
        // the binding keeps the `Group` while its raw messages are held
        // (the C face's `ty_group_close` releases them first). Kept for
        // ever instead, it would leak the handle and keep this process a
        // member after its group handle is gone.
        (this.chunk, this.len)
    }
}

// SAFETY: a message's chunk is HELD by this process for this value alone
// and nobody writes it until it is released; `topic` keeps the mapping
// `chunk.data` points into alive. Only `&[u8]` is ever handed out.
unsafe impl Send for Message {}
// SAFETY: as for `Send`: shared access is read-only.
unsafe impl Sync for Message {}

impl Deref for Message {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: the descriptor was validated (chunk in range, `len` within
        // its class) and the chunk taken from QUEUED to HELD by this
        // receiver alone; its producer no longer writes it.
        unsafe { self.topic.chunk_ref(self.chunk, self.len) }
    }
}

impl AsRef<[u8]> for Message {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl Drop for Message {
    fn drop(&mut self) {
        self.topic.release_chunk(self.chunk);
    }
}

impl std::fmt::Debug for Message {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Message")
            .field("len", &self.len)
            .field("topic", &self.topic.core.name)
            .field("partition", &self.partition)
            .finish()
    }
}

/// Ends blocked receives ([`Topic::receive_until`]) from another thread,
/// with a wake-up rather than polling. Once stopped it stays stopped: every
/// later receive with it returns [`Error::Interrupted`] unless a message is
/// there at once. Use one per wait (or per task) that may be cancelled.
///
/// See [`Topic::receive_until`] for an example.
#[derive(Debug, Default)]
pub struct ReceiveStop {
    /// Non-zero once stopped (the ring's wait ends on it).
    pub(super) stopped: AtomicU32,
    /// The partitions receives with this stop wait on now (to wake them).
    waiting: std::sync::Mutex<Vec<(Topic, usize, u32)>>,
}

impl ReceiveStop {
    /// A stop not stopped yet.
    ///
    /// ```
    /// let stop = tachyon::bus::ReceiveStop::new();
    /// assert!(!stop.is_stopped());
    /// stop.stop();
    /// assert!(stop.is_stopped());
    /// ```
    pub fn new() -> ReceiveStop {
        ReceiveStop::default()
    }

    /// Stops: receives waiting with this stop return
    /// [`Error::Interrupted`] now, later ones at once. Thread-safe; async-
    /// signal-safe it is not (it takes a lock to find the waiters).
    pub fn stop(&self) {
        // SYNC: SeqCst is more than needed: the `waiting` lock below and `notify_all`'s
        // fence order it against the receivers' loads (`claim_blocking`, `receive_inner`).
        self.stopped.store(1, Ordering::SeqCst);
        let waiting = self.waiting.lock().unwrap_or_else(|p| p.into_inner());
        for (topic, slot, partition) in waiting.iter() {
            // Wakes every sleeper of the partition's ring in that group slot
            // (others look again and sleep on); the stopped flag, set
            // before, is what ends ours.
            if let Ok(waits) = topic.waits_of(*slot, *partition) {
                waits.not_empty.notify_all();
            }
        }
    }

    /// Whether [`stop`](Self::stop) was called.
    pub fn is_stopped(&self) -> bool {
        // SYNC: pairs with the store in `stop`.
        self.stopped.load(Ordering::SeqCst) != 0
    }

    /// Records a receive waiting on `partition` of group slot `slot` of
    /// `topic` until the guard goes.
    pub(super) fn watch(&self, topic: &Topic, slot: usize, partition: u32) -> StopWatch<'_> {
        self.waiting.lock().unwrap_or_else(|p| p.into_inner()).push((topic.share(), slot, partition));
        StopWatch { stop: self, topic: Arc::as_ptr(&topic.core) as usize, slot, partition }
    }
}

/// A receive's entry in [`ReceiveStop::waiting`], removed on drop.
pub(super) struct StopWatch<'a> {
    stop: &'a ReceiveStop,
    topic: usize,
    slot: usize,
    partition: u32,
}

impl Drop for StopWatch<'_> {
    fn drop(&mut self) {
        let mut waiting = self.stop.waiting.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(i) = waiting
            .iter()
            .position(|(t, g, p)| {
                Arc::as_ptr(&t.core) as usize == self.topic && *g == self.slot && *p == self.partition
            })
        {
            waiting.swap_remove(i);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_delivery_word_is_read_by_its_bits() {
        assert_eq!(delivery_of(0), Some(Delivery::AtMostOnce));
        assert_eq!(delivery_of(1), Some(Delivery::AtLeastOnce));
        // The overrun bit (1) and the no-default-group bit (2) do not make
        // the delivery unknown; unknown bits do.
        assert_eq!(delivery_of(0b111), Some(Delivery::AtLeastOnce));
        assert_eq!(delivery_of(0b110), Some(Delivery::AtMostOnce));
        // The light bit (3) neither.
        assert_eq!(delivery_of(LIGHT), Some(Delivery::AtMostOnce));
        assert_eq!(delivery_of(16), None);
        let cfg = TopicConfig { default_group: false, ..TopicConfig::default() };
        let r = record_of("t", &cfg.delivery(Delivery::AtLeastOnce), 64);
        assert_eq!(r.delivery, 0b101);
        assert_eq!(record_of("t", &cfg.light_handovers(true), 64).delivery, 0b1100);
    }

    /// A poll (zero timeout) of an empty partition ends at its first look
    /// (`take_after_look`) with the verdict the claim gives: a timeout
    /// naming the partition, by every receive, on the chunk path and with
    /// inline slots. A writer's claim at the head is not "empty" for the
    /// look: the claim's full attempt sees it (and still times out).
    #[cfg(not(tachyon_loom))]
    #[test]
    fn a_poll_of_an_empty_partition_times_out_at_its_first_look() {
        let zero = Some(Duration::ZERO);
        let polled = |r: Result<usize>| {
            matches!(r, Err(Error::Timeout { what: WAIT_MESSAGE, waited: Some(d) }) if d.is_zero())
        };
        for inline in [0, 64] {
            let name = format!("t-poll-{inline}-{}", std::process::id());
            let _ = Region::remove(&name);
            let region =
                Region::create(&name, super::super::RegionConfig::default().size(8 << 20).ring_arena(1 << 20))
                    .unwrap();
            let topic = region.create_topic("t", TopicConfig::default().capacity(8).inline_payload(inline)).unwrap();
            let free = region.pool_stats().unwrap();
            let mut buf = Vec::new();
            let mut slice = [0u8; 64];
            for _ in 0..2 {
                assert!(topic.ring_of(0, 0).unwrap().looks_empty());
                assert!(polled(topic.recv_into(0, &mut buf, zero)), "recv_into, inline {inline}");
                assert!(polled(topic.receive(0, zero).map(|m| m.len())), "receive, inline {inline}");
                assert!(polled(topic.receive_with(0, zero, |m| m.len())), "receive_with, inline {inline}");
                assert!(polled(topic.recv_into_slice(0, &mut slice, zero)), "recv_into_slice, inline {inline}");
                assert!(matches!(topic.try_recv_into(0, &mut buf), Ok(None)));
                assert!(matches!(topic.try_receive(0), Ok(None)));
                topic.send(b"polled", Key(0), zero).unwrap();
                assert!(!topic.ring_of(0, 0).unwrap().looks_empty());
                assert_eq!(topic.try_recv_into(0, &mut buf).unwrap(), Some(6));
                assert_eq!(buf, b"polled");
            }
            // A writer's claim at the head (a publisher between its claim
            // and its commit): the look leaves it to the claim.
            let ring = topic.ring_of(0, 0).unwrap();
            let me = region.segment().token();
            let (pos, idx) = ring.claim_write_now(me).unwrap();
            assert!(!ring.looks_empty());
            assert!(polled(topic.recv_into(0, &mut buf, zero)));
            ring.abandon_write(pos, idx, me);
            assert!(matches!(topic.try_recv_into(0, &mut buf), Ok(None)), "the tombstone stepped over");
            assert!(ring.looks_empty());
            assert_eq!(region.pool_stats().unwrap(), free, "no chunk kept or lost by the polls");
            drop(topic);
            drop(region);
            Region::remove(&name).unwrap();
        }
    }

    /// A poll of an empty partition of a topic with inline slots, through
    /// `receive` (which needs a chunk for an inline message), says "empty"
    /// even when the pool has no chunk to spare: it looks before it takes
    /// one. (It took the chunk first, and failed with `PoolExhausted`.)
    #[cfg(not(tachyon_loom))]
    #[test]
    fn a_poll_of_an_empty_partition_needs_no_chunk() {
        let name = format!("t-poll-exhausted-{}", std::process::id());
        let _ = Region::remove(&name);
        let config = super::super::RegionConfig::default()
            .size(4 << 20)
            .ring_arena(1 << 16)
            .class_weights([1, 0, 0, 0, 0, 0, 0, 0]);
        let region = Region::create(&name, config).unwrap();
        let topic = region.create_topic("t", TopicConfig::default().capacity(8).inline_payload(64)).unwrap();
        let mut held = Vec::new();
        while let Ok(got) = region.alloc(64, Some(Duration::ZERO)) {
            held.push(got);
        }
        assert!(!held.is_empty());
        assert!(matches!(topic.try_receive(0), Ok(None)), "empty, whatever the pool has");
        assert!(matches!(topic.receive(0, Some(Duration::ZERO)), Err(Error::Timeout { what: WAIT_MESSAGE, .. })));
        // A message there does need the chunk: the pool's answer then.
        topic.send(b"inline", Key(0), Some(Duration::ZERO)).unwrap();
        assert!(matches!(topic.try_receive(0), Err(Error::PoolExhausted { .. })));
        for (c, chunk) in held {
            region.free(c, chunk);
        }
        assert_eq!(&*topic.try_receive(0).unwrap().expect("the message"), b"inline");
        drop(topic);
        drop(region);
        Region::remove(&name).unwrap();
    }

    /// Every way of sleeping on a light topic runs the heavy half of the
    /// asymmetric fence (its notifiers skip theirs), and none on a plain
    /// topic does: a ring's blocking claim (a receive, a send into a full
    /// partition), a subscription's wait, an async task's (a wait set's:
    /// `waitset.rs`).
    #[cfg(not(tachyon_loom))]
    #[test]
    fn a_light_topics_sleepers_run_the_heavy_barrier() {
        use crate::platform::membarrier::heavy_calls;
        use crate::sync::WaitPolicy;
        let short = Some(Duration::from_millis(2));
        for light in [false, true] {
            let name = format!("t-light-sleepers-{light}-{}", std::process::id());
            let _ = Region::remove(&name);
            let region =
                Region::create(&name, super::super::RegionConfig::default().size(8 << 20).ring_arena(1 << 20))
                    .unwrap();
            let cfg = TopicConfig::default().capacity(2).wait(WaitPolicy::Futex).inline_payload(64);
            let topic = region.create_topic("t", cfg.light_handovers(light)).unwrap();
            assert_eq!(topic.info().light_handovers, light);
            let slept = |what: &str, f: &mut dyn FnMut() -> Result<()>| {
                let before = heavy_calls();
                assert!(matches!(f(), Err(Error::Timeout { .. })), "{what}");
                assert_eq!(heavy_calls() > before, light, "{what}, light {light}");
            };
            let mut buf = Vec::new();
            slept("receive", &mut || topic.recv_into(0, &mut Vec::new(), short).map(drop));
            let sub = topic.subscribe(super::super::Partitions::All).unwrap();
            slept("subscription", &mut || sub.recv_into(&mut Vec::new(), short).map(drop));
            let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
            slept("async receive", &mut || {
                rt.block_on(async {
                    match tokio::time::timeout(Duration::from_millis(5), topic.receive_async(0)).await {
                        Ok(got) => got.map(drop),
                        Err(_) => Err(Error::timeout("a message", short)),
                    }
                })
            });
            topic.send(b"one", Key(0), None).unwrap();
            topic.send(b"two", Key(0), None).unwrap();
            slept("send into a full partition", &mut || topic.send(b"three", Key(0), short));
            topic.recv_into(0, &mut buf, None).unwrap();
            assert_eq!(buf, b"one");
            drop((sub, topic, region));
            Region::remove(&name).unwrap();
        }
    }

    /// Each clone of a handle is a handle of its own: the loans,
    /// messages, futures and waits made through it count on it alone, so
    /// two threads that each hold a clone never update one count. Values
    /// made per operation share their handle's count (no allocation), and a
    /// clone outlives the handle it was made from.
    #[cfg(not(tachyon_loom))]
    #[test]
    fn a_clone_counts_its_own_loans_and_messages() {
        let name = format!("t-topic-clone-{}", std::process::id());
        let _ = Region::remove(&name);
        let cfg = crate::bus::RegionConfig::default().size(8 << 20).ring_arena(1 << 20);
        let region = Region::create(&name, cfg).unwrap();
        let producer = region.create_topic("t", TopicConfig::default()).unwrap();
        let consumer = producer.clone();
        assert!(!Arc::ptr_eq(&producer.core, &consumer.core), "a clone has a core of its own");
        assert!(Arc::ptr_eq(&producer.core.parts, &consumer.core.parts), "the partition table is shared");
        let count = |t: &Topic| Arc::strong_count(&t.core);
        assert_eq!((count(&producer), count(&consumer)), (1, 1));

        let loan = producer.loan(3, None).unwrap();
        assert_eq!((count(&producer), count(&consumer)), (2, 1), "a loan counts on its own handle");
        assert!(Arc::ptr_eq(&loan.topic().core, &producer.core));
        let mut loan = loan;
        loan.copy_from_slice(b"abc");
        loan.publish(Key(0), None).unwrap();
        assert_eq!(count(&producer), 1);

        let msg = consumer.receive(0, None).unwrap();
        assert_eq!(&*msg, b"abc");
        assert_eq!((count(&producer), count(&consumer)), (1, 2), "a message counts on the handle it came from");
        drop(msg);
        assert_eq!(count(&consumer), 1);

        let pending = consumer.receive_async(0);
        assert_eq!(count(&consumer), 2, "a future counts on its handle");
        drop(pending);

        // The clone outlives its original, and the region.
        drop(producer);
        drop(region);
        consumer.send(b"later", Key(0), None).unwrap();
        assert_eq!(&*consumer.receive(0, None).unwrap(), b"later");
        assert_eq!(consumer.name(), "t");
        drop(consumer);
        Region::remove(&name).unwrap();
    }

    /// The same for a `Group`: each clone is a handle of its own on the
    /// one membership, the messages received through it count on it, and
    /// the membership ends with the last handle and the last message.
    #[cfg(not(tachyon_loom))]
    #[test]
    fn a_group_clone_counts_its_own_messages_and_keeps_the_membership() {
        let name = format!("t-topic-group-clone-{}", std::process::id());
        let _ = Region::remove(&name);
        let cfg = crate::bus::RegionConfig::default().size(8 << 20).ring_arena(1 << 20).max_groups(2);
        let region = Region::create(&name, cfg).unwrap();
        let topic = region.create_topic("t", TopicConfig::default()).unwrap();
        let a = topic.join_group("g").unwrap();
        let b = a.clone();
        assert!(!Arc::ptr_eq(&a.member, &b.member) && Arc::ptr_eq(&a.member.0, &b.member.0));
        assert!(!Arc::ptr_eq(&a.topic.core, &b.topic.core));
        topic.send(b"m", Key(0), None).unwrap();
        let msg = b.receive(0, None).unwrap();
        assert_eq!(&*msg, b"m");
        assert_eq!((Arc::strong_count(&a.member), Arc::strong_count(&b.member)), (1, 2));
        assert_eq!(Arc::strong_count(&a.member.0), 2, "two handles, one membership");
        drop(b); // its message keeps its share
        assert!(!a.clone().leave().unwrap(), "another handle is alive");
        assert_eq!(Arc::strong_count(&a.member.0), 2);
        drop(msg);
        assert_eq!(Arc::strong_count(&a.member.0), 1);
        assert_eq!(a.members().unwrap().len(), 1);
        assert!(a.leave().unwrap(), "the last handle ends the membership");
        drop((topic, region));
        Region::remove(&name).unwrap();
    }

    #[test]
    fn keys_spread_over_partitions() {
        let mut seen = [0u32; 8];
        for k in 0..8000u64 {
            seen[(mix64(k) & 7) as usize] += 1;
        }
        assert!(seen.iter().all(|&n| n > 800), "{seen:?}");
    }
}
