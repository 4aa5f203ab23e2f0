//! `RpcBuffer`: request/response between two processes over two
//! [`CircularBuffer`]s, one per direction.
//!
//! The *server* (owner) creates the channel ([`RpcBuilder::create`]) and
//! serves one *client* (opener) at a time ([`RpcBuilder::open`]); when a
//! client leaves or dies, the server makes a fresh pair of rings (a new
//! *session*) and takes the next client. Both ends may send requests and
//! both may handle the other's. Each end runs one reader thread, which
//! reassembles packets, completes pending requests and runs the handler of
//! a request itself; a standby thread that reads in its place while that
//! handler takes long, and a pool of handler threads for the requests read
//! meanwhile, so a slow handler never stops responses from flowing for
//! long and a handler may itself call the other side. A waiting requester
//! reads its response itself (see `docs/rpc.md`, "Threads").
//!
//! The wire format and the session protocol are in `docs/rpc.md`.
//!
//! [`CircularBuffer`]: crate::primitives::CircularBuffer

// This file holds the public handles, `RpcBuffer` and `RpcClient`. The
// rest, one job a file:
//
// * builder.rs: `RpcBuilder`, its options, `create` and `open`;
// * control.rs: the layout of the control segment;
// * session.rs: the rings of one client's session;
// * channel.rs: the state an end's threads share, closing, sending;
// * reader.rs: the reader role, the reader and standby threads:
//   dispatch, peer checks, expiry;
// * handler.rs: running a handler and sending its response;
// * pool.rs: the handler thread pool;
// * threads.rs: how an end starts its threads (`thread_spawner`) and
//   waits for them;
// * future.rs: where a response meets its request, `RequestFuture`;
// * cancel.rs: `CancelToken`;
// * async_handler.rs: async handlers (`set_async_handler`, `serve_async`);
// * packet.rs: the wire format; stats.rs: `RpcStats`.

mod async_handler;
mod builder;
mod cancel;
mod channel;
mod control;
mod future;
mod handler;
mod lane;
pub(crate) mod packet;
mod pool;
mod reader;
mod session;
mod stats;
mod threads;

pub use builder::RpcBuilder;
pub use cancel::CancelToken;
pub use future::RequestFuture;
pub use handler::ResponseWriter;
pub use packet::{HEADER as PACKET_HEADER, VERSION as PROTOCOL_VERSION};
pub use stats::{Latency, RpcStats};
pub use threads::ThreadWork;

use self::channel::Inner;
use self::handler::{wrap, wrap_in_place};
use crate::error::{Error, Result};
use crate::sync::{Liveness, Token};
use std::fmt::Display;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

/// The default deadline of [`RpcBuffer::call`] and of async requests.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// How often each end checks its peer and expires requests: a peer that
/// dies is noticed within about this long.
const TICK: Duration = Duration::from_millis(20);

/// One end of a bi-directional RPC channel between two processes.
///
/// * The end that **creates** the channel is its **server** (also called
///   the owner). It lives as long as it is not closed, and serves one
///   client at a time, any number of clients one after another: when its
///   client drops its end or its process dies, the server notices within
///   about 20 ms, fails the requests it had sent to that client with
///   [`Error::Closed`] or [`Error::PeerDied`], and makes fresh rings for
///   the next client, so nothing of the old client (a packet, a late
///   response) reaches the new one. Requests the server sends while no
///   client is connected wait for the next one (up to their timeout).
/// * The end that **opens** it is a **client** (the opener). While one is
///   connected, another `open` is [`Error::ChannelBusy`]. A client's
///   channel ends when the server closes or dies: its calls then fail with
///   [`Error::Closed`] / [`Error::PeerDied`], and
///   [`wait_closed`](Self::wait_closed) returns; open again to reconnect
///   to a new server.
///
/// Both ends can call and both can handle calls. The handle is
/// `Send + Sync + 'static`; share it between threads by reference or in
/// an `Arc`.
///
/// Timeouts: [`request`](Self::request) takes its own. [`call`](Self::call),
/// [`notify`](Self::notify), [`request_async`](Self::request_async) and the
/// responses this end sends use the default timeout set on the builder
/// ([`RpcBuilder::default_timeout`], 30 s) instead: the exception to the
/// library's per-call timeouts, for the calls meant to be short to write.
///
/// ```
/// use std::time::Duration;
/// use tachyon::RpcBuffer;
/// # let name = format!("doc-rpc-{}", std::process::id());
/// let server = RpcBuffer::builder(&name)
///     .handler(|_id, msg: &[u8]| Ok::<_, String>(vec![msg[0] + msg[1]]))
///     .create()?;
/// // Usually in other processes, one after another:
/// for _ in 0..2 {
///     let client = RpcBuffer::open(&name)?;
///     assert_eq!(client.request(&[123, 10], Some(Duration::from_secs(5)))?, [133]);
/// } // each client leaves here; the server takes the next one
/// # drop(server);
/// # Ok::<(), tachyon::Error>(())
/// ```
pub struct RpcBuffer {
    inner: Arc<Inner>,
    reader: Option<threads::Joiner>,
}

