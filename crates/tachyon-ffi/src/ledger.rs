//! What a topic handle has handed to C: one word per chunk of the region,
//! saying whether C holds that chunk as a loan or as a received message
//! through this handle.
//!
//! The core's raw interface (`Topic::loan_raw`, `publish_raw`, ...) hands
//! out chunks by index and takes them back on trust; C gives back a loan's
//! address or a message's `ty_msg_t.handle`, which may be wrong, stale,
//! repeated, or another handle's. The ledger is what turns those into
//! `TY_EINVAL` instead of a double free: a chunk index goes back to the
//! core only after one compare-and-swap took it out of this ledger, so of
//! two threads giving back the same loan or message one wins and the other
//! finds nothing.
//!
//! Algorithm: a word per chunk index, `seq:30 | state:2 | size:32`.
//! `state` is IDLE, LOANED (`size`: the bytes loaned) or HELD. Only the
//! thread that got the chunk from the core marks it (a plain store: the
//! chunk is nobody else's yet, so nothing else writes its word); taking it
//! back is a compare-and-swap from the exact word read to IDLE. A
//! message's handle carries the `seq` its HELD word was given, and `seq`
//! moves on with every message, so a stale copy of a handle (released
//! already, the chunk since received again) finds another `seq` and fails,
//! until `seq` wraps (2^30 messages through that one chunk in between).
//!
//! A loan's address names its chunk without a `seq`: a stale address given
//! back after the chunk was loaned again through the same handle takes the
//! new loan (as any table keyed by address would); the header says so.
//!
//! Memory: 8 bytes per chunk of the region, allocated zeroed and touched
//! only where chunks are used, per topic handle.

use crate::loom::{AtomicU64, Ordering};

const STATE_SHIFT: u32 = 32;
const SEQ_SHIFT: u32 = 34;
const SEQ_MASK: u64 = (1 << 30) - 1;
const IDLE: u64 = 0;
const LOANED: u64 = 1;
const HELD: u64 = 2;

fn state(w: u64) -> u64 {
    (w >> STATE_SHIFT) & 3
}

fn seq(w: u64) -> u64 {
    w >> SEQ_SHIFT
}

/// Why a loan could not be taken back.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Miss {
    /// Not a loan of this handle (never, or not any more).
    Absent,
    /// A loan of this handle, of fewer bytes than asked for (it stays).
    Refused { size: usize },
}

/// One word per chunk of the region (see the module's documentation).
pub(crate) struct Ledger {
    words: Box<[AtomicU64]>,
}

impl Ledger {
    /// A ledger for chunk indices `0..chunks`, all IDLE.
    pub(crate) fn new(chunks: usize) -> Ledger {
        Ledger { words: zeroed(chunks) }
    }

    fn word(&self, index: u32) -> Option<&AtomicU64> {
        self.words.get(index as usize)
    }

    /// Records chunk `index` as loaned for `size` bytes; the caller just got
    /// it from the core (so its word is IDLE and nobody else writes it).
    pub(crate) fn loaned(&self, index: u32, size: usize) {
        if let Some(w) = self.word(index) {
            let seq = seq(w.load(Ordering::Relaxed));
            // SYNC: released to the `take_loan` of whichever thread C
            // passes the address to.
            w.store(seq << SEQ_SHIFT | LOANED << STATE_SHIFT | size as u64 & 0xffff_ffff, Ordering::Release);
        }
    }

    /// Takes the loan of chunk `index` back to publish `len` bytes of it.
    pub(crate) fn take_loan(&self, index: u32, len: usize) -> Result<(), Miss> {
        let w = self.word(index).ok_or(Miss::Absent)?;
        let now = w.load(Ordering::Acquire);
        if state(now) != LOANED {
            return Err(Miss::Absent);
        }
        let size = (now & 0xffff_ffff) as usize;
        if len > size {
            return Err(Miss::Refused { size });
        }
        // SYNC: one of several takers of the same loan wins.
        w.compare_exchange(now, seq(now) << SEQ_SHIFT | IDLE, Ordering::AcqRel, Ordering::Relaxed)
            .map(drop)
            .map_err(|_| Miss::Absent)
    }

    /// Records chunk `index` as a message held through this handle (the
    /// caller just got it from the core); returns its handle for C, never
    /// 0.
    pub(crate) fn held(&self, index: u32) -> u64 {
        let Some(w) = self.word(index) else { return 0 };
        let seq = (seq(w.load(Ordering::Relaxed)) + 1) & SEQ_MASK;
        // SYNC: released to the `take_held` of whichever thread C
        // passes the message to.
        w.store(seq << SEQ_SHIFT | HELD << STATE_SHIFT, Ordering::Release);
        seq << 32 | (u64::from(index) + 1)
    }

    /// Takes the message of `handle` back (to release it): its chunk
    /// index, or `None` if `handle` names no message held through this
    /// handle now.
    pub(crate) fn take_held(&self, handle: u64) -> Option<u32> {
        let index = u32::try_from(handle & 0xffff_ffff).ok()?.checked_sub(1)?;
        let w = self.word(index)?;
        let now = w.load(Ordering::Acquire);
        if state(now) != HELD || seq(now) != handle >> 32 {
            return None;
        }
        // SYNC: one of several takers of the same message wins.
        w.compare_exchange(now, seq(now) << SEQ_SHIFT | IDLE, Ordering::AcqRel, Ordering::Relaxed)
            .ok()
            .map(|_| index)
    }

