//! Topics with light hand-overs (`TopicConfig::light_handovers`), between
//! real processes: producer processes streaming to a consumer process with
//! every wait a futex sleep (so every sleeper runs the `membarrier`
//! barrier that a light notifier leaves to it), inline and chunk messages
//! alike, exactly once and in order per key; and a publisher and a
//! consumer SIGKILLed inside a light hand-over (debug builds: the fault
//! point `light-handover-looked`, between the look at the claim and the
//! plain store), after which the partition goes on and the pool is whole
//! (an at-least-once consumer's message delivered again).
#![cfg(not(tachyon_loom))]

mod common;

use common::{child_command, spawn, unique, wait_child, RemoveRegion, LIMIT};
use std::time::{Duration, Instant};
use tachyon::bus::{Delivery, Key, Partitions, Region, RegionConfig, Topic, TopicConfig};
use tachyon::sync::WaitPolicy;
use tachyon::Error;

const ENTRY: &str = "child_entry";
/// Inline slots of 64 bytes: a stream's messages of up to 64 bytes travel
/// in them, longer ones in chunks.
const SLOT: u32 = 64;
const SHORT: Option<Duration> = Some(Duration::from_millis(200));

fn region(name: &str) -> Region {
    Region::create(name, RegionConfig::default().size(8 << 20).ring_arena(2 << 20)).unwrap()
}

fn light_topic(region: &Region, partitions: u32, capacity: u32, wait: WaitPolicy) -> Topic {
    let cfg = TopicConfig::default()
        .partitions(partitions)
        .capacity(capacity)
        .wait(wait)
        .inline_payload(SLOT)
        .light_handovers(true);
    let topic = region.create_topic("t", cfg).unwrap();
    assert!(topic.config().uses_light_handovers());
    topic
}

/// Message `seq` of `key`: key, seq, then a pattern of both; 16 to 64
/// bytes (inline), every fifth 65 to 200 (a chunk).
fn message(key: u64, seq: u64) -> Vec<u8> {
    let len = if seq % 5 == 4 { 65 + (seq as usize * 13) % 136 } else { 16 + (seq as usize * 7) % 49 };
    let mut m = vec![0u8; len];
    m[..8].copy_from_slice(&key.to_le_bytes());
    m[8..16].copy_from_slice(&seq.to_le_bytes());
    for (i, b) in m.iter_mut().enumerate().skip(16) {
        *b = (key as usize * 31 + seq as usize * 7 + i) as u8;
    }
    m
}

fn words(m: &[u8]) -> (u64, u64) {
    (u64::from_le_bytes(m[..8].try_into().unwrap()), u64::from_le_bytes(m[8..16].try_into().unwrap()))
}

#[test]
fn child_entry() {
    let Some((role, args)) = common::role() else { return };
    let region = Region::open(args.str("name")).unwrap();
    let topic = region.topic("t").unwrap();
    match role.as_str() {
        // Keys `first .. first + keys`, `n` messages each, round robin.
        "producer" => {
            let (first, keys, n): (u64, u64, u64) = (args.get("first"), args.get("keys"), args.get("n"));
            for seq in 0..n {
                for k in first..first + keys {
                    topic.send(&message(k, seq), Key(k), Some(LIMIT)).unwrap();
                }
            }
            return;
        }
        // Dies at the fault point its parent names (debug builds).
        "send-one" => {
            let len: usize = args.get("len");
            topic.send(&vec![9u8; len], Key(0), SHORT).unwrap();
        }
        "receive-one" => {
            let mut buf = Vec::new();
            topic.recv_into(0, &mut buf, SHORT).unwrap();
        }
        other => panic!("unknown role {other}"),
    }
    // Reaching here means the fault point was not hit.
    std::process::exit(3);
}

