//! The shared-memory primitives: the ring (`ty_ring_*`, over
//! `CircularBuffer`), the byte buffer (`ty_buffer_*`, over `SharedBuffer`)
//! and RPC with a C callback handler (`ty_rpc_*`, over `RpcBuffer`). Only
//! their basic create / open / write / read / request calls are wrapped.

use crate::error::*;
use std::ffi::{c_char, c_int, c_void};
use std::time::Duration;
use tachyon_core::primitives::rpc::{ResponseWriter, RpcBuilder, ThreadWork};
use tachyon_core::{CircularBuffer, RpcBuffer, SharedBuffer};

const RING_MAGIC: u64 = 0x7479_5f72_696e_6721; // "ty_ring!"
const BUFFER_MAGIC: u64 = 0x7479_5f62_7566_6621; // "ty_buff!"
const RPC_MAGIC: u64 = 0x7479_5f72_7063_2121; // "ty_rpc!!"
const DEAD: u64 = 0xdead_dead_dead_dead;

/// A ring of fixed-size nodes shared between processes (opaque): any
/// number of writers and readers, each item read by one reader. From
/// `ty_ring_create` / `ty_ring_open`, to `ty_ring_close`.
// `repr(C)`, magic first: see `ty_region_t`.
#[repr(C)]
pub struct ty_ring_t {
    magic: u64,
    ring: CircularBuffer,
}

/// A fixed-size byte buffer shared between processes (opaque), read and
/// written at offsets under a robust reader-writer lock. From
/// `ty_buffer_create` / `ty_buffer_open`, to `ty_buffer_close`.
#[repr(C)]
pub struct ty_buffer_t {
    magic: u64,
    buffer: SharedBuffer,
}

/// One end of a request/response channel between two processes (opaque).
/// From `ty_rpc_create` (the owner) / `ty_rpc_open` (the one client), to
/// `ty_rpc_close`.
#[repr(C)]
pub struct ty_rpc_t {
    magic: u64,
    rpc: RpcBuffer,
}

/// The response a handler builds (opaque): set it with `ty_rpc_reply`.
/// It is written straight into the ring node it goes out in when it fits
/// one, else through a buffer.
pub struct ty_rpc_reply_t {
    /// The handler's `ResponseWriter`, alive for the handler's call only.
    out: *mut c_void,
}

/// How an RPC end is built: a plain value. Start from a copy of
/// `ty_rpc_conf_default` and change fields:
///
/// ```c
/// ty_rpc_conf_t rc = ty_rpc_conf_default;
/// rc.node_size = 1 << 20;          /* calls up to 1 MiB in one packet */
/// rc.notify = TY_NOTIFY_SPIN;      /* this end's waits spin */
/// ```
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ty_rpc_conf_t {
    /// Nodes per direction, 2 or more. The owner chooses: 0 (the default)
    /// is 64 for `ty_rpc_create_with` and the owner's for
    /// `ty_rpc_open_with`, where any other value must be the owner's
    /// (else `TY_EINCOMPAT`).
    pub node_count: u32,
    /// Bytes per node, the packet's 32-byte header included: a message
    /// longer than `node_size - 32` goes in several packets. As
    /// `node_count`: 0 (the default) is 4096 when creating, the owner's
    /// when opening.
    pub node_size: usize,
    /// How this end's callers and reader thread wait: `TY_NOTIFY_HYBRID`
    /// (default), `TY_NOTIFY_SPIN` or `TY_NOTIFY_FUTEX`. Each end chooses
    /// its own.
    pub notify: c_int,
    /// Handler threads kept ready, 1 or more (0 is 1). Default 2.
    pub handler_threads: u32,
    /// 1: every handler of this end runs on its reader thread (one at a
    /// time; a handler must not call through this channel, such a call
    /// fails with `TY_EINVAL`). Default 0.
    pub inline_handlers: c_int,
    /// The deadline of this end's responses, after which one that cannot
    /// be sent (the ring stays full) is dropped, in nanoseconds, 1 or
    /// more. Default 30 s.
    pub timeout_ns: i64,
    /// The largest message this end sends or accepts, in bytes (at most
    /// 2^32 - 1). Default 64 MiB.
    pub max_message: usize,
    /// Starts this end's threads (its reader, the handler threads, every
    /// thread on which its handler runs), with `spawn_ctx`: see
    /// `ty_spawn_fn`. NULL (the default) starts them as the system's
    /// threads. For threads pinned to cores or given a priority, and for
    /// runtimes that pay for code run on threads they did not start (the
    /// Go binding starts them as goroutines' threads).
    pub spawn: ty_spawn_fn,
    /// Passed to `spawn`; it must stay valid until `ty_rpc_close`
    /// returns. Default NULL (set without `spawn`: `TY_EINVAL`).
    pub spawn_ctx: *mut c_void,
}

// SAFETY: a plain value; the library never dereferences `spawn_ctx`, it
// only passes it back to `spawn`, whose contract covers its use from any
// thread. (`ty_rpc_conf_default` is a `static`, which needs `Sync`.)
unsafe impl Sync for ty_rpc_conf_t {}

/// How `ty_rpc_conf_t.spawn` starts a thread: it gets `ctx` (the conf's
/// `spawn_ctx`), the thread's `name` (valid during the call only) and
/// `run` / `task`. It must call `run(task)` exactly once, on a new thread
/// (`run` returns when the end closes), and return 0; or return any other
/// value without ever calling `run` (the library then frees `task`). If
/// the reader thread cannot start, `ty_rpc_create_with` /
/// `ty_rpc_open_with` fail with `TY_EIO`; a handler thread that cannot
/// start leaves its requests to the others (or, with none started at all,
/// to the thread that read them).
///
/// It may be called from any of the end's threads, from several at once,
/// until `ty_rpc_close` returns: it must be thread-safe, and so must what
/// `ctx` points to.
pub type ty_spawn_fn = Option<
    unsafe extern "C" fn(
        ctx: *mut c_void,
        name: *const c_char,
        run: unsafe extern "C" fn(task: *mut c_void),
        task: *mut c_void,
    ) -> c_int,
