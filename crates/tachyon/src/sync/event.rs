//! A process-shared event, auto-reset or manual-reset.
//!
//! Invariant. `state` = `gen << 2 | MANUAL << 1 | SET`, and is the futex
//! word. Every [`Event::set`] raises SET and adds one to `gen`, so the word
//! changes and no sleeper can miss a set. An auto-reset waiter passes only
//! by clearing SET with a CAS, so each set lets exactly one waiter through
//! (sets on a set event coalesce). A manual-reset waiter passes when it sees
//! SET, or sees `gen` move since it began waiting (a set followed at once
//! by a reset still releases those already waiting). Waiters register in
//! `waiters` before sleeping; `set` changes `state`, fences (`SeqCst`) and
//! wakes only if it sees a registered waiter, while a waiter registers,
//! fences, then lets the futex compare `state`: one of them sees the other.

use super::wait::{sleep, wake, wake_all, Deadline};
use crate::platform::atomic::{fence, AtomicU32, Ordering::*};
use crate::Result;
use std::time::Duration;

const SET: u32 = 1;
const MANUAL: u32 = 2;
const GEN_ONE: u32 = 4;

/// What a [`set`](Event::set) releases.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum EventMode {
    /// One waiter per set; passing resets the event. (All-zero memory is an
    /// auto-reset event.)
    #[default]
    AutoReset,
    /// Every waiter, until [`reset`](Event::reset).
    ManualReset,
}

/// An event that threads in many processes can wait on.
///
/// In [`EventMode::AutoReset`] each [`set`](Event::set) lets exactly one
/// waiter through and the event resets as it passes; setting an event that
/// is already set does nothing more. In [`EventMode::ManualReset`] a set
/// event releases every waiter until [`reset`](Event::reset). A successful
/// wait synchronises with the set that released it (memory written before
/// `set` is visible after `wait`).
///
/// All zeros is an unset auto-reset event; for a manual-reset event in
/// zeroed shared memory, call [`set_mode`](Event::set_mode) before sharing
/// it. A waiter killed while sleeping leaves its registration behind; `set`
/// then enters the kernel every time (slower, still correct).
///
/// ```
/// use std::time::Duration;
/// use tachyon::sync::{Event, EventMode};
///
/// let ready = Event::new(EventMode::AutoReset);
/// std::thread::scope(|s| {
///     s.spawn(|| ready.set());
///     ready.wait(Some(Duration::from_secs(10)))
/// })?;
/// assert!(!ready.is_set()); // auto-reset: passing consumed the set
/// assert!(matches!(ready.wait(Some(Duration::ZERO)), Err(tachyon::Error::Timeout { .. })));
/// # Ok::<(), tachyon::Error>(())
/// ```
#[repr(C)]
#[derive(Debug)]
pub struct Event {
    state: AtomicU32,
    waiters: AtomicU32,
}

impl Event {
    crate::sync::const_new! {
        /// An unset event in `mode`.
        pub fn new(mode: EventMode) -> Self {
            let state = match mode {
                EventMode::AutoReset => 0,
                EventMode::ManualReset => MANUAL,
            };
            Event { state: AtomicU32::new(state), waiters: AtomicU32::new(0) }
        }
    }

    /// Sets the mode of an event created in place (zeroed memory is
    /// auto-reset). Meant for initialisation, before other processes use
    /// the event.
    pub fn set_mode(&self, mode: EventMode) {
        match mode {
            // SYNC: before the event is shared (see above): nothing to pair with.
            EventMode::AutoReset => self.state.fetch_and(!MANUAL, AcqRel),
            EventMode::ManualReset => self.state.fetch_or(MANUAL, AcqRel),
        };
    }

    /// The event's mode.
    pub fn mode(&self) -> EventMode {
        if self.state.load(Acquire) & MANUAL != 0 {
            EventMode::ManualReset
        } else {
            EventMode::AutoReset
        }
    }

    /// Sets the event, releasing one waiter (auto-reset) or all of them
    /// (manual-reset). Makes no system call when nobody waits.
    pub fn set(&self) {
        let mut s = self.state.load(Relaxed);
        loop {
            let new = (s | SET).wrapping_add(GEN_ONE);
            // SYNC: Release pairs with the Acquire loads and CAS of `state` in `wait` and
            // `try_pass`: what was written before `set` is seen by a waiter that passes.
            match self.state.compare_exchange_weak(s, new, AcqRel, Relaxed) {
                Ok(_) => break,
                Err(now) => s = now,
            }
        }
        // SYNC: SeqCst: the change of `state`, then the load of `waiters`, against the fence
        // of a waiter between its registration and the futex's compare (`wait`, `park_any`).
        fence(SeqCst);
        if self.waiters.load(Relaxed) != 0 {
            // Even if it was set already: a waiter woken by an earlier set
            // may have died before passing.
            if s & MANUAL != 0 {
                wake_all(&self.state);
            } else {
                wake(&self.state, 1);
            }
        }
    }

