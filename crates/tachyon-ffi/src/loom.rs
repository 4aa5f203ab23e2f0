//! The one switch to loom: the lock-free tables ([`crate::table`]) import
//! their atomics, cells and locks from here. In a normal build they are
//! `std`'s; under `--cfg tachyon_loom` they are `loom`'s, so the tables can
//! be model-checked (`cargo test -p tachyon-ffi --release --lib -- loom`
//! with `RUSTFLAGS="--cfg tachyon_loom"`).

#[cfg(tachyon_loom)]
pub(crate) use loom::{
    cell::UnsafeCell,
    sync::atomic::{AtomicU64, AtomicUsize, Ordering},
    sync::Mutex,
};
#[cfg(not(tachyon_loom))]
pub(crate) use std::sync::{
    atomic::{AtomicU64, AtomicUsize, Ordering},
    Mutex,
};

/// `std`'s `UnsafeCell` with loom's interface (`with_mut`), so that the
/// same code runs in both builds (as in tokio's `loom/std/unsafe_cell.rs`).
#[cfg(not(tachyon_loom))]
#[derive(Debug)]
pub(crate) struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

#[cfg(not(tachyon_loom))]
impl<T> UnsafeCell<T> {
    pub(crate) const fn new(value: T) -> Self {
        UnsafeCell(std::cell::UnsafeCell::new(value))
    }

    /// Runs `f` with a raw pointer to the contents; the caller of the
    /// pointer ensures exclusive access (loom checks it in its build).
    #[inline(always)]
    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
}
