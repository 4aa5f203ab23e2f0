//! Futex wake-ups as [`Waker`] wake-ups: the async waiter thread.
//!
//! A future that finds nothing to do registers as a sleeper of the wait
//! cells it needs (the same [`SleepPoint`]s a blocking wait registers in),
//! fences, reads their words, looks once more, and hands `(word, value,
//! waker)` to this process's waiter thread. The thread sleeps on all the
//! registered words at once (`futex_waitv`) plus a control word of its own;
//! a notifier that sees the registered sleeper changes the word and wakes
//! it, the thread wakes, sees the word no longer holds the registered
//! value, and wakes the future's waker. The notifier side is exactly the
//! one blocking waiters already rely on (see `sync/waitv.rs` for why no
//! wake-up is lost); producers neither know nor care whether a consumer
//! sleeps in a thread or in a future.
//!
//! # Registrations
//!
//! A registration is checked by value ("level-triggered"): whenever the
//! thread wakes, for any reason, it wakes the waker of every registration
//! one of whose words differs from its registered value, and removes it.
//! A spurious wake-up costs a look; a missed one cannot happen, since a
//! registration is only removed once its word has moved (or its owner
//! withdrew it). New registrations bump the control word (and wake the
//! thread if it sleeps) so that it rebuilds its list.
//!
//! One `futex_waitv` takes at most 128 words: a thread (a *shard*) takes
//! registrations up to 127 words (one is its control word), and more
//! registrations start more shards, each with its own thread; a
//! registration of more than 127 words is split over shards. Threads are
//! started on demand and stay (asleep without a timeout while they have
//! nothing registered).
//!
//! Every [`RECHECK`] a registration that has not fired is woken anyway, so
//! that a pending future looks again for dead peers (a dead producer's
//! half-written cell, a dead consumer's held message), as blocking waits
//! do between their sleeps.
//!
//! # Memory
//!
//! The words live in shared mappings owned by the handles the futures
//! hold. The thread reads a word only under its shard's lock, while the
//! registration exists, and [`Parked`] withdraws its registrations (under
//! that lock) before its owner can drop the handle. The kernel may still
//! sleep on a withdrawn word's address until the thread's next turn; a
//! read of an unmapped address there is an `EFAULT`, after which the thread
//! rebuilds its list.
//!
//! `fork`: a child has none of the parent's threads; a `pthread_atfork`
//! child handler forgets them (futures moved into a child are not
//! supported).

use super::waitv::SleepPoint;
use crate::platform::atomic::{fence, AtomicU32, Ordering::*};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

#[cfg(tachyon_loom)]
use loom::sync::{Mutex, MutexGuard};
#[cfg(not(tachyon_loom))]
use std::sync::{Mutex, MutexGuard};

/// How long a registration waits before its future is woken to look for
/// dead peers.
#[cfg_attr(tachyon_loom, allow(dead_code))]
pub(crate) const RECHECK: Duration = Duration::from_millis(100);

/// Words one shard's thread sleeps on besides its control word.
const SHARD_WORDS: usize = crate::platform::futex::WAITV_MAX - 1;

/// One registration: words with the values they held, and whom to wake.
struct Reg {
    id: u64,
    /// Word addresses (valid while the registration lives) and values.
    words: Vec<(usize, u32)>,
    waker: Waker,
    #[cfg(not(tachyon_loom))]
    since: std::time::Instant,
}

#[derive(Default)]
struct ShardState {
    regs: Vec<Reg>,
    /// Words registered (duplicates counted).
    used: usize,
    next_id: u64,
    /// The thread is (about to be) asleep: a registration must wake it.
    sleeping: bool,
}

/// One waiter thread's registrations.
#[derive(Default)]
pub(crate) struct Shard {
    state: Mutex<ShardState>,
    /// Bumped on every new registration; the thread sleeps on it too.
    control: AtomicU32,
}

fn lock(m: &Mutex<ShardState>) -> MutexGuard<'_, ShardState> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Reads a registered word.
///
/// # Safety
/// `addr` is a word of a registration that still exists, read under its
/// shard's lock (see "Memory").
unsafe fn load(addr: usize) -> u32 {
    // SYNC: Acquire pairs with the notifier's Release change of the word
    // (`WaitCell::announce`, `Event::set`): the woken future's next attempt sees why.
    // SAFETY: the caller's contract: the word's owner keeps its mapping
    // until it has withdrawn the registration, which needs the lock we hold.
    unsafe { &*(addr as *const AtomicU32) }.load(Acquire)
}

