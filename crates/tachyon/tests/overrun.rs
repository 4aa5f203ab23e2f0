//! Overrunning topics (`TopicConfig::overrun`): a full partition drops its
//! oldest message instead of holding the publisher back, and the group that
//! missed it is told how many. Real processes: a producer process that
//! never waits for room against a slow consumer process; a publisher
//! SIGKILLed in the middle of an overrun (debug builds: the fault point
//! `overrun-taken`), after which recovery returns every chunk.
#![cfg(not(tachyon_loom))]

mod common;

use common::{spawn, unique, wait_child, wait_for, Args, RemoveRegion, LIMIT};
use std::time::Duration;
use tachyon::bus::{Delivery, Key, Region, RegionConfig, Topic, TopicConfig};
use tachyon::Error;

const ENTRY: &str = "child_entry";
const KEYS: u64 = 8;
const MESSAGES: u64 = 50_000;

fn region(name: &str) -> Region {
    Region::create(name, RegionConfig::default().size(8 << 20).ring_arena(1 << 20)).unwrap()
}

/// Message `seq` of `key`: key, seq (16 bytes).
fn message(key: u64, seq: u64) -> [u8; 16] {
    let mut m = [0u8; 16];
    m[..8].copy_from_slice(&key.to_le_bytes());
    m[8..].copy_from_slice(&seq.to_le_bytes());
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
        // Never waits for room: every send must succeed at once.
        "producer" => {
            let n: u64 = args.get("n");
            let mut seq = [0u64; KEYS as usize];
            for i in 0..n {
                let k = i % KEYS;
                topic.send(&message(k, seq[k as usize]), Key(k), Some(Duration::ZERO)).unwrap();
                seq[k as usize] += 1;
            }
        }
        // One send into a full partition: dies at the fault point, holding
        // the oldest message it took for the group.
        "overrun-once" => {
            topic.send(&message(0, 999), Key(0), Some(Duration::ZERO)).unwrap();
            std::process::exit(3);
        }
        other => panic!("unknown role {other}"),
    }
}

/// In one process: ten sends into a ring of four never wait and never
/// fail; the newest four are kept in order, six are counted missed (for
/// the default group and the topic), none received.
#[test]
fn a_full_partition_drops_its_oldest() {
    let name = unique("overrun-basic");
    let _rm = RemoveRegion(name.clone());
    let region = region(&name);
    let topic = region.create_topic("t", TopicConfig::default().capacity(4).overrun(true)).unwrap();
    assert!(topic.config().overruns());
    let initial = region.pool_stats().unwrap();
    for i in 0..10u64 {
        topic.send(&message(0, i), Key(0), Some(Duration::ZERO)).unwrap();
    }
    assert_eq!(topic.missed(), 6);
    let info = topic.info();
    assert_eq!((info.published, info.received, info.missed), (10, 0, 6));
    for want in 6..10 {
        let m = topic.receive(0, Some(Duration::ZERO)).unwrap();
        assert_eq!(words(&m), (0, want));
    }
    assert!(topic.try_receive(0).unwrap().is_none());
    assert_eq!(region.pool_stats().unwrap(), initial, "every dropped message's chunk is back");
    // Another handle of the same topic sees the option (sealed in the
    // directory entry).
    assert!(Region::open(&name).unwrap().topic("t").unwrap().config().overruns());
}

/// Consumer groups are overrun each on its own ring: a group that keeps
/// up misses nothing, a group that does not read misses the oldest; each
/// is told its own count, the topic the total, and a chunk goes back to
/// the pool once both groups let it go.
#[test]
fn each_group_is_overrun_on_its_own() {
    let name = unique("overrun-groups");
    let _rm = RemoveRegion(name.clone());
    let region =
        Region::create(&name, RegionConfig::default().size(8 << 20).ring_arena(1 << 20).max_groups(3))
            .unwrap();
    let cfg = TopicConfig::default().capacity(4).overrun(true).default_group(false);
    let topic = region.create_topic("t", cfg).unwrap();
    let initial = region.pool_stats().unwrap();
    let fast = topic.join_group("fast").unwrap();
    let slow = topic.join_group("slow").unwrap();
    for i in 0..10u64 {
        topic.send(&message(0, i), Key(0), Some(Duration::ZERO)).unwrap();
        assert_eq!(words(&fast.receive(0, Some(Duration::ZERO)).unwrap()), (0, i));
    }
    assert_eq!((fast.missed(), slow.missed(), topic.info().missed), (0, 6, 6));
    for want in 6..10 {
        assert_eq!(words(&slow.receive(0, Some(Duration::ZERO)).unwrap()), (0, want));
    }
    assert!(slow.try_receive(0).unwrap().is_none());
    let report = region.inspect().unwrap();
    let groups = &report.topics[0].groups;
    let missed = |n: &str| groups.iter().find(|g| g.name == n).map(|g| g.missed);
    assert_eq!((missed("fast"), missed("slow")), (Some(0), Some(6)));
    assert_eq!(region.pool_stats().unwrap(), initial, "every chunk back once both groups let it go");
}

/// Without the option, the same sends fail for room at once (the default:
/// a slow group holds producers back).
#[test]
fn without_overrun_a_full_partition_refuses() {
    let name = unique("overrun-off");
    let _rm = RemoveRegion(name.clone());
    let region = region(&name);
    let topic = region.create_topic("t", TopicConfig::default().capacity(4)).unwrap();
    for i in 0..4u64 {
        topic.send(&message(0, i), Key(0), Some(Duration::ZERO)).unwrap();
    }
    let r = topic.send(&message(0, 4), Key(0), Some(Duration::ZERO));
    assert!(matches!(r, Err(Error::Timeout { .. })), "{r:?}");
    assert_eq!(topic.missed(), 0);
}

