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
//!
//! Armed words (no wake-up for nobody). The top bit of `seq` ([`ARMED`])
//! says that a waiter has gone to sleep on its value since the last
//! notifier moved it: a waiter sets it (`fetch_or`) after its re-check,
//! and sleeps on the value with the bit only if nothing else changed the
//! word meanwhile ([`arm`]). A notifier that sees a sleeper counts the
//! lower 31 bits on and clears the bit, and enters the kernel only if the
//! bit was set.
//! A notifier that finds a waiter still counted but already woken (it has
//! not run yet to take its registration back) makes no system call: in a
//! stream whose consumer sleeps, the producer's every message until then
//! was a `FUTEX_WAKE` that woke nobody (97 % of them, measured with
//! `perf record -e syscalls:sys_exit_futex`, docs/benchmark-history.md).
//! No wake-up is lost: the two changes of the word are read-modify-writes
//! of one atomic, so one comes first. If the arming does, the notifier
//! sees the bit and wakes; if the notifier's move does, the waiter's
//! `fetch_or` returns a word that moved since its load, and it does not
//! sleep. `notify_one` counts on and leaves the bit set (the sleepers it
//! does not wake still sleep on the armed value), and wakes whenever it
//! sees a sleeper.
//!
//! Waiters register in the upper half of `sleepers` ([`ARMING`]). A waiter
//! of a build before armed words registers in the lower half and sleeps on
//! a value it never arms; a notifier that sees one wakes as it always did.
//! A notifier of such a build adds 1 to the word and wakes whenever
//! `sleepers` is not zero: its move changes the lower bits, which a waiter
//! arming the word never does, so the waiter sees it. Every mix of the
//! two is woken (loom models of both mixes).

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
    /// Moved by a notifier that saw a sleeper; the futex word. Its top bit
    /// ([`ARMED`]): a waiter has armed it (see the module's "Armed words").
    seq: AtomicU32,
    /// Waiters between registering and leaving: [`ARMING`] each, and 1
    /// each for waiters that do not arm (built before armed words).
    sleepers: AtomicU32,
}

/// What a waiter that arms the word adds to a [`WaitCell`]'s `sleepers`
/// while it is registered: the upper half, so that the lower half counts
/// only waiters that never arm (see the module's "Armed words").
pub(crate) const ARMING: u32 = 1 << 16;

/// The waiters that never arm the word, in a `sleepers` count.
const UNARMED: u32 = ARMING - 1;

/// The bit of a [`WaitCell`]'s `seq` that says a waiter sleeps on its value
/// (see the module's "Armed words"); notifiers count in the other 31.
pub(crate) const ARMED: u32 = 1 << 31;

/// A `sleepers` count `n` without one registration of `unit`: never
/// below zero, and never into the other half of the count. A count
/// another process erased must not wrap into "always sleepers" (every
/// notify a system call for ever).
pub(crate) fn unregister(n: u32, unit: u32) -> u32 {
    let mine = if unit == ARMING { n >> 16 } else { n & UNARMED };
    if mine == 0 {
        n
    } else {
        n - unit
    }
}

