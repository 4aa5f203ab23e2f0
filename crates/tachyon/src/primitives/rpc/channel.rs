//! The state one RPC end's threads share ([`Inner`]): the session, the
//! pending requests, the close protocol, and the sending side (requests,
//! notifications, and writing a message as packets).

use crate::platform::copy;
use super::cancel::CancelToken;
use super::control::Control;
use super::future::{RequestFuture, Slot};
use super::handler::HandlerFn;
use super::lane::Lane;
use super::packet::{packet_count, Header, MsgType, HEADER};
use super::pool::Pool;
use super::threads::Spawner;
use super::reader::{Next, Reading};
use super::session::{check_state, error_of, Session, CLOSED, OPEN};
use super::stats::Stats;
use super::TICK;
use crate::error::{Error, Result};
use crate::primitives::circular::Claim;
use crate::segment::Segment;
use crate::sync::{Liveness, WaitPolicy};
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use crate::platform::clock::Instant;
use std::time::Duration;

/// How long a requester of a hybrid channel reads for itself, spinning,
/// before it leaves reading to the reader thread and sleeps until its
/// response is delivered (on a spin channel it reads for itself until its
/// deadline; on a futex channel it reads for itself asleep on the ring's
/// futex, see [`Inner::sleep_reading_for_myself`]), unless the channel's
/// recent responses took longer (see [`Inner::response_spin`]).
const RESPONSE_SPIN: Duration = Duration::from_micros(50);

/// How many looks in a row a futex requester reading for itself may find
/// the reader role taken while packets wait (yielding the CPU between
/// looks) before it leaves the reading to the role's holder and sleeps on
/// its slot: the role is held for a moment by a reader thread on its way
/// to standing aside, for a handler's whole run by an inline handler.
const ROLE_BUSY_LOOKS: u32 = 16;

/// The longest a hybrid requester spins for its response (and a hybrid
/// reader thread for the next packet): twice the recent wait, while that
/// is at most this. Waits longer than half of it are waited for asleep
/// after the floor ([`RESPONSE_SPIN`]; a reader thread's: the policy's own
/// spin): next to them a sleep and wake-up (25 – 45 µs on a VM) is cheap,
/// and spinning through them would burn the CPU hybrid waits are meant to
/// give back.
const RESPONSE_SPIN_MAX: Duration = Duration::from_micros(500);

/// A hybrid spin budget, given the recent wait (ns, 0: none measured) and
/// the floor: see [`Inner::response_spin`] and [`Inner::packet_spin`].
pub(super) fn spin_for(recent_ns: u64, floor: Duration) -> Duration {
    let twice = Duration::from_nanos(recent_ns).saturating_mul(2);
    if twice <= RESPONSE_SPIN_MAX {
        twice.max(floor)
    } else {
        floor
    }
}

/// The moving average of waits (ns) after one more: see
/// [`Inner::record_response_wait`]. Never 0 once measured.
pub(super) fn averaged(old_ns: u64, waited: Duration) -> u64 {
    let sample = waited.min(RESPONSE_SPIN_MAX * 2).as_nanos() as u64;
    let new = if old_ns == 0 { sample } else { old_ns - old_ns / 4 + sample / 4 };
    new.max(1)
}

/// How long a requester reading for itself spins (`read_for_myself`, the
/// lane): on a spin channel until its deadline; on a hybrid one until
/// [`Inner::response_spin`] past its first look at the clock (64 turns
/// in, so that a response that comes sooner costs no clock read), or its
/// deadline if sooner.
pub(super) struct SpinBudget {
    /// The end (`None` inside: none), once known.
    until: Option<Option<Instant>>,
    /// When a hybrid requester first looked at the clock: the start of
    /// the wait it records (`Inner::record_response_wait`).
    pub(super) first_look: Option<Instant>,
}

impl SpinBudget {
    pub(super) fn new(policy: WaitPolicy, deadline: Option<Instant>) -> SpinBudget {
        let until = match policy {
            WaitPolicy::Spin => Some(deadline),
            _ => None,
        };
        SpinBudget { until, first_look: None }
    }

    /// Whether the spinning is over at `now`.
    pub(super) fn over(&mut self, inner: &Inner, deadline: Option<Instant>, now: Instant) -> bool {
        let first_look = &mut self.first_look;
        let end = self.until.get_or_insert_with(|| {
            *first_look = Some(now);
            let budget = now + inner.response_spin();
            Some(deadline.map_or(budget, |d| d.min(budget)))
        });
        end.is_some_and(|u| now >= u)
    }
}

/// How long a send may wait for room in the ring: until an instant (`None`:
/// for ever), or for a time counted from its first wait. The clock is read
/// only if the send has to wait.
#[derive(Debug, Clone, Copy)]
pub(super) enum Deadline {
    At(Option<Instant>),
    After(Duration),
}

/// Where a requester that reads for itself has its one-packet response
/// read in place (`RpcBuffer::request_with`): called at most once, with
/// the payload in its ring node, while the node is claimed.
pub(super) type InPlaceRead<'a> = &'a mut dyn FnMut(&[u8]);

/// How a wait on a request's slot ended (`Inner::sleep_on_slot`).
enum Waited {
    /// With the request's result.
    Done(Result<Vec<u8>>),
    /// At the wait's own end, the request still pending.
    Pending,
}

/// What to do about an RPC message above the agreed maximum.
pub(super) const RPC_TOO_LARGE: &str =
    "raise max_message on both ends (RpcBuilder::max_message), or send less";

/// The pending requests' map. Its keys are this end's own message ids (a
/// counter), so a multiplicative hash spreads them well and costs a
/// fraction of the default SipHash; ids from the peer (`response_to`) are
/// only looked up, never stored, so a peer cannot crowd the table.
pub(super) type Pending = HashMap<u64, Arc<Slot>, BuildHasherDefault<IdHasher>>;

