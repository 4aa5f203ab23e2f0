//! Deadlines for futex sleeps without a kernel timer per sleep.
//!
//! A futex wait with a timeout arms a high-resolution timer in the kernel,
//! and the wake-up of the sleeper cancels it: on the machine this was
//! measured on (2-vCPU Xeon VM), that is about 250 ns on the critical path
//! of every wake-up (a futex-waiting topic round trip went from 3.5 to
//! 3.0 µs p50 without timeouts). tachyon's waits nearly always have a
//! deadline (the caller's timeout, or the slices in which a waiter looks
//! for dead peers), so they paid it on every sleep; a socket's blocking
//! `read` does not.
//!
//! Here a waiter sleeps on its futex word *without* a timeout and registers
//! its deadline with its process's alarm thread, which sleeps until the
//! earliest registered deadline and then wakes the sleepers whose deadline
//! passed: a `FUTEX_WAKE` on their word, which it does not change, so they
//! see a spurious wake-up, look at the clock and time out. The alarm
//! thread's own timer is on nobody's critical path; a waiter's cost is a
//! mutex-protected entry in a short list (no system call in the steady
//! state: the thread is told only of a deadline earlier than the one it
//! sleeps until).
//!
//! The thread lingers for [`LINGER`] with nothing registered before it
//! sleeps without a deadline, so that a stream of sleeps (each registering a
//! deadline a little later than the last) does not wake it for each one;
//! it wakes about once per registered deadline at most.
//!
//! A sleeper may not be asleep yet when its deadline passes (it registers,
//! then enters the futex; it can be descheduled in between), and a
//! `FUTEX_WAKE` reaches only those already asleep. So the thread wakes an
//! expired sleeper again every [`REWAKE`] until the sleeper removes its
//! registration: a late sleeper sleeps at most that long past its deadline.
//!
//! A word's address stays valid while its registration lives: the waiter
//! removes it (under the list's mutex) before it returns from the sleep,
//! and the thread wakes words only under that mutex.
//!
//! `fork`: a child has no alarm thread, and the parent's list (and its
//! mutex, maybe held at the fork) is not the child's. A `pthread_atfork`
//! child handler forgets the parent's alarms (one atomic store, no lock);
//! the child's first timed sleep starts its own thread. If no thread can be
//! started, [`arm`] says so and the caller sleeps with a kernel timeout, as
//! before.

use std::sync::atomic::{AtomicPtr, AtomicU32, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, Once};
use std::time::{Duration, Instant};

/// The shortest timeout worth an alarm: shorter sleeps use the kernel's
/// timer (the alarm thread's own wake-up is not that precise).
pub(crate) const MIN_ALARM: Duration = Duration::from_micros(500);

/// How long the alarm thread stays armed with nothing registered.
const LINGER: Duration = Duration::from_millis(50);

/// How often an expired sleeper that has not removed its registration is
/// woken again (it may have gone to sleep only after the first wake-up).
const REWAKE: Duration = Duration::from_millis(1);

/// A registered sleeper: its deadline, an id, its futex word's address.
struct Sleeper {
    deadline: Instant,
    id: u64,
    word: *const AtomicU32,
    /// When it was last woken for its deadline.
    woken: Option<Instant>,
}

impl Sleeper {
    /// When the thread must next wake this sleeper.
    fn due(&self) -> Instant {
        self.woken.map_or(self.deadline, |w| w + REWAKE)
    }
}

// SAFETY: `word` is only dereferenced by the alarm thread under the list's
// mutex, while the registration (and so the waiter's borrow of the word,
// inside a mapping the waiter keeps) lives; see the module documentation.
unsafe impl Send for Sleeper {}

#[derive(Default)]
struct State {
    sleepers: Vec<Sleeper>,
    next_id: u64,
    /// Whether the thread was started.
    running: bool,
    /// When the thread wakes next (`None`: not until told).
    target: Option<Instant>,
}

/// One process's alarms.
#[derive(Default)]
struct Alarms {
    state: Mutex<State>,
    changed: Condvar,
}

/// The calling process's alarms (null: none yet, or forgotten in a child).
static ALARMS: AtomicPtr<Alarms> = AtomicPtr::new(std::ptr::null_mut());

