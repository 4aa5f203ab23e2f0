//! What a program ported from the .NET SharedMemory library relies on,
//! across real processes:
//!
//! 1. a zero timeout tries once without waiting, for every blocking call
//!    (an RPC request with a zero timeout is sent and handled);
//! 2. `close()` of a ring or broadcast buffer is seen by the other
//!    processes: their queued items first, then `Closed`, blocked calls
//!    woken;
//! 3. a ring's statistics (`len`, `stats`) say what the nodes are doing,
//!    and count the dead claimants repaired;
//!
//! and the pieces a .NET user reaches for: array search and slices, and
//! cancelling a blocking RPC request from another thread.
#![cfg(not(tachyon_loom))]

mod common;

use common::{kill, spawn, unique, wait_child, wait_for, Args, LIMIT};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tachyon::bus::{Key, Region, RegionConfig, TopicConfig};
use tachyon::primitives::rpc::CancelToken;
use tachyon::sync::{Event, EventMode, Mutex};
use tachyon::{
    BroadcastBuffer, CircularBuffer, Error, Overflow, RpcBuffer, Segment, SharedArray, SharedBuffer,
};

const ENTRY: &str = "child_entry";
const ZERO: Option<Duration> = Some(Duration::ZERO);
const LONG: Option<Duration> = Some(LIMIT);

fn flag(seg: &Segment, i: usize) -> &AtomicU64 {
    seg.get::<AtomicU64>(i * 8).unwrap()
}

/// Exit codes a child reports its findings with.
const OK: i32 = 0;
const WRONG: i32 = 3;

