//! The handler thread pool of one RPC end: a few threads kept ready, and
//! more started while all of them are busy, so that a handler that calls
//! the other side (a nested call) always finds a thread for the answer.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};

/// Extra handler threads started when every pool thread is busy (nested
/// calls), at most.
const MAX_EXTRA_THREADS: usize = 1024;
/// Work for a handler thread.
pub(super) type Job = Box<dyn FnOnce() + Send>;

/// Handler threads: a few kept ready, more started while all are busy, so
/// that nested calls always find a thread.
pub(super) struct Pool {
    /// Jobs, each marked whether it was promised to an idle thread.
    tx: Mutex<mpsc::Sender<(Job, bool)>>,
    /// Threads waiting for work, not yet promised a job.
    // Relaxed throughout, pairs with nothing: a count that publishes no
    // data (the job goes through the channel, which synchronises it), and
    // read-modify-writes of one atomic are never lost whatever their
    // ordering. A stale look at it only starts an extra thread.
    idle: Arc<AtomicUsize>,
    /// Extra threads running now, at most `MAX_EXTRA_THREADS`.
    // Relaxed throughout, pairs with nothing: a count only, as `idle`.
    extra: Arc<AtomicUsize>,
}

impl Pool {
    pub(super) fn new(threads: usize) -> Pool {
        let (tx, rx) = mpsc::channel::<(Job, bool)>();
        let rx = Arc::new(Mutex::new(rx));
        let idle = Arc::new(AtomicUsize::new(0));
        for i in 0..threads {
            let rx = Arc::clone(&rx);
            let idle = Arc::clone(&idle);
            let _ =
                std::thread::Builder::new().name(format!("tachyon-rpc-handler-{i}")).spawn(move || loop {
                    // Available from now until it takes a job; a submitter that
                    // promised the job to it has already taken that back.
                    idle.fetch_add(1, Ordering::Relaxed);
                    let job = rx.lock().unwrap_or_else(|p| p.into_inner()).recv();
                    match job {
                        Ok((job, promised)) => {
                            if !promised {
                                idle.fetch_sub(1, Ordering::Relaxed);
                            }
                            job();
                        }
                        Err(_) => return, // the channel is gone
                    }
                });
        }
        Pool { tx: Mutex::new(tx), idle, extra: Arc::new(AtomicUsize::new(0)) }
    }

    pub(super) fn submit(&self, job: Job) {
        let send = |job: Job, promised: bool| {
            let _ = self.tx.lock().unwrap_or_else(|p| p.into_inner()).send((job, promised));
        };
        // Promise the job to an idle thread, if there is one.
        if self.idle.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |i| i.checked_sub(1)).is_ok() {
            return send(job, true);
        }
        // All busy (nested calls, slow handlers): a thread for this job.
        if self.extra.fetch_add(1, Ordering::Relaxed) < MAX_EXTRA_THREADS {
            let extra = Arc::clone(&self.extra);
            let job = Arc::new(Mutex::new(Some(job)));
            let run = Arc::clone(&job);
            let spawned =
                std::thread::Builder::new().name("tachyon-rpc-handler-extra".into()).spawn(move || {
                    if let Some(job) = run.lock().unwrap_or_else(|p| p.into_inner()).take() {
                        job();
                    }
                    extra.fetch_sub(1, Ordering::Relaxed);
                });
            if spawned.is_ok() {
                return;
            }
            self.extra.fetch_sub(1, Ordering::Relaxed);
            if let Some(job) = job.lock().unwrap_or_else(|p| p.into_inner()).take() {
                send(job, false);
            }
            return;
        }
        self.extra.fetch_sub(1, Ordering::Relaxed);
        send(job, false);
    }
}
