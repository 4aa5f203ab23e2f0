//! Waiting for a condition: the [`WaitPolicy`], the eventcount [`WaitCell`],
//! and the deadline / spin / sleep helpers every lock here uses.
//!
//! Source: `WaitCell` is an eventcount (D. P. Reed and R. K. Kanodia,
//! "Synchronization with eventcounts and sequencers", CACM 1979), in the
//! futex form Dmitry Vyukov describes (a sleeper count beside the futex
//! word, so that a notifier with nobody asleep makes no system call).
//!
//! Invariant (no lost wake-up). A waiter registers in `sleepers`, issues a
//! `SeqCst` fence, reads `seq`, re-checks its condition and only then sleeps
//! on `seq` with the value it read. A notifier changes the condition, issues
//! a `SeqCst` fence, reads `sleepers`, and if it sees one bumps `seq` and
//! wakes. Of the two fences one comes first: either the waiter's re-check
//! sees the new condition, or the notifier sees the sleeper, and then its
//! bump of `seq` either happens before the waiter's futex compares (which
//! then returns at once) or after the waiter is queued (and the wake reaches
//! it).

use crate::platform::atomic::{fence, spin_hint, AtomicU32, Ordering::*};
pub(crate) use crate::platform::futex::{sleep, sleep_from, wake, wake_all};
use crate::{Error, Result};
use std::time::{Duration, Instant};

/// How a waiter waits for a condition that another thread or process will
/// make true.
///
/// ```
/// use tachyon::sync::WaitPolicy;
/// assert_eq!(WaitPolicy::default(), WaitPolicy::Hybrid);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize), serde(rename_all = "lowercase"))]
pub enum WaitPolicy {
    /// Busy-wait: never enters the kernel, burns a CPU, lowest latency.
    Spin,
    /// Sleep in the kernel (futex) right away: no idle CPU, a few
    /// microseconds of wake-up latency.
    Futex,
    /// Spin for a few microseconds (about 10, looking at the condition
    /// after every spin hint, as [`Spin`](Self::Spin) does), then sleep:
    /// a spinning wait's latency when the condition comes soon, no idle
    /// CPU when it does not.
    #[default]
    Hybrid,
}

/// An eventcount: lets threads in any process sleep until a condition that
/// lives elsewhere in shared memory becomes true, without losing a
/// notification and without a system call on the notifying side when
/// nobody sleeps.
///
/// The condition is the caller's (for a ring: "not empty", "not full"). The
/// notifier first makes it true, with any ordering, then calls
/// [`notify_all`](WaitCell::notify_all) or
/// [`notify_one`](WaitCell::notify_one); the waiter calls
/// [`wait_until`](WaitCell::wait_until) with a closure that checks it.
///
/// All zeros is a valid, fresh cell. A waiter killed while sleeping leaves
/// its registration behind; notifiers then enter the kernel on every notify
/// (slower, still correct).
///
/// ```
/// use std::sync::atomic::{AtomicU32, Ordering};
/// use std::time::Duration;
/// use tachyon::sync::{WaitCell, WaitPolicy};
///
/// let cell = WaitCell::new();
/// let items = AtomicU32::new(0);
/// std::thread::scope(|s| {
///     s.spawn(|| {
///         items.fetch_add(1, Ordering::Release);
///         cell.notify_all();
///     });
///     let n = cell.wait_until(WaitPolicy::Hybrid, Some(Duration::from_secs(10)), || {
///         let n = items.load(Ordering::Acquire);
///         (n > 0).then_some(n)
///     })?;
///     assert_eq!(n, 1);
///     Ok::<(), tachyon::Error>(())
/// })?;
/// # Ok::<(), tachyon::Error>(())
/// ```
#[repr(C)]
#[derive(Debug)]
pub struct WaitCell {
    /// Bumped by a notifier that saw a sleeper; the futex word.
    seq: AtomicU32,
    /// Waiters between registering and leaving.
    sleepers: AtomicU32,
}

impl WaitCell {
    crate::sync::const_new! {
        /// A fresh cell (the same as all-zero memory).
        pub fn new() -> Self {
            WaitCell { seq: AtomicU32::new(0), sleepers: AtomicU32::new(0) }
        }
    }

