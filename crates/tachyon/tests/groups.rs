//! Consumer groups (issue #15)
//! wired into the bus: group slots in the layout, each topic's rings per
//! group slot, publishing to every joined group and receiving through one.
#![cfg(not(tachyon_loom))]

mod common;

use common::{counter, spawn, unique, wait_child, Args, RemoveRegion};
use std::sync::atomic::Ordering;
use std::time::Duration;
use tachyon::bus::{Key, Region, RegionConfig, TopicConfig};
use tachyon::{Error, Segment};

const ENTRY: &str = "child_entry";
const SHORT: Option<Duration> = Some(Duration::from_millis(20));
const LONG: Option<Duration> = Some(Duration::from_secs(60));
/// Messages of the process test.
const MESSAGES: u64 = 100_000;
const GROUPS: usize = 3;
const MEMBERS: usize = 2;
const KEYS: u64 = 16;
const PARTITIONS: u32 = 4;
/// Side segment: per group, received count and error count; then a bit
/// per message per group.
const SIDE_BITS: usize = 64;

fn bit_word(group: usize, i: u64) -> usize {
    SIDE_BITS / 8 + group * (MESSAGES as usize).div_ceil(64) + (i / 64) as usize
}

fn region(name: &str, max_groups: usize) -> Region {
    let cfg = RegionConfig::default().size(16 << 20).ring_arena(2 << 20).max_groups(max_groups);
    Region::create(name, cfg).unwrap()
}

/// A topic's rings take one ring per partition per group slot, plus the
/// slots' control words and names; the default group is slot 0 and is the
/// only group an inspector sees on a new topic.
#[test]
fn a_topic_has_rings_per_group_slot() {
    let name = unique("groups-layout");
    let _rm = RemoveRegion(name.clone());
    let plain = region(&name, 0);
    let t = plain.create_topic("t", TopicConfig::default().partitions(2).capacity(64)).unwrap();
    let one_slot = plain.inspect().unwrap();
    assert_eq!(one_slot.topics[0].groups.len(), 1);
    assert_eq!(one_slot.topics[0].groups[0].slot, 0);
    t.send(b"x", Key(0), SHORT).unwrap();
    assert_eq!(&*t.receive(t.partition_of(Key(0)), SHORT).unwrap(), b"x");
    drop((t, plain));
    Region::remove(&name).unwrap();

    let four = region(&name, 4);
    assert_eq!(Region::open(&name).unwrap().config().max_groups, 4);
    let t = four.create_topic("t", TopicConfig::default().partitions(2).capacity(64)).unwrap();
    let report = four.inspect().unwrap();
    let groups = &report.topics[0].groups;
    assert_eq!(groups.len(), 1, "only the default group is in use: {groups:?}");
    assert_eq!((groups[0].slot, groups[0].name.as_str(), groups[0].partitions.len()), (0, "", 2));
    // The default group behaves as a topic always did.
    for i in 0..100u64 {
        t.send(&i.to_le_bytes(), Key(i), SHORT).unwrap();
    }
    let mut got = 0;
    for p in 0..2 {
        while let Some(m) = t.try_receive(p).unwrap() {
            assert_eq!(m.len(), 8);
            got += 1;
        }
    }
    assert_eq!(got, 100);
    assert_eq!(four.pool_stats().unwrap(), Region::open(&name).unwrap().pool_stats().unwrap());
}

/// `default_group(false)`: recorded in the topic's sealed record (an open
/// with the other setting is refused by name), `receive` says why it
/// cannot, and a region without group slots refuses such a topic.
#[test]
fn a_topic_without_its_default_group() {
    let name = unique("groups-nodefault");
    let _rm = RemoveRegion(name.clone());
    let r = region(&name, 0);
    let err = r.create_topic("t", TopicConfig::default().default_group(false)).unwrap_err();
    assert!(err.to_string().contains("max_groups"), "{err}");
    drop(r);
    Region::remove(&name).unwrap();

    let r = region(&name, 3);
    let t = r.create_topic("t", TopicConfig::default().default_group(false)).unwrap();
    assert!(!t.config().default_group_enabled());
    let again = Region::open(&name).unwrap().topic("t").unwrap();
    assert!(!again.config().default_group_enabled());
    let err = r.create_or_open_topic("t", TopicConfig::default()).unwrap_err();
    assert!(matches!(err, Error::Incompatible { .. }) && err.to_string().contains("default_group"), "{err}");
    let err = t.receive(0, SHORT).unwrap_err();
    assert!(err.to_string().contains("without its default group"), "{err}");
    assert!(t.try_receive(0).is_err());
    assert!(r.inspect().unwrap().topics[0].groups.is_empty());
}

