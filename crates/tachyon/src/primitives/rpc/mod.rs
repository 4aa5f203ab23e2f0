//! `RpcBuffer`: request/response between two processes over two
//! [`CircularBuffer`]s, one per direction.
//!
//! The *server* (owner) creates the channel ([`RpcBuilder::create`]) and
//! serves one *client* (opener) at a time ([`RpcBuilder::open`]); when a
//! client leaves or dies, the server makes a fresh pair of rings (a new
//! *session*) and takes the next client. Both ends may send requests and
//! both may handle the other's. Each end runs one reader thread, which
//! reassembles packets and completes pending requests, and a pool of
//! handler threads, so a slow handler never stops responses from flowing
//! and a handler may itself call the other side.
//!
//! The wire format and the session protocol are in `docs/rpc.md`.

pub(crate) mod packet;
mod serve_async;
mod stats;

pub use packet::{HEADER as PACKET_HEADER, VERSION as PROTOCOL_VERSION};
pub use stats::{Latency, RpcStats};

use self::packet::{packet_count, Assembled, Header, MsgType, Reassembler, HEADER};
use self::stats::Stats;
use crate::error::{Corruption, Error, Result};
use crate::primitives::CircularBuffer;
use crate::segment::{Kind, Segment};
use crate::sync::{Liveness, Token, WaitPolicy};
use std::collections::HashMap;
use std::fmt::Display;
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex, RwLock, Weak};
use std::task::{Context, Poll, Wake, Waker};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The default deadline of [`RpcBuffer::call`] and of async requests.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// How often each end checks its peer and expires requests: a peer that
/// dies is noticed within about this long.
const TICK: Duration = Duration::from_millis(20);
/// Extra handler threads started when every pool thread is busy (nested
/// calls), at most.
const MAX_EXTRA_THREADS: usize = 1024;
/// How long a requester of a spin or hybrid channel looks for its response
/// (yielding the core between looks, so that this process's reader thread
/// can deliver it) before it sleeps on a condition variable.
const RESPONSE_SPIN: Duration = Duration::from_micros(50);

thread_local! {
    /// The channel whose reader thread runs an inline handler on this
    /// thread now (its address), so that a call back through that channel,
    /// which only this thread could answer, fails instead of deadlocking.
    static INLINE_HANDLER_OF: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    /// The channel whose handler runs on this thread now (its address),
    /// inline or on a handler thread: its `close` cannot wait for that
    /// handler, which is the caller.
    static HANDLER_OF: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

// Layout of the control segment.
const CTL_NODE_COUNT: usize = 0;
const CTL_NODE_SIZE: usize = 8;
const CTL_VERSION: usize = 16;
const CTL_OWNER: usize = 64;
const CTL_OPENER: usize = 68;
const CTL_OWNER_CLOSED: usize = 72;
const CTL_OPENER_CLOSED: usize = 76;
const CTL_OWNER_MAX: usize = 80;
const CTL_OPENER_MAX: usize = 88;
/// The id of the session whose rings the next (or the current) client
/// uses; the rings are named after it (see `ring_name`).
const CTL_SESSION: usize = 96;
const CTL_SIZE: usize = 128;
/// How long an `open` waits by default for the server to let the previous
/// client go (it notices a departure within a tick) before it gives up.
const CONNECT_WAIT: Duration = Duration::from_secs(2);

const OPEN: u8 = 0;
const CLOSED: u8 = 1;
const PEER_DIED: u8 = 2;

type HandlerFn = dyn Fn(u64, &[u8]) -> std::result::Result<Vec<u8>, String> + Send + Sync;
type MakeHandler = Box<dyn FnOnce(RpcClient) -> Arc<HandlerFn> + Send>;
type Job = Box<dyn FnOnce() + Send>;

/// What to do about an RPC message above the agreed maximum.
const RPC_TOO_LARGE: &str = "raise max_message on both ends (RpcBuilder::max_message), or send less";

/// Options of an [`RpcBuffer`]: geometry (the server's choice), threads,
/// limits, the handler.
///
/// There is no `create_or_open`: which end creates decides which end is
/// the server, and a channel's server must be known, not left to a race.
/// Start the server with [`create`](Self::create) and clients with
/// [`open`](Self::open).
pub struct RpcBuilder {
    name: String,
    node_count: usize,
    node_size: usize,
    /// Which of (node_count, node_size) the caller set.
    set: (bool, bool),
    policy: WaitPolicy,
    handler_threads: usize,
    default_timeout: Duration,
    max_message: usize,
    handler: Option<MakeHandler>,
    inline_handlers: bool,
    connect_timeout: Option<Duration>,
}

impl std::fmt::Debug for RpcBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RpcBuilder")
            .field("name", &self.name)
            .field("node_count", &self.node_count)
            .field("node_size", &self.node_size)
            .field("handler_threads", &self.handler_threads)
            .finish_non_exhaustive()
    }
}

impl RpcBuilder {
    /// Nodes per direction (default 64). The server chooses; a client
    /// that sets it is refused ([`Error::Incompatible`]) by a server that
    /// chose otherwise.
    pub fn node_count(mut self, n: usize) -> Self {
        self.node_count = n;
        self.set.0 = true;
        self
    }

    /// Bytes per node, header included (default 4096, so 4064 payload
    /// bytes per packet). At least 33. The server chooses; a client that
    /// sets it is refused ([`Error::Incompatible`]) by a server that chose
    /// otherwise.
    pub fn node_size(mut self, n: usize) -> Self {
        self.node_size = n;
        self.set.1 = true;
        self
    }