    /// Wakes every waiter. Call after making the condition true. Makes no
    /// system call when nobody sleeps.
    pub fn notify_all(&self) {
        self.notify_all_with(false);
    }

    /// [`notify_all`](Self::notify_all), with the light half of an
    /// asymmetric fence (`light`) where every waiter of this cell runs the
    /// heavy half ([`wait_after_look_with`](Self::wait_after_look_with)
    /// with `light`): see `platform/membarrier.rs`.
    #[inline]
    pub(crate) fn notify_all_with(&self, light: bool) {
        if self.announce(light) {
            wake_all(&self.seq);
        }
    }

    /// Wakes at least one waiter if any sleeps. Call after making the
    /// condition true for one waiter. Makes no system call when nobody
    /// sleeps.
    pub fn notify_one(&self) {
        if self.announce(false) {
            wake(&self.seq, 1);
        }
    }

    /// The notifier's half of the protocol: true if a sleeper must be woken.
    /// `light`: every waiter of this cell runs the heavy half of an
    /// asymmetric fence after it registers.
    #[inline]
    fn announce(&self, light: bool) -> bool {
        // SYNC: SeqCst: the condition's store, then the load of `sleepers`, against the fence
        // in `park` (the eventcount's store-load order, see the module's invariant). Light:
        // a compiler fence once this process is registered for `membarrier`, against the
        // sleeper's `membarrier::heavy` (the same order, asymmetric).
        if light {
            crate::platform::membarrier::light();
        } else {
            fence(SeqCst);
        }
        if self.sleepers.load(Relaxed) == 0 {
            return false;
        }
        // SYNC: pairs with the Acquire load of `seq` in `park`: a waiter that reads this bump
        // sees the condition (where the two fences alone would not order it).
        self.seq.fetch_add(1, Release);
        true
    }

    /// Waits until `ready` returns `Some`, and returns its value.
    ///
    /// `ready` is called first, then repeatedly as `policy` says, and always
    /// once more after a notify; it must be cheap and must not block.
    /// `timeout` bounds the whole call (`None`: no limit); when it passes
    /// with `ready` still `None`, the result is [`Error::Timeout`]. A
    /// spinning wait reads no clock for its first looks (64 of them with
    /// [`WaitPolicy::Spin`], about 30 spin hints with
    /// [`WaitPolicy::Hybrid`]: well under a few microseconds), and its
    /// timeout counts from there, so that a condition that comes true at
    /// once is seen at once. A sleep reads the clock once, before it
    /// sleeps; after a wake-up `ready` is looked at first.
    pub fn wait_until<T>(
        &self,
        policy: WaitPolicy,
        timeout: Option<Duration>,
        ready: impl FnMut() -> Option<T>,
    ) -> Result<T> {
        self.wait_until_with(false, policy, timeout, ready)
    }

    /// [`wait_until`](Self::wait_until) on a cell whose notifiers may use
    /// the light half of an asymmetric fence (`light`): see
    /// [`wait_after_look_with`](Self::wait_after_look_with).
    pub(crate) fn wait_until_with<T>(
        &self,
        light: bool,
        policy: WaitPolicy,
        timeout: Option<Duration>,
        mut ready: impl FnMut() -> Option<T>,
    ) -> Result<T> {
        if let Some(v) = ready() {
            return Ok(v);
        }
        self.wait_after_look_with(light, policy, timeout, ready)
    }

