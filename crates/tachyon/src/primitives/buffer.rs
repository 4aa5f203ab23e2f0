//! `SharedBuffer`: a fixed-size byte buffer in a named segment, read and
//! written at offsets by any number of processes, guarded by a robust,
//! counted reader-writer lock.
//!
//! Invariant. The buffer header (its size) is written once, before the
//! segment gets its name, and never changes. The bytes are touched only
//! while the segment's [`RwLock`] is held: read (shared) to copy out or to
//! lend `&[u8]`, write (exclusive) to copy in or to lend `&mut [u8]`. Every
//! offset and length is checked against the size (without overflow) before
//! the lock is even taken. The lock, the closed flag and the locked copies
//! are the core it shares with `SharedArray` ([`locked`](super::locked)).

use super::locked::{self, Locked, LockedHeader, DEFAULT_LOCK_TIMEOUT};
use crate::error::{Corruption, Error, Result};
use crate::segment::{Kind, Segment, ShmSafe};
use crate::sync::RwLock;
use bytemuck::Pod;
use std::fmt;
use std::mem::{offset_of, size_of};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// The buffer header at the start of the data area; the bytes follow at
/// the next multiple of 64.
#[repr(C)]
struct BufferHeader {
    /// Size in bytes (sealed geometry word 0).
    size: AtomicU64,
    /// Non-zero once [`SharedBuffer::close`] was called.
    closed: AtomicU32,
    _pad: [AtomicU32; 13],
    /// On a cache line of its own.
    lock: RwLock,
    _tail: AtomicU32,
}

// The layout in shared memory: these offsets are what every process that
// maps a buffer expects.
const _: () = assert!(offset_of!(BufferHeader, size) == 0);
const _: () = assert!(offset_of!(BufferHeader, closed) == 8);
const _: () = assert!(offset_of!(BufferHeader, lock) == 64);
const _: () = assert!(size_of::<BufferHeader>() == 600);
// The bytes start at 640.
const _: () = assert!(size_of::<BufferHeader>().next_multiple_of(64) == 640);

// SAFETY: `repr(C)` of atomics and an `RwLock` (itself `ShmSafe`), with no
// padding (the offsets and size are asserted above): any bits are valid and
// all mutation is atomic.
unsafe impl ShmSafe for BufferHeader {}

impl LockedHeader for BufferHeader {
    const GEOMETRY: &'static [usize] = &[offset_of!(BufferHeader, size)];
    const UNITS: &'static str = "bytes";
    const WHOLE: &'static str = "a buffer";

    fn lock(&self) -> &RwLock {
        &self.lock
    }

    fn closed(&self) -> &AtomicU32 {
        &self.closed
    }
}

/// `(offset of the first byte, data area size)` of a buffer of `size`
/// bytes.
fn layout(size: usize) -> Option<(usize, usize)> {
    locked::layout::<BufferHeader>(size, 1, 1)
}

/// A fixed-size byte buffer shared between processes, read and written at
/// offsets.
///
/// * **Typed or raw**: [`read`](Self::read) / [`write`](Self::write) one
///   [`Pod`] value, [`read_slice`](Self::read_slice) /
///   [`write_slice`](Self::write_slice) several, or
///   [`read_bytes`](Self::read_bytes) / [`write_bytes`](Self::write_bytes)
///   plain bytes. Offsets need no alignment: values are copied byte for
///   byte.
/// * **Checked**: every offset and length is checked against the size
///   (without overflow); a range that does not fit is
///   [`Error::InvalidArgument`] and nothing is read or written.
/// * **Locked**: a robust, counted, writer-preferring [`RwLock`] guards the
///   bytes. Each call holds it (shared to read, exclusive to write) for its
///   copy, waiting at most the handle's
///   [lock timeout](Self::set_lock_timeout) (default 100 ms) and then
///   failing with [`Error::Timeout`]. This is the one exception to the
///   library's per-call timeouts: these short copies use the timeout
///   configured on the handle ([`SharedBufferBuilder::lock_timeout`]). For several accesses that must be
///   consistent, [`with_bytes`](Self::with_bytes) and
///   [`with_bytes_mut`](Self::with_bytes_mut) lend the whole buffer under
///   one lock. A process that dies holding the write lock does not wedge
///   the buffer: the next locker takes over within about 50 ms.
///
/// The bytes start zeroed. The segment disappears when the last handle (in
/// any process) is dropped.
///
/// ```
/// use tachyon::SharedBuffer;
/// # let name = format!("doc-buffer-{}", std::process::id());
/// let producer = SharedBuffer::create(&name, 1024)?;
/// let consumer = SharedBuffer::open(&name)?; // usually in another process
/// producer.write(0, &123i32)?;
/// producer.write(1001, &456i32)?; // no alignment needed
/// producer.write_slice(100, &[1.5f64, 2.5])?;
/// assert_eq!(consumer.read::<i32>(0)?, 123);
/// assert_eq!(consumer.read::<i32>(1001)?, 456);
/// let mut pair = [0f64; 2];
/// consumer.read_slice(100, &mut pair)?;
/// assert_eq!(pair, [1.5, 2.5]);
/// assert!(consumer.read::<u64>(1020).is_err()); // would end past 1024
///
/// // Several accesses under one lock:
/// let sum = consumer.with_bytes(|b| b[..8].iter().map(|&x| u32::from(x)).sum::<u32>())?;
/// assert_eq!(sum, 123);
/// # Ok::<(), tachyon::Error>(())
/// ```
pub struct SharedBuffer {
    core: Locked<BufferHeader, u8>,
}

