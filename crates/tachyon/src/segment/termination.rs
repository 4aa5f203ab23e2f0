//! Opt-in cleanup when the process is ended by SIGTERM, SIGINT or SIGHUP
//! (cargo feature `signals`).
//!
//! A process that returns from `main` or calls `std::process::exit` removes
//! the segments it was the last to hold (an `atexit` handler, see
//! `registry.rs`). A process ended by a signal runs no such code: its files
//! stay until the next `create` / `open` of their names, `tachyond` or
//! `tyctl reap` notices that nobody is attached. [`cleanup_on_termination`]
//! closes that gap for the polite signals: a background thread waits for
//! them (through `signal-hook`'s self-pipe, since the cleanup takes locks
//! and is not async-signal-safe), runs the exit-time cleanup, and then ends
//! the process the way the signal would have (default disposition restored,
//! signal raised again), so the parent still sees "killed by SIGTERM".

use super::registry::detach_all_before_termination;
use crate::error::{Error, Result};
use signal_hook::consts::signal::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::Signals;
use std::sync::Mutex;
use std::time::Duration;

/// The signals [`cleanup_on_termination`] handles.
const SIGNALS: [libc::c_int; 3] = [SIGTERM, SIGINT, SIGHUP];

/// How long the cleanup waits for a thread that is opening or dropping a
/// segment at that moment before it goes on without the registry.
const REGISTRY_WAIT: Duration = Duration::from_millis(100);

/// Makes SIGTERM, SIGINT (Ctrl+C) and SIGHUP remove this process's
/// segments before the process ends.
///
/// Without it, a process ended by one of these signals leaves the files of
/// the segments it was the last to hold in `/dev/shm` until the next
/// `create` or `open` of their names (or `tachyond`) removes them. With it,
/// a background thread (`tachyon-signals`) waits for the signals; on the
/// first one it runs the same cleanup as a normal exit (detach, and remove
/// the files nobody else is attached to; persistent segments such as bus
/// regions stay, as at exit), then restores the signal's default action and
/// raises it again: the process still dies *of that signal* (exit status
/// "terminated by SIGTERM", shell status 143), it does not exit normally.
///
/// Call it once, early in `main`; later calls do nothing. Use it in
/// programs that do not handle these signals themselves. A program with
/// its own graceful shutdown (tokio's `ctrl_c`, its own `signal-hook`
/// handlers) should not call it, since this handler would end the process
/// in the middle of that shutdown; such a program cleans up by returning
/// from `main`. SIGKILL cannot be caught: see the operations notes
/// (`docs/operations.md`) for what cleans up after it.
///
/// Errors: `Io` if the handlers or the thread cannot be set up.
///
/// ```
/// use tachyon::Segment;
///
/// fn main() -> Result<(), tachyon::Error> {
///     tachyon::cleanup_on_termination()?;
///     # let name = format!("doc-termination-{}", std::process::id());
///     let seg = Segment::create(&name, 4096)?;
///     // ... `kill -TERM <pid>` now removes the file, and the process still
///     // ends with "terminated by SIGTERM".
///     # drop(seg);
///     Ok(())
/// }
/// ```
pub fn cleanup_on_termination() -> Result<()> {
    static INSTALLED: Mutex<bool> = Mutex::new(false);
    let mut installed = INSTALLED.lock().unwrap_or_else(|p| p.into_inner());
    if *installed {
        return Ok(());
    }
    let mut signals =
        Signals::new(SIGNALS).map_err(|e| Error::io("install handlers for SIGTERM, SIGINT and SIGHUP", e))?;
    std::thread::Builder::new()
        .name("tachyon-signals".into())
        .spawn(move || {
            if let Some(signal) = signals.forever().next() {
                detach_all_before_termination(REGISTRY_WAIT);
                // Restores the default action, unblocks and raises the signal
                // (falls back on `abort` if that fails): does not return.
                let _ = signal_hook::low_level::emulate_default_handler(signal);
            }
        })
        .map_err(|e| Error::io("start the tachyon-signals thread", e))?;
    *installed = true;
    Ok(())
}
