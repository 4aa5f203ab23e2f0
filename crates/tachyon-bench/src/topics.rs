//! The topics group (issue 5 §10): round-trip latency of small messages
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
//! * copy: `topic.send(&bytes, key, timeout)` / `topic.recv_into(partition,
//!   &mut vec, timeout)`: one copy in, one copy out;
//! * loan: `topic.loan(len, timeout)`, the message written into the loan,
//!   `loan.publish(len, key, timeout)` / `topic.receive(partition,
//!   timeout)`, the message read in place (every byte: a 64-bit XOR fold,
//!   or, for a pong, a compare), then dropped (released). The echoing peer
//!   copies the ping's view into the pong's loan.
//!
//! References, with the same byte counts and the same checks: a Unix
//! domain socket (`socketpair`) and a pipe (one per direction), one
//! blocking `write` and one blocking `read` per message; and the raw SPSC
//! ring of memcpys of the bandwidth group (`rawring.rs`), spinning.

use crate::bandwidth::{self, Policy};
use crate::kernel::{self, Kind};
use crate::latency::{self, Percentiles};
use crate::payload;
use crate::peer::{self, retry, Fault, Peer, Watchdog, STARTUP};
use crate::pin;
use crate::rawring::{self, Patience, RawRing};
use crate::stats::{self, Spread};
use crate::suite::{Common, Group};
use clap::ValueEnum;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tachyon::bus::{Region, RegionConfig, Topic, TopicConfig, CLASS_SIZES};

/// Every message is published with this key (one partition per topic).
const KEY: u64 = 0;
/// Where the raw ring's slots start in its segment.
const RAW_DATA_OFF: usize = 256;

/// A way of moving messages between the two processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, ValueEnum)]
pub enum Via {
    /// Reference: the raw SPSC ring of memcpys, spinning.
    RawRing,
    /// Reference: a Unix domain socket pair.
    Unix,
    /// Reference: pipes.
    Pipe,
    /// A topic, `send` / `recv_into`.
    Copy,
    /// A topic, `loan` / `publish` / `receive`.
    Loan,
}

impl Via {
    fn name(self) -> &'static str {
        match self {
            Via::RawRing => "raw-ring",
            Via::Unix => "unix",
            Via::Pipe => "pipe",
            Via::Copy => "copy",
            Via::Loan => "loan",
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Via::RawRing => "raw SPSC ring, memcpy in and out (reference)",
            Via::Unix => "Unix socket, write/read (reference)",
            Via::Pipe => "pipe, write/read (reference)",
            Via::Copy => "topic, copy path: `send`/`recv_into`",
            Via::Loan => "topic, loan path: `loan`+`publish`/`receive`",
        }
    }

    fn is_topic(self) -> bool {
        matches!(self, Via::Copy | Via::Loan)
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
    fn name(self) -> &'static str {
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
    /// The topic's wait policy (topics only).
    pub policy: Option<Policy>,
    /// Message bytes.
    pub size: usize,
}

