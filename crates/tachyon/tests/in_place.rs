//! Building and reading messages in place without a `Loan` or `Message`
//! value: `Topic::send_with`, `Topic::receive_with`, `Group::receive_with`
//! and their `try_` forms, on topics with and without inline slots.
//!
//! Real processes: a producer process builds every message in place for a
//! consumer process that reads them in place; a publisher SIGKILLed inside
//! its `fill` and a consumer SIGKILLed inside its `f` (in a chunk and in an
//! inline slot) lose nothing but what their topic's delivery allows, and
//! the pool is whole after recovery. A `fill` or `f` that panics publishes
//! nothing or releases its message, and the partition goes on.
#![cfg(not(tachyon_loom))]

mod common;

use common::{spawn, unique, wait_child, wait_for, RemoveRegion, LIMIT};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::time::{Duration, Instant};
use tachyon::bus::{ClassStats, Delivery, Key, Region, RegionConfig, Topic, TopicConfig};
use tachyon::Error;

const ENTRY: &str = "child_entry";
/// The inline slot size of the topics that have slots.
const SLOT: u32 = 128;
const SHORT: Option<Duration> = Some(Duration::from_millis(200));

fn region(name: &str) -> Region {
    Region::create(name, RegionConfig::default().size(8 << 20).ring_arena(2 << 20).max_groups(4)).unwrap()
}

/// Topic "t": one partition of 8 cells, with inline slots of [`SLOT`]
/// bytes if `inline`, at least once if `again`.
fn topic(region: &Region, inline: bool, again: bool) -> Topic {
    let mut cfg = TopicConfig::default().partitions(1).capacity(8);
    if inline {
        cfg = cfg.inline_payload(SLOT);
    }
    if again {
        cfg = cfg.delivery(Delivery::AtLeastOnce);
    }
    region.create_topic("t", cfg).unwrap()
}

fn free(stats: &[ClassStats]) -> usize {
    stats.iter().map(|c| c.free).sum()
}

/// Message `seq`, `len` bytes (at least 8): its number, then a pattern.
fn fill_message(dst: &mut [u8], seq: u64) {
    dst[..8].copy_from_slice(&seq.to_le_bytes());
    for (i, b) in dst.iter_mut().enumerate().skip(8) {
        *b = (seq as usize * 7 + i) as u8;
    }
}

/// The number of a message built by [`fill_message`], if all its bytes are
/// right.
fn check_message(m: &[u8]) -> Option<u64> {
    let seq = u64::from_le_bytes(m.get(..8)?.try_into().ok()?);
    m.iter().enumerate().skip(8).all(|(i, &b)| b == (seq as usize * 7 + i) as u8).then_some(seq)
}

/// The length of message `i` of a stream: every length from 8 to a little
/// past the inline slot, in turn.
fn length(i: u64) -> usize {
    8 + (i as usize * 13) % (SLOT as usize + 40)
}

/// The file a child creates once it is inside its `fill` or `f`.
fn marker(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("{name}.inside"))
}

/// Creates the marker and waits to be killed (bounded: a parent that died
/// does not leave it for ever).
fn stay_inside(name: &str) {
    std::fs::write(marker(name), b"").unwrap();
    std::thread::sleep(LIMIT);
}

#[test]
fn child_entry() {
    let Some((role, args)) = common::role() else { return };
    let name = args.str("name").to_owned();
    let region = Region::open(&name).unwrap();
    let topic = region.topic("t").unwrap();
    match role.as_str() {
        "producer" => {
            let n: u64 = args.get("n");
            for i in 0..n {
                topic.send_with(length(i), Key(0), Some(LIMIT), |m| fill_message(m, i)).unwrap();
            }
        }
        "fill-and-die" => {
            let len: usize = args.get("len");
            topic
                .send_with(len, Key(0), SHORT, |m| {
                    fill_message(m, 99);
                    stay_inside(&name);
                })
                .unwrap();
            std::process::exit(3);
        }
        "read-and-die" => {
            topic
                .receive_with(0, Some(LIMIT), |m| {
                    assert_eq!(check_message(m), Some(0));
                    stay_inside(&name);
                })
                .unwrap();
            std::process::exit(3);
        }
        other => panic!("unknown role {other}"),
    }
}

