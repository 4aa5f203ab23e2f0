//! The bytes objects the module makes of message bytes (a message or a
//! ring's item lent in place, also to a receive that waited without the
//! GIL; a handler's request, a response): one copy each, through the
//! library's.

use crate::exiting::InPython;
use pyo3::exceptions::PyValueError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use std::borrow::Cow;
use std::mem::MaybeUninit;

/// A new bytes object holding a copy of `src`: one copy,
/// into the object's bytes as CPython allocated them (not zeroed first,
/// as `PyBytes::new_with` would), through `tachyon::platform::copy`
/// (docs/operations.md, "Large copies on AMD CPUs"). In one process a
/// `send` and a `receive_bytes` of 1 MiB took 93 – 111 µs with the copy
/// through a `Vec`, 79 – 84 µs through `new_with`, 60 – 68 µs so (64
/// KiB: 5.5 – 5.9, 4.5 – 5.7 and 3.6 – 4.3 µs; callgrind: 4,218 → 3,712
/// instructions at 1 KiB, 3,331 → 3,241 at 64 B). Fails (MemoryError) only
/// if the object cannot be allocated; what was lent is released all the
/// same.
pub(crate) fn bytes_of(py: Python<'_>, src: &[u8]) -> PyResult<Py<PyBytes>> {
    // A message is at most 1 MiB, far below `Py_ssize_t::MAX`.
    let len = ffi::Py_ssize_t::try_from(src.len())
        .map_err(|_| PyValueError::new_err(format!("a message of {} bytes", src.len())))?;
    // SAFETY: with the GIL held (`py`). `PyBytes_FromStringAndSize(NULL,
    // len)` returns a new reference to a bytes object of `len` bytes whose
    // contents are not initialized, or NULL with an exception set (taken
    // by `from_owned_ptr_or_err`). Nobody else has the object yet (for
    // `len` 0 it may be CPython's shared empty bytes object, of which
    // nothing is written), so its bytes may be written, the C API's
    // documented way to fill one: its buffer, from `PyBytes_AsString` (not
    // NULL: the object is a bytes object), lies inside the object, is
    // valid for `len` bytes, and cannot overlap `src`, borrowed before the
    // object existed. Once `copy_uninit` has written all `len` bytes the
    // object is a bytes object like any other.
    unsafe {
        let obj = Bound::from_owned_ptr_or_err(py, ffi::PyBytes_FromStringAndSize(std::ptr::null(), len))?;
        let dst = ffi::PyBytes_AsString(obj.as_ptr()).cast::<MaybeUninit<u8>>();
        tachyon::platform::copy::copy_uninit(std::slice::from_raw_parts_mut(dst, src.len()), src);
        Ok(obj.cast_into_unchecked::<PyBytes>().unbind())
    }
}

/// [`bytes_of`] for a message lent to a receive that waits without the
/// GIL: takes the GIL (`Python::attach`) for the copy, so that a message
/// waited for is copied once as well, straight from shared memory. The
/// message stays lent, and held, until the GIL is had and the copy made.
/// That is safe because no call of this module waits for a lent message
/// while it holds the GIL: every wait of the library runs with the GIL
/// released (`crate::wait`).
///
/// Once the interpreter exits it is an error, not an entry into an
/// interpreter that may be gone (`crate::exiting`).
pub(crate) fn bytes_attached(src: &[u8]) -> PyResult<Py<PyBytes>> {
    let _entered = InPython::enter()
        .ok_or_else(|| pyo3::exceptions::PyRuntimeError::new_err("the Python interpreter is exiting"))?;
    Python::attach(|py| bytes_of(py, src))
}

/// The bytes of `data` to read without the GIL (a send that waits for
/// room): a `bytes` object's own, which cannot change and which `data`
/// keeps alive (no copy); else a private copy of `export`, the bytes of
/// another bytes-like object (a `bytearray`, a NumPy array), which another
/// thread could change while the GIL is released.
pub(crate) fn without_gil<'a>(data: &'a Bound<'_, PyAny>, export: &[u8]) -> Cow<'a, [u8]> {
    match data.cast::<PyBytes>() {
        Ok(bytes) => Cow::Borrowed(bytes.as_bytes()),
        Err(_) => Cow::Owned(tachyon::platform::copy::to_vec(export)),
    }
}