/// A handle that can call through an [`RpcBuffer`] without keeping it
/// alive, for handlers that call the other side (nested calls). Once the
/// `RpcBuffer` is dropped, calls fail with [`Error::Closed`].
#[derive(Clone)]
pub struct RpcClient {
    inner: Weak<Inner>,
}

impl RpcBuffer {
    /// A builder for geometry, threads, timeouts and the handler.
    pub fn builder(name: &str) -> RpcBuilder {
        RpcBuilder::new(name)
    }

    /// Creates a channel with the default geometry (64 nodes of 4 KiB per
    /// direction); this end is its server. See [`RpcBuilder::create`].
    ///
    /// ```
    /// use tachyon::RpcBuffer;
    /// # let name = format!("doc-rpc-create-{}", std::process::id());
    /// let server = RpcBuffer::create(&name)?;
    /// assert!(server.is_owner());
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn create(name: &str) -> Result<RpcBuffer> {
        Self::builder(name).create()
    }

    /// Connects to a channel as its client. See [`RpcBuilder::open`].
    ///
    /// ```
    /// use tachyon::{Error, RpcBuffer};
    /// # let name = format!("doc-rpc-open-{}", std::process::id());
    /// let server = RpcBuffer::create(&name)?;
    /// let client = RpcBuffer::open(&name)?;
    /// assert!(!client.is_owner());
    /// // One client at a time.
    /// assert!(matches!(RpcBuffer::open(&name), Err(Error::ChannelBusy { .. })));
    /// drop(client);
    /// let next = RpcBuffer::open(&name)?; // the server takes the next one
    /// # drop((next, server));
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn open(name: &str) -> Result<RpcBuffer> {
        Self::builder(name).open()
    }

    /// Whether this end created the channel: it is the server.
    pub fn is_owner(&self) -> bool {
        self.inner.owner
    }

    /// On the server: whether a client is connected now. On a client:
    /// whether its channel is still open.
    ///
    /// ```
    /// use tachyon::RpcBuffer;
    /// # let name = format!("doc-rpc-connected-{}", std::process::id());
    /// let server = RpcBuffer::create(&name)?;
    /// assert!(!server.is_connected());
    /// let client = RpcBuffer::open(&name)?;
    /// assert!(server.is_connected() && client.is_connected());
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn is_connected(&self) -> bool {
        let inner = &self.inner;
        if inner.check_open().is_err() {
            return false;
        }
        if !inner.owner {
            return true;
        }
        let Ok(c) = inner.control() else { return false };
        let opener = c.opener.load(Ordering::SeqCst);
        opener != 0
            && c.opener_closed.load(Ordering::SeqCst) != opener
            && Token::from_raw(opener).is_some_and(|t| !inner.ctl.is_dead(t))
    }

    /// Why this end can no longer be used, if it cannot: [`Error::Closed`]
    /// (it was closed, or, on a client, the server closed) or
    /// [`Error::PeerDied`] (on a client: the server's process died).
    /// Noticed within about 20 ms of the event. A server stays open when
    /// its client leaves: it waits for the next one.
    pub fn closed(&self) -> Option<Error> {
        self.inner.check_open().err()
    }

