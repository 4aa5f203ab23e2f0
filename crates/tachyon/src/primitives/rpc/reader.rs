//! The reader thread of one RPC end: it reads packets, reassembles
//! messages and hands each to a handler or to the request waiting for it;
//! and every tick it checks the peer (on the server, moving to a fresh
//! session when the client left) and expires overdue requests.

use super::channel::{averaged, spin_for, Deadline, InPlaceRead, Inner, RPC_TOO_LARGE, SELF_READERS};
use super::control::Control;
use super::handler::{InPlace, Payload};
use super::lane::{Body, Own};
use super::packet::{self, Assembled, Header, MsgType, Reassembler, HEADER};
use super::session::{new_session, Session, CLOSED, OPEN, PEER_DIED};
use super::stats::Stats;
use super::TICK;
use crate::error::Error;
use crate::platform::atomic::spin_hint;
use crate::platform::coarse_now;
use crate::primitives::circular::Claim;
use crate::sync::{Liveness, Token, WaitPolicy};
use std::sync::atomic::Ordering;
use std::sync::{Arc, TryLockError};
use crate::platform::clock::Instant;
use std::time::Duration;

/// The reader role: whoever holds it (the lock around this) reads the
/// end's ring and hands on what it reads. The reader thread holds it while
/// it reads; a requester waiting for its own response (on a spin or hybrid
/// channel spinning, on a futex channel asleep on the ring) takes it to
/// read for itself (see `Inner::request`), so that the
/// response reaches the thread that waits for it with no hand-off between
/// threads. Packets go into the one reassembler in ring order, whoever
/// reads them.
pub(super) struct Reading {
    /// The session whose ring is read (the server swaps in the next one).
    pub(super) session: Arc<Session>,
    pub(super) asm: Reassembler,
    /// When the peer was last checked and overdue requests expired, by the
    /// coarse clock ([`coarse_now`]: every turn looks whether a tick is
    /// due, and a precise clock read would cost a busy reader 20 – 40 ns a
    /// message).
    last_tick: Duration,
}

impl Reading {
    pub(super) fn new(session: Arc<Session>, max_message: usize) -> Reading {
        let asm = Reassembler::new(session.rx.node_size(), max_message);
        Reading { session, asm, last_tick: coarse_now() }
    }
}

/// What a reader does next with what it read.
pub(super) enum Next {
    /// Nothing more (nothing read, or handed on with no one woken).
    Nothing,
    /// Handed on, and another thread woken for it.
    Woke,
    /// A request (or notification) for the reader thread to handle itself
    /// (see [`Inner::lead`]).
    Handle(Arc<Session>, Header, Payload),
}

/// How long the reader thread stands aside for requesters that read for
/// themselves before it looks again (whether any still does, or started
/// to since its last look): messages nobody waits for (async responses,
/// the peer's requests) that come just after the last such requester
/// returned wait one to two of these.
const ASIDE: Duration = Duration::from_millis(1);

/// How often the standby thread looks while handlers run on the reader
/// thread: one seen at two looks (so running 1 to 2 of these) has the
/// standby read in its place (handing what it reads to the handler pool).
const PROMOTE: Duration = Duration::from_millis(1);

/// The standby thread's states (`Inner::standby_state`).
pub(super) const POLLING: u8 = 0;
pub(super) const LONG_SLEEP: u8 = 1;

impl Inner {
    /// The reader role (see [`Reading`]).
    pub(super) fn reading(&self) -> std::sync::MutexGuard<'_, Reading> {
        self.reading.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The reader role if nobody holds it now (as [`reading`](Self::reading),
    /// a poisoned lock is taken as it is).
    pub(super) fn try_reading(&self) -> Option<std::sync::MutexGuard<'_, Reading>> {
        match self.reading.try_lock() {
            Ok(rd) => Some(rd),
            Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        }
    }

