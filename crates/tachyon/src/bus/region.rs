//! `Region`: one persistent segment holding a control plane, a topic
//! directory, per-process heartbeats, the descriptor rings of its topics
//! and the payload pool.
//!
//! Layout of the data area (offsets in bytes):
//!
//! ```text
//!      0  version, max topics, ring arena offset and size, arena bytes used,
//!         chunk metadata offset, total chunks, lease (ns)      (8 x u64)
//!     64  first chunk of each class                            (8 x u64)
//!    128  chunks in each class                                 (8 x u64)
//!    192  control mutex (creating topics)
//!    200  recorded configuration: size, ring arena, class weights
//!    256  free list of each class                              (8 x 16 B)
//!    384  "a chunk was freed" wait cell
//!    448  data offset of each class                            (8 x u64)
//!    512  heartbeat of each attach slot (ns since the epoch)   (128 x u64)
//!   1536  token of each attach slot's process (pool journal)   (128 x u32)
//!   2048  topic directory                                      (max topics x 128 B)
//!         ring arena (partitions: cursors, wait cells, cells)
//!         chunk metadata: state word, link, route, length,
//!         publication count                                    (24 B per chunk)
//!         chunk data, class by class, 64-byte aligned
//! ```
//!
//! The creator writes all of it before the region gets its name
//! (`Segment::create_with`); an opener validates the recorded configuration
//! as a caller's would be, recomputes the layout from it and requires every
//! stored offset to match, so no offset or count from shared memory is used
//! unchecked.

use super::directory::{TopicEntry, ENTRY_BYTES};
use super::partition;
use super::pool::{ChunkCache, ChunkMeta, FreeList, Pool, FREE, MAX_CHUNKS};
use super::recovered::Recovered;
use crate::error::{Corruption, Error, Result};
use crate::platform::atomic::{AtomicU32, AtomicU64, Ordering};
use crate::segment::seal::seal;
use crate::segment::{Kind, Segment, ShmSafe};
use crate::sync::{Liveness, Mutex, Token, WaitCell, MAX_SLOTS};
use std::mem::{offset_of, size_of};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// The payload size classes: 64 B, 256 B, 1 KiB, 4 KiB, 16 KiB, 64 KiB,
/// 256 KiB and 1 MiB. A loan takes a chunk of the smallest class that fits
/// and that has a free chunk.
pub const CLASS_SIZES: [usize; 8] = [64, 256, 1 << 10, 4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20];
/// The largest message: the largest class.
pub const MAX_MESSAGE: usize = CLASS_SIZES[7];
/// What to do about a message larger than the largest chunk.
pub(crate) const TOO_LARGE: &str =
    "the largest pool chunk is 1 MiB: split the message, or send a reference to a SharedBuffer";

const LAYOUT_VERSION: u64 = 3;
/// How often a loan waiting for the pool looks for chunks held by dead
/// processes.
pub(crate) const RECOVERY_INTERVAL: Duration = Duration::from_millis(50);
/// The region's header, at the start of its data area (the table at the
/// top of this file). Code reaches its words through the `OFF_*` offsets
/// below, which are taken from this struct, and `Segment::get` (bounds
/// checked, atomics only).
#[repr(C)]
struct Header {
    version: AtomicU64,
    max_topics: AtomicU64,
    arena: AtomicU64,
    arena_size: AtomicU64,
    arena_used: AtomicU64,
    metas: AtomicU64,
    total_chunks: AtomicU64,
    lease: AtomicU64,
    class_first: [AtomicU64; 8],
    class_count: [AtomicU64; 8],
    control: Mutex,
    cfg_size: AtomicU64,
    cfg_ring_arena: AtomicU64,
    /// The class weights, two `u32` per word.
    cfg_weights: [AtomicU64; 4],
    /// The seal over the configuration words (`segment::seal`).
    cfg_seal: AtomicU64,
    free_lists: [FreeList; 8],
    freed: WaitCell,
    /// The rest of `freed`'s cache line.
    _pad: [u64; 7],
    class_data: [AtomicU64; 8],
    heartbeats: [AtomicU64; MAX_SLOTS],
    journal: [AtomicU32; MAX_SLOTS],
}

pub(crate) const OFF_VERSION: usize = offset_of!(Header, version);
pub(crate) const OFF_MAX_TOPICS: usize = offset_of!(Header, max_topics);
pub(crate) const OFF_ARENA: usize = offset_of!(Header, arena);
const OFF_ARENA_SIZE: usize = offset_of!(Header, arena_size);
pub(crate) const OFF_ARENA_USED: usize = offset_of!(Header, arena_used);
pub(crate) const OFF_METAS: usize = offset_of!(Header, metas);
pub(crate) const OFF_TOTAL_CHUNKS: usize = offset_of!(Header, total_chunks);
pub(crate) const OFF_LEASE: usize = offset_of!(Header, lease);
pub(crate) const OFF_CLASS_FIRST: usize = offset_of!(Header, class_first);
pub(crate) const OFF_CLASS_COUNT: usize = offset_of!(Header, class_count);
pub(crate) const OFF_CONTROL: usize = offset_of!(Header, control);
pub(crate) const OFF_CFG_SIZE: usize = offset_of!(Header, cfg_size);
const OFF_CFG_RING_ARENA: usize = offset_of!(Header, cfg_ring_arena);
const OFF_CFG_WEIGHTS: usize = offset_of!(Header, cfg_weights);
pub(crate) const OFF_CFG_SEAL: usize = offset_of!(Header, cfg_seal);
pub(crate) const OFF_FREE_LISTS: usize = offset_of!(Header, free_lists);
const OFF_FREED: usize = offset_of!(Header, freed);
const OFF_CLASS_DATA: usize = offset_of!(Header, class_data);
const OFF_HEARTBEATS: usize = offset_of!(Header, heartbeats);
const OFF_JOURNAL: usize = offset_of!(Header, journal);
/// The topic directory follows the header.
pub(crate) const OFF_TOPICS: usize = size_of::<Header>();

