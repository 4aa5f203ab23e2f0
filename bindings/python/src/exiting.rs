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
use std::time::Duration;
use tachyon::primitives::rpc::ThreadWork;
use tachyon::sync::{Gate, GatePass};

/// The interpreter, behind a gate: threads that enter Python from Rust
/// pass it ([`InPython`]); an `atexit` function (atexit functions run
/// before CPython finalizes) closes it and waits for them to leave. From
/// then on no thread enters Python from Rust: one that entered CPython
/// after it finalized would find no interpreter (and crash); one that
/// takes the GIL while it finalizes is ended inside CPython. (A gate of
/// atomics, not a lock: a lock held by another thread at a `fork` would
/// stay locked in the child.)
static INTERPRETER: Gate = Gate::new();
/// How long the exit waits for threads to leave Python: a handler that
/// runs longer is left to CPython, as its daemon threads are.
const EXIT_WAIT: Duration = Duration::from_secs(2);

/// A thread inside Python from Rust (an RPC end's handler, a caller's copy
/// with the GIL taken back): the exit waits for it.
pub(crate) struct InPython {
    _pass: GatePass<'static>,
}

impl InPython {
    /// `None` once the interpreter exits.
    pub(crate) fn enter() -> Option<InPython> {
        INTERPRETER.enter().map(|pass| InPython { _pass: pass })
    }
}

/// Marks the interpreter as exiting and waits, without the GIL, for the
/// threads inside Python from Rust to leave (at most [`EXIT_WAIT`]);
/// registered with `atexit` when the module is imported.
#[pyfunction]
pub(crate) fn _note_exit(py: Python<'_>) {
    py.detach(|| INTERPRETER.close_and_wait(EXIT_WAIT));
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
