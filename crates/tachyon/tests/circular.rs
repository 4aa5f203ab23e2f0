//! CircularBuffer across real processes: API edges, MPMC exactly-once with
//! several writer and reader processes, and SIGKILLed claimants; each of
//! the last two also for a ring with light hand-overs.
#![cfg(not(tachyon_loom))]

mod common;

use common::{counter, kill, spawn, unique, wait_child, wait_for, Args, LIMIT};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tachyon::sync::WaitPolicy;
use tachyon::{CircularBuffer, Error, Segment};

const ENTRY: &str = "child_entry";
const SHORT: Option<Duration> = Some(Duration::from_millis(20));
const LONG: Option<Duration> = Some(Duration::from_secs(20));

/// Items moved in the MPMC test, per writer process.
const PER_WRITER: u64 = 50_000;
const WRITERS: u64 = 2;
const READERS: usize = 2;

/// An item of the MPMC test: writer id, sequence number, checksum.
fn item(writer: u64, seq: u64) -> [u64; 3] {
    [writer, seq, (writer << 40 ^ seq).wrapping_mul(0x9E37_79B9_7F4A_7C15)]
}

/// The side segment of the MPMC test: [received, duplicates, bad, order
/// violations, bitmap of (writer, seq)...].
fn results_size() -> usize {
    32 + (WRITERS * PER_WRITER).div_ceil(64) as usize * 8
}

#[test]
fn child_entry() {
    let Some((role, args)) = common::role() else { return };
    let name = args.str("name");
    match role.as_str() {
        "writer" => {
            let ring = open_as_told(&args);
            let id: u64 = args.get("writer");
            for seq in 0..PER_WRITER {
                ring.write_slice(&item(id, seq), LONG).unwrap();
            }
        }
        "reader" => {
            let ring = open_as_told(&args);
            let res = Segment::open(args.str("side")).unwrap();
            let total = WRITERS * PER_WRITER;
            let mut last = vec![None::<u64>; WRITERS as usize];
            loop {
                let mut got = [0u64; 3];
                match ring.read_slice(&mut got, Some(Duration::from_millis(50))) {
                    Ok(3) => {}
                    Ok(_) => {
                        counter(&res, 2).fetch_add(1, Ordering::SeqCst);
                        continue;
                    }
                    Err(Error::Timeout { .. }) => {
                        if counter(&res, 0).load(Ordering::SeqCst) >= total {
                            break;
                        }
                        continue;
                    }
                    Err(e) => panic!("read: {e}"),
                }
                let [w, seq, _] = got;
                if w >= WRITERS || seq >= PER_WRITER || got != item(w, seq) {
                    counter(&res, 2).fetch_add(1, Ordering::SeqCst);
                    continue;
                }
                // Per-writer order, as this reader sees it.
                if last[w as usize].is_some_and(|l| l >= seq) {
                    counter(&res, 3).fetch_add(1, Ordering::SeqCst);
                }
                last[w as usize] = Some(seq);
                let bit = w * PER_WRITER + seq;
                let word = res.get::<AtomicU64>(32 + (bit / 64) as usize * 8).unwrap();
                if word.fetch_or(1 << (bit % 64), Ordering::SeqCst) & (1 << (bit % 64)) != 0 {
                    counter(&res, 1).fetch_add(1, Ordering::SeqCst);
                }
                counter(&res, 0).fetch_add(1, Ordering::SeqCst);
            }
        }
        // Writes items 1 to `items` at once, then dies in the middle of
        // the next (a stream killed mid-item).
        "stream-then-die" => {
            let ring = CircularBuffer::open(name).unwrap();
            let flag = Segment::open(args.str("side")).unwrap();
            for i in 1..=args.get::<u64>("items") {
                ring.write_value(&i, LONG).unwrap();
            }
            ring.write_with(8, None, |node| {
                node.copy_from_slice(&666u64.to_le_bytes());
                counter(&flag, 0).store(1, Ordering::SeqCst);
                std::thread::sleep(LIMIT); // killed here, holding the node
            })
            .unwrap();
        }
        "die-writing" => {
            let ring = CircularBuffer::open(name).unwrap();
            let flag = Segment::open(args.str("side")).unwrap();
            ring.write_with(8, None, |node| {
                node.copy_from_slice(&666u64.to_le_bytes());
                counter(&flag, 0).store(1, Ordering::SeqCst);
                std::thread::sleep(LIMIT); // killed here, holding the node
            })
            .unwrap();
        }
        // Killed inside its light hand-over, between the look at its claim
        // and the store (`TACHYON_FAULT=light-handover-looked`).
        "write-light" => {
            let ring = CircularBuffer::open(name).unwrap();
            ring.write(&666u64.to_le_bytes(), SHORT).unwrap();
        }
        "read-light" => {
            let ring = CircularBuffer::open(name).unwrap();
            let _ = ring.read_value::<u64>(SHORT);
        }
        "die-reading" => {
            let ring = CircularBuffer::open(name).unwrap();
            let flag = Segment::open(args.str("side")).unwrap();
            ring.read_with(None, |_| {
                counter(&flag, 0).store(1, Ordering::SeqCst);
                std::thread::sleep(LIMIT); // killed here, holding the node
            })
            .unwrap();
        }
        other => panic!("unknown role {other}"),
    }
    std::process::exit(0);
}

