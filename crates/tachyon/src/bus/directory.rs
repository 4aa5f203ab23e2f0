//! The topic directory: one 256-byte entry per topic in the region's
//! header, naming its geometry and where its rings are, with its counters.
//!
//! What never changes once a topic exists (name, partitions, capacity,
//! wait policy, delivery, ring offset) is kept twice, each copy under its
//! own seal (`segment::seal`): a word damaged in one copy (a stray write,
//! a bit flip) breaks that copy's seal, and the entry is read from, and
//! repaired from, the other. Repairs write only values read from a copy
//! whose seal holds, so two repairers (or a repairer and the creator) that
//! race write the same values: no lock is needed. Damage to both copies
//! between two repairs loses the topic (reported as `Corrupt` when it is
//! opened); its rings and messages stay where they are.
//!
//! The counters (published, received, corrupt, lost) are statistics: a
//! damaged counter shows a wrong number and harms nothing else.

use crate::platform::atomic::{AtomicU32, AtomicU64, Ordering};
use crate::segment::seal::seal;
use crate::segment::ShmSafe;

/// Longest topic name, in bytes.
pub(crate) const MAX_NAME: usize = 64;
/// Bytes per entry.
pub(crate) const ENTRY_BYTES: usize = 256;
/// `state` of an entry that holds a topic.
const READY: u32 = 1;
/// The seal's domain: a topic entry's fixed fields, layout 3.
const DOMAIN: u64 = 0x0000_746f_7069_6333;

/// The fixed fields of an entry, as plain values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Record {
    pub(crate) partitions: u32,
    pub(crate) capacity: u32,
    /// Wait policy code (`topic.rs` maps it).
    pub(crate) wait: u32,
    /// Delivery code (`topic.rs` maps it).
    pub(crate) delivery: u32,
    /// Offset of the topic's first partition in the region.
    pub(crate) ring_off: u64,
    name_len: u32,
    name: [u64; 8],
}

impl Record {
    /// A record for a topic named `name` (1 to [`MAX_NAME`] bytes, checked
    /// by the caller).
    pub(crate) fn new(
        name: &str,
        partitions: u32,
        capacity: u32,
        wait: u32,
        delivery: u32,
        ring_off: u64,
    ) -> Self {
        let mut bytes = [0u8; MAX_NAME];
        let len = name.len().min(MAX_NAME);
        bytes[..len].copy_from_slice(&name.as_bytes()[..len]);
        let mut words = [0u64; 8];
        for (w, chunk) in words.iter_mut().zip(bytes.chunks_exact(8)) {
            let mut b = [0u8; 8];
            b.copy_from_slice(chunk);
            *w = u64::from_le_bytes(b);
        }
        Record { partitions, capacity, wait, delivery, ring_off, name_len: len as u32, name: words }
    }

    /// The name, if it is one (1 to 64 bytes of UTF-8).
    pub(crate) fn name(&self) -> Option<String> {
        let len = self.name_len as usize;
        if len == 0 || len > MAX_NAME {
            return None;
        }
        let bytes: Vec<u8> = self.name.iter().flat_map(|w| w.to_le_bytes()).take(len).collect();
        String::from_utf8(bytes).ok()
    }

    fn seal(&self) -> u64 {
        let head = [
            u64::from(self.partitions) | u64::from(self.capacity) << 32,
            u64::from(self.wait) | u64::from(self.delivery) << 32,
            self.ring_off,
            u64::from(self.name_len),
        ];
        seal(DOMAIN, head.into_iter().chain(self.name))
    }
}

/// The second copy of an entry's fixed fields (104 bytes).
#[repr(C)]
struct Copy2 {
    partitions: AtomicU32,
    capacity: AtomicU32,
    wait: AtomicU32,
    delivery: AtomicU32,
    ring_off: AtomicU64,
    name_len: AtomicU32,
    _pad: AtomicU32,
    name: [AtomicU64; 8],
    seal: AtomicU64,
}

/// A topic's directory entry in the region ([`ENTRY_BYTES`]). The first
/// 128 bytes are laid out as in layout 2 (tools and tests that read the
/// ring offset at byte 16 still do), but for the counter at byte 40
/// (`received` until layout 5, `undelivered` since); the seal of that copy
/// and the second copy follow.
#[repr(C)]
pub(crate) struct TopicEntry {
    state: AtomicU32,
    partitions: AtomicU32,
    capacity: AtomicU32,
    wait: AtomicU32,
    ring_off: AtomicU64,
    name_len: AtomicU32,
    delivery: AtomicU32,
    /// Counted by publishers, with `undelivered` below.
    pub(crate) published: AtomicU64,
    /// Messages published while no group was joined on a topic without its
    /// default group: delivered to nobody (a statistic, outside the seals).
    pub(crate) undelivered: AtomicU64,
    pub(crate) corrupt: AtomicU64,
    pub(crate) lost: AtomicU64,
    name: [AtomicU64; 8],
    seal: AtomicU64,
    copy2: Copy2,
    /// Counted by consumers, at every message: on the entry's last line,
    /// which no publisher writes per message (on the line of `published`
    /// the two counters made it cross between the producer's and the
    /// consumer's cores at every message; layout 5).
    pub(crate) received: AtomicU64,
    /// Messages dropped unread by overrunning publishers, all groups
    /// (`TopicConfig::overrun`; a statistic, outside the seals).
    pub(crate) missed: AtomicU64,
}

