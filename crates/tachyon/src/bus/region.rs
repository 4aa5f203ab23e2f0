//! `Region`: one persistent segment holding a control plane, a topic
//! directory, per-process heartbeats, the descriptor rings of its topics
//! and the payload pool (where each lies: `layout.rs`). This file: the
//! handle, attaching and the header's repair. The handle's other jobs are
//! in their own files: allocation (`alloc.rs`), topics (`catalog.rs`),
//! recovery (`recovery.rs`), creating and opening with recovery
//! (`open.rs`), inspection (`inspect.rs`).
//!
use super::config::{config_of, config_words, RegionConfig};
use super::directory::TopicEntry;
use super::layout::*;
use super::alloc::{cache_capacity, ChunkCache};
use super::pool::{ChunkMeta, FreeList, Pool};
use super::recovered::Recovered;
use crate::error::{Corruption, Error, Result};
use crate::platform::atomic::{AtomicU32, AtomicU64, Ordering};
use crate::segment::seal::seal;
use crate::segment::{Kind, Segment};
use crate::sync::{Liveness, Mutex, Token, MAX_SLOTS};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// How often a loan waiting for the pool looks for chunks held by dead
/// processes.
pub(crate) const RECOVERY_INTERVAL: Duration = Duration::from_millis(50);
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
    if config.max_groups > 0 {
        // The group lease, twice under its own seal (a region without
        // group slots leaves these words 0, as layout 3 did).
        let lease = config.group_lease.as_nanos() as u64;
        let lease_seal = seal(GROUP_LEASE_DOMAIN, [lease]);
        words.push((OFF_GROUP_LEASE, lease));
        words.push((OFF_GROUP_LEASE_SEAL, lease_seal));
        words.push((copy + GROUP_LEASE_COPY, lease));
        words.push((copy + GROUP_LEASE_COPY + 8, lease_seal));
    }
    words
}

/// The group lease recorded in a region with group slots, from whichever
/// copy is sealed; `None` if neither is.
fn group_lease_of(seg: &Segment, max_topics: usize) -> Result<Option<Duration>> {
    let get = |off: usize| -> Result<u64> { Ok(seg.get::<AtomicU64>(off)?.load(Ordering::Relaxed)) };
    let copy = cfg_copy_at(max_topics) + GROUP_LEASE_COPY;
    for (at, seal_at) in [(OFF_GROUP_LEASE, OFF_GROUP_LEASE_SEAL), (copy, copy + 8)] {
        let lease = get(at)?;
        if seal(GROUP_LEASE_DOMAIN, [lease]) == get(seal_at)? {
            return Ok(Some(Duration::from_nanos(lease)));
        }
    }
    Ok(None)
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

/// A zero-copy bus region: topics, their partitions and the payload pool,
/// in one persistent segment. Closing a region does not delete it; messages
/// published by a process that exited stay readable. [`Region::remove`]
/// deletes it.
///
/// `Region` is an owned, shared handle: `Clone` (a reference count, the
/// same attachment), `Send` and `Sync`. Its [`Topic`](crate::bus::Topic)s, loans and messages
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
    pub(super) layout: Layout,
    pub(super) max_topics: usize,
    /// When this handle last ran recovery (ns since it was opened).
    pub(crate) last_recovery: AtomicU64,
    pub(crate) opened: std::time::Instant,
    /// The lease, in ns (see [`RegionConfig::lease`]).
    pub(super) lease_ns: u64,
    /// Loans and receives through this handle, to beat now and then.
    pub(super) ops: std::sync::atomic::AtomicU32,
    /// What recovery reclaimed when this handle opened the region.
    pub(super) on_open: std::sync::OnceLock<Recovered>,
    /// Chunks quarantined by the rebuild of a damaged free list when this
    /// handle attached (reported with `on_open`).
    pub(super) quarantined_on_attach: std::sync::atomic::AtomicUsize,
    /// Free chunks this handle keeps for its next loans, per class (see
    /// `ChunkCache`).
    pub(super) cache: [ChunkCache; 8],
    /// The chunks' metadata, found once at attach (`Region::metas`).
    pub(super) metas: MetasAt,
    /// How many chunks one pop takes from each class (`Pool::batches`),
    /// computed once at attach.
    pub(super) batches: [super::pool::ClassBatch; 8],
    /// The configuration the region was created with.
    pub(super) config: RegionConfig,
}

/// Where a region's chunk metadata lies in its mapping: checked once at
/// attach (`Segment::get_slice`), so that the loans and receives that read
/// it at every message do not check it again.
pub(crate) struct MetasAt(std::ptr::NonNull<[ChunkMeta]>);

// SAFETY: the pointer is into the mapping of the `Segment` of the
// `RegionCore` that holds this value, which keeps it mapped while the value
// lives; `ChunkMeta` is atomics only, so shared references to it may be
// used from any thread.
unsafe impl Send for MetasAt {}
// SAFETY: as for `Send`.
unsafe impl Sync for MetasAt {}

