//! Loom models of the state machines in `tachyon::sync`, over heap memory.
//!
//! ```text
//! RUSTFLAGS="--cfg tachyon_loom" CARGO_TARGET_DIR=target/loom \
//!     cargo test -p tachyon-shm --release --test loom_sync
//! ```
//!
//! Protected data lives in a loom `UnsafeCell`, so loom reports any access
//! not ordered by the lock (overlap, or a missing acquire/release). Under
//! loom the futex is a wait queue in which sleepers block, so a lost
//! wake-up is reported as a deadlock; a timed sleep (a lock waiter's slice)
//! also ends when a holder dies (`Peer::die` makes time pass). Models use
//! no timeouts except `Some(ZERO)` (a try).
#![cfg(tachyon_loom)]

use loom::cell::UnsafeCell;
use loom::sync::atomic::{AtomicU32, Ordering::*};
use loom::sync::Arc;
use loom::thread;
use std::time::Duration;
use tachyon::sync::{Event, EventMode, Liveness, Mutex, RwLock, Token, WaitCell, WaitPolicy};

/// Runs `f` under loom with at most `preemptions` preemptions per path.
fn model(preemptions: usize, f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(preemptions);
    builder.check(f);
}

/// A fake Liveness: `dead` holds one bit per attach slot.
#[derive(Clone)]
struct Peer {
    token: Token,
    dead: Arc<AtomicU32>,
}

impl Peer {
    fn new(dead: &Arc<AtomicU32>, slot: usize) -> Peer {
        Peer { token: Token::new(slot, 1), dead: dead.clone() }
    }

    /// The attachment is gone: from now on `is_dead` says so, and the
    /// waiters' sleep slices run out.
    fn die(&self) {
        self.dead.fetch_or(1 << self.token.slot(), SeqCst);
        tachyon::sync::loom_time_passes();
    }
}

impl Liveness for Peer {
    fn token(&self) -> Token {
        self.token
    }
    fn is_dead(&self, token: Token) -> bool {
        self.dead.load(SeqCst) & (1 << token.slot()) != 0
    }
}

/// Data the lock under test protects.
struct Shared(UnsafeCell<u32>);

// SAFETY: every access goes through `bump`/`get` under the lock being
// modelled, and loom checks that those accesses are ordered.
unsafe impl Sync for Shared {}

impl Shared {
    fn new() -> Arc<Shared> {
        Arc::new(Shared(UnsafeCell::new(0)))
    }
    fn bump(&self) {
        // SAFETY: called with exclusive access (a mutex or write guard);
        // loom reports it otherwise.
        self.0.with_mut(|p| unsafe { *p += 1 });
    }
    fn get(&self) -> u32 {
        // SAFETY: called with shared access (a read guard) or after joins;
        // loom reports a concurrent writer.
        self.0.with(|p| unsafe { *p })
    }
}

#[test]
fn mutex_excludes() {
    model(3, || {
        let dead = Arc::new(AtomicU32::new(0));
        let m = Arc::new(Mutex::new());
        let data = Shared::new();
        let threads: Vec<_> = (0..2)
            .map(|i| {
                let (m, data, me) = (m.clone(), data.clone(), Peer::new(&dead, i));
                thread::spawn(move || {
                    let g = m.lock(&me, None).unwrap();
                    assert!(!g.owner_died());
                    data.bump();
                })
            })
            .collect();
        let me = Peer::new(&dead, 2);
        if let Some(g) = m.try_lock(&me).unwrap() {
            data.bump();
            drop(g);
        } else {
            let g = m.lock(&me, None).unwrap();
            data.bump();
            drop(g);
        }
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(data.get(), 3);
        assert!(!m.is_locked());
    });
}

#[test]
fn mutex_dead_holder_taken_over_once() {
    model(3, || {
        let dead = Arc::new(AtomicU32::new(0));
        let m = Arc::new(Mutex::new());
        let ghost = Peer::new(&dead, 0);
        std::mem::forget(m.lock(&ghost, None).unwrap());
        let died = Arc::new(AtomicU32::new(0));
        let data = Shared::new();
        let threads: Vec<_> = (1..3)
            .map(|i| {
                let (m, died, data, me) = (m.clone(), died.clone(), data.clone(), Peer::new(&dead, i));
                thread::spawn(move || {
                    let g = m.lock(&me, None).unwrap();
                    if g.owner_died() {
                        died.fetch_add(1, Relaxed);
                    }
                    data.bump();
                })
            })
            .collect();
        ghost.die();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(died.load(Relaxed), 1, "exactly one taker reports owner-died");
        assert_eq!(data.get(), 2);
        assert!(!m.is_locked());
    });
}