#[test]
fn child_entry() {
    let Some((role, args)) = common::role() else { return };
    let region = Region::open(args.str("name")).unwrap();
    let topic = region.topic("t").unwrap();
    let side = Segment::open(args.str("side")).unwrap();
    match role.as_str() {
        "producer" => {
            let mut seqs = [0u64; KEYS as usize];
            for i in 0..MESSAGES {
                let key = (i * 7) % KEYS;
                let mut msg = [0u8; 24];
                msg[..8].copy_from_slice(&key.to_le_bytes());
                msg[8..16].copy_from_slice(&seqs[key as usize].to_le_bytes());
                msg[16..].copy_from_slice(&i.to_le_bytes());
                seqs[key as usize] += 1;
                if i % 2 == 0 {
                    topic.send(&msg, Key(key), LONG).unwrap();
                } else {
                    let mut loan = topic.loan(msg.len(), LONG).unwrap();
                    loan.copy_from_slice(&msg);
                    loan.publish(Key(key), LONG).unwrap();
                }
            }
        }
        "member" => {
            let g: usize = args.get("group");
            let group = topic.join_group(&format!("group-{g}")).unwrap();
            let done = counter(&side, 2 * g);
            let errors = counter(&side, 2 * g + 1);
            let mut last = [None::<u64>; KEYS as usize];
            let mut buf = Vec::new();
            let deadline = std::time::Instant::now() + Duration::from_secs(600);
            let mut p = 0;
            while done.load(Ordering::SeqCst) < MESSAGES {
                assert!(
                    std::time::Instant::now() < deadline,
                    "group {g} stuck at {}",
                    done.load(Ordering::SeqCst)
                );
                p = (p + 1) % PARTITIONS;
                // The zero-copy path and the copy path in turn.
                let got = if p % 2 == 0 {
                    match group.try_receive(p).unwrap() {
                        Some(m) => {
                            buf.clear();
                            buf.extend_from_slice(&m);
                            true
                        }
                        None => false,
                    }
                } else {
                    group.recv_into(p, &mut buf, Some(Duration::ZERO)).is_ok()
                };
                if !got {
                    std::thread::yield_now();
                    continue;
                }
                let word = |at: usize| u64::from_le_bytes(buf[at..at + 8].try_into().unwrap());
                let (key, seq, i) = (word(0), word(8), word(16));
                if topic.partition_of(Key(key)) != p || i >= MESSAGES {
                    errors.fetch_add(1, Ordering::SeqCst);
                }
                // Per-key order within the group, as this member sees it.
                if last[key as usize].is_some_and(|l| seq <= l) {
                    errors.fetch_add(1, Ordering::SeqCst);
                }
                last[key as usize] = Some(seq);
                let bit = 1u64 << (i % 64);
                if counter(&side, bit_word(g, i)).fetch_or(bit, Ordering::SeqCst) & bit != 0 {
                    errors.fetch_add(1, Ordering::SeqCst); // a duplicate
                }
                done.fetch_add(1, Ordering::SeqCst);
            }
        }
        other => panic!("unknown role {other}"),
    }
}

/// Three groups of two member processes each and a producer process:
/// every group receives every message exactly once across its members,
/// per-key order holds within each group (as each member sees it: both
/// members of a group compete on every partition), and the pool is full
/// again afterwards.
#[test]
fn three_groups_of_two_processes_each_receive_everything_once() {
    let name = unique("groups-procs");
    let _rm = RemoveRegion(name.clone());
    let side_name = unique("groups-side");
    let cfg = RegionConfig::default().size(32 << 20).ring_arena(4 << 20).max_groups(GROUPS + 1);
    let region = Region::create(&name, cfg).unwrap();
    // No default group: nobody reads it, and it would hold producers back.
    let topic = region
        .create_topic("t", TopicConfig::default().partitions(PARTITIONS).capacity(256).default_group(false))
        .unwrap();
    // The groups exist before the producer starts (joined here first).
    let groups: Vec<_> = (0..GROUPS).map(|g| topic.join_group(&format!("group-{g}")).unwrap()).collect();
    let side =
        Segment::create(&side_name, SIDE_BITS + GROUPS * (MESSAGES as usize).div_ceil(64) * 8).unwrap();
    let initial = region.pool_stats().unwrap();
    let args = Args::name(&name).with("side", &side_name);
    let mut kids: Vec<_> = (0..GROUPS)
        .flat_map(|g| (0..MEMBERS).map(move |_| g))
        .map(|g| spawn(ENTRY, "member", args.clone().with("group", g)))
        .collect();
    kids.push(spawn(ENTRY, "producer", &args));
    for mut k in kids {
        assert_eq!(wait_child(&mut k, Duration::from_secs(900)), Some(0));
    }
    for (g, group) in groups.iter().enumerate() {
        assert_eq!(counter(&side, 2 * g).load(Ordering::SeqCst), MESSAGES, "group {g} received");
        assert_eq!(
            counter(&side, 2 * g + 1).load(Ordering::SeqCst),
            0,
            "group {g}: duplicates, order or content"
        );
        for i in 0..MESSAGES {
            let w = counter(&side, bit_word(g, i)).load(Ordering::SeqCst);
            assert!(w & (1 << (i % 64)) != 0, "group {g} missed message {i}");
        }
        assert_eq!(group.depth(0).unwrap(), 0);
    }
    assert_eq!(topic.info().published, MESSAGES);
    assert_eq!(topic.info().undelivered, 0);
    assert_eq!(region.pool_stats().unwrap(), initial, "every chunk back in the pool");
}

