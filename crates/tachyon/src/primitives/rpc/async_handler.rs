//! Async request handlers, two ways.
//!
//! [`RpcBuffer::set_async_handler`] drives each handler future to the end
//! on an RPC handler thread with a minimal `block_on`: there is no runtime
//! there, so a handler that uses a tokio timer or tokio I/O panics with
//! "there is no reactor running". [`RpcBuffer::serve_async`] turns it
//! around: it returns a future that the server spawns (or awaits) on its
//! own runtime; that future runs every handler future, so handlers may use
//! the runtime's timers, I/O and task-locals.
//!
//! How a request gets there: the RPC reader hands it to a handler thread
//! (an async handler waits for its answer, so the reader thread does not
//! run it itself as it runs a blocking handler); that thread's handler queues `(id, payload, reply channel)`,
//! wakes the serving future, and waits on the reply channel. The serving
//! future starts the user's handler for each queued request and polls the
//! running handler futures; each result goes back through its channel and
//! the handler thread sends the response. Handler threads are only a
//! bridge: they are idle (blocked on the channel) while the handlers run,
//! and the pool grows past its size while all are busy (see `Pool`). With
//! `inline_handlers` (no pool) requests are handled one at a time.
//!
//! Dropping the serving future stops serving: queued and running requests
//! are answered with an error, later ones too (until another handler is
//! set). A panic inside a handler future is caught and answered as an
//! error, as for blocking handlers.

use crate::platform::copy;
use super::channel::Inner;
use super::handler::panicked;
use super::RpcBuffer;
use crate::error::Result;
use std::collections::VecDeque;
use std::fmt::Display;
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

/// What a handler future resolves to, once its error is text.
type Answer = std::result::Result<Vec<u8>, String>;
type Running = Pin<Box<dyn Future<Output = Answer> + Send>>;

/// Said to callers whose request the serving future will not answer.
const STOPPED: &str = "the async RPC server stopped serving (its serve_async future was dropped)";

/// A request waiting for the serving future.
struct Job {
    id: u64,
    payload: Vec<u8>,
    reply: SyncSender<Answer>,
}

/// What the handler threads and the serving future share.
#[derive(Default)]
struct Queue {
    jobs: VecDeque<Job>,
    waker: Option<Waker>,
    /// False once the serving future is gone.
    serving: bool,
}

struct Shared {
    queue: Mutex<Queue>,
    /// Set once the channel closed (by the watcher thread).
    closed: AtomicBool,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn wake(&self) {
        let waker = self.lock().waker.take();
        if let Some(w) = waker {
            w.wake();
        }
    }
}

impl RpcBuffer {
    /// Sets an `async` handler: each request's future is driven to
    /// completion on a handler thread (no runtime needed). No runtime runs
    /// there either: a handler that uses tokio timers or I/O needs
    /// [`serve_async`](Self::serve_async), which your executor polls.
    pub fn set_async_handler<F, Fut, E>(&self, f: F)
    where
        F: Fn(u64, Vec<u8>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::result::Result<Vec<u8>, E>>,
        E: Display,
    {
        self.set_handler_that(move |id, msg: &[u8]| block_on(f(id, copy::to_vec(msg))), true);
    }

    /// Serves the peer's requests with an `async` handler polled by the
    /// caller's executor: returns a future to spawn (or await) on your
    /// runtime, so the handler can use its timers and I/O (a tokio timer
    /// in a [`set_async_handler`](Self::set_async_handler) handler panics:
    /// no reactor runs on RPC handler threads). The future runs the
    /// handlers of concurrent requests concurrently, and resolves
    /// `Ok(())` once this end is closed (as [`serve`](Self::serve)
    /// returns). Dropping it stops serving: requests not yet answered get
    /// an error. It replaces any handler set before.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tachyon::RpcBuffer;
    /// # let name = format!("doc-rpc-serve-async-{}", std::process::id());
    /// let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_time().build().unwrap();
    /// let server = RpcBuffer::create(&name)?;
    /// rt.spawn(server.serve_async(|_id, msg: Vec<u8>| async move {
    ///     tokio::time::sleep(Duration::from_millis(1)).await; // a tokio timer works here
    ///     Ok::<_, String>(msg.iter().rev().copied().collect())
    /// }));
    /// let client = RpcBuffer::open(&name)?;
    /// assert_eq!(client.request(b"abc", Some(Duration::from_secs(10)))?, b"cba");
    /// # drop(client); drop(server); drop(rt);
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn serve_async<F, Fut, E>(&self, handler: F) -> impl Future<Output = Result<()>> + Send + 'static
    where
        F: Fn(u64, Vec<u8>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::result::Result<Vec<u8>, E>> + Send + 'static,
        E: Display,
    {
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue { serving: true, ..Queue::default() }),
            closed: AtomicBool::new(false),
        });
        let bridge = Arc::clone(&shared);
        self.set_handler_that(move |id, msg: &[u8]| -> Answer {
            let (reply, answer) = sync_channel(1);
            {
                let mut q = bridge.lock();
                if !q.serving {
                    return Err(STOPPED.to_owned());
                }
                q.jobs.push_back(Job { id, payload: copy::to_vec(msg), reply });
            }
            bridge.wake();
            answer.recv().unwrap_or_else(|_| Err(STOPPED.to_owned()))
            },
            true,
        );
        watch_closed(Arc::downgrade(&self.inner), Arc::downgrade(&shared));
        let handler = Arc::new(handler);
        let start = move |id: u64, payload: Vec<u8>| -> Running {
            let fut = handler(id, payload);
            Box::pin(async move { fut.await.map_err(|e| e.to_string()) })
        };
        Serve { shared, running: Vec::new(), start: Box::new(start) }
    }
}

