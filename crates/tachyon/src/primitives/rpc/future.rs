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

/// The response of an [`RpcBuffer::request_async`](super::RpcBuffer::request_async). Dropping it before it
/// completes cancels the request.
pub struct RequestFuture {
    inner: Arc<Inner>,
    id: u64,
    slot: Arc<Slot>,
    error: Option<Error>,
    done: bool,
}

impl RequestFuture {
    /// The future of request `id` (already failed if `error` is set).
    pub(super) fn new(inner: Arc<Inner>, id: u64, slot: Arc<Slot>, error: Option<Error>) -> RequestFuture {
        RequestFuture { inner, id, slot, error, done: false }
    }
}

impl Future for RequestFuture {
    type Output = Result<Vec<u8>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if let Some(e) = self.error.take() {
            self.done = true;
            return Poll::Ready(Err(e));
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
