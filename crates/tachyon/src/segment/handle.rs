//! The segment handle: create, open, attach, detach, remove.
//!
//! Invariant: every tachyon process that adds, removes or reuses the *name*
//! or an *attach slot* of a segment file holds that file's lifecycle lock
//! (an OFD lock on [`LIFECYCLE_LOCK`]) while it does so, and an attach slot
//! is in use exactly while some open file holds the OFD lock on its byte.
//! Hence "no slot lock is held" means "nobody is attached", and a remover
//! that checked this under the lifecycle lock cannot race an attacher.
//! A new segment is built in an unnamed file (`O_TMPFILE`) and linked under
//! its name only once complete, with its creator's slot already held, so no
//! process ever sees a half-built segment.

use super::header::{
    gen_lock, layout, slot_lock, Header, SlotRepr, HEADER_SIZE, LIFECYCLE_LOCK, SLOT_ATTACHED, SLOT_EXITING,
    SLOT_FREE, SLOT_SIZE,
};
use super::name::SegmentName;
use super::{Kind, Liveness, ShmSafe, Token, GEN_BITS, MAX_SLOTS};
use crate::error::{Corruption, Error, Result};
use crate::platform::atomic::{AtomicU64, Ordering};
use crate::platform::fs::{self, FileInfo};
use crate::platform::process::{euid, ProcessId};
use rustix::fd::{AsFd, OwnedFd};
use std::io;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::atomic::AtomicU8;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime};

/// How long attach, detach and remove wait for another process's brief
/// hold on the lifecycle lock.
const LIFECYCLE_WAIT: Duration = Duration::from_secs(5);
/// How many times open/create retry when the file changes under them.
const RETRIES: usize = 16;

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
    inner: Arc<Inner>,
    data: NonNull<u8>,
    data_size: usize,
}

// SAFETY: the handle only holds a pointer to a shared mapping that lives as
// long as the handle; all access to shared bytes goes through atomics or
// raw copies, never through references that assume exclusivity.
unsafe impl Send for Segment {}
// SAFETY: as above; `&Segment` methods are safe to call from any thread.
unsafe impl Sync for Segment {}

struct Inner {
    name: SegmentName,
    path: PathBuf,
    fd: OwnedFd,
    file: FileInfo,
    header: Header,
    slot: usize,
    token: Token,
    /// The process that attached; a forked child must not detach for it.
    owner_pid: u32,
    map: NonNull<u8>,
    map_len: usize,
    /// `true` once detached; guards the mapping against use after unmap.
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    detached: bool,
    unmapped: bool,
}

// SAFETY: `map` points to a shared mapping, only touched through atomics,
// and only while `state` says it is still mapped.
unsafe impl Send for Inner {}
// SAFETY: as above.
unsafe impl Sync for Inner {}

/// Options for creating or opening a segment. `Segment::create` and
/// `Segment::open` are shorthands for the defaults.
///
/// ```
/// use tachyon::{Kind, Segment};
/// # let name = format!("doc-builder-{}", std::process::id());
/// let seg = Segment::builder(&name).size(8192).max_attachers(4).create()?;
/// assert_eq!(seg.kind(), Kind::RAW);
/// let again = Segment::builder(&name).kind(Kind::RAW).open()?;
/// assert_eq!(again.size(), 8192);
/// # Ok::<(), tachyon::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct SegmentBuilder {
    name: String,
    size: usize,
    kind: Kind,
    slots: usize,
    persistent: bool,
    geometry: Option<[u64; 4]>,
}

impl SegmentBuilder {
    /// Words of the object's own header that never change (its geometry),
    /// kept sealed in the segment header as their second copy (create
    /// only): [`Segment::restore_geometry`] repairs the object's header
    /// from them.
    pub(crate) fn geometry(mut self, words: [u64; 4]) -> Self {
        self.geometry = Some(words);
        self
    }

    /// Size of the caller's data area in bytes (create only).
    pub fn size(mut self, size: usize) -> Self {
        self.size = size;
        self
    }

    /// The kind recorded at create and required at open (default
    /// [`Kind::RAW`]).
    pub fn kind(mut self, kind: Kind) -> Self {
        self.kind = kind;
        self
    }

    /// How many handles may be attached at once, across all processes
    /// (create only; 1 to 128, default 128).
    pub fn max_attachers(mut self, n: usize) -> Self {
        self.slots = n;
        self
    }

