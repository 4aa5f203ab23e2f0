//! What one recovery reclaimed: the counts `Region::recover` returns.

/// What one [`Region::recover`](crate::bus::Region::recover) reclaimed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Recovered {
    /// Chunks a dead producer had loaned and not published.
    pub loans: usize,
    /// Free chunks a dead process kept for its next loans (a process keeps
    /// up to one in 64 of each size class of 256 chunks or more, at most 32).
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
}

impl Recovered {
    /// Chunks returned to the pool in all.
    pub fn total(&self) -> usize {
        self.loans + self.cached + self.held + self.unpublished + self.redelivered
    }
}
