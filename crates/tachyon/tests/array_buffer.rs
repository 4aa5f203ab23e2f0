//! SharedArray and SharedBuffer across real processes: create/open errors,
//! round trips, bounds, element types, and lock semantics (a held write
//! lock blocks readers until their timeout, read locks overlap, a writer
//! SIGKILLed while holding the lock is detected and reported).
#![cfg(not(tachyon_loom))]

mod common;

use bytemuck::{Pod, Zeroable};
use common::{kill, spawn, unique, wait_child, wait_for, LIMIT};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tachyon::{CircularBuffer, Error, Segment, SharedArray, SharedBuffer};

const ENTRY: &str = "child_entry";
const SHORT: Option<Duration> = Some(Duration::from_millis(20));
const LONG: Option<Duration> = Some(Duration::from_secs(20));
const LEN: usize = 64;

#[derive(Debug, Clone, Copy, PartialEq, Pod, Zeroable)]
#[repr(C)]
struct Point {
    x: f32,
    y: f32,
}

/// The side segment that parent and child signal each other through.
fn ctl_name(name: &str) -> String {
    format!("{name}-ctl")
}

fn flag(seg: &Segment, i: usize) -> &AtomicU64 {
    seg.get::<AtomicU64>(i * 8).expect("flag in bounds")
}

/// Waits (bounded) until flag `i` holds `v`; panics otherwise.
fn await_flag(seg: &Segment, i: usize, v: u64) {
    assert!(wait_for(LIMIT, || flag(seg, i).load(Ordering::SeqCst) == v), "flag {i} never became {v}");
}

fn is_timeout<T: std::fmt::Debug>(r: tachyon::Result<T>) -> bool {
    matches!(r, Err(Error::Timeout { .. }))
}

fn is_invalid<T: std::fmt::Debug>(r: tachyon::Result<T>) -> bool {
    matches!(r, Err(Error::InvalidArgument { .. }))
}

/// Dispatches the roles children run; does nothing in the parent.
#[test]
fn child_entry() {
    let Some((role, args)) = common::role() else { return };
    let name = args.str("name");
    let ctl = Segment::open(&ctl_name(name)).unwrap();
    match role.as_str() {
        // Checks what the parent wrote, answers through every write path.
        "array-echo" => {
            let a = SharedArray::<u64>::open(name).unwrap();
            assert_eq!(a.len(), LEN);
            assert_eq!(a.get(0).unwrap(), 1000);
            let mut all = [0u64; LEN];
            a.read(0, &mut all).unwrap();
            assert!(all.iter().enumerate().all(|(i, &v)| v == 1000 + i as u64));
            let doubled: Vec<u64> = all.iter().map(|v| v * 2).collect();
            a.write(0, &doubled).unwrap();
            a.set(LEN - 1, 7).unwrap();
            {
                let mut g = a.write_lock_timeout(LONG).unwrap();
                assert!(!g.owner_died());
                g[1] += 1;
            }
            // Another element type is refused, in this process too.
            assert!(matches!(SharedArray::<f64>::open(name), Err(Error::TypeMismatch { .. })));
            assert!(matches!(SharedArray::<u32>::open(name), Err(Error::TypeMismatch { .. })));
        }
        "array-hold-write" => {
            let a = SharedArray::<u64>::open(name).unwrap();
            let mut g = a.write_lock_timeout(LONG).unwrap();
            g[0] = 42;
            flag(&ctl, 0).store(1, Ordering::SeqCst);
            await_flag(&ctl, 0, 2);
            drop(g);
        }
        "array-hold-read" => {
            let a = SharedArray::<u64>::open(name).unwrap();
            let g = a.read_lock_timeout(LONG).unwrap();
            flag(&ctl, 1).fetch_add(1, Ordering::SeqCst);
            await_flag(&ctl, 2, 1);
            assert_eq!(g[0], 5);
            drop(g);
        }
        "array-die-writing" => {
            let a = SharedArray::<u64>::open(name).unwrap();
            let mut g = a.write_lock_timeout(LONG).unwrap();
            g[0] = 1; // half of an update the parent never sees finished
            flag(&ctl, 0).store(1, Ordering::SeqCst);
            std::thread::sleep(LIMIT);
            std::process::exit(1);
        }
        "buffer-echo" => {
            let b = SharedBuffer::open(name).unwrap();
            assert_eq!(b.len(), 1024);
            assert_eq!(b.read::<i32>(0).unwrap(), 123);
            assert_eq!(b.read::<u64>(1001).unwrap(), 0xDEAD_BEEF_0000_0001);
            let mut pts = [Point::zeroed(); 2];
            b.read_slice(17, &mut pts).unwrap();
            assert_eq!(pts, [Point { x: 1.0, y: 2.0 }, Point { x: -3.5, y: 4.25 }]);
            let mut raw = [0u8; 5];
            b.read_bytes(500, &mut raw).unwrap();
            assert_eq!(&raw, b"hello");
            b.write(3, &456i32).unwrap();
            b.write_slice(201, &[1u16, 2, 3]).unwrap();
            b.write_bytes(1019, b"world").unwrap();
            b.with_bytes_mut(|bytes| bytes[999] = 0xAB).unwrap();
        }
        "buffer-hold-write" => {
            let mut b = SharedBuffer::open(name).unwrap();
            b.set_lock_timeout(LONG);
            b.with_bytes_mut(|bytes| {
                bytes[0] = 9;
                flag(&ctl, 0).store(1, Ordering::SeqCst);
                await_flag(&ctl, 0, 2);
            })
            .unwrap();
        }
        "buffer-die-writing" => {
            let mut b = SharedBuffer::open(name).unwrap();
            b.set_lock_timeout(LONG);
            b.with_bytes_mut(|bytes| {
                bytes[0] = 1;
                flag(&ctl, 0).store(1, Ordering::SeqCst);
                std::thread::sleep(LIMIT);
            })
            .unwrap();
            std::process::exit(1);
        }
        other => panic!("unknown role {other}"),
    }
    drop(ctl);
    std::process::exit(0);
}

