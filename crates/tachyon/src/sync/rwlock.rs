//! A robust, counted, writer-preferring process-shared reader-writer lock.
//!
//! Invariant. `writer` is a robust [`Mutex`] word (holder token, DIED,
//! CONTENDED) that writers take in turn. `readers[i]` = `gen << 9 | count`:
//! the number of read guards held through attachment (slot `i`, `gen`).
//! A reader is inside only while its guard is counted in its entry *and*,
//! after a `SeqCst` fence that follows its increment, it saw no writer
//! holder. A writer is inside only while it holds `writer` *and*, after a
//! `SeqCst` fence that follows its claim, it saw every count at 0. The two
//! fences order "increment, then look for a writer" against "claim, then
//! look at the counts": at least one side sees the other, and a reader
//! backs off (undoes its increment) while a writer waits, so new readers
//! queue behind a claiming writer (writers are not starved) and a writer
//! waits for the *last* counted reader.
//!
//! Robustness: a dead writer's word is taken over by the next writer or
//! cleared by a waiting reader, leaving DIED set until a writer releases
//! normally, and every guard taken meanwhile reports `owner_died`. A writer
//! word damaged into holder bits that are no token is treated the same way
//! (one CAS from the damaged value; see [`Mutex`]). A dead
//! reader's entry is zeroed by the writer waiting on it (readers never
//! write, so that is not reported). An entry of another generation than
//! its slot's current occupant belongs to a dead predecessor, and the
//! occupant overwrites it. Readers sleep on `gate` (woken by a writer that
//! leaves), the writer on `drain` (woken by the reader that leaves).

use super::mutex::{damaged, holder_of, DIED};
use super::wait::{Deadline, Slices, SpinWait, WaitCell};
use super::{Liveness, Mutex, Token};
use crate::platform::atomic::{fence, AtomicU32, Ordering::*};
use crate::{Error, Result};
use std::fmt;
use std::marker::PhantomData;
use std::time::Duration;

const COUNT_BITS: u32 = 9;
const COUNT_MASK: u32 = (1 << COUNT_BITS) - 1;

/// The most read guards one attachment may hold on one [`RwLock`] at once.
pub const MAX_READS_PER_ATTACH: u32 = COUNT_MASK;

/// Attach slots with a reader entry. Under loom only a few, to keep the
/// models small.
#[cfg(not(tachyon_loom))]
const READER_SLOTS: usize = super::MAX_SLOTS;
#[cfg(tachyon_loom)]
const READER_SLOTS: usize = 4;

/// A reader-writer lock that lives in shared memory: many readers or one
/// writer, robust against the death of either.
///
/// * **Counted readers**: each attachment's read guards are counted; a
///   writer waits until the last one is gone.
/// * **Writer-preferring**: once a writer has claimed the lock, new readers
///   wait, so a stream of readers cannot starve writers.
/// * **Robust**: a dead writer's lock is taken over (by the next writer) or
///   cleared (by a waiting reader) within about 50 ms; from then until a
///   writer releases normally, every guard's `owner_died()` is true, as the
///   data may be half-updated. A dead reader is simply forgotten.
///
/// Limits: a thread that takes a read guard while it already holds one can
/// deadlock (until its timeout) if a writer is waiting in between, as with
/// `std`'s `RwLock`; at most [`MAX_READS_PER_ATTACH`] read guards per
/// attachment at once. The fast paths make no system call when nobody
/// sleeps; a reader killed while sleeping leaves its registration behind,
/// and writers then enter the kernel on every release (slower, still
/// correct). All zeros is an unlocked lock. The reader table takes 4 bytes
/// per attach slot (532 bytes in all).
///
/// ```
/// use std::time::Duration;
/// use tachyon::sync::{Liveness, RwLock, Token};
///
/// struct Me(usize); // a Segment plays this part in real use
/// impl Liveness for Me {
///     fn token(&self) -> Token { Token::new(self.0, 1) }
///     fn is_dead(&self, _: Token) -> bool { false }
/// }
///
/// let lock = RwLock::new();
/// let t = Some(Duration::from_secs(1));
/// let r1 = lock.read(&Me(0), t)?;
/// let r2 = lock.read(&Me(1), t)?; // readers overlap
/// drop(r1);
/// assert!(lock.try_write(&Me(2))?.is_none()); // r2 still counted
/// drop(r2);
/// let w = lock.write(&Me(2), t)?;
/// assert!(!w.owner_died());
/// assert!(lock.try_read(&Me(0))?.is_none());
/// # Ok::<(), tachyon::Error>(())
/// ```
#[repr(C)]
pub struct RwLock {
    writer: Mutex,
    gate: WaitCell,
    drain: WaitCell,
    readers: [AtomicU32; READER_SLOTS],
}

