//! Error codes, their texts, and the boundary every entry point runs
//! behind (argument checks, panic catching, the thread's last message).

use std::cell::RefCell;
use std::ffi::{c_char, c_int, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use tachyon_core::Error;

/// The result codes: `TY_OK` (0) or a negative error, one per kind of
/// failure a C caller can act on. Functions return them as `int`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ty_status_t {
    /// Success.
    TY_OK = 0,
    /// An argument is invalid: a NULL pointer, a value out of range, a handle
    /// that is not (or no longer) what the call expects, a name that cannot be
    /// a segment name. Nothing was done.
    TY_EINVAL = -1,
    /// No region, topic or object of that name exists.
    TY_ENOENT = -2,
    /// A region, topic or object of that name already exists.
    TY_EEXIST = -3,
    /// The timeout passed before the call could complete.
    TY_ETIMEDOUT = -4,
    /// A non-blocking call would have waited: the partition is full
    /// (`ty_try_publish`, `ty_try_send`) or empty (`ty_try_subscribe`).
    TY_EAGAIN = -5,
    /// No room: /dev/shm is full, or a table inside the region is (too many
    /// topics, ring arena used up).
    TY_ENOSPC = -6,
    /// Permission denied (the object belongs to another user).
    TY_EPERM = -7,
    /// Shared memory holds something that cannot be right (damaged segment,
    /// or a corrupt message descriptor, which was dropped).
    TY_ECORRUPT = -8,
    /// The segment was written by another layout version of tachyon.
    TY_EVERSION = -9,
    /// The segment holds another kind of object (e.g. a ring opened as a
    /// region).
    TY_EKIND = -10,
    /// The message is larger than what can hold one (1 MiB on the bus, the
    /// node size of a ring).
    TY_EMSGSIZE = -11,
    /// The caller's buffer is too small for the item; nothing was consumed.
    TY_ENOBUFS = -12,
    /// The region's payload pool has no free chunk of the size needed (before
    /// the timeout): consumers hold too many messages, or the class needs more
    /// weight in `ty_region_conf_t.class_weights`.
    TY_EPOOL = -13,
    /// The other end closed the channel, or the handle was ended (a group
    /// handle after `ty_group_leave`).
    TY_ECLOSED = -14,
    /// The peer process died.
    TY_EPEERDIED = -15,
    /// The RPC peer's handler failed; `ty_last_error` has its text.
    TY_EREMOTE = -16,
    /// An operating-system call failed; `ty_last_error` says which and why.
    TY_EIO = -17,
    /// An object of that name exists with another configuration than the one
    /// asked for (`ty_region_open` / `ty_topic_create` with a configuration);
    /// `ty_last_error` names the field.
    TY_EINCOMPAT = -18,
    /// The RPC channel already has a client.
    TY_EBUSY = -19,
    /// A bug in tachyon (a panic, caught at the boundary) or an error this
    /// version of the C library does not know; `ty_last_error` says more.
    TY_EINTERNAL = -20,
    /// `ty_interrupt` was called while the call waited (a signal handler's
    /// way to stop a blocked consumer); nothing was taken.
    TY_EINTR = -21,
}

