//! The fast lane of a blocking request on a spin or hybrid channel: the
//! requester takes the reader role *before* it sends and keeps it until
//! its response is read, so the response needs no slot, no entry in the
//! pending map and no hand-over between threads.
//!
//! The usual path (`Inner::wait_for`) registers
//! the request in the pending map under its lock, sends it, takes the
//! reader role once a packet is there, and delivers the response to the
//! request's slot under the slot's lock, which the requester then takes
//! again to collect it: about fifteen locked instructions a call on top
//! of the ring's own, and a session clone. A
//! requester that holds the role from before its request goes out is the
//! only thread that can read the response, so it can recognize it by its
//! id as it reads it. Nothing else changes: packets for other requests
//! and the peer's requests are handed on as the reader thread would hand
//! them on.
//!
//! The lane is taken when the role is free at once, the request fits one
//! packet and the ring has room for it now (the role is never held while
//! waiting for room: the peer may be waiting for room in the ring this end
//! reads). Anything else takes the usual path, with nothing sent. While
//! in the lane, the requester does what the reader thread would do for
//! it every 64 turns: the tick (the peer checked, overdue requests of
//! other threads expired, on a server the next client's session set up),
//! and the look at whether the end or the session is over. When a hybrid
//! requester's spin budget runs out, it registers its request (still
//! holding the role, so the response cannot have been read by anyone
//! else), gives the role up and sleeps on the slot as on the usual path.

use crate::platform::copy;
use super::channel::{InPlaceRead, Inner, SpinBudget, SELF_READ_START};
use super::future::Slot;
use super::packet::{packet_count, Header, MsgType, HEADER};
use super::reader::Next;
use super::session::error_of;
use super::stats::Stats;
use crate::error::{Error, Result};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use crate::platform::clock::Instant;
use std::time::Duration;

/// How many times a requester looks for the reader role before it takes
/// the usual path: a spinning reader thread gives it up within one turn of
/// its wait (tens of nanoseconds).
const ROLE_LOOKS: u32 = 256;

/// How a request in the lane ended.
pub(super) enum Lane {
    /// The lane was not taken (the role was busy, the request needs
    /// several packets, the ring was full): nothing was sent.
    NotTaken,
    /// The response, or why there is none.
    Done(Result<Vec<u8>>),
    /// A hybrid requester's spin budget ran out: the request is
    /// registered as `id` with `slot` (which holds the caller's buffer, if
    /// it gave one), and its response will be delivered there. `first_look`:
    /// when the wait began, for the moving average of response waits.
    Registered { id: u64, slot: Arc<Slot>, first_look: Option<Instant> },
}

/// The lane's own request, as the reader role's holder reads: its
/// response goes here instead of to a slot (see [`Inner::read_one_with`]).
pub(super) struct Own<'a, 'b> {
    /// The request's id.
    pub(super) id: u64,
    /// When the call began (the round trip recorded in the statistics).
    pub(super) started: Instant,
    /// The caller's buffer (`request_into`): the response is copied into
    /// it, and the result is an empty `Vec`.
    pub(super) into: Option<&'a mut Vec<u8>>,
    /// The caller's in-place reader (`request_with`): a one-packet
    /// response is given to it in its ring node.
    pub(super) read: Option<InPlaceRead<'b>>,
    /// The result, once the response (or an error response) was read.
    pub(super) got: Option<Result<Vec<u8>>>,
}

/// A response as read: in the ring (one packet) or reassembled.
pub(super) enum Body<'p> {
    InRing(&'p [u8]),
    Owned(Vec<u8>),
}

