//! Process-shared futex wait and wake.
//!
//! The futex word lives in shared memory, so the calls never use
//! `FUTEX_PRIVATE_FLAG`: a waiter in one process is woken by a waker in
//! another. Under `--cfg tachyon_loom` a wait is modelled as a spurious
//! wake-up (a yield), which every caller must tolerate anyway.

use super::atomic::AtomicU32;
use std::time::Duration;

/// How a [`wait`] ended. Every outcome may be spurious; callers re-check
/// their condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wake {
    /// Woken by [`wake`], a signal, or because the word no longer held the
    /// expected value.
    Woken,
    /// The timeout passed.
    TimedOut,
}

/// Sleeps while `*word == expected`, for at most `timeout` (`None`: no limit).
#[cfg(not(tachyon_loom))]
pub fn wait(word: &AtomicU32, expected: u32, timeout: Option<Duration>) -> Wake {
    use rustix::thread::futex;
    let ts = timeout.map(|t| futex::Timespec {
        tv_sec: t.as_secs().min(i64::MAX as u64) as i64,
        tv_nsec: i64::from(t.subsec_nanos()),
    });
    match futex::wait(word, futex::Flags::empty(), expected, ts.as_ref()) {
        Err(rustix::io::Errno::TIMEDOUT) => Wake::TimedOut,
        // EAGAIN (value changed), EINTR (signal) and success all mean: look again.
        _ => Wake::Woken,
    }
}

/// Wakes up to `count` waiters sleeping on `word`; returns how many woke.
#[cfg(not(tachyon_loom))]
pub fn wake(word: &AtomicU32, count: u32) -> usize {
    use rustix::thread::futex;
    let count = count.min(i32::MAX as u32);
    futex::wake(word, futex::Flags::empty(), count).unwrap_or(0)
}

/// Loom model of a futex wait: a yield, reported as a spurious wake-up.
#[cfg(tachyon_loom)]
pub fn wait(_word: &AtomicU32, _expected: u32, timeout: Option<Duration>) -> Wake {
    loom::thread::yield_now();
    if timeout.is_some_and(|t| t.is_zero()) {
        Wake::TimedOut
    } else {
        Wake::Woken
    }
}

/// Loom model of a futex wake: waiters poll, so there is nothing to do.
#[cfg(tachyon_loom)]
pub fn wake(_word: &AtomicU32, _count: u32) -> usize {
    0
}

/// Wakes every waiter sleeping on `word`.
pub fn wake_all(word: &AtomicU32) -> usize {
    wake(word, u32::MAX)
}

/// Most words one [`wait_any`] can sleep on (the kernel's `FUTEX_WAITV_MAX`).
pub const WAITV_MAX: usize = 128;

/// Sleeps while every `words[i].0 == words[i].1`, for at most `timeout`
/// (`None`: no limit): one `futex_waitv` (Linux 5.16+), woken by a
/// [`wake`] on any of the words. At most [`WAITV_MAX`] words (more are an
/// `InvalidArgument` from the kernel, reported here as a spurious wake-up
/// after a sleep on the first [`WAITV_MAX`]). Every outcome may be
/// spurious; callers re-check their condition.
#[cfg(not(tachyon_loom))]
pub fn wait_any(words: &[(&AtomicU32, u32)], timeout: Option<Duration>) -> Wake {
    let mut addrs = [(std::ptr::null::<AtomicU32>(), 0u32); WAITV_MAX];
    for (a, (w, v)) in addrs.iter_mut().zip(words) {
        *a = (*w as *const AtomicU32, *v);
    }
    wait_any_at(&addrs[..words.len().min(WAITV_MAX)], timeout)
}

/// [`wait_any`] on word addresses, which need not be mapped any more: the
/// kernel only compares and queues on them (an unmapped address is an
/// `EFAULT`, reported as a spurious wake-up). For a waiter that cannot
/// keep the words' mappings alive across the call (the async waiter
/// thread). No reference to the words is formed.
#[cfg(not(tachyon_loom))]
pub(crate) fn wait_any_at(words: &[(*const AtomicU32, u32)], timeout: Option<Duration>) -> Wake {
    use rustix::thread::futex;
    use rustix::time::{clock_gettime, ClockId};
    let words = &words[..words.len().min(WAITV_MAX)];
    if words.is_empty() {
        return Wake::Woken;
    }
    let mut waiters = [futex::Wait::new(); WAITV_MAX];
    for (w, (word, expected)) in waiters.iter_mut().zip(words) {
        w.val = u64::from(*expected);
        w.uaddr = futex::WaitPtr::new(word.cast_mut().cast());
        // Shared (no FUTEX2_PRIVATE): woken by `wake`, which is shared too.
        w.flags = futex::WaitFlags::SIZE_U32;
    }
    // futex_waitv takes an absolute CLOCK_MONOTONIC deadline.
    let deadline = timeout.and_then(|t| {
        let now = clock_gettime(ClockId::Monotonic);
        let nanos = i64::try_from(t.as_nanos()).ok()?.checked_add(now.tv_nsec)?;
        let secs = now.tv_sec.checked_add(nanos / 1_000_000_000)?;
        Some(futex::Timespec { tv_sec: secs, tv_nsec: nanos % 1_000_000_000 })
    });
    match futex::waitv(
        &waiters[..words.len()],
        futex::WaitvFlags::empty(),
        deadline.as_ref(),
        ClockId::Monotonic,
    ) {
        Err(rustix::io::Errno::TIMEDOUT) => Wake::TimedOut,
        // EAGAIN (a value changed), EINTR, EFAULT and success: look again.
        _ => Wake::Woken,
    }
}

/// Loom model of [`wait_any`]: a yield, reported as a spurious wake-up.
#[cfg(tachyon_loom)]
pub fn wait_any(_words: &[(&AtomicU32, u32)], _timeout: Option<Duration>) -> Wake {
    loom::thread::yield_now();
    Wake::Woken
}
