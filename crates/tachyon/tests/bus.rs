//! The zero-copy bus across real processes: exactly-once delivery and
//! per-key order with several producer and consumer processes, message
//! sizes, pool accounting, persistence after the producer exits, corrupt
//! descriptors.
#![cfg(not(tachyon_loom))]

mod common;

use common::{counter, kill, spawn, unique, wait_child, wait_for, Args, RemoveRegion, LIMIT};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tachyon::bus::{Delivery, Key, Region, RegionConfig, Topic, TopicConfig, CLASS_SIZES, MAX_MESSAGE};
use tachyon::sync::WaitPolicy;
use tachyon::{Error, Segment};

const ENTRY: &str = "child_entry";
const SHORT: Option<Duration> = Some(Duration::from_millis(20));
const LONG: Option<Duration> = Some(Duration::from_secs(20));
const PER_PRODUCER: u64 = 10_000;
const PRODUCERS: u64 = 2;
const KEYS: u64 = 16;

fn small_region(name: &str) -> Region {
    Region::create(name, RegionConfig::default().size(16 << 20).ring_arena(1 << 20)).unwrap()
}

fn checksum(words: &[u64]) -> u64 {
    words.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, w| (h ^ w).wrapping_mul(0x100_0000_01b3))
}

/// A message of the exactly-once test: producer, key, sequence within the
/// key, checksum, then padding of a size that varies with the sequence.
fn message(producer: u64, key: u64, seq: u64) -> Vec<u8> {
    let head = [producer, key, seq, checksum(&[producer, key, seq])];
    let mut v: Vec<u8> = head.iter().flat_map(|w| w.to_le_bytes()).collect();
    v.resize(32 + (seq as usize * 37) % 3000, (seq % 251) as u8);
    v
}

#[test]
fn child_entry() {
    let Some((role, args)) = common::role() else { return };
    let region = Region::open(args.str("name")).unwrap();
    let topic = region.topic("t").unwrap();
    match role.as_str() {
        "producer" => {
            let me: u64 = args.get("producer");
            let mut seqs = [0u64; KEYS as usize];
            for i in 0..PER_PRODUCER {
                let key = (i * 7 + me) % KEYS;
                let msg = message(me, key, seqs[key as usize]);
                seqs[key as usize] += 1;
                if i % 2 == 0 {
                    topic.send(&msg, Key(key), LONG).unwrap();
                } else {
                    // The loan path: build in place.
                    let mut loan = topic.loan(msg.len(), LONG).unwrap();
                    loan.copy_from_slice(&msg);
                    loan.publish(Key(key), LONG).unwrap();
                }
            }
        }
        "consumer" => {
            let side = Segment::open(args.str("side")).unwrap();
            let total = PRODUCERS * PER_PRODUCER;
            let mut last = vec![None::<u64>; (PRODUCERS * KEYS) as usize];
            let mut p = 0;
            let mut idle = false;
            'outer: loop {
                let mut got_any = false;
                // Poll every partition in turn without waiting; after a
                // round that found nothing, wait a little on one.
                for _ in 0..topic.partitions() {
                    p = (p + 1) % topic.partitions();
                    let wait = if idle { Some(Duration::from_millis(1)) } else { Some(Duration::ZERO) };
                    let msg = match topic.receive(p, wait) {
                        Ok(m) => {
                            got_any = true;
                            m
                        }
                        Err(Error::Timeout { .. }) => continue,
                        Err(e) => panic!("receive: {e}"),
                    };
                    let w: Vec<u64> =
                        msg[..32].chunks(8).map(|c| u64::from_le_bytes(c.try_into().unwrap())).collect();
                    let (producer, key, seq) = (w[0], w[1], w[2]);
                    let ok = producer < PRODUCERS
                        && key < KEYS
                        && seq < PER_PRODUCER
                        && w[3] == checksum(&w[..3])
                        && msg[..] == message(producer, key, seq)[..]
                        && topic.partition_of(Key(key)) == p;
                    if !ok {
                        counter(&side, 2).fetch_add(1, Ordering::SeqCst);
                        continue;
                    }
                    let slot = (producer * KEYS + key) as usize;
                    if last[slot].is_some_and(|l| l >= seq) {
                        counter(&side, 3).fetch_add(1, Ordering::SeqCst);
                    }
                    last[slot] = Some(seq);
                    // Exactly once: one bit per (producer, key, seq).
                    let bit = (producer * KEYS + key) * PER_PRODUCER + seq;
                    let word = side.get::<AtomicU64>(32 + (bit / 64) as usize * 8).unwrap();
                    if word.fetch_or(1 << (bit % 64), Ordering::SeqCst) & (1 << (bit % 64)) != 0 {
                        counter(&side, 1).fetch_add(1, Ordering::SeqCst);
                    }
                    counter(&side, 0).fetch_add(1, Ordering::SeqCst);
                }
                if counter(&side, 0).load(Ordering::SeqCst) >= total {
                    break 'outer;
                }
                idle = !got_any;
            }
        }
        "loan-and-hang" => {
            let side = Segment::open(args.str("side")).unwrap();
            let n: usize = args.get("loans");
            let loans: Vec<_> = (0..n).map(|i| topic.loan(10 + i * 300, LONG).unwrap()).collect();
            counter(&side, 0).store(loans.len() as u64, Ordering::SeqCst);
            std::thread::sleep(LIMIT); // SIGKILLed here, holding its loans
        }
        "cache-and-hang" => {
            let side = Segment::open(args.str("side")).unwrap();
            // 150 100-byte loans dropped: kept by this process for its
            // next loans as far as its cache of the 256 B class goes (the
            // class is large enough to be cached), the rest given back.
            let loans: Vec<_> = (0..150).map(|_| topic.loan(100, LONG).unwrap()).collect();
            drop(loans);
            counter(&side, 0).store(150, Ordering::SeqCst);
            std::thread::sleep(LIMIT); // SIGKILLed here
        }
        "receive-and-hang" => {
            let side = Segment::open(args.str("side")).unwrap();
            let held: Vec<_> = (0..2).map(|_| topic.receive(0, LONG).unwrap()).collect();
            counter(&side, 0).store(held.len() as u64, Ordering::SeqCst);
            std::thread::sleep(LIMIT); // SIGKILLed here, holding two messages
        }
        "publish-and-exit" => {
            for i in 0..10u8 {
                topic.send(&[i; 100], Key(u64::from(i)), LONG).unwrap();
            }
            // Exits with messages in the rings and chunks in the pool.
        }
        other => panic!("unknown role {other}"),
    }
    std::process::exit(0);
}

