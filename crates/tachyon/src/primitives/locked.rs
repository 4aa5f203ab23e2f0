//! The core that [`SharedArray`](super::SharedArray) and
//! [`SharedBuffer`](super::SharedBuffer) share: a segment whose data area
//! starts with a header holding a robust, counted [`RwLock`] and a closed
//! flag, followed by `len` values of `T` (elements, or bytes) that are
//! touched only under that lock.
//!
//! Invariant. The header's geometry words are written once, before the
//! segment gets its name, and sealed in the segment header; [`Locked::open`]
//! restores them from that copy and lets the caller validate them before
//! anything else is read. The values are touched only while the lock is
//! held: read (shared) to copy out or to lend `&[T]`, write (exclusive),
//! after checking the closed flag, to copy in or to lend `&mut [T]`. Every
//! range is checked against `len` (without overflow) before the lock is
//! even taken.

use crate::error::{Corruption, Error, Result};
use crate::segment::{Kind, Segment, SegmentBuilder, ShmSafe};
use crate::sync::RwLock;
use bytemuck::Pod;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// The default for how long plain operations wait for the lock.
pub(crate) const DEFAULT_LOCK_TIMEOUT: Option<Duration> = Some(Duration::from_millis(100));

/// The values start at a multiple of this (or of their alignment, if
/// larger): a cache line, so the header and the data do not share one.
const DATA_ALIGN: usize = 64;

/// The header at the start of a locked primitive's data area.
pub(super) trait LockedHeader: ShmSafe {
    /// Offsets (from the start of the header) of the geometry words, in
    /// the order they were given to [`SegmentBuilder::geometry`] at create.
    const GEOMETRY: &'static [usize];
    /// What a range error calls one value ("elements", "bytes").
    const UNITS: &'static str;
    /// What a range error calls the whole ("an array", "a buffer").
    const WHOLE: &'static str;

    /// The lock that guards the values.
    fn lock(&self) -> &RwLock;
    /// Non-zero once the primitive was closed.
    fn closed(&self) -> &AtomicU32;
}

/// `(offset of the first value, data area size)` for `len` values of
/// `size` bytes aligned to `align` (a power of two) after a header `H`.
pub(super) fn layout<H>(len: usize, size: usize, align: usize) -> Option<(usize, usize)> {
    let data_off = std::mem::size_of::<H>().checked_next_multiple_of(align.max(DATA_ALIGN))?;
    let total = data_off.checked_add(len.checked_mul(size)?)?;
    // A mapping larger than isize::MAX bytes cannot exist.
    (total <= isize::MAX as usize).then_some((data_off, total))
}

/// A builder for the segment of a locked primitive of `total` bytes, with
/// its geometry words sealed.
pub(super) fn segment_builder(
    name: &str,
    kind: Kind,
    total: usize,
    geometry: [u64; 4],
    max_attachers: Option<usize>,
) -> SegmentBuilder {
    let b = Segment::builder(name).kind(kind).size(total).geometry(geometry);
    match max_attachers {
        Some(n) => b.max_attachers(n),
        None => b,
    }
}

/// [`Error::Incompatible`] naming `field` if a length was `requested` and
/// the existing primitive has another.
pub(super) fn check_len(
    name: &str,
    field: &'static str,
    requested: Option<usize>,
    existing: usize,
) -> Result<()> {
    match requested {
        Some(n) if n != existing => Err(Error::Incompatible {
            name: name.to_owned(),
            field,
            existing: existing.to_string(),
            requested: n.to_string(),
        }),
        _ => Ok(()),
    }
}

/// `Ok` if `start..start + count` lies within `0..len` (without overflow);
/// otherwise [`Error::InvalidArgument`] naming the `units` and the `whole`.
pub(super) fn check_range(start: usize, count: usize, len: usize, units: &str, whole: &str) -> Result<()> {
    match start.checked_add(count) {
        Some(end) if end <= len => Ok(()),
        _ => Err(Error::invalid(format!(
            "{units} {start}..{start}+{count} are out of range for {whole} of {len} {units}"
        ))),
    }
}