impl Shard {
    /// Adds a registration; returns its id. Wakes the thread if it sleeps.
    fn register(&self, words: Vec<(usize, u32)>, waker: Waker) -> u64 {
        let mut st = lock(&self.state);
        let id = st.next_id;
        st.next_id += 1;
        st.used += words.len();
        st.regs.push(Reg {
            id,
            words,
            waker,
            #[cfg(not(tachyon_loom))]
            since: std::time::Instant::now(),
        });
        self.kick(&st);
        id
    }

    /// Makes the thread rebuild its list (under the lock).
    fn kick(&self, st: &ShardState) {
        // SYNC: made and read (`turn`) under the shard's lock, which orders them; the
        // bump is for the futex compare of a sleeping thread.
        self.control.fetch_add(1, Release);
        if st.sleeping {
            super::wait::wake_all(&self.control);
        }
    }

    /// Withdraws a registration (fired or not).
    fn withdraw(&self, id: u64) {
        let mut st = lock(&self.state);
        if let Some(i) = st.regs.iter().position(|r| r.id == id) {
            let r = st.regs.swap_remove(i);
            st.used -= r.words.len();
        }
    }

    /// Room for `n` more words?
    #[cfg_attr(tachyon_loom, allow(dead_code))]
    fn has_room(&self, n: usize) -> bool {
        lock(&self.state).used + n <= SHARD_WORDS
    }

    /// One turn of the thread: fire the registrations whose words moved (or
    /// that waited [`RECHECK`]), then sleep on the rest and the control word
    /// until any changes.
    pub(crate) fn turn(&self) {
        let mut fired = Vec::new();
        let mut words: Vec<(usize, u32)> = Vec::new();
        {
            let mut st = lock(&self.state);
            st.sleeping = false;
            #[cfg(not(tachyon_loom))]
            let now = std::time::Instant::now();
            let mut used = st.used;
            st.regs.retain(|r| {
                // SAFETY: registered words, read under the lock.
                let moved = r.words.iter().any(|&(a, v)| unsafe { load(a) } != v);
                #[cfg(not(tachyon_loom))]
                let moved = moved || now.duration_since(r.since) >= RECHECK;
                if moved {
                    fired.push(r.waker.clone());
                    used -= r.words.len();
                }
                !moved
            });
            st.used = used;
            words.push((&self.control as *const AtomicU32 as usize, self.control.load(Acquire)));
            for r in &st.regs {
                for &w in &r.words {
                    if !words.iter().any(|x| x.0 == w.0) {
                        words.push(w);
                    }
                }
            }
            // From here a registration must wake us (it bumps `control`
            // after we read it, under the lock, so the sleep below either
            // sees the new value or is woken).
            st.sleeping = fired.is_empty();
        }
        // Outside the lock: a waker may run code that registers again. A
        // turn that fired anything looks again before it sleeps.
        if !fired.is_empty() {
            for w in fired {
                w.wake();
            }
            return;
        }
        self.sleep(&words);
    }

    fn sleep(&self, words: &[(usize, u32)]) {
        // Addresses only: a registration withdrawn since the lock was let go
        // may leave an address whose mapping is gone (see "Memory").
        let addrs: Vec<(*const AtomicU32, u32)> =
            words.iter().map(|&(a, v)| (a as *const AtomicU32, v)).collect();
        let timeout = if words.len() > 1 { Some(RECHECK) } else { None };
        crate::platform::futex::wait_any_at(&addrs, timeout);
    }
}

/// A future's registrations with the waiter threads and the sleep points it
/// entered; withdrawn and left on [`clear`](Parked::clear) and on drop.
///
/// Its owner must drop it (or clear it) before the mapping the points live
/// in can go: declare it as the first field of the future.
#[derive(Default)]
pub(crate) struct Parked {
    regs: Vec<(Arc<Shard>, u64)>,
    /// Sleeper counts entered (addresses, and what each registration
    /// added: `SleepPoint::enter`), left on clear.
    entered: Vec<(usize, u32)>,
    /// When the future first went pending in its current wait.
    #[cfg(not(tachyon_loom))]
    since: Option<std::time::Instant>,
}