fn pub_sub(partitions: u32) {
    let name = unique(&format!("bus-{partitions}"));
    let _cleanup = RemoveRegion(name.clone());
    let side_name = unique("bus-side");
    let region = small_region(&name);
    region.create_topic("t", TopicConfig::default().partitions(partitions).capacity(64)).unwrap();
    let bits = PRODUCERS * KEYS * PER_PRODUCER;
    let side = Segment::create(&side_name, 32 + bits.div_ceil(64) as usize * 8).unwrap();
    let initial = region.pool_stats().unwrap();
    let consumer = Args::name(&name).with("side", &side_name);
    let mut kids: Vec<_> = (0..2).map(|_| spawn(ENTRY, "consumer", &consumer)).collect();
    kids.extend((0..PRODUCERS).map(|p| spawn(ENTRY, "producer", Args::name(&name).with("producer", p))));
    for k in &mut kids {
        assert_eq!(wait_child(k, Duration::from_secs(180)), Some(0));
    }
    let total = PRODUCERS * PER_PRODUCER;
    assert_eq!(counter(&side, 0).load(Ordering::SeqCst), total, "messages received");
    assert_eq!(counter(&side, 1).load(Ordering::SeqCst), 0, "duplicates");
    assert_eq!(counter(&side, 2).load(Ordering::SeqCst), 0, "damaged or misrouted messages");
    assert_eq!(counter(&side, 3).load(Ordering::SeqCst), 0, "per-key order violations");
    // Every (producer, key, seq) that was sent arrived.
    let mut seqs = [[0u64; KEYS as usize]; PRODUCERS as usize];
    for p in 0..PRODUCERS {
        for i in 0..PER_PRODUCER {
            seqs[p as usize][((i * 7 + p) % KEYS) as usize] += 1;
        }
    }
    for p in 0..PRODUCERS {
        for k in 0..KEYS {
            for s in 0..seqs[p as usize][k as usize] {
                let bit = (p * KEYS + k) * PER_PRODUCER + s;
                let word = counter(&side, 4 + (bit / 64) as usize).load(Ordering::SeqCst);
                assert!(word & (1 << (bit % 64)) != 0, "message {p}/{k}/{s} lost");
            }
        }
    }
    assert_eq!(region.pool_stats().unwrap(), initial, "every chunk is back in the pool");
    let info = region.topic("t").unwrap().info();
    assert_eq!((info.published, info.received, info.corrupt), (total, total, 0));
}

#[test]
fn exactly_once_and_per_key_order_with_one_partition() {
    pub_sub(1);
}

#[test]
fn exactly_once_and_per_key_order_with_two_partitions() {
    pub_sub(2);
}

#[test]
fn exactly_once_and_per_key_order_with_eight_partitions() {
    pub_sub(8);
}

