//! Consumer groups' membership, leases and drops (issue #15, wiring step
//! 6), with real processes: a group whose member processes were SIGKILLed
//! is dropped after its lease and stops holding producers back; a drop
//! racing a publisher in another process leaks nothing; leaving releases
//! what the member held and keeps the group's position for the lease; a
//! group with a live member is never dropped; joiners killed mid-join or
//! mid-leave leave nothing recovery cannot repair.
#![cfg(not(tachyon_loom))]

mod common;

use common::{counter, kill, spawn, unique, wait_child, wait_for, Args, RemoveRegion};
use std::sync::atomic::Ordering;
use std::time::Duration;
use tachyon::bus::{GroupReport, Key, Region, RegionConfig, TopicConfig};
use tachyon::{Error, Segment};

const ENTRY: &str = "child_entry";
const SHORT: Option<Duration> = Some(Duration::from_millis(20));
const LONG: Option<Duration> = Some(Duration::from_secs(60));
/// How long a test waits for something another process does.
const LIMIT: Duration = Duration::from_secs(60);
/// Side segment words: 0 ready, 1 received, 2 errors; a bit per message
/// from word 8.
const READY: usize = 0;
const RECEIVED: usize = 1;
const ERRORS: usize = 2;
const BITS: usize = 8;

fn region(name: &str, lease: Duration) -> Region {
    let cfg = RegionConfig::default().size(16 << 20).ring_arena(2 << 20).max_groups(4).group_lease(lease);
    Region::create(name, cfg).unwrap()
}

fn free(r: &Region) -> usize {
    r.pool_stats().unwrap().iter().map(|c| c.free).sum()
}

/// The report of the named group of the region's first topic, if it is in
/// use.
fn group(r: &Region, name: &str) -> Option<GroupReport> {
    r.inspect().unwrap().topics[0].groups.iter().find(|g| g.name == name).cloned()
}

/// Runs recovery until `cond` holds (bounded).
fn recover_until(r: &Region, mut cond: impl FnMut() -> bool) -> bool {
    wait_for(LIMIT, || {
        r.recover().unwrap();
        cond()
    })
}

#[test]
fn child_entry() {
    let Some((role, args)) = common::role() else { return };
    let region = Region::open(args.str("name")).unwrap();
    let topic = region.topic("t").unwrap();
    let side = Segment::open(args.str("side")).unwrap();
    match role.as_str() {
        // Joins, receives `take` messages and keeps them, says so, waits to
        // be killed.
        "hold" => {
            let group = topic.join_group(args.str("group")).unwrap();
            let take: usize = args.get("take");
            let mut kept = Vec::new();
            while kept.len() < take {
                kept.push(group.receive(0, LONG).unwrap());
            }
            counter(&side, READY).store(1, Ordering::SeqCst);
            std::thread::sleep(LIMIT * 2);
            panic!("not killed");
        }
        // Receives `messages` messages through `group` (any partition),
        // marking each; a duplicate or a stranger is an error.
        "read" => {
            let group = topic.join_group(args.str("group")).unwrap();
            let messages: u64 = args.get("messages");
            counter(&side, READY).store(1, Ordering::SeqCst);
            let deadline = std::time::Instant::now() + Duration::from_secs(300);
            let mut buf = Vec::new();
            let mut p = 0;
            while counter(&side, RECEIVED).load(Ordering::SeqCst) < messages {
                assert!(std::time::Instant::now() < deadline, "stuck");
                p = (p + 1) % topic.partitions();
                match group.recv_into(p, &mut buf, Some(Duration::ZERO)) {
                    Ok(8) => {}
                    Ok(_) => {
                        counter(&side, ERRORS).fetch_add(1, Ordering::SeqCst);
                        continue;
                    }
                    Err(Error::Timeout { .. }) => {
                        std::thread::yield_now();
                        continue;
                    }
                    Err(e) => panic!("{e}"),
                }
                let i = u64::from_le_bytes(buf[..8].try_into().unwrap());
                let bit = 1u64 << (i % 64);
                if i >= messages
                    || counter(&side, BITS + (i / 64) as usize).fetch_or(bit, Ordering::SeqCst) & bit != 0
                {
                    counter(&side, ERRORS).fetch_add(1, Ordering::SeqCst);
                }
                counter(&side, RECEIVED).fetch_add(1, Ordering::SeqCst);
            }
        }
        // Publishes `messages` messages (their index), waiting for room.
        "produce" => {
            let messages: u64 = args.get("messages");
            for i in 0..messages {
                topic.send(&i.to_le_bytes(), Key(i), LONG).unwrap();
            }
        }
        // Joins and leaves `group` for ever, receiving now and then (killed
        // at some instruction of it by the driver, or by a fault point).
        "churn" => loop {
            let group = topic.join_group(args.str("group")).unwrap();
            counter(&side, READY).fetch_add(1, Ordering::SeqCst);
            drop(group.try_receive(0).unwrap());
            if args.get::<u32>("once") == 1 {
                group.leave().unwrap();
                return;
            }
            drop(group);
        },
        other => panic!("unknown role {other}"),
    }
}

