//! The topics group: round-trip latency of small messages
//! and one-way throughput of 1 KiB messages through tachyon topics, on the
//! copy path and the loan path, with spin, hybrid and futex waiting,
//! against a Unix domain socket, a pipe and a raw shared-memory ring
//! measured in the same run.
//!
//! **Latency** (ping-pong): a region with two topics, `ping` and `pong`,
//! one partition each. This process publishes a ping stamped with its
//! sequence number and waits for the pong; the peer receives the ping,
//! checks it, and publishes the same bytes as the pong. Each round trip is
//! timed here (`Instant` before the ping, after the pong is received and
//! released) into an `hdrhistogram`; this process compares every pong
//! with its ping byte for byte.
//!
//! **Throughput** (one way): a region with one topic, `data`; this process
//! publishes `warmup + count` messages, the peer receives and checks every
//! one and times the `count` after the warm-up with its own clock.
//!
//! Paths:
//!
//! * copy: `topic.send(&bytes, Key(key), timeout)` / `topic.recv_into(partition,
//!   &mut vec, timeout)`: one copy in, one copy out;
//! * loan: `topic.loan(len, timeout)`, the message written into the loan,
//!   `loan.publish(Key(key), timeout)` / `topic.receive(partition,
//!   timeout)`, the message read in place (every byte: a 64-bit XOR fold,
//!   or, for a pong, a compare), then dropped (released). The echoing peer
//!   copies the ping's view into the pong's loan.
//!
//! References, with the same byte counts and the same checks: a Unix
//! domain socket (`socketpair`) and a pipe (one per direction), one
//! blocking `write` and one blocking `read` per message; and the raw SPSC
//! ring of memcpys of the bandwidth group (`rawring.rs`), spinning.

use crate::charts::Chart;
use crate::kernel::{self, Kind};
use crate::latency::{self, Percentiles};
use crate::payload;
use crate::peer::{self, retry, Fault, Peer, Watchdog, STARTUP};
use crate::policy::Policy;
use crate::rawring::{self, Patience, RawRing};
use crate::stats::{self, Spread};
use crate::suite::{Common, Group};
use crate::throughput;
use clap::ValueEnum;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tachyon::bus::{Key, Region, RegionConfig, Topic, TopicConfig, CLASS_SIZES};
use tachyon::{CircularBuffer, Segment};

/// Every message is published with this key (one partition per topic).
pub(crate) const KEY: u64 = 0;
/// Where the raw ring's slots start in its segment.
const RAW_DATA_OFF: usize = 256;
/// Where the cache-line ping-pong's word sits in its segment.
const FLAG_OFF: usize = 0;

/// A way of moving messages between the two processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, ValueEnum)]
pub enum Via {
    /// Reference: the raw SPSC ring of memcpys, spinning (for latency: a
    /// spinning flag and a memcpy each way, the floor).
    RawRing,
    /// Reference, latency only: one cache line bounced between the two
    /// processes, no payload.
    Flag,
    /// Reference: a Unix domain socket pair.
    Unix,
    /// Reference: pipes.
    Pipe,
    /// Reference: TCP over loopback, `TCP_NODELAY`.
    Tcp,
    /// A topic, `send` / `recv_into`.
    Copy,
    /// A topic, `loan` / `publish` / `receive`.
    Loan,
    /// `CircularBuffer` `write` / `read` (a pair, one per direction, for
    /// latency).
    Cb,
    /// `RpcBuffer` request/response (latency only).
    Rpc,
    /// `RpcBuffer` request/response, the handler on the peer's reader
    /// thread (`RpcBuilder::inline_handlers`; latency only).
    RpcInline,
    /// iceoryx2 publish-subscribe (cargo feature `iceoryx2`), polling.
    #[cfg(feature = "iceoryx2")]
    Iceoryx2,
}

impl Via {
    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Via::RawRing => "raw-ring",
            Via::Flag => "flag",
            Via::Unix => "unix",
            Via::Pipe => "pipe",
            Via::Tcp => "tcp",
            Via::Copy => "copy",
            Via::Loan => "loan",
            Via::Cb => "cb",
            Via::Rpc => "rpc",
            Via::RpcInline => "rpc-inline",
            #[cfg(feature = "iceoryx2")]
            Via::Iceoryx2 => "iceoryx2",
        }
    }

    /// The label in tables.
    pub fn describe(self) -> &'static str {
        match self {
            Via::RawRing => "raw shared memory: spinning flag + memcpy each way (reference, floor)",
            Via::Flag => "bare cache-line ping-pong, no payload (reference)",
            Via::Unix => "Unix socket, write/read (reference)",
            Via::Pipe => "pipe, write/read (reference)",
            Via::Tcp => "TCP loopback, TCP_NODELAY, write/read (reference)",
            Via::Copy => "topic, copy path: `send`/`recv_into`",
            Via::Loan => "topic, loan path: `loan`+`publish`/`receive`",
            Via::Cb => "CircularBuffer `write`/`read`",
            Via::Rpc => "RpcBuffer `request` (echo handler)",
            Via::RpcInline => "RpcBuffer `request` (echo handler on the reader thread: `inline_handlers`)",
            #[cfg(feature = "iceoryx2")]
            Via::Iceoryx2 => "iceoryx2 0.10 publish-subscribe, loan + copy, polling (comparison)",
        }
    }

    /// The label in tables of `test`.
    pub fn describe_in(self, test: Test) -> &'static str {
        match (self, test) {
            (Via::RawRing, Test::Throughput) => "raw SPSC ring of memcpys, spinning (reference)",
            _ => self.describe(),
        }
    }

    /// A short label for charts.
    pub fn short(self) -> &'static str {
        match self {
            Via::RawRing => "raw shm",
            Via::Flag => "cache line",
            Via::Unix => "unix socket",
            Via::Pipe => "pipe",
            Via::Tcp => "tcp",
            Via::Copy => "topic copy",
            Via::Loan => "topic loan",
            Via::Cb => "CircularBuffer",
            Via::Rpc => "RpcBuffer",
            Via::RpcInline => "RpcBuffer inline",
            #[cfg(feature = "iceoryx2")]
            Via::Iceoryx2 => "iceoryx2",
        }
    }

    /// A tachyon transport, run with each wait policy.
    pub fn is_tachyon(self) -> bool {
        matches!(self, Via::Copy | Via::Loan | Via::Cb | Via::Rpc | Via::RpcInline)
    }

    fn is_topic(self) -> bool {
        matches!(self, Via::Copy | Via::Loan)
    }

    fn is_kernel(self) -> bool {
        matches!(self, Via::Unix | Via::Pipe | Via::Tcp)
    }

    /// Whether it measures `test`.
    pub fn does(self, test: Test) -> bool {
        test == Test::Latency || !matches!(self, Via::Flag | Via::Rpc | Via::RpcInline)
    }
}

/// What is measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, ValueEnum)]
pub enum Test {
    /// Ping-pong round trips.
    Latency,
    /// One-way stream.
    Throughput,
}

impl Test {
    /// `latency`, `throughput`.
    pub fn name(self) -> &'static str {
        match self {
            Test::Latency => "latency",
            Test::Throughput => "throughput",
        }
    }
}

/// One configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Case {
    /// Latency or throughput.
    pub test: Test,
    /// How.
    pub via: Via,
    /// The tachyon transport's wait policy (tachyon transports only).
    pub policy: Option<Policy>,
    /// Message bytes.
    pub size: usize,
    /// Partitions of the topic (throughput; 1 elsewhere).
    pub partitions: u32,
    /// Loan path only: the message is built in place by writing its
    /// sequence stamps only, and the receiver checks the stamps only: what
    /// the loan path costs apart from touching the payload.
    pub stamps_only: bool,
}

