//! The bridge's framing on Zenoh.
//!
//! A message's payload travels as the Zenoh payload, unchanged; what the
//! bridge needs to know travels in the Zenoh *attachment*, 32 bytes,
//! little-endian:
//!
//! ```text
//! offset size field
//!      0    4 magic "TYBR"
//!      4    1 version (1)
//!      5    1 kind: 1 one message (a put), 2 a batch (a get, acknowledged;
//!             or a put, from an at-most-once route with `batch` above 1)
//!      6    2 reserved (0)
//!      8    8 origin: the sending bridge's run id (random per process)
//!     16    4 partition of the message(s) in the source topic
//!     20    4 count of messages (1 for kind 1)
//!     24    8 sequence number of the (first) message, per origin and
//!             route partition, from 0
//! ```
//!
//! A batch's payload is `count` records of a 4-byte length and that many
//! bytes. Everything is checked before use: a sample or query whose
//! attachment or batch does not parse is dropped and counted, never a
//! panic.

/// Bytes of the attachment.
pub const HEADER_LEN: usize = 32;
const MAGIC: &[u8; 4] = b"TYBR";
const VERSION: u8 = 1;

/// What a header says a payload is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// One message, published (at-most-once routes).
    Message,
    /// A batch of messages: sent as a query and acknowledged (at-least-once
    /// routes), or published (at-most-once routes with `batch` above 1).
    Batch,
}

/// The attachment of every sample and query a bridge sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// One message or a batch.
    pub kind: Kind,
    /// The sending bridge's run id.
    pub origin: u64,
    /// The source partition.
    pub partition: u32,
    /// Messages carried.
    pub count: u32,
    /// Sequence number of the first message.
    pub seq: u64,
}

impl Header {
    /// The 32 bytes.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0..4].copy_from_slice(MAGIC);
        b[4] = VERSION;
        b[5] = match self.kind {
            Kind::Message => 1,
            Kind::Batch => 2,
        };
        b[8..16].copy_from_slice(&self.origin.to_le_bytes());
        b[16..20].copy_from_slice(&self.partition.to_le_bytes());
        b[20..24].copy_from_slice(&self.count.to_le_bytes());
        b[24..32].copy_from_slice(&self.seq.to_le_bytes());
        b
    }

    /// Parses an attachment; `None` if it is not a bridge header of this
    /// version.
    pub fn decode(b: &[u8]) -> Option<Header> {
        if b.len() != HEADER_LEN || &b[0..4] != MAGIC || b[4] != VERSION {
            return None;
        }
        let kind = match b[5] {
            1 => Kind::Message,
            2 => Kind::Batch,
            _ => return None,
        };
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let u64_at = |i: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(w)
        };
        let h = Header { kind, origin: u64_at(8), partition: u32_at(16), count: u32_at(20), seq: u64_at(24) };
        if h.count == 0 || (kind == Kind::Message && h.count != 1) {
            return None;
        }
        Some(h)
    }
}

/// Appends one record (length, bytes) to a batch.
pub fn push_record(batch: &mut Vec<u8>, msg: &[u8]) {
    batch.extend_from_slice(&(msg.len() as u32).to_le_bytes());
    batch.extend_from_slice(msg);
}

/// Splits a batch into its records: `None` unless it holds exactly
/// `count` whole records.
pub fn split_batch(mut b: &[u8], count: u32) -> Option<Vec<&[u8]>> {
    let mut out = Vec::with_capacity(count.min(4096) as usize);
    for _ in 0..count {
        if b.len() < 4 {
            return None;
        }
        let len = u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize;
        b = &b[4..];
        if b.len() < len {
            return None;
        }
        out.push(&b[..len]);
        b = &b[len..];
    }
    b.is_empty().then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips_and_rejects_garbage() {
        let h = Header { kind: Kind::Batch, origin: 0xdead_beef_1234, partition: 7, count: 3, seq: 99 };
        assert_eq!(Header::decode(&h.encode()), Some(h));
        assert_eq!(Header::decode(&h.encode()[..31]), None);
        let mut bad = h.encode();
        bad[0] = b'X';
        assert_eq!(Header::decode(&bad), None);
        let mut bad = h.encode();
        bad[5] = 9;
        assert_eq!(Header::decode(&bad), None);
        let zero = Header { count: 0, ..h };
        assert_eq!(Header::decode(&zero.encode()), None);
        let two = Header { kind: Kind::Message, count: 2, ..h };
        assert_eq!(Header::decode(&two.encode()), None);
    }

    #[test]
    fn batches_split_exactly() {
        let mut b = Vec::new();
        for m in [&b"one"[..], b"", b"three"] {
            push_record(&mut b, m);
        }
        assert_eq!(split_batch(&b, 3), Some(vec![&b"one"[..], b"", b"three"]));
        assert_eq!(split_batch(&b, 2), None, "a record left over");
        assert_eq!(split_batch(&b, 4), None, "a record missing");
        assert_eq!(split_batch(&b[..b.len() - 1], 3), None, "a short record");
        let huge = [0xff, 0xff, 0xff, 0xff, 1];
        assert_eq!(split_batch(&huge, 1), None);
    }
}
