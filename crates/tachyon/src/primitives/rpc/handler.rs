//! Handlers of the peer's requests: their types, and running one for a
//! request or notification (on a handler thread, or inline on the reader
//! thread) and sending its response.

use crate::platform::copy;
use super::channel::{Deadline, Inner};
use super::packet::{self, Header, MsgType, HEADER};
use super::session::Session;
use super::stats::Stats;
use super::RpcClient;
use crate::error::Error;
use crate::primitives::circular::Claim;
use std::cell::Cell;
use std::fmt::Display;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// A handler, its error made text: it gets the message id and the
/// request, and writes its response into the [`ResponseWriter`]. The
/// `Vec`-returning handlers of [`RpcBuffer::set_handler`] hand their `Vec`
/// to the writer (no copy).
///
/// [`RpcBuffer::set_handler`]: super::RpcBuffer::set_handler
pub(super) type HandlerFn =
    dyn Fn(u64, &[u8], &mut ResponseWriter<'_>) -> std::result::Result<(), String> + Send + Sync;
/// Makes the handler once the end's [`RpcClient`] exists.
pub(super) type MakeHandler = Box<dyn FnOnce(RpcClient) -> Arc<HandlerFn> + Send>;

thread_local! {
    /// The channel whose reader role this thread holds while it runs the
    /// user's code now (its address): an inline handler, or the reader of
    /// a response read in place (`request_with`). A call back through that
    /// channel, which only this thread could answer, fails instead of
    /// deadlocking.
    static INLINE_HANDLER_OF: Cell<usize> = const { Cell::new(0) };
    /// The channel whose handler runs on this thread now (its address),
    /// inline or on a handler thread: its `close` cannot wait for that
    /// handler, which is the caller.
    static HANDLER_OF: Cell<usize> = const { Cell::new(0) };
}

/// `f`, a handler that returns its response, as a [`HandlerFn`].
pub(super) fn wrap<F, E>(f: F) -> Arc<HandlerFn>
where
    F: Fn(u64, &[u8]) -> std::result::Result<Vec<u8>, E> + Send + Sync + 'static,
    E: Display,
{
    Arc::new(move |id, msg, out: &mut ResponseWriter<'_>| {
        out.set_vec(f(id, msg).map_err(|e| e.to_string())?);
        Ok(())
    })
}

