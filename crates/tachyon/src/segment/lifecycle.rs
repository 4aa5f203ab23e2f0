//! A segment file's life: create, open, observe, remove and reap, each
//! under the file's lifecycle lock.
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

use super::attach::{any_live, attach};
use super::builder::SegmentBuilder;
use super::handle::{Inner, Segment, State};
use super::header::{layout, Header, HEADER_SIZE, LIFECYCLE_LOCK};
use super::human;
use super::name::SegmentName;
use super::{Kind, Token, MAX_SLOTS};
use crate::error::{Corruption, Error, Result};
use crate::platform::fs::{self, FileInfo};
use crate::platform::process::{euid, ProcessId};
use rustix::fd::{AsFd, OwnedFd};
use std::io;
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long attach, detach and remove wait for another process's brief
/// hold on the lifecycle lock.
const LIFECYCLE_WAIT: Duration = Duration::from_secs(5);
/// How many times open/create retry when the file changes under them.
pub(super) const RETRIES: usize = 16;

pub(super) fn open(name: &str, kind: Kind) -> Result<Segment> {
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

pub(super) fn observe(name: &str, kind: Kind) -> Result<Segment> {
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

pub(super) fn create(b: &SegmentBuilder, init: impl FnOnce(&Segment) -> Result<()>) -> Result<Segment> {
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
                fs::free_space(&dir).map_or_else(|| "unknown".into(), human::bytes),
                human::bytes(total_size)
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
        created_unix_ns: super::attach::now_unix_ns(),
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

/// [`Segment::remove`]: unlinks the name, under the lifecycle lock.
pub(super) fn remove(name: &str) -> Result<()> {
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

/// [`Segment::exists`]: whether the name has a live attacher (or is
/// persistent); changes nothing.
pub(super) fn exists(name: &str) -> Result<bool> {
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

/// The lifecycle lock, held while attaching, detaching or removing.
pub(super) struct LifecycleLock<'a>(rustix::fd::BorrowedFd<'a>);

impl<'a> LifecycleLock<'a> {
    pub(super) fn acquire(fd: rustix::fd::BorrowedFd<'a>) -> Result<Self> {
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

/// Whether `path` still names the file described by `info`.
pub(super) fn names_file(path: &Path, info: &FileInfo) -> bool {
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
