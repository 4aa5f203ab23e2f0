//! The running bridge: one Zenoh session, a thread per forwarded partition,
//! a subscriber callback and an acknowledging thread per incoming route,
//! threads per RPC route.
//!
//! The guarantees and how each is kept are in `docs/bridge.md`; in short:
//!
//! * **consumer groups**: an out route reads its topic through a consumer
//!   group of its own (`tachyon-bridge` unless the route names one), so it
//!   gets every message and local consumers keep getting every message
//!   too; a region without group slots is refused unless the route asks
//!   for the topic's default group (`default_group = true`). The group
//!   outlives a killed bridge for the region's group lease, so a restarted
//!   one goes on where it left.
//! * **order**: one thread per source partition takes messages in the
//!   partition's order and hands them, in that order, to the route's one
//!   Zenoh publisher (reliable, congestion control `Block`) or, on an
//!   at-least-once topic, to one acknowledged query at a time; the far
//!   side's route publishes them in arrival order (from Zenoh's receiving
//!   callback) into the same partition index.
//! * **at-most-once topics**: a message is taken from the topic once and
//!   put once; nothing is ever sent twice (a bridge killed in between loses
//!   what it held, lost to its group only, as any group member of an
//!   at-most-once topic would).
//! * **at-least-once topics**: messages are sent in batches as Zenoh
//!   queries; the far side publishes them into its topic, then replies;
//!   only then are they released here. A batch that is not acknowledged is
//!   sent again with the same sequence numbers, which the far side uses to
//!   drop what it already published. A bridge killed with unacknowledged
//!   messages holds them as a dead group member: tachyon delivers them
//!   again within the group and the restarted bridge sends them.
//! * **loops**: subscribers and queryables hear only remote publications
//!   (`Locality::Remote`), every sample names its origin bridge, and on a
//!   topic that one bridge both imports and exports, the chunks it
//!   published are recorded and not sent back.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tachyon::bus::{Delivery, Group, JoinFrom, Key, Message, Region, RegionConfig, Topic, TopicConfig};
use tachyon::{Error as TyError, RpcBuffer};
use zenoh::handlers::FifoChannel;
use zenoh::qos::{CongestionControl, Reliability};
use zenoh::query::{ConsolidationMode, QueryTarget};
use zenoh::sample::Locality;
use zenoh::{Session, Wait};

use crate::config::{
    parse_delivery, Config, InRoute, OutRoute, RpcCallRoute, RpcServeRoute, DEFAULT_MAX_GROUPS,
};
use crate::error::{BridgeError, Result};
use crate::wire::{push_record, split_batch, Header, Kind};

/// How often a waiting thread looks at the stop flag.
const TICK: Duration = Duration::from_millis(100);

/// Counters of a running bridge.
#[derive(Debug, Default)]
struct Counters {
    forwarded: AtomicU64,
    imported: AtomicU64,
    batches_acked: AtomicU64,
    batches_resent: AtomicU64,
    batches_put: AtomicU64,
    echoes: AtomicU64,
    duplicates: AtomicU64,
    gaps: AtomicU64,
    malformed: AtomicU64,
    rpc_served: AtomicU64,
    rpc_called: AtomicU64,
    rpc_failed: AtomicU64,
}

/// A snapshot of a bridge's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Messages taken from local topics and sent (at-least-once: acknowledged).
    pub forwarded: u64,
    /// Messages received from Zenoh and published into local topics.
    pub imported: u64,
    /// At-least-once batches acknowledged by the far side.
    pub batches_acked: u64,
    /// At-least-once batches sent again (no or a failed acknowledgement).
    pub batches_resent: u64,
    /// At-most-once samples put with more than one message in them (out
    /// routes with `batch` above 1).
    pub batches_put: u64,
    /// Messages this bridge had imported and its outgoing side received
    /// again: not sent back.
    pub echoes: u64,
    /// Messages received twice (an at-least-once batch sent again) and
    /// published once.
    pub duplicates: u64,
    /// Sequence numbers skipped by an origin (at-most-once messages lost
    /// on the way, e.g. while a link was down).
    pub gaps: u64,
    /// Samples or queries that did not parse, or messages that did not fit
    /// a local topic.
    pub malformed: u64,
    /// Remote calls answered through a local `RpcBuffer` channel.
    pub rpc_served: u64,
    /// Local calls answered through Zenoh.
    pub rpc_called: u64,
    /// Calls, in either direction, that failed.
    pub rpc_failed: u64,
}

impl std::fmt::Display for Stats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "forwarded={} imported={} batches_acked={} batches_resent={} batches_put={} echoes={} duplicates={} \
             gaps={} malformed={} rpc_served={} rpc_called={} rpc_failed={}",
            self.forwarded,
            self.imported,
            self.batches_acked,
            self.batches_resent,
            self.batches_put,
            self.echoes,
            self.duplicates,
            self.gaps,
            self.malformed,
            self.rpc_served,
            self.rpc_called,
            self.rpc_failed
        )
    }
}

impl Counters {
    fn snapshot(&self) -> Stats {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Stats {
            forwarded: g(&self.forwarded),
            imported: g(&self.imported),
            batches_acked: g(&self.batches_acked),
            batches_resent: g(&self.batches_resent),
            batches_put: g(&self.batches_put),
            echoes: g(&self.echoes),
            duplicates: g(&self.duplicates),
            gaps: g(&self.gaps),
            malformed: g(&self.malformed),
            rpc_served: g(&self.rpc_served),
            rpc_called: g(&self.rpc_called),
            rpc_failed: g(&self.rpc_failed),
        }
    }
}

