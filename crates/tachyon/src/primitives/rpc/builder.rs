//! [`RpcBuilder`]: an RPC end's options, and the two ways to start one:
//! `create` (the server makes the control segment and the first session)
//! and `open` (a client claims the channel and joins its session).

use super::channel::{Aside, Inner, PendingMap};
use super::control::Control;
use super::handler::{wrap, wrap_in_place, MakeHandler, ResponseWriter};
use super::packet::HEADER;
use super::pool::Pool;
use super::reader::Reading;
use super::session::{new_session, remove_stale_rings, ring_name, Session, OPEN};
use super::stats::Stats;
use super::threads::{SpawnFn, Spawner, ThreadWork};
use super::{RpcBuffer, RpcClient, DEFAULT_TIMEOUT, PROTOCOL_VERSION};
use crate::error::{Corruption, Error, Result};
use crate::primitives::CircularBuffer;
use crate::segment::{Kind, Segment};
use crate::sync::{Liveness, Token, WaitPolicy};
use std::fmt::Display;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::time::{Duration, Instant};

/// How long an `open` waits by default for the server to let the previous
/// client go (it notices a departure within a tick) before it gives up.
const CONNECT_WAIT: Duration = Duration::from_secs(2);

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
    spawner: Option<SpawnFn>,
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
    /// The defaults, for channel `name` (see [`RpcBuffer::builder`]).
    pub(super) fn new(name: &str) -> RpcBuilder {
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
            spawner: None,
        }
    }

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

    /// How this end's threads wait on the rings (default hybrid). With
    /// hybrid waits a requester spins for about twice the channel's recent
    /// wait for a response, and the reader thread for about twice its
    /// recent wait for a packet, while those are at most 250 µs (then the
    /// policy's few microseconds), before they sleep: a peer that calls
    /// every 100 µs finds this end awake (see `docs/rpc.md`, "Threads").
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

    /// Runs every handler of this end on its reader thread (default: off).
    /// With handler threads (the default) the reader thread already runs
    /// the handler of a request it read, and a standby thread reads in its
    /// place once that handler has run for 1 to 2 ms; inline
    /// handlers drop the standby and the pool: requests are handled one at
    /// a time, a slow handler delays everything this end reads (responses
    /// to its own requests too, unless their requesters read for
    /// themselves), a response waiting for room in a full ring holds up
    /// this end's reading until the send's deadline, and a handler must not
    /// call back through this channel (only this thread could read the
    /// answer): such a call fails with [`Error::InvalidArgument`] instead
    /// of deadlocking. Calls through other channels are fine. In the
    /// benchmark both kinds of handler answer a 256 B call in about 1 µs
    /// with spin waits (`docs/rpc.md`, "Threads").
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

    /// Starts this end's threads with `spawn` instead of
    /// `std::thread::spawn`: its reader thread, the standby that reads in
    /// its place while a handler runs long, the handler threads, extra
    /// handler threads while all are busy, and the thread that wakes
    /// [`RpcBuffer::serve_async`]'s future when the channel closes. Every
    /// handler of this end runs on one of them.
    ///
    /// `spawn` gets the thread's name and its work; it must run the work
    /// once, on a new thread (the work returns when this end closes), and
    /// return `Ok`, or return the error that kept it from starting one
    /// (the work is then dropped, never run). A spawner that panics counts
    /// as one that failed. It may be called from any of this end's
    /// threads. If the reader thread cannot start, [`create`](Self::create)
    /// / [`open`](Self::open) fail with [`Error::Io`]; a handler thread
    /// that cannot start leaves its requests to one started for the moment,
    /// or to the next free one.
    ///
    /// What it is for: threads pinned to cores, given a real-time
    /// priority or a larger stack; and runtimes that pay for code run on
    /// threads they did not start. The Go binding starts every thread as a
    /// goroutine's, because Go 1.19 takes about 7 µs to enter Go from a
    /// thread that is not its own and 0.13 µs from one of its own
    /// (`docs/go.md`, "Handlers on Go's threads").
    ///
    /// ```
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    /// use std::sync::Arc;
    /// use tachyon::primitives::rpc::ThreadWork;
    /// use tachyon::RpcBuffer;
    /// # let name = format!("doc-rpc-spawner-{}", std::process::id());
    /// let started = Arc::new(AtomicUsize::new(0));
    /// let count = Arc::clone(&started);
    /// let server = RpcBuffer::builder(&name)
    ///     .handler(|_id, msg: &[u8]| Ok::<_, String>(msg.to_ascii_uppercase()))
    ///     .thread_spawner(move |name: &str, work: ThreadWork| {
    ///         count.fetch_add(1, Ordering::Relaxed);
    ///         // Here: pin it, raise its priority, attach it to a runtime...
    ///         std::thread::Builder::new().name(format!("my-{name}")).stack_size(1 << 20).spawn(work)?;
    ///         Ok(())
    ///     })
    ///     .create()?;
    /// let client = RpcBuffer::open(&name)?;
    /// assert_eq!(client.call(b"hi")?, b"HI");
    /// assert!(started.load(Ordering::Relaxed) >= 2); // the reader, the handler threads
    /// # drop((client, server));
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn thread_spawner<F>(mut self, spawn: F) -> Self
    where
        F: Fn(&str, ThreadWork) -> std::io::Result<()> + Send + Sync + 'static,
    {
        self.spawner = Some(Arc::new(spawn));
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

    /// A handler that reads the request in place and writes its response
    /// in place, in place before the channel goes live. See
    /// [`RpcBuffer::set_handler_in_place`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use tachyon::primitives::rpc::ResponseWriter;
    /// use tachyon::RpcBuffer;
    /// # let name = format!("doc-rpc-builder-in-place-{}", std::process::id());
    /// let server = RpcBuffer::builder(&name)
    ///     .node_size(64 << 10)
    ///     .handler_in_place(|_id, req: &[u8], out: &mut ResponseWriter<'_>| {
    ///         out.extend_from_slice(req); // from the request's node into the response's
    ///         Ok::<_, String>(())
    ///     })
    ///     .create()?;
    /// let client = RpcBuffer::open(&name)?;
    /// let (request, mut response) = (vec![42u8; 60_000], Vec::new());
    /// client.request_into(&request, &mut response, Some(Duration::from_secs(5)))?;
    /// assert_eq!(response, request);
    /// # drop((client, server));
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn handler_in_place<F, E>(mut self, f: F) -> Self
    where
        F: Fn(u64, &[u8], &mut ResponseWriter<'_>) -> std::result::Result<(), E> + Send + Sync + 'static,
        E: Display,
    {
        let f = wrap_in_place(f);
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
            Segment::builder(&self.name).kind(Kind::RPC).size(Control::SIZE).geometry(geometry).create_with(
                |seg| {
                    let c = Control::of(seg)?;
                    c.node_count.store(self.node_count as u64, Ordering::Relaxed);
                    c.node_size.store(self.node_size as u64, Ordering::Relaxed);
                    c.version.store(u64::from(PROTOCOL_VERSION), Ordering::Relaxed);
                    c.owner.store(seg.token().raw(), Ordering::Relaxed);
                    c.owner_max.store(self.max_message as u64, Ordering::Relaxed);
                    c.session.store(session.id, Ordering::Relaxed);
                    Ok(())
                },
            )?;
        self.start(ctl, session, true)
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
        ctl.restore_geometry(&Control::GEOMETRY)?;
        let c = Control::of(&ctl)?;
        let version = c.version.load(Ordering::Relaxed);
        if version != u64::from(PROTOCOL_VERSION) {
            return Err(Error::VersionMismatch {
                found: version as u32,
                expected: u32::from(PROTOCOL_VERSION),
            });
        }
        let geometry = (c.node_count.load(Ordering::Relaxed), c.node_size.load(Ordering::Relaxed));
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
        let (opener, opener_closed) = (&c.opener, &c.opener_closed);
        let deadline = self.connect_timeout.and_then(crate::platform::deadline_after);
        loop {
            if c.owner_closed.load(Ordering::SeqCst) != 0 {
                return Err(Error::Closed);
            }
            let owner = c.owner.load(Ordering::SeqCst);
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
        // SYNC: the server stored the session id before it cleared the
        // opener word that this end took (`check_client`).
        let id = c.session.load(Ordering::SeqCst);
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
        c.opener_max.store(self.max_message as u64, Ordering::SeqCst);
        let b = RpcBuilder { node_size: o2p.node_size(), ..self };
        b.start(ctl, Session::new(id, p2o, o2p), false)
    }

    /// Starts an end on `ctl` and its first session: its state, its
    /// handler and its reader thread.
    fn start(self, ctl: Segment, session: Arc<Session>, owner: bool) -> Result<RpcBuffer> {
        // The calls' clock calibrated here, once per process, not in the
        // first call.
        crate::platform::clock::calibrate();
        let threads = Spawner::new(self.spawner.clone());
        let inner = Arc::new(Inner {
            name: self.name.clone(),
            ctl,
            session: RwLock::new(Arc::clone(&session)),
            reading: Mutex::new(Reading::new(session, self.max_message)),
            self_readers: AtomicU64::new(0),
            response_wait: AtomicU64::new(0),
            packet_wait: AtomicU64::new(0),
            aside: Mutex::new(Aside::default()),
            aside_cond: Condvar::new(),
            leading: AtomicU64::new(0),
            leads: AtomicU64::new(0),
            standby_state: AtomicU8::new(0),
            standby_lock: Mutex::new(()),
            standby_cond: Condvar::new(),
            geometry: (self.node_count, self.node_size),
            owner,
            state: AtomicU8::new(OPEN),
            closed_lock: Mutex::new(()),
            closed_cond: Condvar::new(),
            stop: AtomicBool::new(false),
            in_flight: AtomicUsize::new(0),
            closing: AtomicBool::new(false),
            next_id: AtomicU64::new(1),
            pending: PendingMap::default(),
            handler: RwLock::new(None),
            handler_waits: AtomicBool::new(false),
            pool: Pool::new(self.handler_threads, &threads),
            stats: Stats::new(),
            default_timeout: self.default_timeout,
            max_message: self.max_message,
            policy: self.policy,
            inline_handlers: self.inline_handlers,
            threads,
        });
        if let Some(make) = self.handler {
            let handler = make(RpcClient { inner: Arc::downgrade(&inner) });
            *inner.handler.write().unwrap_or_else(|p| p.into_inner()) = Some(handler);
        }
        let reader_inner = Arc::clone(&inner);
        let name = if owner { "tachyon-rpc-owner" } else { "tachyon-rpc-opener" };
        let reader = inner.threads.spawn(name, move || reader_inner.read_loop());
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
}
