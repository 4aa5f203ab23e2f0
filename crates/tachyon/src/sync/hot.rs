//! A slot that holds at most one `u32` and hands it over without a lock:
//! the chunk a thread of the process released last, kept where that
//! thread's next loan finds it (`bus/alloc.rs`, `ChunkCache`), so that a
//! thread that receives and sends in turn (a ping-pong, a pipeline stage)
//! reuses it with one atomic exchange instead of a lock and an unlock.
//!
//! Process-local memory (never in a segment): the value is a chunk index
//! that the slot *owns* while it holds it. [`put`](HotSlot::put) moves a
//! value in only if the slot is empty (a compare-and-swap from empty), and
//! [`take`](HotSlot::take) moves it out by a compare-and-swap to empty, so
//! a value put once comes out once, to exactly one taker, whatever the
//! threads do at the same time (the loom model below).
//!
//! The slot remembers which thread put its value, and
//! [`take`](HotSlot::take) gives it only to that thread. A value another
//! thread put is one that thread's core has just read: in a stream between
//! two threads of one process, the producer's loans would take, at every
//! message, the chunk its consumer had just released, and wait for each
//! of its lines to come back from the consumer's core (2.1 – 2.5 M msgs/s
//! at 1 KiB on the Intel Xeon guest, against 7.2 – 7.5 across processes;
//! docs/benchmark-history.md, "a hot chunk for the thread that released
//! it"). Such a loan takes from the cache's list instead, whose next
//! chunk it asks for ahead.

use crate::platform::atomic::{AtomicU64, Ordering};

/// What the slot holds when it holds nothing (values are stored plus one).
const EMPTY: u64 = 0;

/// At most one value below `u32::MAX`, with the thread that put it (the
/// high half: its number, [`crate::sync::owned::thread_number`], cut to 32
/// bits), moved in and out atomically.
#[derive(Debug)]
pub(crate) struct HotSlot(AtomicU64);

impl HotSlot {
    crate::sync::const_new! {
        /// An empty slot.
        pub(crate) fn new() -> Self {
            HotSlot(AtomicU64::new(EMPTY))
        }
    }

    /// Moves `value` (below `u32::MAX`), put by thread `me`, into the slot
    /// if it is empty; `false`, the slot unchanged and `value` still the
    /// caller's, if it holds one already.
    #[inline]
    pub(crate) fn put(&self, value: u32, me: u32) -> bool {
        debug_assert!(value < u32::MAX);
        let word = (u64::from(me) << 32) | u64::from(value + 1);
        // A plain look first: a full slot costs no locked instruction.
        // SYNC: Release pairs with the Acquire CAS of `take`: what the caller
        // wrote about the value before putting it is seen by its taker.
        self.0.load(Ordering::Relaxed) == EMPTY
            && self.0.compare_exchange(EMPTY, word, Ordering::Release, Ordering::Relaxed).is_ok()
    }

    /// Moves the value out of the slot if it holds one that thread `me`
    /// put (`None` for any other thread: the value stays).
    #[inline]
    pub(crate) fn take(&self, me: u32) -> Option<u32> {
        // A plain look first: an empty slot, or another thread's value,
        // costs no locked instruction.
        let word = self.0.load(Ordering::Relaxed);
        if word == EMPTY || (word >> 32) as u32 != me {
            return None;
        }
        // SYNC: Acquire pairs with the Release CAS of `put`. A CAS from the
        // word seen: only `me` puts values tagged `me`, and only the one
        // taker whose CAS succeeds moves this one out.
        match self.0.compare_exchange(word, EMPTY, Ordering::Acquire, Ordering::Relaxed) {
            Ok(_) => Some(word as u32 - 1),
            Err(_) => None,
        }
    }

    /// Moves the value out of the slot, whoever put it (the cache is being
    /// emptied).
    pub(crate) fn take_any(&self) -> Option<u32> {
        // SYNC: Acquire pairs with the Release CAS of `put`.
        match self.0.swap(EMPTY, Ordering::Acquire) {
            EMPTY => None,
            word => Some(word as u32 - 1),
        }
    }
}

#[cfg(all(test, not(tachyon_loom)))]
mod tests {
    use super::HotSlot;

    #[test]
    fn a_value_put_comes_out_once_and_a_full_slot_refuses() {
        let slot = HotSlot::new();
        assert_eq!(slot.take(1), None);
        assert!(slot.put(0, 1), "0 is a value, not the empty mark");
        assert!(!slot.put(7, 1), "full: the second value stays the caller's");
        assert_eq!(slot.take(1), Some(0));
        assert_eq!(slot.take(1), None);
        assert!(slot.put(u32::MAX - 1, u32::MAX));
        assert_eq!(slot.take(u32::MAX), Some(u32::MAX - 1));
    }

    /// A value goes only to the thread that put it; emptying the slot
    /// takes it whoever put it.
    #[test]
    fn a_value_goes_back_to_its_putter_only() {
        let slot = HotSlot::new();
        assert!(slot.put(5, 2));
        assert_eq!(slot.take(3), None, "another thread's value stays");
        assert!(!slot.put(6, 3), "and keeps the slot full");
        assert_eq!(slot.take(2), Some(5));
        assert!(slot.put(6, 3));
        assert_eq!(slot.take_any(), Some(6));
        assert_eq!(slot.take_any(), None);
    }
}

#[cfg(all(test, tachyon_loom))]
mod loom_models {
    use super::HotSlot;
    use loom::sync::Arc;

    /// Two threads each put a value of their own and then take (as
    /// themselves, or as the other thread); the main thread empties the
    /// slot. Every value put is taken exactly once, only by its putter or
    /// by the emptying, a value refused stays its putter's, and nothing
    /// else comes out.
    #[test]
    fn every_value_put_is_taken_exactly_once() {
        for cross in [false, true] {
            loom::model(move || {
                let slot = Arc::new(HotSlot::new());
                let handles: Vec<_> = (0..2u32)
                    .map(|v| {
                        let slot = slot.clone();
                        loom::thread::spawn(move || {
                            let kept = slot.put(v, v + 1);
                            let taker = if cross { 2 - v } else { v + 1 };
                            let got = slot.take(taker);
                            (v, kept, got, taker)
                        })
                    })
                    .collect();
                let mut out = Vec::new();
                let mut put = Vec::new();
                for h in handles {
                    let (v, kept, got, taker) = h.join().unwrap();
                    if kept {
                        put.push(v);
                    }
                    if let Some(g) = got {
                        assert_eq!(g + 1, taker, "a value went to a thread that did not put it");
                    }
                    out.extend(got);
                }
                out.extend(slot.take_any());
                out.sort_unstable();
                put.sort_unstable();
                assert_eq!(out, put);
                assert_eq!(slot.take_any(), None);
            });
        }
    }
}