/// The ring of a child, opened with the wait policy its `policy` argument
/// names (`futex`: every wait sleeps at once, so that a light ring's
/// sleepers run their barrier at every wait; else the default).
fn open_as_told(args: &Args) -> CircularBuffer {
    let policy = if args.str("policy") == "futex" { WaitPolicy::Futex } else { WaitPolicy::default() };
    CircularBuffer::builder(args.str("name")).wait_policy(policy).open().unwrap()
}

/// A ring of `nodes` nodes of `size` bytes, with light hand-overs or not.
fn ring(name: &str, nodes: usize, size: usize, light: bool) -> CircularBuffer {
    let ring = CircularBuffer::builder(name)
        .node_count(nodes)
        .node_size(size)
        .light_handovers(light)
        .create()
        .unwrap();
    assert_eq!(ring.light_handovers(), light);
    ring
}

#[test]
fn geometry_and_argument_errors() {
    let name = unique("ring-args");
    assert!(matches!(CircularBuffer::open(&name), Err(Error::NotFound { .. })));
    assert!(matches!(CircularBuffer::create(&name, 1, 64), Err(Error::InvalidArgument { .. })));
    assert!(matches!(CircularBuffer::create(&name, 4, 0), Err(Error::InvalidArgument { .. })));
    let ring = CircularBuffer::create(&name, 3, 100).unwrap();
    assert!(matches!(CircularBuffer::create(&name, 3, 100), Err(Error::AlreadyExists { .. })));
    let peer = CircularBuffer::open(&name).unwrap();
    assert_eq!((peer.node_count(), peer.node_size(), peer.capacity()), (3, 100, 3));
    // Another kind of segment of that name is not a ring.
    let raw = unique("ring-raw");
    let _seg = Segment::create(&raw, 4096).unwrap();
    assert!(matches!(CircularBuffer::open(&raw), Err(Error::KindMismatch { .. })));
    drop(ring);
}

