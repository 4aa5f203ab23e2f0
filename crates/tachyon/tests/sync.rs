//! Process-shared synchronisation across real processes: a SIGKILLed lock
//! holder, reader/writer exclusion under load, events between processes.
#![cfg(not(tachyon_loom))]

mod common;

use common::{kill, spawn, unique, wait_child, wait_for, LIMIT};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tachyon::sync::{Event, EventMode, Mutex, RwLock};
use tachyon::{Error, Segment};

const ENTRY: &str = "child_entry";
const SHORT: Option<Duration> = Some(Duration::from_millis(30));
const LONG: Option<Duration> = Some(Duration::from_secs(20));

// Layout of the test segment.
const MUTEX: usize = 0;
const EVENT: usize = 64;
const RWLOCK: usize = 128; // 532 bytes
const FLAG: usize = 1024;
const READERS_INSIDE: usize = 1032;
const WRITERS_INSIDE: usize = 1040;
const VIOLATIONS: usize = 1048;
const COUNTER: usize = 1056;
const MAX_READERS_SEEN: usize = 1064;
const RELEASE: usize = 1072;
const SIZE: usize = 4096;

const HAMMER_ROUNDS: u64 = 2_000;

fn at(seg: &Segment, off: usize) -> &AtomicU64 {
    seg.get::<AtomicU64>(off).unwrap()
}

#[test]
fn child_entry() {
    let Some((role, args)) = common::role() else { return };
    let name = args.str("name");
    let seg = Segment::open(name).unwrap();
    match role.as_str() {
        "hold-mutex" => {
            let _g = seg.get::<Mutex>(MUTEX).unwrap().lock(&seg, LONG).unwrap();
            at(&seg, FLAG).store(1, Ordering::SeqCst);
            std::thread::sleep(LIMIT); // SIGKILLed here, holding the lock
        }
        "hold-read" => {
            let _g = seg.get::<RwLock>(RWLOCK).unwrap().read(&seg, LONG).unwrap();
            at(&seg, FLAG).fetch_add(1, Ordering::SeqCst);
            // Hold until told (or killed).
            assert!(wait_for(LIMIT, || at(&seg, RELEASE).load(Ordering::SeqCst) == 1));
        }
        "hammer-reader" => {
            let lock = seg.get::<RwLock>(RWLOCK).unwrap();
            for _ in 0..HAMMER_ROUNDS {
                let _g = lock.read(&seg, LONG).unwrap();
                let inside = at(&seg, READERS_INSIDE).fetch_add(1, Ordering::SeqCst) + 1;
                at(&seg, MAX_READERS_SEEN).fetch_max(inside, Ordering::SeqCst);
                if at(&seg, WRITERS_INSIDE).load(Ordering::SeqCst) != 0 {
                    at(&seg, VIOLATIONS).fetch_add(1, Ordering::SeqCst);
                }
                std::hint::spin_loop();
                at(&seg, READERS_INSIDE).fetch_sub(1, Ordering::SeqCst);
            }
        }
        "hammer-writer" => {
            let lock = seg.get::<RwLock>(RWLOCK).unwrap();
            for _ in 0..HAMMER_ROUNDS {
                let _g = lock.write(&seg, LONG).unwrap();
                if at(&seg, WRITERS_INSIDE).fetch_add(1, Ordering::SeqCst) != 0
                    || at(&seg, READERS_INSIDE).load(Ordering::SeqCst) != 0
                {
                    at(&seg, VIOLATIONS).fetch_add(1, Ordering::SeqCst);
                }
                // A non-atomic increment: lost updates show if two writers overlap.
                let c = at(&seg, COUNTER).load(Ordering::SeqCst);
                std::hint::spin_loop();
                at(&seg, COUNTER).store(c + 1, Ordering::SeqCst);
                at(&seg, WRITERS_INSIDE).fetch_sub(1, Ordering::SeqCst);
            }
        }
        "wait-event" => {
            let event = seg.get::<Event>(EVENT).unwrap();
            at(&seg, FLAG).fetch_add(1, Ordering::SeqCst);
            event.wait(LONG).unwrap();
            at(&seg, COUNTER).fetch_add(1, Ordering::SeqCst);
        }
        other => panic!("unknown role {other}"),
    }
    std::process::exit(0);
}

fn segment(tag: &str) -> (String, Segment) {
    let name = unique(tag);
    let seg = Segment::create(&name, SIZE).unwrap();
    (name, seg)
}