#[test]
fn every_size_class_boundary() {
    let name = unique("bus-sizes");
    let _cleanup = RemoveRegion(name.clone());
    let region = Region::create(&name, RegionConfig::default().size(24 << 20).ring_arena(1 << 20)).unwrap();
    let topic = region.create_topic("t", TopicConfig::default()).unwrap();
    let initial = region.pool_stats().unwrap();
    let mut sizes = vec![0, 1, MAX_MESSAGE];
    for &c in &CLASS_SIZES[..7] {
        sizes.extend([c - 1, c, c + 1]);
    }
    let mut buf = Vec::new();
    for size in sizes {
        let data: Vec<u8> = (0..size).map(|i| (i * 31 + size) as u8).collect();
        topic.send(&data, Key(size as u64), SHORT).unwrap();
        assert_eq!(topic.recv_into(topic.partition_of(Key(size as u64)), &mut buf, SHORT).unwrap(), size);
        assert!(buf == data, "{size} bytes came back changed");
    }
    assert!(matches!(topic.loan(MAX_MESSAGE + 1, SHORT), Err(Error::MessageTooLarge { .. })));
    assert!(matches!(
        topic.send(&vec![0; MAX_MESSAGE + 1], Key(0), SHORT),
        Err(Error::MessageTooLarge { .. })
    ));
    assert_eq!(region.pool_stats().unwrap(), initial);
}

#[test]
fn loans_and_messages_dropped_return_their_chunks() {
    let name = unique("bus-drop");
    let _cleanup = RemoveRegion(name.clone());
    let region = small_region(&name);
    let topic = region.create_topic("t", TopicConfig::default().partitions(2).capacity(8)).unwrap();
    let initial = region.pool_stats().unwrap();
    {
        let _a = topic.loan(100, SHORT).unwrap();
        let _b = topic.loan(5000, SHORT).unwrap();
        assert_ne!(region.pool_stats().unwrap(), initial);
    }
    assert_eq!(region.pool_stats().unwrap(), initial, "unpublished loans are returned");
    topic.send(b"x", Key(1), SHORT).unwrap();
    let msg = topic.receive(topic.partition_of(Key(1)), SHORT).unwrap();
    assert_eq!(&*msg, b"x");
    assert_ne!(region.pool_stats().unwrap(), initial);
    msg.release();
    assert_eq!(region.pool_stats().unwrap(), initial, "released messages are returned");
    // A full partition: publishing times out and the chunk comes back.
    for _ in 0..8 {
        topic.send(b"y", Key(1), SHORT).unwrap();
    }
    let err = topic.send(b"y", Key(1), SHORT).unwrap_err();
    assert!(matches!(err, Error::Timeout { waited: SHORT, .. }), "{err}");
    assert!(err.to_string().contains("room in the topic's partition"), "{err}");
    let err = topic.try_send(b"y", Key(1)).unwrap_err();
    assert!(matches!(err, Error::Full { .. }), "try_send never times out: {err}");
    assert!(err.to_string().contains("full; the consumers are behind"), "{err}");
    assert!(matches!(topic.try_recv_into(topic.partition_of(Key(1)) ^ 1, &mut Vec::new()), Ok(None)));
    assert!(matches!(topic.try_receive(topic.partition_of(Key(1)) ^ 1), Ok(None)), "other partition empty");
    let err = topic.receive(topic.partition_of(Key(1)) ^ 1, SHORT).unwrap_err();
    assert!(err.to_string().contains("waiting for a message in the topic's partition"), "{err}");
    let mut buf = Vec::new();
    for _ in 0..8 {
        topic.recv_into(topic.partition_of(Key(1)), &mut buf, SHORT).unwrap();
    }
    assert_eq!(region.pool_stats().unwrap(), initial);
}

#[test]
fn an_exhausted_class_waits_then_reports_pool_exhausted() {
    let name = unique("bus-exhaust");
    let _cleanup = RemoveRegion(name.clone());
    // Only 1 MiB chunks, a handful of them.
    let cfg =
        RegionConfig::default().size(8 << 20).ring_arena(1 << 20).class_weights([0, 0, 0, 0, 0, 0, 0, 1]);
    let region = Region::create(&name, cfg).unwrap();
    let topic = region.create_topic("t", TopicConfig::default()).unwrap();
    let chunks = region.pool_stats().unwrap()[7].chunks;
    assert!(chunks >= 2);
    // A small loan uses a larger class when its own has no chunks.
    let mut loans: Vec<_> = (0..chunks).map(|_| topic.loan(10, SHORT).unwrap()).collect();
    match topic.loan(10, SHORT) {
        Err(Error::PoolExhausted { class: 0, chunk_size: 64 }) => {}
        other => panic!("expected PoolExhausted, got {other:?}"),
    }
    loans.pop();
    topic.loan(10, SHORT).unwrap();
}

#[test]
fn messages_outlive_the_producer_that_published_them() {
    let name = unique("bus-persist");
    let _cleanup = RemoveRegion(name.clone());
    {
        let region = small_region(&name);
        region.create_topic("t", TopicConfig::default().partitions(4).capacity(16)).unwrap();
    } // nobody has the region open now
    let mut child = spawn(ENTRY, "publish-and-exit", &name);
    assert_eq!(wait_child(&mut child, LIMIT), Some(0));
    let region = Region::open(&name).unwrap();
    let topic = region.topic("t").unwrap();
    let mut got = Vec::new();
    for i in 0..10u8 {
        let msg = topic.receive(topic.partition_of(Key(u64::from(i))), SHORT).unwrap();
        got.push(msg[0]);
        assert_eq!(&*msg, &[i; 100]);
    }
    assert_eq!(got, (0..10).collect::<Vec<u8>>());
}

