//! One wait for many eventcounts: sleeping until any of several
//! [`WaitCell`](super::WaitCell)s (or events) is notified, with one
//! `futex_waitv` system call.
//!
//! A [`SleepPoint`] is the pair every sleeper-counting primitive here is
//! made of: a futex word that a notifier changes and wakes, and a count of
//! the sleepers that notifiers look at before they enter the kernel
//! (`WaitCell`: `seq` and `sleepers`; `Event`: `state` and `waiters`).
//!
//! Invariant (no lost wake-up, the eventcount protocol of `sync/wait.rs`
//! applied to each point). A waiter registers in the sleeper count of
//! *every* point, issues one `SeqCst` fence, reads every word, re-checks its
//! condition and only then sleeps on all the words with the values it
//! read. A notifier of any one point changes the condition, issues a
//! `SeqCst` fence and reads that point's sleeper count. Of the two fences
//! one comes first: either the waiter's re-check sees the new condition, or
//! the notifier sees the registration and changes the word (then the
//! kernel's compare fails and `futex_waitv` returns at once) and wakes it
//! (then the waiter, already queued on that word, wakes). The notifier side
//! is the one every producer already runs: nothing changes for it, and a
//! producer in a process built before subscriptions existed wakes a
//! subscription's sleeper all the same.
//!
//! One `futex_waitv` call takes at most `WAITV_MAX` (128) words, and a
//! topic has up to 256 partitions. A wait over more points sleeps on the
//! first 127 words and a private doorbell word, and hands the rest to the
//! process's async waiter thread (`sync::reactor`, which shards over as
//! many threads as it needs), which rings the doorbell when one of them
//! moves: one more thread hop for those words, never a poll.

use super::wait::{Deadline, SpinWait};
use super::WaitPolicy;
use crate::platform::atomic::{fence, spin_hint, AtomicU32, Ordering::*};
use crate::platform::futex::WAITV_MAX;
use crate::{Error, Result};
use std::time::Duration;

/// A futex word and its sleeper count (see the module documentation).
#[derive(Clone, Copy, Debug)]
pub(crate) struct SleepPoint<'a> {
    pub(crate) word: &'a AtomicU32,
    pub(crate) sleepers: &'a AtomicU32,
    /// Its notifiers may use the light half of an asymmetric fence
    /// (`platform/membarrier.rs`): a sleeper runs the heavy half.
    pub(crate) light: bool,
    /// A `WaitCell`'s: the sleeper arms the word before it sleeps, and
    /// registers as an arming waiter (`sync/wait.rs`, "Armed words").
    pub(crate) arms: bool,
}

/// The heavy half of the asymmetric fence, if any of `points` needs it
/// (see [`SleepPoint::light`]); after the sleeper's own full fence.
pub(crate) fn heavy_if_light(points: &[SleepPoint<'_>]) {
    if points.iter().any(|p| p.light) {
        crate::platform::membarrier::heavy();
    }
}

impl SleepPoint<'_> {
    /// What one sleeper adds to the count.
    pub(crate) fn unit(&self) -> u32 {
        if self.arms {
            super::wait::ARMING
        } else {
            1
        }
    }

    /// Registers one sleeper.
    pub(crate) fn enter(&self) {
        self.sleepers.fetch_add(self.unit(), Relaxed);
    }

    /// Removes the registration of [`enter`](Self::enter). Never below
    /// zero: a count another process erased must not wrap into "always
    /// sleepers" (as in `WaitCell::park`).
    pub(crate) fn leave(&self) {
        let unit = self.unit();
        let _ = self.sleepers.fetch_update(Relaxed, Relaxed, |n| Some(super::wait::unregister(n, unit)));
    }

    /// The value to sleep on, for a sleeper that read `seen` from the word
    /// before its re-check found nothing: armed for a `WaitCell`
    /// (`sync/wait.rs`, [`arm`](super::wait::arm)), `seen` for others.
    pub(crate) fn arm(&self, seen: u32) -> u32 {
        if self.arms {
            super::wait::arm(self.word, seen)
        } else {
            seen
        }
    }
}

