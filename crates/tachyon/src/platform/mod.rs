//! Platform layer: the few Linux calls tachyon needs, as thin typed wrappers.
//!
//! * [`atomic`]: the atomics every shared structure is made of (swapped for
//!   `loom`'s under `--cfg tachyon_loom`);
//! * [`futex`]: process-shared futex wait and wake;
//! * [`process`]: the identity of a process (pid and start time);
//! * `fs`: files in the shared-memory directory, mappings and the OFD
//!   byte-range locks that tell whether an attacher is alive;
//! * `fault`: fault injection points for the crash tests (debug builds);
//! * `trace`: `tracing` events behind the `tracing` feature;
//! * `clock`: the clock of RPC calls (the TSC where it can be trusted);
//! * `membarrier`: asymmetric fences across processes (light hand-overs);
//! * [`copy`]: the copies of message bytes, around a `memcpy` that runs
//!   ten times slower at some distances between source and destination.

#[cfg(not(tachyon_loom))]
pub(crate) mod alarm;
pub mod atomic;
#[cfg(not(tachyon_loom))]
pub(crate) mod clock;
pub mod copy;
pub(crate) mod fault;
#[cfg(not(tachyon_loom))]
pub(crate) mod fs;
pub mod futex;
pub(crate) mod membarrier;
pub mod process;
pub(crate) mod trace;

/// The time since an arbitrary start by `CLOCK_MONOTONIC_COARSE`: the
/// kernel's time as of its last tick, read from the vDSO (about 5 ns, where
/// a precise clock read costs 20 – 40 ns on a virtual machine), at the
/// tick's resolution (1 – 10 ms). For chores that run every tens of
/// milliseconds and look whether one is due at every turn of a busy loop.
#[cfg(not(tachyon_loom))]
pub(crate) fn coarse_now() -> std::time::Duration {
    match clock(libc::CLOCK_MONOTONIC_COARSE) {
        // The kernel keeps `tv_nsec` in 0..1e9 and `tv_sec` non-negative.
        Some(t) => std::time::Duration::new(
            u64::try_from(t.tv_sec).unwrap_or(0),
            u32::try_from(t.tv_nsec).unwrap_or(0),
        ),
        None => {
            // Not on this kernel: the precise clock, as a duration since a
            // fixed instant of this process.
            static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
            START.get_or_init(std::time::Instant::now).elapsed()
        }
    }
}

/// The instant `t` from now, or `None` (no deadline: wait for ever) if
/// `t` is too long to add to it, as `Duration::MAX` is: a caller's
/// "for ever" spelled as a very long timeout waits for ever, where
/// `Instant + Duration` would panic.
#[cfg(not(tachyon_loom))]
pub(crate) fn deadline_after(t: std::time::Duration) -> Option<std::time::Instant> {
    std::time::Instant::now().checked_add(t)
}

/// `clock_gettime(id)` through the C library (`None` if the kernel has no
/// such clock). Not through rustix: its own vDSO lookup faults under
/// valgrind (at this writing), where the C library's works, and a program
/// that uses tachyon must stay debuggable.
#[cfg(not(tachyon_loom))]
pub(crate) fn clock(id: libc::clockid_t) -> Option<libc::timespec> {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `t` is a valid, writable `timespec` for the call's duration;
    // an unknown clock id is an error return, not undefined behaviour.
    let r = unsafe { libc::clock_gettime(id, &mut t) };
    (r == 0).then_some(t)
}
