//! Writers that sleep on a full ring, across real processes: a sleeping
//! writer is woken once its readers have freed a gap, not at every item
//! they free (`Ring::wake_writers`), and the wake-ups skip sleepers that
//! were woken already (`sync/wait.rs`, "Armed words"). What must hold:
//! every item gets through exactly once and in order whatever the readers'
//! pace, and a reader that frees less than the gap and stops leaves its
//! writer blocked no longer than the writer's own slice.
#![cfg(not(tachyon_loom))]

mod common;

use common::{counter, spawn, unique, wait_child, wait_for, Args, RemoveRegion, LIMIT};
use std::sync::atomic::Ordering;
use std::time::Duration;
use tachyon::bus::{Key, Region, RegionConfig, TopicConfig};
use tachyon::sync::WaitPolicy;
use tachyon::{CircularBuffer, Segment};

const ENTRY: &str = "child_entry";
const LONG: Option<Duration> = Some(Duration::from_secs(20));
/// Cells of the rings here: a gap of 32 (an eighth).
const CAPACITY: u32 = 256;
/// Items of a stream.
const ITEMS: u64 = 20_000;

fn policy_of(args: &Args) -> WaitPolicy {
    match args.str("policy") {
        "futex" => WaitPolicy::Futex,
        _ => WaitPolicy::Hybrid,
    }
}

/// Item `i` of a stream: its number, then a length that varies with it.
fn item(i: u64) -> Vec<u8> {
    let mut v = i.to_le_bytes().to_vec();
    v.resize(8 + (i as usize * 29) % 600, (i % 251) as u8);
    v
}

#[test]
fn child_entry() {
    let Some((role, args)) = common::role() else { return };
    let side = Segment::open(args.str("side")).unwrap();
    match role.as_str() {
        // Sends ITEMS items as fast as the topic takes them, the copy path
        // and building in place by turns.
        "topic-writer" => {
            let region = Region::open(args.str("name")).unwrap();
            let topic = region.topic("t").unwrap();
            for i in 0..ITEMS {
                let m = item(i);
                if i % 2 == 0 {
                    topic.send(&m, Key(0), LONG).unwrap();
                } else {
                    topic.send_with(m.len(), Key(0), LONG, |buf| buf.copy_from_slice(&m)).unwrap();
                }
            }
            counter(&side, 0).store(1, Ordering::SeqCst);
        }
        "ring-writer" => {
            let ring =
                CircularBuffer::builder(args.str("name")).wait_policy(policy_of(&args)).open().unwrap();
            for i in 0..ITEMS {
                ring.write(&item(i), LONG).unwrap();
            }
            counter(&side, 0).store(1, Ordering::SeqCst);
        }
        // Fills the ring, says so, then writes one more item (which waits
        // for room) and says that it got through.
        "topic-filler" => {
            let region = Region::open(args.str("name")).unwrap();
            let topic = region.topic("t").unwrap();
            for i in 0..u64::from(CAPACITY) {
                topic.send(&item(i), Key(0), Some(Duration::ZERO)).unwrap();
            }
            counter(&side, 1).store(1, Ordering::SeqCst);
            topic.send(&item(u64::from(CAPACITY)), Key(0), LONG).unwrap();
            counter(&side, 0).store(1, Ordering::SeqCst);
        }
        "ring-filler" => {
            let ring =
                CircularBuffer::builder(args.str("name")).wait_policy(policy_of(&args)).open().unwrap();
            for i in 0..u64::from(CAPACITY) {
                ring.write(&item(i), Some(Duration::ZERO)).unwrap();
            }
            counter(&side, 1).store(1, Ordering::SeqCst);
            ring.write(&item(u64::from(CAPACITY)), LONG).unwrap();
            counter(&side, 0).store(1, Ordering::SeqCst);
        }
        other => panic!("unknown role {other}"),
    }
}

/// A reader's pace: bursts of 1 to 40 items (less than the gap, and more),
/// some followed by a pause, so that the writer sleeps on a full ring
/// with its readers stopped short of its mark, past it, and in between.
struct Pace(u64);

impl Pace {
    fn after_item(&mut self) {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let r = self.0 >> 33;
        if r % 40 == 0 {
            std::thread::sleep(Duration::from_micros(200 + r % 800));
        }
    }
}

fn side(tag: &str) -> (String, Segment) {
    let name = unique(tag);
    let seg = Segment::create(&name, 64).unwrap();
    (name, seg)
}

fn topic_region(name: &str, policy: WaitPolicy) -> Region {
    let region = Region::create(name, RegionConfig::default().size(16 << 20).ring_arena(1 << 20)).unwrap();
    region.create_topic("t", TopicConfig::default().capacity(CAPACITY).wait(policy)).unwrap();
    region
}

/// A `CircularBuffer` of `CAPACITY` nodes of 1 KiB.
fn ring(name: &str, policy: WaitPolicy) -> CircularBuffer {
    CircularBuffer::builder(name)
        .node_count(CAPACITY as usize)
        .node_size(1024)
        .wait_policy(policy)
        .create()
        .unwrap()
}

