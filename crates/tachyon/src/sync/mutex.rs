//! A robust process-shared mutex.
//!
//! Source: the futex mutex of U. Drepper, "Futexes Are Tricky" (2011),
//! its third version (a contended flag, so that an uncontended unlock makes
//! no system call), with the holder's token in the word instead of a bare
//! "locked" state, so that waiters can tell a dead holder (the robust
//! futex idea of the Linux kernel, done here without its kernel list).
//!
//! Invariant. `word` = `holder | DIED | CONTENDED`, where `holder` is the
//! raw [`Token`] of the attachment holding the lock (0: free), CONTENDED
//! (bit 31) means someone may sleep on the word, and DIED (bit 30) means a
//! holder died with the lock and nobody has released it normally since.
//! Only the holder puts `holder` back to 0 (unlock), except that a waiter
//! that sees the *same* holder before and after a sleep and learns from
//! [`Liveness::is_dead`] that it is gone replaces the word by CAS from the
//! value it observed (one CAS wins, so exactly one waiter takes over). A
//! waiter sets CONTENDED before it sleeps, and whoever gets the lock after
//! sleeping or by takeover keeps CONTENDED set (others may still sleep), so
//! an unlock that finds it clear has nobody to wake.
//!
//! The [`RwLock`](super::RwLock) uses this word as its writer lock, and
//! there readers may also clear a dead holder (leaving DIED set).
//!
//! Damage. Holder bits that are no token (not 0, generation 0) are a word
//! no step of the protocol writes: another process scribbled on it. A
//! locker that finds one (on its slow path: the fast path's CAS from 0
//! fails on it) takes the word over as from a dead holder, by one CAS
//! *from the damaged value*, and reports `owner_died` (the data may be
//! half-updated). Nobody else moves the word from that value, so exactly
//! one locker wins; a live holder whose word was overwritten finds it no
//! longer its own at release and leaves it alone.

use super::wait::{sleep, wake, Deadline, Slices, SpinWait};
use super::{Liveness, Token};
use crate::platform::atomic::{AtomicU32, Ordering::*};
use crate::platform::trace;
use crate::{Corruption, Error, Result};
use std::fmt;
use std::marker::PhantomData;
use std::time::Duration;

/// Someone may sleep on the word.
pub(crate) const CONTENDED: u32 = 1 << 31;
/// A holder died holding the lock; cleared by the next normal release.
pub(crate) const DIED: u32 = 1 << 30;

/// Whether the holder bits of `word` are no token (not 0, generation 0):
/// no step of the protocol writes that, so the word was damaged.
pub(crate) fn damaged(word: u32) -> bool {
    word & Token::MASK != 0 && Token::from_raw(word & Token::MASK).is_none()
}

/// Reports a damaged word taken over or cleared (target `tachyon::lock`,
/// generation 0: the word named no holder).
#[cfg_attr(not(feature = "tracing"), allow(unused_variables))]
fn note_damaged(word: u32) {
    trace::event!(
        warn,
        "tachyon::lock",
        slot = word & Token::MASK,
        gen = 0u32,
        "took over a lock word that names no holder (damaged)"
    );
}

/// The holder named by a lock word: `Ok(None)` when free,
/// [`Error::Corrupt`] when the holder bits are not a token.
pub(crate) fn holder_of(word: u32, field: &'static str) -> Result<Option<Token>> {
    match word & Token::MASK {
        0 => Ok(None),
        raw => Token::from_raw(raw)
            .map(Some)
            .ok_or_else(|| Error::corrupt(Corruption::BadField { field, value: u64::from(word) })),
    }
}