// The layout in shared memory is fixed (layout version 3): the struct must
// not move a word.
const _: () = {
    assert!(OFF_LEASE == 56 && OFF_CLASS_FIRST == 64 && OFF_CLASS_COUNT == 128);
    assert!(OFF_CONTROL == 192 && OFF_CFG_SIZE == 200 && OFF_CFG_WEIGHTS == 216 && OFF_CFG_SEAL == 248);
    assert!(OFF_FREE_LISTS == 256 && size_of::<FreeList>() == 16);
    assert!(OFF_FREED == 384 && OFF_CLASS_DATA == 448 && OFF_HEARTBEATS == 512);
    assert!(OFF_JOURNAL == OFF_HEARTBEATS + 8 * MAX_SLOTS);
    assert!(OFF_TOPICS == OFF_JOURNAL + 4 * MAX_SLOTS && OFF_TOPICS == 2048);
};

/// Bytes of the configuration's second copy, after the topic directory:
/// the eight configuration words (as [`config_words`] orders them) and
/// their seal; then the count of header and directory repairs so far
/// ([`DIRECTORY_REPAIRS`]).
const CFG_COPY: usize = 128;
/// Where the repair count is, from the configuration's second copy.
const DIRECTORY_REPAIRS: usize = 72;
/// The seal's domain: a region's configuration, layout 3.
const CFG_DOMAIN: u64 = 0x0072_6567_696f_6e33;

// SAFETY: `repr(C)`, atomics only; any bits are valid.
unsafe impl ShmSafe for FreeList {}
// SAFETY: `repr(C)`, atomics only; any bits are valid.
unsafe impl ShmSafe for ChunkMeta {}

/// How a region is laid out. `Default` gives a 64 MiB region with 64
/// topics, 4 MiB of descriptor rings and the pool split evenly (in bytes)
/// across the eight classes.
///
/// ```
/// use tachyon::bus::RegionConfig;
/// let cfg = RegionConfig::default().size(16 << 20).class_weights([4, 4, 4, 2, 1, 1, 1, 0]);
/// assert!(cfg.validate().is_ok()); // no 1 MiB chunks: 1 MiB loans fail
/// assert!(RegionConfig::default().class_weights([0; 8]).validate().is_err());
/// assert!(RegionConfig::default().size(1000).validate().is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RegionConfig {
    /// Bytes of the whole region (at least 4 MiB).
    pub size: usize,
    /// Topics the directory can hold (1 to 1024).
    pub max_topics: usize,
    /// Bytes reserved for the descriptor rings of all topics: each
    /// partition takes 192 bytes plus 16 per ring cell.
    pub ring_arena: usize,
    /// The share of the pool's bytes each class gets (`CLASS_SIZES`
    /// order). A weight of 0 leaves that class empty: its loans take a
    /// chunk of the next larger class.
    pub class_weights: [u32; 8],
    /// How long a process may go without a heartbeat before it may be
    /// declared dead, used only where the kernel cannot tell whether a
    /// process is alive (its attach slot's OFD lock cannot be queried, as on
    /// a file system without OFD locks). 10 ms to 1 day; default 10 s. The
    /// library beats for a process whenever it attaches, every 256 loans or
    /// receives, and while it waits; a process that holds chunks and stays
    /// away from the region for longer should call [`Region::heartbeat`].
    pub lease: Duration,
}

impl Default for RegionConfig {
    fn default() -> Self {
        RegionConfig {
            size: 64 << 20,
            max_topics: 64,
            ring_arena: 4 << 20,
            class_weights: [1; 8],
            lease: Duration::from_secs(10),
        }
    }
}

/// Offsets and class geometry computed from a configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Layout {
    arena: usize,
    arena_size: usize,
    metas: usize,
    total_chunks: usize,
    class_first: [usize; 8],
    class_count: [usize; 8],
    class_data: [usize; 8],
}

impl Layout {
    fn class_range(&self, class: usize) -> std::ops::Range<u32> {
        let first = self.class_first[class] as u32;
        first..first + self.class_count[class] as u32
    }
}

/// Free, or kept free by a process for its next loan.
pub(crate) fn is_free(meta: &ChunkMeta) -> bool {
    let w = meta.word();
    w.state() == FREE || (w.state() == super::pool::LOANED && meta.route.load(Ordering::Relaxed) == CACHED)
}

fn damaged_list(class: usize) -> Error {
    Error::corrupt(Corruption::BadField { field: "free list of class", value: class as u64 })
}

/// Where the configuration's second copy is in a region of `max_topics`.
pub(crate) fn cfg_copy_at(max_topics: usize) -> usize {
    OFF_TOPICS + max_topics * ENTRY_BYTES
}

/// The configuration as eight words: size, max_topics, ring arena, lease
/// (ns), the class weights two per word.
fn config_words(config: &RegionConfig) -> [u64; 8] {
    let w = |pair: usize| {
        u64::from(config.class_weights[2 * pair]) | u64::from(config.class_weights[2 * pair + 1]) << 32
    };
    [
        config.size as u64,
        config.max_topics as u64,
        config.ring_arena as u64,
        config.lease.as_nanos() as u64,
        w(0),
        w(1),
        w(2),
        w(3),
    ]
}

/// The configuration eight words stand for (unchecked: `layout` checks).
fn config_of(words: [u64; 8]) -> RegionConfig {
    let mut class_weights = [0u32; 8];
    for (c, w) in class_weights.iter_mut().enumerate() {
        *w = (words[4 + c / 2] >> (32 * (c % 2))) as u32;
    }
    RegionConfig {
        size: usize::try_from(words[0]).unwrap_or(usize::MAX),
        max_topics: usize::try_from(words[1]).unwrap_or(usize::MAX),
        ring_arena: usize::try_from(words[2]).unwrap_or(usize::MAX),
        class_weights,
        lease: Duration::from_nanos(words[3]),
    }
}