// SAFETY: the addresses in `entered` are of atomics in a shared mapping
// that the owner of this value keeps alive; they are only used for atomic
// decrements, from whichever thread holds the value.
unsafe impl Send for Parked {}
// SAFETY: `&Parked` gives no access to the addresses.
unsafe impl Sync for Parked {}

impl std::fmt::Debug for Parked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Parked").field("registrations", &self.regs.len()).finish()
    }
}

impl Parked {
    /// Withdraws every registration and leaves every sleep point.
    pub(crate) fn clear(&mut self) {
        for (shard, id) in self.regs.drain(..) {
            shard.withdraw(id);
        }
        for (a, unit) in self.entered.drain(..) {
            // SAFETY: an entered sleeper count, in a mapping the owner keeps
            // (see the type's contract).
            // Never below zero (see `WaitCell::park`).
            let _ = unsafe { &*(a as *const AtomicU32) }
                .fetch_update(Relaxed, Relaxed, |n| Some(super::wait::unregister(n, unit)));
        }
    }

    /// Whether it has been waiting (pending) for [`RECHECK`] or more: time
    /// for the owner's housekeeping (heartbeat, repairs).
    #[cfg_attr(tachyon_loom, allow(dead_code))]
    pub(crate) fn overdue(&self) -> bool {
        #[cfg(not(tachyon_loom))]
        return self.since.is_some_and(|s| s.elapsed() >= RECHECK);
        #[cfg(tachyon_loom)]
        return false;
    }

    /// The poll of a future waiting for `attempt` to succeed, announced by
    /// a notify of any of `points`: tries, registers as a sleeper, tries
    /// again, and if still nothing, registers `cx`'s waker with the waiter
    /// thread(s) and returns `Pending`. `attempt` must not block and must
    /// leave nothing half-done when it returns `None` (cancellation
    /// safety: the future may be dropped at any `Pending`).
    pub(crate) fn poll<T>(
        &mut self,
        cx: &mut Context<'_>,
        points: &[SleepPoint<'_>],
        mut attempt: impl FnMut() -> Option<T>,
    ) -> Poll<T> {
        self.clear();
        if let Some(v) = attempt() {
            self.done();
            return Poll::Ready(v);
        }
        for p in points {
            p.enter();
            self.entered.push((p.sleepers as *const AtomicU32 as usize, p.unit()));
        }
        // SYNC: SeqCst: the registrations above, then the loads below, against the notifier's
        // fence, as in `waitv::park_any` (and its heavy half for light points).
        fence(SeqCst);
        super::waitv::heavy_if_light(points);
        // SYNC: pairs with the notifier's Release change of each word: a word a notifier moved
        // means the `attempt` below sees that notifier's condition.
        let mut words: Vec<(usize, u32)> =
            points.iter().map(|p| (p.word as *const AtomicU32 as usize, p.word.load(Acquire))).collect();
        if let Some(v) = attempt() {
            self.clear();
            self.done();
            return Poll::Ready(v);
        }
        // Armed before the waiter thread sleeps on them (`sync/wait.rs`, "Armed words").
        for (p, w) in points.iter().zip(words.iter_mut()) {
            w.1 = p.arm(w.1);
        }
        self.register(words, cx.waker());
        #[cfg(not(tachyon_loom))]
        {
            self.since.get_or_insert_with(std::time::Instant::now);
        }
        Poll::Pending
    }

    fn done(&mut self) {
        #[cfg(not(tachyon_loom))]
        {
            self.since = None;
        }
    }

    /// Hands the words to shards with room (starting threads as needed):
    /// their waker is woken once any of them no longer holds its value.
    pub(crate) fn register(&mut self, words: Vec<(usize, u32)>, waker: &Waker) {
        if words.is_empty() {
            // Nothing can announce progress: look again at once.
            waker.wake_by_ref();
        }
        for chunk in words.chunks(SHARD_WORDS) {
            match register_with_room(chunk.to_vec(), waker) {
                Some(reg) => self.regs.push(reg),
                // No thread could be started: ask to be polled again (a
                // busy poll, but never a hang).
                None => waker.wake_by_ref(),
            }
        }
    }
}

impl Drop for Parked {
    fn drop(&mut self) {
        self.clear();
    }
}

/// This process's shards (one waiter thread each).
#[cfg(not(tachyon_loom))]
mod registry {
    use super::*;
    use std::sync::atomic::AtomicPtr;
    use std::sync::Once;