    /// The reader thread: packets in, messages dispatched; every tick, the
    /// peer is checked and overdue requests expire. While requesters read
    /// for themselves it stands aside (it neither reads nor spins).
    ///
    /// With handler threads (the default) it runs the handler of a request
    /// it read itself, so that a call crosses no thread on this side
    /// either, and a standby thread (started here) reads in its place
    /// once a handler has run for one to two [`PROMOTE`]s, handing requests to
    /// the handler pool as before: a slow handler holds up the others by
    /// about that long, not for its whole run.
    pub(super) fn read_loop(self: Arc<Self>) {
        let standby = (!self.inline_handlers)
            .then(|| {
                let inner = Arc::clone(&self);
                self.threads.spawn("tachyon-rpc-standby", move || inner.standby_loop())
            })
            .and_then(|r| r.ok());
        while !self.stop.load(Ordering::SeqCst) {
            match self.reader_turn(standby.is_some(), None) {
                Next::Handle(session, h, payload) => self.lead(&session, h, payload),
                Next::Woke if self.policy != WaitPolicy::Futex => {
                    // Someone was woken (a requester, a handler thread),
                    // likely on this core, and this thread would go on
                    // spinning on the ring: let it run now.
                    std::thread::yield_now();
                }
                _ => {}
            }
        }
        if let Some(standby) = standby {
            {
                let _g = self.standby_lock.lock().unwrap_or_else(|p| p.into_inner());
                self.standby_cond.notify_one();
            }
            standby.join();
        }
    }

    /// One turn of a reader: stands aside while requesters read for
    /// themselves; else waits (as the channel's policy says) for a packet,
    /// up to the next tick (or, for the standby, until the reader thread is
    /// back from the handler it ran since `back_from`), and reads it. Then
    /// ticks if one is due. `leader`: requests read go to the caller
    /// ([`Next::Handle`]) instead of the handler pool.
    fn reader_turn(self: &Arc<Self>, leader: bool, back_from: Option<u64>) -> Next {
        // Looked at before the role is taken: a requester in the lane holds
        // the role for its whole call, and a reader queued for it would be
        // woken by a system call at the end of every call, on the
        // requester's own core as often as not, and would then wait for the
        // next packet there while the requester could not run.
        if self.self_readers.load(Ordering::SeqCst) & SELF_READERS > 0 {
            self.stand_aside();
            // The tick, unless the role is held: its holder ticks.
            if let Some(mut rd) = self.try_reading() {
                let _ = self.tick_if_due(&mut rd);
            }
            return Next::Nothing;
        }
        let mut rd = self.reading();
        // One coarse clock read a turn: whether a tick is due, and how long
        // to wait for a packet until it is (give or take the clock's
        // resolution, a few milliseconds of the 20 ms tick).
        let since_tick = coarse_now().saturating_sub(rd.last_tick);
        let wait = TICK.saturating_sub(since_tick);
        let ready = |session: &Session| {
            let look = self.self_readers.load(Ordering::Relaxed) & SELF_READERS > 0
                || session.rx.readable_hint()
                || self.stop.load(Ordering::Relaxed)
                || back_from.is_some_and(|n| self.leading.load(Ordering::Relaxed) != n);
            look.then_some(())
        };
        if self.policy == WaitPolicy::Spin {
            // A spinning wait keeps the role: it looks at `self_readers` at
            // every turn of its spin, so a requester that starts to read for
            // itself has the role within one (below); and a turn takes the
            // lock once, not twice.
            let session = &rd.session;
            let _ = session.rx.wait_for_items(self.policy, Some(wait), || ready(session));
        } else {
            // A wait that may sleep gives the role up meanwhile, so that a
            // requester reads its response with no wake-up of this thread on
            // its way.
            let session = Arc::clone(&rd.session);
            drop(rd);
            if self.policy == WaitPolicy::Hybrid && back_from.is_none() {
                self.wait_for_packet(&session, wait, || ready(&session));
            } else {
                let _ = session.rx.wait_for_items(self.policy, Some(wait), || ready(&session));
            }
            if self.self_readers.load(Ordering::SeqCst) & SELF_READERS > 0 {
                // A requester reads for itself now: the next turn stands
                // aside rather than queue for the role (see above).
                return Next::Nothing;
            }
            rd = self.reading();
        }
        let next = if self.self_readers.load(Ordering::SeqCst) & SELF_READERS == 0 {
            self.read_one(&mut rd, leader, None)
        } else {
            Next::Nothing
        };
        if since_tick >= TICK {
            self.tick_now(&mut rd);
        }
        next
    }

