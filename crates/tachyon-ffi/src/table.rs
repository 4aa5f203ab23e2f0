//! The topic handle's tables of what C holds: loans by address
//! ([`Loans`]) and received messages by handle ([`Held`]).
//!
//! Algorithm: a fixed array of slots, each an atomic state word next to a
//! cell for the value, claimed and emptied with one compare-and-swap each,
//! so that concurrent calls through one handle need no lock and a wrong,
//! stale or repeated key finds nothing (never a value twice). When every
//! slot is taken, values go to a mutex-protected spill table, so there is
//! no limit other than memory. Open addressing with linear probing in the
//! style of a lock-free hash set (Purcell & Harris, "Non-blocking hashtables
//! with open addressing", 2005), simplified: a key is only ever removed by
//! whoever took it out, and a lookup that misses scans every slot (no
//! tombstones).
//!
//! Invariant (each slot): the state word is EMPTY (the cell holds no value),
//! BUSY (one thread owns the cell: it is writing or taking the value), or a
//! key (the cell holds the value of that key). Only the thread that moved
//! the word to BUSY touches the cell, and it leaves BUSY with a release
//! store; every move to BUSY is an acquire compare-and-swap. So a value is
//! written once, read out once, and dropped once.

use crate::loom::{AtomicU64, AtomicUsize, Mutex, Ordering, UnsafeCell};
use std::collections::HashMap;
use std::mem::MaybeUninit;

#[cfg(tachyon_loom)]
type Guard<'a, T> = loom::sync::MutexGuard<'a, T>;
#[cfg(not(tachyon_loom))]
type Guard<'a, T> = std::sync::MutexGuard<'a, T>;

fn lock<T>(m: &Mutex<T>) -> Guard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// One slot: a state word and the value's cell.
struct Slot<T> {
    word: AtomicU64,
    value: UnsafeCell<MaybeUninit<T>>,
}

impl<T> Slot<T> {
    fn new(word: u64) -> Self {
        Slot { word: AtomicU64::new(word), value: UnsafeCell::new(MaybeUninit::uninit()) }
    }

    /// Moves the word from `from` to BUSY-state `busy`: the cell is then
    /// the caller's.
    fn claim(&self, from: u64, busy: u64) -> bool {
        // SYNC POINT: acquires the release store (`publish`) of whoever
        // left this state: its write or its read of the cell happened
        // before ours.
        self.word.compare_exchange(from, busy, Ordering::Acquire, Ordering::Relaxed).is_ok()
    }

    /// Leaves BUSY for `word`, handing the cell on.
    fn publish(&self, word: u64) {
        // SYNC POINT: released to the next `claim` of this slot.
        self.word.store(word, Ordering::Release);
    }

    /// Writes the value into the cell.
    ///
    /// # Safety
    /// The caller claimed the slot (its word is BUSY by this thread) and the
    /// cell holds no value.
    unsafe fn write(&self, value: T) {
        // SAFETY: exclusive access by the claim, per the contract.
        self.value.with_mut(|p| unsafe { (*p).write(value) });
    }

    /// Moves the value out of the cell.
    ///
    /// # Safety
    /// The caller claimed the slot from a full state: the cell holds a
    /// value, which is the caller's now (the cell counts as empty after).
    unsafe fn read(&self) -> T {
        // SAFETY: exclusive access by the claim and initialised, per the
        // contract; the caller treats the cell as empty afterwards.
        self.value.with_mut(|p| unsafe { (*p).assume_init_read() })
    }

    /// A reference to the value, to look at it before taking it.
    ///
    /// # Safety
    /// As [`Slot::read`]; the reference ends before the slot is published.
    unsafe fn peek<R>(&self, f: impl FnOnce(&T) -> R) -> R {
        // SAFETY: as in `read`, without moving the value.
        self.value.with_mut(|p| f(unsafe { (*p).assume_init_ref() }))
    }
}

// SAFETY: a value in a slot is reached only by the thread that claimed the
// slot (the invariant above), and it may be taken out on another thread
// than the one that put it in: `T: Send` is all that is needed.
unsafe impl<T: Send> Sync for Slot<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Send for Slot<T> {}

fn slots<T>(capacity: usize, word: u64) -> Box<[Slot<T>]> {
    assert!(capacity.is_power_of_two(), "a table's capacity is a power of two");
    (0..capacity).map(|_| Slot::new(word)).collect()
}

// ---------------------------------------------------------------------------
// Loans, by address.

/// Loans' words: EMPTY, BUSY, or the loan's address (64-byte aligned and
/// not NULL, so never 0 or 1).
const EMPTY: u64 = 0;
const BUSY: u64 = 1;

