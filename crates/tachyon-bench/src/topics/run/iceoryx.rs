//! A topics run through iceoryx2 publish-subscribe, the comparison.

use crate::iceoryx::Ports;
use crate::latency;
use crate::payload;
use crate::peer::{Peer, STARTUP};
use crate::rawring::Patience;
use crate::topics::case::{Case, Measured, Settings, Test};
use crate::topics::protocol::{collect, peer_args, same};
use crate::topics::shm::unique_name;

/// iceoryx2 publish-subscribe (see [`crate::iceoryx`]).
pub(super) fn iceoryx_run(
    case: Case,
    settings: &Settings,
    count: u64,
    warmup: u64,
) -> Result<Measured, String> {
    let stall = settings.common.stall;
    let total = warmup + count;
    let size = case.size;
    let name = unique_name();
    let mut args = peer_args(case, settings, count, warmup);
    args.extend(["--name".into(), name.clone()]);
    let mut buf = payload::buffer(size);
    match case.test {
        Test::Latency => {
            let ports = Ports::open(&name, Some("ping"), Some("pong"), size, 2, stall)?;
            let mut peer = Peer::spawn(&args)?;
            peer.expect("ready", STARTUP)?;
            let r = {
                let mut check = || peer.check_alive();
                let mut patience = Patience::new(stall, &mut check);
                ports.wait_for_subscriber(&mut patience)?;
                latency::timed(total, warmup, "round trip", |seq| {
                    payload::stamp(&mut buf, seq);
                    ports.send(&buf)?;
                    ports.receive(&mut patience, "no pong came", |m| same(m, &buf, seq))?
                })?
            };
            collect(peer, stall)?;
            Ok((r.0, Some(r.1)))
        }
        Test::Throughput => {
            let ports = Ports::open(&name, Some("data"), None, size, settings.capacity as usize, stall)?;
            let mut peer = Peer::spawn(&args)?;
            peer.expect("ready", STARTUP)?;
            {
                let mut check = || peer.check_alive();
                let mut patience = Patience::new(stall, &mut check);
                ports.wait_for_subscriber(&mut patience)?;
                for seq in 0..total {
                    payload::stamp(&mut buf, seq);
                    ports.send(&buf).map_err(|e| format!("producer, message {seq}: {e}"))?;
                }
            }
            Ok((collect(peer, stall)?, None))
        }
    }
}