impl Case {
    /// A case of one partition that touches its whole payload.
    pub fn new(test: Test, via: Via, policy: Option<Policy>, size: usize) -> Case {
        Case { test, via, policy, size, partitions: 1, stamps_only: false }
    }

    /// The wait column: the policy, `spin` for the raw references,
    /// `kernel` for the kernel's.
    pub fn wait(&self) -> &'static str {
        match self.policy {
            Some(p) => p.name(),
            None if self.via.is_kernel() => "kernel",
            None => "spin",
        }
    }
}

impl std::fmt::Display for Case {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.test.name(), self.via.name())?;
        if let Some(p) = self.policy {
            write!(f, "/{}", p.name())?;
        }
        write!(f, " {}", stats::bytes(self.size as u64))?;
        if self.partitions > 1 {
            write!(f, " x{} partitions", self.partitions)?;
        }
        if self.stamps_only {
            write!(f, " stamps-only")?;
        }
        Ok(())
    }
}

/// What the user asked for.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Timed round trips per latency run.
    pub round_trips: u64,
    /// Timed messages per throughput run.
    pub messages: u64,
    /// Message size of the latency runs.
    pub latency_size: usize,
    /// Message sizes of the throughput runs.
    pub throughput_sizes: Vec<usize>,
    /// Wait policies of the topic runs.
    pub policies: Vec<Policy>,
    /// Transports.
    pub transports: Vec<Via>,
    /// Latency, throughput or both.
    pub tests: Vec<Test>,
    /// Descriptors per partition, and raw-ring and CircularBuffer slots
    /// for throughput.
    pub capacity: u32,
    /// Repetitions, stall timeout, placement.
    pub common: Common,
}

impl Settings {
    /// Timed messages (round trips) and warm-up messages of a run.
    pub fn counts(&self, test: Test) -> (u64, u64) {
        match test {
            Test::Latency => (self.round_trips, 100 + self.round_trips / 10),
            // Two laps of the ring, plus 5 %.
            Test::Throughput => (self.messages, 2 * u64::from(self.capacity) + self.messages / 20),
        }
    }
}

/// One measurement.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    /// What was measured.
    pub case: Case,
    /// Repetition (0-based).
    pub rep: usize,
    /// Timed messages (throughput) or round trips (latency).
    pub count: u64,
    /// Time they took.
    pub elapsed: Duration,
    /// Round trips (latency only).
    pub rtt: Option<Percentiles>,
}

impl Sample {
    /// Messages (or round trips) per second.
    pub fn rate(&self) -> f64 {
        self.count as f64 / self.elapsed.as_secs_f64().max(1e-12)
    }

    /// Payload bytes per nanosecond = GB/s.
    pub fn gbps(&self) -> f64 {
        (self.count * self.case.size as u64) as f64 / self.elapsed.as_nanos().max(1) as f64
    }
}

pub(crate) fn unique_name() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!("tachyon-bench-topics-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed))
}

/// A region sized for `topics` topics of `capacity` descriptors carrying
/// messages of `size` bytes: the pool has chunks only in the class of
/// `size`, enough for every descriptor of every topic plus the loans and
/// held messages in flight (at most 256 MiB of them; beyond that loans
/// wait for the consumer to release).
///
/// A ping-pong has at most one message per topic in flight: its pool gets
/// 16 chunks per topic.
pub(crate) fn region_config(size: usize, capacity: u32, topics: usize, ping_pong: bool) -> RegionConfig {
    let class = CLASS_SIZES.iter().position(|&c| c >= size).unwrap_or(CLASS_SIZES.len() - 1);
    let mut class_weights = [0u32; 8];
    class_weights[class] = 1;
    let chunk = CLASS_SIZES[class] + 16;
    let in_flight = if ping_pong { 16 } else { capacity as usize + 16 };
    let chunks = (topics * in_flight).min((256 << 20) / chunk).max(8);
    let ring_arena = (topics * (192 + 16 * capacity as usize)).div_ceil(64) * 64 + 4096;
    let size = (chunks * chunk + ring_arena + (2 << 20)).div_ceil(1 << 20) << 20;
    RegionConfig::default()
        .size(size.max(4 << 20))
        .max_topics(4)
        .ring_arena(ring_arena)
        .class_weights(class_weights)
}

/// Removes a region's name when dropped (regions are persistent).
pub(crate) struct RemoveRegion<'a>(pub(crate) &'a str);

impl Drop for RemoveRegion<'_> {
    fn drop(&mut self) {
        let _ = Region::remove(self.0);
    }
}

/// Publishes a message through a loan: `fill` writes it in place. Every
/// wait is bounded as in [`retry`]; a publish that times out gave its
/// chunk back, so the message is built again in a new loan.
#[inline]
fn publish_loan(
    topic: &Topic,
    len: usize,
    fill: impl FnMut(&mut [u8]),
    stall: Duration,
    check: &mut dyn FnMut() -> Result<(), String>,
) -> Result<(), String> {
    publish_loan_key(topic, len, KEY, fill, stall, check)
}

/// [`publish_loan`] with a key.
#[inline]
fn publish_loan_key(
    topic: &Topic,
    len: usize,
    key: u64,
    mut fill: impl FnMut(&mut [u8]),
    stall: Duration,
    check: &mut dyn FnMut() -> Result<(), String>,
) -> Result<(), String> {
    // The clock is read only once a publish had to wait (as `retry` does):
    // a clock read per message would cost the loan path alone ~25 ns.
    let mut start = None;
    loop {
        let mut loan = retry(|t| topic.loan(len, t), stall, check, "no chunk came free in the pool")?;
        fill(&mut loan);
        match loan.publish(Key(key), Some(peer::SLICE)) {
            Ok(()) => return Ok(()),
            Err(tachyon::Error::Timeout { .. }) => {
                check()?;
                if start.get_or_insert_with(Instant::now).elapsed() >= stall {
                    return Err(format!("waited {stall:?}: the partition stayed full"));
                }
            }
            Err(e) => return Err(e.to_string()),
        }
    }
}

/// One key per partition: message `seq` goes with key `keys[seq %
/// partitions]` to partition `seq % partitions`, so a consumer that reads
/// the partitions in turn sees the messages in sequence order.
fn partition_keys(topic: &Topic) -> Vec<u64> {
    let n = topic.partitions();
    let mut keys = vec![None; n as usize];
    let mut k = 0u64;
    while keys.iter().any(Option::is_none) {
        let p = topic.partition_of(Key(k)) as usize;
        if keys[p].is_none() {
            keys[p] = Some(k);
        }
        k += 1;
    }
    keys.into_iter().flatten().collect()
}

/// Checks that a pong equals its ping.
pub(crate) fn same(pong: &[u8], ping: &[u8], seq: u64) -> Result<(), String> {
    if pong == ping {
        return Ok(());
    }
    if pong.len() != ping.len() {
        return Err(format!("a pong of {} bytes to a ping of {}", pong.len(), ping.len()));
    }
    payload::check(pong, seq)?;
    Err(format!("pong {seq} differs from its ping (damaged)"))
}