#[test]
fn a_sigkilled_mutex_holder_is_detected_and_the_next_locker_is_told() {
    let (name, seg) = segment("sync-mutex-kill");
    let mutex = seg.get::<Mutex>(MUTEX).unwrap();
    let mut child = spawn(ENTRY, "hold-mutex", &name);
    assert!(wait_for(LIMIT, || at(&seg, FLAG).load(Ordering::SeqCst) == 1));
    // Held by a live process: we wait, then time out.
    assert!(matches!(mutex.lock(&seg, SHORT), Err(Error::Timeout { .. })));
    assert!(mutex.try_lock(&seg).unwrap().is_none());
    kill(&mut child);
    // Dead now: the lock is handed over, with the news.
    let guard = mutex.lock(&seg, LONG).expect("takes over a dead holder's lock in bounded time");
    assert!(guard.owner_died());
    drop(guard);
    let again = mutex.lock(&seg, SHORT).unwrap();
    assert!(!again.owner_died(), "reported once, to the locker that took over");
}

#[test]
fn readers_and_writers_in_four_processes_exclude_each_other() {
    let (name, seg) = segment("sync-rw-hammer");
    let mut children: Vec<_> = ["hammer-reader", "hammer-reader", "hammer-writer", "hammer-writer"]
        .into_iter()
        .map(|role| spawn(ENTRY, role, &name))
        .collect();
    for c in &mut children {
        assert_eq!(wait_child(c, Duration::from_secs(120)), Some(0));
    }
    assert_eq!(at(&seg, VIOLATIONS).load(Ordering::SeqCst), 0, "a writer overlapped someone");
    assert_eq!(at(&seg, COUNTER).load(Ordering::SeqCst), 2 * HAMMER_ROUNDS, "lost updates");
    eprintln!("most readers inside at once: {}", at(&seg, MAX_READERS_SEEN).load(Ordering::SeqCst));
}

#[test]
fn read_locks_overlap_across_processes_and_a_dead_reader_does_not_block_writers() {
    let (name, seg) = segment("sync-rw-overlap");
    let lock = seg.get::<RwLock>(RWLOCK).unwrap();
    let mut a = spawn(ENTRY, "hold-read", &name);
    let mut b = spawn(ENTRY, "hold-read", &name);
    assert!(wait_for(LIMIT, || at(&seg, FLAG).load(Ordering::SeqCst) == 2), "two readers inside at once");
    // And a third, here, while both hold it.
    let mine = lock.read(&seg, SHORT).expect("read locks overlap");
    assert!(matches!(lock.write(&seg, SHORT), Err(Error::Timeout { .. })), "writers wait for readers");
    drop(mine);
    // One reader leaves normally, the other is killed holding its lock.
    at(&seg, RELEASE).store(1, Ordering::SeqCst);
    assert_eq!(wait_child(&mut a, LIMIT), Some(0));
    kill(&mut b);
    let w = lock.write(&seg, LONG).expect("a dead reader's count is cleared");
    assert!(!w.owner_died(), "readers change nothing: no owner-died");
}

#[test]
fn events_wake_waiters_in_other_processes() {
    let (name, seg) = segment("sync-event");
    let event = seg.get::<Event>(EVENT).unwrap();
    // The timeout fires when nobody sets it.
    assert!(matches!(event.wait(SHORT), Err(Error::Timeout { .. })));

    // Auto-reset: one set lets one waiter through.
    let mut waiters: Vec<_> = (0..2).map(|_| spawn(ENTRY, "wait-event", &name)).collect();
    assert!(wait_for(LIMIT, || at(&seg, FLAG).load(Ordering::SeqCst) == 2));
    std::thread::sleep(Duration::from_millis(20)); // let them go to sleep
    event.set();
    assert!(wait_for(LIMIT, || at(&seg, COUNTER).load(Ordering::SeqCst) == 1));
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(at(&seg, COUNTER).load(Ordering::SeqCst), 1, "auto-reset released only one waiter");
    event.set();
    for w in &mut waiters {
        assert_eq!(wait_child(w, LIMIT), Some(0));
    }
    assert_eq!(at(&seg, COUNTER).load(Ordering::SeqCst), 2);

    // Manual reset: one set releases every waiter, and stays set.
    event.set_mode(EventMode::ManualReset);
    event.reset();
    let mut waiters: Vec<_> = (0..3).map(|_| spawn(ENTRY, "wait-event", &name)).collect();
    assert!(wait_for(LIMIT, || at(&seg, FLAG).load(Ordering::SeqCst) == 5));
    event.set();
    for w in &mut waiters {
        assert_eq!(wait_child(w, LIMIT), Some(0));
    }
    assert_eq!(at(&seg, COUNTER).load(Ordering::SeqCst), 5);
    assert!(event.is_set());
    event.wait(SHORT).unwrap();
}
