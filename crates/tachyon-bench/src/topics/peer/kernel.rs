//! The topics peer's side of a Unix domain socket, a pipe or TCP: echoes
//! through the descriptors it inherited, or consumes the stream.

use crate::kernel;
use crate::payload;
use crate::peer::Fault;
use crate::throughput;
use crate::topics::case::Test;
use crate::topics::protocol::PeerArgs;
use std::io::{Read, Write};
use std::time::Duration;

/// Echoes what `--fd-in` brings on `--fd-out`, or consumes `--fd-in`.
pub(super) fn serve(a: &PeerArgs, total: u64, fault: Fault) -> Result<Duration, String> {
    let mut buf = payload::buffer(a.size);
    let (rx, tx) = kernel::adopt(a.fd_in, a.fd_out)?;
    let mut rx = rx.ok_or("--fd-in is required")?;
    println!("ready");
    Ok(match a.test {
        Test::Latency => {
            let mut tx = tx.ok_or("--fd-out is required")?;
            for seq in 0..total {
                let lose = fault.at(seq);
                rx.read_exact(&mut buf).map_err(|e| format!("echo, reading ping {seq}: {e}"))?;
                payload::check(&buf, seq).map_err(|e| format!("echo, round trip {seq}: {e}"))?;
                if lose {
                    payload::damage(&mut buf);
                }
                tx.write_all(&buf).map_err(|e| format!("echo, writing pong {seq}: {e}"))?;
            }
            Duration::ZERO
        }
        Test::Throughput => throughput::timed(total, a.warmup, |seq| {
            rx.read_exact(&mut buf).map_err(|e| format!("reading: {e}"))?;
            payload::check(&buf, seq)
        })?,
    })
}