fn side(bits: u64) -> (String, Segment) {
    let name = unique("lease-side");
    let seg = Segment::create(&name, 8 * (BITS + (bits as usize).div_ceil(64) + 1)).unwrap();
    (name, seg)
}

/// (a) A group whose only member process is SIGKILLed, holding a message,
/// with its ring full: it holds producers back (a publish fails with
/// `Full`, another waits) until recovery drops it once its lease ran out;
/// then the waiting publish goes through, new ones too, and once the other
/// group has read everything the pool is full again.
#[test]
fn a_group_of_killed_members_is_dropped_after_its_lease() {
    let name = unique("lease-killed");
    let _rm = RemoveRegion(name.clone());
    let r = region(&name, Duration::from_millis(100));
    let t = r.create_topic("t", TopicConfig::default().capacity(4).default_group(false)).unwrap();
    let keep = t.join_group("keep").unwrap();
    let initial = free(&r);
    let (side_name, side) = side(0);
    let mut child = spawn(
        ENTRY,
        "hold",
        Args::name(&name).with("side", &side_name).with("group", "dead").with("take", 1),
    );
    assert!(wait_for(LIMIT, || group(&r, "dead").is_some()), "the child joined");
    t.send(b"held\0\0\0\0", Key(0), SHORT).unwrap();
    assert!(wait_for(LIMIT, || counter(&side, READY).load(Ordering::SeqCst) == 1), "the child holds one");
    drop(keep.receive(0, SHORT).unwrap());
    // "dead"'s ring fills; "keep" reads as it goes.
    let mut sent = 0;
    loop {
        match t.try_send(&[0; 8], Key(0)) {
            Ok(()) => sent += 1,
            Err(Error::Full { .. }) => break,
            Err(e) => panic!("{e}"),
        }
        drop(keep.receive(0, SHORT).unwrap());
    }
    assert_eq!(sent, 4, "the dead group's ring holds its capacity");
    assert!(free(&r) < initial, "the group holds chunks");
    let report = group(&r, "dead").unwrap();
    assert_eq!((report.members.len(), report.live_members, report.lag), (1, 1, 4));
    kill(&mut child);
    // A producer blocked on the full ring meanwhile.
    std::thread::scope(|s| {
        let blocked = s.spawn(|| t.send(b"blocked\0", Key(0), LONG));
        // Dead, then dropped once the lease ran out (recovery's pass).
        assert!(recover_until(&r, || group(&r, "dead").is_none()), "dropped");
        blocked.join().unwrap().expect("the blocked publish went through");
    });
    assert_eq!(&*keep.receive(0, SHORT).unwrap(), b"blocked\0");
    // No longer held back: more than a ring's worth goes through.
    for i in 0..16u64 {
        t.try_send(&i.to_le_bytes(), Key(0)).unwrap();
        drop(keep.receive(0, SHORT).unwrap());
    }
    assert_eq!(free(&r), initial, "every chunk back in the pool");
    // The slot is free for a new group, of the next generation, which gets
    // what is published from now on (nothing stale).
    let again = t.join_group("dead").unwrap();
    assert_eq!(again.generation(), report.generation + 1);
    assert!(again.try_receive(0).unwrap().is_none());
    t.send(b"new\0\0\0\0\0", Key(0), SHORT).unwrap();
    assert_eq!(&*again.receive(0, SHORT).unwrap(), b"new\0\0\0\0\0");
    drop(keep.receive(0, SHORT).unwrap());
    assert_eq!(free(&r), initial);
}

