//! The one error type of the library.
//!
//! Every fallible call returns [`Result<T>`](crate::Result). The variants are
//! stable and meant to be matched; the messages say what happened and, where
//! there is something to do, what to do.

use std::fmt;
use std::io;
use std::time::Duration;

/// Shorthand for `std::result::Result<T, tachyon::Error>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in tachyon.
///
/// ```
/// use tachyon::{Error, Segment};
///
/// match Segment::open("surely-no-segment-has-this-name") {
///     Err(Error::NotFound { name }) => println!("{name} does not exist yet"),
///     Err(other) => panic!("unexpected: {other}"),
///     Ok(_) => println!("somebody created it"),
/// }
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// No segment of that name exists (or the one that did was stale and has
    /// been removed).
    #[error("no shared-memory segment named {name:?}; create it first (or use create_or_open)")]
    NotFound {
        /// The name as the caller gave it.
        name: String,
    },

    /// A segment of that name exists and has a live attacher.
    #[error("a shared-memory segment named {name:?} already exists and is in use; open it instead, or pick another name")]
    AlreadyExists {
        /// The name as the caller gave it.
        name: String,
    },

    /// A deadline passed before the operation could complete. Only calls
    /// given a timeout report it; `try_*` calls never do (an empty source
    /// is `Ok(None)`, a full one [`Error::Full`]).
    #[error("timed out{} waiting for {what}; wait longer (a timeout of None waits for ever), or see why the other side is slow", after(.waited))]
    Timeout {
        /// What the call waited for (e.g. "a message in the topic's partition").
        what: &'static str,
        /// How long it waited, where one timeout bounded the wait.
        waited: Option<Duration>,
    },

    /// A `try_*` call found no room: a ring or partition is full now. Call
    /// again later, or use the waiting form with a timeout.
    #[error(
        "{what} is full; the consumers are behind: retry, wait with a timeout, or give it more capacity"
    )]
    Full {
        /// What is full (e.g. "the topic's partition").
        what: &'static str,
    },

    /// Not enough room: the shared-memory file system is full, or a table
    /// inside a segment is.
    #[error("no space: {what}")]
    NoSpace {
        /// What ran out, and what to do about it.
        what: String,
    },

    /// The caller may not use this object.
    #[error("permission denied: {what}")]
    PermissionDenied {
        /// Why.
        what: String,
    },

    /// The region has no topic of that name.
    #[error("region {region:?} has no topic named {topic:?}; create it with create_topic (or create_or_open_topic)")]
    TopicNotFound {
        /// The topic's name.
        topic: String,
        /// The region's name.
        region: String,
    },

    /// The region already has a topic of that name.
    #[error("region {region:?} already has a topic named {topic:?}; open it with topic(), or use create_or_open_topic")]
    TopicExists {
        /// The topic's name.
        topic: String,
        /// The region's name.
        region: String,
    },

    /// An object of that name exists, but was made with another
    /// configuration than the one a `create_or_open` asked for.
    #[error("{name:?} exists with {field} = {existing}, not {requested}; open it as it is, or remove it and create it anew")]
    Incompatible {
        /// The object's name.
        name: String,
        /// The field that differs.
        field: &'static str,
        /// Its value in the existing object.
        existing: String,
        /// The value asked for.
        requested: String,
    },

    /// An RPC channel serves one client at a time, and one is connected.
    #[error("RPC channel {name:?} already has a client connected; a channel serves one client at a time: wait until it closes, or create another channel")]
    ChannelBusy {
        /// The channel's name.
        name: String,
    },

    /// A read buffer is smaller than the item to be read into it; nothing
    /// was consumed.
    #[error("a buffer of {buffer} bytes is too small for an item of {item} bytes; nothing was read: pass a buffer of at least the node size")]
    BufferTooSmall {
        /// The item's size.
        item: usize,
        /// The buffer's size.
        buffer: usize,
    },

    /// The name cannot be used as a segment name.
    #[error("invalid name {name:?}: {reason}")]
    InvalidName {
        /// The name as the caller gave it (shown escaped once, by `{:?}`).
        name: String,
        /// Why it was refused.
        reason: &'static str,
    },

    /// An argument is out of range or inconsistent.
    #[error("invalid argument: {what}")]
    InvalidArgument {
        /// Which argument, and why.
        what: String,
    },

    /// Shared memory holds something that cannot be right. The segment was
    /// damaged, truncated, or was not written by tachyon.
    #[error("corrupt segment: {what}")]
    Corrupt {
        /// What was found to be wrong.
        what: Corruption,
    },

    /// The segment was written with another layout version of tachyon.
    #[error("segment layout version {found}, this build of tachyon reads version {expected}; use the same tachyon version in every process")]
    VersionMismatch {
        /// The version in the segment.
        found: u32,
        /// The version this build understands.
        expected: u32,
    },

    /// The segment holds another kind of object than the one asked for.
    #[error("segment holds a {found}, not a {expected}")]
    KindMismatch {
        /// The kind recorded in the segment.
        found: crate::segment::Kind,
        /// The kind the caller asked for.
        expected: crate::segment::Kind,
    },

    /// An item is larger than the space that holds one.
    #[error("message of {size} bytes is too large: at most {max} bytes fit; {hint}")]
    MessageTooLarge {
        /// The item's size.
        size: usize,
        /// The most that fits.
        max: usize,
        /// What to do about it (depends on the object).
        hint: &'static str,
    },

    /// The segment holds elements of another type than the one asked for
    /// (e.g. a `SharedArray<u32>` opened as `SharedArray<u64>`).
    #[error("segment holds {found}, not {expected}; open it with the type it was created with (if both name one type under different paths, open with check_type_name(false))")]
    TypeMismatch {
        /// The element type recorded in the segment.
        found: String,
        /// The element type the caller asked for.
        expected: String,
    },

    /// No chunk of the size class a loan needs (or of any larger class)
    /// came free before the timeout.
    #[error("payload pool exhausted: no free chunk of class {class} ({chunk_size} bytes) or larger; release messages sooner, or give the class more weight in RegionConfig")]
    PoolExhausted {
        /// The size class wanted (0 = 64 B ... 7 = 1 MiB).
        class: usize,
        /// Bytes per chunk of that class.
        chunk_size: usize,
    },

    /// The object was closed (a ring's or broadcast buffer's `close`, by
    /// any process), or the peer closed its end of a channel.
    #[error("closed: the object or the other end of the channel was closed")]
    Closed,

    /// A blocking call was cancelled from another thread (an RPC request's
    /// [`CancelToken`](crate::primitives::rpc::CancelToken)) before it
    /// completed. What it had already sent stays sent.
    #[error("interrupted: the call was cancelled while it waited")]
    Interrupted,

    /// The peer process died (its attachment is gone).
    #[error("the peer process died; its resources were reclaimed, open the object again to go on")]
    PeerDied,

    /// The other end's handler failed or panicked; the text is its error.
    #[error("remote handler failed: {0}")]
    Remote(String),

    /// An operating-system call failed in a way not covered above.
    #[error("{context}: {source}")]
    Io {
        /// What tachyon was doing.
        context: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
}