/// A publish that finds one joined group's ring full gives up as a whole:
/// no group gets the message (the cells claimed in the other groups' rings
/// become tombstones their readers skip), the chunk is back in the pool,
/// and once the ring has room publishing goes on.
#[test]
fn a_publish_with_a_full_group_ring_gives_up_and_leaks_nothing() {
    let name = unique("groups-full");
    let _rm = RemoveRegion(name.clone());
    let r = region(&name, 3);
    let t = r.create_topic("t", TopicConfig::default().capacity(2)).unwrap();
    let a = t.join_group("a").unwrap();
    let b = t.join_group("b").unwrap();
    assert_eq!(t.join_group("a").unwrap().slot(), a.slot(), "joining again joins the same group");
    let initial = r.pool_stats().unwrap();
    t.send(b"one", Key(0), SHORT).unwrap();
    t.send(b"two", Key(0), SHORT).unwrap();
    // Every ring is full.
    assert!(matches!(t.try_send(b"three", Key(0)), Err(Error::Full { .. })));
    assert!(matches!(t.send(b"three", Key(0), SHORT), Err(Error::Timeout { .. })));
    let free = |r: &Region| r.pool_stats().unwrap().iter().map(|c| c.free).sum::<usize>();
    assert_eq!(free(&r), free_of(&initial) - 2, "two messages held, the failed ones freed");
    // The default group and "a" read theirs; "b" stays full.
    assert_eq!(&*a.receive(0, SHORT).unwrap(), b"one");
    assert_eq!(&*a.receive(0, SHORT).unwrap(), b"two");
    assert_eq!(&*t.receive(0, SHORT).unwrap(), b"one");
    assert_eq!(&*t.receive(0, SHORT).unwrap(), b"two");
    assert_eq!(free(&r), free_of(&initial) - 2, "b still holds both");
    let loan = t.loan(5, SHORT).unwrap();
    assert!(matches!(t.try_send(b"three", Key(0)), Err(Error::Full { .. })));
    let mut loan = loan;
    loan.copy_from_slice(b"three");
    assert!(matches!(loan.try_publish(Key(0)), Err(Error::Full { .. })));
    // Nothing reached "a" or the default group: their claimed cells were given up.
    assert!(a.try_receive(0).unwrap().is_none());
    assert!(t.try_receive(0).unwrap().is_none());
    assert_eq!(free(&r), free_of(&initial) - 2);
    let mut buf = Vec::new();
    assert_eq!(b.recv_into(0, &mut buf, SHORT).unwrap(), 3);
    assert_eq!(buf, b"one");
    drop(b.receive(0, SHORT).unwrap());
    assert_eq!(r.pool_stats().unwrap(), initial, "the last group's release frees");
    // Room again: all three get the next one.
    t.send(b"four", Key(0), SHORT).unwrap();
    assert_eq!(&*a.receive(0, SHORT).unwrap(), b"four");
    assert_eq!(&*b.receive(0, SHORT).unwrap(), b"four");
    // The raw path of the default group releases through its group word.
    let raw = t.receive_raw(0, SHORT).unwrap();
    // SAFETY: received through this region handle just now, released once.
    unsafe { t.release_raw(raw.index).unwrap() };
    assert_eq!(r.pool_stats().unwrap(), initial);
    assert_eq!(t.info().undelivered, 0);
}

fn free_of(stats: &[tachyon::bus::ClassStats; 8]) -> usize {
    stats.iter().map(|c| c.free).sum()
}