fn bump(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

/// The chunks a bridge published into a topic it also forwards, with a
/// hash of what it wrote: its outgoing side does not send them back.
#[derive(Default)]
struct Ledger {
    chunks: Mutex<HashMap<u32, u64>>,
    hasher: std::collections::hash_map::RandomState,
}

impl Ledger {
    fn digest(&self, bytes: &[u8]) -> u64 {
        self.hasher.hash_one(bytes)
    }

    fn record(&self, chunk: u32, bytes: &[u8]) {
        let d = self.digest(bytes);
        lock(&self.chunks).insert(chunk, d);
    }

    fn forget(&self, chunk: u32) {
        lock(&self.chunks).remove(&chunk);
    }

    /// Whether `bytes` in `chunk` are what this bridge published there; the
    /// record goes either way (a chunk is received once per publication).
    fn take(&self, chunk: u32, bytes: &[u8]) -> bool {
        let Some(d) = lock(&self.chunks).remove(&chunk) else { return false };
        d == self.digest(bytes)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// What every worker thread shares.
struct Shared {
    name: String,
    id: u64,
    session: Session,
    stop: AtomicBool,
    counters: Counters,
}

impl Shared {
    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    fn log(&self, what: std::fmt::Arguments<'_>) {
        eprintln!("tachyon-bridge[{}]: {what}", self.name);
    }
}

/// A running bridge. Dropping it (or [`stop`](Bridge::stop)) ends every
/// route and closes the Zenoh session.
pub struct Bridge {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
    rpc_servers: Vec<RpcBuffer>,
    subscribers: Vec<zenoh::pubsub::Subscriber<()>>,
}

impl std::fmt::Debug for Bridge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bridge").field("name", &self.shared.name).field("id", &self.shared.id).finish()
    }
}

/// A random 64-bit id for this run (std's hasher keys are random per process).
fn run_id() -> u64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    std::process::id().hash(&mut h);
    std::time::SystemTime::now().hash(&mut h);
    h.finish() | 1
}

fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn json_list(items: &[String]) -> String {
    format!("[{}]", items.iter().map(|s| json_string(s)).collect::<Vec<_>>().join(","))
}

/// The Zenoh configuration a bridge opens its session with.
pub fn zenoh_config(config: &Config) -> Result<zenoh::Config> {
    let z = &config.zenoh;
    let mut zc = zenoh::Config::default();
    let set = |zc: &mut zenoh::Config, key: &str, value: String, field: &str| {
        zc.insert_json5(key, &value).map_err(|e| BridgeError::invalid(field, e.to_string()))
    };
    set(&mut zc, "mode", json_string(&z.mode), "zenoh.mode")?;
    set(&mut zc, "listen/endpoints", json_list(&z.listen), "zenoh.listen")?;
    set(&mut zc, "connect/endpoints", json_list(&z.connect), "zenoh.connect")?;
    set(&mut zc, "scouting/multicast/enabled", z.multicast_scouting.to_string(), "zenoh.multicast_scouting")?;
    if let Some(lease) = z.lease_ms {
        set(&mut zc, "transport/link/tx/lease", lease.to_string(), "zenoh.lease_ms")?;
    }
    Ok(zc)
}

impl Bridge {
    /// Opens the Zenoh session and starts every route of `config`.
    ///
    /// Incoming routes open (or create) their region and topic now, so a
    /// mismatch is an error here; an outgoing route whose region or topic
    /// does not exist yet waits for it (and says so on stderr).
    pub fn start(config: &Config) -> Result<Bridge> {
        config.validate()?;
        let session = zenoh::open(zenoh_config(config)?)
            .wait()
            .map_err(|e| BridgeError::zenoh("opening the session", e))?;
        let shared = Arc::new(Shared {
            name: config.display_name(),
            id: run_id(),
            session,
            stop: AtomicBool::new(false),
            counters: Counters::default(),
        });
        let mut bridge = Bridge {
            shared: Arc::clone(&shared),
            threads: Vec::new(),
            rpc_servers: Vec::new(),
            subscribers: Vec::new(),
        };

        // A ledger for each topic that this bridge both imports and exports.
        let mut ledgers: HashMap<(String, String), Arc<Ledger>> = HashMap::new();
        for r in &config.outgoing {
            if config.incoming.iter().any(|i| i.region == r.region && i.topic == r.topic) {
                ledgers.insert((r.region.clone(), r.topic.clone()), Arc::new(Ledger::default()));
                if r.group_name().is_none() {
                    shared.log(format_args!(
                        "warning: topic {:?} of region {:?} is both imported and exported through its default \
                         group: the bridge competes with local consumers, so an imported message it takes itself \
                         is not sent back (no loop) but is not delivered locally either (counted as `echoes`); \
                         read it through a consumer group of the bridge's own (leave `default_group` out) to give \
                         local consumers every message (docs/bridge.md, \"Both ways\")",
                        r.topic, r.region
                    ));
                }
            }
        }

        for (i, route) in config.incoming.iter().enumerate() {
            let topic = open_incoming(route).map_err(|e| with_field(e, &format!("in[{i}]")))?;
            let ledger = ledgers.get(&(route.region.clone(), route.topic.clone())).cloned();
            bridge.start_incoming(i, route, topic, ledger)?;
        }
        for (i, route) in config.outgoing.iter().enumerate() {
            let ledger = ledgers.get(&(route.region.clone(), route.topic.clone())).cloned();
            bridge.start_outgoing(i, route.clone(), ledger)?;
        }
        for (i, route) in config.rpc_serve.iter().enumerate() {
            bridge.start_rpc_serve(i, route.clone())?;
        }
        for (i, route) in config.rpc_call.iter().enumerate() {
            let server =
                start_rpc_call(&shared, route).map_err(|e| with_field(e, &format!("rpc_call[{i}]")))?;
            bridge.rpc_servers.push(server);
        }
        Ok(bridge)
    }

