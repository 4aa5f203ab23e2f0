//! `SharedArray<T>`: a fixed-length array of plain-old-data values in a
//! named segment, shared by any number of processes and guarded by a
//! robust, counted reader-writer lock.
//!
//! Invariant. The array header (length, element size and alignment, type
//! fingerprint and name) is written once, before the segment gets its name,
//! and never changes afterwards. The elements are touched only while the
//! segment's [`RwLock`] is held: read (shared) to copy out or to lend `&[T]`,
//! write (exclusive) to copy in or to lend `&mut [T]`. Hence a slice lent
//! by a guard is never changed by another tachyon handle while the guard
//! lives. Everything read from the header is validated against the segment
//! size and the caller's `T` before any element is touched. The lock, the
//! closed flag and the locked copies are the core it shares with
//! `SharedBuffer` ([`locked`](super::locked)).

use super::locked::{self, Locked, LockedHeader, DEFAULT_LOCK_TIMEOUT};
use crate::error::{Corruption, Error, Result};
use crate::segment::{Kind, Segment, ShmSafe};
use crate::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};
use bytemuck::Pod;
use std::fmt;
use std::iter::FusedIterator;
use std::marker::PhantomData;
use std::mem::{offset_of, size_of};
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering::Relaxed};
use std::time::Duration;

/// How many bytes of the element type's name the header keeps.
const TYPE_NAME_MAX: usize = 216;

/// The array header at the start of the data area; the elements follow
/// at the next multiple of 64 (or of their alignment, if larger).
#[repr(C)]
struct ArrayHeader {
    /// Number of elements (sealed geometry word 0).
    len: AtomicU64,
    /// `size_of` the element type (geometry word 1).
    elem_size: AtomicU64,
    /// `align_of` the element type (geometry word 2).
    elem_align: AtomicU64,
    /// FNV-1a of the type's name, size and alignment (geometry word 3).
    fingerprint: AtomicU64,
    /// Length of the type's name, of which the first [`TYPE_NAME_MAX`]
    /// bytes are kept.
    type_name_len: AtomicU64,
    type_name: [AtomicU8; TYPE_NAME_MAX],
    lock: RwLock,
    _pad: AtomicU32,
    /// Non-zero once [`SharedArray::close`] was called: right after the
    /// lock, before the elements.
    closed: AtomicU32,
    _tail: AtomicU32,
}

// The layout in shared memory: these offsets are what every process that
// maps an array expects.
const _: () = assert!(offset_of!(ArrayHeader, len) == 0);
const _: () = assert!(offset_of!(ArrayHeader, elem_size) == 8);
const _: () = assert!(offset_of!(ArrayHeader, elem_align) == 16);
const _: () = assert!(offset_of!(ArrayHeader, fingerprint) == 24);
const _: () = assert!(offset_of!(ArrayHeader, type_name_len) == 32);
const _: () = assert!(offset_of!(ArrayHeader, type_name) == 40);
const _: () = assert!(offset_of!(ArrayHeader, lock) == 256);
const _: () = assert!(offset_of!(ArrayHeader, closed) == 792);
const _: () = assert!(size_of::<ArrayHeader>() == 800);
// The elements start at 832 (or a larger multiple of their alignment).
const _: () = assert!(size_of::<ArrayHeader>().next_multiple_of(64) == 832);

// SAFETY: `repr(C)` of atomics and an `RwLock` (itself `ShmSafe`), with no
// padding (the offsets and size are asserted above): any bits are valid and
// all mutation is atomic.
unsafe impl ShmSafe for ArrayHeader {}

impl LockedHeader for ArrayHeader {
    const GEOMETRY: &'static [usize] = &[
        offset_of!(ArrayHeader, len),
        offset_of!(ArrayHeader, elem_size),
        offset_of!(ArrayHeader, elem_align),
        offset_of!(ArrayHeader, fingerprint),
    ];
    const UNITS: &'static str = "elements";
    const WHOLE: &'static str = "an array";

    fn lock(&self) -> &RwLock {
        &self.lock
    }

    fn closed(&self) -> &AtomicU32 {
        &self.closed
    }
}

/// The largest element alignment supported: the data area is only known
/// to be page-aligned.
pub(crate) const MAX_ELEM_ALIGN: usize = 4096;

/// `(offset of the first element, data area size)` of an array of `len`
/// elements of `size` bytes aligned to `align` (a power of two).
fn layout(len: usize, size: usize, align: usize) -> Option<(usize, usize)> {
    locked::layout::<ArrayHeader>(len, size, align)
}

/// What the header records about the element type.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ElemType {
    size: u64,
    align: u64,
    fingerprint: u64,
    name: String,
}

impl ElemType {
    fn of<T>() -> ElemType {
        let name = std::any::type_name::<T>();
        let size = std::mem::size_of::<T>() as u64;
        let align = std::mem::align_of::<T>() as u64;
        let mut h = fnv1a(0xcbf2_9ce4_8422_2325, name.as_bytes());
        h = fnv1a(h, &size.to_le_bytes());
        h = fnv1a(h, &align.to_le_bytes());
        ElemType { size, align, fingerprint: h, name: name.to_owned() }
    }
}

impl fmt::Display for ElemType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "elements of type `{}` ({} bytes, align {})", self.name, self.size, self.align)
    }
}

