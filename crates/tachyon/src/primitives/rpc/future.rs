//! Where a response meets its request: the [`Slot`] a pending request
//! waits on (blocking, or as the [`RequestFuture`] of an async request),
//! which the reader thread, a timeout, a close or a cancel completes.

use crate::platform::copy;
use super::channel::Inner;
use crate::error::{Error, Result};
use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Context, Poll, Waker};
use crate::platform::clock::Instant;
use std::time::Duration;

thread_local! {
    /// The slot of this thread's last blocking request (see [`Slot::new`]).
    static SPARE: Cell<Option<Arc<Slot>>> = const { Cell::new(None) };
}

/// Where a response is delivered to the request waiting for it.
pub(super) struct Slot {
    /// Set once `state` holds the result (for a requester that looks
    /// before it sleeps).
    pub(super) ready: AtomicBool,
    pub(super) state: Mutex<SlotState>,
    /// Signalled when `state` gets its result.
    pub(super) cond: Condvar,
    pub(super) deadline: Option<Instant>,
    pub(super) started: Instant,
    /// The session the request went out in: it fails when that ends.
    pub(super) session: u64,
}

#[derive(Default)]
pub(super) struct SlotState {
    pub(super) result: Option<Result<Vec<u8>>>,
    /// The requester's buffer for the response (`RpcBuffer::request_into`):
    /// a one-packet response is copied into it, and it is the result.
    pub(super) into: Option<Vec<u8>>,
    waker: Option<Waker>,
    /// The requester sleeps on `cond` (set and cleared by it, under the
    /// lock): only then does `complete` signal it, a system call that a
    /// requester reading its own response does not need.
    pub(super) sleeping: bool,
    /// When the result was set, if the requester slept on `cond` then:
    /// the end of its wait for the response, without the wake-up after it
    /// (what a hybrid requester adds to its moving average of response
    /// waits, `Inner::wait_on_slot`).
    pub(super) completed_at: Option<Instant>,
}

impl Slot {
    /// The slot of a request made at `started` (its deadline counts from
    /// then, so that an expiry reports the very timeout asked for) in
    /// session `session`.
    /// The slot this thread's last blocking request [recycled](Self::recycle)
    /// is reused when nothing else holds it any more (no clone, no weak
    /// reference: `Arc::get_mut`), which saves an allocation and a free a
    /// call.
    pub(super) fn new(
        started: Instant,
        deadline: Option<Instant>,
        session: u64,
        into: Option<Vec<u8>>,
    ) -> Arc<Slot> {
        if let Some(mut spare) = SPARE.try_with(Cell::take).ok().flatten() {
            if let Some(s) = Arc::get_mut(&mut spare) {
                *s.ready.get_mut() = false;
                *s.state.get_mut().unwrap_or_else(|p| p.into_inner()) = SlotState { into, ..SlotState::default() };
                s.deadline = deadline;
                s.started = started;
                s.session = session;
                return spare;
            }
        }
        Arc::new(Slot {
            ready: AtomicBool::new(false),
            state: Mutex::new(SlotState { into, ..SlotState::default() }),
            cond: Condvar::new(),
            deadline,
            started,
            session,
        })
    }

    /// Keeps the slot of a request that is over (its result taken) for this
    /// thread's next request; [`new`](Self::new) reuses it only if no one
    /// else holds it by then.
    pub(super) fn recycle(slot: Arc<Slot>) {
        let _ = SPARE.try_with(|spare| spare.set(Some(slot)));
    }

    /// Delivers `r` (unless a result came first) and wakes the requester.
    pub(super) fn complete(&self, r: Result<Vec<u8>>) {
        self.complete_with(|_| r);
    }

    /// Delivers a response whose bytes are `payload` (in the ring): copied
    /// into the requester's buffer if it gave one, else into a new one.
    pub(super) fn complete_copy(&self, payload: &[u8]) {
        self.complete_with(|into| {
            // Into a buffer that is not zeroed first, and whose pages (when
            // the requester reuses it) are mapped already.
            let mut v = into.take().unwrap_or_default();
            v.clear();
            copy::extend(&mut v, payload);
            Ok(v)
        });
    }