#[test]
fn child_entry() {
    let Some((role, args)) = common::role() else { return };
    let name = args.str("name");
    let code = match role.as_str() {
        // 1: requests with a zero timeout, each sent and handled.
        "rpc-zero-client" => {
            let client = RpcBuffer::open(name).unwrap();
            let mut sent = 0;
            for _ in 0..5 {
                match client.request(b"fire", ZERO) {
                    Err(Error::Timeout { what: "the RPC response", .. }) => sent += 1,
                    Ok(_) => sent += 1, // the response was there already: fine too
                    other => panic!("zero-timeout request: {other:?}"),
                }
            }
            assert_eq!(client.stats().requests_sent, 5);
            // Stay connected until the server has handled them all.
            let done = Segment::open(args.str("done")).unwrap();
            assert!(wait_for(LIMIT, || flag(&done, 0).load(Ordering::SeqCst) == 1));
            if sent == 5 {
                OK
            } else {
                WRONG
            }
        }
        // 1: the other side of the zero-timeout calls on rings, locks,
        // events and topics: it holds things, then lets go.
        "hold-mutex-and-die" => {
            let seg = Segment::open(name).unwrap();
            let m = seg.get::<Mutex>(128).unwrap();
            std::mem::forget(m.lock(&seg, None).unwrap());
            flag(&seg, 0).store(1, Ordering::SeqCst);
            std::thread::sleep(LIMIT); // killed here, holding the mutex
            OK
        }
        "hold-array-write-lock" => {
            let array = SharedArray::<u64>::open(name).unwrap();
            let flags = Segment::open(args.str("side")).unwrap();
            let g = array.write_lock().unwrap();
            flag(&flags, 0).store(1, Ordering::SeqCst);
            std::thread::sleep(LIMIT); // killed here, holding the lock
            drop(g);
            OK
        }
        "zero-writer" => {
            // Writes with a zero timeout into a ring, a broadcast buffer, a
            // topic, and sets an event: each tries once and succeeds.
            let ring = CircularBuffer::open(name).unwrap();
            ring.write(b"zero", ZERO).unwrap();
            let bus = BroadcastBuffer::open(&format!("{name}-bc")).unwrap();
            bus.write(b"zero", ZERO).unwrap();
            let region = Region::open(&format!("{name}-region")).unwrap();
            let topic = region.topic("t").unwrap();
            topic.send(b"zero", Key(1), ZERO).unwrap();
            let mut loan = topic.loan(4, ZERO).unwrap();
            loan.copy_from_slice(b"loan");
            loan.publish(Key(1), ZERO).unwrap();
            let seg = Segment::open(args.str("side")).unwrap();
            seg.get::<Event>(64).unwrap().set();
            OK
        }
        // 2: a reader blocked with no timeout on a ring that gets closed.
        "ring-read-until-closed" => {
            let ring = CircularBuffer::open(name).unwrap();
            let mut buf = [0u8; 16];
            let mut got = 0;
            loop {
                match ring.read(&mut buf, None) {
                    Ok(_) => got += 1,
                    Err(Error::Closed) => break,
                    Err(e) => panic!("read: {e}"),
                }
            }
            if got == 3 {
                OK
            } else {
                WRONG
            }
        }
        // 2: a writer blocked with no timeout on a full ring that gets closed.
        "ring-write-until-closed" => {
            let ring = CircularBuffer::open(name).unwrap();
            let flags = Segment::open(args.str("side")).unwrap();
            ring.write(b"1", None).unwrap();
            ring.write(b"2", None).unwrap();
            flag(&flags, 0).store(1, Ordering::SeqCst);
            match ring.write(b"3", None) {
                Err(Error::Closed) => OK,
                other => panic!("blocked write: {other:?}"),
            }
        }
        "broadcast-read-until-closed" => {
            let bus = BroadcastBuffer::open(name).unwrap();
            let flags = Segment::open(args.str("side")).unwrap();
            let mut reader = bus.subscribe().unwrap();
            flag(&flags, 0).store(1, Ordering::SeqCst);
            let mut buf = [0u8; 16];
            let mut got = 0;
            loop {
                match reader.read(&mut buf, None) {
                    Ok(_) => got += 1,
                    Err(Error::Closed) => break,
                    Err(e) => panic!("read: {e}"),
                }
            }
            if got == 2 {
                OK
            } else {
                WRONG
            }
        }
        "broadcast-write-until-closed" => {
            let bus = BroadcastBuffer::open(name).unwrap();
            let flags = Segment::open(args.str("side")).unwrap();
            bus.write(b"1", None).unwrap();
            bus.write(b"2", None).unwrap();
            flag(&flags, 0).store(1, Ordering::SeqCst);
            match bus.write(b"3", None) {
                Err(Error::Closed) => OK,
                other => panic!("blocked write: {other:?}"),
            }
        }
        // 2: the writer of an array and a buffer says "final values".
        "close-array-and-buffer" => {
            let array = SharedArray::<u32>::open(name).unwrap();
            let buffer = SharedBuffer::open(args.str("buffer")).unwrap();
            array.set(1, 11).unwrap();
            buffer.write(0, &22u32).unwrap();
            array.close();
            buffer.close();
            OK
        }
        // 3: hold a node, to be seen in the statistics and then killed.
        "hold-reading" => {
            let ring = CircularBuffer::open(name).unwrap();
            let flags = Segment::open(args.str("side")).unwrap();
            ring.read_with(None, |_| {
                flag(&flags, 0).store(1, Ordering::SeqCst);
                std::thread::sleep(LIMIT); // killed here, holding the node
            })
            .unwrap();
            OK
        }
        "hold-writing" => {
            let ring = CircularBuffer::open(name).unwrap();
            let flags = Segment::open(args.str("side")).unwrap();
            ring.write_with(1, None, |node| {
                node[0] = b'w';
                flag(&flags, 0).store(1, Ordering::SeqCst);
                std::thread::sleep(LIMIT); // killed here, holding the node
            })
            .unwrap();
            OK
        }
        // 4: an RPC server whose handler is slow.
        "slow-server" => {
            let rpc = RpcBuffer::builder(name)
                .handler(|_id, msg: &[u8]| {
                    if msg == b"slow" {
                        std::thread::sleep(Duration::from_secs(2));
                    }
                    Ok::<_, String>(msg.to_vec())
                })
                .create()
                .unwrap();
            let flags = Segment::open(args.str("side")).unwrap();
            flag(&flags, 0).store(1, Ordering::SeqCst);
            // Serve until the test says it is done.
            assert!(wait_for(LIMIT, || flag(&flags, 1).load(Ordering::SeqCst) == 1));
            drop(rpc);
            OK
        }
        other => panic!("unknown role {other}"),
    };
    std::process::exit(code);
}