/// 64-bit FNV-1a, continued from `h`.
fn fnv1a(mut h: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Writes the header; runs before the segment is visible to anyone. The
/// lock (all zeros: unlocked) and the elements (all zeros: valid for any
/// `Pod`) are already zero-filled.
fn init<T: Pod>(seg: &Segment, len: usize) -> Result<()> {
    let ty = ElemType::of::<T>();
    let h = seg.get::<ArrayHeader>(0)?;
    h.len.store(len as u64, Relaxed);
    h.elem_size.store(ty.size, Relaxed);
    h.elem_align.store(ty.align, Relaxed);
    h.fingerprint.store(ty.fingerprint, Relaxed);
    h.type_name_len.store(ty.name.len() as u64, Relaxed);
    for (a, &b) in h.type_name.iter().zip(ty.name.as_bytes()) {
        a.store(b, Relaxed);
    }
    Ok(())
}

/// The element type recorded in the header (untrusted: the name length is
/// clamped, the name decoded lossily).
fn recorded_type(h: &ArrayHeader) -> ElemType {
    let name_len = h.type_name_len.load(Relaxed);
    let kept = usize::try_from(name_len).unwrap_or(usize::MAX).min(TYPE_NAME_MAX);
    let bytes: Vec<u8> = h.type_name[..kept].iter().map(|b| b.load(Relaxed)).collect();
    let mut name = String::from_utf8_lossy(&bytes).into_owned();
    if name_len > TYPE_NAME_MAX as u64 {
        name.push('…');
    }
    ElemType {
        size: h.elem_size.load(Relaxed),
        align: h.elem_align.load(Relaxed),
        fingerprint: h.fingerprint.load(Relaxed),
        name,
    }
}

/// A fixed-length array of `T` shared between processes.
///
/// `T` is any [`Pod`] type (integers, floats, arrays of them,
/// `#[derive(Pod, Zeroable)] #[repr(C)]` structs): one layout in every
/// process, valid for any bits, copied in and out byte for byte.
///
/// * **Typed**: the segment records the element size, alignment and a
///   fingerprint of the type's name. Opening it with another element type
///   is [`Error::TypeMismatch`] naming both types, never garbage. (See
///   [`SharedArrayBuilder::check_type_name`] for when names differ but the
///   types are the same.)
/// * **Locked**: a robust, counted, writer-preferring [`RwLock`] in the
///   segment guards the elements. [`get`](Self::get), [`set`](Self::set),
///   [`read`](Self::read) and [`write`](Self::write) take it for the copy,
///   waiting at most the handle's [lock timeout](Self::set_lock_timeout)
///   (default 100 ms) and then failing with [`Error::Timeout`]. This is
///   the one exception to the library's per-call timeouts: these short
///   copies use the timeout configured on the handle
///   ([`SharedArrayBuilder::lock_timeout`]); for a per-call timeout, use
///   [`read_lock_timeout`](Self::read_lock_timeout) /
///   [`write_lock_timeout`](Self::write_lock_timeout).
///   [`read_lock`](Self::read_lock) and [`write_lock`](Self::write_lock)
///   lend the whole array as `&[T]` / `&mut [T]` for the guard's life.
/// * **Robust**: a process that dies holding the write lock does not wedge
///   the array: the next locker takes over within about 50 ms and its
///   guard's `owner_died()` says the data may be half-updated. Plain
///   operations do not report this (a [`set`](Self::set) or
///   [`write`](Self::write) releases normally and so clears it): where a
///   torn update matters, use the guards.
/// * **Checked**: an index or range outside the array is
///   [`Error::InvalidArgument`]; nothing is ever written outside it.
///
/// The elements start zeroed. The segment disappears when the last handle
/// (in any process) is dropped.
///
/// ```
/// use tachyon::SharedArray;
/// # let name = format!("doc-array-{}", std::process::id());
/// let producer = SharedArray::<i32>::create(&name, 10)?;
/// let consumer = SharedArray::<i32>::open(&name)?; // usually in another process
/// producer.set(0, 123)?;
/// producer.write(8, &[455, 456])?;
/// assert_eq!(consumer.get(0)?, 123);
/// assert_eq!(consumer.get(9)?, 456);
/// assert!(consumer.get(10).is_err()); // out of range
///
/// // Several changes at once, invisible to readers until the guard drops:
/// let mut all = producer.write_lock()?;
/// all.iter_mut().for_each(|x| *x += 1);
/// drop(all);
/// assert_eq!(consumer.read_lock()?.iter().sum::<i32>(), 124 + 456 + 457 + 7);
/// # Ok::<(), tachyon::Error>(())
/// ```
pub struct SharedArray<T: Pod> {
    core: Locked<ArrayHeader, T>,
}

/// Options for creating or opening a [`SharedArray`].
///
/// ```
/// use std::time::Duration;
/// use tachyon::SharedArray;
/// # let name = format!("doc-array-builder-{}", std::process::id());
/// let a = SharedArray::<u64>::builder(&name)
///     .len(1000)
///     .lock_timeout(Some(Duration::from_millis(10)))
///     .create()?;
/// let b = SharedArray::<u64>::builder(&name).create_or_open()?; // opens
/// assert_eq!(b.len(), 1000);
/// # drop(a);
/// # Ok::<(), tachyon::Error>(())
/// ```
pub struct SharedArrayBuilder<T: Pod> {
    name: String,
    len: usize,
    /// Whether the caller set `len`.
    len_set: bool,
    timeout: Option<Duration>,
    check_type_name: bool,
    max_attachers: Option<usize>,
    _elem: PhantomData<fn() -> T>,
}

impl<T: Pod> Clone for SharedArrayBuilder<T> {
    fn clone(&self) -> Self {
        SharedArrayBuilder { name: self.name.clone(), _elem: PhantomData, ..*self }
    }
}

impl<T: Pod> fmt::Debug for SharedArrayBuilder<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedArrayBuilder")
            .field("name", &self.name)
            .field("elem", &std::any::type_name::<T>())
            .field("len", &self.len)
            .field("lock_timeout", &self.timeout)
            .field("check_type_name", &self.check_type_name)
            .field("max_attachers", &self.max_attachers)
            .finish()
    }
}

impl<T: Pod> SharedArrayBuilder<T> {
    /// Number of elements (at least 1, default 1). Fixed at create; on
    /// [`open`](Self::open) and [`create_or_open`](Self::create_or_open),
    /// a length set here must be the existing array's
    /// ([`Error::Incompatible`]).
    pub fn len(mut self, len: usize) -> Self {
        self.len = len;
        self.len_set = true;
        self
    }