/// Every word of a region's header, as `(offset, value)`: what `create`
/// writes and what damage to the header is repaired to.
fn header_words(config: &RegionConfig, layout: &Layout) -> Vec<(usize, u64)> {
    let cfg = config_words(config);
    let sealed = seal(CFG_DOMAIN, cfg);
    let mut words = vec![
        (OFF_VERSION, LAYOUT_VERSION),
        (OFF_CFG_SIZE, cfg[0]),
        (OFF_MAX_TOPICS, cfg[1]),
        (OFF_CFG_RING_ARENA, cfg[2]),
        (OFF_LEASE, cfg[3]),
        (OFF_CFG_WEIGHTS, cfg[4]),
        (OFF_CFG_WEIGHTS + 8, cfg[5]),
        (OFF_CFG_WEIGHTS + 16, cfg[6]),
        (OFF_CFG_WEIGHTS + 24, cfg[7]),
        (OFF_CFG_SEAL, sealed),
        (OFF_ARENA, layout.arena as u64),
        (OFF_ARENA_SIZE, layout.arena_size as u64),
        (OFF_METAS, layout.metas as u64),
        (OFF_TOTAL_CHUNKS, layout.total_chunks as u64),
    ];
    for c in 0..8 {
        words.push((OFF_CLASS_FIRST + 8 * c, layout.class_first[c] as u64));
        words.push((OFF_CLASS_COUNT + 8 * c, layout.class_count[c] as u64));
        words.push((OFF_CLASS_DATA + 8 * c, layout.class_data[c] as u64));
    }
    let copy = cfg_copy_at(config.max_topics);
    words.extend(cfg.iter().enumerate().map(|(i, &w)| (copy + 8 * i, w)));
    words.push((copy + 64, sealed));
    words
}

/// Rewrites the header words that differ from what they should be;
/// returns how many it rewrote. Every writer writes the same values (from
/// a configuration whose seal held, or a live handle's), so writers that
/// race agree.
fn repair_header(seg: &Segment, config: &RegionConfig, layout: &Layout) -> Result<usize> {
    let mut fixed = 0;
    for (off, value) in header_words(config, layout) {
        let word = seg.get::<AtomicU64>(off)?;
        if word.load(Ordering::Relaxed) != value {
            word.store(value, Ordering::Relaxed);
            fixed += 1;
        }
    }
    Ok(fixed)
}

impl RegionConfig {
    /// Sets [`size`](Self::size).
    pub fn size(mut self, bytes: usize) -> Self {
        self.size = bytes;
        self
    }

    /// Sets [`max_topics`](Self::max_topics).
    pub fn max_topics(mut self, n: usize) -> Self {
        self.max_topics = n;
        self
    }

    /// Sets [`ring_arena`](Self::ring_arena).
    pub fn ring_arena(mut self, bytes: usize) -> Self {
        self.ring_arena = bytes;
        self
    }

    /// Sets [`class_weights`](Self::class_weights).
    pub fn class_weights(mut self, weights: [u32; 8]) -> Self {
        self.class_weights = weights;
        self
    }

    /// Sets [`lease`](Self::lease).
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// [`Error::Incompatible`] naming the first field of `want` that this
    /// (an existing object's) configuration does not have.
    pub(crate) fn check_same(&self, want: &RegionConfig, what: &str) -> Result<()> {
        Error::check_same(
            what,
            [
                ("size", self.size.to_string(), want.size.to_string()),
                ("max_topics", self.max_topics.to_string(), want.max_topics.to_string()),
                ("ring_arena", self.ring_arena.to_string(), want.ring_arena.to_string()),
                ("class_weights", format!("{:?}", self.class_weights), format!("{:?}", want.class_weights)),
                ("lease", format!("{:?}", self.lease), format!("{:?}", want.lease)),
            ],
        )
    }

    /// Checks the values and that every weighted class gets a chunk.
    pub fn validate(&self) -> Result<()> {
        self.layout().map(|_| ())
    }

    fn layout(&self) -> Result<Layout> {
        let bad = |what: String| Err(Error::invalid(what));
        if self.size < 4 << 20 || self.size > isize::MAX as usize / 2 {
            return bad(format!("region size must be at least 4 MiB, not {} bytes", self.size));
        }
        if self.lease < Duration::from_millis(10) || self.lease > Duration::from_secs(86_400) {
            return bad(format!("lease must be 10 ms to 1 day, not {:?}", self.lease));
        }
        if !(1..=1024).contains(&self.max_topics) {
            return bad(format!("max_topics must be 1 to 1024, not {}", self.max_topics));
        }
        if self.ring_arena < partition::MIN_ARENA || self.ring_arena > self.size {
            return bad(format!("ring_arena of {} bytes cannot hold one partition", self.ring_arena));
        }
        let weights: u64 = self.class_weights.iter().map(|&w| u64::from(w)).sum();
        if weights == 0 {
            return bad("class_weights are all zero: the pool would be empty".into());
        }
        let arena = (cfg_copy_at(self.max_topics) + CFG_COPY).next_multiple_of(64);
        let arena_size = (self.ring_arena).next_multiple_of(64);
        let fixed = arena + arena_size;
        if fixed + (1 << 20) > self.size {
            return bad(format!(
                "region of {} bytes is too small for {} topics and a {}-byte ring arena",
                self.size, self.max_topics, self.ring_arena
            ));
        }
        // Leave room for alignment: one cache line per class plus metadata.
        let pool = self.size - fixed - 64 * 10;
        // Every weighted class gets one chunk first; the rest of the bytes
        // are shared by weight.
        let per_chunk = |c: usize| CLASS_SIZES[c] + std::mem::size_of::<ChunkMeta>();
        let reserved: usize = (0..8).filter(|&c| self.class_weights[c] > 0).map(per_chunk).sum();
        if reserved > pool {
            return bad(format!(
                "region of {} bytes leaves {pool} bytes for the pool, less than one chunk of each weighted class ({reserved} bytes); raise the size or lower ring_arena",
                self.size
            ));
        }
        let rest = (pool - reserved) as u128;
        let mut class_count = [0usize; 8];
        for (c, count) in class_count.iter_mut().enumerate() {
            let w = u128::from(self.class_weights[c]);
            if w > 0 {
                *count = 1 + (rest * w / u128::from(weights)) as usize / per_chunk(c);
            }
        }
        let total_chunks: usize = class_count.iter().sum();
        if total_chunks > MAX_CHUNKS {
            return bad(format!(
                "a region of {} bytes with these class weights has {total_chunks} chunks, more than the {MAX_CHUNKS} a pool can index; give the small classes less weight",
                self.size
            ));
        }
        let mut class_first = [0usize; 8];
        let mut first = 0;
        for c in 0..8 {
            class_first[c] = first;
            first += class_count[c];
        }
        let metas = fixed;
        let mut at = (metas + total_chunks * std::mem::size_of::<ChunkMeta>()).next_multiple_of(64);
        let mut class_data = [0usize; 8];
        for c in 0..8 {
            class_data[c] = at;
            at = (at + class_count[c] * CLASS_SIZES[c]).next_multiple_of(64);
        }
        if at > self.size {
            return bad(format!("internal: pool layout of {at} bytes exceeds the region's {}", self.size));
        }
        Ok(Layout { arena, arena_size, metas, total_chunks, class_first, class_count, class_data })
    }
}

