//! The RPC wire format: 32-byte packet headers, splitting and reassembly.
//!
//! Every node of the two rings carries one packet: a header followed by up
//! to `node_size - 32` payload bytes. A message longer than that is split
//! into packets that its sender writes in order; packets of messages from
//! other senders may come in between, so the receiver reassembles by
//! message id. Everything read from a packet is validated before use: a
//! packet that does not fit is dropped and counted, and no allocation is
//! larger than the configured maximum message size.

use crate::platform::copy;
use std::cell::Cell;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Bytes of header in front of every packet.
pub const HEADER: usize = 32;
/// The protocol version this build speaks.
pub const VERSION: u8 = 2;

/// What a message is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MsgType {
    Request = 1,
    Response = 2,
    Error = 3,
    Notify = 4,
}

/// One packet's header (see `docs/rpc.md` for the byte layout).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Header {
    pub kind: MsgType,
    pub msg_id: u64,
    pub response_to: u64,
    pub total_len: u32,
    pub index: u32,
    pub count: u32,
}

/// How many packets a message of `total` bytes needs with `room` payload
/// bytes per packet (at least one, even for an empty message).
pub(crate) fn packet_count(total: usize, room: usize) -> usize {
    total.div_ceil(room).max(1)
}

impl Header {
    pub(crate) fn encode(&self, out: &mut [u8]) {
        out[0] = VERSION;
        out[1] = self.kind as u8;
        out[2..4].copy_from_slice(&0u16.to_le_bytes());
        out[4..8].copy_from_slice(&self.count.to_le_bytes());
        out[8..16].copy_from_slice(&self.msg_id.to_le_bytes());
        out[16..24].copy_from_slice(&self.response_to.to_le_bytes());
        out[24..28].copy_from_slice(&self.total_len.to_le_bytes());
        out[28..32].copy_from_slice(&self.index.to_le_bytes());
    }

    pub(crate) fn decode(b: &[u8]) -> Result<Header, &'static str> {
        if b.len() < HEADER {
            return Err("packet shorter than its header");
        }
        if b[0] != VERSION {
            return Err("unknown protocol version");
        }
        let kind = match b[1] {
            1 => MsgType::Request,
            2 => MsgType::Response,
            3 => MsgType::Error,
            4 => MsgType::Notify,
            _ => return Err("unknown message type"),
        };
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let u64_at = |i: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(a)
        };
        let h = Header {
            kind,
            count: u32_at(4),
            msg_id: u64_at(8),
            response_to: u64_at(16),
            total_len: u32_at(24),
            index: u32_at(28),
        };
        if h.count == 0 || h.index >= h.count {
            return Err("packet index out of range");
        }
        Ok(h)
    }
}

thread_local! {
    /// A message buffer given back on this thread ([`recycle`]), for the
    /// next one-packet message read on it ([`copy_of`]).
    static SPARE: Cell<Vec<u8>> = const { Cell::new(Vec::new()) };
}

/// The largest buffer [`recycle`] keeps: one a thread keeps is never
/// given back to the allocator.
const SPARE_MAX: usize = 64 << 10;

/// `bytes` in a buffer of its own: the one last [`recycle`]d on this
/// thread if there is one (a reader thread that runs the handler of each
/// request it reads saves an allocation and a free a request), else a new
/// one.
pub(crate) fn copy_of(bytes: &[u8]) -> Vec<u8> {
    let mut v = SPARE.try_with(Cell::take).unwrap_or_default();
    v.clear();
    copy::extend(&mut v, bytes);
    v
}

/// Keeps a message buffer that is no longer needed for this thread's next
/// [`copy_of`] (unless it is larger than [`SPARE_MAX`]).
pub(crate) fn recycle(buf: Vec<u8>) {
    if buf.capacity() <= SPARE_MAX {
        let _ = SPARE.try_with(|spare| spare.set(buf));
    }
}

/// What one packet completed.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Assembled {
    /// A whole message, reassembled from several packets.
    Complete(Header, Vec<u8>),
    /// A whole message in this one packet: its payload is
    /// `packet[HEADER..]`, validated, not copied.
    Single(Header),
    /// More packets are needed.
    Incomplete,
    /// The packet was invalid and was dropped (with any partial message it
    /// belonged to).
    Dropped(&'static str),
    /// The first packet of a message longer than this end accepts: the
    /// message is refused (its other packets will be dropped too).
    TooLarge(Header),
}

