//! Joining a consumer group "from the oldest" (`JoinFrom::Oldest`,
//! `bus/backlog.rs`), with real processes: the new group gets every
//! message still queued, then the live stream, with no gap and no
//! duplicate between the two while a producer in another process publishes
//! at full speed; what the pool cannot copy is counted missed; a joiner
//! SIGKILLed in the middle leaves nothing recovery cannot repair.
#![cfg(not(tachyon_loom))]

mod common;

use common::{counter, spawn, unique, wait_child, wait_for, Args, RemoveRegion};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tachyon::bus::{JoinFrom, Key, Partitions, Region, RegionConfig, TopicConfig};
use tachyon::{Error, Segment};

const ENTRY: &str = "child_entry";
const LONG: Option<Duration> = Some(Duration::from_secs(60));
const LIMIT: Duration = Duration::from_secs(120);
/// Side segment words: 0 the default group's consumer is done, 1 its
/// errors (duplicates, order), 2 what it received.
const DONE: usize = 0;
const ERRORS: usize = 1;
const RECEIVED: usize = 2;
/// Set by the test: the consumer stops before its next message (so that
/// the producer fills the ring and waits for room); the consumer sets
/// `PAUSED` while it is stopped.
const PAUSE: usize = 3;
const PAUSED: usize = 4;
/// Messages carry their index; key `i % KEYS`.
const KEYS: u64 = 8;

fn region(name: &str, lease: Duration) -> Region {
    let cfg = RegionConfig::default().size(16 << 20).ring_arena(2 << 20).max_groups(4).group_lease(lease);
    Region::create(name, cfg).unwrap()
}

fn free(r: &Region) -> usize {
    r.pool_stats().unwrap().iter().map(|c| c.free).sum()
}

fn side() -> (String, Segment) {
    let name = unique("backlog-side");
    (name.clone(), Segment::create(&name, 64).unwrap())
}

/// Receives through `sub` until every key's last message (of `messages`)
/// came, or `LIMIT` passed; checks that every key's indexes go up by
/// `KEYS` (no gap, no duplicate, in order) and returns each key's first.
fn drain_in_order(sub: &tachyon::bus::Subscription, messages: u64) -> [u64; KEYS as usize] {
    let deadline = Instant::now() + LIMIT;
    let mut first = [None::<u64>; KEYS as usize];
    let mut last = [None::<u64>; KEYS as usize];
    let done = |last: &[Option<u64>]| (0..KEYS).all(|k| last[k as usize] == Some(messages - KEYS + k));
    while !done(&last) {
        assert!(Instant::now() < deadline, "stuck: last per key {last:?}");
        let m = match sub.receive(Some(Duration::from_millis(100))) {
            Ok(m) => m,
            Err(Error::Timeout { .. }) => continue,
            Err(e) => panic!("{e}"),
        };
        let i = u64::from_le_bytes(m[..8].try_into().unwrap());
        let k = (i % KEYS) as usize;
        if let Some(prev) = last[k] {
            assert_eq!(i, prev + KEYS, "key {k}: {i} after {prev} (a gap, a duplicate or out of order)");
        }
        first[k].get_or_insert(i);
        last[k] = Some(i);
    }
    first.map(|f| f.expect("every key"))
}

#[test]
fn child_entry() {
    let Some((role, args)) = common::role() else { return };
    let region = Region::open(args.str("name")).unwrap();
    let topic = region.topic("t").unwrap();
    match role.as_str() {
        // Publishes `messages` messages (their index, key `i % KEYS`),
        // waiting for room.
        "produce" => {
            let messages: u64 = args.get("messages");
            for i in 0..messages {
                topic.send(&i.to_le_bytes(), Key(i % KEYS), LONG).unwrap();
            }
        }
        // The default group's consumer: slow for the first `slow` messages
        // (so that the producer waits on a full ring: a backlog), then as
        // fast as it can; checks per-key order and counts.
        "consume" => {
            let side = Segment::open(args.str("side")).unwrap();
            let messages: u64 = args.get("messages");
            let slow: u64 = args.get("slow");
            let sub = topic.subscribe(Partitions::All).unwrap();
            let mut last = [None::<u64>; KEYS as usize];
            let deadline = Instant::now() + LIMIT;
            for n in 0..messages {
                let m = loop {
                    assert!(Instant::now() < deadline, "stuck");
                    match sub.receive(Some(Duration::from_millis(100))) {
                        Ok(m) => break m,
                        Err(Error::Timeout { .. }) => {}
                        Err(e) => panic!("{e}"),
                    }
                };
                while counter(&side, PAUSE).load(Ordering::SeqCst) == 1 {
                    counter(&side, PAUSED).store(1, Ordering::SeqCst);
                    assert!(Instant::now() < deadline, "paused for ever");
                    std::thread::sleep(Duration::from_millis(1));
                }
                counter(&side, PAUSED).store(0, Ordering::SeqCst);
                let i = u64::from_le_bytes(m[..8].try_into().unwrap());
                let k = (i % KEYS) as usize;
                if last[k].is_some_and(|prev| i != prev + KEYS) || (last[k].is_none() && i != k as u64) {
                    counter(&side, ERRORS).fetch_add(1, Ordering::SeqCst);
                }
                last[k] = Some(i);
                counter(&side, RECEIVED).fetch_add(1, Ordering::SeqCst);
                drop(m);
                if n < slow {
                    std::thread::sleep(Duration::from_micros(300));
                }
            }
            counter(&side, DONE).store(1, Ordering::SeqCst);
        }
        // Joins "late" from the oldest (killed at a fault point in it).
        "join" => {
            let _g = topic.join_group_from("late", JoinFrom::Oldest).unwrap();
            std::thread::sleep(LIMIT);
            panic!("not killed");
        }
        other => panic!("unknown role {other}"),
    }
}