>;

/// The defaults of an RPC end: the owner's geometry (64 nodes of 4096
/// bytes when creating), hybrid waits, 2 handler threads, a 30 s timeout,
/// 64 MiB messages. Copy it, never write it.
#[no_mangle]
pub static ty_rpc_conf_default: ty_rpc_conf_t = ty_rpc_conf_t {
    node_count: 0,
    node_size: 0,
    notify: crate::bus::TY_NOTIFY_HYBRID,
    handler_threads: 2,
    inline_handlers: 0,
    timeout_ns: 30_000_000_000,
    max_message: 64 << 20,
    spawn: None,
    spawn_ctx: std::ptr::null_mut(),
};

/// A handler of the peer's requests: gets `user` (as given to
/// `ty_rpc_create` / `ty_rpc_open`), the request's `len` bytes at `req`
/// (valid during the call only) and a reply to fill with `ty_rpc_reply`
/// (left empty: an empty response). Returns 0, or any other value to fail
/// the request: the caller's `ty_rpc_request` then returns `TY_EREMOTE`.
///
/// It runs on the library's handler threads, possibly on several at once:
/// it must be thread-safe, and so must what `user` points to.
pub type ty_rpc_handler_fn = Option<
    unsafe extern "C" fn(
        user: *mut c_void,
        req: *const c_void,
        len: usize,
        reply: *mut ty_rpc_reply_t,
    ) -> c_int,
>;

macro_rules! handle_of {
    ($fn:ident, $ty:ty, $magic:expr, $what:literal) => {
        /// The handle behind a C pointer.
        ///
        /// # Safety
        /// `p` is NULL or a pointer its `create` / `open` returned, not closed.
        unsafe fn $fn<'a>(p: *const $ty) -> Res<&'a $ty> {
            if p.is_null() || !p.is_aligned() {
                return Err(invalid(concat!($what, " handle is NULL or misaligned")));
            }
            // SAFETY: a live `Box<$ty>` by the caller's contract.
            let h = unsafe { &*p };
            if h.magic != $magic {
                return Err(invalid(concat!("not a ", $what, " handle (closed already?)")));
            }
            Ok(h)
        }
    };
}
handle_of!(ring, ty_ring_t, RING_MAGIC, "ring");
handle_of!(buffer, ty_buffer_t, BUFFER_MAGIC, "buffer");
handle_of!(rpc, ty_rpc_t, RPC_MAGIC, "rpc");

/// Runs `make` and writes the handle it returns to `out` (NULL on failure).
///
/// # Safety
/// `out` is NULL or writable.
unsafe fn put<T>(out: *mut *mut T, make: impl FnOnce() -> Res<T>) -> c_int {
    guard(|| {
        let out = arg_out(out, "out (the handle's address)")?;
        // SAFETY: not NULL, writable per the contract.
        unsafe { out.write(std::ptr::null_mut()) };
        let handle = Box::into_raw(Box::new(make()?));
        // SAFETY: as above.
        unsafe { out.write(handle) };
        Ok(TY_OK)
    })
}

/// `len` bytes at `p` (NULL allowed when `len` is 0).
///
/// # Safety
/// `p` is NULL or readable for `len` bytes for `'a`.
unsafe fn bytes<'a>(p: *const c_void, len: usize, what: &str) -> Res<&'a [u8]> {
    if len == 0 {
        Ok(&[])
    } else if p.is_null() {
        Err(invalid(format!("{what} is NULL")))
    } else {
        // SAFETY: not NULL, readable for `len` bytes per the contract.
        Ok(unsafe { std::slice::from_raw_parts(p.cast(), len) })
    }
}

/// `len` writable bytes at `p` (NULL allowed when `len` is 0).
///
/// # Safety
/// `p` is NULL or writable for `len` bytes for `'a`, and nothing else
/// accesses them meanwhile.
pub(crate) unsafe fn bytes_mut<'a>(p: *mut c_void, len: usize, what: &str) -> Res<&'a mut [u8]> {
    if len == 0 {
        Ok(&mut [])
    } else if p.is_null() {
        Err(invalid(format!("{what} is NULL")))
    } else {
        // SAFETY: not NULL, writable and exclusive for `len` bytes per the
        // contract.
        Ok(unsafe { std::slice::from_raw_parts_mut(p.cast(), len) })
    }
}

/// Creates the ring `name` of `node_count` nodes (2 or more; any count, all
/// of them usable) of `node_size` bytes each (the largest item). The ring is removed
/// when the last process closes it.
///
/// On success `*out` is a new handle, for `ty_ring_close`; NULL on failure.
/// Errors: `TY_EINVAL` (NULL, bad name or geometry), `TY_EEXIST`,
/// `TY_ENOSPC`, `TY_EPERM`, `TY_EIO`. Thread-safe.
///
/// # Safety
/// `name` is NULL or a NUL-terminated string; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ty_ring_create(
    name: *const c_char,
    node_count: usize,
    node_size: usize,
    out: *mut *mut ty_ring_t,
) -> c_int {
    let make = || {
        // SAFETY: per this function's contract.
        let name = unsafe { arg_str(name, "name")? };
        Ok(ty_ring_t { magic: RING_MAGIC, ring: CircularBuffer::create(name, node_count, node_size)? })
    };
    // SAFETY: `out` per this function's contract.
    unsafe { put(out, make) }
}