    /// How long this handle's plain operations ([`get`](SharedArray::get),
    /// [`set`](SharedArray::set), [`read`](SharedArray::read),
    /// [`write`](SharedArray::write), [`to_vec`](SharedArray::to_vec),
    /// [`iter`](SharedArray::iter)) wait for the lock before
    /// [`Error::Timeout`]; `None`: no limit. Default 100 ms.
    pub fn lock_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.timeout = timeout;
        self
    }

    /// Whether [`open`](Self::open) compares the element type's name
    /// fingerprint as well as its size and alignment (default `true`).
    ///
    /// The name comes from [`std::any::type_name`], which includes the
    /// module path and is not guaranteed stable across compiler versions.
    /// Two programs that each define their own `#[repr(C)] struct Point`,
    /// or that were built by different compilers, may disagree on it while
    /// agreeing on the layout: turn the check off for them (size and
    /// alignment are still checked).
    pub fn check_type_name(mut self, check: bool) -> Self {
        self.check_type_name = check;
        self
    }

    /// How many handles may be attached at once across all processes
    /// (create only; 1 to 128, default 128).
    pub fn max_attachers(mut self, n: usize) -> Self {
        self.max_attachers = Some(n);
        self
    }

    /// Creates the array, zero-filled.
    ///
    /// Errors: [`Error::AlreadyExists`] if a live segment has the name;
    /// [`Error::InvalidArgument`] if the length is 0, the array would not
    /// fit in memory, or `T` is aligned to more than 4096 bytes; the
    /// segment errors of [`Segment::create`].
    pub fn create(&self) -> Result<SharedArray<T>> {
        let seg = self.segment_builder()?.create_with(|seg| init::<T>(seg, self.len))?;
        SharedArray::from_segment(seg, self)
    }

    /// Opens an existing array, learning its length from it.
    ///
    /// Errors: [`Error::NotFound`]; [`Error::KindMismatch`] if the segment
    /// is not an array; [`Error::TypeMismatch`] if it holds another
    /// element type; [`Error::Corrupt`] if its header does not fit its size.
    pub fn open(&self) -> Result<SharedArray<T>> {
        let seg = Segment::builder(&self.name).kind(Kind::ARRAY).open()?;
        self.check_len(SharedArray::from_segment(seg, self)?)
    }

    /// Opens the array, or creates it with this length if there is none.
    ///
    /// An existing array must match what this builder asks for, or the
    /// error is [`Error::Incompatible`] naming the field: `element type`
    /// (another element type; [`open`](Self::open) calls this
    /// [`Error::TypeMismatch`]), or `len` if a length was set and differs.
    /// Without [`len`](Self::len), the existing array's length is taken.
    ///
    /// ```
    /// use tachyon::{Error, SharedArray};
    /// # let name = format!("doc-array-compat-{}", std::process::id());
    /// let a = SharedArray::<u32>::builder(&name).len(8).create_or_open()?;
    /// let b = SharedArray::<u32>::builder(&name).create_or_open()?; // any length
    /// assert_eq!(b.len(), 8);
    /// let err = SharedArray::<u32>::builder(&name).len(9).create_or_open().unwrap_err();
    /// assert!(matches!(err, Error::Incompatible { field: "len", .. }));
    /// let err = SharedArray::<u64>::builder(&name).create_or_open().unwrap_err();
    /// assert!(matches!(err, Error::Incompatible { field: "element type", .. }));
    /// # drop((a, b));
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn create_or_open(&self) -> Result<SharedArray<T>> {
        let seg = self.segment_builder()?.create_or_open_with(|seg| init::<T>(seg, self.len))?;
        match SharedArray::from_segment(seg, self) {
            Err(Error::TypeMismatch { found, expected }) => Err(Error::Incompatible {
                name: self.name.clone(),
                field: "element type",
                existing: found,
                requested: expected,
            }),
            other => self.check_len(other?),
        }
    }

    /// The array if its length is the one set on this builder (if any).
    fn check_len(&self, array: SharedArray<T>) -> Result<SharedArray<T>> {
        locked::check_len(&self.name, "len", self.len_set.then_some(self.len), array.len())?;
        Ok(array)
    }

    fn segment_builder(&self) -> Result<crate::segment::SegmentBuilder> {
        let (size, align) = (std::mem::size_of::<T>(), std::mem::align_of::<T>());
        if self.len == 0 {
            return Err(Error::invalid("a SharedArray needs at least 1 element, not 0"));
        }
        if align > MAX_ELEM_ALIGN {
            return Err(Error::invalid(format!(
                "{} is aligned to {align} bytes; SharedArray supports at most {MAX_ELEM_ALIGN}",
                std::any::type_name::<T>()
            )));
        }
        let (_, total) = layout(self.len, size, align).ok_or_else(|| {
            Error::invalid(format!("{} elements of {size} bytes do not fit in memory", self.len))
        })?;
        let ty = ElemType::of::<T>();
        let geometry = [self.len as u64, ty.size, ty.align, ty.fingerprint];
        Ok(locked::segment_builder(&self.name, Kind::ARRAY, total, geometry, self.max_attachers))
    }
}

impl<T: Pod> SharedArray<T> {
    /// A builder, for the lock timeout, the type check, attach slots or
    /// `create_or_open`.
    pub fn builder(name: &str) -> SharedArrayBuilder<T> {
        SharedArrayBuilder {
            name: name.to_owned(),
            len: 1,
            len_set: false,
            timeout: DEFAULT_LOCK_TIMEOUT,
            check_type_name: true,
            max_attachers: None,
            _elem: PhantomData,
        }
    }