extern "C" fn forget_in_child() {
    // Only the forking thread runs in the child: the parent's list, its
    // mutex and its thread are not the child's. Leaked, never touched.
    ALARMS.store(std::ptr::null_mut(), Ordering::Relaxed);
}

fn alarms() -> &'static Alarms {
    static AT_FORK: Once = Once::new();
    AT_FORK.call_once(|| {
        // SAFETY: registers a handler that only stores to an atomic
        // (async-signal-safe, as a child handler must be). If registration
        // fails (ENOMEM), a forked child would keep the parent's alarms,
        // whose thread does not exist there: `arm` then finds `running`
        // true and nobody wakes its sleepers at their deadline, so the
        // child's timed sleeps would last until a real wake-up. Registration
        // failing is not known to happen in practice.
        unsafe { libc::pthread_atfork(None, None, Some(forget_in_child)) };
    });
    // SYNC: this Acquire and the CAS below (AcqRel) publish the leaked `Alarms` to every
    // thread that finds the pointer.
    let now = ALARMS.load(Ordering::Acquire);
    if !now.is_null() {
        // SAFETY: a pointer stored here is a leaked `Box`, never freed.
        return unsafe { &*now };
    }
    let fresh = Box::into_raw(Box::<Alarms>::default());
    match ALARMS.compare_exchange(std::ptr::null_mut(), fresh, Ordering::AcqRel, Ordering::Acquire) {
        // SAFETY: just leaked; lives for ever.
        Ok(_) => unsafe { &*fresh },
        Err(other) => {
            // SAFETY: `fresh` was never shared; `other` is a leaked `Box`.
            unsafe {
                drop(Box::from_raw(fresh));
                &*other
            }
        }
    }
}

fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A registered deadline; dropping it unregisters it.
pub(crate) struct Armed {
    alarms: &'static Alarms,
    id: u64,
}

impl Drop for Armed {
    fn drop(&mut self) {
        let mut st = lock(&self.alarms.state);
        if let Some(i) = st.sleepers.iter().position(|s| s.id == self.id) {
            st.sleepers.swap_remove(i);
        }
    }
}

/// Registers `deadline` for a sleeper on `word`: at the deadline, the
/// process's alarm thread wakes the sleepers of `word`. `None` if the
/// alarm thread cannot be started (sleep with a kernel timeout instead).
///
/// The registration must be dropped before the borrow of `word` ends.
pub(crate) fn arm(deadline: Instant, word: &AtomicU32) -> Option<Armed> {
    let alarms = alarms();
    let mut st = lock(&alarms.state);
    if !st.running {
        let started = std::thread::Builder::new().name("tachyon-alarm".into()).spawn(move || run(alarms));
        if started.is_err() {
            return None;
        }
        st.running = true;
    }
    let id = st.next_id;
    st.next_id += 1;
    st.sleepers.push(Sleeper { deadline, id, word, woken: None });
    if st.target.is_none_or(|t| deadline < t) {
        st.target = Some(deadline);
        alarms.changed.notify_one();
    }
    Some(Armed { alarms, id })
}

