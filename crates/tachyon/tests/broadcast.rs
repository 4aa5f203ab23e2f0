//! BroadcastBuffer across real processes: every reader gets every item in
//! order; lagging readers are told what they missed; dead readers do not
//! block writers.
#![cfg(not(tachyon_loom))]

mod common;

use common::{counter, kill, spawn, unique, wait_child, wait_for, Args, LIMIT};
use std::sync::atomic::Ordering;
use std::time::Duration;
use tachyon::primitives::{BroadcastBuffer, Overflow, Received};
use tachyon::{Error, Segment};

const ENTRY: &str = "child_entry";
const ITEMS: u64 = 20_000;
const SHORT: Option<Duration> = Some(Duration::from_millis(20));
const LONG: Option<Duration> = Some(Duration::from_secs(20));

fn item(i: u64) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&i.to_le_bytes());
    b[8..].copy_from_slice(&(i.wrapping_mul(0x9E37_79B9_7F4A_7C15)).to_le_bytes());
    b
}

#[test]
fn child_entry() {
    let Some((role, args)) = common::role() else { return };
    let flags = Segment::open(args.str("side")).unwrap();
    let bus = BroadcastBuffer::open(args.str("name")).unwrap();
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
    let reader = Args::name(&name).with("side", &side);
    let mut readers: Vec<_> = (0..3).map(|_| spawn(ENTRY, "reader", &reader)).collect();
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
    let mut child = spawn(ENTRY, "hang", Args::name(&name).with("side", &side));
    assert!(wait_for(LIMIT, || counter(&flags, 0).load(Ordering::SeqCst) == 1));
    for i in 0..4 {
        bus.write(&item(i), SHORT).unwrap();
    }
    // The child's reader is a whole ring behind and alive: the writer waits.
    assert!(matches!(bus.write(&item(4), SHORT), Err(Error::Timeout { .. })));
    assert!(matches!(bus.try_write(&item(4)), Err(Error::Full { .. })));
    kill(&mut child);
    // Dead now: the writer drops it and goes on; a try_write too.
    bus.try_write(&item(4)).unwrap();
    for i in 5..20 {
        bus.write(&item(i), LONG).unwrap();
    }
}

/// Every handle of the primitives can be moved to (and, where it says so,
/// shared with) other threads, and borrows nothing.
#[test]
fn handles_are_send_sync_and_static() {
    fn send_sync_static<T: Send + Sync + 'static>() {}
    fn send_static<T: Send + 'static>() {}
    send_sync_static::<tachyon::CircularBuffer>();
    send_sync_static::<tachyon::BroadcastBuffer>();
    send_sync_static::<tachyon::BroadcastReader>();
    send_static::<tachyon::BroadcastReader>();
    send_sync_static::<tachyon::RpcBuffer>();
    send_sync_static::<tachyon::RpcClient>();
    send_sync_static::<tachyon::SharedArray<u64>>();
    send_sync_static::<tachyon::SharedBuffer>();
}

