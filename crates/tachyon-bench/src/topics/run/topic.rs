//! A topics run through a topic, copy path or loan path: ping-pong round
//! trips, or a one-way stream over the partitions in turn.

use crate::latency;
use crate::payload;
use crate::peer::{retry, Peer, STARTUP};
use crate::policy::Policy;
use crate::topics::case::{Case, Measured, Settings, Test, Via};
use crate::topics::loan::{publish_loan, publish_loan_key};
use crate::topics::protocol::{collect, peer_args, same};
use crate::topics::shm::{region_config_inline, unique_name, RemoveRegion, KEY};
use tachyon::bus::{Key, Region, Topic, TopicConfig};

/// One key per partition: message `seq` goes with key `keys[seq %
/// partitions]` to partition `seq % partitions`, so a consumer that reads
/// the partitions in turn sees the messages in sequence order.
pub(crate) fn partition_keys(topic: &Topic) -> Vec<u64> {
    let n = topic.partitions();
    let mut keys = vec![None; n as usize];
    let mut k = 0u64;
    while keys.iter().any(Option::is_none) {
        let p = topic.partition_of(Key(k)) as usize;
        if keys[p].is_none() {
            keys[p] = Some(k);
        }
        k += 1;
    }
    keys.into_iter().flatten().collect()
}

pub(super) fn topic_run(
    case: Case,
    settings: &Settings,
    count: u64,
    warmup: u64,
) -> Result<Measured, String> {
    let stall = settings.common.stall;
    let total = warmup + count;
    let size = case.size;
    let policy = case.policy.unwrap_or(Policy::Hybrid);
    let inline = if case.via.inline() { size } else { 0 };
    let cfg = TopicConfig::default()
        .partitions(case.partitions)
        .capacity(settings.capacity)
        .wait(policy.wait_policy())
        .inline_payload(inline as u32)
        .light_handovers(matches!(case.via, Via::CopyLight | Via::CopyInlineLight));
    let name = unique_name();
    let topics = if case.test == Test::Latency { 2 } else { 1 };
    let region = Region::create(
        &name,
        region_config_inline(
            size,
            settings.capacity,
            topics * cfg.partitions as usize,
            case.test == Test::Latency,
            cfg.inline_payload_size() as usize,
        ),
    )
    .map_err(|e| format!("cannot create the region: {e}"))?;
    let _remove = RemoveRegion(&name);
    let topic = |t: &str| region.create_topic(t, cfg).map_err(|e| format!("cannot create topic {t}: {e}"));
    let mut args = peer_args(case, settings, count, warmup);
    args.extend(["--name".into(), name.clone()]);
    let template = payload::buffer(size);
    let mut buf = template.clone();
    match case.test {
        Test::Latency => {
            let (ping, pong) = (topic("ping")?, topic("pong")?);
            let from = pong.partition_of(Key(KEY));
            let mut peer = Peer::spawn(&args)?;
            peer.expect("ready", STARTUP)?;
            let mut got = Vec::with_capacity(size);
            let r = {
                let mut check = || peer.check_alive();
                latency::timed(total, warmup, "round trip", |seq| {
                    payload::stamp(&mut buf, seq);
                    if case.via.copies() {
                        retry(
                            |t| ping.send(&buf, Key(KEY), t),
                            stall,
                            &mut check,
                            "the ping partition stayed full",
                        )?;
                        retry(|t| pong.recv_into(from, &mut got, t), stall, &mut check, "no pong came")?;
                        same(&got, &buf, seq)
                    } else if case.via == Via::InPlace {
                        let build = payload::build(&template, seq);
                        retry(
                            |t| ping.send_with(size, Key(KEY), t, build),
                            stall,
                            &mut check,
                            "the ping partition stayed full",
                        )?;
                        retry(
                            |t| pong.receive_with(from, t, |msg| same(msg, &buf, seq)),
                            stall,
                            &mut check,
                            "no pong came",
                        )?
                    } else if case.stamps_only {
                        publish_loan(&ping, size, |loan| payload::stamp(loan, seq), stall, &mut check)?;
                        let msg = retry(|t| pong.receive(from, t), stall, &mut check, "no pong came")?;
                        payload::check(&msg, seq)
                            .map_err(|e| format!("pong {seq} differs from its ping: {e}"))
                    } else {
                        let fill = payload::build(&template, seq);
                        publish_loan(&ping, size, fill, stall, &mut check)?;
                        let msg = retry(|t| pong.receive(from, t), stall, &mut check, "no pong came")?;
                        let r = same(&msg, &buf, seq);
                        drop(msg);
                        r
                    }
                })?
            };
            collect(peer, stall)?;
            Ok((r.0, Some(r.1)))
        }
        Test::Throughput => {
            let data = topic("data")?;
            let keys = partition_keys(&data);
            let mut peer = Peer::spawn(&args)?;
            peer.expect("ready", STARTUP)?;
            {
                let mut check = || peer.check_alive();
                for seq in 0..total {
                    let key = keys[(seq % keys.len() as u64) as usize];
                    if case.via.copies() {
                        payload::stamp(&mut buf, seq);
                        retry(
                            |t| data.send(&buf, Key(key), t),
                            stall,
                            &mut check,
                            "the partition stayed full",
                        )
                    } else if case.via == Via::InPlace {
                        let build = payload::build(&template, seq);
                        retry(
                            |t| data.send_with(size, Key(key), t, build),
                            stall,
                            &mut check,
                            "the partition stayed full",
                        )
                    } else if case.stamps_only {
                        publish_loan_key(
                            &data,
                            size,
                            key,
                            |loan| payload::stamp(loan, seq),
                            stall,
                            &mut check,
                        )
                    } else {
                        let fill = payload::build(&template, seq);
                        publish_loan_key(&data, size, key, fill, stall, &mut check)
                    }
                    .map_err(|e| format!("producer, message {seq}: {e}"))?;
                }
            }
            Ok((collect(peer, stall)?, None))
        }
    }
}
