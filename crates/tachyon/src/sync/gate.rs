//! [`Gate`]: a section that threads enter while it is open, and that a
//! closer shuts and then waits to see empty. Process-local (never in a
//! segment). The Python module keeps the interpreter behind one: threads
//! that enter Python from Rust (RPC handlers, a caller's copy with the GIL
//! taken back) pass it, and the interpreter's exit closes it and waits,
//! so that no thread enters CPython after it finalized.
//!
//! One word holds both the closed flag (its top bit) and the number of
//! threads inside. Every change is a read-modify-write of that word, so
//! all of them fall in one order: an entry counted before the close is
//! waited for, and an entry after it sees the flag and backs out. A pass
//! leaves with a release, and the closer looks with an acquire, so what a
//! thread did inside happens before the closer's wait returns (the loom
//! model below).

use crate::platform::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The top bit of the word: the gate is closed.
const CLOSED: u64 = 1 << 63;

/// A section threads enter while it is open; once closed, no thread
/// enters, and [`close_and_wait`](Self::close_and_wait) waits for those
/// inside to leave.
///
/// ```
/// use std::time::Duration;
/// use tachyon::sync::Gate;
/// static INTERPRETER: Gate = Gate::new();
/// let pass = INTERPRETER.enter().expect("open");
/// assert_eq!(INTERPRETER.inside(), 1);
/// drop(pass); // left
/// assert!(INTERPRETER.close_and_wait(Duration::from_secs(1))); // nobody inside
/// assert!(INTERPRETER.enter().is_none()); // closed for good
/// ```
#[derive(Debug)]
pub struct Gate(AtomicU64);

/// A thread inside a [`Gate`]: it leaves when the pass is dropped.
#[derive(Debug)]
#[must_use = "the thread leaves the gate when its pass is dropped"]
pub struct GatePass<'a>(&'a Gate);

impl Gate {
    super::const_new! {
        /// An open gate with nobody inside.
        pub fn new() -> Self {
            Gate(AtomicU64::new(0))
        }
    }

    /// Enters the gate: a pass while it is open, `None` once it is closed.
    pub fn enter(&self) -> Option<GatePass<'_>> {
        // SYNC: AcqRel, one read-modify-write of the word `close` marks:
        // either this entry is counted before the close (the closer waits
        // for it), or it sees the flag and backs out.
        if self.0.fetch_add(1, Ordering::AcqRel) & CLOSED != 0 {
            self.0.fetch_sub(1, Ordering::Release);
            return None;
        }
        Some(GatePass(self))
    }

    /// Closes the gate: no thread enters from now on. Those inside stay
    /// until they leave.
    pub fn close(&self) {
        // SYNC: AcqRel, in the word's one order with every entry.
        self.0.fetch_or(CLOSED, Ordering::AcqRel);
    }

    /// Whether the gate is closed.
    pub fn is_closed(&self) -> bool {
        self.0.load(Ordering::Acquire) & CLOSED != 0
    }

    /// How many threads are inside now (counting, for a moment, one that
    /// backs out of a closed gate).
    pub fn inside(&self) -> u64 {
        // SYNC: Acquire, pairs with a pass's Release when it leaves: what
        // a thread did inside happens before a look that sees it gone.
        self.0.load(Ordering::Acquire) & !CLOSED
    }

    /// Closes the gate and waits until nobody is inside, at most
    /// `timeout` (looking every millisecond); `true` if nobody is.
    pub fn close_and_wait(&self, timeout: Duration) -> bool {
        self.close();
        let deadline = Instant::now().checked_add(timeout);
        while self.inside() != 0 {
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return false;
            }
            #[cfg(tachyon_loom)]
            loom::thread::yield_now();
            #[cfg(not(tachyon_loom))]
            std::thread::sleep(Duration::from_millis(1));
        }
        true
    }
}

impl Default for Gate {
    fn default() -> Self {
        Gate::new()
    }
}

impl Drop for GatePass<'_> {
    fn drop(&mut self) {
        // SYNC: Release, pairs with `inside`'s Acquire (see there).
        self.0 .0.fetch_sub(1, Ordering::Release);
    }
}

#[cfg(all(test, not(tachyon_loom)))]
mod tests {
    use super::Gate;
    use std::time::Duration;

    #[test]
    fn a_closed_gate_lets_nobody_in_and_waits_for_those_inside() {
        let gate = Gate::new();
        let a = gate.enter().unwrap();
        let b = gate.enter().unwrap();
        assert_eq!(gate.inside(), 2);
        gate.close();
        assert!(gate.is_closed() && gate.enter().is_none());
        assert_eq!(gate.inside(), 2, "a refused entry is not counted");
        assert!(!gate.close_and_wait(Duration::from_millis(5)), "two still inside");
        drop(a);
        std::thread::scope(|s| {
            s.spawn(move || {
                std::thread::sleep(Duration::from_millis(20));
                drop(b);
            });
            assert!(gate.close_and_wait(Duration::from_secs(10)));
        });
        assert_eq!(gate.inside(), 0);
    }
}

#[cfg(all(test, tachyon_loom))]
mod loom_models {
    use super::Gate;
    use loom::cell::UnsafeCell;
    use loom::sync::Arc;

    /// Two threads each enter once and, inside, read and write a value
    /// (the interpreter); a third closes the gate, waits, and then writes
    /// the value as a finalizer would. Loom reports any access of a
    /// thread inside that is not ordered before the finalizer's: so no
    /// thread is inside once the wait returns, and what it did there is
    /// seen. A refused entry touches nothing.
    #[test]
    fn nobody_is_inside_once_the_wait_returns() {
        crate::sync::loom_model(|| {
            let gate = Arc::new(Gate::new());
            let value = Arc::new(UnsafeCell::new(0u32));
            let threads: Vec<_> = (0..2)
                .map(|_| {
                    let (gate, value) = (gate.clone(), value.clone());
                    loom::thread::spawn(move || {
                        if let Some(_pass) = gate.enter() {
                            // SAFETY: loom's cell checks that this read does
                            // not race with the finalizer's write below.
                            value.with(|v| unsafe { *v });
                            true
                        } else {
                            false
                        }
                    })
                })
                .collect();
            assert!(gate.close_and_wait(std::time::Duration::from_secs(3600)));
            // SAFETY: loom checks that no pass's read races with this write.
            value.with_mut(|v| unsafe { *v = 1 });
            assert!(gate.enter().is_none());
            for t in threads {
                t.join().unwrap();
            }
        });
    }
}