/// `ty_ring_create_with`'s option: light hand-overs. Nodes are handed
/// over by plain stores and the wake-up check has no fence; a waiter that
/// goes to sleep runs `membarrier(2)` first, which interrupts the CPUs
/// running processes with such a ring open (docs/rings.md, "Light
/// hand-overs": about 1.5 × the items per second at 64 B, and what it
/// gives up).
pub const TY_RING_LIGHT_HANDOVERS: u32 = 1;

/// Creates the ring `name` as `ty_ring_create` does, with options:
/// `flags` is 0 or `TY_RING_LIGHT_HANDOVERS`. The option is the ring's:
/// `ty_ring_open` in any process uses it.
///
/// Errors: as `ty_ring_create`; `TY_EINVAL` for a flag it does not know.
///
/// # Safety
/// As `ty_ring_create`.
#[no_mangle]
pub unsafe extern "C" fn ty_ring_create_with(
    name: *const c_char,
    node_count: usize,
    node_size: usize,
    flags: u32,
    out: *mut *mut ty_ring_t,
) -> c_int {
    let make = || {
        // SAFETY: per this function's contract.
        let name = unsafe { arg_str(name, "name")? };
        if flags & !TY_RING_LIGHT_HANDOVERS != 0 {
            return Err(invalid(format!("unknown ring flags {flags:#x}")));
        }
        let ring = CircularBuffer::builder(name)
            .node_count(node_count)
            .node_size(node_size)
            .light_handovers(flags & TY_RING_LIGHT_HANDOVERS != 0)
            .create()?;
        Ok(ty_ring_t { magic: RING_MAGIC, ring })
    };
    // SAFETY: `out` per this function's contract.
    unsafe { put(out, make) }
}

/// 1 if the ring's hand-overs are light (`TY_RING_LIGHT_HANDOVERS`), 0 if
/// not or for an invalid handle. Thread-safe.
///
/// # Safety
/// `ring` is NULL or a live ring handle.
#[no_mangle]
pub unsafe extern "C" fn ty_ring_light_handovers(ring: *const ty_ring_t) -> c_int {
    let mut light = 0;
    guard(|| {
        // SAFETY: per this function's contract.
        light = c_int::from(unsafe { self::ring(ring)? }.ring.light_handovers());
        Ok(TY_OK)
    });
    light
}

/// Turns batch reads on (`on` non-zero) or off for this handle's reads
/// (the Rust `CircularBuffer::set_batch_reads`; off by default). A reader
/// that has caught up with a writer in mid-stream waits until the writer
/// is a batch ahead (at most 32 items, and 2 KiB of them; none for items
/// over 256 bytes) before it takes the first, instead of taking each item
/// the moment it is written. For a reader that wants throughput: a stream
/// of 64-byte items ran 1.2 to 2 times as fast on the Intel Xeons
/// measured. Not for one that wants each
/// item at once: an item waits for the batch behind it, or, where its
/// writer stops short, about 1 µs of looks (docs/rings.md, "Batch
/// reads"). A handle's option: nothing in the ring changes, and other
/// handles, in this process or another, read as they choose.
///
/// Errors: `TY_EINVAL` (NULL or not a ring handle).
///
/// Not thread-safe for one handle: no other call may use `ring` during
/// this one (set it before the handle is shared between threads).
///
/// ```c
/// ty_ring_t* in;
/// ty_ring_open("frames", &in);
/// ty_ring_set_batch_reads(in, 1); /* this handle reads in batches */
/// ```
///
/// # Safety
/// `ring` is NULL or a live ring handle that no other call uses during
/// this one.
#[no_mangle]
pub unsafe extern "C" fn ty_ring_set_batch_reads(ring: *mut ty_ring_t, on: c_int) -> c_int {
    guard(|| {
        // SAFETY: per this function's contract; checked to be a live ring
        // handle before it is written.
        unsafe { self::ring(ring)? };
        // SAFETY: a live `Box<ty_ring_t>` (checked above) that no other
        // call uses during this one (the contract): this is the only
        // reference to it.
        unsafe { &mut *ring }.ring.set_batch_reads(on != 0);
        Ok(TY_OK)
    })
}

/// 1 if this handle reads in batches (`ty_ring_set_batch_reads`), 0 if
/// not or for an invalid handle. Thread-safe.
///
/// # Safety
/// `ring` is NULL or a live ring handle.
#[no_mangle]
pub unsafe extern "C" fn ty_ring_batch_reads(ring: *const ty_ring_t) -> c_int {
    let mut batch = 0;
    guard(|| {
        // SAFETY: per this function's contract.
        batch = c_int::from(unsafe { self::ring(ring)? }.ring.batch_reads());
        Ok(TY_OK)
    });
    batch
}

/// Sets how this handle's waits wait: `TY_NOTIFY_HYBRID` (the default:
/// spin a few microseconds, then sleep), `TY_NOTIFY_SPIN` (never sleep:
/// lowest latency, a CPU per waiter) or `TY_NOTIFY_FUTEX` (sleep at
/// once). A handle's option, as `ty_ring_set_batch_reads`: writers and
/// readers wake each other whatever each one's choice.
///
/// Errors: `TY_EINVAL` (NULL or not a ring handle, or another value).
///
/// Not thread-safe for one handle: no other call may use `ring` during
/// this one (set it before the handle is shared between threads).
///
/// ```c
/// ty_ring_t* in;
/// ty_ring_open("frames", &in);
/// ty_ring_set_notify(in, TY_NOTIFY_SPIN); /* this handle never sleeps */
/// ```
///
/// # Safety
/// `ring` is NULL or a live ring handle that no other call uses during
/// this one.
#[no_mangle]
pub unsafe extern "C" fn ty_ring_set_notify(ring: *mut ty_ring_t, notify: c_int) -> c_int {
    guard(|| {
        // SAFETY: per this function's contract; checked to be a live ring
        // handle before it is written.
        unsafe { self::ring(ring)? };
        let policy = crate::bus::notify_policy(notify)?;
        // SAFETY: a live `Box<ty_ring_t>` (checked above) that no other
        // call uses during this one (the contract): this is the only
        // reference to it.
        unsafe { &mut *ring }.ring.set_wait_policy(policy);
        Ok(TY_OK)
    })
}

