//! The region's layout: its header (a `repr(C)` struct, whose field
//! offsets the code uses), the payload classes, and where everything lies
//! in the data area (offsets in bytes):
//!
//! ```text
//!      0  version, max topics, ring arena offset and size, arena bytes used,
//!         chunk metadata offset, total chunks,
//!         max groups << 56 | lease (ns)                        (8 x u64)
//!     64  first chunk of each class                            (8 x u64)
//!    128  chunks in each class                                 (8 x u64)
//!    192  control mutex (creating topics)
//!    200  recorded configuration: size, ring arena, class weights
//!    256  free list of each class                              (8 x 16 B)
//!    384  "a chunk was freed" wait cell, group lease (ns) and its seal
//!    448  data offset of each class                            (8 x u64)
//!    512  heartbeat of each attach slot (ns since the epoch)   (128 x u64)
//!   1536  token of each attach slot's process (pool journal)   (128 x u32)
//!   2048  topic directory                                      (max topics x 256 B)
//!         ring arena (partitions: cursors, wait cells, cells)
//!         chunk metadata: state word, link, route, length,
//!         publication count                                    (24 B per chunk)
//!         group words (layout 4)                        (max groups x 8 B per chunk)
//!         group members (layout 4)                      (max topics x max groups x 128 B)
//!         chunk data, class by class, 64-byte aligned
//! ```
//!
//! The creator writes all of it before the region gets its name
//! (`Segment::create_with`); an opener validates the recorded configuration
//! as a caller's would be, recomputes the layout from it and requires every
//! stored offset to match, so no offset or count from shared memory is used
//! unchecked.

use super::directory::ENTRY_BYTES;
use super::pool::{ChunkMeta, FreeList};
use crate::platform::atomic::{AtomicU32, AtomicU64};
use crate::segment::{ShmSafe, MAX_SLOTS};
use crate::sync::{Mutex, WaitCell};
use std::mem::{offset_of, size_of};

/// The payload size classes: 64 B, 256 B, 1 KiB, 4 KiB, 16 KiB, 64 KiB,
/// 256 KiB and 1 MiB. A loan takes a chunk of the smallest class that fits
/// and that has a free chunk.
pub const CLASS_SIZES: [usize; 8] = [64, 256, 1 << 10, 4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20];
/// The largest message: the largest class.
pub const MAX_MESSAGE: usize = CLASS_SIZES[7];
/// What to do about a message larger than the largest chunk.
pub(crate) const TOO_LARGE: &str =
    "the largest pool chunk is 1 MiB: split the message, or send a reference to a SharedBuffer";

pub(crate) const LAYOUT_VERSION: u64 = 7;
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
    /// [`RegionConfig::group_lease`](super::RegionConfig::group_lease) in
    /// ns and its seal (both 0 in a region without group slots, as layout
    /// 3 left these words); the second copy is after the configuration's
    /// (`GROUP_LEASE_COPY`).
    group_lease: AtomicU64,
    group_lease_seal: AtomicU64,
    /// The rest of `freed`'s cache line.
    _pad: [u64; 5],
    class_data: [AtomicU64; 8],
    heartbeats: [AtomicU64; MAX_SLOTS],
    journal: [AtomicU32; MAX_SLOTS],
}

pub(crate) const OFF_VERSION: usize = offset_of!(Header, version);
pub(crate) const OFF_MAX_TOPICS: usize = offset_of!(Header, max_topics);
pub(crate) const OFF_ARENA: usize = offset_of!(Header, arena);
pub(crate) const OFF_ARENA_SIZE: usize = offset_of!(Header, arena_size);
pub(crate) const OFF_ARENA_USED: usize = offset_of!(Header, arena_used);
pub(crate) const OFF_METAS: usize = offset_of!(Header, metas);
pub(crate) const OFF_TOTAL_CHUNKS: usize = offset_of!(Header, total_chunks);
pub(crate) const OFF_LEASE: usize = offset_of!(Header, lease);
pub(crate) const OFF_CLASS_FIRST: usize = offset_of!(Header, class_first);
pub(crate) const OFF_CLASS_COUNT: usize = offset_of!(Header, class_count);
pub(crate) const OFF_CONTROL: usize = offset_of!(Header, control);
pub(crate) const OFF_CFG_SIZE: usize = offset_of!(Header, cfg_size);
pub(crate) const OFF_CFG_RING_ARENA: usize = offset_of!(Header, cfg_ring_arena);
pub(crate) const OFF_CFG_WEIGHTS: usize = offset_of!(Header, cfg_weights);
pub(crate) const OFF_CFG_SEAL: usize = offset_of!(Header, cfg_seal);
pub(crate) const OFF_FREE_LISTS: usize = offset_of!(Header, free_lists);
pub(crate) const OFF_FREED: usize = offset_of!(Header, freed);
pub(crate) const OFF_GROUP_LEASE: usize = offset_of!(Header, group_lease);
pub(crate) const OFF_GROUP_LEASE_SEAL: usize = offset_of!(Header, group_lease_seal);
pub(crate) const OFF_CLASS_DATA: usize = offset_of!(Header, class_data);
pub(crate) const OFF_HEARTBEATS: usize = offset_of!(Header, heartbeats);
pub(crate) const OFF_JOURNAL: usize = offset_of!(Header, journal);
/// The topic directory follows the header.
pub(crate) const OFF_TOPICS: usize = size_of::<Header>();