enum Attempt<'a> {
    In(RwLockReadGuard<'a>),
    /// Blocked by this writer word.
    Blocked(u32),
}

impl RwLock {
    /// An unlocked lock (the same as all-zero memory).
    #[cfg(not(tachyon_loom))]
    pub const fn new() -> Self {
        RwLock {
            writer: Mutex::new(),
            gate: WaitCell::new(),
            drain: WaitCell::new(),
            readers: [const { AtomicU32::new(0) }; READER_SLOTS],
        }
    }

    /// An unlocked lock.
    #[cfg(tachyon_loom)]
    pub fn new() -> Self {
        RwLock {
            writer: Mutex::new(),
            gate: WaitCell::new(),
            drain: WaitCell::new(),
            readers: std::array::from_fn(|_| AtomicU32::new(0)),
        }
    }

    /// Takes a read guard, waiting at most `timeout` (`None`: no limit)
    /// while a writer holds or claims the lock.
    ///
    /// Errors: [`Error::Timeout`]; [`Error::NoSpace`] if the attachment
    /// already holds [`MAX_READS_PER_ATTACH`] read guards. A writer word
    /// that names no holder (damaged) is cleared, and the guard reports
    /// `owner_died`.
    pub fn read<'a>(
        &'a self,
        live: &(impl Liveness + ?Sized),
        timeout: Option<Duration>,
    ) -> Result<RwLockReadGuard<'a>> {
        let me = live.token();
        let what = "a read lock (a writer holds the lock)";
        if timeout.is_some_and(|t| t.is_zero()) {
            // Try once, as `try_read` does (a dead writer is cleared).
            return self.try_read(live)?.ok_or_else(|| Error::timeout(what, timeout));
        }
        let deadline = Deadline::waiting_for(timeout, what);
        let mut spin = SpinWait::new();
        let mut slices = Slices::new();
        let mut last = 0; // the writer seen before the last sleep
        loop {
            let w = match self.read_attempt(me)? {
                Attempt::In(guard) => return Ok(guard),
                Attempt::Blocked(w) => w,
            };
            if damaged(w) {
                // A writer word no step writes: cleared at once, as a dead
                // writer's (DIED stays set: this reader's guard reports it).
                self.clear_dead_writer(w);
                continue;
            }
            let Some(writer) = holder_of(w, "rwlock writer")? else { continue };
            if writer.raw() == last && live.is_dead(writer) {
                self.clear_dead_writer(w);
                continue;
            }
            if spin.spin() {
                continue;
            }
            let slice = slices.next(&deadline)?;
            self.gate.park(Some(slice), &|| live.is_dead(writer), || {
                (self.writer.word() & Token::MASK != writer.raw()).then_some(())
            });
            last = writer.raw();
        }
    }

    /// Takes a read guard if no writer holds or claims the lock: `Ok(None)`
    /// otherwise. A failed attempt asks `live` whether the writer is dead,
    /// which may cost a system call.
    pub fn try_read(&self, live: &(impl Liveness + ?Sized)) -> Result<Option<RwLockReadGuard<'_>>> {
        let me = live.token();
        loop {
            let w = match self.read_attempt(me)? {
                Attempt::In(guard) => return Ok(Some(guard)),
                Attempt::Blocked(w) => w,
            };
            if damaged(w) {
                self.clear_dead_writer(w); // as in `read`
                continue;
            }
            match holder_of(w, "rwlock writer")? {
                Some(writer) if live.is_dead(writer) => {
                    self.clear_dead_writer(w);
                }
                Some(_) => return Ok(None),
                None => {}
            }
        }
    }

    /// Takes the write guard, waiting at most `timeout` (`None`: no limit)
    /// for other writers and then for every reader to leave. On timeout
    /// the claim is withdrawn and waiting readers go on.
    ///
    /// Errors: [`Error::Timeout`]. A writer word that names no holder
    /// (damaged) is taken over, with `owner_died` true.
    pub fn write<'a>(
        &'a self,
        live: &(impl Liveness + ?Sized),
        timeout: Option<Duration>,
    ) -> Result<RwLockWriteGuard<'a>> {
        let me = live.token().raw();
        let what = "the write lock (another holder has the lock)";
        if timeout.is_some_and(|t| t.is_zero()) {
            // Try once, as `try_write` does (dead holders are cleared).
            return self.try_write(live)?.ok_or_else(|| Error::timeout(what, timeout));
        }
        let deadline = Deadline::waiting_for(timeout, what);
        let died = self.writer.acquire(live, me, &deadline)?;
        self.drain.forget_sleepers();
        // SYNC: SeqCst: the claim of `writer`, then the loads of the counts, against the
        // reader's fence in `read_attempt` (one of the two sees the other).
        fence(SeqCst);
        match self.drain_readers(live, &deadline) {
            Ok(()) => Ok(RwLockWriteGuard { lock: self, me, owner_died: died, _not_send: PhantomData }),
            Err(e) => {
                self.release_writer(me, true);
                Err(e)
            }
        }
    }

    /// Takes the write guard if that needs no waiting: `Ok(None)` if a live
    /// writer or reader holds the lock. A failed attempt asks `live` about
    /// the holders, which may cost system calls.
    pub fn try_write(&self, live: &(impl Liveness + ?Sized)) -> Result<Option<RwLockWriteGuard<'_>>> {
        let me = live.token().raw();
        let Some(died) = self.writer.try_acquire(live, me)? else { return Ok(None) };
        self.drain.forget_sleepers();
        // SYNC: SeqCst, as in `write`.
        fence(SeqCst);
        while let Some((i, e)) = self.busy_entry() {
            if !self.clear_dead_reader(live, i, e) && self.readers[i].load(Relaxed) == e {
                self.release_writer(me, true);
                return Ok(None);
            }
        }
        Ok(Some(RwLockWriteGuard { lock: self, me, owner_died: died, _not_send: PhantomData }))
    }

    /// Whether a writer holds or claims the lock now.
    pub fn is_write_locked(&self) -> bool {
        self.writer.is_locked()
    }

    /// The writer holding or claiming the lock now, or [`Error::Corrupt`].
    pub fn writer(&self) -> Result<Option<Token>> {
        self.writer.holder()
    }

    /// Read guards counted now, dead readers not yet cleared included
    /// (a snapshot, for inspection).
    pub fn reader_count(&self) -> u32 {
        self.readers.iter().map(|r| r.load(Relaxed) & COUNT_MASK).sum()
    }

    /// One attempt to enter as a reader.
    fn read_attempt(&self, me: Token) -> Result<Attempt<'_>> {
        let w = self.writer.word();
        if w & Token::MASK != 0 {
            return Ok(Attempt::Blocked(w));
        }
        let entry = self
            .readers
            .get(me.slot())
            .ok_or_else(|| Error::invalid(format!("attach slot {} has no reader entry", me.slot())))?;
        let mine = me.gen() << COUNT_BITS;
        let mut e = entry.load(Relaxed);
        loop {
            let new = if e & !COUNT_MASK == mine {
                if e & COUNT_MASK == COUNT_MASK {
                    return Err(Error::NoSpace {
                        what: format!(
                            "this attachment already holds {MAX_READS_PER_ATTACH} read guards on \
                             the rwlock; drop some before taking more"
                        ),
                    });
                }
                e + 1
            } else {
                // Count 0, or left by a dead predecessor in this slot.
                mine | 1
            };
            match entry.compare_exchange_weak(e, new, Relaxed, Relaxed) {
                Ok(_) => break,
                Err(now) => e = now,
            }
        }
        let mut guard =
            RwLockReadGuard { lock: self, entry, mine, owner_died: false, _not_send: PhantomData };
        // SYNC: SeqCst: the count's increment, then the load of `writer`, against the
        // writer's fence in `write` / `try_write`.
        fence(SeqCst);
        // SYNC: Acquire (`Mutex::word`) pairs with the last writer's Release CAS in
        // `Mutex::release`: its writes are seen by this reader.
        let w = self.writer.word();
        if w & Token::MASK != 0 {
            drop(guard); // a writer came first: undo, and wake it if it waits
            return Ok(Attempt::Blocked(w));
        }
        guard.owner_died = w & DIED != 0;
        Ok(Attempt::In(guard))
    }

    /// Waits until no reader is counted, clearing dead readers' entries.
    fn drain_readers(&self, live: &(impl Liveness + ?Sized), deadline: &Deadline) -> Result<()> {
        let mut spin = SpinWait::new();
        let mut slices = Slices::new();
        let mut last = None; // the entry seen before the last sleep
        while let Some((i, e)) = self.busy_entry() {
            if last == Some((i, e)) && self.clear_dead_reader(live, i, e) {
                continue;
            }
            if spin.spin() {
                continue;
            }
            let slice = slices.next(deadline)?;
            self.drain.park(Some(slice), &|| self.reader_dead(live, i, e), || {
                (self.readers[i].load(Relaxed) != e).then_some(())
            });
            last = Some((i, e));
        }
        Ok(())
    }

    /// The first entry with readers counted, as (slot, entry).
    fn busy_entry(&self) -> Option<(usize, u32)> {
        // SYNC: pairs with the Release decrement in `RwLockReadGuard::drop`: the readers'
        // reads happen before the writer's writes.
        self.readers.iter().map(|r| r.load(Acquire)).enumerate().find(|&(_, e)| e & COUNT_MASK != 0)
    }

    /// If entry `i`, seen as `e`, names a dead attachment, zeroes it (by
    /// CAS from `e`); true if it was dead. An entry of generation 0 cannot
    /// name anyone and counts as dead.
    fn clear_dead_reader(&self, live: &(impl Liveness + ?Sized), i: usize, e: u32) -> bool {
        if !self.reader_dead(live, i, e) {
            return false;
        }
        let _ = self.readers[i].compare_exchange(e, 0, Relaxed, Relaxed);
        true
    }

    /// Whether entry `i`, seen as `e`, names a dead attachment.
    fn reader_dead(&self, live: &(impl Liveness + ?Sized), i: usize, e: u32) -> bool {
        let gen = e >> COUNT_BITS;
        gen == 0 || live.is_dead(Token::new(i, gen))
    }

    /// Clears a dead writer seen in `w`; the waiting readers and writers go on.
    fn clear_dead_writer(&self, w: u32) {
        if self.writer.clear_dead(w) {
            self.gate.notify_all();
        }
    }

    fn release_writer(&self, me: u32, keep_died: bool) {
        self.writer.release(me, keep_died);
        self.gate.notify_all();
    }
}

