//! The segment handle: the [`Segment`] API (creating and opening by name,
//! the data area, the attachers and their liveness). The work behind
//! create, open and remove is in `lifecycle.rs`, behind attach and detach in
//! `attach.rs`.

use super::attach::{slot_alive, slot_at};
use super::builder::SegmentBuilder;
use super::header::{gen_lock, slot_lock, Header, SlotRepr, SLOT_ATTACHED, SLOT_EXITING, SLOT_FREE};
use super::lifecycle::{self, LifecycleLock};
use super::name::SegmentName;
use super::registry::registry_remove;
use super::{Kind, Liveness, ShmSafe, Token};
use crate::error::{Error, Result};
use crate::platform::atomic::{AtomicU64, Ordering};
use crate::platform::fs::{self, FileInfo};
use crate::platform::process::ProcessId;
use rustix::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::atomic::AtomicU8;
use std::sync::{Arc, Mutex};

/// A named shared-memory segment mapped into this process.
///
/// Dropping the handle detaches; the last handle to detach (in any process)
/// removes the file. A process that exits normally detaches every handle it
/// still has. See the [module docs](crate::segment) for what happens after a
/// crash.
///
/// ```
/// use tachyon::Segment;
/// # let name = format!("doc-segment-{}", std::process::id());
/// let a = Segment::create(&name, 1 << 20)?;
/// assert_eq!(a.size(), 1 << 20);
/// let b = Segment::open(&name)?; // learns the size from the header
/// assert_eq!(b.size(), a.size());
/// a.write_bytes(100, b"ping")?;
/// let mut got = [0u8; 4];
/// b.read_bytes(100, &mut got)?;
/// assert_eq!(&got, b"ping");
/// drop(a);
/// drop(b); // last one out: the file is gone
/// assert!(!Segment::exists(&name)?);
/// # Ok::<(), tachyon::Error>(())
/// ```
pub struct Segment {
    pub(super) inner: Arc<Inner>,
    data: NonNull<u8>,
    data_size: usize,
}

// SAFETY: the handle only holds a pointer to a shared mapping that lives as
// long as the handle; all access to shared bytes goes through atomics or
// raw copies, never through references that assume exclusivity.
unsafe impl Send for Segment {}
// SAFETY: as above; `&Segment` methods are safe to call from any thread.
unsafe impl Sync for Segment {}

pub(super) struct Inner {
    pub(super) name: SegmentName,
    pub(super) path: PathBuf,
    pub(super) fd: OwnedFd,
    pub(super) file: FileInfo,
    pub(super) header: Header,
    pub(super) slot: usize,
    pub(super) token: Token,
    /// The process that attached; a forked child must not detach for it.
    pub(super) owner_pid: u32,
    pub(super) map: NonNull<u8>,
    pub(super) map_len: usize,
    /// `true` once detached; guards the mapping against use after unmap.
    pub(super) state: Mutex<State>,
}

#[derive(Default)]
pub(super) struct State {
    pub(super) detached: bool,
    pub(super) unmapped: bool,
}

// SAFETY: `map` points to a shared mapping, only touched through atomics,
// and only while `state` says it is still mapped.
unsafe impl Send for Inner {}
// SAFETY: as above.
unsafe impl Sync for Inner {}

impl Segment {
    /// A builder for the less common options (kind, attach slots).
    pub fn builder(name: &str) -> SegmentBuilder {
        SegmentBuilder::new(name)
    }

    /// Creates a zero-filled segment with `size` bytes of data.
    ///
    /// Fails with [`Error::AlreadyExists`] if a segment of that name has a
    /// live attacher; a stale one (every attacher dead) is replaced.
    /// The whole size is reserved now: a full `/dev/shm` is
    /// [`Error::NoSpace`] here, never `SIGBUS` later.
    pub fn create(name: &str, size: usize) -> Result<Segment> {
        Segment::builder(name).size(size).create()
    }

    /// Opens an existing raw segment; its size comes from its header.
    ///
    /// Fails with [`Error::NotFound`] if there is none, or if the one there
    /// was stale (it is removed). A damaged file gives [`Error::Corrupt`],
    /// [`Error::VersionMismatch`] or [`Error::KindMismatch`].
    pub fn open(name: &str) -> Result<Segment> {
        lifecycle::open(name, Kind::RAW)
    }

    /// Opens the segment, or creates it with `size` bytes if there is none.
    /// An existing segment keeps its own size.
    pub fn create_or_open(name: &str, size: usize) -> Result<Segment> {
        Segment::builder(name).size(size).create_or_open()
    }

    /// Removes the name now, like `shm_unlink`: processes attached keep
    /// their mapping, but nobody can open the name any more and a new
    /// segment of the same name may be created.
    pub fn remove(name: &str) -> Result<()> {
        lifecycle::remove(name)
    }

