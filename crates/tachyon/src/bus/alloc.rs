//! Allocation: chunks of the region's pool loaned and freed (through this
//! process's cache of free chunks and the classes' free lists), where a
//! chunk's bytes are, and the rebuild of damaged free lists.

use super::layout::{
    CLASS_SIZES, MAX_MESSAGE, OFF_CONTROL, OFF_FREED, OFF_FREE_LISTS, OFF_JOURNAL, TOO_LARGE,
};
use super::groups::{is_shared, FreeTo, Shares};
use super::pool::{ChunkMeta, FreeList, Pool, FREE, HELD, LOANED, MAX_CHAIN};
use crate::platform::atomic::AtomicU64;
use super::region::{Region, RegionCore, RECOVERY_INTERVAL};
use crate::error::{Corruption, Error, Result};
use crate::platform::atomic::Ordering;
use crate::segment::{Liveness, MAX_SLOTS};
use crate::sync::hot::HotSlot;
use crate::sync::owned::OwnedList;
use crate::sync::{Mutex, WaitCell};
use std::time::Duration;

/// Free, or kept free by a process for its next loan.
pub(crate) fn is_free(meta: &ChunkMeta) -> bool {
    let w = meta.word();
    w.state() == FREE || (w.state() == LOANED && meta.route.load(Ordering::Relaxed) == CACHED)
}

fn damaged_list(class: usize) -> Error {
    Error::corrupt(Corruption::BadField { field: "free list of class", value: class as u64 })
}

/// A chunk kept by a process for its next loan is LOANED by it (so that it
/// is attributed like any loan if the process dies) with this route.
pub(crate) const CACHED: u32 = u32::MAX;
/// The hint a process writes into the first chunk of a chain it pushes
/// onto a free list: the indices of the chain's other chunks, in the
/// chunk's first bytes (a free chunk's bytes are nobody's). A pop that
/// takes the chain reads them and asks for all the chunks' metadata lines
/// at once (`Region::prefetch_chain`), instead of meeting them one by one
/// as it walks the links: each is a line the pushing process's core wrote
/// last. Only prefetches follow from a hint, so a stale or damaged one
/// costs time, never a chunk: the pop still walks and checks the links.
///
/// Words: `MAGIC ^ k << 24 ^ first`, then `k` indices (`first` below
/// 2^24, `k` at most 31).
struct ChainHint;

impl ChainHint {
    const MAGIC: u32 = 0x5A00_0000;
    /// Chunks this small (one line) have their bytes prefetched for
    /// writing too: the next loan of such a chunk writes all of them.
    const BYTES_FETCHED: usize = 64;

    /// How many chunks after the first a hint in a chunk of `size` bytes
    /// names at most.
    fn room(size: usize) -> usize {
        (size / 4 - 1).min(MAX_CHAIN - 1)
    }

    /// The first word of the hint of a chain from `first` naming `k`
    /// more chunks.
    fn head(first: u32, k: usize) -> u32 {
        Self::MAGIC ^ ((k as u32) << 24) ^ first
    }

    /// How many chunks the hint whose first word is `word` names, if it is
    /// a hint of a chain from `first` in a chunk of `size` bytes.
    fn len(word: u32, first: u32, size: usize) -> Option<usize> {
        let v = word ^ Self::MAGIC;
        let k = (v >> 24) as usize;
        (v & 0xFF_FFFF == first && (1..=Self::room(size)).contains(&k)).then_some(k)
    }
}

/// Classes with fewer chunks than this are never cached (a small class
/// cannot spare them).
const CACHE_MIN_CHUNKS: usize = 256;
/// The most chunks of a class of `size`-byte chunks a process keeps in
/// each half of its cache's list: two pops' worth, where a pop takes no
/// more chunks than the hint in its chain's first chunk can name
/// ([`ChainHint::room`]), so that it asks for all of their lines at once.
/// 32 of 64-byte chunks (a pop of 16), 64 of larger ones (a pop of
/// [`MAX_CHAIN`]). A pop of 32 rather than 16 took the 1 KiB streams 4 –
/// 14 % further on the Intel Xeon guest; pops of 32 of 64-byte chunks,
/// whose hint names 15, took the 64 B streams to 0.51 – 0.85 × their
/// speed (docs/benchmark-history.md, "pops of 32 chunks").
fn cache_max(size: usize) -> usize {
    2 * (ChainHint::room(size) + 1)
}

/// How many chunks of a class of `chunks` chunks of `size` bytes a process
/// keeps in each half of its cache's list (the first thread's and the
/// other threads', and one more in its slot, see [`ChunkCache`]): none
/// below [`CACHE_MIN_CHUNKS`], then one in 64 of the class, at least 4 and
/// at most [`cache_max`] (3.2 % of a class per process at most, both
/// halves full, so that the chunks idle processes keep cannot starve the
/// others).
pub(crate) fn cache_capacity(chunks: usize, size: usize) -> usize {
    if chunks < CACHE_MIN_CHUNKS {
        0
    } else {
        (chunks / 64).clamp(4, cache_max(size))
    }
}

/// How many chunks one pop takes from a class of `chunks` chunks of `size`
/// bytes ([`Pool::batches`]): half of what a process keeps of it, so that
/// a loan that finds its cache empty refills half of it at the cost of one
/// pop; 1 for a class that is not kept.
pub(crate) fn pop_batch(chunks: usize, size: usize) -> usize {
    (cache_capacity(chunks, size) / 2).max(1)
}

/// Most lines of a chunk's bytes [`Region::prefetch_next_loan`] asks for
/// (2 KiB): a whole chunk of the small classes, the start of a larger one.
/// Each is a PREFETCHW the core has to track until its line comes; on
/// the Intel Xeon guest 32 lines took a 4 KiB stream a little further
/// than 16 did (copy path 2.3 → 2.5 – 2.8 M msgs/s, from 1.5 without).
const AHEAD_LINES: usize = 32;

/// Free chunks of one class that a region handle keeps for its next loans
/// (a *magazine*, after J. Bonwick and J. Adams, "Magazines and Vmem",
/// USENIX 2001): a process that both receives and sends (a ping-pong, a
/// pipeline stage) reuses the chunk it just released; a consumer gives the
/// chunks it released back to the shared free list half a cache at a time,
/// in one push of a chain, and a producer whose cache is empty takes as
/// many in one pop (`FreeList`, "Chains"): the list's head is touched once
/// per batch, not at every message (the transfer between magazines and the
/// depot of that paper, and tcmalloc's transfer cache). Private to the
/// process (its threads may share the
/// handle); every chunk in it is LOANED by this process with the route
/// [`CACHED`], so that recovery reclaims it like any loan if the process
/// dies.
///
/// A chunk released alone into an empty [`HotSlot`] is kept there, apart
/// from the list: the next loan takes it with one atomic exchange (a
/// ping-pong or a pipeline stage releases one chunk and loans one at every
/// message). The list holds up to `capacity` chunks, the slot one more, so
/// that half a full list is a pop's batch (what a full list spills).
///
/// The list is an [`OwnedList`]: the first thread that uses the cache
/// keeps its chunks in a half of its own, without a lock (a stream's
/// producer loans, and its consumer releases, at every message: a lock
/// and an unlock each time cost a 64 B stream through chunks 5 – 8 % of
/// its speed; docs/benchmark-history.md, "The chunk cache without a lock"); the
/// process's other threads share the other half behind a mutex. Each
/// half holds up to `capacity` chunks.
/// This thread's number, cut to the 32 bits a [`HotSlot`] keeps.
#[inline]
fn this_thread() -> u32 {
    crate::sync::owned::thread_number() as u32
}