    /// Makes the segment outlive its users (create only; default off): it
    /// stays when its last attacher closes or dies, with its contents, until
    /// [`Segment::remove`]. Opening it finds it even when nobody is
    /// attached.
    pub fn persistent(mut self, yes: bool) -> Self {
        self.persistent = yes;
        self
    }

    /// Creates the segment, zero-filled. A stale segment of the same name
    /// (all attachers dead) is removed first.
    pub fn create(&self) -> Result<Segment> {
        create(self, |_| Ok(()))
    }

    /// Creates the segment and runs `init` on it *before* it gets its
    /// name: no other process can see the segment until `init` returned
    /// `Ok`. Higher layers write their own headers this way. If `init`
    /// fails, nothing is left behind and its error is returned.
    ///
    /// ```
    /// use std::sync::atomic::{AtomicU64, Ordering};
    /// use tachyon::Segment;
    /// # let name = format!("doc-init-{}", std::process::id());
    /// let seg = Segment::builder(&name).size(64).create_with(|s| {
    ///     s.get::<AtomicU64>(0)?.store(42, Ordering::Relaxed);
    ///     Ok(())
    /// })?;
    /// let other = Segment::open(&name)?;
    /// assert_eq!(other.get::<AtomicU64>(0)?.load(Ordering::Relaxed), 42);
    /// # drop(seg);
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn create_with(&self, init: impl FnOnce(&Segment) -> Result<()>) -> Result<Segment> {
        create(self, init)
    }

    /// Opens an existing segment of the builder's kind.
    pub fn open(&self) -> Result<Segment> {
        open(&self.name, self.kind)
    }

    /// Maps an existing segment of the builder's kind for reading only,
    /// without attaching: takes no attach slot, changes nothing in the file
    /// (not even a stale one), and never removes it. The mapping is
    /// private, so a write through it stays in this process. For
    /// inspectors; the handle's [`slot`](Segment::slot) is `usize::MAX`.
    pub(crate) fn observe(&self) -> Result<Segment> {
        observe(&self.name, self.kind)
    }

    /// Opens the segment, creating it if it does not exist.
    pub fn create_or_open(&self) -> Result<Segment> {
        self.create_or_open_with(|_| Ok(()))
    }

    /// [`create_or_open`](Self::create_or_open), running `init` as
    /// [`create_with`](Self::create_with) does when it creates.
    pub fn create_or_open_with(&self, mut init: impl FnMut(&Segment) -> Result<()>) -> Result<Segment> {
        for _ in 0..RETRIES {
            match open(&self.name, self.kind) {
                Err(Error::NotFound { .. }) => {}
                other => return other,
            }
            match create(self, &mut init) {
                Err(Error::AlreadyExists { .. }) => {}
                other => return other,
            }
        }
        // Created and removed by others under our feet every time.
        Err(Error::timeout("a stable segment to create or open (others kept creating and removing it)", None))
    }
}

impl Segment {
    /// A builder for the less common options (kind, attach slots).
    pub fn builder(name: &str) -> SegmentBuilder {
        SegmentBuilder {
            name: name.to_owned(),
            size: 0,
            kind: Kind::RAW,
            slots: MAX_SLOTS,
            persistent: false,
            geometry: None,
        }
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
        open(name, Kind::RAW)
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
        let name = SegmentName::parse(name)?;
        let path = name.path();
        let fd = open_checked(&name, &path)?;
        let _lock = LifecycleLock::acquire(fd.as_fd())?;
        let info = fs::info(fd.as_fd()).map_err(|e| Error::io("fstat", e))?;
        if info.nlink == 0 || !names_file(&path, &info) {
            return Err(Error::NotFound { name: name.given });
        }
        fs::unlink(&path).map_err(|e| map_io(e, &name, "remove"))
    }

