//! The interpreter's exit, seen from threads that enter Python from
//! Rust: an RPC end's threads (handlers) and callers that wait without the
//! GIL and take it back for a copy. CPython finalizes while such threads
//! run; one that enters it afterwards finds no interpreter and crashes
//! (`PyGILState_Ensure` makes a thread state with no interpreter), one
//! that takes the GIL while it finalizes is ended inside CPython. So an
//! `atexit` function (they run before CPython finalizes) marks the exit
//! and waits, without the GIL and for a bounded time, for the threads
//! inside Python to leave; from then on none enters ([`InPython`]).

use pyo3::prelude::*;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tachyon::primitives::rpc::ThreadWork;

/// Whether the interpreter exits, and how many threads are inside Python
/// from Rust now. Set to exiting by an `atexit` function (atexit functions
/// run before CPython finalizes): from then on no thread enters Python
/// from Rust. A thread that entered CPython after it finalized would find
/// no interpreter (and crash); one that takes the GIL while it finalizes
/// is ended inside CPython. A lock, not atomics: it is taken twice a
/// handler call, next to a Python call of microseconds.
static STATE: Mutex<Exit> = Mutex::new(Exit { exiting: false, inside: 0 });
/// Woken when the last thread inside Python leaves.
static LEFT: Condvar = Condvar::new();
/// How long the exit waits for threads to leave Python: a handler that
/// runs longer is left to CPython, as its daemon threads are.
const EXIT_WAIT: Duration = Duration::from_secs(2);

struct Exit {
    exiting: bool,
    inside: usize,
}

fn state() -> MutexGuard<'static, Exit> {
    STATE.lock().unwrap_or_else(|p| p.into_inner())
}

/// A thread inside Python from Rust (an RPC end's handler, a caller's copy
/// with the GIL taken back): the exit waits for it.
pub(crate) struct InPython;

impl InPython {
    /// `None` once the interpreter exits.
    pub(crate) fn enter() -> Option<InPython> {
        let mut s = state();
        if s.exiting {
            return None;
        }
        s.inside += 1;
        Some(InPython)
    }
}

impl Drop for InPython {
    fn drop(&mut self) {
        let mut s = state();
        s.inside -= 1;
        // Only the exit waits (and a notify is a system call).
        if s.inside == 0 && s.exiting {
            LEFT.notify_all();
        }
    }
}

/// Marks the interpreter as exiting and waits, without the GIL, for the
/// threads inside Python from Rust to leave (at most [`EXIT_WAIT`]);
/// registered with `atexit` when the module is imported.
#[pyfunction]
pub(crate) fn _note_exit(py: Python<'_>) {
    py.detach(|| {
        let mut s = state();
        s.exiting = true;
        let end = Instant::now() + EXIT_WAIT;
        while s.inside != 0 {
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            s = LEFT.wait_timeout(s, left).unwrap_or_else(|p| p.into_inner()).0;
        }
    });
}

/// Runs one of an RPC end's threads' `work` with a Python thread state of
/// its own for the thread's whole life, not holding the GIL: each handler
/// call then only takes the GIL (`Python::attach` finds the state),
/// instead of making a thread state and deleting it again, which made a
/// 64-byte call take 20 – 50 µs instead of 2 – 8 (docs/python.md, "RPC
/// handlers' threads").
///
/// Once the interpreter exits the thread leaves its state to it: taking
/// the GIL back while CPython finalizes ends the thread inside CPython.
pub(crate) fn with_thread_state(work: ThreadWork) {
    let Some(entered) = InPython::enter() else { return work() };
    // SAFETY: the interpreter is initialized and not exiting (`entered`
    // holds its exit back), and this new thread has no thread state yet:
    // `PyGILState_Ensure` makes one and takes the GIL.
    let gil = unsafe { pyo3::ffi::PyGILState_Ensure() };
    // SAFETY: this thread holds the GIL (just taken); its state is kept.
    let saved = unsafe { pyo3::ffi::PyEval_SaveThread() };
    drop(entered);
    // The library's thread work does not panic; if it did, the state
    // would still be given back below.
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(work));
    // Once the interpreter exits, the state is left to it (it deletes its
    // threads' states when it finalizes).
    let Some(_entered) = InPython::enter() else { return };
    // SAFETY: `saved` is this thread's state, released above and not
    // restored since, in an interpreter not exiting; `gil` its matching
    // `PyGILState_Ensure`, released once, with the GIL held.
    unsafe {
        pyo3::ffi::PyEval_RestoreThread(saved);
        pyo3::ffi::PyGILState_Release(gil);
    }
}