#[test]
fn corrupt_descriptors_are_reported_and_skipped() {
    let name = unique("bus-corrupt");
    let _cleanup = RemoveRegion(name.clone());
    let region = small_region(&name);
    let topic = region.create_topic("t", TopicConfig::default()).unwrap();
    let initial = region.pool_stats().unwrap();
    topic.publish_raw_descriptor(0, u32::MAX, 1).unwrap(); // no such chunk
    topic.publish_raw_descriptor(0, 0, 65).unwrap(); // chunk 0 is 64 bytes
    topic.publish_raw_descriptor(0, 3, 10).unwrap(); // a free chunk, not queued
    topic.send(b"good", Key(0), SHORT).unwrap();
    for _ in 0..3 {
        assert!(matches!(topic.receive(0, SHORT), Err(Error::Corrupt { .. })));
    }
    assert_eq!(&*topic.receive(0, SHORT).unwrap(), b"good");
    assert_eq!(topic.info().corrupt, 3);
    assert_eq!(region.pool_stats().unwrap(), initial, "nothing was freed twice or lost");
}

#[test]
fn region_and_topic_errors() {
    let name = unique("bus-errors");
    let _cleanup = RemoveRegion(name.clone());
    assert!(matches!(Region::open(&name), Err(Error::NotFound { .. })));
    assert!(matches!(
        Region::create(&name, RegionConfig::default().size(1 << 20)),
        Err(Error::InvalidArgument { .. })
    ));
    let region = small_region(&name);
    assert!(matches!(Region::create(&name, RegionConfig::default()), Err(Error::AlreadyExists { .. })));
    for bad in [TopicConfig::default().partitions(3), TopicConfig::default().capacity(1)] {
        assert!(matches!(region.create_topic("x", bad), Err(Error::InvalidArgument { .. })));
    }
    assert!(matches!(region.create_topic("", TopicConfig::default()), Err(Error::InvalidName { .. })));
    assert!(matches!(
        region.create_topic(&"n".repeat(65), TopicConfig::default()),
        Err(Error::InvalidName { .. })
    ));
    region.create_topic("a", TopicConfig::default()).unwrap();
    let err = region.create_topic("a", TopicConfig::default()).unwrap_err();
    assert!(matches!(&err, Error::TopicExists { topic, .. } if topic == "a"), "{err}");
    assert!(err.to_string().contains("open it with topic(), or use create_or_open_topic"), "{err}");
    let err = region.topic("b").unwrap_err();
    assert!(matches!(&err, Error::TopicNotFound { topic, region: r } if topic == "b" && *r == name), "{err}");
    assert!(err.to_string().contains("has no topic named \"b\"; create it with create_topic"), "{err}");
    // The ring arena (1 MiB) runs out.
    let big = TopicConfig::default().partitions(256).capacity(1024);
    assert!(matches!(region.create_topic("big", big), Err(Error::NoSpace { .. })));
    let names: Vec<String> = region.topics().unwrap().into_iter().map(|t| t.name).collect();
    assert_eq!(names, ["a"]);
    let topic = region.topic("a").unwrap();
    let err = topic.receive(1, SHORT).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { .. }), "no partition 1");
    assert!(err.to_string().contains("which has 1 (0 to 0)"), "{err}");
    drop(topic);
    drop(region);
    Region::remove(&name).unwrap();
    assert!(matches!(Region::open(&name), Err(Error::NotFound { .. })));
}