impl Default for RwLock {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for RwLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let w = self.writer.word();
        f.debug_struct("RwLock")
            .field("writer", &holder_of(w, "rwlock writer").ok().flatten())
            .field("died", &(w & DIED != 0))
            .field("readers", &self.reader_count())
            .finish()
    }
}

#[cfg(not(tachyon_loom))]
// SAFETY: `#[repr(C)]` of a `Mutex` (one `AtomicU32`), two `WaitCell`s (two
// `AtomicU32`s each) and an array of `AtomicU32`: no padding, every bit
// pattern is a valid state (impossible ones are reported or repaired), all
// zeros is unlocked, all mutation is atomic.
unsafe impl crate::segment::ShmSafe for RwLock {}

#[cfg(not(tachyon_loom))]
const _: () = assert!(std::mem::size_of::<RwLock>() == 4 * (5 + READER_SLOTS));

/// Proof of shared access to a [`RwLock`]; released when dropped.
///
/// Not `Send`, like `std`'s guard.
#[must_use = "the read lock is released as soon as the guard is dropped"]
pub struct RwLockReadGuard<'a> {
    lock: &'a RwLock,
    entry: &'a AtomicU32,
    /// Our generation, shifted into place in the entry.
    mine: u32,
    owner_died: bool,
    _not_send: PhantomData<*const ()>,
}

