//! BroadcastBuffer across real processes: every reader gets every item in
//! order; lagging readers are told what they missed; dead readers do not
//! block writers.
#![cfg(not(tachyon_loom))]

mod common;

use common::{kill, spawn, unique, wait_child, wait_for, LIMIT};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tachyon::primitives::{BroadcastBuffer, Overflow, Received};
use tachyon::{Error, Segment};

const ENTRY: &str = "child_entry";
const ITEMS: u64 = 20_000;
const SHORT: Option<Duration> = Some(Duration::from_millis(20));
const LONG: Option<Duration> = Some(Duration::from_secs(20));

fn counter(seg: &Segment, i: usize) -> &AtomicU64 {
    seg.get::<AtomicU64>(i * 8).unwrap()
}

fn item(i: u64) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&i.to_le_bytes());
    b[8..].copy_from_slice(&(i.wrapping_mul(0x9E37_79B9_7F4A_7C15)).to_le_bytes());
    b
}

#[test]
fn child_entry() {
    let Some((role, arg)) = common::role() else { return };
    let (name, side) = arg.split_once(',').unwrap();
    let flags = Segment::open(side).unwrap();
    let bus = BroadcastBuffer::open(name).unwrap();
    let mut reader = bus.subscribe().unwrap();
    counter(&flags, 0).fetch_add(1, Ordering::SeqCst);
    match role.as_str() {
        "reader" => {
            let mut buf = [0u8; 16];
            for i in 0..ITEMS {
                let got = reader.read(&mut buf, LONG).unwrap();
                assert_eq!(got, Received { len: 16, missed: 0 });
                assert_eq!(buf, item(i), "item {i} out of order or damaged");
            }
            counter(&flags, 1).fetch_add(1, Ordering::SeqCst);
        }
        "hang" => std::thread::sleep(LIMIT),
        other => panic!("unknown role {other}"),
    }
    std::process::exit(0);
}

#[test]
fn three_reader_processes_each_get_every_item_in_order() {
    let name = unique("bc-three");
    let side = unique("bc-three-flags");
    let bus = BroadcastBuffer::create(&name, 8, 16, Overflow::Block).unwrap();
    let flags = Segment::create(&side, 64).unwrap();
    let mut readers: Vec<_> = (0..3).map(|_| spawn(ENTRY, "reader", &format!("{name},{side}"))).collect();
    assert!(wait_for(LIMIT, || counter(&flags, 0).load(Ordering::SeqCst) == 3));
    for i in 0..ITEMS {
        bus.write(&item(i), LONG).unwrap();
    }
    for r in &mut readers {
        assert_eq!(wait_child(r, Duration::from_secs(120)), Some(0));
    }
    assert_eq!(counter(&flags, 1).load(Ordering::SeqCst), 3, "every reader got every item");
}

#[test]
fn block_mode_pushes_back_on_the_slowest_reader() {
    let bus = BroadcastBuffer::create(&unique("bc-block"), 4, 8, Overflow::Block).unwrap();
    let mut r = bus.subscribe().unwrap();
    for i in 0..4u8 {
        bus.write(&[i], SHORT).unwrap();
    }
    assert!(matches!(bus.write(&[4], SHORT), Err(Error::Timeout { .. })), "a whole ring behind: wait");
    let mut buf = [0u8; 8];
    assert_eq!(r.read(&mut buf, SHORT).unwrap(), Received { len: 1, missed: 0 });
    bus.write(&[4], SHORT).unwrap();
    for i in 1..5u8 {
        r.read(&mut buf, SHORT).unwrap();
        assert_eq!(buf[0], i);
    }
    assert!(matches!(r.read(&mut buf, SHORT), Err(Error::Timeout { .. })));
    // Without readers, writers never wait.
    drop(r);
    for i in 0..10u8 {
        bus.write(&[i], Some(Duration::ZERO)).unwrap();
    }
}

#[test]
fn overwrite_mode_tells_a_lagging_reader_what_it_missed() {
    let bus = BroadcastBuffer::create(&unique("bc-overwrite"), 4, 8, Overflow::Overwrite).unwrap();
    let mut r = bus.subscribe().unwrap();
    for i in 0..10u8 {
        bus.write(&[i], Some(Duration::ZERO)).unwrap();
    }
    let mut buf = [0u8; 8];
    assert_eq!(r.read(&mut buf, SHORT).unwrap(), Received { len: 1, missed: 6 });
    assert_eq!(buf[0], 6, "skips to the oldest item still there");
    for i in 7..10u8 {
        assert_eq!(r.read(&mut buf, SHORT).unwrap().missed, 0);
        assert_eq!(buf[0], i);
    }
}

#[test]
fn a_late_reader_starts_at_the_newest_item_and_sizes_are_checked() {
    let bus = BroadcastBuffer::create(&unique("bc-late"), 4, 8, Overflow::Block).unwrap();
    let mut buf = [0u8; 8];
    {
        let mut early = bus.subscribe().unwrap();
        assert!(matches!(early.read(&mut buf, SHORT), Err(Error::Timeout { .. })), "nothing written yet");
    }
    for i in 0..3u8 {
        bus.write(&[i; 3], SHORT).unwrap();
    }
    let mut late = bus.subscribe().unwrap();
    let mut small = [0u8; 2];
    assert!(matches!(late.read(&mut small, SHORT), Err(Error::BufferTooSmall { item: 3, buffer: 2 })));
    assert_eq!(late.read(&mut buf, SHORT).unwrap().len, 3);
    assert_eq!(buf[..3], [2, 2, 2]);
    assert!(matches!(bus.write(&[0; 9], SHORT), Err(Error::MessageTooLarge { size: 9, max: 8, .. })));
    assert!(matches!(
        BroadcastBuffer::create(&unique("bc-bad"), 1, 8, Overflow::Block),
        Err(Error::InvalidArgument { .. })
    ));
    assert!(matches!(BroadcastBuffer::open(&unique("bc-none")), Err(Error::NotFound { .. })));
}

#[test]
fn a_dead_reader_does_not_block_the_writer() {
    let name = unique("bc-dead");
    let side = unique("bc-dead-flags");
    let bus = BroadcastBuffer::create(&name, 4, 16, Overflow::Block).unwrap();
    let flags = Segment::create(&side, 64).unwrap();
    let mut child = spawn(ENTRY, "hang", &format!("{name},{side}"));
    assert!(wait_for(LIMIT, || counter(&flags, 0).load(Ordering::SeqCst) == 1));
    for i in 0..4 {
        bus.write(&item(i), SHORT).unwrap();
    }
    // The child's reader is a whole ring behind and alive: the writer waits.
    assert!(matches!(bus.write(&item(4), SHORT), Err(Error::Timeout { .. })));
    kill(&mut child);
    // Dead now: the writer drops it and goes on.
    for i in 4..20 {
        bus.write(&item(i), LONG).unwrap();
    }
}
