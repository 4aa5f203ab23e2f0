//! The handler thread pool of one RPC end: a few threads kept ready, and
//! more started while all of them are busy, so that a handler that calls
//! the other side (a nested call) always finds a thread for the answer.

use std::sync::atomic::{AtomicUsize, Ordering};
use super::threads::Spawner;
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
    /// Starts the threads.
    threads: Spawner,
    /// Whether any of the threads kept ready started (else a job that no
    /// extra thread can take runs on the submitting thread).
    any: bool,
}

impl Pool {
    pub(super) fn new(count: usize, threads: &Spawner) -> Pool {
        let (tx, rx) = mpsc::channel::<(Job, bool)>();
        let rx = Arc::new(Mutex::new(rx));
        let idle = Arc::new(AtomicUsize::new(0));
        let mut any = false;
        for i in 0..count {
            let rx = Arc::clone(&rx);
            let idle = Arc::clone(&idle);
            // A thread that does not start leaves the jobs to the others,
            // or to extra threads (`submit`).
            let started = threads.spawn(&format!("tachyon-rpc-handler-{i}"), move || loop {
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
            any |= started.is_ok();
        }
        Pool { tx: Mutex::new(tx), idle, extra: Arc::new(AtomicUsize::new(0)), threads: threads.clone(), any }
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
            let spawned = self.threads.spawn("tachyon-rpc-handler-extra", move || {
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
                self.queue(job, send);
            }
            return;
        }
        self.extra.fetch_sub(1, Ordering::Relaxed);
        self.queue(job, send);
    }

    /// Queues `job` for the next free thread; with none at all (none of
    /// those kept ready started, and no extra one), runs it here.
    fn queue(&self, job: Job, send: impl FnOnce(Job, bool)) {
        if self.any {
            send(job, false);
        } else {
            job();
        }
    }
}