/// Free chunks of one class, as [`Region::pool_stats`] reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct ClassStats {
    /// Bytes per chunk.
    pub chunk_size: usize,
    /// Chunks in the class.
    pub chunks: usize,
    /// Chunks free now.
    pub free: usize,
}

/// A zero-copy bus region: topics, their partitions and the payload pool,
/// in one persistent segment. Closing a region does not delete it; messages
/// published by a process that exited stay readable. [`Region::remove`]
/// deletes it.
///
/// `Region` is an owned, shared handle: `Clone` (a reference count, the
/// same attachment), `Send` and `Sync`. Its [`Topic`]s, loans and messages
/// keep the attachment alive, so a topic can outlive the `Region` value it
/// came from, live in a struct or move into a thread or task.
///
/// ```
/// use std::time::Duration;
/// use tachyon::bus::{Key, Region, RegionConfig, TopicConfig};
/// # let name = format!("doc-region-{}", std::process::id());
/// let config = RegionConfig::default().size(8 << 20).ring_arena(1 << 20);
/// let region = Region::create(&name, config)?;
/// let topic = region.create_topic("prices", TopicConfig::default())?;
/// let mut loan = topic.loan(5, None)?;
/// loan.copy_from_slice(b"hello");
/// loan.publish(Key(42), None)?;                     // key 42 -> one partition
/// let msg = topic.receive(topic.partition_of(Key(42)), Some(Duration::from_secs(1)))?;
/// assert_eq!(&*msg, b"hello");                      // a view into shared memory
/// # drop(msg); drop(topic); drop(region);
/// # Region::remove(&name)?;
/// # Ok::<(), tachyon::Error>(())
/// ```
#[derive(Clone)]
pub struct Region {
    pub(crate) core: Arc<RegionCore>,
}

/// What every handle of one attachment shares: the mapping, the layout
/// read from it and this process's bookkeeping. Dropped (and the region
/// detached) with the last [`Region`], [`Topic`], loan or message.
pub(crate) struct RegionCore {
    pub(crate) seg: Segment,
    layout: Layout,
    max_topics: usize,
    /// When this handle last ran recovery (ns since it was opened).
    pub(crate) last_recovery: AtomicU64,
    pub(crate) opened: std::time::Instant,
    /// The lease, in ns (see [`RegionConfig::lease`]).
    lease_ns: u64,
    /// Loans and receives through this handle, to beat now and then.
    ops: std::sync::atomic::AtomicU32,
    /// What recovery reclaimed when this handle opened the region.
    on_open: std::sync::OnceLock<Recovered>,
    /// Chunks quarantined by the rebuild of a damaged free list when this
    /// handle attached (reported with `on_open`).
    quarantined_on_attach: std::sync::atomic::AtomicUsize,
    /// Free chunks this handle keeps for its next loans, per class (see
    /// `ChunkCache`).
    cache: [ChunkCache; 8],
    /// The configuration the region was created with.
    config: RegionConfig,
}

/// A chunk kept by a process for its next loan is LOANED by it (so that it
/// is attributed like any loan if the process dies) with this route.
pub(crate) const CACHED: u32 = u32::MAX;
/// Classes with fewer chunks than this are never cached (a process keeps
/// at most two chunks of a class, and a small class cannot spare them).
const CACHE_MIN_CHUNKS: usize = 256;

impl Region {
    /// The region's name, as given to create or open.
    pub fn name(&self) -> &str {
        self.core.seg.name()
    }

    /// The configuration the region was created with.
    pub fn config(&self) -> &RegionConfig {
        &self.core.config
    }

    /// Creates the region's segment and attaches to it; recovery is the
    /// caller's (see `open.rs`).
    pub(crate) fn create_attached(name: &str, config: RegionConfig) -> Result<Region> {
        let layout = config.layout()?;
        let seg = Segment::builder(name).kind(Kind::REGION).size(config.size).persistent(true).create_with(
            |seg| {
                repair_header(seg, &config, &layout)?;
                let pool = Pool {
                    metas: seg.get_slice::<ChunkMeta>(layout.metas, layout.total_chunks)?,
                    journal: seg.get_slice::<AtomicU32>(OFF_JOURNAL, MAX_SLOTS)?,
                };
                let lists = seg.get_slice::<FreeList>(OFF_FREE_LISTS, 8)?;
                for (c, list) in lists.iter().enumerate() {
                    // Push in reverse so that loans start at the lowest chunk.
                    let range = layout.class_range(c);
                    for i in range.clone().rev() {
                        list.push(&pool, &range, i).map_err(|()| Error::invalid("internal: pool layout"))?;
                    }
                }
                Ok(())
            },
        )?;
        Region::new(seg, layout, config)
    }

