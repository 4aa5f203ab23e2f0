//! Waiting the way Python expects: without the GIL, in slices, handling
//! signals between them.
//!
//! A blocking call of the library is made with a timeout of at most
//! [`SLICE`] and the GIL released, so that other Python threads run; when a
//! slice ends without result, `Python::check_signals` runs the handlers of
//! pending signals (SIGINT raises `KeyboardInterrupt`, which ends the wait)
//! and the next slice starts, until the caller's own timeout has passed.

use crate::errors::IntoPyResult;
use pyo3::prelude::*;
use std::time::{Duration, Instant};
use tachyon::Error;

/// The longest a wait goes without looking at signals: Ctrl+C is handled
/// within about this long.
pub(crate) const SLICE: Duration = Duration::from_millis(50);

/// The C library's timeout convention: negative waits for ever, 0 tries
/// once, more waits that many nanoseconds.
pub(crate) fn timeout_of(timeout_ns: i64) -> Option<Duration> {
    u64::try_from(timeout_ns).ok().map(Duration::from_nanos)
}

/// Runs `attempt(slice)` with the GIL released until it returns something
/// other than an error `again` accepts (a wait that ran out), or `timeout`
/// has passed; signals are handled between attempts. The error of the last
/// attempt is reported as a wait of `timeout` in all.
pub(crate) fn in_slices<T, F>(
    py: Python<'_>,
    timeout: Option<Duration>,
    again: fn(&Error) -> bool,
    attempt: F,
) -> PyResult<T>
where
    T: Send,
    F: FnMut(Option<Duration>) -> tachyon::Result<T> + Send,
{
    // A deadline past what the clock can hold (timeout_ns near 2**63) is
    // none: such a wait ends with its result or a signal.
    let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
    in_slices_until(py, deadline, timeout, again, attempt)
}

/// [`in_slices`] until `deadline` (None: for ever), for a call that waits
/// several times under one timeout (a batch): a wait that runs out is
/// reported as one of `timeout`, the caller's timeout for the whole call.
pub(crate) fn in_slices_until<T, F>(
    py: Python<'_>,
    deadline: Option<Instant>,
    timeout: Option<Duration>,
    again: fn(&Error) -> bool,
    mut attempt: F,
) -> PyResult<T>
where
    T: Send,
    F: FnMut(Option<Duration>) -> tachyon::Result<T> + Send,
{
    loop {
        let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        let slice = left.map_or(SLICE, |l| l.min(SLICE));
        let last = left.is_some_and(|l| l <= SLICE);
        match py.detach(|| attempt(Some(slice))) {
            Err(e) if again(&e) && !last => py.check_signals()?,
            Err(Error::Timeout { what, .. }) => return Err(Error::Timeout { what, waited: timeout }).py(py),
            other => return other.py(py),
        }
    }
}

/// A wait that ran out: the timeout of a receive or a publish.
pub(crate) fn timed_out(e: &Error) -> bool {
    e.is_timeout()
}

/// A wait that ran out in a loan or send: for a chunk of the pool
/// (`PoolExhausted`) or room in a partition (`Timeout`).
pub(crate) fn no_room(e: &Error) -> bool {
    matches!(e, Error::Timeout { .. } | Error::PoolExhausted { .. })
}