/// How this handle's waits wait (`ty_ring_set_notify`): a `TY_NOTIFY_*`
/// value, or `TY_EINVAL` for an invalid handle. Thread-safe.
///
/// # Safety
/// `ring` is NULL or a live ring handle.
#[no_mangle]
pub unsafe extern "C" fn ty_ring_notify(ring: *const ty_ring_t) -> c_int {
    let mut notify = TY_EINVAL;
    guard(|| {
        // SAFETY: per this function's contract.
        notify = crate::bus::notify_code(unsafe { self::ring(ring)? }.ring.wait_policy());
        Ok(TY_OK)
    });
    notify
}

/// Opens the existing ring `name`.
///
/// Errors: `TY_EINVAL`, `TY_ENOENT`, `TY_EKIND`, `TY_ECORRUPT`, `TY_EPERM`.
/// Otherwise as `ty_ring_create`.
///
/// # Safety
/// As `ty_ring_create`.
#[no_mangle]
pub unsafe extern "C" fn ty_ring_open(name: *const c_char, out: *mut *mut ty_ring_t) -> c_int {
    let make = || {
        // SAFETY: per this function's contract.
        let name = unsafe { arg_str(name, "name")? };
        Ok(ty_ring_t { magic: RING_MAGIC, ring: CircularBuffer::open(name)? })
    };
    // SAFETY: `out` per this function's contract.
    unsafe { put(out, make) }
}

/// Writes one item of `len` bytes (at most the node size) into the ring,
/// waiting at most `timeout_ns` for a free node (-1 for ever, 0 not at
/// all).
///
/// Errors: `TY_EINVAL`, `TY_EMSGSIZE` (longer than a node; nothing is
/// cut), `TY_ETIMEDOUT` (the ring stayed full), `TY_EINTR`
/// (`ty_interrupt`), `TY_ECLOSED` (the ring was shut down:
/// `ty_ring_shutdown`). Thread-safe.
///
/// # Safety
/// `ring` is NULL or a live ring handle; `data` NULL (with `len` 0) or
/// readable for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn ty_ring_write(
    ring: *const ty_ring_t,
    data: *const c_void,
    len: usize,
    timeout_ns: i64,
) -> c_int {
    guard(|| {
        // SAFETY: per this function's contract.
        let r = unsafe { self::ring(ring)? };
        // SAFETY: per this function's contract.
        let item = unsafe { bytes(data, len, "data")? };
        interruptible(arg_timeout(timeout_ns)?, |w| r.ring.write(item, w))?;
        Ok(TY_OK)
    })
}

/// Reads the next item into `buf` (of `cap` bytes), waiting at most
/// `timeout_ns` for one (-1 for ever, 0 not at all); `*len` gets its
/// length. Each item goes to one reader.
///
/// Errors: `TY_EINVAL`, `TY_ETIMEDOUT` (the ring stayed empty), `TY_EINTR`,
/// `TY_EMSGSIZE` / `TY_ENOBUFS` (the item is longer than `cap`; it stays
/// in the ring: pass a buffer of `ty_ring_node_size` bytes), `TY_ECLOSED`
/// (the ring was shut down and is empty). Thread-safe.
///
/// # Safety
/// `ring` is NULL or a live ring handle; `buf` NULL (with `cap` 0) or
/// writable for `cap` bytes; `len` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ty_ring_read(
    ring: *const ty_ring_t,
    buf: *mut c_void,
    cap: usize,
    len: *mut usize,
    timeout_ns: i64,
) -> c_int {
    guard(|| {
        // SAFETY: per this function's contract.
        let r = unsafe { self::ring(ring)? };
        let len = arg_out(len, "len")?;
        // SAFETY: per this function's contract.
        let buf = unsafe { bytes_mut(buf, cap, "buf")? };
        let n = interruptible(arg_timeout(timeout_ns)?, |w| r.ring.read(buf, w))?;
        // SAFETY: not NULL, writable per the contract.
        unsafe { len.write(n) };
        Ok(TY_OK)
    })
}

/// The ring's node size (the largest item), or 0 for an invalid handle.
/// Thread-safe.
///
/// # Safety
/// `ring` is NULL or a live ring handle.
#[no_mangle]
pub unsafe extern "C" fn ty_ring_node_size(ring: *const ty_ring_t) -> usize {
    let mut size = 0;
    guard(|| {
        // SAFETY: per this function's contract.
        size = unsafe { self::ring(ring)? }.ring.node_size();
        Ok(TY_OK)
    });
    size
}

/// Shuts the ring down for every process (the Rust `CircularBuffer::close`):
/// from now on writes fail with `TY_ECLOSED`, reads return the items still
/// queued and then `TY_ECLOSED` instead of waiting, and calls blocked in
/// any process wake. For good; the handle stays valid (close it with
/// `ty_ring_close`). Errors: `TY_EINVAL`. Thread-safe.
///
/// # Safety
/// `ring` is NULL or a live ring handle.
#[no_mangle]
pub unsafe extern "C" fn ty_ring_shutdown(ring: *const ty_ring_t) -> c_int {
    guard(|| {
        // SAFETY: per this function's contract.
        unsafe { self::ring(ring)? }.ring.close();
        Ok(TY_OK)
    })
}

