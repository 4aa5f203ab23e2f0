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
    /// Plain bytes: [`Segment::create`](super::Segment::create) /
    /// [`Segment::open`](super::Segment::open).
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

/// With the `serde` feature, a known kind is written as its name
/// (`"region"`), an unknown one as its raw number; both read back (from a
/// self-describing format such as JSON).
#[cfg(feature = "serde")]
impl serde::Serialize for Kind {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.name() {
            Some(name) => s.serialize_str(name),
            None => s.serialize_u32(self.0),
        }
    }
}

#[cfg(feature = "serde")]
impl<'de> serde::Deserialize<'de> for Kind {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Kind, D::Error> {
        use serde::de::{Error, Unexpected, Visitor};
        struct KindVisitor;
        impl Visitor<'_> for KindVisitor {
            type Value = Kind;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a segment kind's name (\"region\") or raw number")
            }
            fn visit_u64<E: Error>(self, v: u64) -> Result<Kind, E> {
                u32::try_from(v).map(Kind).map_err(|_| E::invalid_value(Unexpected::Unsigned(v), &self))
            }
            fn visit_i64<E: Error>(self, v: i64) -> Result<Kind, E> {
                u32::try_from(v).map(Kind).map_err(|_| E::invalid_value(Unexpected::Signed(v), &self))
            }
            fn visit_str<E: Error>(self, v: &str) -> Result<Kind, E> {
                (1..=Kind::REGION.0)
                    .map(Kind)
                    .find(|k| k.name() == Some(v))
                    .ok_or_else(|| E::invalid_value(Unexpected::Str(v), &self))
            }
        }
        d.deserialize_any(KindVisitor)
    }
}
