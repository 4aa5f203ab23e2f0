//! The shared memory of a topics run, as both processes know it: unique
//! names, the key, the region's sizing and removal, and where the raw
//! ring's slots and the flag sit in their segments.

use std::sync::atomic::{AtomicU64, Ordering};
use tachyon::bus::{Region, RegionConfig, CLASS_SIZES};

/// Every message is published with this key (one partition per topic).
pub(crate) const KEY: u64 = 0;
/// Where the raw ring's slots start in its segment.
pub(super) const RAW_DATA_OFF: usize = 256;
/// Where the cache-line ping-pong's word sits in its segment.
pub(super) const FLAG_OFF: usize = 0;

pub(crate) fn unique_name() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!("tachyon-bench-topics-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed))
}

/// A region sized for `topics` topics of `capacity` descriptors carrying
/// messages of `size` bytes: the pool has chunks only in the class of
/// `size`, enough for every descriptor of every topic plus the loans and
/// held messages in flight (at most 256 MiB of them; beyond that loans
/// wait for the consumer to release).
///
/// A ping-pong has at most one message per topic in flight: its pool gets
/// 16 chunks per topic.
pub(crate) fn region_config(size: usize, capacity: u32, topics: usize, ping_pong: bool) -> RegionConfig {
    region_config_inline(size, capacity, topics, ping_pong, 0)
}

/// [`region_config`] for topics whose cells have inline slots of `inline`
/// bytes (`TopicConfig::inline_payload`): the ring arena holds the slots.
pub(crate) fn region_config_inline(
    size: usize,
    capacity: u32,
    topics: usize,
    ping_pong: bool,
    inline: usize,
) -> RegionConfig {
    let class = CLASS_SIZES.iter().position(|&c| c >= size).unwrap_or(CLASS_SIZES.len() - 1);
    let mut class_weights = [0u32; 8];
    class_weights[class] = 1;
    let chunk = CLASS_SIZES[class] + 16;
    let in_flight = if ping_pong { 16 } else { capacity as usize + 16 };
    let chunks = (topics * in_flight).min((256 << 20) / chunk).max(8);
    // A partition's header and cells, then its inline slots, each at most
    // a cache line more than its size apart (`RegionMap::inline_slot_stride`).
    let stride = if inline == 0 { 0 } else { inline + 64 };
    let block = (192 + 16 * capacity as usize).div_ceil(64) * 64 + capacity as usize * stride;
    let ring_arena = topics * block + 4096;
    let size = (chunks * chunk + ring_arena + (2 << 20)).div_ceil(1 << 20) << 20;
    RegionConfig::default()
        .size(size.max(4 << 20))
        .max_topics(4)
        .ring_arena(ring_arena)
        .class_weights(class_weights)
}

/// Removes a region's name when dropped (regions are persistent).
pub(crate) struct RemoveRegion<'a>(pub(crate) &'a str);

impl Drop for RemoveRegion<'_> {
    fn drop(&mut self) {
        let _ = Region::remove(self.0);
    }
}
