//! Fault injection for the crash tests, in debug builds only: a process
//! whose environment has `TACHYON_FAULT=<name>` SIGKILLs itself when it
//! reaches the point of that name, so a test can kill a process at exactly
//! the instruction whose window it checks. Release builds compile every
//! point to nothing.
//!
//! The points: `pool-pop-announced` (a free-list pop announced, not yet
//! completed), `pool-push-announced` (likewise a push), `publish-queued` (a
//! chunk marked QUEUED, its cell not yet claimed), `receive-claimed` (a
//! consumer's read claim made, its chunk not yet taken), `receive-held`
//! (the chunk taken, the cell not yet freed), `redeliver-queued` (recovery
//! marked a message QUEUED again, its descriptor not yet committed).
//!
//! Consumer groups (`bus/groups.rs`, `Topic::publish_shared`;
//! docs/groups-design.md, "Crash windows"): `groups-publish-claimed` (a
//! publisher claimed a cell in every group's ring, nothing else),
//! `groups-publish-prepared` (its group words QUEUED, the main word still
//! LOANED: before the commit point), `groups-publish-shared` (the main word
//! SHARED, the commit point passed, no cell committed),
//! `groups-publish-committed` (the first group's cell committed, the
//! others not), `groups-release-read` (a member read the main word to
//! release, its group word still HELD), `groups-hold-ended` (a group word
//! let go, the main word not yet taken: a releaser between its two CASes),
//! `groups-last-taken` (the last releaser took the main word, LOANED by it,
//! not yet pushed), `groups-redeliver-queued` (recovery re-queued a hold
//! in its group with a new stamp, its descriptor not yet committed).
//!
//! Joining from the oldest (`bus/backlog.rs`): `groups-join-reserved`
//! (the new group's cells claimed, its slot still VACANT),
//! `groups-join-copied` (the slot ACTIVE, the first backlog message
//! published into it, the rest of the reserved cells still claimed).
//!
//! Overrun (`TopicConfig::overrun`): `overrun-taken` (a publisher took a
//! full ring's oldest message on its group's behalf, not yet released).
//!
//! Inline payloads (`TopicConfig::inline_payload`): `inline-claimed` (a
//! publisher claimed its cell, the slot not yet written), `inline-written`
//! (the slot written, the cell not committed), `inline-read` (a consumer
//! copied a message out of its slot, the cell not yet handed back).
//!
//! Light hand-overs (`CircularBufferBuilder::light_handovers`,
//! `TopicConfig::light_handovers`): `light-handover-looked` (a writer's or
//! reader's look found its claim, its plain store not yet made),
//! `chunk-copied-claimed` (a light topic's `send` copied its message into
//! a chunk after claiming the cell, and has not committed).
//!
//! One more name makes a call fail instead: `liveness-unknown` (the kernel
//! cannot answer whether an attach slot's OFD lock is held, as on a file
//! system without OFD locks).

/// Dies here (SIGKILL) if `TACHYON_FAULT` names this point.
#[cfg(all(debug_assertions, not(tachyon_loom)))]
pub(crate) fn point(name: &str) {
    if fails(name) {
        let _ = rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::KILL);
    }
}

/// Whether `TACHYON_FAULT` names `name`.
#[cfg(all(debug_assertions, not(tachyon_loom)))]
pub(crate) fn fails(name: &str) -> bool {
    static WANTED: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    WANTED.get_or_init(|| std::env::var("TACHYON_FAULT").ok()).as_deref() == Some(name)
}

/// Never: fault injection exists in debug builds only.
#[cfg(not(all(debug_assertions, not(tachyon_loom))))]
#[inline(always)]
#[cfg_attr(tachyon_loom, allow(dead_code))]
pub(crate) fn fails(_name: &str) -> bool {
    false
}

/// Nothing: fault points exist in debug builds only.
#[cfg(not(all(debug_assertions, not(tachyon_loom))))]
#[inline(always)]
#[cfg_attr(tachyon_loom, allow(dead_code))]
pub(crate) fn point(_name: &str) {}