/// `f`, a handler that writes its response, as a [`HandlerFn`].
pub(super) fn wrap_in_place<F, E>(f: F) -> Arc<HandlerFn>
where
    F: Fn(u64, &[u8], &mut ResponseWriter<'_>) -> std::result::Result<(), E> + Send + Sync + 'static,
    E: Display,
{
    Arc::new(move |id, msg, out: &mut ResponseWriter<'_>| f(id, msg, out).map_err(|e| e.to_string()))
}

/// A request's bytes as its handler gets them.
pub(super) enum Payload {
    /// Copied out of the ring: a message of several packets (reassembled),
    /// or a request handed to a handler thread.
    Owned(Vec<u8>),
    /// In place in the node of the ring the request came in, which stays
    /// claimed by this end until the handler returns: a one-packet request
    /// handled by the thread that read it.
    InPlace(InPlace),
}

impl Payload {
    fn bytes(&self) -> &[u8] {
        match self {
            Payload::Owned(v) => v,
            Payload::InPlace(p) => p.bytes(),
        }
    }

    /// The bytes in a buffer of their own.
    pub(super) fn into_vec(self) -> Vec<u8> {
        match self {
            Payload::Owned(v) => v,
            Payload::InPlace(p) => copy::to_vec(p.bytes()),
        }
    }

    /// The handler is done with the bytes: a buffer is kept for the next
    /// request read on this thread, a ring node is freed.
    fn release(self, inner: &Inner) {
        match self {
            Payload::Owned(v) => packet::recycle(v),
            Payload::InPlace(p) => p.finish(inner),
        }
    }
}

/// A one-packet request in place in its ring node (see [`Payload::InPlace`]).
/// Dropping it frees the node.
pub(super) struct InPlace {
    session: Arc<Session>,
    /// `None` once the node is freed.
    claim: Option<Claim>,
}

impl InPlace {
    /// The request of `claim`, a read claim of `session`'s ring holding
    /// one whole packet.
    pub(super) fn new(session: Arc<Session>, claim: Claim) -> InPlace {
        InPlace { session, claim: Some(claim) }
    }

    fn bytes(&self) -> &[u8] {
        match &self.claim {
            // SAFETY: the claim is of `session.rx` (see `new`) and is moved
            // on only in `finish` / `drop`, which take it out first; the
            // slice borrows `self`, so it is gone by then.
            Some(c) => unsafe { self.session.rx.claimed_item(c) }.get(HEADER..).unwrap_or_default(),
            None => &[],
        }
    }

    /// Frees the node (a claim taken over by another process, which can
    /// only happen to a handle shared with a forked child, is counted).
    fn finish(mut self, inner: &Inner) {
        if let Some(c) = self.claim.take() {
            if self.session.rx.finish_claimed_read(c).is_err() {
                Stats::add(&inner.stats.c.corrupt_packets, 1);
            }
        }
    }
}

impl Drop for InPlace {
    fn drop(&mut self) {
        if let Some(c) = self.claim.take() {
            let _ = self.session.rx.finish_claimed_read(c);
        }
    }
}

/// Where a response is (see [`ResponseWriter`]).
enum Body {
    /// In a buffer, sent (copied into the ring) once the handler returns.
    Vec(Vec<u8>),
    /// In the claimed node of the ring it goes out on: the bytes
    /// `HEADER .. HEADER + len` of the node; published once the handler
    /// returns.
    Ring(Claim, usize),
}

/// Where an in-place handler ([`RpcBuilder::handler_in_place`],
/// [`RpcBuffer::set_handler_in_place`]) writes its response.
///
/// A response that fits one packet (the channel's node size less the
/// 32-byte header) is written straight into the node of the ring it goes
/// out on, which is claimed at the first write: no buffer, no copy after
/// the handler returns, which then only publishes the node. A response
/// that grows past one packet moves to a buffer (what was written so far
/// is copied once) and is sent as packets after the handler returns, as
/// the response of a [`set_handler`](super::RpcBuffer::set_handler) handler is.
///
/// While the node is claimed, the responses and requests this end sends
/// after it wait behind it in the ring (the peer reads in order): write
/// the response once it is ready, not at the start of a long computation.
/// If the handler returns an error or panics, the node carries the error
/// instead. A response to a notification goes nowhere.
///
/// The writer is an [`std::io::Write`] too.
///
/// ```
/// use std::io::Write;
/// use std::time::Duration;
/// use tachyon::primitives::rpc::ResponseWriter;
/// use tachyon::RpcBuffer;
/// # let name = format!("doc-rpc-writer-{}", std::process::id());
/// let server = RpcBuffer::builder(&name)
///     .handler_in_place(|_id, req: &[u8], out: &mut ResponseWriter<'_>| {
///         out.extend_from_slice(b"len=");
///         write!(out, "{}", req.len())
///     })
///     .create()?;
/// let client = RpcBuffer::open(&name)?;
/// assert_eq!(client.request(b"abc", Some(Duration::from_secs(5)))?, b"len=3");
/// # drop((client, server));
/// # Ok::<(), tachyon::Error>(())
/// ```
///
/// [`RpcBuilder::handler_in_place`]: super::RpcBuilder::handler_in_place
/// [`RpcBuffer::set_handler_in_place`]: super::RpcBuffer::set_handler_in_place
pub struct ResponseWriter<'a> {
    inner: &'a Inner,
    session: &'a Session,
    body: Body,
    /// Whether a node may still be claimed (a request, not a
    /// notification; nothing written to a buffer yet).
    may_claim: bool,
    /// The node could not be claimed (the channel closed, the peer left,
    /// no room before the deadline): the response cannot go out.
    failed: bool,
    /// The most bytes a response in the node may have: the packet room,
    /// or the agreed maximum message size if smaller.
    limit: usize,
}

impl<'a> ResponseWriter<'a> {
    /// A writer for the answer to a request (`respond`) or a notification
    /// (nothing goes out) that came in `session`.
    fn new(inner: &'a Inner, session: &'a Session, respond: bool) -> Self {
        let limit = (session.tx.node_size() - HEADER).min(inner.send_max());
        ResponseWriter { inner, session, body: Body::Vec(Vec::new()), may_claim: respond, failed: false, limit }
    }

    /// Bytes written so far.
    ///
    /// ```
    /// # use tachyon::primitives::rpc::ResponseWriter;
    /// # let name = format!("doc-rpc-writer-len-{}", std::process::id());
    /// let server = tachyon::RpcBuffer::builder(&name)
    ///     .handler_in_place(|_id, req: &[u8], out: &mut ResponseWriter<'_>| {
    ///         out.extend_from_slice(req);
    ///         assert_eq!(out.len(), req.len());
    ///         Ok::<_, String>(())
    ///     })
    ///     .create()?;
    /// let client = tachyon::RpcBuffer::open(&name)?;
    /// assert_eq!(client.call(b"xyz")?, b"xyz");
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn len(&self) -> usize {
        match &self.body {
            Body::Vec(v) => v.len(),
            Body::Ring(_, len) => *len,
        }
    }

    /// Whether nothing is written yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether what is written so far is in the ring node it goes out in
    /// (nothing will be copied after the handler returns).
    ///
    /// ```
    /// # use tachyon::primitives::rpc::ResponseWriter;
    /// # let name = format!("doc-rpc-writer-in-ring-{}", std::process::id());
    /// let server = tachyon::RpcBuffer::builder(&name)
    ///     .node_size(1024)
    ///     .handler_in_place(|_id, req: &[u8], out: &mut ResponseWriter<'_>| {
    ///         out.extend_from_slice(req);
    ///         // 992 bytes fit one packet of a 1024-byte node.
    ///         Ok::<_, String>(assert_eq!(out.is_in_ring(), req.len() <= 992))
    ///     })
    ///     .create()?;
    /// let client = tachyon::RpcBuffer::open(&name)?;
    /// assert_eq!(client.call(&[7; 100])?, [7; 100]);
    /// assert_eq!(client.call(&[7; 5000])?, [7; 5000]);
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn is_in_ring(&self) -> bool {
        matches!(self.body, Body::Ring(..))
    }

    /// Appends `bytes` to the response.
    ///
    /// ```
    /// # use tachyon::primitives::rpc::ResponseWriter;
    /// # let name = format!("doc-rpc-writer-extend-{}", std::process::id());
    /// let server = tachyon::RpcBuffer::builder(&name)
    ///     .handler_in_place(|_id, req: &[u8], out: &mut ResponseWriter<'_>| {
    ///         out.extend_from_slice(req);
    ///         out.extend_from_slice(b"!");
    ///         Ok::<_, String>(())
    ///     })
    ///     .create()?;
    /// let client = tachyon::RpcBuffer::open(&name)?;
    /// assert_eq!(client.call(b"hi")?, b"hi!");
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn extend_from_slice(&mut self, bytes: &[u8]) {
        if let Some(dst) = self.room(bytes.len()) {
            copy::copy(dst, bytes);
        } else if let Body::Vec(v) = &mut self.body {
            copy::extend(v, bytes);
        }
    }

    /// Appends `n` bytes to the response and returns them to be filled in
    /// place (for a handler that computes its response rather than
    /// copying it). Their contents are unspecified (in the ring node: what
    /// an earlier message left; in a buffer: zeros): write every byte.
    ///
    /// ```
    /// # use tachyon::primitives::rpc::ResponseWriter;
    /// # let name = format!("doc-rpc-writer-append-{}", std::process::id());
    /// let server = tachyon::RpcBuffer::builder(&name)
    ///     .handler_in_place(|_id, req: &[u8], out: &mut ResponseWriter<'_>| {
    ///         for (o, i) in out.append(req.len()).iter_mut().zip(req) {
    ///             *o = i.to_ascii_uppercase();
    ///         }
    ///         Ok::<_, String>(())
    ///     })
    ///     .create()?;
    /// let client = tachyon::RpcBuffer::open(&name)?;
    /// assert_eq!(client.call(b"shout")?, b"SHOUT");
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn append(&mut self, n: usize) -> &mut [u8] {
        if self.room(n).is_none() {
            if let Body::Vec(v) = &mut self.body {
                v.resize(v.len() + n, 0);
            }
        }
        let len = self.len();
        match &mut self.body {
            Body::Ring(c, _) => {
                // SAFETY: the claim is of `session.tx` (`room`) and is moved
                // on only by `finish` or `drop`; the slice borrows `self`.
                let node = unsafe { self.session.tx.claimed_node(c) };
                &mut node[HEADER + len - n..HEADER + len]
            }
            Body::Vec(v) => &mut v[len - n..],
        }
    }

    /// Forgets what was written so far (a node claimed stays claimed, for
    /// what is written next).
    pub fn clear(&mut self) {
        match &mut self.body {
            Body::Vec(v) => v.clear(),
            Body::Ring(_, len) => *len = 0,
        }
    }

    /// `n` more bytes in the ring node, claiming it if this is the first
    /// write and it fits: the slice to fill, or `None` if they go to the
    /// buffer (the caller appends them there; what was in the node moved
    /// there first).
    fn room(&mut self, n: usize) -> Option<&mut [u8]> {
        if n == 0 {
            return None;
        }
        if let Body::Vec(v) = &self.body {
            if !self.may_claim || !v.is_empty() || n > self.limit {
                return None;
            }
            self.may_claim = false;
            match self.inner.claim_tx(self.session, Deadline::After(self.inner.default_timeout)) {
                Ok(c) => self.body = Body::Ring(c, 0),
                Err(_) => {
                    self.failed = true;
                    return None;
                }
            }
        }
        let Body::Ring(c, len) = &mut self.body else { return None };
        if *len + n <= self.limit {
            let at = HEADER + *len;
            *len += n;
            // SAFETY: the claim is of `session.tx` (claimed above) and is
            // moved on only by `finish`, `spill` or `drop`; the slice
            // borrows `self`.
            let node = unsafe { self.session.tx.claimed_node(c) };
            return Some(&mut node[at..at + n]);
        }
        self.spill(n);
        None
    }

    /// The response outgrew the node: it moves to a buffer with room for
    /// `more`, and the node is given up (readers step over it).
    fn spill(&mut self, more: usize) {
        if let Body::Ring(c, len) = std::mem::replace(&mut self.body, Body::Vec(Vec::new())) {
            let mut v = Vec::with_capacity(len + more);
            // SAFETY: the claim is of `session.tx` and is moved on just below.
            let node = unsafe { self.session.tx.claimed_node(&c) };
            copy::extend(&mut v, &node[HEADER..HEADER + len]);
            self.session.tx.abandon_claimed_write(c);
            self.body = Body::Vec(v);
        }
    }

    /// The response of a handler that returns it (see [`wrap`]).
    fn set_vec(&mut self, v: Vec<u8>) {
        if let Body::Ring(c, _) = std::mem::replace(&mut self.body, Body::Vec(v)) {
            self.session.tx.abandon_claimed_write(c);
        }
    }

    /// Sends the answer to request `request`: the response written, or the
    /// handler's error `result`; and releases the request's `payload`. A
    /// request's node read in place is freed once an answer that goes out
    /// at once is out (one step fewer before the caller has it), but before
    /// an answer that may wait for room in the ring (the peer may be
    /// waiting for room in the ring this end reads).
    fn finish(mut self, request: u64, result: std::result::Result<(), String>, payload: Payload) {
        let inner = self.inner;
        let id = inner.next_id.fetch_add(1, Ordering::Relaxed);
        let body = std::mem::replace(&mut self.body, Body::Vec(Vec::new()));
        match (result, body) {
            (Ok(()), Body::Ring(c, len)) => {
                self.publish(c, MsgType::Response, id, request, len);
                payload.release(inner);
            }
            (Err(text), Body::Ring(c, _)) if text.len() <= self.limit => {
                // SAFETY: the claim is of `session.tx` and is published just below.
                let node = unsafe { self.session.tx.claimed_node(&c) };
                node[HEADER..HEADER + text.len()].copy_from_slice(text.as_bytes());
                self.publish(c, MsgType::Error, id, request, text.len());
                payload.release(inner);
            }
            (Err(text), Body::Ring(c, _)) => {
                self.session.tx.abandon_claimed_write(c);
                payload.release(inner);
                inner.send_answer(self.session, MsgType::Error, id, request, text.into_bytes());
            }
            // The node could not be claimed: neither can room to send.
            (_, Body::Vec(_)) if self.failed => payload.release(inner),
            (Ok(()), Body::Vec(v)) => match inner.send_one_now(self.session, MsgType::Response, id, request, &v) {
                Ok(true) => {
                    Stats::add(&inner.stats.c.responses_sent, 1);
                    payload.release(inner);
                }
                Ok(false) => {
                    payload.release(inner);
                    inner.send_answer(self.session, MsgType::Response, id, request, v);
                }
                Err(_) => payload.release(inner),
            },
            (Err(text), Body::Vec(_)) => {
                payload.release(inner);
                inner.send_answer(self.session, MsgType::Error, id, request, text.into_bytes())
            }
        }
    }

    /// Writes the header of a one-packet message of `len` bytes into the
    /// claimed node and publishes it.
    fn publish(&self, c: Claim, kind: MsgType, id: u64, request: u64, len: usize) {
        let header = Header { kind, msg_id: id, response_to: request, total_len: len as u32, index: 0, count: 1 };
        // SAFETY: the claim is of `session.tx` and is published just below.
        let node = unsafe { self.session.tx.claimed_node(&c) };
        header.encode(&mut node[..HEADER]);
        let stats = &self.inner.stats.c;
        match self.session.tx.commit_claimed_write(c, HEADER + len) {
            Ok(()) => {
                Stats::add(&stats.packets_sent, 1);
                Stats::add(&stats.bytes_sent, len as u64);
                Stats::add(&stats.responses_sent, 1);
            }
            Err(_) => Stats::add(&stats.errors, 1),
        }
    }
}

impl std::io::Write for ResponseWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        self.extend_from_slice(buf);
        Ok(())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for ResponseWriter<'_> {
    fn drop(&mut self) {
        // A node still claimed (a notification's writer, an unwinding
        // thread) is given up, never left claimed by a live process.
        if let Body::Ring(c, _) = std::mem::replace(&mut self.body, Body::Vec(Vec::new())) {
            self.session.tx.abandon_claimed_write(c);
        }
    }
}