/// Point 1, RPC: `request(msg, Some(ZERO))` in one process sends the
/// request, and the server in another handles every one of them.
#[test]
fn a_zero_timeout_request_is_sent_and_handled_across_processes() {
    let name = unique("dn-rpc-zero");
    let handled = std::sync::Arc::new(AtomicU64::new(0));
    let counter = std::sync::Arc::clone(&handled);
    let server = RpcBuffer::builder(&name)
        .handler(move |_id, msg: &[u8]| {
            counter.fetch_add(1, Ordering::SeqCst);
            Ok::<_, String>(msg.to_vec())
        })
        .create()
        .unwrap();
    let done_name = unique("dn-rpc-zero-done");
    let done = Segment::create(&done_name, 64).unwrap();
    let mut child = spawn(ENTRY, "rpc-zero-client", Args::name(&name).with("done", &done_name));
    assert!(
        wait_for(LIMIT, || handled.load(Ordering::SeqCst) == 5),
        "handled {} of 5 zero-timeout requests",
        handled.load(Ordering::SeqCst)
    );
    assert_eq!(server.stats().requests_handled, 5);
    flag(&done, 0).store(1, Ordering::SeqCst);
    assert_eq!(wait_child(&mut child, LIMIT), Some(OK));
}

/// Point 1, every other blocking call: with a zero timeout it does what it
/// can do now (across processes: what another process wrote, a lock a dead
/// process held) and fails with `Timeout` at once otherwise; never "do
/// nothing".
#[test]
fn a_zero_timeout_tries_once_for_every_blocking_call() {
    let name = unique("dn-zero");
    let side = unique("dn-zero-side");
    let flags = Segment::create(&side, 4096).unwrap();
    let event = flags.get::<Event>(64).unwrap();
    event.set_mode(EventMode::ManualReset);
    let ring = CircularBuffer::create(&name, 2, 16).unwrap();
    let bus = BroadcastBuffer::create(&format!("{name}-bc"), 2, 16, Overflow::Block).unwrap();
    let mut reader = bus.subscribe().unwrap();
    let region_name = format!("{name}-region");
    let region =
        Region::create(&region_name, RegionConfig::default().size(8 << 20).ring_arena(1 << 20)).unwrap();
    let topic = region.create_topic("t", TopicConfig::default()).unwrap();
    let p = topic.partition_of(Key(1));
    let mut buf = [0u8; 16];

    // Nothing there yet: one look, Timeout.
    assert!(matches!(ring.read(&mut buf, ZERO), Err(Error::Timeout { .. })));
    assert!(matches!(reader.read(&mut buf, ZERO), Err(Error::Timeout { .. })));
    assert!(matches!(topic.receive(p, ZERO), Err(Error::Timeout { .. })));
    assert!(matches!(event.wait(ZERO), Err(Error::Timeout { .. })));

    // Another process writes with zero timeouts: each write happens.
    let mut child = spawn(ENTRY, "zero-writer", Args::name(&name).with("side", &side));
    assert_eq!(wait_child(&mut child, LIMIT), Some(OK));
    assert_eq!(ring.read(&mut buf, ZERO).unwrap(), 4);
    assert_eq!(reader.read(&mut buf, ZERO).unwrap().len, 4);
    assert_eq!(&*topic.receive(p, ZERO).unwrap(), b"zero");
    assert_eq!(&*topic.receive(p, ZERO).unwrap(), b"loan");
    event.wait(ZERO).unwrap();

    // Full: a zero-timeout write tries once and says Timeout.
    ring.write(b"a", ZERO).unwrap();
    ring.write(b"b", ZERO).unwrap();
    assert!(matches!(ring.write(b"c", ZERO), Err(Error::Timeout { .. })));
    bus.write(b"a", ZERO).unwrap();
    bus.write(b"b", ZERO).unwrap();
    assert!(matches!(bus.write(b"c", ZERO), Err(Error::Timeout { .. })));

    // A mutex whose holder died: a zero-timeout lock takes it over, as
    // try_lock does (it used to time out for ever).
    let mut holder = spawn(ENTRY, "hold-mutex-and-die", &side);
    assert!(wait_for(LIMIT, || flag(&flags, 0).load(Ordering::SeqCst) == 1));
    let free = flags.get::<Mutex>(192).unwrap(); // never held: locks at once
    assert!(free.lock(&flags, ZERO).is_ok());
    let held = flags.get::<Mutex>(128).unwrap();
    assert!(matches!(held.lock(&flags, ZERO), Err(Error::Timeout { .. }))); // alive: no wait
    kill(&mut holder);
    let g = held.lock(&flags, ZERO).expect("a dead holder's mutex is taken over at once");
    assert!(g.owner_died());
    drop(g);

    // An array whose write lock another process holds: the plain calls
    // with a zero lock timeout and the guard calls with a zero timeout try
    // once; once the holder is dead, they get in at once.
    flag(&flags, 0).store(0, Ordering::SeqCst);
    let array_name = format!("{name}-array");
    let mut array = SharedArray::<u64>::create(&array_name, 4).unwrap();
    array.set_lock_timeout(ZERO);
    let mut holder = spawn(ENTRY, "hold-array-write-lock", Args::name(&array_name).with("side", &side));
    assert!(wait_for(LIMIT, || flag(&flags, 0).load(Ordering::SeqCst) == 1));
    assert!(matches!(array.get(0), Err(Error::Timeout { .. })));
    assert!(matches!(array.read_lock_timeout(ZERO), Err(Error::Timeout { .. })));
    assert!(matches!(array.write_lock_timeout(ZERO), Err(Error::Timeout { .. })));
    kill(&mut holder);
    assert_eq!(array.get(0).unwrap(), 0);
    assert!(array.write_lock_timeout(ZERO).unwrap().owner_died());
    let mut buffer = SharedBuffer::create(&format!("{name}-buffer"), 64).unwrap();
    buffer.set_lock_timeout(ZERO);
    buffer.write(0, &7u32).unwrap();
    assert_eq!(buffer.read::<u32>(0).unwrap(), 7);

    // RPC: waiting for the end of a channel that is open, with a zero
    // timeout, looks once.
    let server = RpcBuffer::create(&format!("{name}-rpc")).unwrap();
    assert!(matches!(server.wait_closed(ZERO), Err(Error::Timeout { .. })));
    server.close();
    server.wait_closed(ZERO).unwrap();

    drop(topic);
    drop(region);
    Region::remove(&region_name).unwrap();
}

