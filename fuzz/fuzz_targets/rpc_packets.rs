//! The RPC wire format: packet headers and reassembly, as a receiver reads
//! them from ring nodes another process wrote. Input: node size and
//! message limit, then packets separated by their own length byte.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.len() < 4 {
        return;
    }
    let node_size = 33 + usize::from(u16::from_le_bytes([data[0], data[1]]) % 512);
    let max_message = usize::from(u16::from_le_bytes([data[2], data[3]]));
    let mut packets = Vec::new();
    let mut rest = &data[4..];
    while let Some((&len, tail)) = rest.split_first() {
        let len = usize::from(len).min(tail.len());
        packets.push(&tail[..len]);
        rest = &tail[len..];
    }
    tachyon::fuzzing::rpc_reassemble(node_size, max_message, &packets);
});