    /// Unsets the event.
    pub fn reset(&self) {
        // SYNC: publishes nothing; as an RMW it continues the release sequence of the
        // last `set`, so a waiter that passes later still pairs with that set.
        self.state.fetch_and(!SET, AcqRel);
    }

    /// Whether the event is set now.
    pub fn is_set(&self) -> bool {
        self.state.load(Acquire) & SET != 0
    }

    /// Waits until the event is set (and, in auto-reset mode, resets it),
    /// or until `timeout` passes ([`Error::Timeout`](crate::Error::Timeout);
    /// `None`: no limit; `Some(Duration::ZERO)`: just try).
    pub fn wait(&self, timeout: Option<Duration>) -> Result<()> {
        // SYNC: pairs with the Release CAS in `set` (here and below).
        let mut s = self.state.load(Acquire);
        let start_gen = s & !(SET | MANUAL);
        let deadline = Deadline::waiting_for(timeout, "the event to be set");
        loop {
            if s & MANUAL != 0 {
                if s & SET != 0 || s & !(SET | MANUAL) != start_gen {
                    return Ok(());
                }
            } else if s & SET != 0 {
                // SYNC: pairs with the Release CAS in `set` that
                // raised SET: we see the setter's writes.
                match self.state.compare_exchange_weak(s, s & !SET, Acquire, Acquire) {
                    Ok(_) => return Ok(()),
                    Err(now) => {
                        s = now;
                        continue;
                    }
                }
            }
            let remaining = deadline.remaining()?;
            self.waiters.fetch_add(1, Relaxed);
            // SYNC: SeqCst: the registration, then the futex's compare of `state`, against the
            // fence in `set`.
            fence(SeqCst);
            sleep(&self.state, s, remaining, &|| false);
            self.waiters.fetch_sub(1, Relaxed);
            s = self.state.load(Acquire);
        }
    }
}

#[cfg(any(not(tachyon_loom), test))]
#[cfg_attr(tachyon_loom, allow(dead_code))]
impl Event {
    /// The event's futex word and waiter count, for waits on several
    /// things at once (`sync::waitv`, the async waiter).
    pub(crate) fn sleep_point(&self) -> super::waitv::SleepPoint<'_> {
        super::waitv::SleepPoint { word: &self.state, sleepers: &self.waiters, light: false, arms: false }
    }

    /// The count of sets so far (wrapping), for [`try_pass`](Self::try_pass).
    pub(crate) fn generation(&self) -> u32 {
        self.state.load(Acquire) & !(SET | MANUAL)
    }

    /// One look of [`wait`](Self::wait) begun at `start_gen`: true if the
    /// waiter passes (in auto-reset mode, having reset the event).
    pub(crate) fn try_pass(&self, start_gen: u32) -> bool {
        // SYNC: pairs with the Release CAS in `set`, as in `wait`.
        let mut s = self.state.load(Acquire);
        loop {
            if s & MANUAL != 0 {
                return s & SET != 0 || s & !(SET | MANUAL) != start_gen;
            }
            if s & SET == 0 {
                return false;
            }
            match self.state.compare_exchange_weak(s, s & !SET, Acquire, Acquire) {
                Ok(_) => return true,
                Err(now) => s = now,
            }
        }
    }

    /// Passes a set on to another sleeper: for a waiter that was woken by
    /// an auto-reset `set` (which wakes one sleeper) and leaves without
    /// passing (a cancelled future).
    pub(crate) fn pass_on(&self) {
        // SYNC: SeqCst: after the fence of the `set` that woke us (which happened before), so
        // the load of `waiters` sees a sleeper that registered before that set.
        fence(SeqCst);
        if self.is_set() && self.waiters.load(Relaxed) != 0 {
            wake(&self.state, 1);
        }
    }
}

impl Default for Event {
    fn default() -> Self {
        Self::new(EventMode::AutoReset)
    }
}

#[cfg(not(tachyon_loom))]
// SAFETY: `#[repr(C)]` of two `AtomicU32`s: no padding, every bit pattern
// (all zeros included) is a valid event, all mutation is atomic.
unsafe impl crate::segment::ShmSafe for Event {}