const _: () = assert!(std::mem::size_of::<Copy2>() == 104);
const _: () = assert!(std::mem::size_of::<TopicEntry>() == ENTRY_BYTES);
/// Where an entry's (primary) ring offset word is.
pub(crate) const RING_OFF: usize = std::mem::offset_of!(TopicEntry, ring_off);
const _: () = assert!(RING_OFF == 16);
const _: () = assert!(std::mem::offset_of!(TopicEntry, published) == 32);
const _: () = assert!(std::mem::offset_of!(TopicEntry, received) / 64 != std::mem::offset_of!(TopicEntry, published) / 64);
const _: () = assert!(std::mem::offset_of!(TopicEntry, name) == 64);
/// Where an entry's `corrupt` counter is.
pub(crate) const CORRUPT_OFF: usize = std::mem::offset_of!(TopicEntry, corrupt);
/// Where an entry's second copy starts.
pub(crate) const COPY2_OFF: usize = std::mem::offset_of!(TopicEntry, copy2);
const _: () = assert!(COPY2_OFF == 136 && CORRUPT_OFF == 48);

// SAFETY: `repr(C)`, atomics only; any bits are valid.
unsafe impl ShmSafe for TopicEntry {}

/// The seal over `r`'s fields is loaded first, with `Acquire`: it pairs
/// with the `Release` store of [`store`], so a reader that sees a
/// creator's seal sees the fields it covers.
macro_rules! load_copy {
    ($c:expr) => {{
        let c = $c;
        let stored = c.seal.load(Ordering::Acquire);
        let r = Record {
            partitions: c.partitions.load(Ordering::Relaxed),
            capacity: c.capacity.load(Ordering::Relaxed),
            wait: c.wait.load(Ordering::Relaxed),
            delivery: c.delivery.load(Ordering::Relaxed),
            ring_off: c.ring_off.load(Ordering::Relaxed),
            name_len: c.name_len.load(Ordering::Relaxed),
            name: std::array::from_fn(|i| c.name[i].load(Ordering::Relaxed)),
        };
        (r.seal() == stored).then_some(r)
    }};
}

macro_rules! store_copy {
    ($c:expr, $r:expr) => {{
        let (c, r): (_, &Record) = ($c, $r);
        c.partitions.store(r.partitions, Ordering::Relaxed);
        c.capacity.store(r.capacity, Ordering::Relaxed);
        c.wait.store(r.wait, Ordering::Relaxed);
        c.delivery.store(r.delivery, Ordering::Relaxed);
        c.ring_off.store(r.ring_off, Ordering::Relaxed);
        c.name_len.store(r.name_len, Ordering::Relaxed);
        for (w, v) in c.name.iter().zip(r.name) {
            w.store(v, Ordering::Relaxed);
        }
        // SYNC: pairs with the `Acquire` load of the seal in
        // `load_copy!`.
        c.seal.store(r.seal(), Ordering::Release);
    }};
}

impl TopicEntry {
    /// Free for a new topic: no copy holds a topic and the state does not
    /// say one is here (an entry whose copies are both damaged stays taken:
    /// handles opened before the damage still count in it).
    pub(crate) fn is_free(&self) -> bool {
        // SYNC: pairs with the Release store of `state` in `publish` and `repair`.
        self.state.load(Ordering::Acquire) != READY && self.record().is_none()
    }

    /// Fills the entry and marks it ready (under the region's control lock).
    pub(crate) fn publish(&self, record: &Record) {
        for c in [&self.published, &self.received, &self.corrupt, &self.lost, &self.undelivered, &self.missed] {
            c.store(0, Ordering::Relaxed);
        }
        store_copy!(self, record);
        store_copy!(&self.copy2, record);
        // SYNC: pairs with the Acquire load in `is_free`: who sees READY sees both copies.
        self.state.store(READY, Ordering::Release);
    }

    /// The fixed fields, from whichever copy's seal holds (the first copy
    /// if both do).
    pub(crate) fn record(&self) -> Option<Record> {
        load_copy!(self).or_else(|| load_copy!(&self.copy2))
    }

