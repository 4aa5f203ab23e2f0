//! Asymmetric fences across processes, by `membarrier(2)`.
//!
//! An eventcount (`sync/wait.rs`) needs, on the notifier's side, a full
//! fence between making its condition true and looking for sleepers, and
//! the same on the sleeper's side between registering and looking at the
//! condition. On x86 that fence waits until the notifier's store buffer
//! has drained, and in a stream that buffer holds the hand-over just made,
//! whose cache line the other side is reading: the fence then costs about
//! as much as the whole message (docs/rings.md, "Light hand-overs").
//!
//! An asymmetric fence moves that cost to the rare side. The notifier
//! keeps only a compiler fence ([`light`]); the sleeper, after it
//! registers, runs [`heavy`]: `MEMBARRIER_CMD_GLOBAL_EXPEDITED`, which
//! returns only after every CPU that runs a thread of a *registered*
//! process has passed a full memory barrier (an interrupt to each; threads
//! not running are ordered by the context switch). Of the notifier's
//! program order and the sleeper's barrier, one comes first: either the
//! sleeper's look sees the condition, or the notifier's look sees the
//! registration. This is the store-buffering pattern that `membarrier`
//! exists for (liburcu, folly's `asymmetricLightBarrier`).
//!
//! A process may use the light half only once it is registered
//! ([`register`], `MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED`, Linux 4.16);
//! until then, or where the kernel or a seccomp filter refuses, it keeps
//! the full fence. Registration belongs to the address space: `exec`
//! clears it, and a forked child is not counted on to keep it: a
//! `pthread_atfork` handler makes the child use full fences until it
//! registers again (at its next open of a light ring).

#[cfg(not(tachyon_loom))]
use std::sync::atomic::{AtomicU8, Ordering};

/// `MEMBARRIER_CMD_QUERY`.
#[cfg(not(tachyon_loom))]
const CMD_QUERY: libc::c_int = 0;
/// `MEMBARRIER_CMD_GLOBAL_EXPEDITED`.
#[cfg(not(tachyon_loom))]
const CMD_GLOBAL_EXPEDITED: libc::c_int = 1 << 1;
/// `MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED`.
#[cfg(not(tachyon_loom))]
const CMD_REGISTER_GLOBAL_EXPEDITED: libc::c_int = 1 << 2;

/// This process's registration: not tried yet.
#[cfg(not(tachyon_loom))]
const UNKNOWN: u8 = 0;
/// Registered: the light half may be used.
#[cfg(not(tachyon_loom))]
const REGISTERED: u8 = 1;
/// Refused (old kernel, seccomp): full fences only.
#[cfg(not(tachyon_loom))]
const REFUSED: u8 = 2;

#[cfg(not(tachyon_loom))]
static STATE: AtomicU8 = AtomicU8::new(UNKNOWN);

#[cfg(not(tachyon_loom))]
fn membarrier(cmd: libc::c_int) -> libc::c_long {
    // SAFETY: membarrier takes two integers (cmd, flags) and touches no
    // memory of ours; flags 0.
    unsafe { libc::syscall(libc::SYS_membarrier, cmd, 0 as libc::c_int) }
}

#[cfg(not(tachyon_loom))]
extern "C" fn forget_in_child() {
    // A forked child uses full fences until it registers again: its
    // address space is a new one. Only an atomic store, as a child
    // handler must (async-signal-safe).
    STATE.store(UNKNOWN, Ordering::Relaxed);
}