struct Partial {
    first: Header,
    buf: Vec<u8>,
    next: u32,
    started: Instant,
}

/// Rebuilds messages from packets.
///
/// Memory is bounded whatever the peer writes: a partial message's buffer
/// grows only with the bytes that actually came (never reserved from the
/// length a header claims), and the bytes held by all partial messages
/// together are capped; past the cap the oldest partial messages are given
/// up.
pub(crate) struct Reassembler {
    room: usize,
    max_message: usize,
    partial: HashMap<u64, Partial>,
    /// Payload bytes held by partial messages.
    held: usize,
    /// The most `held` may reach.
    cap: usize,
    /// Partial messages given up to respect `cap`, not yet reported.
    pub given_up: u64,
}

impl Reassembler {
    pub(crate) fn new(node_size: usize, max_message: usize) -> Self {
        Reassembler {
            room: node_size - HEADER,
            max_message,
            partial: HashMap::new(),
            held: 0,
            cap: max_message.saturating_mul(2).max(64 << 20),
            given_up: 0,
        }
    }

    fn forget(&mut self, id: u64) {
        if let Some(p) = self.partial.remove(&id) {
            self.held -= p.buf.len();
        }
    }

    /// Makes room for `more` bytes by giving up the oldest partials.
    fn make_room(&mut self, more: usize) {
        while self.held + more > self.cap {
            let Some(oldest) = self.partial.iter().min_by_key(|(_, p)| p.started).map(|(id, _)| *id) else {
                return;
            };
            self.forget(oldest);
            self.given_up += 1;
        }
    }

    /// Takes one packet (header and payload, as read from a node).
    pub(crate) fn push(&mut self, packet: &[u8]) -> Assembled {
        let h = match Header::decode(packet) {
            Ok(h) => h,
            Err(why) => return Assembled::Dropped(why),
        };
        let payload = &packet[HEADER..];
        let total = h.total_len as usize;
        if total > self.max_message {
            self.forget(h.msg_id);
            return if h.index == 0 {
                Assembled::TooLarge(h)
            } else {
                Assembled::Dropped("message larger than the maximum message size")
            };
        }
        if h.count as usize != packet_count(total, self.room) {
            self.forget(h.msg_id);
            return Assembled::Dropped("packet count does not match the message length");
        }
        let offset = h.index as usize * self.room;
        if payload.len() != (total - offset).min(self.room) {
            self.forget(h.msg_id);
            return Assembled::Dropped("packet payload has the wrong length");
        }
        if h.count == 1 {
            // Its bytes are the packet's payload: the caller uses them in
            // place or copies them where they are wanted.
            return Assembled::Single(h);
        }
        self.make_room(payload.len());
        if h.index == 0 {
            if self.partial.contains_key(&h.msg_id) {
                self.forget(h.msg_id);
                return Assembled::Dropped("message id reused while its message was incomplete");
            }
            // Only the bytes that came: never reserve what a header claims.
            let buf = copy::to_vec(payload);
            self.held += buf.len();
            self.partial.insert(h.msg_id, Partial { first: h, buf, next: 1, started: Instant::now() });
            return Assembled::Incomplete;
        }
        let Some(p) = self.partial.get_mut(&h.msg_id) else {
            return Assembled::Dropped("packet of a message whose start was never seen");
        };
        let f = &p.first;
        if h.index != p.next
            || h.kind != f.kind
            || h.total_len != f.total_len
            || h.response_to != f.response_to
        {
            self.forget(h.msg_id);
            return Assembled::Dropped("packet does not continue its message");
        }
        copy::extend(&mut p.buf, payload);
        p.next += 1;
        self.held += payload.len();
        if p.next < h.count {
            return Assembled::Incomplete;
        }
        let p = self.partial.remove(&h.msg_id).expect("present above");
        self.held -= p.buf.len();
        Assembled::Complete(p.first, p.buf)
    }

