//! Attach slots: claiming one for a new handle (attach), giving it up
//! (detach), and telling from the slots' OFD locks whether anyone is still
//! attached. See `lifecycle.rs` for the locking rules.

use super::handle::{Inner, Segment, State};
use super::header::{
    gen_lock, slot_lock, Header, SlotRepr, HEADER_SIZE, SLOT_ATTACHED, SLOT_EXITING, SLOT_FREE, SLOT_SIZE,
};
use super::lifecycle::{names_file, LifecycleLock};
use super::name::SegmentName;
use super::registry::registry_add;
use super::{Token, GEN_BITS};
use crate::error::{Corruption, Error, Result};
use crate::platform::atomic::Ordering;
use crate::platform::fs::{self, FileInfo};
use crate::platform::process::{euid, ProcessId};
use rustix::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::ptr::NonNull;
use std::sync::Mutex;
use std::time::SystemTime;

pub(super) fn now_unix_ns() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos().min(u128::from(u64::MAX)) as u64)
}

/// Maps a validated file, claims a free slot, and registers the handle.
/// The caller holds the lifecycle lock (or the file is still unnamed).
pub(super) fn attach(
    name: SegmentName,
    path: PathBuf,
    fd: OwnedFd,
    file: FileInfo,
    header: Header,
) -> Result<Segment> {
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

impl Inner {
    /// Gives up the attach slot; removes the file if nobody else is
    /// attached. Runs once; `unmap` also releases the mapping.
    ///
    /// At process exit (`at_exit`), other threads may still be running and
    /// holding claims under this handle's token, so the slot is not given
    /// up (the kernel drops its OFD lock at `_exit`); only the name is
    /// removed if no other attacher is left, and nothing is unmapped.
    pub(super) fn detach(&self, at_exit: bool) {
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
pub(super) unsafe fn slot_at<'a>(map: NonNull<u8>, i: usize) -> &'a SlotRepr {
    // SAFETY: the slot table lies inside the mapping before the data area
    // (`layout`), slots are 32-byte aligned from a page-aligned base, and
    // `SlotRepr` is all atomics, valid for any bits (caller's promise for
    // the rest).
    unsafe { &*map.as_ptr().add(HEADER_SIZE + i * SLOT_SIZE).cast::<SlotRepr>() }
}

pub(super) fn slot_alive(fd: rustix::fd::BorrowedFd<'_>, i: usize) -> bool {
    // If the kernel cannot tell, assume alive: never remove a live segment.
    fs::locked_by_other(fd, slot_lock(i)).unwrap_or(true)
}

/// Whether an attacher that keeps the file is alive: a slot whose OFD
/// lock another open file holds, unless the slot is marked exiting.
pub(super) fn any_live(fd: rustix::fd::BorrowedFd<'_>, slots: usize) -> bool {
    let mut table = vec![0u8; slots * SLOT_SIZE];
    let states = fs::read_exact_at(fd, &mut table, HEADER_SIZE as u64).is_ok();
    (0..slots).any(|i| {
        let at = i * SLOT_SIZE;
        let exiting = states && table[at..at + 4] == SLOT_EXITING.to_le_bytes();
        !exiting && slot_alive(fd, i)
    })
}