/// A fresh name and its control segment (flags 0..8, zeroed).
fn setup(tag: &str) -> (String, Segment) {
    let name = unique(tag);
    let ctl = Segment::create(&ctl_name(&name), 64).unwrap();
    (name, ctl)
}

// ---- SharedArray ------------------------------------------------------------

#[test]
fn array_open_without_create_is_not_found_and_create_twice_already_exists() {
    let name = unique("array-exists");
    assert!(matches!(SharedArray::<u32>::open(&name), Err(Error::NotFound { .. })));
    let a = SharedArray::<u32>::create(&name, 4).unwrap();
    assert!(matches!(SharedArray::<u32>::create(&name, 4), Err(Error::AlreadyExists { .. })));
    assert!(matches!(SharedArray::<u64>::create(&name, 4), Err(Error::AlreadyExists { .. })));
    drop(a);
    assert!(matches!(SharedArray::<u32>::open(&name), Err(Error::NotFound { .. })), "last close removes it");
    // The name is free again.
    SharedArray::<u32>::create(&name, 4).unwrap();
}

#[test]
fn array_arguments_are_checked() {
    let name = unique("array-args");
    assert!(is_invalid(SharedArray::<u32>::create(&name, 0)));
    assert!(is_invalid(SharedArray::<u64>::create(&name, usize::MAX / 4)));
    assert!(!Segment::exists(&name).unwrap(), "a refused create leaves nothing behind");
    let a = SharedArray::<u32>::create(&name, 1).unwrap();
    assert_eq!(a.len(), 1);
    assert!(!a.is_empty());
    assert_eq!(a.get(0).unwrap(), 0, "elements start zeroed");
}

