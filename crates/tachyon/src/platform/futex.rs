//! Process-shared futex wait and wake.
//!
//! The futex word lives in shared memory, so the calls never use
//! `FUTEX_PRIVATE_FLAG`: a waiter in one process is woken by a waker in
//! another.
//!
//! Under `--cfg tachyon_loom` the same functions are a model (`model`
//! below): a wait queue under a loom mutex, so that sleepers block (rather
//! than poll, which would explode the state space) and a lost wake-up
//! shows up as a loom deadlock. With `platform/atomic.rs` this is the one
//! place where the real machine and loom's model part: the layers above
//! call the same functions either way.

use super::atomic::AtomicU32;
use std::time::{Duration, Instant};

#[cfg(tachyon_loom)]
pub use model::time_passes;
#[cfg(tachyon_loom)]
pub(crate) use model::{sleep, sleep_from, wake};
// Under loom only the models of waiting on several words use these.
#[cfg(all(tachyon_loom, test))]
pub(crate) use model::{wait_any, wait_any_at};

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
    use rustix::time::ClockId;
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
    // futex_waitv takes an absolute CLOCK_MONOTONIC deadline (read
    // through the C library: see `platform::clock`).
    let deadline = timeout.and_then(|t| {
        // (CLOCK_MONOTONIC does not fail; if it did, a deadline long past
        // makes this a look, not a wait that never ends.)
        let now =
            crate::platform::clock(libc::CLOCK_MONOTONIC).unwrap_or(libc::timespec { tv_sec: 0, tv_nsec: 0 });
        let nanos = i64::try_from(t.as_nanos()).ok()?.checked_add(now.tv_nsec)?;
        let secs = now.tv_sec.checked_add(nanos / 1_000_000_000)?;
        Some(futex::Timespec { tv_sec: secs, tv_nsec: nanos % 1_000_000_000 })
    });
    if NO_WAITV.load(std::sync::atomic::Ordering::Relaxed) {
        return wait_first_for_a_slice(words, timeout);
    }
    match futex::waitv(
        &waiters[..words.len()],
        futex::WaitvFlags::empty(),
        deadline.as_ref(),
        ClockId::Monotonic,
    ) {
        Err(rustix::io::Errno::TIMEDOUT) => Wake::TimedOut,
        Err(rustix::io::Errno::NOSYS) => {
            // A kernel older than 5.16 (or valgrind): from now on, the
            // fallback. Returning at once instead would have every caller
            // spin, burning its CPU for as long as it waits.
            NO_WAITV.store(true, std::sync::atomic::Ordering::Relaxed);
            wait_first_for_a_slice(words, timeout)
        }
        // EAGAIN (a value changed), EINTR, EFAULT and success: look again.
        _ => Wake::Woken,
    }
}

/// Set once `futex_waitv` said `ENOSYS`: [`wait_any_at`] then sleeps on
/// its first word for a [`WAITV_FALLBACK_SLICE`] at a time.
#[cfg(not(tachyon_loom))]
static NO_WAITV: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// On a kernel without `futex_waitv` (before Linux 5.16, and under
/// valgrind), the longest [`wait_any`] sleeps before it returns (as a
/// spurious wake-up) so that its caller looks at every word again: a
/// notify of the first word ends the sleep at once, one of the others is
/// seen within this long.
pub const WAITV_FALLBACK_SLICE: Duration = Duration::from_millis(1);

/// [`wait_any_at`] without `futex_waitv`: one `FUTEX_WAIT` on the first
/// word, for [`WAITV_FALLBACK_SLICE`] at most (or `timeout`, if shorter:
/// then its end is the timeout's).
#[cfg(not(tachyon_loom))]
fn wait_first_for_a_slice(words: &[(*const AtomicU32, u32)], timeout: Option<Duration>) -> Wake {
    let Some(&(word, expected)) = words.first() else { return Wake::Woken };
    let slice = timeout.map_or(WAITV_FALLBACK_SLICE, |t| t.min(WAITV_FALLBACK_SLICE));
    // (At most a slice, well under a second.)
    let ts = libc::timespec {
        tv_sec: slice.as_secs() as libc::time_t,
        tv_nsec: slice.subsec_nanos() as libc::c_long,
    };
    // SAFETY: FUTEX_WAIT only compares the word at `word` with `expected`
    // and queues on its address; the kernel reads it with a fault-safe
    // access (an unmapped address is EFAULT, not a signal), so no
    // reference to it is formed here and none needs to be valid (see
    // `wait_any_at`). `ts` outlives the call; the last two arguments are
    // unused by FUTEX_WAIT. Shared (no FUTEX_PRIVATE_FLAG), as `wake` is.
    let r = unsafe {
        libc::syscall(
            libc::SYS_futex,
            word,
            libc::FUTEX_WAIT,
            expected,
            &ts as *const libc::timespec,
            0usize,
            0u32,
        )
    };
    let timed_out = r == -1 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ETIMEDOUT);
    if timed_out && timeout.is_some_and(|t| t <= WAITV_FALLBACK_SLICE) {
        Wake::TimedOut
    } else {
        Wake::Woken
    }
}