    /// Whether a live segment of that name exists. A stale one (every
    /// attacher dead) counts as absent. Changes nothing.
    pub fn exists(name: &str) -> Result<bool> {
        let name = SegmentName::parse(name)?;
        let path = name.path();
        let fd = match fs::open_readonly(&path) {
            Ok(fd) => fd,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(map_io(e, &name, "open")),
        };
        let info = check_file(&name, fd.as_fd())?;
        let header = read_header(fd.as_fd(), &info)?;
        Ok(header.persistent || any_live(fd.as_fd(), header.slots))
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
    fn slot_repr(&self, i: usize) -> &SlotRepr {
        assert!(i < self.header.slots);
        // SAFETY: callers only reach here while the mapping is alive
        // (through `&Segment`, or under `state` before unmap), and `i` is a
        // slot of this segment's table.
        unsafe { slot_at(self.map, i) }
    }

    /// Gives up the attach slot; removes the file if nobody else is
    /// attached. Runs once; `unmap` also releases the mapping.
    ///
    /// At process exit (`at_exit`), other threads may still be running and
    /// holding claims under this handle's token, so the slot is not given
    /// up (the kernel drops its OFD lock at `_exit`); only the name is
    /// removed if no other attacher is left, and nothing is unmapped.
    fn detach(&self, at_exit: bool) {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if !st.detached {
            st.detached = true;
            // (An observer's `owner_pid` is 0: it has no slot to give up.)
            if std::process::id() == self.owner_pid {
                self.release_slot(!at_exit);
            }
        }
        if !at_exit && !st.unmapped {
            st.unmapped = true;
            // SAFETY: `map`/`map_len` are the mapping made at attach; this
            // runs when the last `Segment` referring to it is dropped, and
            // `state.unmapped` stops every later access (atexit included).
            unsafe { fs::unmap(self.map, self.map_len) };
        }
    }

    /// Removes the file if nobody else is attached; gives up the slot too
    /// when `free_slot`.
    fn release_slot(&self, free_slot: bool) {
        let fd = self.fd.as_fd();
        let lock = LifecycleLock::acquire(fd);
        if free_slot {
            self.slot_repr(self.slot).state.store(SLOT_FREE, Ordering::Release);
            let _ = fs::unlock(fd, gen_lock(self.slot, self.token.gen()), 1);
            let _ = fs::unlock(fd, slot_lock(self.slot), 1);
        } else {
            // Exiting: keep the slot (and our claims) until the kernel ends
            // us, but let a peer that closes after us remove the file.
            self.slot_repr(self.slot).state.store(SLOT_EXITING, Ordering::Release);
        }
        // Our own slot lock (if still held) is not reported by `any_live`:
        // it belongs to this open file.
        // Without the lifecycle lock we cannot safely decide to remove the
        // file; leave it (a later create or open cleans it up).
        if lock.is_ok()
            && !self.header.persistent
            && !any_live(fd, self.header.slots)
            && names_file(&self.path, &self.file)
        {
            let _ = fs::unlink(&self.path);
        }
    }
}

/// The attach slot `i` of the mapping at `map`.
///
/// # Safety
/// `map` must be a live mapping of a segment whose header was validated with
/// more than `i` slots, and must stay mapped for `'a`.
unsafe fn slot_at<'a>(map: NonNull<u8>, i: usize) -> &'a SlotRepr {
    // SAFETY: the slot table lies inside the mapping before the data area
    // (`layout`), slots are 32-byte aligned from a page-aligned base, and
    // `SlotRepr` is all atomics, valid for any bits (caller's promise for
    // the rest).
    unsafe { &*map.as_ptr().add(HEADER_SIZE + i * SLOT_SIZE).cast::<SlotRepr>() }
}

/// The lifecycle lock, held while attaching, detaching or removing.
struct LifecycleLock<'a>(rustix::fd::BorrowedFd<'a>);

impl<'a> LifecycleLock<'a> {
    fn acquire(fd: rustix::fd::BorrowedFd<'a>) -> Result<Self> {
        let deadline = Instant::now() + LIFECYCLE_WAIT;
        let mut pause = Duration::from_micros(50);
        loop {
            if fs::try_lock(fd, LIFECYCLE_LOCK, 1).map_err(|e| Error::io("lock segment file", e))? {
                return Ok(LifecycleLock(fd));
            }
            if Instant::now() >= deadline {
                return Err(Error::timeout("the segment's lifecycle lock", Some(LIFECYCLE_WAIT)));
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(5));
        }
    }
}

impl Drop for LifecycleLock<'_> {
    fn drop(&mut self) {
        let _ = fs::unlock(self.0, LIFECYCLE_LOCK, 1);
    }
}

fn slot_alive(fd: rustix::fd::BorrowedFd<'_>, i: usize) -> bool {
    // If the kernel cannot tell, assume alive: never remove a live segment.
    fs::locked_by_other(fd, slot_lock(i)).unwrap_or(true)
}