/// Wakes the serving future once the channel closes (or its end is
/// dropped); ends when the serving future is gone.
fn watch_closed(inner: Weak<Inner>, shared: Weak<Shared>) {
    let Some(threads) = inner.upgrade().map(|i| i.threads.clone()) else { return };
    let spawned = threads.spawn("tachyon-rpc-serve-async", move || loop {
        let closed = match inner.upgrade() {
            Some(inner) => inner.wait_closed(Some(Duration::from_millis(100))).is_ok(),
            None => true,
        };
        let Some(shared) = shared.upgrade() else { return };
        if !shared.lock().serving {
            return;
        }
        if closed {
            // SYNC: before the lock `wake` takes; `Serve::poll` looks after.
            shared.closed.store(true, Ordering::SeqCst);
            shared.wake();
            return;
        }
    });
    // Without the thread the future ends only when dropped.
    drop(spawned);
}

/// The serving future.
struct Serve {
    shared: Arc<Shared>,
    running: Vec<(Running, SyncSender<Answer>)>,
    start: Box<dyn Fn(u64, Vec<u8>) -> Running + Send>,
}

impl Future for Serve {
    type Output = Result<()>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        let this = &mut *self;
        let jobs: Vec<Job> = {
            let mut q = this.shared.lock();
            q.waker = Some(cx.waker().clone());
            q.jobs.drain(..).collect()
        };
        for job in jobs {
            match catch_unwind(AssertUnwindSafe(|| (this.start)(job.id, job.payload))) {
                Ok(fut) => this.running.push((fut, job.reply)),
                Err(panic) => {
                    let _ = job.reply.send(Err(panicked(panic)));
                }
            }
        }
        this.running.retain_mut(|(fut, reply)| {
            match catch_unwind(AssertUnwindSafe(|| fut.as_mut().poll(cx))) {
                Ok(Poll::Pending) => true,
                Ok(Poll::Ready(answer)) => {
                    let _ = reply.send(answer);
                    false
                }
                Err(panic) => {
                    let _ = reply.send(Err(panicked(panic)));
                    false
                }
            }
        });
        // SYNC: `watch_closed` stores `closed` before it takes the queue
        // lock to wake: either this look sees it, or that wake finds the
        // waker stored above and this future is polled again.
        if this.shared.closed.load(Ordering::SeqCst) && this.running.is_empty() {
            return Poll::Ready(Ok(()));
        }
        Poll::Pending
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let jobs: Vec<Job> = {
            let mut q = self.shared.lock();
            q.serving = false;
            q.waker = None;
            q.jobs.drain(..).collect()
        };
        for job in jobs {
            let _ = job.reply.send(Err(STOPPED.to_owned()));
        }
        for (_, reply) in self.running.drain(..) {
            let _ = reply.send(Err(STOPPED.to_owned()));
        }
    }
}

/// Drives a future to completion on the current thread.
fn block_on<F: Future>(fut: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut fut = std::pin::pin!(fut);
    loop {
        if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::park();
    }
}
