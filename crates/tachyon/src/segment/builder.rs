//! Options for creating or opening a segment: [`SegmentBuilder`].

use super::handle::Segment;
use super::lifecycle::{create, observe, open, RETRIES};
use super::{Kind, MAX_SLOTS};
use crate::error::{Error, Result};

/// Options for creating or opening a segment. `Segment::create` and
/// `Segment::open` are shorthands for the defaults.
///
/// ```
/// use tachyon::{Kind, Segment};
/// # let name = format!("doc-builder-{}", std::process::id());
/// let seg = Segment::builder(&name).size(8192).max_attachers(4).create()?;
/// assert_eq!(seg.kind(), Kind::RAW);
/// let again = Segment::builder(&name).kind(Kind::RAW).open()?;
/// assert_eq!(again.size(), 8192);
/// # Ok::<(), tachyon::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct SegmentBuilder {
    pub(super) name: String,
    pub(super) size: usize,
    pub(super) kind: Kind,
    pub(super) slots: usize,
    pub(super) persistent: bool,
    pub(super) geometry: Option<[u64; 4]>,
}

impl SegmentBuilder {
    /// The defaults: a raw segment of size 0 (to be set), 128 attach
    /// slots, removed with its last attacher.
    pub(super) fn new(name: &str) -> Self {
        SegmentBuilder {
            name: name.to_owned(),
            size: 0,
            kind: Kind::RAW,
            slots: MAX_SLOTS,
            persistent: false,
            geometry: None,
        }
    }

    /// Words of the object's own header that never change (its geometry),
    /// kept sealed in the segment header as their second copy (create
    /// only): [`Segment::restore_geometry`] repairs the object's header
    /// from them.
    pub(crate) fn geometry(mut self, words: [u64; 4]) -> Self {
        self.geometry = Some(words);
        self
    }

    /// Size of the caller's data area in bytes (create only).
    pub fn size(mut self, size: usize) -> Self {
        self.size = size;
        self
    }

    /// The kind recorded at create and required at open (default
    /// [`Kind::RAW`]).
    pub fn kind(mut self, kind: Kind) -> Self {
        self.kind = kind;
        self
    }

    /// How many handles may be attached at once, across all processes
    /// (create only; 1 to 128, default 128).
    pub fn max_attachers(mut self, n: usize) -> Self {
        self.slots = n;
        self
    }

    /// Makes the segment outlive its users (create only; default off): it
    /// stays when its last attacher closes or dies, with its contents, until
    /// [`Segment::remove`]. Opening it finds it even when nobody is
    /// attached.
    pub fn persistent(mut self, yes: bool) -> Self {
        self.persistent = yes;
        self
    }

    /// Creates the segment, zero-filled. A stale segment of the same name
    /// (all attachers dead) is removed first.
    pub fn create(&self) -> Result<Segment> {
        create(self, |_| Ok(()))
    }

    /// Creates the segment and runs `init` on it *before* it gets its
    /// name: no other process can see the segment until `init` returned
    /// `Ok`. Higher layers write their own headers this way. If `init`
    /// fails, nothing is left behind and its error is returned.
    ///
    /// ```
    /// use std::sync::atomic::{AtomicU64, Ordering};
    /// use tachyon::Segment;
    /// # let name = format!("doc-init-{}", std::process::id());
    /// let seg = Segment::builder(&name).size(64).create_with(|s| {
    ///     s.get::<AtomicU64>(0)?.store(42, Ordering::Relaxed);
    ///     Ok(())
    /// })?;
    /// let other = Segment::open(&name)?;
    /// assert_eq!(other.get::<AtomicU64>(0)?.load(Ordering::Relaxed), 42);
    /// # drop(seg);
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn create_with(&self, init: impl FnOnce(&Segment) -> Result<()>) -> Result<Segment> {
        create(self, init)
    }

    /// Opens an existing segment of the builder's kind.
    pub fn open(&self) -> Result<Segment> {
        open(&self.name, self.kind)
    }

    /// Maps an existing segment of the builder's kind for reading only,
    /// without attaching: takes no attach slot, changes nothing in the file
    /// (not even a stale one), and never removes it. The mapping is
    /// private, so a write through it stays in this process. For
    /// inspectors; the handle's [`slot`](Segment::slot) is `usize::MAX`.
    pub(crate) fn observe(&self) -> Result<Segment> {
        observe(&self.name, self.kind)
    }

    /// Opens the segment, creating it if it does not exist.
    pub fn create_or_open(&self) -> Result<Segment> {
        self.create_or_open_with(|_| Ok(()))
    }

    /// [`create_or_open`](Self::create_or_open), running `init` as
    /// [`create_with`](Self::create_with) does when it creates.
    pub fn create_or_open_with(&self, mut init: impl FnMut(&Segment) -> Result<()>) -> Result<Segment> {
        for _ in 0..RETRIES {
            match open(&self.name, self.kind) {
                Err(Error::NotFound { .. }) => {}
                other => return other,
            }
            match create(self, &mut init) {
                Err(Error::AlreadyExists { .. }) => {}
                other => return other,
            }
        }
        // Created and removed by others under our feet every time.
        Err(Error::timeout("a stable segment to create or open (others kept creating and removing it)", None))
    }
}