#[test]
fn item_sizes_and_timeouts() {
    let ring = CircularBuffer::create(&unique("ring-sizes"), 4, 100).unwrap();
    let mut buf = [0u8; 100];
    // Empty ring: a timeout, distinct from an empty item.
    assert!(matches!(ring.read(&mut buf, SHORT), Err(Error::Timeout { .. })));
    ring.write(&[], SHORT).unwrap();
    assert_eq!(ring.read(&mut buf, SHORT).unwrap(), 0);
    ring.write(&[7], SHORT).unwrap();
    assert_eq!(ring.read(&mut buf, SHORT).unwrap(), 1);
    assert_eq!(buf[0], 7);
    let full = [9u8; 100];
    ring.write(&full, SHORT).unwrap();
    assert_eq!(ring.read(&mut buf, SHORT).unwrap(), 100);
    assert_eq!(buf, full);
    assert!(matches!(ring.write(&[0; 101], SHORT), Err(Error::MessageTooLarge { size: 101, max: 100, .. })));
    // A buffer too small for the next item: an error, and the item stays.
    ring.write(b"twelve bytes", SHORT).unwrap();
    let mut small = [0u8; 4];
    assert!(matches!(ring.read(&mut small, SHORT), Err(Error::BufferTooSmall { item: 12, buffer: 4 })));
    assert_eq!(ring.read(&mut buf, SHORT).unwrap(), 12);
    // Capacity is exactly node_count; then writers time out.
    for i in 0..4u8 {
        ring.write(&[i], Some(Duration::ZERO)).unwrap();
    }
    assert_eq!(ring.len(), 4);
    assert!(matches!(ring.write(&[4], SHORT), Err(Error::Timeout { .. })));
    for i in 0..4u8 {
        assert_eq!(ring.read(&mut buf, SHORT).unwrap(), 1);
        assert_eq!(buf[0], i, "FIFO with one writer and one reader");
    }
    assert!(ring.is_empty());
}

#[test]
fn typed_helpers() {
    let ring = CircularBuffer::create(&unique("ring-typed"), 4, 64).unwrap();
    ring.write_value(&0x1234_5678u32, SHORT).unwrap();
    assert_eq!(ring.read_value::<u32>(SHORT).unwrap(), 0x1234_5678);
    ring.write_slice(&[1.5f64, 2.5], SHORT).unwrap();
    let mut out = [0f64; 8];
    assert_eq!(ring.read_slice(&mut out, SHORT).unwrap(), 2);
    assert_eq!(&out[..2], &[1.5, 2.5]);
    ring.write(&[1, 2, 3], SHORT).unwrap();
    assert!(matches!(ring.read_value::<u32>(SHORT), Err(Error::InvalidArgument { .. })));
}

#[test]
fn a_panicking_writer_or_reader_does_not_wedge_the_ring() {
    let ring = CircularBuffer::create(&unique("ring-panic"), 2, 8).unwrap();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        ring.write_with(1, SHORT, |_| panic!("fill failed")).unwrap();
    }));
    assert!(r.is_err());
    ring.write(b"a", SHORT).unwrap();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        ring.read_with(SHORT, |_| panic!("consumer failed")).unwrap();
    }));
    assert!(r.is_err());
    // Both nodes are usable again.
    ring.write(b"b", SHORT).unwrap();
    ring.write(b"c", SHORT).unwrap();
    let mut buf = [0u8; 8];
    assert_eq!(ring.read(&mut buf, SHORT).unwrap(), 1);
    assert_eq!(buf[0], b'b');
}

#[test]
fn mpmc_exactly_once_across_processes() {
    mpmc_exactly_once(false, "hybrid");
}

/// The same with light hand-overs, and every wait a sleep: writers and
/// readers hand nodes over by plain stores and notify without fences,
/// and each sleeper runs the `membarrier` barrier first.
#[test]
fn mpmc_exactly_once_across_processes_light() {
    mpmc_exactly_once(true, "futex");
}

fn mpmc_exactly_once(light: bool, policy: &str) {
    let name = unique("ring-mpmc");
    let side = unique("ring-mpmc-results");
    let ring = ring(&name, 64, 24, light);
    let res = Segment::create(&side, results_size()).unwrap();
    let mut children = Vec::new();
    let reader = Args::name(&name).with("side", &side).with("policy", policy);
    for _ in 0..READERS {
        children.push(spawn(ENTRY, "reader", &reader));
    }
    for w in 0..WRITERS {
        children.push(spawn(ENTRY, "writer", Args::name(&name).with("writer", w).with("policy", policy)));
    }
    for c in &mut children {
        assert_eq!(wait_child(c, Duration::from_secs(120)), Some(0));
    }
    let total = WRITERS * PER_WRITER;
    assert_eq!(counter(&res, 0).load(Ordering::SeqCst), total, "items received");
    assert_eq!(counter(&res, 1).load(Ordering::SeqCst), 0, "duplicates");
    assert_eq!(counter(&res, 2).load(Ordering::SeqCst), 0, "damaged items");
    assert_eq!(counter(&res, 3).load(Ordering::SeqCst), 0, "per-writer order violations");
    for bit in 0..total {
        let word = counter(&res, 4 + (bit / 64) as usize).load(Ordering::SeqCst);
        assert!(word & (1 << (bit % 64)) != 0, "item {bit} lost");
    }
    assert!(ring.is_empty());
}