    /// Opens an existing region's segment, checks its layout and attaches;
    /// also returns how many damaged header words it restored. Recovery is
    /// the caller's (see `open.rs`).
    pub(crate) fn open_attached(name: &str) -> Result<(Region, usize)> {
        let seg = Segment::builder(name).kind(Kind::REGION).open()?;
        let (layout, config) = Region::check(&seg)?;
        // Header words damaged in one copy are restored from the other.
        let header = repair_header(&seg, &config, &layout)?;
        let region = Region::new(seg, layout, config)?;
        region.count_directory_repairs(header);
        Ok((region, header))
    }

    /// The region `name` for looking only: no attach slot, no writes.
    pub(crate) fn observe(name: &str) -> Result<Region> {
        let seg = Segment::builder(name).kind(Kind::REGION).observe()?;
        let (layout, config) = Region::check(&seg)?;
        Ok(Region::with(seg, layout, config))
    }

    /// Records what recovery reclaimed when this handle attached.
    pub(crate) fn set_recovered_on_open(&self, mut found: Recovered) {
        found.quarantined += self.core.quarantined_on_attach.load(Ordering::Relaxed);
        let _ = self.core.on_open.set(found);
    }

    /// Reads a region segment's configuration from whichever of its two
    /// copies is sealed (validated like a caller's) and computes the layout
    /// from it; nothing else in the header is trusted (`open` rewrites the
    /// rest from it: [`repair_header`]).
    fn check(seg: &Segment) -> Result<(Layout, RegionConfig)> {
        let get = |off: usize| -> Result<u64> { Ok(seg.get::<AtomicU64>(off)?.load(Ordering::Relaxed)) };
        let bad = |field, value| Error::corrupt(Corruption::BadField { field, value });
        let read = |at: [usize; 9]| -> Result<Option<[u64; 8]>> {
            let mut words = [0u64; 8];
            for (w, &off) in words.iter_mut().zip(&at) {
                *w = get(off)?;
            }
            Ok((seal(CFG_DOMAIN, words) == get(at[8])?).then_some(words))
        };
        let w = OFF_CFG_WEIGHTS;
        let mut words = read([
            OFF_CFG_SIZE,
            OFF_MAX_TOPICS,
            OFF_CFG_RING_ARENA,
            OFF_LEASE,
            w,
            w + 8,
            w + 16,
            w + 24,
            OFF_CFG_SEAL,
        ])?;
        // The first copy is damaged: the second one is after the directory,
        // whose size (max_topics) is one of the sealed words, so each
        // possible place is tried.
        for n in 1..=1024 {
            if words.is_some() {
                break;
            }
            let at = cfg_copy_at(n);
            if at + 72 > seg.size() {
                break;
            }
            words = read(std::array::from_fn(|i| at + 8 * i))?.filter(|w| w[1] == n as u64);
        }
        let Some(words) = words else {
            let version = get(OFF_VERSION)?;
            if version != LAYOUT_VERSION {
                return Err(bad("region layout version", version));
            }
            return Err(bad("region configuration", seg.size() as u64));
        };
        let config = config_of(words);
        if config.size != seg.size() {
            return Err(bad("region size", config.size as u64));
        }
        let layout = config.layout().map_err(|_| bad("region configuration", config.size as u64))?;
        Ok((layout, config))
    }

    fn with(seg: Segment, layout: Layout, config: RegionConfig) -> Region {
        let core = RegionCore {
            seg,
            layout,
            max_topics: config.max_topics,
            last_recovery: AtomicU64::new(u64::MAX),
            opened: std::time::Instant::now(),
            lease_ns: config.lease.as_nanos() as u64,
            ops: std::sync::atomic::AtomicU32::new(0),
            on_open: std::sync::OnceLock::new(),
            quarantined_on_attach: std::sync::atomic::AtomicUsize::new(0),
            cache: std::array::from_fn(|_| ChunkCache::new()),
            config,
        };
        Region { core: Arc::new(core) }
    }

    fn new(seg: Segment, layout: Layout, config: RegionConfig) -> Result<Region> {
        let region = Region::with(seg, layout, config);
        // A free-list operation the previous, dead, occupant of this attach
        // slot announced is completed in its name before the slot's journal
        // entry names this process.
        if region.help_free_lists().is_err() {
            // A damaged list: rebuilt from the chunks' words, not refused.
            // (If even that fails, the list's next user rebuilds it: the
            // open goes on.)
            let q = region.core.rebuild_free_lists().unwrap_or(0);
            region.core.quarantined_on_attach.store(q, Ordering::Relaxed);
        }
        let journal = region.core.seg.get::<AtomicU32>(OFF_JOURNAL + 4 * region.core.seg.slot())?;
        // SYNC: pairs with the Acquire load of the journal in `FreeList::complete` (pool.rs),
        // which completes this slot's pops in its name.
        journal.store(region.token(), Ordering::Release);
        region.heartbeat();
        Ok(region)
    }

    /// Deletes the region's name. Processes attached keep their memory.
    pub fn remove(name: &str) -> Result<()> {
        Segment::remove(name)
    }

    /// The segment behind the region.
    pub fn segment(&self) -> &Segment {
        &self.core.seg
    }

    /// What recovery reclaimed when this handle created or opened the
    /// region (chunks dead processes held, messages delivered again).
    pub fn recovered_on_open(&self) -> Recovered {
        self.core.on_open.get().copied().unwrap_or_default()
    }

    /// The lease of [`RegionConfig::lease`].
    pub fn lease(&self) -> Duration {
        Duration::from_nanos(self.core.lease_ns)
    }

    /// Records that this process is alive now (its heartbeat in the
    /// region's process table). The library calls it when attaching, every
    /// 256 loans or receives, and while a loan or receive waits; call it
    /// yourself if this process holds chunks and stays away from the region
    /// for longer than the lease.
    pub fn heartbeat(&self) {
        let now = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
        if let Ok(hb) = self.core.seg.get::<AtomicU64>(OFF_HEARTBEATS + 8 * self.core.seg.slot()) {
            hb.store(now, Ordering::Relaxed);
        }
        // Its own attach-slot record, if another process scribbled on it.
        self.core.seg.restore_own_slot();
    }