impl MetasAt {
    /// The chunks' metadata, borrowed for as long as the core that holds
    /// this value (and so the mapping).
    #[inline]
    pub(crate) fn get(&self) -> &[ChunkMeta] {
        // SAFETY: checked against the mapping at attach (in bounds,
        // aligned); the mapping outlives `self` (see the `Send` impl);
        // atomics only, so a shared reference is sound whatever other
        // processes do.
        unsafe { self.0.as_ref() }
    }
}

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
                let batches = layout.batches();
                let pool = Pool {
                    metas: seg.get_slice::<ChunkMeta>(layout.metas, layout.total_chunks)?,
                    journal: seg.get_slice::<AtomicU32>(OFF_JOURNAL, MAX_SLOTS)?,
                    batches: &batches,
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
        Region::with(seg, layout, config)
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
        let mut config = config_of(words);
        if config.size != seg.size() {
            return Err(bad("region size", config.size as u64));
        }
        if config.max_groups > 0 {
            config.group_lease = group_lease_of(seg, config.max_topics)?
                .ok_or_else(|| bad("region group lease", get(OFF_GROUP_LEASE).unwrap_or(0)))?;
        }
        let layout = config.layout().map_err(|_| bad("region configuration", config.size as u64))?;
        Ok((layout, config))
    }

    fn with(seg: Segment, layout: Layout, config: RegionConfig) -> Result<Region> {
        let cache = std::array::from_fn(|c| ChunkCache::new(cache_capacity(layout.class_count[c], CLASS_SIZES[c])));
        let batches = layout.batches();
        let metas = MetasAt(std::ptr::NonNull::from(seg.get_slice::<ChunkMeta>(layout.metas, layout.total_chunks)?));
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
            cache,
            metas,
            batches,
            config,
        };
        Ok(Region { core: Arc::new(core) })
    }

    fn new(seg: Segment, layout: Layout, config: RegionConfig) -> Result<Region> {
        let region = Region::with(seg, layout, config)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    fn words_at(seg: &Segment, at: [usize; 8]) -> [u64; 8] {
        at.map(|off| seg.get::<AtomicU64>(off).unwrap().load(Ordering::Relaxed))
    }

    /// A region written by layout 4, 5 or 6 (its version word, both
    /// configuration copies sealed under that layout's domain) is refused
    /// with the version error, not guessed at: a layout-4 region's free
    /// lists move one chunk per operation, a layout-5 region's inline
    /// slots of 1 KiB lie 1,024 bytes apart, not 1,088, a layout-6
    /// region's pops of 1 KiB chunks take 16, not 32.
    #[test]
    fn a_layout_4_5_or_6_region_is_refused_by_its_version() {
        for (version, domain) in [(4u64, CFG_DOMAIN_V4), (5, CFG_DOMAIN_V5), (6, CFG_DOMAIN_V6)] {
            let name = format!("t-region-v{version}-{}", std::process::id());
            let _ = Region::remove(&name);
            let cfg = RegionConfig::default().size(8 << 20).ring_arena(1 << 20);
            let region = Region::create(&name, cfg.clone()).unwrap();
            let seg = region.segment();
            let w = OFF_CFG_WEIGHTS;
            let first = [OFF_CFG_SIZE, OFF_MAX_TOPICS, OFF_CFG_RING_ARENA, OFF_LEASE, w, w + 8, w + 16, w + 24];
            let copy = cfg_copy_at(cfg.max_topics);
            let words = words_at(seg, first);
            assert_eq!(words, words_at(seg, std::array::from_fn(|i| copy + 8 * i)));
            let old = seal(domain, words);
            seg.get::<AtomicU64>(OFF_CFG_SEAL).unwrap().store(old, Ordering::Relaxed);
            seg.get::<AtomicU64>(copy + 64).unwrap().store(old, Ordering::Relaxed);
            seg.get::<AtomicU64>(OFF_VERSION).unwrap().store(version, Ordering::Relaxed);
            let err = Region::open_attached(&name).map(|_| ()).unwrap_err();
            let text = err.to_string();
            assert!(text.contains("region layout version") && text.contains(&version.to_string()), "{err}");
            drop(region);
            Region::remove(&name).unwrap();
        }
    }

    /// `max_groups` is in both configuration copies (the lease word's top
    /// byte); a damaged lease word is restored from the other copy with it.
    #[test]
    fn max_groups_round_trips_and_survives_a_damaged_lease_word() {
        let name = format!("t-region-groups-{}", std::process::id());
        let _ = Region::remove(&name);
        let cfg = RegionConfig::default().size(8 << 20).ring_arena(1 << 20).max_groups(5);
        let region = Region::create(&name, cfg.clone()).unwrap();
        let (opened, fixed) = Region::open_attached(&name).unwrap();
        assert_eq!((opened.config().max_groups, fixed), (5, 0));
        assert_eq!(opened.core.layout, cfg.layout().unwrap());
        let lease = region.segment().get::<AtomicU64>(OFF_LEASE).unwrap();
        let good = lease.load(Ordering::Relaxed);
        assert_eq!(good >> 56, 5);
        lease.store(good ^ (1 << 60), Ordering::Relaxed); // max_groups 21
        let (opened, fixed) = Region::open_attached(&name).unwrap();
        assert_eq!((opened.config().max_groups, fixed), (5, 1));
        assert_eq!(lease.load(Ordering::Relaxed), good);
        assert_eq!(opened.lease(), cfg.lease);
        drop((region, opened));
        Region::remove(&name).unwrap();
    }
}