    /// This run's id (the origin in every sample it sends).
    pub fn id(&self) -> u64 {
        self.shared.id
    }

    /// The counters now.
    pub fn stats(&self) -> Stats {
        self.shared.counters.snapshot()
    }

    /// Stops every route (each notices within 100 ms), closes the session
    /// and returns the final counters. Unacknowledged at-least-once
    /// messages stay held by this process until it exits, so that tachyon
    /// delivers them again (to the next bridge) rather than lose them.
    pub fn stop(mut self) -> Stats {
        self.shutdown();
        self.stats()
    }

    fn shutdown(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        for s in self.rpc_servers.drain(..) {
            s.close();
        }
        for s in self.subscribers.drain(..) {
            let _ = s.undeclare().wait();
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        let _ = self.shared.session.close().wait();
    }

    fn spawn(&mut self, name: String, f: impl FnOnce() + Send + 'static) -> Result<()> {
        let t = std::thread::Builder::new()
            .name(name)
            .spawn(f)
            .map_err(|e| BridgeError::Tachyon(TyError::from(e)))?;
        self.threads.push(t);
        Ok(())
    }

    fn start_outgoing(&mut self, i: usize, route: OutRoute, ledger: Option<Arc<Ledger>>) -> Result<()> {
        let shared = Arc::clone(&self.shared);
        let publisher = shared
            .session
            .declare_publisher(route.key.clone())
            .congestion_control(CongestionControl::Block)
            .reliability(Reliability::Reliable)
            .allowed_destination(Locality::Remote)
            .wait()
            .map_err(|e| {
                BridgeError::zenoh(&format!("out[{i}]: declaring the publisher on {:?}", route.key), e)
            })?;
        // Open the topic and join the route's group now when the topic
        // exists, so that "ready" means joined (errors other than "not
        // there yet" are configuration errors); otherwise the route's
        // thread waits for it. A region that exists without group slots is
        // refused now even if the topic does not exist yet.
        let field = format!("out[{i}]");
        let source = match open_outgoing(&route) {
            Ok(t) => Some(Source::open(t, &route).map_err(|why| BridgeError::invalid(&field, why))?),
            Err(TyError::NotFound { .. }) => None,
            Err(TyError::TopicNotFound { .. }) => {
                if let Ok(region) = Region::open(&route.region) {
                    check_group_slots(&region, &route).map_err(|why| BridgeError::invalid(&field, why))?;
                }
                None
            }
            Err(e) => return Err(with_field(e.into(), &field)),
        };
        self.spawn(format!("out{i}"), move || {
            let source = match source {
                Some(s) => s,
                None => {
                    shared.log(format_args!(
                        "out[{i}]: waiting for topic {:?} of region {:?} to exist",
                        route.topic, route.region
                    ));
                    loop {
                        if shared.stopped() {
                            return;
                        }
                        match open_outgoing(&route) {
                            Ok(t) => match Source::open(t, &route) {
                                Ok(s) => break s,
                                Err(why) => {
                                    shared.log(format_args!("out[{i}]: error, the route stops: {why}"));
                                    return;
                                }
                            },
                            Err(TyError::NotFound { .. } | TyError::TopicNotFound { .. }) => {
                                std::thread::sleep(TICK)
                            }
                            Err(e) => {
                                shared.log(format_args!("out[{i}]: cannot open the topic: {e}"));
                                return;
                            }
                        }
                    }
                }
            };
            let topic = source.topic();
            let parts: Vec<u32> = match &route.partitions {
                Some(p) => p.iter().copied().filter(|p| *p < topic.partitions()).collect(),
                None => (0..topic.partitions()).collect(),
            };
            if let Some(missing) = route.partitions.as_ref().filter(|p| p.len() != parts.len()) {
                shared.log(format_args!(
                    "out[{i}]: warning: the topic has {} partitions; ignoring those of {missing:?} beyond",
                    topic.partitions()
                ));
            }
            if let Source::Group(g) = &source {
                let unread: Vec<u32> = (0..topic.partitions()).filter(|p| !parts.contains(p)).collect();
                if !unread.is_empty() {
                    shared.log(format_args!(
                        "out[{i}]: warning: this route does not read partitions {unread:?} of consumer group {:?}: \
                         another member of the group (e.g. a bridge with the same group forwarding them) must, or \
                         the group's messages there fill its rings and hold the producers back",
                        g.name()
                    ));
                }
            }
            let delivery = topic.delivery();
            shared.log(format_args!(
                "out[{i}]: {}/{} partitions {parts:?} ({}, {}) -> {:?}",
                route.region,
                route.topic,
                if delivery == Delivery::AtLeastOnce {
                    "at-least-once, acknowledged"
                } else {
                    "at-most-once"
                },
                source.describe(&parts),
                route.key
            ));
            std::thread::scope(|s| {
                for p in parts {
                    let (shared, source, route, ledger, publisher) =
                        (&shared, &source, &route, &ledger, &publisher);
                    s.spawn(move || match delivery {
                        Delivery::AtLeastOnce => forward_acked(shared, source, p, route, ledger.as_deref()),
                        _ => forward_unacked(shared, source, p, route.batch, publisher, ledger.as_deref()),
                    });
                }
            });
            let _ = publisher.undeclare().wait();
            if let Source::Group(g) = source {
                let name = g.name().to_owned();
                match g.leave() {
                    Ok(true) => shared.log(format_args!(
                        "out[{i}]: left consumer group {name:?} (it keeps its position for the region's group lease)"
                    )),
                    // Unacknowledged at-least-once messages, held until the
                    // process exits, keep the membership: they are then
                    // delivered again within the group.
                    Ok(false) => {}
                    Err(e) => shared.log(format_args!("out[{i}]: leaving consumer group {name:?}: {e}")),
                }
            }
        })
    }

    fn start_incoming(
        &mut self,
        i: usize,
        route: &InRoute,
        topic: Topic,
        ledger: Option<Arc<Ledger>>,
    ) -> Result<()> {
        let keys = partition_keys(&topic)?;
        let shared = Arc::clone(&self.shared);
        let queryable = shared
            .session
            .declare_queryable(route.key.clone())
            .allowed_origin(Locality::Remote)
            .with(FifoChannel::new(64))
            .wait()
            .map_err(|e| {
                BridgeError::zenoh(&format!("in[{i}]: declaring the queryable on {:?}", route.key), e)
            })?;
        shared.log(format_args!("in[{i}]: {:?} -> {}/{}", route.key, route.region, route.topic));
        let importer = Arc::new(Importer { shared: Arc::clone(&shared), topic, keys, ledger });
        // Samples are published into the topic from Zenoh's receiving
        // thread, in arrival order, with no hand-off to another thread (a
        // full topic holds that thread: back-pressure to the sender).
        let imp = Arc::clone(&importer);
        let mut seqs: HashMap<(u64, u32), u64> = HashMap::new();
        let subscriber = shared
            .session
            .declare_subscriber(route.key.clone())
            .allowed_origin(Locality::Remote)
            .callback_mut(move |sample| imp.import_sample(&sample, &mut seqs))
            .wait()
            .map_err(|e| BridgeError::zenoh(&format!("in[{i}]: subscribing to {:?}", route.key), e))?;
        self.subscribers.push(subscriber);
        self.spawn(format!("in{i}-ack"), move || {
            let mut seqs: HashMap<(u64, u32), u64> = HashMap::new();
            while !importer.shared.stopped() {
                let query = match queryable.recv_timeout(TICK) {
                    Ok(Some(q)) => q,
                    Ok(None) => continue,
                    Err(_) => break,
                };
                importer.import_batch(&query, &mut seqs);
            }
            let _ = queryable.undeclare().wait();
        })
    }

    fn start_rpc_serve(&mut self, i: usize, route: RpcServeRoute) -> Result<()> {
        let shared = Arc::clone(&self.shared);
        let queryable = shared
            .session
            .declare_queryable(route.key.clone())
            .allowed_origin(Locality::Remote)
            .with(FifoChannel::new(256))
            .wait()
            .map_err(|e| {
                BridgeError::zenoh(&format!("rpc_serve[{i}]: declaring the queryable on {:?}", route.key), e)
            })?;
        shared.log(format_args!("rpc_serve[{i}]: local channel {:?} answers {:?}", route.channel, route.key));
        self.spawn(format!("rpc-serve{i}"), move || {
            let client: Mutex<Option<Arc<RpcBuffer>>> = Mutex::new(None);
            let timeout = Duration::from_millis(route.timeout_ms);
            std::thread::scope(|s| {
                for _ in 0..4 {
                    let (shared, queryable, client, route) = (&shared, &queryable, &client, &route);
                    s.spawn(move || {
                        while !shared.stopped() {
                            let query = match queryable.recv_timeout(TICK) {
                                Ok(Some(q)) => q,
                                Ok(None) => continue,
                                Err(_) => break,
                            };
                            let payload =
                                query.payload().map(|p| p.to_bytes().into_owned()).unwrap_or_default();
                            match call_local(client, &route.channel, &payload, timeout) {
                                Ok(response) => {
                                    bump(&shared.counters.rpc_served, 1);
                                    let _ = query.reply(query.key_expr().clone(), response).wait();
                                }
                                Err(text) => {
                                    bump(&shared.counters.rpc_failed, 1);
                                    let _ = query.reply_err(text).wait();
                                }
                            }
                        }
                    });
                }
            });
            let _ = queryable.undeclare().wait();
        })
    }
}

impl Drop for Bridge {
    fn drop(&mut self) {
        if !self.shared.stopped() {
            self.shutdown();
        }
    }
}

fn with_field(e: BridgeError, route: &str) -> BridgeError {
    match e {
        BridgeError::Tachyon(t) => BridgeError::invalid(route, t.to_string()),
        e => e,
    }
}

fn open_outgoing(route: &OutRoute) -> std::result::Result<Topic, TyError> {
    Region::open(&route.region)?.topic(&route.topic)
}

/// Where an out route takes its messages: a consumer group of its own
/// (every message, local consumers unaffected), or the topic's default
/// group (shared with local consumers of it).
enum Source {
    Default(Topic),
    Group(Group),
}

impl Source {
    /// Joins the route's group of `topic` (or checks that the topic has
    /// its default group); the error says what to change.
    fn open(topic: Topic, route: &OutRoute) -> std::result::Result<Source, String> {
        let Some(name) = route.group_name() else {
            if !topic.config().default_group_enabled() {
                return Err(format!(
                    "topic {:?} of region {:?} has no default group (it was created with \
                     TopicConfig::default_group(false)): leave `default_group` out, so that the route reads \
                     it through a consumer group of its own",
                    route.topic, route.region
                ));
            }
            return Ok(Source::Default(topic));
        };
        check_group_slots(topic.region(), route)?;
        // A group this join creates starts with what the topic still has
        // queued (its other groups' backlog, copied once), as MirrorMaker
        // with `auto.offset.reset = earliest`; a group that exists
        // continues from its position. Where the kernel refuses the
        // barrier that needs, from now on.
        let joined = match topic.join_group_from(name, JoinFrom::Oldest) {
            Err(TyError::Io { context, .. }) => {
                eprintln!(
                    "tachyon-bridge: topic {:?} of region {:?}: {context}; group {name:?} starts with the next message",
                    route.topic, route.region
                );
                topic.join_group(name)
            }
            r => r,
        };
        joined.map(Source::Group).map_err(|e| {
            format!(
                "cannot join consumer group {name:?} of topic {:?} of region {:?}: {e}",
                route.topic, route.region
            )
        })
    }

