//! A region's configuration: what a creator chooses, how it is checked,
//! the layout it implies, and its record in the header (eight words and a
//! seal).

use super::layout::*;
use super::partition;
use super::pool::{ChunkMeta, MAX_CHUNKS};
use crate::error::{Error, Result};
use std::time::Duration;

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
    /// away from the region for longer should call [`Region::heartbeat`](crate::bus::Region::heartbeat).
    pub lease: Duration,
    /// Consumer-group slots per topic, the default group (slot 0, today's
    /// consumers) included: 0 or 1 = no named groups (no group words, the
    /// layout of a region without groups), at most [`MAX_GROUPS`]. Each
    /// slot costs every topic one ring per partition and every chunk of
    /// the pool 8 bytes (and every topic 128 bytes for the slot's member
    /// record). Default 0.
    pub max_groups: usize,
    /// How long a named consumer group keeps its position (and its hold
    /// on the messages queued for it) once it has no live member: all its
    /// members left, or died. Recovery then drops it, and it no longer
    /// holds producers back. A member that joins within the lease finds the
    /// group where it was left, as a Kafka consumer group's offsets
    /// survive its members for a retention period. 0 to 30 days; default
    /// 30 s (short, unlike Kafka's days: here a group without members
    /// holds producers back once its rings are full). Recorded (sealed,
    /// twice) only in a region with group slots.
    pub group_lease: Duration,
}

/// Most group slots per topic ([`RegionConfig::max_groups`]).
pub const MAX_GROUPS: usize = 63;
/// The longest [`RegionConfig::group_lease`].
const MAX_GROUP_LEASE: Duration = Duration::from_secs(30 * 86_400);
/// The default [`RegionConfig::group_lease`].
pub(crate) const DEFAULT_GROUP_LEASE: Duration = Duration::from_secs(30);
/// Bits of the lease word that hold the lease (ns); the top byte holds
/// [`RegionConfig::max_groups`] (a lease is at most a day: under 2^47 ns).
const LEASE_BITS: u32 = 56;

impl Default for RegionConfig {
    fn default() -> Self {
        RegionConfig {
            size: 64 << 20,
            max_topics: 64,
            ring_arena: 4 << 20,
            class_weights: [1; 8],
            lease: Duration::from_secs(10),
            max_groups: 0,
            group_lease: DEFAULT_GROUP_LEASE,
        }
    }
}

/// The configuration as eight words: size, max_topics, ring arena, lease
/// (ns, with `max_groups` in its top byte), the class weights two per word.
pub(crate) fn config_words(config: &RegionConfig) -> [u64; 8] {
    let w = |pair: usize| {
        u64::from(config.class_weights[2 * pair]) | u64::from(config.class_weights[2 * pair + 1]) << 32
    };
    [
        config.size as u64,
        config.max_topics as u64,
        config.ring_arena as u64,
        (config.lease.as_nanos() as u64 & ((1 << LEASE_BITS) - 1)) | (config.max_groups as u64) << LEASE_BITS,
        w(0),
        w(1),
        w(2),
        w(3),
    ]
}

