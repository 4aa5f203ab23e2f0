//! A topics run through the kernel: a Unix domain socket, a pipe or TCP
//! over loopback, the references.

use crate::kernel::{self, Kind};
use crate::latency;
use crate::payload;
use crate::peer::{Peer, Watchdog, STARTUP};
use crate::topics::case::{Case, Measured, Settings, Test, Via};
use crate::topics::protocol::{collect, peer_args, same};
use std::io::{Read, Write};

pub(super) fn kernel_run(
    case: Case,
    settings: &Settings,
    count: u64,
    warmup: u64,
) -> Result<Measured, String> {
    let stall = settings.common.stall;
    let total = warmup + count;
    let size = case.size;
    let kind = match case.via {
        Via::Unix => Kind::Unix,
        Via::Tcp => Kind::Tcp,
        _ => Kind::Pipe,
    };
    let duplex = case.test == Test::Latency;
    let (link, ends) = kernel::link(kind, duplex)?;
    let mut args = peer_args(case, settings, count, warmup);
    args.extend(ends.args.iter().cloned());
    let mut peer = Peer::spawn(&args)?;
    drop(ends);
    peer.expect("ready", STARTUP)?;
    let mut buf = payload::buffer(size);
    let r = {
        let watchdog = Watchdog::start(peer.pid(), stall)?;
        let mut tx = &link.tx;
        match case.test {
            Test::Latency => {
                let mut rx = link.rx.as_ref().ok_or("no receiving end")?;
                let mut got = payload::buffer(size);
                let (elapsed, rtt) = latency::timed(total, warmup, "round trip", |seq| {
                    payload::stamp(&mut buf, seq);
                    tx.write_all(&buf).map_err(|e| watchdog.explain(e, stall, "writing the ping"))?;
                    rx.read_exact(&mut got).map_err(|e| watchdog.explain(e, stall, "reading the pong"))?;
                    watchdog.progress(seq);
                    same(&got, &buf, seq)
                })?;
                (Some(elapsed), Some(rtt))
            }
            Test::Throughput => {
                for seq in 0..total {
                    payload::stamp(&mut buf, seq);
                    tx.write_all(&buf).map_err(|e| {
                        format!("producer, message {seq}: {}", watchdog.explain(e, stall, "writing"))
                    })?;
                    watchdog.progress(seq);
                }
                (None, None)
            }
        }
    };
    // End-of-file for the peer.
    drop(link);
    let reported = collect(peer, stall)?;
    Ok((r.0.unwrap_or(reported), r.1))
}