    /// Beats now and then: every 256 calls (one relaxed add otherwise).
    #[inline]
    pub(crate) fn beat_sometimes(&self) {
        // A load and a store, not a read-modify-write: this is on every
        // loan and receive, and an increment lost to another thread of this
        // process only moves the next beat a little (waits beat anyway).
        let ops = &self.core.ops;
        let n = ops.load(std::sync::atomic::Ordering::Relaxed);
        ops.store(n.wrapping_add(1), std::sync::atomic::Ordering::Relaxed);
        if n % 256 == 0 {
            self.heartbeat();
        }
    }

    /// The last heartbeat of attach slot `slot` (ns since the epoch).
    pub fn heartbeat_of(&self, slot: usize) -> Option<u64> {
        (slot < MAX_SLOTS)
            .then(|| self.core.seg.get::<AtomicU64>(OFF_HEARTBEATS + 8 * slot).ok())
            .flatten()
            .map(|h| h.load(Ordering::Relaxed))
    }

    /// Free chunks per class now (a snapshot: it reads every chunk's
    /// state, so it costs a few microseconds per thousand chunks).
    pub fn pool_stats(&self) -> Result<[ClassStats; 8]> {
        let metas = self.metas()?;
        Ok(std::array::from_fn(|c| ClassStats {
            chunk_size: CLASS_SIZES[c],
            chunks: self.core.layout.class_count[c],
            free: self.core.layout.class_range(c).filter(|&i| is_free(&metas[i as usize])).count(),
        }))
    }

    /// Most topics the directory holds.
    pub(crate) fn max_topics(&self) -> usize {
        self.core.max_topics
    }

    /// Takes `bytes` of the ring arena for a new topic's rings; returns
    /// where they start. The caller holds the control lock.
    pub(crate) fn reserve_ring_arena(&self, bytes: usize) -> Result<usize> {
        let used = self.core.seg.get::<AtomicU64>(OFF_ARENA_USED)?;
        let start = used.load(Ordering::Relaxed) as usize;
        if start.checked_add(bytes).is_none_or(|end| end > self.core.layout.arena_size) {
            return Err(Error::NoSpace {
                what: format!(
                    "the ring arena has {} of {} bytes left, topic needs {bytes}; create the region with a larger ring_arena",
                    self.core.layout.arena_size.saturating_sub(start),
                    self.core.layout.arena_size
                ),
            });
        }
        used.store((start + bytes) as u64, Ordering::Relaxed);
        Ok(self.core.layout.arena + start)
    }

    /// Where the ring arena lies in the data area.
    pub(crate) fn arena(&self) -> std::ops::Range<usize> {
        self.core.layout.arena..self.core.layout.arena + self.core.layout.arena_size
    }

    /// Restores damaged words of the header (from the configuration this
    /// handle holds) and of the topic directory (each entry from its
    /// second copy); returns how many parts it rewrote.
    pub(crate) fn repair_directory(&self) -> usize {
        let header = repair_header(&self.core.seg, &self.core.config, &self.core.layout).unwrap_or(0);
        let fixed = header + self.entries().map_or(0, |e| e.iter().map(TopicEntry::repair).sum());
        self.count_directory_repairs(fixed);
        fixed
    }

    fn repairs_word(&self) -> Result<&AtomicU64> {
        self.core.seg.get(cfg_copy_at(self.core.max_topics) + DIRECTORY_REPAIRS)
    }

    fn count_directory_repairs(&self, n: usize) {
        if n > 0 {
            if let Ok(w) = self.repairs_word() {
                w.fetch_add(n as u64, Ordering::Relaxed);
            }
        }
    }

    /// Header and directory repairs so far (a statistic: damage to it
    /// garbles the number, nothing else).
    pub(crate) fn directory_repairs(&self) -> u64 {
        self.repairs_word().map_or(0, |w| w.load(Ordering::Relaxed))
    }

    pub(crate) fn entries(&self) -> Result<&[TopicEntry]> {
        self.core.seg.get_slice(OFF_TOPICS, self.core.max_topics)
    }

    /// The lock taken to create topics.
    pub(crate) fn control(&self) -> &Mutex {
        self.core.seg.get(OFF_CONTROL).expect("fixed offset inside every region")
    }

    pub(crate) fn free_lists(&self) -> Result<&[FreeList]> {
        self.core.free_lists()
    }