/// Runs `role` in a child, waits until it is inside its `fill` or `f`, and
/// SIGKILLs it there.
fn kill_inside(name: &str, role: &str, len: usize) {
    let _ = std::fs::remove_file(marker(name));
    let mut child = spawn(ENTRY, role, common::Args::name(name).with("len", len));
    let inside = wait_for(LIMIT, || marker(name).exists() || child.try_wait().unwrap().is_some());
    assert!(inside && marker(name).exists(), "{role}: the child never got inside ({:?})", child.try_wait());
    common::kill(&mut child);
    let _ = std::fs::remove_file(marker(name));
}

/// In one process, on a topic with and without inline slots: messages of
/// every length built in place come out in order with their bytes, read in
/// place and by the other receives; `fill` and `f` return their values;
/// no chunk is lost.
#[test]
fn messages_built_and_read_in_place_keep_their_order_and_bytes() {
    for inline in [false, true] {
        let name = unique("in-place-basic");
        let _rm = RemoveRegion(name.clone());
        let region = region(&name);
        let topic = topic(&region, inline, false);
        let initial = free(&region.pool_stats().unwrap());
        let mut buf = Vec::new();
        for i in 0..200u64 {
            let len = length(i);
            let wrote = topic.send_with(len, Key(0), SHORT, |m| {
                assert_eq!(m.len(), len);
                fill_message(m, i);
                m.len()
            });
            assert_eq!(wrote.unwrap(), len, "inline {inline}: fill's value comes back");
            let seq = match i % 3 {
                0 => topic.receive_with(0, SHORT, |m| (m.len(), check_message(m))).unwrap(),
                1 => topic.try_receive_with(0, |m| (m.len(), check_message(m))).unwrap().expect("queued"),
                _ => {
                    let n = topic.recv_into(0, &mut buf, SHORT).unwrap();
                    (n, check_message(&buf))
                }
            };
            assert_eq!(seq, (len, Some(i)), "inline {inline}, message {i}");
        }
        assert_eq!(topic.try_receive_with(0, |_| unreachable!("empty")).unwrap(), None);
        let info = topic.info();
        assert_eq!((info.published, info.received, info.corrupt), (200, 200, 0), "inline {inline}");
        assert_eq!(free(&region.pool_stats().unwrap()), initial, "inline {inline}");
    }
}

/// A `fill` that panics publishes nothing and its chunk (or its cell)
/// comes back; an `f` that panics releases its message (it counts as
/// received). The panic goes on to the caller, and the partition goes on.
#[test]
fn a_panic_inside_publishes_nothing_or_releases_the_message() {
    for (inline, len) in [(false, 64), (true, 64), (true, SLOT as usize + 1)] {
        let name = unique("in-place-panic");
        let _rm = RemoveRegion(name.clone());
        let region = region(&name);
        let topic = topic(&region, inline, false);
        let initial = free(&region.pool_stats().unwrap());
        let what = format!("inline {inline}, {len} bytes");
        for round in 0..12u64 {
            // A message at the head of the partition, lent to an `f` that
            // panics (from the slot itself on the inline topic).
            topic.send_with(len, Key(0), SHORT, |m| fill_message(m, 2 * round)).unwrap();
            let panicked = catch_unwind(AssertUnwindSafe(|| {
                topic.receive_with(0, SHORT, |m| {
                    assert_eq!(check_message(m), Some(2 * round), "{what}");
                    panic!("f gives up");
                })
            }));
            assert!(panicked.is_err(), "{what}: the panic goes on");
            assert_eq!(free(&region.pool_stats().unwrap()), initial, "{what}: the message was released");
            // A `fill` that panics: nothing published.
            let panicked = catch_unwind(AssertUnwindSafe(|| {
                topic.send_with(len, Key(0), SHORT, |m| {
                    fill_message(m, 1000 + round);
                    panic!("fill gives up");
                })
            }));
            assert!(panicked.is_err(), "{what}: the panic goes on");
            assert_eq!(free(&region.pool_stats().unwrap()), initial, "{what}: the chunk came back");
            topic.send_with(len, Key(0), SHORT, |m| fill_message(m, 2 * round + 1)).unwrap();
            let next = topic.receive_with(0, SHORT, check_message).unwrap();
            assert_eq!(next, Some(2 * round + 1), "{what}: the panicked fill left no message");
            assert_eq!(topic.try_receive_with(0, |m| m.to_vec()).unwrap(), None, "{what}: nothing left");
        }
        let info = topic.info();
        // The ring went round (36 cells taken > 8) past every given-up one.
        assert_eq!((info.published, info.received, info.corrupt), (24, 24, 0), "{what}");
    }
}