impl std::fmt::Debug for ResponseWriter<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseWriter").field("len", &self.len()).field("in_ring", &self.is_in_ring()).finish()
    }
}

impl Inner {
    /// This end's address, which the thread-locals above hold.
    fn key(&self) -> usize {
        self as *const Inner as usize
    }

    /// Whether a handler of this end runs on this thread now.
    pub(super) fn in_handler(&self) -> bool {
        HANDLER_OF.with(|c| c.get()) == self.key()
    }

    /// Whether an inline handler of this end runs on this thread now.
    pub(super) fn in_inline_handler(&self) -> bool {
        INLINE_HANDLER_OF.with(|c| c.get()) == self.key()
    }

    /// Runs `f` (a `request_with` reader) marked as holding this channel's
    /// reader role, as an inline handler is: a call back through the
    /// channel from it fails. Marked wherever the response lies, so that
    /// such a call fails alike on every wait policy. The mark is undone
    /// however `f` ends.
    pub(super) fn as_reader<R>(&self, f: impl FnOnce() -> R) -> R {
        struct Restore(usize);
        impl Drop for Restore {
            fn drop(&mut self) {
                let outer = self.0;
                INLINE_HANDLER_OF.with(|c| c.set(outer));
            }
        }
        let _restore = Restore(INLINE_HANDLER_OF.with(|c| c.replace(self.key())));
        f()
    }