pub(crate) struct ChunkCache {
    /// On lines of its own: written by whichever thread puts or takes,
    /// beside halves two threads write (see [`OwnedList`]).
    hot: crate::sync::Lines<HotSlot>,
    kept: OwnedList,
    capacity: usize,
}

impl ChunkCache {
    pub(crate) fn new(capacity: usize) -> ChunkCache {
        ChunkCache { hot: crate::sync::Lines(HotSlot::new()), kept: OwnedList::new(capacity), capacity }
    }

    /// The chunk in the slot, else the one the caller's half of the list
    /// kept last (the ones most likely still in this core's cache); with
    /// it, for a chunk from the list, the chunk the list would give next
    /// (a hint for [`Region::prefetch_next_loan`]: another thread or a
    /// release may change what the next take gets). A chunk from the slot
    /// comes with no hint: whoever released it there (a ping-pong, a
    /// pipeline stage) will most likely put the next one there too.
    #[inline]
    pub(crate) fn take(&self) -> Option<(u32, Option<u32>)> {
        if self.capacity == 0 {
            return None;
        }
        if let Some(chunk) = self.hot.take(this_thread()) {
            return Some((chunk, None));
        }
        self.kept.with(|kept| kept.pop().map(|chunk| (chunk, kept.last().copied())))
    }

    /// A chunk the cache keeps that [`take`](Self::take) leaves to another
    /// thread: the slot's, whoever released it there, else, for the
    /// list's owner, one of the half the process's other threads share.
    /// For a loan that found the free lists empty: a chunk its own handle
    /// keeps is lent rather than waited for. (The owner's half stays the
    /// owner's: it has no lock, so no other thread may reach it.)
    fn take_stranded(&self) -> Option<u32> {
        if self.capacity == 0 {
            return None;
        }
        self.hot.take_any().or_else(|| self.kept.with_others(Vec::pop).flatten())
    }

    /// Every chunk the cache keeps, taken out (its region's last handle is
    /// going: nobody uses the cache any more).
    fn drain(&mut self) -> Vec<u32> {
        let mut all = self.kept.drain();
        all.extend(self.hot.take_any());
        all
    }

    /// Keeps one chunk in the slot if it is empty; false, keeping nothing,
    /// if it is not.
    #[inline]
    fn put_hot(&self, chunk: u32) -> bool {
        self.capacity > 0 && self.hot.put(chunk, this_thread())
    }

    /// Keeps `chunks` if they all fit (the common case: no spill to
    /// prepare); false, keeping none, if they do not.
    #[inline]
    fn put_if_room(&self, chunks: &[u32]) -> bool {
        self.kept.with(|kept| {
            if kept.len() + chunks.len() > self.capacity {
                return false;
            }
            kept.extend_from_slice(chunks);
            true
        })
    }

    /// Keeps `chunks`. Whenever the cache is full, first moves its older
    /// half into `spill` (at most [`MAX_CHAIN`]); returns how many it
    /// moved in all (the caller frees them).
    #[inline]
    fn put(&self, chunks: &[u32], spill: &mut [u32; MAX_CHAIN]) -> usize {
        self.kept.with(|kept| {
            let mut spilled = 0;
            for &chunk in chunks {
                if kept.len() >= self.capacity {
                    let n = (kept.len() / 2).min(MAX_CHAIN - spilled);
                    spill[spilled..spilled + n].copy_from_slice(&kept[..n]);
                    kept.drain(..n);
                    spilled += n;
                }
                // Over capacity only if `spill` is full, which the callers'
                // counts never make it (a pop's batch is half the capacity).
                kept.push(chunk);
            }
            spilled
        })
    }
}

/// Free chunks of one class, as [`Region::pool_stats`] reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct ClassStats {
    /// Bytes per chunk.
    pub chunk_size: usize,
    /// Chunks in the class.
    pub chunks: usize,
    /// Chunks free now.
    pub free: usize,
}

impl Region {
    /// Free chunks per class now (a snapshot: it reads every chunk's
    /// state, so it costs a few microseconds per thousand chunks).
    pub fn pool_stats(&self) -> Result<[ClassStats; 8]> {
        let metas = self.metas()?;
        Ok(std::array::from_fn(|c| ClassStats {
            chunk_size: CLASS_SIZES[c],
            chunks: self.core.layout.class_count[c],
            free: self.core.layout.class_range(c).filter(|&i| is_free(&metas[i as usize])).count(),
        }))
    }

    pub(crate) fn free_lists(&self) -> Result<&[FreeList]> {
        self.core.free_lists()
    }