/// Closes a ring handle; the last close in any process removes the ring.
/// NULL is ignored. Must be the last call on `ring`.
///
/// # Safety
/// `ring` is NULL or a live ring handle, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn ty_ring_close(ring: *mut ty_ring_t) {
    guard_void(|| {
        // SAFETY: per this function's contract.
        if unsafe { self::ring(ring) }.is_ok() {
            // SAFETY: a live handle made by `Box::into_raw` in `put`, not
            // used any more per the contract.
            let mut b = unsafe { Box::from_raw(ring) };
            b.magic = DEAD;
        }
    })
}

/// Creates the byte buffer `name` of `size` bytes, zeroed. It is removed
/// when the last process closes it.
///
/// On success `*out` is a new handle, for `ty_buffer_close`; NULL on
/// failure. Errors: `TY_EINVAL`, `TY_EEXIST`, `TY_ENOSPC`, `TY_EPERM`,
/// `TY_EIO`. Thread-safe.
///
/// # Safety
/// `name` is NULL or a NUL-terminated string; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ty_buffer_create(
    name: *const c_char,
    size: usize,
    out: *mut *mut ty_buffer_t,
) -> c_int {
    let make = || {
        // SAFETY: per this function's contract.
        let name = unsafe { arg_str(name, "name")? };
        Ok(ty_buffer_t { magic: BUFFER_MAGIC, buffer: SharedBuffer::create(name, size)? })
    };
    // SAFETY: `out` per this function's contract.
    unsafe { put(out, make) }
}

/// Opens the existing byte buffer `name`. Errors: `TY_EINVAL`, `TY_ENOENT`,
/// `TY_EKIND`, `TY_ECORRUPT`, `TY_EPERM`. Otherwise as `ty_buffer_create`.
///
/// # Safety
/// As `ty_buffer_create`.
#[no_mangle]
pub unsafe extern "C" fn ty_buffer_open(name: *const c_char, out: *mut *mut ty_buffer_t) -> c_int {
    let make = || {
        // SAFETY: per this function's contract.
        let name = unsafe { arg_str(name, "name")? };
        Ok(ty_buffer_t { magic: BUFFER_MAGIC, buffer: SharedBuffer::open(name)? })
    };
    // SAFETY: `out` per this function's contract.
    unsafe { put(out, make) }
}

/// Copies `len` bytes from `data` into the buffer at `offset`, under the
/// buffer's write lock (readers see all of it or none).
///
/// Errors: `TY_EINVAL` (NULL, or the range does not fit: nothing written),
/// `TY_ETIMEDOUT` (the lock stayed taken). Thread-safe.
///
/// # Safety
/// `buf` is NULL or a live buffer handle; `data` NULL (with `len` 0) or
/// readable for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn ty_buffer_write(
    buf: *const ty_buffer_t,
    offset: usize,
    data: *const c_void,
    len: usize,
) -> c_int {
    guard(|| {
        // SAFETY: per this function's contract.
        let b = unsafe { buffer(buf)? };
        // SAFETY: per this function's contract.
        let data = unsafe { bytes(data, len, "data")? };
        b.buffer.write_bytes(offset, data)?;
        Ok(TY_OK)
    })
}

/// Copies `len` bytes of the buffer at `offset` into `out`, under the
/// buffer's read lock.
///
/// Errors: `TY_EINVAL` (NULL, or the range does not fit), `TY_ETIMEDOUT`.
/// Thread-safe.
///
/// # Safety
/// `buf` is NULL or a live buffer handle; `out` NULL (with `len` 0) or
/// writable for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn ty_buffer_read(
    buf: *const ty_buffer_t,
    offset: usize,
    out: *mut c_void,
    len: usize,
) -> c_int {
    guard(|| {
        // SAFETY: per this function's contract.
        let b = unsafe { buffer(buf)? };
        // SAFETY: per this function's contract.
        let out = unsafe { bytes_mut(out, len, "out")? };
        b.buffer.read_bytes(offset, out)?;
        Ok(TY_OK)
    })
}

/// The buffer's size in bytes, or 0 for an invalid handle. Thread-safe.
///
/// # Safety
/// `buf` is NULL or a live buffer handle.
#[no_mangle]
pub unsafe extern "C" fn ty_buffer_size(buf: *const ty_buffer_t) -> usize {
    let mut size = 0;
    guard(|| {
        // SAFETY: per this function's contract.
        size = unsafe { buffer(buf)? }.buffer.len();
        Ok(TY_OK)
    });
    size
}

/// Closes a buffer handle; the last close in any process removes the
/// buffer. NULL is ignored. Must be the last call on `buf`.
///
/// # Safety
/// `buf` is NULL or a live buffer handle, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn ty_buffer_close(buf: *mut ty_buffer_t) {
    guard_void(|| {
        // SAFETY: per this function's contract.
        if unsafe { buffer(buf) }.is_ok() {
            // SAFETY: a live handle made by `Box::into_raw` in `put`, not
            // used any more per the contract.
            let mut b = unsafe { Box::from_raw(buf) };
            b.magic = DEAD;
        }
    })
}

/// The C handler and its `user` pointer, callable from the library's
/// threads.
#[derive(Clone, Copy)]
struct CHandler {
    f: unsafe extern "C" fn(*mut c_void, *const c_void, usize, *mut ty_rpc_reply_t) -> c_int,
    user: *mut c_void,
}

// SAFETY: the C caller promises (see `ty_rpc_handler_fn`) that the handler
// and what `user` points to may be used from any thread at once.
unsafe impl Send for CHandler {}
// SAFETY: as for `Send`.
unsafe impl Sync for CHandler {}