#[test]
fn array_of_another_kind_or_type_is_refused() {
    let name = unique("array-type");
    let a = SharedArray::<u32>::create(&name, 8).unwrap();
    // Same size and alignment, another type: the name fingerprint tells.
    match SharedArray::<f32>::open(&name) {
        Err(Error::TypeMismatch { found, expected }) => {
            assert!(found.contains("u32"), "{found}");
            assert!(expected.contains("f32"), "{expected}");
        }
        other => panic!("expected TypeMismatch, got {other:?}"),
    }
    // Another size, another alignment.
    assert!(matches!(SharedArray::<u64>::open(&name), Err(Error::TypeMismatch { .. })));
    assert!(matches!(SharedArray::<[u8; 4]>::open(&name), Err(Error::TypeMismatch { .. })));
    assert!(matches!(SharedArray::<Point>::open(&name), Err(Error::TypeMismatch { .. })));
    // Without the name check, a layout-compatible type is accepted.
    let f = SharedArray::<f32>::builder(&name).check_type_name(false).open().unwrap();
    a.set(2, 1.5f32.to_bits()).unwrap();
    assert_eq!(f.get(2).unwrap(), 1.5);
    assert!(matches!(
        SharedArray::<u64>::builder(&name).check_type_name(false).open(),
        Err(Error::TypeMismatch { .. })
    ));
    // Other kinds of segment.
    assert!(matches!(SharedBuffer::open(&name), Err(Error::KindMismatch { .. })));
    let ring = unique("array-type-ring");
    let _r = CircularBuffer::create(&ring, 2, 8).unwrap();
    assert!(matches!(SharedArray::<u32>::open(&ring), Err(Error::KindMismatch { .. })));
    // A struct element type round-trips.
    let pname = unique("array-type-point");
    let p = SharedArray::<Point>::create(&pname, 2).unwrap();
    p.set(1, Point { x: 1.0, y: -1.0 }).unwrap();
    assert_eq!(SharedArray::<Point>::open(&pname).unwrap().get(1).unwrap(), Point { x: 1.0, y: -1.0 });
}

#[test]
fn array_bounds_are_errors_and_nothing_is_written_outside() {
    let name = unique("array-bounds");
    let a = SharedArray::<u16>::create(&name, 10).unwrap();
    a.write(0, &[1; 10]).unwrap();
    assert!(is_invalid(a.get(10)));
    assert!(is_invalid(a.get(usize::MAX)));
    assert!(is_invalid(a.set(10, 9)));
    assert!(is_invalid(a.read(9, &mut [0; 2])));
    assert!(is_invalid(a.write(9, &[9, 9])));
    assert!(is_invalid(a.write(usize::MAX, &[9])));
    assert!(is_invalid(a.read(usize::MAX, &mut [0])));
    assert!(is_invalid(a.read(11, &mut [])));
    // Empty ranges up to the end are fine.
    a.read(10, &mut []).unwrap();
    a.write(10, &[]).unwrap();
    assert_eq!(a.to_vec().unwrap(), [1; 10], "failed writes wrote nothing");
    let g = a.read_lock().unwrap();
    assert_eq!(g.get(10), None);
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| g[10]));
    assert!(panicked.is_err(), "indexing a guard's slice out of range panics, as slices do");
}

#[test]
fn array_get_set_read_write_across_processes() {
    let (name, _ctl) = setup("array-echo");
    let a = SharedArray::<u64>::create(&name, LEN).unwrap();
    let init: Vec<u64> = (0..LEN as u64).map(|i| 1000 + i).collect();
    a.write(0, &init).unwrap();
    let mut child = spawn(ENTRY, "array-echo", &name);
    assert_eq!(wait_child(&mut child, LIMIT), Some(0));
    let mut expect: Vec<u64> = init.iter().map(|v| v * 2).collect();
    expect[LEN - 1] = 7;
    expect[1] += 1;
    assert_eq!(a.to_vec().unwrap(), expect);
    assert_eq!(a.get(1).unwrap(), 2003);
    let via_iter: Vec<u64> = a.iter().collect::<Result<_, _>>().unwrap();
    assert_eq!(via_iter, expect);
    assert_eq!(&*a.read_lock().unwrap(), &expect[..]);
}

