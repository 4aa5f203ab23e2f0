//! Consumer groups' crash windows (docs/groups-design.md, "Crash windows
//! and who repairs them"), hit exactly with real processes: a child
//! SIGKILLs itself at a named point inside the library (`TACHYON_FAULT`,
//! debug builds only; see `platform/fault.rs`), or is SIGKILLed holding a
//! group's message; then recovery runs in the parent. Each test checks that
//! no chunk is missing or freed twice (every chunk of the pool can be
//! loaned once, and only once), that the group that lost a member gets the
//! message again on an at-least-once topic or counts it lost on an
//! at-most-once one, and that the other group gets it exactly once.
#![cfg(all(not(tachyon_loom), debug_assertions))]

mod common;

use common::{child_command, unique, wait_for, RemoveRegion, LIMIT};
use std::collections::HashSet;
use std::time::Duration;
use tachyon::bus::{Delivery, Group, Key, Recovered, Region, RegionConfig, Topic, TopicConfig};
use tachyon::Error;

const ENTRY: &str = "child_entry";
const SHORT: Option<Duration> = Some(Duration::from_millis(200));
const MSG: &[u8] = b"the only message";

/// A region with two named groups, "a" and "b", on topic "t" (no default
/// group), and the pool's state before anything was published.
struct Setup {
    name: String,
    region: Region,
    topic: Topic,
    a: Group,
    b: Group,
    initial: [tachyon::bus::ClassStats; 8],
    _rm: RemoveRegion,
}

fn setup(tag: &str, delivery: Delivery) -> Setup {
    setup_with(tag, delivery, false)
}

/// [`setup`], with the topic's default group (slot 0, read by
/// `Topic::receive`) ACTIVE too if `default_group`.
fn setup_with(tag: &str, delivery: Delivery, default_group: bool) -> Setup {
    let name = unique(tag);
    let rm = RemoveRegion(name.clone());
    let cfg = RegionConfig::default().size(4 << 20).ring_arena(1 << 20).max_groups(3);
    let region = Region::create(&name, cfg).unwrap();
    let topic = region
        .create_topic(
            "t",
            TopicConfig::default().partitions(1).capacity(8).delivery(delivery).default_group(default_group),
        )
        .unwrap();
    let a = topic.join_group("a").unwrap();
    let b = topic.join_group("b").unwrap();
    let initial = region.pool_stats().unwrap();
    Setup { name, region, topic, a, b, initial, _rm: rm }
}

#[test]
fn child_entry() {
    let Some((role, args)) = common::role() else { return };
    let region = Region::open(args.str("name")).unwrap();
    let topic = region.topic("t").unwrap();
    match role.as_str() {
        "publish" => topic.send(MSG, Key(0), SHORT).unwrap(),
        // The default group's receive (slot 0), then the release.
        "receive-default" => drop(topic.receive(0, SHORT).unwrap()),
        // Receives in its group and releases (dropping the message).
        "receive" => drop(topic.join_group(args.str("group")).unwrap().receive(0, SHORT).unwrap()),
        // Receives in its group and holds the message until killed.
        "hold" => {
            let _held = topic.join_group(args.str("group")).unwrap().receive(0, SHORT).unwrap();
            std::thread::sleep(LIMIT);
        }
        "recover" => drop(region.recover().unwrap()),
        other => panic!("unknown role {other}"),
    }
    // Reaching here means the fault point was not hit.
    std::process::exit(3);
}

fn wait_dead(child: &mut std::process::Child, what: &str) {
    common::wait_killed(child, what);
}

/// Runs `role` (in `group`) in a child that must die by SIGKILL at `point`.
fn die_at(s: &Setup, role: &str, group: &str, point: &str) {
    let args = common::Args::name(&s.name).with("group", group);
    let mut child = child_command(ENTRY, role, args).env("TACHYON_FAULT", point).spawn().unwrap();
    wait_dead(&mut child, &format!("{role} at {point}"));
}

/// A child of group `group` receives the message and is SIGKILLed holding it.
fn kill_holding(s: &Setup, group: &str) {
    let received = s.topic.info().received;
    let mut child =
        child_command(ENTRY, "hold", common::Args::name(&s.name).with("group", group)).spawn().unwrap();
    let got = wait_for(LIMIT, || s.topic.info().received > received);
    child.kill().unwrap();
    wait_dead(&mut child, "hold");
    assert!(got, "the child received the message");
}