    /// Closes this end, from any thread (also from a handler, through
    /// [`RpcClient::close`]). Requests not yet taken by a handler are not
    /// handled; handlers already running finish and their responses go
    /// out first (`close` waits for them, at most the default timeout;
    /// called from a handler, it returns at once and the last running
    /// handler ends the channel). Then pending and later calls fail with
    /// [`Error::Closed`], [`serve`](Self::serve) and
    /// [`wait_closed`](Self::wait_closed) return, and the peer notices
    /// within about 20 ms, after it has taken the responses sent before.
    /// Closing the server ends the channel for its client; closing a
    /// client lets the server take the next one. Dropping the handle
    /// closes it too.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tachyon::RpcBuffer;
    /// # let name = format!("doc-rpc-close-{}", std::process::id());
    /// let server = RpcBuffer::create(&name)?;
    /// let client = RpcBuffer::open(&name)?;
    /// server.close();
    /// client.wait_closed(Some(Duration::from_secs(5)))?;
    /// assert!(matches!(client.closed(), Some(tachyon::Error::Closed)));
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn close(&self) {
        self.inner.close();
    }

    /// Blocks the calling thread while this end serves, until it is
    /// closed: on the server, by [`close`](Self::close) (from another
    /// thread, or from a handler through [`RpcClient::close`]); on a
    /// client, also when the server closes or dies. Requests are handled
    /// on the handler threads all along; `serve` only waits. Clients come
    /// and go meanwhile, one at a time.
    ///
    /// ```
    /// use tachyon::RpcBuffer;
    /// # let name = format!("doc-rpc-serve-{}", std::process::id());
    /// // A server whose "quit" request closes it.
    /// let server = RpcBuffer::builder(&name)
    ///     .handler_with_client(|me| {
    ///         move |_id, msg: &[u8]| {
    ///             if msg == b"quit" {
    ///                 me.close();
    ///             }
    ///             Ok::<_, String>(msg.to_vec())
    ///         }
    ///     })
    ///     .create()?;
    /// std::thread::scope(|s| {
    ///     s.spawn(|| {
    ///         // Usually another process.
    ///         let client = RpcBuffer::open(&name)?;
    ///         assert_eq!(client.call(b"hello")?, b"hello");
    ///         assert_eq!(client.call(b"quit")?, b"quit"); // answered, then closed
    ///         Ok::<(), tachyon::Error>(())
    ///     });
    ///     server.serve()
    /// })?;
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn serve(&self) -> Result<()> {
        self.inner.wait_closed(None)
    }

    /// Waits up to `timeout` (`None`: for ever) until this end is closed:
    /// on a client, typically until the server closes or dies (then
    /// [`closed`](Self::closed) says which). [`Error::Timeout`] if it is
    /// still open then.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tachyon::{Error, RpcBuffer};
    /// # let name = format!("doc-rpc-wait-closed-{}", std::process::id());
    /// let server = RpcBuffer::create(&name)?;
    /// let client = RpcBuffer::open(&name)?;
    /// let still_open = client.wait_closed(Some(Duration::from_millis(10)));
    /// assert!(matches!(still_open, Err(Error::Timeout { .. })));
    /// drop(server);
    /// client.wait_closed(Some(Duration::from_secs(5)))?;
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn wait_closed(&self, timeout: Option<Duration>) -> Result<()> {
        self.inner.wait_closed(timeout)
    }

    /// Sets (or replaces) the handler of the peer's requests and
    /// notifications. It gets the message id and the payload and returns
    /// the response, or an error whose text reaches the caller as
    /// [`Error::Remote`]; a panic does too. Without a handler, requests are
    /// answered with a "no handler" error.
    pub fn set_handler<F, E>(&self, f: F)
    where
        F: Fn(u64, &[u8]) -> std::result::Result<Vec<u8>, E> + Send + Sync + 'static,
        E: Display,
    {
        self.set_handler_that(f, false);
    }