impl CHandler {
    fn call(&self, req: &[u8], out: &mut ResponseWriter<'_>) -> Result<(), String> {
        let mut reply = ty_rpc_reply_t { out: (out as *mut ResponseWriter<'_>).cast() };
        // SAFETY: the handler's contract (`ty_rpc_handler_fn`): `req` is
        // readable for its length during the call, `reply` a valid reply
        // it may fill with `ty_rpc_reply` (its writer outlives the call).
        let rc = unsafe { (self.f)(self.user, req.as_ptr().cast(), req.len(), &mut reply) };
        if rc == 0 {
            Ok(())
        } else {
            Err(format!("the C handler returned {rc}"))
        }
    }
}

/// # Safety
/// As `ty_rpc_create_with`.
unsafe fn rpc_start(
    name: *const c_char,
    conf: *const ty_rpc_conf_t,
    handler: ty_rpc_handler_fn,
    user: *mut c_void,
    out: *mut *mut ty_rpc_t,
    create: bool,
) -> c_int {
    let make = || {
        // SAFETY: per the caller's contract.
        let name = unsafe { arg_str(name, "name")? };
        // SAFETY: NULL or readable, per the caller's contract.
        let c = unsafe { conf.as_ref() }.unwrap_or(&ty_rpc_conf_default);
        let mut b = rpc_builder(name, c)?;
        if let Some(f) = handler {
            let h = CHandler { f, user };
            b = b.handler_in_place(move |_id, req: &[u8], out: &mut ResponseWriter<'_>| h.call(req, out));
        }
        let rpc = if create { b.create()? } else { b.open()? };
        Ok(ty_rpc_t { magic: RPC_MAGIC, rpc })
    };
    // SAFETY: `out` per the caller's contract.
    unsafe { put(out, make) }
}

/// The C spawner and its `ctx`, callable from the library's threads.
#[derive(Clone, Copy)]
struct CSpawn {
    f: unsafe extern "C" fn(
        *mut c_void,
        *const c_char,
        unsafe extern "C" fn(*mut c_void),
        *mut c_void,
    ) -> c_int,
    ctx: *mut c_void,
}

// SAFETY: the C caller promises (see `ty_spawn_fn`) that the spawner and
// what `ctx` points to may be used from any thread at once.
unsafe impl Send for CSpawn {}
// SAFETY: as for `Send`.
unsafe impl Sync for CSpawn {}

impl CSpawn {
    fn spawn(&self, name: &str, work: ThreadWork) -> std::io::Result<()> {
        let cname = std::ffi::CString::new(name).map_err(std::io::Error::other)?;
        let task = Box::into_raw(Box::new(work)).cast::<c_void>();
        // SAFETY: the spawner's contract (`ty_spawn_fn`): `cname` is valid
        // during the call, and `run(task)` is called once, on a new thread,
        // if and only if it returns 0.
        let rc = unsafe { (self.f)(self.ctx, cname.as_ptr(), ty_rpc_run_task, task) };
        if rc == 0 {
            return Ok(());
        }
        // SAFETY: not run and never to be (the contract): the box is ours.
        drop(unsafe { Box::from_raw(task.cast::<ThreadWork>()) });
        Err(std::io::Error::other(format!("the C spawner returned {rc} for {name:?}")))
    }
}

/// The `run` a C spawner calls with `task`: the thread's work.
///
/// # Safety
/// `task` is the one given to the spawner, passed here once.
unsafe extern "C" fn ty_rpc_run_task(task: *mut c_void) {
    // SAFETY: per the contract, a `Box<ThreadWork>` made by `CSpawn::spawn`
    // and given up to this call.
    let work = unsafe { Box::from_raw(task.cast::<ThreadWork>()) };
    // A panic must not unwind into C; the work's own guards have run.
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(work));
}

/// The builder `c` describes.
fn rpc_builder(name: &str, c: &ty_rpc_conf_t) -> Res<RpcBuilder> {
    if c.timeout_ns <= 0 {
        return Err(invalid(format!("timeout_ns must be 1 or more, not {}", c.timeout_ns)));
    }
    if c.max_message > u32::MAX as usize {
        return Err(invalid(format!("max_message must be at most {}, not {}", u32::MAX, c.max_message)));
    }
    if c.inline_handlers != 0 && c.inline_handlers != 1 {
        return Err(invalid(format!("inline_handlers must be 0 or 1, not {}", c.inline_handlers)));
    }
    let mut b = RpcBuffer::builder(name)
        .wait_policy(crate::bus::notify_policy(c.notify)?)
        .handler_threads(c.handler_threads as usize)
        .inline_handlers(c.inline_handlers == 1)
        .default_timeout(Duration::from_nanos(c.timeout_ns as u64))
        .max_message(c.max_message);
    // 0: the library's default when creating, the owner's when opening.
    if c.node_count != 0 {
        b = b.node_count(c.node_count as usize);
    }
    if c.node_size != 0 {
        b = b.node_size(c.node_size);
    }
    if let Some(f) = c.spawn {
        let s = CSpawn { f, ctx: c.spawn_ctx };
        b = b.thread_spawner(move |name: &str, work: ThreadWork| s.spawn(name, work));
    } else if !c.spawn_ctx.is_null() {
        return Err(invalid("spawn_ctx is set but spawn is NULL"));
    }
    Ok(b)
}

/// Creates the RPC channel `name`; this end is its owner. `handler` (may be
/// NULL: this end then answers no requests, they fail with `TY_EREMOTE`)
/// answers the requests of the other end, with `user` passed through. The
/// channel is removed when both ends have closed.
///
/// On success `*out` is a new handle, for `ty_rpc_close`; NULL on failure.
/// Errors: `TY_EINVAL`, `TY_EEXIST`, `TY_ENOSPC`, `TY_EPERM`, `TY_EIO`.
/// Thread-safe.
///
/// # Safety
/// `name` is NULL or a NUL-terminated string; `handler` NULL or a function
/// as `ty_rpc_handler_fn` says, valid (with `user`) until `ty_rpc_close`
/// returns; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ty_rpc_create(
    name: *const c_char,
    handler: ty_rpc_handler_fn,
    user: *mut c_void,
    out: *mut *mut ty_rpc_t,
) -> c_int {
    // SAFETY: per this function's contract.
    unsafe { rpc_start(name, std::ptr::null(), handler, user, out, true) }
}

/// Joins the RPC channel `name` as its client (one at a time: `TY_EBUSY`
/// if another is connected). Otherwise as `ty_rpc_create`; `TY_ENOENT` if
/// no such channel exists.
///
/// # Safety
/// As `ty_rpc_create`.
#[no_mangle]
pub unsafe extern "C" fn ty_rpc_open(
    name: *const c_char,
    handler: ty_rpc_handler_fn,
    user: *mut c_void,
    out: *mut *mut ty_rpc_t,
) -> c_int {
    // SAFETY: per this function's contract.
    unsafe { rpc_start(name, std::ptr::null(), handler, user, out, false) }
}

/// `ty_rpc_create` with the options in `conf` (NULL: `ty_rpc_conf_default`):
/// the geometry (a node size that holds the largest call's packet sends it
/// in one), how this end waits, its handler threads, its responses'
/// timeout, the largest message.
///
/// Errors: as `ty_rpc_create`; `TY_EINVAL` for a field out of range.
///
/// # Safety
/// As `ty_rpc_create`; `conf` is NULL or readable.
#[no_mangle]
pub unsafe extern "C" fn ty_rpc_create_with(
    name: *const c_char,
    conf: *const ty_rpc_conf_t,
    handler: ty_rpc_handler_fn,
    user: *mut c_void,
    out: *mut *mut ty_rpc_t,
) -> c_int {
    // SAFETY: per this function's contract.
    unsafe { rpc_start(name, conf, handler, user, out, true) }
}

/// `ty_rpc_open` with the options in `conf` (NULL:
/// `ty_rpc_conf_default`). Its `node_count` and `node_size` are best left
/// 0 (the owner's); set, they must be the owner's.
///
/// Errors: as `ty_rpc_open`; `TY_EINVAL` for a field out of range,
/// `TY_EINCOMPAT` for a geometry that is not the owner's.
///
/// # Safety
/// As `ty_rpc_create_with`.
#[no_mangle]
pub unsafe extern "C" fn ty_rpc_open_with(
    name: *const c_char,
    conf: *const ty_rpc_conf_t,
    handler: ty_rpc_handler_fn,
    user: *mut c_void,
    out: *mut *mut ty_rpc_t,
) -> c_int {
    // SAFETY: per this function's contract.
    unsafe { rpc_start(name, conf, handler, user, out, false) }
}

/// Sets the response a handler returns to `len` bytes copied from `data`
/// (replacing any set before). Only valid inside the handler, on the reply
/// it was given.
///
/// Errors: `TY_EINVAL` (NULL). Thread-safe (each reply is the handler's
/// own).
///
/// # Safety
/// `reply` is NULL or the reply the running handler was given; `data` NULL
/// (with `len` 0) or readable for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn ty_rpc_reply(reply: *mut ty_rpc_reply_t, data: *const c_void, len: usize) -> c_int {
    guard(|| {
        let reply = arg_out(reply, "reply")?;
        // SAFETY: per this function's contract.
        let data = unsafe { bytes(data, len, "data")? };
        // SAFETY: not NULL; the live reply of a running handler, used by it
        // alone, per the contract; its `out` is that handler's
        // `ResponseWriter` (`CHandler::call`), alive until the handler
        // returns.
        let out = unsafe { &mut *(*reply).out.cast::<ResponseWriter<'_>>() };
        out.clear();
        out.extend_from_slice(data);
        Ok(TY_OK)
    })
}

/// Sends a request of `len` bytes to the other end and waits at most
/// `timeout_ns` (-1 for ever) for its handler's response. On success
/// `*resp` points to the `*resp_len` response bytes, allocated by the
/// library: free them with `ty_rpc_free(*resp, *resp_len)` (a response of
/// 0 bytes is NULL and needs no free).
///
/// Errors: `TY_EINVAL`, `TY_ETIMEDOUT`, `TY_EREMOTE` (the handler failed
/// or there is none; `ty_last_error` has its text), `TY_ECLOSED`,
/// `TY_EPEERDIED`, `TY_EMSGSIZE`. Thread-safe: several threads may have
/// requests in flight on one handle.
///
/// # Safety
/// `rpc` is NULL or a live handle; `req` NULL (with `len` 0) or readable
/// for `len` bytes; `resp` and `resp_len` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ty_rpc_request(
    rpc: *const ty_rpc_t,
    req: *const c_void,
    len: usize,
    resp: *mut *mut c_void,
    resp_len: *mut usize,
    timeout_ns: i64,
) -> c_int {
    // SAFETY: per this function's contract.
    unsafe { request(rpc, req, len, resp, resp_len, timeout_ns, None) }
}