#[test]
fn array_iterator_copies_in_chunks_and_stops_at_a_lock_timeout() {
    let name = unique("array-iter");
    let mut a = SharedArray::<u64>::create(&name, 3000).unwrap(); // several 4 KiB chunks
    let values: Vec<u64> = (0..3000).map(|i| i * i).collect();
    a.write(0, &values).unwrap();
    let mut it = a.iter();
    assert_eq!(it.size_hint(), (1, Some(3000)));
    assert_eq!(it.next().unwrap().unwrap(), 0);
    assert_eq!(it.size_hint().1, Some(2999));
    let rest: Vec<u64> = it.by_ref().collect::<Result<_, _>>().unwrap();
    assert_eq!(rest, values[1..]);
    assert!(it.next().is_none());
    let mut n = 0;
    for v in &a {
        assert_eq!(v.unwrap(), values[n]);
        n += 1;
    }
    assert_eq!(n, 3000);

    // Another handle (another attachment, as another process would be)
    // holds the write lock: the iterator reports the timeout once, then ends.
    a.set_lock_timeout(SHORT);
    let b = SharedArray::<u64>::open(&name).unwrap();
    let g = b.write_lock().unwrap();
    let mut it = a.iter();
    assert!(matches!(it.next(), Some(Err(Error::Timeout { .. }))));
    assert!(it.next().is_none());
    drop(g);
    assert_eq!(a.iter().count(), 3000);
}

#[test]
fn a_write_locked_array_blocks_readers_of_another_process_until_their_timeout() {
    let (name, ctl) = setup("array-wlock");
    let mut a = SharedArray::<u64>::create(&name, LEN).unwrap();
    a.set_lock_timeout(SHORT);
    assert_eq!(a.lock_timeout(), SHORT);
    let mut child = spawn(ENTRY, "array-hold-write", &name);
    await_flag(&ctl, 0, 1);
    assert!(is_timeout(a.get(0)));
    assert!(is_timeout(a.read(0, &mut [0; 4])));
    assert!(is_timeout(a.to_vec()));
    assert!(is_timeout(a.set(0, 1)));
    assert!(is_timeout(a.write(0, &[1, 2])));
    assert!(is_timeout(a.read_lock_timeout(SHORT)));
    assert!(is_timeout(a.write_lock_timeout(SHORT)));
    assert!(a.try_read_lock().unwrap().is_none());
    assert!(a.try_write_lock().unwrap().is_none());
    // Bounds are checked before waiting for the lock.
    assert!(is_invalid(a.get(LEN)));
    // A reader waiting with a long timeout gets in once the writer leaves,
    // and sees the writer's data.
    std::thread::scope(|s| {
        let reader = s.spawn(|| a.read_lock_timeout(LONG).map(|g| (g[0], g.owner_died())));
        flag(&ctl, 0).store(2, Ordering::SeqCst);
        assert_eq!(reader.join().unwrap().unwrap(), (42, false));
    });
    assert_eq!(wait_child(&mut child, LIMIT), Some(0));
    assert_eq!(a.get(0).unwrap(), 42);
    a.set(0, 43).unwrap();
}

#[test]
fn read_locks_of_several_processes_overlap_and_hold_off_writers() {
    let (name, ctl) = setup("array-rlock");
    let mut a = SharedArray::<u64>::create(&name, LEN).unwrap();
    a.set(0, 5).unwrap();
    a.set_lock_timeout(SHORT);
    let mut children = [spawn(ENTRY, "array-hold-read", &name), spawn(ENTRY, "array-hold-read", &name)];
    // Both children hold a read guard at the same time...
    await_flag(&ctl, 1, 2);
    // ...and so can we, a third reader.
    {
        let g = a.read_lock_timeout(SHORT).unwrap();
        assert_eq!(g[0], 5);
        assert_eq!(a.get(0).unwrap(), 5);
        assert!(a.try_read_lock().unwrap().is_some());
    }
    // A writer waits for every reader: here until its timeout.
    assert!(is_timeout(a.set(0, 6)));
    assert!(is_timeout(a.write_lock_timeout(SHORT)));
    assert!(a.try_write_lock().unwrap().is_none());
    // A timed-out writer withdrew: readers still get in.
    assert_eq!(a.get(0).unwrap(), 5);
    flag(&ctl, 2).store(1, Ordering::SeqCst);
    for c in &mut children {
        assert_eq!(wait_child(c, LIMIT), Some(0));
    }
    a.set_lock_timeout(LONG);
    a.set(0, 6).unwrap();
    assert!(!a.try_write_lock().unwrap().expect("free now").owner_died());
}