/// Two producer processes, two keys each, into a light topic of one small
/// partition; this process takes every message, through `recv_into`,
/// `receive` and a subscription in turn (each sleeps its own way: the
/// ring's blocking claim, or one wait on the subscription's cells). With
/// futex waits every wait for room or for a message sleeps, so the light
/// notifiers and the sleepers' barriers meet at every wait. Every message
/// arrives once, in order per key, with its bytes; the counters agree and
/// the pool is whole. What this cannot show is a lost wake-up: one costs
/// the sleeper a heal slice, not a failure (the no-lost-wake-up argument
/// rests on `membarrier`'s guarantee; `sync/wait.rs`, `docs/sync.md`).
#[test]
fn producers_stream_to_a_consumer_through_a_light_topic() {
    for wait in [WaitPolicy::Futex, WaitPolicy::Hybrid] {
        let name = unique(&format!("light-stream-{wait:?}"));
        let _rm = RemoveRegion(name.clone());
        let region = region(&name);
        let topic = light_topic(&region, 1, 8, wait);
        let initial = region.pool_stats().unwrap();
        const N: u64 = 3_000;
        const KEYS: u64 = 2;
        let mut children: Vec<_> = (0..2u64)
            .map(|p| {
                let args = common::Args::name(&name).with("first", p * KEYS).with("keys", KEYS).with("n", N);
                spawn(ENTRY, "producer", args)
            })
            .collect();
        let sub = topic.subscribe(Partitions::All).unwrap();
        let total = N * KEYS * 2;
        let mut next = [0u64; (KEYS * 2) as usize];
        let mut buf = Vec::new();
        let deadline = Instant::now() + LIMIT;
        let (mut got, mut turn) = (0u64, 0u64);
        while got < total {
            assert!(Instant::now() < deadline, "{wait:?}: received {got} of {total}");
            let step = Some(Duration::from_millis(20));
            // Each way of receiving in turn, whether the last try found a
            // message or not.
            turn += 1;
            let m = match turn % 3 {
                0 => match sub.recv_into(&mut buf, step) {
                    Ok(_) => buf.clone(),
                    Err(Error::Timeout { .. }) => continue,
                    Err(e) => panic!("{e}"),
                },
                1 => match topic.receive(0, step) {
                    Ok(m) => m.to_vec(),
                    Err(Error::Timeout { .. }) => continue,
                    Err(e) => panic!("{e}"),
                },
                _ => match topic.recv_into(0, &mut buf, step) {
                    Ok(_) => buf.clone(),
                    Err(Error::Timeout { .. }) => continue,
                    Err(e) => panic!("{e}"),
                },
            };
            let (k, seq) = words(&m);
            assert_eq!(seq, next[k as usize], "{wait:?}: key {k} in order");
            assert_eq!(m, message(k, seq), "{wait:?}: message {seq} of key {k}");
            next[k as usize] += 1;
            got += 1;
        }
        for child in &mut children {
            assert_eq!(wait_child(child, LIMIT), Some(0));
        }
        assert!(sub.try_recv_into(&mut buf).unwrap().is_none(), "{wait:?}: nothing more");
        let info = topic.info();
        assert!(info.light_handovers);
        assert_eq!(
            (info.published, info.received, info.corrupt, info.lost),
            (total, total, 0, 0),
            "{wait:?}"
        );
        let free = |s: &[tachyon::bus::ClassStats]| s.iter().map(|c| c.free).sum::<usize>();
        assert_eq!(free(&region.pool_stats().unwrap()), free(&initial), "{wait:?}");
    }
}

/// The setting belongs to the topic: another process's handle has it,
/// an open that asks for the other fails and names the field, and a topic
/// created without it has none.
#[test]
fn the_setting_is_the_topics_own() {
    let name = unique("light-config");
    let _rm = RemoveRegion(name.clone());
    let region = region(&name);
    let topic = light_topic(&region, 1, 4, WaitPolicy::Hybrid);
    let cfg = topic.config();
    let again = Region::open(&name).unwrap().topic("t").unwrap();
    assert!(again.config().uses_light_handovers() && again.info().light_handovers);
    assert!(region.create_or_open_topic("t", cfg).is_ok());
    let err = region.create_or_open_topic("t", cfg.light_handovers(false)).unwrap_err();
    assert!(matches!(err, Error::Incompatible { field: "light_handovers", .. }), "{err:?}");
    let plain = region.create_topic("plain", TopicConfig::default()).unwrap();
    assert!(!plain.config().uses_light_handovers() && !plain.info().light_handovers);
    assert!(region.topics().unwrap().iter().any(|t| t.name == "t" && t.light_handovers));
}

/// Runs `role` in a child that must die by SIGKILL at `point`.
fn die_at(args: common::Args, role: &str, point: &str) {
    let mut child = child_command(ENTRY, role, args).env("TACHYON_FAULT", point).spawn().unwrap();
    common::wait_killed(&mut child, &format!("{role} at {point}"));
}