pub(crate) fn peer_args(case: Case, settings: &Settings, count: u64, warmup: u64) -> Vec<String> {
    let mut args: Vec<String> = vec![
        "peer".into(),
        "topics".into(),
        "--test".into(),
        case.test.name().into(),
        "--via".into(),
        case.via.name().into(),
        "--size".into(),
        case.size.to_string(),
        "--count".into(),
        count.to_string(),
        "--warmup".into(),
        warmup.to_string(),
        "--capacity".into(),
        settings.capacity.to_string(),
        "--partitions".into(),
        case.partitions.to_string(),
        "--stall-ms".into(),
        settings.common.stall.as_millis().to_string(),
        "--parent".into(),
        std::process::id().to_string(),
    ];
    if let Some(cpu) = settings.common.placement.reader() {
        args.extend(["--cpu".into(), cpu.to_string()]);
    }
    if let Some(p) = case.policy {
        args.extend(["--policy".into(), p.name().into()]);
    }
    if case.stamps_only {
        args.push("--stamps-only".into());
    }
    args
}

/// Waits for the peer's `done <nanoseconds>` and its exit.
pub(crate) fn collect(mut peer: Peer, stall: Duration) -> Result<Duration, String> {
    let done = peer.expect("done", stall + STARTUP)?;
    peer.finish(STARTUP)?;
    let nanos: u64 = done.parse().map_err(|_| format!("the peer reported {done:?}, not a duration"))?;
    Ok(Duration::from_nanos(nanos))
}

/// Runs one repetition of one case.
pub fn run(case: Case, settings: &Settings, rep: usize) -> Result<Sample, String> {
    let (count, warmup) = settings.counts(case.test);
    if matches!(case.via, Via::Rpc | Via::RpcInline) {
        return rpc_run(case, settings, rep);
    }
    if case.stamps_only && case.via != Via::Loan {
        return Err("only the loan path can leave the payload untouched".into());
    }
    let (elapsed, rtt) = match case.via {
        Via::Copy | Via::Loan => topic_run(case, settings, count, warmup)?,
        Via::RawRing => raw_run(case, settings, count, warmup)?,
        Via::Flag => flag_run(case, settings, count, warmup)?,
        Via::Cb => cb_run(case, settings, count, warmup)?,
        Via::Unix | Via::Pipe | Via::Tcp => kernel_run(case, settings, count, warmup)?,
        Via::Rpc | Via::RpcInline => unreachable!("handled above"),
        #[cfg(feature = "iceoryx2")]
        Via::Iceoryx2 => iceoryx_run(case, settings, count, warmup)?,
    };
    Ok(Sample { case, rep, count, elapsed, rtt })
}

type Measured = (Duration, Option<Percentiles>);

fn topic_run(case: Case, settings: &Settings, count: u64, warmup: u64) -> Result<Measured, String> {
    let stall = settings.common.stall;
    let total = warmup + count;
    let size = case.size;
    let policy = case.policy.unwrap_or(Policy::Hybrid);
    let cfg = TopicConfig::default()
        .partitions(case.partitions)
        .capacity(settings.capacity)
        .wait(policy.wait_policy());
    let name = unique_name();
    let topics = if case.test == Test::Latency { 2 } else { 1 };
    let region = Region::create(
        &name,
        region_config(size, settings.capacity, topics * cfg.partitions as usize, case.test == Test::Latency),
    )
    .map_err(|e| format!("cannot create the region: {e}"))?;
    let _remove = RemoveRegion(&name);
    let topic = |t: &str| region.create_topic(t, cfg).map_err(|e| format!("cannot create topic {t}: {e}"));
    let mut args = peer_args(case, settings, count, warmup);
    args.extend(["--name".into(), name.clone()]);
    let template = payload::buffer(size);
    let mut buf = template.clone();
    match case.test {
        Test::Latency => {
            let (ping, pong) = (topic("ping")?, topic("pong")?);
            let from = pong.partition_of(Key(KEY));
            let mut peer = Peer::spawn(&args)?;
            peer.expect("ready", STARTUP)?;
            let mut got = Vec::with_capacity(size);
            let r = {
                let mut check = || peer.check_alive();
                latency::timed(total, warmup, "round trip", |seq| {
                    payload::stamp(&mut buf, seq);
                    if case.via == Via::Copy {
                        retry(
                            |t| ping.send(&buf, Key(KEY), t),
                            stall,
                            &mut check,
                            "the ping partition stayed full",
                        )?;
                        retry(|t| pong.recv_into(from, &mut got, t), stall, &mut check, "no pong came")?;
                        same(&got, &buf, seq)
                    } else if case.stamps_only {
                        publish_loan(&ping, size, |loan| payload::stamp(loan, seq), stall, &mut check)?;
                        let msg = retry(|t| pong.receive(from, t), stall, &mut check, "no pong came")?;
                        payload::check(&msg, seq)
                            .map_err(|e| format!("pong {seq} differs from its ping: {e}"))
                    } else {
                        let fill = |loan: &mut [u8]| {
                            loan.copy_from_slice(&template);
                            payload::stamp(loan, seq);
                        };
                        publish_loan(&ping, size, fill, stall, &mut check)?;
                        let msg = retry(|t| pong.receive(from, t), stall, &mut check, "no pong came")?;
                        let r = same(&msg, &buf, seq);
                        drop(msg);
                        r
                    }
                })?
            };
            collect(peer, stall)?;
            Ok((r.0, Some(r.1)))
        }
        Test::Throughput => {
            let data = topic("data")?;
            let keys = partition_keys(&data);
            let mut peer = Peer::spawn(&args)?;
            peer.expect("ready", STARTUP)?;
            {
                let mut check = || peer.check_alive();
                for seq in 0..total {
                    let key = keys[(seq % keys.len() as u64) as usize];
                    if case.via == Via::Copy {
                        payload::stamp(&mut buf, seq);
                        retry(
                            |t| data.send(&buf, Key(key), t),
                            stall,
                            &mut check,
                            "the partition stayed full",
                        )
                    } else if case.stamps_only {
                        publish_loan_key(
                            &data,
                            size,
                            key,
                            |loan| payload::stamp(loan, seq),
                            stall,
                            &mut check,
                        )
                    } else {
                        let fill = |loan: &mut [u8]| {
                            loan.copy_from_slice(&template);
                            payload::stamp(loan, seq);
                        };
                        publish_loan_key(&data, size, key, fill, stall, &mut check)
                    }
                    .map_err(|e| format!("producer, message {seq}: {e}"))?;
                }
            }
            Ok((collect(peer, stall)?, None))
        }
    }
}

fn raw_run(case: Case, settings: &Settings, count: u64, warmup: u64) -> Result<Measured, String> {
    let stall = settings.common.stall;
    let total = warmup + count;
    let size = case.size;
    let name = unique_name();
    let mut args = peer_args(case, settings, count, warmup);
    args.extend(["--name".into(), name.clone()]);
    let mut buf = payload::buffer(size);
    match case.test {
        Test::Latency => {
            let to = RawRing::create(&format!("{name}-a"), 2, size, RAW_DATA_OFF)?;
            let from = RawRing::create(&format!("{name}-b"), 2, size, RAW_DATA_OFF)?;
            let mut peer = Peer::spawn(&args)?;
            peer.expect("ready", STARTUP)?;
            let mut got = payload::buffer(size);
            let r = {
                let mut writer = rawring::Writer::new(&to)?;
                let mut reader = rawring::Reader::new(&from)?;
                let mut check = || peer.check_alive();
                let mut patience = Patience::new(stall, &mut check);
                latency::timed(total, warmup, "round trip", |seq| {
                    payload::stamp(&mut buf, seq);
                    writer.push(&buf, &mut patience)?;
                    reader.pop(&mut got, &mut patience)?;
                    same(&got, &buf, seq)
                })?
            };
            collect(peer, stall)?;
            Ok((r.0, Some(r.1)))
        }
        Test::Throughput => {
            let ring = RawRing::create(&name, settings.capacity as usize, size, RAW_DATA_OFF)?;
            let mut peer = Peer::spawn(&args)?;
            peer.expect("ready", STARTUP)?;
            {
                let mut writer = rawring::Writer::new(&ring)?;
                let mut check = || peer.check_alive();
                let mut patience = Patience::new(stall, &mut check);
                for seq in 0..total {
                    writer.push(&buf, &mut patience).map_err(|e| format!("producer, message {seq}: {e}"))?;
                }
            }
            Ok((collect(peer, stall)?, None))
        }
    }
}

