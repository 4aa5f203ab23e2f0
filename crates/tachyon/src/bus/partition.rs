//! A partition's ring in the region's ring arena: its layout (a header of
//! cursors and two wait cells, then the cells) and its first state.
//!
//! ```text
//!      0  cursors: tail, head, repairs           (two cache lines)
//!    128  "not empty" wait cell
//!    136  "not full" wait cell
//!    144  the item whose hand-back wakes the producers (a hint)
//!    192  cells                                  (capacity x 16 B)
//!         inline slots, from the next 64-byte line (capacity x slot bytes;
//!         only on a topic with `TopicConfig::inline_payload`)
//! ```
//!
//! A topic with inline payloads gives each cell a slot of its own, in
//! order: the copy path writes a message of up to a slot's bytes into the
//! slot of the cell it claimed, and the cell's descriptor says "inline"
//! instead of naming a chunk (`Topic::send_inline`; docs/bus.md, "Inline
//! payloads").
//!
//! A topic's partitions lie one after another, each rounded up to 64 bytes.
//! In a region with group slots (`RegionConfig::max_groups`, layout 4) a
//! topic's block holds the partitions of every slot, slot by slot (slot 0,
//! the default group, first: where a topic's rings always were), then the
//! slots' control words and names:
//!
//! ```text
//!      0  slot 0: partition 0, 1, ...       (today's rings)
//!         slot 1: partition 0, 1, ...
//!         ...
//!         control word of each slot                 (slots x u64)
//!         name of each slot: length, 64 bytes       (slots x 9 x u64)
//! ```
//!
//! Every offset in it is computed from sealed words (the topic's record
//! and the region's configuration), never stored.

use crate::error::Result;
use crate::platform::atomic::{AtomicU64, Ordering};
use crate::segment::{Segment, ShmSafe};
use crate::sync::ring::{Cell, Cursors};
use crate::sync::WaitCell;
use std::mem::{offset_of, size_of};

/// The header in front of a partition's cells.
#[repr(C)]
pub(crate) struct PartitionHeader {
    pub cursors: Cursors,
    /// Consumers sleep here for a message.
    pub not_empty: WaitCell,
    /// Producers sleep here for room.
    pub not_full: WaitCell,
    /// The item whose hand-back wakes the producers sleeping for room
    /// (`Ring::wake_writers`); in what used to be padding, so old rings
    /// read 0, which wakes at every hand-back as before.
    pub room_at: AtomicU64,
    _pad: [u64; 5],
}

/// Bytes in front of each partition's cells.
pub(crate) const PARTITION_HEADER: usize = size_of::<PartitionHeader>();

/// Where the head cursor is, from the partition.
pub(crate) const HEAD_OFF: usize = offset_of!(PartitionHeader, cursors) + offset_of!(Cursors, head);
/// Where the repair counter is, from the partition.
pub(crate) const REPAIRS_OFF: usize = offset_of!(PartitionHeader, cursors) + offset_of!(Cursors, repairs);

const _: () = assert!(offset_of!(PartitionHeader, cursors) == 0);
const _: () = assert!(HEAD_OFF == 64 && REPAIRS_OFF == 72);
const _: () = assert!(offset_of!(PartitionHeader, not_empty) == 128);
const _: () = assert!(offset_of!(PartitionHeader, not_full) == 136);
const _: () = assert!(offset_of!(PartitionHeader, room_at) == 144);
const _: () = assert!(PARTITION_HEADER == 192);
const _: () = assert!(size_of::<Cell>() == 16);

// SAFETY: `repr(C)` of `Cursors` and two `WaitCell`s (all ShmSafe: atomics
// and never-touched padding), an atomic and never-touched padding: any bits are
// valid and all mutation is atomic.
unsafe impl ShmSafe for PartitionHeader {}

/// Bytes one partition of `capacity` cells takes in the arena, with an
/// inline slot of `inline` bytes (a multiple of 64, or 0) per cell, each
/// [`slot_stride`] bytes from the last.
pub(crate) fn block(capacity: u32, inline: usize) -> usize {
    slots_off(capacity) + capacity as usize * slot_stride(inline)
}