/// Registers this process for the expedited global barrier, once;
/// whether it is registered (then [`light`] may stand for a full fence
/// against a sleeper that runs [`heavy`]).
#[cfg(not(tachyon_loom))]
pub(crate) fn register() -> bool {
    match STATE.load(Ordering::Acquire) {
        REGISTERED => return true,
        REFUSED => return false,
        _ => {}
    }
    static AT_FORK: std::sync::Once = std::sync::Once::new();
    AT_FORK.call_once(|| {
        // SAFETY: registers a handler that only stores to an atomic. If
        // registration fails (ENOMEM), a forked child keeps REGISTERED
        // while the kernel may not count it, and its light notifies could
        // miss a sleeper: such a sleeper looks again after at most its
        // wait's slice (`wait.rs`, HEAL_SLICE; a ring's claim, 50 ms).
        unsafe { libc::pthread_atfork(None, None, Some(forget_in_child)) };
    });
    let supported = membarrier(CMD_QUERY);
    let ok = supported >= 0
        && supported & libc::c_long::from(CMD_GLOBAL_EXPEDITED | CMD_REGISTER_GLOBAL_EXPEDITED)
            == libc::c_long::from(CMD_GLOBAL_EXPEDITED | CMD_REGISTER_GLOBAL_EXPEDITED)
        && membarrier(CMD_REGISTER_GLOBAL_EXPEDITED) == 0;
    // SYNC: a full fence after the registration: a sleeper whose barrier ran before it took
    // effect registered before that barrier, so the looks after this fence see it.
    std::sync::atomic::fence(Ordering::SeqCst);
    STATE.store(if ok { REGISTERED } else { REFUSED }, Ordering::Release);
    ok
}

/// The notifier's half: a compiler fence if this process is registered,
/// else a full fence. Orders the caller's stores before its loads against
/// any sleeper that runs [`heavy`] between its own store and load.
#[inline]
pub(crate) fn light() {
    #[cfg(not(tachyon_loom))]
    {
        if STATE.load(Ordering::Relaxed) == REGISTERED {
            std::sync::atomic::compiler_fence(Ordering::SeqCst);
            return;
        }
    }
    crate::platform::atomic::fence(crate::platform::atomic::Ordering::SeqCst);
}

/// The sleeper's half: a full fence here and on every CPU that runs a
/// registered process's thread (about 0.6 µs on a 2-vCPU virtual machine,
/// plus an interrupt to each such CPU). `false` if the kernel refused:
/// then a light notifier may miss this sleeper, and only the sleep's own
/// bound ends it.
#[inline]
pub(crate) fn heavy() -> bool {
    #[cfg(all(test, not(tachyon_loom)))]
    HEAVY_CALLS.with(|c| c.set(c.get() + 1));
    #[cfg(not(tachyon_loom))]
    {
        membarrier(CMD_GLOBAL_EXPEDITED) == 0
    }
    // Loom has no membarrier: the notifier's `light` is a full fence there.
    #[cfg(tachyon_loom)]
    {
        crate::platform::atomic::fence(crate::platform::atomic::Ordering::SeqCst);
        true
    }
}

#[cfg(all(test, not(tachyon_loom)))]
thread_local! {
    /// How often this thread ran [`heavy`] (tests of who runs it).
    static HEAVY_CALLS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// How often this thread ran [`heavy`].
#[cfg(all(test, not(tachyon_loom)))]
pub(crate) fn heavy_calls() -> u64 {
    HEAVY_CALLS.with(|c| c.get())
}

#[cfg(all(test, not(tachyon_loom)))]
mod tests {
    use super::*;

    #[test]
    fn this_kernel_registers_and_runs_the_barrier() {
        // The machines this crate is tested on run Linux 5+: both commands
        // must work there, or the light hand-overs silently fall back.
        assert!(register(), "membarrier GLOBAL_EXPEDITED refused (query: {})", membarrier(CMD_QUERY));
        assert!(register(), "registering twice");
        assert_eq!(STATE.load(Ordering::Relaxed), REGISTERED);
        assert!(heavy());
        light();
    }

    #[test]
    fn a_forked_child_registers_again() {
        assert!(register());
        // SAFETY: the child only reads an atomic, calls `register` (a
        // system call and atomics; its `Once` ran in the parent) and exits.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork");
        if pid == 0 {
            let forgot = STATE.load(Ordering::Relaxed) == UNKNOWN;
            let again = register() && STATE.load(Ordering::Relaxed) == REGISTERED;
            // SAFETY: leaves the child at once, as after any fork in a test.
            unsafe { libc::_exit(if forgot && again { 0 } else { 1 }) };
        }
        let mut status = 0;
        // SAFETY: waits for the child just forked.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "child status {status}");
    }
}
