//! The at-exit registry: the handles this process has open, so that a
//! normal exit (and, with the `signals` feature, a polite signal) detaches
//! them and removes the files nobody else holds.

use super::handle::Inner;
use crate::platform::fs;
use std::sync::{Arc, Mutex, OnceLock};
#[cfg(feature = "signals")]
use std::time::{Duration, Instant};

fn registry() -> &'static Mutex<Vec<Arc<Inner>>> {
    static REGISTRY: OnceLock<Mutex<Vec<Arc<Inner>>>> = OnceLock::new();
    REGISTRY.get_or_init(|| {
        fs::at_exit(detach_all_at_exit);
        Mutex::new(Vec::new())
    })
}

pub(super) fn registry_add(inner: &Arc<Inner>) {
    registry().lock().unwrap_or_else(|p| p.into_inner()).push(Arc::clone(inner));
}

pub(super) fn registry_remove(inner: &Arc<Inner>) {
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
/// be ended by a signal (`cleanup_on_termination`): runs on an
/// ordinary thread while the others go on, so it may wait a little (at
/// most `limit`) for a thread that is opening or dropping a segment.
#[cfg(feature = "signals")]
pub(super) fn detach_all_before_termination(limit: Duration) {
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