    /// Forgets messages whose remaining packets have not come within
    /// `older_than` (their sender gave up or died); returns how many.
    pub(crate) fn expire(&mut self, older_than: Duration) -> usize {
        let before = self.partial.len();
        let mut freed = 0;
        self.partial.retain(|_, p| {
            let keep = p.started.elapsed() < older_than;
            if !keep {
                freed += p.buf.len();
            }
            keep
        });
        self.held -= freed;
        before - self.partial.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn split(h: Header, msg: &[u8], node_size: usize) -> Vec<Vec<u8>> {
        let room = node_size - HEADER;
        let count = packet_count(msg.len(), room);
        (0..count)
            .map(|i| {
                let chunk = &msg[(i * room).min(msg.len())..((i + 1) * room).min(msg.len())];
                let mut p = vec![0u8; HEADER + chunk.len()];
                Header { index: i as u32, count: count as u32, total_len: msg.len() as u32, ..h }
                    .encode(&mut p);
                p[HEADER..].copy_from_slice(chunk);
                p
            })
            .collect()
    }

    fn h(id: u64) -> Header {
        Header { kind: MsgType::Request, msg_id: id, response_to: 0, total_len: 0, index: 0, count: 1 }
    }

    #[test]
    fn sizes_around_the_packet_room_round_trip() {
        let node = 64;
        let room = node - HEADER;
        for len in [0, 1, room - 1, room, room + 1, 2 * room, 3 * room + 5] {
            let msg: Vec<u8> = (0..len).map(|i| i as u8).collect();
            let mut r = Reassembler::new(node, 1 << 20);
            let packets = split(h(7), &msg, node);
            assert_eq!(packets.len(), packet_count(len, room));
            let mut out = None;
            for p in &packets {
                match r.push(p) {
                    Assembled::Complete(_, m) => out = Some(m),
                    Assembled::Single(_) => out = Some(p[HEADER..].to_vec()),
                    Assembled::Incomplete => {}
                    other => panic!("{other:?}"),
                }
            }
            assert_eq!(out.as_deref(), Some(&msg[..]), "len {len}");
        }
    }

    #[test]
    fn interleaved_messages_reassemble() {
        let node = 40;
        let a: Vec<u8> = vec![1; 30];
        let b: Vec<u8> = vec![2; 25];
        let pa = split(h(1), &a, node);
        let pb = split(h(2), &b, node);
        let mut r = Reassembler::new(node, 1 << 20);
        let mut done = Vec::new();
        for (x, y) in pa.iter().zip(pb.iter()) {
            for p in [x, y] {
                if let Assembled::Complete(h, m) = r.push(p) {
                    done.push((h.msg_id, m));
                }
            }
        }
        for p in pa.iter().skip(pb.len()) {
            if let Assembled::Complete(h, m) = r.push(p) {
                done.push((h.msg_id, m));
            }
        }
        done.sort();
        assert_eq!(done, vec![(1, a), (2, b)]);
    }

    #[test]
    fn bad_packets_are_dropped_not_trusted() {
        let mut r = Reassembler::new(64, 1000);
        assert_eq!(r.push(&[0; 10]), Assembled::Dropped("packet shorter than its header"));
        let mut p = vec![0u8; HEADER];
        Header { total_len: 5000, ..h(1) }.encode(&mut p);
        assert!(matches!(r.push(&p), Assembled::TooLarge(_)), "larger than the maximum");
        Header { total_len: 10, ..h(1) }.encode(&mut p);
        assert!(matches!(r.push(&p), Assembled::Dropped(_)), "payload length lies");
        let mut q = vec![0u8; HEADER + 32];
        Header { total_len: 40, count: 2, index: 1, ..h(3) }.encode(&mut q);
        assert!(matches!(r.push(&q[..HEADER + 8]), Assembled::Dropped(_)), "continuation without a start");
    }

    #[test]
    fn partial_messages_hold_bounded_memory() {
        // Many first packets of huge messages: memory grows with the bytes
        // that came, and stays under the cap.
        let node = 4096;
        let mut r = Reassembler::new(node, 16 << 20);
        for id in 0..20_000u64 {
            let mut p = vec![0u8; node];
            let count = packet_count(16 << 20, node - HEADER) as u32;
            Header { total_len: 16 << 20, count, ..h(id) }.encode(&mut p);
            assert_eq!(r.push(&p), Assembled::Incomplete);
            assert!(r.held <= r.cap);
        }
        assert!(r.given_up > 0, "the oldest were given up");
    }

    proptest! {
        #[test]
        fn random_packets_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let mut r = Reassembler::new(64, 1 << 16);
            let _ = r.push(&bytes);
        }
    }
}