/// Where `ty_rpc_request_with` gives a response: `ctx` as given, and the
/// response's `len` bytes at `resp`, valid during the call only (in the
/// ring node it came in, when this thread read it there).
pub type ty_rpc_read_fn = Option<unsafe extern "C" fn(ctx: *mut c_void, resp: *const c_void, len: usize)>;

/// `ty_rpc_request` whose response is given to `read` where it lies,
/// instead of copied into memory the library allocates: a response that
/// fits one packet (`node_size` less 32 bytes) and that this thread reads
/// itself (the usual case: a caller reads its own response while it
/// waits) is read in its ring node, never copied; one the reader thread
/// delivered, or one of several packets, from the library's buffer. For
/// large responses that the caller parses, checks or copies where it
/// wants them (into a buffer of its own, reused call after call).
///
/// `read` runs once, on this thread, before this returns `TY_OK`; not at
/// all on an error. While it runs it holds the response's node and this
/// end's reader role: keep it short, and do not call through `rpc` from
/// it (such a call fails with `TY_EINVAL`).
///
/// Errors: those of `ty_rpc_request`; `TY_EINVAL` for a NULL `read`.
/// Thread-safe.
///
/// # Safety
/// `rpc` is NULL or a live handle; `req` NULL (with `len` 0) or readable
/// for `len` bytes; `read` NULL or a function that may be called with
/// `ctx` on this thread, and returns (never unwinds or jumps out).
#[no_mangle]
pub unsafe extern "C" fn ty_rpc_request_with(
    rpc: *const ty_rpc_t,
    req: *const c_void,
    len: usize,
    timeout_ns: i64,
    read: ty_rpc_read_fn,
    ctx: *mut c_void,
) -> c_int {
    guard(|| {
        // SAFETY: per this function's contract.
        let r = unsafe { self::rpc(rpc)? };
        // SAFETY: per this function's contract.
        let req = unsafe { bytes(req, len, "req")? };
        let timeout = arg_timeout(timeout_ns)?;
        let read = read.ok_or_else(|| invalid("read is NULL"))?;
        r.rpc.request_with(req, timeout, |resp: &[u8]| {
            // SAFETY: `read` may be called with `ctx` on this thread, per
            // the contract; `resp` is readable for its length during it.
            unsafe { read(ctx, resp.as_ptr().cast(), resp.len()) }
        })?;
        Ok(TY_OK)
    })
}

