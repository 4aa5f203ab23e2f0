//! Where things lie in a region's data area, for tests and fuzz targets
//! that damage a region on purpose (`testing` feature). Read from the
//! layout types themselves, so a test cannot drift from the code.

use super::directory::ENTRY_BYTES;
use super::layout as region;
use super::partition::{self, PARTITION_HEADER};

/// Offsets (bytes, from the start of a region's data area) of the region
/// header's words and of the topic directory.
///
/// ```
/// let map = tachyon::bus::RegionMap::new();
/// assert_eq!(map.directory, 2048);
/// assert_eq!(map.entry_ring_off, 16);
/// assert_eq!(map.partition_block(4), 192 + 4 * 16);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RegionMap {
    /// The layout version (a `u64` word).
    pub version: usize,
    /// The directory's size in topics (a `u64` word).
    pub max_topics: usize,
    /// The ring arena's offset (a `u64` word).
    pub arena: usize,
    /// The ring arena's bytes used so far (a `u64` word).
    pub arena_used: usize,
    /// The lease (a `u64` word, ns).
    pub lease: usize,
    /// The recorded configuration (size, ring arena, class weights) and
    /// its seal, last: `u64` words.
    pub config: std::ops::Range<usize>,
    /// The chunk metadata's offset (a `u64` word).
    pub metas: usize,
    /// The number of chunks (a `u64` word).
    pub total_chunks: usize,
    /// The first chunk of each class (eight `u64` words).
    pub class_first: usize,
    /// The chunks in each class (eight `u64` words).
    pub class_count: usize,
    /// The free list of each class (eight of `free_list_bytes`, the head
    /// word first).
    pub free_lists: usize,
    /// Bytes of one free list.
    pub free_list_bytes: usize,
    /// The topic directory: `max_topics` entries of `entry_bytes`.
    pub directory: usize,
    /// Bytes of one directory entry (its primary copy first).
    pub entry_bytes: usize,
    /// Where an entry's ring offset word is, from the entry.
    pub entry_ring_off: usize,
    /// Where an entry's `corrupt` counter is, from the entry.
    pub entry_corrupt: usize,
    /// Where an entry's second copy starts, from the entry.
    pub entry_copy2: usize,
    /// Bytes in front of a partition's cells.
    pub partition_header: usize,
    /// Where a partition's head cursor is, from the partition (its tail
    /// is at 0).
    pub partition_head: usize,
    /// Where a partition's repair counter is, from the partition.
    pub partition_repairs: usize,
    /// Bytes of one ring cell (a control word, then a length word).
    pub cell_bytes: usize,
}

impl RegionMap {
    /// The map of the current layout.
    pub fn new() -> RegionMap {
        RegionMap {
            version: region::OFF_VERSION,
            max_topics: region::OFF_MAX_TOPICS,
            arena: region::OFF_ARENA,
            arena_used: region::OFF_ARENA_USED,
            lease: region::OFF_LEASE,
            config: region::OFF_CFG_SIZE..region::OFF_CFG_SEAL + 8,
            metas: region::OFF_METAS,
            total_chunks: region::OFF_TOTAL_CHUNKS,
            class_first: region::OFF_CLASS_FIRST,
            class_count: region::OFF_CLASS_COUNT,
            free_lists: region::OFF_FREE_LISTS,
            free_list_bytes: std::mem::size_of::<super::pool::FreeList>(),
            directory: region::OFF_TOPICS,
            entry_bytes: ENTRY_BYTES,
            entry_ring_off: super::directory::RING_OFF,
            entry_corrupt: super::directory::CORRUPT_OFF,
            entry_copy2: super::directory::COPY2_OFF,
            partition_header: PARTITION_HEADER,
            partition_head: partition::HEAD_OFF,
            partition_repairs: partition::REPAIRS_OFF,
            cell_bytes: std::mem::size_of::<crate::sync::ring::Cell>(),
        }
    }

    /// Where the second copy of the configuration is, in a region of
    /// `max_topics` topics (after the directory).
    pub fn config_copy(&self, max_topics: usize) -> usize {
        region::cfg_copy_at(max_topics)
    }

    /// Bytes one partition of `capacity` cells takes (its header, its
    /// cells, rounded up to 64), on a topic without inline payloads.
    pub fn partition_block(&self, capacity: u32) -> usize {
        partition::block(capacity, 0)
    }

    /// Bytes one partition of `capacity` cells takes on a topic with inline
    /// slots of `inline` bytes ([`TopicConfig::inline_payload`](super::TopicConfig::inline_payload),
    /// as [`TopicInfo::inline_payload`](super::TopicInfo::inline_payload)
    /// reports it): the cells' block, then one slot per cell, each
    /// [`inline_slot_stride`](Self::inline_slot_stride) bytes from the last.
    ///
    /// ```
    /// let map = tachyon::bus::RegionMap::new();
    /// assert_eq!(map.partition_block_inline(4, 128), 192 + 4 * 16 + 4 * 128);
    /// assert_eq!(map.partition_block_inline(4, 1024), 192 + 4 * 16 + 4 * 1088);
    /// assert_eq!(map.partition_block_inline(4, 0), map.partition_block(4));
    /// ```
    pub fn partition_block_inline(&self, capacity: u32, inline: usize) -> usize {
        partition::block(capacity, inline)
    }

    /// Bytes from one inline slot of `inline` bytes to the next: `inline`,
    /// and a cache line more when `inline` is a multiple of 256 above 256
    /// (so that the slots spread over the page's offsets; layout 6).
    ///
    /// ```
    /// let map = tachyon::bus::RegionMap::new();
    /// assert_eq!(map.inline_slot_stride(256), 256);
    /// assert_eq!(map.inline_slot_stride(320), 320);
    /// assert_eq!(map.inline_slot_stride(1024), 1088);
    /// ```
    pub fn inline_slot_stride(&self, inline: usize) -> usize {
        partition::slot_stride(inline)
    }

    /// Where a partition's inline slots start, from the partition.
    ///
    /// ```
    /// let map = tachyon::bus::RegionMap::new();
    /// assert_eq!(map.inline_slots_offset(4), 256);
    /// ```
    pub fn inline_slots_offset(&self, capacity: u32) -> usize {
        partition::slots_off(capacity)
    }
}

impl Default for RegionMap {
    fn default() -> Self {
        RegionMap::new()
    }
}