/// Options for creating or opening a [`SharedBuffer`].
///
/// ```
/// use std::time::Duration;
/// use tachyon::SharedBuffer;
/// # let name = format!("doc-buffer-builder-{}", std::process::id());
/// let a = SharedBuffer::builder(&name)
///     .size(4096)
///     .lock_timeout(Some(Duration::from_millis(10)))
///     .create()?;
/// let b = SharedBuffer::builder(&name).create_or_open()?; // opens
/// assert_eq!(b.len(), 4096);
/// # drop(a);
/// # Ok::<(), tachyon::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct SharedBufferBuilder {
    name: String,
    size: usize,
    /// Whether the caller set `size`.
    size_set: bool,
    timeout: Option<Duration>,
    max_attachers: Option<usize>,
}

impl SharedBufferBuilder {
    /// Size in bytes (at least 1, default 4096). Fixed at create; on
    /// [`open`](Self::open) and [`create_or_open`](Self::create_or_open),
    /// a size set here must be the existing buffer's
    /// ([`Error::Incompatible`]).
    pub fn size(mut self, size: usize) -> Self {
        self.size = size;
        self.size_set = true;
        self
    }

    /// How long this handle's calls wait for the lock before
    /// [`Error::Timeout`]; `None`: no limit. Default 100 ms.
    pub fn lock_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.timeout = timeout;
        self
    }

    /// How many handles may be attached at once across all processes
    /// (create only; 1 to 128, default 128).
    pub fn max_attachers(mut self, n: usize) -> Self {
        self.max_attachers = Some(n);
        self
    }

    /// Creates the buffer, zero-filled.
    ///
    /// Errors: [`Error::AlreadyExists`] if a live segment has the name;
    /// [`Error::InvalidArgument`] if the size is 0 or too large; the
    /// segment errors of [`Segment::create`].
    pub fn create(&self) -> Result<SharedBuffer> {
        let seg = self.segment_builder()?.create_with(|seg| init(seg, self.size))?;
        SharedBuffer::from_segment(seg, self.timeout)
    }

    /// Opens an existing buffer, learning its size from it.
    ///
    /// Errors: [`Error::NotFound`]; [`Error::KindMismatch`] if the segment
    /// is not a buffer; [`Error::Corrupt`] if its header does not fit its
    /// size.
    pub fn open(&self) -> Result<SharedBuffer> {
        let seg = Segment::builder(&self.name).kind(Kind::BUFFER).open()?;
        self.check_size(SharedBuffer::from_segment(seg, self.timeout)?)
    }

    /// Opens the buffer, or creates it with this size if there is none.
    /// [`Error::Incompatible`] if a size was set and the existing buffer
    /// has another; without [`size`](Self::size), its size is taken.
    ///
    /// ```
    /// use tachyon::{Error, SharedBuffer};
    /// # let name = format!("doc-buffer-compat-{}", std::process::id());
    /// let a = SharedBuffer::builder(&name).size(100).create_or_open()?;
    /// let b = SharedBuffer::builder(&name).create_or_open()?; // any size
    /// assert_eq!(b.len(), 100);
    /// let err = SharedBuffer::builder(&name).size(200).create_or_open().unwrap_err();
    /// assert!(matches!(err, Error::Incompatible { field: "size", .. }));
    /// # drop((a, b));
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn create_or_open(&self) -> Result<SharedBuffer> {
        let seg = self.segment_builder()?.create_or_open_with(|seg| init(seg, self.size))?;
        self.check_size(SharedBuffer::from_segment(seg, self.timeout)?)
    }

    /// The buffer if its size is the one set on this builder (if any).
    fn check_size(&self, buffer: SharedBuffer) -> Result<SharedBuffer> {
        locked::check_len(&self.name, "size", self.size_set.then_some(self.size), buffer.len())?;
        Ok(buffer)
    }

    fn segment_builder(&self) -> Result<crate::segment::SegmentBuilder> {
        if self.size == 0 {
            return Err(Error::invalid("a SharedBuffer needs at least 1 byte, not 0"));
        }
        let (_, total) = layout(self.size).ok_or_else(|| {
            Error::invalid(format!("a buffer of {} bytes does not fit in memory", self.size))
        })?;
        let geometry = [self.size as u64, 0, 0, 0];
        Ok(locked::segment_builder(&self.name, Kind::BUFFER, total, geometry, self.max_attachers))
    }
}