#[test]
fn a_writer_killed_holding_a_node_does_not_wedge_the_ring() {
    a_writer_killed_holding_a_node(false);
}

#[test]
fn a_writer_killed_holding_a_node_does_not_wedge_a_light_ring() {
    a_writer_killed_holding_a_node(true);
}

fn a_writer_killed_holding_a_node(light: bool) {
    let name = unique("ring-dead-writer");
    let side = unique("ring-dead-writer-flag");
    let ring = ring(&name, 4, 8, light);
    let flag = Segment::create(&side, 64).unwrap();
    ring.write(&1u64.to_le_bytes(), SHORT).unwrap();
    let mut child = spawn(ENTRY, "die-writing", Args::name(&name).with("side", &side));
    assert!(wait_for(LIMIT, || counter(&flag, 0).load(Ordering::SeqCst) == 1));
    ring.write(&2u64.to_le_bytes(), SHORT).unwrap();
    kill(&mut child);
    // The reader gets 1, then (after noticing the death) skips the dead
    // writer's node and gets 2. The half-written item is lost.
    assert_eq!(ring.read_value::<u64>(LONG).unwrap(), 1);
    assert_eq!(ring.read_value::<u64>(LONG).unwrap(), 2);
    // Full capacity again: node_count items fit, and come back in order.
    for i in 0..4u64 {
        ring.write_value(&(10 + i), LONG).unwrap();
    }
    for i in 0..4u64 {
        assert_eq!(ring.read_value::<u64>(LONG).unwrap(), 10 + i);
    }
}

/// A reader with batch reads that catches up with a writer process in the
/// middle of an item, with another writer in the middle of the item after
/// it (a stream, as far as the reader can see), waits for a batch of
/// items. The first writer is SIGKILLed there: the reader's wait for the
/// batch ends (it is bounded: the stream stopped), the dead writer's item
/// is lost, and the reader gets the items before it and the second
/// writer's after it, in order. Then the ring is back at full capacity.
#[test]
fn a_batch_reader_waiting_on_a_writer_killed_mid_item_gets_the_rest() {
    for light in [false, true] {
        let name = unique("ring-run-dead-writer");
        let side = unique("ring-run-dead-writer-flag");
        // 64 nodes of 8 bytes: a batch is 8 items.
        let ring = std::sync::Arc::new(ring(&name, 64, 8, light));
        let reader = CircularBuffer::builder(&name).batch_reads(true).open().unwrap();
        let flag = Segment::create(&side, 64).unwrap();
        let mut child =
            spawn(ENTRY, "stream-then-die", Args::name(&name).with("side", &side).with("items", 5));
        assert!(wait_for(LIMIT, || counter(&flag, 0).load(Ordering::SeqCst) == 1));
        let second = {
            let (ring, flag) = (std::sync::Arc::clone(&ring), side.clone());
            std::thread::spawn(move || {
                let flag = Segment::open(&flag).unwrap();
                ring.write_with(8, LONG, |node| {
                    node.copy_from_slice(&777u64.to_le_bytes());
                    counter(&flag, 1).store(1, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(50));
                })
                .unwrap();
            })
        };
        assert!(wait_for(LIMIT, || counter(&flag, 1).load(Ordering::SeqCst) == 1));
        for i in 1..=5u64 {
            assert_eq!(reader.read_value::<u64>(LONG).unwrap(), i, "light: {light}");
        }
        kill(&mut child);
        assert_eq!(
            reader.read_value::<u64>(LONG).unwrap(),
            777,
            "light: {light}: the dead writer's item skipped"
        );
        second.join().unwrap();
        for i in 0..64u64 {
            ring.write_value(&(100 + i), LONG).unwrap();
        }
        for i in 0..64u64 {
            assert_eq!(reader.read_value::<u64>(LONG).unwrap(), 100 + i, "light: {light}");
        }
        assert!(ring.is_empty());
    }
}