/// Whether an attacher that keeps the file is alive: a slot whose OFD
/// lock another open file holds, unless the slot is marked exiting.
fn any_live(fd: rustix::fd::BorrowedFd<'_>, slots: usize) -> bool {
    let mut table = vec![0u8; slots * SLOT_SIZE];
    let states = fs::read_exact_at(fd, &mut table, HEADER_SIZE as u64).is_ok();
    (0..slots).any(|i| {
        let at = i * SLOT_SIZE;
        let exiting = states && table[at..at + 4] == SLOT_EXITING.to_le_bytes();
        !exiting && slot_alive(fd, i)
    })
}

/// Whether `path` still names the file described by `info`.
fn names_file(path: &Path, info: &FileInfo) -> bool {
    fs::identity_at(path).is_ok_and(|id| id == (info.dev, info.ino))
}

fn map_io(e: io::Error, name: &SegmentName, doing: &str) -> Error {
    match e.raw_os_error() {
        Some(libc::ENOENT) => Error::NotFound { name: name.given.clone() },
        Some(libc::ELOOP) => Error::PermissionDenied {
            what: format!("{} is a symbolic link; tachyon does not follow links", name.path().display()),
        },
        Some(libc::EACCES) | Some(libc::EPERM) => {
            Error::PermissionDenied { what: format!("cannot {doing} {}: {e}", name.path().display()) }
        }
        Some(libc::EISDIR) => Error::corrupt(Corruption::NotARegularFile),
        _ => Error::io(format!("{doing} {}", name.path().display()), e),
    }
}

/// Checks that an opened file is a regular file of the caller's.
fn check_file(name: &SegmentName, fd: rustix::fd::BorrowedFd<'_>) -> Result<FileInfo> {
    let info = fs::info(fd).map_err(|e| Error::io("fstat", e))?;
    if !info.regular {
        return Err(Error::corrupt(Corruption::NotARegularFile));
    }
    if info.uid != euid() {
        return Err(Error::PermissionDenied {
            what: format!(
                "{} belongs to uid {}, not to you (uid {}); only the user who created a segment may use it",
                name.path().display(),
                info.uid,
                euid()
            ),
        });
    }
    Ok(info)
}

fn open_checked(name: &SegmentName, path: &Path) -> Result<OwnedFd> {
    let fd = fs::open_existing(path).map_err(|e| map_io(e, name, "open"))?;
    check_file(name, fd.as_fd())?;
    Ok(fd)
}

fn read_header(fd: rustix::fd::BorrowedFd<'_>, info: &FileInfo) -> Result<Header> {
    let mut buf = [0u8; HEADER_SIZE];
    let n = (info.size.min(HEADER_SIZE as u64)) as usize;
    fs::read_exact_at(fd, &mut buf[..n], 0).map_err(|e| match e.kind() {
        io::ErrorKind::UnexpectedEof => {
            Error::corrupt(Corruption::Truncated { expected: HEADER_SIZE as u64, actual: info.size })
        }
        _ => Error::io("read segment header", e),
    })?;
    Header::decode(&buf[..n], info.size)
}

/// Rewrites a header one of whose two copies of the fixed part is
/// damaged (best effort: a failure leaves it to the next open, which reads
/// the good copy just the same).
fn heal_header(fd: rustix::fd::BorrowedFd<'_>) {
    let mut buf = [0u8; HEADER_SIZE];
    if fs::read_exact_at(fd, &mut buf, 0).is_ok() {
        if let Some(img) = Header::repair(&buf) {
            let _ = rustix::io::pwrite(fd, &img, 0);
        }
    }
}

fn now_unix_ns() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos().min(u128::from(u64::MAX)) as u64)
}