    /// A hybrid reader thread's wait for a packet (until `ready`, or for
    /// `wait` at most): it spins for [`packet_spin`](Self::packet_spin)
    /// before the policy's own spin and sleep, and adds how long it
    /// waited to the moving average that budget follows. So a peer whose
    /// requests come 20 – 250 µs apart (it copies large messages, or
    /// computes a little between calls) finds this thread awake, and pays
    /// no futex wake-up per call (a system call on its side, 25 – 45 µs
    /// for this one on a VM); one that sends rarely still finds it
    /// asleep after the policy's few microseconds. A wait that ends at
    /// once reads no clock and is not counted; one that ends within 64
    /// looks (a few hundred nanoseconds, a round trip's hop) reads none
    /// either and counts as no wait: two clock reads between the packet
    /// and its reading took a hybrid round trip from 0.38 to 0.43 – 0.52
    /// µs.
    fn wait_for_packet(&self, session: &Session, wait: Duration, mut ready: impl FnMut() -> Option<()>) {
        if ready().is_some() || wait.is_zero() {
            return; // (a tick is due: no wait at all)
        }
        // The clock is read once 64 turns found nothing (a wait of a few
        // hundred nanoseconds reads none, and counts as none).
        let mut started = None;
        let spin = self.packet_spin().min(wait);
        let mut found = false;
        if !spin.is_zero() {
            let mut turns = 0u32;
            loop {
                spin_hint();
                if ready().is_some() {
                    found = true;
                    break;
                }
                turns = turns.wrapping_add(1);
                if turns % 64 == 0 && started.get_or_insert_with(Instant::now).elapsed() >= spin {
                    break;
                }
            }
        }
        if !found {
            let started = *started.get_or_insert_with(Instant::now);
            let _ = session.rx.wait_for_items(WaitPolicy::Hybrid, Some(wait.saturating_sub(started.elapsed())), &mut ready);
        }
        // A wait cut short by a requester that reads for itself, or by the
        // end closing, says nothing about how often packets come.
        if self.self_readers.load(Ordering::Relaxed) & SELF_READERS == 0 && !self.stop.load(Ordering::Relaxed) {
            let waited = started.map_or(Duration::ZERO, |t| t.elapsed());
            let old = self.packet_wait.load(Ordering::Relaxed);
            self.packet_wait.store(averaged(old, waited), Ordering::Relaxed);
        }
    }

    /// How long a hybrid reader thread spins for the next packet before
    /// the policy's own spin: twice its recent wait for one if that is at
    /// most 500 µs (as a hybrid requester's, see
    /// [`Inner::response_spin`]), else nothing more than the policy's
    /// spin. Only the reader thread writes the average (the standby's
    /// waits, which end when the reader thread is back, are not counted).
    fn packet_spin(&self) -> Duration {
        spin_for(self.packet_wait.load(Ordering::Relaxed), Duration::ZERO)
    }

    /// The tick, if one is due, for a requester that reads for itself (the
    /// reader thread stands aside meanwhile, and ticks only once it is back;
    /// in [`super::lane`] the requester holds the role for its whole call):
    /// `Some(why)` if the session `rd` read is over since (the server's
    /// client left, or the end closed).
    pub(super) fn tick_if_due(self: &Arc<Self>, rd: &mut Reading) -> Option<u8> {
        if coarse_now().saturating_sub(rd.last_tick) < TICK {
            return None;
        }
        // Once a tick: the session may be replaced by the next one.
        let read = Arc::clone(&rd.session);
        self.tick_now(rd);
        let why = read.over.load(Ordering::SeqCst);
        (why != OPEN).then_some(why)
    }

    /// The tick that [`reader_turn`](Self::reader_turn) found due.
    fn tick_now(self: &Arc<Self>, rd: &mut Reading) {
        rd.last_tick = coarse_now();
        self.tick(rd);
        let stale = rd.asm.expire(self.default_timeout * 2);
        Stats::add(&self.stats.c.corrupt_packets, stale as u64);
    }

