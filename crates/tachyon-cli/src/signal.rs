//! Stop requests from SIGTERM and SIGINT: the handler only sets a flag,
//! which the main loop reads between steps, so a pass is never cut short.
//! The handler is installed with `SA_RESETHAND`: a second signal is not
//! caught and ends the process at once (Ctrl-C twice).

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_signal: libc::c_int) {
    // An atomic store is async-signal-safe.
    STOP.store(true, Ordering::SeqCst);
}

/// Catches SIGTERM and SIGINT: the first of them sets the stop flag.
pub fn install() -> io::Result<()> {
    for signal in [libc::SIGTERM, libc::SIGINT] {
        // SAFETY: `sigaction` is a plain C struct for which all zeros is a
        // valid value (no handler, empty flags); every field we rely on is
        // set below.
        let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
        action.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
        action.sa_flags = libc::SA_RESTART | libc::SA_RESETHAND;
        // SAFETY: `action.sa_mask` is a valid, writable `sigset_t`.
        unsafe { libc::sigemptyset(&mut action.sa_mask) };
        // SAFETY: `action` is fully initialised and its handler is an
        // `extern "C" fn(c_int)` that only stores to an atomic; passing a
        // null old-action pointer is allowed.
        if unsafe { libc::sigaction(signal, &action, std::ptr::null_mut()) } != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Whether SIGTERM or SIGINT arrived.
pub fn stop_requested() -> bool {
    STOP.load(Ordering::SeqCst)
}

/// Sleeps for `d`, waking early (within 20 ms) when a stop is requested.
/// Returns `false` if it woke for a stop.
pub fn sleep(d: Duration) -> bool {
    let deadline = Instant::now() + d;
    loop {
        if stop_requested() {
            return false;
        }
        let now = Instant::now();
        if now >= deadline {
            return true;
        }
        std::thread::sleep((deadline - now).min(Duration::from_millis(20)));
    }
}

/// Parses an interval: `500ms`, `2s`, `1.5s`, `1m`, `1h`; a bare number is
/// milliseconds. Zero is refused.
///
/// ```
/// use std::time::Duration;
/// use tachyon_cli::signal::parse_interval;
/// assert_eq!(parse_interval("250"), Ok(Duration::from_millis(250)));
/// assert_eq!(parse_interval("1.5s"), Ok(Duration::from_millis(1500)));
/// assert!(parse_interval("0").is_err());
/// ```
pub fn parse_interval(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: f64 = number.parse().map_err(|_| format!("{text:?} is not a duration (try 500ms, 2s, 1m)"))?;
    let scale = match unit.trim() {
        "" | "ms" => 1e-3,
        "s" => 1.0,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        other => return Err(format!("unknown unit {other:?} (use ms, s, m or h)")),
    };
    let secs = value * scale;
    if !(secs.is_finite() && secs > 0.0 && secs < 1e9) {
        return Err(format!("{text:?} must be more than zero and less than 30 years"));
    }
    let d = Duration::from_secs_f64(secs);
    if d < Duration::from_millis(1) {
        return Err(format!("{text:?} is shorter than 1 ms"));
    }
    Ok(d)
}
