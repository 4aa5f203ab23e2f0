//! `tachyon::Error` -> the exception classes of `tachyon/errors.py`.
//!
//! The classes are defined in Python (they inherit from both `tachyon.Error`
//! and a built-in exception such as `FileNotFoundError`, which a class made
//! in Rust cannot); each error is raised as the class named after its
//! variant, with the Rust error's message.

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyType;
use tachyon::Error;

/// The class of each variant's exception, by name in `tachyon.errors`.
fn class_name(e: &Error) -> &'static str {
    match e {
        Error::NotFound { .. } => "NotFound",
        Error::AlreadyExists { .. } => "AlreadyExists",
        Error::Timeout { .. } => "TimeoutError",
        Error::Full { .. } => "Full",
        Error::NoSpace { .. } => "NoSpace",
        Error::PermissionDenied { .. } => "PermissionDenied",
        Error::TopicNotFound { .. } => "TopicNotFound",
        Error::TopicExists { .. } => "TopicExists",
        Error::Incompatible { .. } => "Incompatible",
        Error::ChannelBusy { .. } => "ChannelBusy",
        Error::BufferTooSmall { .. } => "BufferTooSmall",
        Error::InvalidName { .. } => "InvalidName",
        Error::InvalidArgument { .. } => "InvalidArgument",
        Error::Corrupt { .. } => "Corrupt",
        Error::VersionMismatch { .. } => "VersionMismatch",
        Error::KindMismatch { .. } => "KindMismatch",
        Error::MessageTooLarge { .. } => "MessageTooLarge",
        Error::TypeMismatch { .. } => "TypeMismatch",
        Error::PoolExhausted { .. } => "PoolExhausted",
        Error::Closed => "Closed",
        Error::PeerDied => "PeerDied",
        Error::Remote(_) => "RemoteError",
        Error::Io { .. } => "IoError",
        // A variant added to the library later: the common base.
        _ => "Error",
    }
}

/// The module holding the classes, imported once.
static ERRORS: PyOnceLock<Py<PyModule>> = PyOnceLock::new();

/// A `tachyon.errors` class by name (a `RuntimeError` naming it if the
/// package is broken, never a panic).
pub(crate) fn class<'py>(py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyType>> {
    let module = ERRORS.get_or_try_init(py, || py.import("tachyon.errors").map(Bound::unbind))?;
    Ok(module.bind(py).getattr(name)?.cast_into::<PyType>()?)
}

/// The Python exception for `e`.
pub(crate) fn to_py(py: Python<'_>, e: Error) -> PyErr {
    // The library's advice, in this face's terms.
    let text = e.to_string().replace("a timeout of None waits for ever", "timeout_ns=-1 waits for ever");
    match class(py, class_name(&e)) {
        Ok(cls) => match cls.call1((text,)) {
            Ok(value) => PyErr::from_value(value),
            Err(err) => err,
        },
        Err(err) => err,
    }
}

/// `Result<T, tachyon::Error>` -> `PyResult<T>`.
pub(crate) trait IntoPyResult<T> {
    /// Converts the error (needs the GIL).
    fn py(self, py: Python<'_>) -> PyResult<T>;
}

impl<T> IntoPyResult<T> for tachyon::Result<T> {
    fn py(self, py: Python<'_>) -> PyResult<T> {
        self.map_err(|e| to_py(py, e))
    }
}

/// A `BufferError` (views still exported) with `text`.
pub(crate) fn buffer_error(text: String) -> PyErr {
    pyo3::exceptions::PyBufferError::new_err(text)
}