/// The bare cache-line ping-pong: this process stores `2 seq + 1` into one
/// shared word and spins until the peer has stored `2 seq + 2`.
fn flag_run(case: Case, settings: &Settings, count: u64, warmup: u64) -> Result<Measured, String> {
    if case.test != Test::Latency {
        return Err("the cache-line ping-pong measures latency only".into());
    }
    let stall = settings.common.stall;
    let name = unique_name();
    let seg = Segment::create(&name, 256).map_err(|e| format!("cannot create the flag segment: {e}"))?;
    let flag = seg.get::<AtomicU64>(FLAG_OFF).map_err(|e| format!("flag: {e}"))?;
    let mut args = peer_args(case, settings, count, warmup);
    args.extend(["--name".into(), name.clone()]);
    let mut peer = Peer::spawn(&args)?;
    peer.expect("ready", STARTUP)?;
    let r = {
        let mut check = || peer.check_alive();
        let mut patience = Patience::new(stall, &mut check);
        latency::timed(warmup + count, warmup, "round trip", |seq| {
            flag.store(2 * seq + 1, Ordering::Release);
            let mut seen = 2 * seq + 1;
            if flag.load(Ordering::Acquire) == seen {
                patience.spin_until("no pong came", || {
                    seen = flag.load(Ordering::Acquire);
                    seen != 2 * seq + 1
                })?;
            } else {
                seen = flag.load(Ordering::Acquire);
            }
            if seen != 2 * seq + 2 {
                return Err(format!("pong {seq} differs from its ping: the flag says {seen}"));
            }
            Ok(())
        })?
    };
    collect(peer, stall)?;
    Ok((r.0, Some(r.1)))
}

/// `CircularBuffer` `write` / `read`: for latency a pair (ping, pong) of
/// `capacity` nodes each, for throughput one ring of `capacity` nodes.
fn cb_run(case: Case, settings: &Settings, count: u64, warmup: u64) -> Result<Measured, String> {
    let stall = settings.common.stall;
    let total = warmup + count;
    let size = case.size;
    let name = unique_name();
    let policy = case.policy.unwrap_or(Policy::Hybrid).wait_policy();
    let ring = |n: &str| {
        CircularBuffer::builder(n)
            .node_count(settings.capacity as usize)
            .node_size(size)
            .wait_policy(policy)
            .create()
            .map_err(|e| format!("cannot create the CircularBuffer {n}: {e}"))
    };
    let mut args = peer_args(case, settings, count, warmup);
    args.extend(["--name".into(), name.clone()]);
    let mut buf = payload::buffer(size);
    match case.test {
        Test::Latency => {
            let (ping, pong) = (ring(&format!("{name}-a"))?, ring(&format!("{name}-b"))?);
            let mut peer = Peer::spawn(&args)?;
            peer.expect("ready", STARTUP)?;
            let mut got = payload::buffer(size);
            let r = {
                let mut check = || peer.check_alive();
                latency::timed(total, warmup, "round trip", |seq| {
                    payload::stamp(&mut buf, seq);
                    retry(|t| ping.write(&buf, t), stall, &mut check, "the ping ring stayed full")?;
                    let n = retry(|t| pong.read(&mut got, t), stall, &mut check, "no pong came")?;
                    same(&got[..n], &buf, seq)
                })?
            };
            collect(peer, stall)?;
            Ok((r.0, Some(r.1)))
        }
        Test::Throughput => {
            let data = ring(&name)?;
            let mut peer = Peer::spawn(&args)?;
            peer.expect("ready", STARTUP)?;
            {
                let mut check = || peer.check_alive();
                for seq in 0..total {
                    payload::stamp(&mut buf, seq);
                    retry(|t| data.write(&buf, t), stall, &mut check, "the ring stayed full")
                        .map_err(|e| format!("producer, message {seq}: {e}"))?;
                }
            }
            Ok((collect(peer, stall)?, None))
        }
    }
}

/// `RpcBuffer` request/response of `size` bytes, measured by the rpc
/// group's code (one packet per message, the default node size or larger).
fn rpc_run(case: Case, settings: &Settings, rep: usize) -> Result<Sample, String> {
    if case.test != Test::Latency {
        return Err("RpcBuffer is measured for latency only".into());
    }
    let policy = case.policy.unwrap_or(Policy::Hybrid);
    let shape = crate::rpc::Shape {
        msg: case.size,
        node: (case.size + crate::rpc::HEADER).max(4096),
        nodes: 64,
        dotnet: "–",
    };
    let rpc = crate::rpc::Settings {
        calls: settings.round_trips,
        large_calls: settings.round_trips,
        policies: vec![policy],
        transports: vec![crate::rpc::Transport::Rpc],
        common: settings.common,
    };
    let via = crate::rpc::Via::Rpc(policy, shape, case.via == Via::RpcInline);
    let s = crate::rpc::run(crate::rpc::Case { via }, &rpc, rep)?;
    Ok(Sample { case, rep, count: s.calls, elapsed: s.elapsed, rtt: Some(s.rtt) })
}

/// iceoryx2 publish-subscribe (see `iceoryx.rs`).
#[cfg(feature = "iceoryx2")]
fn iceoryx_run(case: Case, settings: &Settings, count: u64, warmup: u64) -> Result<Measured, String> {
    use crate::iceoryx::Ports;
    let stall = settings.common.stall;
    let total = warmup + count;
    let size = case.size;
    let name = unique_name();
    let mut args = peer_args(case, settings, count, warmup);
    args.extend(["--name".into(), name.clone()]);
    let mut buf = payload::buffer(size);
    match case.test {
        Test::Latency => {
            let ports = Ports::open(&name, Some("ping"), Some("pong"), size, 2, stall)?;
            let mut peer = Peer::spawn(&args)?;
            peer.expect("ready", STARTUP)?;
            let r = {
                let mut check = || peer.check_alive();
                let mut patience = Patience::new(stall, &mut check);
                ports.wait_for_subscriber(&mut patience)?;
                latency::timed(total, warmup, "round trip", |seq| {
                    payload::stamp(&mut buf, seq);
                    ports.send(&buf)?;
                    ports.receive(&mut patience, "no pong came", |m| same(m, &buf, seq))?
                })?
            };
            collect(peer, stall)?;
            Ok((r.0, Some(r.1)))
        }
        Test::Throughput => {
            let ports = Ports::open(&name, Some("data"), None, size, settings.capacity as usize, stall)?;
            let mut peer = Peer::spawn(&args)?;
            peer.expect("ready", STARTUP)?;
            {
                let mut check = || peer.check_alive();
                let mut patience = Patience::new(stall, &mut check);
                ports.wait_for_subscriber(&mut patience)?;
                for seq in 0..total {
                    payload::stamp(&mut buf, seq);
                    ports.send(&buf).map_err(|e| format!("producer, message {seq}: {e}"))?;
                }
            }
            Ok((collect(peer, stall)?, None))
        }
    }
}