/// The waiter's half of an armed word (see the module's "Armed words"):
/// sets [`ARMED`] in `word`, which held `seen` when the waiter loaded it
/// before its re-check, and returns the value to sleep on: `seen` with
/// the bit if nothing moved the word since, else `seen` itself, which the
/// word no longer holds (so the sleep returns at once and the caller
/// looks again).
pub(crate) fn arm(word: &AtomicU32, seen: u32) -> u32 {
    if seen & ARMED != 0 {
        // Armed already: a notifier that moves the word from here sees it.
        return seen;
    }
    // SYNC: no ordering of its own: one read-modify-write of the word against the notifier's
    // (`announce_if`); their order on the word decides, see "Armed words". The sleep's
    // compare in the kernel comes after it.
    let now = word.fetch_or(ARMED, Relaxed);
    if now == seen {
        seen | ARMED
    } else {
        seen
    }
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

    /// [`notify_all_with`](Self::notify_all_with) for sleepers that may
    /// have asked to be woken later than now: once a sleeper is seen,
    /// `wanted` says whether to wake it (it reads what the sleepers asked
    /// for, stored before they registered). No wake-up if it says no, so
    /// a sleeper must wait with a timeout for what `wanted` turns down
    /// (a ring's writer that waits for a gap: `Ring::wake_writers`).
    #[inline]
    #[cfg_attr(tachyon_loom, allow(dead_code))]
    pub(crate) fn notify_all_if(&self, light: bool, wanted: impl FnOnce() -> bool) {
        if self.announce_if(light, wanted) {
            wake_all(&self.seq);
        }
    }

    /// Wakes at least one waiter if any sleeps. Call after making the
    /// condition true for one waiter. Makes no system call when nobody
    /// sleeps.
    pub fn notify_one(&self) {
        // SYNC: SeqCst, as in `announce_if`.
        fence(SeqCst);
        if self.sleepers.load(Relaxed) != 0 {
            // SYNC: Release, as in `announce_if`. The armed bit stays, for the sleepers this
            // wake-up does not reach (they still sleep on the armed value).
            let _ =
                self.seq.fetch_update(Release, Relaxed, |v| Some((v.wrapping_add(1) & !ARMED) | (v & ARMED)));
            wake(&self.seq, 1);
        }
    }

    /// The notifier's half of the protocol: true if a sleeper must be woken.
    /// `light`: every waiter of this cell runs the heavy half of an
    /// asymmetric fence after it registers.
    #[inline]
    fn announce(&self, light: bool) -> bool {
        self.announce_if(light, || true)
    }

    /// [`announce`](Self::announce), with the sleepers' own say once one
    /// is seen (`wanted`, see [`notify_all_if`](Self::notify_all_if)):
    /// its loads come after the load of `sleepers`, so after the same
    /// fence, and see what a sleeper stored before it registered.
    #[inline]
    fn announce_if(&self, light: bool, wanted: impl FnOnce() -> bool) -> bool {
        // SYNC: SeqCst: the condition's store, then the load of `sleepers`, against the fence
        // in `park` (the eventcount's store-load order, see the module's invariant). Light:
        // a compiler fence once this process is registered for `membarrier`, against the
        // sleeper's `membarrier::heavy` (the same order, asymmetric).
        if light {
            crate::platform::membarrier::light();
        } else {
            fence(SeqCst);
        }
        let sleepers = self.sleepers.load(Relaxed);
        if sleepers == 0 || !wanted() {
            return false;
        }
        // SYNC: pairs with the Acquire load of `seq` in `park`: a waiter that reads this move
        // sees the condition (where the two fences alone would not order it). Release: the
        // condition's store comes before it. Counted on in the lower bits, the armed bit
        // cleared.
        let old = self.seq.fetch_update(Release, Relaxed, |v| Some(v.wrapping_add(1) & !ARMED));
        let old = old.unwrap_or_else(|v| v);
        // A waiter asleep on the armed word, or one that never arms.
        old & ARMED != 0 || sleepers & UNARMED != 0
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
        ready: impl FnMut() -> Option<T>,
    ) -> Result<T> {
        self.wait_after_look_then(light, policy, timeout, &|| {}, ready)
    }

    /// [`wait_after_look_with`](Self::wait_after_look_with) that calls
    /// `before_sleep` before each registration for a sleep (never while
    /// it spins): for a waiter that tells its notifiers what it waits for
    /// in a word of its own (a ring's writer, `Ring::ask_for_room`). A
    /// store there before the spin would take the word's line from the
    /// notifiers, which read it at every notify, each time a wait starts.
    pub(crate) fn wait_after_look_then<T>(
        &self,
        light: bool,
        policy: WaitPolicy,
        timeout: Option<Duration>,
        before_sleep: &dyn Fn(),
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
            before_sleep();
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
        self.sleepers.fetch_add(ARMING, Relaxed);
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
            let seq = arm(&self.seq, seq);
            match now {
                Some(now) => sleep_from(&self.seq, seq, now, timeout, holder_gone),
                None => {
                    sleep(&self.seq, seq, timeout, holder_gone);
                }
            }
        }
        // Never below zero: a count another process erased must not wrap
        // into "always sleepers" (every notify a system call for ever).
        let _ = self.sleepers.fetch_update(Relaxed, Relaxed, |n| Some(unregister(n, ARMING)));
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
        super::waitv::SleepPoint { word: &self.seq, sleepers: &self.sleepers, light, arms: true }
    }

    /// The notifiers' count (the futex word without its armed bit, which
    /// sleepers set) and the sleeper count, for tests.
    #[cfg(all(test, not(tachyon_loom)))]
    pub(crate) fn snapshot(&self) -> (u32, u32) {
        (self.seq.load(Relaxed) & !ARMED, self.sleepers.load(Relaxed))
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

    /// A notifier enters the kernel only for a sleeper that armed the word
    /// since the last wake-up, or one that never arms: a waiter still
    /// counted after its wake-up (it has not run yet) costs the next
    /// notifiers no system call. The word moves at every notify that sees
    /// a sleeper all the same, and to an even value (the bit cleared).
    #[test]
    fn only_an_armed_word_or_an_unarming_sleeper_is_woken() {
        let cell = WaitCell::default();
        cell.sleepers.store(ARMING, Relaxed);
        assert!(!cell.announce(false), "registered, not armed yet: no wake-up");
        assert_eq!(cell.seq.load(Relaxed), 1, "moved, so that its arming fails");
        assert_eq!(arm(&cell.seq, 1), 1 | ARMED);
        assert!(cell.announce(false), "armed: woken");
        assert_eq!(cell.seq.load(Relaxed), 2, "counted on, the bit cleared");
        assert!(!cell.announce(false), "woken already, still counted: no second wake-up");
        assert_eq!(cell.seq.load(Relaxed), 3);
        cell.sleepers.store(ARMING + 1, Relaxed);
        assert!(cell.announce(false), "a sleeper that never arms is always woken");
        cell.sleepers.store(0, Relaxed);
        let before = cell.seq.load(Relaxed);
        assert!(!cell.announce(false));
        assert_eq!(cell.seq.load(Relaxed), before, "nobody registered: the word stays");
        cell.seq.store(!ARMED, Relaxed);
        cell.sleepers.store(ARMING, Relaxed);
        cell.notify_all();
        assert_eq!(cell.seq.load(Relaxed), 0, "the count wraps in its 31 bits");
    }

    /// `notify_all_if` with sleepers that asked for a later point moves
    /// nothing and wakes nobody; `notify_one` counts on and keeps the
    /// armed bit for the sleepers it does not wake.
    #[test]
    fn a_notify_the_sleepers_turn_down_leaves_the_word() {
        let cell = WaitCell::default();
        cell.sleepers.store(ARMING, Relaxed);
        assert_eq!(arm(&cell.seq, 0), ARMED);
        cell.notify_all_if(false, || false);
        assert_eq!(cell.seq.load(Relaxed), ARMED, "turned down: armed as it was");
        cell.notify_one();
        assert_eq!(cell.seq.load(Relaxed), ARMED | 1, "counted on, still armed");
    }

    /// Arming: on a word nobody moved it sets the bit and returns the armed
    /// value; on a word that moved since it was read (by a notifier of
    /// this build, or one that adds 1 whatever the bit) it returns the
    /// value read, which the word no longer holds (the sleep returns at
    /// once).
    #[test]
    fn arming_a_moved_word_returns_the_value_read() {
        let word = AtomicU32::new(4);
        assert_eq!(arm(&word, 4), 4 | ARMED);
        assert_eq!(word.load(Relaxed), 4 | ARMED);
        assert_eq!(arm(&word, 4 | ARMED), 4 | ARMED, "armed already");
        word.store(5, Relaxed);
        assert_eq!(arm(&word, 4), 4);
        assert_ne!(word.load(Relaxed), 4);
    }

    /// Taking a registration back never goes below zero, nor into the
    /// other half of the count.
    #[test]
    fn a_registration_is_taken_back_from_its_own_half() {
        assert_eq!(unregister(ARMING + 1, ARMING), 1);
        assert_eq!(unregister(ARMING + 1, 1), ARMING);
        assert_eq!(unregister(1, ARMING), 1, "an erased registration leaves the other half");
        assert_eq!(unregister(ARMING, 1), ARMING);
        assert_eq!(unregister(0, ARMING), 0);
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

#[cfg(all(test, tachyon_loom))]
mod loom_models {
    use super::{WaitCell, WaitPolicy};
    use crate::platform::atomic::{fence, AtomicU32, AtomicU64, Ordering::*};
    use crate::sync::loom_model as model;
    use loom::sync::Arc;
    use loom::thread;

    /// Two waiters of one cell, each for a condition of its own, and a
    /// notifier that makes the two true one after the other and notifies
    /// after each. The first notify clears the armed bit of a word the
    /// second waiter may be arming, or sleeping on: both wake (a lost
    /// wake-up is a deadlock here).
    #[test]
    fn two_notifies_wake_two_waiters_of_one_armed_word() {
        model(|| {
            let cell = Arc::new(WaitCell::new());
            let flags = Arc::new([AtomicU32::new(0), AtomicU32::new(0)]);
            let waiters: Vec<_> = (0..2)
                .map(|i| {
                    let (cell, flags) = (cell.clone(), flags.clone());
                    thread::spawn(move || {
                        cell.wait_until(WaitPolicy::Futex, None, || {
                            (flags[i].load(Relaxed) != 0).then_some(())
                        })
                    })
                })
                .collect();
            for f in flags.iter() {
                f.store(1, Relaxed);
                cell.notify_all();
            }
            for w in waiters {
                w.join().unwrap().unwrap();
            }
            assert_eq!(cell.sleepers.load(Relaxed), 0, "every registration taken back");
        });
    }

    /// A thread of this build that waits on `cell` (futex policy, no
    /// timeout) until `flag` is set.
    fn flag_waiter(cell: &Arc<WaitCell>, flag: &Arc<AtomicU32>) -> thread::JoinHandle<crate::Result<()>> {
        let (cell, flag) = (cell.clone(), flag.clone());
        thread::spawn(move || {
            cell.wait_until(WaitPolicy::Futex, None, || (flag.load(Relaxed) != 0).then_some(()))
        })
    }

    /// A waiter of a build before armed words (it registers in the lower
    /// half of `sleepers` and sleeps on the value it read, never armed)
    /// beside one of this build: one notify wakes both.
    #[test]
    fn a_waiter_that_never_arms_is_woken() {
        model(|| {
            let cell = Arc::new(WaitCell::new());
            let flag = Arc::new(AtomicU32::new(0));
            let old = {
                let (cell, flag) = (cell.clone(), flag.clone());
                thread::spawn(move || loop {
                    cell.sleepers.fetch_add(1, Relaxed);
                    fence(SeqCst);
                    let seen = cell.seq.load(Acquire);
                    let done = flag.load(Relaxed) != 0;
                    if !done {
                        crate::platform::futex::sleep(&cell.seq, seen, None, &|| false);
                    }
                    cell.sleepers.fetch_sub(1, Relaxed);
                    if done {
                        break;
                    }
                })
            };
            let new = flag_waiter(&cell, &flag);
            flag.store(1, Relaxed);
            cell.notify_all();
            old.join().unwrap();
            new.join().unwrap().unwrap();
        });
    }

    /// A notifier of a build before armed words (it adds 1 to the word and
    /// wakes whenever it sees a sleeper, armed or not) and a waiter of
    /// this build: the waiter wakes. Its arming must not take that move
    /// for its own bit.
    #[test]
    fn a_notifier_that_never_looks_at_the_bit_wakes_an_armed_waiter() {
        model(|| {
            let cell = Arc::new(WaitCell::new());
            let flag = Arc::new(AtomicU32::new(0));
            let waiter = flag_waiter(&cell, &flag);
            flag.store(1, Relaxed);
            fence(SeqCst);
            if cell.sleepers.load(Relaxed) != 0 {
                cell.seq.fetch_add(1, Release);
                crate::platform::futex::wake_all(&cell.seq);
            }
            waiter.join().unwrap().unwrap();
        });
    }

    /// A ring's writer that asks to be woken at a later hand-back (the
    /// mark, stored before it registers: `Ring::claim_waiting_long`) and a
    /// reader that hands back items 0 and 1, with the notify of
    /// `Ring::wake_writers` after each: the writer, which can go on from
    /// the first hand-back, is woken at the mark (item 1) at the latest.
    #[test]
    fn a_writer_waiting_for_a_mark_is_woken_at_the_mark() {
        model(|| {
            let cell = Arc::new(WaitCell::new());
            let freed = Arc::new(AtomicU64::new(0));
            let room_at = Arc::new(AtomicU64::new(0));
            let writer = {
                let (cell, freed, room_at) = (cell.clone(), freed.clone(), room_at.clone());
                thread::spawn(move || {
                    room_at.store(1, Relaxed);
                    cell.wait_until(WaitPolicy::Futex, None, || (freed.load(Relaxed) > 0).then_some(()))
                })
            };
            for q in 0..2u64 {
                freed.store(q + 1, Relaxed);
                cell.notify_all_if(false, || crate::sync::ring::room_reached(room_at.load(Relaxed), q, 4));
            }
            writer.join().unwrap().unwrap();
        });
    }
}