    fn topic(&self) -> &Topic {
        match self {
            Source::Default(t) => t,
            Source::Group(g) => g.topic(),
        }
    }

    fn receive(&self, p: u32, timeout: Option<Duration>) -> std::result::Result<Message, TyError> {
        match self {
            Source::Default(t) => t.receive(p, timeout),
            Source::Group(g) => g.receive(p, timeout),
        }
    }

    fn try_receive(&self, p: u32) -> std::result::Result<Option<Message>, TyError> {
        match self {
            Source::Default(t) => t.try_receive(p),
            Source::Group(g) => g.try_receive(p),
        }
    }

    /// For the log: which group, and how many messages wait for it in
    /// `parts` (a restarted bridge finds what was queued while it was away).
    fn describe(&self, parts: &[u32]) -> String {
        match self {
            Source::Default(_) => "the default group, shared with local consumers".to_owned(),
            Source::Group(g) => {
                let waiting: usize = parts.iter().filter_map(|p| g.depth(*p).ok()).sum();
                format!("consumer group {:?}, {waiting} messages waiting", g.name())
            }
        }
    }
}

/// A route that reads through a group of its own needs a region with
/// named group slots: no silent fallback to the default group (which
/// would compete with local consumers), an error saying what to do.
fn check_group_slots(region: &Region, route: &OutRoute) -> std::result::Result<(), String> {
    let Some(name) = route.group_name() else { return Ok(()) };
    let slots = region.config().max_groups;
    if slots >= 2 {
        return Ok(());
    }
    Err(format!(
        "region {:?} has no consumer-group slots (RegionConfig::max_groups is {slots}, at least 2 are needed), so \
         the route cannot read topic {:?} through a consumer group of its own ({name:?}): create the region with \
         max_groups of at least 2, or set `default_group = true` on the route (flag --out-default-group \
         {}/{}) to read through the topic's default group, competing with its local consumers \
         (docs/bridge.md, \"Consumer groups\")",
        route.region, route.topic, route.region, route.topic
    ))
}

fn open_incoming(route: &InRoute) -> Result<Topic> {
    let region = match Region::open(&route.region) {
        Ok(r) => r,
        Err(TyError::NotFound { .. }) => {
            let mut rc = RegionConfig::default().max_groups(route.max_groups.unwrap_or(DEFAULT_MAX_GROUPS));
            if let Some(size) = route.region_size {
                rc = rc.size(size);
            }
            Region::create_or_open(&route.region, rc)?
        }
        Err(e) => return Err(e.into()),
    };
    match region.topic(&route.topic) {
        Ok(t) => Ok(t),
        Err(TyError::TopicNotFound { .. }) => {
            let mut tc = TopicConfig::default().partitions(route.partitions.unwrap_or(1));
            if let Some(c) = route.capacity {
                tc = tc.capacity(c);
            }
            if let Some(d) = route.delivery.as_deref().and_then(parse_delivery) {
                tc = tc.delivery(d);
            }
            if let Some(on) = route.default_group {
                tc = tc.default_group(on);
            }
            Ok(region.create_or_open_topic(&route.topic, tc)?)
        }
        Err(e) => Err(e.into()),
    }
}

/// For each partition of `topic`, a key that maps to it: tachyon's
/// descriptors carry no key, so the bridge carries the partition and
/// publishes with a key of the same partition on the far side.
fn partition_keys(topic: &Topic) -> Result<Vec<Key>> {
    let n = topic.partitions() as usize;
    let mut keys: Vec<Option<Key>> = vec![None; n];
    let mut found = 0;
    for k in 0..(1u64 << 24) {
        let p = topic.partition_of(Key(k)) as usize;
        if keys[p].is_none() {
            keys[p] = Some(Key(k));
            found += 1;
            if found == n {
                return Ok(keys.into_iter().flatten().collect());
            }
        }
    }
    Err(BridgeError::invalid(topic.name(), "no key maps to one of the topic's partitions"))
}

// ---------------------------------------------------------------------------
// Outgoing

/// At-most-once: take, put, release. Nothing is sent twice. With `batch`
/// above 1, the messages queued behind the one taken (up to `batch`, and
/// 256 KiB) go with it as one sample.
fn forward_unacked(
    shared: &Shared,
    source: &Source,
    p: u32,
    batch: usize,
    publisher: &zenoh::pubsub::Publisher<'_>,
    ledger: Option<&Ledger>,
) {
    let topic = source.topic();
    let mut seq = 0u64;
    let mut matched = false;
    let mut checked = Instant::now() - TICK;
    while !shared.stopped() {
        // Take nothing while no remote subscriber listens (the far bridge
        // is not up, or the link is down): the messages wait in the topic
        // instead of being put into the void.
        if !matched || checked.elapsed() >= TICK {
            matched = publisher.matching_status().wait().map(|m| m.matching()).unwrap_or(false);
            checked = Instant::now();
            if !matched {
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
        }
        let msg = match source.receive(p, Some(TICK)) {
            Ok(m) => m,
            Err(e) if e.is_timeout() => continue,
            Err(e) => {
                shared.log(format_args!("out: partition {p} of {:?}: {e}", topic.name()));
                std::thread::sleep(TICK);
                continue;
            }
        };
        // The messages to send, held until they are put.
        let mut taken = Vec::new();
        let size = take_queued(shared, source, p, msg, batch, ledger, &mut taken);
        let (kind, bytes) = match taken.as_slice() {
            [] => continue,
            [one] => (Kind::Message, one.to_vec()),
            many => {
                let mut b = Vec::with_capacity(size);
                for m in many {
                    push_record(&mut b, m);
                }
                (Kind::Batch, b)
            }
        };
        let count = taken.len() as u32;
        let header = Header { kind, origin: shared.id, partition: p, count, seq };
        seq += u64::from(count);
        drop(taken);
        match publisher.put(bytes).attachment(header.encode().to_vec()).wait() {
            Ok(()) => {
                bump(&shared.counters.forwarded, u64::from(count));
                if kind == Kind::Batch {
                    bump(&shared.counters.batches_put, 1);
                }
            }
            Err(e) => {
                shared.log(format_args!("out: put on {:?} failed (message lost): {e}", publisher.key_expr()))
            }
        }
    }
}

/// Adds `first`, then what is queued behind it in partition `p` (taken
/// without waiting), to `into` until it holds `max` messages or 256 KiB;
/// echoes are counted and dropped. Returns the bytes added, 4 more per
/// message for a batch record's length.
fn take_queued(
    shared: &Shared,
    source: &Source,
    p: u32,
    first: Message,
    max: usize,
    ledger: Option<&Ledger>,
    into: &mut Vec<Message>,
) -> usize {
    let mut bytes = 0usize;
    let mut next = Some(first);
    while let Some(m) = next.take() {
        if is_echo(source.topic(), &m, ledger) {
            bump(&shared.counters.echoes, 1);
        } else {
            bytes += m.len() + 4;
            into.push(m);
        }
        if into.len() < max && bytes < 256 << 10 {
            next = source.try_receive(p).ok().flatten();
        }
    }
    bytes
}

fn is_echo(topic: &Topic, msg: &Message, ledger: Option<&Ledger>) -> bool {
    let Some(ledger) = ledger else { return false };
    match topic.chunk_index(msg.as_ptr()) {
        Some(chunk) => ledger.take(chunk, msg),
        None => false,
    }
}

/// At-least-once: a batch goes as one query; it is released only when the
/// far side has published it and replied.
fn forward_acked(shared: &Shared, source: &Source, p: u32, route: &OutRoute, ledger: Option<&Ledger>) {
    let topic = source.topic();
    let mut seq = 0u64;
    let mut pending: Vec<Message> = Vec::new();
    'outer: while !shared.stopped() {
        // Gather a batch: wait for the first message, then take what is there.
        let first = match source.receive(p, Some(TICK)) {
            Ok(m) => m,
            Err(e) if e.is_timeout() => continue,
            Err(e) => {
                shared.log(format_args!("out: partition {p} of {:?}: {e}", topic.name()));
                std::thread::sleep(TICK);
                continue;
            }
        };
        let bytes = take_queued(shared, source, p, first, route.max_batch, ledger, &mut pending);
        if pending.is_empty() {
            continue;
        }
        let mut batch = Vec::with_capacity(bytes);
        for m in &pending {
            push_record(&mut batch, m);
        }
        let header =
            Header { kind: Kind::Batch, origin: shared.id, partition: p, count: pending.len() as u32, seq };
        let mut backoff = Duration::from_millis(20);
        let mut tries = 0u32;
        loop {
            if send_batch(shared, route, &header, &batch) {
                break;
            }
            if shared.stopped() {
                break 'outer;
            }
            tries += 1;
            bump(&shared.counters.batches_resent, 1);
            if tries == 1 || tries % 50 == 0 {
                shared.log(format_args!(
                    "out: batch of {} on {:?} not acknowledged (try {tries}); sending it again",
                    pending.len(),
                    route.key
                ));
            }
            std::thread::sleep(backoff);
            backoff = (backoff * 2).min(Duration::from_secs(1));
        }
        seq += pending.len() as u64;
        bump(&shared.counters.forwarded, pending.len() as u64);
        bump(&shared.counters.batches_acked, 1);
        pending.clear(); // released: the far side has them
    }
    // Stopped with messages not acknowledged: keep them held by this
    // process, so that when it exits tachyon publishes them again (to the
    // next bridge) instead of losing them.
    for m in pending {
        std::mem::forget(m);
    }
}

/// One query; true when every replier published the batch (at least one).
fn send_batch(shared: &Shared, route: &OutRoute, header: &Header, batch: &[u8]) -> bool {
    let replies = match shared
        .session
        .get(route.key.as_str())
        .payload(batch.to_vec())
        .attachment(header.encode().to_vec())
        .target(QueryTarget::All)
        .consolidation(ConsolidationMode::None)
        .congestion_control(CongestionControl::Block)
        .allowed_destination(Locality::Remote)
        .timeout(route.ack_timeout())
        .wait()
    {
        Ok(r) => r,
        Err(e) => {
            shared.log(format_args!("out: query on {:?} failed: {e}", route.key));
            return false;
        }
    };
    let (mut ok, mut failed) = (0, 0);
    while let Ok(reply) = replies.recv() {
        match reply.result() {
            Ok(_) => ok += 1,
            Err(_) => failed += 1,
        }
    }
    ok > 0 && failed == 0
}

// ---------------------------------------------------------------------------
// Incoming

struct Importer {
    shared: Arc<Shared>,
    topic: Topic,
    keys: Vec<Key>,
    ledger: Option<Arc<Ledger>>,
}

/// What a message's sequence number says.
enum Seen {
    New,
    Duplicate,
}

/// Messages `seq .. seq + count` of `origin`'s partition `p`: a duplicate
/// if the first came already, else new (a gap before them is counted).
fn check_seq(
    seqs: &mut HashMap<(u64, u32), u64>,
    origin: u64,
    p: u32,
    seq: u64,
    count: u32,
    gaps: &AtomicU64,
) -> Seen {
    let next = seqs.entry((origin, p)).or_insert(seq);
    if seq < *next {
        return Seen::Duplicate;
    }
    if seq > *next {
        bump(gaps, seq - *next);
    }
    *next = seq + u64::from(count);
    Seen::New
}

impl Importer {
    fn key_for(&self, source_partition: u32) -> Key {
        self.keys[(source_partition as usize) & (self.keys.len() - 1)]
    }