/// A segment with a header `H` and `len` values of `T` guarded by the
/// header's lock, opened and checked.
pub(super) struct Locked<H, T> {
    seg: Segment,
    len: usize,
    data_off: usize,
    timeout: Option<Duration>,
    _types: PhantomData<fn() -> (H, T)>,
}

impl<H: LockedHeader, T: Pod> Locked<H, T> {
    /// Restores the geometry words from their sealed copy, then lets
    /// `check` validate the header and return `(len, offset of the first
    /// value)`; `check` returns its own errors for a header that does not
    /// fit the segment. A segment too small for the header is
    /// [`Error::Corrupt`] with `size_field` and the segment's size.
    pub(super) fn open(
        seg: Segment,
        timeout: Option<Duration>,
        size_field: &'static str,
        check: impl FnOnce(&Segment, &H) -> Result<(usize, usize)>,
    ) -> Result<Self> {
        let bad = |field, value| Error::corrupt(Corruption::BadField { field, value });
        // Geometry words damaged since creation: restored from their sealed
        // copy in the segment header.
        seg.restore_geometry(H::GEOMETRY)?;
        // Checks that the header is inside the data area and aligned, which
        // the unchecked access in `header` relies on.
        let header = seg.get::<H>(0).map_err(|_| bad(size_field, seg.size() as u64))?;
        let (len, data_off) = check(&seg, header)?;
        // What `data` and the slices lent under the lock rely on, whatever
        // `check` accepted: the values lie after the header, end at the end
        // of the data area, and are aligned for `T`.
        let end = len.checked_mul(std::mem::size_of::<T>()).and_then(|b| data_off.checked_add(b));
        let aligned = (seg.as_ptr() as usize).wrapping_add(data_off) % std::mem::align_of::<T>() == 0;
        if data_off < std::mem::size_of::<H>() || end != Some(seg.size()) || !aligned {
            return Err(bad("data area offset", data_off as u64));
        }
        Ok(Locked { seg, len, data_off, timeout, _types: PhantomData })
    }

    /// The header.
    pub(super) fn header(&self) -> &H {
        // SAFETY: `open` checked (through `Segment::get`) that an `H` at
        // offset 0 lies inside the data area and is aligned; `H: ShmSafe`
        // is valid for any bits and only mutated through atomics; the
        // mapping lives as long as `self.seg`, hence as `&self`.
        unsafe { &*self.seg.as_ptr().cast::<H>() }
    }

    pub(super) fn segment(&self) -> &Segment {
        &self.seg
    }

    /// Number of values.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// How long plain operations wait for the lock (`None`: no limit).
    pub(super) fn timeout(&self) -> Option<Duration> {
        self.timeout
    }

    pub(super) fn set_timeout(&mut self, timeout: Option<Duration>) {
        self.timeout = timeout;
    }

    pub(super) fn lock(&self) -> &RwLock {
        self.header().lock()
    }

    /// Makes the values read-only for every process, for good.
    pub(super) fn close(&self) {
        self.header().closed().store(1, Ordering::SeqCst);
    }

    /// Whether [`close`](Self::close) was called (by any process).
    pub(super) fn is_closed(&self) -> bool {
        self.header().closed().load(Ordering::SeqCst) != 0
    }

    /// `Err(Closed)` once closed; called with the write lock held.
    pub(super) fn check_open(&self) -> Result<()> {
        if self.is_closed() {
            return Err(Error::Closed);
        }
        Ok(())
    }

    /// The first value.
    pub(super) fn data(&self) -> *mut T {
        // SAFETY: `open` checked `data_off + len * size_of::<T>() ==
        // seg.size()`, so the offset is inside (or, for a zero-sized `T`, at
        // the end of) the data area, and that the result is aligned for `T`.
        unsafe { self.seg.as_ptr().add(self.data_off).cast::<T>() }
    }

    /// `Ok` if values `start..start + count` exist.
    pub(super) fn check_range(&self, start: usize, count: usize) -> Result<()> {
        check_range(start, count, self.len, H::UNITS, H::WHOLE)
    }