/// Writes the header; runs before the segment is visible to anyone. The
/// lock (all zeros: unlocked) and the bytes are already zero-filled.
fn init(seg: &Segment, size: usize) -> Result<()> {
    seg.get::<BufferHeader>(0)?.size.store(size as u64, Relaxed);
    Ok(())
}

impl SharedBuffer {
    /// A builder, for the lock timeout, attach slots or `create_or_open`.
    pub fn builder(name: &str) -> SharedBufferBuilder {
        SharedBufferBuilder {
            name: name.to_owned(),
            size: 4096,
            size_set: false,
            timeout: DEFAULT_LOCK_TIMEOUT,
            max_attachers: None,
        }
    }

    /// Creates a zeroed buffer of `size` bytes.
    ///
    /// Errors: [`Error::AlreadyExists`] if a live segment has the name;
    /// [`Error::InvalidArgument`] if `size` is 0 or too large; see
    /// [`SharedBufferBuilder::create`].
    pub fn create(name: &str, size: usize) -> Result<SharedBuffer> {
        Self::builder(name).size(size).create()
    }

    /// Opens an existing buffer; its size comes from the segment.
    ///
    /// Errors: [`Error::NotFound`]; see [`SharedBufferBuilder::open`].
    pub fn open(name: &str) -> Result<SharedBuffer> {
        Self::builder(name).open()
    }