/// A mutex that lives in shared memory and survives the death of its
/// holder.
///
/// The holder is recorded as the [`Token`] of its attachment (given by a
/// [`Liveness`], normally the [`Segment`](crate::Segment)). When a holder
/// dies, the next locker gets the lock anyway, within about 50 ms, with
/// [`MutexGuard::owner_died`] true: **the data the mutex protects may be
/// half-updated**, and that guard's owner should check or repair it before
/// unlocking. A lock word that another process damaged (holder bits that
/// are no token) is taken over the same way, with `owner_died` true.
///
/// The fast path is one CAS to lock and one to unlock; a system call is
/// made only when someone sleeps. All zeros is an unlocked mutex.
///
/// ```
/// use std::time::Duration;
/// use tachyon::sync::{Liveness, Mutex, Token};
///
/// struct Me; // a Segment plays this part in real use
/// impl Liveness for Me {
///     fn token(&self) -> Token { Token::new(0, 1) }
///     fn is_dead(&self, _: Token) -> bool { false }
/// }
///
/// let m = Mutex::new();
/// let guard = m.lock(&Me, Some(Duration::from_secs(1)))?;
/// assert!(!guard.owner_died());
/// assert_eq!(m.holder()?, Some(Token::new(0, 1)));
/// assert!(m.try_lock(&Me)?.is_none());
/// drop(guard);
/// assert!(!m.is_locked());
/// # Ok::<(), tachyon::Error>(())
/// ```
#[repr(C)]
pub struct Mutex {
    word: AtomicU32,
}

impl Mutex {
    crate::sync::const_new! {
        /// An unlocked mutex (the same as all-zero memory).
        pub fn new() -> Self {
            Mutex { word: AtomicU32::new(0) }
        }
    }