/// Maps a validated file, claims a free slot, and registers the handle.
/// The caller holds the lifecycle lock (or the file is still unnamed).
fn attach(name: SegmentName, path: PathBuf, fd: OwnedFd, file: FileInfo, header: Header) -> Result<Segment> {
    let map_len = header.total_size as usize;
    let map = fs::map_shared(fd.as_fd(), map_len).map_err(|e| Error::io("mmap segment", e))?;
    let me = ProcessId::current();
    let mut claimed = None;
    // Free slots first, so that a dead attacher's record stays visible to
    // inspectors (and to recovery) for as long as there is room.
    let free_first = (0..header.slots)
        // SAFETY: `map` is alive here and `i < header.slots`.
        .filter(|&i| unsafe { slot_at(map, i) }.state.load(Ordering::Acquire) == SLOT_FREE)
        .chain(0..header.slots);
    for i in free_first {
        match fs::try_lock(fd.as_fd(), slot_lock(i), 1) {
            Ok(true) => {
                claimed = Some(i);
                break;
            }
            Ok(false) => {}
            Err(e) => {
                // SAFETY: `map` was just mapped with `map_len` and nothing
                // refers into it yet.
                unsafe { fs::unmap(map, map_len) };
                return Err(Error::io("lock attach slot", e));
            }
        }
    }
    let Some(slot) = claimed else {
        // SAFETY: as above.
        unsafe { fs::unmap(map, map_len) };
        return Err(Error::NoSpace {
            what: format!(
                "all {} attach slots of segment {:?} are held by live handles; close some, or create it with more max_attachers",
                header.slots, name.given
            ),
        });
    };
    // SAFETY: `map` is alive until the `Inner` built below unmaps it, and
    // `slot < header.slots`.
    let s = unsafe { slot_at(map, slot) };
    // Skip generations that a token cannot tell apart from 0, and any whose
    // generation lock is held (only after damage to the generation word:
    // a holder of it would hold the slot's lock too).
    let mut gen = s.gen.load(Ordering::Relaxed);
    let mut locked = false;
    for _ in 0..8 {
        gen = gen.wrapping_add(1);
        if gen & ((1 << GEN_BITS) - 1) == 0 {
            gen = gen.wrapping_add(1);
        }
        match fs::try_lock(fd.as_fd(), gen_lock(slot, Token::wrap_gen(gen)), 1) {
            Ok(true) => {
                locked = true;
                break;
            }
            Ok(false) => {}
            Err(e) => {
                // SAFETY: as above.
                unsafe { fs::unmap(map, map_len) };
                return Err(Error::io("lock attach generation", e));
            }
        }
    }
    if !locked {
        // SAFETY: as above.
        unsafe { fs::unmap(map, map_len) };
        return Err(Error::corrupt(Corruption::BadField {
            field: "attach slot generation",
            value: u64::from(gen),
        }));
    }
    s.gen.store(gen, Ordering::Relaxed);
    s.pid.store(me.pid, Ordering::Relaxed);
    s.uid.store(euid(), Ordering::Relaxed);
    s.start_time.store(me.start_time, Ordering::Relaxed);
    s.attached_unix_ns.store(now_unix_ns(), Ordering::Relaxed);
    s.state.store(SLOT_ATTACHED, Ordering::Release);
    let seg = Segment::of(Inner {
        name,
        path,
        fd,
        file,
        slot,
        token: Token::new(slot, gen),
        owner_pid: me.pid,
        map,
        map_len,
        header,
        state: Mutex::new(State::default()),
    });
    registry_add(&seg.inner);
    Ok(seg)
}