#[test]
fn a_damaged_region_header_or_topic_entry_heals_from_its_second_copy() {
    use tachyon::Kind;
    let name = unique("bus-damaged");
    let _cleanup = RemoveRegion(name.clone());
    {
        let region = small_region(&name);
        region.create_topic("t", TopicConfig::default()).unwrap();
    }
    let raw = Segment::builder(&name).kind(Kind::REGION).open().unwrap();
    let word = |off: usize| raw.get::<AtomicU64>(off).unwrap();
    // Where things are: the header's words, the directory, the
    // configuration's second copy after it.
    let map = tachyon::bus::RegionMap::new();
    let max_topics = word(map.max_topics).load(Ordering::SeqCst) as usize;
    let copy = map.config_copy(max_topics);
    let (cfg_size, cfg_weights, cfg_seal) = (map.config.start, map.config.start + 16, map.config.end - 8);
    // One damaged word of the header: the open restores it and says so.
    for (off, value) in [
        (map.version, 2),
        (map.max_topics, 7),
        (map.class_count, u64::MAX),
        (map.class_count, 0x3ff_bfff_0000_0000),
        (map.metas, 7),
        (cfg_size, 1 << 40),
        (cfg_weights, 0),
        (cfg_seal, 0),
    ] {
        let old = word(off).swap(value, Ordering::SeqCst);
        let region = Region::open(&name).unwrap_or_else(|e| panic!("offset {off} = {value:#x}: {e}"));
        assert!(region.recovered_on_open().directory >= 1, "offset {off}");
        assert_eq!(word(off).load(Ordering::SeqCst), old, "offset {off} restored");
        assert!(region.inspect().unwrap().directory_repairs >= 1);
        region.topic("t").unwrap().send(b"fine", Key(0), SHORT).unwrap();
    }
    // Both copies of the configuration damaged: refused, not guessed.
    for (first, second) in [(cfg_size, copy), (cfg_weights, copy + 32)] {
        let old = (word(first).swap(1, Ordering::SeqCst), word(second).swap(1, Ordering::SeqCst));
        assert!(matches!(Region::open(&name), Err(Error::Corrupt { .. })), "offsets {first} and {second}");
        word(first).store(old.0, Ordering::SeqCst);
        word(second).store(old.1, Ordering::SeqCst);
    }
    // Another layout (version 2 had no seals): named as such.
    let (old_version, old_seal) =
        (word(map.version).swap(2, Ordering::SeqCst), word(cfg_seal).swap(0, Ordering::SeqCst));
    let old_copy = word(copy + 64).swap(0, Ordering::SeqCst);
    let err = Region::open(&name).unwrap_err();
    assert!(err.to_string().contains("layout version"), "{err}");
    word(map.version).store(old_version, Ordering::SeqCst);
    word(cfg_seal).store(old_seal, Ordering::SeqCst);
    word(copy + 64).store(old_copy, Ordering::SeqCst);

    // A topic entry: either copy's ring offset damaged (even to a value
    // outside the ring arena) is read from the other and restored.
    let ring_offs = [map.entry_ring_off, map.entry_copy2 + map.entry_ring_off].map(|o| map.directory + o);
    for ring_off in ring_offs {
        for value in [u64::MAX - 63, 0, 512] {
            let old = word(ring_off).swap(value, Ordering::SeqCst);
            let region = Region::open(&name).unwrap();
            assert_eq!(word(ring_off).load(Ordering::SeqCst), old, "entry word {ring_off} restored on open");
            word(ring_off).store(value, Ordering::SeqCst);
            let topic = region.topic("t").unwrap();
            topic.send(b"fine", Key(0), SHORT).unwrap();
            assert_eq!(&*topic.receive(0, SHORT).unwrap(), b"fine");
            assert!(region.recover().unwrap().directory >= 1);
            assert_eq!(word(ring_off).load(Ordering::SeqCst), old, "entry word {ring_off} restored");
        }
    }
    // Both copies damaged: the topic is lost, said so (not "not found").
    let old =
        (word(ring_offs[0]).swap(512, Ordering::SeqCst), word(ring_offs[1]).swap(512, Ordering::SeqCst));
    let region = Region::open(&name).unwrap();
    let err = region.topic("t").unwrap_err();
    assert!(matches!(err, Error::Corrupt { .. }), "{err}");
    assert_eq!(region.inspect().unwrap().damaged_topics, 1);
    word(ring_offs[0]).store(old.0, Ordering::SeqCst);
    word(ring_offs[1]).store(old.1, Ordering::SeqCst);
    region.topic("t").unwrap().send(b"still fine", Key(0), SHORT).unwrap();
}

#[test]
fn chunks_held_by_a_sigkilled_process_return_to_the_pool() {
    let name = unique("bus-reclaim");
    let _cleanup = RemoveRegion(name.clone());
    let side_name = unique("bus-reclaim-side");
    let side = Segment::create(&side_name, 64).unwrap();
    let region = small_region(&name);
    let topic = region.create_topic("t", TopicConfig::default()).unwrap();
    let initial = region.pool_stats().unwrap();

    // A producer dies holding three loans.
    let mut child =
        spawn(ENTRY, "loan-and-hang", Args::name(&name).with("side", &side_name).with("loans", 3));
    assert!(wait_for(LIMIT, || counter(&side, 0).load(Ordering::SeqCst) == 3));
    assert_ne!(region.pool_stats().unwrap(), initial);
    assert_eq!(region.recover().unwrap().total(), 0, "a live holder keeps its chunks");
    kill(&mut child);
    let r = region.recover().unwrap();
    assert_eq!((r.loans, r.held, r.unpublished), (3, 0, 0));
    assert_eq!(region.recover().unwrap().total(), 0, "reclaimed once");
    assert_eq!(region.pool_stats().unwrap(), initial);

    // A consumer dies holding two received messages (lost: at most once).
    counter(&side, 0).store(0, Ordering::SeqCst);
    topic.send(b"one", Key(0), SHORT).unwrap();
    topic.send(b"two", Key(0), SHORT).unwrap();
    let mut child = spawn(ENTRY, "receive-and-hang", Args::name(&name).with("side", &side_name));
    assert!(wait_for(LIMIT, || counter(&side, 0).load(Ordering::SeqCst) == 2));
    kill(&mut child);
    let r = region.recover().unwrap();
    assert_eq!((r.loans, r.held, r.unpublished), (0, 2, 0));
    assert_eq!(region.pool_stats().unwrap(), initial);
    assert!(matches!(topic.try_receive(0), Ok(None)), "the held messages are gone");
    assert_eq!(topic.info().lost, 2, "and counted as lost");
}