    /// Creates an array of `len` zeroed elements.
    ///
    /// Errors: [`Error::AlreadyExists`] if a live segment has the name;
    /// [`Error::InvalidArgument`] if `len` is 0 or too large; see
    /// [`SharedArrayBuilder::create`].
    pub fn create(name: &str, len: usize) -> Result<SharedArray<T>> {
        Self::builder(name).len(len).create()
    }

    /// Opens an existing array; its length comes from the segment.
    ///
    /// Errors: [`Error::NotFound`]; [`Error::TypeMismatch`] if it was created
    /// with another element type; see [`SharedArrayBuilder::open`].
    pub fn open(name: &str) -> Result<SharedArray<T>> {
        Self::builder(name).open()
    }

    fn from_segment(seg: Segment, opts: &SharedArrayBuilder<T>) -> Result<Self> {
        let core = Locked::open(seg, opts.timeout, "array size", |seg, h: &ArrayHeader| {
            let want = ElemType::of::<T>();
            let found = recorded_type(h);
            if found.size != want.size
                || found.align != want.align
                || (opts.check_type_name && found.fingerprint != want.fingerprint)
            {
                return Err(Error::TypeMismatch { found: found.to_string(), expected: want.to_string() });
            }
            let bad = |field, value| Error::corrupt(Corruption::BadField { field, value });
            let raw_len = h.len.load(Relaxed);
            let len = usize::try_from(raw_len).map_err(|_| bad("array length", raw_len))?;
            if len == 0 {
                return Err(bad("array length", raw_len));
            }
            let (size, align) = (std::mem::size_of::<T>(), std::mem::align_of::<T>());
            let (data_off, total) = layout(len, size, align).ok_or_else(|| bad("array length", raw_len))?;
            if total != seg.size() {
                return Err(bad("array size", seg.size() as u64));
            }
            Ok((len, data_off))
        })?;
        Ok(SharedArray { core })
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.core.len()
    }

    /// Always `false`: an array has at least one element.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The name as given at create/open.
    pub fn name(&self) -> &str {
        self.core.segment().name()
    }

    /// The segment behind the array.
    pub fn segment(&self) -> &Segment {
        self.core.segment()
    }

    /// How long plain operations wait for the lock (`None`: no limit).
    pub fn lock_timeout(&self) -> Option<Duration> {
        self.core.timeout()
    }

    /// Sets how long this handle's plain operations ([`get`](Self::get),
    /// [`set`](Self::set), [`read`](Self::read), [`write`](Self::write),
    /// [`to_vec`](Self::to_vec), [`iter`](Self::iter)) wait for the lock
    /// before [`Error::Timeout`]; `None`: no limit.
    pub fn set_lock_timeout(&mut self, timeout: Option<Duration>) {
        self.core.set_timeout(timeout);
    }

    /// Makes the array read-only for every process, for good: from now on
    /// [`set`](Self::set), [`write`](Self::write),
    /// [`with_slice_mut`](Self::with_slice_mut) and the write guards fail
    /// with [`Error::Closed`]; reads go on (the last values stay
    /// readable). Other processes see it through
    /// [`is_closed`](Self::is_closed) or the `Closed` of their writes. A
    /// writer that holds the lock already when `close` is called finishes.
    /// This is how a writer says "final values, I am done" (the .NET
    /// `Close()` / `ShuttingDown`); dropping a handle does not close.
    ///
    /// ```
    /// use tachyon::{Error, SharedArray};
    /// # let name = format!("doc-array-close-{}", std::process::id());
    /// let writer = SharedArray::<u32>::create(&name, 4)?;
    /// let reader = SharedArray::<u32>::open(&name)?; // usually another process
    /// writer.set(0, 7)?;
    /// writer.close();
    /// assert!(reader.is_closed());
    /// assert_eq!(reader.get(0)?, 7);
    /// assert!(matches!(reader.set(0, 8), Err(Error::Closed)));
    /// assert!(matches!(reader.write_lock(), Err(Error::Closed)));
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn close(&self) {
        self.core.close();
    }

    /// Whether [`close`](Self::close) was called (by any process).
    ///
    /// ```
    /// # use tachyon::SharedArray;
    /// # let name = format!("doc-array-is-closed-{}", std::process::id());
    /// let a = SharedArray::<u8>::create(&name, 1)?;
    /// assert!(!a.is_closed());
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn is_closed(&self) -> bool {
        self.core.is_closed()
    }

    fn lock(&self) -> &RwLock {
        self.core.lock()
    }

    fn check_index(&self, i: usize) -> Result<()> {
        if i < self.len() {
            Ok(())
        } else {
            Err(Error::invalid(format!("index {i} is out of range for an array of {} elements", self.len())))
        }
    }

    /// Element `i`, copied out under a read lock.
    ///
    /// Errors: [`Error::InvalidArgument`] if `i >= len()`;
    /// [`Error::Timeout`] if a writer holds the lock longer than the
    /// [lock timeout](Self::set_lock_timeout).
    pub fn get(&self, i: usize) -> Result<T> {
        self.check_index(i)?;
        let mut v = [T::zeroed()];
        self.core.read(i, &mut v)?;
        Ok(v[0])
    }

    /// Sets element `i` under the write lock.
    ///
    /// Errors: [`Error::InvalidArgument`] if `i >= len()`;
    /// [`Error::Timeout`] if readers or a writer hold the lock longer than
    /// the [lock timeout](Self::set_lock_timeout).
    pub fn set(&self, i: usize, value: T) -> Result<()> {
        self.check_index(i)?;
        self.core.write(i, &[value])
    }

    /// Copies `out.len()` elements starting at `start` into `out`, all
    /// under one read lock (a consistent snapshot of that range).
    ///
    /// Errors: [`Error::InvalidArgument`] if the range does not fit;
    /// [`Error::Timeout`] as for [`get`](Self::get).
    pub fn read(&self, start: usize, out: &mut [T]) -> Result<()> {
        self.core.read(start, out)
    }