    /// Publishes one message into the local topic, waiting (in ticks, so
    /// that a stop is noticed) while the topic is full: back-pressure.
    /// `deadline`: give up then (false).
    fn publish(&self, bytes: &[u8], key: Key, deadline: Option<Instant>) -> bool {
        loop {
            if self.shared.stopped() || deadline.is_some_and(|d| Instant::now() >= d) {
                return false;
            }
            let mut loan = match self.topic.loan(bytes.len(), Some(TICK)) {
                Ok(l) => l,
                Err(e) if e.is_timeout() || matches!(e, TyError::PoolExhausted { .. }) => continue,
                Err(e) => {
                    bump(&self.shared.counters.malformed, 1);
                    self.shared.log(format_args!(
                        "in: a message of {} bytes cannot go into {:?}: {e}",
                        bytes.len(),
                        self.topic.name()
                    ));
                    return true; // not retried: it will never fit
                }
            };
            loan.copy_from_slice(bytes);
            let chunk = self.ledger.as_ref().and_then(|l| {
                let c = self.topic.chunk_index(loan.as_ptr())?;
                l.record(c, bytes);
                Some(c)
            });
            match loan.publish(key, Some(TICK)) {
                Ok(()) => {
                    bump(&self.shared.counters.imported, 1);
                    return true;
                }
                Err(e) => {
                    if let (Some(l), Some(c)) = (&self.ledger, chunk) {
                        l.forget(c);
                    }
                    if !e.is_timeout() {
                        self.shared.log(format_args!("in: publishing into {:?}: {e}", self.topic.name()));
                        std::thread::sleep(TICK);
                    }
                }
            }
        }
    }