    /// Whether a live segment of that name exists. A stale one (every
    /// attacher dead) counts as absent. Changes nothing.
    pub fn exists(name: &str) -> Result<bool> {
        lifecycle::exists(name)
    }

    /// The name as given at create/open.
    pub fn name(&self) -> &str {
        &self.inner.name.given
    }

    /// The path of the backing file.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// The kind recorded in the header.
    pub fn kind(&self) -> Kind {
        self.inner.header.kind
    }

    /// Rewrites the object's geometry words at `offsets` of the data area
    /// (each 8-byte aligned: `offsets[i]` holds word `i` of the geometry
    /// given at create) that differ from the sealed copy in the segment
    /// header; returns how many it rewrote. Nothing when the segment has no
    /// sealed geometry (made before it existed, or its seal is damaged):
    /// the caller validates its header as it is. Racing callers write the
    /// same values.
    pub(crate) fn restore_geometry(&self, offsets: &[usize]) -> Result<usize> {
        let Some(geometry) = self.inner.header.geometry else { return Ok(0) };
        let mut fixed = 0;
        for (&off, &want) in offsets.iter().zip(&geometry) {
            let word = self.get::<AtomicU64>(off)?;
            if word.load(Ordering::Relaxed) != want {
                word.store(want, Ordering::Relaxed);
                fixed += 1;
            }
        }
        Ok(fixed)
    }

    /// Size of the data area in bytes.
    pub fn size(&self) -> usize {
        self.data_size
    }

    /// The first byte of the data area (page-aligned). Other processes may
    /// write this memory at any time: read and write it only through
    /// atomics or raw copies, as the protocol built on top allows.
    pub fn as_ptr(&self) -> *mut u8 {
        self.data.as_ptr()
    }

    /// The process that created the segment.
    pub fn creator(&self) -> ProcessId {
        ProcessId { pid: self.inner.header.creator_pid, start_time: self.inner.header.creator_start }
    }

    /// This handle's attach slot (0-based; `usize::MAX` for the read-only
    /// view an inspector takes).
    pub fn slot(&self) -> usize {
        self.inner.slot
    }

    /// A reference to a `T` at `offset` in the data area, for shared
    /// structures such as the locks of `tachyon::sync`.
    ///
    /// Fails with [`Error::InvalidArgument`] if `offset` is misaligned for
    /// `T` or the `T` would not fit.
    ///
    /// ```
    /// use std::sync::atomic::{AtomicU64, Ordering};
    /// use tachyon::Segment;
    /// # let name = format!("doc-get-{}", std::process::id());
    /// let seg = Segment::create(&name, 4096)?;
    /// let counter: &AtomicU64 = seg.get(64)?;
    /// counter.fetch_add(1, Ordering::SeqCst);
    /// assert!(seg.get::<AtomicU64>(3).is_err()); // misaligned
    /// assert!(seg.get::<AtomicU64>(4096).is_err()); // out of bounds
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    #[inline]
    pub fn get<T: ShmSafe>(&self, offset: usize) -> Result<&T> {
        let size = std::mem::size_of::<T>();
        let align = std::mem::align_of::<T>();
        // The checks inline into the caller (a mask and a compare, the
        // sizes being constants); the message is built out of line.
        if offset % align != 0 || !self.in_range(offset, size) {
            return Err(self.bad_access(offset, size, align, std::any::type_name::<T>()));
        }
        // SAFETY: the range is inside the mapping (checked above) and
        // aligned; the mapping lives as long as `&self`; `T: ShmSafe` is
        // valid for any bits and only mutated through atomics.
        Ok(unsafe { &*self.data.as_ptr().add(offset).cast::<T>() })
    }

    /// A slice of `len` values of `T` starting at `offset` in the data area,
    /// checked as [`get`](Self::get) checks one value.
    #[inline]
    pub fn get_slice<T: ShmSafe>(&self, offset: usize, len: usize) -> Result<&[T]> {
        let align = std::mem::align_of::<T>();
        let bytes = len.checked_mul(std::mem::size_of::<T>());
        if offset % align != 0 || !bytes.is_some_and(|b| self.in_range(offset, b)) {
            return Err(self.bad_access(
                offset,
                bytes.unwrap_or(usize::MAX),
                align,
                std::any::type_name::<T>(),
            ));
        }
        // SAFETY: as in `get`, for `len` consecutive values.
        Ok(unsafe { std::slice::from_raw_parts(self.data.as_ptr().add(offset).cast::<T>(), len) })
    }

    #[inline]
    fn in_range(&self, offset: usize, len: usize) -> bool {
        offset.checked_add(len).is_some_and(|end| end <= self.data_size)
    }