fn kernel_run(case: Case, settings: &Settings, count: u64, warmup: u64) -> Result<Measured, String> {
    let stall = settings.common.stall;
    let total = warmup + count;
    let size = case.size;
    let kind = match case.via {
        Via::Unix => Kind::Unix,
        Via::Tcp => Kind::Tcp,
        _ => Kind::Pipe,
    };
    let duplex = case.test == Test::Latency;
    let (link, ends) = kernel::link(kind, duplex)?;
    let mut args = peer_args(case, settings, count, warmup);
    args.extend(ends.args.iter().cloned());
    let mut peer = Peer::spawn(&args)?;
    drop(ends);
    peer.expect("ready", STARTUP)?;
    let mut buf = payload::buffer(size);
    let r = {
        let watchdog = Watchdog::start(peer.pid(), stall)?;
        let mut tx = &link.tx;
        match case.test {
            Test::Latency => {
                let mut rx = link.rx.as_ref().ok_or("no receiving end")?;
                let mut got = payload::buffer(size);
                let (elapsed, rtt) = latency::timed(total, warmup, "round trip", |seq| {
                    payload::stamp(&mut buf, seq);
                    tx.write_all(&buf).map_err(|e| watchdog.explain(e, stall, "writing the ping"))?;
                    rx.read_exact(&mut got).map_err(|e| watchdog.explain(e, stall, "reading the pong"))?;
                    watchdog.progress(seq);
                    same(&got, &buf, seq)
                })?;
                (Some(elapsed), Some(rtt))
            }
            Test::Throughput => {
                for seq in 0..total {
                    payload::stamp(&mut buf, seq);
                    tx.write_all(&buf).map_err(|e| {
                        format!("producer, message {seq}: {}", watchdog.explain(e, stall, "writing"))
                    })?;
                    watchdog.progress(seq);
                }
                (None, None)
            }
        }
    };
    // End-of-file for the peer.
    drop(link);
    let reported = collect(peer, stall)?;
    Ok((r.0.unwrap_or(reported), r.1))
}

/// The topics peer's arguments (`tachyon-bench peer topics ...`).
#[derive(Debug, clap::Args)]
pub struct PeerArgs {
    /// Latency (echo) or throughput (consume).
    #[arg(long, value_enum)]
    pub test: Test,
    /// How the messages come.
    #[arg(long, value_enum)]
    pub via: Via,
    /// Message bytes.
    #[arg(long)]
    pub size: usize,
    /// Timed messages.
    #[arg(long)]
    pub count: u64,
    /// Messages before the clock starts (at least 1).
    #[arg(long)]
    pub warmup: u64,
    /// Raw-ring slots (throughput).
    #[arg(long)]
    pub capacity: usize,
    /// Partitions of the topic (throughput).
    #[arg(long, default_value_t = 1)]
    pub partitions: u32,
    /// Loan path: check the sequence stamps only.
    #[arg(long)]
    pub stamps_only: bool,
    /// Wait policy (CircularBuffer).
    #[arg(long, value_enum)]
    pub policy: Option<Policy>,
    /// Longest wait for one message, in milliseconds.
    #[arg(long)]
    pub stall_ms: u64,
    /// The benchmark process; the peer dies with it.
    #[arg(long)]
    pub parent: u32,
    /// CPU to pin to.
    #[arg(long)]
    pub cpu: Option<usize>,
    /// Region or raw-ring name.
    #[arg(long)]
    pub name: Option<String>,
    /// Descriptor to read from (pipe, socket).
    #[arg(long)]
    pub fd_in: Option<i32>,
    /// Descriptor to write to (pipe, socket).
    #[arg(long)]
    pub fd_out: Option<i32>,
}