/// A topic without its default group delivers to nobody while no group is
/// joined (counted, the chunk back in the pool), then to the groups
/// joined; bad group names and too many groups are clear errors.
#[test]
fn without_groups_joined_a_publish_reaches_nobody() {
    let name = unique("groups-nobody");
    let _rm = RemoveRegion(name.clone());
    let r = region(&name, 3);
    let t = r.create_topic("t", TopicConfig::default().default_group(false)).unwrap();
    let initial = r.pool_stats().unwrap();
    for i in 0..10u64 {
        t.send(&i.to_le_bytes(), Key(i), SHORT).unwrap();
    }
    assert_eq!(t.info().undelivered, 10);
    assert_eq!(r.pool_stats().unwrap(), initial);
    let a = t.join_group("a").unwrap();
    t.send(b"for a", Key(1), SHORT).unwrap();
    assert_eq!(&*a.receive(0, SHORT).unwrap(), b"for a");
    // `published` counts what reached at least one group.
    assert_eq!((t.info().undelivered, t.info().published), (10, 1));
    assert_eq!(r.pool_stats().unwrap(), initial);
    for bad in ["", "with\0nul", &"x".repeat(65)] {
        assert!(matches!(t.join_group(bad), Err(Error::InvalidName { .. })), "{bad:?}");
    }
    let _b = t.join_group("b").unwrap();
    let err = t.join_group("c").unwrap_err();
    assert!(matches!(err, Error::NoSpace { .. }) && err.to_string().contains("max_groups"), "{err}");
    let names: Vec<_> = r.inspect().unwrap().topics[0].groups.iter().map(|g| g.name.clone()).collect();
    assert_eq!(names, ["a", "b"]);
    // A region without named slots says so.
    let name2 = unique("groups-none");
    let _rm2 = RemoveRegion(name2.clone());
    let plain = region(&name2, 1);
    let err = plain.create_topic("t", TopicConfig::default()).unwrap().join_group("a").unwrap_err();
    assert!(err.to_string().contains("max_groups"), "{err}");
}

/// A descriptor of a chunk now shared by groups that names no hold of the
/// reading group (a stale or forged one: here the stamp of no
/// publication) is skipped and counted corrupt, not delivered; raw release
/// of a group message (`Message::into_raw`, `Topic::release_raw`) goes
/// through the group word this process holds.
#[test]
fn a_stale_descriptor_of_a_shared_chunk_is_not_delivered() {
    let name = unique("groups-stale");
    let _rm = RemoveRegion(name.clone());
    let r = region(&name, 2);
    let t = r.create_topic("t", TopicConfig::default()).unwrap();
    let a = t.join_group("a").unwrap();
    let initial = r.pool_stats().unwrap();
    t.send(b"x", Key(0), SHORT).unwrap();
    let raw = a.receive(0, SHORT).unwrap().into_raw();
    assert_eq!(&*t.receive(0, SHORT).unwrap(), b"x"); // the default group's, released
    let corrupt = t.info().corrupt;
    // Publication 0 of the chunk, which was never this one's stamp.
    t.publish_raw_descriptor(0, raw.index, 1).unwrap();
    assert!(matches!(t.receive(0, SHORT), Err(Error::Corrupt { .. })));
    assert_eq!(t.info().corrupt, corrupt + 1);
    assert!(t.try_receive(0).unwrap().is_none());
    assert_ne!(r.pool_stats().unwrap(), initial, "group a still holds it");
    // SAFETY: received through this region handle, released once.
    unsafe { t.release_raw(raw.index).unwrap() };
    assert_eq!(r.pool_stats().unwrap(), initial);
}

/// A group's message turned raw (the C face's path) gives up its share of
/// the membership: leaving with it still held ends the membership (the
/// raw message does not keep the process a member for ever, nor leak its
/// handle), and the raw release still works.
#[test]
fn a_raw_group_message_does_not_keep_the_membership() {
    let name = unique("groups-raw");
    let _rm = RemoveRegion(name.clone());
    let r = region(&name, 3);
    let t = r.create_topic("t", TopicConfig::default().default_group(false)).unwrap();
    let initial = r.pool_stats().unwrap();
    let g = t.join_group("g").unwrap();
    t.send(b"raw", Key(0), None).unwrap();
    let raw = g.receive(0, Some(Duration::from_secs(1))).unwrap().into_raw();
    assert!(g.leave().unwrap(), "the last share: the membership ends");
    // SAFETY: received through this region handle, released once.
    unsafe { t.release_raw(raw.index) }.unwrap();
    assert_eq!(r.pool_stats().unwrap(), initial);
}