#[test]
fn a_writer_killed_holding_the_lock_is_reported_to_the_next_lockers() {
    let (name, ctl) = setup("array-dead");
    let mut a = SharedArray::<u64>::create(&name, LEN).unwrap();
    let mut child = spawn(ENTRY, "array-die-writing", &name);
    await_flag(&ctl, 0, 1);
    a.set_lock_timeout(SHORT);
    assert!(is_timeout(a.get(0)), "the writer is alive: readers wait");
    kill(&mut child);
    // The next locker gets in within a bounded time and is told.
    let r = a.read_lock_timeout(LONG).unwrap();
    assert!(r.owner_died());
    assert_eq!(r[0], 1, "the dead writer's half-update is visible");
    drop(r);
    let mut w = a.write_lock_timeout(LONG).unwrap();
    assert!(w.owner_died(), "reported until a writer releases normally");
    w[0] = 0; // repair
    drop(w);
    assert!(!a.read_lock_timeout(LONG).unwrap().owner_died());
    assert!(!a.write_lock_timeout(LONG).unwrap().owner_died());
    a.set_lock_timeout(LONG);
    assert_eq!(a.get(0).unwrap(), 0);
}

#[test]
fn a_writer_killed_holding_the_lock_does_not_wedge_plain_writes() {
    let (name, ctl) = setup("array-dead-set");
    let mut a = SharedArray::<u64>::create(&name, LEN).unwrap();
    let mut child = spawn(ENTRY, "array-die-writing", &name);
    await_flag(&ctl, 0, 1);
    kill(&mut child);
    a.set_lock_timeout(LONG);
    a.set(1, 11).unwrap();
    assert_eq!(a.to_vec().unwrap()[..2], [1, 11]);
    assert!(!a.try_read_lock().unwrap().expect("free").owner_died(), "a normal release clears the report");
}

#[test]
fn a_reader_killed_holding_the_lock_does_not_block_writers() {
    let (name, ctl) = setup("array-dead-reader");
    let mut a = SharedArray::<u64>::create(&name, LEN).unwrap();
    a.set(0, 5).unwrap();
    let mut child = spawn(ENTRY, "array-hold-read", &name);
    await_flag(&ctl, 1, 1);
    a.set_lock_timeout(SHORT);
    assert!(is_timeout(a.set(0, 6)), "the reader is alive: writers wait");
    kill(&mut child);
    a.set_lock_timeout(LONG);
    a.set(0, 6).unwrap();
    let w = a.write_lock_timeout(LONG).unwrap();
    assert!(!w.owner_died(), "a dead reader changed nothing");
    assert_eq!(w[0], 6);
}

// ---- SharedBuffer -----------------------------------------------------------

#[test]
fn buffer_open_without_create_is_not_found_and_create_twice_already_exists() {
    let name = unique("buffer-exists");
    assert!(matches!(SharedBuffer::open(&name), Err(Error::NotFound { .. })));
    let b = SharedBuffer::create(&name, 100).unwrap();
    assert!(matches!(SharedBuffer::create(&name, 100), Err(Error::AlreadyExists { .. })));
    assert!(matches!(SharedArray::<u8>::open(&name), Err(Error::KindMismatch { .. })));
    assert!(matches!(CircularBuffer::open(&name), Err(Error::KindMismatch { .. })));
    assert!(is_invalid(SharedBuffer::create(&unique("buffer-zero"), 0)));
    assert!(is_invalid(SharedBuffer::create(&unique("buffer-huge"), usize::MAX)));
    let c = SharedBuffer::builder(&name).create_or_open().unwrap();
    assert_eq!(c.len(), 100, "an existing buffer keeps its size");
    let other = SharedBuffer::builder(&name).size(5).create_or_open();
    assert!(matches!(other, Err(Error::Incompatible { field: "size", .. })), "{other:?}");
    drop((b, c));
    assert!(matches!(SharedBuffer::open(&name), Err(Error::NotFound { .. })));
}

