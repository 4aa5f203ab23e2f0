//! The atomic types shared structures are built from.
//!
//! In a normal build these are `std`'s atomics, whose layout is fixed
//! (`AtomicU32` is a `u32`), so they can live in shared memory. Under
//! `--cfg tachyon_loom` they are `loom`'s, so the lock-free state machines
//! can be model-checked over heap memory.

#[cfg(tachyon_loom)]
pub use loom::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
#[cfg(not(tachyon_loom))]
pub use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

/// A hint that the caller is spinning. Under loom it lets another thread run.
#[inline]
pub fn spin_hint() {
    #[cfg(tachyon_loom)]
    loom::thread::yield_now();
    #[cfg(not(tachyon_loom))]
    std::hint::spin_loop();
}