/// [`Pending`] behind its lock, with its length mirrored outside the lock:
/// a requester that stops reading for itself asks whether any request
/// still waits (see `Inner::stop_reading_for_myself`) on every call, and a
/// load costs nothing where the lock costs two locked instructions.
#[derive(Default)]
pub(super) struct PendingMap {
    map: Mutex<Pending>,
    /// `map.len()` as of the last unlock.
    len: AtomicUsize,
}

impl PendingMap {
    /// The map, locked; its length is mirrored when the guard drops.
    pub(super) fn lock(&self) -> PendingGuard<'_> {
        PendingGuard { map: self.map.lock().unwrap_or_else(|p| p.into_inner()), len: &self.len }
    }

    /// Whether requests were waiting at the last unlock. A hint: it may be
    /// stale by a concurrent insert or removal.
    pub(super) fn any(&self) -> bool {
        self.len.load(Ordering::Relaxed) > 0
    }
}

/// The locked [`PendingMap`].
pub(super) struct PendingGuard<'a> {
    map: std::sync::MutexGuard<'a, Pending>,
    len: &'a AtomicUsize,
}

impl std::ops::Deref for PendingGuard<'_> {
    type Target = Pending;
    fn deref(&self) -> &Pending {
        &self.map
    }
}

impl std::ops::DerefMut for PendingGuard<'_> {
    fn deref_mut(&mut self) -> &mut Pending {
        &mut self.map
    }
}

impl Drop for PendingGuard<'_> {
    fn drop(&mut self) {
        // Before the map's guard drops (fields drop after this), so under
        // the lock: the last unlock's length is the one left.
        self.len.store(self.map.len(), Ordering::Relaxed);
    }
}