/// Registers in every point, fences, reads the words, re-checks `ready`
/// and, if it is still `None`, sleeps once on all of the words (until any
/// is notified, spuriously, or for `timeout`); then leaves every point.
pub(crate) fn park_any<T>(
    points: &[SleepPoint<'_>],
    timeout: Option<Duration>,
    ready: impl FnOnce() -> Option<T>,
) -> Option<T> {
    for p in points {
        p.enter();
    }
    // SYNC: SeqCst: every registration above, then the loads below, against the notifier's
    // fence (`WaitCell::announce`, `Event::set`), as in `WaitCell::park`.
    fence(SeqCst);
    heavy_if_light(points);
    // SYNC: pairs with the notifier's Release change of each word (`WaitCell::announce`,
    // `Event::set`): a word a notifier moved means `ready` sees that notifier's condition.
    let mut words: Vec<(&AtomicU32, u32)> = points.iter().map(|p| (p.word, p.word.load(Acquire))).collect();
    let r = ready();
    if r.is_none() {
        for (p, w) in points.iter().zip(words.iter_mut()) {
            w.1 = p.arm(w.1);
        }
        sleep_on(&mut words, timeout);
    }
    for p in points {
        p.leave();
    }
    r
}

fn sleep_on(words: &mut [(&AtomicU32, u32)], timeout: Option<Duration>) {
    use crate::platform::futex::wait_any;
    use std::sync::Arc;
    use std::task::Waker;
    if words.len() <= WAITV_MAX {
        wait_any(words, timeout);
        return;
    }
    // More words than one call takes: the words past the first 127 go to
    // the process's async waiter thread (`sync/reactor.rs`), which rings a
    // doorbell word of ours when one of them moves; we sleep on the first
    // 127 and the doorbell.
    struct Doorbell(AtomicU32);
    impl std::task::Wake for Doorbell {
        fn wake(self: Arc<Self>) {
            self.wake_by_ref();
        }
        fn wake_by_ref(self: &Arc<Self>) {
            // SYNC: no Acquire partner: only the kernel's compare reads the bell, and the
            // woken waiter looks at its condition again after its own fence.
            self.0.fetch_add(1, Release);
            crate::platform::futex::wake_all(&self.0);
        }
    }
    let bell = Arc::new(Doorbell(AtomicU32::new(0)));
    let waker = Waker::from(Arc::clone(&bell));
    let (mine, overflow) = words.split_at(WAITV_MAX - 1);
    let mut parked = super::reactor::Parked::default();
    parked.register(overflow.iter().map(|&(w, v)| (w as *const AtomicU32 as usize, v)).collect(), &waker);
    let mut all: Vec<(&AtomicU32, u32)> = mine.to_vec();
    all.push((&bell.0, 0));
    wait_any(&all, timeout);
    // Withdrawn before the words' owners can go (our caller keeps them).
    drop(parked);
}

/// Waits until `ready` returns `Some` and returns its value, sleeping on all
/// of `points` at once: [`WaitCell::wait_until`](super::WaitCell::wait_until)
/// for a condition that any of several cells announces. `policy` says
/// whether to spin (`Spin`: only), sleep (`Futex`) or spin then sleep
/// (`Hybrid`). `timeout` bounds the whole call; `slice`, if given, bounds
/// each sleep, and `between` runs after a slice that ended without `ready`
/// (for the caller's housekeeping, such as looking for dead peers).
pub(crate) fn wait_any<T>(
    points: &[SleepPoint<'_>],
    policy: WaitPolicy,
    timeout: Option<Duration>,
    slice: Option<Duration>,
    mut between: impl FnMut(),
    mut ready: impl FnMut() -> Option<T>,
) -> Result<T> {
    if let Some(v) = ready() {
        return Ok(v);
    }
    if timeout.is_some_and(|t| t.is_zero()) {
        return Err(Error::timeout("a wake-up", timeout));
    }
    let deadline = Deadline::after(timeout);
    let mut spin = SpinWait::polling();
    let mut turns = 0u32;
    loop {
        match policy {
            WaitPolicy::Spin => {
                if turns % 64 == 0 {
                    deadline.remaining()?;
                    if turns % (64 * 1024) == 0 && turns != 0 {
                        between();
                    }
                }
                turns = turns.wrapping_add(1);
                spin_hint();
            }
            WaitPolicy::Hybrid if spin.spin() => {}
            WaitPolicy::Hybrid | WaitPolicy::Futex => break,
        }
        if let Some(v) = ready() {
            return Ok(v);
        }
    }
    loop {
        let remaining = match deadline.remaining() {
            Ok(r) => r,
            Err(e) => return ready().ok_or(e),
        };
        let nap = match (remaining, slice) {
            (Some(r), Some(s)) => Some(r.min(s)),
            (r, s) => r.or(s),
        };
        if let Some(v) = park_any(points, nap, &mut ready) {
            return Ok(v);
        }
        if slice.is_some() {
            between();
        }
    }
}

#[cfg(all(test, not(tachyon_loom)))]
mod tests {
    use super::*;
    use crate::sync::WaitCell;
    use std::sync::atomic::AtomicBool;

    #[test]
    fn any_of_many_cells_wakes_the_waiter() {
        for policy in [WaitPolicy::Futex, WaitPolicy::Hybrid, WaitPolicy::Spin] {
            // 200 cells: more than one futex_waitv call takes.
            let cells: Vec<WaitCell> = (0..200).map(|_| WaitCell::new()).collect();
            for which in [0usize, 127, 128, 199] {
                let flag = AtomicBool::new(false);
                std::thread::scope(|s| {
                    s.spawn(|| {
                        std::thread::sleep(Duration::from_millis(2));
                        flag.store(true, Release);
                        cells[which].notify_all();
                    });
                    let points: Vec<_> = cells.iter().map(|c| c.sleep_point()).collect();
                    let r = wait_any(
                        &points,
                        policy,
                        Some(Duration::from_secs(10)),
                        None,
                        || {},
                        || flag.load(Acquire).then_some(which),
                    );
                    assert_eq!(r.unwrap(), which, "{policy:?}");
                });
                for c in &cells {
                    assert_eq!(c.sleep_point().sleepers.load(Relaxed), 0);
                }
            }
        }
    }

    /// Futex and hybrid waits sleep: over a 200 ms wait with nothing
    /// coming, the condition is looked at a handful of times (a busy poll
    /// would look millions of times; spurious wake-ups add a few).
    #[test]
    fn futex_and_hybrid_do_not_poll() {
        let cells: Vec<WaitCell> = (0..4).map(|_| WaitCell::new()).collect();
        let points: Vec<_> = cells.iter().map(|c| c.sleep_point()).collect();
        for policy in [WaitPolicy::Futex, WaitPolicy::Hybrid] {
            let mut looks = 0u64;
            let r = wait_any(
                &points,
                policy,
                Some(Duration::from_millis(200)),
                None,
                || {},
                || {
                    looks += 1;
                    None::<()>
                },
            );
            assert!(matches!(r, Err(Error::Timeout { .. })));
            // Hybrid spins first: at most a few thousand looks in its 10 µs.
            assert!(looks < 100_000, "{policy:?}: {looks} looks");
            if policy == WaitPolicy::Futex {
                assert!(looks < 1_000, "{looks} looks");
            }
        }
    }

    #[test]
    fn timeout_and_between() {
        let cells = [WaitCell::new(), WaitCell::new()];
        let points: Vec<_> = cells.iter().map(|c| c.sleep_point()).collect();
        let mut slices = 0;
        let r = wait_any(
            &points,
            WaitPolicy::Futex,
            Some(Duration::from_millis(20)),
            Some(Duration::from_millis(2)),
            || slices += 1,
            || None::<()>,
        );
        assert!(matches!(r, Err(Error::Timeout { .. })), "{r:?}");
        assert!(slices >= 1);
        let r = wait_any(&points, WaitPolicy::Futex, Some(Duration::ZERO), None, || {}, || None::<()>);
        assert!(matches!(r, Err(Error::Timeout { .. })));
    }
}

/// Loom model: a waiter on two cells, a notifier of either; the waiter
/// must always be woken (a lost wake-up is a loom deadlock).
#[cfg(all(test, tachyon_loom))]
mod loom_models {
    use super::*;
    use crate::sync::WaitCell;
    use loom::sync::Arc;

    #[test]
    fn a_notify_of_any_cell_reaches_the_waiter() {
        for which in 0..2usize {
            loom::model(move || {
                let cells = Arc::new([WaitCell::new(), WaitCell::new()]);
                let flag = Arc::new(AtomicU32::new(0));
                let n = {
                    let (cells, flag) = (cells.clone(), flag.clone());
                    loom::thread::spawn(move || {
                        flag.store(1, Release);
                        cells[which].notify_all();
                    })
                };
                let points: Vec<_> = cells.iter().map(|c| c.sleep_point()).collect();
                let got = wait_any(
                    &points,
                    WaitPolicy::Futex,
                    None,
                    None,
                    || {},
                    || (flag.load(Acquire) == 1).then_some(()),
                );
                assert!(got.is_ok());
                n.join().unwrap();
            });
        }
    }
}