    /// [`wait_until_with`](Self::wait_until_with) for a caller that has
    /// just called `ready` itself and found it `None`: without that first
    /// look (a futex wait goes straight to registering, then looks once
    /// more before it sleeps, as always). `light`: the cell's notifiers
    /// may use the light half of an asymmetric fence, so each sleep runs
    /// the heavy half after registering.
    pub(crate) fn wait_after_look_with<T>(
        &self,
        light: bool,
        policy: WaitPolicy,
        timeout: Option<Duration>,
        mut ready: impl FnMut() -> Option<T>,
    ) -> Result<T> {
        if timeout.is_some_and(|t| t.is_zero()) {
            // A zero timeout tries once (the look just made) and does not
            // wait, not even by spinning.
            return Err(Error::timeout("a wake-up", timeout));
        }
        // Read the clock only once the spinning is not over at once.
        let mut deadline = None;
        let mut spin = SpinWait::polling();
        let mut turns = 0u32;
        loop {
            match policy {
                WaitPolicy::Spin => {
                    // A clock read costs as much as many turns: look at the
                    // deadline every 64th turn only, from the 64th on.
                    turns = turns.wrapping_add(1);
                    if turns % 64 == 0 {
                        deadline.get_or_insert_with(|| Deadline::after(timeout)).remaining()?;
                    }
                    spin_hint();
                }
                WaitPolicy::Hybrid if spin.spin() => {}
                WaitPolicy::Hybrid | WaitPolicy::Futex => break,
            }
            if let Some(v) = ready() {
                return Ok(v);
            }
        }
        // One clock read per sleep: the deadline (for a futex wait, which
        // has not read the clock yet), the time left and the sleep's own
        // alarm all count from it. A hybrid wait's timeout counts from when
        // its spin read the clock.
        let mut now = Instant::now();
        let deadline =
            deadline.unwrap_or_else(|| Deadline::counted_from(Some(spin.started().unwrap_or(now)), timeout));
        loop {
            let remaining = match deadline.remaining_at(now) {
                Ok(r) => r,
                Err(e) => return ready().ok_or(e),
            };
            // Never an unbounded sleep: a registration erased by damage
            // to `sleepers` (another process scribbling on the cell) would
            // make every notifier skip the wake-up; the condition is
            // looked at again after at most `HEAL_SLICE` instead.
            // (The loom model of the futex has no time: a sleep there ends
            // only when woken, and a lost wake-up is a deadlock it finds.)
            let remaining = Some(remaining.map_or(HEAL_SLICE, |r| r.min(HEAL_SLICE)));
            if let Some(v) = self.park_from(light, Some(now), remaining, &|| false, &mut ready) {
                return Ok(v);
            }
            // Woken (or the slice is over): the condition first, the clock
            // only if it is still false.
            if let Some(v) = ready() {
                return Ok(v);
            }
            now = Instant::now();
        }
    }

    /// The waiter's half of the protocol: registers, re-checks `ready` and,
    /// if it is still `None`, sleeps once (until notified, spuriously, or
    /// for `timeout`).
    /// (`holder_gone`: see [`sleep`].)
    pub(crate) fn park<T>(
        &self,
        timeout: Option<Duration>,
        holder_gone: &dyn Fn() -> bool,
        ready: impl FnOnce() -> Option<T>,
    ) -> Option<T> {
        self.park_from(false, None, timeout, holder_gone, ready)
    }

    /// [`park`](Self::park) with its timeout counted from `now` (read by
    /// the caller a moment ago), if given: then the sleep reads no clock.
    /// `light`: run the heavy half of the asymmetric fence after the full
    /// one, for notifiers that use the light half.
    fn park_from<T>(
        &self,
        light: bool,
        now: Option<Instant>,
        timeout: Option<Duration>,
        holder_gone: &dyn Fn() -> bool,
        ready: impl FnOnce() -> Option<T>,
    ) -> Option<T> {
        self.sleepers.fetch_add(1, Relaxed);
        // SYNC: SeqCst: the registration in `sleepers`, then the loads below, against the fence
        // in `announce`.
        fence(SeqCst);
        if light {
            // SYNC: the heavy half, against a light notifier's compiler fence: its condition's
            // store, then its load of `sleepers`, are ordered against our registration above and
            // our loads below as if it had fenced. Refused (never on a kernel that registered
            // the notifier, unless a seccomp filter differs): the sleep's slice bounds a miss.
            crate::platform::membarrier::heavy();
        }
        // SYNC: pairs with the Release bump in `announce`: if this reads it, `ready` sees the
        // notifier's condition.
        let seq = self.seq.load(Acquire);
        let r = ready();
        if r.is_none() {
            match now {
                Some(now) => sleep_from(&self.seq, seq, now, timeout, holder_gone),
                None => {
                    sleep(&self.seq, seq, timeout, holder_gone);
                }
            }
        }
        // Never below zero: a count another process erased must not wrap
        // into "always sleepers" (every notify a system call for ever).
        let _ = self.sleepers.fetch_update(Relaxed, Relaxed, |n| Some(n.saturating_sub(1)));
        r
    }

