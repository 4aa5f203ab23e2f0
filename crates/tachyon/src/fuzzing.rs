//! Entry points for the fuzz targets in `fuzz/` (not part of the API): the
//! parsers of bytes another process controls that are not reachable
//! through a public type alone.

use crate::primitives::rpc::packet::{Assembled, Reassembler, HEADER};

/// Feeds `packets` (as read from ring nodes of `node_size` bytes) to a
/// reassembler accepting messages of at most `max_message` bytes, and
/// checks what it hands back: every complete message fits the limit and
/// was announced with its length. Returns the messages completed.
///
/// # Panics
/// If the reassembler breaks one of those promises (a finding).
pub fn rpc_reassemble(node_size: usize, max_message: usize, packets: &[&[u8]]) -> usize {
    let node_size = node_size.clamp(HEADER + 1, 1 << 16);
    let mut asm = Reassembler::new(node_size, max_message);
    let mut complete = 0;
    for packet in packets {
        let packet = &packet[..packet.len().min(node_size)];
        match asm.push(packet) {
            Assembled::Complete(h, body) => {
                assert!(body.len() <= max_message, "message past the limit");
                assert_eq!(body.len(), h.total_len as usize, "message of another length than announced");
                complete += 1;
            }
            Assembled::Single(h) => {
                let body = &packet[HEADER..];
                assert!(body.len() <= max_message, "message past the limit");
                assert_eq!(body.len(), h.total_len as usize, "message of another length than announced");
                complete += 1;
            }
            Assembled::TooLarge(h) => assert!(h.total_len as usize > max_message),
            Assembled::Incomplete | Assembled::Dropped(_) => {}
        }
        asm.expire(std::time::Duration::from_secs(3600));
    }
    complete
}