/// (b) A producer process publishes while the only member of "doomed" is
/// killed and recovery drops the group (lease 0: as soon as it is found
/// without a live member): the drop races the publishes. Another group,
/// read by a third process, gets every message exactly once, and the pool
/// is full again at the end.
#[test]
fn a_drop_racing_a_publisher_leaks_nothing() {
    const MESSAGES: u64 = 20_000;
    let name = unique("lease-race");
    let _rm = RemoveRegion(name.clone());
    let r = region(&name, Duration::ZERO);
    let t =
        r.create_topic("t", TopicConfig::default().partitions(2).capacity(16).default_group(false)).unwrap();
    let initial = free(&r);
    let (keep_side, keep) = side(MESSAGES);
    let (doomed_side, doomed) = side(0);
    let args = Args::name(&name);
    let mut reader = spawn(
        ENTRY,
        "read",
        args.clone().with("side", &keep_side).with("group", "keep").with("messages", MESSAGES),
    );
    let mut holder =
        spawn(ENTRY, "hold", args.clone().with("side", &doomed_side).with("group", "doomed").with("take", 1));
    assert!(wait_for(LIMIT, || counter(&keep, READY).load(Ordering::SeqCst) == 1));
    assert!(wait_for(LIMIT, || group(&r, "doomed").is_some()));
    let mut producer =
        spawn(ENTRY, "produce", args.clone().with("side", &keep_side).with("messages", MESSAGES));
    // The holder takes one message (of partition 0) and is killed while the
    // producer goes on; recovery drops the group under the publishes.
    assert!(wait_for(LIMIT, || counter(&doomed, READY).load(Ordering::SeqCst) == 1));
    kill(&mut holder);
    assert!(recover_until(&r, || group(&r, "doomed").is_none()), "dropped");
    let dropped_at = counter(&keep, RECEIVED).load(Ordering::SeqCst);
    assert_eq!(wait_child(&mut producer, Duration::from_secs(300)), Some(0));
    assert_eq!(wait_child(&mut reader, Duration::from_secs(300)), Some(0));
    assert_eq!(counter(&keep, ERRORS).load(Ordering::SeqCst), 0, "duplicates or strangers");
    for i in 0..MESSAGES {
        let w = counter(&keep, BITS + (i / 64) as usize).load(Ordering::SeqCst);
        assert!(w & (1 << (i % 64)) != 0, "\"keep\" missed message {i}");
    }
    r.recover().unwrap();
    assert_eq!(free(&r), initial, "every chunk back in the pool (dropped after {dropped_at} of {MESSAGES})");
    assert_eq!(t.info().published, MESSAGES);
}

