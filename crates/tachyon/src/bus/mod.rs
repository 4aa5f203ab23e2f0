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
#[cfg(any(not(tachyon_loom), test))]
mod pool;
// Consumer groups' core (docs/groups-design.md). The bus is wired to it
// step by step (the design's wiring plan); what it does not call yet
// (drops, recovery) is used by its tests and loom models only.
#[cfg(any(test, not(tachyon_loom)))]
#[cfg_attr(not(test), allow(dead_code))]
mod groups;

crate::without_loom! {
    mod alloc;
    mod asynch;
    mod backlog;
    mod catalog;
    mod config;
    mod directory;
    mod inspect;
    mod layout;
    mod membership;
    #[cfg(feature = "testing")]
    mod map;
    mod open;
    mod partition;
    mod raw;
    mod recovered;
    mod recovery;
    mod region;
    mod subscription;
    mod topic;

    pub use alloc::ClassStats;
    pub use backlog::JoinFrom;
    pub use config::{RegionConfig, MAX_GROUPS};
    pub use inspect::{GroupReport, PartitionReport, ProcessReport, RegionReport, TopicReport};
    pub use layout::{CLASS_SIZES, MAX_MESSAGE};
    #[cfg(feature = "testing")]
    pub use map::RegionMap;
    pub use raw::RawChunk;
    pub use recovered::Recovered;
    pub use region::Region;
    pub(crate) use region::RECOVERY_INTERVAL;
    pub use subscription::{Partitions, Subscription};
    pub use membership::MAX_MEMBERS;
    pub use topic::Group;
    pub use topic::{
        Delivery, Key, Loan, Message, ReceiveStop, Topic, TopicConfig, TopicInfo, ValueLoan, CHUNK_ALIGN,
        MAX_CAPACITY, MAX_INLINE, MAX_PARTITIONS,
    };
}