/// A writer process outruns a reader that takes items in bursts with
/// pauses between them: every item arrives, once, in order, for futex
/// and hybrid waits, on a topic and on a `CircularBuffer`.
#[test]
fn a_writer_that_outruns_its_reader_gets_every_item_through_in_order() {
    for policy in [WaitPolicy::Futex, WaitPolicy::Hybrid] {
        let pname = if policy == WaitPolicy::Futex { "futex" } else { "hybrid" };
        let (side_name, side_seg) = side("frw-side");
        let name = unique("frw-topic");
        let region = topic_region(&name, policy);
        let _rm = RemoveRegion(name.clone());
        let topic = region.topic("t").unwrap();
        let args = Args::name(&name).with("side", &side_name).with("policy", pname);
        let mut child = spawn(ENTRY, "topic-writer", args);
        let mut pace = Pace(7);
        let mut buf = Vec::new();
        for i in 0..ITEMS {
            topic.recv_into(0, &mut buf, LONG).unwrap_or_else(|e| panic!("{pname} topic, item {i}: {e}"));
            assert_eq!(buf, item(i), "{pname} topic: item {i}");
            pace.after_item();
        }
        assert_eq!(wait_child(&mut child, LIMIT), Some(0), "{pname} topic writer");
        assert_eq!(counter(&side_seg, 0).load(Ordering::SeqCst), 1);
        assert!(topic.receive(0, Some(Duration::ZERO)).is_err(), "nothing more");

        let (side_name, side_seg) = side("frw-side");
        let name = unique("frw-ring");
        let ring = ring(&name, policy);
        let args = Args::name(&name).with("side", &side_name).with("policy", pname);
        let mut child = spawn(ENTRY, "ring-writer", args);
        let mut buf = [0u8; 1024];
        for i in 0..ITEMS {
            let n = ring.read(&mut buf, LONG).unwrap_or_else(|e| panic!("{pname} ring, item {i}: {e}"));
            assert_eq!(&buf[..n], &item(i)[..], "{pname} ring: item {i}");
            pace.after_item();
        }
        assert_eq!(wait_child(&mut child, LIMIT), Some(0), "{pname} ring writer");
        assert_eq!(counter(&side_seg, 0).load(Ordering::SeqCst), 1);
        assert!(ring.is_empty());
    }
}

/// A writer sleeps on a full ring; its reader frees one item, far less
/// than the gap the writer asked to be woken at, and stops. The writer's
/// write still goes through (its own slice ends the sleep and it looks at
/// the ring again): a reader that stops short of the mark strands nobody.
/// A writer woken by its readers alone would sleep until `LONG` here.
#[test]
fn a_reader_that_stops_short_of_the_mark_strands_no_writer() {
    for policy in [WaitPolicy::Futex, WaitPolicy::Hybrid] {
        let pname = if policy == WaitPolicy::Futex { "futex" } else { "hybrid" };
        for kind in ["topic", "ring"] {
            let (side_name, side_seg) = side("frs-side");
            let name = unique("frs");
            let args = Args::name(&name).with("side", &side_name).with("policy", pname);
            let mut buf = vec![0u8; 1024];
            let (mut child, mut read_one): (_, Box<dyn FnMut() -> usize>) = if kind == "topic" {
                let region = topic_region(&name, policy);
                let child = spawn(ENTRY, "topic-filler", args);
                let topic = region.topic("t").unwrap();
                let _rm = RemoveRegion(name.clone());
                (
                    child,
                    Box::new(move || {
                        let _keep = (&region, &_rm);
                        let mut v = Vec::new();
                        topic.recv_into(0, &mut v, LONG).unwrap();
                        buf[..v.len()].copy_from_slice(&v);
                        v.len()
                    }),
                )
            } else {
                let ring = ring(&name, policy);
                let child = spawn(ENTRY, "ring-filler", args);
                (child, Box::new(move || ring.read(&mut buf, LONG).unwrap()))
            };
            assert!(
                wait_for(LIMIT, || counter(&side_seg, 1).load(Ordering::SeqCst) == 1),
                "{pname} {kind}: filled"
            );
            // Let the writer go to sleep on the full ring (if it has not,
            // the test only covers less, never fails).
            std::thread::sleep(Duration::from_millis(30));
            assert_eq!(counter(&side_seg, 0).load(Ordering::SeqCst), 0, "{pname} {kind}: the ring was full");
            assert_eq!(read_one(), item(0).len());
            assert!(
                wait_for(LIMIT, || counter(&side_seg, 0).load(Ordering::SeqCst) == 1),
                "{pname} {kind}: the writer stayed blocked with a free cell"
            );
            assert_eq!(wait_child(&mut child, LIMIT), Some(0), "{pname} {kind} filler");
        }
    }
}