    /// The chunks and the journal the free lists work on.
    pub(crate) fn pool(&self) -> Result<Pool<'_>> {
        self.core.pool()
    }

    /// Completes the free-list operations announced now (see `pool`).
    pub(crate) fn help_free_lists(&self) -> Result<()> {
        let pool = self.pool()?;
        for (c, list) in self.free_lists()?.iter().enumerate() {
            list.help(&pool, &self.core.layout.class_range(c)).map_err(|()| damaged_list(c))?;
        }
        Ok(())
    }

    pub(crate) fn metas(&self) -> Result<&[ChunkMeta]> {
        self.core.seg.get_slice(self.core.layout.metas, self.core.layout.total_chunks)
    }

    pub(crate) fn freed(&self) -> &WaitCell {
        self.core.freed()
    }

    /// The class of global chunk index `chunk`, if it is one.
    pub(crate) fn class_of(&self, chunk: u32) -> Option<usize> {
        let (chunk, l) = (chunk as usize, &self.core.layout);
        // The classes' indices follow one another in class order (an empty
        // class starts where the next one does): the last class starting
        // at or before `chunk` is the only one it can be in.
        let c = (0..8).rev().find(|&c| l.class_first[c] <= chunk)?;
        (chunk - l.class_first[c] < l.class_count[c]).then_some(c)
    }

    pub(crate) fn class_range(&self, class: usize) -> std::ops::Range<u32> {
        self.core.layout.class_range(class)
    }

    /// Pointer to the data of chunk `chunk` of class `class` (checked by
    /// the caller with `class_of`).
    pub(crate) fn chunk_ptr(&self, class: usize, chunk: u32) -> *mut u8 {
        // The callers pass indices the pool handed out or `class_of`
        // checked; a wrong one is a bug here, stopped before any access.
        let i = (chunk as usize)
            .checked_sub(self.core.layout.class_first[class])
            .filter(|&i| i < self.core.layout.class_count[class])
            .expect("chunk index inside its class");
        // SAFETY: `i < class_count[class]` (just checked) and
        // `class_data[class] + class_count[class] * size <= seg.size()`
        // (checked at create/open), so the chunk lies inside the data area.
        unsafe { self.core.seg.as_ptr().add(self.core.layout.class_data[class] + i * CLASS_SIZES[class]) }
    }

    /// How many chunks the pool has (global indices are below this).
    pub(crate) fn chunk_count(&self) -> usize {
        self.core.layout.total_chunks
    }

    /// The class and global index of the chunk whose first byte is at
    /// `ptr`, if `ptr` is the first byte of a chunk of this region.
    pub(crate) fn chunk_at(&self, ptr: *const u8) -> Option<(usize, u32)> {
        let off = (ptr as usize).checked_sub(self.core.seg.as_ptr() as usize)?;
        let l = &self.core.layout;
        // The classes' data areas follow one another in class order; an
        // empty class starts where the next one does, so the last class
        // starting at or before `off` is the one `off` can be in.
        let c = (0..8).rev().find(|&c| l.class_data[c] <= off)?;
        let rel = off - l.class_data[c];
        // CLASS_SIZES are powers of two: a shift and a mask, no division.
        let i = rel >> CLASS_SIZES[c].trailing_zeros();
        (i < l.class_count[c] && rel & (CLASS_SIZES[c] - 1) == 0).then(|| (c, (l.class_first[c] + i) as u32))
    }

    /// Takes a chunk for `size` bytes: the smallest class that fits and has
    /// one free, waiting up to `timeout` for one to be freed.
    pub(crate) fn alloc(&self, size: usize, timeout: Option<Duration>) -> Result<(usize, u32)> {
        // Not `ok_or`: it would build (and drop) the error on every call.
        let Some(want) = CLASS_SIZES.iter().position(|&s| s >= size.max(1)) else {
            return Err(Error::MessageTooLarge { size, max: MAX_MESSAGE, hint: TOO_LARGE });
        };
        if let Some(chunk) = self.core.cache[want].take() {
            // Already LOANED by this process: a loan now.
            self.metas()?[chunk as usize].route.store(0, Ordering::Relaxed);
            return Ok((want, chunk));
        }
        let lists = self.free_lists()?;
        let pool = self.pool()?;
        let me = self.core.seg.token();
        let try_pop = || -> Option<Result<(usize, u32)>> {
            for (c, list) in lists.iter().enumerate().skip(want) {
                let range = self.class_range(c);
                let popped = match list.pop(&pool, &range, me) {
                    // A damaged list: rebuilt from the chunks' words, then
                    // once more (a pop cut short by the damage left its
                    // chunk as it was).
                    Err(()) => match self.core.rebuild_free_lists_of(Some(c)) {
                        Ok(_) => list.pop(&pool, &range, me),
                        Err(e) => return Some(Err(e)),
                    },
                    other => other,
                };
                match popped {
                    Ok(Some(i)) => return Some(Ok((c, i))),
                    Ok(None) => {}
                    Err(()) => return Some(Err(damaged_list(c))),
                }
            }
            None
        };
        if let Some(r) = try_pop() {
            return r;
        }
        let exhausted = Error::PoolExhausted { class: want, chunk_size: CLASS_SIZES[want] };
        if timeout.is_some_and(|t| t.is_zero()) {
            return Err(exhausted);
        }
        self.heartbeat();
        // Wait in slices; between them, reclaim what dead processes held
        // (nobody else would free it for us).
        let deadline = timeout.map(|t| std::time::Instant::now() + t);
        loop {
            if self.recover_now_and_then() > 0 {
                if let Some(r) = try_pop() {
                    return r;
                }
            }
            let left = deadline.map(|d| d.saturating_duration_since(std::time::Instant::now()));
            if left.is_some_and(|l| l.is_zero()) {
                return Err(exhausted);
            }
            let slice = left.map_or(RECOVERY_INTERVAL, |l| l.min(RECOVERY_INTERVAL));
            match self.freed().wait_until(crate::sync::WaitPolicy::Hybrid, Some(slice), try_pop) {
                Ok(r) => return r,
                Err(Error::Timeout { .. }) => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Returns a chunk the caller holds: to this handle's cache if its
    /// class is cached and there is room, else to its class's free list.
    pub(crate) fn free(&self, class: usize, chunk: u32) {
        if self.core.layout.class_count[class] >= CACHE_MIN_CHUNKS && self.keep(class, chunk) {
            return;
        }
        self.free_shared(class, chunk);
    }

    /// Puts a chunk the caller holds into this handle's cache, LOANED by
    /// this process with the route [`CACHED`]; false if the cache is full.
    fn keep(&self, class: usize, chunk: u32) -> bool {
        let Ok(metas) = self.metas() else { return false };
        let meta = &metas[chunk as usize];
        let w = meta.word();
        let me = self.token();
        if w.holder() != me {
            return false;
        }
        // LOANED first, then the CACHED route: a message's chunk keeps its
        // route while HELD, so that a death between the two leaves either a
        // held message (delivered again on an at-least-once topic) or a
        // loan, never a held chunk with a route that names no topic.
        if w.state() != super::pool::LOANED && !meta.cas(w, w.with(super::pool::LOANED, me)) {
            return false;
        }
        meta.route.store(CACHED, Ordering::Relaxed);
        self.core.cache[class].put(chunk)
    }

    /// Returns a chunk the caller holds to its class's free list (what
    /// recovery reclaims goes there, not into the recoverer's cache).
    pub(crate) fn free_shared(&self, class: usize, chunk: u32) {
        self.core.free_shared(class, chunk);
    }

    /// The caller's token in this region.
    pub(crate) fn token(&self) -> u32 {
        self.core.seg.token().raw()
    }
}

/// Gives back the chunks this attachment kept for its next loans, when
/// its last handle goes.
impl Drop for RegionCore {
    fn drop(&mut self) {
        for class in 0..8 {
            while let Some(chunk) = self.cache[class].take() {
                self.free_shared(class, chunk);
            }
        }
    }
}

impl RegionCore {
    /// Rebuilds, under the control mutex, every free list on which an
    /// operation fails (or only class `only`'s, if it fails; see
    /// `FreeList::rebuild`). Returns the chunks quarantined in the classes
    /// rebuilt. A list that works again by the time the mutex is taken
    /// (another process rebuilt it) is left alone.
    pub(crate) fn rebuild_free_lists_of(&self, only: Option<usize>) -> Result<usize> {
        self.rebuild_lists(only, false)
    }

    /// Rebuilds the lists of the classes whose list reads empty while one
    /// of their chunks reads FREE, the head unchanged across the look (a
    /// FREE chunk is always on its list: a push makes it FREE while its
    /// announcement is the head, a pop takes it before the head moves on):
    /// a head damaged into a valid empty one; and of the classes whose list
    /// misses FREE chunks (`FreeList::intact`: a link damaged into another
    /// valid-looking one). Returns chunks quarantined.
    pub(crate) fn rebuild_lost_lists(&self) -> Result<usize> {
        let (lists, metas) = (self.free_lists()?, self.pool()?.metas);
        let mut quarantined = 0;
        for (c, list) in lists.iter().enumerate() {
            let range = self.layout.class_range(c);
            let lost = match list.empty_head() {
                Some(h) => range.clone().any(|i| metas[i as usize].word().state() == FREE) && list.head_is(h),
                // A link damaged into another valid-looking one (or into
                // 0) cuts chunks off a list that still works: found by a
                // walk over a list that stays the same meanwhile.
                None => !list.intact(&self.pool()?, &range),
            };
            if lost {
                quarantined += self.rebuild_lists(Some(c), true)?;
            }
        }
        Ok(quarantined)
    }

    fn rebuild_lists(&self, only: Option<usize>, force: bool) -> Result<usize> {
        let control: &Mutex = self.seg.get(OFF_CONTROL)?;
        let guard = control.lock(&self.seg, Some(Duration::from_secs(5)))?;
        // A holder that died mid-rebuild left its list stopped: rebuilt below.
        let _ = guard.owner_died();
        let pool = self.pool()?;
        let mut quarantined = 0;
        let mut failed = None;
        for (c, list) in self.free_lists()?.iter().enumerate() {
            let range = self.layout.class_range(c);
            // An operation that failed on a list left it failing here too
            // (a top out of range, an announcement that cannot complete).
            if only.is_some_and(|o| o != c) || (!force && list.help(&pool, &range).is_ok()) {
                continue;
            }
            let Ok(found) = list.rebuild(&pool, &range) else {
                failed = Some(c); // the other classes still get theirs
                continue;
            };
            crate::platform::trace::event!(
                warn,
                "tachyon::corrupt",
                class = c,
                free = found.free,
                quarantined = found.quarantined,
                "rebuilt a damaged free list from the chunks' state words"
            );
            quarantined += found.quarantined;
        }
        drop(guard);
        self.freed().notify_all();
        match failed {
            Some(c) => Err(damaged_list(c)),
            None => Ok(quarantined),
        }
    }

    /// [`rebuild_free_lists_of`](Self::rebuild_free_lists_of) every class
    /// whose list fails.
    pub(crate) fn rebuild_free_lists(&self) -> Result<usize> {
        self.rebuild_free_lists_of(None)
    }

    fn free_lists(&self) -> Result<&[FreeList]> {
        self.seg.get_slice(OFF_FREE_LISTS, 8)
    }

    fn pool(&self) -> Result<Pool<'_>> {
        let metas = self.seg.get_slice(self.layout.metas, self.layout.total_chunks)?;
        Ok(Pool { metas, journal: self.seg.get_slice(OFF_JOURNAL, MAX_SLOTS)? })
    }

    fn freed(&self) -> &WaitCell {
        self.seg.get(OFF_FREED).expect("fixed offset inside every region")
    }

    /// Returns a chunk the caller holds to its class's free list.
    fn free_shared(&self, class: usize, chunk: u32) {
        if let (Ok(lists), Ok(pool)) = (self.free_lists(), self.pool()) {
            pool.metas[chunk as usize].route.store(0, Ordering::Relaxed);
            // The chunk stays attributed to the caller until the push's
            // announcement, which turns it FREE in the same instant.
            let range = self.layout.class_range(class);
            let mut pushed = lists[class].push(&pool, &range, chunk).is_ok();
            if !pushed && self.rebuild_free_lists_of(Some(class)).is_ok() {
                // A damaged list, rebuilt (the chunk, still ours, is not on it).
                pushed = lists[class].push(&pool, &range, chunk).is_ok();
            }
            if pushed {
                self.freed().notify_all();
            }
        }
    }
}

/// A holder is dead when the kernel says so (see
/// [`Segment::liveness_of`]); where the kernel cannot tell, when its slot's
/// heartbeat is older than the region's lease.
impl Liveness for Region {
    fn token(&self) -> Token {
        self.core.seg.token()
    }

    fn is_dead(&self, token: Token) -> bool {
        match self.core.seg.liveness_of(token) {
            Some(alive) => !alive,
            None => {
                let now =
                    SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
                let beat = self.heartbeat_of(token.slot()).unwrap_or(0);
                now.saturating_sub(u128::from(beat)) > u128::from(self.core.lease_ns)
            }
        }
    }
}

impl std::fmt::Debug for Region {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Region")
            .field("name", &self.core.seg.name())
            .field("size", &self.core.seg.size())
            .field("max_topics", &self.core.max_topics)
            .finish()
    }
}
