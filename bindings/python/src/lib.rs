//! The Python face of tachyon: the extension module `tachyon._tachyon`,
//! re-exported by the package `tachyon` (see `python/tachyon/__init__.py`).
//!
//! A face translates and holds no logic of its own: every class here wraps
//! the Rust type of the same name. What it adds is what Python expects:
//!
//! * waits release the GIL and run in slices, between which pending
//!   signals are handled (Ctrl+C raises `KeyboardInterrupt`), see [`wait`];
//! * every `tachyon::Error` becomes a typed exception under `tachyon.Error`
//!   (see [`errors`]), and no Rust panic is allowed to reach the interpreter
//!   (PyO3 turns one into `PanicException`; the code avoids them);
//! * messages and loans export their shared memory through the buffer
//!   protocol, counted, so that no view outlives the memory (see [`bus`]).

use pyo3::prelude::*;

mod bus;
mod bytes;
mod errors;
mod exiting;
mod primitives;
mod wait;

/// The extension module, imported by `tachyon/__init__.py`.
#[pymodule]
fn _tachyon(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<bus::PyRegion>()?;
    m.add_class::<bus::PyTopic>()?;
    m.add_class::<bus::PySubscription>()?;
    m.add_class::<bus::PyGroup>()?;
    m.add_class::<bus::PyMessage>()?;
    m.add_class::<bus::PyLoan>()?;
    m.add_class::<bus::PyTopicInfo>()?;
    m.add_class::<bus::PyGroupInfo>()?;
    m.add_class::<bus::PyClassStats>()?;
    m.add_class::<bus::PyRecovered>()?;
    m.add_function(wrap_pyfunction!(bus::release_all, m)?)?;
    m.add_class::<primitives::PySharedArray>()?;
    m.add_class::<primitives::ArrayLock>()?;
    m.add_class::<primitives::PyCircularBuffer>()?;
    m.add_class::<primitives::PyRpcBuffer>()?;
    // Threads that enter Python from Rust must know when the interpreter
    // exits (`exiting`).
    let note_exit = wrap_pyfunction!(exiting::_note_exit, m)?;
    m.py().import("atexit")?.call_method1("register", (note_exit,))?;
    m.add("MAX_MESSAGE", tachyon::bus::MAX_MESSAGE)?;
    m.add("CLASS_SIZES", tachyon::bus::CLASS_SIZES.to_vec())?;
    Ok(())
}