/// Everything `group` receives now (waiting a little for each: a dead
/// writer's claim in the way is repaired by the waiting receive). Stale
/// descriptors (counted corrupt) are skipped.
fn drain(group: &Group) -> Vec<Vec<u8>> {
    let mut got = vec![];
    loop {
        match group.receive(0, Some(Duration::from_millis(300))) {
            Ok(m) => got.push(m.to_vec()),
            Err(Error::Timeout { .. }) => return got,
            Err(Error::Corrupt { .. }) => {}
            Err(e) => panic!("group {}: {e}", group.name()),
        }
    }
}

/// Every chunk is back in the pool, exactly once: the free counts are the
/// initial ones, and every chunk can be loaned once (a chunk freed twice
/// would be handed out twice, or its list found damaged).
fn check_pool(s: &Setup, what: &str) {
    assert_eq!(s.region.pool_stats().unwrap(), s.initial, "{what}: every chunk back in the pool");
    let total: usize = s.initial.iter().map(|c| c.chunks).sum();
    let mut loans = Vec::with_capacity(total);
    let mut seen = HashSet::new();
    // Class by class (a loan takes from this process's cache of its own
    // class only, then from the free lists of its class and larger ones).
    for class in s.initial.iter().filter(|c| c.chunks > 0) {
        loop {
            match s.topic.try_loan(class.chunk_size) {
                Ok(l) => {
                    assert!(seen.insert(l.as_ptr() as usize), "{what}: a chunk handed out twice");
                    loans.push(l);
                }
                Err(Error::PoolExhausted { .. }) => break,
                Err(e) => panic!("{what}: {e}"),
            }
        }
    }
    assert_eq!(loans.len(), total, "{what}: every chunk loaned once");
    drop(loans);
    assert_eq!(s.region.pool_stats().unwrap(), s.initial, "{what}: every chunk back after the loans");
}

/// What recovery did to groups: (lost, redelivered, freed).
fn groups_of(r: &Recovered) -> (usize, usize, usize) {
    (r.group_lost, r.group_redelivered, r.group_freed)
}

/// Group "a"'s member dies with the message (at `point`, or SIGKILLed
/// holding it: `point` None); group "b" has not received it yet.
fn member_dies(point: Option<&str>, delivery: Delivery) {
    let what = format!("{point:?} {delivery:?}");
    let s = setup("gc-member", delivery);
    s.topic.send(MSG, Key(0), SHORT).unwrap();
    match point {
        Some(p) => die_at(&s, "receive", "a", p),
        None => kill_holding(&s, "a"),
    }
    let r = s.region.recover().unwrap();
    match delivery {
        Delivery::AtLeastOnce => {
            assert_eq!(groups_of(&r), (0, 1, 0), "{what}: redelivered into a: {r:?}");
            assert_eq!(drain(&s.a), [MSG], "{what}: a gets it again, once");
            assert_eq!(s.topic.info().lost, 0);
        }
        Delivery::AtMostOnce => {
            assert_eq!(groups_of(&r), (1, 0, 0), "{what}: lost to a: {r:?}");
            assert!(drain(&s.a).is_empty(), "{what}: a does not get it again");
            assert_eq!(s.topic.info().lost, 1);
        }
    }
    assert_eq!(r.slots, 1, "{what}: the dead member's slot is freed");
    assert_eq!(drain(&s.b), [MSG], "{what}: b gets it once, whatever became of a's");
    assert_eq!(s.region.recover().unwrap(), Recovered::default(), "{what}: nothing left to do");
    check_pool(&s, &what);
}

#[test]
fn a_member_dead_after_its_claim_before_its_take_is_adopted() {
    member_dies(Some("receive-claimed"), Delivery::AtLeastOnce);
    member_dies(Some("receive-claimed"), Delivery::AtMostOnce);
}

#[test]
fn a_member_dead_after_its_take_before_freeing_the_cell() {
    member_dies(Some("receive-held"), Delivery::AtLeastOnce);
    member_dies(Some("receive-held"), Delivery::AtMostOnce);
}

#[test]
fn a_member_dead_in_its_release_before_ending_its_hold() {
    member_dies(Some("groups-release-read"), Delivery::AtLeastOnce);
    member_dies(Some("groups-release-read"), Delivery::AtMostOnce);
}

#[test]
fn a_member_killed_holding_a_group_message() {
    member_dies(None, Delivery::AtLeastOnce);
    member_dies(None, Delivery::AtMostOnce);
}