    /// Delivers what `make` returns (unless a result came first; it gets
    /// the requester's buffer) and wakes the requester.
    fn complete_with(&self, make: impl FnOnce(&mut Option<Vec<u8>>) -> Result<Vec<u8>>) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if s.result.is_none() {
            if s.sleeping {
                // Before the copy into the requester's buffer: the response
                // is here now.
                s.completed_at = Some(Instant::now());
            }
            let st = &mut *s;
            st.result = Some(make(&mut st.into));
        }
        let waker = s.waker.take();
        let sleeping = s.sleeping;
        // SYNC: pairs with the Acquire looks at `ready` in `Inner::request`
        // and `read_for_myself`.
        self.ready.store(true, Ordering::Release);
        drop(s);
        if sleeping {
            self.cond.notify_all();
        }
        if let Some(w) = waker {
            w.wake();
        }
    }
}

/// What a wait or poll of a [`RequestFuture`] whose response was taken
/// already fails with.
const TAKEN: &str = "this request's response was taken already (by a wait or a poll)";

/// The response of an [`RpcBuffer::request_async`](super::RpcBuffer::request_async),
/// awaited under any executor, or waited for on a thread in slices with
/// [`wait_with`](Self::wait_with) / [`wait`](Self::wait). Dropping it before
/// it completes cancels the request.
pub struct RequestFuture {
    inner: Arc<Inner>,
    id: u64,
    slot: Arc<Slot>,
    error: Option<Error>,
    done: bool,
    /// Whether a hybrid [`wait_with`](Self::wait_with) spun its budget.
    spun: bool,
}

impl RequestFuture {
    /// The future of request `id` (already failed if `error` is set).
    pub(super) fn new(inner: Arc<Inner>, id: u64, slot: Arc<Slot>, error: Option<Error>) -> RequestFuture {
        RequestFuture { inner, id, slot, error, done: false, spun: false }
    }

    /// Waits on this thread up to `timeout` (`None`: until the request's
    /// own deadline) for the response, and gives it to `read` where it
    /// lies, as [`RpcBuffer::request_with`](super::RpcBuffer::request_with)
    /// does: the thread reads for itself as a blocking request does, so a
    /// one-packet response is read in its ring node, with no hand-off from
    /// the reader thread and no copy; one delivered by another reader, or
    /// reassembled from several packets, is read from its buffer.
    ///
    /// `Ok(None)` if `timeout` passed first: the request is still pending,
    /// and this future may be waited for again, awaited, or dropped (which
    /// cancels it). That is how a caller waits in slices and looks at
    /// something else between them (a Ctrl+C, a shutdown flag) without
    /// giving up its request. The request's own deadline, the channel's
    /// default timeout from the send, still holds: past it the request is
    /// given up and this returns `Err(Timeout)`.
    ///
    /// While `read` runs in place it holds the node and this end's reader
    /// role, as in `request_with`: keep it short; a call back through the
    /// channel from it fails with [`Error::InvalidArgument`]. `read` runs
    /// at most once, and not at all if the wait fails or ends without the
    /// response; a panic in it is resumed here after the node is freed.
    ///
    /// Errors: those of [`request`](super::RpcBuffer::request) (the send's
    /// own error, if it failed, comes from the first wait or poll);
    /// [`Error::InvalidArgument`] once the response was taken (by an
    /// earlier wait or poll), or when called from an inline handler of
    /// this channel or from a `read` of it (only this thread could read
    /// the response: the request stays pending).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tachyon::RpcBuffer;
    /// # let name = format!("doc-rpc-future-wait-{}", std::process::id());
    /// let server = RpcBuffer::builder(&name)
    ///     .handler(|_id, msg: &[u8]| {
    ///         std::thread::sleep(Duration::from_millis(30)); // a slow handler
    ///         Ok::<_, String>(msg.to_ascii_uppercase())
    ///     })
    ///     .create()?;
    /// let client = RpcBuffer::open(&name)?;
    /// let mut call = client.request_async(b"hello");
    /// let mut slices = 0;
    /// let len = loop {
    ///     // Between slices, look at whatever may end the wait early.
    ///     match call.wait_with(Some(Duration::from_millis(5)), |r| {
    ///         assert_eq!(r, b"HELLO");
    ///         r.len()
    ///     })? {
    ///         Some(len) => break len,
    ///         None => slices += 1,
    ///     }
    /// };
    /// assert_eq!(len, 5);
    /// assert!(slices >= 1);
    /// # drop((client, server));
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn wait_with<R>(&mut self, timeout: Option<Duration>, read: impl FnOnce(&[u8]) -> R) -> Result<Option<R>> {
        let until = self.start_wait(timeout)?;
        // Over unless still pending (below): the result was taken, or the
        // request given up at its deadline. Set first, so that a panic in
        // `read`, which comes after the result was taken, leaves it over.
        self.done = true;
        let (inner, slot, id, spun) = (&self.inner, &self.slot, self.id, &mut self.spun);
        let r = inner.read_response(read, |in_place| inner.wait_request(slot, id, until, spun, in_place));
        self.done = !matches!(r, Ok(None));
        r
    }