impl Segment {
    /// The handle over `inner`, whose mapping holds its validated header's
    /// whole layout.
    fn of(inner: Inner) -> Segment {
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

fn open(name: &str, kind: Kind) -> Result<Segment> {
    let name = SegmentName::parse(name)?;
    let path = name.path();
    for _ in 0..RETRIES {
        let fd = open_checked(&name, &path)?;
        let lock = LifecycleLock::acquire(fd.as_fd())?;
        let info = fs::info(fd.as_fd()).map_err(|e| Error::io("fstat", e))?;
        if info.nlink == 0 || !names_file(&path, &info) {
            // Removed or replaced while we were getting the lock: look again.
            continue;
        }
        let header = read_header(fd.as_fd(), &info)?;
        if header.kind != kind {
            return Err(Error::KindMismatch { found: header.kind, expected: kind });
        }
        // One copy of the header's fixed part damaged: restored from the
        // other (under the lifecycle lock; observers only read).
        heal_header(fd.as_fd());
        if !header.persistent && !any_live(fd.as_fd(), header.slots) {
            // Stale: every attacher died without cleaning up.
            let _ = fs::unlink(&path);
            return Err(Error::NotFound { name: name.given });
        }
        let seg = attach(name, path, fd.try_clone().map_err(|e| Error::io("dup", e))?, info, header);
        drop(lock);
        return seg;
    }
    Err(Error::NotFound { name: name.given })
}

fn observe(name: &str, kind: Kind) -> Result<Segment> {
    let name = SegmentName::parse(name)?;
    let path = name.path();
    let fd = fs::open_readonly(&path).map_err(|e| map_io(e, &name, "open"))?;
    let info = check_file(&name, fd.as_fd())?;
    let header = read_header(fd.as_fd(), &info)?;
    if header.kind != kind {
        return Err(Error::KindMismatch { found: header.kind, expected: kind });
    }
    let map_len = header.total_size as usize;
    let map = fs::map_private(fd.as_fd(), map_len).map_err(|e| Error::io("mmap segment", e))?;
    Ok(Segment::of(Inner {
        name,
        path,
        fd,
        file: info,
        slot: usize::MAX,
        token: Token::NOBODY,
        owner_pid: 0,
        map,
        map_len,
        header,
        state: Mutex::new(State::default()),
    }))
}

fn create(b: &SegmentBuilder, init: impl FnOnce(&Segment) -> Result<()>) -> Result<Segment> {
    let name = SegmentName::parse(&b.name)?;
    if b.size == 0 {
        return Err(Error::invalid("a segment's size must be at least 1 byte"));
    }
    if b.slots == 0 || b.slots > MAX_SLOTS {
        return Err(Error::invalid(format!("max_attachers must be 1 to {MAX_SLOTS}, not {}", b.slots)));
    }
    let (data_offset, total_size) = layout(b.slots, b.size as u64)
        .ok_or_else(|| Error::invalid(format!("a segment of {} bytes is too large to map", b.size)))?;
    let path = name.path();
    let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
    let fd = fs::create_unnamed(&dir).map_err(|e| match e.raw_os_error() {
        Some(libc::ENOENT) | Some(libc::ENOTDIR) => Error::io(
            format!(
                "segment directory {} does not exist (set {} to another)",
                dir.display(),
                super::name::DIR_ENV
            ),
            e,
        ),
        Some(libc::EOPNOTSUPP) | Some(libc::EISDIR) => Error::io(
            format!("the file system of {} does not support O_TMPFILE; use a tmpfs", dir.display()),
            e,
        ),
        Some(libc::EACCES) | Some(libc::EPERM) => {
            Error::PermissionDenied { what: format!("cannot create files in {}: {e}", dir.display()) }
        }
        _ => Error::io(format!("create a file in {}", dir.display()), e),
    })?;
    fs::reserve(fd.as_fd(), total_size).map_err(|e| match e.raw_os_error() {
        Some(libc::ENOSPC) | Some(libc::EFBIG) => Error::NoSpace {
            what: format!(
                "{} is full: {} free, {} asked; raise its size or free space",
                dir.display(),
                fs::free_space(&dir).map_or_else(|| "unknown".into(), human),
                human(total_size)
            ),
        },
        _ => Error::io("reserve segment space", e),
    })?;
    let me = ProcessId::current();
    let header = Header {
        kind: b.kind,
        total_size,
        data_offset,
        data_size: b.size as u64,
        slots: b.slots,
        creator_pid: me.pid,
        creator_uid: euid(),
        creator_start: me.start_time,
        created_unix_ns: now_unix_ns(),
        persistent: b.persistent,
        name: name.given.clone(),
        geometry: b.geometry,
    };
    rustix::io::pwrite(&fd, &header.encode(), 0).map_err(|e| Error::io("write segment header", e))?;
    let info = fs::info(fd.as_fd()).map_err(|e| Error::io("fstat", e))?;
    // The unnamed file is private to us: attach (claim slot 0) before it
    // gets a name, so nobody can ever see it without a live attacher.
    let seg = attach(name.clone(), path.clone(), fd, info, header)?;
    init(&seg)?;
    let fd = seg.inner.fd.as_fd();
    for _ in 0..RETRIES {
        if fs::publish(fd, &path).map_err(|e| map_io(e, &name, "create"))? {
            return Ok(seg);
        }
        if !remove_if_stale(&name, &path)? {
            // Dropping `seg` cannot remove the live file: detach only
            // unlinks a path that still names its own file.
            return Err(Error::AlreadyExists { name: name.given });
        }
    }
    Err(Error::AlreadyExists { name: name.given })
}

/// For `create`: if the file at `path` is a valid segment whose attachers
/// all died, remove it and say `true`; if it has a live attacher say
/// `false`; if it is damaged or another user's, say why. A stale segment
/// of another kind is removed too: its name is free again.
fn remove_if_stale(name: &SegmentName, path: &Path) -> Result<bool> {
    let fd = match fs::open_existing(path) {
        Ok(fd) => fd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(true),
        Err(e) => return Err(map_io(e, name, "open")),
    };
    check_file(name, fd.as_fd())?;
    let _lock = LifecycleLock::acquire(fd.as_fd())?;
    let info = fs::info(fd.as_fd()).map_err(|e| Error::io("fstat", e))?;
    if info.nlink == 0 || !names_file(path, &info) {
        return Ok(true); // already gone or replaced: try again
    }
    let header = read_header(fd.as_fd(), &info)?;
    if header.persistent || any_live(fd.as_fd(), header.slots) {
        return Ok(false);
    }
    fs::unlink(path).map_err(|e| map_io(e, name, "remove stale"))?;
    Ok(true)
}

/// Removes a segment found by [`list`](super::list) if it is stale: not
/// persistent, and every attacher dead. Checked again under the segment's
/// lifecycle lock, so a process attaching at the same moment is never
/// robbed of its segment. `Ok(true)` if this call removed it.
///
/// ```
/// use tachyon::segment::{self, reap};
/// for info in segment::list()? {
///     if info.is_stale() && reap(&info)? {
///         println!("removed {}", info.path.display());
///     }
/// }
/// # Ok::<(), tachyon::Error>(())
/// ```
pub fn reap(info: &super::SegmentInfo) -> Result<bool> {
    let file_name = info.path.file_name().and_then(|f| f.to_str()).unwrap_or_default().to_owned();
    let name =
        SegmentName { given: info.name.clone(), scope: info.scope, bare: info.name.clone(), file_name };
    let path = &info.path;
    let fd = match fs::open_existing(path) {
        Ok(fd) => fd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(map_io(e, &name, "open")),
    };
    check_file(&name, fd.as_fd())?;
    let _lock = LifecycleLock::acquire(fd.as_fd())?;
    let file = fs::info(fd.as_fd()).map_err(|e| Error::io("fstat", e))?;
    if file.nlink == 0 || !names_file(path, &file) {
        return Ok(false);
    }
    let header = read_header(fd.as_fd(), &file)?;
    if header.persistent || any_live(fd.as_fd(), header.slots) {
        return Ok(false);
    }
    fs::unlink(path).map_err(|e| map_io(e, &name, "remove stale"))?;
    Ok(true)
}

fn human(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

// ---- normal-exit cleanup ----------------------------------------------------

fn registry() -> &'static Mutex<Vec<Arc<Inner>>> {
    static REGISTRY: OnceLock<Mutex<Vec<Arc<Inner>>>> = OnceLock::new();
    REGISTRY.get_or_init(|| {
        fs::at_exit(detach_all_at_exit);
        Mutex::new(Vec::new())
    })
}

fn registry_add(inner: &Arc<Inner>) {
    registry().lock().unwrap_or_else(|p| p.into_inner()).push(Arc::clone(inner));
}

fn registry_remove(inner: &Arc<Inner>) {
    let mut reg = registry().lock().unwrap_or_else(|p| p.into_inner());
    reg.retain(|x| !Arc::ptr_eq(x, inner));
}

/// Runs at normal process exit: removes the files of segments this process
/// was the last to hold. Slots and mappings stay (other threads may still
/// be running); the kernel releases both at `_exit`.
extern "C" fn detach_all_at_exit() {
    // A thread that holds the registry at exit is mid-open or mid-drop;
    // skip rather than deadlock the exit.
    let Ok(reg) = registry().try_lock() else { return };
    let open: Vec<Arc<Inner>> = reg.clone();
    drop(reg);
    for inner in open {
        inner.detach(true);
    }
}

/// The exit-time cleanup of [`detach_all_at_exit`], for a process about to
/// be ended by a signal (`crate::cleanup_on_termination`): runs on an
/// ordinary thread while the others go on, so it may wait a little (at
/// most `limit`) for a thread that is opening or dropping a segment.
#[cfg(feature = "signals")]
pub(crate) fn detach_all_before_termination(limit: Duration) {
    let deadline = Instant::now() + limit;
    let reg = loop {
        match registry().try_lock() {
            Ok(reg) => break reg,
            Err(std::sync::TryLockError::Poisoned(p)) => break p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(std::sync::TryLockError::WouldBlock) => return,
        }
    };
    let open: Vec<Arc<Inner>> = reg.clone();
    drop(reg);
    for inner in open {
        inner.detach(true);
    }
}
