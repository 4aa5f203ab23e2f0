//! The copies of message bytes between a caller's memory and a segment's
//! (and between two buffers on the RPC paths), around one pathology of the
//! C library's `memcpy`.
//!
//! glibc copies blocks from 2 KiB (SSE2) or 4 KiB (AVX2) up to about the
//! size of a core's L2 cache with `rep movsb`, and on AMD CPUs with fast
//! short `rep movsb` (Zen 3 at least) that instruction runs 10 – 20 times
//! slower when the destination lies a little *after* the source modulo a
//! page: `(dst - src) % 4096` in 1 – 31. Each load then seems to wait for
//! the store just written whose address matches its low twelve bits (4K
//! aliasing).
//! Measured on the AMD EPYC of family 25, model 1, with Debian 12's glibc
//! 2.36: 512,000 bytes in 19 µs, or in 181 – 190 µs with the destination
//! 8 – 24 bytes after the source modulo 4096; 64 KiB in 1.5 µs, or in 23
//! µs. glibc's bug 30994 tracks it; `GLIBC_TUNABLES=glibc.cpu.x86_rep_movsb_threshold=4194304`
//! (vector loops instead, up to 4 MiB) avoids it in a process's own copies.
//!
//! A channel's nodes and chunks lie at fixed offsets in their pages, and a
//! caller's buffers wherever the allocator puts them, so some nodes meet
//! some buffers at such a distance, at every lap: in an `RpcBuffer` with 8
//! nodes of 512,064 bytes, one call in 8 took its response's copy into
//! its node about 300 µs where the others took 30 – 40 µs, and a hybrid
//! requester slept through it (docs/benchmark-history.md, "a memcpy ten
//! times slower on one node in eight").
//!
//! [`copy`], [`extend`] and [`to_vec`] copy as `copy_from_slice`,
//! `extend_from_slice` and `to_vec` do ([`copy_uninit`] as `copy` does,
//! into memory not yet initialized), except for blocks of 2,048 bytes or
//! more whose destination lies 1 – 63 bytes after the source modulo a
//! page: those they copy from the end to the start, 64 bytes at a time, so
//! that every load comes before the stores whose low address bits it
//! shares. That takes as long as `memcpy` takes for a copy without the
//! aliasing (19 µs for the 512,000 bytes above). The library copies
//! message bytes with them; they are public for the copies a caller makes
//! of what it reads in place (a [`Message`](crate::bus::Message), a
//! handler's request, an item lent by `read_with`), which are `memcpy`'s
//! otherwise:
//!
//! ```
//! use tachyon::platform::copy;
//!
//! let lent = vec![7u8; 100_000]; // e.g. a `Message`, or a handler's `msg`
//! let mine = copy::to_vec(&lent);
//! assert_eq!(mine, lent);
//! ```

// Under `--cfg tachyon_loom` none of its callers are built; off x86-64
// every copy is `memcpy`'s, and the distance's look only tested.
#![cfg_attr(any(tachyon_loom, not(target_arch = "x86_64")), allow(dead_code))]

use std::mem::MaybeUninit;

/// The smallest copy that [`copy`] may take apart from `memcpy`: glibc
/// uses `rep movsb` from 2 KiB (SSE2) or 4 KiB (AVX2) on.
pub(crate) const ALIASED_MIN: usize = 2048;

/// Whether a copy of `len` bytes from `src` to `dst` is one that glibc's
/// `rep movsb` runs slowly (see the module's documentation): `len` at least
/// [`ALIASED_MIN`] and `dst` 1 – 63 bytes after `src` modulo a page.
#[inline]
pub(crate) fn aliased(dst: *const u8, src: *const u8, len: usize) -> bool {
    let ahead = (dst as usize).wrapping_sub(src as usize) & 4095;
    len >= ALIASED_MIN && (1..64).contains(&ahead)
}