impl RwLockReadGuard<'_> {
    /// True if a writer died holding the lock and no writer has released
    /// it normally since: the data may be half-updated.
    pub fn owner_died(&self) -> bool {
        self.owner_died
    }

    /// Releases the read guard (the same as dropping it).
    pub fn unlock(self) {}
}

impl Drop for RwLockReadGuard<'_> {
    fn drop(&mut self) {
        let mut e = self.entry.load(Relaxed);
        loop {
            if e & !COUNT_MASK != self.mine || e & COUNT_MASK == 0 {
                return; // cleared as dead (wrongly), or overwritten: nothing of ours
            }
            // SYNC: pairs with the writer's Acquire loads in `busy_entry`: our
            // reads happen before its writes.
            match self.entry.compare_exchange_weak(e, e - 1, Release, Relaxed) {
                Ok(_) => break,
                Err(now) => e = now,
            }
        }
        self.lock.drain.notify_one();
    }
}

impl fmt::Debug for RwLockReadGuard<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RwLockReadGuard").field("owner_died", &self.owner_died).finish()
    }
}

/// Proof of exclusive access to a [`RwLock`]; released when dropped.
///
/// Not `Send`, like `std`'s guard.
#[must_use = "the write lock is released as soon as the guard is dropped"]
pub struct RwLockWriteGuard<'a> {
    lock: &'a RwLock,
    me: u32,
    owner_died: bool,
    _not_send: PhantomData<*const ()>,
}

