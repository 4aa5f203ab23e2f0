//! A topics run of the bare cache-line ping-pong, the reference with no
//! payload.

use crate::latency;
use crate::peer::{Peer, STARTUP};
use crate::rawring::Patience;
use crate::topics::case::{Case, Measured, Settings, Test};
use crate::topics::protocol::{collect, peer_args};
use crate::topics::shm::{unique_name, FLAG_OFF};
use std::sync::atomic::{AtomicU64, Ordering};
use tachyon::Segment;

/// The bare cache-line ping-pong: this process stores `2 seq + 1` into one
/// shared word and spins until the peer has stored `2 seq + 2`.
pub(super) fn flag_run(case: Case, settings: &Settings, count: u64, warmup: u64) -> Result<Measured, String> {
    if case.test != Test::Latency {
        return Err("the cache-line ping-pong measures latency only".into());
    }
    let stall = settings.common.stall;
    let name = unique_name();
    let seg = Segment::create(&name, 256).map_err(|e| format!("cannot create the flag segment: {e}"))?;
    let flag = seg.get::<AtomicU64>(FLAG_OFF).map_err(|e| format!("flag: {e}"))?;
    let mut args = peer_args(case, settings, count, warmup);
    args.extend(["--name".into(), name.clone()]);
    let mut peer = Peer::spawn(&args)?;
    peer.expect("ready", STARTUP)?;
    let r = {
        let mut check = || peer.check_alive();
        let mut patience = Patience::new(stall, &mut check);
        latency::timed(warmup + count, warmup, "round trip", |seq| {
            flag.store(2 * seq + 1, Ordering::Release);
            let mut seen = 2 * seq + 1;
            if flag.load(Ordering::Acquire) == seen {
                patience.spin_until("no pong came", || {
                    seen = flag.load(Ordering::Acquire);
                    seen != 2 * seq + 1
                })?;
            } else {
                seen = flag.load(Ordering::Acquire);
            }
            if seen != 2 * seq + 2 {
                return Err(format!("pong {seq} differs from its ping: the flag says {seen}"));
            }
            Ok(())
        })?
    };
    collect(peer, stall)?;
    Ok((r.0, Some(r.1)))
}
