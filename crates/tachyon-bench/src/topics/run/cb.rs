//! A topics run through `CircularBuffer`s.

use crate::latency;
use crate::payload;
use crate::peer::{retry, Peer, STARTUP};
use crate::policy::Policy;
use crate::topics::case::{Case, Measured, Settings, Test, Via};
use crate::topics::protocol::{collect, peer_args, same};
use crate::topics::shm::unique_name;
use tachyon::CircularBuffer;

/// `CircularBuffer` `write` / `read`: for latency a pair (ping, pong) of
/// `capacity` nodes each, for throughput one ring of `capacity` nodes;
/// with light hand-overs for [`Via::CbLight`].
pub(super) fn cb_run(case: Case, settings: &Settings, count: u64, warmup: u64) -> Result<Measured, String> {
    let stall = settings.common.stall;
    let total = warmup + count;
    let size = case.size;
    let name = unique_name();
    let policy = case.policy.unwrap_or(Policy::Hybrid).wait_policy();
    let ring = |n: &str| {
        CircularBuffer::builder(n)
            .node_count(settings.capacity as usize)
            .node_size(size)
            .wait_policy(policy)
            .light_handovers(case.via == Via::CbLight)
            .create()
            .map_err(|e| format!("cannot create the CircularBuffer {n}: {e}"))
    };
    let mut args = peer_args(case, settings, count, warmup);
    args.extend(["--name".into(), name.clone()]);
    let mut buf = payload::buffer(size);
    match case.test {
        Test::Latency => {
            let (ping, pong) = (ring(&format!("{name}-a"))?, ring(&format!("{name}-b"))?);
            let mut peer = Peer::spawn(&args)?;
            peer.expect("ready", STARTUP)?;
            let mut got = payload::buffer(size);
            let r = {
                let mut check = || peer.check_alive();
                latency::timed(total, warmup, "round trip", |seq| {
                    payload::stamp(&mut buf, seq);
                    retry(|t| ping.write(&buf, t), stall, &mut check, "the ping ring stayed full")?;
                    let n = retry(|t| pong.read(&mut got, t), stall, &mut check, "no pong came")?;
                    same(&got[..n], &buf, seq)
                })?
            };
            collect(peer, stall)?;
            Ok((r.0, Some(r.1)))
        }
        Test::Throughput => {
            let data = ring(&name)?;
            let mut peer = Peer::spawn(&args)?;
            peer.expect("ready", STARTUP)?;
            {
                let mut check = || peer.check_alive();
                for seq in 0..total {
                    payload::stamp(&mut buf, seq);
                    retry(|t| data.write(&buf, t), stall, &mut check, "the ring stayed full")
                        .map_err(|e| format!("producer, message {seq}: {e}"))?;
                }
            }
            Ok((collect(peer, stall)?, None))
        }
    }
}