    /// Copies `values` into the array starting at `start`, all under one
    /// write lock (readers see all of it or none of it).
    ///
    /// Errors: [`Error::InvalidArgument`] if the range does not fit
    /// (nothing is written); [`Error::Timeout`] as for [`set`](Self::set).
    pub fn write(&self, start: usize, values: &[T]) -> Result<()> {
        self.core.write(start, values)
    }

    /// A copy of the whole array, taken under one read lock.
    ///
    /// Errors: [`Error::Timeout`] as for [`get`](Self::get).
    pub fn to_vec(&self) -> Result<Vec<T>> {
        self.with_slice(<[T]>::to_vec)
    }

    /// An iterator over copies of the elements.
    ///
    /// It copies the array out in chunks of up to 4 KiB, each under its own
    /// read lock (waiting at most the lock timeout), and yields
    /// `Ok(element)`. Each chunk is consistent, the whole is not: writers
    /// may get in between chunks. For one consistent snapshot use
    /// [`to_vec`](Self::to_vec), or iterate a [`read_lock`](Self::read_lock)
    /// guard's slice. If taking the lock fails, the iterator yields that
    /// `Err` once and then ends.
    ///
    /// ```
    /// # use tachyon::SharedArray;
    /// # let name = format!("doc-array-iter-{}", std::process::id());
    /// let a = SharedArray::<u16>::create(&name, 3)?;
    /// a.write(0, &[1, 2, 3])?;
    /// let v: Vec<u16> = a.iter().collect::<Result<_, _>>()?;
    /// assert_eq!(v, [1, 2, 3]);
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn iter(&self) -> SharedArrayIter<'_, T> {
        self.iter_range(0, self.len())
    }

    fn iter_range(&self, start: usize, len: usize) -> SharedArrayIter<'_, T> {
        let per_chunk = (4096 / std::mem::size_of::<T>().max(1)).clamp(1, len.max(1));
        SharedArrayIter {
            array: self,
            next: start,
            end: start + len,
            buf: Vec::new(),
            pos: 0,
            per_chunk,
            failed: false,
        }
    }

    /// Lends the whole array to `f` under one read lock (waiting at most
    /// the [lock timeout](Self::set_lock_timeout)): a consistent view for
    /// searching or summing without taking a guard by hand.
    ///
    /// ```
    /// use tachyon::SharedArray;
    /// # let name = format!("doc-array-with-slice-{}", std::process::id());
    /// let a = SharedArray::<u32>::create(&name, 4)?;
    /// a.write(0, &[3, 1, 4, 1])?;
    /// assert_eq!(a.with_slice(|s| s.iter().sum::<u32>())?, 9);
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn with_slice<R>(&self, f: impl FnOnce(&[T]) -> R) -> Result<R> {
        self.with_range(0, self.len(), f)
    }

    /// Lends the whole array mutably to `f` under the write lock (waiting
    /// at most the lock timeout): several changes that readers see all at
    /// once. If `f` panics, the lock is released and what it wrote stays.
    ///
    /// ```
    /// use tachyon::SharedArray;
    /// # let name = format!("doc-array-with-slice-mut-{}", std::process::id());
    /// let a = SharedArray::<u32>::create(&name, 3)?;
    /// a.with_slice_mut(|s| s.copy_from_slice(&[1, 2, 3]))?;
    /// assert_eq!(a.to_vec()?, [1, 2, 3]);
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn with_slice_mut<R>(&self, f: impl FnOnce(&mut [T]) -> R) -> Result<R> {
        self.with_range_mut(0, self.len(), f)
    }

    /// Whether some element equals `value`, searched under one read lock
    /// (the .NET `Contains`). Errors: [`Error::Timeout`] as for
    /// [`get`](Self::get).
    ///
    /// ```
    /// use tachyon::SharedArray;
    /// # let name = format!("doc-array-contains-{}", std::process::id());
    /// let a = SharedArray::<i64>::create(&name, 3)?;
    /// a.set(2, 42)?;
    /// assert!(a.contains(&42)?);
    /// assert!(!a.contains(&7)?);
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn contains(&self, value: &T) -> Result<bool>
    where
        T: PartialEq,
    {
        self.with_slice(|s| s.contains(value))
    }

    /// The index of the first element for which `pred` is true, searched
    /// under one read lock (the .NET `IndexOf`, with a predicate:
    /// `position(|x| *x == v)`). Errors: [`Error::Timeout`] as for
    /// [`get`](Self::get).
    ///
    /// ```
    /// use tachyon::SharedArray;
    /// # let name = format!("doc-array-position-{}", std::process::id());
    /// let a = SharedArray::<u8>::create(&name, 4)?;
    /// a.write(0, &[5, 6, 7, 6])?;
    /// assert_eq!(a.position(|&x| x == 6)?, Some(1));
    /// assert_eq!(a.position(|&x| x > 9)?, None);
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn position(&self, pred: impl FnMut(&T) -> bool) -> Result<Option<usize>> {
        self.with_slice(|s| s.iter().position(pred))
    }

    /// A view of the elements in `range` (the .NET `ArraySlice<T>`): it
    /// indexes from 0 within the range, checks every index against the
    /// range, and otherwise works as the array does (each call under the
    /// array's lock). [`Error::InvalidArgument`] if the range does not fit.
    ///
    /// ```
    /// use tachyon::SharedArray;
    /// # let name = format!("doc-array-slice-{}", std::process::id());
    /// let a = SharedArray::<u16>::create(&name, 10)?;
    /// let tail = a.slice(6..)?; // elements 6, 7, 8, 9
    /// tail.set(0, 60)?;
    /// assert_eq!(a.get(6)?, 60);
    /// assert_eq!(tail.len(), 4);
    /// assert!(tail.get(4).is_err()); // outside the slice
    /// assert!(a.slice(8..12).is_err()); // outside the array
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn slice(&self, range: impl std::ops::RangeBounds<usize>) -> Result<ArraySlice<'_, T>> {
        let (start, len) = sub_range(range, self.len())?;
        Ok(ArraySlice { array: self, start, len })
    }

    /// `f` over elements `start..start + len` (checked) under a read lock.
    fn with_range<R>(&self, start: usize, len: usize, f: impl FnOnce(&[T]) -> R) -> Result<R> {
        self.core.with_range(start, len, f)
    }

    /// `f` over elements `start..start + len` (checked) under the write
    /// lock.
    fn with_range_mut<R>(&self, start: usize, len: usize, f: impl FnOnce(&mut [T]) -> R) -> Result<R> {
        self.core.with_range_mut(start, len, f)
    }

    /// Takes the read lock, waiting for writers without limit, and lends
    /// the whole array for the guard's life. Read guards of any number of
    /// handles and processes overlap.
    ///
    /// Like `std`'s lock, taking a read guard while this thread holds the
    /// write guard (or holds a read guard while a writer waits) waits for
    /// itself: use the `_timeout` or `try_` forms where that can happen.
    ///
    /// Errors: [`Error::NoSpace`] if this handle's attachment already holds
    /// [`MAX_READS_PER_ATTACH`](crate::sync::MAX_READS_PER_ATTACH) read
    /// guards; [`Error::Corrupt`] if the lock word is damaged.
    pub fn read_lock(&self) -> Result<SharedArrayReadGuard<'_, T>> {
        self.read_lock_timeout(None)
    }

    /// [`read_lock`](Self::read_lock), waiting at most `timeout` (`None`:
    /// no limit) and then failing with [`Error::Timeout`].
    pub fn read_lock_timeout(&self, timeout: Option<Duration>) -> Result<SharedArrayReadGuard<'_, T>> {
        let guard = self.lock().read(self.segment(), timeout)?;
        Ok(SharedArrayReadGuard { array: self, guard })
    }

    /// [`read_lock`](Self::read_lock) without waiting: `Ok(None)` if a
    /// live writer holds or claims the lock.
    pub fn try_read_lock(&self) -> Result<Option<SharedArrayReadGuard<'_, T>>> {
        Ok(self.lock().try_read(self.segment())?.map(|guard| SharedArrayReadGuard { array: self, guard }))
    }

    /// Takes the write lock, waiting without limit for the other writers
    /// and then for every reader to leave, and lends the whole array
    /// mutably for the guard's life. Other handles see the changes when the
    /// guard is dropped.
    ///
    /// If the previous writer died holding the lock, the guard's
    /// [`owner_died`](SharedArrayWriteGuard::owner_died) is true: check or
    /// repair the data before dropping the guard.
    ///
    /// Errors: [`Error::Corrupt`] if the lock word is damaged. See
    /// [`read_lock`](Self::read_lock) about waiting for oneself.
    pub fn write_lock(&self) -> Result<SharedArrayWriteGuard<'_, T>> {
        self.write_lock_timeout(None)
    }

    /// [`write_lock`](Self::write_lock), waiting at most `timeout`
    /// (`None`: no limit) and then failing with [`Error::Timeout`].
    pub fn write_lock_timeout(&self, timeout: Option<Duration>) -> Result<SharedArrayWriteGuard<'_, T>> {
        let guard = self.lock().write(self.segment(), timeout)?;
        self.core.check_open()?;
        Ok(SharedArrayWriteGuard { array: self, guard })
    }

    /// [`write_lock`](Self::write_lock) without waiting: `Ok(None)` if a
    /// live writer or reader holds the lock.
    pub fn try_write_lock(&self) -> Result<Option<SharedArrayWriteGuard<'_, T>>> {
        let Some(guard) = self.lock().try_write(self.segment())? else { return Ok(None) };
        self.core.check_open()?;
        Ok(Some(SharedArrayWriteGuard { array: self, guard }))
    }
}