    /// [`wait_with`](Self::wait_with) that returns the response's bytes: a
    /// response read in place is copied out once; one delivered in a
    /// buffer is that buffer.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tachyon::RpcBuffer;
    /// # let name = format!("doc-rpc-future-wait-vec-{}", std::process::id());
    /// let server = RpcBuffer::builder(&name)
    ///     .handler(|_id, msg: &[u8]| Ok::<_, String>(msg.repeat(2)))
    ///     .create()?;
    /// let client = RpcBuffer::open(&name)?;
    /// let mut call = client.request_async(b"ab");
    /// let response = loop {
    ///     if let Some(r) = call.wait(Some(Duration::from_millis(50)))? {
    ///         break r;
    ///     }
    /// };
    /// assert_eq!(response, b"abab");
    /// # drop((client, server));
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn wait(&mut self, timeout: Option<Duration>) -> Result<Option<Vec<u8>>> {
        let until = self.start_wait(timeout)?;
        let mut copied = None;
        let mut in_place = |bytes: &[u8]| copied = Some(copy::to_vec(bytes));
        // As in `wait_with`.
        self.done = true;
        let r = self.inner.wait_request(&self.slot, self.id, until, &mut self.spun, &mut in_place);
        self.done = !matches!(r, Ok(None));
        // Read in place, the slot's result is empty: the copy is the response.
        Ok(r?.map(|delivered| copied.take().unwrap_or(delivered)))
    }

    /// The checks before a wait, and its end (`timeout` from now).
    fn start_wait(&mut self, timeout: Option<Duration>) -> Result<Option<Instant>> {
        if let Some(e) = self.error.take() {
            self.done = true;
            return Err(e);
        }
        if self.done {
            return Err(Error::invalid(TAKEN));
        }
        self.inner.check_not_inline()?;
        Ok(timeout.and_then(|t| Instant::now().checked_add(t)))
    }
}

impl Future for RequestFuture {
    type Output = Result<Vec<u8>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if let Some(e) = self.error.take() {
            self.done = true;
            return Poll::Ready(Err(e));
        }
        if self.done {
            // Taken by a wait (or polled again after `Ready`): an error,
            // never a `Pending` that nothing would wake.
            return Poll::Ready(Err(Error::invalid(TAKEN)));
        }
        let mut s = self.slot.state.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(r) = s.result.take() {
            drop(s);
            self.done = true;
            return Poll::Ready(r);
        }
        s.waker = Some(cx.waker().clone());
        Poll::Pending
    }
}

impl Drop for RequestFuture {
    fn drop(&mut self) {
        if !self.done {
            self.inner.unregister(self.id);
        }
    }
}

#[cfg(all(test, not(tachyon_loom)))]
mod tests {
    use super::*;

    /// A slot completed while its requester sleeps on it keeps when: that
    /// is when the requester's wait for the response ended, whenever it
    /// wakes. One completed while the requester is awake (reading for
    /// itself, or not yet asleep) reads no clock.
    #[test]
    fn a_slot_completed_under_a_sleeper_keeps_when() {
        let started = Instant::now();
        let slot = Slot::new(started, None, 0, None);
        slot.state.lock().unwrap().sleeping = true;
        let before = Instant::now();
        slot.complete_copy(b"response");
        let after = Instant::now();
        let s = slot.state.lock().unwrap();
        let at = s.completed_at.expect("completed under a sleeper");
        assert!(before <= at && at <= after);
        assert_eq!(s.result.as_ref().unwrap().as_ref().unwrap(), b"response");
        drop(s);
        // A second completion (a late timeout) changes neither.
        slot.complete(Err(Error::Interrupted));
        assert_eq!(slot.state.lock().unwrap().completed_at, Some(at));

        let awake = Slot::new(started, None, 0, None);
        awake.complete(Ok(Vec::new()));
        assert_eq!(awake.state.lock().unwrap().completed_at, None);
    }
}