    /// The chunks and the journal the free lists work on.
    pub(crate) fn pool(&self) -> Result<Pool<'_>> {
        self.core.pool()
    }

    /// Completes the free-list operations announced now (see `pool`).
    pub(crate) fn help_free_lists(&self) -> Result<()> {
        let pool = self.pool()?;
        for (c, list) in self.free_lists()?.iter().enumerate() {
            list.help(&pool, &self.core.layout.class_range(c)).map_err(|()| damaged_list(c))?;
        }
        Ok(())
    }

    /// The chunks' metadata (checked at attach: never an error now; the
    /// `Result` keeps the callers' shape).
    #[inline]
    pub(crate) fn metas(&self) -> Result<&[ChunkMeta]> {
        Ok(self.core.metas.get())
    }

    pub(crate) fn freed(&self) -> &WaitCell {
        self.core.freed()
    }

    /// The class of global chunk index `chunk`, if it is one.
    #[inline]
    pub(crate) fn class_of(&self, chunk: u32) -> Option<usize> {
        self.core.layout.class_of(chunk)
    }

    pub(crate) fn class_range(&self, class: usize) -> std::ops::Range<u32> {
        self.core.layout.class_range(class)
    }

    /// Pointer to the data of chunk `chunk` of class `class` (checked by
    /// the caller with `class_of`).
    pub(crate) fn chunk_ptr(&self, class: usize, chunk: u32) -> *mut u8 {
        // The callers pass indices the pool handed out or `class_of`
        // checked; a wrong one is a bug here, stopped before any access.
        self.core.chunk_at(class, chunk).expect("chunk index inside its class")
    }

    /// Asks, for writing, for the first [`AHEAD_LINES`] lines of the bytes
    /// of `chunk` (of `class`, LOANED to this process in its cache), the
    /// chunk its next loan of the class will most likely get: they come
    /// over while this loan is written and published, and the next one
    /// finds them in this core's cache, owned.
    ///
    /// What it is for: a chunk comes back to a producer from its consumer,
    /// whose core read its bytes last, so that each of the loan's stores
    /// first waits for its line to come over from that core. The loan's
    /// first locked instruction after its stores (the publish's hand-over
    /// of the chunk) waits for all of them. On an Intel Xeon 2-vCPU guest
    /// 69 % of a 1 KiB copy-path producer's samples in `queue_and_claim`
    /// were that wait (`perf`), and asking for the next chunk's lines one
    /// loan ahead took its stream from 2.0 – 2.1 to 6.6 – 6.8 M msgs/s, the
    /// loan path's from 2.4 to 5.1 – 5.3 (docs/benchmark-history.md, "the
    /// next loan's lines, asked for one loan ahead"). Only hints: a chunk
    /// another thread takes first, or that is not taken next after all,
    /// costs the lines' trip and nothing else.
    #[inline]
    fn prefetch_next_loan(&self, class: usize, chunk: u32) {
        if CLASS_SIZES[class] <= ChainHint::BYTES_FETCHED {
            // Asked for already, with the whole chain, when it was popped
            // (`prefetch_chain`).
            return;
        }
        if let Some(bytes) = self.core.chunk_at(class, chunk) {
            #[cfg(test)]
            tests::ASKED_AHEAD.with(|a| a.set(Some((class, chunk))));
            crate::sync::prefetch(bytes, CLASS_SIZES[class], AHEAD_LINES, true);
        }
    }

    /// Asks, for writing, for the lines a pop that announced the chain
    /// from `first` (of `class`, whose chunks are `range`) is about to
    /// move: each chunk's metadata, and the bytes of a chunk of one line
    /// (its next loan writes all of them). The chain's hint (see
    /// [`ChainHint`]) names the chunks, so that their lines are asked for
    /// at once, not one after the other as the links are walked. A hint
    /// that does not check out is ignored; whatever it says, nothing but
    /// prefetches follows from it.
    fn prefetch_chain(&self, class: usize, first: u32, pool: &Pool<'_>, range: &std::ops::Range<u32>) {
        let write = crate::sync::prefetch_writes();
        // Addresses from the class's bases, wrapping: a prefetch of any
        // address is harmless, and each index below is checked against
        // `range` first (the class's chunks, whose metadata and bytes lie
        // in the mapping).
        let metas = pool.metas.as_ptr().cast::<u8>();
        let meta = |c: u32| metas.wrapping_add(c as usize * std::mem::size_of::<ChunkMeta>());
        crate::sync::prefetch_line(meta(first), write);
        // Read only from a FREE chunk: the announced chain is this
        // process's, and a chunk whose word says FREE is lent by no `Loan`
        // of it (the pool hands a chunk out only through its word).
        if pool.metas[first as usize].word().state() != FREE {
            return;
        }
        let size = CLASS_SIZES[class];
        let p = self.chunk_ptr(class, first).cast::<u32>();
        // SAFETY: `first` is in the class (`pop_chain_then` checked it) and
        // FREE in a chain this process's pop announced: nobody writes its
        // bytes until this process loans it. Their last writer (a loan, or
        // the pusher's hint) wrote them before the chunk went onto the
        // list, which this pop's Acquire CAS of the head follows. The first
        // word of a 64-byte aligned chunk of at least 64 bytes; any bits
        // are a `u32`.
        let Some(k) = ChainHint::len(unsafe { p.read_volatile() }, first, size) else { return };
        // The class's first chunk's bytes: `first`'s, `first - start`
        // chunks back.
        let data = p.cast::<u8>().wrapping_sub((first - range.start) as usize * size);
        let bytes = size <= ChainHint::BYTES_FETCHED;
        for j in 1..=k.min(pool.batch(range) - 1) {
            // SAFETY: as above; `j <= k < size / 4` (`ChainHint::len`).
            let c = unsafe { p.add(j).read_volatile() };
            if range.contains(&c) {
                crate::sync::prefetch_line(meta(c), write);
                if bytes {
                    crate::sync::prefetch_line(data.wrapping_add((c - range.start) as usize * size), write);
                }
            }
        }
    }

    /// How many chunks the pool has (global indices are below this).
    pub(crate) fn chunk_count(&self) -> usize {
        self.core.layout.total_chunks
    }

    /// The class and global index of the chunk whose first byte is at
    /// `ptr`, if `ptr` is the first byte of a chunk of this region.
    pub(crate) fn chunk_at(&self, ptr: *const u8) -> Option<(usize, u32)> {
        let off = (ptr as usize).checked_sub(self.core.seg.as_ptr() as usize)?;
        let l = &self.core.layout;
        // The classes' data areas follow one another in class order; an
        // empty class starts where the next one does, so the last class
        // starting at or before `off` is the one `off` can be in.
        let c = (0..8).rev().find(|&c| l.class_data[c] <= off)?;
        let rel = off - l.class_data[c];
        // CLASS_SIZES are powers of two: a shift and a mask, no division.
        let i = rel >> CLASS_SIZES[c].trailing_zeros();
        (i < l.class_count[c] && rel & (CLASS_SIZES[c] - 1) == 0).then(|| (c, (l.class_first[c] + i) as u32))
    }

    /// Takes a chunk for `size` bytes: the smallest class that fits and has
    /// one free, waiting up to `timeout` for one to be freed.
    pub(crate) fn alloc(&self, size: usize, timeout: Option<Duration>) -> Result<(usize, u32)> {
        // Not `ok_or`: it would build (and drop) the error on every call.
        let Some(want) = CLASS_SIZES.iter().position(|&s| s >= size.max(1)) else {
            return Err(Error::MessageTooLarge { size, max: MAX_MESSAGE, hint: TOO_LARGE });
        };
        if let Some(chunk) = self.take_cached(want)? {
            return Ok((want, chunk));
        }
        let lists = self.free_lists()?;
        let pool = self.pool()?;
        let me = self.core.seg.token();
        let try_pop = || -> Option<Result<(usize, u32)>> {
            let mut got = [0; MAX_CHAIN];
            for (c, list) in lists.iter().enumerate().skip(want) {
                if self.core.layout.class_count[c] == 0 {
                    continue; // a class the region has no chunks of
                }
                if c > want {
                    // A larger class, the smaller ones empty: what this
                    // handle kept of it from an earlier such loan first
                    // (else every loan would pop a batch of the class and
                    // spill as many back, once its cache is full).
                    match self.take_cached(c) {
                        Ok(Some(chunk)) => return Some(Ok((c, chunk))),
                        Ok(None) => {}
                        Err(e) => return Some(Err(e)),
                    }
                }
                let range = self.class_range(c);
                let prefetch = |first| self.prefetch_chain(c, first, &pool, &range);
                let popped = match list.pop_chain_then(&pool, &range, me, &mut got, prefetch) {
                    // A damaged list: rebuilt from the chunks' words, then
                    // once more (a pop cut short by the damage left its
                    // chunks as they were).
                    Err(()) => match self.core.rebuild_free_lists_of(Some(c)) {
                        Ok(_) => list.pop_chain(&pool, &range, me, &mut got),
                        Err(e) => return Some(Err(e)),
                    },
                    other => other,
                };
                match popped {
                    Ok(0) => {
                        if let Some(chunk) = self.core.cache[c].take_stranded() {
                            // Already LOANED by this process (see `alloc`'s
                            // cache path).
                            pool.metas[chunk as usize].route.store(0, Ordering::Relaxed);
                            return Some(Ok((c, chunk)));
                        }
                    }
                    Ok(n) => {
                        // The first is the loan (a loan's route is 0; a
                        // chunk recovery took back from a dead process's
                        // cache still says CACHED); the rest of the batch
                        // is kept for the next loans.
                        pool.metas[got[0] as usize].route.store(0, Ordering::Relaxed);
                        self.keep_popped(c, &got[1..n]);
                        if n > 1 {
                            // The cache gives the chain's last chunk next.
                            self.prefetch_next_loan(c, got[n - 1]);
                        }
                        return Some(Ok((c, got[0])));
                    }
                    Err(()) => return Some(Err(damaged_list(c))),
                }
            }
            None
        };
        if let Some(r) = try_pop() {
            return r;
        }
        let exhausted = Error::PoolExhausted { class: want, chunk_size: CLASS_SIZES[want] };
        if timeout.is_some_and(|t| t.is_zero()) {
            return Err(exhausted);
        }
        self.heartbeat();
        // Wait in slices; between them, reclaim what dead processes held
        // (nobody else would free it for us).
        let deadline = timeout.and_then(crate::platform::deadline_after);
        loop {
            if self.recover_now_and_then() > 0 {
                if let Some(r) = try_pop() {
                    return r;
                }
            }
            let left = deadline.map(|d| d.saturating_duration_since(std::time::Instant::now()));
            if left.is_some_and(|l| l.is_zero()) {
                return Err(exhausted);
            }
            let slice = left.map_or(RECOVERY_INTERVAL, |l| l.min(RECOVERY_INTERVAL));
            match self.freed().wait_until(crate::sync::WaitPolicy::Hybrid, Some(slice), try_pop) {
                Ok(r) => return r,
                Err(Error::Timeout { .. }) => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// A chunk of `class` from this handle's cache, made a loan (it is
    /// LOANED by this process already; a loan's route is 0), with the
    /// next one's lines asked for.
    #[inline]
    fn take_cached(&self, class: usize) -> Result<Option<u32>> {
        let Some((chunk, next)) = self.core.cache[class].take() else { return Ok(None) };
        self.metas()?[chunk as usize].route.store(0, Ordering::Relaxed);
        if let Some(next) = next {
            self.prefetch_next_loan(class, next);
        }
        Ok(Some(chunk))
    }

    /// Returns a chunk the caller holds: to this handle's cache if its
    /// class is cached and there is room, else to its class's free list.
    #[inline]
    pub(crate) fn free(&self, class: usize, chunk: u32) {
        if self.core.cache[class].capacity > 0 && self.keep(class, chunk) {
            return;
        }
        self.free_shared(class, chunk);
    }

    /// Puts a chunk the caller holds into this handle's cache, LOANED by
    /// this process with the route [`CACHED`] (giving the older half of a
    /// full cache back to the free list first); false if the chunk is not
    /// the caller's to keep.
    #[inline]
    fn keep(&self, class: usize, chunk: u32) -> bool {
        let Ok(metas) = self.metas() else { return false };
        let meta = &metas[chunk as usize];
        let w = meta.word();
        let me = self.token();
        if w.holder() != me {
            return false;
        }
        // LOANED first, then the CACHED route: a message's chunk keeps its
        // route while HELD, so that a death between the two leaves either a
        // held message (delivered again on an at-least-once topic) or a
        // loan, never a held chunk with a route that names no topic.
        if w.state() != LOANED && !meta.cas(w, w.with(LOANED, me)) {
            return false;
        }
        meta.route.store(CACHED, Ordering::Relaxed);
        if !self.core.cache[class].put_hot(chunk) {
            self.put_kept(class, &[chunk]);
        }
        true
    }

    /// Puts chunks a pop gave this process, beyond the one it loans, into
    /// its cache (they are LOANED by it already).
    fn keep_popped(&self, class: usize, chunks: &[u32]) {
        if chunks.is_empty() {
            return;
        }
        if let Ok(metas) = self.metas() {
            for &c in chunks {
                metas[c as usize].route.store(CACHED, Ordering::Relaxed);
            }
        }
        self.put_kept(class, chunks);
    }

    /// Puts `chunks` (LOANED by this process, route [`CACHED`]) into the
    /// cache of `class`, giving the older half of a full cache back to the
    /// free list in one push first.
    #[inline]
    fn put_kept(&self, class: usize, chunks: &[u32]) {
        if self.core.cache[class].put_if_room(chunks) {
            return;
        }
        let mut spill = [0; MAX_CHAIN];
        let spilled = self.core.cache[class].put(chunks, &mut spill);
        if spilled > 0 && self.core.push_shared_chain(class, &spill[..spilled]) {
            self.freed().notify_all();
        }
    }

    /// Returns a chunk the caller holds to its class's free list (what
    /// recovery reclaims goes there, not into the recoverer's cache).
    pub(crate) fn free_shared(&self, class: usize, chunk: u32) {
        self.core.free_shared(class, chunk);
    }

    /// Chunk `chunk`'s main word and group words (none in a region without
    /// group slots).
    pub(crate) fn shares(&self, chunk: u32) -> Result<Shares<'_>> {
        let l = &self.core.layout;
        let bad = || Error::corrupt(Corruption::BadField { field: "chunk index", value: u64::from(chunk) });
        let main = self.metas()?.get(chunk as usize).ok_or_else(bad)?;
        let words: &[AtomicU64] = self.core.seg.get_slice(l.groups, l.total_chunks * l.max_groups)?;
        let at = chunk as usize * l.max_groups;
        let groups = words.get(at..at + l.max_groups).ok_or_else(bad)?;
        Ok(Shares { index: chunk, main, groups })
    }

    /// Where the last release of a SHARED chunk of `class` puts it: the
    /// class's free list, never this process's cache (flaw 5 of
    /// docs/groups-design.md: a cached chunk keeps its tag).
    pub(crate) fn free_to(&self, class: usize) -> Result<FreeTo<'_>> {
        let list = self.free_lists()?.get(class).ok_or_else(|| damaged_list(class))?;
        Ok(FreeTo { list, pool: self.pool()?, range: self.class_range(class), refused: Default::default() })
    }

    /// Ends this process's hold of a SHARED chunk in group slot `g`
    /// (`Shares::release`); the last hold of all puts the chunk on its
    /// class's free list, never in the cache (`Region::free`).
    pub(crate) fn release_shared(&self, class: usize, chunk: u32, g: usize) {
        let (Ok(shares), Ok(free)) = (self.shares(chunk), self.free_to(class)) else { return };
        let me = self.core.seg.token();
        match shares.release(g, me, &free) {
            Ok(true) => self.freed().notify_all(),
            Ok(false) => self.push_refused(&free, class, chunk),
            Err(()) => {}
        }
    }

    /// After a groups step run with `free`: a chunk this caller took as the
    /// last hold whose push the list refused (stopped or damaged) is pushed
    /// again through the path that rebuilds the list. (Told by the step,
    /// not guessed from the chunk's word: another thread of this process,
    /// with the same token, may be the one that took it.)
    pub(crate) fn push_refused(&self, free: &FreeTo<'_>, class: usize, chunk: u32) {
        if free.refused.replace(false) {
            self.free_shared(class, chunk);
        }
    }

    /// Releases a chunk this process received, whatever path it came by:
    /// SHARED, through the group slot whose word this process holds (the
    /// default group's first); else as a single-group message.
    pub(crate) fn release_received(&self, class: usize, chunk: u32) {
        if let Ok(shares) = self.shares(chunk) {
            if is_shared(shares.main.word()) {
                let me = self.token();
                let mine = |g: &usize| {
                    let w = shares.group(*g);
                    w.state() == HELD && w.holder() == me
                };
                if let Some(g) = (0..shares.groups.len()).find(mine) {
                    self.release_shared(class, chunk, g);
                }
                return;
            }
        }
        self.free(class, chunk);
    }

    /// The caller's token in this region.
    pub(crate) fn token(&self) -> u32 {
        self.core.seg.token().raw()
    }
}