    /// Restores a damaged copy (and the state word) from the other one;
    /// returns how many of the entry's parts it rewrote (0: nothing was
    /// damaged, or nothing could be repaired).
    pub(crate) fn repair(&self) -> usize {
        let (first, second) = (load_copy!(self), load_copy!(&self.copy2));
        let mut fixed = 0;
        match (first, second) {
            (Some(r), None) => {
                store_copy!(&self.copy2, &r);
                fixed += 1;
            }
            (None, Some(r)) => {
                store_copy!(self, &r);
                fixed += 1;
            }
            // Two sealed copies that differ were not written by the
            // protocol (the second is written from the first): the first
            // one, written first, wins.
            (Some(a), Some(b)) if a != b => {
                store_copy!(&self.copy2, &a);
                fixed += 1;
            }
            _ => {}
        }
        if (first.is_some() || second.is_some()) && self.state.load(Ordering::Relaxed) != READY {
            // SYNC: as in `publish`.
            self.state.store(READY, Ordering::Release);
            fixed += 1;
        }
        fixed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry() -> Box<TopicEntry> {
        // SAFETY: `TopicEntry` is atomics only, for which all zeros is a
        // valid value (an empty entry).
        unsafe { Box::new(std::mem::zeroed()) }
    }

    fn words(e: &TopicEntry) -> &[AtomicU64] {
        // SAFETY: `TopicEntry` is `repr(C)`, 256 bytes of atomics with
        // 8-byte alignment and no padding; viewing it as 32 `AtomicU64`s
        // aliases only atomics with atomics.
        unsafe { std::slice::from_raw_parts((e as *const TopicEntry).cast::<AtomicU64>(), ENTRY_BYTES / 8) }
    }

    #[test]
    fn a_damaged_word_in_either_copy_is_repaired_from_the_other() {
        let want = Record::new("orders", 4, 1024, 2, 1, 4096);
        // Every word of both copies and the state; the counters (words 4
        // to 7), the second copy's padding (the high half of word 20) and
        // the tail (30, 31) are not covered and need no repair.
        let covered: Vec<usize> = (0..30).filter(|w| !(4..8).contains(w)).collect();
        for &w in &covered {
            for bit in [0, 31, 32, 63].into_iter().filter(|&b| w != 20 || b < 32) {
                let e = entry();
                e.publish(&want);
                let word = &words(&e)[w];
                word.store(word.load(Ordering::Relaxed) ^ (1 << bit), Ordering::Relaxed);
                assert_eq!(e.record(), Some(want), "word {w} bit {bit}");
                assert!(!e.is_free());
                assert!(e.repair() > 0, "word {w} bit {bit}: nothing repaired");
                assert_eq!(e.repair(), 0, "word {w} bit {bit}: repaired twice");
                assert_eq!(load_copy!(&*e), Some(want));
                assert_eq!(load_copy!(&e.copy2), Some(want));
                assert_eq!(e.record().and_then(|r| r.name()).as_deref(), Some("orders"));
            }
        }
    }

    #[test]
    fn both_copies_damaged_is_no_topic_and_an_empty_entry_is_free() {
        let e = entry();
        assert!(e.is_free());
        assert_eq!(e.record(), None);
        assert_eq!(e.repair(), 0);
        e.publish(&Record::new("t", 1, 8, 1, 0, 64));
        words(&e)[3].fetch_xor(1, Ordering::Relaxed); // first copy's name length
        words(&e)[17 + 2].fetch_xor(1, Ordering::Relaxed); // second copy's ring offset
        assert_eq!(e.record(), None);
        assert_eq!(e.repair(), 0);
        // The state still says a topic was here: not handed out again.
        assert!(!e.is_free());
    }

    /// The delivery word's group bits (no default group: bit 2) are under
    /// both seals like the rest: damage to either copy is repaired.
    #[test]
    fn the_delivery_word_s_group_bits_are_sealed_and_repaired() {
        let want = Record::new("g", 2, 64, 3, 0b101, 4096);
        for (w, bit) in [(3usize, 34u32), (18, 34), (18, 2)] {
            let e = entry();
            e.publish(&want);
            words(&e)[w].fetch_xor(1 << bit, Ordering::Relaxed);
            assert_eq!(e.record(), Some(want), "word {w} bit {bit}");
            assert_eq!(e.repair(), 1, "word {w} bit {bit}");
            assert_eq!(load_copy!(&*e), Some(want));
            assert_eq!(load_copy!(&e.copy2), Some(want));
        }
    }

    #[test]
    fn a_lost_state_word_is_restored() {
        let e = entry();
        e.publish(&Record::new("t", 1, 8, 1, 0, 64));
        e.state.store(0xdead, Ordering::Relaxed);
        assert!(!e.is_free());
        assert_eq!(e.repair(), 1);
        assert_eq!(e.state.load(Ordering::Relaxed), READY);
    }
}
