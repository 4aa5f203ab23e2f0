//! The reader thread of one RPC end: it reads packets, reassembles
//! messages and hands each to a handler or to the request waiting for it;
//! and every tick it checks the peer (on the server, moving to a fresh
//! session when the client left) and expires overdue requests.

use super::channel::{Inner, RPC_TOO_LARGE};
use super::control::Control;
use super::packet::{Assembled, Header, MsgType, Reassembler, HEADER};
use super::session::{new_session, Session, CLOSED, OPEN, PEER_DIED};
use super::stats::Stats;
use super::TICK;
use crate::error::Error;
use crate::sync::{Liveness, Token, WaitPolicy};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

impl Inner {
    /// The reader thread: packets in, messages dispatched; every tick, the
    /// peer is checked and overdue requests expire.
    pub(super) fn read_loop(self: Arc<Self>, max_message: usize) {
        let mut session = self.session();
        let mut asm = Reassembler::new(session.rx.node_size(), max_message);
        let mut last_tick = Instant::now();
        while !self.stop.load(Ordering::SeqCst) {
            if self.take(&session, &mut asm, TICK, max_message) && self.policy != WaitPolicy::Futex {
                // Someone was woken (a requester, a handler thread), likely
                // on this core, and this thread would go on spinning on the
                // ring: let it run now.
                std::thread::yield_now();
            }
            if last_tick.elapsed() >= TICK {
                last_tick = Instant::now();
                if let Some(next) = self.tick(&session, &mut asm, max_message) {
                    // A new client comes on fresh rings: nothing half-read
                    // of the last one is kept.
                    asm = Reassembler::new(next.rx.node_size(), max_message);
                    session = next;
                }
                let stale = asm.expire(self.default_timeout * 2);
                Stats::add(&self.stats.c.corrupt_packets, stale as u64);
            }
        }
    }

    /// Reads one packet (waiting up to `wait`) and hands on the message it
    /// completes; true if that woke another thread. `Err(Timeout)` and
    /// the like are counted and swallowed: the reader goes on.
    fn take(
        self: &Arc<Self>,
        session: &Arc<Session>,
        asm: &mut Reassembler,
        wait: Duration,
        max: usize,
    ) -> bool {
        let got = session.rx.read_with(Some(wait), |packet| {
            Stats::add(&self.stats.c.packets_received, 1);
            Stats::add(&self.stats.c.bytes_received, packet.len().saturating_sub(HEADER) as u64);
            asm.push(packet)
        });
        let woke = match got {
            Ok(Assembled::Complete(h, payload)) => self.dispatch(session, h, payload),
            Ok(Assembled::TooLarge(h)) => {
                self.refuse(session, h, max);
                false
            }
            Ok(Assembled::Incomplete) | Err(Error::Timeout { .. }) => false,
            Ok(Assembled::Dropped(_)) => {
                Stats::add(&self.stats.c.corrupt_packets, 1);
                false
            }
            Err(_) => {
                // A ring that keeps failing (a damaged cell): count it and do
                // not spin on it.
                Stats::add(&self.stats.c.corrupt_packets, 1);
                std::thread::sleep(Duration::from_millis(1));
                false
            }
        };
        Stats::add(&self.stats.c.corrupt_packets, std::mem::take(&mut asm.given_up));
        woke
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
                    let deadline = Some(Instant::now() + inner.default_timeout);
                    let _ =
                        inner.send(&session, MsgType::Error, id, h.msg_id, text.as_bytes(), deadline, None);
                }));
            }
            MsgType::Response | MsgType::Error => {
                let slot = self.pending.lock().unwrap_or_else(|p| p.into_inner()).remove(&h.response_to);
                if let Some(slot) = slot {
                    slot.complete(Err(too_large));
                }
            }
            MsgType::Notify => {}
        }
    }

    /// Hands a message to its handler or its requester; true if that woke
    /// another thread.
    fn dispatch(self: &Arc<Self>, session: &Arc<Session>, h: Header, payload: Vec<u8>) -> bool {
        if matches!(h.kind, MsgType::Request | MsgType::Notify) {
            if self.closing.load(Ordering::SeqCst) {
                return false; // read as this end closed: not handled
            }
            self.in_flight.fetch_add(1, Ordering::SeqCst);
        }
        match h.kind {
            MsgType::Request | MsgType::Notify if self.inline_handlers => {
                self.handle_inline(session, h, payload);
                false
            }
            MsgType::Request | MsgType::Notify => {
                let inner = Arc::clone(self);
                let session = Arc::clone(session);
                self.pool.submit(Box::new(move || inner.handle(&session, h, payload)));
                true
            }
            MsgType::Response | MsgType::Error => {
                let slot = self.pending.lock().unwrap_or_else(|p| p.into_inner()).remove(&h.response_to);
                let Some(slot) = slot else {
                    Stats::add(&self.stats.c.discarded_responses, 1);
                    return false;
                };
                Stats::add(&self.stats.c.responses_received, 1);
                self.stats.record(slot.started.elapsed());
                let r = if h.kind == MsgType::Response {
                    Ok(payload)
                } else {
                    Stats::add(&self.stats.c.errors, 1);
                    Err(Error::Remote(String::from_utf8_lossy(&payload).into_owned()))
                };
                slot.complete(r);
                true
            }
        }
    }

    /// Checks the peer and expires overdue requests. On the server, when
    /// the client has left, ends its session and returns the fresh one
    /// for the next client.
    fn tick(
        self: &Arc<Self>,
        session: &Arc<Session>,
        asm: &mut Reassembler,
        max: usize,
    ) -> Option<Arc<Session>> {
        let next = if self.owner {
            self.check_client(session)
        } else {
            if let Some(why) = self.server_gone().filter(|_| self.check_open().is_ok()) {
                // What the server sent before it closed (or died) still
                // counts: a response written before the close is an
                // answer. The ring holds at most its capacity of packets,
                // and no more come.
                for _ in 0..session.rx.node_count() {
                    if session.rx.is_empty() {
                        break;
                    }
                    self.take(session, asm, Duration::ZERO, max);
                }
                self.fail_all(why);
            }
            None
        };
        let now = Instant::now();
        for slot in self.take_pending(|s| s.deadline.is_some_and(|d| d <= now)) {
            Stats::add(&self.stats.c.timeouts, 1);
            slot.complete(Err(Error::timeout(
                "the RPC response",
                slot.deadline.map(|d| d.saturating_duration_since(slot.started)),
            )));
        }
        next
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
