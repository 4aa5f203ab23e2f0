//! The topics peer's side of iceoryx2 publish-subscribe: echoes, or
//! consumes, polling.

use crate::iceoryx::{check as ice_check, Ports};
use crate::payload;
use crate::peer::Fault;
use crate::rawring::Patience;
use crate::throughput;
use crate::topics::case::Test;
use crate::topics::protocol::PeerArgs;
use std::time::Duration;

/// Echoes the `ping` service's samples on `pong`, or consumes `data`.
pub(super) fn serve(a: &PeerArgs, stall: Duration, total: u64, fault: Fault) -> Result<Duration, String> {
    // The parent's death kills us (PR_SET_PDEATHSIG): nothing to check.
    let mut check = || Ok(());
    let mut buf = payload::buffer(a.size);
    let name = a.required_name()?;
    let mut patience = Patience::new(stall, &mut check);
    Ok(match a.test {
        Test::Latency => {
            let ports = Ports::open(&name, Some("pong"), Some("ping"), a.size, 2, stall)?;
            ports.wait_for_subscriber(&mut patience)?;
            println!("ready");
            for seq in 0..total {
                let lose = fault.at(seq);
                ports
                    .receive(&mut patience, "no ping came", |m| {
                        buf.copy_from_slice(&m[..a.size.min(m.len())]);
                        ice_check(m, a.size, seq)
                    })
                    .and_then(|r| r)
                    .and_then(|()| {
                        if lose {
                            payload::damage(&mut buf);
                        }
                        ports.send(&buf)
                    })
                    .map_err(|e| format!("echo, round trip {seq}: {e}"))?;
            }
            Duration::ZERO
        }
        Test::Throughput => {
            let ports = Ports::open(&name, None, Some("data"), a.size, a.capacity, stall)?;
            println!("ready");
            throughput::timed(total, a.warmup, |seq| {
                ports.receive(&mut patience, "no message came", |m| ice_check(m, a.size, seq))?
            })?
        }
    })
}
