//! The topics peer's side of a topic, copy path or loan path: echoes the
//! pings, or consumes the stream from the partitions in turn.

use crate::payload;
use crate::peer::{retry, Fault};
use crate::throughput;
use crate::topics::case::{Test, Via};
use crate::topics::loan::publish_loan;
use crate::topics::protocol::PeerArgs;
use crate::topics::shm::KEY;
use std::time::Duration;
use tachyon::bus::{Key, Region};

/// Echoes the `ping` topic's messages on the `pong` topic, or consumes
/// the `data` topic.
pub(super) fn serve(a: &PeerArgs, stall: Duration, total: u64, fault: Fault) -> Result<Duration, String> {
    // The parent's death kills us (PR_SET_PDEATHSIG): nothing to check.
    let mut check = || Ok(());
    let mut buf = payload::buffer(a.size);
    let name = a.required_name()?;
    let region = Region::open(&name).map_err(|e| format!("cannot open the region {name}: {e}"))?;
    let topic = |t: &str| region.topic(t).map_err(|e| format!("cannot open topic {t}: {e}"));
    Ok(match a.test {
        Test::Latency => {
            let (ping, pong) = (topic("ping")?, topic("pong")?);
            let from = ping.partition_of(Key(KEY));
            println!("ready");
            for seq in 0..total {
                let lose = fault.at(seq);
                let echo = if a.via.copies() {
                    retry(|t| ping.recv_into(from, &mut buf, t), stall, &mut check, "no ping came")
                        .and_then(|_| payload::check(&buf, seq))
                        .and_then(|()| {
                            if lose {
                                payload::damage(&mut buf);
                            }
                            retry(
                                |t| pong.send(&buf, Key(KEY), t),
                                stall,
                                &mut check,
                                "the pong partition stayed full",
                            )
                        })
                } else if a.via == Via::InPlace {
                    // The pong is built in place from the ping, read in
                    // place, while the ping is held.
                    let echo = |msg: &[u8]| {
                        payload::check(msg, seq)?;
                        let build = |loan: &mut [u8]| {
                            loan.copy_from_slice(msg);
                            if lose {
                                payload::damage(loan);
                            }
                        };
                        let mut check = || Ok(());
                        retry(
                            |t| pong.send_with(msg.len(), Key(KEY), t, build),
                            stall,
                            &mut check,
                            "the pong partition stayed full",
                        )
                    };
                    retry(|t| ping.receive_with(from, t, echo), stall, &mut check, "no ping came")
                        .and_then(|r| r)
                } else if a.stamps_only {
                    retry(|t| ping.receive(from, t), stall, &mut check, "no ping came").and_then(|msg| {
                        payload::check(&msg, seq)?;
                        let stamp = if lose { seq + 1 } else { seq };
                        let fill = |loan: &mut [u8]| payload::stamp(loan, stamp);
                        publish_loan(&pong, msg.len(), fill, stall, &mut check)
                    })
                } else {
                    retry(|t| ping.receive(from, t), stall, &mut check, "no ping came").and_then(|msg| {
                        payload::check(&msg, seq)?;
                        let fill = |loan: &mut [u8]| {
                            loan.copy_from_slice(&msg);
                            if lose {
                                payload::damage(loan);
                            }
                        };
                        publish_loan(&pong, msg.len(), fill, stall, &mut check)
                    })
                };
                echo.map_err(|e| format!("echo, round trip {seq}: {e}"))?;
            }
            Duration::ZERO
        }
        Test::Throughput => {
            let data = topic("data")?.with_batch_reads(a.via.batch_reads());
            let partitions = u64::from(data.partitions());
            println!("ready");
            let mut sink = 0u64;
            let t = throughput::timed(total, a.warmup, |seq| {
                // See `partition_keys`: the producer sends message
                // `seq` to partition `seq % partitions`.
                let from = (seq % partitions) as u32;
                if a.via.copies() {
                    retry(|t| data.recv_into(from, &mut buf, t), stall, &mut check, "no message came")?;
                    if a.via == Via::CopyRead {
                        sink ^= payload::fold(&buf);
                    }
                    payload::check(&buf, seq)
                } else if a.via == Via::InPlace {
                    let mut read = |msg: &[u8]| {
                        sink ^= payload::fold(msg);
                        payload::check(msg, seq)
                    };
                    retry(|t| data.receive_with(from, t, &mut read), stall, &mut check, "no message came")?
                } else {
                    let msg = retry(|t| data.receive(from, t), stall, &mut check, "no message came")?;
                    if !a.stamps_only {
                        sink ^= payload::fold(&msg);
                    }
                    payload::check(&msg, seq)
                }
            })?;
            std::hint::black_box(sink);
            t
        }
    })
}
