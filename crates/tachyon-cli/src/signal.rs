//! Stop requests from SIGTERM and SIGINT, through `signal-hook`: the first
//! of them sets a flag, which the main loop reads between steps, so a pass
//! is never cut short; a second one, once the flag is set, ends the process
//! at once with status 1 (Ctrl-C twice). Other signals (SIGHUP among them)
//! keep their default action.

use signal_hook::consts::{SIGINT, SIGTERM};
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

static STOP: LazyLock<Arc<AtomicBool>> = LazyLock::new(Arc::default);

/// Catches SIGTERM and SIGINT: the first of them sets the stop flag, a
/// second one exits.
pub fn install() -> io::Result<()> {
    for signal in [SIGTERM, SIGINT] {
        // Registered first, so it runs before the flag is set: it sees the
        // flag set only from the second signal on.
        signal_hook::flag::register_conditional_shutdown(signal, 1, Arc::clone(&STOP))?;
        signal_hook::flag::register(signal, Arc::clone(&STOP))?;
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
    let start = Instant::now();
    loop {
        if stop_requested() {
            return false;
        }
        let Some(left) = d.checked_sub(start.elapsed()).filter(|l| !l.is_zero()) else { return true };
        std::thread::sleep(left.min(Duration::from_millis(20)));
    }
}

/// Parses an interval with `humantime`: `500ms`, `2s`, `1m`, `1h`,
/// `1s 500ms`; a bare number is milliseconds. From 1 ms to about 30 years.
///
/// ```
/// use std::time::Duration;
/// use tachyon_cli::signal::parse_interval;
/// assert_eq!(parse_interval("250"), Ok(Duration::from_millis(250)));
/// assert_eq!(parse_interval("1s 500ms"), Ok(Duration::from_millis(1500)));
/// assert_eq!(parse_interval("2m"), Ok(Duration::from_secs(120)));
/// assert!(parse_interval("0").is_err());
/// assert!(parse_interval("soon").is_err());
/// ```
pub fn parse_interval(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let d = if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        let ms: u64 = text.parse().map_err(|e| format!("{text:?} is not a duration: {e}"))?;
        Duration::from_millis(ms)
    } else {
        humantime::parse_duration(text)
            .map_err(|e| format!("{text:?} is not a duration ({e}); try 500ms, 2s, 1m"))?
    };
    if d < Duration::from_millis(1) {
        return Err(format!("{text:?} is shorter than 1 ms"));
    }
    if d >= Duration::from_secs(1_000_000_000) {
        return Err(format!("{text:?} is longer than 30 years"));
    }
    Ok(d)
}
