//! Process-shared synchronisation that lives inside segments.
//!
//! Every type here is `#[repr(C)]`, made only of atomics, valid when all
//! its bytes are zero (zeroed shared memory is a fresh, unlocked, unset
//! object), and placed in shared memory (see
//! [`Segment::get`](crate::Segment::get)). Waiting uses shared futexes; the
//! fast paths make no system call when nobody sleeps.
//!
//! * [`Event`]: auto-reset or manual-reset event;
//! * [`Mutex`]: robust mutex; a holder's death is reported to the next locker;
//! * [`RwLock`]: counted, writer-preferring, robust reader-writer lock;
//! * [`WaitPolicy`] and [`WaitCell`]: how later layers wait for a condition.
//!
//! # Robustness
//!
//! Locks record their holders as [`Token`]s (attach slot + generation) and
//! ask a [`Liveness`] — normally the [`Segment`](crate::Segment) itself —
//! whether a holder is gone. A waiter never sleeps for long: it sleeps in
//! slices growing from 1 ms to 50 ms (capped by its timeout), and between
//! slices asks whether the holder it keeps seeing is dead. A dead holder's
//! lock is taken over (or, for a dead reader, forgotten) and the guard of
//! whoever gets a lock that a dead holder may have left half-updated says
//! so with `owner_died()`.
//!
//! Every wait takes `timeout: Option<Duration>` (`None`: no limit) and
//! returns [`Error::Timeout`](crate::Error::Timeout) when it passes. A lock
//! word that cannot be right gives [`Error::Corrupt`](crate::Error::Corrupt).
//!
//! # Limits
//!
//! Tokens name attachments, not threads: threads sharing one attachment
//! exclude each other, but a thread that locks a lock it already holds
//! waits for itself until its timeout.
//!
//! Under `--cfg tachyon_loom` the types are built from loom's atomics (their
//! `new` is then not `const`, and an [`RwLock`] tracks only a few attach
//! slots), and the futex is modelled by a loom wait queue: sleepers block,
//! a lost wake-up is a loom deadlock, and a timed sleep ends early only
//! when a model calls `loom_time_passes` (after a holder dies).

// A value left for later (the RPC statistics' round trips); under loom
// only its model uses it.
#[cfg(any(not(tachyon_loom), test))]
pub(crate) mod deferred;
mod event;
#[cfg(not(tachyon_loom))]
mod event_async;
mod gate;
// The slot of the chunk a process released last (`bus/alloc.rs`); under
// loom only its model uses it.
#[cfg(any(not(tachyon_loom), test))]
pub(crate) mod hot;
mod mutex;
// The list of free chunks a process keeps (`bus/alloc.rs`); under loom
// only its model uses it.
#[cfg(any(not(tachyon_loom), test))]
pub(crate) mod owned;
// Under loom only their models use `reactor` and `waitv`.
#[cfg(any(not(tachyon_loom), test))]
pub(crate) mod reactor;
// The claim ring under CircularBuffer and the bus's partitions; under
// loom only the ring's models use it.
#[cfg(any(not(tachyon_loom), test))]
pub(crate) mod ring;
mod rwlock;
mod wait;
#[cfg(any(not(tachyon_loom), test))]
pub(crate) mod waitv;

/// A value on cache lines of its own: 128 bytes, the pair of lines an
/// x86 core's spatial prefetcher fetches together. For process-local
/// state that two threads write at every message, each its own part (a
/// chunk cache's halves), so that neither takes the other's line.
#[cfg(any(not(tachyon_loom), test))]
#[derive(Debug, Default)]
#[repr(align(128))]
pub(crate) struct Lines<T>(pub(crate) T);

#[cfg(any(not(tachyon_loom), test))]
impl<T> std::ops::Deref for Lines<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

#[cfg(any(not(tachyon_loom), test))]
impl<T> std::ops::DerefMut for Lines<T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.0
    }
}

/// Runs a loom model with at most three preemptions per path: spin-and-
/// yield loops make the full state space infinite, and three
/// preemptions find the classic interleaving bugs (for the crate's own
/// `loom_models`).
#[cfg(all(test, tachyon_loom))]
pub(crate) fn loom_model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.check(f);
}

pub use event::{Event, EventMode};
#[cfg(not(tachyon_loom))]
pub use event_async::EventWait;
pub use gate::{Gate, GatePass};
pub use mutex::{Mutex, MutexGuard};
pub use rwlock::{RwLock, RwLockReadGuard, RwLockWriteGuard, MAX_READS_PER_ATTACH};
// Attach tokens belong to the segment layer (a segment hands them out);
// locks record their holders with them, so they are re-exported here.
/// Under loom: makes every sleeper look again at what it waits out, as if
/// time had passed. A model calls it when it makes a lock holder die.
#[cfg(tachyon_loom)]
pub use crate::platform::futex::time_passes as loom_time_passes;
pub use crate::segment::{Liveness, Token, GEN_BITS, MAX_SLOTS};
pub use wait::{WaitCell, WaitPolicy};