/// Bytes from one inline slot of `inline` bytes (a multiple of 64) to the
/// next: `inline`, and one cache line more when `inline` is a multiple of
/// 256 above 256 (layout 6).
///
/// Why: slots a power of two apart sit at a few offsets of a page only
/// (four for 1 KiB slots, one from 4 KiB on), and how fast a slot's bytes
/// are copied depends on where in its page it lies: the copy's loads and
/// its stores, and the other lines a message touches (its cell, the
/// cursors, the processes' own buffers), can meet at the same page
/// offset, where the core takes a load for one of the stores just made
/// ("4K aliasing") and waits. With four offsets, one unlucky offset slows
/// a quarter of the messages for as long as the topic lives. One line more
/// moves each slot 64 bytes further along the page than the last, over 64
/// offsets, so that no one coincidence holds for more than a few messages.
/// (Measured: the 1 KiB stream of one layout 1.13 - 1.16 x as fast with
/// the slots moved 320 bytes on, and 1.22 x with this stride, paired
/// medians of 16 interleaved rounds, `docs/benchmark-history.md`.) Slots of 256
/// bytes and less are left dense: glibc's `memcpy` loads up to 256 bytes
/// (eight AVX2 registers) before it stores any of them, so such a copy
/// has no earlier store of its own to mistake a load for.
pub(crate) const fn slot_stride(inline: usize) -> usize {
    if inline > 256 && inline % 256 == 0 {
        inline + 64
    } else {
        inline
    }
}

/// Where a partition's inline slots start, from the partition: the first
/// 64-byte line after its cells.
pub(crate) fn slots_off(capacity: u32) -> usize {
    (PARTITION_HEADER + size_of::<Cell>() * capacity as usize).next_multiple_of(64)
}

/// The smallest ring arena that holds a ring at all.
pub(crate) const MIN_ARENA: usize = PARTITION_HEADER + 2 * size_of::<Cell>();

/// The header and cells of the partition at `base` (bounds checked by the
/// segment).
pub(crate) fn at(seg: &Segment, base: usize, capacity: u32) -> Result<(&PartitionHeader, &[Cell])> {
    Ok((
        seg.get::<PartitionHeader>(base)?,
        seg.get_slice::<Cell>(base + PARTITION_HEADER, capacity as usize)?,
    ))
}

/// Sets every cell of `partitions` partitions of `capacity` cells at
/// `ring_off` free for its first writer, and the cursors to 0.
pub(crate) fn init(seg: &Segment, ring_off: usize, partitions: u32, capacity: u32, inline: usize) -> Result<()> {
    for p in 0..partitions as usize {
        let (header, cells) = at(seg, ring_off + p * block(capacity, inline), capacity)?;
        for (i, c) in cells.iter().enumerate() {
            c.word.store((i as u64) << 32, Ordering::Relaxed);
            c.len.store(0, Ordering::Relaxed);
        }
        header.cursors.tail.store(0, Ordering::Relaxed);
        header.cursors.head.store(0, Ordering::Relaxed);
    }
    Ok(())
}

/// Bytes of a topic's group block (control words and names) in a region
/// of `max_groups` group slots: none without group slots.
pub(crate) fn group_block(max_groups: usize) -> usize {
    if max_groups == 0 {
        0
    } else {
        (max_groups * 8 + max_groups * GROUP_NAME_WORDS * 8).next_multiple_of(64)
    }
}

/// Words of one slot's name record: its length, then 64 bytes.
pub(crate) const GROUP_NAME_WORDS: usize = 9;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inline_slots_of_a_power_of_two_size_spread_over_the_page() {
        for inline in (64..=64 * 1024).step_by(64) {
            let stride = slot_stride(inline);
            assert!(stride >= inline && stride % 64 == 0, "{inline}: {stride}");
            // Page offsets of the first 64 slots of a partition.
            let offsets: std::collections::BTreeSet<usize> = (0..64).map(|i| i * stride % 4096).collect();
            if inline > 256 && inline % 256 == 0 {
                assert_eq!(stride, inline + 64);
                assert_eq!(offsets.len(), 64, "{inline}");
            } else {
                assert_eq!(stride, inline);
                // Dense slots whose size is not a multiple of 256 still
                // fall at 32 offsets or more, or are at most 256 bytes.
                assert!(offsets.len() >= 32 || inline <= 256, "{inline}: {}", offsets.len());
            }
            assert_eq!(block(4, inline), slots_off(4) + 4 * stride);
        }
        assert_eq!(block(4, 0), slots_off(4));
    }
}