#[test]
fn inspecting_by_name_changes_nothing_and_opening_reports_what_it_reclaimed() {
    let name = unique("bus-observe");
    let _cleanup = RemoveRegion(name.clone());
    let side_name = unique("bus-observe-side");
    let side = Segment::create(&side_name, 64).unwrap();
    let region = small_region(&name);
    let config = TopicConfig::default().delivery(Delivery::AtLeastOnce).wait(WaitPolicy::Spin);
    let topic = region.create_topic("t", config).unwrap();
    let info = topic.info();
    assert_eq!((info.wait, info.delivery), (Some(WaitPolicy::Spin), Some(Delivery::AtLeastOnce)));
    let initial = region.pool_stats().unwrap();
    let mut child =
        spawn(ENTRY, "loan-and-hang", Args::name(&name).with("side", &side_name).with("loans", 2));
    assert!(wait_for(LIMIT, || counter(&side, 0).load(Ordering::SeqCst) == 2));
    kill(&mut child);

    // Looking takes no slot and reclaims nothing: the dead child is still
    // listed with its two loans, twice in a row.
    for _ in 0..2 {
        let report = Region::inspect_name(&name).unwrap();
        assert_eq!(report.processes.len(), 2, "{:?}", report.processes);
        let dead: Vec<_> = report.processes.iter().filter(|p| !p.alive).collect();
        assert_eq!(dead.len(), 1);
        assert_eq!(dead[0].loans, 2);
        assert_eq!(report.topics[0].info.delivery, Some(Delivery::AtLeastOnce));
        assert_eq!(report.size, region.segment().size());
        assert_ne!(report.pool, initial);
    }
    assert!(matches!(Region::inspect_name("bus-observe-no-such-region"), Err(Error::NotFound { .. })));
    assert!(matches!(Region::inspect_name(&side_name), Err(Error::KindMismatch { .. })));

    // Opening runs recovery and says what it found; the dead child's slot
    // is given up, so inspectors stop listing it.
    let again = Region::open(&name).unwrap();
    assert_eq!(again.recovered_on_open().loans, 2);
    assert_eq!(again.recovered_on_open().slots, 1);
    assert_eq!(again.pool_stats().unwrap(), initial);
    let report = Region::inspect_name(&name).unwrap();
    assert_eq!(report.processes.len(), 2, "this process's two handles");
    assert!(report.processes.iter().all(|p| p.alive));
}

#[test]
fn chunks_a_process_keeps_for_its_next_loans_count_as_free_and_come_back_when_it_dies() {
    let name = unique("bus-cache");
    let _cleanup = RemoveRegion(name.clone());
    let side_name = unique("bus-cache-side");
    let side = Segment::create(&side_name, 64).unwrap();
    let region = small_region(&name);
    let topic = region.create_topic("t", TopicConfig::default()).unwrap();
    let initial = region.pool_stats().unwrap();
    // This process: a dropped loan is kept, and the next loan reuses it.
    let first = topic.loan(100, SHORT).unwrap();
    let first_ptr = first.as_ptr();
    drop(first);
    assert_eq!(region.pool_stats().unwrap(), initial, "a kept chunk counts as free");
    assert_eq!(topic.loan(100, SHORT).unwrap().as_ptr(), first_ptr, "the kept chunk is reused");

    let mut child = spawn(ENTRY, "cache-and-hang", Args::name(&name).with("side", &side_name));
    assert!(wait_for(LIMIT, || counter(&side, 0).load(Ordering::SeqCst) == 150));
    assert_eq!(region.pool_stats().unwrap(), initial);
    let report = Region::inspect_name(&name).unwrap();
    assert!(
        report.processes.iter().all(|p| p.loans == 0),
        "kept chunks are not loans: {:?}",
        report.processes
    );
    kill(&mut child);
    let r = region.recover().unwrap();
    // What a process keeps of a class: one chunk in 64, 4 to 64 of chunks
    // larger than 64 bytes (docs/bus.md); a full cache gives its older half
    // back, so more than half of it stays.
    let most = (initial[1].chunks / 64).clamp(4, 64);
    assert!(most < 150);
    assert!(r.cached > most / 2 && r.cached <= most, "kept {} of at most {most}", r.cached);
    assert_eq!((r.loans, r.total()), (0, r.cached));
    assert_eq!(region.pool_stats().unwrap(), initial);
    drop(topic);
    drop(region); // gives back what this handle kept
    let again = Region::open(&name).unwrap();
    assert_eq!(again.recovered_on_open().total(), 0);
    assert_eq!(again.pool_stats().unwrap(), initial);
}

