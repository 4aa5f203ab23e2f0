//! The zero-copy bus: a [`Region`] holds a payload pool and [`Topic`]s; a
//! topic has power-of-two partitions, each a ring of 16-byte descriptors.
//! Producers [`loan`](Topic::loan) a chunk, build the message in place and
//! [`publish`](Loan::publish) it with a key; consumers in other processes
//! [`receive`](Topic::receive) a read-only view of the same bytes and
//! release it by dropping it. Only the descriptor moves; the payload is
//! never copied.
//!
//! Crash-safety records (what a dead process held) are in place: every
//! attached process has a slot in the region's process table (the
//! segment's attach slots, whose identity PID reuse cannot fool, plus a
//! heartbeat); every loaned and every received-but-unreleased chunk records
//! its holder's token; every ring cell claimed and not yet committed names
//! its claimant. Ring cells left by dead claimants are already repaired by
//! whoever waits on them; reclaiming a dead process's loans and held
//! messages is the recovery layer's job.

// Under loom only the free list's models are built.
#[cfg(not(tachyon_loom))]
mod alloc;
#[cfg(not(tachyon_loom))]
mod asynch;
#[cfg(not(tachyon_loom))]
mod catalog;
#[cfg(not(tachyon_loom))]
mod config;
#[cfg(not(tachyon_loom))]
mod directory;
#[cfg(not(tachyon_loom))]
mod inspect;
#[cfg(not(tachyon_loom))]
mod layout;
#[cfg(all(feature = "testing", not(tachyon_loom)))]
mod map;
#[cfg(not(tachyon_loom))]
mod open;
#[cfg(not(tachyon_loom))]
mod partition;
#[cfg(any(not(tachyon_loom), test))]
mod pool;
#[cfg(not(tachyon_loom))]
mod raw;
#[cfg(not(tachyon_loom))]
mod recovered;
#[cfg(not(tachyon_loom))]
mod recovery;
#[cfg(not(tachyon_loom))]
mod region;
#[cfg(not(tachyon_loom))]
mod subscription;
#[cfg(not(tachyon_loom))]
mod topic;

#[cfg(not(tachyon_loom))]
pub use alloc::ClassStats;
#[cfg(not(tachyon_loom))]
pub use config::RegionConfig;
#[cfg(not(tachyon_loom))]
pub use inspect::{PartitionReport, ProcessReport, RegionReport, TopicReport};
#[cfg(not(tachyon_loom))]
pub use layout::{CLASS_SIZES, MAX_MESSAGE};
#[cfg(all(feature = "testing", not(tachyon_loom)))]
pub use map::RegionMap;
#[cfg(not(tachyon_loom))]
pub use raw::RawChunk;
#[cfg(not(tachyon_loom))]
pub use recovered::Recovered;
#[cfg(not(tachyon_loom))]
pub use region::Region;
#[cfg(not(tachyon_loom))]
pub(crate) use region::RECOVERY_INTERVAL;
#[cfg(not(tachyon_loom))]
pub use subscription::{Partitions, Subscription};
#[cfg(not(tachyon_loom))]
pub use topic::{
    Delivery, Key, Loan, Message, ReceiveStop, Topic, TopicConfig, TopicInfo, ValueLoan, CHUNK_ALIGN,
    MAX_CAPACITY, MAX_PARTITIONS,
};