    /// Every loan and message still recorded, each taken out (for the
    /// handle's close): `(index, is_loan)`.
    pub(crate) fn drain(&mut self) -> impl Iterator<Item = (u32, bool)> + '_ {
        self.words.iter().enumerate().filter_map(|(i, w)| {
            let now = w.load(Ordering::Acquire);
            let s = state(now);
            if s == IDLE {
                return None;
            }
            w.store(seq(now) << SEQ_SHIFT | IDLE, Ordering::Relaxed);
            Some((i as u32, s == LOANED))
        })
    }
}

/// `n` atomics, zero. The normal build asks the allocator for zeroed
/// memory (fresh pages, not touched until a chunk's word is first used);
/// loom's atomics are built one by one.
#[cfg(not(tachyon_loom))]
fn zeroed(n: usize) -> Box<[AtomicU64]> {
    if n == 0 {
        return Box::new([]);
    }
    let layout = std::alloc::Layout::array::<AtomicU64>(n).expect("a ledger smaller than the address space");
    // SAFETY: `layout` has a non-zero size (n > 0).
    let p = unsafe { std::alloc::alloc_zeroed(layout) }.cast::<AtomicU64>();
    if p.is_null() {
        std::alloc::handle_alloc_error(layout);
    }
    // SAFETY: `p` is a fresh allocation of `n` `AtomicU64`s made with the
    // layout `Box<[AtomicU64]>` frees with (`Layout::array`); all-zero
    // bytes are a valid `AtomicU64` (it has the representation of `u64`),
    // so every element is initialised, to 0.
    unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(p, n)) }
}

#[cfg(tachyon_loom)]
fn zeroed(n: usize) -> Box<[AtomicU64]> {
    (0..n).map(|_| AtomicU64::new(0)).collect()
}

#[cfg(all(test, not(tachyon_loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_loan_is_taken_back_once_and_only_for_its_size() {
        let l = Ledger::new(4);
        assert_eq!(l.take_loan(1, 0), Err(Miss::Absent));
        l.loaned(1, 100);
        assert_eq!(l.take_loan(1, 101), Err(Miss::Refused { size: 100 }));
        assert_eq!(l.take_loan(1, 100), Ok(()));
        assert_eq!(l.take_loan(1, 0), Err(Miss::Absent));
        assert_eq!(l.take_loan(4, 0), Err(Miss::Absent), "an index past the region");
    }

    #[test]
    fn a_message_handle_works_once_and_a_stale_one_never() {
        let l = Ledger::new(2);
        let h1 = l.held(1);
        assert_ne!(h1, 0);
        assert_eq!(l.take_loan(1, 0), Err(Miss::Absent), "a message is no loan");
        assert_eq!(l.take_held(h1), Some(1));
        assert_eq!(l.take_held(h1), None, "released already");
        let h2 = l.held(1);
        assert_ne!(h1, h2);
        assert_eq!(l.take_held(h1), None, "a stale handle of the same chunk");
        assert_eq!(l.take_held(0), None);
        assert_eq!(l.take_held(h2 + (1 << 40)), None);
        assert_eq!(l.take_held(u64::MAX), None);
        assert_eq!(l.take_held(h2), Some(1));
    }

    #[test]
    fn drain_gives_back_what_is_recorded() {
        let mut l = Ledger::new(3);
        l.loaned(0, 8);
        l.held(2);
        assert_eq!(l.drain().collect::<Vec<_>>(), vec![(0, true), (2, false)]);
        assert_eq!(l.drain().count(), 0);
    }
}

#[cfg(all(test, tachyon_loom))]
mod loom_models {
    use super::*;
    use loom::sync::Arc;
    use loom::thread;

    /// Two threads give back the same loan: exactly one gets it.
    #[test]
    fn loom_one_of_two_takers_of_a_loan() {
        loom::model(|| {
            let l = Arc::new(Ledger::new(1));
            l.loaned(0, 64);
            let other = {
                let l = l.clone();
                thread::spawn(move || l.take_loan(0, 10).is_ok())
            };
            let mine = l.take_loan(0, 10).is_ok();
            let theirs = other.join().unwrap();
            assert!(mine ^ theirs, "exactly one taker: {mine} {theirs}");
        });
    }

    /// A thread releases a message and receives the same chunk again while
    /// another gives back a copy of the first handle: the copy gets the
    /// first message or nothing, never the second.
    #[test]
    fn loom_a_stale_handle_never_takes_the_next_message() {
        loom::model(|| {
            let l = Arc::new(Ledger::new(1));
            let h1 = l.held(0);
            let stale = {
                let l = l.clone();
                thread::spawn(move || l.take_held(h1).is_some())
            };
            let first = l.take_held(h1).is_some();
            let h2 = if first { Some(l.held(0)) } else { None };
            let stale_won = stale.join().unwrap();
            assert!(first ^ stale_won, "exactly one release of the first message");
            if let Some(h2) = h2 {
                assert_eq!(l.take_held(h2), Some(0), "the second message is still there");
            }
        });
    }
}