    type Shards = std::sync::Mutex<Vec<Arc<Shard>>>;

    static SHARDS: AtomicPtr<Shards> = AtomicPtr::new(std::ptr::null_mut());

    extern "C" fn forget_in_child() {
        // Only the forking thread runs in the child: the parent's threads
        // are not there. Leaked, never touched again.
        SHARDS.store(std::ptr::null_mut(), std::sync::atomic::Ordering::Relaxed);
    }

    fn shards() -> &'static Shards {
        static AT_FORK: Once = Once::new();
        AT_FORK.call_once(|| {
            // SAFETY: the handler only stores to an atomic (async-signal-
            // safe, as a child handler must be). If registering fails, a
            // forked child would find the parent's shards without their
            // threads: its futures would wait for a recheck that never
            // comes, so children must not use futures then (ENOMEM only).
            unsafe { libc::pthread_atfork(None, None, Some(forget_in_child)) };
        });
        // SYNC: this Acquire and the CAS below (AcqRel) publish the leaked `Shards` to
        // every thread that finds the pointer.
        let now = SHARDS.load(std::sync::atomic::Ordering::Acquire);
        if !now.is_null() {
            // SAFETY: a pointer stored here is a leaked `Box`, never freed.
            return unsafe { &*now };
        }
        let fresh = Box::into_raw(Box::<Shards>::default());
        match SHARDS.compare_exchange(
            std::ptr::null_mut(),
            fresh,
            std::sync::atomic::Ordering::AcqRel,
            std::sync::atomic::Ordering::Acquire,
        ) {
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

    /// Registers `words` with a shard that has room for them (started if
    /// need be), under the list's lock, so that no other registration
    /// takes the room in between.
    pub(super) fn register_with_room(words: Vec<(usize, u32)>, waker: &Waker) -> Option<(Arc<Shard>, u64)> {
        let mut list = shards().lock().unwrap_or_else(|p| p.into_inner());
        let shard = match list.iter().find(|s| s.has_room(words.len())) {
            Some(s) => Arc::clone(s),
            None => start(&mut list)?,
        };
        let id = shard.register(words, waker.clone());
        Some((shard, id))
    }

    /// Starts a shard and its thread.
    fn start(list: &mut Vec<Arc<Shard>>) -> Option<Arc<Shard>> {
        let shard = Arc::new(Shard::default());
        let run = Arc::clone(&shard);
        std::thread::Builder::new()
            .name(format!("tachyon-waker-{}", list.len()))
            .spawn(move || loop {
                run.turn();
            })
            .ok()?;
        list.push(Arc::clone(&shard));
        Some(shard)
    }

    /// Threads started so far (for tests).
    #[cfg(test)]
    pub(super) fn count() -> usize {
        shards().lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

#[cfg(not(tachyon_loom))]
use registry::register_with_room;

#[cfg(tachyon_loom)]
loom::lazy_static! {
    /// Under loom: the model's one shard, whose thread the model runs.
    pub(crate) static ref MODEL_SHARD: Arc<Shard> = Arc::new(Shard::default());
}

#[cfg(tachyon_loom)]
fn register_with_room(words: Vec<(usize, u32)>, waker: &Waker) -> Option<(Arc<Shard>, u64)> {
    let id = MODEL_SHARD.register(words, waker.clone());
    Some((Arc::clone(&MODEL_SHARD), id))
}

#[cfg(all(test, not(tachyon_loom)))]
mod tests {
    use super::*;
    use crate::sync::WaitCell;
    use std::future::Future;
    use std::pin::Pin;
    use std::sync::atomic::AtomicBool;

    /// A future waiting for `flag`, announced on `cells`.
    struct Wait<'a> {
        parked: Parked,
        cells: &'a [WaitCell],
        flag: &'a AtomicBool,
    }

    impl Future for Wait<'_> {
        type Output = ();
        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            let this = &mut *self;
            let points: Vec<_> = this.cells.iter().map(|c| c.sleep_point()).collect();
            let flag = this.flag;
            this.parked.poll(cx, &points, || flag.load(Acquire).then_some(()))
        }
    }

