//! The payload pool's free lists: one lock-free Treiber stack of chunk
//! indices per size class.
//!
//! # Invariant
//!
//! A free list's `head` packs a 32-bit tag (bumped by every push and pop)
//! with `index + 1` of the top chunk (0: empty). A chunk is on at most one
//! list at a time, and a popped chunk belongs to its popper alone until it
//! pushes it back. A pop reads the top chunk's `next` and swings `head` with
//! one CAS that also checks the tag, so a head that was popped and pushed
//! back meanwhile (ABA) fails the CAS unless exactly 2^32 operations
//! happened in between. `next` is an atomic: a popper racing a push may read
//! a stale value, which its failing CAS then discards. Every index read
//! from shared memory is checked against the class's range.

use crate::platform::atomic::{AtomicU32, AtomicU64, Ordering};

// Chunk states, kept in the chunk's metadata for accounting and recovery.
/// On a free list.
pub(crate) const FREE: u32 = 0;
/// Lent to a producer (owner: its token).
#[cfg_attr(tachyon_loom, allow(dead_code))]
pub(crate) const LOANED: u32 = 1;
/// Named by a descriptor in a ring.
#[cfg_attr(tachyon_loom, allow(dead_code))]
pub(crate) const QUEUED: u32 = 2;
/// Received and not yet released (owner: the consumer's token).
#[cfg_attr(tachyon_loom, allow(dead_code))]
pub(crate) const HELD: u32 = 3;

/// One class's free list.
#[repr(C)]
pub(crate) struct FreeList {
    head: AtomicU64,
    /// Chunks on the list (a snapshot for accounting).
    pub free: AtomicU64,
}

/// Per-chunk metadata: free-list link, state, holder token, and for a
/// received message where it came from (for redelivery).
#[repr(C)]
pub(crate) struct ChunkMeta {
    next: AtomicU32,
    pub state: AtomicU32,
    pub owner: AtomicU32,
    /// `(topic index + 1) << 16 | partition` of a HELD message; 0 if none.
    pub route: AtomicU32,
    /// Length of a HELD message.
    pub len: AtomicU32,
    _pad: AtomicU32,
}

impl ChunkMeta {
    #[cfg(tachyon_loom)]
    pub(crate) fn new() -> Self {
        ChunkMeta {
            next: AtomicU32::new(0),
            state: AtomicU32::new(FREE),
            owner: AtomicU32::new(0),
            route: AtomicU32::new(0),
            len: AtomicU32::new(0),
            _pad: AtomicU32::new(0),
        }
    }
}

impl FreeList {
    #[cfg(tachyon_loom)]
    pub(crate) fn new() -> Self {
        FreeList { head: AtomicU64::new(0), free: AtomicU64::new(0) }
    }

    /// Pops a chunk of the class whose chunks are `first..first + count`
    /// (global indices into `metas`). `Err(())` if the list holds an index
    /// outside that range: the segment is damaged.
    pub(crate) fn pop(&self, metas: &[ChunkMeta], first: u32, count: u32) -> Result<Option<u32>, ()> {
        loop {
            let h = self.head.load(Ordering::Acquire);
            let top = h as u32;
            if top == 0 {
                return Ok(None);
            }
            let idx = top - 1;
            if idx < first || idx - first >= count || idx as usize >= metas.len() {
                return Err(());
            }
            let next = metas[idx as usize].next.load(Ordering::Relaxed);
            let new = (((h >> 32) + 1) << 32) | u64::from(next);
            if self.head.compare_exchange_weak(h, new, Ordering::AcqRel, Ordering::Acquire).is_ok() {
                self.free.fetch_sub(1, Ordering::Relaxed);
                return Ok(Some(idx));
            }
            crate::platform::atomic::spin_hint();
        }
    }

    /// Pushes chunk `idx` (global index; the caller owns it).
    pub(crate) fn push(&self, metas: &[ChunkMeta], idx: u32) {
        let link = &metas[idx as usize].next;
        let mut h = self.head.load(Ordering::Relaxed);
        loop {
            link.store(h as u32, Ordering::Relaxed);
            let new = (((h >> 32) + 1) << 32) | u64::from(idx + 1);
            match self.head.compare_exchange_weak(h, new, Ordering::Release, Ordering::Relaxed) {
                Ok(_) => {
                    self.free.fetch_add(1, Ordering::Relaxed);
                    return;
                }
                Err(now) => h = now,
            }
        }
    }
}

/// Loom models of the free list (`--cfg tachyon_loom`): no chunk is ever
/// held by two threads at once, and none is lost.
#[cfg(all(test, tachyon_loom))]
mod loom_models {
    use super::*;
    use loom::sync::Arc;

    fn model(f: impl Fn() + Sync + Send + 'static) {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(3);
        b.check(f);
    }

    struct Pool {
        list: FreeList,
        metas: Vec<ChunkMeta>,
        /// 1 while a thread holds the chunk.
        held: Vec<AtomicU32>,
    }

    impl Pool {
        fn new(n: u32) -> Arc<Pool> {
            let p = Pool {
                list: FreeList::new(),
                metas: (0..n).map(|_| ChunkMeta::new()).collect(),
                held: (0..n).map(|_| AtomicU32::new(0)).collect(),
            };
            for i in 0..n {
                p.list.push(&p.metas, i);
            }
            Arc::new(p)
        }
        fn take(&self) -> Option<u32> {
            let i = self.list.pop(&self.metas, 0, self.metas.len() as u32).expect("in range")?;
            assert_eq!(self.held[i as usize].swap(1, Ordering::SeqCst), 0, "chunk {i} handed out twice");
            Some(i)
        }
        fn give(&self, i: u32) {
            assert_eq!(self.held[i as usize].swap(0, Ordering::SeqCst), 1);
            self.list.push(&self.metas, i);
        }
    }

    #[test]
    fn pop_push_races_hand_out_each_chunk_once() {
        model(|| {
            let p = Pool::new(2);
            let t = {
                let p = p.clone();
                loom::thread::spawn(move || {
                    if let Some(i) = p.take() {
                        p.give(i);
                    }
                })
            };
            // The ABA shape: pop A, pop B, push A while the other thread
            // may hold a stale view of the head.
            let a = p.take();
            let b = p.take();
            if let Some(a) = a {
                p.give(a);
            }
            if let Some(b) = b {
                p.give(b);
            }
            t.join().unwrap();
            let mut all = vec![];
            while let Some(i) = p.take() {
                all.push(i);
            }
            all.sort();
            assert_eq!(all, [0, 1], "every chunk is back, once");
        });
    }
}