#[test]
fn a_reader_killed_holding_a_node_does_not_wedge_the_ring() {
    a_reader_killed_holding_a_node(false);
}

#[test]
fn a_reader_killed_holding_a_node_does_not_wedge_a_light_ring() {
    a_reader_killed_holding_a_node(true);
}

fn a_reader_killed_holding_a_node(light: bool) {
    let name = unique("ring-dead-reader");
    let side = unique("ring-dead-reader-flag");
    let ring = ring(&name, 4, 8, light);
    let flag = Segment::create(&side, 64).unwrap();
    ring.write_value(&1u64, SHORT).unwrap();
    let mut child = spawn(ENTRY, "die-reading", Args::name(&name).with("side", &side));
    assert!(wait_for(LIMIT, || counter(&flag, 0).load(Ordering::SeqCst) == 1));
    kill(&mut child);
    // Its item is lost (at most once); the node comes back: a full ring's
    // worth of items fits and is read back.
    for i in 0..4u64 {
        ring.write_value(&(20 + i), LONG).unwrap();
    }
    for i in 0..4u64 {
        assert_eq!(ring.read_value::<u64>(LONG).unwrap(), 20 + i);
    }
    assert!(ring.is_empty());
}

/// A writer of a light ring SIGKILLed between the look at its claim and
/// its plain store: the claim names a dead writer; a reader waiting on it
/// repairs it (the item is lost), and the ring is back at full capacity.
#[cfg(debug_assertions)]
#[test]
fn a_light_writer_killed_inside_its_hand_over_loses_only_its_item() {
    let name = unique("ring-light-cw-writer");
    let ring = ring(&name, 4, 8, true);
    let mut cmd = common::child_command(ENTRY, "write-light", Args::name(&name));
    let mut child = cmd.env("TACHYON_FAULT", "light-handover-looked").spawn().unwrap();
    common::wait_killed(&mut child, "write-light at light-handover-looked");
    assert_eq!(ring.stats().being_written, 1);
    // The reader waits on the dead writer's claim, repairs it, and finds
    // nothing: the half-handed-over item is lost, not delivered.
    assert!(matches!(ring.read_value::<u64>(Some(Duration::from_millis(300))), Err(Error::Timeout { .. })));
    assert_eq!(ring.stats().being_written, 0);
    for i in 0..4u64 {
        ring.write_value(&(30 + i), LONG).unwrap();
    }
    for i in 0..4u64 {
        assert_eq!(ring.read_value::<u64>(LONG).unwrap(), 30 + i);
    }
    assert!(ring.stats().repaired >= 1);
}

/// A reader of a light ring SIGKILLed between the look at its claim and
/// its plain store: its item is lost (at most once, as on a plain ring),
/// and a writer that wraps onto the cell repairs it.
#[cfg(debug_assertions)]
#[test]
fn a_light_reader_killed_inside_its_hand_over_frees_its_node_by_repair() {
    let name = unique("ring-light-cw-reader");
    let ring = ring(&name, 4, 8, true);
    ring.write_value(&1u64, SHORT).unwrap();
    let mut cmd = common::child_command(ENTRY, "read-light", Args::name(&name));
    let mut child = cmd.env("TACHYON_FAULT", "light-handover-looked").spawn().unwrap();
    common::wait_killed(&mut child, "read-light at light-handover-looked");
    assert_eq!(ring.stats().being_read, 1);
    for i in 0..4u64 {
        ring.write_value(&(40 + i), LONG).unwrap();
    }
    for i in 0..4u64 {
        assert_eq!(ring.read_value::<u64>(LONG).unwrap(), 40 + i);
    }
    assert!(ring.is_empty());
    assert!(ring.stats().repaired >= 1);
}