/// Values by address (a loan's first byte). Addresses are distinct while
/// their values are in the table.
pub(crate) struct Loans<T> {
    slots: Box<[Slot<T>]>,
    /// Values that found every slot taken.
    spill: Mutex<HashMap<u64, T>>,
    /// How many values `spill` holds, so that a lookup that misses the
    /// slots locks it only when it is not empty.
    spilled: AtomicUsize,
}

/// Why [`Loans::take_if`] returned nothing.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Miss {
    /// No value has that address.
    Absent,
    /// The value refused (the check returned false); it stays in the table.
    Refused,
}

impl<T> Loans<T> {
    /// A table of `capacity` slots (a power of two) and a spill table.
    pub(crate) fn new(capacity: usize) -> Self {
        Loans {
            slots: slots(capacity, EMPTY),
            spill: Mutex::new(HashMap::new()),
            spilled: AtomicUsize::new(0),
        }
    }

    /// Where the search for `addr` starts: Fibonacci hashing of the address
    /// without its alignment bits.
    fn start(&self, addr: u64) -> usize {
        let h = (addr >> 6).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        (h >> 32) as usize & (self.slots.len() - 1)
    }

    /// Puts `value` in under `addr`, which no value in the table has.
    pub(crate) fn insert(&self, addr: u64, value: T) {
        if addr > BUSY {
            let n = self.slots.len();
            let start = self.start(addr);
            for i in 0..n {
                let slot = &self.slots[(start + i) & (n - 1)];
                if slot.word.load(Ordering::Relaxed) == EMPTY && slot.claim(EMPTY, BUSY) {
                    // SAFETY: claimed from EMPTY: the cell is ours and empty.
                    unsafe { slot.write(value) };
                    slot.publish(addr);
                    return;
                }
            }
        }
        let mut spill = lock(&self.spill);
        spill.insert(addr, value);
        self.spilled.store(spill.len(), Ordering::Relaxed);
    }

    /// Takes out the value of `addr` if `ok` says yes to it. Of several
    /// threads taking one address, one gets it; the others miss.
    pub(crate) fn take_if(&self, addr: u64, ok: impl FnOnce(&T) -> bool) -> Result<T, Miss> {
        if addr > BUSY {
            let n = self.slots.len();
            let start = self.start(addr);
            for i in 0..n {
                let slot = &self.slots[(start + i) & (n - 1)];
                if slot.word.load(Ordering::Relaxed) == addr && slot.claim(addr, BUSY) {
                    // SAFETY: claimed from a key: the cell holds its value,
                    // ours until we publish.
                    if !unsafe { slot.peek(ok) } {
                        slot.publish(addr);
                        return Err(Miss::Refused);
                    }
                    // SAFETY: as above; the slot is published EMPTY next.
                    let value = unsafe { slot.read() };
                    slot.publish(EMPTY);
                    return Ok(value);
                }
            }
        }
        // The thread that inserted into the spill table set `spilled`
        // before the address could reach the caller, so a relaxed load
        // sees it (coherence); a value that is not there may be missed.
        if self.spilled.load(Ordering::Relaxed) == 0 {
            return Err(Miss::Absent);
        }
        let mut spill = lock(&self.spill);
        let value = spill.get(&addr).ok_or(Miss::Absent)?;
        if !ok(value) {
            return Err(Miss::Refused);
        }
        let value = spill.remove(&addr).ok_or(Miss::Absent)?;
        self.spilled.store(spill.len(), Ordering::Relaxed);
        Ok(value)
    }
}

