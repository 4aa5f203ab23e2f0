//! tachyon: inter-process communication through shared memory on Linux.
//!
//! Processes on one machine share memory directly: no socket, pipe or broker
//! in between. This crate is built in layers, each using only those below:
//!
//! * [`platform`]: the few Linux calls (files in `/dev/shm`, mmap, futex,
//!   process identity, OFD locks);
//! * [`segment`]: named shared-memory segments with a versioned header,
//!   attach records and a lifetime that survives crashes;
//! * [`sync`]: process-shared event, robust mutex, robust counted rw-lock
//!   and wait policies, living inside segments;
//! * [`primitives`]: [`CircularBuffer`] and friends;
//! * [`bus`]: the zero-copy bus: regions, topics, loan / publish / receive.
//!
//! Cargo feature `signals` (off by default): `cleanup_on_termination()`
//! removes this process's segments when SIGTERM, SIGINT or SIGHUP ends it
//! (see `docs/operations.md`).
//!
//! ```
//! use tachyon::Segment;
//!
//! # let name = format!("doc-lib-{}", std::process::id());
//! let seg = Segment::create(&name, 4096)?;
//! // Another process would call Segment::open(&name) and see the same bytes.
//! let other = Segment::open(&name)?;
//! seg.write_bytes(0, b"hello")?;
//! let mut buf = [0u8; 5];
//! other.read_bytes(0, &mut buf)?;
//! assert_eq!(&buf, b"hello");
//! # Ok::<(), tachyon::Error>(())
//! ```
//!
//! # Timeouts
//!
//! One rule for every call that can wait (rings, broadcast, RPC, locks,
//! events, topics): it takes `timeout: Option<Duration>`, a deadline for
//! the whole call.
//!
//! * `None` waits for ever (until the call can complete, or the object is
//!   closed or its peer dies).
//! * `Some(Duration::ZERO)` **tries once without waiting**: the call does
//!   what it can do right now (writes if there is room, reads if there is
//!   an item, locks if the lock is free, sends an RPC request if its ring
//!   has room) and otherwise fails with [`Error::Timeout`] at once. It
//!   never means "do nothing". [`RpcBuffer::request`] with a zero timeout
//!   writes the request, so the peer handles it, and returns
//!   `Err(Timeout)` for the response it did not wait for: fire and forget
//!   (but [`RpcBuffer::notify`] says so better).
//! * Any other duration tries, then waits up to that long, then fails
//!   with [`Error::Timeout`] saying what it waited for.
//!
//! The `try_*` forms are the zero timeout with a friendlier result: an
//! empty source is `Ok(None)`, a full one [`Error::Full`], a held lock
//! `Ok(None)`; they never return [`Error::Timeout`]. The plain calls of
//! [`SharedArray`] and [`SharedBuffer`] wait up to the handle's lock
//! timeout (100 ms by default), set once per handle.
//!
//! ```
//! use std::time::Duration;
//! use tachyon::{CircularBuffer, Error};
//! # let name = format!("doc-lib-timeouts-{}", std::process::id());
//! let ring = CircularBuffer::create(&name, 2, 16)?;
//! ring.write(b"a", Some(Duration::ZERO))?; // room: written at once
//! let mut buf = [0u8; 16];
//! assert_eq!(ring.read(&mut buf, Some(Duration::ZERO))?, 1);
//! // Empty: one look, then Timeout, without waiting.
//! assert!(matches!(ring.read(&mut buf, Some(Duration::ZERO)), Err(Error::Timeout { .. })));
//! # Ok::<(), tachyon::Error>(())
//! ```
//!
//! # Features
//!
//! Both are off by default; the mandatory dependencies do not change.
//!
//! * **`serde`**: `Serialize` and `Deserialize` on the public info and
//!   statistics types: [`bus::TopicInfo`], [`bus::Delivery`],
//!   [`sync::WaitPolicy`], [`bus::ClassStats`], [`bus::Recovered`], the
//!   inspection reports ([`bus::RegionReport`], [`bus::TopicReport`],
//!   [`bus::PartitionReport`], [`bus::ProcessReport`]), the RPC counters
//!   ([`primitives::rpc::RpcStats`] and its latency summary) and what
//!   [`segment::list`] returns ([`segment::SegmentInfo`] and the types in
//!   it, [`platform::process::ProcessId`] among them). Enumerations are
//!   written in lower or kebab case (`"hybrid"`, `"at-most-once"`); a
//!   [`Kind`] as its name (`"region"`, or its raw number if unknown); a
//!   `Duration` in serde's own form, `{"secs": 10, "nanos": 0}`. `tyctl
//!   --json` is written this way.
//! * **`tracing`**: [`tracing`](https://docs.rs/tracing) events, for a
//!   subscriber the application installs (`tachyond` does):
//!
//!   | target | level | when | fields |
//!   | --- | --- | --- | --- |
//!   | `tachyon::recovery` | INFO | [`Region::recover`](bus::Region::recover) (also run on open and while a loan or receive waits) reclaimed or deferred something | `region` (its file), `total`, `loans`, `cached`, `held`, `unpublished`, `redelivered`, `deferred`, `slots` (see [`bus::Recovered`]) |
//!   | `tachyon::lock` | WARN | a robust lock (mutex, rw-lock write side) was taken over from, or cleared of, a holder that died, or a lock word that names no holder (damaged) | `slot`, `gen`: the dead holder's attach slot and generation (`gen` 0: the word was damaged) |
//!   | `tachyon::ring` | INFO | a ring cell left claimed by a dead claimant is being repaired | `slot`, `gen`, `pos`, `writer_side` |
//!   | `tachyon::corrupt` | WARN | an [`Error::Corrupt`] is made | `what`: the [`Corruption`], displayed |
//!
//! ```toml
//! tachyon-shm = { version = "0.1", features = ["serde", "tracing"] }
//! ```