/// `(start, len)` of `range` within `0..len`, or [`Error::InvalidArgument`].
fn sub_range(range: impl std::ops::RangeBounds<usize>, len: usize) -> Result<(usize, usize)> {
    use std::ops::Bound;
    let start = match range.start_bound() {
        Bound::Included(&s) => Some(s),
        Bound::Excluded(&s) => s.checked_add(1),
        Bound::Unbounded => Some(0),
    };
    let end = match range.end_bound() {
        Bound::Included(&e) => e.checked_add(1),
        Bound::Excluded(&e) => Some(e),
        Bound::Unbounded => Some(len),
    };
    match (start, end) {
        (Some(s), Some(e)) if s <= e && e <= len => Ok((s, e - s)),
        _ => Err(Error::invalid(format!(
            "range {:?}..{:?} is out of range for {len} elements",
            range.start_bound(),
            range.end_bound()
        ))),
    }
}

/// A view of a sub-range of a [`SharedArray`], from
/// [`SharedArray::slice`]: the .NET `ArraySlice<T>`. Indexes are relative
/// to the start of the slice and checked against its length; each call
/// takes the array's lock as the array's own calls do. It borrows the
/// array handle and is `Copy`.
///
/// ```
/// use tachyon::SharedArray;
/// # let name = format!("doc-array-slice-type-{}", std::process::id());
/// let a = SharedArray::<i32>::create(&name, 8)?;
/// let middle = a.slice(2..6)?;
/// middle.write(0, &[1, 2, 3, 4])?;
/// assert_eq!(middle.to_vec()?, [1, 2, 3, 4]);
/// assert_eq!(middle.position(|&x| x == 3)?, Some(2));
/// assert!(middle.contains(&4)?);
/// let sum: i32 = middle.iter().map(|x| x.unwrap_or(0)).sum();
/// assert_eq!(sum, 10);
/// assert_eq!(a.to_vec()?, [0, 0, 1, 2, 3, 4, 0, 0]);
/// # Ok::<(), tachyon::Error>(())
/// ```
pub struct ArraySlice<'a, T: Pod> {
    array: &'a SharedArray<T>,
    start: usize,
    len: usize,
}

