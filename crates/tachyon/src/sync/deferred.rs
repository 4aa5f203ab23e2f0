//! [`Deferred`]: one value left for later, taken exactly once.

use crate::platform::atomic::{AtomicU64, Ordering::Relaxed};

/// One non-zero `u64` left for later by a thread on a hot path, and taken
/// exactly once: by the next [`put`](Self::put) (which takes what is still
/// there before it leaves its own), or by any thread's [`take`](Self::take).
///
/// The contract: puts never overlap, and each put happens before the next
/// (the callers hold one lock for them: the RPC reader role, for the
/// round trips of `RpcStats`). Takes may come from any thread, at any
/// time. Then a put is a load and a plain store when the slot is empty,
/// which it is whenever the value before was taken in time; and every
/// value put is handed to exactly one taker: only puts store non-zero
/// values, a put stores into a slot it has just seen empty (or emptied),
/// and a taker empties the slot by a compare-and-swap from the value it
/// saw, which only one taker of that value can win. Modelled by
/// `loom_models` below.
pub(crate) struct Deferred(AtomicU64);

impl Deferred {
    pub(crate) fn new() -> Self {
        Deferred(AtomicU64::new(0))
    }

    /// Leaves `value` (not 0) for later; a value still there is taken
    /// first and handed to `take_old`.
    pub(crate) fn put(&self, value: u64, take_old: impl FnOnce(u64)) {
        debug_assert_ne!(value, 0, "0 is the empty slot");
        if let Some(old) = self.take() {
            take_old(old);
        }
        // SYNC: Relaxed: only puts store non-zero values, and the callers'
        // lock orders them; a taker's compare-and-swap reads this store or a
        // later one (coherence), and only one of them wins it.
        self.0.store(value, Relaxed);
    }

    /// Whether no value is left now (a hint: a look, no locked
    /// instruction).
    #[cfg_attr(tachyon_loom, allow(dead_code))]
    pub(crate) fn is_empty(&self) -> bool {
        self.0.load(Relaxed) == 0
    }

    /// The value left, if one is there (and the slot empty again). `None`
    /// also when a put replaced the value seen meanwhile (that put took
    /// it): the new one stays for the next taker.
    pub(crate) fn take(&self) -> Option<u64> {
        // SYNC: a look first, so that an empty slot costs no locked
        // instruction; the compare-and-swap decides (one attempt: a
        // failure means the value seen was taken by someone else). Not a
        // swap: loom lets a plain store slip between the two halves of a
        // swap (tokio-rs/loom#254), and would report a lost value that no
        // processor can lose.
        let v = self.0.load(Relaxed);
        (v != 0 && self.0.compare_exchange(v, 0, Relaxed, Relaxed).is_ok()).then_some(v)
    }
}

/// The protocol under loom (`--cfg tachyon_loom`, run by `.ci/test`).
#[cfg(all(test, tachyon_loom))]
mod loom_models {
    use super::Deferred;
    use loom::sync::{Arc, Mutex};
    use loom::thread;

    /// A putter leaves 1, 2 and 3 (each put taking what is still there)
    /// while another thread takes twice: once all are done and what is
    /// left is taken, every value was handed out exactly once.
    #[test]
    fn every_value_put_is_taken_exactly_once() {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(3);
        b.check(|| {
            let slot = Arc::new(Deferred::new());
            let taken = Arc::new(Mutex::new(Vec::new()));
            let putter = {
                let (slot, taken) = (slot.clone(), taken.clone());
                thread::spawn(move || {
                    for v in 1..=3 {
                        slot.put(v, |old| taken.lock().unwrap().push(old));
                    }
                })
            };
            let taker = {
                let (slot, taken) = (slot.clone(), taken.clone());
                thread::spawn(move || {
                    for _ in 0..2 {
                        if let Some(v) = slot.take() {
                            taken.lock().unwrap().push(v);
                        }
                    }
                })
            };
            putter.join().unwrap();
            taker.join().unwrap();
            if let Some(v) = slot.take() {
                taken.lock().unwrap().push(v);
            }
            let mut all = taken.lock().unwrap().clone();
            all.sort();
            assert_eq!(all, vec![1, 2, 3]);
        });
    }
}