    /// The cell as a [`SleepPoint`](super::waitv::SleepPoint): for waits
    /// on several cells at once (`sync::waitv`).
    #[cfg(any(not(tachyon_loom), test))]
    pub(crate) fn sleep_point(&self) -> super::waitv::SleepPoint<'_> {
        self.sleep_point_with(false)
    }

    /// [`sleep_point`](Self::sleep_point) of a cell whose notifiers may
    /// use the light half of an asymmetric fence (`light`).
    #[cfg(any(not(tachyon_loom), test))]
    pub(crate) fn sleep_point_with(&self, light: bool) -> super::waitv::SleepPoint<'_> {
        super::waitv::SleepPoint { word: &self.seq, sleepers: &self.sleepers, light }
    }

    /// Forgets every registered sleeper. Only for a cell with a single
    /// possible waiter, called by that waiter before it registers, to drop
    /// a registration left by a predecessor that died while sleeping.
    pub(crate) fn forget_sleepers(&self) {
        if self.sleepers.load(Relaxed) != 0 {
            self.sleepers.store(0, Relaxed);
        }
    }
}

impl Default for WaitCell {
    fn default() -> Self {
        Self::new()
    }
}

// SAFETY: `repr(C)`, two atomics: any bits are valid (all zero is a fresh
// cell) and all mutation is atomic.
#[cfg(not(tachyon_loom))]
unsafe impl crate::segment::ShmSafe for WaitCell {}

#[cfg(not(tachyon_loom))]
const _: () = assert!(std::mem::size_of::<WaitCell>() == 8);

/// When a wait must give up. `None` inside: never.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Deadline(Option<Instant>, Option<Duration>, &'static str);

impl Deadline {
    /// `timeout` from now; a timeout too large to represent is no limit.
    pub(crate) fn after(timeout: Option<Duration>) -> Deadline {
        Self::waiting_for(timeout, "a wake-up")
    }

    /// `timeout` from now, for a wait for `what` (named by its timeout).
    pub(crate) fn waiting_for(timeout: Option<Duration>, what: &'static str) -> Deadline {
        Self::counted_from(None, timeout).named(what)
    }

    /// `timeout` from `start` (from now if `None`).
    fn counted_from(start: Option<Instant>, timeout: Option<Duration>) -> Deadline {
        let start = start.unwrap_or_else(Instant::now);
        Deadline(timeout.and_then(|t| start.checked_add(t)), timeout, "a wake-up")
    }

    fn named(self, what: &'static str) -> Deadline {
        Deadline(self.0, self.1, what)
    }

    /// Time left (`None`: no limit), or [`Error::Timeout`] once it passed
    /// (callers name what waited with `Error::waiting_for`).
    pub(crate) fn remaining(&self) -> Result<Option<Duration>> {
        self.remaining_at(Instant::now())
    }

    /// [`remaining`](Self::remaining) at `now`.
    fn remaining_at(&self, now: Instant) -> Result<Option<Duration>> {
        match self.0 {
            None => Ok(None),
            Some(d) => match d.checked_duration_since(now) {
                Some(r) if !r.is_zero() => Ok(Some(r)),
                _ => Err(Error::timeout(self.2, self.1)),
            },
        }
    }
}

/// The longest a [`WaitCell::wait_until`] sleeps before it looks at its
/// condition again, notified or not (a lost wake-up costs at most this).
const HEAL_SLICE: Duration = Duration::from_millis(100);

/// How long a lock waiter sleeps before it looks at the holder again.
const FIRST_SLICE: Duration = Duration::from_millis(1);
/// The longest such sleep: a dead holder is noticed within about this long.
const MAX_SLICE: Duration = Duration::from_millis(50);

/// Sleep slices that double from [`FIRST_SLICE`] to [`MAX_SLICE`], capped by
/// a deadline; lock waiters check the holder's liveness between slices.
#[derive(Debug)]
pub(crate) struct Slices(Duration);