/// Sleeps on `word` while it holds `expected`, for at most `timeout`
/// (`None`: no limit). May return early for any reason.
///
/// `holder_gone` tells the loom model what the caller waits out: a lock
/// waiter's slice elapses (in the model: ends) only to let it see that the
/// holder died. The real futex ignores it.
///
/// A timeout of [`MIN_ALARM`](super::alarm::MIN_ALARM) or more is
/// not given to the kernel: the sleep registers its deadline with the
/// process's alarm thread and sleeps without a kernel timer, which would
/// cost every wake-up its cancellation (see `platform::alarm`).
#[cfg(not(tachyon_loom))]
pub(crate) fn sleep(
    word: &AtomicU32,
    expected: u32,
    timeout: Option<Duration>,
    _holder_gone: &dyn Fn() -> bool,
) -> Wake {
    match sleep_alarmed(word, expected, None, timeout) {
        Some(Some(deadline)) if Instant::now() >= deadline => Wake::TimedOut,
        Some(_) => Wake::Woken,
        None => wait(word, expected, timeout),
    }
}

/// [`sleep`] for a caller that read the clock a moment ago (`now`, from
/// which `timeout` counts) and looks at its own condition, then at the
/// clock only if it must, when this returns: it reads no clock itself
/// (a clock read is about 30 ns on a VM, on the path of every wake-up)
/// and does not say why it returned.
#[cfg(not(tachyon_loom))]
pub(crate) fn sleep_from(
    word: &AtomicU32,
    expected: u32,
    now: Instant,
    timeout: Option<Duration>,
    _holder_gone: &dyn Fn() -> bool,
) {
    if sleep_alarmed(word, expected, Some(now), timeout).is_none() {
        wait(word, expected, timeout);
    }
}

/// The sleep of [`sleep`] and [`sleep_from`] with its deadline given to
/// the alarm thread, counted from `now` (or from a clock read here).
/// `Some` once slept: of the deadline, or of `None` for a timeout too
/// large to have one (slept without a limit). `None`, not slept, for no
/// timeout, one shorter than an alarm is worth, or no alarm thread: the
/// caller sleeps with the kernel's timer.
#[cfg(not(tachyon_loom))]
fn sleep_alarmed(
    word: &AtomicU32,
    expected: u32,
    now: Option<Instant>,
    timeout: Option<Duration>,
) -> Option<Option<Instant>> {
    use super::alarm;
    let t = timeout.filter(|t| *t >= alarm::MIN_ALARM)?;
    let Some(deadline) = now.unwrap_or_else(Instant::now).checked_add(t) else {
        wait(word, expected, None);
        return Some(None);
    };
    let armed = alarm::arm(deadline, word)?;
    wait(word, expected, None);
    drop(armed);
    Some(Some(deadline))
}

/// A futex for loom: a wait queue under a loom mutex, so sleepers block
/// (rather than poll, which would explode the state space) and a lost
/// wake-up shows up as a loom deadlock. Time does not exist: a sleep ends
/// when woken, or, as a timeout, when its `holder_gone` says the holder it
/// waits out is dead (looked at on entry and whenever time passes).
#[cfg(tachyon_loom)]
mod model {
    use super::*;
    use crate::platform::atomic::Ordering::Relaxed;
    use loom::sync::{Condvar, Mutex};

    #[derive(Default)]
    struct Queue {
        /// (word address, sleeper id)
        sleeping: Vec<(usize, u64)>,
        /// Sleepers taken off the queue by time passing, not by a wake.
        timed_out: Vec<u64>,
        next_id: u64,
    }

    #[derive(Default)]
    struct Futex {
        queue: Mutex<Queue>,
        changed: Condvar,
    }

    loom::lazy_static! {
        static ref FUTEX: Futex = Futex::default();
    }

    pub(crate) fn sleep(
        word: &AtomicU32,
        expected: u32,
        _timeout: Option<Duration>,
        holder_gone: &dyn Fn() -> bool,
    ) -> Wake {
        let addr = word as *const AtomicU32 as usize;
        let mut q = FUTEX.queue.lock().unwrap();
        loop {
            if holder_gone() {
                return Wake::TimedOut;
            }
            if word.load(Relaxed) != expected {
                return Wake::Woken;
            }
            let id = q.next_id;
            q.next_id += 1;
            q.sleeping.push((addr, id));
            while q.sleeping.iter().any(|s| s.1 == id) {
                q = FUTEX.changed.wait(q).unwrap();
            }
            match q.timed_out.iter().position(|&t| t == id) {
                Some(i) => {
                    q.timed_out.swap_remove(i);
                }
                None => return Wake::Woken,
            }
        }
    }