    /// Copies `out.len()` values from `start` (checked) out under the read
    /// lock, waiting at most the handle's timeout.
    pub(super) fn read(&self, start: usize, out: &mut [T]) -> Result<()> {
        self.check_range(start, out.len())?;
        let _g = self.lock().read(&self.seg, self.timeout)?;
        // Copied as bytes, around a `memcpy` that is slow at some distances
        // (`platform::copy`).
        // SAFETY: `start..start + out.len()` is inside the values (checked
        // above), which are inside the mapping and aligned (see `data`);
        // `out` is private memory distinct from the mapping, and as many
        // bytes long; `T: Pod` has no padding, so every byte of the values
        // is initialized; the read lock keeps tachyon writers out. No
        // reference to shared memory is formed.
        unsafe {
            crate::platform::copy::copy_raw(
                self.data().add(start).cast::<u8>(),
                out.as_mut_ptr().cast::<u8>(),
                std::mem::size_of_val(out),
            )
        };
        Ok(())
    }

    /// Copies `values` in at `start` (checked) under the write lock,
    /// waiting at most the handle's timeout; [`Error::Closed`] once closed.
    pub(super) fn write(&self, start: usize, values: &[T]) -> Result<()> {
        self.check_range(start, values.len())?;
        let _g = self.lock().write(&self.seg, self.timeout)?;
        self.check_open()?;
        // SAFETY: as in `read`, with the roles swapped (`values`, of a
        // `T: Pod`, initialized); the write lock keeps every other tachyon
        // reader and writer out.
        unsafe {
            crate::platform::copy::copy_raw(
                values.as_ptr().cast::<u8>(),
                self.data().add(start).cast::<u8>(),
                std::mem::size_of_val(values),
            )
        };
        Ok(())
    }

    /// `f` over values `start..start + len` (checked) under the read lock,
    /// waiting at most the handle's timeout.
    pub(super) fn with_range<R>(&self, start: usize, len: usize, f: impl FnOnce(&[T]) -> R) -> Result<R> {
        self.check_range(start, len)?;
        let _g = self.lock().read(&self.seg, self.timeout)?;
        // SAFETY: the range is inside the values (checked above), aligned
        // and valid for any bits (`T: Pod`); the read lock keeps tachyon
        // writers out until `_g` drops, after `f` returned, and `f` cannot
        // keep the slice (its lifetime is the call's).
        let slice = unsafe { std::slice::from_raw_parts(self.data().add(start), len) };
        Ok(f(slice))
    }

    /// `f` over values `start..start + len` (checked) under the write lock,
    /// waiting at most the handle's timeout; [`Error::Closed`] once closed.
    /// If `f` panics the lock is released and what `f` wrote stays.
    pub(super) fn with_range_mut<R>(
        &self,
        start: usize,
        len: usize,
        f: impl FnOnce(&mut [T]) -> R,
    ) -> Result<R> {
        self.check_range(start, len)?;
        let _g = self.lock().write(&self.seg, self.timeout)?;
        self.check_open()?;
        // SAFETY: as in `with_range`; the write lock excludes every other
        // tachyon reader and writer (threads of one attachment exclude each
        // other too), and the values do not overlap the header (checked in
        // `open`), so the slice is unaliased while `f` runs.
        let slice = unsafe { std::slice::from_raw_parts_mut(self.data().add(start), len) };
        Ok(f(slice))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_aligns_and_checks_overflow() {
        type Header = [u64; 100]; // 800 bytes
        let (off, total) = layout::<Header>(3, 8, 8).unwrap();
        assert_eq!(off, 832);
        assert_eq!(total, off + 24);
        assert_eq!(layout::<Header>(1, 1, 4096).unwrap().0, 4096);
        assert!(layout::<Header>(usize::MAX, 2, 1).is_none());
        assert!(layout::<Header>(usize::MAX / 2, 1, 1).is_none());
        assert!(layout::<Header>(isize::MAX as usize, 1, 1).is_none());
    }

    #[test]
    fn ranges_are_checked_without_overflow() {
        assert!(check_range(2, 3, 5, "bytes", "a buffer").is_ok());
        assert!(check_range(5, 0, 5, "bytes", "a buffer").is_ok());
        let err = check_range(3, 3, 5, "bytes", "a buffer").unwrap_err().to_string();
        assert!(err.contains("bytes 3..3+3 are out of range for a buffer of 5 bytes"), "{err}");
        assert!(check_range(usize::MAX, 2, 5, "elements", "an array").is_err());
    }
}