/// The configuration eight words stand for (unchecked: `layout` checks).
pub(crate) fn config_of(words: [u64; 8]) -> RegionConfig {
    let mut class_weights = [0u32; 8];
    for (c, w) in class_weights.iter_mut().enumerate() {
        *w = (words[4 + c / 2] >> (32 * (c % 2))) as u32;
    }
    RegionConfig {
        size: usize::try_from(words[0]).unwrap_or(usize::MAX),
        max_topics: usize::try_from(words[1]).unwrap_or(usize::MAX),
        ring_arena: usize::try_from(words[2]).unwrap_or(usize::MAX),
        class_weights,
        lease: Duration::from_nanos(words[3] & ((1 << LEASE_BITS) - 1)),
        max_groups: (words[3] >> LEASE_BITS) as usize,
        group_lease: DEFAULT_GROUP_LEASE,
    }
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

    /// Sets [`max_groups`](Self::max_groups).
    pub fn max_groups(mut self, n: usize) -> Self {
        self.max_groups = n;
        self
    }

    /// Sets [`group_lease`](Self::group_lease).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tachyon::bus::RegionConfig;
    /// let cfg = RegionConfig::default().max_groups(4).group_lease(Duration::from_secs(5));
    /// assert!(cfg.validate().is_ok());
    /// assert!(cfg.group_lease(Duration::from_secs(31 * 86_400)).validate().is_err());
    /// ```
    pub fn group_lease(mut self, lease: Duration) -> Self {
        self.group_lease = lease;
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
                ("max_groups", self.max_groups.to_string(), want.max_groups.to_string()),
                // Recorded only in a region with group slots.
                (
                    "group_lease",
                    format!("{:?}", self.group_lease),
                    format!("{:?}", if self.max_groups == 0 { self.group_lease } else { want.group_lease }),
                ),
            ],
        )
    }

    /// Checks the values and that every weighted class gets a chunk.
    pub fn validate(&self) -> Result<()> {
        self.layout().map(|_| ())
    }

    pub(crate) fn layout(&self) -> Result<Layout> {
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
        if self.max_groups > MAX_GROUPS {
            return bad(format!("max_groups must be 0 to {MAX_GROUPS}, not {}", self.max_groups));
        }
        if self.group_lease > MAX_GROUP_LEASE {
            return bad(format!("group_lease must be at most 30 days, not {:?}", self.group_lease));
        }
        let weights: u64 = self.class_weights.iter().map(|&w| u64::from(w)).sum();
        if weights == 0 {
            return bad("class_weights are all zero: the pool would be empty".into());
        }
        let arena = (cfg_copy_at(self.max_topics) + CFG_COPY).next_multiple_of(64);
        let arena_size = (self.ring_arena).next_multiple_of(64);
        // The member records (none without group slots: layout 3's
        // geometry) come out of the pool's bytes.
        let member_bytes = Layout::member_bytes(self.max_topics, self.max_groups);
        let fixed = arena + arena_size;
        if fixed + member_bytes + (1 << 20) > self.size {
            return bad(format!(
                "region of {} bytes is too small for {} topics and a {}-byte ring arena",
                self.size, self.max_topics, self.ring_arena
            ));
        }
        // Leave room for alignment: one cache line per class plus metadata.
        let pool = self.size - fixed - member_bytes - 64 * 10;
        // Every weighted class gets one chunk first; the rest of the bytes
        // are shared by weight.
        let per_chunk = |c: usize| CLASS_SIZES[c] + std::mem::size_of::<ChunkMeta>() + 8 * self.max_groups;
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
        // The group words (one per group slot per chunk) follow the chunk
        // metadata; their offset is computed, never stored.
        let groups = metas + total_chunks * std::mem::size_of::<ChunkMeta>();
        let members = groups + total_chunks * 8 * self.max_groups;
        let mut at = (members + member_bytes).next_multiple_of(64);
        let mut class_data = [0usize; 8];
        for c in 0..8 {
            class_data[c] = at;
            at = (at + class_count[c] * CLASS_SIZES[c]).next_multiple_of(64);
        }
        if at > self.size {
            return bad(format!("internal: pool layout of {at} bytes exceeds the region's {}", self.size));
        }
        Ok(Layout {
            arena,
            arena_size,
            metas,
            total_chunks,
            class_first,
            class_count,
            class_data,
            groups,
            max_groups: self.max_groups,
            members,
            max_topics: self.max_topics,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_groups_round_trips_through_the_lease_word() {
        for (groups, lease) in [(0, Duration::from_millis(10)), (7, Duration::from_secs(86_400)), (63, Duration::from_secs(10))] {
            let cfg = RegionConfig::default().max_groups(groups).lease(lease);
            let words = config_words(&cfg);
            assert_eq!(words[3] >> LEASE_BITS, groups as u64);
            assert_eq!(config_of(words), cfg);
        }
        assert!(RegionConfig::default().max_groups(64).validate().is_err());
    }

    #[test]
    fn every_chunk_index_finds_its_class_and_no_other_index_finds_one() {
        for weights in [[1, 1, 1, 1, 1, 1, 1, 1], [1, 0, 0, 1, 0, 2, 0, 0], [0, 0, 0, 0, 0, 0, 0, 1], [3, 0, 0, 0, 0, 0, 0, 0]] {
            let l = RegionConfig::default().size(64 << 20).class_weights(weights).layout().unwrap();
            let plain = |chunk: usize| (0..8).find(|&c| (l.class_first[c]..l.class_first[c] + l.class_count[c]).contains(&chunk));
            for chunk in (0..l.total_chunks + 70).chain([u32::MAX as usize]) {
                assert_eq!(l.class_of(chunk as u32), plain(chunk), "{weights:?}, chunk {chunk}");
            }
            for c in 0..8 {
                assert_eq!(l.class_count[c] > 0, weights[c] > 0, "{weights:?}");
            }
        }
    }

    #[test]
    fn group_words_lie_between_the_metadata_and_the_data() {
        let none = RegionConfig::default().layout().unwrap();
        let four = RegionConfig::default().max_groups(4).layout().unwrap();
        assert_eq!(four.groups, four.metas + four.total_chunks * std::mem::size_of::<ChunkMeta>());
        assert!(four.groups + four.total_chunks * 32 <= four.class_data[0]);
        // The words come out of the pool's bytes.
        assert!(four.total_chunks < none.total_chunks);
        assert_eq!(none.class_data, RegionConfig::default().layout().unwrap().class_data);
        // The member records follow the group words; none without slots.
        assert_eq!(four.members, four.groups + four.total_chunks * 32);
        assert!(four.members + 64 * 4 * super::super::layout::MEMBER_RECORD <= four.class_data[0]);
        assert_eq!((none.members, none.groups), (none.groups, none.metas + none.total_chunks * 24));
        assert_eq!(none.class_data[0], none.members.next_multiple_of(64), "layout 3's geometry");
    }
}