#![cfg(target_os = "linux")]
#![deny(missing_docs)]

/// Declares items that a loom build leaves out: `--cfg tachyon_loom` builds
/// only the lock-free state machines and their models, over loom's atomics
/// (`platform/atomic.rs`) and its model of the futex (`platform/futex.rs`).
/// One switch per list of items instead of one attribute per item.
macro_rules! without_loom {
    ($($item:item)*) => { $( #[cfg(not(tachyon_loom))] $item )* };
}
pub(crate) use without_loom;

pub mod bus;
mod error;
pub mod platform;
pub mod primitives;
pub mod segment;
pub mod sync;

/// The `Pod` / `Zeroable` traits (and derives) that typed messages and
/// arrays use, re-exported so that a user needs no version of its own.
pub use bytemuck;
pub use error::{Corruption, Error, Result};
pub use segment::Kind;

without_loom! {
    /// Entry points for the fuzz targets (`testing` feature: not an API).
    #[cfg(feature = "testing")]
    pub mod fuzzing;
    // Above both the bus and the primitives: one wait over sources of each.
    mod waitset;

    pub use primitives::{
        BroadcastBuffer, BroadcastBufferBuilder, BroadcastReader, Overflow, Received, RpcBuffer, RpcBuilder,
        RpcClient,
    };
    pub use primitives::{CircularBuffer, CircularBufferBuilder};
    pub use primitives::{SharedArray, SharedArrayBuilder, SharedBuffer, SharedBufferBuilder};
    #[cfg(feature = "signals")]
    pub use segment::cleanup_on_termination;
    pub use segment::Segment;
    pub use waitset::WaitSet;
}

// Every Rust block in the README and in docs/*.md is compiled (and, unless
// marked `no_run`, run) by `cargo test --doc`, so the documentation cannot
// drift from the code. Blocks that are not Rust are fenced as text/sh/json.
macro_rules! doc_pages {
    ($($(#[$attr:meta])* $name:ident = $path:literal;)*) => {
        $(
            #[cfg(doctest)]
            #[doc = include_str!($path)]
            $(#[$attr])*
            pub struct $name;
        )*
    };
}

doc_pages! {
    /// README.md
    ReadmeDoctests = "../../../README.md";
    /// docs/ARCHITECTURE.md
    ArchitectureDoctests = "../../../docs/ARCHITECTURE.md";
    /// docs/segments.md
    SegmentsDoctests = "../../../docs/segments.md";
    /// docs/sync.md
    SyncDoctests = "../../../docs/sync.md";
    /// docs/bus.md
    BusDoctests = "../../../docs/bus.md";
    /// docs/async.md
    AsyncDoctests = "../../../docs/async.md";
    /// docs/rings.md
    RingsDoctests = "../../../docs/rings.md";
    /// docs/rpc.md
    RpcDoctests = "../../../docs/rpc.md";
    /// docs/primitives-array-buffer.md
    ArrayBufferDoctests = "../../../docs/primitives-array-buffer.md";
    /// docs/CRASH-SAFETY.md
    CrashSafetyDoctests = "../../../docs/CRASH-SAFETY.md";
    /// docs/tools.md
    ToolsDoctests = "../../../docs/tools.md";
    /// docs/BENCHMARK.md
    BenchmarkDoctests = "../../../docs/BENCHMARK.md";
    /// docs/benchmark-history.md
    BenchmarkHistoryDoctests = "../../../docs/benchmark-history.md";
    /// docs/operations.md
    OperationsDoctests = "../../../docs/operations.md";
    /// docs/c-api.md
    CApiDoctests = "../../../docs/c-api.md";
    /// docs/python.md
    PythonDoctests = "../../../docs/python.md";
    /// docs/porting-from-dotnet.md
    PortingFromDotnetDoctests = "../../../docs/porting-from-dotnet.md";
    /// docs/go.md
    GoDoctests = "../../../docs/go.md";
    /// docs/bridge.md
    BridgeDoctests = "../../../docs/bridge.md";
    /// docs/groups-design.md
    GroupsDesignDoctests = "../../../docs/groups-design.md";
    /// docs/leases-design.md
    LeasesDesignDoctests = "../../../docs/leases-design.md";
}