impl<T: Pod> Clone for ArraySlice<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T: Pod> Copy for ArraySlice<'_, T> {}

impl<'a, T: Pod> ArraySlice<'a, T> {
    /// Number of elements in the slice.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the slice has no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Where the slice starts in its array.
    pub fn offset(&self) -> usize {
        self.start
    }

    /// The array the slice views.
    pub fn array(&self) -> &'a SharedArray<T> {
        self.array
    }

    fn check_index(&self, i: usize) -> Result<usize> {
        if i < self.len {
            Ok(self.start + i)
        } else {
            Err(Error::invalid(format!("index {i} is out of range for a slice of {} elements", self.len)))
        }
    }

    fn check_range(&self, start: usize, count: usize) -> Result<usize> {
        locked::check_range(start, count, self.len, "elements", "a slice")?;
        Ok(self.start + start)
    }

    /// Element `i` of the slice; see [`SharedArray::get`].
    pub fn get(&self, i: usize) -> Result<T> {
        self.array.get(self.check_index(i)?)
    }

    /// Sets element `i` of the slice; see [`SharedArray::set`].
    pub fn set(&self, i: usize, value: T) -> Result<()> {
        self.array.set(self.check_index(i)?, value)
    }

    /// Copies `out.len()` elements from `start` (within the slice) out;
    /// see [`SharedArray::read`].
    pub fn read(&self, start: usize, out: &mut [T]) -> Result<()> {
        self.array.read(self.check_range(start, out.len())?, out)
    }

    /// Copies `values` in at `start` (within the slice); see
    /// [`SharedArray::write`].
    pub fn write(&self, start: usize, values: &[T]) -> Result<()> {
        self.array.write(self.check_range(start, values.len())?, values)
    }

    /// A copy of the slice's elements, under one read lock.
    pub fn to_vec(&self) -> Result<Vec<T>> {
        self.with_slice(|s| s.to_vec())
    }

    /// An iterator over copies of the slice's elements; see
    /// [`SharedArray::iter`].
    pub fn iter(&self) -> SharedArrayIter<'a, T> {
        self.array.iter_range(self.start, self.len)
    }

    /// Lends the slice's elements to `f` under one read lock.
    pub fn with_slice<R>(&self, f: impl FnOnce(&[T]) -> R) -> Result<R> {
        self.array.with_range(self.start, self.len, f)
    }

    /// Lends the slice's elements mutably to `f` under the write lock.
    pub fn with_slice_mut<R>(&self, f: impl FnOnce(&mut [T]) -> R) -> Result<R> {
        self.array.with_range_mut(self.start, self.len, f)
    }

    /// Whether some element of the slice equals `value`.
    pub fn contains(&self, value: &T) -> Result<bool>
    where
        T: PartialEq,
    {
        self.with_slice(|s| s.contains(value))
    }

    /// The index (within the slice) of the first element for which
    /// `pred` is true.
    pub fn position(&self, pred: impl FnMut(&T) -> bool) -> Result<Option<usize>> {
        self.with_slice(|s| s.iter().position(pred))
    }

    /// A view of a sub-range of this slice (indexes relative to it).
    pub fn slice(&self, range: impl std::ops::RangeBounds<usize>) -> Result<ArraySlice<'a, T>> {
        let (start, len) = sub_range(range, self.len)?;
        Ok(ArraySlice { array: self.array, start: self.start + start, len })
    }
}

impl<'a, T: Pod> IntoIterator for ArraySlice<'a, T> {
    type Item = Result<T>;
    type IntoIter = SharedArrayIter<'a, T>;

    fn into_iter(self) -> SharedArrayIter<'a, T> {
        self.iter()
    }
}

impl<T: Pod> fmt::Debug for ArraySlice<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ArraySlice")
            .field("array", &self.array.name())
            .field("offset", &self.start)
            .field("len", &self.len)
            .finish()
    }
}

impl<T: Pod> fmt::Debug for SharedArray<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedArray")
            .field("name", &self.name())
            .field("elem", &std::any::type_name::<T>())
            .field("len", &self.len())
            .field("lock", self.lock())
            .finish()
    }
}

impl<'a, T: Pod> IntoIterator for &'a SharedArray<T> {
    type Item = Result<T>;
    type IntoIter = SharedArrayIter<'a, T>;

    fn into_iter(self) -> SharedArrayIter<'a, T> {
        self.iter()
    }
}

/// Shared access to a whole [`SharedArray`]: derefs to `&[T]`. Other
/// readers (in any process) may hold guards at the same time; writers wait
/// until every read guard is gone. Released when dropped.
///
/// Indexing the slice out of range panics, as slices do. While holding a
/// guard, use its slice rather than the array's `get`/`set`, which would
/// wait for the lock this thread holds (until their timeout).
///
/// ```
/// # use tachyon::SharedArray;
/// # let name = format!("doc-array-read-guard-{}", std::process::id());
/// let a = SharedArray::<f64>::create(&name, 4)?;
/// let b = SharedArray::<f64>::open(&name)?;
/// let g1 = a.read_lock()?;
/// let g2 = b.read_lock()?; // readers overlap
/// assert_eq!(g1.len(), 4);
/// assert_eq!(g2[3], 0.0);
/// assert!(a.try_write_lock()?.is_none()); // a writer must wait
/// # Ok::<(), tachyon::Error>(())
/// ```
#[must_use = "the read lock is released as soon as the guard is dropped"]
pub struct SharedArrayReadGuard<'a, T: Pod> {
    array: &'a SharedArray<T>,
    guard: RwLockReadGuard<'a>,
}

impl<T: Pod> SharedArrayReadGuard<'_, T> {
    /// True if a writer died holding the lock and no writer has released
    /// it normally since: the data may be half-updated.
    pub fn owner_died(&self) -> bool {
        self.guard.owner_died()
    }

    /// Releases the lock (the same as dropping the guard).
    pub fn unlock(self) {}
}