#[test]
fn rwlock_writer_excludes_readers() {
    model(3, || {
        let dead = Arc::new(AtomicU32::new(0));
        let lock = Arc::new(RwLock::new());
        let data = Shared::new();
        let writer = {
            let (lock, data, me) = (lock.clone(), data.clone(), Peer::new(&dead, 0));
            thread::spawn(move || {
                let g = lock.write(&me, None).unwrap();
                assert!(!g.owner_died());
                data.bump();
            })
        };
        let reader = {
            let (lock, data, me) = (lock.clone(), data.clone(), Peer::new(&dead, 1));
            thread::spawn(move || {
                let g = lock.read(&me, None).unwrap();
                assert!(data.get() <= 1);
                drop(g);
            })
        };
        let g = lock.read(&Peer::new(&dead, 2), None).unwrap();
        assert!(data.get() <= 1);
        drop(g);
        writer.join().unwrap();
        reader.join().unwrap();
        assert_eq!(data.get(), 1);
        assert_eq!(lock.reader_count(), 0);
        assert!(!lock.is_write_locked());
    });
}

/// Two writers and a reader: writers exclude each other and the reader,
/// and a writer that slept hands the lock on.
#[test]
fn rwlock_writers_exclude_each_other() {
    model(3, || {
        let dead = Arc::new(AtomicU32::new(0));
        let lock = Arc::new(RwLock::new());
        let data = Shared::new();
        let writers: Vec<_> = (0..2)
            .map(|i| {
                let (lock, data, me) = (lock.clone(), data.clone(), Peer::new(&dead, i));
                thread::spawn(move || {
                    let _g = lock.write(&me, None).unwrap();
                    data.bump();
                })
            })
            .collect();
        let g = lock.read(&Peer::new(&dead, 2), None).unwrap();
        assert!(data.get() <= 2);
        drop(g);
        for w in writers {
            w.join().unwrap();
        }
        assert_eq!(data.get(), 2);
        assert!(!lock.is_write_locked());
    });
}

/// Two read guards of one attachment (one entry, count 2): the writer may
/// not enter when the first is dropped while the second still reads.
#[test]
fn rwlock_readers_counted() {
    model(3, || {
        let dead = Arc::new(AtomicU32::new(0));
        let lock = Arc::new(RwLock::new());
        let data = Shared::new();
        let first = lock.read(&Peer::new(&dead, 1), None).unwrap();
        let second_reader = {
            let (lock, data, me) = (lock.clone(), data.clone(), Peer::new(&dead, 1));
            thread::spawn(move || {
                let g = lock.read(&me, None).unwrap();
                let v = data.get();
                drop(g);
                v
            })
        };
        let writer = {
            let (lock, data, me) = (lock.clone(), data.clone(), Peer::new(&dead, 0));
            thread::spawn(move || {
                let _g = lock.write(&me, None).unwrap();
                data.bump();
            })
        };
        assert_eq!(data.get(), 0);
        drop(first);
        assert!(second_reader.join().unwrap() <= 1);
        writer.join().unwrap();
        assert_eq!(data.get(), 1);
        assert_eq!(lock.reader_count(), 0);
    });
}

/// A reader dies holding its guard: a writer clears its entry and gets in
/// (without owner-died: readers change nothing), alongside a live reader.
#[test]
fn rwlock_dead_reader_cleared() {
    model(3, || {
        let dead = Arc::new(AtomicU32::new(0));
        let lock = Arc::new(RwLock::new());
        let data = Shared::new();
        let ghost = Peer::new(&dead, 3);
        std::mem::forget(lock.read(&ghost, None).unwrap());
        let writer = {
            let (lock, data, me) = (lock.clone(), data.clone(), Peer::new(&dead, 0));
            thread::spawn(move || {
                let g = lock.write(&me, None).unwrap();
                data.bump();
                g.owner_died()
            })
        };
        let reader = {
            let (lock, data, me) = (lock.clone(), data.clone(), Peer::new(&dead, 1));
            thread::spawn(move || {
                let _g = lock.read(&me, None).unwrap();
                assert!(data.get() <= 1);
            })
        };
        ghost.die();
        assert!(!writer.join().unwrap());
        reader.join().unwrap();
        assert_eq!(lock.reader_count(), 0);
    });
}