#[test]
fn buffer_typed_slice_and_byte_round_trips_across_processes() {
    let (name, _ctl) = setup("buffer-echo");
    let b = SharedBuffer::create(&name, 1024).unwrap();
    assert_eq!(b.len(), 1024);
    b.write(0, &123i32).unwrap();
    b.write(1001, &0xDEAD_BEEF_0000_0001u64).unwrap(); // unaligned
    b.write_slice(17, &[Point { x: 1.0, y: 2.0 }, Point { x: -3.5, y: 4.25 }]).unwrap();
    b.write_bytes(500, b"hello").unwrap();
    let mut child = spawn(ENTRY, "buffer-echo", &name);
    assert_eq!(wait_child(&mut child, LIMIT), Some(0));
    assert_eq!(b.read::<i32>(3).unwrap(), 456);
    let mut shorts = [0u16; 3];
    b.read_slice(201, &mut shorts).unwrap();
    assert_eq!(shorts, [1, 2, 3]);
    let mut tail = [0u8; 5];
    b.read_bytes(1019, &mut tail).unwrap();
    assert_eq!(&tail, b"world");
    assert_eq!(b.read::<u8>(999).unwrap(), 0xAB);
    let seen =
        b.with_bytes(|bytes| (bytes.len(), bytes[999], bytemuck::pod_read_unaligned::<i32>(&bytes[3..7])));
    assert_eq!(seen.unwrap(), (1024, 0xAB, 456));
}

#[test]
fn buffer_bounds_are_errors_and_nothing_is_written_outside() {
    let name = unique("buffer-bounds");
    let b = SharedBuffer::create(&name, 16).unwrap();
    b.write_bytes(0, &[0xFF; 16]).unwrap();
    assert!(is_invalid(b.read::<u64>(9)));
    assert!(is_invalid(b.read::<u8>(16)));
    assert!(is_invalid(b.read::<u8>(usize::MAX)));
    assert!(is_invalid(b.write(13, &0u32)));
    assert!(is_invalid(b.write(usize::MAX, &0u8)));
    assert!(is_invalid(b.write_slice(10, &[0u16; 4])));
    assert!(is_invalid(b.read_slice(usize::MAX - 1, &mut [0u16; 2])));
    assert!(is_invalid(b.write_bytes(16, &[0])));
    assert!(is_invalid(b.write_bytes(usize::MAX, &[0])));
    assert!(is_invalid(b.read_bytes(17, &mut [])));
    assert_eq!(b.read::<u64>(8).unwrap(), u64::MAX, "the last whole u64 fits");
    assert_eq!(b.read::<u8>(15).unwrap(), 0xFF);
    b.read_bytes(16, &mut []).unwrap();
    b.write_slice::<u32>(16, &[]).unwrap();
    assert!(b.with_bytes(|bytes| bytes.iter().all(|&x| x == 0xFF)).unwrap(), "failed writes wrote nothing");
    // Zero-sized values have no bytes.
    b.write(16, &()).unwrap();
    b.read_slice(3, &mut [(); 4]).unwrap();
}

#[test]
fn a_write_locked_buffer_blocks_readers_of_another_process_until_their_timeout() {
    let (name, ctl) = setup("buffer-wlock");
    let mut b = SharedBuffer::create(&name, 64).unwrap();
    b.set_lock_timeout(SHORT);
    let mut child = spawn(ENTRY, "buffer-hold-write", &name);
    await_flag(&ctl, 0, 1);
    assert!(is_timeout(b.read::<u8>(0)));
    assert!(is_timeout(b.read_bytes(0, &mut [0; 4])));
    assert!(is_timeout(b.with_bytes(|_| ())));
    assert!(is_timeout(b.write(0, &1u8)));
    let mut called = false;
    assert!(is_timeout(b.with_bytes_mut(|_| called = true)));
    assert!(!called, "f is not called without the lock");
    flag(&ctl, 0).store(2, Ordering::SeqCst);
    assert_eq!(wait_child(&mut child, LIMIT), Some(0));
    assert_eq!(b.read::<u8>(0).unwrap(), 9);
}