// The codes as the `int`s the functions return.
pub(crate) const TY_OK: c_int = ty_status_t::TY_OK as c_int;
pub(crate) const TY_EINVAL: c_int = ty_status_t::TY_EINVAL as c_int;
pub(crate) const TY_ENOENT: c_int = ty_status_t::TY_ENOENT as c_int;
pub(crate) const TY_EEXIST: c_int = ty_status_t::TY_EEXIST as c_int;
pub(crate) const TY_ETIMEDOUT: c_int = ty_status_t::TY_ETIMEDOUT as c_int;
pub(crate) const TY_EAGAIN: c_int = ty_status_t::TY_EAGAIN as c_int;
pub(crate) const TY_ENOSPC: c_int = ty_status_t::TY_ENOSPC as c_int;
pub(crate) const TY_EPERM: c_int = ty_status_t::TY_EPERM as c_int;
pub(crate) const TY_ECORRUPT: c_int = ty_status_t::TY_ECORRUPT as c_int;
pub(crate) const TY_EVERSION: c_int = ty_status_t::TY_EVERSION as c_int;
pub(crate) const TY_EKIND: c_int = ty_status_t::TY_EKIND as c_int;
pub(crate) const TY_EMSGSIZE: c_int = ty_status_t::TY_EMSGSIZE as c_int;
pub(crate) const TY_ENOBUFS: c_int = ty_status_t::TY_ENOBUFS as c_int;
pub(crate) const TY_EPOOL: c_int = ty_status_t::TY_EPOOL as c_int;
pub(crate) const TY_ECLOSED: c_int = ty_status_t::TY_ECLOSED as c_int;
pub(crate) const TY_EPEERDIED: c_int = ty_status_t::TY_EPEERDIED as c_int;
pub(crate) const TY_EREMOTE: c_int = ty_status_t::TY_EREMOTE as c_int;
pub(crate) const TY_EIO: c_int = ty_status_t::TY_EIO as c_int;
pub(crate) const TY_EINCOMPAT: c_int = ty_status_t::TY_EINCOMPAT as c_int;
pub(crate) const TY_EBUSY: c_int = ty_status_t::TY_EBUSY as c_int;
pub(crate) const TY_EINTERNAL: c_int = ty_status_t::TY_EINTERNAL as c_int;
pub(crate) const TY_EINTR: c_int = ty_status_t::TY_EINTR as c_int;

/// The code of a Rust error. One code per kind of error that C can act on.
pub(crate) fn code_of(e: &Error) -> c_int {
    match e {
        Error::NotFound { .. } | Error::TopicNotFound { .. } => TY_ENOENT,
        Error::AlreadyExists { .. } | Error::TopicExists { .. } => TY_EEXIST,
        Error::Timeout { .. } => TY_ETIMEDOUT,
        Error::Full { .. } => TY_EAGAIN,
        Error::NoSpace { .. } => TY_ENOSPC,
        Error::PermissionDenied { .. } => TY_EPERM,
        Error::InvalidName { .. } | Error::InvalidArgument { .. } => TY_EINVAL,
        Error::Corrupt { .. } => TY_ECORRUPT,
        Error::VersionMismatch { .. } => TY_EVERSION,
        Error::KindMismatch { .. } | Error::TypeMismatch { .. } => TY_EKIND,
        Error::MessageTooLarge { .. } => TY_EMSGSIZE,
        Error::BufferTooSmall { .. } => TY_ENOBUFS,
        Error::PoolExhausted { .. } => TY_EPOOL,
        Error::Closed => TY_ECLOSED,
        Error::PeerDied => TY_EPEERDIED,
        Error::Remote(_) => TY_EREMOTE,
        Error::Io { .. } => TY_EIO,
        Error::Incompatible { .. } => TY_EINCOMPAT,
        Error::ChannelBusy { .. } => TY_EBUSY,
        Error::Interrupted => TY_EINTR,
        _ => TY_EINTERNAL,
    }
}

/// Why an entry point failed: a code and the message for `ty_last_error`.
pub(crate) struct Fail {
    pub(crate) code: c_int,
    pub(crate) message: String,
}

impl From<Error> for Fail {
    fn from(e: Error) -> Self {
        Fail { code: code_of(&e), message: e.to_string() }
    }
}

/// A `TY_EINVAL` failure saying what is wrong.
pub(crate) fn invalid(what: impl Into<String>) -> Fail {
    Fail { code: TY_EINVAL, message: what.into() }
}

/// What an entry point's body returns.
pub(crate) type Res<T = c_int> = Result<T, Fail>;

thread_local! {
    static LAST: RefCell<CString> = RefCell::new(CString::default());
}

fn set_last(message: &str) {
    // A message with a NUL byte in it is cut there.
    let text = message.split('\0').next().unwrap_or_default();
    let text = CString::new(text).unwrap_or_default();
    // `try_with`: during thread teardown the message is simply not kept.
    let _ = LAST.try_with(|last| *last.borrow_mut() = text);
}

