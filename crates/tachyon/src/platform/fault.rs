//! Fault injection for the crash tests, in debug builds only: a process
//! whose environment has `TACHYON_FAULT=<name>` SIGKILLs itself when it
//! reaches the point of that name, so a test can kill a process at exactly
//! the instruction whose window it checks. Release builds compile every
//! point to nothing.
//!
//! The points: `pool-pop-announced` (a free-list pop announced, not yet
//! completed), `pool-push-announced` (likewise a push), `publish-queued` (a
//! chunk marked QUEUED, its cell not yet claimed), `receive-claimed` (a
//! consumer's read claim made, its chunk not yet taken), `receive-held`
//! (the chunk taken, the cell not yet freed), `redeliver-queued` (recovery
//! marked a message QUEUED again, its descriptor not yet committed).

/// Dies here (SIGKILL) if `TACHYON_FAULT` names this point.
#[cfg(all(debug_assertions, not(tachyon_loom)))]
pub(crate) fn point(name: &str) {
    static WANTED: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    if WANTED.get_or_init(|| std::env::var("TACHYON_FAULT").ok()).as_deref() == Some(name) {
        let _ = rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::KILL);
    }
}

/// Nothing: fault points exist in debug builds only.
#[cfg(not(all(debug_assertions, not(tachyon_loom))))]
#[inline(always)]
#[cfg_attr(tachyon_loom, allow(dead_code))]
pub(crate) fn point(_name: &str) {}
