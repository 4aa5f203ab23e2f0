//! The topics group: round-trip latency of small messages
//! and one-way throughput of 1 KiB messages through tachyon topics, on the
//! copy path and the loan path, with spin, hybrid and futex waiting,
//! against a Unix domain socket, a pipe and a raw shared-memory ring
//! measured in the same run.
//!
//! **Latency** (ping-pong): a region with two topics, `ping` and `pong`,
//! one partition each. This process publishes a ping stamped with its
//! sequence number and waits for the pong; the peer receives the ping,
//! checks it, and publishes the same bytes as the pong. Each round trip is
//! timed here (`Instant` before the ping, after the pong is received and
//! released) into an `hdrhistogram`; this process compares every pong
//! with its ping byte for byte.
//!
//! **Throughput** (one way): a region with one topic, `data`; this process
//! publishes `warmup + count` messages, the peer receives and checks every
//! one and times the `count` after the warm-up with its own clock.
//!
//! Paths:
//!
//! * copy: `topic.send(&bytes, Key(key), timeout)` / `topic.recv_into(partition,
//!   &mut vec, timeout)`: one copy in, one copy out;
//! * loan: `topic.loan(len, timeout)`, the message written into the loan,
//!   `loan.publish(Key(key), timeout)` / `topic.receive(partition,
//!   timeout)`, the message read in place (every byte: a 64-bit XOR fold,
//!   or, for a pong, a compare), then dropped (released). The echoing peer
//!   copies the ping's view into the pong's loan.
//!
//! References, with the same byte counts and the same checks: a Unix
//! domain socket (`socketpair`) and a pipe (one per direction), one
//! blocking `write` and one blocking `read` per message; and the raw SPSC
//! ring of memcpys of the bandwidth group (`rawring.rs`), spinning.

mod case;
mod charts;
mod csv;
mod group;
mod loan;
mod peer;
mod protocol;
mod report;
mod results;
mod run;
mod shm;

pub use case::{Case, Sample, Settings, Test, Via};
pub use csv::csv;
pub(crate) use loan::publish_loan;
pub use peer::peer;
pub use protocol::PeerArgs;
pub(crate) use protocol::{collect, peer_args, same};
pub(crate) use run::partition_keys;
pub use run::run;
pub(crate) use shm::{region_config, unique_name, RemoveRegion, KEY};