/// Copies `src` into `dst`, which must be as long (panics if not, as
/// `copy_from_slice` does); see the [module](self) for how.
///
/// ```
/// let mut node = [0u8; 4];
/// tachyon::platform::copy::copy(&mut node, b"tiny");
/// assert_eq!(&node, b"tiny");
/// ```
#[inline]
pub fn copy(dst: &mut [u8], src: &[u8]) {
    assert_eq!(dst.len(), src.len(), "copy: destination and source differ in length");
    // SAFETY: both slices are valid for `src.len()` bytes (checked equal
    // above), a `&[u8]` is initialized, and a `&mut` slice cannot overlap a
    // `&` slice.
    unsafe { copy_raw(src.as_ptr(), dst.as_mut_ptr(), src.len()) }
}

/// Appends `src` to `v`, as `extend_from_slice` does; see the
/// [module](self) for how.
///
/// ```
/// let mut v = b"head:".to_vec();
/// tachyon::platform::copy::extend(&mut v, &[1u8; 4096]);
/// assert_eq!(v.len(), 5 + 4096);
/// ```
#[inline]
pub fn extend(v: &mut Vec<u8>, src: &[u8]) {
    v.reserve(src.len());
    let len = v.len();
    // SAFETY: `reserve` made room for `src.len()` more bytes after the
    // first `len`; `src` (initialized, a `&[u8]`) is not inside `v`'s
    // allocation (it is borrowed while `v` is borrowed mutably); `set_len`
    // covers exactly the bytes written.
    unsafe {
        copy_raw(src.as_ptr(), v.as_mut_ptr().add(len), src.len());
        v.set_len(len + src.len());
    }
}

/// Copies `src` into `dst`, memory not yet initialized (a buffer a
/// foreign allocator handed out, a `Vec`'s spare capacity), which must be
/// as long (panics if not); returns `dst`, now initialized, as bytes. For
/// a buffer that would otherwise be zeroed only to be overwritten; see
/// the [module](self) for how.
///
/// ```
/// let mut v: Vec<u8> = Vec::with_capacity(5);
/// let copied = tachyon::platform::copy::copy_uninit(&mut v.spare_capacity_mut()[..5], b"hello");
/// assert_eq!(copied, b"hello");
/// // SAFETY: the first 5 bytes are initialized (just copied).
/// unsafe { v.set_len(5) };
/// assert_eq!(v, b"hello");
/// ```
#[inline]
pub fn copy_uninit<'a>(dst: &'a mut [MaybeUninit<u8>], src: &[u8]) -> &'a mut [u8] {
    assert_eq!(dst.len(), src.len(), "copy: destination and source differ in length");
    // SAFETY: both slices are valid for `src.len()` bytes (checked equal
    // above), a `&[u8]` is initialized, and a `&mut` slice cannot overlap a
    // `&` slice. After the copy every byte of `dst` is initialized, and
    // `MaybeUninit<u8>` has the layout of `u8`: the same slice, as bytes,
    // for the same lifetime (the borrow of `dst` moves into the result).
    unsafe {
        copy_raw(src.as_ptr(), dst.as_mut_ptr().cast::<u8>(), src.len());
        &mut *(dst as *mut [MaybeUninit<u8>] as *mut [u8])
    }
}

/// A `Vec` holding a copy of `src`, as `to_vec` makes; see the
/// [module](self) for how.
///
/// ```
/// assert_eq!(tachyon::platform::copy::to_vec(b"abc"), b"abc");
/// ```
#[inline]
pub fn to_vec(src: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(src.len());
    extend(&mut v, src);
    v
}