#[test]
fn try_forms_never_time_out_and_say_what_to_do() {
    let ring = CircularBuffer::create(&unique("ring-try"), 2, 8).unwrap();
    let mut buf = [0u8; 8];
    // Empty: Ok(None), for both try reads; the closure is not called.
    assert_eq!(ring.try_read(&mut buf).unwrap(), None);
    assert_eq!(ring.try_read_with(|_| panic!("no item to lend")).unwrap(), None::<()>);
    ring.try_write(b"one").unwrap();
    ring.try_write_with(3, |node| node.copy_from_slice(b"two")).unwrap();
    // Full: Error::Full, whose text says what to do.
    let full = ring.try_write(b"three").unwrap_err();
    assert!(matches!(full, Error::Full { what: "the ring" }), "{full:?}");
    let text = full.to_string();
    assert!(text.contains("the ring is full") && text.contains("retry"), "{text}");
    assert!(matches!(ring.try_write_with(1, |_| panic!("no node to fill")), Err(Error::Full { .. })));
    // A blocking call with a timeout says what it waited for, and how long.
    let timeout = ring.write(b"x", SHORT).unwrap_err();
    let text = timeout.to_string();
    assert!(text.contains("in the ring") && text.contains("after") && text.contains("wait longer"), "{text}");
    assert_eq!(ring.try_read(&mut buf).unwrap(), Some(3));
    assert_eq!(&buf[..3], b"one");
    assert_eq!(ring.try_read_with(|item| item.to_vec()).unwrap(), Some(b"two".to_vec()));
    let timeout = ring.read(&mut buf, Some(Duration::ZERO)).unwrap_err();
    assert!(timeout.to_string().contains("an item in the ring"), "{timeout}");
    // A buffer too small: BufferTooSmall, from the try form too, saying
    // what size to pass; the item stays.
    ring.try_write(b"12345").unwrap();
    let small = ring.try_read(&mut buf[..2]).unwrap_err();
    assert!(matches!(small, Error::BufferTooSmall { item: 5, buffer: 2 }), "{small:?}");
    assert!(small.to_string().contains("at least the node size"), "{small}");
    assert_eq!(ring.try_read(&mut buf).unwrap(), Some(5));
    // An item larger than a node: says the limit and what to do.
    let big = ring.try_write(&[0; 9]).unwrap_err();
    assert!(matches!(big, Error::MessageTooLarge { size: 9, max: 8, .. }), "{big:?}");
    assert!(big.to_string().contains("create the ring with larger nodes, or split the item"), "{big}");
}

#[test]
fn create_or_open_names_the_field_that_differs() {
    let name = unique("ring-compat");
    let ring = CircularBuffer::builder(&name).node_count(4).node_size(32).create_or_open().unwrap();
    // The same geometry, or none asked for: the existing ring.
    let same = CircularBuffer::builder(&name).node_count(4).node_size(32).create_or_open().unwrap();
    assert_eq!((same.node_count(), same.node_size()), (4, 32));
    let any = CircularBuffer::builder(&name).create_or_open().unwrap();
    assert_eq!((any.node_count(), any.node_size()), (4, 32));
    ring.write(b"shared", SHORT).unwrap();
    assert_eq!(any.try_read_with(|i| i.to_vec()).unwrap(), Some(b"shared".to_vec()));
    for (builder, field, existing, requested) in [
        (CircularBuffer::builder(&name).node_count(8), "node_count", "4", "8"),
        (CircularBuffer::builder(&name).node_size(64), "node_size", "32", "64"),
    ] {
        for err in [builder.create_or_open().unwrap_err(), builder.open().unwrap_err()] {
            match &err {
                Error::Incompatible { name: n, field: f, existing: e, requested: r } => {
                    assert_eq!((n, *f, e.as_str(), r.as_str()), (&name, field, existing, requested));
                }
                other => panic!("expected Incompatible, got {other:?}"),
            }
            let text = err.to_string();
            assert!(text.contains(&format!("{field} = {existing}, not {requested}")), "{text}");
            assert!(text.contains("open it as it is, or remove it"), "{text}");
        }
    }
}
