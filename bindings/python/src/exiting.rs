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
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use tachyon::primitives::rpc::ThreadWork;

/// Set by an `atexit` function once the interpreter starts to exit
/// (atexit functions run before CPython finalizes): from then on the
/// library's threads no longer enter Python. A thread that entered CPython
/// after it finalized would find no interpreter (and crash); one that
/// takes the GIL while it finalizes is ended inside CPython.
static EXITING: AtomicBool = AtomicBool::new(false);
/// Threads inside Python from Rust now ([`InPython`]).
static ACTIVE: AtomicUsize = AtomicUsize::new(0);
/// How long the exit waits for library threads to leave Python: a handler
/// that runs longer is left to CPython, as its daemon threads are.
const EXIT_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// A thread inside Python from Rust (an RPC end's handler, a caller's copy
/// with the GIL taken back): the exit waits for it.
pub(crate) struct InPython;

impl InPython {
    /// `None` once the interpreter exits.
    pub(crate) fn enter() -> Option<InPython> {
        // SYNC: SeqCst, against `_note_exit`'s store of EXITING and load
        // of ACTIVE (a store then a load on each side): either the exit
        // sees this thread counted, or this thread sees the exit.
        ACTIVE.fetch_add(1, Ordering::SeqCst);
        if EXITING.load(Ordering::SeqCst) {
            ACTIVE.fetch_sub(1, Ordering::SeqCst);
            return None;
        }
        Some(InPython)
    }
}

impl Drop for InPython {
    fn drop(&mut self) {
        ACTIVE.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Marks the interpreter as exiting ([`EXITING`]) and waits, without
/// the GIL, for the library's threads inside Python to leave (at most
/// [`EXIT_WAIT`]); registered with `atexit` when the module is imported.
#[pyfunction]
pub(crate) fn _note_exit(py: Python<'_>) {
    EXITING.store(true, Ordering::SeqCst);
    py.detach(|| {
        let end = std::time::Instant::now() + EXIT_WAIT;
        while ACTIVE.load(Ordering::SeqCst) != 0 && std::time::Instant::now() < end {
            std::thread::sleep(std::time::Duration::from_millis(1));
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