    /// The model of the real `sleep_from`: [`sleep`] (time does not exist).
    pub(crate) fn sleep_from(
        word: &AtomicU32,
        expected: u32,
        _now: Instant,
        timeout: Option<Duration>,
        holder_gone: &dyn Fn() -> bool,
    ) {
        sleep(word, expected, timeout, holder_gone);
    }

    /// [`sleep`] on several words at once: ends when any of them is woken
    /// (or holds another value than expected on entry). No timeouts: a
    /// lost wake-up is a loom deadlock.
    #[cfg(test)]
    pub(crate) fn wait_any(words: &[(&AtomicU32, u32)], _timeout: Option<Duration>) -> Wake {
        let mut q = FUTEX.queue.lock().unwrap();
        if words.iter().any(|(w, e)| w.load(Relaxed) != *e) {
            return Wake::Woken;
        }
        let id = q.next_id;
        q.next_id += 1;
        for (w, _) in words {
            q.sleeping.push((*w as *const AtomicU32 as usize, id));
        }
        // Woken once a wake took any one of our entries off the queue.
        while q.sleeping.iter().filter(|s| s.1 == id).count() == words.len() {
            q = FUTEX.changed.wait(q).unwrap();
        }
        q.sleeping.retain(|s| s.1 != id);
        Wake::Woken
    }

    /// [`wait_any`] on word addresses.
    #[cfg(test)]
    pub(crate) fn wait_any_at(words: &[(*const AtomicU32, u32)], timeout: Option<Duration>) -> Wake {
        // SAFETY: under loom every word lives in the model's heap for the
        // whole model (the registrations' owners join before it ends).
        let refs: Vec<(&AtomicU32, u32)> = words.iter().map(|&(a, v)| (unsafe { &*a }, v)).collect();
        wait_any(&refs, timeout)
    }

    pub(crate) fn wake(word: &AtomicU32, count: u32) -> usize {
        let addr = word as *const AtomicU32 as usize;
        let mut q = FUTEX.queue.lock().unwrap();
        let mut left = count;
        q.sleeping.retain(|s| {
            let woken = s.0 == addr && left > 0;
            left -= u32::from(woken);
            !woken
        });
        FUTEX.changed.notify_all();
        (count - left) as usize
    }

    /// Makes every sleeper look again at what it waits out, as if time had
    /// passed (a model calls it, through `sync::loom_time_passes`, when it
    /// makes a lock holder die).
    pub fn time_passes() {
        let mut q = FUTEX.queue.lock().unwrap();
        let ids: Vec<u64> = q.sleeping.drain(..).map(|s| s.1).collect();
        q.timed_out.extend(ids);
        FUTEX.changed.notify_all();
    }
}

#[cfg(all(test, not(tachyon_loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering::Relaxed;

    /// Without `futex_waitv` a wait on several words neither returns at
    /// once while nothing changes (its callers would spin) nor sleeps
    /// past a slice after a word changed.
    #[test]
    fn the_fallback_without_futex_waitv_sleeps_in_slices_and_sees_every_word() {
        let words = [AtomicU32::new(0), AtomicU32::new(0)];
        let addrs = |w: &[AtomicU32; 2]| [(&w[0] as *const AtomicU32, 0), (&w[1] as *const AtomicU32, 0)];

        // Nothing changes: each call sleeps a slice, so 30 ms take a few
        // dozen calls (a fallback that returned at once would make
        // millions), and a timeout shorter than a slice times out.
        let start = Instant::now();
        let mut calls = 0u32;
        while start.elapsed() < Duration::from_millis(30) {
            assert_eq!(wait_first_for_a_slice(&addrs(&words), None), Wake::Woken);
            calls += 1;
        }
        assert!(calls < 5_000, "{calls} calls in 30 ms: the fallback does not sleep");
        let short = Some(Duration::from_micros(200));
        assert_eq!(wait_first_for_a_slice(&addrs(&words), short), Wake::TimedOut);

        // A long timeout is still cut to a slice, so that a change of
        // another word than the first is seen (the caller looks at every
        // word when this returns): a minute's sleep would fail the test.
        words[1].store(1, Relaxed);
        assert_eq!(wait_first_for_a_slice(&addrs(&words), Some(Duration::from_secs(60))), Wake::Woken);
    }
}