/// The chunks a process keeps are kept per thread: the first thread to
/// use a handle's cache keeps its own without a lock, the other threads
/// share the rest. Each thread reuses what it released; every kept chunk
/// counts as free; and the last handle gives all of them back, whichever
/// thread drops it (nothing left for recovery to find).
#[test]
fn chunks_kept_by_several_threads_all_come_back_when_another_thread_drops_the_region() {
    let name = unique("bus-cache-threads");
    let _cleanup = RemoveRegion(name.clone());
    let region = small_region(&name);
    let topic = region.create_topic("t", TopicConfig::default()).unwrap();
    let initial = region.pool_stats().unwrap();
    // Loans dropped at once: one goes to the cache's one-chunk slot, the
    // rest to the dropping thread's half of its list.
    let keep_some = |topic: &Topic| {
        let loans: Vec<_> = (0..8).map(|_| topic.loan(100, SHORT).unwrap()).collect();
        let mut ptrs: Vec<_> = loans.iter().map(|l| l.as_ptr() as usize).collect();
        drop(loans);
        ptrs.sort_unstable();
        ptrs
    };
    // This thread uses the cache first: it owns a half.
    let mine = keep_some(&topic);
    std::thread::scope(|s| {
        s.spawn(|| {
            let theirs = keep_some(&topic);
            // The owner's half is its own; the slot is any thread's.
            let shared = theirs.iter().filter(|p| mine.binary_search(p).is_ok()).count();
            assert!(shared <= 1, "{shared} of the owner's chunks loaned by another thread");
            // This thread's next loans reuse what it kept (the slot's chunk,
            // then its half's).
            let again: Vec<_> = (0..8).map(|_| topic.loan(100, SHORT).unwrap()).collect();
            let reused =
                again.iter().filter(|l| theirs.binary_search(&(l.as_ptr() as usize)).is_ok()).count();
            assert!(reused >= 7, "{reused} of 8 reused");
        });
    });
    assert_eq!(region.pool_stats().unwrap(), initial, "kept chunks count as free");
    // Another thread drops the last handles: both halves come back.
    std::thread::spawn(move || drop((topic, region))).join().unwrap();
    let again = Region::open(&name).unwrap();
    assert_eq!(again.recovered_on_open().total(), 0, "nothing kept was left for recovery");
    assert_eq!(again.pool_stats().unwrap(), initial);
}

#[test]
fn a_dead_consumers_message_with_a_forged_route_is_reclaimed_not_a_crash() {
    let name = unique("bus-forged-route");
    let _cleanup = RemoveRegion(name.clone());
    let side_name = unique("bus-forged-route-side");
    let side = Segment::create(&side_name, 64).unwrap();
    let region = small_region(&name);
    let config = TopicConfig::default().delivery(Delivery::AtLeastOnce).partitions(1);
    let topic = region.create_topic("t", config).unwrap();
    let initial = region.pool_stats().unwrap();
    topic.send(b"one", Key(0), SHORT).unwrap();
    topic.send(b"two", Key(0), SHORT).unwrap();
    let mut child = spawn(ENTRY, "receive-and-hang", Args::name(&name).with("side", &side_name));
    assert!(wait_for(LIMIT, || counter(&side, 0).load(Ordering::SeqCst) == 2));
    kill(&mut child);
    // Rewrite the route of the dead consumer's two messages (chunk
    // metadata: 24 bytes each from the offset at 40, state in bits 30-31
    // of the first word, route at +12) to name topic 65534.
    let raw = Segment::builder(&name).kind(tachyon::Kind::REGION).open().unwrap();
    let metas = counter(&raw, 5).load(Ordering::SeqCst) as usize;
    let total = counter(&raw, 6).load(Ordering::SeqCst) as usize;
    let mut forged = 0;
    for i in 0..total {
        let word = raw.get::<AtomicU64>(metas + 24 * i).unwrap().load(Ordering::SeqCst);
        if (word >> 30) & 3 == 3 {
            raw.get::<std::sync::atomic::AtomicU32>(metas + 24 * i + 12)
                .unwrap()
                .store(u32::MAX - 1, Ordering::SeqCst);
            forged += 1;
        }
    }
    assert_eq!(forged, 2);
    let r = region.recover().unwrap();
    assert_eq!((r.held, r.redelivered), (2, 0), "no topic to deliver them to: reclaimed, counted lost");
    assert_eq!(region.pool_stats().unwrap(), initial);
}

