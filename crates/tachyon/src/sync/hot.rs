//! A slot that holds at most one `u32` and hands it over without a lock:
//! the chunk a process released last, kept where its next loan finds it
//! (`bus/alloc.rs`, `ChunkCache`), so that a process that receives and
//! sends in turn (a ping-pong, a pipeline stage) reuses it with one atomic
//! exchange instead of a lock and an unlock.
//!
//! Process-local memory (never in a segment): the value is a chunk index
//! that the slot *owns* while it holds it. [`put`](HotSlot::put) moves a
//! value in only if the slot is empty (a compare-and-swap from empty), and
//! [`take`](HotSlot::take) moves it out by an exchange with empty, so a
//! value put once comes out once, to exactly one taker, whatever the
//! threads do at the same time (the loom model below).

use crate::platform::atomic::{AtomicU32, Ordering};

/// What the slot holds when it holds nothing (values are stored plus one).
const EMPTY: u32 = 0;

/// At most one value below `u32::MAX`, moved in and out atomically.
#[derive(Debug)]
pub(crate) struct HotSlot(AtomicU32);

impl HotSlot {
    crate::sync::const_new! {
        /// An empty slot.
        pub(crate) fn new() -> Self {
            HotSlot(AtomicU32::new(EMPTY))
        }
    }

    /// Moves `value` (below `u32::MAX`) into the slot if it is empty;
    /// `false`, the slot unchanged and `value` still the caller's, if it
    /// holds one already.
    #[inline]
    pub(crate) fn put(&self, value: u32) -> bool {
        debug_assert!(value < u32::MAX);
        // A plain look first: a full slot costs no locked instruction.
        // SYNC: Release pairs with the Acquire exchange of `take`: what the caller
        // wrote about the value before putting it is seen by its taker.
        self.0.load(Ordering::Relaxed) == EMPTY
            && self.0.compare_exchange(EMPTY, value + 1, Ordering::Release, Ordering::Relaxed).is_ok()
    }

    /// Moves the value out of the slot, if it holds one.
    #[inline]
    pub(crate) fn take(&self) -> Option<u32> {
        // A plain look first: an empty slot costs no locked instruction.
        if self.0.load(Ordering::Relaxed) == EMPTY {
            return None;
        }
        // SYNC: Acquire pairs with the Release CAS of `put`.
        match self.0.swap(EMPTY, Ordering::Acquire) {
            EMPTY => None,
            v => Some(v - 1),
        }
    }
}

#[cfg(all(test, not(tachyon_loom)))]
mod tests {
    use super::HotSlot;

    #[test]
    fn a_value_put_comes_out_once_and_a_full_slot_refuses() {
        let slot = HotSlot::new();
        assert_eq!(slot.take(), None);
        assert!(slot.put(0), "0 is a value, not the empty mark");
        assert!(!slot.put(7), "full: the second value stays the caller's");
        assert_eq!(slot.take(), Some(0));
        assert_eq!(slot.take(), None);
        assert!(slot.put(u32::MAX - 1));
        assert_eq!(slot.take(), Some(u32::MAX - 1));
    }
}

#[cfg(all(test, tachyon_loom))]
mod loom_models {
    use super::HotSlot;
    use loom::sync::Arc;

    /// Two threads each put a value of their own and then take; the main
    /// thread takes what is left. Every value put is taken exactly once,
    /// a value refused stays its putter's, and nothing else comes out.
    #[test]
    fn every_value_put_is_taken_exactly_once() {
        loom::model(|| {
            let slot = Arc::new(HotSlot::new());
            let handles: Vec<_> = (0..2u32)
                .map(|v| {
                    let slot = slot.clone();
                    loom::thread::spawn(move || {
                        let kept = slot.put(v);
                        let got = slot.take();
                        (v, kept, got)
                    })
                })
                .collect();
            let mut out = Vec::new();
            let mut put = Vec::new();
            for h in handles {
                let (v, kept, got) = h.join().unwrap();
                if kept {
                    put.push(v);
                }
                out.extend(got);
            }
            out.extend(slot.take());
            out.sort_unstable();
            put.sort_unstable();
            assert_eq!(out, put);
            assert_eq!(slot.take(), None);
        });
    }
}