#[test]
fn a_buffer_writer_killed_holding_the_lock_does_not_wedge_the_buffer() {
    let (name, ctl) = setup("buffer-dead");
    let mut b = SharedBuffer::create(&name, 64).unwrap();
    let mut child = spawn(ENTRY, "buffer-die-writing", &name);
    await_flag(&ctl, 0, 1);
    kill(&mut child);
    b.set_lock_timeout(LONG);
    assert_eq!(b.read::<u8>(0).unwrap(), 1);
    b.write(1, &2u8).unwrap();
    assert_eq!(b.with_bytes(|x| [x[0], x[1]]).unwrap(), [1, 2]);
}

/// The text of an `Incompatible` error names the object, the field and
/// both values, and says what to do.
fn assert_incompatible(err: Error, name: &str, field: &str, existing: &str, requested: &str) {
    match &err {
        Error::Incompatible { name: n, field: f, existing: e, requested: r } => {
            assert_eq!((n.as_str(), *f, e.as_str(), r.as_str()), (name, field, existing, requested));
        }
        other => panic!("expected Incompatible, got {other:?}"),
    }
    let text = err.to_string();
    assert!(text.contains(&format!("{name:?} exists with {field} = {existing}, not {requested}")), "{text}");
    assert!(text.contains("open it as it is, or remove it and create it anew"), "{text}");
}

#[test]
fn array_create_or_open_names_the_field_that_differs() {
    let name = unique("array-compat");
    let a = SharedArray::<u32>::builder(&name).len(8).create_or_open().unwrap();
    a.set(3, 33).unwrap();
    // The same length, or none asked for: the existing array.
    let same = SharedArray::<u32>::builder(&name).len(8).create_or_open().unwrap();
    assert_eq!(same.get(3).unwrap(), 33);
    assert_eq!(SharedArray::<u32>::builder(&name).create_or_open().unwrap().len(), 8);
    let builder = SharedArray::<u32>::builder(&name).len(9);
    assert_incompatible(builder.create_or_open().unwrap_err(), &name, "len", "8", "9");
    assert_incompatible(builder.open().unwrap_err(), &name, "len", "8", "9");
    let err = SharedArray::<u64>::builder(&name).create_or_open().unwrap_err();
    let field = match &err {
        Error::Incompatible { field, existing, requested, .. } => {
            assert!(existing.contains("u32") && requested.contains("u64"), "{err}");
            *field
        }
        other => panic!("expected Incompatible, got {other:?}"),
    };
    assert_eq!(field, "element type");
    assert!(err.to_string().contains("remove it and create it anew"), "{err}");
    // Plain open keeps its own error for another type.
    assert!(matches!(SharedArray::<u64>::open(&name), Err(Error::TypeMismatch { .. })));
}

#[test]
fn buffer_create_or_open_names_the_field_that_differs() {
    let name = unique("buffer-compat");
    let b = SharedBuffer::builder(&name).size(100).create_or_open().unwrap();
    b.write(10, &7u64).unwrap();
    let same = SharedBuffer::builder(&name).size(100).create_or_open().unwrap();
    assert_eq!(same.read::<u64>(10).unwrap(), 7);
    assert_eq!(SharedBuffer::builder(&name).create_or_open().unwrap().len(), 100);
    let builder = SharedBuffer::builder(&name).size(4096);
    assert_incompatible(builder.create_or_open().unwrap_err(), &name, "size", "100", "4096");
    assert_incompatible(builder.open().unwrap_err(), &name, "size", "100", "4096");
    // A lock timeout says what it waited for and what to do.
    let guard = b.segment().name().to_owned();
    let held = SharedBuffer::builder(&guard).lock_timeout(Some(Duration::from_millis(20))).open().unwrap();
    let text = held
        .with_bytes_mut(|_| {
            let e = same.read::<u64>(0).unwrap_err();
            assert!(e.is_timeout(), "{e:?}");
            e.to_string()
        })
        .unwrap();
    assert!(text.contains("read lock") && text.contains("wait longer"), "{text}");
}