/// Runs an entry point's body: a panic becomes `TY_EINTERNAL`, a failure
/// its code (and the thread's last message). Success returns the body's
/// value (`TY_OK` or a count).
pub(crate) fn guard(body: impl FnOnce() -> Res) -> c_int {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(code)) => code,
        Ok(Err(fail)) => {
            set_last(&fail.message);
            fail.code
        }
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".into());
            set_last(&format!("internal error (a bug in tachyon, please report it): {what}"));
            TY_EINTERNAL
        }
    }
}

/// Like [`guard`], for a function that returns nothing (close): a panic is
/// swallowed.
pub(crate) fn guard_void(body: impl FnOnce()) {
    let _ = guard(|| {
        body();
        Ok(TY_OK)
    });
}

/// A C string argument as `&str`.
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string that stays valid and
/// unchanged for `'a`.
pub(crate) unsafe fn arg_str<'a>(p: *const c_char, what: &str) -> Res<&'a str> {
    if p.is_null() {
        return Err(invalid(format!("{what} is NULL")));
    }
    // SAFETY: not NULL; NUL-terminated and valid for 'a by the contract.
    let s = unsafe { CStr::from_ptr(p) };
    s.to_str().map_err(|_| invalid(format!("{what} is not UTF-8")))
}

/// A C timeout in nanoseconds: -1 waits for ever, 0 tries once, more waits
/// that long. Other negative values are invalid.
#[inline]
pub(crate) fn arg_timeout(ns: i64) -> Res<Option<Duration>> {
    match ns {
        -1 => Ok(None),
        0.. => Ok(Some(Duration::from_nanos(ns as u64))),
        _ => Err(invalid(format!("timeout_ns must be -1 (for ever), 0 (try once) or positive, not {ns}"))),
    }
}

/// Checks that an out-pointer is not NULL.
#[inline]
pub(crate) fn arg_out<T>(p: *mut T, what: &str) -> Res<*mut T> {
    if p.is_null() {
        Err(invalid(format!("{what} is NULL")))
    } else {
        Ok(p)
    }
}

/// A short, static description of an error code (`"invalid argument"`,
/// ...), or `"unknown error"` for a code that is none of the `TY_*`.
///
/// The string is static: never free it. Thread-safe.
#[no_mangle]
pub extern "C" fn ty_strerror(code: c_int) -> *const c_char {
    let s: &'static CStr = match code {
        TY_OK => c"success",
        TY_EINVAL => c"invalid argument",
        TY_ENOENT => c"not found",
        TY_EEXIST => c"already exists",
        TY_ETIMEDOUT => c"timed out",
        TY_EAGAIN => c"would block (partition full or empty)",
        TY_ENOSPC => c"no space",
        TY_EPERM => c"permission denied",
        TY_ECORRUPT => c"corrupt shared memory",
        TY_EVERSION => c"layout version mismatch",
        TY_EKIND => c"object of another kind or type",
        TY_EMSGSIZE => c"message too large",
        TY_ENOBUFS => c"buffer too small",
        TY_EPOOL => c"payload pool exhausted",
        TY_ECLOSED => c"closed",
        TY_EPEERDIED => c"peer died",
        TY_EREMOTE => c"remote handler failed",
        TY_EIO => c"I/O error",
        TY_EINCOMPAT => c"exists with another configuration",
        TY_EBUSY => c"busy",
        TY_EINTERNAL => c"internal error",
        TY_EINTR => c"interrupted",
        _ => c"unknown error",
    };
    s.as_ptr()
}

/// The full message of the last call that failed on this thread: what
/// happened and, where there is something to do, what to do (e.g. `region
/// "demo" has no topic named "orders"; create it with ...`). An empty
/// string if no call failed yet on this thread.
///
/// The string belongs to the library and stays valid until the next
/// failing call on the same thread; copy it to keep it. Successful calls
/// leave it unchanged. Thread-safe (one message per thread).
#[no_mangle]
pub extern "C" fn ty_last_error() -> *const c_char {
    LAST.try_with(|last| last.borrow().as_ptr()).unwrap_or(c"".as_ptr())
}