    /// Sets (or replaces) the handler with one that writes its response
    /// in place: it gets the message id, the request and a
    /// [`ResponseWriter`], and returns `Ok(())` or an error whose text
    /// reaches the caller as [`Error::Remote`] (a panic does too).
    ///
    /// A request that came in one packet (up to the node size less 32
    /// bytes) is handed over **in place**, in the ring node it came in,
    /// which stays claimed until the handler returns; and a response that
    /// fits one packet is written straight into the ring node it goes out
    /// in. So a call copies each byte once on each side: the caller's
    /// request into the ring, the handler's response from the request (or
    /// wherever it makes it) into the ring, and the response out of the
    /// ring into the caller's buffer ([`request_into`](Self::request_into)).
    /// A [`set_handler`](Self::set_handler) handler reads one-packet
    /// requests in place too (when it runs on the thread that read them),
    /// but its response is a `Vec` of its own, copied into the ring after it
    /// returns.
    ///
    /// Requests that came in several packets are reassembled into a
    /// buffer first, and so are requests handed to a handler thread
    /// because the reader thread was busy ("Threads" in `docs/rpc.md`).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tachyon::primitives::rpc::ResponseWriter;
    /// use tachyon::RpcBuffer;
    /// # let name = format!("doc-rpc-set-in-place-{}", std::process::id());
    /// let server = RpcBuffer::create(&name)?;
    /// // An echo: the request read in the ring, the response written into it.
    /// server.set_handler_in_place(|_id, req: &[u8], out: &mut ResponseWriter<'_>| {
    ///     out.extend_from_slice(req);
    ///     Ok::<_, String>(())
    /// });
    /// let client = RpcBuffer::open(&name)?;
    /// let mut response = Vec::new();
    /// client.request_into(b"ping", &mut response, Some(Duration::from_secs(5)))?;
    /// assert_eq!(response, b"ping");
    /// # drop((client, server));
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn set_handler_in_place<F, E>(&self, f: F)
    where
        F: Fn(u64, &[u8], &mut ResponseWriter<'_>) -> std::result::Result<(), E> + Send + Sync + 'static,
        E: Display,
    {
        let mut handler = self.inner.handler.write().unwrap_or_else(|p| p.into_inner());
        *handler = Some(wrap_in_place(f));
        self.inner.handler_waits.store(false, Ordering::SeqCst);
    }

    /// [`set_handler`](Self::set_handler); `waits`: the handler waits for
    /// its answer elsewhere (the async handlers' bridges), so the reader
    /// thread hands its requests to the handler threads instead of running
    /// them itself (it would stop reading for as long as each waits).
    pub(super) fn set_handler_that<F, E>(&self, f: F, waits: bool)
    where
        F: Fn(u64, &[u8]) -> std::result::Result<Vec<u8>, E> + Send + Sync + 'static,
        E: Display,
    {
        let mut handler = self.inner.handler.write().unwrap_or_else(|p| p.into_inner());
        *handler = Some(wrap(f));
        self.inner.handler_waits.store(waits, Ordering::SeqCst);
    }

    /// A handle for calls from inside handlers (it does not keep the
    /// channel alive).
    pub fn client(&self) -> RpcClient {
        RpcClient { inner: Arc::downgrade(&self.inner) }
    }

    /// Sends a request and waits up to `timeout` (`None`: no limit) for the
    /// response. Fails with [`Error::Timeout`] (everything the request held
    /// is freed; a late response is counted and dropped),
    /// [`Error::Remote`] (the handler failed or panicked),
    /// [`Error::Closed`] or [`Error::PeerDied`] (promptly, not after the
    /// timeout), [`Error::MessageTooLarge`].
    ///
    /// `timeout` is a deadline for the whole call, sending included. With
    /// `Some(Duration::ZERO)` the request is still sent if its ring has
    /// room now (the library's [rule](crate#timeouts): a zero timeout tries
    /// once, it never does nothing): the peer handles it, and the call
    /// returns `Err(Timeout)` at once, its `what` being `"the RPC
    /// response"`, because it did not wait for the answer (the answer,
    /// when it comes, is counted in `discarded_responses`). If the ring is
    /// full, nothing is sent and the `what` is `"room in the RPC ring to
    /// send a packet"`. This is the .NET `RemoteRequest(msg, 0)`; for
    /// one-way messages [`notify`](Self::notify) says so better.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tachyon::{Error, RpcBuffer};
    /// # let name = format!("doc-rpc-zero-{}", std::process::id());
    /// let server = RpcBuffer::builder(&name)
    ///     .handler(|_id, _msg: &[u8]| Ok::<_, String>(Vec::new()))
    ///     .create()?;
    /// let client = RpcBuffer::open(&name)?;
    /// match client.request(b"fire and forget", Some(Duration::ZERO)) {
    ///     Err(Error::Timeout { what: "the RPC response", .. }) => {} // sent, not waited for
    ///     other => panic!("{other:?}"),
    /// }
    /// assert_eq!(client.stats().requests_sent, 1);
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn request(&self, msg: &[u8], timeout: Option<Duration>) -> Result<Vec<u8>> {
        self.inner.request(msg, timeout, None, None)
    }

    /// [`request`](Self::request) that leaves the response in `response`
    /// (cleared first), reusing its buffer: a caller that makes call after
    /// call with the same `Vec` allocates nothing per call, and a large
    /// response is copied out of the ring into memory that is already
    /// mapped (and, as often as not, in this core's cache), never into a
    /// fresh allocation that is zeroed or faulted in first. A response
    /// that came in several packets is reassembled into a buffer of its
    /// own, which replaces `response`'s.
    ///
    /// On an error, `response` is left empty (keeping its buffer when it
    /// can). Errors as [`request`](Self::request).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tachyon::RpcBuffer;
    /// # let name = format!("doc-rpc-request-into-{}", std::process::id());
    /// let server = RpcBuffer::builder(&name)
    ///     .handler(|_id, msg: &[u8]| Ok::<_, String>(msg.repeat(2)))
    ///     .create()?;
    /// let client = RpcBuffer::open(&name)?;
    /// let mut response = Vec::with_capacity(64);
    /// for word in [&b"ab"[..], b"xyz"] {
    ///     client.request_into(word, &mut response, Some(Duration::from_secs(5)))?;
    ///     assert_eq!(response, word.repeat(2));
    /// }
    /// # drop((client, server));
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn request_into(&self, msg: &[u8], response: &mut Vec<u8>, timeout: Option<Duration>) -> Result<()> {
        self.inner.request(msg, timeout, None, Some(response)).map(drop)
    }

    /// [`request`](Self::request) whose response is given to `read`
    /// where it lies, and `read`'s result returned: a one-packet response
    /// that this thread reads for itself (the usual case: a requester
    /// reads its own response while it waits) is read in its ring node,
    /// never copied; a response the reader thread delivered (once a hybrid
    /// requester went to sleep, or a race lost to the reader thread) or
    /// one reassembled from several packets is read from its buffer. For
    /// large responses that the caller only inspects, parses or forwards:
    /// it saves the copy out of the ring, the allocation and its page
    /// faults. Read this way, and answered by an in-place
    /// handler ([`set_handler_in_place`](Self::set_handler_in_place)), a
    /// one-packet call moves its payload twice in all: the request into
    /// the ring, and the handler's response into the ring.
    ///
    /// While `read` runs in place it holds the node and this end's reader
    /// role: other responses and requests on this channel wait until it
    /// returns. Keep it short; copy out what has to live longer. `read`
    /// runs at most once, and not at all if the call fails; a panic in it
    /// is resumed on this thread after the node is freed (the channel
    /// stays usable). A call back through this channel from `read` (which
    /// only this thread could answer) fails with
    /// [`Error::InvalidArgument`], whatever
    /// the wait policy; make it once `request_with` returned. Errors as
    /// [`request`](Self::request).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tachyon::RpcBuffer;
    /// # let name = format!("doc-rpc-request-with-{}", std::process::id());
    /// let server = RpcBuffer::builder(&name)
    ///     .handler(|_id, msg: &[u8]| Ok::<_, String>(msg.repeat(1000)))
    ///     .create()?;
    /// let client = RpcBuffer::open(&name)?;
    /// // Count the bytes of a 3,000-byte response without copying it out.
    /// let zs = client.request_with(b"xyz", Some(Duration::from_secs(5)), |response| {
    ///     response.iter().filter(|&&b| b == b'z').count()
    /// })?;
    /// assert_eq!(zs, 1000);
    /// # drop((client, server));
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn request_with<R>(
        &self,
        msg: &[u8],
        timeout: Option<Duration>,
        read: impl FnOnce(&[u8]) -> R,
    ) -> Result<R> {
        self.inner.request_with(msg, timeout, read)
    }

    /// [`request`](Self::request) that another thread can cancel through
    /// `cancel`: [`CancelToken::cancel`] wakes this call at once if it
    /// waits for the response, or within about 20 ms if it waits for room
    /// to send, and it returns [`Error::Interrupted`]. A request cancelled
    /// after it was sent stays sent (the peer may still handle it; its
    /// response is dropped). A token already cancelled fails the call
    /// before anything is sent. One token may serve any number of calls.
    ///
    /// The async form, [`request_async`](Self::request_async), is
    /// cancelled by dropping its future.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tachyon::primitives::rpc::CancelToken;
    /// use tachyon::{Error, RpcBuffer};
    /// # let name = format!("doc-rpc-cancel-{}", std::process::id());
    /// let server = RpcBuffer::builder(&name)
    ///     .handler(|_id, _msg: &[u8]| {
    ///         std::thread::sleep(Duration::from_millis(200)); // a slow handler
    ///         Ok::<_, String>(Vec::new())
    ///     })
    ///     .create()?;
    /// let client = RpcBuffer::open(&name)?;
    /// let cancel = CancelToken::new();
    /// std::thread::scope(|s| {
    ///     let stop = cancel.clone();
    ///     s.spawn(move || stop.cancel()); // e.g. on Ctrl+C, or a user's "Stop"
    ///     let r = client.request_with_cancel(b"slow", None, &cancel);
    ///     assert!(matches!(r, Err(Error::Interrupted)));
    /// });
    /// # drop(server);
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn request_with_cancel(
        &self,
        msg: &[u8],
        timeout: Option<Duration>,
        cancel: &CancelToken,
    ) -> Result<Vec<u8>> {
        self.inner.request(msg, timeout, Some(cancel), None)
    }

    /// [`request`](Self::request) with the default timeout (30 s).
    pub fn call(&self, msg: &[u8]) -> Result<Vec<u8>> {
        self.inner.request(msg, Some(self.inner.default_timeout), None, None)
    }

    /// Sends a request now and returns a future of its response, which
    /// works under any executor. The request is written before this
    /// returns (waiting, if the ring is full, up to the default timeout);
    /// the response is then awaited up to the default timeout. Dropping the
    /// future cancels the request and frees its slot. A thread may also
    /// wait for it in slices, reading the response where it lies
    /// ([`RequestFuture::wait_with`]).
    pub fn request_async(&self, msg: &[u8]) -> RequestFuture {
        self.inner.request_async(msg)
    }

    /// Sends a one-way message: the peer's handler runs, nothing comes back.
    pub fn notify(&self, msg: &[u8]) -> Result<()> {
        self.inner.notify(msg)
    }

    /// Counters and round-trip latency, readable at any time.
    ///
    /// Counting costs the calls little: the counters of what this end
    /// reads are updated by the thread that holds its reader role with
    /// plain stores, and a round trip is timed by two clock reads.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tachyon::RpcBuffer;
    /// # let name = format!("doc-rpc-stats-{}", std::process::id());
    /// let server = RpcBuffer::builder(&name)
    ///     .handler(|_id, msg: &[u8]| Ok::<_, String>(msg.to_vec()))
    ///     .create()?;
    /// let client = RpcBuffer::open(&name)?;
    /// for _ in 0..3 {
    ///     client.request(b"ping", Some(Duration::from_secs(5)))?;
    /// }
    /// let s = client.stats();
    /// assert_eq!((s.requests_sent, s.responses_received, s.latency.count), (3, 3, 3));
    /// assert_eq!((s.packets_received, s.bytes_received), (3, 12));
    /// assert!(s.latency.p50 > Duration::ZERO);
    /// # drop((client, server));
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn stats(&self) -> RpcStats {
        self.inner.stats.snapshot()
    }

    /// Sets every counter and the latency histogram back to zero: the
    /// next [`stats`](Self::stats) counts from here. Safe while calls run;
    /// a call that is counted as the reset happens is counted before it or
    /// after it, never lost from the counters that follow.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tachyon::RpcBuffer;
    /// # let name = format!("doc-rpc-reset-stats-{}", std::process::id());
    /// let server = RpcBuffer::builder(&name)
    ///     .handler(|_id, msg: &[u8]| Ok::<_, String>(msg.to_vec()))
    ///     .create()?;
    /// let client = RpcBuffer::open(&name)?;
    /// client.request(b"one", Some(Duration::from_secs(5)))?;
    /// client.reset_stats();
    /// assert_eq!(client.stats(), tachyon::primitives::rpc::RpcStats::default());
    /// client.request(b"two", Some(Duration::from_secs(5)))?;
    /// let s = client.stats();
    /// assert_eq!((s.requests_sent, s.responses_received, s.bytes_received, s.latency.count), (1, 1, 3, 1));
    /// # drop((client, server));
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn reset_stats(&self) {
        self.inner.stats.reset();
    }
}

impl RpcClient {
    fn inner(&self) -> Result<Arc<Inner>> {
        self.inner.upgrade().ok_or(Error::Closed)
    }

