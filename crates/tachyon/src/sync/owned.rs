//! A process-local list of `u32` that one thread uses without a lock: the
//! first thread to use the list owns one half of it for good, and every
//! other thread shares the other half behind a mutex. Under the free
//! chunks a process keeps (`bus/alloc.rs`, `ChunkCache`): a stream's
//! producer thread, which loans a chunk at every message, and its consumer
//! thread, which releases one at every message, each keep theirs with no
//! locked instruction, where a mutex took two at every message (a lock and
//! an unlock; `docs/benchmark-history.md`, "The chunk cache without a lock").
//!
//! Process-local memory (never in a segment). Why the owner's half needs
//! no lock: `owner` is 0 until one compare-and-swap sets it to a thread's
//! number, and is never changed again; thread numbers are never reused in
//! a process ([`thread_number`]). So exactly one thread ever sees `owner`
//! equal to its own number, and only that thread touches `own`; every
//! other thread sees 0 (and loses the compare-and-swap to the owner) or
//! another number, and takes the mutex. The list's owner needs nothing
//! ordered against the others: no other thread reads what it writes.
//! [`drain`](OwnedList::drain) takes `&mut self`, which whoever gave it
//! exclusive access ordered after the owner's last use (an `Arc`'s last
//! drop). The loom model below checks both halves.

use crate::platform::atomic::{AtomicU64, Ordering};
use crate::sync::Lines;

#[cfg(not(tachyon_loom))]
use std::{cell::UnsafeCell, sync::Mutex};

#[cfg(tachyon_loom)]
use loom::{cell::UnsafeCell, sync::Mutex};

/// No thread owns the list yet.
const NOBODY: u64 = 0;

/// A list of `u32`: one half for the first thread that uses it, without a
/// lock, the other for every other thread, behind a mutex.
///
/// The two halves lie on lines of their own, and so do their values: the
/// owner writes its half at every value it takes or keeps, the others
/// theirs, and on one line each would take the line from the other at
/// every message (in a stream between two threads of one process, 68 % of
/// the consumer's releases went to the line the owner wrote last: its
/// look at `owner` and its mutex; docs/benchmark-history.md, "a chunk
/// cache's halves on lines of their own").
#[derive(Debug)]
pub(crate) struct OwnedList {
    /// The number of the thread that owns `own` ([`thread_number`]), or
    /// [`NOBODY`]. Set once: read by every thread, written by none after.
    owner: AtomicU64,
    own: Lines<UnsafeCell<Vec<u32>>>,
    shared: Lines<Mutex<Vec<u32>>>,
}

/// Values each half's buffer has room for past its capacity: 128 bytes,
/// so that the values in use of one buffer and of whatever the allocator
/// put after it (the other half's, as likely as not) never share a line.
const SPARE: usize = 128 / std::mem::size_of::<u32>();

// SAFETY: `own` is touched only by the one thread whose number `owner`
// holds (set once, never changed: the module's docs), or through
// `&mut self`; `shared` is behind its mutex. So no two threads ever reach
// `own` at once, and the list may be shared between threads.
unsafe impl Sync for OwnedList {}

impl OwnedList {
    /// An empty list whose halves have room for `capacity` values each
    /// before they grow.
    pub(crate) fn new(capacity: usize) -> OwnedList {
        OwnedList {
            owner: AtomicU64::new(NOBODY),
            own: Lines(UnsafeCell::new(Vec::with_capacity(capacity + SPARE))),
            shared: Lines(Mutex::new(Vec::with_capacity(capacity + SPARE))),
        }
    }

    /// Runs `f` on the calling thread's half: its own if it owns the list
    /// (or is the first to use it, and so takes it), else the shared half,
    /// locked while `f` runs. `f` must not use the list itself.
    #[cfg(not(tachyon_loom))]
    #[inline]
    pub(crate) fn with<R>(&self, f: impl FnOnce(&mut Vec<u32>) -> R) -> R {
        self.with_as(thread_number(), f)
    }