    fn import_sample(&self, sample: &zenoh::sample::Sample, seqs: &mut HashMap<(u64, u32), u64>) {
        let header = sample.attachment().and_then(|a| Header::decode(&a.to_bytes()));
        let bytes = sample.payload().to_bytes();
        let h = match header {
            // A plain Zenoh publisher (not a bridge): partition 0.
            None => {
                self.publish(&bytes, self.key_for(0), None);
                return;
            }
            Some(h) if h.origin == self.shared.id => {
                bump(&self.shared.counters.echoes, u64::from(h.count));
                return;
            }
            Some(h) => h,
        };
        // A batch is checked whole before anything of it is published.
        let records = match h.kind {
            Kind::Message => vec![&bytes[..]],
            Kind::Batch => match split_batch(&bytes, h.count) {
                Some(r) => r,
                None => {
                    bump(&self.shared.counters.malformed, 1);
                    return;
                }
            },
        };
        if let Seen::Duplicate =
            check_seq(seqs, h.origin, h.partition, h.seq, h.count, &self.shared.counters.gaps)
        {
            bump(&self.shared.counters.duplicates, u64::from(h.count));
            return;
        }
        let key = self.key_for(h.partition);
        for rec in records {
            self.publish(rec, key, None);
        }
    }

    fn import_batch(&self, query: &zenoh::query::Query, seqs: &mut HashMap<(u64, u32), u64>) {
        let header = query.attachment().and_then(|a| Header::decode(&a.to_bytes()));
        let Some(h) = header.filter(|h| h.kind == Kind::Batch && h.origin != self.shared.id) else {
            bump(&self.shared.counters.malformed, 1);
            let _ = query.reply_err("tachyon-bridge: not a bridge batch").wait();
            return;
        };
        let payload = query.payload().map(|p| p.to_bytes().into_owned()).unwrap_or_default();
        let Some(records) = split_batch(&payload, h.count) else {
            bump(&self.shared.counters.malformed, 1);
            let _ = query.reply_err("tachyon-bridge: a batch that does not parse").wait();
            return;
        };
        let key = self.key_for(h.partition);
        // Publish what is new; a batch sent again skips what is already in.
        let deadline = Instant::now() + Duration::from_secs(1);
        for (i, rec) in records.iter().enumerate() {
            let seq = h.seq + i as u64;
            if seqs.get(&(h.origin, h.partition)).is_some_and(|n| seq < *n) {
                bump(&self.shared.counters.duplicates, 1);
                continue;
            }
            if !self.publish(rec, key, Some(deadline)) {
                let _ = query.reply_err("tachyon-bridge: the local topic is full; send again").wait();
                return;
            }
            seqs.insert((h.origin, h.partition), seq + 1);
        }
        let _ = query.reply(query.key_expr().clone(), b"ack".to_vec()).wait();
    }
}

// ---------------------------------------------------------------------------
// RPC

/// One call through the local channel, opening it when needed; the error
/// text starts with what happened ("peer died", "timeout", "remote").
fn call_local(
    client: &Mutex<Option<Arc<RpcBuffer>>>,
    channel: &str,
    payload: &[u8],
    timeout: Duration,
) -> std::result::Result<Vec<u8>, String> {
    let c = {
        let mut guard = lock(client);
        if guard.as_ref().is_some_and(|c| c.closed().is_some()) {
            *guard = None;
        }
        match &*guard {
            Some(c) => Arc::clone(c),
            None => {
                let c = Arc::new(RpcBuffer::open(channel).map_err(|e| describe(&e, channel))?);
                *guard = Some(Arc::clone(&c));
                c
            }
        }
    };
    c.request(payload, Some(timeout)).map_err(|e| describe(&e, channel))
}

fn describe(e: &TyError, channel: &str) -> String {
    match e {
        TyError::PeerDied | TyError::Closed | TyError::NotFound { .. } => {
            format!("peer died: the server of channel {channel:?} is gone ({e})")
        }
        TyError::Timeout { .. } => format!("timeout: {e}"),
        TyError::Remote(text) => format!("remote: {text}"),
        e => format!("error: {e}"),
    }
}

fn start_rpc_call(shared: &Arc<Shared>, route: &RpcCallRoute) -> Result<RpcBuffer> {
    let sh = Arc::clone(shared);
    let key = route.key.clone();
    let timeout = Duration::from_millis(route.timeout_ms);
    let server = RpcBuffer::builder(&route.channel)
        .handler_threads(4)
        .default_timeout(timeout + Duration::from_secs(1))
        .handler(move |_id, payload: &[u8]| -> std::result::Result<Vec<u8>, String> {
            let r = call_remote(&sh, &key, payload, timeout);
            bump(if r.is_ok() { &sh.counters.rpc_called } else { &sh.counters.rpc_failed }, 1);
            r
        })
        .create()?;
    shared.log(format_args!("rpc_call: local channel {:?} calls {:?}", route.channel, route.key));
    Ok(server)
}

fn call_remote(
    shared: &Shared,
    key: &str,
    payload: &[u8],
    timeout: Duration,
) -> std::result::Result<Vec<u8>, String> {
    let start = Instant::now();
    let replies = shared
        .session
        .get(key)
        .payload(payload.to_vec())
        .target(QueryTarget::BestMatching)
        .consolidation(ConsolidationMode::None)
        .allowed_destination(Locality::Remote)
        .timeout(timeout)
        .wait()
        .map_err(|e| format!("error: zenoh: {e}"))?;
    match replies.recv() {
        Ok(reply) => match reply.into_result() {
            Ok(sample) => Ok(sample.payload().to_bytes().into_owned()),
            Err(e) => Err(String::from_utf8_lossy(&e.payload().to_bytes()).into_owned()),
        },
        Err(_) if start.elapsed() >= timeout => {
            Err(format!("timeout: no reply on {key:?} within {timeout:?}"))
        }
        Err(_) => {
            Err(format!("peer died: nothing answers on {key:?} (the far bridge or its server is gone)"))
        }
    }
}