/// Gives back the chunks this attachment kept for its next loans, when
/// its last handle goes.
impl Drop for RegionCore {
    fn drop(&mut self) {
        for class in 0..8 {
            // Both halves of the list, whichever thread owned one.
            for chunk in self.cache[class].drain() {
                self.free_shared(class, chunk);
            }
        }
    }
}

impl RegionCore {
    /// Rebuilds, under the control mutex, every free list on which an
    /// operation fails (or only class `only`'s, if it fails; see
    /// `FreeList::rebuild`). Returns the chunks quarantined in the classes
    /// rebuilt. A list that works again by the time the mutex is taken
    /// (another process rebuilt it) is left alone.
    pub(crate) fn rebuild_free_lists_of(&self, only: Option<usize>) -> Result<usize> {
        self.rebuild_lists(only, false)
    }

    /// Rebuilds the lists of the classes whose list reads empty while one
    /// of their chunks reads FREE, the head unchanged across the look (a
    /// FREE chunk is always on its list: a push makes it FREE while its
    /// announcement is the head, a pop takes it before the head moves on):
    /// a head damaged into a valid empty one; and of the classes whose list
    /// misses FREE chunks (`FreeList::intact`: a link damaged into another
    /// valid-looking one). Returns chunks quarantined.
    pub(crate) fn rebuild_lost_lists(&self) -> Result<usize> {
        let (lists, metas) = (self.free_lists()?, self.pool()?.metas);
        let mut quarantined = 0;
        for (c, list) in lists.iter().enumerate() {
            let range = self.layout.class_range(c);
            let lost = match list.empty_head() {
                Some(h) => range.clone().any(|i| metas[i as usize].word().state() == FREE) && list.head_is(h),
                // A link damaged into another valid-looking one (or into
                // 0) cuts chunks off a list that still works: found by a
                // walk over a list that stays the same meanwhile.
                None => !list.intact(&self.pool()?, &range),
            };
            if lost {
                quarantined += self.rebuild_lists(Some(c), true)?;
            }
        }
        Ok(quarantined)
    }

