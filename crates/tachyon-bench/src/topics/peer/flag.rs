//! The topics peer's side of the bare cache-line ping-pong.

use crate::peer::Fault;
use crate::rawring::Patience;
use crate::topics::protocol::PeerArgs;
use crate::topics::shm::FLAG_OFF;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tachyon::Segment;

/// Answers each ping (`2 seq + 1` in the shared word) with `2 seq + 2`.
pub(super) fn serve(a: &PeerArgs, stall: Duration, total: u64, fault: Fault) -> Result<Duration, String> {
    // The parent's death kills us (PR_SET_PDEATHSIG): nothing to check.
    let mut check = || Ok(());
    let name = a.required_name()?;
    let seg = Segment::open(&name).map_err(|e| format!("cannot open the flag segment {name}: {e}"))?;
    let flag = seg.get::<AtomicU64>(FLAG_OFF).map_err(|e| format!("flag: {e}"))?;
    let mut patience = Patience::new(stall, &mut check);
    println!("ready");
    for seq in 0..total {
        let lose = fault.at(seq);
        let ping = 2 * seq + 1;
        let mut seen = flag.load(Ordering::Acquire);
        if seen != ping {
            patience
                .spin_until("no ping came", || {
                    seen = flag.load(Ordering::Acquire);
                    seen != 2 * seq
                })
                .map_err(|e| format!("echo, round trip {seq}: {e}"))?;
        }
        if seen != ping {
            return Err(format!("echo, round trip {seq}: expected ping {ping}, the flag says {seen}"));
        }
        flag.store(if lose { ping + 3 } else { ping + 1 }, Ordering::Release);
    }
    Ok(Duration::ZERO)
}