/// A releaser of group "a" dies between its two CASes (its group word
/// FREE, the main word still SHARED). If "b" still holds the message, b's
/// release frees it; if b released first, only recovery's sweep of SHARED
/// chunks can free it.
#[test]
fn a_releaser_dead_between_its_two_cases() {
    for b_first in [false, true] {
        let s = setup("gc-release", Delivery::AtLeastOnce);
        s.topic.send(MSG, Key(0), SHORT).unwrap();
        if b_first {
            assert_eq!(&*s.b.receive(0, SHORT).unwrap(), MSG);
        }
        die_at(&s, "receive", "a", "groups-hold-ended");
        let r = s.region.recover().unwrap();
        assert_eq!(groups_of(&r), (0, 0, usize::from(b_first)), "b first: {b_first}: {r:?}");
        if !b_first {
            assert_eq!(drain(&s.b), [MSG]);
        }
        assert!(drain(&s.a).is_empty(), "a released it: not delivered again");
        assert_eq!(s.topic.info().lost, 0);
        check_pool(&s, &format!("b first: {b_first}"));
    }
}

/// The last releaser dies after taking the main word (LOANED by it): an
/// ordinary dead loan, reclaimed.
#[test]
fn a_last_releaser_dead_after_taking_the_main_word() {
    let s = setup("gc-last", Delivery::AtLeastOnce);
    s.topic.send(MSG, Key(0), SHORT).unwrap();
    assert_eq!(&*s.b.receive(0, SHORT).unwrap(), MSG);
    die_at(&s, "receive", "a", "groups-last-taken");
    let r = s.region.recover().unwrap();
    assert_eq!((r.loans, groups_of(&r)), (1, (0, 0, 0)), "{r:?}");
    assert!(drain(&s.a).is_empty() && drain(&s.b).is_empty());
    check_pool(&s, "last taken");
}

/// A publisher dies before its commit point, after claiming the groups'
/// cells (and, at `groups-publish-prepared`, after setting the group
/// words): nothing is published, the loan is reclaimed with its group words
/// cleared, and the chunk publishes again (a group word left set would fail
/// that publication).
#[test]
fn a_publisher_dead_before_its_commit_point_publishes_nothing() {
    for point in ["groups-publish-claimed", "groups-publish-prepared"] {
        let s = setup("gc-pub-before", Delivery::AtLeastOnce);
        die_at(&s, "publish", "-", point);
        let r = s.region.recover().unwrap();
        assert_eq!(r.loans + r.unpublished, 1, "{point}: the loan reclaimed: {r:?}");
        assert_eq!(groups_of(&r), (0, 0, 0), "{point}");
        assert!(drain(&s.a).is_empty() && drain(&s.b).is_empty(), "{point}: nothing published");
        assert_eq!(s.region.pool_stats().unwrap(), s.initial, "{point}");
        // The pool hands the reclaimed chunk out first (the last pushed; this
        // process has loaned nothing yet, so its cache is empty).
        for i in 0..4u8 {
            s.topic.send(&[i], Key(0), SHORT).unwrap_or_else(|e| panic!("{point}: publish {i}: {e}"));
        }
        let all: Vec<Vec<u8>> = (0..4).map(|i| vec![i]).collect();
        assert_eq!((drain(&s.a), drain(&s.b)), (all.clone(), all), "{point}");
        check_pool(&s, point);
    }
}

/// A publisher dies after its commit point (SHARED), before committing any
/// group's cell or after committing group "a"'s. At least once, recovery
/// completes the publication (the groups not committed to get it, at the
/// back of their rings); each group gets the message exactly once. At most
/// once, the groups not committed to lose it (delivering it now could put
/// it behind later messages of its key; it was never acknowledged): "a"
/// gets it once if its cell was committed, "b" never.
#[test]
fn a_publisher_dead_after_its_commit_point() {
    for delivery in [Delivery::AtMostOnce, Delivery::AtLeastOnce] {
        for (point, missing) in [("groups-publish-shared", 2), ("groups-publish-committed", 1)] {
            let what = format!("{point} {delivery:?}");
            let s = setup("gc-pub-after", delivery);
            die_at(&s, "publish", "-", point);
            let r = s.region.recover().unwrap();
            assert_eq!((r.loans, r.unpublished), (0, 0), "{what}");
            if delivery == Delivery::AtLeastOnce {
                assert_eq!(groups_of(&r), (0, missing, 0), "{what}: {r:?}");
                assert_eq!(drain(&s.a), [MSG], "{what}: a once");
                assert_eq!(drain(&s.b), [MSG], "{what}: b once");
                assert_eq!(s.topic.info().lost, 0);
            } else {
                let freed = usize::from(missing == 2);
                assert_eq!(groups_of(&r), (missing, 0, freed), "{what}: {r:?}");
                let a: &[&[u8]] = if missing == 1 { &[MSG] } else { &[] };
                assert_eq!(drain(&s.a), a, "{what}: a once if committed to");
                assert!(drain(&s.b).is_empty(), "{what}: b never");
                assert_eq!(s.topic.info().lost, missing as u64);
            }
            assert_eq!(s.region.recover().unwrap(), Recovered::default(), "{what}");
            check_pool(&s, &what);
        }
    }
}