#[test]
fn a_loan_waiting_for_the_pool_reclaims_a_dead_holders_chunks_by_itself() {
    let name = unique("bus-auto-reclaim");
    let _cleanup = RemoveRegion(name.clone());
    let side_name = unique("bus-auto-reclaim-side");
    let side = Segment::create(&side_name, 64).unwrap();
    // Only 1 MiB chunks, a handful.
    let cfg =
        RegionConfig::default().size(8 << 20).ring_arena(1 << 20).class_weights([0, 0, 0, 0, 0, 0, 0, 1]);
    let region = Region::create(&name, cfg).unwrap();
    let topic = region.create_topic("t", TopicConfig::default()).unwrap();
    let chunks = region.pool_stats().unwrap()[7].chunks;
    let mut child =
        spawn(ENTRY, "loan-and-hang", Args::name(&name).with("side", &side_name).with("loans", chunks));
    assert!(wait_for(LIMIT, || counter(&side, 0).load(Ordering::SeqCst) == chunks as u64));
    assert!(matches!(topic.loan(10, SHORT), Err(Error::PoolExhausted { .. })), "all held by a live process");
    kill(&mut child);
    // Nobody calls recover: the waiting loan finds the dead holder's chunks.
    let loan = topic.loan(10, LONG).unwrap();
    drop(loan);
    assert_eq!(region.pool_stats().unwrap()[7].free, chunks);
}

#[test]
fn an_at_least_once_topic_delivers_a_dead_consumers_messages_again() {
    use tachyon::bus::Delivery;
    let name = unique("bus-alo");
    let _cleanup = RemoveRegion(name.clone());
    let side_name = unique("bus-alo-side");
    let side = Segment::create(&side_name, 64).unwrap();
    let region = small_region(&name);
    let cfg = TopicConfig::default().delivery(Delivery::AtLeastOnce);
    let topic = region.create_topic("t", cfg).unwrap();
    let initial = region.pool_stats().unwrap();
    topic.send(b"one", Key(0), SHORT).unwrap();
    topic.send(b"two", Key(0), SHORT).unwrap();
    let mut child = spawn(ENTRY, "receive-and-hang", Args::name(&name).with("side", &side_name));
    assert!(wait_for(LIMIT, || counter(&side, 0).load(Ordering::SeqCst) == 2));
    topic.send(b"three", Key(0), SHORT).unwrap();
    kill(&mut child);
    // A waiting consumer gets the dead consumer's messages back by itself
    // (after the one published meanwhile).
    let mut got = Vec::new();
    let mut buf = Vec::new();
    for _ in 0..3 {
        topic.recv_into(0, &mut buf, LONG).unwrap();
        got.push(String::from_utf8(buf.clone()).unwrap());
    }
    got[1..].sort();
    assert_eq!(got, ["three", "one", "two"]);
    assert_eq!(region.recover().unwrap().total(), 0);
    assert_eq!(region.pool_stats().unwrap(), initial);
}

/// A receive, a ring read and a ring write that time out never return
/// before their timeout, whatever the wait policy: the clock a spinning
/// wait starts late (after its first looks, or its first slice) only ever
/// lengthens it. Timeouts inside one recovery slice (50 ms) and across
/// several.
#[test]
fn timeouts_are_never_short() {
    let name = unique("bus-timeouts");
    let region = small_region(&name);
    let _rm = RemoveRegion(name);
    let ring = tachyon::CircularBuffer::create(&unique("bus-timeouts-ring"), 2, 64).unwrap();
    ring.write(&[1], SHORT).unwrap();
    ring.write(&[2], SHORT).unwrap();
    let mut buf = [0u8; 64];
    let empty = tachyon::CircularBuffer::create(&unique("bus-timeouts-empty"), 2, 64).unwrap();
    for (i, policy) in [WaitPolicy::Spin, WaitPolicy::Hybrid, WaitPolicy::Futex].into_iter().enumerate() {
        let topic = region.create_topic(&format!("t{i}"), TopicConfig::default().wait(policy)).unwrap();
        for ms in [3, 70] {
            let timeout = Duration::from_millis(ms);
            let started = std::time::Instant::now();
            let r = topic.receive(0, Some(timeout));
            assert!(matches!(r, Err(Error::Timeout { .. })), "{policy:?}: {r:?}");
            assert!(started.elapsed() >= timeout, "{policy:?} receive of {ms} ms");
        }
    }
    for (what, ms) in [("write", 3), ("write", 70), ("read", 3), ("read", 70)] {
        let timeout = Duration::from_millis(ms);
        let started = std::time::Instant::now();
        let r = match what {
            "write" => ring.write(&[3], Some(timeout)),
            _ => empty.read(&mut buf, Some(timeout)).map(|_| ()),
        };
        assert!(matches!(r, Err(Error::Timeout { .. })), "{what}: {r:?}");
        assert!(started.elapsed() >= timeout, "ring {what} of {ms} ms");
    }
}