    fn rebuild_lists(&self, only: Option<usize>, force: bool) -> Result<usize> {
        let control: &Mutex = self.seg.get(OFF_CONTROL)?;
        let guard = control.lock(&self.seg, Some(Duration::from_secs(5)))?;
        // A holder that died mid-rebuild left its list stopped: rebuilt below.
        let _ = guard.owner_died();
        let pool = self.pool()?;
        let mut quarantined = 0;
        let mut failed = None;
        for (c, list) in self.free_lists()?.iter().enumerate() {
            let range = self.layout.class_range(c);
            // An operation that failed on a list left it failing here too
            // (a top out of range, an announcement that cannot complete).
            if only.is_some_and(|o| o != c) || (!force && list.help(&pool, &range).is_ok()) {
                continue;
            }
            let Ok(found) = list.rebuild(&pool, &range) else {
                failed = Some(c); // the other classes still get theirs
                continue;
            };
            crate::platform::trace::event!(
                warn,
                "tachyon::corrupt",
                class = c,
                free = found.free,
                quarantined = found.quarantined,
                "rebuilt a damaged free list from the chunks' state words"
            );
            quarantined += found.quarantined;
        }
        drop(guard);
        self.freed().notify_all();
        match failed {
            Some(c) => Err(damaged_list(c)),
            None => Ok(quarantined),
        }
    }

    /// [`rebuild_free_lists_of`](Self::rebuild_free_lists_of) every class
    /// whose list fails.
    pub(crate) fn rebuild_free_lists(&self) -> Result<usize> {
        self.rebuild_free_lists_of(None)
    }

    fn free_lists(&self) -> Result<&[FreeList]> {
        self.seg.get_slice(OFF_FREE_LISTS, 8)
    }