/// `ty_rpc_request` that `ty_cancel(cancel)` ends early from another
/// thread: `TY_EINTR` at once if it waits for the response (a request
/// already sent stays sent: the peer may still handle it, its response is
/// dropped), within about 20 ms if it waits for room to send; a
/// cancellation already cancelled fails the call before anything is sent.
///
/// Errors: those of `ty_rpc_request`, `TY_EINTR`, and `TY_EINVAL` for a
/// NULL or freed `cancel`. Thread-safe.
///
/// # Safety
/// As `ty_rpc_request`; `cancel` is NULL or a live `ty_cancel_t`.
#[no_mangle]
pub unsafe extern "C" fn ty_rpc_request_cancel(
    rpc: *const ty_rpc_t,
    req: *const c_void,
    len: usize,
    resp: *mut *mut c_void,
    resp_len: *mut usize,
    timeout_ns: i64,
    cancel: *const crate::bus::ty_cancel_t,
) -> c_int {
    // SAFETY: per this function's contract.
    unsafe { request(rpc, req, len, resp, resp_len, timeout_ns, Some(cancel)) }
}

/// # Safety
/// As `ty_rpc_request_cancel` (`cancel`: `None` for no cancellation).
unsafe fn request(
    rpc: *const ty_rpc_t,
    req: *const c_void,
    len: usize,
    resp: *mut *mut c_void,
    resp_len: *mut usize,
    timeout_ns: i64,
    cancel: Option<*const crate::bus::ty_cancel_t>,
) -> c_int {
    guard(|| {
        let resp = arg_out(resp, "resp")?;
        let resp_len = arg_out(resp_len, "resp_len")?;
        // SAFETY: both not NULL, writable per the contract.
        unsafe {
            resp.write(std::ptr::null_mut());
            resp_len.write(0);
        }
        // SAFETY: per this function's contract.
        let r = unsafe { self::rpc(rpc)? };
        // SAFETY: per this function's contract.
        let req = unsafe { bytes(req, len, "req")? };
        let timeout = arg_timeout(timeout_ns)?;
        let answer = match cancel {
            // SAFETY: per this function's contract.
            Some(c) => r.rpc.request_with_cancel(req, timeout, &unsafe { crate::bus::cancel_of(c)? }.rpc)?,
            None => r.rpc.request(req, timeout)?,
        };
        let n = answer.len();
        let ptr = if n == 0 { std::ptr::null_mut() } else { Box::into_raw(answer.into_boxed_slice()).cast() };
        // SAFETY: as above.
        unsafe {
            resp.write(ptr);
            resp_len.write(n);
        }
        Ok(TY_OK)
    })
}

/// Frees a response from `ty_rpc_request`: `resp` and the `len` it gave.
/// NULL is ignored. Thread-safe.
///
/// # Safety
/// `resp` is NULL or a response from `ty_rpc_request` with its length,
/// not freed before.
#[no_mangle]
pub unsafe extern "C" fn ty_rpc_free(resp: *mut c_void, len: usize) {
    guard_void(|| {
        if !resp.is_null() && len > 0 {
            let slice = std::ptr::slice_from_raw_parts_mut(resp.cast::<u8>(), len);
            // SAFETY: made by `Box::into_raw` of a boxed slice of `len`
            // bytes in `ty_rpc_request`, freed once, per the contract.
            drop(unsafe { Box::from_raw(slice) });
        }
    })
}

/// Closes an RPC end: waits for its handler calls to finish (their
/// responses go out before the close); requests in
/// flight fail with `TY_ECLOSED`; the other end sees `TY_ECLOSED`. NULL is
/// ignored. Must be the last call on `rpc`, and not made from its handler.
///
/// # Safety
/// `rpc` is NULL or a live handle, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn ty_rpc_close(rpc: *mut ty_rpc_t) {
    guard_void(|| {
        // SAFETY: per this function's contract.
        if unsafe { self::rpc(rpc) }.is_ok() {
            // SAFETY: a live handle made by `Box::into_raw` in `put`, not
            // used any more per the contract.
            let mut b = unsafe { Box::from_raw(rpc) };
            b.magic = DEAD;
        }
    })
}