/// Copies `len` bytes from `src` to `dst`, as `ptr::copy_nonoverlapping`.
/// A copy shorter than [`ALIASED_MIN`] costs one compare more than that.
///
/// # Safety
///
/// As for `ptr::copy_nonoverlapping`: `src` readable and `dst` writable for
/// `len` bytes, and the two ranges do not overlap; and the `len` bytes at
/// `src` initialized (the backward copy loads them as 16-byte integers).
#[inline]
pub(crate) unsafe fn copy_raw(src: *const u8, dst: *mut u8, len: usize) {
    #[cfg(target_arch = "x86_64")]
    if len >= ALIASED_MIN {
        // SAFETY: the caller's contract, passed on.
        unsafe { copy_large(src, dst, len) };
        return;
    }
    // SAFETY: the caller's contract.
    unsafe { std::ptr::copy_nonoverlapping(src, dst, len) }
}

/// [`copy_raw`] of [`ALIASED_MIN`] bytes or more: backward where the
/// distance is one that `rep movsb` runs slowly, else by `memcpy`. Out of
/// line, so that a short copy's path stays a compare and a call (the
/// distance's look cost a topic 8 instructions a copy inlined).
///
/// # Safety
///
/// As for [`copy_raw`].
#[cfg(target_arch = "x86_64")]
#[inline(never)]
unsafe fn copy_large(src: *const u8, dst: *mut u8, len: usize) {
    if aliased(dst, src, len) {
        // SAFETY: the caller's contract, passed on.
        unsafe { copy_backward(src, dst, len) }
    } else {
        // SAFETY: the caller's contract.
        unsafe { std::ptr::copy_nonoverlapping(src, dst, len) }
    }
}