/// (c) Leaving: a member that still has messages of the group stays a
/// member until they are dropped (their holds end then); the group keeps
/// its position (a message queued for it stays queued, and a member that
/// joins again gets it) until its lease runs out, when recovery drops it
/// and its queued messages go back to the pool.
#[test]
fn leaving_releases_held_messages_and_keeps_the_position_for_the_lease() {
    let name = unique("lease-leave");
    let _rm = RemoveRegion(name.clone());
    let r = region(&name, Duration::from_millis(50));
    let t = r.create_topic("t", TopicConfig::default().default_group(false)).unwrap();
    let b = t.join_group("b").unwrap();
    let initial = free(&r);
    let a = t.join_group("a").unwrap();
    for i in 0..4u64 {
        t.send(&i.to_le_bytes(), Key(0), SHORT).unwrap();
        drop(b.receive(0, SHORT).unwrap());
    }
    let m0 = a.receive(0, SHORT).unwrap();
    let m1 = a.receive(0, SHORT).unwrap();
    assert_eq!(free(&r), initial - 4, "\"a\" holds two and has two queued");
    let me = group(&r, "a").unwrap().members;
    assert_eq!(me.len(), 1);
    assert!(!a.leave().unwrap(), "its messages keep the membership");
    assert_eq!(group(&r, "a").unwrap().members, me);
    drop(m0);
    assert_eq!(free(&r), initial - 3);
    drop(m1); // the last share: the membership ends
    let left = group(&r, "a").unwrap();
    assert_eq!((left.members.len(), left.lag), (0, 2), "no member, two messages queued");
    assert_ne!(left.empty_since_unix_ns, 0, "its lease runs");
    assert_eq!(free(&r), initial - 2);
    // Joined again before recovery drops it: the position is where it was.
    let a = t.join_group("a").unwrap();
    assert_eq!(a.generation(), left.generation);
    assert_eq!(group(&r, "a").unwrap().empty_since_unix_ns, 0);
    assert_eq!(&*a.receive(0, SHORT).unwrap(), 2u64.to_le_bytes());
    drop(a);
    // Left for good: dropped after the lease, the queued message freed.
    assert!(recover_until(&r, || group(&r, "a").is_none()), "dropped");
    assert_eq!(free(&r), initial);
    // Two handles of one process are one member; the last one ends it.
    let a1 = t.join_group("a").unwrap();
    let a2 = t.join_group("a").unwrap();
    assert_eq!(group(&r, "a").unwrap().members.len(), 1);
    assert!(!a1.leave().unwrap());
    assert_eq!(group(&r, "a").unwrap().members.len(), 1);
    assert!(a2.leave().unwrap());
    assert_eq!(group(&r, "a").unwrap().members.len(), 0);
    drop(b);
}

/// (d) A group with a live member is never dropped, whatever the lease
/// (here 0): not while its only member is another live process, not while
/// the driver is a member and that process is dead; once both are gone it
/// is.
#[test]
fn a_group_with_live_members_is_never_dropped() {
    let name = unique("lease-live");
    let _rm = RemoveRegion(name.clone());
    let r = region(&name, Duration::ZERO);
    let t = r.create_topic("t", TopicConfig::default().default_group(false)).unwrap();
    let (side_name, side) = side(0);
    let mut child =
        spawn(ENTRY, "hold", Args::name(&name).with("side", &side_name).with("group", "g").with("take", 1));
    assert!(wait_for(LIMIT, || group(&r, "g").is_some()));
    t.send(&[1; 8], Key(0), SHORT).unwrap();
    assert!(wait_for(LIMIT, || counter(&side, READY).load(Ordering::SeqCst) == 1));
    let before = group(&r, "g").unwrap();
    for _ in 0..20 {
        r.recover().unwrap();
        let now = group(&r, "g").expect("kept while its member lives");
        assert_eq!((now.generation, now.members.len(), now.empty_since_unix_ns), (before.generation, 1, 0));
    }
    let me = t.join_group("g").unwrap();
    kill(&mut child);
    for _ in 0..20 {
        r.recover().unwrap();
        let now = group(&r, "g").expect("kept while the driver is a member");
        assert_eq!(now.generation, before.generation);
    }
    // The dead member is forgotten; the driver is the one left.
    assert_eq!(group(&r, "g").unwrap().members, me.members().unwrap());
    assert_eq!(me.members().unwrap().len(), 1);
    drop(me);
    assert!(recover_until(&r, || group(&r, "g").is_none()), "dropped once nobody is left");
}