/// The alarm thread: wakes the sleepers whose deadline passed, then sleeps
/// until the next deadline (or lingers, or waits to be told).
fn run(alarms: &'static Alarms) {
    let mut st = lock(&alarms.state);
    let mut idle_since: Option<Instant> = None;
    loop {
        let now = Instant::now();
        for s in st.sleepers.iter_mut().filter(|s| s.due() <= now) {
            // SAFETY: the registration lives (it is in the list, and its
            // waiter removes it under this mutex, which we hold), so the
            // waiter still borrows the word inside its mapping.
            crate::platform::futex::wake_all(unsafe { &*s.word });
            // Kept until its waiter removes it: woken again if it was not
            // asleep yet.
            s.woken = Some(now);
        }
        let next = st.sleepers.iter().map(Sleeper::due).min();
        st.target = match next {
            Some(d) => {
                idle_since = None;
                Some(d)
            }
            None => {
                let since = *idle_since.get_or_insert(now);
                (now < since + LINGER).then_some(since + LINGER)
            }
        };
        st = match st.target {
            Some(t) => alarms
                .changed
                .wait_timeout(st, t.saturating_duration_since(now))
                .map_or_else(|p| p.into_inner().0, |(g, _)| g),
            None => alarms.changed.wait(st).unwrap_or_else(|p| p.into_inner()),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::platform::futex;

    /// Sleeps on `word` (holding 0) with no kernel timeout until `deadline`
    /// passed, relying on the alarm; a rescuer sets the word to 1 after 10
    /// s so that a broken alarm fails the test instead of hanging it.
    /// Returns whether the rescuer had to act.
    fn sleep_armed(word: &AtomicU32, deadline: Instant) -> bool {
        let armed = arm(deadline, word).expect("the alarm thread starts");
        while Instant::now() < deadline && word.load(Ordering::Acquire) == 0 {
            futex::wait(word, 0, None);
        }
        drop(armed);
        word.load(Ordering::Acquire) != 0
    }

    fn rescuer<'a>(s: &'a std::thread::Scope<'a, '_>, words: &'a [AtomicU32], done: &'a AtomicU32) {
        s.spawn(move || {
            let start = Instant::now();
            while done.load(Ordering::Acquire) == 0 && start.elapsed() < Duration::from_secs(10) {
                std::thread::sleep(Duration::from_millis(5));
            }
            for w in words {
                if w.swap(1, Ordering::AcqRel) == 0 && done.load(Ordering::Acquire) == 0 {
                    futex::wake_all(w);
                }
            }
        });
    }

    #[test]
    fn sleepers_without_kernel_timeouts_wake_at_their_deadlines() {
        let words: Vec<AtomicU32> = (0..8).map(|_| AtomicU32::new(0)).collect();
        let done = AtomicU32::new(0);
        let rescued = AtomicU32::new(0);
        std::thread::scope(|s| {
            rescuer(s, &words, &done);
            let sleepers: Vec<_> = words
                .iter()
                .enumerate()
                .map(|(i, w)| {
                    let rescued = &rescued;
                    s.spawn(move || {
                        let deadline = Instant::now() + Duration::from_millis(5 + 3 * i as u64);
                        if sleep_armed(w, deadline) {
                            rescued.fetch_add(1, Ordering::Relaxed);
                        }
                    })
                })
                .collect();
            for t in sleepers {
                t.join().unwrap();
            }
            done.store(1, Ordering::Release);
        });
        assert_eq!(rescued.load(Ordering::Relaxed), 0, "every sleeper woken by its alarm");
        assert!(lock(&alarms().state)
            .sleepers
            .iter()
            .all(|s| !words.iter().any(|w| std::ptr::eq(s.word, w))));
    }

    #[test]
    fn a_sleeper_that_sleeps_after_its_alarm_fired_is_woken_again() {
        let word = AtomicU32::new(0);
        let done = AtomicU32::new(0);
        let rescued = std::thread::scope(|s| {
            rescuer(s, std::slice::from_ref(&word), &done);
            // Registered with a deadline that passes at once, then 20 ms
            // before sleeping: the first wake-up finds nobody asleep.
            let armed = arm(Instant::now(), &word).expect("the alarm thread starts");
            std::thread::sleep(Duration::from_millis(20));
            futex::wait(&word, 0, None);
            drop(armed);
            let rescued = word.load(Ordering::Acquire) != 0;
            done.store(1, Ordering::Release);
            rescued
        });
        assert!(!rescued, "woken again by the alarm, not by the rescuer");
    }

    #[test]
    fn a_forked_child_gets_alarms_of_its_own() {
        // Start this process's alarm thread, then fork: the child has no
        // such thread and must start its own.
        let word = AtomicU32::new(0);
        assert!(!sleep_armed(&word, Instant::now() + Duration::from_millis(2)));
        // SAFETY: the child only sleeps (armed) and exits with _exit; it
        // runs no destructor and touches nothing the parent's other threads
        // hold but through `arm`, which the atfork handler made fresh.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork");
        if pid == 0 {
            let word = AtomicU32::new(0);
            let start = Instant::now();
            let ok = arm(start + Duration::from_millis(5), &word).is_some_and(|armed| {
                while start.elapsed() < Duration::from_millis(5) && start.elapsed() < Duration::from_secs(10)
                {
                    futex::wait(&word, 0, Some(Duration::from_secs(10)));
                }
                drop(armed);
                start.elapsed() < Duration::from_secs(5)
            });
            // SAFETY: leaves the child at once, as after any fork in a test.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        let mut status = 0;
        // SAFETY: waits for the child just forked.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "status {status}");
    }
}
