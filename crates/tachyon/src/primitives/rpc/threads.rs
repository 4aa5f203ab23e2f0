//! How an RPC end starts its threads: the system's threads by default, or
//! the caller's spawner ([`RpcBuilder::thread_spawner`]), and how it waits
//! for a thread that is not a `std` one to end.
//!
//! [`RpcBuilder::thread_spawner`]: super::RpcBuilder::thread_spawner

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::{JoinHandle, ThreadId};

/// The work of one of an RPC end's threads, given to the end's
/// [`thread_spawner`](super::RpcBuilder::thread_spawner): run it once, on
/// a thread of its own; it returns when the end closes.
///
/// ```
/// use tachyon::primitives::rpc::ThreadWork;
/// // A spawner that starts each thread with a 256 KiB stack.
/// fn small_stacks(name: &str, work: ThreadWork) -> std::io::Result<()> {
///     std::thread::Builder::new().name(name.to_owned()).stack_size(256 << 10).spawn(work).map(drop)
/// }
/// # let name = format!("doc-rpc-thread-work-{}", std::process::id());
/// let server = tachyon::RpcBuffer::builder(&name).thread_spawner(small_stacks).create()?;
/// # drop(server);
/// # Ok::<(), tachyon::Error>(())
/// ```
pub type ThreadWork = Box<dyn FnOnce() + Send + 'static>;

/// A caller's spawner: gets the thread's name and its work.
pub(super) type SpawnFn = Arc<dyn Fn(&str, ThreadWork) -> std::io::Result<()> + Send + Sync>;

/// Starts an end's threads.
#[derive(Clone, Default)]
pub(super) struct Spawner(Option<SpawnFn>);

impl Spawner {
    pub(super) fn new(f: Option<SpawnFn>) -> Spawner {
        Spawner(f)
    }

    /// Runs `work` on a new thread named `name`. On an error `work` has
    /// been dropped, never run.
    pub(super) fn spawn(&self, name: &str, work: impl FnOnce() + Send + 'static) -> std::io::Result<Joiner> {
        let Some(spawn) = &self.0 else {
            return std::thread::Builder::new().name(name.to_owned()).spawn(work).map(Joiner::Std);
        };
        let latch = Arc::new(Latch::default());
        let end = Ended(Arc::clone(&latch));
        let work: ThreadWork = Box::new(move || {
            latch_start(&end.0);
            work();
            drop(end); // the latch opens here, or when the work is dropped unrun
        });
        // A spawner that panics is a spawner that failed (it may be called
        // on this end's reader thread, which must go on).
        match catch_unwind(AssertUnwindSafe(|| spawn(name, work))) {
            Ok(Ok(())) => Ok(Joiner::Latch(latch)),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(std::io::Error::other(format!("the thread spawner panicked starting {name:?}"))),
        }
    }
}

/// A thread's state, for those the caller's spawner starts.
#[derive(Default)]
pub(super) struct Latch {
    state: Mutex<Run>,
    cond: Condvar,
}

#[derive(Default, Clone, Copy, PartialEq)]
enum Run {
    #[default]
    NotYet,
    On(ThreadId),
    Over,
}

fn latch_start(latch: &Latch) {
    *latch.state.lock().unwrap_or_else(|p| p.into_inner()) = Run::On(std::thread::current().id());
}

/// Opens its latch when dropped: after the work ran (or unwound), or with
/// the work if the spawner dropped it unrun.
struct Ended(Arc<Latch>);

impl Drop for Ended {
    fn drop(&mut self) {
        *self.0.state.lock().unwrap_or_else(|p| p.into_inner()) = Run::Over;
        self.0.cond.notify_all();
    }
}

/// Waits for a thread to end.
pub(super) enum Joiner {
    Std(JoinHandle<()>),
    Latch(Arc<Latch>),
}

impl Joiner {
    /// Waits until the thread's work has ended; at once when called on
    /// that thread itself.
    pub(super) fn join(self) {
        match self {
            Joiner::Std(h) => {
                if h.thread().id() != std::thread::current().id() {
                    let _ = h.join();
                }
            }
            Joiner::Latch(latch) => {
                let me = std::thread::current().id();
                let mut s = latch.state.lock().unwrap_or_else(|p| p.into_inner());
                while *s != Run::Over && *s != Run::On(me) {
                    s = latch.cond.wait(s).unwrap_or_else(|p| p.into_inner());
                }
            }
        }
    }
}

#[cfg(all(test, not(tachyon_loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::mpsc;
    use std::time::Duration;

    /// A spawner that starts `std` threads, handing each its work as the
    /// end's caller-given spawners do.
    fn spawner() -> Spawner {
        Spawner::new(Some(Arc::new(|name: &str, work: ThreadWork| {
            std::thread::Builder::new().name(name.to_owned()).spawn(work).map(drop)
        })))
    }

    /// Joins `joiner` on a thread of its own; whether that returned within
    /// a minute (a join that never returns fails the test instead of
    /// hanging it).
    fn joined(joiner: Joiner) -> bool {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            joiner.join();
            let _ = tx.send(());
        });
        rx.recv_timeout(Duration::from_secs(60)).is_ok()
    }

    /// The join of a thread that a caller's spawner started returns only
    /// once its work has returned: the work's last store is seen. (This
    /// is what an end's drop waits for; the spawner's own code after the
    /// work, which `tests/rpc_threads.rs` records, may still be running.)
    /// Checked to fail with a join that returns at once.
    #[test]
    fn a_join_waits_for_the_spawned_work_to_return() {
        let (go, wait) = mpsc::channel::<()>();
        let done = Arc::new(AtomicBool::new(false));
        let joiner = {
            let done = Arc::clone(&done);
            spawner()
                .spawn("tachyon-test-work", move || {
                    wait.recv().unwrap();
                    std::thread::sleep(Duration::from_millis(20));
                    done.store(true, Ordering::SeqCst);
                })
                .unwrap()
        };
        assert!(matches!(joiner, Joiner::Latch(_)));
        go.send(()).unwrap();
        assert!(joined(joiner), "the join returned");
        assert!(done.load(Ordering::SeqCst), "the join returned before the work did");
    }

    /// A work the spawner drops unrun opens the latch: the join returns.
    /// A join on the work's own thread returns at once (an end dropped on
    /// its reader thread never waits for itself).
    #[test]
    fn a_join_of_work_never_run_or_of_its_own_thread_returns() {
        let dropping = Spawner::new(Some(Arc::new(|_: &str, work: ThreadWork| {
            drop(work);
            Ok(())
        })));
        let unrun = dropping.spawn("tachyon-test-unrun", || unreachable!("never run")).unwrap();
        assert!(joined(unrun), "the join of a work dropped unrun returned");

        let (tx, rx) = mpsc::channel::<Joiner>();
        let (back, out) = mpsc::channel::<()>();
        let joiner = spawner()
            .spawn("tachyon-test-self", move || {
                let mine = rx.recv().unwrap();
                mine.join(); // its own: at once
                back.send(()).unwrap();
            })
            .unwrap();
        tx.send(joiner).unwrap();
        out.recv_timeout(Duration::from_secs(60)).expect("the thread's join of itself returned");
    }
}