impl Inner {
    /// Sends `msg` as request `id` and reads its response, holding the
    /// reader role throughout (see the module's documentation). `into`
    /// and `read` are the caller's, as for `request_reading`; on
    /// [`Lane::Registered`] the buffer of `into` has moved to the slot.
    pub(super) fn request_in_lane(
        self: &Arc<Self>,
        msg: &[u8],
        started: Instant,
        timeout: Option<Duration>,
        deadline: Option<Instant>,
        into: &mut Option<&mut Vec<u8>>,
        read: &mut Option<InPlaceRead<'_>>,
    ) -> Lane {
        // Announced first: a spinning reader thread keeps the role through
        // its wait, and gives it up at its next turn once it sees a
        // requester that wants it (then stands aside while requesters keep
        // coming); a role held for longer (an inline handler running) sends
        // this request the usual way.
        self.self_readers.fetch_add(SELF_READ_START, Ordering::SeqCst);
        let mut looks = 0;
        let mut rd = loop {
            match self.try_reading() {
                Some(rd) => break rd,
                None if looks < ROLE_LOOKS => {
                    looks += 1;
                    std::hint::spin_loop();
                }
                None => {
                    self.stop_reading_for_myself(&self.session());
                    return Lane::NotTaken;
                }
            }
        };
        rd.session.tx.prefetch_next_write(HEADER + msg.len());
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        match self.send_one_now(&rd.session, MsgType::Request, id, 0, msg) {
            Ok(true) => {}
            other => {
                self.stop_reading_for_myself(&rd.session);
                drop(rd);
                return match other {
                    Err(e) => Lane::Done(Err(e)),
                    _ => Lane::NotTaken,
                };
            }
        }
        Stats::add(&self.stats.c.requests_sent, 1);
        let session_id = rd.session.id;
        let mut budget = SpinBudget::new(self.policy, deadline);
        let read = read.as_mut().map(|f| &mut **f as InPlaceRead<'_>);
        let mut own = Own { id, started, into: into.as_deref_mut(), read, got: None };
        let mut turns = 0u32;
        let got = loop {
            turns = turns.wrapping_add(1);
            if turns == 2 {
                // The last call's round trip into the histogram, while
                // this one's request is on its way.
                self.stats.settle();
            }
            let every_64th = turns % 64 == 0;
            if every_64th {
                // What the reader thread would do meanwhile, and whether
                // this call is over without a response.
                if let Some(why) = self.tick_if_due(&mut rd) {
                    break Some(Err(error_of(why)));
                }
                if let Err(e) = self.check_open().and_then(|()| rd.session.check_open()) {
                    break Some(Err(e));
                }
                let now = Instant::now();
                if budget.over(self, deadline, now) {
                    if deadline.is_some_and(|d| now >= d) {
                        Stats::add(&self.stats.c.timeouts, 1);
                        break Some(Err(Error::timeout("the RPC response", timeout)));
                    }
                    break None; // the hybrid budget
                }
            }
            if every_64th || rd.session.rx.readable_hint() {
                let next = self.read_one_with(&mut rd, false, None, Some(&mut own));
                if let Some(r) = own.got.take() {
                    break Some(r);
                }
                if let Next::Woke = next {
                    continue;
                }
            }
            std::hint::spin_loop();
        };
        drop(own);
        let first_look = budget.first_look;
        let lane = match got {
            Some(r) => {
                if let (Some(t), true) = (first_look, r.is_ok() || matches!(r, Err(Error::Remote(_)))) {
                    self.record_response_wait(t.elapsed());
                }
                Lane::Done(r)
            }
            None => {
                // Registered under the role: no one else has read the
                // response, and whoever reads it from now on finds the slot.
                let buffer = into.as_deref_mut().map(std::mem::take);
                let slot = Slot::new(started, deadline, session_id, buffer);
                self.pending.lock().insert(id, Arc::clone(&slot));
                Lane::Registered { id, slot, first_look }
            }
        };
        self.stop_reading_for_myself(&rd.session);
        drop(rd);
        lane
    }

    /// Writes `msg` as one packet if it fits one and the ring has room
    /// now: `Ok(false)` if not (nothing written; the usual path sends it,
    /// and reports what is wrong with it).
    pub(super) fn send_one_now(
        &self,
        session: &super::session::Session,
        kind: MsgType,
        id: u64,
        response_to: u64,
        msg: &[u8],
    ) -> Result<bool> {
        self.check_open()?;
        session.check_open()?;
        let room = session.tx.node_size() - HEADER;
        if msg.len() > self.send_max() || packet_count(msg.len(), room) != 1 {
            return Ok(false);
        }
        let header =
            Header { kind, msg_id: id, response_to, total_len: msg.len() as u32, index: 0, count: 1 };
        match session.tx.write_with(HEADER + msg.len(), Some(Duration::ZERO), |node| {
            header.encode(&mut node[..HEADER]);
            copy::copy(&mut node[HEADER..], msg);
        }) {
            Ok(()) => {
                Stats::add(&self.stats.c.packets_sent, 1);
                Stats::add(&self.stats.c.bytes_sent, msg.len() as u64);
                Ok(true)
            }
            Err(Error::Timeout { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// The lane's own response (or error response) `h`, read by its
    /// requester: counted as `answered` counts a response delivered to a
    /// slot, and left in `own.got`.
    pub(super) fn deliver_own(&self, h: &Header, body: Body<'_>, own: &mut Own<'_, '_>) {
        Stats::add_as_reader(&self.stats.c.responses_received, 1);
        self.stats.record_as_reader(own.started.elapsed());
        let r = if h.kind == MsgType::Response {
            match body {
                Body::InRing(bytes) => {
                    if let Some(read) = own.read.as_mut() {
                        self.as_reader(|| read(bytes));
                        Ok(Vec::new())
                    } else if let Some(into) = own.into.as_mut() {
                        into.clear();
                        copy::extend(into, bytes);
                        Ok(Vec::new())
                    } else {
                        Ok(copy::to_vec(bytes))
                    }
                }
                // Reassembled: as the usual path does, the caller's buffer
                // is replaced by it, or `request_with` reads it from the `Vec`.
                Body::Owned(v) => match own.into.as_mut() {
                    Some(into) => {
                        **into = v;
                        Ok(Vec::new())
                    }
                    None => Ok(v),
                },
            }
        } else {
            Stats::add(&self.stats.c.errors, 1);
            let text = match &body {
                Body::InRing(b) => String::from_utf8_lossy(b).into_owned(),
                Body::Owned(v) => String::from_utf8_lossy(v).into_owned(),
            };
            Err(Error::Remote(text))
        };
        own.got = Some(r);
    }
}