    /// The reader thread runs a request's handler itself (the reader role
    /// is free meanwhile: requesters read for themselves, and the standby
    /// reads once it saw this same handler running at two of its looks,
    /// [`PROMOTE`] apart).
    fn lead(self: &Arc<Self>, session: &Session, h: Header, payload: Payload) {
        // Only this thread leads: a plain increment numbers the handlers.
        let n = self.leads.load(Ordering::Relaxed) + 1;
        self.leads.store(n, Ordering::Relaxed);
        // SYNC: SeqCst, against the standby's store of `standby_state`
        // then load of `leading` (`standby_loop`): one of the two sees
        // the other, so a standby going to its long sleep is woken.
        self.leading.store(n, Ordering::SeqCst);
        if self.standby_state.load(Ordering::SeqCst) == LONG_SLEEP {
            let _g = self.standby_lock.lock().unwrap_or_else(|p| p.into_inner());
            self.standby_cond.notify_one();
        }
        self.handle(session, h, payload);
        self.leading.store(0, Ordering::SeqCst);
    }

    /// The standby thread: once it sees the reader thread in the same
    /// handler at two looks [`PROMOTE`] apart, reads in its place until
    /// that handler returns (requests go to the handler pool). Looks every
    /// [`PROMOTE`] while handlers ran since its last look or run now; else
    /// sleeps until the reader thread starts one (at most a tick).
    fn standby_loop(self: Arc<Self>) {
        let mut seen = 0; // the handler running at the last look (0: none)
        let mut leads = 0; // the handlers started by then
        while !self.stop.load(Ordering::SeqCst) {
            let now = self.leading.load(Ordering::SeqCst);
            if now != 0 && now == seen {
                while self.leading.load(Ordering::SeqCst) == now && !self.stop.load(Ordering::SeqCst) {
                    if let Next::Woke = self.reader_turn(false, Some(now)) {
                        if self.policy != WaitPolicy::Futex {
                            std::thread::yield_now();
                        }
                    }
                }
                seen = 0;
                continue;
            }
            seen = now;
            let started = self.leads.load(Ordering::Relaxed);
            let recent = now != 0 || started != leads;
            leads = started;
            let g = self.standby_lock.lock().unwrap_or_else(|p| p.into_inner());
            if recent {
                let _ = self.standby_cond.wait_timeout(g, PROMOTE);
            } else {
                // SYNC: the other side of the pair in `lead`.
                self.standby_state.store(LONG_SLEEP, Ordering::SeqCst);
                let g = if self.leading.load(Ordering::SeqCst) == 0 && !self.stop.load(Ordering::SeqCst) {
                    self.standby_cond.wait_timeout(g, TICK).unwrap_or_else(|p| p.into_inner()).0
                } else {
                    g
                };
                self.standby_state.store(POLLING, Ordering::SeqCst);
                drop(g);
            }
        }
    }

    /// Sleeps while requesters read for themselves, [`ASIDE`] at a time,
    /// and until one [`ASIDE`] passed in which none started to: a
    /// requester between two calls is no reason to spin on the ring (on
    /// the requester's own CPU, as often as not, where it would keep the
    /// requester from its next call). Returns early when the last requester
    /// to stop reading for itself left something for the reader thread
    /// ([`Aside::wanted`](super::channel::Aside)), or the end stops.
    fn stand_aside(&self) {
        let mut aside = self.aside.lock().unwrap_or_else(|p| p.into_inner());
        // The count of starts at the last look (none yet: stand aside for
        // at least one ASIDE, a requester was reading a moment ago).
        let mut seen = None;
        loop {
            if self.stop.load(Ordering::SeqCst) || std::mem::take(&mut aside.wanted) {
                return;
            }
            // SYNC: SeqCst, as the store in `stop_reading_for_myself`; it
            // sets `wanted` under the `aside` lock, which this holds from
            // the look at `wanted` above until it sleeps.
            let now = self.self_readers.load(Ordering::SeqCst);
            let starts = now >> 32;
            if now & SELF_READERS == 0 && seen == Some(starts) {
                return;
            }
            seen = Some(starts);
            aside.parked += 1;
            aside = self.aside_cond.wait_timeout(aside, ASIDE).unwrap_or_else(|p| p.into_inner()).0;
            aside.parked -= 1;
        }
    }