/// A caller's buffer to write message bytes into (`read_into`,
/// `call_into`): a `bytearray`, a writable `memoryview`, a NumPy array of
/// any dtype, any writable C-contiguous buffer, as `socket.recv_into`
/// takes. It stays exported until dropped (with the GIL held), so that it
/// can be neither freed nor resized meanwhile.
pub(crate) struct Destination(ffi::Py_buffer);

/// Where a [`Destination`]'s bytes lie, to be written without the GIL
/// (integers, so that a closure given to `Python::detach` may hold it).
#[derive(Clone, Copy)]
pub(crate) struct Spot {
    at: usize,
    len: usize,
}

impl Destination {
    /// Exports `obj` for writing (PyBUF_WRITABLE: C-contiguous bytes,
    /// whatever the items' type); a TypeError naming its type if it is not
    /// a writable contiguous buffer (a `bytes` object, a read-only view).
    pub(crate) fn new(obj: &Bound<'_, PyAny>) -> PyResult<Destination> {
        let mut view = MaybeUninit::<ffi::Py_buffer>::uninit();
        // SAFETY: `obj` is a live object and `view` room for a Py_buffer;
        // PyBUF_WRITABLE asks for writable C-contiguous bytes (exporters of
        // anything else refuse), whatever the items' type.
        if unsafe { ffi::PyObject_GetBuffer(obj.as_ptr(), view.as_mut_ptr(), ffi::PyBUF_WRITABLE) } == -1 {
            let cause = PyErr::fetch(obj.py());
            let kind = obj.get_type().name().map(|n| n.to_string()).unwrap_or_default();
            let err = pyo3::exceptions::PyTypeError::new_err(format!(
                "buffer must be a writable contiguous bytes-like object (bytearray, memoryview, numpy array, ...), not {kind}"
            ));
            err.set_cause(obj.py(), Some(cause));
            return Err(err);
        }
        // SAFETY: the call succeeded, so it filled `view`.
        Ok(Destination(unsafe { view.assume_init() }))
    }

    /// Where its bytes lie.
    pub(crate) fn spot(&self) -> Spot {
        let len = usize::try_from(self.0.len).unwrap_or(0);
        if self.0.buf.is_null() {
            return Spot { at: 0, len: 0 };
        }
        Spot { at: self.0.buf as usize, len }
    }
}

impl Drop for Destination {
    fn drop(&mut self) {
        // SAFETY: `self.0` was filled by a successful `PyObject_GetBuffer`
        // and is released once, here, with the GIL held (a `Destination`
        // holds a pointer, so it is not `Send` and cannot be dropped
        // inside `Python::detach`).
        unsafe { ffi::PyBuffer_Release(&mut self.0) }
    }
}

impl Spot {
    /// Its length in bytes.
    pub(crate) fn len(self) -> usize {
        self.len
    }

    /// The bytes, to write.
    ///
    /// # Safety
    ///
    /// The [`Destination`] this came from is still alive (exported), and
    /// no other slice of this call's over its bytes is alive. Python code
    /// of another thread that uses the buffer at the same time races with
    /// the write, as it would with `socket.recv_into`'s: the callers'
    /// documentation tells the caller to leave the buffer alone during
    /// the call.
    pub(crate) unsafe fn slice<'a>(self) -> &'a mut [u8] {
        if self.len == 0 {
            return &mut [];
        }
        // SAFETY: the caller's contract: the export keeps `len` writable
        // contiguous bytes at `at` (PyBUF_WRITABLE), which cannot be freed
        // or moved while exported (a bytearray refuses to resize, an array
        // to reshape its memory); no other slice of ours overlaps.
        unsafe { std::slice::from_raw_parts_mut(self.at as *mut u8, self.len) }
    }
}