    fn pool(&self) -> Result<Pool<'_>> {
        let metas = self.metas.get();
        Ok(Pool { metas, journal: self.seg.get_slice(OFF_JOURNAL, MAX_SLOTS)?, batches: &self.batches })
    }

    fn freed(&self) -> &WaitCell {
        self.seg.get(OFF_FREED).expect("fixed offset inside every region")
    }

    /// Returns a chunk the caller holds to its class's free list and wakes
    /// whoever waits for one.
    fn free_shared(&self, class: usize, chunk: u32) {
        if self.push_shared(class, chunk) {
            self.freed().notify_all();
        }
    }

    /// Returns a chunk the caller holds to its class's free list, waking
    /// nobody; false if the list was damaged beyond a rebuild.
    fn push_shared(&self, class: usize, chunk: u32) -> bool {
        self.push_shared_chain(class, &[chunk])
    }

    /// Returns chunks the caller holds (1 to `MAX_CHAIN`, all of `class`)
    /// to their class's free list in one push, waking nobody; false if the
    /// list was damaged beyond a rebuild.
    fn push_shared_chain(&self, class: usize, chunks: &[u32]) -> bool {
        let (Ok(lists), Ok(pool)) = (self.free_lists(), self.pool()) else { return false };
        for &chunk in chunks {
            pool.metas[chunk as usize].route.store(0, Ordering::Relaxed);
        }
        // The chunks stay attributed to the caller until the push's
        // announcement, which turns them FREE in the same instant.
        let range = self.layout.class_range(class);
        self.write_chain_hint(class, chunks);
        let mut pushed = lists[class].push_chain(&pool, &range, chunks).is_ok();
        if !pushed && self.rebuild_free_lists_of(Some(class)).is_ok() {
            // A damaged list, rebuilt (the chunks, still ours, are not on it).
            pushed = lists[class].push_chain(&pool, &range, chunks).is_ok();
        }
        pushed
    }

    /// Pointer to the data of chunk `chunk` of class `class`; `None` if
    /// the index is not one of the class's.
    pub(super) fn chunk_at(&self, class: usize, chunk: u32) -> Option<*mut u8> {
        let i = (chunk as usize)
            .checked_sub(self.layout.class_first[class])
            .filter(|&i| i < self.layout.class_count[class])?;
        // SAFETY: `i < class_count[class]` (just checked) and
        // `class_data[class] + class_count[class] * size <= seg.size()`
        // (checked at create/open), so the chunk lies inside the data area.
        Some(unsafe { self.seg.as_ptr().add(self.layout.class_data[class] + i * CLASS_SIZES[class]) })
    }

    /// Writes the chain hint of `chunks` (see [`ChainHint`]) into the
    /// first one's bytes, before they are pushed in this order.
    fn write_chain_hint(&self, class: usize, chunks: &[u32]) {
        let Some((&first, rest)) = chunks.split_first() else { return };
        let k = rest.len().min(ChainHint::room(CLASS_SIZES[class]));
        let Some(p) = self.chunk_at(class, first).filter(|_| k > 0) else { return };
        let p = p.cast::<u32>();
        for (j, word) in std::iter::once(ChainHint::head(first, k)).chain(rest[..k].iter().copied()).enumerate() {
            // SAFETY: the caller holds `first` (LOANED by this process, in
            // its cache: no `Loan` or `Message` of it exists), so nobody
            // reads or writes its bytes meanwhile; `j <= k < size / 4`
            // words from its start lie inside it, and its start is 64-byte
            // aligned (a `u32` store is aligned).
            unsafe { p.add(j).write_volatile(word) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bus::RegionConfig;

    thread_local! {
        /// The chunk this thread's last `prefetch_next_loan` asked for.
        pub(super) static ASKED_AHEAD: std::cell::Cell<Option<(usize, u32)>> = const { std::cell::Cell::new(None) };
    }

    /// The chunk one thread released into the slot goes to that thread's
    /// next loan only: another thread's loan takes from the list (whose
    /// next chunk it asks for ahead), and the released chunk waits for its
    /// releaser, or for the cache to be emptied.
    #[test]
    fn the_slots_chunk_goes_back_to_the_thread_that_released_it() {
        let mut cache = ChunkCache::new(8);
        assert!(cache.put_if_room(&[10, 11]));
        assert!(cache.put_hot(40));
        let other = std::thread::scope(|s| {
            s.spawn(|| {
                assert!(cache.put_if_room(&[20, 21]));
                (cache.take(), cache.put_hot(41))
            })
            .join()
            .unwrap()
        });
        assert_eq!(other, (Some((21, Some(20))), false), "another thread: its list, and the slot stays full");
        assert_eq!(cache.take(), Some((40, None)), "the releaser gets its chunk back");
        assert!(cache.put_hot(42));
        let mut all = cache.drain();
        all.sort_unstable();
        assert_eq!(all, [10, 11, 20, 42], "emptying takes the slot's chunk whoever released it");
    }

    /// A loan that finds its class's free list empty takes a chunk its own
    /// handle keeps for another thread, rather than waiting for one or
    /// failing: the slot's, whoever released it, and, for the thread that
    /// owns the cache's list, the shared half's. Only the owner's half is
    /// out of another thread's reach, as its docs say.
    #[test]
    fn a_loan_on_an_empty_pool_takes_what_the_handle_keeps_for_other_threads() {
        let name = format!("t-stranded-{}", std::process::id());
        let _ = Region::remove(&name);
        let config = RegionConfig::default().size(4 << 20).ring_arena(1 << 16).class_weights([1, 0, 0, 0, 0, 0, 0, 0]);
        let region = Region::create(&name, config).unwrap();
        assert!(region.core.cache[0].capacity > 0, "class 0 is cached");
        let total = region.class_range(0).len();
        let exhausted = |r: &Result<(usize, u32)>| matches!(r, Err(Error::PoolExhausted { class: 0, .. }));
        // This thread takes every chunk (and so owns the cache's list).
        let mut held: Vec<u32> = (0..total).map(|_| region.alloc(64, Some(Duration::ZERO)).unwrap().1).collect();
        assert!(exhausted(&region.alloc(64, Some(Duration::ZERO))), "all {total} chunks are out");
        let in_use = |region: &Region| region.pool_stats().unwrap()[0].chunks - region.pool_stats().unwrap()[0].free;
        assert_eq!(in_use(&region), total);

        // The slot: released by this thread, lent to another one.
        region.free(0, held.pop().unwrap());
        std::thread::scope(|s| {
            s.spawn(|| {
                let got = region.alloc(64, Some(Duration::ZERO)).expect("the slot's chunk");
                assert!(exhausted(&region.alloc(64, Some(Duration::ZERO))), "nothing else kept");
                region.free(got.0, got.1);
            });
        });

        // Released by another thread: the slot and the shared half, both
        // reached by the owner.
        let (a, b) = (held.pop().unwrap(), held.pop().unwrap());
        let other = std::thread::scope(|s| {
            s.spawn(|| {
                // The chunk the first thread left in the slot.
                let got = region.alloc(64, Some(Duration::ZERO)).expect("the slot's chunk").1;
                region.free(0, a);
                region.free(0, b);
                got
            })
            .join()
            .unwrap()
        });
        held.push(other);
        let mut got: Vec<u32> = (0..2).map(|_| region.alloc(64, Some(Duration::ZERO)).unwrap().1).collect();
        got.sort_unstable();
        assert_eq!(got, { let mut ab = [a, b]; ab.sort_unstable(); ab });
        assert!(exhausted(&region.alloc(64, Some(Duration::ZERO))));
        held.append(&mut got);
        assert_eq!(held.len(), total);

        // The owner's half is the owner's alone: another thread gets the
        // slot's chunk and then waits in vain.
        let (c, d) = (held.pop().unwrap(), held.pop().unwrap());
        region.free(0, c);
        region.free(0, d);
        std::thread::scope(|s| {
            s.spawn(|| {
                let got = region.alloc(64, Some(Duration::ZERO)).expect("the slot's chunk").1;
                assert!(got == c || got == d);
                let waited = region.alloc(64, Some(Duration::from_millis(20)));
                assert!(exhausted(&waited), "{waited:?}");
                region.free(0, got);
            });
        });
        for chunk in held {
            region.free(0, chunk);
        }
        assert_eq!(in_use(&region), 0, "every chunk came back");
        drop(region);
        Region::remove(&name).unwrap();
    }

    /// A chunk cache's parts lie on lines of their own (128 bytes apart):
    /// the slot, the owner's half and the shared half, each written at
    /// every message by one of a stream's two threads.
    #[test]
    fn a_caches_parts_lie_on_lines_of_their_own() {
        let cache = ChunkCache::new(8);
        let base = &cache as *const ChunkCache as usize;
        let hot = &*cache.hot as *const HotSlot as usize;
        let (own, shared) = cache.kept.halves_at();
        for (what, at) in [("slot", hot), ("own half", own), ("shared half", shared)] {
            assert_eq!(at % 128, 0, "{what} at {at:#x} (cache at {base:#x})");
        }
        let mut at = [hot, own, shared];
        at.sort_unstable();
        assert!(at[1] - at[0] >= 128 && at[2] - at[1] >= 128, "{at:x?}");
    }

    /// A chunk taken from the list comes with the one the list gives
    /// next; one from the slot, and the last one, with none.
    #[test]
    fn a_take_from_the_list_names_the_next_take() {
        let cache = ChunkCache::new(8);
        assert!(cache.put_if_room(&[10, 11, 12]));
        assert_eq!(cache.take(), Some((12, Some(11))));
        assert!(cache.put_hot(40));
        assert_eq!(cache.take(), Some((40, None)), "the slot's chunk: no hint");
        assert_eq!(cache.take(), Some((11, Some(10))));
        assert_eq!(cache.take(), Some((10, None)), "the list's last");
        assert_eq!(cache.take(), None);
        assert_eq!(ChunkCache::new(0).take(), None, "a cache of no capacity keeps nothing");
    }

    /// A producer's loans of 1 KiB, one after another with nothing
    /// released between them, each ask ahead for the bytes of the chunk
    /// the next loan gets, both when they come from the cache and when a
    /// loan pops a chain from the free list. Small chunks were asked for
    /// with their chain (`prefetch_chain`), so their loans ask nothing.
    #[test]
    fn each_loan_asks_ahead_for_the_chunk_the_next_loan_gets() {
        with_region("ahead", |region| {
            let class = CLASS_SIZES.iter().position(|&s| s == 1024).unwrap();
            let batch = region.pool().unwrap().batch(&region.class_range(class));
            assert!(batch > 2, "pops of several chunks");
            let mut loans = Vec::new();
            let mut asked = Vec::new();
            for _ in 0..3 * batch {
                ASKED_AHEAD.with(|a| a.set(None));
                loans.push(region.alloc(1000, Some(Duration::ZERO)).unwrap());
                asked.push(ASKED_AHEAD.with(|a| a.get()));
            }
            for (i, pair) in loans.windows(2).enumerate() {
                if let Some(hint) = asked[i] {
                    assert_eq!(hint, pair[1], "loan {i} asked for another chunk than the next loan got");
                }
            }
            let with_hint = asked.iter().filter(|a| a.is_some()).count();
            // Every loan but the last of each batch names the next one.
            assert!(with_hint >= 3 * (batch - 1) - 1, "{with_hint} of {} loans asked ahead", asked.len());
            for (c, chunk) in loans {
                region.free(c, chunk);
            }
            ASKED_AHEAD.with(|a| a.set(None));
            region.alloc(64, Some(Duration::ZERO)).unwrap();
            region.alloc(64, Some(Duration::ZERO)).unwrap();
            assert_eq!(ASKED_AHEAD.with(|a| a.get()), None, "64-byte chunks came with their chain's prefetch");
        });
    }

    /// Loans of 256 bytes in a region with no 256-byte chunks fall to the
    /// 1 KiB class: the first pops a batch of it and keeps the rest, the
    /// next ones take what it kept, and the free list is not touched
    /// again until they are used up (before, every such loan popped a
    /// batch and, its class's cache full, pushed as many back: about
    /// 8,000 instructions a loan).
    #[test]
    fn loans_that_fall_to_a_larger_class_take_what_the_first_one_kept() {
        let name = format!("t-fall-{}", std::process::id());
        let _ = Region::remove(&name);
        let config = RegionConfig::default().size(8 << 20).ring_arena(1 << 16).class_weights([0, 0, 1, 0, 0, 0, 0, 0]);
        let region = Region::create(&name, config).unwrap();
        let class = 2;
        let batch = region.pool().unwrap().batch(&region.class_range(class));
        assert!(batch > 2, "pops of several chunks");
        // On the free list (`pool_stats` counts a cached chunk free too).
        let free = |region: &Region| {
            let metas = region.metas().unwrap();
            region.class_range(class).filter(|&i| metas[i as usize].word().state() == FREE).count()
        };
        let total = free(&region);
        let mut loans = vec![region.alloc(256, Some(Duration::ZERO)).unwrap()];
        assert_eq!(loans[0].0, class, "a larger class");
        assert_eq!(free(&region), total - batch, "one pop of a batch");
        for i in 1..batch {
            loans.push(region.alloc(256, Some(Duration::ZERO)).unwrap());
            assert_eq!(free(&region), total - batch, "loan {i} came from the cache");
        }
        loans.push(region.alloc(256, Some(Duration::ZERO)).unwrap());
        assert_eq!(free(&region), total - 2 * batch, "the cache used up: the next pop");
        let mut got: Vec<u32> = loans.iter().map(|&(c, chunk)| {
            assert_eq!(c, class);
            chunk
        }).collect();
        got.sort_unstable();
        got.dedup();
        assert_eq!(got.len(), batch + 1, "no chunk lent twice");
        for (c, chunk) in loans {
            region.free(c, chunk);
        }
        drop(region);
        Region::remove(&name).unwrap();
    }

    #[test]
    fn chain_hints_read_back_and_other_words_are_no_hint() {
        for (size, room) in [(64, 15), (256, 31), (1 << 20, 31)] {
            assert_eq!(ChainHint::room(size), room);
            for k in 1..=room {
                for first in [0, 1, 77, (1 << 24) - 3] {
                    let word = ChainHint::head(first, k);
                    assert_eq!(ChainHint::len(word, first, size), Some(k), "size {size}, k {k}, first {first}");
                    assert_eq!(ChainHint::len(word, first ^ 1, size), None, "another chunk's hint");
                }
            }
            assert_eq!(ChainHint::len(ChainHint::head(5, 0), 5, size), None, "names no chunk");
            assert_eq!(ChainHint::len(ChainHint::head(5, room + 1), 5, size), None, "more than fit");
            for word in [0, u32::MAX, 5, 0x5A00_0005] {
                assert_eq!(ChainHint::len(word, 5, size), None, "{word:#x}");
            }
        }
    }

    /// A pop takes half of what a process keeps of a class, and never more
    /// chunks than the hint in its chain's first chunk can name: 16 of 64
    /// bytes, 32 of the larger classes, fewer of a small class, 1 of a
    /// class too small to keep.
    #[test]
    fn a_pop_takes_no_more_chunks_than_its_hint_names() {
        for size in CLASS_SIZES {
            for chunks in [0, 100, 255, 256, 1000, 2048, 4096, 1 << 20] {
                let (batch, kept) = (pop_batch(chunks, size), cache_capacity(chunks, size));
                assert!(batch <= ChainHint::room(size) + 1 && batch <= MAX_CHAIN, "size {size}, {chunks} chunks");
                assert_eq!(batch, (kept / 2).max(1), "size {size}, {chunks} chunks");
                assert_eq!(kept == 0, chunks < CACHE_MIN_CHUNKS, "size {size}, {chunks} chunks");
            }
        }
        assert_eq!(pop_batch(4096, 64), 16);
        assert_eq!(pop_batch(1 << 20, 64), 16);
        assert_eq!(pop_batch(4096, 1024), 32);
        assert_eq!(pop_batch(1024, 1024), 8);
        assert_eq!(pop_batch(100, 1024), 1);
    }

    /// In a region whose 1 KiB class pops 32 chunks, a pushed chain of 32
    /// names its 31 others in its first chunk, and a pop takes all 32,
    /// LOANED by the popper.
    #[test]
    fn a_pop_of_32_large_chunks_is_named_by_its_hint() {
        let class = CLASS_SIZES.iter().position(|&s| s == 1024).unwrap();
        let mut weights = [0; 8];
        weights[class] = 1;
        let cfg = RegionConfig::default().size(8 << 20).ring_arena(1 << 20).class_weights(weights);
        with_region_of("32", cfg, |region| {
            let (pool, range) = (region.pool().unwrap(), region.class_range(class));
            assert!(range.len() >= 4096, "{} chunks", range.len());
            assert_eq!(pool.batch(&range), 32);
            let me = region.core.seg.token();
            let list = &region.free_lists().unwrap()[class];
            let mut got = [0; MAX_CHAIN];
            assert_eq!(list.pop_chain(&pool, &range, me, &mut got).unwrap(), 32);
            assert!(region.core.push_shared_chain(class, &got));
            let p = region.chunk_ptr(class, got[0]).cast::<u32>();
            // SAFETY: the chunk is FREE on the list and this test is the only
            // user of the region; 32 words of a 1 KiB chunk, 64-byte aligned.
            let w: [u32; 32] = std::array::from_fn(|j| unsafe { p.add(j).read_volatile() });
            assert_eq!(ChainHint::len(w[0], got[0], 1024), Some(31));
            assert_eq!(&w[1..], &got[1..]);
            let mut again = [0; MAX_CHAIN];
            assert_eq!(list.pop_chain(&pool, &range, me, &mut again).unwrap(), 32);
            assert_eq!(again, got, "the chain as it was pushed");
            for &c in &again {
                let word = pool.metas[c as usize].word();
                assert_eq!((word.state(), word.holder()), (LOANED, me.raw()));
            }
            assert!(region.core.push_shared_chain(class, &again));
        });
    }

    /// Runs `f` on a region of its own, removed afterwards.
    fn with_region(tag: &str, f: impl FnOnce(&Region)) {
        with_region_of(tag, RegionConfig::default().size(8 << 20).ring_arena(1 << 20), f)
    }

    /// [`with_region`] with configuration `cfg`.
    fn with_region_of(tag: &str, cfg: RegionConfig, f: impl FnOnce(&Region)) {
        let name = format!("t-chain-hint-{tag}-{}", std::process::id());
        let _ = Region::remove(&name);
        let region = Region::create(&name, cfg).unwrap();
        f(&region);
        drop(region);
        Region::remove(&name).unwrap();
    }

    /// At least `n` chunks of 64 bytes (whole pops), LOANED by this
    /// process (taken past its cache, straight from the free list).
    fn take(region: &Region, n: usize) -> Vec<u32> {
        let (pool, range) = (region.pool().unwrap(), region.class_range(0));
        let me = region.core.seg.token();
        let mut taken = Vec::new();
        while taken.len() < n {
            let mut got = [0; MAX_CHAIN];
            let popped = region.free_lists().unwrap()[0].pop_chain(&pool, &range, me, &mut got).unwrap();
            assert!(popped > 0, "class 0 ran out");
            taken.extend_from_slice(&got[..popped]);
        }
        taken
    }

    fn words(region: &Region, chunk: u32) -> [u32; 16] {
        let p = region.chunk_ptr(0, chunk).cast::<u32>();
        // SAFETY: a chunk of 64 bytes (16 words) this test holds, 64-byte
        // aligned; nobody else writes it.
        std::array::from_fn(|j| unsafe { p.add(j).read_volatile() })
    }

    /// A pushed chain names its other chunks in its first one's bytes; a
    /// push of one chunk leaves its bytes as they were.
    #[test]
    fn a_pushed_chain_names_its_chunks_in_its_first() {
        with_region("names", |region| {
            let chunks = take(region, 6);
            let p = region.chunk_ptr(0, chunks[5]);
            // SAFETY: the chunk is this test's (LOANED by it), 64 bytes.
            unsafe { p.write_bytes(0xEE, 64) };
            assert!(region.core.push_shared_chain(0, &chunks[..5]));
            let w = words(region, chunks[0]);
            assert_eq!(ChainHint::len(w[0], chunks[0], 64), Some(4));
            assert_eq!(&w[1..5], &chunks[1..5]);
            assert!(region.core.push_shared_chain(0, &chunks[5..6]));
            assert_eq!(words(region, chunks[5]), [0xEEEE_EEEE; 16], "one chunk: no hint written");
            assert!(region.core.push_shared_chain(0, &chunks[6..]));
        });
    }

    /// A hint that checks out but lies (indices out of the class, of
    /// chunks in use, the chain's own first) changes nothing a pop does:
    /// it takes the chain the links say, each chunk once, LOANED by the
    /// popper, and leaves the chunks in use alone.
    #[test]
    fn a_lying_chain_hint_costs_nothing() {
        with_region("lies", |region| {
            let (pool, range) = (region.pool().unwrap(), region.class_range(0));
            let me = region.core.seg.token();
            let batch = pool.batch(&range);
            assert!(batch > 1, "a class whose pops take several chunks");
            let chunks = take(region, batch + 8);
            let (chain, held) = chunks.split_at(batch);
            assert!(region.core.push_shared_chain(0, chain));
            let lies = [u32::MAX, range.end, range.start.wrapping_sub(1), held[0], held[1], chain[0], 1 << 23];
            let p = region.chunk_ptr(0, chain[0]).cast::<u32>();
            for (j, word) in std::iter::once(ChainHint::head(chain[0], 15)).chain((0..15).map(|j| lies[j % lies.len()])).enumerate() {
                // SAFETY: `chain[0]` is FREE on the list and this test is
                // the only user of the region; 16 words of a 64-byte chunk.
                unsafe { p.add(j).write_volatile(word) };
            }
            assert_eq!(ChainHint::len(words(region, chain[0])[0], chain[0], 64), Some(15), "a hint that checks out");
            let mut got = [0; MAX_CHAIN];
            let mut prefetched = false;
            let n = region.free_lists().unwrap()[0]
                .pop_chain_then(&pool, &range, me, &mut got, |first| {
                    prefetched = true;
                    region.prefetch_chain(0, first, &pool, &range);
                })
                .unwrap();
            assert!(prefetched);
            assert_eq!(&got[..n], chain, "the chain the links say");
            for &c in chain {
                let w = pool.metas[c as usize].word();
                assert_eq!((w.state(), w.holder()), (LOANED, me.raw()), "chunk {c}");
            }
            for &c in held {
                assert_eq!(pool.metas[c as usize].word().state(), LOANED, "held chunk {c} untouched");
            }
            assert!(region.core.push_shared_chain(0, &chunks));
        });
    }
}