impl<T> Drop for Loans<T> {
    fn drop(&mut self) {
        for slot in self.slots.iter() {
            // `&mut self`: no other thread is here; the load needs no order.
            if slot.word.load(Ordering::Relaxed) > BUSY {
                // SAFETY: a full slot's cell holds its value; nobody else can
                // reach it any more.
                drop(unsafe { slot.read() });
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Received messages, by handle.

/// Message words: `generation << 32 | state`.
const FREE: u64 = 0;
const TAKING: u64 = 1;
const FULL: u64 = 2;
const STATE: u64 = 0xffff_ffff;

/// Values under handles the table makes up: a handle is `generation << 32
/// | (index + 1)`; a slot's generation grows each time it is emptied, so a
/// stale handle (of a value taken out) never matches again (until the
/// generation wraps, after 2^32 uses of that slot). Handles are never 0.
pub(crate) struct Held<T> {
    slots: Box<[Slot<T>]>,
    /// Where the next insert starts looking for a free slot (the slot most
    /// recently emptied): a hint, any value is correct.
    hint: AtomicUsize,
    /// Values that found every slot taken; their handles' indexes follow
    /// the slots'.
    spill: Mutex<Spill<T>>,
}

/// The spill table of [`Held`]: a slot per value, reused.
struct Spill<T> {
    slots: Vec<(u32, Option<T>)>,
    free: Vec<usize>,
}

impl<T> Held<T> {
    /// A table of `capacity` slots (a power of two) and a spill table.
    pub(crate) fn new(capacity: usize) -> Self {
        Held {
            slots: slots(capacity, FREE),
            hint: AtomicUsize::new(0),
            spill: Mutex::new(Spill { slots: Vec::new(), free: Vec::new() }),
        }
    }

    /// Puts `value` in; returns its handle.
    pub(crate) fn insert(&self, value: T) -> u64 {
        let n = self.slots.len();
        let start = self.hint.load(Ordering::Relaxed) & (n - 1);
        for i in 0..n {
            let index = (start + i) & (n - 1);
            let slot = &self.slots[index];
            let word = slot.word.load(Ordering::Relaxed);
            if word & STATE == FREE && slot.claim(word, word | TAKING) {
                // SAFETY: claimed from FREE: the cell is ours and empty.
                unsafe { slot.write(value) };
                slot.publish(word | FULL);
                return (word & !STATE) | (index as u64 + 1);
            }
        }
        let mut spill = lock(&self.spill);
        let spill = &mut *spill;
        let index = match spill.free.pop() {
            Some(i) => i,
            None => {
                spill.slots.push((0, None));
                spill.slots.len() - 1
            }
        };
        let entry = &mut spill.slots[index];
        entry.0 = entry.0.wrapping_add(1);
        entry.1 = Some(value);
        (u64::from(entry.0) << 32) | ((n + index) as u64 + 1)
    }

    /// Takes out the value of `handle`. Of several threads taking one
    /// handle, one gets it; the others (and any later take) get `None`.
    pub(crate) fn take(&self, handle: u64) -> Option<T> {
        let index = ((handle & STATE) as usize).checked_sub(1)?;
        let generation = handle & !STATE;
        let Some(slot) = self.slots.get(index) else {
            let mut spill = lock(&self.spill);
            let at = index - self.slots.len();
            let entry = spill.slots.get_mut(at)?;
            if u64::from(entry.0) << 32 != generation {
                return None;
            }
            let value = entry.1.take()?;
            spill.free.push(at);
            return Some(value);
        };
        if !slot.claim(generation | FULL, generation | TAKING) {
            return None;
        }
        // SAFETY: claimed from FULL: the cell holds the value, ours; the
        // slot is published FREE next.
        let value = unsafe { slot.read() };
        slot.publish(generation.wrapping_add(1 << 32) | FREE);
        self.hint.store(index, Ordering::Relaxed);
        Some(value)
    }
}

impl<T> Drop for Held<T> {
    fn drop(&mut self) {
        for slot in self.slots.iter() {
            // `&mut self`: no other thread is here; the load needs no order.
            if slot.word.load(Ordering::Relaxed) & STATE == FULL {
                // SAFETY: a FULL slot's cell holds its value; nobody else can
                // reach it any more.
                drop(unsafe { slot.read() });
            }
        }
    }
}

#[cfg(all(test, not(tachyon_loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn loans_insert_take_refuse_spill() {
        let t = Loans::new(2);
        for a in 1..=5u64 {
            t.insert(a << 6, a); // 5 values in 2 slots: 3 spill
        }
        assert_eq!(t.take_if(64, |_| false), Err(Miss::Refused));
        for a in (1..=5u64).rev() {
            assert_eq!(t.take_if(a << 6, |_| true), Ok(a));
            assert_eq!(t.take_if(a << 6, |_| true), Err(Miss::Absent));
        }
        assert_eq!(t.take_if(0, |_| true), Err(Miss::Absent));
        assert_eq!(t.take_if(1, |_| true), Err(Miss::Absent));
    }

    #[test]
    fn held_handles_are_not_reused() {
        let t = Held::new(2);
        let h: Vec<u64> = (0..5).map(|v| t.insert(v)).collect(); // 3 spill
        assert!(h.iter().all(|&h| h != 0));
        for (v, &h) in h.iter().enumerate() {
            assert_eq!(t.take(h), Some(v));
            assert_eq!(t.take(h), None);
        }
        let again: Vec<u64> = (0..5).map(|v| t.insert(v)).collect();
        for (&old, &new) in h.iter().zip(&again) {
            assert_ne!(old, new);
            assert_eq!(t.take(old), None);
        }
        for bogus in [0, 1 << 32, u64::MAX, 1000] {
            assert_eq!(t.take(bogus), None);
        }
    }

    #[test]
    fn close_drops_what_is_left_once() {
        let v = Arc::new(());
        let loans = Loans::new(2);
        let held = Held::new(2);
        for a in 1..=4u64 {
            loans.insert(a << 6, v.clone());
            held.insert(v.clone());
        }
        assert_eq!(Arc::strong_count(&v), 9);
        drop((loans, held));
        assert_eq!(Arc::strong_count(&v), 1);
    }
}

/// Loom models: threads racing on one key; run with
/// `RUSTFLAGS="--cfg tachyon_loom" CARGO_TARGET_DIR=target/loom cargo test
/// -p tachyon-ffi --release --lib -- loom`.
#[cfg(all(test, tachyon_loom))]
mod loom_models {
    use super::*;
    use loom::sync::atomic::AtomicUsize;
    use loom::sync::Arc;
    use loom::thread;

    /// A value that counts its drops.
    struct Counted(Arc<AtomicUsize>);

    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn model(f: impl Fn() + Sync + Send + 'static) {
        let mut builder = loom::model::Builder::new();
        builder.preemption_bound = Some(3);
        builder.check(f);
    }

    /// Two threads release the same message: one gets it, the other
    /// `None`; a third thread's insert may reuse the slot meanwhile and
    /// keeps its own value; every value is dropped exactly once.
    #[test]
    fn loom_held_release_race() {
        model(|| {
            let drops = Arc::new(AtomicUsize::new(0));
            let t = Arc::new(Held::new(2));
            let h = t.insert(Counted(drops.clone()));
            let racers: Vec<_> = (0..2)
                .map(|_| {
                    let t = t.clone();
                    thread::spawn(move || t.take(h).map(drop).is_some())
                })
                .collect();
            let other = {
                let (t, drops) = (t.clone(), drops.clone());
                thread::spawn(move || t.insert(Counted(drops)))
            };
            let wins = racers.into_iter().map(|r| r.join().unwrap()).filter(|&w| w).count();
            let h2 = other.join().unwrap();
            assert_eq!(wins, 1);
            assert_ne!(h2, h);
            assert_eq!(drops.load(Ordering::SeqCst), 1);
            assert!(t.take(h).is_none());
            drop(t.take(h2).expect("the other value is there"));
            assert_eq!(drops.load(Ordering::SeqCst), 2);
        });
    }

    /// Two threads publish the same two loans, one in the slot and one
    /// spilled (the table has one slot): each loan goes to one of them, the
    /// other misses; each is dropped once.
    #[test]
    fn loom_loans_publish_race() {
        model(|| {
            let drops = Arc::new(AtomicUsize::new(0));
            let t = Arc::new(Loans::new(1));
            t.insert(64, Counted(drops.clone()));
            t.insert(128, Counted(drops.clone())); // spills
            let racers: Vec<_> = (0..2)
                .map(|_| {
                    let t = t.clone();
                    thread::spawn(move || {
                        [64u64, 128].into_iter().filter(|&a| t.take_if(a, |_| true).map(drop).is_ok()).count()
                    })
                })
                .collect();
            let wins: usize = racers.into_iter().map(|r| r.join().unwrap()).sum();
            assert_eq!(wins, 2);
            assert_eq!(drops.load(Ordering::SeqCst), 2);
            assert_eq!(t.take_if(64, |_| true).err(), Some(Miss::Absent));
            assert_eq!(t.take_if(128, |_| true).err(), Some(Miss::Absent));
        });
    }

    /// A publish racing with a wrong one (too long: refused, put back):
    /// whatever the interleaving, the values left when the table is
    /// dropped (a topic closed with loans outstanding) and the ones taken
    /// are dropped exactly once in all.
    #[test]
    fn loom_loans_close_after_race() {
        model(|| {
            let drops = Arc::new(AtomicUsize::new(0));
            let t = Arc::new(Loans::new(2));
            t.insert(64, Counted(drops.clone()));
            t.insert(128, Counted(drops.clone()));
            let racer = {
                let t = t.clone();
                thread::spawn(move || t.take_if(64, |_| true).map(drop).is_ok())
            };
            let refused = t.take_if(64, |_| false);
            let took = racer.join().unwrap();
            assert!(matches!(refused, Err(Miss::Refused) | Err(Miss::Absent)));
            assert_eq!(drops.load(Ordering::SeqCst), usize::from(took));
            drop(Arc::try_unwrap(t).ok().expect("the racer is done"));
            assert_eq!(drops.load(Ordering::SeqCst), 2);
        });
    }
}