/// Point 2: `CircularBuffer::close` in one process ends a reader blocked
/// without timeout in another, after it got the queued items.
#[test]
fn closing_a_ring_ends_a_blocked_reader_in_another_process() {
    let name = unique("dn-close-read");
    let ring = CircularBuffer::create(&name, 8, 16).unwrap();
    let mut child = spawn(ENTRY, "ring-read-until-closed", &name);
    for item in [b"1", b"2", b"3"] {
        ring.write(item, LONG).unwrap();
    }
    // Wait until the child has taken them (it then blocks on the empty ring).
    assert!(wait_for(LIMIT, || ring.is_empty()));
    ring.close();
    assert_eq!(wait_child(&mut child, LIMIT), Some(OK));
    assert!(matches!(ring.write(b"4", LONG), Err(Error::Closed)));
}

/// Point 2: items queued before the close still reach a reader that comes
/// later, and a writer blocked on a full ring in another process wakes.
#[test]
fn closing_a_ring_ends_a_blocked_writer_in_another_process() {
    let name = unique("dn-close-write");
    let side = unique("dn-close-write-side");
    let flags = Segment::create(&side, 64).unwrap();
    let ring = CircularBuffer::create(&name, 2, 16).unwrap();
    let mut child = spawn(ENTRY, "ring-write-until-closed", Args::name(&name).with("side", &side));
    assert!(wait_for(LIMIT, || flag(&flags, 0).load(Ordering::SeqCst) == 1));
    ring.close();
    assert_eq!(wait_child(&mut child, LIMIT), Some(OK));
    let mut buf = [0u8; 16];
    assert_eq!(ring.read(&mut buf, LONG).unwrap(), 1);
    assert_eq!(ring.try_read(&mut buf).unwrap(), Some(1));
    assert!(matches!(ring.try_read(&mut buf), Err(Error::Closed)));
    assert!(matches!(ring.read(&mut buf, None), Err(Error::Closed)));
    assert!(ring.stats().closed);
}