/// The topics peer: echoes (latency) or consumes, checks and times
/// (throughput) the benchmark process's messages; says `ready`, then
/// `done <nanoseconds>` (0 for latency, timed here).
pub fn peer(a: PeerArgs) -> Result<(), String> {
    peer::start(a.parent, a.cpu)?;
    if a.warmup == 0 || a.size < payload::MIN_ITEM {
        return Err("--warmup must be at least 1 and --size at least 16".into());
    }
    let stall = Duration::from_millis(a.stall_ms);
    let total = a.warmup + a.count;
    let fault = Fault::from_env();
    // The parent's death kills us (PR_SET_PDEATHSIG): nothing to check.
    let mut check = || Ok(());
    let name = || a.name.clone().ok_or_else(|| "--name is required".to_owned());
    let mut buf = payload::buffer(a.size);
    let elapsed = match a.via {
        Via::Copy | Via::Loan => {
            let name = name()?;
            let region = Region::open(&name).map_err(|e| format!("cannot open the region {name}: {e}"))?;
            let topic = |t: &str| region.topic(t).map_err(|e| format!("cannot open topic {t}: {e}"));
            match a.test {
                Test::Latency => {
                    let (ping, pong) = (topic("ping")?, topic("pong")?);
                    let from = ping.partition_of(Key(KEY));
                    println!("ready");
                    for seq in 0..total {
                        let lose = fault.at(seq);
                        let echo = if a.via == Via::Copy {
                            retry(|t| ping.recv_into(from, &mut buf, t), stall, &mut check, "no ping came")
                                .and_then(|_| payload::check(&buf, seq))
                                .and_then(|()| {
                                    if lose {
                                        payload::damage(&mut buf);
                                    }
                                    retry(
                                        |t| pong.send(&buf, Key(KEY), t),
                                        stall,
                                        &mut check,
                                        "the pong partition stayed full",
                                    )
                                })
                        } else if a.stamps_only {
                            retry(|t| ping.receive(from, t), stall, &mut check, "no ping came").and_then(
                                |msg| {
                                    payload::check(&msg, seq)?;
                                    let stamp = if lose { seq + 1 } else { seq };
                                    let fill = |loan: &mut [u8]| payload::stamp(loan, stamp);
                                    publish_loan(&pong, msg.len(), fill, stall, &mut check)
                                },
                            )
                        } else {
                            retry(|t| ping.receive(from, t), stall, &mut check, "no ping came").and_then(
                                |msg| {
                                    payload::check(&msg, seq)?;
                                    let fill = |loan: &mut [u8]| {
                                        loan.copy_from_slice(&msg);
                                        if lose {
                                            payload::damage(loan);
                                        }
                                    };
                                    publish_loan(&pong, msg.len(), fill, stall, &mut check)
                                },
                            )
                        };
                        echo.map_err(|e| format!("echo, round trip {seq}: {e}"))?;
                    }
                    Duration::ZERO
                }
                Test::Throughput => {
                    let data = topic("data")?;
                    let partitions = u64::from(data.partitions());
                    println!("ready");
                    let mut sink = 0u64;
                    let t = throughput::timed(total, a.warmup, |seq| {
                        // See `partition_keys`: the producer sends message
                        // `seq` to partition `seq % partitions`.
                        let from = (seq % partitions) as u32;
                        if a.via == Via::Copy {
                            retry(
                                |t| data.recv_into(from, &mut buf, t),
                                stall,
                                &mut check,
                                "no message came",
                            )?;
                            payload::check(&buf, seq)
                        } else {
                            let msg = retry(|t| data.receive(from, t), stall, &mut check, "no message came")?;
                            if !a.stamps_only {
                                sink ^= payload::fold(&msg);
                            }
                            payload::check(&msg, seq)
                        }
                    })?;
                    std::hint::black_box(sink);
                    t
                }
            }
        }
        Via::Flag => {
            let name = name()?;
            let seg =
                Segment::open(&name).map_err(|e| format!("cannot open the flag segment {name}: {e}"))?;
            let flag = seg.get::<AtomicU64>(FLAG_OFF).map_err(|e| format!("flag: {e}"))?;
            let mut patience = Patience::new(stall, &mut check);
            println!("ready");
            for seq in 0..total {
                let lose = fault.at(seq);
                let ping = 2 * seq + 1;
                let mut seen = flag.load(Ordering::Acquire);
                if seen != ping {
                    patience
                        .spin_until("no ping came", || {
                            seen = flag.load(Ordering::Acquire);
                            seen != 2 * seq
                        })
                        .map_err(|e| format!("echo, round trip {seq}: {e}"))?;
                }
                if seen != ping {
                    return Err(format!(
                        "echo, round trip {seq}: expected ping {ping}, the flag says {seen}"
                    ));
                }
                flag.store(if lose { ping + 3 } else { ping + 1 }, Ordering::Release);
            }
            Duration::ZERO
        }
        Via::Cb => {
            let name = name()?;
            let policy = a.policy.unwrap_or(Policy::Hybrid).wait_policy();
            let open = |n: &str| {
                let ring = CircularBuffer::builder(n)
                    .wait_policy(policy)
                    .open()
                    .map_err(|e| format!("cannot open the CircularBuffer {n}: {e}"))?;
                if ring.node_size() != a.size {
                    return Err(format!("{n} has nodes of {} bytes, expected {}", ring.node_size(), a.size));
                }
                Ok(ring)
            };
            let got = |n: usize| {
                if n == a.size {
                    Ok(())
                } else {
                    Err(format!("an item of {n} bytes, expected {}", a.size))
                }
            };
            match a.test {
                Test::Latency => {
                    let (ping, pong) = (open(&format!("{name}-a"))?, open(&format!("{name}-b"))?);
                    println!("ready");
                    for seq in 0..total {
                        let lose = fault.at(seq);
                        retry(|t| ping.read(&mut buf, t), stall, &mut check, "no ping came")
                            .and_then(got)
                            .and_then(|()| payload::check(&buf, seq))
                            .and_then(|()| {
                                if lose {
                                    payload::damage(&mut buf);
                                }
                                retry(|t| pong.write(&buf, t), stall, &mut check, "the pong ring stayed full")
                            })
                            .map_err(|e| format!("echo, round trip {seq}: {e}"))?;
                    }
                    Duration::ZERO
                }
                Test::Throughput => {
                    let data = open(&name)?;
                    println!("ready");
                    throughput::timed(total, a.warmup, |seq| {
                        let n = retry(|t| data.read(&mut buf, t), stall, &mut check, "no message came")?;
                        got(n)?;
                        payload::check(&buf, seq)
                    })?
                }
            }
        }
        Via::Rpc | Via::RpcInline => return Err("the RpcBuffer peer is `peer rpc`".into()),
        #[cfg(feature = "iceoryx2")]
        Via::Iceoryx2 => {
            use crate::iceoryx::{check as ice_check, Ports};
            let name = name()?;
            let mut patience = Patience::new(stall, &mut check);
            match a.test {
                Test::Latency => {
                    let ports = Ports::open(&name, Some("pong"), Some("ping"), a.size, 2, stall)?;
                    ports.wait_for_subscriber(&mut patience)?;
                    println!("ready");
                    for seq in 0..total {
                        let lose = fault.at(seq);
                        ports
                            .receive(&mut patience, "no ping came", |m| {
                                buf.copy_from_slice(&m[..a.size.min(m.len())]);
                                ice_check(m, a.size, seq)
                            })
                            .and_then(|r| r)
                            .and_then(|()| {
                                if lose {
                                    payload::damage(&mut buf);
                                }
                                ports.send(&buf)
                            })
                            .map_err(|e| format!("echo, round trip {seq}: {e}"))?;
                    }
                    Duration::ZERO
                }
                Test::Throughput => {
                    let ports = Ports::open(&name, None, Some("data"), a.size, a.capacity, stall)?;
                    println!("ready");
                    throughput::timed(total, a.warmup, |seq| {
                        ports.receive(&mut patience, "no message came", |m| ice_check(m, a.size, seq))?
                    })?
                }
            }
        }
        Via::RawRing => {
            let name = name()?;
            let mut patience = Patience::new(stall, &mut check);
            match a.test {
                Test::Latency => {
                    let from = RawRing::open(&format!("{name}-a"), 2, a.size, RAW_DATA_OFF)?;
                    let to = RawRing::open(&format!("{name}-b"), 2, a.size, RAW_DATA_OFF)?;
                    let mut reader = rawring::Reader::new(&from)?;
                    let mut writer = rawring::Writer::new(&to)?;
                    println!("ready");
                    for seq in 0..total {
                        let lose = fault.at(seq);
                        reader
                            .pop(&mut buf, &mut patience)
                            .and_then(|()| payload::check(&buf, seq))
                            .and_then(|()| {
                                if lose {
                                    payload::damage(&mut buf);
                                }
                                writer.push(&buf, &mut patience)
                            })
                            .map_err(|e| format!("echo, round trip {seq}: {e}"))?;
                    }
                    Duration::ZERO
                }
                Test::Throughput => {
                    let ring = RawRing::open(&name, a.capacity, a.size, RAW_DATA_OFF)?;
                    let mut reader = rawring::Reader::new(&ring)?;
                    println!("ready");
                    throughput::timed(total, a.warmup, |seq| {
                        reader.pop(&mut buf, &mut patience)?;
                        payload::check(&buf, seq)
                    })?
                }
            }
        }
        Via::Unix | Via::Pipe | Via::Tcp => {
            let (rx, tx) = kernel::adopt(a.fd_in, a.fd_out)?;
            let mut rx = rx.ok_or("--fd-in is required")?;
            println!("ready");
            match a.test {
                Test::Latency => {
                    let mut tx = tx.ok_or("--fd-out is required")?;
                    for seq in 0..total {
                        let lose = fault.at(seq);
                        rx.read_exact(&mut buf).map_err(|e| format!("echo, reading ping {seq}: {e}"))?;
                        payload::check(&buf, seq).map_err(|e| format!("echo, round trip {seq}: {e}"))?;
                        if lose {
                            payload::damage(&mut buf);
                        }
                        tx.write_all(&buf).map_err(|e| format!("echo, writing pong {seq}: {e}"))?;
                    }
                    Duration::ZERO
                }
                Test::Throughput => throughput::timed(total, a.warmup, |seq| {
                    rx.read_exact(&mut buf).map_err(|e| format!("reading: {e}"))?;
                    payload::check(&buf, seq)
                })?,
            }
        }
    };
    println!("done {}", elapsed.as_nanos());
    Ok(())
}

/// The measurements of one run of the group, by case and repetition.
struct Results<'a> {
    by: HashMap<(Case, usize), &'a Sample>,
}

impl<'a> Results<'a> {
    fn new(samples: &'a [Sample]) -> Self {
        Results { by: samples.iter().map(|s| ((s.case, s.rep), s)).collect() }
    }