impl Slices {
    pub(crate) fn new() -> Slices {
        Slices(FIRST_SLICE)
    }

    /// The next slice, or [`Error::Timeout`] if the deadline passed.
    pub(crate) fn next(&mut self, deadline: &Deadline) -> Result<Duration> {
        let slice = self.0;
        self.0 = (slice * 2).min(MAX_SLICE);
        Ok(deadline.remaining()?.map_or(slice, |r| r.min(slice)))
    }
}

/// How long [`SpinWait`] spins before a waiter goes to sleep.
const SPIN_BUDGET: Duration = Duration::from_micros(10);
/// Spin hints a [`SpinWait`] spins before it first reads the clock (in
/// growing bursts, 1 + 2 + 4 + 8 + 16), and between two clock reads after
/// that: a clock read costs as much as many hints.
const UNTIMED_HINTS: u32 = 31;
const HINTS_PER_CLOCK_READ: u32 = 32;
/// The largest burst of spin hints between two looks of a lock waiter.
const MAX_BURST: u32 = 32;

/// A short, time-bounded spin (one round under loom, where time must not
/// steer the model).
#[derive(Debug)]
pub(crate) struct SpinWait {
    /// Spin hints spun so far.
    hints: u32,
    /// The number of hints at which the clock is read next.
    next_clock_read: u32,
    start: Option<Instant>,
    /// Bursts that grow to [`MAX_BURST`] (a lock), or one hint a look (a
    /// condition).
    grow: bool,
}

impl SpinWait {
    /// For a lock waiter: bursts of spin hints that grow from 1 to 32
    /// between its looks, so that waiters that have waited a while look
    /// less often at the word the holder writes.
    pub(crate) fn new() -> SpinWait {
        SpinWait { hints: 0, next_clock_read: UNTIMED_HINTS, start: None, grow: true }
    }

    /// For a waiter on a condition another core makes true (a ring's cell,
    /// an eventcount): one spin hint between looks, as a spinning wait.
    /// Its look reads a line that stays in this core's cache until the
    /// other side writes it, so looking often costs that side nothing,
    /// while a look that comes late delays the whole wait: with bursts
    /// that grow to 32 hints a hybrid round trip took 0.43 – 0.60 µs where
    /// a spinning one took 0.33 (`docs/benchmark-history.md`, "a hybrid wait that
    /// looks after every spin hint").
    pub(crate) fn polling() -> SpinWait {
        SpinWait { grow: false, ..SpinWait::new() }
    }

    /// When the spin first read the clock, if it did.
    fn started(&self) -> Option<Instant> {
        self.start
    }

    /// Spins a little (one hint, or a burst: see [`new`](Self::new) and
    /// [`polling`](Self::polling)); false, without spinning, once the
    /// budget is spent. The budget's clock starts after the first 31 hints
    /// (well under a microsecond), so a wait that ends at once reads no
    /// clock, and is read every 32 hints after that.
    pub(crate) fn spin(&mut self) -> bool {
        if cfg!(tachyon_loom) {
            if self.hints > 0 {
                return false;
            }
        } else if self.hints >= self.next_clock_read {
            self.next_clock_read = self.hints + HINTS_PER_CLOCK_READ;
            if self.start.get_or_insert_with(Instant::now).elapsed() >= SPIN_BUDGET {
                return false;
            }
        }
        // Growing: 1, 2, 4, ... (each burst as long as all before it).
        let burst = if self.grow { (self.hints + 1).min(MAX_BURST) } else { 1 };
        for _ in 0..burst {
            spin_hint();
        }
        self.hints += burst;
        true
    }
}