/// The case: three groups join from the oldest, one after
/// another, while a producer process publishes at full speed and the
/// default group's consumer (a third process) is slow and stopped during
/// each join, so that the producer is waiting for room with its first look
/// at the groups taken before the join and commits after it. Each late
/// group gets messages published before it joined (the backlog), then
/// everything after, every key's indexes consecutive up to the last: no
/// gap between backlog and live stream, no duplicate, nothing missed; the
/// default group gets every message in order too; the pool is full at the
/// end. (Fails, every run, without the publishers' second look: the
/// message the producer was waiting to publish falls between the two.)
#[test]
fn a_group_joined_from_the_oldest_gets_the_backlog_then_the_live_stream() {
    backlog_then_live_stream(false);
}

/// The same on a topic with light hand-overs, where `send` claims its
/// cell before it copies the message into its chunk: a producer waiting
/// for room claims after the join, and its second look sends the message
/// through the groups instead.
#[test]
fn a_group_joined_from_the_oldest_of_a_light_topic_gets_the_backlog_then_the_live_stream() {
    backlog_then_live_stream(true);
}

fn backlog_then_live_stream(light: bool) {
    const MESSAGES: u64 = 20_000;
    let name = unique(if light { "backlog-live-light" } else { "backlog-live" });
    let _rm = RemoveRegion(name.clone());
    let r = region(&name, Duration::from_secs(30));
    let t = r
        .create_topic("t", TopicConfig::default().partitions(2).capacity(64).light_handovers(light))
        .unwrap();
    let initial = free(&r);
    let (side_name, side) = side();
    let args = Args::name(&name).with("side", &side_name).with("messages", MESSAGES);
    let mut consumer = spawn(ENTRY, "consume", args.clone().with("slow", 10_000));
    let mut producer = spawn(ENTRY, "produce", args.clone());
    // Three groups join, at three moments of the stream, each read by its
    // own thread. At each join the default group's consumer is stopped, so
    // that the producer is waiting for room with its first look at the
    // groups taken before the join, and commits after it: the case the
    // publishers' second look is for.
    let mut readers = Vec::new();
    for j in 0..3u64 {
        assert!(wait_for(LIMIT, || t.info().published >= 1_000 + 2_500 * j), "the producer goes on");
        counter(&side, PAUSE).store(1, Ordering::SeqCst);
        assert!(wait_for(LIMIT, || counter(&side, PAUSED).load(Ordering::SeqCst) == 1), "the consumer stops");
        // The producer fills the ring and waits.
        let mut last = t.info().published;
        assert!(wait_for(LIMIT, || {
            std::thread::sleep(Duration::from_millis(50));
            let now = t.info().published;
            std::mem::replace(&mut last, now) == now
        }));
        let before = t.info().published;
        let late = t.join_group_from(&format!("late{j}"), JoinFrom::Oldest).unwrap();
        counter(&side, PAUSE).store(0, Ordering::SeqCst);
        readers.push(std::thread::spawn(move || {
            let sub = late.subscribe(Partitions::All).unwrap();
            // Every key runs from its oldest queued message to its last
            // without a gap or a duplicate, and the backlog is there:
            // messages published before the join. (Per key: a partition
            // the default consumer kept up with had nothing queued, and
            // its keys start after the join.)
            let first = drain_in_order(&sub, MESSAGES);
            assert!(
                first.iter().any(|&f| f < before),
                "late{j}: the backlog comes first (first per key {first:?}, {before} published before the join)"
            );
            assert_eq!(late.missed(), 0, "late{j}: nothing missed");
            assert!(matches!(sub.try_receive(), Ok(None)), "late{j}: nothing more");
        }));
    }
    for r in readers {
        r.join().unwrap();
    }
    assert_eq!(wait_child(&mut producer, LIMIT), Some(0));
    assert_eq!(wait_child(&mut consumer, LIMIT), Some(0));
    assert_eq!(counter(&side, RECEIVED).load(Ordering::SeqCst), MESSAGES);
    assert_eq!(counter(&side, ERRORS).load(Ordering::SeqCst), 0, "the default group in order");
    assert_eq!(free(&r), initial, "no chunk leaked");
}