#[test]
fn overrun_is_refused_with_at_least_once_and_checked_on_open() {
    let name = unique("overrun-cfg");
    let _rm = RemoveRegion(name.clone());
    let region = region(&name);
    let cfg = TopicConfig::default().overrun(true).delivery(Delivery::AtLeastOnce);
    let err = region.create_topic("t", cfg).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { .. }) && err.to_string().contains("AtLeastOnce"), "{err}");
    region.create_topic("t", TopicConfig::default().overrun(true)).unwrap();
    // Opening with another overrun setting is a mismatch, named.
    let err = region.create_or_open_topic("t", TopicConfig::default()).unwrap_err();
    assert!(matches!(err, Error::Incompatible { .. }) && err.to_string().contains("overrun"), "{err}");
}

/// A producer process sends 50,000 messages over 8 keys and 2 partitions
/// of 64 cells, never waiting, while this process consumes slowly. Every
/// message is either received or counted missed, each key's messages
/// arrive in order (with gaps where some were dropped), and the pool is
/// full at the end.
#[test]
fn a_slow_consumer_is_overrun_across_processes() {
    let name = unique("overrun-procs");
    let _rm = RemoveRegion(name.clone());
    let region = region(&name);
    let topic =
        region.create_topic("t", TopicConfig::default().partitions(2).capacity(64).overrun(true)).unwrap();
    let initial = region.pool_stats().unwrap();
    let mut child = spawn(ENTRY, "producer", Args::name(&name).with("n", MESSAGES));
    let mut next = [0u64; KEYS as usize];
    let mut received = 0u64;
    let mut gaps = 0u64;
    let consume = |topic: &Topic, p: u32, next: &mut [u64], received: &mut u64, gaps: &mut u64| {
        while let Some(m) = topic.try_receive(p).unwrap() {
            let (k, seq) = words(&m);
            assert!(k < KEYS && topic.partition_of(Key(k)) == p, "message of key {k} on partition {p}");
            assert!(seq >= next[k as usize], "key {k}: seq {seq} after {}", next[k as usize]);
            *gaps += u64::from(seq > next[k as usize]);
            next[k as usize] = seq + 1;
            *received += 1;
            // Slow: a pause every 16 messages.
            if *received % 16 == 0 {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
    };
    // Start reading only once the producer is well past the rings' 128
    // cells (so that this consumer is overrun whatever the machine's
    // speeds: no timing decides the test), then consume while it runs
    // (bounded: it takes well under a minute), then what is left.
    let started = wait_for(LIMIT, || topic.info().published >= 10_000);
    assert!(started, "the producer published 10,000 within {LIMIT:?}");
    for _ in 0..60_000 {
        for p in 0..2 {
            consume(&topic, p, &mut next, &mut received, &mut gaps);
        }
        if child.try_wait().unwrap().is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(wait_child(&mut child, LIMIT), Some(0), "the producer never failed for room");
    for p in 0..2 {
        consume(&topic, p, &mut next, &mut received, &mut gaps);
    }
    let info = topic.info();
    eprintln!("received {received}, missed {}, keys with gaps {gaps}", info.missed);
    assert_eq!(info.published, MESSAGES);
    assert_eq!(received + topic.missed(), MESSAGES, "every message received or counted missed");
    assert_eq!(info.received, received);
    assert!(topic.missed() >= 10_000 - 128, "overrun while it did not read");
    assert_eq!(region.pool_stats().unwrap(), initial, "every chunk back in the pool");
}

/// A publisher SIGKILLed right after taking a full ring's oldest message
/// (before releasing it) leaves what a killed consumer leaves: recovery
/// counts that message lost (the topic is at most once) and returns its
/// chunk; the ring keeps its other messages and takes new ones.
#[cfg(debug_assertions)]
#[test]
fn a_publisher_killed_mid_overrun_leaks_nothing() {
    let name = unique("overrun-kill");
    let _rm = RemoveRegion(name.clone());
    let region = region(&name);
    let topic = region.create_topic("t", TopicConfig::default().capacity(4).overrun(true)).unwrap();
    let initial = region.pool_stats().unwrap();
    for i in 0..4u64 {
        topic.send(&message(0, i), Key(0), Some(Duration::ZERO)).unwrap();
    }
    let mut child = common::child_command(ENTRY, "overrun-once", Args::name(&name))
        .env("TACHYON_FAULT", "overrun-taken")
        .spawn()
        .unwrap();
    assert_eq!(wait_child(&mut child, LIMIT), None, "killed at the fault point (no exit code)");
    let recovered = region.recover().unwrap();
    assert_eq!(topic.info().lost, 1, "the oldest message, held by the dead publisher: {recovered:?}");
    // Messages 1 to 3 are still there; the dead publisher's own message was
    // never published (its chunk is back too).
    for want in 1..4 {
        assert_eq!(words(&topic.receive(0, Some(Duration::ZERO)).unwrap()), (0, want));
    }
    assert!(topic.try_receive(0).unwrap().is_none());
    assert_eq!(region.pool_stats().unwrap(), initial, "every chunk back in the pool");
    // And the topic goes on overrunning.
    for i in 0..6u64 {
        topic.send(&message(1, i), Key(1), Some(Duration::ZERO)).unwrap();
    }
    assert_eq!(topic.missed(), 2);
}
