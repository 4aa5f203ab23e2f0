//! The topics peer's side of `CircularBuffer`s: echoes from one ring into
//! the other, or consumes one.

use crate::payload;
use crate::peer::{retry, Fault};
use crate::policy::Policy;
use crate::throughput;
use crate::topics::case::Test;
use crate::topics::protocol::PeerArgs;
use std::time::Duration;
use tachyon::CircularBuffer;

/// Echoes the ping ring's items into the pong ring, or consumes the ring.
pub(super) fn serve(a: &PeerArgs, stall: Duration, total: u64, fault: Fault) -> Result<Duration, String> {
    // The parent's death kills us (PR_SET_PDEATHSIG): nothing to check.
    let mut check = || Ok(());
    let mut buf = payload::buffer(a.size);
    let name = a.required_name()?;
    let policy = a.policy.unwrap_or(Policy::Hybrid).wait_policy();
    let open = |n: &str| {
        let ring = CircularBuffer::builder(n)
            .wait_policy(policy)
            .batch_reads(a.via.batch_reads())
            .open()
            .map_err(|e| format!("cannot open the CircularBuffer {n}: {e}"))?;
        if ring.node_size() != a.size {
            return Err(format!("{n} has nodes of {} bytes, expected {}", ring.node_size(), a.size));
        }
        Ok(ring)
    };
    let got = |n: usize| {
        if n == a.size {
            Ok(())
        } else {
            Err(format!("an item of {n} bytes, expected {}", a.size))
        }
    };
    Ok(match a.test {
        Test::Latency => {
            let (ping, pong) = (open(&format!("{name}-a"))?, open(&format!("{name}-b"))?);
            println!("ready");
            for seq in 0..total {
                let lose = fault.at(seq);
                retry(|t| ping.read(&mut buf, t), stall, &mut check, "no ping came")
                    .and_then(got)
                    .and_then(|()| payload::check(&buf, seq))
                    .and_then(|()| {
                        if lose {
                            payload::damage(&mut buf);
                        }
                        retry(|t| pong.write(&buf, t), stall, &mut check, "the pong ring stayed full")
                    })
                    .map_err(|e| format!("echo, round trip {seq}: {e}"))?;
            }
            Duration::ZERO
        }
        Test::Throughput => {
            let data = open(&name)?;
            println!("ready");
            throughput::timed(total, a.warmup, |seq| {
                let n = retry(|t| data.read(&mut buf, t), stall, &mut check, "no message came")?;
                got(n)?;
                payload::check(&buf, seq)
            })?
        }
    })
}