    /// See [`RpcBuffer::request`].
    pub fn request(&self, msg: &[u8], timeout: Option<Duration>) -> Result<Vec<u8>> {
        self.inner()?.request(msg, timeout, None, None)
    }

    /// See [`RpcBuffer::request_into`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use tachyon::RpcBuffer;
    /// # let name = format!("doc-rpc-client-request-into-{}", std::process::id());
    /// let server = RpcBuffer::builder(&name)
    ///     .handler(|_id, msg: &[u8]| Ok::<_, String>(msg.to_vec()))
    ///     .create()?;
    /// let end = RpcBuffer::open(&name)?;
    /// let client = end.client(); // calls while `end` lives
    /// let mut response = Vec::new();
    /// client.request_into(b"hi", &mut response, Some(Duration::from_secs(5)))?;
    /// assert_eq!(response, b"hi");
    /// # drop((end, server));
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn request_into(&self, msg: &[u8], response: &mut Vec<u8>, timeout: Option<Duration>) -> Result<()> {
        self.inner()?.request(msg, timeout, None, Some(response)).map(drop)
    }

    /// See [`RpcBuffer::request_with`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use tachyon::RpcBuffer;
    /// # let name = format!("doc-rpc-client-request-with-{}", std::process::id());
    /// let server = RpcBuffer::builder(&name)
    ///     .handler(|_id, msg: &[u8]| Ok::<_, String>(msg.to_ascii_uppercase()))
    ///     .create()?;
    /// let end = RpcBuffer::open(&name)?;
    /// let client = end.client();
    /// let first = client.request_with(b"hi", Some(Duration::from_secs(5)), |r| r[0])?;
    /// assert_eq!(first, b'H');
    /// # drop((end, server));
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn request_with<R>(
        &self,
        msg: &[u8],
        timeout: Option<Duration>,
        read: impl FnOnce(&[u8]) -> R,
    ) -> Result<R> {
        self.inner()?.request_with(msg, timeout, read)
    }