#[cfg(not(tachyon_loom))]
const _: () = assert!(std::mem::size_of::<Event>() == 8);

#[cfg(all(test, not(tachyon_loom)))]
mod tests {
    use super::*;
    use crate::Error;
    use std::sync::atomic::AtomicU32 as StdU32;
    use std::sync::Arc;
    use std::thread;

    const LONG: Option<Duration> = Some(Duration::from_secs(20));

    #[test]
    fn zeroed_is_unset_auto_reset() {
        let e = Event::default();
        assert_eq!(e.mode(), EventMode::AutoReset);
        assert!(!e.is_set());
        e.set_mode(EventMode::ManualReset);
        assert_eq!(e.mode(), EventMode::ManualReset);
        e.set_mode(EventMode::AutoReset);
        assert_eq!(e.mode(), EventMode::AutoReset);
    }

    #[test]
    fn timeout_fires() {
        for mode in [EventMode::AutoReset, EventMode::ManualReset] {
            let e = Event::new(mode);
            assert!(matches!(e.wait(Some(Duration::ZERO)), Err(Error::Timeout { .. })));
            assert!(matches!(e.wait(Some(Duration::from_millis(5))), Err(Error::Timeout { .. })));
            assert_eq!(e.waiters.load(Relaxed), 0);
        }
    }

    #[test]
    fn auto_reset_consumes_manual_does_not() {
        let e = Event::new(EventMode::AutoReset);
        e.set();
        e.set(); // coalesces
        e.wait(Some(Duration::ZERO)).unwrap();
        assert!(matches!(e.wait(Some(Duration::ZERO)), Err(Error::Timeout { .. })));

        let e = Event::new(EventMode::ManualReset);
        e.set();
        e.wait(Some(Duration::ZERO)).unwrap();
        e.wait(Some(Duration::ZERO)).unwrap();
        assert!(e.is_set());
        e.reset();
        assert!(matches!(e.wait(Some(Duration::ZERO)), Err(Error::Timeout { .. })));
    }

    /// Auto-reset: N sets, each handed to exactly one of several waiters
    /// (the setter waits for each set to be taken before the next).
    #[test]
    fn auto_reset_one_waiter_per_set() {
        const SETS: u32 = 500;
        let e = Arc::new(Event::new(EventMode::AutoReset));
        let passed = Arc::new(StdU32::new(0));
        let waiters: Vec<_> = (0..4)
            .map(|_| {
                let (e, passed) = (e.clone(), passed.clone());
                thread::spawn(move || loop {
                    match e.wait(Some(Duration::from_millis(200))) {
                        Ok(()) => {
                            if passed.fetch_add(1, SeqCst) + 1 >= SETS {
                                return;
                            }
                        }
                        Err(Error::Timeout { .. }) if passed.load(SeqCst) >= SETS => return,
                        Err(Error::Timeout { .. }) => {}
                        Err(other) => panic!("{other}"),
                    }
                })
            })
            .collect();
        for i in 0..SETS {
            e.set();
            while passed.load(SeqCst) <= i {
                thread::yield_now();
            }
            assert_eq!(passed.load(SeqCst), i + 1);
        }
        for w in waiters {
            w.join().unwrap();
        }
        assert_eq!(passed.load(SeqCst), SETS);
        assert!(!e.is_set());
    }

    #[test]
    fn manual_reset_releases_all_sleepers() {
        let e = Arc::new(Event::new(EventMode::ManualReset));
        let waiters: Vec<_> = (0..4)
            .map(|_| {
                let e = e.clone();
                thread::spawn(move || e.wait(LONG))
            })
            .collect();
        while e.waiters.load(SeqCst) < 4 {
            thread::yield_now();
        }
        e.set();
        for w in waiters {
            w.join().unwrap().unwrap();
        }
        assert!(e.is_set());
    }

    /// A set followed at once by a reset still releases those that were
    /// already waiting.
    #[test]
    fn manual_pulse_releases_sleepers() {
        let e = Arc::new(Event::new(EventMode::ManualReset));
        let waiters: Vec<_> = (0..3)
            .map(|_| {
                let e = e.clone();
                thread::spawn(move || e.wait(LONG))
            })
            .collect();
        while e.waiters.load(SeqCst) < 3 {
            thread::yield_now();
        }
        e.set();
        e.reset();
        for w in waiters {
            w.join().unwrap().unwrap();
        }
        assert!(!e.is_set());
    }
}
