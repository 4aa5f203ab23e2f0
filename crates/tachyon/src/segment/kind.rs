//! What a segment holds.

use std::fmt;

/// The kind of object a segment holds, recorded in its header so that
/// opening a segment as the wrong kind is an error rather than garbage.
///
/// ```
/// use tachyon::Kind;
/// assert_eq!(Kind::RAW.to_string(), "raw segment");
/// assert_eq!(Kind::from_raw(Kind::RAW.raw()), Kind::RAW);
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Kind(u32);

impl Kind {
    /// Plain bytes: [`Segment::create`](crate::Segment::create) /
    /// [`Segment::open`](crate::Segment::open).
    pub const RAW: Kind = Kind(1);
    /// A `SharedArray<T>`.
    pub const ARRAY: Kind = Kind(2);
    /// A `SharedBuffer`.
    pub const BUFFER: Kind = Kind(3);
    /// A `CircularBuffer`.
    pub const CIRCULAR: Kind = Kind(4);
    /// A broadcast ring.
    pub const BROADCAST: Kind = Kind(5);
    /// One direction of an `RpcBuffer`.
    pub const RPC: Kind = Kind(6);
    /// A zero-copy bus region.
    pub const REGION: Kind = Kind(7);

    /// A kind from its raw value (any value: unknown kinds display as such).
    pub const fn from_raw(raw: u32) -> Kind {
        Kind(raw)
    }

    /// The raw value stored in headers.
    pub const fn raw(self) -> u32 {
        self.0
    }

    fn name(self) -> Option<&'static str> {
        Some(match self {
            Kind::RAW => "raw segment",
            Kind::ARRAY => "shared array",
            Kind::BUFFER => "shared buffer",
            Kind::CIRCULAR => "circular buffer",
            Kind::BROADCAST => "broadcast buffer",
            Kind::RPC => "rpc channel",
            Kind::REGION => "region",
            _ => return None,
        })
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => f.write_str(n),
            None => write!(f, "unknown kind {}", self.0),
        }
    }
}

impl fmt::Debug for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Kind({self})")
    }
}
