//! The topics peer's side of the raw SPSC ring of memcpys: echoes from one
//! ring into the other, or consumes one.

use crate::payload;
use crate::peer::Fault;
use crate::rawring::{self, Kind, Patience, RawRing};
use crate::throughput;
use crate::topics::case::Test;
use crate::topics::protocol::PeerArgs;
use crate::topics::shm::RAW_DATA_OFF;
use std::time::Duration;

/// Echoes the items of ring `-a` into ring `-b`, or consumes the ring.
pub(super) fn serve(a: &PeerArgs, stall: Duration, total: u64, fault: Fault) -> Result<Duration, String> {
    // The parent's death kills us (PR_SET_PDEATHSIG): nothing to check.
    let mut check = || Ok(());
    let mut buf = payload::buffer(a.size);
    let name = a.required_name()?;
    let mut patience = Patience::new(stall, &mut check);
    let kind = Kind::of(a.via);
    Ok(match a.test {
        Test::Latency => {
            let from = RawRing::open_kind(kind, &format!("{name}-a"), 2, a.size, RAW_DATA_OFF)?;
            let to = RawRing::open_kind(kind, &format!("{name}-b"), 2, a.size, RAW_DATA_OFF)?;
            let mut reader = rawring::Reader::new(&from)?;
            let mut writer = rawring::Writer::new(&to)?;
            println!("ready");
            for seq in 0..total {
                let lose = fault.at(seq);
                reader
                    .pop(&mut buf, &mut patience)
                    .and_then(|()| payload::check(&buf, seq))
                    .and_then(|()| {
                        if lose {
                            payload::damage(&mut buf);
                        }
                        writer.push(&buf, &mut patience)
                    })
                    .map_err(|e| format!("echo, round trip {seq}: {e}"))?;
            }
            Duration::ZERO
        }
        Test::Throughput => {
            let ring = RawRing::open_kind(kind, &name, a.capacity, a.size, RAW_DATA_OFF)?;
            let mut reader = rawring::Reader::new(&ring)?;
            println!("ready");
            throughput::timed(total, a.warmup, |seq| {
                reader.pop(&mut buf, &mut patience)?;
                payload::check(&buf, seq)
            })?
        }
    })
}