    fn from_segment(seg: Segment, timeout: Option<Duration>) -> Result<Self> {
        let core = Locked::open(seg, timeout, "buffer size", |seg, h: &BufferHeader| {
            let bad = |field, value| Error::corrupt(Corruption::BadField { field, value });
            let raw = h.size.load(Relaxed);
            let len = usize::try_from(raw).map_err(|_| bad("buffer size", raw))?;
            if len == 0 {
                return Err(bad("buffer size", raw));
            }
            let (data_off, total) = layout(len).ok_or_else(|| bad("buffer size", raw))?;
            if total != seg.size() {
                return Err(bad("buffer size", raw));
            }
            Ok((len, data_off))
        })?;
        Ok(SharedBuffer { core })
    }

    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.core.len()
    }

    /// Always `false`: a buffer has at least one byte.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The name as given at create/open.
    pub fn name(&self) -> &str {
        self.core.segment().name()
    }

    /// The segment behind the buffer.
    pub fn segment(&self) -> &Segment {
        self.core.segment()
    }

    /// How long calls wait for the lock (`None`: no limit).
    pub fn lock_timeout(&self) -> Option<Duration> {
        self.core.timeout()
    }

    /// Sets how long this handle's calls wait for the lock before
    /// [`Error::Timeout`]; `None`: no limit.
    pub fn set_lock_timeout(&mut self, timeout: Option<Duration>) {
        self.core.set_timeout(timeout);
    }

    /// Makes the buffer read-only for every process, for good: from now
    /// on writes fail with [`Error::Closed`], reads go on (the last values
    /// stay readable). The other processes see it through
    /// [`is_closed`](Self::is_closed) or the `Closed` of their writes. A
    /// write that holds the lock already when `close` is called finishes.
    /// This is how a writer says "final values, I am done" (the .NET
    /// `Close()` / `ShuttingDown` of a buffer); dropping a handle does not
    /// close.
    ///
    /// ```
    /// use tachyon::{Error, SharedBuffer};
    /// # let name = format!("doc-buffer-close-{}", std::process::id());
    /// let writer = SharedBuffer::create(&name, 64)?;
    /// let reader = SharedBuffer::open(&name)?; // usually another process
    /// writer.write(0, &42u64)?;
    /// writer.close();
    /// assert!(reader.is_closed());
    /// assert_eq!(reader.read::<u64>(0)?, 42);
    /// assert!(matches!(reader.write(0, &1u64), Err(Error::Closed)));
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn close(&self) {
        self.core.close();
    }

    /// Whether [`close`](Self::close) was called (by any process).
    ///
    /// ```
    /// # use tachyon::SharedBuffer;
    /// # let name = format!("doc-buffer-is-closed-{}", std::process::id());
    /// let buf = SharedBuffer::create(&name, 8)?;
    /// assert!(!buf.is_closed());
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn is_closed(&self) -> bool {
        self.core.is_closed()
    }

    /// Reads a `T` at `offset` (any alignment) under the read lock.
    ///
    /// Errors: [`Error::InvalidArgument`] if `offset + size_of::<T>()` is
    /// past the end; [`Error::Timeout`] if a writer holds the lock longer
    /// than the [lock timeout](Self::set_lock_timeout).
    pub fn read<T: Pod>(&self, offset: usize) -> Result<T> {
        let mut v = T::zeroed();
        self.core.read(offset, bytemuck::bytes_of_mut(&mut v))?;
        Ok(v)
    }

    /// Writes `value` at `offset` (any alignment) under the write lock.
    ///
    /// Errors: [`Error::InvalidArgument`] if it would end past the end
    /// (nothing is written); [`Error::Timeout`] if readers or a writer hold
    /// the lock longer than the [lock timeout](Self::set_lock_timeout);
    /// [`Error::Closed`] once the buffer is [closed](Self::close).
    pub fn write<T: Pod>(&self, offset: usize, value: &T) -> Result<()> {
        self.core.write(offset, bytemuck::bytes_of(value))
    }

    /// Fills `out` with the `T`s stored from `offset` on (any alignment),
    /// under one read lock. Errors as for [`read`](Self::read).
    pub fn read_slice<T: Pod>(&self, offset: usize, out: &mut [T]) -> Result<()> {
        self.core.read(offset, bytes_of_slice_mut(out))
    }

    /// Writes `values` from `offset` on (any alignment), under one write
    /// lock. Errors as for [`write`](Self::write).
    pub fn write_slice<T: Pod>(&self, offset: usize, values: &[T]) -> Result<()> {
        self.core.write(offset, bytes_of_slice(values))
    }

    /// Copies `out.len()` bytes from `offset` into `out`, under the read
    /// lock. Errors as for [`read`](Self::read).
    pub fn read_bytes(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        self.core.read(offset, out)
    }

    /// Copies `bytes` into the buffer at `offset`, under the write lock.
    /// Errors as for [`write`](Self::write).
    pub fn write_bytes(&self, offset: usize, bytes: &[u8]) -> Result<()> {
        self.core.write(offset, bytes)
    }

    /// Lends the whole buffer to `f` under the read lock (other readers may
    /// hold it at the same time; writers wait) and returns what `f` returns.
    /// Use [`bytemuck::pod_read_unaligned`] inside to read typed values.
    ///
    /// Errors: [`Error::Timeout`] if a writer holds the lock longer than
    /// the [lock timeout](Self::set_lock_timeout); `f` is then not called.
    pub fn with_bytes<R>(&self, f: impl FnOnce(&[u8]) -> R) -> Result<R> {
        self.core.with_range(0, self.len(), f)
    }

    /// Lends the whole buffer mutably to `f` under the write lock (no other
    /// reader or writer, in any process, meanwhile) and returns what `f`
    /// returns. If `f` panics the lock is released and the panic goes on;
    /// what `f` wrote so far stays.
    ///
    /// ```
    /// # use tachyon::SharedBuffer;
    /// # let name = format!("doc-buffer-mut-{}", std::process::id());
    /// let buf = SharedBuffer::create(&name, 16)?;
    /// buf.with_bytes_mut(|b| {
    ///     b[..4].copy_from_slice(&7u32.to_ne_bytes());
    ///     b[4..8].copy_from_slice(&9u32.to_ne_bytes());
    /// })?;
    /// assert_eq!(buf.read::<[u32; 2]>(0)?, [7, 9]);
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    ///
    /// Errors: [`Error::Timeout`] if readers or a writer hold the lock
    /// longer than the [lock timeout](Self::set_lock_timeout),
    /// [`Error::Closed`] once the buffer is [closed](Self::close); `f` is
    /// then not called.
    pub fn with_bytes_mut<R>(&self, f: impl FnOnce(&mut [u8]) -> R) -> Result<R> {
        self.core.with_range_mut(0, self.len(), f)
    }
}

/// The bytes of a slice of `T`. (`bytemuck` refuses only zero-sized `T`,
/// whose slices have no bytes.)
fn bytes_of_slice<T: Pod>(values: &[T]) -> &[u8] {
    bytemuck::try_cast_slice(values).unwrap_or_default()
}

/// The bytes of a mutable slice of `T`, as [`bytes_of_slice`].
fn bytes_of_slice_mut<T: Pod>(values: &mut [T]) -> &mut [u8] {
    bytemuck::try_cast_slice_mut(values).unwrap_or_default()
}

impl fmt::Debug for SharedBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedBuffer")
            .field("name", &self.name())
            .field("len", &self.len())
            .field("closed", &self.is_closed())
            .field("lock", self.core.lock())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_checks_overflow() {
        let (off, total) = layout(10).unwrap();
        assert_eq!(off, 640);
        assert_eq!(total, off + 10);
        assert!(layout(usize::MAX).is_none());
        assert!(layout(isize::MAX as usize).is_none());
    }
}
