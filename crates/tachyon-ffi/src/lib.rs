//! The C face of tachyon: `libtachyon.so` / `libtachyon.a` and the header
//! `include/tachyon/tachyon.h` (generated from this crate by cbindgen and
//! checked in; `tests/header.rs` fails when it is stale).
//!
//! This crate translates and holds no logic of its own: every entry point
//! checks its arguments (NULL and out-of-range are `TY_EINVAL`), calls the
//! Rust library (`tachyon_core`, the `tachyon-shm` package renamed because
//! this library is named `tachyon` too, for the file name `libtachyon`),
//! and maps its `Result` to an `int` code. A panic never crosses into C:
//! every entry point runs under [`std::panic::catch_unwind`] and returns
//! `TY_EINTERNAL` instead.
//!
//! Layout: [`error`] (codes, `ty_strerror`, `ty_last_error`, the boundary
//! guard), [`bus`] (regions, topics, loans, messages, consumer groups),
//! [`prim`] (the ring, the byte buffer and RPC); `ledger` (what a topic handle has handed to
//! C: a word per chunk, taken back with one compare-and-swap) and `loom`
//! (its switch to loom's atomics under `--cfg tachyon_loom`).

#![allow(non_camel_case_types)] // C names: ty_region_t, ...
#![allow(non_upper_case_globals)] // ty_region_conf_default, ...

// Under `--cfg tachyon_loom` the core leaves the bus and the primitives
// out, so only the ledger and its loom models are built.
#[cfg(not(tachyon_loom))]
pub mod bus;
#[cfg(not(tachyon_loom))]
pub mod error;
#[cfg_attr(tachyon_loom, allow(dead_code))]
mod ledger;
mod loom;
#[cfg(not(tachyon_loom))]
pub mod prim;

#[cfg(not(tachyon_loom))]
pub use error::{ty_last_error, ty_status_t, ty_strerror};

#[cfg(not(tachyon_loom))]
/// The library's version, `"MAJOR.MINOR.PATCH"`, a static string.
///
/// Thread-safe; never fails.
#[no_mangle]
pub extern "C" fn ty_version() -> *const std::ffi::c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}

/// Panics inside the boundary and returns what the boundary made of it
/// (`TY_EINTERNAL`): for the library's own tests of panic catching. Not in
/// the header.
#[cfg(not(tachyon_loom))]
#[doc(hidden)]
#[no_mangle]
pub extern "C" fn ty__test_panic() -> std::ffi::c_int {
    error::guard(|| panic!("ty__test_panic: a panic inside the library, as a test asked"))
}

/// The header promises that every handle may be used from any thread at
/// once: the compiler checks that each is `Send + Sync`.
#[cfg(not(tachyon_loom))]
const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    send_sync::<bus::ty_region_t>();
    send_sync::<bus::ty_topic_t>();
    send_sync::<bus::ty_group_t>();
    send_sync::<bus::ty_cancel_t>();
    send_sync::<prim::ty_ring_t>();
    send_sync::<prim::ty_buffer_t>();
    send_sync::<prim::ty_rpc_t>();
};
