//! What one recovery reclaimed: the counts `Region::recover` returns.

/// What one [`Region::recover`](crate::bus::Region::recover) reclaimed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Recovered {
    /// Chunks a dead producer had loaned and not published.
    pub loans: usize,
    /// Free chunks a dead process kept for its next loans (a process keeps
    /// up to one in 64 of each size class of 256 chunks or more, at most 32
    /// of 64-byte chunks and 64 of larger ones).
    pub cached: usize,
    /// Messages a dead consumer had received and not released (lost).
    pub held: usize,
    /// Chunks a dead producer was publishing when it died (lost).
    pub unpublished: usize,
    /// Messages a dead consumer had received on an at-least-once topic,
    /// published again.
    pub redelivered: usize,
    /// Such messages whose partition is full now: left as they are, and
    /// published by a later recovery (not counted in [`total`](Self::total)).
    pub deferred: usize,
    /// Attach slots of dead processes marked free, so that inspectors stop
    /// listing them (not counted in [`total`](Self::total)).
    pub slots: usize,
    /// Damaged ring cells and cursors repaired (words no step of the
    /// protocol writes, left by a process that scribbled on the region;
    /// an item such a cell held is lost). Also counted in the topic's
    /// `corrupt` counter. Not counted in [`total`](Self::total).
    pub repaired: usize,
    /// Chunks whose state word could not be trusted when a damaged free
    /// list was rebuilt: set aside for good (never handed out), until the
    /// region is recreated. Not counted in [`total`](Self::total).
    pub quarantined: usize,
    /// Damaged parts of the region's header and topic directory restored
    /// (from their second copy, or from the configuration this handle
    /// holds). Not counted in [`total`](Self::total).
    pub directory: usize,
    /// Consumer groups: holds of dead group members on
    /// at-most-once topics ended, one per group that lost the message (it
    /// is lost to that group only; also counted in the topic's `lost`).
    /// Not counted in [`total`](Self::total): the chunk goes back to the
    /// pool when the last group lets it go ([`group_freed`](Self::group_freed)).
    pub group_lost: usize,
    /// Consumer groups: messages published again into one group, one per
    /// group: a dead member's (at-least-once topics), or a publication cut
    /// short after its commit point, completed (both kinds of topic). A
    /// redelivery a full ring stopped is counted in
    /// [`deferred`](Self::deferred) instead.
    pub group_redelivered: usize,
    /// Consumer groups: chunks shared by groups that recovery returned to
    /// the pool, their last hold having been ended by recovery or by a
    /// releaser that died before it could free the chunk.
    pub group_freed: usize,
}

impl Recovered {
    /// Chunks returned to the pool in all (and messages published again).
    pub fn total(&self) -> usize {
        self.loans
            + self.cached
            + self.held
            + self.unpublished
            + self.redelivered
            + self.group_redelivered
            + self.group_freed
    }
}