impl std::fmt::Display for Case {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.test.name(), self.via.name())?;
        if let Some(p) = self.policy {
            write!(f, "/{}", p.name())?;
        }
        write!(f, " {}", stats::bytes(self.size as u64))
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
    /// Message size of the throughput runs.
    pub throughput_size: usize,
    /// Wait policies of the topic runs.
    pub policies: Vec<Policy>,
    /// Transports.
    pub transports: Vec<Via>,
    /// Latency, throughput or both.
    pub tests: Vec<Test>,
    /// Descriptors per partition, and raw-ring slots for throughput.
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

    fn size(&self, test: Test) -> usize {
        match test {
            Test::Latency => self.latency_size,
            Test::Throughput => self.throughput_size,
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

fn unique_name() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!("tachyon-bench-topics-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed))
}

/// A region sized for `topics` topics of `capacity` descriptors carrying
/// messages of `size` bytes: the pool has chunks only in the class of
/// `size`, enough for every descriptor of every topic plus the loans and
/// held messages in flight (at most 256 MiB of them; beyond that loans
/// wait for the consumer to release).
fn region_config(size: usize, capacity: u32, topics: usize) -> RegionConfig {
    let class = CLASS_SIZES.iter().position(|&c| c >= size).unwrap_or(CLASS_SIZES.len() - 1);
    let mut class_weights = [0u32; 8];
    class_weights[class] = 1;
    let chunk = CLASS_SIZES[class] + 16;
    let chunks = (topics * (capacity as usize + 16)).min((256 << 20) / chunk).max(8);
    let ring_arena = (topics * (192 + 16 * capacity as usize)).div_ceil(64) * 64 + 4096;
    let size = (chunks * chunk + ring_arena + (2 << 20)).div_ceil(1 << 20) << 20;
    RegionConfig { size: size.max(4 << 20), max_topics: 4, ring_arena, class_weights, ..Default::default() }
}

/// Removes a region's name when dropped (regions are persistent).
struct RemoveRegion<'a>(&'a str);

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
    topic: &Topic<'_>,
    len: usize,
    mut fill: impl FnMut(&mut [u8]),
    stall: Duration,
    check: &mut dyn FnMut() -> Result<(), String>,
) -> Result<(), String> {
    let start = Instant::now();
    loop {
        let mut loan = retry(|t| topic.loan(len, t), stall, check, "no chunk came free in the pool")?;
        fill(&mut loan);
        match loan.publish(len, KEY, Some(peer::SLICE)) {
            Ok(()) => return Ok(()),
            Err(tachyon::Error::Timeout) => {
                check()?;
                if start.elapsed() >= stall {
                    return Err(format!("waited {stall:?}: the partition stayed full"));
                }
            }
            Err(e) => return Err(e.to_string()),
        }
    }
}

/// Checks that a pong equals its ping.
fn same(pong: &[u8], ping: &[u8], seq: u64) -> Result<(), String> {
    if pong == ping {
        return Ok(());
    }
    if pong.len() != ping.len() {
        return Err(format!("a pong of {} bytes to a ping of {}", pong.len(), ping.len()));
    }
    payload::check(pong, seq)?;
    Err(format!("pong {seq} differs from its ping (damaged)"))
}

fn peer_args(case: Case, settings: &Settings, count: u64, warmup: u64) -> Vec<String> {
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
        "--stall-ms".into(),
        settings.common.stall.as_millis().to_string(),
        "--parent".into(),
        std::process::id().to_string(),
    ];
    if let Some(cpu) = settings.common.placement.reader() {
        args.extend(["--cpu".into(), cpu.to_string()]);
    }
    args
}

/// Waits for the peer's `done <nanoseconds>` and its exit.
fn collect(mut peer: Peer, stall: Duration) -> Result<Duration, String> {
    let done = peer.expect("done", stall + STARTUP)?;
    peer.finish(STARTUP)?;
    let nanos: u64 = done.parse().map_err(|_| format!("the peer reported {done:?}, not a duration"))?;
    Ok(Duration::from_nanos(nanos))
}

/// Times `total` round trips of `one(seq)`, the last `total - warmup`.
fn round_trips(
    total: u64,
    warmup: u64,
    mut one: impl FnMut(u64) -> Result<(), String>,
) -> Result<(Duration, Percentiles), String> {
    let mut hist = latency::histogram()?;
    let mut start = Instant::now();
    for seq in 0..total {
        if seq == warmup {
            start = Instant::now();
        }
        let t0 = Instant::now();
        one(seq).map_err(|e| format!("round trip {seq}: {e}"))?;
        if seq >= warmup {
            latency::record(&mut hist, t0.elapsed());
        }
    }
    Ok((start.elapsed(), Percentiles::of(&hist)))
}

/// Runs one repetition of one case.
pub fn run(case: Case, settings: &Settings, rep: usize) -> Result<Sample, String> {
    let (count, warmup) = settings.counts(case.test);
    let (elapsed, rtt) = match case.via {
        Via::Copy | Via::Loan => topic_run(case, settings, count, warmup)?,
        Via::RawRing => raw_run(case, settings, count, warmup)?,
        Via::Unix | Via::Pipe => kernel_run(case, settings, count, warmup)?,
    };
    Ok(Sample { case, rep, count, elapsed, rtt })
}

type Measured = (Duration, Option<Percentiles>);