/// A writer dies holding the lock: a reader and a writer both get in, and
/// the writer reports owner-died (whether a reader cleared the dead writer
/// first or the writer took over).
#[test]
fn rwlock_dead_writer_reported() {
    model(3, || {
        let dead = Arc::new(AtomicU32::new(0));
        let lock = Arc::new(RwLock::new());
        let data = Shared::new();
        let ghost = Peer::new(&dead, 3);
        std::mem::forget(lock.write(&ghost, None).unwrap());
        let writer = {
            let (lock, data, me) = (lock.clone(), data.clone(), Peer::new(&dead, 0));
            thread::spawn(move || {
                let g = lock.write(&me, None).unwrap();
                data.bump();
                g.owner_died()
            })
        };
        let reader = {
            let (lock, data, me) = (lock.clone(), data.clone(), Peer::new(&dead, 1));
            thread::spawn(move || {
                let _g = lock.read(&me, None).unwrap();
                assert!(data.get() <= 1);
            })
        };
        ghost.die();
        assert!(writer.join().unwrap());
        reader.join().unwrap();
        assert!(!lock.is_write_locked());
    });
}

/// Auto-reset: one set lets at most one of two tries through, and the set
/// is either taken once or still pending.
#[test]
fn event_auto_reset_one_per_set() {
    model(3, || {
        let e = Arc::new(Event::new(EventMode::AutoReset));
        let tries: Vec<_> = (0..2)
            .map(|_| {
                let e = e.clone();
                thread::spawn(move || e.wait(Some(Duration::ZERO)).is_ok())
            })
            .collect();
        e.set();
        let passed = tries.into_iter().map(|t| t.join().unwrap() as u32).sum::<u32>();
        assert_eq!(passed + e.is_set() as u32, 1);
    });
}

/// Auto-reset: two sleeping waiters, two sets (the second after the first
/// was taken): both pass, nothing is lost.
#[test]
fn event_auto_reset_wakes_each_waiter() {
    model(3, || {
        let e = Arc::new(Event::new(EventMode::AutoReset));
        let data = Shared::new();
        let waiters: Vec<_> = (0..2)
            .map(|_| {
                let (e, data) = (e.clone(), data.clone());
                thread::spawn(move || {
                    e.wait(None).unwrap();
                    data.get()
                })
            })
            .collect();
        data.bump();
        e.set();
        while e.is_set() {
            thread::yield_now();
        }
        e.set();
        for w in waiters {
            assert_eq!(w.join().unwrap(), 1);
        }
        assert!(!e.is_set());
    });
}

/// Manual-reset: one set releases both waiters, and what was written
/// before the set is visible to them.
#[test]
fn event_manual_reset_releases_all() {
    model(3, || {
        let e = Arc::new(Event::new(EventMode::AutoReset));
        e.set_mode(EventMode::ManualReset);
        let data = Shared::new();
        let waiters: Vec<_> = (0..2)
            .map(|_| {
                let (e, data) = (e.clone(), data.clone());
                thread::spawn(move || {
                    e.wait(None).unwrap();
                    data.get()
                })
            })
            .collect();
        data.bump();
        e.set();
        for w in waiters {
            assert_eq!(w.join().unwrap(), 1);
        }
        assert!(e.is_set());
    });
}

/// A waiter that checks, registers and sleeps races a notifier that makes
/// the condition true and notifies: the waiter always wakes.
#[test]
fn waitcell_no_lost_notify() {
    for policy in [WaitPolicy::Futex, WaitPolicy::Hybrid, WaitPolicy::Spin] {
        model(3, move || {
            let cell = Arc::new(WaitCell::new());
            let flag = Arc::new(AtomicU32::new(0));
            let waiter = {
                let (cell, flag) = (cell.clone(), flag.clone());
                thread::spawn(move || {
                    cell.wait_until(policy, None, || (flag.load(Relaxed) != 0).then_some(()))
                })
            };
            flag.store(1, Relaxed);
            cell.notify_all();
            waiter.join().unwrap().unwrap();
        });
    }
}

/// Two consumers take one token each; the producer adds a token and calls
/// `notify_one`, twice. Both consumers finish.
#[test]
fn waitcell_notify_one_hands_out_tokens() {
    model(3, || {
        let cell = Arc::new(WaitCell::new());
        let tokens = Arc::new(AtomicU32::new(0));
        let consumers: Vec<_> = (0..2)
            .map(|_| {
                let (cell, tokens) = (cell.clone(), tokens.clone());
                thread::spawn(move || {
                    // A lost CAS race is not "no token": retry (fetch_update).
                    cell.wait_until(WaitPolicy::Futex, None, || {
                        tokens.fetch_update(Acquire, Acquire, |t| t.checked_sub(1)).ok()
                    })
                })
            })
            .collect();
        for _ in 0..2 {
            tokens.fetch_add(1, Release);
            cell.notify_one();
        }
        for c in consumers {
            c.join().unwrap().unwrap();
        }
        assert_eq!(tokens.load(Relaxed), 0);
    });
}