    /// Locks, waiting at most `timeout` (`None`: no limit) for the holder
    /// to unlock or to be found dead. `live` says who the caller is.
    ///
    /// Errors: [`Error::Timeout`]. A lock word that holds no valid token
    /// (damaged) is taken over, with `owner_died` true.
    pub fn lock<'a>(
        &'a self,
        live: &(impl Liveness + ?Sized),
        timeout: Option<Duration>,
    ) -> Result<MutexGuard<'a>> {
        let me = live.token().raw();
        let what = "the mutex (another holder has it)";
        if timeout.is_some_and(|t| t.is_zero()) {
            // Try once, as `try_lock` does (a dead holder is taken over).
            return self.try_lock(live)?.ok_or_else(|| crate::Error::timeout(what, timeout));
        }
        let died = self.acquire(live, me, &Deadline::waiting_for(timeout, what))?;
        Ok(MutexGuard { mutex: self, me, owner_died: died, _not_send: PhantomData })
    }

    /// Locks if that can be done without waiting: `Ok(None)` if a live
    /// holder has it. A failed attempt asks `live` whether the holder is
    /// dead, which may cost a system call.
    pub fn try_lock(&self, live: &(impl Liveness + ?Sized)) -> Result<Option<MutexGuard<'_>>> {
        let me = live.token().raw();
        Ok(self.try_acquire(live, me)?.map(|died| MutexGuard {
            mutex: self,
            me,
            owner_died: died,
            _not_send: PhantomData,
        }))
    }

    /// Whether some attachment holds the lock now.
    pub fn is_locked(&self) -> bool {
        self.word.load(Relaxed) & Token::MASK != 0
    }

    /// Whether the attachment named by `token` holds the lock now.
    pub fn is_locked_by(&self, token: Token) -> bool {
        self.word.load(Relaxed) & Token::MASK == token.raw()
    }

    /// The holder now (`None`: unlocked), or [`Error::Corrupt`].
    pub fn holder(&self) -> Result<Option<Token>> {
        holder_of(self.word.load(Relaxed), "mutex holder")
    }

    /// The lock word now (`Acquire`).
    pub(crate) fn word(&self) -> u32 {
        // SYNC: pairs with the Release CAS in `release` (or `clear_dead`): for
        // `RwLock::read_attempt`, which enters on a free word without a CAS on it.
        self.word.load(Acquire)
    }

    /// Overwrites the word, as a broken or hostile process could.
    #[cfg(test)]
    pub(crate) fn corrupt_for_test(&self, w: u32) {
        self.word.store(w, Relaxed);
    }

    /// Takes the lock for `me`; `Ok(true)` if a holder died with it (we took
    /// it over, or DIED was still set).
    pub(crate) fn acquire(
        &self,
        live: &(impl Liveness + ?Sized),
        me: u32,
        deadline: &Deadline,
    ) -> Result<bool> {
        // SYNC: pairs with the Release CAS in `release`: the last holder's writes are
        // seen (likewise every Acquire CAS that takes the lock below).
        match self.word.compare_exchange(0, me, Acquire, Relaxed) {
            Ok(_) => Ok(false),
            Err(_) => self.acquire_slow(live, me, deadline),
        }
    }

    fn acquire_slow(&self, live: &(impl Liveness + ?Sized), me: u32, deadline: &Deadline) -> Result<bool> {
        let mut spin = SpinWait::new();
        let mut slices = Slices::new();
        let mut slept = false;
        let mut last = 0; // the holder seen before the last sleep
        loop {
            let w = self.word.load(Relaxed);
            if damaged(w) {
                // SYNC: Acquire, as the takeover from a dead holder below; a damaging plain store
                // ends the release sequence of the last `release`, which DIED reports (the data
                // may be half-done).
                if self.word.compare_exchange(w, me | DIED | CONTENDED, Acquire, Relaxed).is_ok() {
                    note_damaged(w);
                    return Ok(true);
                }
                continue;
            }
            let Some(holder) = holder_of(w, "mutex holder")? else {
                let new = me | (w & DIED) | if slept { CONTENDED } else { w & CONTENDED };
                if self.word.compare_exchange(w, new, Acquire, Relaxed).is_ok() {
                    return Ok(w & DIED != 0);
                }
                continue;
            };
            if holder.raw() == last && live.is_dead(holder) {
                // SYNC: the dead holder released nothing: this Acquire reaches the last normal
                // `release` through the release sequence (DIED says the rest may be half-done).
                if self.word.compare_exchange(w, me | DIED | CONTENDED, Acquire, Relaxed).is_ok() {
                    trace::owner_died!(holder, "took over a lock whose holder died");
                    return Ok(true);
                }
                continue;
            }
            if w & CONTENDED == 0 {
                if !slept && spin.spin() {
                    continue;
                }
                if self.word.compare_exchange(w, w | CONTENDED, Relaxed, Relaxed).is_err() {
                    continue;
                }
            }
            let slice = slices.next(deadline)?;
            sleep(&self.word, w | CONTENDED, Some(slice), &|| live.is_dead(holder));
            slept = true;
            last = holder.raw();
        }
    }

    /// One attempt: `Ok(Some(died))` if taken.
    pub(crate) fn try_acquire(&self, live: &(impl Liveness + ?Sized), me: u32) -> Result<Option<bool>> {
        let mut w = match self.word.compare_exchange(0, me, Acquire, Relaxed) {
            Ok(_) => return Ok(Some(false)),
            Err(w) => w,
        };
        loop {
            if damaged(w) {
                // SYNC: Acquire, as every CAS that takes the lock (see `acquire_slow` on damage).
                match self.word.compare_exchange(w, me | DIED | (w & CONTENDED), Acquire, Relaxed) {
                    Ok(_) => {
                        note_damaged(w);
                        return Ok(Some(true));
                    }
                    Err(now) => {
                        w = now;
                        continue;
                    }
                }
            }
            let new = match holder_of(w, "mutex holder")? {
                None => me | (w & (DIED | CONTENDED)),
                Some(holder) if live.is_dead(holder) => {
                    trace::owner_died!(holder, "taking over a lock whose holder died");
                    me | DIED | (w & CONTENDED)
                }
                Some(_) => return Ok(None),
            };
            match self.word.compare_exchange(w, new, Acquire, Relaxed) {
                Ok(_) => return Ok(Some(new & DIED != 0)),
                Err(now) => w = now,
            }
        }
    }

    /// Releases the lock held by `me`, leaving DIED set if `keep_died`;
    /// wakes one sleeper if any. Does nothing if `me` no longer holds it.
    pub(crate) fn release(&self, me: u32, keep_died: bool) {
        let mut w = me;
        loop {
            if w & Token::MASK != me {
                // Taken from us: not ours to release. (Only possible if a
                // Liveness wrongly declared us dead, or the word was
                // overwritten.)
                return;
            }
            let new = if keep_died { w & DIED } else { 0 };
            // SYNC: pairs with the next locker's Acquire CAS (`acquire`, `try_acquire`)
            // and the Acquire `word()` of `RwLock::read_attempt`.
            match self.word.compare_exchange_weak(w, new, Release, Relaxed) {
                Ok(_) => break,
                Err(now) => w = now,
            }
        }
        if w & CONTENDED != 0 {
            wake(&self.word, 1);
        }
    }

    /// Clears the holder of `w`, a word whose holder was found dead (or
    /// that names no holder: damaged), by CAS from `w`, leaving DIED set;
    /// wakes one sleeper if any. False if the word had changed.
    pub(crate) fn clear_dead(&self, w: u32) -> bool {
        // SYNC: Acquire: the last normal `release`, through the dead holder's CAS;
        // Release: to the next locker's Acquire CAS and `RwLock::read_attempt`.
        if self.word.compare_exchange(w, DIED, AcqRel, Relaxed).is_err() {
            return false;
        }
        if damaged(w) {
            note_damaged(w);
        } else {
            trace::owner_died!(
                Token::from_raw(w & Token::MASK).unwrap_or(Token::NOBODY),
                "cleared a lock whose holder died"
            );
        }
        if w & CONTENDED != 0 {
            wake(&self.word, 1);
        }
        true
    }
}