impl<T: Pod> Deref for SharedArrayReadGuard<'_, T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        // SAFETY: the `len` elements are inside the mapping, aligned and
        // valid for any bits (`T: Pod`; see `Locked::data`); the
        // mapping outlives the guard's borrow of the array; and while this
        // read guard lives no tachyon writer can hold the lock, so nothing
        // mutates these bytes for the slice's lifetime (bound to `&self`).
        unsafe { std::slice::from_raw_parts(self.array.core.data(), self.array.len()) }
    }
}

impl<T: Pod + fmt::Debug> fmt::Debug for SharedArrayReadGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedArrayReadGuard")
            .field("owner_died", &self.owner_died())
            .field("data", &&**self)
            .finish()
    }
}

/// Exclusive access to a whole [`SharedArray`]: derefs to `&mut [T]`.
/// No other reader or writer, in any process, holds the lock meanwhile.
/// Released when dropped.
///
/// ```
/// # use tachyon::SharedArray;
/// # let name = format!("doc-array-write-guard-{}", std::process::id());
/// let a = SharedArray::<u32>::create(&name, 3)?;
/// let mut g = a.write_lock()?;
/// assert!(!g.owner_died());
/// g.copy_from_slice(&[7, 8, 9]);
/// g[0] += 1;
/// drop(g);
/// assert_eq!(a.to_vec()?, [8, 8, 9]);
/// # Ok::<(), tachyon::Error>(())
/// ```
#[must_use = "the write lock is released as soon as the guard is dropped"]
pub struct SharedArrayWriteGuard<'a, T: Pod> {
    array: &'a SharedArray<T>,
    guard: RwLockWriteGuard<'a>,
}

impl<T: Pod> SharedArrayWriteGuard<'_, T> {
    /// True if the previous writer died holding the lock: the data may be
    /// half-updated; check or repair it before dropping this guard
    /// (releasing clears the indication for everyone).
    pub fn owner_died(&self) -> bool {
        self.guard.owner_died()
    }

    /// Releases the lock (the same as dropping the guard).
    pub fn unlock(self) {}
}

impl<T: Pod> Deref for SharedArrayWriteGuard<'_, T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        // SAFETY: as for the read guard; the write guard excludes every
        // other tachyon reader and writer, and `&self` excludes `deref_mut`.
        unsafe { std::slice::from_raw_parts(self.array.core.data(), self.array.len()) }
    }
}

impl<T: Pod> DerefMut for SharedArrayWriteGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: the elements are inside the mapping, aligned, valid for
        // any bits and apart from the header (checked in `Locked::open`);
        // the write lock excludes every other tachyon handle
        // (in this process too: threads of one attachment exclude each
        // other), and `&mut self` excludes other borrows through this guard,
        // so the slice is unaliased for its lifetime.
        unsafe { std::slice::from_raw_parts_mut(self.array.core.data(), self.array.len()) }
    }
}

impl<T: Pod + fmt::Debug> fmt::Debug for SharedArrayWriteGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedArrayWriteGuard")
            .field("owner_died", &self.owner_died())
            .field("data", &&**self)
            .finish()
    }
}

/// Iterator over copies of a [`SharedArray`]'s elements, from
/// [`SharedArray::iter`]: chunks of up to 4 KiB, each copied under its own
/// read lock.
pub struct SharedArrayIter<'a, T: Pod> {
    array: &'a SharedArray<T>,
    /// The index of the first element not yet copied out.
    next: usize,
    /// One past the last index to yield.
    end: usize,
    buf: Vec<T>,
    /// The next element of `buf` to yield.
    pos: usize,
    per_chunk: usize,
    failed: bool,
}

impl<T: Pod> Iterator for SharedArrayIter<'_, T> {
    type Item = Result<T>;

    fn next(&mut self) -> Option<Result<T>> {
        if let Some(&v) = self.buf.get(self.pos) {
            self.pos += 1;
            return Some(Ok(v));
        }
        if self.failed || self.next >= self.end {
            return None;
        }
        let n = self.per_chunk.min(self.end - self.next);
        self.buf.resize(n, T::zeroed());
        if let Err(e) = self.array.read(self.next, &mut self.buf[..n]) {
            self.failed = true;
            self.buf.clear();
            return Some(Err(e));
        }
        self.next += n;
        self.pos = 1;
        Some(Ok(self.buf[0]))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        if self.failed {
            return (0, Some(0));
        }
        let left = self.buf.len() - self.pos + (self.end - self.next);
        // A failure yields one `Err` in place of everything still to fetch.
        let fetched = self.buf.len() - self.pos;
        (fetched + usize::from(left > fetched), Some(left))
    }
}

impl<T: Pod> FusedIterator for SharedArrayIter<'_, T> {}

impl<T: Pod> fmt::Debug for SharedArrayIter<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedArrayIter")
            .field("array", &self.array.name())
            .field("next", &(self.next - (self.buf.len() - self.pos)))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_are_send_and_sync() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<SharedArray<u64>>();
        send_sync::<crate::primitives::SharedBuffer>();
    }

    #[test]
    fn fingerprints_tell_types_apart() {
        assert_ne!(ElemType::of::<u32>().fingerprint, ElemType::of::<f32>().fingerprint);
        assert_ne!(ElemType::of::<u32>().fingerprint, ElemType::of::<[u16; 2]>().fingerprint);
        assert_eq!(ElemType::of::<u32>(), ElemType::of::<u32>());
    }

    #[test]
    fn layout_aligns_and_checks_overflow() {
        let (off, total) = layout(3, 8, 8).unwrap();
        assert_eq!(off, 832);
        assert_eq!(total, off + 24);
        assert_eq!(layout(1, 1, 4096).unwrap().0 % 4096, 0);
        assert!(layout(usize::MAX, 2, 1).is_none());
        assert!(layout(usize::MAX / 2, 1, 1).is_none());
    }
}