/// Without waiting: no chunk free is `PoolExhausted` and `fill` is not
/// called; a full partition is `Full` and the message is dropped, its chunk
/// back in the pool.
#[test]
fn try_send_with_reports_an_empty_pool_and_a_full_partition() {
    let name = unique("in-place-try");
    let _rm = RemoveRegion(name.clone());
    let region = Region::create(&name, RegionConfig::default().size(4 << 20).ring_arena(1 << 20)).unwrap();
    let topic = region.create_topic("t", TopicConfig::default().partitions(1).capacity(4)).unwrap();
    let initial = free(&region.pool_stats().unwrap());
    for i in 0..4u64 {
        topic.try_send_with(100, Key(0), |m| fill_message(m, i)).unwrap();
    }
    let mut filled = false;
    let full = topic.try_send_with(100, Key(0), |m| {
        filled = true;
        fill_message(m, 4)
    });
    assert!(matches!(full, Err(Error::Full { .. })), "{full:?}");
    assert!(filled, "a chunk was free: fill ran, then the partition was full");
    assert_eq!(free(&region.pool_stats().unwrap()), initial - 4, "the dropped message's chunk came back");
    for i in 0..4u64 {
        assert_eq!(topic.try_receive_with(0, check_message).unwrap(), Some(Some(i)));
    }
    // Hold every chunk of the message's class in loans: the pool is empty.
    let mut loans = Vec::new();
    while let Ok(loan) = topic.try_loan(100) {
        loans.push(loan);
    }
    assert!(!loans.is_empty());
    let empty = topic.try_send_with(100, Key(0), |_| unreachable!("no chunk: fill must not run"));
    assert!(matches!(empty, Err(Error::PoolExhausted { .. })), "{empty:?}");
    drop(loans);
    assert_eq!(free(&region.pool_stats().unwrap()), initial);
}

/// A named group lends its own copy of every message; the default group
/// still gets them; a topic without its default group refuses
/// `receive_with` as it refuses `receive`.
#[test]
fn groups_lend_their_messages_in_place() {
    let name = unique("in-place-groups");
    let _rm = RemoveRegion(name.clone());
    let region = region(&name);
    let topic = topic(&region, true, false);
    let initial = free(&region.pool_stats().unwrap());
    let audit = topic.join_group("audit").unwrap();
    for i in 0..5u64 {
        topic.send_with(40, Key(0), SHORT, |m| fill_message(m, i)).unwrap();
    }
    for i in 0..5u64 {
        assert_eq!(audit.receive_with(0, SHORT, check_message).unwrap(), Some(i));
        assert_eq!(topic.receive_with(0, SHORT, check_message).unwrap(), Some(i));
    }
    assert_eq!(audit.try_receive_with(0, |m| m.len()).unwrap(), None);
    drop(audit);
    assert_eq!(free(&region.pool_stats().unwrap()), initial);

    let solo = region.create_topic("solo", TopicConfig::default().default_group(false)).unwrap();
    let refused = solo.receive_with(0, SHORT, |m| m.len());
    assert!(matches!(refused, Err(Error::InvalidArgument { .. })), "{refused:?}");
}

