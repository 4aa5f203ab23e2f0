//! The layout of a channel's control segment: the geometry the server
//! chose, who holds each end, the close flags and the current session.
//! Both ends map it and reach its words only through [`Control::of`].

use crate::error::Result;
use crate::segment::{Segment, ShmSafe};
use std::mem::{offset_of, size_of};
use std::sync::atomic::{AtomicU32, AtomicU64};

/// The control segment's data area. The words are written by the server
/// and by its clients, in other processes: all are atomics, and whatever
/// they hold is checked before it is used (the geometry against its
/// sealed copy, tokens through liveness checks).
#[repr(C)]
pub(super) struct Control {
    /// Nodes per direction.
    pub(super) node_count: AtomicU64,
    /// Bytes per node, packet header included.
    pub(super) node_size: AtomicU64,
    /// The protocol version ([`PROTOCOL_VERSION`](super::PROTOCOL_VERSION)).
    pub(super) version: AtomicU64,
    _reserved0: [AtomicU64; 5],
    /// The server's attach token.
    pub(super) owner: AtomicU32,
    /// The connected client's attach token; 0 while none is.
    pub(super) opener: AtomicU32,
    /// Non-zero once the server closed.
    pub(super) owner_closed: AtomicU32,
    /// The token of the client that closed its end (the server tells it
    /// from one an earlier client left); 0 otherwise.
    pub(super) opener_closed: AtomicU32,
    /// The largest message the server accepts.
    pub(super) owner_max: AtomicU64,
    /// The largest message the current client accepts; 0 until it is known.
    pub(super) opener_max: AtomicU64,
    /// The id of the session whose rings the next (or the current) client
    /// uses; the rings are named after it (see `ring_name`).
    pub(super) session: AtomicU64,
    _reserved1: [AtomicU64; 3],
}

// The layout is fixed: these are the offsets every build uses.
const _: () = assert!(offset_of!(Control, node_count) == 0);
const _: () = assert!(offset_of!(Control, node_size) == 8);
const _: () = assert!(offset_of!(Control, version) == 16);
const _: () = assert!(offset_of!(Control, owner) == 64);
const _: () = assert!(offset_of!(Control, opener) == 68);
const _: () = assert!(offset_of!(Control, owner_closed) == 72);
const _: () = assert!(offset_of!(Control, opener_closed) == 76);
const _: () = assert!(offset_of!(Control, owner_max) == 80);
const _: () = assert!(offset_of!(Control, opener_max) == 88);
const _: () = assert!(offset_of!(Control, session) == 96);
const _: () = assert!(size_of::<Control>() == 128);

// SAFETY: `Control` is `repr(C)` and made of atomics only (the reserved
// words too), with no padding (the offsets above leave no gap): every bit
// pattern, all zeros included, is a valid value, and all mutation through
// `&Control` is atomic.
unsafe impl ShmSafe for Control {}

impl Control {
    /// The size of the control segment's data area.
    pub(super) const SIZE: usize = size_of::<Control>();

    /// The words sealed in the segment header at create, in the order of
    /// the geometry given then (see `Segment::restore_geometry`).
    pub(super) const GEOMETRY: [usize; 4] = [
        offset_of!(Control, node_count),
        offset_of!(Control, node_size),
        offset_of!(Control, version),
        offset_of!(Control, owner_max),
    ];

    /// The control words of `seg`, checked to lie inside its mapping.
    pub(super) fn of(seg: &Segment) -> Result<&Control> {
        seg.get::<Control>(0)
    }
}