/// A publisher killed inside its light commit, between the look at its
/// claim and the store, inline or through a chunk, or (a chunk) after
/// its copy into the chunk, before the commit: its message is never
/// delivered (the next consumer repairs the cell), the messages after it
/// flow, the pool is whole after recovery. The light topic counted the
/// message at its claim (`TopicConfig::light_handovers`): `published` is
/// one more than what was delivered.
#[test]
#[cfg(debug_assertions)]
fn a_publisher_killed_inside_a_light_hand_over_publishes_nothing() {
    // 40 bytes travel inline, 100 in a chunk, whose cell a light topic
    // claims before the copy (`chunk-copied-claimed`: copied, not yet
    // committed).
    let cases =
        [(40usize, "light-handover-looked"), (100, "light-handover-looked"), (100, "chunk-copied-claimed")];
    for (len, point) in cases {
        let what = format!("{len} bytes, killed at {point}");
        let name = unique(&format!("light-kill-pub-{len}"));
        let _rm = RemoveRegion(name.clone());
        let region = region(&name);
        let topic = light_topic(&region, 1, 4, WaitPolicy::Hybrid);
        let initial = region.pool_stats().unwrap();
        die_at(common::Args::name(&name).with("len", len), "send-one", point);
        topic.send(b"after", Key(0), None).unwrap();
        let mut buf = Vec::new();
        assert_eq!(topic.recv_into(0, &mut buf, Some(LIMIT)).unwrap(), 5, "{what}");
        assert_eq!(buf, b"after");
        assert!(topic.try_recv_into(0, &mut buf).unwrap().is_none(), "{what}: nothing else");
        for i in 0..10u64 {
            topic.send(&message(0, i), Key(0), Some(Duration::ZERO)).unwrap();
            topic.recv_into(0, &mut buf, Some(Duration::ZERO)).unwrap();
            assert_eq!(words(&buf), (0, i), "{what}");
        }
        region.recover().unwrap();
        let info = topic.info();
        assert_eq!((info.published, info.received), (12, 11), "{what}");
        assert_eq!(region.pool_stats().unwrap(), initial, "{what}");
    }
}

/// A consumer killed inside its light hand-back, its message copied out:
/// that message is lost (at most once: counted lost by recovery, and
/// counted received, as the light topic counts before the hand-back); the
/// cell is repaired, and the ring goes round it.
#[test]
#[cfg(debug_assertions)]
fn a_consumer_killed_inside_a_light_hand_back_loses_one_message() {
    for len in [40usize, 100] {
        let name = unique(&format!("light-kill-recv-{len}"));
        let _rm = RemoveRegion(name.clone());
        let region = region(&name);
        let topic = light_topic(&region, 1, 4, WaitPolicy::Hybrid);
        let initial = region.pool_stats().unwrap();
        topic.send(&vec![1u8; len], Key(0), None).unwrap();
        topic.send(&message(0, 1), Key(0), None).unwrap();
        die_at(common::Args::name(&name), "receive-one", "light-handover-looked");
        let mut buf = Vec::new();
        topic.recv_into(0, &mut buf, Some(LIMIT)).unwrap();
        assert_eq!(words(&buf), (0, 1), "{len}");
        region.recover().unwrap();
        let info = topic.info();
        assert_eq!((info.published, info.received, info.lost), (2, 2, 1), "{len}");
        // Laps of the ring over the repaired cell.
        for i in 2..12u64 {
            topic.send(&message(0, i), Key(0), Some(Duration::ZERO)).unwrap();
            topic.recv_into(0, &mut buf, Some(Duration::ZERO)).unwrap();
            assert_eq!(words(&buf), (0, i), "{len}");
        }
        assert_eq!(region.pool_stats().unwrap(), initial, "{len}");
    }
}

/// On an at-least-once topic with light hand-overs (chunks only: no inline
/// slots there), a consumer killed inside its hand-back loses nothing:
/// recovery delivers its message again, and the pool is whole.
#[test]
#[cfg(debug_assertions)]
fn an_at_least_once_consumer_killed_inside_a_light_hand_back_loses_nothing() {
    let name = unique("light-kill-alo");
    let _rm = RemoveRegion(name.clone());
    let region = region(&name);
    let cfg = TopicConfig::default().capacity(4).delivery(Delivery::AtLeastOnce).light_handovers(true);
    let topic = region.create_topic("t", cfg).unwrap();
    let initial = region.pool_stats().unwrap();
    topic.send(&message(0, 0), Key(0), None).unwrap();
    die_at(common::Args::name(&name), "receive-one", "light-handover-looked");
    let recovered = region.recover().unwrap();
    assert_eq!(recovered.redelivered, 1, "{recovered:?}");
    let mut buf = Vec::new();
    topic.recv_into(0, &mut buf, Some(LIMIT)).unwrap();
    assert_eq!(buf, message(0, 0), "delivered again");
    for i in 1..10u64 {
        topic.send(&message(0, i), Key(0), Some(Duration::ZERO)).unwrap();
        topic.recv_into(0, &mut buf, Some(Duration::ZERO)).unwrap();
        assert_eq!(words(&buf), (0, i));
    }
    assert!(topic.try_recv_into(0, &mut buf).unwrap().is_none());
    assert_eq!(region.pool_stats().unwrap(), initial);
}