    /// The error of a `get` or `get_slice` that failed its checks.
    #[cold]
    #[inline(never)]
    fn bad_access(&self, offset: usize, bytes: usize, align: usize, what: &str) -> Error {
        if offset % align != 0 {
            Error::invalid(format!("offset {offset} is not aligned to {align} bytes for {what}"))
        } else if bytes == usize::MAX {
            Error::invalid(format!("{what} elements at {offset} overflow the address space"))
        } else {
            self.out_of_range(offset, bytes)
        }
    }

    /// Copies `buf.len()` bytes out of the data area at `offset`.
    ///
    /// Byte by byte, each a relaxed atomic load: another thread or process
    /// writing the same bytes meanwhile can tear the copy (the caller's
    /// protocol decides whether that matters) but is no data race. For
    /// bulk data use a `SharedBuffer` or a topic's
    /// loans, which copy at memory speed under their own protocol; do not
    /// mix these byte copies with wider atomics on the same bytes.
    pub fn read_bytes(&self, offset: usize, buf: &mut [u8]) -> Result<()> {
        self.check_range(offset, buf.len())?;
        // SAFETY: the range is inside the mapping (checked), which lives as
        // long as `self`, and `AtomicU8` has the size and alignment of `u8`;
        // every access to it here is atomic.
        let src = unsafe {
            std::slice::from_raw_parts(self.data.as_ptr().add(offset).cast::<AtomicU8>(), buf.len())
        };
        for (b, a) in buf.iter_mut().zip(src) {
            *b = a.load(Ordering::Relaxed);
        }
        Ok(())
    }

    /// Copies `bytes` into the data area at `offset` (byte by byte, each a
    /// relaxed atomic store: see [`read_bytes`](Self::read_bytes)).
    pub fn write_bytes(&self, offset: usize, bytes: &[u8]) -> Result<()> {
        self.check_range(offset, bytes.len())?;
        // SAFETY: as in `read_bytes`.
        let dst = unsafe {
            std::slice::from_raw_parts(self.data.as_ptr().add(offset).cast::<AtomicU8>(), bytes.len())
        };
        for (a, &b) in dst.iter().zip(bytes) {
            a.store(b, Ordering::Relaxed);
        }
        Ok(())
    }

    fn check_range(&self, offset: usize, len: usize) -> Result<()> {
        if self.in_range(offset, len) {
            Ok(())
        } else {
            Err(self.out_of_range(offset, len))
        }
    }

    #[cold]
    #[inline(never)]
    fn out_of_range(&self, offset: usize, len: usize) -> Error {
        Error::invalid(format!(
            "range {offset}..{offset}+{len} is outside the segment's {} bytes",
            self.data_size
        ))
    }

    /// Every attach slot in use, or left in use by a process that died,
    /// with its process and whether it is alive (this handle's included).
    pub fn attach_slots(&self) -> Vec<super::AttacherInfo> {
        let inner = &self.inner;
        (0..inner.header.slots)
            .filter_map(|i| {
                let s = inner.slot_repr(i);
                let alive = i == inner.slot || slot_alive(inner.fd.as_fd(), i);
                (alive || s.state.load(Ordering::Acquire) != SLOT_FREE).then(|| super::AttacherInfo {
                    slot: i,
                    process: ProcessId {
                        pid: s.pid.load(Ordering::Relaxed),
                        start_time: s.start_time.load(Ordering::Relaxed),
                    },
                    attached_unix_ns: s.attached_unix_ns.load(Ordering::Relaxed),
                    alive,
                })
            })
            .collect()
    }

    /// The current generation of attach slot `slot` (its occupant's token
    /// is `Token::new(slot, gen)`), if the slot exists.
    pub fn slot_generation(&self, slot: usize) -> Option<u32> {
        (slot < self.inner.header.slots)
            .then(|| Token::wrap_gen(self.inner.slot_repr(slot).gen.load(Ordering::Acquire)))
    }

    /// The processes attached now, this handle included.
    pub fn attachers(&self) -> Vec<ProcessId> {
        let inner = &self.inner;
        (0..inner.header.slots)
            .filter(|&i| i == inner.slot || slot_alive(inner.fd.as_fd(), i))
            .map(|i| {
                let s = inner.slot_repr(i);
                ProcessId {
                    pid: s.pid.load(Ordering::Relaxed),
                    start_time: s.start_time.load(Ordering::Relaxed),
                }
            })
            .collect()
    }
}

impl Liveness for Segment {
    fn token(&self) -> Token {
        self.inner.token
    }

    /// Dead if [`liveness_of`](Segment::liveness_of) says so; a holder
    /// whose liveness the kernel cannot tell counts as alive (a region
    /// decides those with heartbeats and a lease instead).
    fn is_dead(&self, token: Token) -> bool {
        self.liveness_of(token) == Some(false)
    }
}