    fn spread(&self, case: Case, f: impl Fn(&Sample) -> Option<f64>) -> Option<Spread> {
        let v: Vec<f64> = self.by.iter().filter(|((c, _), _)| *c == case).filter_map(|(_, s)| f(s)).collect();
        Spread::of(&v)
    }

    /// `f(case) ÷ f(reference)` within each repetition, over the repetitions.
    fn paired(&self, case: Case, reference: Case, f: impl Fn(&Sample) -> Option<f64>) -> Option<Spread> {
        let v: Vec<f64> = self
            .by
            .iter()
            .filter(|((c, _), _)| *c == case)
            .filter_map(|((_, rep), s)| Some(f(s)? / f(self.by.get(&(reference, *rep))?)?))
            .collect();
        Spread::of(&v)
    }
}

fn p50(s: &Sample) -> Option<f64> {
    s.rtt.map(|r| r.p50)
}

/// The markdown section for this group.
pub fn render(settings: &Settings, samples: &[Sample]) -> String {
    let res = Results::new(samples);
    let ratio = |r: Option<Spread>| r.map_or_else(|| "–".to_owned(), |r| format!("{:.2}", r.median));
    let med = |case: Case, f: fn(&Percentiles) -> f64| {
        res.spread(case, |s| s.rtt.map(|r| f(&r))).map_or_else(|| "–".to_owned(), |s| latency::us(s.median))
    };
    let cases = settings.cases();
    let mut out = String::new();
    let _ = writeln!(out, "## Round-trip latency and one-way throughput between two processes\n");
    let _ = writeln!(
        out,
        "Two processes, pinned to two CPUs when there are two. Topics have one partition of {} \
         descriptors; a CircularBuffer has {} nodes of the message size (one ring per direction \
         for latency). Copy path: `send`/`recv_into`. Loan path: the message is written into a \
         `loan` and `publish`ed; the receiver reads every byte of it in place (`receive`) and \
         drops it. Every message carries its sequence number, checked by the receiver; a pong \
         is compared with its ping byte for byte. References, same bytes, same checks: a Unix \
         domain socket pair, TCP over loopback with `TCP_NODELAY` and pipes, with one blocking \
         `write` and one blocking `read` per message; a raw single-producer ring of memcpys \
         that spins (for latency: a spinning flag and a memcpy each way, the floor of any \
         shared-memory transport); a bare cache line bounced between the processes. Ratios \
         are medians of per-repetition ratios to the reference run of the same repetition. \
         With `spin` both processes spin while they wait. The C tachyon library reports about \
         1.0 µs p50 for a spin round trip and 3.96 M msgs/s for 1 KiB messages (about 2 × a \
         pipe), on its own machine.\n",
        settings.capacity, settings.capacity
    );
    let has = |via: Via| settings.transports.contains(&via);

    let test = Test::Latency;
    if cases.iter().any(|c| c.test == test) {
        let (count, warmup) = settings.counts(test);
        let _ = writeln!(
            out,
            "### Round-trip latency, {} messages ({count} timed round trips per run, after {warmup})\n",
            stats::bytes(settings.latency_size as u64)
        );
        let _ = writeln!(
            out,
            "Microseconds: medians over the repetitions of each run's percentile (hdrhistogram), \
             the p50's range in brackets. A round trip is timed from before the ping is written \
             to after the pong is read (and, on the loan path, released). RpcBuffer: a call \
             with the echo handler ({} warm-up calls). For the ratios lower is better.\n",
            10 + settings.round_trips / 10
        );
        let _ = writeln!(
            out,
            "| transport | wait | p50 µs | (min – max) | p99 µs | p99.9 µs | max µs | mean µs | \
             p50 × Unix socket | p50 × pipe | p50 × raw floor |"
        );
        let _ = writeln!(out, "| --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
        for &case in cases.iter().filter(|c| c.test == test) {
            let Some(p) = res.spread(case, p50) else { continue };
            let vs = |via: Via| {
                if !has(via) {
                    "–".to_owned()
                } else if case.via == via {
                    "1.00".to_owned()
                } else {
                    ratio(res.paired(case, Case::new(test, via, None, case.size), p50))
                }
            };
            let _ = writeln!(
                out,
                "| {} | {} | {} | ({} – {}) | {} | {} | {} | {} | {} | {} | {} |",
                case.via.describe(),
                case.wait(),
                latency::us(p.median),
                latency::us(p.min),
                latency::us(p.max),
                med(case, |r| r.p99),
                med(case, |r| r.p999),
                med(case, |r| r.max),
                med(case, |r| r.mean),
                vs(Via::Unix),
                vs(Via::Pipe),
                vs(Via::RawRing),
            );
        }
        out.push('\n');
    }

    let test = Test::Throughput;
    for &size in &settings.throughput_sizes {
        if !cases.iter().any(|c| c.test == test && c.size == size) {
            continue;
        }
        let (count, warmup) = settings.counts(test);
        let _ = writeln!(
            out,
            "### One-way throughput, {} messages ({count} timed messages per run, after {warmup})\n",
            stats::bytes(size as u64)
        );
        let _ = writeln!(
            out,
            "Messages per second delivered to and checked by the receiving process, timed by it: \
             median of the repetitions, range in brackets; GB/s = 10^9 payload bytes per second. \
             The copy-path and CircularBuffer receivers copy each message out; the loan-path \
             receiver reads every byte in place. For the ratios higher is better.\n"
        );
        let _ = writeln!(
            out,
            "| transport | wait | msgs/s | (min – max) | GB/s | × Unix socket | × pipe | × raw ring |"
        );
        let _ = writeln!(out, "| --- | --- | ---: | --- | ---: | ---: | ---: | ---: |");
        let rate = |s: &Sample| Some(s.rate());
        for &case in cases.iter().filter(|c| c.test == test && c.size == size) {
            let Some(r) = res.spread(case, rate) else { continue };
            let g = res.spread(case, |s| Some(s.gbps())).map_or(0.0, |s| s.median);
            let vs = |via: Via| {
                if !has(via) {
                    "–".to_owned()
                } else if case.via == via {
                    "1.00".to_owned()
                } else {
                    ratio(res.paired(case, Case::new(test, via, None, size), rate))
                }
            };
            let _ = writeln!(
                out,
                "| {} | {} | {} | ({} – {}) | {:.2} | {} | {} | {} |",
                case.via.describe_in(test),
                case.wait(),
                stats::si(r.median),
                stats::si(r.min),
                stats::si(r.max),
                g,
                vs(Via::Unix),
                vs(Via::Pipe),
                vs(Via::RawRing),
            );
        }
        out.push('\n');
    }
    out.push_str(&bars(settings, &res));
    out
}

/// The bars, each with the paired ratio of this run.
fn bars(settings: &Settings, res: &Results<'_>) -> String {
    let lat = |via: Via, policy: Option<Policy>| Case::new(Test::Latency, via, policy, settings.latency_size);
    let thr = |via: Via, policy: Option<Policy>| Case::new(Test::Throughput, via, policy, 1024);
    let rate = |s: &Sample| Some(s.rate());
    let spin = Some(Policy::Spin);
    let mut rows: Vec<(String, Option<Spread>, f64, bool)> = Vec::new();
    let mut bar = |what: String, r: Option<Spread>, limit: f64, lower_is_better: bool| {
        rows.push((what, r, limit, lower_is_better));
    };
    for via in [Via::Copy, Via::Loan] {
        bar(
            format!("{} spin round trip p50 ÷ raw floor", via.short()),
            res.paired(lat(via, spin), lat(Via::RawRing, None), p50),
            2.0,
            true,
        );
        bar(
            format!("{} futex round trip p50 ÷ Unix socket", via.short()),
            res.paired(lat(via, Some(Policy::Futex)), lat(Via::Unix, None), p50),
            1.0,
            true,
        );
    }
    for (via, limit) in [(Via::Copy, 0.8), (Via::Loan, 1.0)] {
        bar(
            format!("{} spin 1 KiB throughput ÷ raw ring", via.short()),
            res.paired(thr(via, spin), thr(Via::RawRing, None), rate),
            limit,
            false,
        );
        bar(
            format!("{} spin 1 KiB throughput ÷ pipe (C library: 2)", via.short()),
            res.paired(thr(via, spin), thr(Via::Pipe, None), rate),
            2.0,
            false,
        );
    }
    #[cfg(feature = "iceoryx2")]
    for via in [Via::Copy, Via::Loan] {
        bar(
            format!("{} spin round trip p50 ÷ iceoryx2", via.short()),
            res.paired(lat(via, spin), lat(Via::Iceoryx2, None), p50),
            0.5,
            true,
        );
    }
    for via in [Via::Rpc, Via::RpcInline] {
        for p in &settings.policies {
            bar(
                format!("{} {} round trip p50 ÷ topic copy {} round trip", via.short(), p.name(), p.name()),
                res.paired(lat(via, Some(*p)), lat(Via::Copy, Some(*p)), p50),
                1.5,
                true,
            );
        }
    }
    let mut out = String::new();
    let rows: Vec<_> = rows.into_iter().filter(|r| r.1.is_some()).collect();
    if rows.is_empty() {
        return out;
    }
    let _ = writeln!(out, "### Against the project's bars\n");
    let _ = writeln!(out, "| measure | median ratio | (min – max) | bar | met |");
    let _ = writeln!(out, "| --- | ---: | --- | ---: | --- |");
    for (what, r, limit, lower) in rows {
        let Some(r) = r else { continue };
        let met = if lower { r.median <= limit } else { r.median >= limit };
        let _ = writeln!(
            out,
            "| {what} | {:.2} | ({:.2} – {:.2}) | {} {limit} | {} |",
            r.median,
            r.min,
            r.max,
            if lower { "≤" } else { "≥" },
            if met { "yes" } else { "**no**" }
        );
    }
    out.push('\n');
    out
}

/// One CSV line per sample.
pub fn csv(samples: &[Sample]) -> String {
    let mut out = "case,test,transport,policy,size,partitions,stamps_only,rep,count,elapsed_ns,per_sec,gbps,\
                   p50_ns,p99_ns,p999_ns,max_ns,mean_ns\n"
        .to_owned();
    for s in samples {
        let c = s.case;
        let _ = write!(
            out,
            "{c},{},{},{},{},{},{},{},{},{},{:.1},{:.4}",
            c.test.name(),
            c.via.name(),
            c.policy.map_or("", Policy::name),
            c.size,
            c.partitions,
            c.stamps_only,
            s.rep,
            s.count,
            s.elapsed.as_nanos(),
            s.rate(),
            s.gbps()
        );
        match s.rtt {
            Some(r) => {
                let _ = writeln!(out, ",{},{},{},{},{:.1}", r.p50, r.p99, r.p999, r.max, r.mean);
            }
            None => out.push_str(",,,,,\n"),
        }
    }
    out
}

impl Group for Settings {
    type Case = Case;
    type Sample = Sample;

    fn name(&self) -> &'static str {
        "topics"
    }

    fn cases(&self) -> Vec<Case> {
        let mut out = Vec::new();
        for &test in &self.tests {
            let sizes = match test {
                Test::Latency => vec![self.latency_size],
                Test::Throughput => self.throughput_sizes.clone(),
            };
            for size in sizes {
                // The references first, then what they are paired with.
                for &via in self.transports.iter().filter(|v| v.does(test)) {
                    if via.is_tachyon() {
                        for &p in &self.policies {
                            out.push(Case::new(test, via, Some(p), size));
                        }
                    } else {
                        out.push(Case::new(test, via, None, size));
                    }
                }
            }
        }
        out
    }

    fn warmup_case(&self) -> Option<Case> {
        let cases = self.cases();
        cases.iter().find(|c| c.via.is_topic()).or_else(|| cases.first()).copied()
    }

    fn run(&self, case: Case, rep: usize) -> Result<Sample, String> {
        run(case, self, rep)
    }

    fn progress(&self, s: &Sample) -> String {
        match s.rtt {
            Some(r) => format!(
                "p50 {:>8} µs  p99 {:>8} µs  p99.9 {:>8} µs",
                latency::us(r.p50),
                latency::us(r.p99),
                latency::us(r.p999)
            ),
            None => format!("{:>9} msgs/s {:>6.2} GB/s", stats::si(s.rate()), s.gbps()),
        }
    }

    fn render(&self, samples: &[Sample]) -> String {
        render(self, samples)
    }

    fn csv(&self, samples: &[Sample]) -> String {
        csv(samples)
    }

    fn charts(&self, samples: &[Sample]) -> Vec<Chart> {
        charts(self, samples)
    }
}

