//! Files in the shared-memory directory, their mappings, and OFD byte-range
//! locks.
//!
//! OFD ("open file description") locks belong to an open file, not to a
//! process: the kernel drops them when the last descriptor of that open
//! file is closed, which includes the death of the process by any signal.
//! A lock held on a byte therefore says "the opener of this file is alive",
//! across pid namespaces too, and PID reuse cannot fake it.

use rustix::fd::{AsRawFd, BorrowedFd, OwnedFd};
use rustix::fs::{self, Mode, OFlags};
use rustix::io::Errno;
use std::io;
use std::path::Path;
use std::ptr::NonNull;

/// What `fstat` tells about an open file.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FileInfo {
    pub uid: u32,
    pub size: u64,
    pub nlink: u64,
    pub dev: u64,
    pub ino: u64,
    pub regular: bool,
}

pub(crate) fn info(fd: BorrowedFd<'_>) -> io::Result<FileInfo> {
    let st = fs::fstat(fd)?;
    Ok(FileInfo {
        uid: st.st_uid,
        size: st.st_size as u64,
        nlink: st.st_nlink as u64,
        dev: st.st_dev as u64,
        ino: st.st_ino as u64,
        regular: fs::FileType::from_raw_mode(st.st_mode) == fs::FileType::RegularFile,
    })
}

/// `(dev, ino)` of the file a path names now, without following a symlink.
pub(crate) fn identity_at(path: &Path) -> io::Result<(u64, u64)> {
    let st = fs::lstat(path)?;
    Ok((st.st_dev as u64, st.st_ino as u64))
}

/// An unnamed file in `dir` (`O_TMPFILE`), mode 0600. It gets a name only
/// when [`publish`] links it, once fully initialised.
pub(crate) fn create_unnamed(dir: &Path) -> io::Result<OwnedFd> {
    let fd = fs::open(dir, OFlags::TMPFILE | OFlags::RDWR | OFlags::CLOEXEC, Mode::RUSR | Mode::WUSR)?;
    // The umask can only remove bits; make the mode exactly 0600 anyway.
    fs::fchmod(&fd, Mode::RUSR | Mode::WUSR)?;
    Ok(fd)
}