    /// Called by a requester that stops reading for itself: if it was the
    /// last and something waits for the reader thread (requests still
    /// pending, packets in the ring), has a reader standing aside read now
    /// rather than after one or two [`ASIDE`]s.
    pub(super) fn stop_reading_for_myself(&self, session: &Session) {
        // SYNC: SeqCst, as the loads in `reader_turn` and `stand_aside`.
        if self.self_readers.fetch_sub(1, Ordering::SeqCst) & SELF_READERS != 1 {
            return;
        }
        // Hints, both: a wake-up missed delays the reader thread by one to
        // two `ASIDE`s (it looks again by then), and one too many costs it
        // a look. No lock is taken: this runs at the end of every call.
        let waiting = self.pending.any();
        let queued = session.rx.readable_hint();
        if waiting || queued {
            // Under the lock: a reader about to sleep in `stand_aside` looked
            // at `wanted` under it, so it is asleep by now and woken, or it
            // looks after this and does not sleep.
            let mut aside = self.aside.lock().unwrap_or_else(|p| p.into_inner());
            aside.wanted = true;
            if aside.parked > 0 {
                self.aside_cond.notify_all();
            }
        }
    }

    /// Reads one packet if one is queued now (the caller holds the reader
    /// role) and hands on the message it completes (a request to the
    /// caller itself if it is the `leader`: see [`Next`]). Errors are
    /// counted and swallowed: reading goes on.
    ///
    /// A one-packet message is not copied out of the ring on its own: a
    /// request that this very thread handles (it is the `leader`, or
    /// handlers are inline) is handed to its handler in place, its node
    /// claimed until the handler returns; a response is copied straight
    /// into its requester's buffer, or, if it answers request `mine.0`
    /// (this thread's own, `request_with`), given to `mine.1` in its node.
    pub(super) fn read_one(
        self: &Arc<Self>,
        rd: &mut Reading,
        leader: bool,
        mine: Option<(u64, InPlaceRead<'_>)>,
    ) -> Next {
        self.read_one_with(rd, leader, mine, None)
    }

    /// [`read_one`](Self::read_one), by a requester in the lane
    /// ([`super::lane`]) if `own` is given: the response (or error
    /// response, or refusal as too large) to `own.id` goes to `own`, not
    /// to a slot.
    pub(super) fn read_one_with(
        self: &Arc<Self>,
        rd: &mut Reading,
        leader: bool,
        mine: Option<(u64, InPlaceRead<'_>)>,
        own: Option<&mut Own<'_, '_>>,
    ) -> Next {
        let Reading { session, asm, .. } = rd;
        let claim = match session.rx.claim_read_now() {
            Ok(Some(c)) => c,
            Ok(None) => return Next::Nothing,
            Err(_) => {
                // A ring that keeps failing (a damaged cell): count it and do
                // not spin on it.
                Stats::add(&self.stats.c.corrupt_packets, 1);
                std::thread::sleep(Duration::from_millis(1));
                return Next::Nothing;
            }
        };
        // SAFETY: `claim` is of `session.rx`, claimed just above; `packet`
        // is not used after the claim is moved on (handed to `InPlace`, or
        // freed at the end of this function).
        let packet = unsafe { session.rx.claimed_item(&claim) };
        crate::sync::prefetch(packet.as_ptr(), packet.len(), 16, false);
        Stats::add_as_reader(&self.stats.c.packets_received, 1);
        Stats::add_as_reader(&self.stats.c.bytes_received, packet.len().saturating_sub(HEADER) as u64);
        let mut claim = Some(claim);
        let next = match asm.push(packet) {
            Assembled::Single(h) => match h.kind {
                MsgType::Request | MsgType::Notify => {
                    let here = self.inline_handlers || (leader && !self.handler_waits.load(Ordering::Relaxed));
                    if here && h.kind == MsgType::Request {
                        session.tx.prefetch_next_write(packet.len());
                    }
                    let payload = match claim.take() {
                        Some(c) if here => Payload::InPlace(InPlace::new(Arc::clone(session), c)),
                        other => {
                            claim = other;
                            Payload::Owned(packet::copy_of(&packet[HEADER..]))
                        }
                    };
                    self.free(session, &mut claim);
                    self.dispatch(session, h, payload, leader)
                }
                MsgType::Response | MsgType::Error => {
                    let next = match (mine, own) {
                        (_, Some(own)) if h.response_to == own.id => {
                            self.deliver_own(&h, Body::InRing(&packet[HEADER..]), own);
                            Next::Woke
                        }
                        (Some((id, read)), _) if h.kind == MsgType::Response && h.response_to == id => {
                            self.deliver_in_place(h, &packet[HEADER..], read)
                        }
                        _ => {
                            let next = self.deliver(h, &packet[HEADER..]);
                            self.wake_ring_sleepers(session);
                            next
                        }
                    };
                    self.free(session, &mut claim);
                    next
                }
            },
            got => {
                self.free(session, &mut claim);
                // The lane's own response, if this completes it.
                let own = own.filter(|o| match &got {
                    Assembled::Complete(h, _) | Assembled::TooLarge(h) => {
                        matches!(h.kind, MsgType::Response | MsgType::Error) && h.response_to == o.id
                    }
                    _ => false,
                });
                match (got, own) {
                    (Assembled::Complete(h, payload), Some(own)) => {
                        self.deliver_own(&h, Body::Owned(payload), own);
                        Next::Woke
                    }
                    (Assembled::TooLarge(h), Some(own)) => {
                        // As `refuse` fails a slot's request.
                        Stats::add(&self.stats.c.errors, 1);
                        let (size, max) = (h.total_len as usize, self.max_message);
                        own.got = Some(Err(Error::MessageTooLarge { size, max, hint: RPC_TOO_LARGE }));
                        Next::Woke
                    }
                    (Assembled::Complete(h, payload), None) => {
                        self.dispatch(session, h, Payload::Owned(payload), leader)
                    }
                    (Assembled::TooLarge(h), None) => {
                        self.refuse(session, h, self.max_message);
                        Next::Nothing
                    }
                    (Assembled::Dropped(_), _) => {
                        Stats::add(&self.stats.c.corrupt_packets, 1);
                        Next::Nothing
                    }
                    (Assembled::Incomplete | Assembled::Single(_), _) => Next::Nothing,
                }
            }
        };
        if asm.given_up > 0 {
            Stats::add(&self.stats.c.corrupt_packets, std::mem::take(&mut asm.given_up));
        }
        next
    }

    /// Frees the node of the packet just read, unless it was handed on.
    fn free(&self, session: &Session, claim: &mut Option<Claim>) {
        if let Some(c) = claim.take() {
            if session.rx.finish_claimed_read(c).is_err() {
                Stats::add(&self.stats.c.corrupt_packets, 1);
            }
        }
    }

    /// The waiting request a response (or error response) answers, taken
    /// out of the pending map and counted; `None` (counted as discarded)
    /// if none waits for it.
    fn answered(&self, h: &Header) -> Option<Arc<super::future::Slot>> {
        let slot = self.pending.lock().remove(&h.response_to);
        let Some(slot) = slot else {
            Stats::add_as_reader(&self.stats.c.discarded_responses, 1);
            return None;
        };
        Stats::add_as_reader(&self.stats.c.responses_received, 1);
        self.stats.record_as_reader(slot.started.elapsed());
        Some(slot)
    }

    /// A one-packet response (or error response) for the request waiting
    /// for it: copied from the ring into the requester's buffer.
    fn deliver(&self, h: Header, payload: &[u8]) -> Next {
        let Some(slot) = self.answered(&h) else { return Next::Nothing };
        if h.kind == MsgType::Response {
            slot.complete_copy(payload);
        } else {
            Stats::add(&self.stats.c.errors, 1);
            slot.complete(Err(Error::Remote(String::from_utf8_lossy(payload).into_owned())));
        }
        Next::Woke
    }

    /// This thread's own one-packet response (`request_with`): given to
    /// `read` in its ring node, and the request completed with nothing
    /// more to copy. Not called if the request gave up meanwhile.
    fn deliver_in_place(&self, h: Header, payload: &[u8], read: InPlaceRead<'_>) -> Next {
        let Some(slot) = self.answered(&h) else { return Next::Nothing };
        self.as_reader(|| read(payload));
        slot.complete(Ok(Vec::new()));
        Next::Woke
    }

    /// A message longer than this end accepts: a request is answered with
    /// an error, a response fails its request; never silently dropped.
    fn refuse(self: &Arc<Self>, session: &Arc<Session>, h: Header, max: usize) {
        Stats::add(&self.stats.c.errors, 1);
        let too_large = Error::MessageTooLarge { size: h.total_len as usize, max, hint: RPC_TOO_LARGE };
        match h.kind {
            MsgType::Request => {
                let inner = Arc::clone(self);
                let session = Arc::clone(session);
                let text = format!("request refused: {too_large}");
                self.pool.submit(Box::new(move || {
                    let id = inner.next_id.fetch_add(1, Ordering::Relaxed);
                    let deadline = Deadline::After(inner.default_timeout);
                    let _ =
                        inner.send(&session, MsgType::Error, id, h.msg_id, text.as_bytes(), deadline, None);
                }));
            }
            MsgType::Response | MsgType::Error => {
                let slot = self.pending.lock().remove(&h.response_to);
                if let Some(slot) = slot {
                    slot.complete(Err(too_large));
                }
            }
            MsgType::Notify => {}
        }
    }

    /// Hands a message to its handler or its requester (a request to the
    /// caller itself if it is the `leader`).
    fn dispatch(self: &Arc<Self>, session: &Arc<Session>, h: Header, payload: Payload, leader: bool) -> Next {
        if matches!(h.kind, MsgType::Request | MsgType::Notify) {
            if self.closing.load(Ordering::SeqCst) {
                return Next::Nothing; // read as this end closed: not handled
            }
            self.in_flight.fetch_add(1, Ordering::SeqCst);
        }
        match h.kind {
            MsgType::Request | MsgType::Notify if self.inline_handlers => {
                self.handle_inline(session, h, payload);
                Next::Nothing
            }
            MsgType::Request | MsgType::Notify if leader && !self.handler_waits.load(Ordering::Relaxed) => {
                Next::Handle(Arc::clone(session), h, payload)
            }
            MsgType::Request | MsgType::Notify => {
                let inner = Arc::clone(self);
                let session = Arc::clone(session);
                self.pool.submit(Box::new(move || inner.handle(&session, h, payload)));
                Next::Woke
            }
            MsgType::Response | MsgType::Error => {
                let Some(slot) = self.answered(&h) else { return Next::Nothing };
                let payload = payload.into_vec();
                let r = if h.kind == MsgType::Response {
                    Ok(payload)
                } else {
                    Stats::add(&self.stats.c.errors, 1);
                    Err(Error::Remote(String::from_utf8_lossy(&payload).into_owned()))
                };
                slot.complete(r);
                self.wake_ring_sleepers(session);
                Next::Woke
            }
        }
    }

    /// After a response was delivered to its slot (or requests failed): on
    /// a futex channel a requester may be asleep on `session`'s incoming
    /// ring, reading for itself (`Inner::sleep_reading_for_myself`), rather
    /// than on its slot.
    pub(super) fn wake_ring_sleepers(&self, session: &Session) {
        if self.policy == WaitPolicy::Futex {
            session.rx.wait_cell(false).notify_all();
        }
    }

    /// Checks the peer and expires overdue requests. On the server, when
    /// the client has left, ends its session and reads the fresh one of
    /// the next client from now on.
    fn tick(self: &Arc<Self>, rd: &mut Reading) {
        // A writer that died mid-write leaves a node in the way; a blocked
        // read would repair it between its sleeps, reads here do not block.
        rd.session.rx.repair_in_the_way(false);
        if self.owner {
            if let Some(next) = self.check_client(&rd.session) {
                // A new client comes on fresh rings: nothing half-read of
                // the last one is kept.
                *rd = Reading::new(next, self.max_message);
            }
        } else {
            if let Some(why) = self.server_gone().filter(|_| self.check_open().is_ok()) {
                // What the server sent before it closed (or died) still
                // counts: a response written before the close is an
                // answer. The ring holds at most its capacity of packets,
                // and no more come.
                for _ in 0..rd.session.rx.node_count() {
                    if rd.session.rx.is_empty() {
                        break;
                    }
                self.read_one(rd, false, None);
                }
                self.fail_all(why);
            }
        }
        let now = Instant::now();
        for slot in self.take_pending(|s| s.deadline.is_some_and(|d| d <= now)) {
            Stats::add(&self.stats.c.timeouts, 1);
            slot.complete(Err(Error::timeout(
                "the RPC response",
                slot.deadline.map(|d| d.saturating_duration_since(slot.started)),
            )));
        }
    }

    /// A client's check of its server: why it is over for this client
    /// (closed, dead, or no longer ours), if it is.
    fn server_gone(&self) -> Option<u8> {
        // Control words out of reach read as zeros: no longer ours.
        let Ok(c) = self.control() else { return Some(CLOSED) };
        // SYNC: the server stores `owner_closed` (in `end`) after its last
        // response: seen here, those responses are in the ring (drained in
        // `tick`).
        if c.owner_closed.load(Ordering::SeqCst) != 0
            || c.opener.load(Ordering::SeqCst) != self.ctl.token().raw()
        {
            Some(CLOSED)
        } else if Token::from_raw(c.owner.load(Ordering::SeqCst)).is_none_or(|t| self.ctl.is_dead(t)) {
            Some(PEER_DIED)
        } else {
            None
        }
    }

    /// The server's words that only it writes, restored if another process
    /// damaged them: its token (written at create) and its close flag
    /// (written once, by `end`). Left damaged, they would turn every client
    /// away (`PeerDied`, `Closed`) for as long as this server lives.
    fn restore_own_words(&self, c: &Control) {
        let me = self.ctl.token().raw();
        if c.owner.load(Ordering::SeqCst) != me {
            c.owner.store(me, Ordering::SeqCst);
        }
        let flag = c.owner_closed.load(Ordering::SeqCst);
        // SYNC: `end` stores `stop` before the flag (SeqCst): if its flag
        // is the one this CAS cleared, the second look at `stop` sees it
        // and puts the flag back.
        if flag != 0
            && !self.stop.load(Ordering::SeqCst)
            && c.owner_closed.compare_exchange(flag, 0, Ordering::SeqCst, Ordering::SeqCst).is_ok()
            && self.stop.load(Ordering::SeqCst)
        {
            c.owner_closed.store(1, Ordering::SeqCst);
        }
    }

    /// The server's check of its client: once it left (closed its end, or
    /// its process died), its session ends (its requests fail, its late
    /// responses go nowhere) and fresh rings wait for the next client.
    fn check_client(&self, session: &Arc<Session>) -> Option<Arc<Session>> {
        let Ok(c) = self.control() else { return None };
        self.restore_own_words(c);
        let client = c.opener.load(Ordering::SeqCst);
        if client == 0 {
            return None;
        }
        let why = if c.opener_closed.load(Ordering::SeqCst) == client {
            CLOSED
        } else if Token::from_raw(client).is_none_or(|t| self.ctl.is_dead(t)) {
            PEER_DIED
        } else {
            return None;
        };
        // The session is over: sends into it stop, its requests fail.
        let _ = session.over.compare_exchange(OPEN, why, Ordering::SeqCst, Ordering::SeqCst);
        self.fail_session(session.id, why);
        self.wake_ring_sleepers(session);
        let (count, size) = self.geometry;
        let next = match new_session(&self.name, count, size, self.policy) {
            Ok(next) => next,
            // No room for new rings now (the client stays "connected", so
            // no one else can come): try again at the next tick.
            Err(_) => {
                Stats::add(&self.stats.c.errors, 1);
                return None;
            }
        };
        *self.session.write().unwrap_or_else(|p| p.into_inner()) = Arc::clone(&next);
        // SYNC: the next client reads the session id after it took the
        // opener word, which is cleared last.
        c.session.store(next.id, Ordering::SeqCst);
        c.opener_max.store(0, Ordering::SeqCst);
        c.opener_closed.store(0, Ordering::SeqCst);
        c.opener.store(0, Ordering::SeqCst);
        Some(next)
    }
}