    /// How this end's threads wait on the rings (default hybrid).
    pub fn wait_policy(mut self, policy: WaitPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// Handler threads kept ready (default 2). When all are busy, for
    /// example in nested calls, more are started for the moment.
    pub fn handler_threads(mut self, n: usize) -> Self {
        self.handler_threads = n.max(1);
        self
    }

    /// The deadline of [`RpcBuffer::call`], async requests, notifications
    /// and responses (default 30 s).
    pub fn default_timeout(mut self, t: Duration) -> Self {
        self.default_timeout = t;
        self
    }

    /// Runs this end's handler on its reader thread instead of a handler
    /// thread (default: off). A call then crosses no thread inside this
    /// process: lowest latency (in the benchmark, a 256 B round trip drops
    /// from about 17 µs to about 4 µs with spin waits). The price: one
    /// request is handled at a time, a slow handler delays everything this
    /// end reads (responses to its own requests too), and a handler must not
    /// call back through this channel (only this thread could read the
    /// answer): such a call fails with [`Error::InvalidArgument`] instead of
    /// deadlocking. Calls through other channels are fine. And the reader
    /// thread now writes (the responses): if both ends flood each other
    /// until both rings are full, a response waits for room up to the
    /// default timeout, and the reads behind it with it.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tachyon::primitives::RpcBuffer;
    /// # let name = format!("doc-rpc-inline-{}", std::process::id());
    /// let owner = RpcBuffer::create(&name)?;
    /// let opener = RpcBuffer::builder(&name)
    ///     .inline_handlers(true)
    ///     .handler(|_id, msg: &[u8]| Ok::<_, String>(msg.to_vec()))
    ///     .open()?;
    /// assert_eq!(owner.request(b"ping", Some(Duration::from_secs(5)))?, b"ping");
    /// # drop(opener);
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn inline_handlers(mut self, yes: bool) -> Self {
        self.inline_handlers = yes;
        self
    }

    /// How long [`open`](Self::open) waits for the server to let its
    /// previous client go, when that client has just left and the server
    /// has not noticed yet (it does within about 20 ms): default 2 s;
    /// `None` waits for ever, `Some(Duration::ZERO)` not at all. A client
    /// that is still connected is not waited for: that is
    /// [`Error::ChannelBusy`] at once.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tachyon::RpcBuffer;
    /// # let name = format!("doc-rpc-connect-timeout-{}", std::process::id());
    /// let server = RpcBuffer::create(&name)?;
    /// drop(RpcBuffer::open(&name)?); // a client comes and goes
    /// let next = RpcBuffer::builder(&name).connect_timeout(Some(Duration::from_secs(5))).open()?;
    /// # drop((next, server));
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn connect_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// The largest message accepted from the peer or sent (default 64 MiB).
    pub fn max_message(mut self, bytes: usize) -> Self {
        self.max_message = bytes.min(u32::MAX as usize);
        self
    }

    /// The handler of the peer's requests, in place before the channel
    /// goes live. See [`RpcBuffer::set_handler`].
    pub fn handler<F, E>(mut self, f: F) -> Self
    where
        F: Fn(u64, &[u8]) -> std::result::Result<Vec<u8>, E> + Send + Sync + 'static,
        E: Display,
    {
        let f = wrap(f);
        self.handler = Some(Box::new(move |_| f));
        self
    }

    /// Like [`handler`](Self::handler), for a handler that calls the other
    /// side (nested calls): `make` gets this end's [`RpcClient`] and returns
    /// the handler, which is in place before the channel goes live.
    ///
    /// ```
    /// # use tachyon::primitives::RpcBuffer;
    /// # let name = format!("doc-rpc-nested-{}", std::process::id());
    /// let owner = RpcBuffer::builder(&name)
    ///     .handler(|_, msg: &[u8]| Ok::<_, String>(msg.to_vec()))
    ///     .create()?;
    /// let opener = RpcBuffer::builder(&name)
    ///     .handler_with_client(|client| {
    ///         move |_, msg: &[u8]| client.call(msg).map(|echo| [b"via owner: ", &echo[..]].concat())
    ///     })
    ///     .open()?;
    /// assert_eq!(owner.call(b"hi")?, b"via owner: hi");
    /// # drop(opener);
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn handler_with_client<M, F, E>(mut self, make: M) -> Self
    where
        M: FnOnce(RpcClient) -> F + Send + 'static,
        F: Fn(u64, &[u8]) -> std::result::Result<Vec<u8>, E> + Send + Sync + 'static,
        E: Display,
    {
        self.handler = Some(Box::new(move |client| wrap(make(client))));
        self
    }

    /// Creates the channel: this end is its **server** (the owner). The
    /// server outlives its clients: it serves one client at a time, and
    /// once that client leaves (drops its end, or its process dies) the
    /// next [`open`](Self::open) connects, on fresh rings. The channel
    /// ends when the server closes ([`RpcBuffer::close`] or drop).
    ///
    /// Errors: [`Error::AlreadyExists`] if a live channel has the name;
    /// [`Error::InvalidArgument`] for a node size of 32 bytes or less.
    ///
    /// ```
    /// use tachyon::{Error, RpcBuffer};
    /// # let name = format!("doc-rpc-builder-create-{}", std::process::id());
    /// let server = RpcBuffer::builder(&name).node_count(16).node_size(1024).create()?;
    /// assert!(matches!(RpcBuffer::create(&name), Err(Error::AlreadyExists { .. })));
    /// # drop(server);
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn create(self) -> Result<RpcBuffer> {
        if self.node_size <= HEADER || self.node_size > u32::MAX as usize {
            return Err(Error::invalid(format!(
                "node_size must be {} to {} bytes (a packet has a {HEADER}-byte header), not {}",
                HEADER + 1,
                u32::MAX,
                self.node_size
            )));
        }
        remove_stale_rings(&self.name);
        let session = new_session(&self.name, self.node_count, self.node_size, self.policy)?;
        // The control segment comes last: once it exists, so do the rings.
        let geometry = [
            self.node_count as u64,
            self.node_size as u64,
            u64::from(PROTOCOL_VERSION),
            self.max_message as u64,
        ];
        let ctl =
            Segment::builder(&self.name).kind(Kind::RPC).size(CTL_SIZE).geometry(geometry).create_with(
                |seg| {
                    seg.get::<AtomicU64>(CTL_NODE_COUNT)?.store(self.node_count as u64, Ordering::Relaxed);
                    seg.get::<AtomicU64>(CTL_NODE_SIZE)?.store(self.node_size as u64, Ordering::Relaxed);
                    seg.get::<AtomicU64>(CTL_VERSION)?.store(u64::from(PROTOCOL_VERSION), Ordering::Relaxed);
                    seg.get::<AtomicU32>(CTL_OWNER)?.store(seg.token().raw(), Ordering::Relaxed);
                    seg.get::<AtomicU64>(CTL_OWNER_MAX)?.store(self.max_message as u64, Ordering::Relaxed);
                    seg.get::<AtomicU64>(CTL_SESSION)?.store(session.id, Ordering::Relaxed);
                    Ok(())
                },
            )?;
        RpcBuffer::start(self, ctl, session, true)
    }

    /// Connects to the channel as its **client** (the opener), learning
    /// the geometry from the server.
    ///
    /// A channel serves one client at a time: while another client is
    /// connected this is [`Error::ChannelBusy`]. Right after the previous
    /// client left, it waits (up to the
    /// [`connect_timeout`](Self::connect_timeout), 2 s by default) for the
    /// server to notice and to make fresh rings, then [`Error::Timeout`].
    ///
    /// Other errors: [`Error::NotFound`] (no server), [`Error::Closed`]
    /// (the server closed), [`Error::PeerDied`] (the server's process
    /// died), [`Error::Incompatible`] (a node count or node size set on
    /// this builder differs from the server's), [`Error::VersionMismatch`].
    ///
    /// ```
    /// use tachyon::{Error, RpcBuffer};
    /// # let name = format!("doc-rpc-builder-open-{}", std::process::id());
    /// assert!(matches!(RpcBuffer::builder(&name).open(), Err(Error::NotFound { .. })));
    /// let server = RpcBuffer::builder(&name).node_size(1024).create()?;
    /// let client = RpcBuffer::builder(&name).node_size(1024).open()?;
    /// # drop((client, server));
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn open(self) -> Result<RpcBuffer> {
        let ctl = match Segment::builder(&self.name).kind(Kind::RPC).open() {
            Ok(ctl) => ctl,
            Err(e) => {
                if matches!(e, Error::NotFound { .. }) {
                    // No live channel: the segment layer removed a stale
                    // control segment (its owner died); its rings go too.
                    remove_stale_rings(&self.name);
                }
                return Err(e);
            }
        };
        // Control words damaged since creation: restored from their sealed
        // copy in the segment header.
        ctl.restore_geometry(&[CTL_NODE_COUNT, CTL_NODE_SIZE, CTL_VERSION, CTL_OWNER_MAX])?;
        let version = ctl.get::<AtomicU64>(CTL_VERSION)?.load(Ordering::Relaxed);
        if version != u64::from(PROTOCOL_VERSION) {
            return Err(Error::VersionMismatch {
                found: version as u32,
                expected: u32::from(PROTOCOL_VERSION),
            });
        }
        let geometry = (
            ctl.get::<AtomicU64>(CTL_NODE_COUNT)?.load(Ordering::Relaxed),
            ctl.get::<AtomicU64>(CTL_NODE_SIZE)?.load(Ordering::Relaxed),
        );
        let differs = |field: &'static str, existing: u64, requested: usize| Error::Incompatible {
            name: self.name.clone(),
            field,
            existing: existing.to_string(),
            requested: requested.to_string(),
        };
        if self.set.0 && geometry.0 != self.node_count as u64 {
            return Err(differs("node_count", geometry.0, self.node_count));
        }
        if self.set.1 && geometry.1 != self.node_size as u64 {
            return Err(differs("node_size", geometry.1, self.node_size));
        }
        let me = ctl.token().raw();
        let opener = ctl.get::<AtomicU32>(CTL_OPENER)?;
        let opener_closed = ctl.get::<AtomicU32>(CTL_OPENER_CLOSED)?;
        let deadline = self.connect_timeout.map(|t| Instant::now() + t);
        loop {
            if ctl.get::<AtomicU32>(CTL_OWNER_CLOSED)?.load(Ordering::SeqCst) != 0 {
                return Err(Error::Closed);
            }
            let owner = ctl.get::<AtomicU32>(CTL_OWNER)?.load(Ordering::SeqCst);
            if Token::from_raw(owner).is_none_or(|t| ctl.is_dead(t)) {
                // The whole channel is dead: its rings nobody holds go now,
                // the control segment when this handle drops (if last).
                remove_stale_rings(&self.name);
                return Err(Error::PeerDied);
            }
            let current = opener.load(Ordering::SeqCst);
            if current == 0 {
                if opener.compare_exchange(0, me, Ordering::SeqCst, Ordering::SeqCst).is_ok() {
                    break;
                }
                continue;
            }
            let left = opener_closed.load(Ordering::SeqCst) == current
                || Token::from_raw(current).is_none_or(|t| ctl.is_dead(t));
            if !left {
                return Err(Error::ChannelBusy { name: self.name.clone() });
            }
            // The previous client left; the server has not noticed yet.
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(Error::timeout(
                    "the RPC server to let its previous client go (it notices within a tick unless it is stuck)",
                    self.connect_timeout,
                ));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        // The channel is ours now; whatever goes wrong below, leave it so
        // that the server makes fresh rings for the next client.
        let leave = |e: Error| {
            opener_closed.store(me, Ordering::SeqCst);
            e
        };
        let id = ctl.get::<AtomicU64>(CTL_SESSION).map_err(leave)?.load(Ordering::SeqCst);
        let ring = |dir: &str| {
            CircularBuffer::builder(&ring_name(&self.name, id, dir)).wait_policy(self.policy).open()
        };
        let o2p = ring("o2p").map_err(leave)?;
        let p2o = ring("p2o").map_err(leave)?;
        for ring in [&o2p, &p2o] {
            if (ring.node_count() as u64, ring.node_size() as u64) != geometry || ring.node_size() <= HEADER {
                return Err(leave(Error::corrupt(Corruption::BadField {
                    field: "rpc ring geometry",
                    value: ring.node_size() as u64,
                })));
            }
        }
        ctl.get::<AtomicU64>(CTL_OPENER_MAX).map_err(leave)?.store(self.max_message as u64, Ordering::SeqCst);
        let b = RpcBuilder { node_size: o2p.node_size(), ..self };
        RpcBuffer::start(b, ctl, Session::new(id, p2o, o2p), false)
    }
}

/// The name of one direction's ring of session `id` of channel `name`.
fn ring_name(name: &str, id: u64, dir: &str) -> String {
    format!("{name}.rpc{id:016x}.{dir}")
}

/// Removes the rings of earlier sessions of channel `name` that nobody
/// holds any more: a server killed before its client came (or while it made
/// a session's rings) leaves them, and their names are never opened again.
/// Only files whose every attacher is dead are touched (checked again under
/// the segment's own lock by `reap`).
fn remove_stale_rings(name: &str) {
    let prefix = format!("{name}.rpc");
    let is_ring = |n: &str| {
        n.strip_prefix(&prefix)
            .and_then(|rest| rest.strip_suffix(".o2p").or_else(|| rest.strip_suffix(".p2o")))
            .is_some_and(|id| id.len() == 16 && id.bytes().all(|b| b.is_ascii_hexdigit()))
    };
    let Ok(list) = crate::segment::list() else { return };
    for info in list.iter().filter(|i| is_ring(&i.name) && i.is_stale()) {
        let _ = crate::segment::reap(info);
    }
}

/// A session id no earlier session of this name is likely to have had
/// (rings of an earlier server of the same name may still be held by its
/// last client).
fn session_id() -> u64 {
    static COUNT: AtomicU64 = AtomicU64::new(0);
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    let mut x = nanos ^ (u64::from(std::process::id()) << 40) ^ COUNT.fetch_add(1, Ordering::Relaxed) << 20;
    // splitmix64's finaliser: spread the bits.
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Makes the two fresh rings of a new session (the server does, for each
/// client).
fn new_session(name: &str, node_count: usize, node_size: usize, policy: WaitPolicy) -> Result<Arc<Session>> {
    let mut tries = 0;
    loop {
        let id = session_id();
        let ring = |dir: &str| {
            CircularBuffer::builder(&ring_name(name, id, dir))
                .node_count(node_count)
                .node_size(node_size)
                .wait_policy(policy)
                .create()
        };
        match ring("o2p").and_then(|o2p| Ok((o2p, ring("p2o")?))) {
            Ok((o2p, p2o)) => return Ok(Session::new(id, o2p, p2o)),
            // A name still held by someone (improbable): another id.
            Err(Error::AlreadyExists { .. }) if tries < 8 => tries += 1,
            Err(e) => return Err(e),
        }
    }
}

/// One client's connection: the two rings it and the server share. The
/// server makes fresh ones for each client, so nothing a previous client
/// left in the rings (or was sent) reaches the next.
struct Session {
    id: u64,
    tx: CircularBuffer,
    rx: CircularBuffer,
    /// `OPEN`, or why the session is over (its sends stop then).
    over: AtomicU8,
}

impl Session {
    fn new(id: u64, tx: CircularBuffer, rx: CircularBuffer) -> Arc<Session> {
        Arc::new(Session { id, tx, rx, over: AtomicU8::new(OPEN) })
    }

    fn check_open(&self) -> Result<()> {
        match self.over.load(Ordering::SeqCst) {
            OPEN => Ok(()),
            PEER_DIED => Err(Error::PeerDied),
            _ => Err(Error::Closed),
        }
    }
}

fn wrap<F, E>(f: F) -> Arc<HandlerFn>
where
    F: Fn(u64, &[u8]) -> std::result::Result<Vec<u8>, E> + Send + Sync + 'static,
    E: Display,
{
    Arc::new(move |id, msg| f(id, msg).map_err(|e| e.to_string()))
}

/// Cancels blocking [`RpcBuffer::request_with_cancel`] calls from another
/// thread: the .NET `CancellationToken` of a blocking RPC call.
///
/// Clones share one state. Once [`cancel`](Self::cancel) is called, every
/// call watching the token returns [`Error::Interrupted`] (at once if it
/// waits for its response, within about 20 ms if it waits for room to
/// send), and calls that start later fail at once. Cancelling is for
/// good: make a new token for new calls.
///
/// ```
/// use tachyon::primitives::rpc::CancelToken;
/// let token = CancelToken::new();
/// let other = token.clone(); // e.g. moved into a signal-watching thread
/// assert!(!token.is_cancelled());
/// other.cancel();
/// assert!(token.is_cancelled());
/// ```
#[derive(Clone, Default)]
pub struct CancelToken {
    inner: Arc<CancelState>,
}

#[derive(Default)]
struct CancelState {
    cancelled: AtomicBool,
    /// The pending requests watching the token.
    slots: Mutex<Vec<Weak<Slot>>>,
}

impl CancelToken {
    /// A token not cancelled yet.
    ///
    /// ```
    /// # use tachyon::primitives::rpc::CancelToken;
    /// assert!(!CancelToken::new().is_cancelled());
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// Cancels every call watching the token, now and later. Thread-safe;
    /// calling it again does nothing more.
    ///
    /// ```
    /// # use tachyon::primitives::rpc::CancelToken;
    /// let token = CancelToken::new();
    /// token.cancel();
    /// token.cancel();
    /// assert!(token.is_cancelled());
    /// ```
    pub fn cancel(&self) {
        self.inner.cancelled.store(true, Ordering::SeqCst);
        let slots = std::mem::take(&mut *self.inner.slots.lock().unwrap_or_else(|p| p.into_inner()));
        for slot in slots.iter().filter_map(Weak::upgrade) {
            slot.complete(Err(Error::Interrupted));
        }
    }

    /// Whether [`cancel`](Self::cancel) was called.
    ///
    /// ```
    /// # use tachyon::primitives::rpc::CancelToken;
    /// assert!(!CancelToken::new().is_cancelled());
    /// ```
    pub fn is_cancelled(&self) -> bool {
        self.inner.cancelled.load(Ordering::SeqCst)
    }

    /// Makes `slot` complete with `Interrupted` when the token is
    /// cancelled (at once if it is already).
    fn watch(&self, slot: &Arc<Slot>) {
        let mut slots = self.inner.slots.lock().unwrap_or_else(|p| p.into_inner());
        // Checked under the lock that `cancel` drains under: either it sees
        // this slot, or this sees its flag.
        if self.is_cancelled() {
            drop(slots);
            slot.complete(Err(Error::Interrupted));
            return;
        }
        slots.retain(|w| w.strong_count() > 0);
        slots.push(Arc::downgrade(slot));
    }
}

impl std::fmt::Debug for CancelToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CancelToken").field("cancelled", &self.is_cancelled()).finish()
    }
}

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
    reader: Option<JoinHandle<()>>,
}