// The layout in shared memory is fixed (layout version 7: 3's header): the struct must
// not move a word.
const _: () = {
    assert!(OFF_LEASE == 56 && OFF_CLASS_FIRST == 64 && OFF_CLASS_COUNT == 128);
    assert!(OFF_CONTROL == 192 && OFF_CFG_SIZE == 200 && OFF_CFG_WEIGHTS == 216 && OFF_CFG_SEAL == 248);
    assert!(OFF_FREE_LISTS == 256 && size_of::<FreeList>() == 16);
    assert!(OFF_FREED == 384 && OFF_CLASS_DATA == 448 && OFF_HEARTBEATS == 512);
    assert!(OFF_GROUP_LEASE == 392 && OFF_GROUP_LEASE_SEAL == 400);
    assert!(OFF_JOURNAL == OFF_HEARTBEATS + 8 * MAX_SLOTS);
    assert!(OFF_TOPICS == OFF_JOURNAL + 4 * MAX_SLOTS && OFF_TOPICS == 2048);
};

/// Bytes of the configuration's second copy, after the topic directory:
/// the eight configuration words (as [`config_words`] orders them) and
/// their seal; then the count of header and directory repairs so far
/// ([`DIRECTORY_REPAIRS`]).
pub(crate) const CFG_COPY: usize = 128;
/// Where the repair count is, from the configuration's second copy.
pub(crate) const DIRECTORY_REPAIRS: usize = 72;
/// Where the group lease's second copy (the lease, then its seal) is,
/// from the configuration's second copy.
pub(crate) const GROUP_LEASE_COPY: usize = 80;
/// The seal's domain of the group lease word.
pub(crate) const GROUP_LEASE_DOMAIN: u64 = 0x0067_6c65_6173_6534;
/// The seal's domain: a region's configuration, layout 7 (an older
/// region's seals do not hold under it, so it is refused by its version:
/// a layout-4 region's free lists move one chunk per operation, and its
/// processes would complete a chain announced by a later process wrongly;
/// a layout-5 region's processes find a topic's inline slots of 512 bytes
/// and more at other addresses, `partition::slot_stride`; a layout-6
/// region's pops take 16 chunks of a class whose chunks are larger than
/// 64 bytes, where layout 7's take 32, `alloc::pop_batch`, and a helper
/// must complete a pop with the popper's count).
pub(crate) const CFG_DOMAIN: u64 = 0x0072_6567_696f_6e37;
/// The seal's domains of layouts 4, 5 and 6 (for the tests that such
/// regions are refused).
#[cfg(test)]
pub(crate) const CFG_DOMAIN_V4: u64 = 0x0072_6567_696f_6e34;
#[cfg(test)]
pub(crate) const CFG_DOMAIN_V5: u64 = 0x0072_6567_696f_6e35;
#[cfg(test)]
pub(crate) const CFG_DOMAIN_V6: u64 = 0x0072_6567_696f_6e36;

// SAFETY: `repr(C)`, atomics only; any bits are valid.
unsafe impl ShmSafe for FreeList {}
// SAFETY: `repr(C)`, atomics only; any bits are valid.
unsafe impl ShmSafe for ChunkMeta {}
// SAFETY: `repr(transparent)` over one `AtomicU64`; any bits are valid (an
// unknown state is no group a publisher delivers to).
unsafe impl ShmSafe for super::groups::Control {}

/// Offsets and class geometry computed from a configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Layout {
    pub(crate) arena: usize,
    pub(crate) arena_size: usize,
    pub(crate) metas: usize,
    pub(crate) total_chunks: usize,
    pub(crate) class_first: [usize; 8],
    pub(crate) class_count: [usize; 8],
    pub(crate) class_data: [usize; 8],
    /// Where the group words start (`total_chunks * max_groups` words).
    pub(crate) groups: usize,
    /// Group words per chunk ([`RegionConfig::max_groups`](super::RegionConfig::max_groups)).
    pub(crate) max_groups: usize,
    /// Where the group member records start (`max_topics * max_groups`
    /// records of [`MEMBER_RECORD`] bytes, topic by topic; none without
    /// group slots). Computed, never stored.
    pub(crate) members: usize,
    /// Topics the directory holds (for the member records' index).
    pub(crate) max_topics: usize,
}

/// Bytes of one group slot's member record (`membership.rs`).
pub(crate) const MEMBER_RECORD: usize = 128;

impl Layout {
    /// The class of global chunk index `chunk`, if it is one.
    #[inline]
    pub(crate) fn class_of(&self, chunk: u32) -> Option<usize> {
        let chunk = chunk as usize;
        // The classes' indices follow one another in class order (an empty
        // class starts where the next one does): the last class starting
        // at or before `chunk` is the only one it can be in, and, the starts
        // being in order, its number is how many classes after the first
        // start at or before `chunk` (counted without a branch).
        let c = self.class_first[1..].iter().filter(|&&first| first <= chunk).count();
        let off = chunk.checked_sub(self.class_first[c])?;
        (off < self.class_count[c]).then_some(c)
    }

    /// How many chunks one pop takes from each class ([`Pool::batches`](super::pool::Pool::batches)).
    pub(crate) fn batches(&self) -> [super::pool::ClassBatch; 8] {
        std::array::from_fn(|c| super::pool::ClassBatch {
            first: self.class_first[c] as u32,
            chunks: self.class_count[c] as u32,
            batch: super::alloc::pop_batch(self.class_count[c], CLASS_SIZES[c]) as u32,
        })
    }

    pub(crate) fn class_range(&self, class: usize) -> std::ops::Range<u32> {
        let first = self.class_first[class] as u32;
        first..first + self.class_count[class] as u32
    }

    /// Bytes of the member records (0 without group slots).
    pub(crate) fn member_bytes(max_topics: usize, max_groups: usize) -> usize {
        max_topics * max_groups * MEMBER_RECORD
    }
}

/// Where the configuration's second copy is in a region of `max_topics`.
pub(crate) fn cfg_copy_at(max_topics: usize) -> usize {
    OFF_TOPICS + max_topics * ENTRY_BYTES
}