fn topic_run(case: Case, settings: &Settings, count: u64, warmup: u64) -> Result<Measured, String> {
    let stall = settings.common.stall;
    let total = warmup + count;
    let size = case.size;
    let policy = case.policy.unwrap_or(Policy::Hybrid);
    let cfg = TopicConfig {
        partitions: 1,
        capacity: settings.capacity,
        wait: policy.wait_policy(),
        ..Default::default()
    };
    let name = unique_name();
    let topics = if case.test == Test::Latency { 2 } else { 1 };
    let region = Region::create(&name, region_config(size, settings.capacity, topics))
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
            let from = pong.partition_of(KEY);
            let mut peer = Peer::spawn(&args)?;
            peer.expect("ready", STARTUP)?;
            let mut got = Vec::with_capacity(size);
            let r = {
                let mut check = || peer.check_alive();
                round_trips(total, warmup, |seq| {
                    payload::stamp(&mut buf, seq);
                    if case.via == Via::Copy {
                        retry(
                            |t| ping.send(&buf, KEY, t),
                            stall,
                            &mut check,
                            "the ping partition stayed full",
                        )?;
                        retry(|t| pong.recv_into(from, &mut got, t), stall, &mut check, "no pong came")?;
                        same(&got, &buf, seq)
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
            let mut peer = Peer::spawn(&args)?;
            peer.expect("ready", STARTUP)?;
            {
                let mut check = || peer.check_alive();
                for seq in 0..total {
                    if case.via == Via::Copy {
                        payload::stamp(&mut buf, seq);
                        retry(|t| data.send(&buf, KEY, t), stall, &mut check, "the partition stayed full")
                    } else {
                        let fill = |loan: &mut [u8]| {
                            loan.copy_from_slice(&template);
                            payload::stamp(loan, seq);
                        };
                        publish_loan(&data, size, fill, stall, &mut check)
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
                round_trips(total, warmup, |seq| {
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

fn kernel_run(case: Case, settings: &Settings, count: u64, warmup: u64) -> Result<Measured, String> {
    let stall = settings.common.stall;
    let total = warmup + count;
    let size = case.size;
    let kind = if case.via == Via::Unix { Kind::Unix } else { Kind::Pipe };
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
                let (elapsed, rtt) = round_trips(total, warmup, |seq| {
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
    peer::die_with_parent(a.parent)?;
    if let Some(cpu) = a.cpu {
        pin::pin_to(cpu)?;
    }
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
                    let from = ping.partition_of(KEY);
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
                                        |t| pong.send(&buf, KEY, t),
                                        stall,
                                        &mut check,
                                        "the pong partition stayed full",
                                    )
                                })
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
                    let from = data.partition_of(KEY);
                    println!("ready");
                    let mut sink = 0u64;
                    let t = bandwidth::timed(total, a.warmup, |seq| {
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
                            sink ^= payload::fold(&msg);
                            payload::check(&msg, seq)
                        }
                    })?;
                    std::hint::black_box(sink);
                    t
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
                    bandwidth::timed(total, a.warmup, |seq| {
                        reader.pop(&mut buf, &mut patience)?;
                        payload::check(&buf, seq)
                    })?
                }
            }
        }
        Via::Unix | Via::Pipe => {
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
                Test::Throughput => bandwidth::timed(total, a.warmup, |seq| {
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
    let reference = |test: Test, via: Via| Case { test, via, policy: None, size: settings.size(test) };
    let mut out = String::new();
    let _ = writeln!(out, "## Topics: round-trip latency and one-way throughput between two processes\n");
    let _ = writeln!(
        out,
        "Two processes, one partition per topic, {} descriptors per partition. Copy path: \
         `send`/`recv_into`. Loan path: the message is written into a `loan` and `publish`ed; the \
         receiver reads it in place (`receive`) and drops it. Every message carries its sequence \
         number, checked by the receiver. References, same bytes, same checks: a Unix domain \
         socket pair and pipes with one blocking `write` and one blocking `read` per message, \
         and a raw single-producer ring of memcpys that spins. Ratios are medians of \
         per-repetition ratios to the reference run of the same repetition. With `spin` both \
         processes spin while they wait: fine here with one process per core, pinned, but it \
         keeps both cores busy. The C tachyon library reports about 1.0 µs p50 for a spin-mode \
         round trip and 3.96 M msgs/s for 1 KiB messages (about 2 × a pipe), on its own \
         machine.\n",
        settings.capacity
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
             to after the pong is read (and, on the loan path, released).\n"
        );
        let _ = writeln!(
            out,
            "| transport | wait | p50 µs | (min – max) | p99 µs | p99.9 µs | mean µs | p50 × Unix socket | \
             p50 × pipe | p50 × raw ring |"
        );
        let _ = writeln!(out, "| --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |");
        for &case in cases.iter().filter(|c| c.test == test) {
            let Some(p) = res.spread(case, p50) else { continue };
            let vs = |via: Via| {
                if !has(via) {
                    "–".to_owned()
                } else if case.via == via {
                    "1.00".to_owned()
                } else {
                    ratio(res.paired(case, reference(test, via), p50))
                }
            };
            let _ = writeln!(
                out,
                "| {} | {} | {} | ({} – {}) | {} | {} | {} | {} | {} | {} |",
                case.via.describe(),
                case.policy.map_or(if case.via == Via::RawRing { "spin" } else { "kernel" }, Policy::name),
                latency::us(p.median),
                latency::us(p.min),
                latency::us(p.max),
                med(case, |r| r.p99),
                med(case, |r| r.p999),
                med(case, |r| r.mean),
                vs(Via::Unix),
                vs(Via::Pipe),
                vs(Via::RawRing),
            );
        }
        out.push('\n');
    }

    let test = Test::Throughput;
    if cases.iter().any(|c| c.test == test) {
        let (count, warmup) = settings.counts(test);
        let _ = writeln!(
            out,
            "### One-way throughput, {} messages ({count} timed messages per run, after {warmup})\n",
            stats::bytes(settings.throughput_size as u64)
        );
        let _ = writeln!(
            out,
            "Messages per second delivered to and checked by the receiving process, timed by it: \
             median of the repetitions, range in brackets; GB/s = 10^9 payload bytes per second. \
             The copy-path receiver copies each message out; the loan-path receiver reads every \
             byte in place.\n"
        );
        let _ = writeln!(
            out,
            "| transport | wait | msgs/s | (min – max) | GB/s | × Unix socket | × pipe | × raw ring |"
        );
        let _ = writeln!(out, "| --- | --- | ---: | --- | ---: | ---: | ---: | ---: |");
        let rate = |s: &Sample| Some(s.rate());
        for &case in cases.iter().filter(|c| c.test == test) {
            let Some(r) = res.spread(case, rate) else { continue };
            let g = res.spread(case, |s| Some(s.gbps())).map_or(0.0, |s| s.median);
            let vs = |via: Via| {
                if !has(via) {
                    "–".to_owned()
                } else if case.via == via {
                    "1.00".to_owned()
                } else {
                    ratio(res.paired(case, reference(test, via), rate))
                }
            };
            let _ = writeln!(
                out,
                "| {} | {} | {} | ({} – {}) | {:.2} | {} | {} | {} |",
                case.via.describe(),
                case.policy.map_or(if case.via == Via::RawRing { "spin" } else { "kernel" }, Policy::name),
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
    out
}

/// One CSV line per sample.
pub fn csv(samples: &[Sample]) -> String {
    let mut out = "case,test,transport,policy,size,rep,count,elapsed_ns,per_sec,gbps,p50_ns,p99_ns,p999_ns,\
                   max_ns,mean_ns\n"
        .to_owned();
    for s in samples {
        let c = s.case;
        let _ = write!(
            out,
            "{c},{},{},{},{},{},{},{},{:.1},{:.4}",
            c.test.name(),
            c.via.name(),
            c.policy.map_or("", Policy::name),
            c.size,
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
            let size = self.size(test);
            // The references first, then the topics they are paired with.
            for &via in &self.transports {
                if via.is_topic() {
                    for &p in &self.policies {
                        out.push(Case { test, via, policy: Some(p), size });
                    }
                } else {
                    out.push(Case { test, via, policy: None, size });
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
}