#[cfg(all(test, not(tachyon_loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicU32 as StdU32};
    use std::sync::Arc;
    use std::thread;

    const LONG: Option<Duration> = Some(Duration::from_secs(20));

    #[test]
    fn ready_at_once_needs_no_notify() {
        let cell = WaitCell::new();
        for policy in [WaitPolicy::Spin, WaitPolicy::Futex, WaitPolicy::Hybrid] {
            assert_eq!(cell.wait_until(policy, Some(Duration::ZERO), || Some(7)).unwrap(), 7);
        }
    }

    #[test]
    fn timeout_fires_for_every_policy() {
        let cell = WaitCell::new();
        for policy in [WaitPolicy::Spin, WaitPolicy::Futex, WaitPolicy::Hybrid] {
            let started = Instant::now();
            let r = cell.wait_until(policy, Some(Duration::from_millis(5)), || None::<()>);
            assert!(matches!(r, Err(Error::Timeout { .. })), "{policy:?}: {r:?}");
            // Never early: the clock a spin starts late only lengthens it.
            assert!(started.elapsed() >= Duration::from_millis(5), "{policy:?}");
            let r = cell.wait_until(policy, Some(Duration::ZERO), || None::<()>);
            assert!(matches!(r, Err(Error::Timeout { .. })), "{policy:?}: {r:?}");
        }
        assert_eq!(cell.sleepers.load(Relaxed), 0);
    }

    /// A sleeper on a light cell runs the heavy half of the asymmetric
    /// fence each time it registers to sleep; one on a plain cell, or one
    /// that spins, never does.
    #[test]
    fn a_light_cells_sleeper_runs_the_heavy_barrier() {
        use crate::platform::membarrier::heavy_calls;
        let cell = WaitCell::new();
        let before = heavy_calls();
        let r =
            cell.wait_after_look_with(true, WaitPolicy::Futex, Some(Duration::from_millis(2)), || None::<()>);
        assert!(matches!(r, Err(Error::Timeout { .. })), "{r:?}");
        assert!(heavy_calls() > before, "a light sleep ran no barrier");
        for (light, policy) in [(false, WaitPolicy::Futex), (true, WaitPolicy::Spin)] {
            let before = heavy_calls();
            let r = cell.wait_after_look_with(light, policy, Some(Duration::from_millis(2)), || None::<()>);
            assert!(matches!(r, Err(Error::Timeout { .. })), "{r:?}");
            assert_eq!(heavy_calls(), before, "light {light}, {policy:?}: a barrier where none is needed");
        }
        let before = heavy_calls();
        let r = super::super::waitv::wait_any(
            &[cell.sleep_point_with(false), cell.sleep_point_with(true)],
            WaitPolicy::Futex,
            Some(Duration::from_millis(2)),
            None,
            || {},
            || None::<()>,
        );
        assert!(matches!(r, Err(Error::Timeout { .. })), "{r:?}");
        assert!(heavy_calls() > before, "a wait on several points, one light, ran no barrier");
    }

    /// Light notifies (a registered process: compiler fences) and light
    /// sleepers hand 2,000 tokens over between threads under every policy,
    /// each wait ending with its token. What this cannot show: a lost
    /// wake-up here costs one `HEAL_SLICE` (100 ms) and no failure, so the
    /// no-lost-wake-up argument rests on `membarrier`'s guarantee
    /// (`platform/membarrier.rs`), and loom checks the protocol with
    /// symmetric fences.
    #[test]
    fn light_notifies_and_sleeps_hand_every_token_over() {
        assert!(crate::platform::membarrier::register());
        for policy in [WaitPolicy::Spin, WaitPolicy::Futex, WaitPolicy::Hybrid] {
            let cell = Arc::new(WaitCell::new());
            let tokens = Arc::new(StdU32::new(0));
            const PER: u32 = 2000;
            let consumer = {
                let (cell, tokens) = (cell.clone(), tokens.clone());
                thread::spawn(move || {
                    for _ in 0..PER {
                        cell.wait_after_look_with(true, policy, LONG, || {
                            tokens.fetch_update(Acquire, Relaxed, |t| t.checked_sub(1)).ok()
                        })
                        .unwrap();
                    }
                })
            };
            for i in 0..PER {
                tokens.fetch_add(1, Release);
                cell.notify_all_with(true);
                if i % 64 == 0 {
                    thread::yield_now();
                }
            }
            consumer.join().unwrap();
            assert_eq!(tokens.load(Relaxed), 0);
        }
    }

    #[test]
    fn notify_without_sleepers_leaves_seq_alone() {
        let cell = WaitCell::default();
        cell.notify_all();
        cell.notify_one();
        assert_eq!(cell.seq.load(Relaxed), 0);
    }

    /// A producer hands out tokens one by one; consumers take them under
    /// every policy. Nothing may be lost: every consumer finishes.
    #[test]
    fn no_lost_notify_under_contention() {
        for policy in [WaitPolicy::Spin, WaitPolicy::Futex, WaitPolicy::Hybrid] {
            let cell = Arc::new(WaitCell::new());
            let tokens = Arc::new(StdU32::new(0));
            const PER: u32 = 2000;
            const CONSUMERS: u32 = 3;
            let consumers: Vec<_> = (0..CONSUMERS)
                .map(|_| {
                    let (cell, tokens) = (cell.clone(), tokens.clone());
                    thread::spawn(move || {
                        for _ in 0..PER {
                            cell.wait_until(policy, LONG, || {
                                tokens.fetch_update(Acquire, Relaxed, |t| t.checked_sub(1)).ok()
                            })
                            .unwrap();
                        }
                    })
                })
                .collect();
            for i in 0..PER * CONSUMERS {
                tokens.fetch_add(1, Release);
                if i % 2 == 0 {
                    cell.notify_one();
                } else {
                    cell.notify_all();
                }
            }
            for c in consumers {
                c.join().unwrap();
            }
            assert_eq!(tokens.load(Relaxed), 0);
        }
    }

    #[test]
    fn sleeping_waiter_is_woken() {
        let cell = Arc::new(WaitCell::new());
        let flag = Arc::new(AtomicBool::new(false));
        let t = {
            let (cell, flag) = (cell.clone(), flag.clone());
            thread::spawn(move || {
                cell.wait_until(WaitPolicy::Futex, LONG, || flag.load(Acquire).then_some(()))
            })
        };
        // Wait until it sleeps (registered), so the wake path is exercised.
        while cell.sleepers.load(Relaxed) == 0 {
            thread::yield_now();
        }
        flag.store(true, Release);
        cell.notify_all();
        t.join().unwrap().unwrap();
    }

    #[test]
    fn deadline_and_slices() {
        assert!(Deadline::after(None).remaining().unwrap().is_none());
        assert!(Deadline::after(Some(Duration::MAX)).remaining().unwrap().is_none());
        assert!(matches!(Deadline::after(Some(Duration::ZERO)).remaining(), Err(Error::Timeout { .. })));
        let d = Deadline::after(None);
        let mut s = Slices::new();
        let got: Vec<_> = (0..8).map(|_| s.next(&d).unwrap()).collect();
        assert_eq!(got[0], FIRST_SLICE);
        assert!(got.windows(2).all(|w| w[0] <= w[1]));
        assert_eq!(*got.last().unwrap(), MAX_SLICE);
        // A slice never outlasts the deadline (on a stalled machine the
        // deadline may already have passed: then it is a timeout).
        let d = Deadline::after(Some(Duration::from_millis(20)));
        match Slices(MAX_SLICE).next(&d) {
            Ok(slice) => assert!(slice <= Duration::from_millis(20)),
            Err(e) => assert!(matches!(e, Error::Timeout { .. })),
        }
        for mut spin in [SpinWait::new(), SpinWait::polling()] {
            let mut n = 0;
            while spin.spin() {
                n += 1;
                assert!(n < 10_000_000, "spin budget never ran out");
            }
        }
    }

    #[test]
    fn a_condition_waiter_looks_after_every_hint_a_lock_waiter_backs_off() {
        let (mut lock, mut condition) = (SpinWait::new(), SpinWait::polling());
        for _ in 0..6 {
            assert!(lock.spin() && condition.spin());
        }
        // Six looks: the lock waiter's bursts grew to 32 hints (63 in all).
        assert_eq!((lock.hints, condition.hints), (63, 6));
        // Both read the clock first after 31 hints, then every 32.
        assert_eq!(lock.next_clock_read, 63);
        for _ in 6..32 {
            assert!(condition.spin());
        }
        assert_eq!((condition.hints, condition.next_clock_read), (32, 63));
        assert!(condition.started().is_some() && lock.started().is_some());
    }
}