/// A handle that can call through an [`RpcBuffer`] without keeping it
/// alive, for handlers that call the other side (nested calls). Once the
/// `RpcBuffer` is dropped, calls fail with [`Error::Closed`].
#[derive(Clone)]
pub struct RpcClient {
    inner: Weak<Inner>,
}

struct Inner {
    name: String,
    ctl: Segment,
    /// The current session: the server swaps in a fresh one when its
    /// client leaves; a client has one for its life.
    session: RwLock<Arc<Session>>,
    /// The server's geometry, for the next session's rings.
    geometry: (usize, usize),
    owner: bool,
    state: AtomicU8,
    /// Signalled when `state` leaves `OPEN` (for `wait_closed`).
    closed_lock: Mutex<()>,
    closed_cond: Condvar,
    stop: AtomicBool,
    /// Requests and notifications handed to a handler and not yet
    /// answered.
    in_flight: AtomicUsize,
    /// `close` was called: the reader takes no new requests, and the last
    /// running handler (or `close` itself) ends the channel.
    closing: AtomicBool,
    next_id: AtomicU64,
    pending: Mutex<HashMap<u64, Arc<Slot>>>,
    handler: RwLock<Option<Arc<HandlerFn>>>,
    pool: Pool,
    stats: Stats,
    default_timeout: Duration,
    max_message: usize,
    policy: WaitPolicy,
    inline_handlers: bool,
}

