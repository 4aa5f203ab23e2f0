//! The identity of a process: its pid plus its start time, so that a pid
//! reused by a new process is never mistaken for the old one.

use std::sync::atomic::{AtomicU64, Ordering};

/// A process as tachyon records it in shared memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct ProcessId {
    /// The process id (in the pid namespace of whoever recorded it).
    pub pid: u32,
    /// When the process started, in clock ticks since boot (field 22 of
    /// `/proc/PID/stat`); 0 when unknown.
    pub start_time: u64,
}

impl ProcessId {
    /// The calling process.
    ///
    /// ```
    /// let me = tachyon::platform::process::ProcessId::current();
    /// assert_eq!(me.pid, std::process::id());
    /// assert!(me.is_alive());
    /// ```
    pub fn current() -> ProcessId {
        // Cached per pid, so a forked child computes its own.
        static CACHE: AtomicU64 = AtomicU64::new(0);
        static CACHE_PID: AtomicU64 = AtomicU64::new(0);
        let pid = std::process::id();
        if CACHE_PID.load(Ordering::Acquire) == u64::from(pid) {
            return ProcessId { pid, start_time: CACHE.load(Ordering::Relaxed) };
        }
        let start_time = start_time_of(pid).unwrap_or(0);
        CACHE.store(start_time, Ordering::Relaxed);
        CACHE_PID.store(u64::from(pid), Ordering::Release);
        ProcessId { pid, start_time }
    }

    /// Whether this very process (same pid, same start time) still runs in
    /// the caller's pid namespace.
    pub fn is_alive(&self) -> bool {
        match start_time_of(self.pid) {
            Some(t) => self.start_time == 0 || t == self.start_time,
            None => false,
        }
    }
}

/// The start time of `pid`, or `None` if no such process is visible.
pub fn start_time_of(pid: u32) -> Option<u64> {
    if pid == 0 {
        return None;
    }
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces or
    // parentheses itself, so count fields from the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    // After ')' come field 3 (state) onwards; start time is field 22.
    rest.split_ascii_whitespace().nth(22 - 3)?.parse().ok()
}

/// The effective user id of the caller.
pub fn euid() -> u32 {
    rustix::process::geteuid().as_raw()
}
