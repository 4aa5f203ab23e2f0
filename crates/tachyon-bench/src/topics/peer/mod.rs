//! The topics peer: the benchmark binary started again as `tachyon-bench
//! peer topics ...`, on the far side of one run.

mod cb;
mod flag;
#[cfg(feature = "iceoryx2")]
mod iceoryx;
mod kernel;
mod raw;
mod topic;

use crate::payload;
use crate::peer::{self, Fault};
use crate::topics::case::{topic_via, Via};
use crate::topics::protocol::PeerArgs;
use std::time::Duration;

/// The topics peer: echoes (latency) or consumes, checks and times
/// (throughput) the benchmark process's messages; says `ready`, then
/// `done <nanoseconds>` (0 for latency, timed here).
pub fn peer(a: PeerArgs) -> Result<(), String> {
    peer::start(a.parent, a.cpu)?;
    if a.warmup == 0 || a.size < payload::MIN_ITEM {
        return Err("--warmup must be at least 1 and --size at least 16".into());
    }
    let stall = Duration::from_millis(a.stall_ms);
    let total = a.warmup + a.count;
    let fault = Fault::from_env();
    let elapsed = match a.via {
        topic_via!() => topic::serve(&a, stall, total, fault)?,
        Via::Flag => flag::serve(&a, stall, total, fault)?,
        Via::Cb | Via::CbLight | Via::CbBatch => cb::serve(&a, stall, total, fault)?,
        Via::Rpc | Via::RpcInline => return Err("the RpcBuffer peer is `peer rpc`".into()),
        #[cfg(feature = "iceoryx2")]
        Via::Iceoryx2 => iceoryx::serve(&a, stall, total, fault)?,
        Via::RawRing
        | Via::MpmcRing
        | Via::CellClaimRing
        | Via::CellClaimCasRing
        | Via::ChunkPoolRing
        | Via::ChunkPoolHotRing
        | Via::LeasedRing
        | Via::LeasedFencedRing => raw::serve(&a, stall, total, fault)?,
        Via::Unix | Via::Pipe | Via::Tcp => kernel::serve(&a, total, fault)?,
    };
    println!("done {}", elapsed.as_nanos());
    Ok(())
}