/// Where a response is delivered to the request waiting for it.
struct Slot {
    /// Set once `state` holds the result (for a requester that looks
    /// before it sleeps).
    ready: AtomicBool,
    state: Mutex<SlotState>,
    cond: Condvar,
    deadline: Option<Instant>,
    started: Instant,
    /// The session the request went out in: it fails when that ends.
    session: u64,
}

#[derive(Default)]
struct SlotState {
    result: Option<Result<Vec<u8>>>,
    waker: Option<Waker>,
}

impl Slot {
    fn complete(&self, r: Result<Vec<u8>>) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if s.result.is_none() {
            s.result = Some(r);
        }
        let waker = s.waker.take();
        drop(s);
        self.ready.store(true, Ordering::Release);
        self.cond.notify_all();
        if let Some(w) = waker {
            w.wake();
        }
    }
}

impl RpcBuffer {
    /// A builder for geometry, threads, timeouts and the handler.
    pub fn builder(name: &str) -> RpcBuilder {
        RpcBuilder {
            name: name.to_owned(),
            node_count: 64,
            node_size: 4096,
            set: (false, false),
            policy: WaitPolicy::default(),
            handler_threads: 2,
            default_timeout: DEFAULT_TIMEOUT,
            max_message: 64 << 20,
            handler: None,
            inline_handlers: false,
            connect_timeout: Some(CONNECT_WAIT),
        }
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

    fn start(b: RpcBuilder, ctl: Segment, session: Arc<Session>, owner: bool) -> Result<Self> {
        let inner = Arc::new(Inner {
            name: b.name.clone(),
            ctl,
            session: RwLock::new(session),
            geometry: (b.node_count, b.node_size),
            owner,
            state: AtomicU8::new(OPEN),
            closed_lock: Mutex::new(()),
            closed_cond: Condvar::new(),
            stop: AtomicBool::new(false),
            in_flight: AtomicUsize::new(0),
            closing: AtomicBool::new(false),
            next_id: AtomicU64::new(1),
            pending: Mutex::new(HashMap::new()),
            handler: RwLock::new(None),
            pool: Pool::new(b.handler_threads),
            stats: Stats::new(),
            default_timeout: b.default_timeout,
            max_message: b.max_message,
            policy: b.policy,
            inline_handlers: b.inline_handlers,
        });
        if let Some(make) = b.handler {
            let handler = make(RpcClient { inner: Arc::downgrade(&inner) });
            *inner.handler.write().unwrap_or_else(|p| p.into_inner()) = Some(handler);
        }
        let reader_inner = Arc::clone(&inner);
        let max_message = b.max_message;
        let reader = std::thread::Builder::new()
            .name(format!("tachyon-rpc-{}", if owner { "owner" } else { "opener" }))
            .spawn(move || reader_inner.read_loop(max_message));
        let reader = match reader {
            Ok(r) => r,
            Err(e) => {
                // Not serving after all: close this end (a client's leaving
                // lets the server take the next one).
                inner.close();
                return Err(Error::io("start the rpc reader thread", e));
            }
        };
        Ok(RpcBuffer { inner, reader: Some(reader) })
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
        let Ok(opener) = inner.ctl.get::<AtomicU32>(CTL_OPENER) else { return false };
        let opener = opener.load(Ordering::SeqCst);
        opener != 0
            && inner.ctl.get::<AtomicU32>(CTL_OPENER_CLOSED).is_ok_and(|c| c.load(Ordering::SeqCst) != opener)
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
        *self.inner.handler.write().unwrap_or_else(|p| p.into_inner()) = Some(wrap(f));
    }

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
        self.set_handler(move |id, msg: &[u8]| block_on(f(id, msg.to_vec())));
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
        self.inner.request(msg, timeout, None)
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
        self.inner.request(msg, timeout, Some(cancel))
    }