/// Point 2, broadcast: a reader blocked in another process gets what it
/// had not read and then `Closed`; a writer blocked on a full buffer wakes.
#[test]
fn closing_a_broadcast_buffer_is_seen_by_other_processes() {
    let name = unique("dn-bc-close-read");
    let side = unique("dn-bc-close-side");
    let flags = Segment::create(&side, 64).unwrap();
    let bus = BroadcastBuffer::create(&name, 8, 16, Overflow::Block).unwrap();
    let mut child = spawn(ENTRY, "broadcast-read-until-closed", Args::name(&name).with("side", &side));
    assert!(wait_for(LIMIT, || flag(&flags, 0).load(Ordering::SeqCst) == 1));
    bus.write(b"a", LONG).unwrap();
    bus.write(b"b", LONG).unwrap();
    bus.close();
    assert_eq!(wait_child(&mut child, LIMIT), Some(OK));
    assert!(matches!(bus.write(b"c", LONG), Err(Error::Closed)));

    let name = unique("dn-bc-close-write");
    flag(&flags, 0).store(0, Ordering::SeqCst);
    let bus = BroadcastBuffer::create(&name, 2, 16, Overflow::Block).unwrap();
    let mut reader = bus.subscribe().unwrap(); // never reads: the writer blocks
    let mut child = spawn(ENTRY, "broadcast-write-until-closed", Args::name(&name).with("side", &side));
    assert!(wait_for(LIMIT, || flag(&flags, 0).load(Ordering::SeqCst) == 1));
    bus.close();
    assert_eq!(wait_child(&mut child, LIMIT), Some(OK));
    let mut buf = [0u8; 16];
    assert_eq!(reader.read(&mut buf, LONG).unwrap().len, 1);
    assert_eq!(reader.read(&mut buf, LONG).unwrap().len, 1);
    assert!(matches!(reader.read(&mut buf, None), Err(Error::Closed)));
}

/// Point 2, state: an array and a buffer closed in another process are
/// read-only from then on: the last values stay readable, writes are
/// `Closed`.
#[test]
fn a_closed_array_or_buffer_is_read_only_for_every_process() {
    let name = unique("dn-array-close");
    let buffer_name = unique("dn-buffer-close");
    let array = SharedArray::<u32>::create(&name, 4).unwrap();
    let buffer = SharedBuffer::create(&buffer_name, 16).unwrap();
    let mut child = spawn(ENTRY, "close-array-and-buffer", Args::name(&name).with("buffer", &buffer_name));
    assert_eq!(wait_child(&mut child, LIMIT), Some(OK));
    assert!(array.is_closed() && buffer.is_closed());
    assert_eq!(array.get(1).unwrap(), 11);
    assert_eq!(buffer.read::<u32>(0).unwrap(), 22);
    assert!(matches!(array.set(0, 1), Err(Error::Closed)));
    assert!(matches!(array.write(0, &[1]), Err(Error::Closed)));
    assert!(matches!(array.write_lock(), Err(Error::Closed)));
    assert!(matches!(array.try_write_lock(), Err(Error::Closed)));
    assert!(matches!(array.slice(1..).unwrap().with_slice_mut(|s| s[0] = 1), Err(Error::Closed)));
    assert_eq!(array.read_lock().unwrap()[1], 11);
    assert!(matches!(buffer.write(0, &1u8), Err(Error::Closed)));
    assert!(matches!(buffer.with_bytes_mut(|b| b[0] = 1), Err(Error::Closed)));
    assert_eq!(buffer.with_bytes(|b| b[..4].to_vec()).unwrap(), 22u32.to_ne_bytes());
}

/// Point 3: `len()` and `stats()` agree with what another process is
/// doing (a node being read is not queued; a node being written is), and
/// the repair of a dead claimant is counted.
#[test]
fn ring_statistics_show_what_other_processes_do() {
    let name = unique("dn-stats");
    let side = unique("dn-stats-side");
    let flags = Segment::create(&side, 64).unwrap();
    let ring = CircularBuffer::create(&name, 4, 16).unwrap();
    ring.write(b"first", LONG).unwrap();
    ring.write(b"second", LONG).unwrap();
    assert_eq!(ring.len(), 2);
    let s = ring.stats();
    assert_eq!((s.capacity, s.queued, s.being_read, s.being_written, s.repaired), (4, 2, 0, 0, 0));

    // Another process is reading the first item (and will die doing so).
    let mut reader = spawn(ENTRY, "hold-reading", Args::name(&name).with("side", &side));
    assert!(wait_for(LIMIT, || flag(&flags, 0).load(Ordering::SeqCst) == 1));
    assert_eq!(ring.len(), 1, "the node being read is not counted");
    let s = ring.stats();
    assert_eq!((s.queued, s.being_read, s.being_written), (1, 1, 0));

    // Another process is writing an item (and will die doing so).
    flag(&flags, 0).store(0, Ordering::SeqCst);
    let mut writer = spawn(ENTRY, "hold-writing", Args::name(&name).with("side", &side));
    assert!(wait_for(LIMIT, || flag(&flags, 0).load(Ordering::SeqCst) == 1));
    assert_eq!(ring.len(), 2, "the node being written is counted");
    let s = ring.stats();
    assert_eq!((s.queued, s.being_read, s.being_written), (1, 1, 1));

    kill(&mut reader);
    kill(&mut writer);
    let mut buf = [0u8; 16];
    assert_eq!(ring.read(&mut buf, LONG).unwrap(), 6); // "second"
    ring.write(b"x", LONG).unwrap();
    // The dead writer's node is in the way: the reader repairs it (its
    // item is lost) and gets "x".
    assert_eq!(ring.read(&mut buf, LONG).unwrap(), 1);
    // Writing round the ring reaches the dead reader's node: repaired.
    ring.write(b"y", LONG).unwrap();
    ring.write(b"z", LONG).unwrap();
    let s = ring.stats();
    assert_eq!(s.repaired, 2, "both dead claimants repaired");
    assert_eq!((s.being_read, s.being_written, s.abandoned), (0, 0, 0));
    assert_eq!(s.queued, 2);
}