impl Default for Mutex {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for Mutex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let w = self.word.load(Relaxed);
        f.debug_struct("Mutex")
            .field("holder", &holder_of(w, "mutex holder").ok().flatten())
            .field("contended", &(w & CONTENDED != 0))
            .field("died", &(w & DIED != 0))
            .finish()
    }
}

#[cfg(not(tachyon_loom))]
// SAFETY: `#[repr(C)]` around one `AtomicU32`: every bit pattern is a
// valid word (impossible holders are reported as corruption), all zeros is
// unlocked, all mutation is atomic.
unsafe impl crate::segment::ShmSafe for Mutex {}

#[cfg(not(tachyon_loom))]
const _: () = assert!(std::mem::size_of::<Mutex>() == 4);

/// Proof of holding a [`Mutex`]; unlocks when dropped.
///
/// Not `Send`, like `std`'s guard: unlock on the thread that locked.
#[must_use = "the mutex unlocks as soon as the guard is dropped"]
pub struct MutexGuard<'a> {
    mutex: &'a Mutex,
    me: u32,
    owner_died: bool,
    _not_send: PhantomData<*const ()>,
}

impl MutexGuard<'_> {
    /// True if a previous holder died holding the lock: the protected data
    /// may be half-updated; check or repair it before unlocking.
    pub fn owner_died(&self) -> bool {
        self.owner_died
    }

    /// Unlocks (the same as dropping the guard).
    pub fn unlock(self) {}
}

impl Drop for MutexGuard<'_> {
    fn drop(&mut self) {
        self.mutex.release(self.me, false);
    }
}

impl fmt::Debug for MutexGuard<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MutexGuard")
            .field("holder", &Token::from_raw(self.me))
            .field("owner_died", &self.owner_died)
            .finish()
    }
}

#[cfg(all(test, not(tachyon_loom)))]
mod tests {
    use super::*;
    use crate::sync::testing::World;
    use std::sync::atomic::AtomicU64;
    use std::sync::Arc;
    use std::thread;