impl Segment {
    /// Whether the attachment `token` names is alive: `Some(false)` if it
    /// released its slot, or its slot was reused, or its slot's OFD lock is
    /// free (the kernel dropped it when the process died); `None` if the
    /// kernel cannot tell (a file system without OFD locks).
    pub fn liveness_of(&self, token: Token) -> Option<bool> {
        let inner = &self.inner;
        if token == inner.token {
            return Some(true);
        }
        let i = token.slot();
        if i >= inner.header.slots {
            return Some(false);
        }
        // The kernel's record first: the attachment's generation lock is
        // held for as long as it lives, whatever the slot table says.
        if matches!(fs::locked_by_other(inner.fd.as_fd(), gen_lock(i, token.gen())), Ok(true)) {
            return Some(true);
        }
        // Then the slot table (attachments made before generation locks,
        // and slots reused by a later attacher).
        let s = inner.slot_repr(i);
        if Token::wrap_gen(s.gen.load(Ordering::Acquire)) != token.gen()
            || s.state.load(Ordering::Acquire) == SLOT_FREE
        {
            // Released, or reused by a later attacher: that holder is gone.
            return Some(false);
        }
        // Same slot and generation as recorded: the slot's OFD lock decides.
        fs::locked_by_other(inner.fd.as_fd(), slot_lock(i)).ok()
    }

    /// Rewrites this handle's own attach-slot record (its generation and
    /// state) if another process damaged it, so that inspectors and older
    /// builds (which read only the table) see it as it is; returns whether
    /// it did. Liveness does not depend on it (see the generation lock).
    pub(crate) fn restore_own_slot(&self) -> bool {
        let inner = &self.inner;
        if inner.owner_pid != std::process::id() {
            return false; // an observer, or a forked child: not its slot
        }
        let s = inner.slot_repr(inner.slot);
        let gen_ok = Token::wrap_gen(s.gen.load(Ordering::Relaxed)) == inner.token.gen();
        let state = s.state.load(Ordering::Relaxed);
        if gen_ok && (state == SLOT_ATTACHED || state == SLOT_EXITING) {
            return false;
        }
        let st = inner.state.lock().unwrap_or_else(|p| p.into_inner());
        if st.detached {
            return false;
        }
        if !gen_ok {
            s.gen.store(inner.token.gen(), Ordering::Relaxed);
        }
        if state != SLOT_ATTACHED && state != SLOT_EXITING {
            s.state.store(SLOT_ATTACHED, Ordering::Release);
        }
        true
    }

    /// Marks free the attach slots of attachments that died without
    /// detaching (their OFD lock is free), so that inspectors stop listing
    /// them and attachers reuse them first. Their tokens stay dead (a free
    /// slot names nobody). Returns how many it freed. Changes nothing for
    /// a slot whose liveness the kernel cannot tell.
    pub(crate) fn release_dead_slots(&self) -> usize {
        let inner = &self.inner;
        if inner.owner_pid == 0 {
            return 0; // an observer changes nothing
        }
        let fd = inner.fd.as_fd();
        let Ok(_lock) = LifecycleLock::acquire(fd) else { return 0 };
        let mut freed = 0;
        for i in (0..inner.header.slots).filter(|&i| i != inner.slot) {
            let s = inner.slot_repr(i);
            // Under the lifecycle lock nobody attaches or detaches, so a
            // slot whose lock is free now stays free until we are done.
            if s.state.load(Ordering::Acquire) != SLOT_FREE
                && matches!(fs::locked_by_other(fd, slot_lock(i)), Ok(false))
            {
                s.state.store(SLOT_FREE, Ordering::Release);
                freed += 1;
            }
        }
        freed
    }
}

impl std::fmt::Debug for Segment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Segment")
            .field("name", &self.name())
            .field("path", &self.path())
            .field("kind", &self.kind())
            .field("size", &self.size())
            .field("slot", &self.slot())
            .finish()
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        self.inner.detach(false);
        registry_remove(&self.inner);
    }
}

impl Inner {
    pub(super) fn slot_repr(&self, i: usize) -> &SlotRepr {
        assert!(i < self.header.slots);
        // SAFETY: callers only reach here while the mapping is alive
        // (through `&Segment`, or under `state` before unmap), and `i` is a
        // slot of this segment's table.
        unsafe { slot_at(self.map, i) }
    }
}

impl Segment {
    /// The handle over `inner`, whose mapping holds its validated header's
    /// whole layout.
    pub(super) fn of(inner: Inner) -> Segment {
        let inner = Arc::new(inner);
        // SAFETY: `data_offset + data_size <= total_size == map_len`
        // (checked by `Header::decode` / built by `layout`; both callers map
        // `total_size` bytes), so the data area is inside the mapping.
        let data =
            unsafe { NonNull::new_unchecked(inner.map.as_ptr().add(inner.header.data_offset as usize)) };
        let data_size = inner.header.data_size as usize;
        Segment { inner, data, data_size }
    }
}