/// Set by `ty_interrupt`, cleared by `ty_interrupt_clear`.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);
/// The longest a waiting call goes without looking for `ty_interrupt`.
const SLICE: Duration = Duration::from_millis(10);

/// Interrupts waiting: from now until `ty_interrupt_clear`, every call of
/// this process that has to wait (`ty_subscribe`, `ty_loan`, `ty_send`,
/// `ty_publish`, `ty_ring_read`, `ty_ring_write`) returns `TY_EINTR`
/// within about 10 ms, having taken nothing (an interrupted `ty_publish`
/// drops its message, as on any error); calls that need not wait still
/// succeed (a consumer can drain what is there). The flag stays set, so a
/// call that starts just after the signal cannot miss it. `ty_rpc_request`
/// is not interrupted (give it a timeout).
///
/// Async-signal-safe (one atomic store): call it from a SIGINT or SIGTERM
/// handler to stop consumers blocked with a timeout of -1. Thread-safe.
#[no_mangle]
pub extern "C" fn ty_interrupt() {
    INTERRUPTED.store(true, Ordering::Release);
}

/// Ends what `ty_interrupt` started: calls wait as usual again.
/// Async-signal-safe, thread-safe.
#[no_mangle]
pub extern "C" fn ty_interrupt_clear() {
    INTERRUPTED.store(false, Ordering::Release);
}

/// Runs a waiting call `call(timeout)` so that `ty_interrupt` can stop it:
/// in slices of at most [`SLICE`] while it gives up for want of time
/// (`Timeout`, or `PoolExhausted` for a loan), until it returns anything
/// else, the whole `timeout` has passed (`None`: never), or `ty_interrupt`
/// is in force. A call that need not wait runs once, unchanged, and reads
/// no clock. When the whole timeout passed, the last error is returned as
/// the call made it (a timeout then says how long it waited in all).
#[inline]
pub(crate) fn interruptible<T>(
    timeout: Option<Duration>,
    mut call: impl FnMut(Option<Duration>) -> tachyon_core::Result<T>,
) -> Res<T> {
    if timeout.is_some_and(|t| t <= SLICE) {
        return Ok(call(timeout)?);
    }
    // The first slice reads no clock and keeps no books (the common case:
    // the call did not have to wait long); the rest is out of line.
    match call(Some(SLICE)) {
        Err(e @ (Error::Timeout { .. } | Error::PoolExhausted { .. })) => waited(timeout, e, call),
        other => Ok(other?),
    }
}

/// [`interruptible`] after its first slice gave up with `e`: the deadline
/// is set now, and each further slice is at most [`SLICE`].
#[cold]
#[inline(never)]
fn waited<T>(
    timeout: Option<Duration>,
    mut e: Error,
    mut call: impl FnMut(Option<Duration>) -> tachyon_core::Result<T>,
) -> Res<T> {
    let deadline = timeout.map(|t| Instant::now() + t.saturating_sub(SLICE));
    loop {
        if INTERRUPTED.load(Ordering::Acquire) {
            let what = match e {
                Error::Timeout { what, .. } => what,
                _ => "a free chunk of the pool",
            };
            return Err(Fail {
                code: TY_EINTR,
                message: format!("interrupted (ty_interrupt) while waiting for {what}"),
            });
        }
        let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        let slice = left.map_or(SLICE, |l| l.min(SLICE));
        e = match call(Some(slice)) {
            Err(e @ (Error::Timeout { .. } | Error::PoolExhausted { .. })) => e,
            other => return Ok(other?),
        };
        if left.is_some_and(|l| l <= SLICE) {
            return Err(match e {
                Error::Timeout { what, .. } => Error::Timeout { what, waited: timeout },
                e => e,
            }
            .into());
        }
    }
}