/// What exactly is wrong with a corrupt segment. Each case is distinct so a
/// caller (or a test) can tell them apart.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Corruption {
    /// The file has no bytes at all.
    ZeroLength,
    /// The file is shorter than its header says it must be.
    Truncated {
        /// The size the header (or the header itself) needs.
        expected: u64,
        /// The size of the file.
        actual: u64,
    },
    /// The file does not start with tachyon's magic number.
    BadMagic,
    /// The file is longer than the size recorded in its header.
    SizeMismatch {
        /// The size in the header.
        header: u64,
        /// The size of the file.
        file: u64,
    },
    /// The header was never marked ready: its creator did not finish
    /// writing it. tachyon publishes segments only once initialised, so such
    /// a file was damaged or was not made by this version of tachyon.
    NotInitialised,
    /// A field read from shared memory is out of its valid range.
    BadField {
        /// Which field.
        field: &'static str,
        /// The value found.
        value: u64,
    },
    /// The object is not what it should be (a directory, a device, ...).
    NotARegularFile,
}

impl fmt::Display for Corruption {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Corruption::ZeroLength => f.write_str("the file is empty (zero length)"),
            Corruption::Truncated { expected, actual } => {
                write!(f, "the file is truncated: {actual} bytes, at least {expected} needed")
            }
            Corruption::BadMagic => f.write_str("the file does not start with tachyon's magic number"),
            Corruption::SizeMismatch { header, file } => {
                write!(f, "the header records {header} bytes but the file has {file}")
            }
            Corruption::NotInitialised => {
                f.write_str("the header was never marked ready (creator did not finish)")
            }
            Corruption::BadField { field, value } => {
                write!(f, "field `{field}` has the impossible value {value}")
            }
            Corruption::NotARegularFile => f.write_str("not a regular file"),
        }
    }
}

fn after(waited: &Option<Duration>) -> String {
    waited.map_or(String::new(), |w| format!(" after {w:?}"))
}

/// `?` on an [`io::Error`] in code that returns `tachyon::Result`.
impl From<io::Error> for Error {
    fn from(source: io::Error) -> Self {
        Error::Io { context: "I/O error".into(), source }
    }
}

impl Error {
    /// The error of a wait for `what` that gave up after `waited`.
    pub(crate) fn timeout(what: &'static str, waited: Option<Duration>) -> Self {
        Error::Timeout { what, waited }
    }

    /// [`Error::Incompatible`] for the first of `fields` (name, existing
    /// value, requested value) whose two values differ; `what` names the
    /// object. (Unused under `--cfg tachyon_loom`, which leaves the bus
    /// out.)
    #[cfg_attr(tachyon_loom, allow(dead_code))]
    pub(crate) fn check_same<const N: usize>(
        what: &str,
        fields: [(&'static str, String, String); N],
    ) -> Result<()> {
        match fields.into_iter().find(|(_, existing, requested)| existing != requested) {
            Some((field, existing, requested)) => {
                Err(Error::Incompatible { name: what.to_owned(), field, existing, requested })
            }
            None => Ok(()),
        }
    }

    /// True for [`Error::Timeout`].
    pub fn is_timeout(&self) -> bool {
        matches!(self, Error::Timeout { .. })
    }

    #[cfg_attr(tachyon_loom, allow(dead_code))] // the file layer is not built under loom
    pub(crate) fn io(context: impl Into<String>, source: impl Into<io::Error>) -> Self {
        Error::Io { context: context.into(), source: source.into() }
    }

    pub(crate) fn corrupt(what: Corruption) -> Self {
        crate::platform::trace::event!(warn, "tachyon::corrupt", what = %what, "shared memory is corrupt");
        Error::Corrupt { what }
    }

    pub(crate) fn invalid(what: impl Into<String>) -> Self {
        Error::InvalidArgument { what: what.into() }
    }
}
