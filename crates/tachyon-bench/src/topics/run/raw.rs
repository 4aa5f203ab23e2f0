//! A topics run through the raw SPSC ring of memcpys, the reference: a
//! ring per direction for round trips, one ring for a stream.

use crate::latency;
use crate::payload;
use crate::peer::{Peer, STARTUP};
use crate::rawring::{self, Kind, Patience, RawRing};
use crate::topics::case::{Case, Measured, Settings, Test};
use crate::topics::protocol::{collect, peer_args, same};
use crate::topics::shm::{unique_name, RAW_DATA_OFF};

pub(super) fn raw_run(case: Case, settings: &Settings, count: u64, warmup: u64) -> Result<Measured, String> {
    let stall = settings.common.stall;
    let total = warmup + count;
    let size = case.size;
    let kind = Kind::of(case.via);
    let name = unique_name();
    let mut args = peer_args(case, settings, count, warmup);
    args.extend(["--name".into(), name.clone()]);
    let mut buf = payload::buffer(size);
    match case.test {
        Test::Latency => {
            let to = RawRing::create_kind(kind, &format!("{name}-a"), 2, size, RAW_DATA_OFF)?;
            let from = RawRing::create_kind(kind, &format!("{name}-b"), 2, size, RAW_DATA_OFF)?;
            let mut peer = Peer::spawn(&args)?;
            peer.expect("ready", STARTUP)?;
            let mut got = payload::buffer(size);
            let r = {
                let mut writer = rawring::Writer::new(&to)?;
                let mut reader = rawring::Reader::new(&from)?;
                let mut check = || peer.check_alive();
                let mut patience = Patience::new(stall, &mut check);
                latency::timed(total, warmup, "round trip", |seq| {
                    payload::stamp(&mut buf, seq);
                    writer.push(&buf, &mut patience)?;
                    reader.pop(&mut got, &mut patience)?;
                    same(&got, &buf, seq)
                })?
            };
            collect(peer, stall)?;
            Ok((r.0, Some(r.1)))
        }
        Test::Throughput => {
            let ring = RawRing::create_kind(kind, &name, settings.capacity as usize, size, RAW_DATA_OFF)?;
            let mut peer = Peer::spawn(&args)?;
            peer.expect("ready", STARTUP)?;
            {
                let mut writer = rawring::Writer::new(&ring)?;
                let mut check = || peer.check_alive();
                let mut patience = Patience::new(stall, &mut check);
                for seq in 0..total {
                    writer.push(&buf, &mut patience).map_err(|e| format!("producer, message {seq}: {e}"))?;
                }
            }
            Ok((collect(peer, stall)?, None))
        }
    }
}