/// A producer process builds 20,000 messages of every length in place; this
/// process reads them in place, in order, each with its bytes; the pool is
/// whole at the end.
#[test]
fn a_producer_process_builds_in_place_for_a_consumer_process() {
    for inline in [false, true] {
        let name = unique("in-place-stream");
        let _rm = RemoveRegion(name.clone());
        let region = region(&name);
        let topic = topic(&region, inline, false);
        let initial = free(&region.pool_stats().unwrap());
        const N: u64 = 20_000;
        let mut child = spawn(ENTRY, "producer", common::Args::name(&name).with("n", N));
        let deadline = Instant::now() + LIMIT;
        let mut next = 0u64;
        while next < N {
            assert!(Instant::now() < deadline, "inline {inline}: received {next} of {N}");
            let got =
                topic.receive_with(0, Some(Duration::from_millis(100)), |m| (m.len(), check_message(m)));
            match got {
                Ok(got) => {
                    assert_eq!(got, (length(next), Some(next)), "inline {inline}, message {next}");
                    next += 1;
                }
                Err(Error::Timeout { .. }) => {}
                Err(e) => panic!("{e}"),
            }
        }
        assert_eq!(wait_child(&mut child, LIMIT), Some(0));
        let info = topic.info();
        assert_eq!((info.published, info.received, info.corrupt), (N, N, 0));
        assert_eq!(free(&region.pool_stats().unwrap()), initial);
    }
}

/// A publisher SIGKILLed inside its `fill` publishes nothing: in a chunk,
/// recovery takes the chunk back; in an inline slot, the next receive
/// repairs the dead claim (a tombstone). The partition goes on.
#[test]
fn a_publisher_killed_inside_fill_publishes_nothing() {
    for (inline, len) in [(false, 64), (true, 64)] {
        let name = unique("in-place-kill-fill");
        let _rm = RemoveRegion(name.clone());
        let region = region(&name);
        let topic = topic(&region, inline, false);
        let initial = free(&region.pool_stats().unwrap());
        kill_inside(&name, "fill-and-die", len);
        topic.send_with(len, Key(0), SHORT, |m| fill_message(m, 1)).unwrap();
        assert_eq!(topic.receive_with(0, Some(LIMIT), check_message).unwrap(), Some(1), "inline {inline}");
        assert_eq!(topic.try_receive_with(0, |m| m.to_vec()).unwrap(), None, "inline {inline}: nothing else");
        region.recover().unwrap();
        for i in 2..12u64 {
            topic.send_with(len, Key(0), SHORT, |m| fill_message(m, i)).unwrap();
            assert_eq!(topic.receive_with(0, SHORT, check_message).unwrap(), Some(i));
        }
        assert_eq!(topic.info().published, 11, "inline {inline}");
        assert_eq!(free(&region.pool_stats().unwrap()), initial, "inline {inline}: the pool is whole");
    }
}

/// A consumer SIGKILLed inside its `f`: on an at-least-once topic the
/// message in its chunk is published again by recovery; a message lent
/// from an inline slot is lost (inline slots are at-most-once), counted.
/// The stream goes on and the pool is whole.
#[test]
fn a_consumer_killed_inside_f_loses_only_what_its_delivery_allows() {
    for inline in [false, true] {
        let name = unique("in-place-kill-read");
        let _rm = RemoveRegion(name.clone());
        let region = region(&name);
        // (At-least-once is refused with inline slots.)
        let topic = topic(&region, inline, !inline);
        let initial = free(&region.pool_stats().unwrap());
        topic.send_with(64, Key(0), SHORT, |m| fill_message(m, 0)).unwrap();
        topic.send_with(64, Key(0), SHORT, |m| fill_message(m, 1)).unwrap();
        kill_inside(&name, "read-and-die", 0);
        region.recover().unwrap();
        let mut got = Vec::new();
        while let Some(seq) = topic.try_receive_with(0, check_message).unwrap() {
            got.push(seq.expect("whole"));
        }
        let info = topic.info();
        if inline {
            assert_eq!(got, [1], "the lent inline message is lost");
            assert_eq!((info.lost, info.received), (1, 1));
        } else {
            // Published again into its partition, behind message 1.
            assert_eq!(got, [1, 0], "delivered again");
            assert_eq!(info.lost, 0);
        }
        for i in 2..12u64 {
            topic.send_with(64, Key(0), SHORT, |m| fill_message(m, i)).unwrap();
            assert_eq!(topic.receive_with(0, SHORT, check_message).unwrap(), Some(i));
        }
        assert_eq!(free(&region.pool_stats().unwrap()), initial, "inline {inline}: the pool is whole");
    }
}