/// The accounting, in one process: a backlog the pool has no chunk to copy
/// into is counted missed (received + missed = published); a join of a
/// group that exists continues from its position; a topic without another
/// group gives an empty backlog.
#[test]
fn what_a_join_from_the_oldest_cannot_copy_is_counted_missed() {
    let name = unique("backlog-missed");
    let _rm = RemoveRegion(name.clone());
    let r = region(&name, Duration::from_secs(30));
    let t = r.create_topic("t", TopicConfig::default().capacity(64)).unwrap();
    let initial = free(&r);
    for i in 0..10u64 {
        t.send(&i.to_le_bytes(), Key(0), None).unwrap();
    }
    // Every free chunk loaned: the backlog has nothing to be copied into.
    let mut loans = Vec::new();
    while let Ok(l) = t.try_loan(8) {
        loans.push(l);
    }
    let g = t.join_group_from("late", JoinFrom::Oldest).unwrap();
    assert_eq!(g.missed(), 10, "the whole backlog counted missed");
    drop(loans);
    t.send(&10u64.to_le_bytes(), Key(0), None).unwrap();
    assert_eq!(u64::from_le_bytes(g.receive(0, LONG).unwrap()[..8].try_into().unwrap()), 10);
    assert!(matches!(g.try_receive(0), Ok(None)));
    // A second join of the existing group: its position, no backlog again.
    let again = t.join_group_from("late", JoinFrom::Oldest).unwrap();
    assert!(matches!(again.try_receive(0), Ok(None)));
    drop((g, again));
    // The default group still has all eleven, in order.
    for i in 0..11u64 {
        assert_eq!(u64::from_le_bytes(t.receive(0, LONG).unwrap()[..8].try_into().unwrap()), i);
    }
    // No group but the default one left anything queued: empty backlog.
    let empty = t.join_group_from("empty", JoinFrom::Oldest).unwrap();
    assert_eq!(empty.missed(), 0);
    assert!(matches!(empty.try_receive(0), Ok(None)));
    drop(empty);
    assert_eq!(free(&r), initial, "no chunk leaked");
}

/// A joiner SIGKILLed after reserving the new group's cells (the slot not
/// yet ACTIVE) or after copying the first backlog message: the next join
/// of the slot repairs the dead claims, or recovery drops the half-filled
/// group once its lease (zero here) is over and producers are not held
/// back; a join from the oldest afterwards gets the whole backlog; the
/// pool is full at the end.
#[test]
#[cfg(debug_assertions)] // fault-injection points exist in debug builds only
fn a_joiner_killed_mid_backlog_leaves_nothing_recovery_cannot_repair() {
    for fault in ["groups-join-reserved", "groups-join-copied"] {
        let name = unique("backlog-kill");
        let _rm = RemoveRegion(name.clone());
        let r = region(&name, Duration::ZERO);
        let t = r.create_topic("t", TopicConfig::default().capacity(16)).unwrap();
        let initial = free(&r);
        for i in 0..10u64 {
            t.send(&i.to_le_bytes(), Key(0), None).unwrap();
        }
        let mut cmd = common::child_command(ENTRY, "join", Args::name(&name));
        cmd.env("TACHYON_FAULT", fault);
        let mut child = common::spawn_retrying(&mut cmd);
        assert_eq!(wait_child(&mut child, LIMIT), None, "{fault}: killed at the point");
        let gone = || r.inspect().unwrap().topics[0].groups.iter().all(|g| g.name != "late");
        assert!(
            wait_for(LIMIT, || {
                r.recover().unwrap();
                gone()
            }),
            "{fault}: the half-joined group is dropped"
        );
        // Producers are not held back: six more fill the default ring.
        for i in 10..16u64 {
            t.send(&i.to_le_bytes(), Key(0), Some(Duration::from_secs(5))).unwrap();
        }
        let late = t.join_group_from("late", JoinFrom::Oldest).unwrap();
        assert_eq!(late.missed(), 0, "{fault}");
        for i in 0..16u64 {
            let m = late.receive(0, LONG).unwrap();
            assert_eq!(
                u64::from_le_bytes(m[..8].try_into().unwrap()),
                i,
                "{fault}: the whole backlog, in order"
            );
        }
        for i in 0..16u64 {
            assert_eq!(u64::from_le_bytes(t.receive(0, LONG).unwrap()[..8].try_into().unwrap()), i);
        }
        drop(late);
        r.recover().unwrap();
        assert_eq!(free(&r), initial, "{fault}: no chunk leaked");
    }
}