/// A recoverer dies in the middle of redelivering a dead member's message
/// (its group word QUEUED by the recoverer, the cell claimed, nothing
/// committed): the next recovery redelivers it; "a" gets it once more, "b"
/// once.
#[test]
fn a_recoverer_dead_in_the_middle_of_a_group_redelivery() {
    let s = setup("gc-redeliver", Delivery::AtLeastOnce);
    s.topic.send(MSG, Key(0), SHORT).unwrap();
    kill_holding(&s, "a");
    // Its open runs recovery, which dies redelivering.
    die_at(&s, "recover", "-", "groups-redeliver-queued");
    let r = s.region.recover().unwrap();
    assert_eq!(groups_of(&r), (0, 1, 0), "{r:?}");
    assert_eq!(drain(&s.a), [MSG], "a gets it again, once");
    assert_eq!(drain(&s.b), [MSG], "b once");
    assert_eq!(s.topic.info().lost, 0);
    check_pool(&s, "redelivery");
}

/// Recovery touches only what the dead held: while group "b"'s member (this
/// process) holds the message, group "a"'s member is killed holding it.
/// At most once, a's hold is ended (lost to a) but the chunk stays b's
/// until b releases; at least once, it goes to a again and b's hold is
/// untouched. The chunk is freed once, by the last release.
#[test]
fn a_live_members_hold_is_left_alone() {
    for delivery in [Delivery::AtMostOnce, Delivery::AtLeastOnce] {
        let what = format!("{delivery:?}");
        let s = setup("gc-live", delivery);
        s.topic.send(MSG, Key(0), SHORT).unwrap();
        let held = s.b.receive(0, SHORT).unwrap();
        kill_holding(&s, "a");
        let r = s.region.recover().unwrap();
        let again = usize::from(delivery == Delivery::AtLeastOnce);
        assert_eq!(groups_of(&r), (1 - again, again, 0), "{what}: {r:?}");
        assert_ne!(s.region.pool_stats().unwrap(), s.initial, "{what}: b still holds it");
        assert_eq!(s.region.recover().unwrap(), Recovered::default(), "{what}");
        assert_eq!(&*held, MSG, "{what}: b's view is intact");
        if again == 1 {
            assert_eq!(drain(&s.a), [MSG], "{what}");
        }
        drop(held);
        assert!(drain(&s.b).is_empty(), "{what}: b once");
        check_pool(&s, &what);
    }
}

/// The default group (slot 0) of a topic that named groups read too: its
/// publications are shared, and its consumer's death is recovered through
/// slot 0's group word, like any group's (the claim adopted, the hold lost
/// or published again into slot 0's ring); the named groups get the
/// message once.
#[test]
fn the_default_groups_dead_consumer_is_recovered_through_its_group_word() {
    for delivery in [Delivery::AtMostOnce, Delivery::AtLeastOnce] {
        for point in ["receive-claimed", "receive-held"] {
            let what = format!("{point} {delivery:?}");
            let s = setup_with("gc-default", delivery, true);
            s.topic.send(MSG, Key(0), SHORT).unwrap();
            die_at(&s, "receive-default", "-", point);
            let r = s.region.recover().unwrap();
            let again = usize::from(delivery == Delivery::AtLeastOnce);
            assert_eq!(groups_of(&r), (1 - again, again, 0), "{what}: {r:?}");
            let mut got = vec![];
            while let Ok(m) = s.topic.receive(0, Some(Duration::from_millis(300))) {
                got.push(m.to_vec());
            }
            assert_eq!(got.len(), again, "{what}: the default group gets it again or not");
            assert_eq!(drain(&s.a), [MSG], "{what}: a once");
            assert_eq!(drain(&s.b), [MSG], "{what}: b once");
            check_pool(&s, &what);
        }
    }
}