/// A chart row's label: `topic copy/spin`.
fn label(case: &Case) -> String {
    match case.policy {
        Some(p) => format!("{}/{}", case.via.short(), p.name()),
        None => case.via.short().to_owned(),
    }
}

/// Latency percentiles per transport, and throughput bars per message size.
fn charts(settings: &Settings, samples: &[Sample]) -> Vec<Chart> {
    let res = Results::new(samples);
    let cases = settings.cases();
    let mut out = Vec::new();
    let lat: Vec<Case> = cases.iter().copied().filter(|c| c.test == Test::Latency).collect();
    if !lat.is_empty() {
        let pct = |f: fn(&Percentiles) -> f64| -> Vec<f64> {
            lat.iter()
                .map(|&c| res.spread(c, |s| s.rtt.map(|r| f(&r) / 1000.0)).map_or(0.0, |s| s.median))
                .collect()
        };
        out.push(Chart::Bars {
            file: "latency",
            title: format!(
                "Round trip, {} messages, between two processes (median of {} runs)",
                stats::bytes(settings.latency_size as u64),
                settings.common.reps
            ),
            value_label: "microseconds (log scale; shorter is better)".into(),
            categories: lat.iter().map(label).collect(),
            series: vec![
                ("p50".into(), pct(|r| r.p50)),
                ("p99".into(), pct(|r| r.p99)),
                ("p99.9".into(), pct(|r| r.p999)),
            ],
        });
    }
    let thr: Vec<Case> = cases
        .iter()
        .copied()
        .filter(|c| c.test == Test::Throughput && Some(&c.size) == settings.throughput_sizes.first())
        .collect();
    if !thr.is_empty() {
        let series = settings
            .throughput_sizes
            .iter()
            .map(|&size| {
                let v = thr
                    .iter()
                    .map(|&c| res.spread(Case { size, ..c }, |s| Some(s.rate())).map_or(0.0, |s| s.median))
                    .collect();
                (stats::bytes(size as u64), v)
            })
            .collect();
        out.push(Chart::Bars {
            file: "throughput",
            title: format!(
                "One-way throughput between two processes (median of {} runs)",
                settings.common.reps
            ),
            value_label: "messages per second (log scale; longer is better)".into(),
            categories: thr.iter().map(label).collect(),
            series,
        });
    }
    out
}