    fn block_on<F: Future>(f: F) -> F::Output {
        futures_executor_lite(f)
    }

    /// A minimal executor: park until woken.
    fn futures_executor_lite<F: Future>(f: F) -> F::Output {
        struct Unpark(std::thread::Thread);
        impl std::task::Wake for Unpark {
            fn wake(self: Arc<Self>) {
                self.0.unpark();
            }
        }
        let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
        let mut cx = Context::from_waker(&waker);
        let mut f = std::pin::pin!(f);
        loop {
            if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
                return v;
            }
            std::thread::park_timeout(Duration::from_secs(10));
        }
    }

    /// 300 cells (three shards' worth): a notify of any wakes the future.
    #[test]
    fn a_notify_of_any_word_wakes_the_future() {
        let cells: Vec<WaitCell> = (0..300).map(|_| WaitCell::new()).collect();
        for which in [0usize, 126, 127, 299] {
            let flag = AtomicBool::new(false);
            std::thread::scope(|s| {
                s.spawn(|| {
                    std::thread::sleep(Duration::from_millis(2));
                    flag.store(true, Release);
                    cells[which].notify_all();
                });
                block_on(Wait { parked: Parked::default(), cells: &cells, flag: &flag });
            });
            for c in &cells {
                assert_eq!(c.sleep_point().sleepers.load(Relaxed), 0, "left registered");
            }
        }
        assert!(registry::count() >= 3);
    }

    /// A dropped (cancelled) future leaves no sleeper registered.
    #[test]
    fn dropping_a_pending_future_withdraws_it() {
        let cells = [WaitCell::new()];
        let flag = AtomicBool::new(false);
        let mut fut = Box::pin(Wait { parked: Parked::default(), cells: &cells, flag: &flag });
        let waker = Waker::noop();
        let mut cx = Context::from_waker(waker);
        assert!(fut.as_mut().poll(&mut cx).is_pending());
        assert_eq!(cells[0].sleep_point().sleepers.load(Relaxed), crate::sync::wait::ARMING);
        drop(fut);
        assert_eq!(cells[0].sleep_point().sleepers.load(Relaxed), 0);
    }
}

/// Loom model of the registration and wake protocol: a future registers
/// with the waiter thread while a notifier makes its condition true; the
/// thread must wake the future's waker (a lost wake-up is a loom deadlock).
#[cfg(all(test, tachyon_loom))]
mod loom_models {
    use super::*;
    use crate::sync::WaitCell;

    #[test]
    fn a_registered_future_is_woken() {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(2);
        b.check(|| {
            let cell = Arc::new(WaitCell::new());
            let flag = Arc::new(AtomicU32::new(0));
            let stop = Arc::new(AtomicU32::new(0));
            let notifier = {
                let (cell, flag) = (cell.clone(), flag.clone());
                loom::thread::spawn(move || {
                    flag.store(1, Release);
                    cell.notify_all();
                })
            };
            let thread = {
                let stop = stop.clone();
                loom::thread::spawn(move || {
                    while stop.load(Acquire) == 0 {
                        MODEL_SHARD.turn();
                    }
                })
            };
            // A minimal executor: poll, and wait for the waker between polls.
            struct Woken(loom::sync::Notify);
            impl std::task::Wake for Woken {
                fn wake(self: std::sync::Arc<Self>) {
                    self.0.notify();
                }
            }
            let woken = std::sync::Arc::new(Woken(loom::sync::Notify::new()));
            let waker = Waker::from(woken.clone());
            let mut cx = Context::from_waker(&waker);
            let mut parked = Parked::default();
            while parked
                .poll(&mut cx, &[cell.sleep_point()], || (flag.load(Acquire) == 1).then_some(()))
                .is_pending()
            {
                woken.0.wait();
            }
            drop(parked);
            notifier.join().unwrap();
            // Stopping the thread: a registration on `stop`, then a notify
            // of it, as a producer would.
            MODEL_SHARD.register(vec![(&*stop as *const AtomicU32 as usize, 0)], Waker::noop().clone());
            stop.store(1, Release);
            super::super::wait::wake_all(&stop);
            thread.join().unwrap();
        });
    }
}