impl RwLockWriteGuard<'_> {
    /// True if a writer died holding the lock: the data may be
    /// half-updated; check or repair it before releasing (releasing clears
    /// the indication for everyone).
    pub fn owner_died(&self) -> bool {
        self.owner_died
    }

    /// Releases the write guard (the same as dropping it).
    pub fn unlock(self) {}
}

impl Drop for RwLockWriteGuard<'_> {
    fn drop(&mut self) {
        self.lock.release_writer(self.me, false);
    }
}

impl fmt::Debug for RwLockWriteGuard<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RwLockWriteGuard")
            .field("holder", &Token::from_raw(self.me))
            .field("owner_died", &self.owner_died)
            .finish()
    }
}

#[cfg(all(test, not(tachyon_loom)))]
mod tests {
    use super::*;
    use crate::sync::testing::World;
    use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64};
    use std::sync::Arc;
    use std::thread;

    const LONG: Option<Duration> = Some(Duration::from_secs(20));
    const SHORT: Option<Duration> = Some(Duration::from_millis(20));

    #[test]
    fn counted_readers_hold_off_writer() {
        let w = World::default();
        let (a, b, c) = (w.peer(1), w.peer(2), w.peer(3));
        let lock = RwLock::default();
        let r1 = lock.read(&a, None).unwrap();
        let r2 = lock.read(&a, None).unwrap(); // same attachment: counted
        let r3 = lock.read(&b, None).unwrap();
        assert_eq!(lock.reader_count(), 3);
        drop(r1);
        assert!(lock.try_write(&c).unwrap().is_none());
        assert!(matches!(lock.write(&c, SHORT), Err(Error::Timeout { .. })));
        drop(r3);
        assert!(matches!(lock.write(&c, SHORT), Err(Error::Timeout { .. })));
        assert!(!lock.is_write_locked(), "a timed-out writer withdraws");
        let r4 = lock.read(&b, Some(Duration::ZERO)).unwrap();
        drop((r2, r4));
        let g = lock.write(&c, SHORT).unwrap();
        assert_eq!(lock.writer().unwrap(), Some(c.token));
        assert!(lock.try_read(&a).unwrap().is_none());
        assert!(matches!(lock.read(&a, SHORT), Err(Error::Timeout { .. })));
        assert!(lock.try_write(&a).unwrap().is_none());
        assert!(format!("{lock:?} {g:?}").contains("writer"));
        g.unlock();
        assert_eq!(lock.writer.word(), 0);
        assert_eq!(lock.reader_count(), 0);
    }

    #[test]
    fn too_many_reads_per_attachment() {
        let w = World::default();
        let lock = RwLock::new();
        let guards: Vec<_> =
            (0..MAX_READS_PER_ATTACH).map(|_| lock.read(&w.peer(0), None).unwrap()).collect();
        assert!(matches!(lock.read(&w.peer(0), None), Err(Error::NoSpace { .. })));
        lock.read(&w.peer(1), None).unwrap().unlock();
        drop(guards);
        assert_eq!(lock.reader_count(), 0);
    }

    /// A writer word that names no holder (damaged) is cleared by a reader
    /// or taken over by a writer, each told the data may be half-updated,
    /// until a writer releases normally.
    #[test]
    fn a_damaged_writer_word_is_cleared_or_taken_over() {
        let w = World::default();
        let lock = RwLock::new();
        lock.writer.corrupt_for_test(3); // generation 0: not a token
        assert!(lock.read(&w.peer(0), LONG).unwrap().owner_died());
        lock.writer.corrupt_for_test(3);
        assert!(lock.try_read(&w.peer(0)).unwrap().unwrap().owner_died());
        lock.writer.corrupt_for_test(3);
        assert!(lock.write(&w.peer(0), LONG).unwrap().owner_died());
        assert!(!lock.read(&w.peer(1), LONG).unwrap().owner_died(), "cleared by a normal release");
        lock.writer.corrupt_for_test(0x7f);
        assert!(lock.try_write(&w.peer(1)).unwrap().unwrap().owner_died());
        assert_eq!(lock.reader_count(), 0);
        assert!(!lock.is_write_locked());
    }

    /// Readers and writers hammer a pair of counters that a writer keeps
    /// equal; a reader never sees them differ, and a writer never sees a
    /// reader inside.
    #[test]
    fn exclusion_under_contention() {
        let w = World::default();
        let lock = Arc::new(RwLock::new());
        let (x, y) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let inside = Arc::new(AtomicI64::new(0)); // readers inside, -1000 for a writer
        let threads: Vec<_> = (0..6)
            .map(|i| {
                let (lock, x, y, inside, peer) =
                    (lock.clone(), x.clone(), y.clone(), inside.clone(), w.peer(i % 4));
                thread::spawn(move || {
                    for n in 0..5000 {
                        if (n + i) % 4 == 0 {
                            let g = lock.write(&peer, LONG).unwrap();
                            assert_eq!(inside.swap(-1000, SeqCst), 0);
                            x.store(x.load(Relaxed) + 1, Relaxed);
                            y.store(y.load(Relaxed) + 1, Relaxed);
                            assert_eq!(inside.swap(0, SeqCst), -1000);
                            drop(g);
                        } else {
                            let g = lock.read(&peer, LONG).unwrap();
                            assert!(inside.fetch_add(1, SeqCst) >= 0);
                            assert_eq!(x.load(Relaxed), y.load(Relaxed));
                            inside.fetch_sub(1, SeqCst);
                            drop(g);
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(x.load(Relaxed), 6 * 5000 / 4);
        assert_eq!(lock.reader_count(), 0);
        assert!(!lock.is_write_locked());
    }

    /// Readers on several attachments keep the lock read-held at all
    /// times; a writer still gets in (bounded wait, no timing asserted).
    #[test]
    fn writer_not_starved_by_reader_stream() {
        let w = World::default();
        let lock = Arc::new(RwLock::new());
        let stop = Arc::new(AtomicBool::new(false));
        let readers: Vec<_> = (0..4)
            .map(|i| {
                let (lock, stop, peer) = (lock.clone(), stop.clone(), w.peer(i));
                thread::spawn(move || {
                    while !stop.load(Relaxed) {
                        let _g = lock.read(&peer, LONG).unwrap();
                        thread::yield_now();
                    }
                })
            })
            .collect();
        thread::sleep(Duration::from_millis(10));
        for _ in 0..20 {
            let g = lock.write(&w.peer(7), LONG).unwrap();
            assert!(!g.owner_died());
        }
        stop.store(true, Relaxed);
        for r in readers {
            r.join().unwrap();
        }
    }

    #[test]
    fn dead_reader_is_forgotten() {
        let w = World::default();
        let lock = Arc::new(RwLock::new());
        let dead = w.peer(5);
        std::mem::forget(lock.read(&dead, None).unwrap());
        std::mem::forget(lock.read(&dead, None).unwrap());
        let writer = {
            let (lock, p) = (lock.clone(), w.peer(6));
            thread::spawn(move || lock.write(&p, LONG).map(|g| g.owner_died()))
        };
        thread::sleep(Duration::from_millis(10));
        w.kill(&dead);
        assert!(!writer.join().unwrap().unwrap(), "a dead reader is not an owner death");
        assert_eq!(lock.reader_count(), 0);
        // try_write clears dead readers too.
        std::mem::forget(lock.read(&w.peer(8), None).unwrap());
        w.kill(&w.peer(8));
        assert!(lock.try_write(&w.peer(6)).unwrap().is_some());
    }

    /// A new occupant of a dead reader's slot (new generation) overwrites
    /// the stale entry.
    #[test]
    fn slot_reuse_overwrites_stale_entry() {
        let w = World::default();
        let lock = RwLock::new();
        std::mem::forget(lock.read(&w.peer(3), None).unwrap());
        let mut next = w.peer(3);
        next.token = Token::new(3, 2);
        let g = lock.read(&next, None).unwrap();
        assert_eq!(lock.reader_count(), 1);
        drop(g);
        assert_eq!(lock.reader_count(), 0);
    }

    /// A writer dies holding the lock: waiting readers and writers go on,
    /// and owner_died is reported until a writer releases normally.
    #[test]
    fn dead_writer_is_reported_until_a_writer_releases() {
        let w = World::default();
        let lock = Arc::new(RwLock::new());
        let dead = w.peer(1);
        std::mem::forget(lock.write(&dead, None).unwrap());
        let reader = {
            let (lock, p) = (lock.clone(), w.peer(2));
            thread::spawn(move || lock.read(&p, LONG).map(|g| g.owner_died()))
        };
        thread::sleep(Duration::from_millis(10));
        w.kill(&dead);
        assert!(reader.join().unwrap().unwrap());
        assert!(lock.read(&w.peer(3), None).unwrap().owner_died());
        let g = lock.write(&w.peer(3), LONG).unwrap();
        assert!(g.owner_died());
        drop(g);
        assert!(!lock.read(&w.peer(3), None).unwrap().owner_died());
        assert!(!lock.write(&w.peer(3), None).unwrap().owner_died());

        // A writer takes over directly from a dead writer.
        std::mem::forget(lock.write(&w.peer(4), None).unwrap());
        w.kill(&w.peer(4));
        assert!(lock.write(&w.peer(2), LONG).unwrap().owner_died());
        assert!(!lock.write(&w.peer(2), LONG).unwrap().owner_died());
    }

    /// Readers queued behind a writer that times out (because a reader
    /// holds on) get in.
    #[test]
    fn writer_timeout_lets_queued_readers_in() {
        let w = World::default();
        let lock = Arc::new(RwLock::new());
        let r = lock.read(&w.peer(0), None).unwrap();
        let writer = {
            let (lock, p) = (lock.clone(), w.peer(1));
            thread::spawn(move || lock.write(&p, Some(Duration::from_millis(100))).map(|_| ()))
        };
        while !lock.is_write_locked() {
            thread::yield_now();
        }
        let reader = {
            let (lock, p) = (lock.clone(), w.peer(2));
            thread::spawn(move || lock.read(&p, LONG).map(|g| g.owner_died()))
        };
        assert!(matches!(writer.join().unwrap(), Err(Error::Timeout { .. })));
        assert!(!reader.join().unwrap().unwrap());
        drop(r);
    }
}

/// Loom model of a damaged writer word (`--cfg tachyon_loom`, run by
/// `.ci/test`; the other models of the lock are in `tests/loom_sync.rs`).
#[cfg(all(test, tachyon_loom))]
mod loom_models {
    use super::*;
    use loom::cell::UnsafeCell;
    use loom::sync::Arc;
    use loom::thread;

    /// An attachment that is alive, as everyone in this model is.
    struct Alive(Token);

    impl Liveness for Alive {
        fn token(&self) -> Token {
            self.0
        }
        fn is_dead(&self, _: Token) -> bool {
            false
        }
    }

    /// The writer word holds bits that are no token while a reader and a
    /// writer race for the lock: the reader clears it or the writer takes
    /// it over (each by one CAS from the damaged value), they exclude each
    /// other (loom checks the data), the writer is told `owner_died`, the
    /// reader too exactly when it got in before the writer, and the lock is
    /// free at the end.
    #[test]
    fn damaged_writer_word_cleared_or_taken_over() {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(3);
        b.check(|| {
            let lock = Arc::new(RwLock::new());
            lock.writer.corrupt_for_test(3);
            let data = Arc::new(UnsafeCell::new(0u32));
            let reader = {
                let (lock, data) = (lock.clone(), data.clone());
                thread::spawn(move || {
                    let g = lock.read(&Alive(Token::new(1, 1)), None).unwrap();
                    // SAFETY: a read guard is held; loom reports any access
                    // it does not order.
                    let v = data.with(|p| unsafe { *p });
                    (v, g.owner_died())
                })
            };
            let w = lock.write(&Alive(Token::new(2, 1)), None).unwrap();
            assert!(w.owner_died());
            // SAFETY: the write guard is held; loom checks the ordering.
            data.with_mut(|p| unsafe { *p += 1 });
            drop(w);
            let (seen, died) = reader.join().unwrap();
            assert_eq!(died, seen == 0, "DIED is reported until the writer's normal release");
            assert!(!lock.is_write_locked());
            assert_eq!(lock.reader_count(), 0);
        });
    }
}