/// Defines `new` as a `const fn`, except under loom, whose atomics have no
/// `const` constructor.
macro_rules! const_new {
    ($(#[$m:meta])* $vis:vis fn new($($a:ident: $t:ty),*) -> Self $body:block) => {
        $(#[$m])*
        #[cfg(not(tachyon_loom))]
        $vis const fn new($($a: $t),*) -> Self $body

        $(#[$m])*
        #[cfg(tachyon_loom)]
        $vis fn new($($a: $t),*) -> Self $body
    };
}
pub(crate) use const_new;

/// A fake [`Liveness`] for unit tests: attachments in one process, killed
/// on demand.
#[cfg(all(test, not(tachyon_loom)))]
pub(crate) mod testing {
    use super::{Liveness, Token};
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;

    /// Which of slots 0..64 are dead (bit per slot).
    #[derive(Debug, Clone, Default)]
    pub struct World(Arc<AtomicU64>);

    /// One attachment of the [`World`].
    #[derive(Debug, Clone)]
    pub struct Peer {
        pub token: Token,
        world: World,
    }

    impl World {
        pub fn peer(&self, slot: usize) -> Peer {
            Peer { token: Token::new(slot, 1), world: self.clone() }
        }
        pub fn kill(&self, peer: &Peer) {
            self.0.fetch_or(1 << peer.token.slot(), Ordering::SeqCst);
        }
    }

    impl Liveness for Peer {
        fn token(&self) -> Token {
            self.token
        }
        fn is_dead(&self, token: Token) -> bool {
            token.slot() < 64 && self.world.0.load(Ordering::SeqCst) & (1 << token.slot()) != 0
        }
    }
}

/// Asks the CPU to start loading the first `max_lines` cache lines of the
/// `len` bytes at `ptr` now, for reading or, if `write`, for writing: a
/// hint, with no effect on what any load returns and none on memory, so
/// `ptr` may be any address at all (a prefetch never faults).
///
/// What it is for: a line that another core wrote last takes a round trip
/// between the cores to arrive (some 100 ns on a 2-vCPU guest). A reader
/// that has just claimed an item written on another core calls it before
/// its first look at the item, so that all of the item's lines come over
/// at once rather than one after the other (the header, then, after what
/// the header decides, the payload). A writer calls it for the node it is
/// about to claim while it still has other work to do, so that the node's
/// lines, which the reader's core read last, come over meanwhile instead
/// of holding up the commit.
#[inline]
#[cfg_attr(tachyon_loom, allow(dead_code))]
pub(crate) fn prefetch(ptr: *const u8, len: usize, max_lines: usize, write: bool) {
    let write = write && prefetch_writes();
    for i in 0..len.div_ceil(64).min(max_lines) {
        prefetch_line(ptr.wrapping_add(i * 64), write);
    }
}

/// [`prefetch`] of the one line at `ptr`, for writing if `write`: for a
/// loop of them, which reads [`prefetch_writes`] once rather than at
/// every line.
#[inline(always)]
#[cfg_attr(tachyon_loom, allow(dead_code))]
pub(crate) fn prefetch_line(ptr: *const u8, write: bool) {
    #[cfg(all(target_arch = "x86_64", not(tachyon_loom)))]
    {
        if write {
            // SAFETY: PREFETCHW is a hint: it never faults, whatever the
            // address, writes no memory and changes no register or flag
            // (`readonly`: it only names `ptr`); the callers pass `write`
            // only where this processor has it (`prefetch_writes`).
            unsafe {
                std::arch::asm!("prefetchw [{0}]", in(reg) ptr, options(nostack, preserves_flags, readonly))
            };
        } else {
            // SAFETY: PREFETCHT0 is a hint of SSE, which every x86-64
            // processor has: it never faults and writes nothing.
            unsafe { std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(ptr.cast()) };
        }
    }
    #[cfg(not(all(target_arch = "x86_64", not(tachyon_loom))))]
    let _ = (ptr, write);
}

/// Whether [`prefetch_line`] may be asked for a line for writing here
/// (this processor has PREFETCHW; never off x86-64).
#[inline]
#[cfg_attr(tachyon_loom, allow(dead_code))]
pub(crate) fn prefetch_writes() -> bool {
    #[cfg(all(target_arch = "x86_64", not(tachyon_loom)))]
    return has_prefetchw();
    #[cfg(not(all(target_arch = "x86_64", not(tachyon_loom))))]
    false
}

/// Whether this processor has PREFETCHW (CPUID 0x8000_0001, ECX bit 8;
/// Intel's since Broadwell, AMD's), read once.
#[cfg(all(target_arch = "x86_64", not(tachyon_loom)))]
fn has_prefetchw() -> bool {
    use std::sync::atomic::{AtomicU8, Ordering::Relaxed};
    static HAS: AtomicU8 = AtomicU8::new(0); // 0: not read yet, 1: no, 2: yes
    match HAS.load(Relaxed) {
        0 => {
            let has = (std::arch::x86_64::__cpuid(0x8000_0001).ecx >> 8) & 1 == 1;
            HAS.store(if has { 2 } else { 1 }, Relaxed);
            has
        }
        v => v == 2,
    }
}

#[cfg(all(test, not(tachyon_loom)))]
mod prefetch_tests {
    use super::prefetch;

    #[test]
    fn a_prefetch_never_faults_whatever_the_address() {
        // Null, the last page of the address space, a kernel address, an
        // unmapped page just freed: a hint that faulted would kill the test.
        let freed = {
            let v = vec![0u8; 1 << 20];
            v.as_ptr() as usize
        };
        for addr in [0usize, usize::MAX - 63, 0xffff_8000_0000_0000, freed, 64] {
            for write in [false, true] {
                prefetch(addr as *const u8, 1 << 20, 16, write);
            }
        }
    }
}
