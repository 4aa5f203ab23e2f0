//! Named shared-memory segments.
//!
//! A segment is a file in `/dev/shm` (see [`name`]) mapped by every process
//! that uses it. It starts with a versioned header (magic, layout version,
//! [`Kind`], sizes, creator) and a table of attach slots, one per open
//! handle; the caller's bytes follow, page-aligned.
//!
//! Lifetime: each open handle holds an OFD lock on the byte of its attach
//! slot, which the kernel drops when the process dies however it dies. When
//! the last handle closes (or the process exits normally) the file is
//! removed. A file whose attachers all died (SIGKILL) is *stale*: the next
//! `create` of its name removes it and succeeds, the next `open` removes it
//! and returns [`Error::NotFound`](crate::Error::NotFound). A segment with a
//! live attacher is never removed by tachyon except by an explicit
//! [`Segment::remove`].

mod kind;
pub mod name;
mod token;

pub use kind::Kind;
pub use token::{Liveness, Token, GEN_BITS, MAX_SLOTS};

crate::without_loom! {
    pub(crate) mod seal;
    mod attach;
    mod builder;
    mod handle;
    mod header;
    mod human;
    mod lifecycle;
    mod list;
    mod registry;

    #[cfg(feature = "signals")]
    mod termination;

    pub use builder::SegmentBuilder;
    pub use handle::Segment;
    pub use lifecycle::reap;
    pub use list::{list, AttacherInfo, SegmentInfo, SegmentStatus};
    #[cfg(feature = "signals")]
    pub use termination::cleanup_on_termination;
}

/// Types that may be placed in shared memory and used through `&T` by
/// several processes at once.
///
/// # Safety
///
/// An implementor must be `#[repr(C)]` (or a primitive atomic), have no
/// padding that matters, no pointers and no `Drop`; every bit pattern,
/// including all zeros, must be a valid value; and all mutation through
/// `&T` must go through atomics, because another process may change the
/// bytes at any time.
pub unsafe trait ShmSafe: Sync {}

// SAFETY: atomics are plain integers in memory; every bit pattern is valid
// and all access is atomic.
unsafe impl ShmSafe for std::sync::atomic::AtomicU32 {}
// SAFETY: as for AtomicU32.
unsafe impl ShmSafe for std::sync::atomic::AtomicU64 {}
// SAFETY: as for AtomicU32.
unsafe impl ShmSafe for std::sync::atomic::AtomicU8 {}
// SAFETY: as for AtomicU32.
unsafe impl ShmSafe for std::sync::atomic::AtomicUsize {}
// SAFETY: an array of ShmSafe values is itself valid for any bits and only
// mutated atomically; `[T; N]` has no padding between elements.
unsafe impl<T: ShmSafe, const N: usize> ShmSafe for [T; N] {}