    const LONG: Option<Duration> = Some(Duration::from_secs(20));

    #[test]
    fn lock_unlock_and_state() {
        let w = World::default();
        let (a, b) = (w.peer(1), w.peer(2));
        let m = Mutex::default();
        assert!(!m.is_locked());
        assert_eq!(m.holder().unwrap(), None);
        let g = m.lock(&a, None).unwrap();
        assert!(m.is_locked_by(a.token));
        assert!(!m.is_locked_by(b.token));
        assert!(m.try_lock(&b).unwrap().is_none());
        assert!(matches!(m.lock(&b, Some(Duration::from_millis(5))), Err(Error::Timeout { .. })));
        assert!(matches!(m.lock(&b, Some(Duration::ZERO)), Err(Error::Timeout { .. })));
        g.unlock();
        assert_eq!(m.word.load(Relaxed), 0, "no flags left behind");
        let g = m.try_lock(&b).unwrap().unwrap();
        assert!(!g.owner_died());
        assert!(format!("{m:?} {g:?}").contains("holder"));
    }

    /// A word that names no holder (damaged) is taken over by the next
    /// locker, which is told the data may be half-updated; the lock then
    /// works as before. `holder()` (inspection) still says what it saw.
    #[test]
    fn a_damaged_word_is_taken_over_with_owner_died() {
        let w = World::default();
        let m = Mutex::new();
        m.word.store(5, Relaxed); // slot 5, generation 0: not a token
        assert!(matches!(m.holder(), Err(Error::Corrupt { .. })));
        let g = m.lock(&w.peer(1), LONG).unwrap();
        assert!(g.owner_died());
        assert!(m.is_locked_by(w.peer(1).token));
        drop(g);
        assert_eq!(m.word.load(Relaxed), 0, "a normal release clears DIED");
        assert!(!m.lock(&w.peer(1), LONG).unwrap().owner_died());
        // try_lock, with the flags set too; and a damaged word over a live
        // holder: its release leaves the new holder's word alone.
        let live = m.lock(&w.peer(2), LONG).unwrap();
        m.word.store(CONTENDED | DIED | 0x7f, Relaxed);
        let g = m.try_lock(&w.peer(3)).unwrap().unwrap();
        assert!(g.owner_died());
        drop(live);
        assert!(m.is_locked_by(w.peer(3).token));
        drop(g);
        assert!(!m.is_locked());
    }