    /// [`with`](Self::with) for the thread numbered `me` (the caller's own
    /// [`thread_number`]; the loom model numbers its threads itself).
    #[inline]
    fn with_as<R>(&self, me: u64, f: impl FnOnce(&mut Vec<u32>) -> R) -> R {
        debug_assert_ne!(me, NOBODY);
        // SYNC: Relaxed: only the thread numbered `me` ever stores `me`
        // here (the compare-and-swap below), so reading it means this
        // thread stored it, earlier in its own order; any other value
        // sends the caller to the mutex. Nothing else is published through
        // the word.
        let owner = self.owner.load(Ordering::Relaxed);
        let mine = owner == me
            || (owner == NOBODY
                && self.owner.compare_exchange(NOBODY, me, Ordering::Relaxed, Ordering::Relaxed).is_ok());
        if mine {
            return self.with_own(f);
        }
        // A thread that panicked holding the lock left a valid list.
        let mut shared = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut shared)
    }

    /// Runs `f` on the half the calling thread's [`with`](Self::with) does
    /// not reach, if the caller may: for the list's owner the shared half,
    /// locked while `f` runs; `None`, without running `f`, for any other
    /// thread (the owner's half is the owner's alone) and for a list no
    /// thread owns yet (nobody has used it). `f` must not use the list
    /// itself.
    #[cfg(not(tachyon_loom))]
    pub(crate) fn with_others<R>(&self, f: impl FnOnce(&mut Vec<u32>) -> R) -> Option<R> {
        self.with_others_as(thread_number(), f)
    }

    /// [`with_others`](Self::with_others) for the thread numbered `me`.
    fn with_others_as<R>(&self, me: u64, f: impl FnOnce(&mut Vec<u32>) -> R) -> Option<R> {
        debug_assert_ne!(me, NOBODY);
        // SYNC: Relaxed, as in `with_as`: only this thread ever stored `me` here.
        if self.owner.load(Ordering::Relaxed) != me {
            return None;
        }
        let mut shared = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        Some(f(&mut shared))
    }

    #[cfg(not(tachyon_loom))]
    #[inline]
    fn with_own<R>(&self, f: impl FnOnce(&mut Vec<u32>) -> R) -> R {
        // SAFETY: the caller owns the list (`with_as`): no other thread
        // ever touches `own` (the module's docs), and `f` does not use the
        // list, so this is the only reference to it while `f` runs.
        f(unsafe { &mut *self.own.get() })
    }

    #[cfg(tachyon_loom)]
    fn with_own<R>(&self, f: impl FnOnce(&mut Vec<u32>) -> R) -> R {
        // SAFETY: as above; loom checks that no two threads get here at
        // once.
        self.own.with_mut(|own| f(unsafe { &mut *own }))
    }

    /// Where the two halves lie (addresses of the owner's and of the
    /// shared one), for tests of the layout.
    #[cfg(all(test, not(tachyon_loom)))]
    pub(crate) fn halves_at(&self) -> (usize, usize) {
        (&*self.own as *const UnsafeCell<Vec<u32>> as usize, &*self.shared as *const Mutex<Vec<u32>> as usize)
    }

    /// Takes every value out of both halves (exclusive access: no thread
    /// is using the list).
    pub(crate) fn drain(&mut self) -> Vec<u32> {
        let shared = self.shared.get_mut().unwrap_or_else(|e| e.into_inner());
        let mut all = std::mem::take(shared);
        #[cfg(not(tachyon_loom))]
        all.append(self.own.get_mut());
        // SAFETY: `&mut self`: nobody else reaches the list.
        #[cfg(tachyon_loom)]
        self.own.with_mut(|own| all.append(unsafe { &mut *own }));
        all
    }
}

/// This thread's number in this process: 1, 2, 3, ... in the order the
/// threads first ask; never reused, so an exited owner's number never
/// passes for another thread's.
#[cfg(not(tachyon_loom))]
#[inline]
pub(crate) fn thread_number() -> u64 {
    use std::cell::Cell;
    use std::sync::atomic::AtomicU64 as StdAtomicU64;
    static NEXT: StdAtomicU64 = StdAtomicU64::new(1);
    thread_local! {
        // Const-initialized and without a destructor: readable until the
        // thread is gone.
        static NUMBER: Cell<u64> = const { Cell::new(NOBODY) };
    }
    NUMBER.with(|n| match n.get() {
        NOBODY => {
            let mine = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            n.set(mine);
            mine
        }
        mine => mine,
    })
}

#[cfg(all(test, not(tachyon_loom)))]
mod tests {
    use super::{thread_number, OwnedList};

    #[test]
    fn the_first_thread_owns_its_half_and_the_others_share_theirs() {
        let mut list = OwnedList::new(4);
        list.with(|v| v.push(1));
        std::thread::scope(|s| {
            s.spawn(|| {
                // Not the owner: the shared half, where the owner's value
                // is not.
                assert_eq!(list.with(|v| v.pop()), None);
                list.with(|v| v.push(2));
            });
        });
        assert_eq!(list.with(|v| v.pop()), Some(1), "the owner's own value");
        assert_eq!(list.with(|v| v.pop()), None, "the other thread's is in the shared half");
        list.with(|v| v.push(3));
        std::thread::scope(|s| {
            s.spawn(|| {
                list.with(|v| v.push(4));
                assert_eq!(
                    list.with_others(|v| v.pop()),
                    None,
                    "not the owner: the owner's half is not reached"
                );
            });
        });
        assert_eq!(list.with_others(|v| v.pop()), Some(Some(4)), "the owner reaches the shared half");
        assert_eq!(OwnedList::new(1).with_others(|v| v.pop()), None, "a list nobody owns");
        let mut all = list.drain();
        all.sort_unstable();
        assert_eq!(all, [2, 3]);
        assert_ne!(thread_number(), std::thread::scope(|s| s.spawn(thread_number).join().unwrap()));
    }
}

#[cfg(all(test, tachyon_loom))]
mod loom_models {
    use super::OwnedList;
    use loom::sync::Arc;

    /// Two threads each put a value of their own, take one, and take one
    /// from the half they do not use (the owner only: the shared half), the
    /// first to come owning the list; every value put comes out exactly
    /// once (taken, or left in a half and drained), and loom finds no two
    /// threads in the owner's half at once.
    #[test]
    fn every_value_put_comes_out_once_and_one_thread_owns() {
        loom::model(|| {
            let list = Arc::new(OwnedList::new(2));
            let handles: Vec<_> = (1..=2u64)
                .map(|me| {
                    let list = list.clone();
                    loom::thread::spawn(move || {
                        list.with_as(me, |v| v.push(me as u32));
                        let mine = list.with_as(me, |v| v.pop());
                        let others = list.with_others_as(me, |v| v.pop()).flatten();
                        [mine, others]
                    })
                })
                .collect();
            let mut out: Vec<u32> = handles.into_iter().flat_map(|h| h.join().unwrap()).flatten().collect();
            let mut list = Arc::try_unwrap(list).expect("the threads are done");
            out.extend(list.drain());
            out.sort_unstable();
            assert_eq!(out, [1, 2]);
        });
    }
}