#[test]
fn a_reader_moves_into_a_thread_and_into_a_tokio_task() {
    let bus = BroadcastBuffer::builder(&unique("bc-move")).node_count(4).node_size(16).create().unwrap();
    let mut in_thread = bus.subscribe().unwrap();
    let mut in_task = bus.subscribe().unwrap();
    // Subscribed from a clone that is then dropped: the reader keeps the
    // buffer alive on its own.
    let mut from_clone = bus.clone().subscribe().unwrap();
    let thread = std::thread::spawn(move || {
        let mut buf = [0u8; 16];
        let got = in_thread.read(&mut buf, LONG).unwrap();
        buf[..got.len].to_vec()
    });
    let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
    let got = rt.block_on(async {
        let task = tokio::spawn(async move {
            let mut buf = [0u8; 16];
            // Poll without blocking the runtime; every wait is bounded.
            for _ in 0..2000 {
                if let Some(got) = in_task.try_read(&mut buf).unwrap() {
                    return buf[..got.len].to_vec();
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            panic!("no item within 10 s");
        });
        tokio::task::yield_now().await;
        bus.write(b"moved", LONG).unwrap();
        task.await.unwrap()
    });
    assert_eq!(got, b"moved");
    assert_eq!(thread.join().unwrap(), b"moved");
    drop(bus);
    let mut buf = [0u8; 16];
    assert_eq!(from_clone.try_read(&mut buf).unwrap(), Some(Received { len: 5, missed: 0 }));
}

#[test]
fn try_forms_and_error_texts() {
    let bus = BroadcastBuffer::create(&unique("bc-try"), 2, 8, Overflow::Block).unwrap();
    let mut r = bus.subscribe().unwrap();
    let mut buf = [0u8; 8];
    assert_eq!(r.try_read(&mut buf).unwrap(), None, "empty is Ok(None), not a timeout");
    bus.try_write(b"a").unwrap();
    bus.try_write(b"bb").unwrap();
    let full = bus.try_write(b"c").unwrap_err();
    assert!(matches!(full, Error::Full { .. }), "{full:?}");
    assert!(full.to_string().contains("the broadcast buffer is full"), "{full}");
    let timeout = r.read(&mut [0u8; 8], Some(Duration::ZERO));
    assert!(timeout.is_ok(), "an item is there: {timeout:?}");
    // Too small a buffer: BufferTooSmall saying what to pass; the item stays.
    let small = r.try_read(&mut buf[..1]).unwrap_err();
    assert!(matches!(small, Error::BufferTooSmall { item: 2, buffer: 1 }), "{small:?}");
    assert!(small.to_string().contains("pass a buffer of at least"), "{small}");
    assert_eq!(r.try_read(&mut buf).unwrap(), Some(Received { len: 2, missed: 0 }));
    let big = bus.try_write(&[0; 9]).unwrap_err();
    assert!(big.to_string().contains("create the buffer with larger nodes, or split the item"), "{big}");
    let waited = r.read(&mut buf, SHORT).unwrap_err();
    let text = waited.to_string();
    assert!(text.contains("an item in the broadcast buffer") && text.contains("wait longer"), "{text}");
}

#[test]
fn create_or_open_checks_every_option_it_was_given() {
    let name = unique("bc-compat");
    let bus = BroadcastBuffer::builder(&name)
        .node_count(4)
        .node_size(32)
        .overflow(Overflow::Overwrite)
        .create_or_open()
        .unwrap();
    let same = BroadcastBuffer::builder(&name).node_count(4).overflow(Overflow::Overwrite).create_or_open();
    assert_eq!(same.unwrap().node_size(), 32);
    let any = BroadcastBuffer::builder(&name).create_or_open().unwrap();
    assert_eq!((any.node_count(), any.node_size(), any.overflow()), (4, 32, Overflow::Overwrite));
    assert!(matches!(BroadcastBuffer::builder(&name).create(), Err(Error::AlreadyExists { .. })));
    for (builder, field, existing, requested) in [
        (BroadcastBuffer::builder(&name).node_count(8), "node_count", "4", "8"),
        (BroadcastBuffer::builder(&name).node_size(64), "node_size", "32", "64"),
        (BroadcastBuffer::builder(&name).overflow(Overflow::Block), "overflow", "Overwrite", "Block"),
    ] {
        for err in [builder.create_or_open().unwrap_err(), builder.open().unwrap_err()] {
            assert!(matches!(err, Error::Incompatible { field: f, .. } if f == field), "{err:?}");
            let text = err.to_string();
            assert!(text.contains(&format!("{field} = {existing}, not {requested}")), "{text}");
            assert!(
                text.contains(&format!("{name:?}")) && text.contains("remove it and create it anew"),
                "{text}"
            );
        }
    }
    drop(bus);
}
