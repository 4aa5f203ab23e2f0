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

#![cfg(target_os = "linux")]

pub mod bus;
mod error;
pub mod platform;
pub mod primitives;
pub mod segment;
pub mod sync;

pub use error::{Corruption, Error, Result};
#[cfg(not(tachyon_loom))]
pub use primitives::{
    BroadcastBuffer, BroadcastBufferBuilder, BroadcastReader, Overflow, Received, RpcBuffer, RpcBuilder,
    RpcClient,
};
#[cfg(not(tachyon_loom))]
pub use primitives::{CircularBuffer, CircularBufferBuilder};
#[cfg(not(tachyon_loom))]
pub use primitives::{SharedArray, SharedArrayBuilder, SharedBuffer, SharedBufferBuilder};
pub use segment::Kind;
#[cfg(not(tachyon_loom))]
pub use segment::Segment;