/// Gives the unnamed file `fd` the name `path`, atomically and exclusively:
/// `Ok(false)` if the name is taken (by anything, a symlink included).
pub(crate) fn publish(fd: BorrowedFd<'_>, path: &Path) -> io::Result<bool> {
    let proc_path = format!("/proc/self/fd/{}", fd.as_raw_fd());
    match fs::linkat(fs::CWD, proc_path.as_str(), fs::CWD, path, fs::AtFlags::SYMLINK_FOLLOW) {
        Ok(()) => Ok(true),
        Err(Errno::EXIST) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Opens an existing file read-write, refusing symlinks.
pub(crate) fn open_existing(path: &Path) -> io::Result<OwnedFd> {
    Ok(fs::open(path, OFlags::RDWR | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty())?)
}

/// Opens an existing file read-only (for inspection), refusing symlinks.
pub(crate) fn open_readonly(path: &Path) -> io::Result<OwnedFd> {
    Ok(fs::open(path, OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty())?)
}

/// Reserves `len` bytes of backing store, so that a full file system fails
/// here and never as SIGBUS on a later write.
pub(crate) fn reserve(fd: BorrowedFd<'_>, len: u64) -> io::Result<()> {
    Ok(fs::fallocate(fd, fs::FallocateFlags::empty(), 0, len)?)
}

/// Free bytes on the file system holding `dir`.
pub(crate) fn free_space(dir: &Path) -> Option<u64> {
    let st = fs::statvfs(dir).ok()?;
    Some(st.f_bavail.saturating_mul(st.f_frsize))
}

/// Reads exactly `buf.len()` bytes at `offset`; a short file is an error of
/// kind `UnexpectedEof`.
pub(crate) fn read_exact_at(fd: BorrowedFd<'_>, buf: &mut [u8], offset: u64) -> io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        match rustix::io::pread(fd, &mut buf[done..], offset + done as u64) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => done += n,
            Err(Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

pub(crate) fn unlink(path: &Path) -> io::Result<()> {
    Ok(fs::unlink(path)?)
}

/// Maps `len` bytes of `fd` shared and read-write.
pub(crate) fn map_shared(fd: BorrowedFd<'_>, len: usize) -> io::Result<NonNull<u8>> {
    use rustix::mm::{mmap, MapFlags, ProtFlags};
    // SAFETY: a fresh mapping at an address the kernel picks aliases no
    // existing Rust object; the caller checked that the file is at least
    // `len` bytes long so that no page of the mapping lies past its end.
    let ptr = unsafe {
        mmap(std::ptr::null_mut(), len, ProtFlags::READ | ProtFlags::WRITE, MapFlags::SHARED, fd, 0)?
    };
    NonNull::new(ptr.cast()).ok_or_else(|| io::Error::other("mmap returned null"))
}

/// Maps `len` bytes of `fd` privately: reads see the file (pages this
/// process never writes stay the file's pages), writes stay in this
/// process. For observers that must change nothing: a stray write can
/// neither fault nor reach other processes.
pub(crate) fn map_private(fd: BorrowedFd<'_>, len: usize) -> io::Result<NonNull<u8>> {
    use rustix::mm::{mmap, MapFlags, ProtFlags};
    // SAFETY: as in `map_shared`.
    let ptr = unsafe {
        mmap(std::ptr::null_mut(), len, ProtFlags::READ | ProtFlags::WRITE, MapFlags::PRIVATE, fd, 0)?
    };
    NonNull::new(ptr.cast()).ok_or_else(|| io::Error::other("mmap returned null"))
}

/// Unmaps a mapping made by [`map_shared`] or [`map_private`].
///
/// # Safety
/// `ptr`/`len` must be exactly a mapping returned by [`map_shared`], and no
/// reference into it may be used afterwards.
pub(crate) unsafe fn unmap(ptr: NonNull<u8>, len: usize) {
    // SAFETY: guaranteed by the caller.
    let _ = unsafe { rustix::mm::munmap(ptr.as_ptr().cast(), len) };
}

fn flock(kind: libc::c_short, offset: u64, len: u64) -> libc::flock {
    // SAFETY: `flock` is a plain C struct for which all-zero is valid.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = kind;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = offset as libc::off_t;
    fl.l_len = len as libc::off_t;
    fl.l_pid = 0; // must be 0 for OFD locks
    fl
}

/// Tries to take an exclusive OFD lock on `len` bytes at `offset`, without
/// blocking: `Ok(false)` if another open file holds a conflicting lock.
pub(crate) fn try_lock(fd: BorrowedFd<'_>, offset: u64, len: u64) -> io::Result<bool> {
    let fl = flock(libc::F_WRLCK as libc::c_short, offset, len);
    loop {
        // SAFETY: `fd` is an open descriptor and `fl` a valid flock struct
        // that outlives the call.
        let r = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_OFD_SETLK, &fl) };
        if r == 0 {
            return Ok(true);
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EAGAIN) | Some(libc::EACCES) => return Ok(false),
            Some(libc::EINTR) => continue,
            _ => return Err(e),
        }
    }
}

/// Drops an OFD lock this open file holds on `len` bytes at `offset`.
pub(crate) fn unlock(fd: BorrowedFd<'_>, offset: u64, len: u64) -> io::Result<()> {
    let fl = flock(libc::F_UNLCK as libc::c_short, offset, len);
    // SAFETY: as in `try_lock`.
    let r = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_OFD_SETLK, &fl) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Whether some *other* open file holds a lock on the byte at `offset`.
/// Locks held through `fd`'s own open file are not reported.
pub(crate) fn locked_by_other(fd: BorrowedFd<'_>, offset: u64) -> io::Result<bool> {
    if crate::platform::fault::fails("liveness-unknown") {
        return Err(io::Error::from_raw_os_error(libc::ENOLCK));
    }
    let mut fl = flock(libc::F_WRLCK as libc::c_short, offset, 1);
    // SAFETY: as in `try_lock`; F_OFD_GETLK writes into `fl`, which is ours.
    let r = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_OFD_GETLK, &mut fl) };
    if r == 0 {
        Ok(fl.l_type != libc::F_UNLCK as libc::c_short)
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Registers `f` to run when the process exits normally (returning from
/// `main` or `std::process::exit`).
pub(crate) fn at_exit(f: extern "C" fn()) -> bool {
    // SAFETY: `f` is a plain `extern "C" fn()` with static lifetime.
    unsafe { libc::atexit(f) == 0 }
}