    /// [`request`](Self::request) with the default timeout (30 s).
    pub fn call(&self, msg: &[u8]) -> Result<Vec<u8>> {
        self.inner.request(msg, Some(self.inner.default_timeout), None)
    }

    /// Sends a request now and returns a future of its response, which
    /// works under any executor. The request is written before this
    /// returns (waiting, if the ring is full, up to the default timeout);
    /// the response is then awaited up to the default timeout. Dropping the
    /// future cancels the request and frees its slot.
    pub fn request_async(&self, msg: &[u8]) -> RequestFuture {
        self.inner.request_async(msg)
    }

    /// Sends a one-way message: the peer's handler runs, nothing comes back.
    pub fn notify(&self, msg: &[u8]) -> Result<()> {
        self.inner.notify(msg)
    }

    /// Counters and round-trip latency, readable at any time.
    pub fn stats(&self) -> RpcStats {
        self.inner.stats.snapshot()
    }

    /// Sets every counter and the latency histogram back to zero.
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
        self.inner()?.request(msg, timeout, None)
    }

    /// See [`RpcBuffer::request_with_cancel`].
    pub fn request_with_cancel(
        &self,
        msg: &[u8],
        timeout: Option<Duration>,
        cancel: &CancelToken,
    ) -> Result<Vec<u8>> {
        self.inner()?.request(msg, timeout, Some(cancel))
    }

    /// See [`RpcBuffer::call`].
    pub fn call(&self, msg: &[u8]) -> Result<Vec<u8>> {
        let inner = self.inner()?;
        let t = inner.default_timeout;
        inner.request(msg, Some(t), None)
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
            let _ = r.join();
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

impl Inner {
    fn session(&self) -> Arc<Session> {
        Arc::clone(&self.session.read().unwrap_or_else(|p| p.into_inner()))
    }

    /// Closes this end (see [`RpcBuffer::close`]): the reader thread stops
    /// at its next look, so no new request reaches a handler; the running
    /// handlers finish (waited for, unless this is one of them), then the
    /// channel ends.
    fn close(&self) {
        self.stop.store(true, Ordering::SeqCst);
        // SYNC: `closing` before the look at `in_flight`, and in
        // `handled` the decrement before the look at `closing` (all
        // SeqCst): whichever comes second sees the other, so the last
        // handler or this call ends the channel, never neither.
        self.closing.store(true, Ordering::SeqCst);
        if self.in_flight.load(Ordering::SeqCst) == 0 {
            self.end();
        } else if HANDLER_OF.with(|c| c.get()) != self as *const Inner as usize {
            // A handler that never returns cannot hold the channel open
            // for ever.
            let _ = self.wait_closed(Some(self.default_timeout));
            self.end();
        }
    }

    /// A handler finished (its response, if any, is sent): the last one
    /// after `close` ends the channel.
    fn handled(&self) {
        if self.in_flight.fetch_sub(1, Ordering::SeqCst) == 1 && self.closing.load(Ordering::SeqCst) {
            self.end();
        }
    }

    /// Ends this end for good: the peer is told (after every response
    /// this end sent), and pending calls fail with [`Error::Closed`].
    fn end(&self) {
        if let Ok(f) =
            self.ctl.get::<AtomicU32>(if self.owner { CTL_OWNER_CLOSED } else { CTL_OPENER_CLOSED })
        {
            // A client leaves its own token: the server tells it from a
            // flag left by an earlier client.
            f.store(if self.owner { 1 } else { self.ctl.token().raw() }, Ordering::SeqCst);
        }
        self.fail_all(CLOSED);
    }

    fn wait_closed(&self, timeout: Option<Duration>) -> Result<()> {
        let deadline = timeout.map(|t| Instant::now() + t);
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

    fn check_open(&self) -> Result<()> {
        match self.state.load(Ordering::SeqCst) {
            OPEN => Ok(()),
            PEER_DIED => Err(Error::PeerDied),
            _ => Err(Error::Closed),
        }
    }

    fn register(&self, deadline: Option<Instant>, session: u64) -> (u64, Arc<Slot>) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let slot = Arc::new(Slot {
            ready: AtomicBool::new(false),
            state: Mutex::new(SlotState::default()),
            cond: Condvar::new(),
            deadline,
            started: Instant::now(),
            session,
        });
        self.pending.lock().unwrap_or_else(|p| p.into_inner()).insert(id, Arc::clone(&slot));
        (id, slot)
    }

    /// Forgets a request; `true` if it was still pending (no response came).
    fn unregister(&self, id: u64) -> bool {
        self.pending.lock().unwrap_or_else(|p| p.into_inner()).remove(&id).is_some()
    }

    /// Fails a call made from an inline handler of this very channel: only
    /// the thread running that handler could read its response.
    fn check_not_inline(&self) -> Result<()> {
        if INLINE_HANDLER_OF.with(|c| c.get()) == self as *const Inner as usize {
            return Err(Error::invalid(
                "a call from an inline handler back through its own channel would deadlock (only its \
                 thread reads the answer); use handler threads for nested calls",
            ));
        }
        Ok(())
    }

    fn request(
        &self,
        msg: &[u8],
        timeout: Option<Duration>,
        cancel: Option<&CancelToken>,
    ) -> Result<Vec<u8>> {
        self.check_open()?;
        self.check_not_inline()?;
        if cancel.is_some_and(CancelToken::is_cancelled) {
            return Err(Error::Interrupted);
        }
        let deadline = timeout.map(|t| Instant::now() + t);
        let session = self.session();
        let (id, slot) = self.register(deadline, session.id);
        // From here on `cancel` completes the slot with `Interrupted`.
        if let Some(c) = cancel {
            c.watch(&slot);
        }
        if let Err(e) = self.send_with(&session, MsgType::Request, id, 0, msg, deadline, cancel) {
            self.unregister(id);
            return Err(e);
        }
        Stats::add(&self.stats.c.requests_sent, 1);
        let zero = timeout.is_some_and(|t| t.is_zero());
        if self.policy != WaitPolicy::Futex && !zero {
            // Look for the response a little before sleeping: the reader
            // thread (often on this same core) yields to us once it has it.
            let start = Instant::now();
            while !slot.ready.load(Ordering::Acquire) && start.elapsed() < RESPONSE_SPIN {
                std::thread::yield_now();
            }
        }
        let mut s = slot.state.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(r) = s.result.take() {
                if matches!(r, Err(Error::Interrupted)) {
                    drop(s);
                    self.unregister(id); // a late response is discarded
                }
                return r;
            }
            let wait = match deadline {
                None => Duration::from_secs(3600),
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        drop(s);
                        if self.unregister(id) {
                            Stats::add(&self.stats.c.timeouts, 1);
                            return Err(Error::timeout("the RPC response", timeout));
                        }
                        // The response won the race with the deadline.
                        s = slot.state.lock().unwrap_or_else(|p| p.into_inner());
                        continue;
                    }
                    left
                }
            };
            s = slot.cond.wait_timeout(s, wait).unwrap_or_else(|p| p.into_inner()).0;
        }
    }

    fn request_async(self: &Arc<Self>, msg: &[u8]) -> RequestFuture {
        let deadline = Some(Instant::now() + self.default_timeout);
        let session = self.session();
        let (id, slot) = self.register(deadline, session.id);
        let sent = self
            .check_open()
            .and_then(|()| self.check_not_inline())
            .and_then(|()| self.send(&session, MsgType::Request, id, 0, msg, deadline));
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
        RequestFuture { inner: Arc::clone(self), id, slot, error, done: false }
    }

    fn notify(&self, msg: &[u8]) -> Result<()> {
        self.check_open()?;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.send(&self.session(), MsgType::Notify, id, 0, msg, Some(Instant::now() + self.default_timeout))?;
        Stats::add(&self.stats.c.notifications_sent, 1);
        Ok(())
    }

    /// Writes one message as packets, each before `deadline`, giving up
    /// promptly if the peer goes away.
    fn send(
        &self,
        session: &Session,
        kind: MsgType,
        id: u64,
        response_to: u64,
        msg: &[u8],
        deadline: Option<Instant>,
    ) -> Result<()> {
        self.send_with(session, kind, id, response_to, msg, deadline, None)
    }

    /// [`send`](Self::send), giving up with [`Error::Interrupted`] (within
    /// a tick) once `cancel` is cancelled.
    #[allow(clippy::too_many_arguments)]
    fn send_with(
        &self,
        session: &Session,
        kind: MsgType,
        id: u64,
        response_to: u64,
        msg: &[u8],
        deadline: Option<Instant>,
        cancel: Option<&CancelToken>,
    ) -> Result<()> {
        // The smaller of this end's limit and the peer's (once it is known).
        let peer = if self.owner { CTL_OPENER_MAX } else { CTL_OWNER_MAX };
        let peer_max = self.ctl.get::<AtomicU64>(peer).map_or(0, |m| m.load(Ordering::Relaxed));
        let max = if peer_max == 0 { self.max_message } else { self.max_message.min(peer_max as usize) };
        if msg.len() > max {
            return Err(Error::MessageTooLarge { size: msg.len(), max, hint: RPC_TOO_LARGE });
        }
        let started = Instant::now();
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
            // A deadline that has passed (a zero timeout) still gets one
            // attempt per packet: a zero timeout tries once.
            let mut tried = false;
            loop {
                self.check_open()?;
                session.check_open()?;
                if cancel.is_some_and(CancelToken::is_cancelled) {
                    return Err(Error::Interrupted);
                }
                let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
                if tried && left.is_some_and(|l| l.is_zero()) {
                    Stats::add(&self.stats.c.timeouts, 1);
                    return Err(Error::timeout(
                        "room in the RPC ring to send a packet",
                        deadline.map(|d| d.saturating_duration_since(started)),
                    ));
                }
                let slice = left.map_or(TICK, |l| l.min(TICK));
                match session.tx.write_with(HEADER + chunk.len(), Some(slice), |node| {
                    header.encode(&mut node[..HEADER]);
                    node[HEADER..].copy_from_slice(chunk);
                }) {
                    Ok(()) => break,
                    Err(Error::Timeout { .. }) => tried = true,
                    Err(e) => return Err(e),
                }
            }
            Stats::add(&self.stats.c.packets_sent, 1);
            Stats::add(&self.stats.c.bytes_sent, chunk.len() as u64);
        }
        Ok(())
    }

    /// The reader thread: packets in, messages dispatched; every tick, the
    /// peer is checked and overdue requests expire.
    fn read_loop(self: Arc<Self>, max_message: usize) {
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
                    let _ = inner.send(&session, MsgType::Error, id, h.msg_id, text.as_bytes(), deadline);
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
                let me = Arc::as_ptr(self) as usize;
                let outer = INLINE_HANDLER_OF.with(|c| c.replace(me));
                self.handle(session, h, payload);
                INLINE_HANDLER_OF.with(|c| c.set(outer));
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

    /// Runs the handler for a request or notification (on a pool thread,
    /// or inline) and sends the response, in the session the request came
    /// in: if that client has left meanwhile, the response goes nowhere.
    fn handle(&self, session: &Session, h: Header, payload: Vec<u8>) {
        let outer = HANDLER_OF.with(|c| c.replace(self as *const Inner as usize));
        self.answer(session, h, payload);
        HANDLER_OF.with(|c| c.set(outer));
        self.handled();
    }

    fn answer(&self, session: &Session, h: Header, payload: Vec<u8>) {
        let handler = self.handler.read().unwrap_or_else(|p| p.into_inner()).clone();
        let result = match handler {
            None => Err("no handler: the other end has not set one".to_owned()),
            Some(f) => catch_unwind(AssertUnwindSafe(|| f(h.msg_id, &payload))).unwrap_or_else(|panic| {
                let what = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "a non-string panic".to_owned());
                Err(format!("handler panicked: {what}"))
            }),
        };
        if result.is_err() {
            Stats::add(&self.stats.c.errors, 1);
        }
        if h.kind == MsgType::Notify {
            Stats::add(&self.stats.c.notifications_received, 1);
            return;
        }
        Stats::add(&self.stats.c.requests_handled, 1);
        let (kind, body) = match result {
            Ok(body) => (MsgType::Response, body),
            Err(text) => (MsgType::Error, text.into_bytes()),
        };
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let deadline = Some(Instant::now() + self.default_timeout);
        match self.send(session, kind, id, h.msg_id, &body, deadline) {
            Ok(()) => Stats::add(&self.stats.c.responses_sent, 1),
            Err(Error::MessageTooLarge { size, max, .. }) => {
                // Tell the caller rather than leave it waiting.
                let text = format!("response of {size} bytes exceeds the maximum message size {max}");
                let _ = self.send(session, MsgType::Error, id, h.msg_id, text.as_bytes(), deadline);
            }
            Err(_) => {}
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
        let overdue: Vec<Arc<Slot>> = {
            let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
            let ids: Vec<u64> = pending
                .iter()
                .filter(|(_, s)| s.deadline.is_some_and(|d| d <= now))
                .map(|(id, _)| *id)
                .collect();
            ids.iter().filter_map(|id| pending.remove(id)).collect()
        };
        for slot in overdue {
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
        let word = |off| self.ctl.get::<AtomicU32>(off).map_or(0, |w| w.load(Ordering::SeqCst));
        if word(CTL_OWNER_CLOSED) != 0 || word(CTL_OPENER) != self.ctl.token().raw() {
            Some(CLOSED)
        } else if Token::from_raw(word(CTL_OWNER)).is_none_or(|t| self.ctl.is_dead(t)) {
            Some(PEER_DIED)
        } else {
            None
        }
    }

    /// The server's check of its client: once it left (closed its end, or
    /// its process died), its session ends (its requests fail, its late
    /// responses go nowhere) and fresh rings wait for the next client.
    fn check_client(&self, session: &Arc<Session>) -> Option<Arc<Session>> {
        let (Ok(opener), Ok(opener_closed)) =
            (self.ctl.get::<AtomicU32>(CTL_OPENER), self.ctl.get::<AtomicU32>(CTL_OPENER_CLOSED))
        else {
            return None;
        };
        let client = opener.load(Ordering::SeqCst);
        if client == 0 {
            return None;
        }
        let why = if opener_closed.load(Ordering::SeqCst) == client {
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
        if let Ok(id) = self.ctl.get::<AtomicU64>(CTL_SESSION) {
            id.store(next.id, Ordering::SeqCst);
        }
        if let Ok(max) = self.ctl.get::<AtomicU64>(CTL_OPENER_MAX) {
            max.store(0, Ordering::SeqCst);
        }
        opener_closed.store(0, Ordering::SeqCst);
        opener.store(0, Ordering::SeqCst);
        Some(next)
    }

    /// Fails the requests sent in session `id` (its client left).
    fn fail_session(&self, id: u64, why: u8) {
        let gone: Vec<Arc<Slot>> = {
            let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
            let ids: Vec<u64> = pending.iter().filter(|(_, s)| s.session == id).map(|(id, _)| *id).collect();
            ids.iter().filter_map(|id| pending.remove(id)).collect()
        };
        for slot in gone {
            slot.complete(Err(if why == PEER_DIED { Error::PeerDied } else { Error::Closed }));
        }
    }

    /// Marks this end closed (or its server dead) and fails every pending
    /// request with that.
    fn fail_all(&self, why: u8) {
        let _ = self.state.compare_exchange(OPEN, why, Ordering::SeqCst, Ordering::SeqCst);
        let why = self.state.load(Ordering::SeqCst);
        let _ = self.session().over.compare_exchange(OPEN, why, Ordering::SeqCst, Ordering::SeqCst);
        let err = || if why == PEER_DIED { Error::PeerDied } else { Error::Closed };
        let all: Vec<Arc<Slot>> =
            self.pending.lock().unwrap_or_else(|p| p.into_inner()).drain().map(|(_, s)| s).collect();
        for slot in all {
            slot.complete(Err(err()));
        }
        let _guard = self.closed_lock.lock().unwrap_or_else(|p| p.into_inner());
        self.closed_cond.notify_all();
    }
}

/// The response of an [`RpcBuffer::request_async`]. Dropping it before it
/// completes cancels the request.
pub struct RequestFuture {
    inner: Arc<Inner>,
    id: u64,
    slot: Arc<Slot>,
    error: Option<Error>,
    done: bool,
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

/// Handler threads: a few kept ready, more started while all are busy, so
/// that nested calls always find a thread.
struct Pool {
    /// Jobs, each marked whether it was promised to an idle thread.
    tx: Mutex<mpsc::Sender<(Job, bool)>>,
    /// Threads waiting for work, not yet promised a job.
    idle: Arc<AtomicUsize>,
    extra: Arc<AtomicUsize>,
}

impl Pool {
    fn new(threads: usize) -> Pool {
        let (tx, rx) = mpsc::channel::<(Job, bool)>();
        let rx = Arc::new(Mutex::new(rx));
        let idle = Arc::new(AtomicUsize::new(0));
        for i in 0..threads {
            let rx = Arc::clone(&rx);
            let idle = Arc::clone(&idle);
            let _ =
                std::thread::Builder::new().name(format!("tachyon-rpc-handler-{i}")).spawn(move || loop {
                    // Available from now until it takes a job; a submitter that
                    // promised the job to it has already taken that back.
                    idle.fetch_add(1, Ordering::SeqCst);
                    let job = rx.lock().unwrap_or_else(|p| p.into_inner()).recv();
                    match job {
                        Ok((job, promised)) => {
                            if !promised {
                                idle.fetch_sub(1, Ordering::SeqCst);
                            }
                            job();
                        }
                        Err(_) => return, // the channel is gone
                    }
                });
        }
        Pool { tx: Mutex::new(tx), idle, extra: Arc::new(AtomicUsize::new(0)) }
    }

    fn submit(&self, job: Job) {
        let send = |job: Job, promised: bool| {
            let _ = self.tx.lock().unwrap_or_else(|p| p.into_inner()).send((job, promised));
        };
        // Promise the job to an idle thread, if there is one.
        if self.idle.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |i| i.checked_sub(1)).is_ok() {
            return send(job, true);
        }
        // All busy (nested calls, slow handlers): a thread for this job.
        if self.extra.fetch_add(1, Ordering::SeqCst) < MAX_EXTRA_THREADS {
            let extra = Arc::clone(&self.extra);
            let job = Arc::new(Mutex::new(Some(job)));
            let run = Arc::clone(&job);
            let spawned =
                std::thread::Builder::new().name("tachyon-rpc-handler-extra".into()).spawn(move || {
                    if let Some(job) = run.lock().unwrap_or_else(|p| p.into_inner()).take() {
                        job();
                    }
                    extra.fetch_sub(1, Ordering::SeqCst);
                });
            if spawned.is_ok() {
                return;
            }
            self.extra.fetch_sub(1, Ordering::SeqCst);
            if let Some(job) = job.lock().unwrap_or_else(|p| p.into_inner()).take() {
                send(job, false);
            }
            return;
        }
        self.extra.fetch_sub(1, Ordering::SeqCst);
        send(job, false);
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