    /// Several threads (some sharing one attachment) increment a counter
    /// with a non-atomic read-modify-write under the lock.
    #[test]
    fn mutual_exclusion_under_contention() {
        let w = World::default();
        let m = Arc::new(Mutex::new());
        let count = Arc::new(AtomicU64::new(0));
        const ITERS: u64 = 20_000;
        let threads: Vec<_> = (0..6)
            .map(|i| {
                let (m, count, peer) = (m.clone(), count.clone(), w.peer(i % 3));
                thread::spawn(move || {
                    for _ in 0..ITERS {
                        let g = m.lock(&peer, LONG).unwrap();
                        assert!(!g.owner_died());
                        let v = count.load(Relaxed);
                        count.store(v + 1, Relaxed);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(count.load(Relaxed), 6 * ITERS);
        assert!(!m.is_locked());
    }

    /// The holder "dies" (its guard is leaked and its slot marked dead)
    /// while several threads wait: exactly one takes over with owner_died,
    /// the others get the lock normally afterwards.
    #[test]
    fn dead_holder_is_taken_over_once() {
        let w = World::default();
        let dead = w.peer(9);
        let m = Arc::new(Mutex::new());
        std::mem::forget(m.lock(&dead, None).unwrap());
        let died = Arc::new(AtomicU64::new(0));
        let threads: Vec<_> = (0..4)
            .map(|i| {
                let (m, died, peer) = (m.clone(), died.clone(), w.peer(i));
                thread::spawn(move || {
                    let g = m.lock(&peer, LONG).unwrap();
                    if g.owner_died() {
                        died.fetch_add(1, Relaxed);
                    }
                    thread::sleep(Duration::from_millis(1));
                })
            })
            .collect();
        thread::sleep(Duration::from_millis(20));
        w.kill(&dead);
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(died.load(Relaxed), 1);
        assert!(!m.is_locked());
        // try_lock also takes over from a dead holder.
        std::mem::forget(m.lock(&w.peer(10), None).unwrap());
        w.kill(&w.peer(10));
        assert!(m.try_lock(&w.peer(11)).unwrap().unwrap().owner_died());
        assert!(!m.lock(&w.peer(11), None).unwrap().owner_died());
    }

    #[test]
    fn timed_out_waiter_leaves_lock_usable() {
        let w = World::default();
        let m = Arc::new(Mutex::new());
        let g = m.lock(&w.peer(1), None).unwrap();
        let t = {
            let (m, p) = (m.clone(), w.peer(2));
            thread::spawn(move || m.lock(&p, Some(Duration::from_millis(30))).map(|_| ()))
        };
        assert!(matches!(t.join().unwrap(), Err(Error::Timeout { .. })));
        drop(g); // CONTENDED is set: a spurious wake, harmless
        assert_eq!(m.word.load(Relaxed), 0);
        m.lock(&w.peer(2), None).unwrap().unlock();
    }
}

/// Loom models of the takeover of a damaged word (`--cfg tachyon_loom`, run
/// by `.ci/test`; the other models of the mutex are in `tests/loom_sync.rs`).
#[cfg(all(test, tachyon_loom))]
mod loom_models {
    use super::*;
    use loom::cell::UnsafeCell;
    use loom::sync::Arc;
    use loom::thread;

    /// An attachment that is alive, as everyone in these models is.
    struct Alive(Token);

    impl Liveness for Alive {
        fn token(&self) -> Token {
            self.0
        }
        fn is_dead(&self, _: Token) -> bool {
            false
        }
    }

    fn model(f: impl Fn() + Sync + Send + 'static) {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(3);
        b.check(f);
    }

    /// A live holder's word is overwritten with holder bits that are no
    /// token while two lockers race for it (one tries first, then waits;
    /// the other waits): exactly one takes the word over and is told
    /// `owner_died`, the two exclude each other (loom checks the data),
    /// the live holder's release leaves the new holder's word alone, and
    /// the lock is free at the end.
    #[test]
    fn damaged_word_taken_over_once_racing_a_live_locker() {
        model(|| {
            let m = Arc::new(Mutex::new());
            let data = Arc::new(UnsafeCell::new(0u32));
            let held = m.lock(&Alive(Token::new(0, 1)), None).unwrap();
            m.corrupt_for_test(3);
            let threads: Vec<_> = (1..3)
                .map(|i| {
                    let (m, data) = (m.clone(), data.clone());
                    thread::spawn(move || {
                        let me = Alive(Token::new(i, 1));
                        let g = match (i == 1).then(|| m.try_lock(&me).unwrap()).flatten() {
                            Some(g) => g,
                            None => m.lock(&me, None).unwrap(),
                        };
                        // SAFETY: the lock is held; loom reports any access
                        // it does not order.
                        data.with_mut(|p| unsafe { *p += 1 });
                        g.owner_died()
                    })
                })
                .collect();
            drop(held); // the holder whose word was overwritten
            let died = threads.into_iter().map(|t| t.join().unwrap()).filter(|&d| d).count();
            assert_eq!(died, 1, "exactly one locker took the damaged word over");
            // SAFETY: both threads are joined.
            assert_eq!(data.with(|p| unsafe { *p }), 2);
            assert!(!m.is_locked());
        });
    }
}
