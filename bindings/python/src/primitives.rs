//! The shared-memory primitives: `SharedArray` (a typed, writable buffer
//! with a process-shared lock), `CircularBuffer` (a ring of fixed-size
//! nodes) and `RpcBuffer` (request/response, with a Python callable as the
//! handler).

use crate::bus::{wait_policy, with_bytes};
use crate::bytes::{bytes_attached, bytes_of, without_gil, Destination, Spot};
use crate::errors::{to_py, IntoPyResult};
use crate::exiting::{self, InPython};
use crate::wait::{in_slices, no_room, timed_out, timeout_of, SLICE};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyMemoryView};
use std::ffi::{c_int, c_void, CStr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tachyon::primitives::rpc::{ResponseWriter, ThreadWork};
use tachyon::primitives::{SharedArrayReadGuard, SharedArrayWriteGuard};
use tachyon::{CircularBuffer, RpcBuffer, SharedArray};

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// One `SharedArray<T>` of the element types Python can name.
macro_rules! elem_types {
    ($($variant:ident: $t:ty, $name:literal, $fmt:literal;)*) => {
        enum AnyArray { $($variant(Arc<SharedArray<$t>>),)* }
        enum AnyGuard {
            $($variant(#[allow(dead_code)] SharedArrayWriteGuard<'static, $t>),)*
            Read(#[allow(dead_code)] ReadGuard),
        }
        enum ReadGuard { $($variant(#[allow(dead_code)] SharedArrayReadGuard<'static, $t>),)* }

        impl AnyArray {
            fn open(name: &str, dtype: &str, len: Option<usize>) -> PyResult<tachyon::Result<AnyArray>> {
                Ok(match dtype {
                    $($name => (|| -> tachyon::Result<AnyArray> {
                        let b = SharedArray::<$t>::builder(name);
                        let a = match len { Some(n) => b.len(n).create_or_open()?, None => b.open()? };
                        Ok(AnyArray::$variant(Arc::new(a)))
                    })(),)*
                    other => return Err(PyValueError::new_err(format!(
                        "dtype must be one of {}, not {other:?}", [$($name),*].join(", ")))),
                })
            }
            fn dtype(&self) -> &'static str { match self { $(AnyArray::$variant(_) => $name,)* } }
            fn format(&self) -> &'static CStr { match self { $(AnyArray::$variant(_) => $fmt,)* } }
            fn itemsize(&self) -> usize { match self { $(AnyArray::$variant(_) => std::mem::size_of::<$t>(),)* } }
            fn len(&self) -> usize { match self { $(AnyArray::$variant(a) => a.len(),)* } }
            fn name(&self) -> &str { match self { $(AnyArray::$variant(a) => a.name(),)* } }
            fn segment(&self) -> &tachyon::Segment { match self { $(AnyArray::$variant(a) => a.segment(),)* } }
            /// The write (or read) lock if it is free now.
            ///
            /// The guard borrows the array inside an `Arc` that the caller
            /// keeps alive (and drops after the guard): see `ArrayLock`.
            fn try_lock(&self, write: bool) -> tachyon::Result<Option<AnyGuard>> {
                match self {
                    $(AnyArray::$variant(a) => {
                        let a: &SharedArray<$t> = a;
                        // SAFETY: the array lives in an `Arc` that the
                        // `ArrayLock` holding this guard also holds, and
                        // drops only after the guard (field order there), so
                        // the borrow outlives no data it points to.
                        let a: &'static SharedArray<$t> = unsafe { &*(a as *const SharedArray<$t>) };
                        if write {
                            Ok(a.try_write_lock()?.map(AnyGuard::$variant))
                        } else {
                            Ok(a.try_read_lock()?.map(|g| AnyGuard::Read(ReadGuard::$variant(g))))
                        }
                    })*
                }
            }
            fn clone_arc(&self) -> AnyArray { match self { $(AnyArray::$variant(a) => AnyArray::$variant(Arc::clone(a)),)* } }
        }
    };
}

elem_types! {
    U8: u8, "uint8", c"B";
    I8: i8, "int8", c"b";
    U16: u16, "uint16", c"H";
    I16: i16, "int16", c"h";
    U32: u32, "uint32", c"I";
    I32: i32, "int32", c"i";
    U64: u64, "uint64", c"Q";
    I64: i64, "int64", c"q";
    F32: f32, "float32", c"f";
    F64: f64, "float64", c"d";
}

/// A fixed-length array of numbers in a named shared-memory segment, with a
/// process-shared reader/writer lock.
///
/// SharedArray(name, length=None, dtype="float64", *, create=True)
///
/// With a length (and create=True) it opens the array or creates it with
/// that many zeros (an existing one keeps its length); without, or with
/// create=False, it opens an existing one (tachyon.NotFound if none).
/// dtype: uint8, int8, uint16, int16, uint32, int32, uint64, int64,
/// float32, float64; a Rust SharedArray<f64> is a "float64" one.
///
/// The array is a writable buffer: numpy.asarray(arr) is a view of the
/// shared memory, no copy. Readers and writers in several processes
/// coordinate with the lock: `with arr.lock():` (exclusive) or `with
/// arr.read_lock():` (shared); Rust's SharedArray methods take it too.
///
///     arr = tachyon.SharedArray("prices", 1000, "float64")
///     view = numpy.asarray(arr)
///     with arr.lock():
///         view[:] += 1.0
#[pyclass(module = "tachyon", name = "SharedArray", frozen)]
pub struct PySharedArray {
    array: AnyArray,
    /// The buffer's shape and strides, pointed to by exports.
    shape: Box<[ffi::Py_ssize_t; 1]>,
    strides: Box<[ffi::Py_ssize_t; 1]>,
}

#[pymethods]
impl PySharedArray {
    #[new]
    #[pyo3(signature = (name, length=None, dtype="float64", *, create=true))]
    fn new(py: Python<'_>, name: &str, length: Option<usize>, dtype: &str, create: bool) -> PyResult<Self> {
        let len = if create { length } else { None };
        let array = AnyArray::open(name, dtype, len)?.py(py)?;
        let n =
            ffi::Py_ssize_t::try_from(array.len()).map_err(|_| PyValueError::new_err("array too large"))?;
        let item = array.itemsize() as ffi::Py_ssize_t;
        Ok(PySharedArray { array, shape: Box::new([n]), strides: Box::new([item]) })
    }

    /// The segment's name.
    #[getter]
    fn name(&self) -> &str {
        self.array.name()
    }

    /// The element type's name (numpy's spelling).
    #[getter]
    fn dtype(&self) -> &'static str {
        self.array.dtype()
    }

    /// A memoryview of the elements (typed, writable, no copy).
    #[getter]
    fn data<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyMemoryView>> {
        PyMemoryView::from(slf.as_any())
    }

    /// The exclusive lock, as a context manager: `with arr.lock():`.
    /// Waits up to timeout_ns (-1: for ever) without the GIL;
    /// tachyon.TimeoutError when it runs out.
    #[pyo3(signature = (timeout_ns=-1), text_signature = "(self, /, timeout_ns=-1)")]
    fn lock(&self, timeout_ns: i64) -> ArrayLock {
        ArrayLock { guard: Mutex::new(None), array: self.array.clone_arc(), write: true, timeout_ns }
    }

    /// The shared (read) lock, as a context manager: `with
    /// arr.read_lock():`.
    #[pyo3(signature = (timeout_ns=-1), text_signature = "(self, /, timeout_ns=-1)")]
    fn read_lock(&self, timeout_ns: i64) -> ArrayLock {
        ArrayLock { guard: Mutex::new(None), array: self.array.clone_arc(), write: false, timeout_ns }
    }

    fn __len__(&self) -> usize {
        self.array.len()
    }

    fn __repr__(&self) -> String {
        format!("SharedArray({:?}, {}, {:?})", self.array.name(), self.array.len(), self.array.dtype())
    }

    /// # Safety
    /// Called by the interpreter with a `Py_buffer` to fill.
    unsafe fn __getbuffer__(slf: Bound<'_, Self>, view: *mut ffi::Py_buffer, flags: c_int) -> PyResult<()> {
        let this = slf.get();
        let seg = this.array.segment();
        let bytes = this.array.len() * this.array.itemsize();
        // The elements end the data area (the array's layout: header, lock,
        // then the elements, sized exactly).
        let offset = seg.size().checked_sub(bytes).ok_or_else(|| PyValueError::new_err("array layout"))?;
        // SAFETY: `offset + bytes == seg.size()`: inside the mapping, which
        // `this` keeps (and every export holds a reference to `slf`).
        let buf = unsafe { seg.as_ptr().add(offset) };
        if view.is_null() {
            return Err(pyo3::exceptions::PyBufferError::new_err("no Py_buffer to fill"));
        }
        // SAFETY: `view` is the interpreter's `Py_buffer`, not null; every
        // pointer put in it lives as long as `slf`, which the export keeps
        // (obj takes a new reference).
        unsafe {
            ffi::Py_IncRef(slf.as_ptr());
            (*view).obj = slf.as_ptr();
            (*view).buf = buf as *mut c_void;
            (*view).len = bytes as ffi::Py_ssize_t;
            (*view).readonly = 0;
            (*view).itemsize = this.array.itemsize() as ffi::Py_ssize_t;
            (*view).format = if flags & ffi::PyBUF_FORMAT != 0 {
                this.array.format().as_ptr() as *mut _
            } else {
                std::ptr::null_mut()
            };
            (*view).ndim = 1;
            (*view).shape =
                if flags & ffi::PyBUF_ND != 0 { this.shape.as_ptr() as *mut _ } else { std::ptr::null_mut() };
            (*view).strides = if flags & ffi::PyBUF_STRIDES == ffi::PyBUF_STRIDES {
                this.strides.as_ptr() as *mut _
            } else {
                std::ptr::null_mut()
            };
            (*view).suboffsets = std::ptr::null_mut();
            (*view).internal = std::ptr::null_mut();
        }
        Ok(())
    }

    /// # Safety
    /// Called by the interpreter once per successful `__getbuffer__`.
    unsafe fn __releasebuffer__(&self, _view: *mut ffi::Py_buffer) {}
}

/// A held (or to be taken) lock of a SharedArray: a context manager.
/// A lock is held by a thread: take and release it on the same one.
#[pyclass(module = "tachyon", name = "ArrayLock", frozen, unsendable)]
pub struct ArrayLock {
    // Field order matters: the guard borrows `array` and is dropped first.
    guard: Mutex<Option<AnyGuard>>,
    array: AnyArray,
    write: bool,
    timeout_ns: i64,
}

#[pymethods]
impl ArrayLock {
    /// Takes the lock (waiting without the GIL, Ctrl+C interrupts).
    fn acquire(&self, py: Python<'_>) -> PyResult<()> {
        if lock(&self.guard).is_some() {
            return Err(PyValueError::new_err("this lock is already held; take another with arr.lock()"));
        }
        // A guard stays on the thread that took it, so the lock is taken
        // with the GIL held, by tries; the pauses between them (growing to
        // 1 ms) release the GIL and handle signals.
        let timeout = timeout_of(self.timeout_ns);
        // A deadline past what the clock can hold is no deadline.
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        let mut pause = Duration::from_micros(1);
        loop {
            if let Some(guard) = self.array.try_lock(self.write).py(py)? {
                *lock(&self.guard) = Some(guard);
                return Ok(());
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                let what = "a SharedArray's lock (held by another thread or process)";
                return Err(tachyon::Error::Timeout { what, waited: timeout }).py(py);
            }
            py.detach(|| std::thread::sleep(pause));
            py.check_signals()?;
            pause = (pause * 2).min(Duration::from_millis(1));
        }
    }

    /// Releases the lock (nothing if not held).
    fn release(&self) {
        let guard = lock(&self.guard).take();
        drop(guard);
    }

    fn __enter__(slf: Bound<'_, Self>) -> PyResult<Bound<'_, Self>> {
        slf.borrow().acquire(slf.py())?;
        Ok(slf)
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, _args: &Bound<'_, pyo3::types::PyTuple>) -> bool {
        self.release();
        false
    }
}

/// A ring of fixed-size nodes in shared memory: many writers and readers
/// in any processes, each item read once.
///
/// CircularBuffer(name, node_count=64, node_size=4096, *, create=True,
/// wait="hybrid", light_handovers=None, batch_reads=False)
///
/// create=True opens the ring or creates it with this geometry;
/// create=False opens an existing one (its geometry comes from it).
/// light_handovers=True creates a ring with light hand-overs (plain
/// stores, the wake-up check's fence moved to sleepers: docs/rings.md);
/// True or False given for an existing ring must match it, None takes
/// the ring's (and creates without). batch_reads=True: this handle's
/// reads, when they catch up with a writer in mid-stream, wait until it
/// is a batch ahead (at most 32 items, and 2 KiB of them) before they
/// take the first: more items per second for a reader that wants
/// throughput, each item later (docs/rings.md, "Batch reads"); this
/// handle's option, not the ring's.
#[pyclass(module = "tachyon", name = "CircularBuffer", frozen)]
pub struct PyCircularBuffer {
    ring: CircularBuffer,
}

#[pymethods]
impl PyCircularBuffer {
    #[new]
    #[pyo3(signature = (name, node_count=64, node_size=4096, *, create=true, wait="hybrid", light_handovers=None, batch_reads=false))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        name: &str,
        node_count: usize,
        node_size: usize,
        create: bool,
        wait: &str,
        light_handovers: Option<bool>,
        batch_reads: bool,
    ) -> PyResult<Self> {
        let mut b = CircularBuffer::builder(name).wait_policy(wait_policy(wait)?).batch_reads(batch_reads);
        if let Some(light) = light_handovers {
            b = b.light_handovers(light);
        }
        // Opening takes the geometry from the ring (the defaults above are
        // for creating, and would be checked against it).
        let ring =
            if create { b.node_count(node_count).node_size(node_size).create_or_open() } else { b.open() };
        Ok(PyCircularBuffer { ring: ring.py(py)? })
    }

    /// Nodes in the ring.
    #[getter]
    fn node_count(&self) -> usize {
        self.ring.node_count()
    }

    /// Bytes per node: the largest item.
    #[getter]
    fn node_size(&self) -> usize {
        self.ring.node_size()
    }

    /// Whether the ring's hand-overs are light (an option of the ring).
    #[getter]
    fn light_handovers(&self) -> bool {
        self.ring.light_handovers()
    }

    /// Whether this handle reads in batches (the constructor's
    /// batch_reads; this handle's own).
    #[getter]
    fn batch_reads(&self) -> bool {
        self.ring.batch_reads()
    }

    /// Writes one item (any bytes-like object), waiting up to timeout_ns
    /// (-1: for ever, 0: not at all) for a free node.
    #[pyo3(signature = (data, timeout_ns=-1), text_signature = "(self, /, data, timeout_ns=-1)")]
    fn write(&self, py: Python<'_>, data: &Bound<'_, PyAny>, timeout_ns: i64) -> PyResult<()> {
        let timeout = timeout_of(timeout_ns);
        let first = with_bytes(data, |bytes| match self.ring.write(bytes, Some(Duration::ZERO)) {
            Err(e) if no_room(&e) && timeout.is_none_or(|t| !t.is_zero()) => {
                Ok(Some(without_gil(data, bytes)))
            }
            other => other.map(|()| None),
        })?;
        let Some(item) = first.py(py)? else { return Ok(()) };
        let ring = &self.ring;
        in_slices(py, timeout, no_room, |slice| ring.write(&item, slice))
    }

    /// Reads the next item as bytes, waiting up to timeout_ns (-1: for
    /// ever) for one; tachyon.TimeoutError when the wait runs out.
    #[pyo3(signature = (timeout_ns=-1), text_signature = "(self, /, timeout_ns=-1)")]
    fn read<'py>(&self, py: Python<'py>, timeout_ns: i64) -> PyResult<Bound<'py, PyBytes>> {
        let ring = &self.ring;
        // An item there now is copied once, into the bytes object, with the
        // GIL held; one waited for without the GIL as well, with the GIL
        // taken back for the copy (`bytes_attached`).
        match ring.read_with(Some(Duration::ZERO), |item| bytes_of(py, item)) {
            Err(e) if e.is_timeout() && timeout_ns != 0 => {
                let item = in_slices(py, timeout_of(timeout_ns), timed_out, |slice| {
                    ring.read_with(slice, bytes_attached)
                })?;
                Ok(item?.into_bound(py))
            }
            other => Ok(other.py(py)??.into_bound(py)),
        }
    }

    /// The next item if there is one now, else None.
    fn try_read<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyBytes>>> {
        match self.ring.read_with(Some(Duration::ZERO), |item| bytes_of(py, item)) {
            Ok(item) => Ok(Some(item?.into_bound(py))),
            Err(e) if e.is_timeout() => Ok(None),
            Err(e) => Err(to_py(py, e)),
        }
    }

    /// Reads the next item into buffer and returns its length in bytes,
    /// waiting up to timeout_ns (-1: for ever) for one; no bytes object is
    /// made. buffer is any writable contiguous buffer, as socket.recv_into
    /// takes: a bytearray, a memoryview, a NumPy array of any dtype (its
    /// bytes are written as they come). A call that waits waits without
    /// the GIL and writes the item without it: leave the buffer alone
    /// meanwhile. An item longer than the buffer stays queued, and
    /// tachyon.BufferTooSmall names both lengths.
    #[pyo3(signature = (buffer, timeout_ns=-1), text_signature = "(self, /, buffer, timeout_ns=-1)")]
    fn read_into(&self, py: Python<'_>, buffer: &Bound<'_, PyAny>, timeout_ns: i64) -> PyResult<usize> {
        let dst = Destination::new(buffer)?;
        let ring = &self.ring;
        let read = move |spot: Spot, timeout| {
            // SAFETY: `dst` keeps the buffer exported until this method
            // returns, after every read; each read's slice dies with it.
            ring.read(unsafe { spot.slice() }, timeout)
        };
        let spot = dst.spot();
        match read(spot, Some(Duration::ZERO)) {
            Err(e) if e.is_timeout() && timeout_ns != 0 => {
                in_slices(py, timeout_of(timeout_ns), timed_out, |slice| read(spot, slice))
            }
            other => other.py(py),
        }
    }

    /// read_into if an item is there now: its length, or None (nothing is
    /// written then).
    fn try_read_into(&self, py: Python<'_>, buffer: &Bound<'_, PyAny>) -> PyResult<Option<usize>> {
        let dst = Destination::new(buffer)?;
        // SAFETY: `dst` keeps the buffer exported until this method
        // returns; the slice dies with the read.
        match self.ring.read(unsafe { dst.spot().slice() }, Some(Duration::ZERO)) {
            Ok(n) => Ok(Some(n)),
            Err(e) if e.is_timeout() => Ok(None),
            Err(e) => Err(to_py(py, e)),
        }
    }

    /// Items queued now (a snapshot).
    fn __len__(&self) -> usize {
        self.ring.len()
    }

    fn __repr__(&self) -> String {
        format!("CircularBuffer(node_count={}, node_size={})", self.ring.node_count(), self.ring.node_size())
    }
}

/// Request/response between two processes. The owner creates the channel
/// (create=True), one opener joins it (create=False); both ends may call
/// and both may serve.
///
/// RpcBuffer(name, handler=None, *, create=True, node_count=None,
/// node_size=None, timeout_ns=30_000_000_000, wait="hybrid")
///
/// handler: a Python callable taking the request (bytes) and returning the
/// response (bytes-like, or None for empty); it runs on one of the
/// channel's threads (its reader thread, or a handler thread while that
/// one is busy) with the GIL. An exception it raises reaches the caller as
/// tachyon.RemoteError. timeout_ns bounds each call. node_count and
/// node_size are the owner's choice (None: 64 nodes of 4096 bytes when
/// creating, the owner's when opening; given when opening, they must be
/// the owner's, else tachyon.Incompatible): a message that fits a node
/// less its 32-byte header goes in one packet, read and written in place.
/// wait: how this end's callers and reader thread wait, "hybrid", "spin"
/// or "futex".
///
///     server = tachyon.RpcBuffer("calc", handler=lambda req: req.upper())
///     client = tachyon.RpcBuffer("calc", create=False)   # another process
///     client.call(b"hi")  # b"HI"
#[pyclass(module = "tachyon", name = "RpcBuffer", frozen)]
pub struct PyRpcBuffer {
    /// `None` once closed. In an `Arc` so that a call takes its handle
    /// out of the lock at once and never holds the lock without the GIL:
    /// a thread that waited for the lock with the GIL held while another
    /// needed the GIL back to let the lock go would hang both.
    rpc: Mutex<Option<Arc<RpcBuffer>>>,
    name: String,
}

#[pymethods]
impl PyRpcBuffer {
    #[new]
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (name, handler=None, *, create=true, node_count=None, node_size=None, timeout_ns=30_000_000_000, wait="hybrid"))]
    fn new(
        py: Python<'_>,
        name: String,
        handler: Option<Py<PyAny>>,
        create: bool,
        node_count: Option<usize>,
        node_size: Option<usize>,
        timeout_ns: i64,
        wait: &str,
    ) -> PyResult<Self> {
        let timeout =
            timeout_of(timeout_ns).ok_or_else(|| PyValueError::new_err("timeout_ns must be 0 or more"))?;
        let mut b = RpcBuffer::builder(&name).default_timeout(timeout).wait_policy(wait_policy(wait)?);
        // None: 64 nodes of 4096 bytes when creating, the owner's when
        // opening (a value given must be the owner's).
        if let Some(n) = node_count {
            b = b.node_count(n);
        }
        if let Some(n) = node_size {
            b = b.node_size(n);
        }
        if let Some(h) = handler {
            if !h.bind(py).is_callable() {
                return Err(PyTypeError::new_err(
                    "handler must be callable: handler(request: bytes) -> bytes",
                ));
            }
            b = b.handler_in_place(move |_id, msg: &[u8], out: &mut ResponseWriter<'_>| {
                call_handler(&h, msg, out)
            });
        }
        b = b.thread_spawner(|name: &str, work: ThreadWork| {
            std::thread::Builder::new()
                .name(name.to_owned())
                .spawn(move || exiting::with_thread_state(work))
                .map(drop)
        });
        let rpc = py.detach(|| if create { b.create() } else { b.open() }).py(py)?;
        Ok(PyRpcBuffer { rpc: Mutex::new(Some(Arc::new(rpc))), name })
    }

    /// Sends a request (any bytes-like object; a bytes object is written
    /// from its own bytes, any other is copied first) and returns the
    /// response as bytes. Waits without the GIL; Ctrl+C cancels the
    /// request. Any number of threads may call at once. Raises
    /// tachyon.TimeoutError, tachyon.RemoteError (the handler failed),
    /// tachyon.Closed or tachyon.PeerDied.
    fn call<'py>(&self, py: Python<'py>, data: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyBytes>> {
        // Writing the request may wait for room in the ring.
        let mut future = with_request(py, data, self.get()?, |rpc, msg| rpc.request_async(msg))?;
        loop {
            // This thread reads its response for itself, without the GIL:
            // one that fits a packet is copied once, from its ring node
            // into the bytes object (the GIL taken back for it; nothing of
            // this module waits for the reader role with the GIL held).
            // Dropping the future on an exception cancels the request.
            match py.detach(|| future.wait_with(Some(SLICE), bytes_attached)).py(py)? {
                Some(bytes) => return Ok(bytes?.into_bound(py)),
                None => py.check_signals()?,
            }
        }
    }

    /// Sends a request as call does and writes the response into buffer,
    /// returning its length in bytes: no bytes object is made, so a caller
    /// that calls again and again with one buffer (a bytearray, a NumPy
    /// array: any writable contiguous buffer, as socket.recv_into takes)
    /// allocates nothing per call. The response is written without the
    /// GIL: leave the buffer alone meanwhile. A response longer than the
    /// buffer is not lost: tachyon.BufferTooSmall is raised with the whole
    /// response as bytes in its `response` attribute (nothing is written).
    fn call_into(
        &self,
        py: Python<'_>,
        data: &Bound<'_, PyAny>,
        buffer: &Bound<'_, PyAny>,
    ) -> PyResult<usize> {
        let dst = Destination::new(buffer)?;
        let spot = dst.spot();
        let mut future = with_request(py, data, self.get()?, |rpc, msg| rpc.request_async(msg))?;
        loop {
            // As in `call`: this thread reads its own response, without the
            // GIL; one that fits is copied once, from its ring node (or the
            // buffer it was delivered in) into the caller's buffer.
            let put = move |response: &[u8]| {
                if response.len() > spot.len() {
                    return Err(bytes_attached(response));
                }
                // SAFETY: `dst` keeps the buffer exported until this method
                // returns, after the wait; the slice dies here.
                tachyon::platform::copy::copy(&mut unsafe { spot.slice() }[..response.len()], response);
                Ok(response.len())
            };
            match py.detach(|| future.wait_with(Some(SLICE), put)).py(py)? {
                Some(Ok(n)) => return Ok(n),
                Some(Err(whole)) => return Err(too_small(py, whole?, spot.len())),
                None => py.check_signals()?,
            }
        }
    }

    /// Sends a one-way message: the peer's handler runs, nothing comes back.
    fn notify(&self, py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<()> {
        with_request(py, data, self.get()?, |rpc, msg| rpc.notify(msg))?.py(py)
    }

    /// Whether this end created the channel.
    #[getter]
    fn is_owner(&self) -> PyResult<bool> {
        Ok(self.get()?.is_owner())
    }

    /// Closes this end (the peer's calls then fail with tachyon.Closed).
    fn close(&self, py: Python<'_>) {
        let rpc = lock(&self.rpc).take();
        // Closing joins this end's threads, whose handlers may wait for
        // the GIL: release it meanwhile. A call of another thread may hold
        // the handle for a moment yet (`with_request`): close now all the
        // same; its drop then joins the threads, without the GIL as well.
        py.detach(|| {
            if let Some(rpc) = rpc {
                rpc.close();
            }
        });
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, pyo3::types::PyTuple>) -> bool {
        self.close(py);
        false
    }

    fn __repr__(&self) -> String {
        format!("RpcBuffer({:?})", self.name)
    }
}

/// The tachyon.BufferTooSmall of a `call_into` whose response (`whole`)
/// is longer than its buffer of `buffer` bytes, the response in its
/// `response` attribute.
fn too_small(py: Python<'_>, whole: Py<PyBytes>, buffer: usize) -> PyErr {
    let item = whole.bind(py).as_bytes().len();
    let err = to_py(py, tachyon::Error::BufferTooSmall { item, buffer });
    match err.value(py).setattr("response", whole) {
        Ok(()) => err,
        Err(e) => e,
    }
}

impl PyRpcBuffer {
    /// The handle, out of the lock (ValueError once closed).
    fn get(&self) -> PyResult<Arc<RpcBuffer>> {
        lock(&self.rpc).clone().ok_or_else(|| self.closed())
    }

    fn closed(&self) -> PyErr {
        PyValueError::new_err(format!("RPC channel {:?} was closed", self.name))
    }
}

impl Drop for PyRpcBuffer {
    fn drop(&mut self) {
        if let Some(rpc) = lock(&self.rpc).take() {
            // As in `close`: the threads joined may wait for the GIL.
            Python::attach(|py| py.detach(|| drop(rpc)));
        }
    }
}

/// `send(&rpc, msg)` without the GIL, `msg` being `data`'s bytes (a
/// `bytes` object's own, a private copy of another's: [`without_gil`]).
/// `rpc` is dropped without the GIL too: after a `close` it may be the
/// last handle, whose drop joins the threads of this end.
fn with_request<R: Send>(
    py: Python<'_>,
    data: &Bound<'_, PyAny>,
    rpc: Arc<RpcBuffer>,
    send: impl FnOnce(&RpcBuffer, &[u8]) -> R + Send,
) -> PyResult<R> {
    let msg = with_bytes(data, |bytes| without_gil(data, bytes))?;
    Ok(py.detach(move || send(&rpc, &msg)))
}

/// A Python handler's response, to be written without the GIL.
enum Answer {
    /// None: an empty response.
    Empty,
    /// A bytes object, held by the reference, and where its bytes lie.
    Bytes(Py<PyBytes>, *const u8, usize),
    /// Any other bytes-like object's bytes, copied (another thread could
    /// change them once the GIL is released).
    Copied(Vec<u8>),
}

/// Runs the Python handler on a request (with the GIL) and writes its
/// response into `out` (without it), straight into the ring node it goes
/// out in when it fits one; or returns its exception as text (which
/// reaches the caller as `Error::Remote`; nothing is written then).
///
/// The write is made without the GIL because the node's claim may wait
/// for room in the ring, up to the channel's timeout: with the GIL held,
/// that wait would stop every other Python thread of the process, and
/// could keep the very reader that makes room from running (this
/// process's other end, whose handlers need the GIL).
fn call_handler(handler: &Py<PyAny>, msg: &[u8], out: &mut ResponseWriter<'_>) -> Result<(), String> {
    // Held to the end: the response may be written from a bytes object's
    // memory, which the interpreter's exit must not take away under it.
    let _entered = InPython::enter().ok_or("the handler's Python interpreter is exiting")?;
    let answer = Python::attach(|py| {
        let describe = |e: PyErr| {
            let kind = e.get_type(py).name().map(|n| n.to_string()).unwrap_or_else(|_| "Exception".into());
            format!("{kind}: {}", e.value(py))
        };
        let response = handler.bind(py).call1((bytes_of(py, msg).map_err(describe)?,)).map_err(describe)?;
        if response.is_none() {
            return Ok(Answer::Empty);
        }
        if let Ok(bytes) = response.cast::<PyBytes>() {
            let b = bytes.as_bytes();
            return Ok(Answer::Bytes(bytes.clone().unbind(), b.as_ptr(), b.len()));
        }
        with_bytes(&response, tachyon::platform::copy::to_vec).map(Answer::Copied).map_err(describe)
    })?;
    match answer {
        Answer::Empty => {}
        Answer::Copied(v) => out.extend_from_slice(&v),
        Answer::Bytes(held, at, len) => {
            // SAFETY: `at` and `len` are the bytes of the bytes object
            // `held` refers to, taken with the GIL. `held` keeps the object
            // alive until after the write; a bytes object never changes
            // and CPython never moves an object, so its bytes stay valid
            // and unchanged without the GIL, as `with_request` reads a
            // request's.
            out.extend_from_slice(unsafe { std::slice::from_raw_parts(at, len) });
            // Dropped without the GIL: PyO3 gives the reference back the
            // next time a thread of the process attaches (at the latest,
            // the next handler call), rather than waiting for the GIL here
            // before the response goes out.
            drop(held);
        }
    }
    Ok(())
}