/// Point 4: a blocking request is cancelled from another thread while the
/// server (another process) is still handling it.
#[test]
fn a_blocking_request_is_cancelled_from_another_thread() {
    let name = unique("dn-cancel");
    let side = unique("dn-cancel-side");
    let flags = Segment::create(&side, 64).unwrap();
    let mut child = spawn(ENTRY, "slow-server", Args::name(&name).with("side", &side));
    assert!(wait_for(LIMIT, || flag(&flags, 0).load(Ordering::SeqCst) == 1));
    let client = RpcBuffer::open(&name).unwrap();
    let cancel = CancelToken::new();
    std::thread::scope(|s| {
        let stop = cancel.clone();
        let watcher = s.spawn(move || {
            // Cancel once the request is out (its response cannot come
            // before the slow handler's 2 s).
            std::thread::sleep(Duration::from_millis(50));
            stop.cancel();
        });
        let r = client.request_with_cancel(b"slow", None, &cancel);
        assert!(matches!(r, Err(Error::Interrupted)), "{r:?}");
        watcher.join().unwrap();
    });
    // The token stays cancelled; the channel itself is fine.
    assert!(matches!(client.request_with_cancel(b"fast", LONG, &cancel), Err(Error::Interrupted)));
    assert_eq!(client.request(b"fast", LONG).unwrap(), b"fast");
    drop(client);
    flag(&flags, 1).store(1, Ordering::SeqCst);
    assert_eq!(wait_child(&mut child, LIMIT), Some(OK));
}

/// Point 4: searching an array and working on a sub-range without taking
/// a guard by hand, seen by another handle.
#[test]
fn array_search_and_slices() {
    let name = unique("dn-array");
    let a = SharedArray::<u32>::create(&name, 10).unwrap();
    let b = SharedArray::<u32>::open(&name).unwrap();
    a.write(0, &[9, 8, 7, 6, 5, 4, 3, 2, 1, 0]).unwrap();
    assert!(b.contains(&5).unwrap());
    assert!(!b.contains(&10).unwrap());
    assert_eq!(b.position(|&x| x < 3).unwrap(), Some(7));
    let middle = b.slice(2..5).unwrap();
    assert_eq!((middle.offset(), middle.len()), (2, 3));
    assert_eq!(middle.to_vec().unwrap(), [7, 6, 5]);
    assert_eq!(middle.iter().collect::<Result<Vec<_>, _>>().unwrap(), [7, 6, 5]);
    assert_eq!(middle.position(|&x| x == 5).unwrap(), Some(2));
    middle.set(0, 70).unwrap();
    assert_eq!(a.get(2).unwrap(), 70);
    assert!(matches!(middle.get(3), Err(Error::InvalidArgument { .. })));
    assert!(matches!(middle.write(2, &[1, 2]), Err(Error::InvalidArgument { .. })));
    let inner = middle.slice(1..).unwrap();
    assert_eq!(inner.to_vec().unwrap(), [6, 5]);
    assert!(b.slice(..=10).is_err());
    assert!(b.slice(11..).is_err());
    assert!(b.slice(10..).unwrap().is_empty());
    middle.with_slice_mut(|s| s.fill(1)).unwrap();
    assert_eq!(a.to_vec().unwrap(), [9, 8, 1, 1, 1, 4, 3, 2, 1, 0]);
    assert_eq!(a.with_slice(|s| s.iter().sum::<u32>()).unwrap(), 30);
}