/// (e) Children killed while joining or leaving (at the fault points
/// inside the join and the leave, and at whatever instruction a SIGKILL
/// meets in a join/leave loop), again and again: recovery repairs what
/// they left (no slot is lost, no chunk leaks, the control mutex is not
/// stuck), and the groups work afterwards.
#[test]
#[cfg(debug_assertions)] // fault-injection points exist in debug builds only
fn joiners_and_leavers_killed_mid_way_corrupt_nothing() {
    let name = unique("lease-churn");
    let _rm = RemoveRegion(name.clone());
    let r = region(&name, Duration::ZERO);
    let t = r.create_topic("t", TopicConfig::default().default_group(false)).unwrap();
    let keep = t.join_group("keep").unwrap();
    let initial = free(&r);
    let (side_name, side) = side(0);
    let args = Args::name(&name).with("side", &side_name).with("group", "g");
    for fault in ["groups-join-recorded", "groups-leave", "groups-drop-started", "groups-drop-swept"] {
        for _ in 0..2 {
            // Messages in flight for "g", if it is joined.
            t.send(&[2; 8], Key(0), SHORT).unwrap();
            drop(keep.receive(0, SHORT).unwrap());
            if fault.starts_with("groups-drop") {
                // A group left by its member, for the next child's own
                // recovery (on open) to drop: it is killed mid-drop.
                let mut first = spawn(ENTRY, "churn", args.clone().with("once", 1));
                assert_eq!(wait_child(&mut first, LIMIT), Some(0));
                assert!(group(&r, "g").is_some_and(|g| g.members.is_empty()));
            }
            let mut cmd = common::child_command(ENTRY, "churn", args.clone().with("once", 1));
            cmd.env("TACHYON_FAULT", fault);
            let mut child = common::spawn_retrying(&mut cmd);
            assert_eq!(wait_child(&mut child, LIMIT), None, "{fault}: killed at the point");
            if fault == "groups-drop-swept" {
                assert!(group(&r, "g").is_some_and(|g| g.draining), "left draining");
            }
            assert!(recover_until(&r, || group(&r, "g").is_none()), "{fault}: repaired and dropped");
        }
    }
    for round in 0..8u64 {
        let mut child = spawn(ENTRY, "churn", args.clone().with("once", 0));
        let before = counter(&side, READY).load(Ordering::SeqCst);
        assert!(wait_for(LIMIT, || counter(&side, READY).load(Ordering::SeqCst) > before + round % 4));
        t.send(&[3; 8], Key(0), SHORT).unwrap();
        drop(keep.receive(0, SHORT).unwrap());
        kill(&mut child);
        assert!(recover_until(&r, || group(&r, "g").is_none()), "round {round}: repaired and dropped");
    }
    assert_eq!(free(&r), initial, "no chunk leaked");
    // Every named slot is usable: "keep" and two more.
    let more: Vec<_> = ["x", "y"].iter().map(|n| t.join_group(n).unwrap()).collect();
    assert!(matches!(t.join_group("z"), Err(Error::NoSpace { .. })));
    t.send(&[4; 8], Key(0), SHORT).unwrap();
    for g in &more {
        assert_eq!(&*g.receive(0, SHORT).unwrap(), [4; 8]);
    }
    drop(keep.receive(0, SHORT).unwrap());
    drop(more);
    assert_eq!(free(&r), initial);
}

/// A drop sweeps only its own topic's holds: group words are per slot, and
/// "a" is slot 1 of both topics here. Dropping "a" of `t1` leaves the
/// messages queued for "a" of `t2` (same slot) queued, and they are
/// delivered.
#[test]
fn a_drop_sweeps_only_its_own_topics_holds() {
    let name = unique("lease-topics");
    let _rm = RemoveRegion(name.clone());
    let r = region(&name, Duration::ZERO);
    let cfg = TopicConfig::default().default_group(false);
    let (t1, t2) = (r.create_topic("t1", cfg).unwrap(), r.create_topic("t2", cfg).unwrap());
    let initial = free(&r);
    let (a1, a2) = (t1.join_group("a").unwrap(), t2.join_group("a").unwrap());
    assert_eq!((a1.slot(), a2.slot()), (1, 1));
    for i in 0..3u64 {
        t1.send(&i.to_le_bytes(), Key(0), SHORT).unwrap();
        t2.send(&i.to_le_bytes(), Key(0), SHORT).unwrap();
    }
    drop(a1);
    let gone = || r.inspect().unwrap().topics[0].groups.is_empty();
    assert!(recover_until(&r, gone), "t1's \"a\" dropped");
    assert_eq!(free(&r), initial - 3, "t2's three still held");
    for i in 0..3u64 {
        assert_eq!(&*a2.receive(0, SHORT).unwrap(), i.to_le_bytes());
    }
    assert_eq!(free(&r), initial);
}