    /// See [`RpcBuffer::request_with_cancel`].
    pub fn request_with_cancel(
        &self,
        msg: &[u8],
        timeout: Option<Duration>,
        cancel: &CancelToken,
    ) -> Result<Vec<u8>> {
        self.inner()?.request(msg, timeout, Some(cancel), None)
    }

    /// See [`RpcBuffer::call`].
    pub fn call(&self, msg: &[u8]) -> Result<Vec<u8>> {
        let inner = self.inner()?;
        let t = inner.default_timeout;
        inner.request(msg, Some(t), None, None)
    }

    /// See [`RpcBuffer::request_async`].
    pub fn request_async(&self, msg: &[u8]) -> Result<RequestFuture> {
        Ok(self.inner()?.request_async(msg))
    }

    /// See [`RpcBuffer::notify`].
    pub fn notify(&self, msg: &[u8]) -> Result<()> {
        self.inner()?.notify(msg)
    }

    /// See [`RpcBuffer::close`]: a handler can close its own end (a
    /// "shutdown" request). Does nothing once the `RpcBuffer` is gone.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tachyon::RpcBuffer;
    /// # let name = format!("doc-rpc-client-close-{}", std::process::id());
    /// let server = RpcBuffer::builder(&name)
    ///     .handler_with_client(|me| move |_id, _msg: &[u8]| {
    ///         me.close(); // a "shutdown" request
    ///         Ok::<_, String>(b"bye".to_vec())
    ///     })
    ///     .create()?;
    /// let client = RpcBuffer::open(&name)?;
    /// // The handler's answer goes out before the channel closes.
    /// assert_eq!(client.call(b"shutdown")?, b"bye");
    /// server.wait_closed(Some(Duration::from_secs(5)))?;
    /// client.wait_closed(Some(Duration::from_secs(5)))?;
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn close(&self) {
        if let Ok(inner) = self.inner() {
            inner.close();
        }
    }
}

impl Drop for RpcBuffer {
    fn drop(&mut self) {
        self.inner.close();
        if let Some(r) = self.reader.take() {
            r.join();
        }
    }
}

impl std::fmt::Debug for RpcBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RpcBuffer")
            .field("name", &self.inner.ctl.name())
            .field("owner", &self.inner.owner)
            .field("node_size", &self.inner.geometry.1)
            .finish()
    }
}