    /// [`handle`](Self::handle) on the reader thread itself.
    pub(super) fn handle_inline(&self, session: &Session, h: Header, payload: Payload) {
        let outer = INLINE_HANDLER_OF.with(|c| c.replace(self.key()));
        self.handle(session, h, payload);
        INLINE_HANDLER_OF.with(|c| c.set(outer));
    }

    /// Runs the handler for a request or notification (on a pool thread,
    /// or inline) and sends the response, in the session the request came
    /// in: if that client has left meanwhile, the response goes nowhere.
    pub(super) fn handle(&self, session: &Session, h: Header, payload: Payload) {
        let outer = HANDLER_OF.with(|c| c.replace(self.key()));
        self.answer(session, h, payload);
        HANDLER_OF.with(|c| c.set(outer));
        self.handled();
    }

    /// Runs the handler (a panic becomes an error response) and sends what
    /// it wrote, unless the message is a notification. The request's node
    /// (if it is read in place) is freed once a response that went out at
    /// once is out, else before the response goes out (see
    /// `ResponseWriter::finish`).
    fn answer(&self, session: &Session, h: Header, payload: Payload) {
        let handler = self.handler.read().unwrap_or_else(|p| p.into_inner()).clone();
        let respond = h.kind == MsgType::Request;
        let mut out = ResponseWriter::new(self, session, respond);
        let result = match handler {
            None => Err("no handler: the other end has not set one".to_owned()),
            Some(f) => catch_unwind(AssertUnwindSafe(|| f(h.msg_id, payload.bytes(), &mut out)))
                .unwrap_or_else(|panic| Err(panicked(panic))),
        };
        if result.is_err() {
            Stats::add(&self.stats.c.errors, 1);
        }
        if !respond {
            // For the next request read on this thread, or back to the ring.
            payload.release(self);
            Stats::add(&self.stats.c.notifications_received, 1);
            return;
        }
        Stats::add(&self.stats.c.requests_handled, 1);
        out.finish(h.msg_id, result, payload);
    }

    /// Sends an answer that is in a buffer; a response above the maximum
    /// message size is answered with an error, so that the caller is told
    /// rather than left waiting.
    fn send_answer(&self, session: &Session, kind: MsgType, id: u64, request: u64, body: Vec<u8>) {
        let deadline = Deadline::After(self.default_timeout);
        match self.send(session, kind, id, request, &body, deadline, None) {
            Ok(()) => Stats::add(&self.stats.c.responses_sent, 1),
            Err(Error::MessageTooLarge { size, max, .. }) => {
                let text = format!("response of {size} bytes exceeds the maximum message size {max}");
                let _ = self.send(session, MsgType::Error, id, request, text.as_bytes(), deadline, None);
            }
            Err(_) => {}
        }
    }
}

/// The error text of a handler that panicked with `panic`.
pub(super) fn panicked(panic: Box<dyn std::any::Any + Send>) -> String {
    let what = panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a non-string panic".to_owned());
    format!("handler panicked: {what}")
}
