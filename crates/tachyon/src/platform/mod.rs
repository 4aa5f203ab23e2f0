//! Platform layer: the few Linux calls tachyon needs, as thin typed wrappers.
//!
//! * [`atomic`]: the atomics every shared structure is made of (swapped for
//!   `loom`'s under `--cfg tachyon_loom`);
//! * [`futex`]: process-shared futex wait and wake;
//! * [`process`]: the identity of a process (pid and start time);
//! * `fs`: files in the shared-memory directory, mappings and the OFD
//!   byte-range locks that tell whether an attacher is alive;
//! * `fault`: fault injection points for the crash tests (debug builds);
//! * `trace`: `tracing` events behind the `tracing` feature.

#[cfg(not(tachyon_loom))]
pub(crate) mod alarm;
pub mod atomic;
pub(crate) mod fault;
#[cfg(not(tachyon_loom))]
pub(crate) mod fs;
pub mod futex;
pub mod process;
pub(crate) mod trace;