/// The hasher of [`Pending`]: Fibonacci hashing of a `u64` key.
#[derive(Default)]
pub(super) struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Not used by `u64` keys; any bytes still hash, slowly.
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }

    fn write_u64(&mut self, id: u64) {
        self.0 = id.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// [`Inner::self_readers`]: the requesters reading for themselves now.
pub(super) const SELF_READERS: u64 = 0xffff_ffff;
/// [`Inner::self_readers`]: what a requester adds when it starts to read
/// for itself (one more now, one more start).
pub(super) const SELF_READ_START: u64 = (1 << 32) | 1;

/// The readers (the reader thread, the standby) standing aside for
/// requesters that read for themselves.
#[derive(Default)]
pub(super) struct Aside {
    /// Asleep on `Inner::aside_cond` now.
    pub(super) parked: usize,
    /// The last requester to stop reading for itself left something for
    /// the reader thread (requests still pending, packets in the ring): a
    /// reader standing aside reads now (one of them takes this).
    pub(super) wanted: bool,
}

/// One end of a channel, shared by its handle, its reader thread, its
/// handler threads and its [`RpcClient`](super::RpcClient)s.
pub(super) struct Inner {
    /// The channel's name.
    pub(super) name: String,
    /// The control segment (see [`Control`]).
    pub(super) ctl: Segment,
    /// The current session: the server swaps in a fresh one when its
    /// client leaves; a client has one for its life.
    pub(super) session: RwLock<Arc<Session>>,
    /// The reader role (see [`Reading`]).
    pub(super) reading: Mutex<Reading>,
    /// Requesters reading for themselves now (the low 32 bits, see
    /// [`SELF_READERS`]) and how many times one started to (the high 32
    /// bits, wrapping): the reader thread stands aside while there are any,
    /// and while they keep coming (see `Inner::stand_aside`).
    pub(super) self_readers: AtomicU64,
    /// How long hybrid requesters recently waited for their responses, in
    /// nanoseconds from their first look at the clock (a moving average;
    /// 0: not measured yet). See [`Inner::response_spin`].
    pub(super) response_wait: AtomicU64,
    /// How long the hybrid reader thread recently waited for a packet when
    /// it had to wait, in nanoseconds (a moving average; 0: not measured
    /// yet). See [`Inner::packet_spin`].
    pub(super) packet_wait: AtomicU64,
    /// The readers standing aside (see [`Aside`]).
    pub(super) aside: Mutex<Aside>,
    pub(super) aside_cond: Condvar,
    /// The number of the handler the reader thread runs now (0: none).
    pub(super) leading: AtomicU64,
    /// How many handlers the reader thread has started.
    pub(super) leads: AtomicU64,
    /// `POLLING` or `LONG_SLEEP` (see `Inner::standby_loop`).
    pub(super) standby_state: AtomicU8,
    pub(super) standby_lock: Mutex<()>,
    pub(super) standby_cond: Condvar,
    /// The server's geometry, for the next session's rings.
    pub(super) geometry: (usize, usize),
    /// Whether this end is the server.
    pub(super) owner: bool,
    /// `OPEN`, or why this end is over (`CLOSED`, `PEER_DIED`).
    pub(super) state: AtomicU8,
    /// Signalled when `state` leaves `OPEN` (for `wait_closed`).
    pub(super) closed_lock: Mutex<()>,
    pub(super) closed_cond: Condvar,
    /// Tells the reader thread to stop at its next look.
    pub(super) stop: AtomicBool,
    /// Requests and notifications handed to a handler and not yet
    /// answered.
    pub(super) in_flight: AtomicUsize,
    /// `close` was called: the reader takes no new requests, and the last
    /// running handler (or `close` itself) ends the channel.
    pub(super) closing: AtomicBool,
    /// The id of the next message this end sends.
    pub(super) next_id: AtomicU64,
    /// This end's requests waiting for their response, by id.
    pub(super) pending: PendingMap,
    /// The handler of the peer's requests, if one is set.
    pub(super) handler: RwLock<Option<Arc<HandlerFn>>>,
    /// The handler waits for its answer elsewhere (an async handler's
    /// bridge): its requests go to the handler threads, never to the
    /// reader thread.
    pub(super) handler_waits: AtomicBool,
    pub(super) pool: Pool,
    /// Starts this end's threads.
    pub(super) threads: Spawner,
    pub(super) stats: Stats,
    pub(super) default_timeout: Duration,
    pub(super) max_message: usize,
    pub(super) policy: WaitPolicy,
    pub(super) inline_handlers: bool,
}

impl Inner {
    /// The control words (see [`Control::of`]).
    pub(super) fn control(&self) -> Result<&Control> {
        Control::of(&self.ctl)
    }

    /// The current session.
    pub(super) fn session(&self) -> Arc<Session> {
        Arc::clone(&self.session.read().unwrap_or_else(|p| p.into_inner()))
    }

    /// Closes this end (see [`RpcBuffer::close`](super::RpcBuffer::close)):
    /// no new request reaches a handler (the reader drops them); the
    /// running handlers finish (waited for, unless this is one of them),
    /// then the channel ends and the reader stops. The reader keeps
    /// watching the peer meanwhile: a handler writing to a client that died
    /// fails at once rather than holding the close for its timeout.
    pub(super) fn close(&self) {
        // SYNC: `closing` before the look at `in_flight`, and in
        // `handled` the decrement before the look at `closing` (all
        // SeqCst): whichever comes second sees the other, so the last
        // handler or this call ends the channel, never neither.
        self.closing.store(true, Ordering::SeqCst);
        if self.in_flight.load(Ordering::SeqCst) == 0 {
            self.end();
        } else if !self.in_handler() {
            // A handler that never returns cannot hold the channel open
            // for ever.
            let _ = self.wait_closed(Some(self.default_timeout));
            self.end();
        }
    }

    /// A handler finished (its response, if any, is sent): the last one
    /// after `close` ends the channel.
    pub(super) fn handled(&self) {
        // SYNC: the other side of the `closing` / `in_flight` pair in `close`.
        if self.in_flight.fetch_sub(1, Ordering::SeqCst) == 1 && self.closing.load(Ordering::SeqCst) {
            self.end();
        }
    }

    /// Ends this end for good: the peer is told (after every response
    /// this end sent), and pending calls fail with [`Error::Closed`].
    pub(super) fn end(&self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Ok(c) = self.control() {
            let flag = if self.owner { &c.owner_closed } else { &c.opener_closed };
            // A client leaves its own token: the server tells it from a
            // flag left by an earlier client.
            // SYNC: after the responses this end wrote; a client's
            // `server_gone` that sees it drains the ring before it fails.
            flag.store(if self.owner { 1 } else { self.ctl.token().raw() }, Ordering::SeqCst);
        }
        self.fail_all(CLOSED);
    }

    /// See [`RpcBuffer::wait_closed`](super::RpcBuffer::wait_closed).
    pub(super) fn wait_closed(&self, timeout: Option<Duration>) -> Result<()> {
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        let mut guard = self.closed_lock.lock().unwrap_or_else(|p| p.into_inner());
        while self.state.load(Ordering::SeqCst) == OPEN {
            let wait = match deadline {
                None => TICK,
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Err(Error::timeout("the RPC channel to close", timeout));
                    }
                    left.min(TICK)
                }
            };
            guard = self.closed_cond.wait_timeout(guard, wait).unwrap_or_else(|p| p.into_inner()).0;
        }
        Ok(())
    }

    /// `Ok` while this end is open, else why not.
    pub(super) fn check_open(&self) -> Result<()> {
        check_state(self.state.load(Ordering::SeqCst))
    }

    /// A new request id, and the slot its response will be delivered to
    /// (copied into `into`, if given, when it comes in one packet).
    fn register(
        &self,
        started: Instant,
        deadline: Option<Instant>,
        session: u64,
        into: Option<Vec<u8>>,
    ) -> (u64, Arc<Slot>) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let slot = Slot::new(started, deadline, session, into);
        self.pending.lock().insert(id, Arc::clone(&slot));
        (id, slot)
    }

    /// Forgets a request; `true` if it was still pending (no response came).
    pub(super) fn unregister(&self, id: u64) -> bool {
        self.pending.lock().remove(&id).is_some()
    }

    /// Fails a call made from an inline handler of this very channel, or
    /// from a `request_with` reader of it: only the thread running it could
    /// read the response.
    pub(super) fn check_not_inline(&self) -> Result<()> {
        if self.in_inline_handler() {
            return Err(Error::invalid(
                "a call back through its own channel from an inline handler, or from the reader of a \
                 response read in place (request_with), would deadlock (only this thread reads the \
                 answer); use handler threads for nested calls, or call once request_with returned",
            ));
        }
        Ok(())
    }

    /// See [`RpcBuffer::request_with_cancel`](super::RpcBuffer::request_with_cancel).
    /// With `into`, see [`RpcBuffer::request_into`](super::RpcBuffer::request_into):
    /// the response is left in `into` (its buffer reused) and the `Vec`
    /// returned is empty.
    pub(super) fn request(
        self: &Arc<Self>,
        msg: &[u8],
        timeout: Option<Duration>,
        cancel: Option<&CancelToken>,
        into: Option<&mut Vec<u8>>,
    ) -> Result<Vec<u8>> {
        self.request_reading(msg, timeout, cancel, into, None)
    }

    /// See [`RpcBuffer::request_with`](super::RpcBuffer::request_with).
    pub(super) fn request_with<R>(
        self: &Arc<Self>,
        msg: &[u8],
        timeout: Option<Duration>,
        read: impl FnOnce(&[u8]) -> R,
    ) -> Result<R> {
        let r = self.read_response(read, |in_place| {
            self.request_reading(msg, timeout, None, None, Some(in_place)).map(Some)
        });
        match r? {
            Some(v) => Ok(v),
            None => unreachable!("a request's wait ends with its result"),
        }
    }

    /// Runs `wait`, a wait for a response that gives a one-packet response
    /// this thread reads itself to the [`InPlaceRead`] it is handed, with
    /// one that runs `read` there; if the response came as bytes instead
    /// (delivered by another reader, or reassembled), runs `read` on them.
    /// `read` runs at most once, and not at all if the wait fails or ends
    /// without the response (`Ok(None)`); a panic in it is caught where it
    /// runs in place (so that it unwinds through none of the reader's
    /// state: the node is freed, the reader role given back) and resumed
    /// here.
    pub(super) fn read_response<R>(
        &self,
        read: impl FnOnce(&[u8]) -> R,
        wait: impl FnOnce(InPlaceRead<'_>) -> Result<Option<Vec<u8>>>,
    ) -> Result<Option<R>> {
        let mut read = Some(read);
        // What `read` returned (or how it panicked) when it ran in place.
        let mut got: Option<std::thread::Result<R>> = None;
        let r = {
            let mut in_place = |bytes: &[u8]| {
                if let Some(f) = read.take() {
                    got = Some(catch_unwind(AssertUnwindSafe(|| f(bytes))));
                }
            };
            wait(&mut in_place)
        };
        match (got, r) {
            (Some(Ok(v)), _) => Ok(Some(v)),
            (Some(Err(panic)), _) => resume_unwind(panic),
            (None, Ok(Some(bytes))) => match read.take() {
                Some(f) => Ok(Some(self.as_reader(|| f(&bytes)))),
                None => unreachable!("`read` runs only through `got`"),
            },
            (None, Ok(None)) => Ok(None),
            (None, Err(e)) => Err(e),
        }
    }

    /// See [`RequestFuture::wait_with`]: waits on this thread for request
    /// `id`'s result as a blocking request waits (reading for itself, a
    /// one-packet response given to `read` in its node), until it comes,
    /// `until` passes (`Ok(None)`: the request is still pending), or the
    /// request's own deadline passes (`Err(Timeout)`: the request is given
    /// up). `spun`: whether a hybrid wait for this request has spun its
    /// budget already; its later waits sleep at once, as one long wait
    /// would after its spin.
    pub(super) fn wait_request(
        self: &Arc<Self>,
        slot: &Slot,
        id: u64,
        until: Option<Instant>,
        spun: &mut bool,
        read: InPlaceRead<'_>,
    ) -> Result<Option<Vec<u8>>> {
        let end = match (until, slot.deadline) {
            (Some(u), Some(d)) => Some(u.min(d)),
            (u, d) => u.or(d),
        };
        let mut first_look = None;
        // SYNC: pairs with the Release store of `ready` in `Slot::complete`.
        if !slot.ready.load(Ordering::Acquire) {
            let session = self.session();
            // A slot of an earlier session is failed with it: only sleep.
            if session.id == slot.session {
                match self.policy {
                    WaitPolicy::Futex => self.sleep_reading_for_myself(slot, id, &session, end, Some(read)),
                    WaitPolicy::Hybrid if *spun => {}
                    policy => {
                        first_look = self.read_for_myself(slot, id, &session, end, Some(read));
                        // Ended by its budget, not by `end` (a slice of a
                        // longer wait, or the deadline).
                        *spun = policy == WaitPolicy::Hybrid
                            && !slot.ready.load(Ordering::Acquire)
                            && end.is_none_or(|e| Instant::now() < e);
                    }
                }
            }
        }
        let timeout = Some(self.default_timeout);
        match self.sleep_on_slot(slot, id, timeout, slot.deadline, until, first_look) {
            Waited::Done(r) => r.map(Some),
            Waited::Pending => Ok(None),
        }
    }

    /// [`request`](Self::request), and with `read`, a one-packet response
    /// that this thread reads itself is given to `read` in its ring node
    /// (and the `Vec` returned is empty).
    fn request_reading(
        self: &Arc<Self>,
        msg: &[u8],
        timeout: Option<Duration>,
        cancel: Option<&CancelToken>,
        mut into: Option<&mut Vec<u8>>,
        mut read: Option<InPlaceRead<'_>>,
    ) -> Result<Vec<u8>> {
        if let Some(out) = into.as_deref_mut() {
            out.clear();
        }
        self.check_open()?;
        self.check_not_inline()?;
        if cancel.is_some_and(CancelToken::is_cancelled) {
            return Err(Error::Interrupted);
        }
        let started = Instant::now();
        // A timeout too long to add is none.
        let deadline = timeout.and_then(|t| started.checked_add(t));
        let zero = timeout.is_some_and(|t| t.is_zero());
        // Spin and hybrid requesters without a cancel token try the lane
        // first (see `super::lane`).
        let lane = match self.policy {
            WaitPolicy::Spin | WaitPolicy::Hybrid if cancel.is_none() && !zero => {
                self.request_in_lane(msg, started, timeout, deadline, &mut into, &mut read)
            }
            _ => Lane::NotTaken,
        };
        let (slot, r) = match lane {
            Lane::Done(r) => return r,
            Lane::Registered { id, slot, first_look } => {
                let r = self.wait_on_slot(&slot, id, timeout, deadline, first_look);
                (slot, r)
            }
            Lane::NotTaken => self.request_registered(msg, started, timeout, deadline, cancel, &mut into, read)?,
        };
        if let Some(out) = into {
            // The response, or the caller's buffer back (emptied).
            let back = slot.state.lock().unwrap_or_else(|p| p.into_inner()).into.take();
            match r {
                Ok(v) => {
                    *out = v;
                    Slot::recycle(slot);
                    return Ok(Vec::new());
                }
                Err(e) => {
                    if let Some(mut b) = back {
                        b.clear();
                        *out = b;
                    }
                    Slot::recycle(slot);
                    return Err(e);
                }
            }
        }
        Slot::recycle(slot);
        r
    }

    /// The usual path of [`request_reading`](Self::request_reading): the
    /// request registered in the pending map, sent, and its response
    /// delivered to its slot. `Err` only for a request never registered
    /// (a zero timeout); else the slot and the result.
    #[allow(clippy::too_many_arguments)]
    fn request_registered(
        self: &Arc<Self>,
        msg: &[u8],
        started: Instant,
        timeout: Option<Duration>,
        deadline: Option<Instant>,
        cancel: Option<&CancelToken>,
        into: &mut Option<&mut Vec<u8>>,
        read: Option<InPlaceRead<'_>>,
    ) -> Result<(Arc<Slot>, Result<Vec<u8>>)> {
        let session = self.session();
        if timeout.is_some_and(|t| t.is_zero()) {
            // Sent (if there is room now), never waited for: not even
            // registered, so that an answer quicker than this call's return
            // is discarded (and counted) like any later one.
            let id = self.next_id.fetch_add(1, Ordering::Relaxed);
            self.send(&session, MsgType::Request, id, 0, msg, Deadline::At(deadline), cancel)?;
            Stats::add(&self.stats.c.requests_sent, 1);
            Stats::add(&self.stats.c.timeouts, 1);
            return Err(Error::timeout("the RPC response", timeout));
        }
        // The caller's buffer waits in the slot for the response.
        let buffer = into.as_deref_mut().map(std::mem::take);
        let (id, slot) = self.register(started, deadline, session.id, buffer);
        let r = self.wait_for(&slot, id, &session, msg, timeout, deadline, cancel, read);
        Ok((slot, r))
    }

    /// Sends request `id` (registered with `slot`) and waits for its result.
    #[allow(clippy::too_many_arguments)]
    fn wait_for(
        self: &Arc<Self>,
        slot: &Arc<Slot>,
        id: u64,
        session: &Session,
        msg: &[u8],
        timeout: Option<Duration>,
        deadline: Option<Instant>,
        cancel: Option<&CancelToken>,
        read: Option<InPlaceRead<'_>>,
    ) -> Result<Vec<u8>> {
        // From here on `cancel` completes the slot with `Interrupted`.
        if let Some(c) = cancel {
            c.watch(slot);
        }
        if let Err(e) = self.send(session, MsgType::Request, id, 0, msg, Deadline::At(deadline), cancel) {
            self.unregister(id);
            return Err(e);
        }
        Stats::add(&self.stats.c.requests_sent, 1);
        let first_look = match self.policy {
            WaitPolicy::Futex if cancel.is_none() => {
                self.sleep_reading_for_myself(slot, id, session, deadline, read);
                None
            }
            WaitPolicy::Futex => None,
            _ => self.read_for_myself(slot, id, session, deadline, read),
        };
        self.wait_on_slot(slot, id, timeout, deadline, first_look)
    }

    /// Waits until request `id`'s slot has its result (or `deadline`
    /// passes), and takes it. `first_look`: when a hybrid requester began
    /// to wait, for the moving average of response waits.
    pub(super) fn wait_on_slot(
        &self,
        slot: &Slot,
        id: u64,
        timeout: Option<Duration>,
        deadline: Option<Instant>,
        first_look: Option<Instant>,
    ) -> Result<Vec<u8>> {
        match self.sleep_on_slot(slot, id, timeout, deadline, None, first_look) {
            Waited::Done(r) => r,
            Waited::Pending => unreachable!("only a wait with an `until` ends pending"),
        }
    }

    /// [`wait_on_slot`](Self::wait_on_slot) that also ends at `until`,
    /// the request still pending ([`Waited::Pending`]) if `deadline` (the
    /// request's own, after which it is given up and `Err(Timeout)`
    /// reports `timeout`) has not passed by then.
    fn sleep_on_slot(
        &self,
        slot: &Slot,
        id: u64,
        timeout: Option<Duration>,
        deadline: Option<Instant>,
        until: Option<Instant>,
        first_look: Option<Instant>,
    ) -> Waited {
        let mut s = slot.state.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(r) = s.result.take() {
                let completed_at = s.completed_at.take();
                drop(s);
                if let Some(t) = first_look {
                    if r.is_ok() || matches!(r, Err(Error::Remote(_))) {
                        // Until the response came, not until this thread
                        // was awake again: a wait that counted its own
                        // wake-up, and the copy its deliverer made for it,
                        // kept a channel whose calls take 100 µs sleeping at
                        // every call once a few slow ones (the first, whose
                        // pages are new) had made its budget the floor.
                        let until = completed_at.unwrap_or_else(Instant::now);
                        self.record_response_wait(until.saturating_duration_since(t));
                    }
                }
                if matches!(r, Err(Error::Interrupted)) {
                    self.unregister(id); // a late response is discarded
                }
                return Waited::Done(r);
            }
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                drop(s);
                if self.unregister(id) {
                    Stats::add(&self.stats.c.timeouts, 1);
                    return Waited::Done(Err(Error::timeout("the RPC response", timeout)));
                }
                // The response won the race with the deadline: it is being
                // delivered, unless its result was taken already (then
                // nothing more comes; `ready` is set under the lock, with
                // the result).
                s = slot.state.lock().unwrap_or_else(|p| p.into_inner());
                if s.result.is_none() && slot.ready.load(Ordering::Acquire) {
                    return Waited::Done(Err(Error::invalid("this request's response was taken already")));
                }
                continue;
            }
            if until.is_some_and(|u| now >= u) {
                return Waited::Pending;
            }
            let end = match (until, deadline) {
                (Some(u), Some(d)) => Some(u.min(d)),
                (u, d) => u.or(d),
            };
            let wait = end.map_or(Duration::from_secs(3600), |e| e.saturating_duration_since(now));
            s.sleeping = true;
            s = slot.cond.wait_timeout(s, wait).unwrap_or_else(|p| p.into_inner()).0;
            s.sleeping = false;
        }
    }

    /// A requester's wait on a spin or hybrid channel: it takes the reader
    /// role whenever it is free and reads for itself, so that its response
    /// needs no hand-off from the reader thread (which stands aside
    /// meanwhile; whatever else it reads it hands on as the reader thread
    /// would). Until `slot` has its result, `deadline` passes or, on a
    /// hybrid channel, [`Inner::response_spin`]; then the caller sleeps on
    /// the slot and the reader thread reads. Returns when a hybrid
    /// requester first looked at the clock, if it did (64 turns in): the
    /// start of the wait it records.
    ///
    /// A turn looks whether `session`'s ring (the one the response comes
    /// in) has anything before it takes the role and tries a claim, which
    /// costs many times that look; every 64th turn tries a claim anyway,
    /// so that a cursor that reads empty while it is not (a damaged or
    /// stalled tail, which a claim repairs or steps over) costs 64 turns,
    /// not the whole wait.
    ///
    /// `read`: a one-packet response to request `id` that this thread
    /// reads is given to it in its ring node (see `request_with`).
    fn read_for_myself(
        self: &Arc<Self>,
        slot: &Slot,
        id: u64,
        session: &Session,
        deadline: Option<Instant>,
        mut read: Option<InPlaceRead<'_>>,
    ) -> Option<Instant> {
        let mut budget = SpinBudget::new(self.policy, deadline);
        self.self_readers.fetch_add(SELF_READ_START, Ordering::SeqCst);
        let mut turns = 0u32;
        // SYNC: pairs with the Release store of `ready` in `Slot::complete`.
        while !slot.ready.load(Ordering::Acquire) {
            turns = turns.wrapping_add(1);
            // A clock read costs as much as many turns.
            let every_64th = turns % 64 == 0;
            if every_64th && budget.over(self, deadline, Instant::now()) {
                break;
            }
            if every_64th || session.rx.readable_hint() {
                if let Ok(mut rd) = self.reading.try_lock() {
                    if every_64th {
                        // The reader thread stands aside while this thread
                        // reads for itself, its ticks too: they are this
                        // thread's to do (a peer that died fails the slot).
                        self.tick_if_due(&mut rd);
                    }
                    let mine = read.as_mut().map(|f| (id, &mut **f as InPlaceRead<'_>));
                    if let Next::Woke = self.read_one(&mut rd, false, mine) {
                        // A message handed on, likely this very response:
                        // look at once, without the pause (about 50 ns on
                        // some CPUs, all of it added to the round trip).
                        continue;
                    }
                }
            }
            std::hint::spin_loop();
        }
        self.stop_reading_for_myself(session);
        budget.first_look
    }

    /// A requester's wait on a futex channel: as
    /// [`read_for_myself`](Self::read_for_myself), but asleep between
    /// packets on the futex of the ring its response comes in, so that the
    /// response's arrival wakes this very thread: one wake-up on its way
    /// instead of two in a row (the reader thread's, then this thread's on
    /// its slot). Another reader that delivers the response instead (the
    /// reader thread, or another requester reading for itself) wakes the
    /// ring's sleepers once the slot is complete (`Inner::read_one`). A
    /// sleep lasts a tick at most, so that a slot completed otherwise (the
    /// end closed, the peer died) is seen within one; requests that a
    /// [`CancelToken`] may end sleep on their slot instead, where a cancel
    /// wakes them at once. Returns when the slot is complete, `deadline`
    /// passed, or the role stayed taken while packets waited
    /// ([`ROLE_BUSY_LOOKS`]; the caller then sleeps on the slot).
    fn sleep_reading_for_myself(
        self: &Arc<Self>,
        slot: &Slot,
        id: u64,
        session: &Session,
        deadline: Option<Instant>,
        mut read: Option<InPlaceRead<'_>>,
    ) {
        self.self_readers.fetch_add(SELF_READ_START, Ordering::SeqCst);
        // Looks in a row that found the role taken and packets queued.
        let mut busy = 0u32;
        // SYNC: pairs with the Release store of `ready` in `Slot::complete`.
        while !slot.ready.load(Ordering::Acquire) {
            match self.reading.try_lock() {
                Ok(mut rd) => {
                    busy = 0;
                    // As in `read_for_myself`: the reader thread's ticks.
                    self.tick_if_due(&mut rd);
                    let mine = read.as_mut().map(|f| (id, &mut **f as InPlaceRead<'_>));
                    self.read_one(&mut rd, false, mine);
                }
                Err(_) => busy += 1,
            }
            if slot.ready.load(Ordering::Acquire) {
                break;
            }
            if session.rx.readable_hint() {
                if busy >= ROLE_BUSY_LOOKS {
                    // The role is held for long (an inline handler, a
                    // caller reading in place): leave the reading to its
                    // holder and the reader thread, and sleep on the slot
                    // (the caller does, once this returns), with its
                    // deadline, as a futex requester used to.
                    break;
                }
                // More to read, or the role's holder is reading it (and
                // wakes this thread if the response is this one's).
                std::thread::yield_now();
                continue;
            }
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            if left.is_some_and(|l| l.is_zero()) {
                break;
            }
            let slice = left.map_or(TICK, |l| l.min(TICK));
            // SYNC: the eventcount of the ring's wait cell orders this look at `ready` after
            // the registration as a sleeper, against the notify that follows a delivery.
            let _ = session.rx.wait_for_items(WaitPolicy::Futex, Some(slice), || {
                (slot.ready.load(Ordering::Acquire) || session.rx.readable_hint()).then_some(())
            });
        }
        self.stop_reading_for_myself(session);
    }

    /// How long a hybrid requester reads for itself before it sleeps:
    /// twice the channel's recent wait for a response if that is at most
    /// [`RESPONSE_SPIN_MAX`], else [`RESPONSE_SPIN`], and never less. So
    /// calls whose responses take 60 µs or 200 µs (a large copy, a short
    /// computation) are read in place by their caller, without the sleep,
    /// the wake-up and the copy into a buffer that a fixed 50 µs would
    /// cost them; calls that take milliseconds spin 50 µs and sleep.
    pub(super) fn response_spin(&self) -> Duration {
        spin_for(self.response_wait.load(Ordering::Relaxed), RESPONSE_SPIN)
    }

    /// Adds one hybrid requester's wait for its response to the moving
    /// average (weight 1/4; a wait counts as at most twice
    /// [`RESPONSE_SPIN_MAX`], so that one slow call is forgotten within a
    /// few). Threads that race here lose a sample, which is harmless.
    pub(super) fn record_response_wait(&self, waited: Duration) {
        let old = self.response_wait.load(Ordering::Relaxed);
        self.response_wait.store(averaged(old, waited), Ordering::Relaxed);
    }

    /// See [`RpcBuffer::request_async`](super::RpcBuffer::request_async).
    pub(super) fn request_async(self: &Arc<Self>, msg: &[u8]) -> RequestFuture {
        let started = Instant::now();
        let deadline = started.checked_add(self.default_timeout);
        let session = self.session();
        let (id, slot) = self.register(started, deadline, session.id, None);
        let sent = self
            .check_open()
            .and_then(|()| self.check_not_inline())
            .and_then(|()| self.send(&session, MsgType::Request, id, 0, msg, Deadline::At(deadline), None));
        let error = match sent {
            Ok(()) => {
                Stats::add(&self.stats.c.requests_sent, 1);
                None
            }
            Err(e) => {
                self.unregister(id);
                Some(e)
            }
        };
        RequestFuture::new(Arc::clone(self), id, slot, error)
    }

    /// See [`RpcBuffer::notify`](super::RpcBuffer::notify).
    pub(super) fn notify(&self, msg: &[u8]) -> Result<()> {
        self.check_open()?;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.send(&self.session(), MsgType::Notify, id, 0, msg, Deadline::After(self.default_timeout), None)?;
        Stats::add(&self.stats.c.notifications_sent, 1);
        Ok(())
    }

    /// The largest message this end may send: the smaller of its own limit
    /// and the peer's (once it is known).
    pub(super) fn send_max(&self) -> usize {
        let peer_max = self
            .control()
            .map_or(0, |c| if self.owner { &c.opener_max } else { &c.owner_max }.load(Ordering::Relaxed));
        if peer_max == 0 {
            self.max_message
        } else {
            self.max_message.min(peer_max as usize)
        }
    }

    /// Writes one message as packets, each before `deadline`, giving up
    /// promptly if the peer goes away, and with [`Error::Interrupted`]
    /// (within a tick) once `cancel` is cancelled. A packet that finds room
    /// at once costs no clock read.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn send(
        &self,
        session: &Session,
        kind: MsgType,
        id: u64,
        response_to: u64,
        msg: &[u8],
        deadline: Deadline,
        cancel: Option<&CancelToken>,
    ) -> Result<()> {
        let max = self.send_max();
        if msg.len() > max {
            return Err(Error::MessageTooLarge { size: msg.len(), max, hint: RPC_TOO_LARGE });
        }
        // When the first wait began, and the deadline then: read once, if
        // a packet has to wait.
        let mut waiting: Option<(Instant, Option<Instant>)> = None;
        let room = session.tx.node_size() - HEADER;
        let count = packet_count(msg.len(), room);
        for (index, chunk) in
            (0..count).map(|i| (i, &msg[(i * room).min(msg.len())..((i + 1) * room).min(msg.len())]))
        {
            let header = Header {
                kind,
                msg_id: id,
                response_to,
                total_len: msg.len() as u32,
                index: index as u32,
                count: count as u32,
            };
            self.with_room(session, deadline, cancel, &mut waiting, |slice| {
                session.tx.write_with(HEADER + chunk.len(), Some(slice), |node| {
                    header.encode(&mut node[..HEADER]);
                    copy::copy(&mut node[HEADER..], chunk);
                })
            })?;
            Stats::add(&self.stats.c.packets_sent, 1);
            Stats::add(&self.stats.c.bytes_sent, chunk.len() as u64);
        }
        Ok(())
    }

    /// Claims a node of `session`'s outgoing ring before `deadline`, as
    /// [`send`](Self::send) writes one, for a response written in place
    /// (see `ResponseWriter`).
    pub(super) fn claim_tx(&self, session: &Session, deadline: Deadline) -> Result<Claim> {
        self.with_room(session, deadline, None, &mut None, |slice| session.tx.claim_write(Some(slice)))
    }

    /// Runs `attempt` (a write or claim in `session`'s outgoing ring that
    /// waits up to the time it is given) until it finds room: the first
    /// attempt does not wait; then slices of waiting until the deadline,
    /// checking between them that the end and the session are open and
    /// `cancel` is not cancelled. A deadline that has passed (a zero
    /// timeout) still got that one attempt: a zero timeout tries once.
    /// `waiting`: when the first wait of the message began, and its
    /// deadline (read once, if a packet has to wait).
    fn with_room<R>(
        &self,
        session: &Session,
        deadline: Deadline,
        cancel: Option<&CancelToken>,
        waiting: &mut Option<(Instant, Option<Instant>)>,
        mut attempt: impl FnMut(Duration) -> Result<R>,
    ) -> Result<R> {
        let mut tried = false;
        loop {
            self.check_open()?;
            session.check_open()?;
            if cancel.is_some_and(CancelToken::is_cancelled) {
                return Err(Error::Interrupted);
            }
            let slice = if tried {
                let (began, until) = *waiting.get_or_insert_with(|| {
                    let now = Instant::now();
                    let until = match deadline {
                        Deadline::At(at) => at,
                        Deadline::After(t) => now.checked_add(t),
                    };
                    (now, until)
                });
                let left = until.map(|d| d.saturating_duration_since(Instant::now()));
                if left.is_some_and(|l| l.is_zero()) {
                    Stats::add(&self.stats.c.timeouts, 1);
                    let waited = match deadline {
                        Deadline::After(t) => Some(t),
                        Deadline::At(at) => at.map(|d| d.saturating_duration_since(began)),
                    };
                    return Err(Error::timeout("room in the RPC ring to send a packet", waited));
                }
                left.map_or(TICK, |l| l.min(TICK))
            } else {
                Duration::ZERO
            };
            match attempt(slice) {
                Ok(r) => return Ok(r),
                Err(Error::Timeout { .. }) => tried = true,
                Err(e) => return Err(e),
            }
        }
    }

    /// Removes the pending requests that `which` picks and returns them.
    pub(super) fn take_pending(&self, which: impl Fn(&Slot) -> bool) -> Vec<Arc<Slot>> {
        let mut pending = self.pending.lock();
        let ids: Vec<u64> = pending.iter().filter(|(_, s)| which(s)).map(|(id, _)| *id).collect();
        ids.iter().filter_map(|id| pending.remove(id)).collect()
    }

    /// Fails the requests sent in session `id` (its client left).
    pub(super) fn fail_session(&self, id: u64, why: u8) {
        for slot in self.take_pending(|s| s.session == id) {
            slot.complete(Err(error_of(why)));
        }
    }

    /// Marks this end closed (or its server dead) and fails every pending
    /// request with that.
    pub(super) fn fail_all(&self, why: u8) {
        let _ = self.state.compare_exchange(OPEN, why, Ordering::SeqCst, Ordering::SeqCst);
        let why = self.state.load(Ordering::SeqCst);
        let _ = self.session().over.compare_exchange(OPEN, why, Ordering::SeqCst, Ordering::SeqCst);
        let all: Vec<Arc<Slot>> =
            self.pending.lock().drain().map(|(_, s)| s).collect();
        for slot in all {
            slot.complete(Err(error_of(why)));
        }
        self.wake_ring_sleepers(&self.session());
        let _guard = self.closed_lock.lock().unwrap_or_else(|p| p.into_inner());
        self.closed_cond.notify_all();
    }
}

#[cfg(all(test, not(tachyon_loom)))]
mod tests {
    use super::*;

    const US: u64 = 1_000;

    #[test]
    fn a_hybrid_requester_spins_twice_its_recent_wait_within_bounds() {
        // Nothing measured yet, or quick responses: the floor.
        assert_eq!(spin_for(0, RESPONSE_SPIN), RESPONSE_SPIN);
        assert_eq!(spin_for(10 * US, RESPONSE_SPIN), RESPONSE_SPIN);
        // Responses of 60 µs and 250 µs: twice that, read in place.
        assert_eq!(spin_for(60 * US, RESPONSE_SPIN), Duration::from_micros(120));
        assert_eq!(spin_for(250 * US, RESPONSE_SPIN), RESPONSE_SPIN_MAX);
        // Longer: not worth spinning through, back to the floor.
        assert_eq!(spin_for(251 * US, RESPONSE_SPIN), RESPONSE_SPIN);
        assert_eq!(spin_for(u64::MAX, RESPONSE_SPIN), RESPONSE_SPIN);
    }

    #[test]
    fn the_average_follows_its_waits_and_forgets_a_slow_one_within_a_few() {
        let mut avg = averaged(0, Duration::from_micros(100));
        assert_eq!(avg, 100 * US, "the first wait is the average");
        for _ in 0..20 {
            avg = averaged(avg, Duration::from_micros(100));
        }
        assert_eq!(spin_for(avg, RESPONSE_SPIN), Duration::from_micros(200));
        // A call that waited seconds (a stalled peer) counts as 1 ms ...
        avg = averaged(avg, Duration::from_secs(5));
        assert_eq!(avg, 100 * US * 3 / 4 + 1_000 * US / 4);
        assert_eq!(spin_for(avg, RESPONSE_SPIN), RESPONSE_SPIN, "so the next calls sleep after 50 µs");
        // ... and is forgotten after a handful of ordinary calls.
        let mut calls = 0;
        while spin_for(avg, RESPONSE_SPIN) == RESPONSE_SPIN {
            avg = averaged(avg, Duration::from_micros(100));
            calls += 1;
        }
        assert!(calls <= 3, "{calls} calls");
        // A zero wait keeps the average measured (never 0 again).
        assert_eq!(averaged(0, Duration::ZERO), 1);
    }

    /// A hybrid requester that slept on its slot counts its wait until the
    /// response was delivered, not until it was awake again: the wake-up
    /// (and the copy its deliverer made for it) is the sleep's own cost,
    /// and counting it could keep a channel whose calls take 100 µs
    /// sleeping at every call once a few slow first calls had made its
    /// budget the floor.
    #[test]
    fn a_requester_that_slept_counts_its_wait_until_the_response_came() {
        let name = format!("rpc-wait-{}", std::process::id());
        let rpc = super::super::RpcBuffer::builder(&name).wait_policy(WaitPolicy::Hybrid).create().unwrap();
        let inner = &rpc.inner;
        assert_eq!(inner.response_wait.load(Ordering::Relaxed), 0, "nothing measured yet");
        // A call whose wait began 10 ms ago, and whose response came
        // 100 µs into it, while the requester slept: it wakes only now.
        let first_look = Instant::now() - Duration::from_millis(10);
        let slot = Slot::new(first_look, None, 0, None);
        {
            let mut s = slot.state.lock().unwrap();
            s.result = Some(Ok(b"done".to_vec()));
            s.completed_at = Some(first_look + Duration::from_micros(100));
        }
        slot.ready.store(true, Ordering::Release);
        assert_eq!(inner.wait_on_slot(&slot, 1, None, None, Some(first_look)).unwrap(), b"done");
        assert_eq!(inner.response_wait.load(Ordering::Relaxed), 100 * US, "100 µs counted, not 10 ms");
        assert_eq!(inner.response_spin(), Duration::from_micros(200), "so the next call spins 200 µs");
        // A response taken while the requester was awake counts until it
        // was taken: at least the 10 ms (capped at twice the spin's
        // maximum).
        let slot = Slot::new(first_look, None, 0, None);
        slot.state.lock().unwrap().result = Some(Ok(Vec::new()));
        slot.ready.store(true, Ordering::Release);
        inner.wait_on_slot(&slot, 2, None, None, Some(first_look)).unwrap();
        let capped = (RESPONSE_SPIN_MAX * 2).as_nanos() as u64;
        assert_eq!(inner.response_wait.load(Ordering::Relaxed), 100 * US * 3 / 4 + capped / 4);
        drop(rpc);
    }
}