/// The copy of an aliased block: 64 bytes at a time, from the end, with
/// SSE2 (every x86-64 CPU has it); the head of fewer than 64 bytes last,
/// by `memcpy`.
///
/// # Safety
///
/// As for [`copy_raw`].
#[cfg(target_arch = "x86_64")]
unsafe fn copy_backward(src: *const u8, dst: *mut u8, len: usize) {
    use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_storeu_si128};
    let mut left = len;
    while left >= 64 {
        left -= 64;
        // SAFETY: `left + 64 <= len`, so the 64 bytes at `left` lie in
        // both ranges, and are initialized at `src` (the caller's
        // contract); unaligned loads and stores need no alignment; SSE2 is
        // part of x86-64. All four loads come
        // before the four stores: the ranges do not overlap, so the order
        // changes nothing but the timing.
        unsafe {
            let s = src.add(left).cast::<__m128i>();
            let d = dst.add(left).cast::<__m128i>();
            let a = _mm_loadu_si128(s);
            let b = _mm_loadu_si128(s.add(1));
            let c = _mm_loadu_si128(s.add(2));
            let e = _mm_loadu_si128(s.add(3));
            _mm_storeu_si128(d, a);
            _mm_storeu_si128(d.add(1), b);
            _mm_storeu_si128(d.add(2), c);
            _mm_storeu_si128(d.add(3), e);
        }
    }
    // SAFETY: the first `left` bytes of both ranges (the caller's contract).
    unsafe { std::ptr::copy_nonoverlapping(src, dst, left) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes that tell every position apart (a repeat of 251, a prime).
    fn pattern(len: usize, seed: u8) -> Vec<u8> {
        (0..len).map(|i| (i % 251) as u8 ^ seed).collect()
    }

    #[test]
    fn the_aliased_window_is_one_to_sixty_three_bytes_ahead_modulo_a_page() {
        let base = 0x10_0000usize as *const u8;
        let at = |off: usize| (0x10_0000usize + off) as *const u8;
        assert!(!aliased(at(0), base, 1 << 20), "the same offset in the page");
        assert!(aliased(at(1), base, 1 << 20));
        assert!(aliased(at(16), base, ALIASED_MIN));
        assert!(aliased(at(63 + 4096 * 7), base, ALIASED_MIN), "pages apart");
        assert!(!aliased(at(64), base, 1 << 20));
        assert!(!aliased(at(4095), base, 1 << 20), "behind the source");
        assert!(!aliased(at(16), base, ALIASED_MIN - 1), "too short for rep movsb");
        // Behind by a little (the source after the destination): fine.
        assert!(!aliased(base, at(16), 1 << 20));
    }

    /// Every length around the 64-byte steps and the threshold, at every
    /// aliased distance and some others: the bytes arrive, in order, and
    /// nothing before or after the destination is touched.
    #[test]
    fn copies_are_exact_at_every_distance_and_length() {
        let lens = [0, 1, 63, 64, 65, 2047, 2048, 2049, 2111, 4096, 4097, 65_536 + 17];
        let max = *lens.iter().max().unwrap();
        let src = pattern(max, 0x5a);
        for ahead in [0usize, 1, 8, 16, 31, 32, 63, 64, 100, 4095] {
            // The destination buffer starts at the source's page offset
            // plus `ahead`, with guard bytes around the copy.
            let mut buf = vec![0xEEu8; max + 8192 + 128];
            let want = (src.as_ptr() as usize + ahead).wrapping_sub(buf.as_ptr() as usize + 64) & 4095;
            let skip = 64 + want;
            for &len in &lens {
                buf.fill(0xEE);
                let dst = &mut buf[skip..skip + len];
                assert_eq!((dst.as_ptr() as usize).wrapping_sub(src.as_ptr() as usize) & 4095, ahead);
                copy(dst, &src[..len]);
                assert_eq!(&buf[skip..skip + len], &src[..len], "{len} bytes, {ahead} ahead");
                assert!(buf[..skip].iter().all(|&b| b == 0xEE), "before: {len} bytes, {ahead} ahead");
                assert!(buf[skip + len..].iter().all(|&b| b == 0xEE), "after: {len} bytes, {ahead} ahead");
            }
        }
    }

    #[test]
    fn extend_and_to_vec_append_and_copy() {
        let src = pattern(70_000, 3);
        let mut v = b"head".to_vec();
        extend(&mut v, &src);
        assert_eq!(&v[..4], b"head");
        assert_eq!(&v[4..], &src[..]);
        assert_eq!(to_vec(&src), src);
        assert!(to_vec(&[]).is_empty());
    }

    /// Into memory not initialized: every length at an aliased distance
    /// and at none, the bytes exact, the spare capacity after them
    /// untouched (its guard bytes, written through `MaybeUninit`).
    #[test]
    fn copy_uninit_fills_memory_not_initialized() {
        let src = pattern(70_000, 9);
        for len in [0, 1, 64, 2048, 4097, 70_000] {
            for ahead in [0usize, 16] {
                let mut v: Vec<u8> = Vec::with_capacity(len + 4096 + 64);
                let spare = v.spare_capacity_mut();
                // A destination `ahead` bytes after the source modulo a page.
                let skip = (src.as_ptr() as usize + ahead).wrapping_sub(spare.as_ptr() as usize) & 4095;
                for b in &mut spare[skip + len..skip + len + 64] {
                    b.write(0xEE);
                }
                let copied = copy_uninit(&mut spare[skip..skip + len], &src[..len]);
                assert_eq!(&copied[..], &src[..len], "{len} bytes, {ahead} ahead");
                // SAFETY: the 64 guard bytes were written above.
                let guard =
                    unsafe { std::slice::from_raw_parts(spare[skip + len..].as_ptr().cast::<u8>(), 64) };
                assert!(guard.iter().all(|&b| b == 0xEE), "after: {len} bytes, {ahead} ahead");
            }
        }
    }

    #[test]
    #[should_panic(expected = "differ in length")]
    fn copy_uninit_refuses_slices_of_different_lengths() {
        copy_uninit(&mut [MaybeUninit::new(0u8); 3], &[1, 2]);
    }

    #[test]
    #[should_panic(expected = "differ in length")]
    fn copy_refuses_slices_of_different_lengths() {
        copy(&mut [0u8; 3], &[1, 2]);
    }
}
