//! The bandwidth group: `CircularBuffer` streaming between two processes,
//! against a single-core memcpy and a raw ring of memcpys measured in the
//! same run.
//!
//! One run of a ring configuration: this process creates the ring, starts
//! the reader peer (`tachyon-bench peer reader ...`), waits for it to say
//! `ready`, then writes `warmup + items` items of `size` bytes, each a copy
//! of a private buffer stamped with its sequence number. The reader copies
//! every item out into its own private buffer, checks the stamp, and times
//! the `items` items after the warm-up with its own clock; it reports
//! `done <nanoseconds>` on its stdout. Bandwidth is item bytes delivered
//! to the reader per second.
//!
//! The N × M runs ([`procs`]): N writer and M reader processes on one
//! `CircularBuffer` or topic.

pub(crate) mod procs;

use crate::payload;
use crate::peer::{self, Peer, SLICE, STARTUP};
use crate::pin::Placement;
use crate::policy::Policy;
use crate::rawring::{self, Patience, RawRing};
use crate::scaling::Shape;
use crate::stats::{self, Spread};
use crate::suite::Common;
use crate::throughput;
use crate::topics;
use clap::ValueEnum;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tachyon::CircularBuffer;

/// How long the single-core memcpy reference runs per repetition.
const MEMCPY_TIME: Duration = Duration::from_millis(150);

/// A way of moving items from the writer process to the reader process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, ValueEnum)]
pub enum Transport {
    /// The reference: a plain SPSC ring of memcpys written in the benchmark.
    RawRing,
    /// `CircularBuffer::write_with` / `read_with`, copying inside the closures.
    CbZeroCopy,
    /// `CircularBuffer::write` / `read`.
    CbCopy,
    /// A topic, `send` / `recv_into`, of as many descriptors as the ring
    /// has nodes (rounded up to a power of two).
    TopicCopy,
    /// A topic, the item copied into a `loan` and `publish`ed / `receive`d
    /// and read in place.
    TopicLoan,
}

impl Transport {
    fn name(self) -> &'static str {
        match self {
            Transport::RawRing => "raw-ring",
            Transport::CbZeroCopy => "cb-zero-copy",
            Transport::CbCopy => "cb-copy",
            Transport::TopicCopy => "topic-copy",
            Transport::TopicLoan => "topic-loan",
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Transport::RawRing => "raw SPSC ring (reference)",
            Transport::CbZeroCopy => "CircularBuffer `write_with`/`read_with`",
            Transport::CbCopy => "CircularBuffer `write`/`read`",
            Transport::TopicCopy => "topic `send`/`recv_into`",
            Transport::TopicLoan => "topic `loan`+`publish`/`receive`, read in place",
        }
    }
}

/// One measured configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Case {
    /// Single-core memcpy of `size` bytes between two private buffers.
    Memcpy {
        /// Bytes per copy.
        size: usize,
    },
    /// Items of `size` bytes from `shape.producers` writer processes to
    /// `shape.consumers` reader processes through a ring of `nodes` nodes.
    Procs {
        /// Writers × readers.
        shape: Shape,
        /// How.
        transport: Transport,
        /// Wait policy.
        policy: Policy,
        /// Item and node size.
        size: usize,
        /// Node count.
        nodes: usize,
    },
    /// Items of `size` bytes through a ring of `nodes` nodes.
    Ring {
        /// How.
        transport: Transport,
        /// Wait policy (`None` for the raw ring, which always spins).
        policy: Option<Policy>,
        /// Item and node size.
        size: usize,
        /// Node count.
        nodes: usize,
    },
}

impl std::fmt::Display for Case {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Case::Memcpy { size } => write!(f, "memcpy {}", stats::bytes(size as u64)),
            Case::Ring { transport, policy, size, nodes } => {
                write!(f, "{}", transport.name())?;
                if let Some(p) = policy {
                    write!(f, "/{}", p.name())?;
                }
                write!(f, " {} x {nodes}", stats::bytes(size as u64))
            }
            Case::Procs { shape, transport, policy, size, nodes } => write!(
                f,
                "{}/{} {} x {nodes}, {shape} procs",
                transport.name(),
                policy.name(),
                stats::bytes(size as u64)
            ),
        }
    }
}

/// What the user asked for.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Item (= node) sizes.
    pub sizes: Vec<usize>,
    /// Node counts.
    pub nodes: Vec<usize>,
    /// Transports.
    pub transports: Vec<Transport>,
    /// Wait policies of the `CircularBuffer` runs.
    pub policies: Vec<Policy>,
    /// Bytes per ring run (before the cap on items).
    pub volume: u64,
    /// Most items per ring run.
    pub max_items: u64,
    /// Longest a ring may stay full or empty before the run fails.
    pub stall: Duration,
    /// Where the two processes run.
    pub placement: Placement,
    /// Writers × readers of the N × M runs.
    pub procs: Vec<Shape>,
    /// Node counts of the N × M runs.
    pub procs_nodes: Vec<usize>,
    /// Wait policies of the N × M runs.
    pub procs_policies: Vec<Policy>,
    /// Bytes per N × M run (before the cap on items).
    pub procs_volume: u64,
    /// The CPUs child `k` of an N × M run (writers first, then readers) is
    /// pinned to in turn (`k % len`); `None`: not pinned.
    pub cpus: Option<Vec<usize>>,
}

impl Settings {
    /// Timed items and warm-up items of a ring run.
    pub fn items(&self, size: usize, nodes: usize) -> (u64, u64) {
        let items = (self.volume / size as u64).clamp(1, self.max_items.max(1));
        // At least two laps of the ring (every page of it touched by both
        // sides), plus 5 % of the run.
        let warmup = 2 * nodes as u64 + items / 20;
        (items, warmup)
    }

    /// Items of an N × M run.
    pub fn procs_items(&self, size: usize) -> u64 {
        (self.procs_volume / size as u64).clamp(1, self.max_items.max(1))
    }

    /// The CPU of child `k` of an N × M run.
    pub fn cpu(&self, k: usize) -> Option<usize> {
        self.cpus.as_ref().filter(|c| !c.is_empty()).map(|c| c[k % c.len()])
    }

    /// The transports of the N × M runs: those asked for that have several
    /// writers and readers.
    fn procs_transports(&self) -> Vec<Transport> {
        self.transports.iter().copied().filter(|t| procs::TRANSPORTS.contains(t)).collect()
    }

    /// The N × M cases of one item size and node count, table order.
    fn procs_cases(&self, size: usize, nodes: usize) -> Vec<Case> {
        let mut out = Vec::new();
        for transport in self.procs_transports() {
            for &policy in &self.procs_policies {
                for &shape in &self.procs {
                    out.push(Case::Procs { shape, transport, policy, size, nodes });
                }
            }
        }
        out
    }

    /// Every case, in the order one repetition runs them.
    pub fn cases(&self) -> Vec<Case> {
        let mut out = Vec::new();
        for &size in &self.sizes {
            out.push(Case::Memcpy { size });
            for &nodes in &self.nodes {
                for &transport in &self.transports {
                    if transport == Transport::RawRing {
                        out.push(Case::Ring { transport, policy: None, size, nodes });
                    } else {
                        for &p in &self.policies {
                            out.push(Case::Ring { transport, policy: Some(p), size, nodes });
                        }
                    }
                }
            }
        }
        for &size in &self.sizes {
            for &nodes in &self.procs_nodes {
                out.extend(self.procs_cases(size, nodes));
            }
        }
        out
    }
}

/// One measurement.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    /// What was measured.
    pub case: Case,
    /// Repetition (0-based).
    pub rep: usize,
    /// Items moved in the timed part.
    pub items: u64,
    /// Bytes moved in the timed part.
    pub bytes: u64,
    /// Time the timed part took.
    pub elapsed: Duration,
}

impl Sample {
    /// Bytes per nanosecond = GB/s (10^9 bytes per second).
    pub fn gbps(&self) -> f64 {
        self.bytes as f64 / self.elapsed.as_nanos().max(1) as f64
    }

    /// Items per second.
    pub fn items_per_sec(&self) -> f64 {
        self.items as f64 / self.elapsed.as_secs_f64().max(1e-12)
    }
}

/// Runs one repetition of one case.
pub fn run(case: Case, settings: &Settings, rep: usize) -> Result<Sample, String> {
    let (items, elapsed) = match case {
        Case::Memcpy { size } => memcpy(size),
        Case::Ring { transport, policy, size, nodes } => ring(transport, policy, size, nodes, settings)?,
        Case::Procs { shape, transport, policy, size, nodes } => {
            procs::run(shape, transport, policy, size, nodes, settings)?
        }
    };
    let size = match case {
        Case::Memcpy { size } | Case::Ring { size, .. } | Case::Procs { size, .. } => size,
    };
    Ok(Sample { case, rep, items, bytes: items * size as u64, elapsed })
}

/// Copies `size` bytes from one private buffer to another for about
/// [`MEMCPY_TIME`] on this (pinned) core.
fn memcpy(size: usize) -> (u64, Duration) {
    let src = payload::buffer(size);
    let mut dst = payload::buffer(size);
    let batch = ((8 << 20) / size).max(1) as u64;
    for _ in 0..batch.min(16) {
        dst.copy_from_slice(std::hint::black_box(&src));
    }
    let start = Instant::now();
    let mut copies = 0u64;
    loop {
        for _ in 0..batch {
            dst.copy_from_slice(std::hint::black_box(&src));
            std::hint::black_box(&mut dst);
        }
        copies += batch;
        let elapsed = start.elapsed();
        if elapsed >= MEMCPY_TIME {
            return (copies, elapsed);
        }
    }
}

pub(crate) fn unique_name() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!("tachyon-bench-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed))
}

/// Runs one ring configuration: returns the reader's timed items and time.
fn ring(
    transport: Transport,
    policy: Option<Policy>,
    size: usize,
    nodes: usize,
    settings: &Settings,
) -> Result<(u64, Duration), String> {
    let (items, warmup) = settings.items(size, nodes);
    let name = unique_name();
    let mut args: Vec<String> = vec![
        "peer".into(),
        "reader".into(),
        "--transport".into(),
        transport.name().into(),
        "--name".into(),
        name.clone(),
        "--size".into(),
        size.to_string(),
        "--nodes".into(),
        nodes.to_string(),
        "--items".into(),
        items.to_string(),
        "--warmup".into(),
        warmup.to_string(),
        "--stall-ms".into(),
        settings.stall.as_millis().to_string(),
        "--parent".into(),
        std::process::id().to_string(),
    ];
    if let Some(p) = policy {
        args.extend(["--policy".into(), p.name().into()]);
    }
    if let Some(cpu) = settings.placement.reader() {
        args.extend(["--cpu".into(), cpu.to_string()]);
    }
    let total = warmup + items;
    let stall = settings.stall;
    let src = payload::buffer(size);

    // Each arm keeps its ring until the peer has finished with it; if
    // anything fails, dropping the peer kills it.
    match transport {
        Transport::RawRing => {
            let data_off = rawring::circular_node_offset(nodes)?;
            args.extend(["--data-off".into(), data_off.to_string()]);
            let ring = RawRing::create(&name, nodes, size, data_off)?;
            let mut peer = Peer::spawn(&args)?;
            peer.expect("ready", STARTUP)?;
            {
                let mut writer = rawring::Writer::new(&ring)?;
                let mut check = || peer.check_alive();
                let mut patience = Patience::new(stall, &mut check);
                for _ in 0..total {
                    writer.push(&src, &mut patience).map_err(|e| format!("writer: {e}"))?;
                }
            }
            collect(peer, items, stall)
        }
        Transport::TopicCopy | Transport::TopicLoan => {
            // The topics group's code, on a topic of about `nodes` slots.
            let topics = topics::Settings {
                round_trips: 1,
                messages: items,
                latency_size: size,
                throughput_sizes: vec![size],
                policies: policy.into_iter().collect(),
                transports: Vec::new(),
                tests: vec![topics::Test::Throughput],
                capacity: nodes.next_power_of_two().max(2) as u32,
                common: Common { reps: 1, stall, placement: settings.placement },
            };
            let via = if transport == Transport::TopicCopy { topics::Via::Copy } else { topics::Via::Loan };
            let case = topics::Case::new(topics::Test::Throughput, via, policy, size);
            let s = topics::run(case, &topics, 0)?;
            Ok((s.count, s.elapsed))
        }
        Transport::CbZeroCopy | Transport::CbCopy => {
            let ring = CircularBuffer::builder(&name)
                .node_count(nodes)
                .node_size(size)
                .wait_policy(policy.unwrap_or(Policy::Spin).wait_policy())
                .create()
                .map_err(|e| format!("cannot create the CircularBuffer: {e}"))?;
            let mut peer = Peer::spawn(&args)?;
            peer.expect("ready", STARTUP)?;
            let mut src = src;
            for seq in 0..total {
                let write = |timeout| match transport {
                    Transport::CbZeroCopy => ring.write_with(size, timeout, |node| {
                        node.copy_from_slice(&src);
                        payload::stamp(node, seq);
                    }),
                    _ => {
                        payload::stamp(&mut src, seq);
                        ring.write(&src, timeout)
                    }
                };
                with_retries(write, stall, &mut peer).map_err(|e| format!("writer, item {seq}: {e}"))?;
            }
            collect(peer, items, stall)
        }
    }
}

/// Waits for the peer's `done <nanoseconds>` and its exit.
fn collect(mut peer: Peer, items: u64, stall: Duration) -> Result<(u64, Duration), String> {
    let done = peer.expect("done", stall + STARTUP)?;
    peer.finish(STARTUP)?;
    let nanos: u64 = done.parse().map_err(|_| format!("the peer reported {done:?}, not a duration"))?;
    Ok((items, Duration::from_nanos(nanos)))
}

/// Calls a ring operation with a [`SLICE`] timeout until it succeeds,
/// checking the peer between tries; fails after `stall` without progress.
fn with_retries<R>(
    mut op: impl FnMut(Option<Duration>) -> tachyon::Result<R>,
    stall: Duration,
    peer: &mut Peer,
) -> Result<R, String> {
    let mut waited = Duration::ZERO;
    loop {
        match op(Some(SLICE)) {
            Ok(r) => return Ok(r),
            Err(tachyon::Error::Timeout { .. }) => {
                peer.check_alive()?;
                waited += SLICE;
                if waited >= stall {
                    return Err(format!("the ring stayed full for {stall:?} (is the reader stuck?)"));
                }
            }
            Err(e) => return Err(e.to_string()),
        }
    }
}

/// The reader peer's arguments (`tachyon-bench peer reader ...`).
#[derive(Debug, clap::Args)]
pub struct ReaderArgs {
    /// How the items come.
    #[arg(long, value_enum)]
    pub transport: Transport,
    /// Wait policy of a `CircularBuffer`.
    #[arg(long, value_enum)]
    pub policy: Option<Policy>,
    /// Segment name of the ring.
    #[arg(long)]
    pub name: String,
    /// Item and node size.
    #[arg(long)]
    pub size: usize,
    /// Node count.
    #[arg(long)]
    pub nodes: usize,
    /// Timed items.
    #[arg(long)]
    pub items: u64,
    /// Items read before the clock starts (at least 1).
    #[arg(long)]
    pub warmup: u64,
    /// Longest wait for one item, in milliseconds.
    #[arg(long)]
    pub stall_ms: u64,
    /// The benchmark process; the peer dies with it.
    #[arg(long)]
    pub parent: u32,
    /// CPU to pin to.
    #[arg(long)]
    pub cpu: Option<usize>,
    /// Where the raw ring's slots start in its segment.
    #[arg(long)]
    pub data_off: Option<usize>,
}

/// The reader peer: opens the ring, says `ready`, reads and checks every
/// item, says `done <nanoseconds of the timed part>`.
pub fn reader(a: ReaderArgs) -> Result<(), String> {
    peer::start(a.parent, a.cpu)?;
    if a.warmup == 0 || a.size < payload::MIN_ITEM {
        return Err("--warmup must be at least 1 and --size at least 16".into());
    }
    let stall = Duration::from_millis(a.stall_ms);
    let total = a.warmup + a.items;
    let mut dst = payload::buffer(a.size);
    let elapsed = match a.transport {
        Transport::TopicCopy | Transport::TopicLoan => {
            return Err("a topic's reader is `peer topics`".into());
        }
        Transport::RawRing => {
            let ring = RawRing::open(&a.name, a.nodes, a.size, a.data_off.ok_or("--data-off is required")?)?;
            let mut reader = rawring::Reader::new(&ring)?;
            // The parent's death kills us (PR_SET_PDEATHSIG): nothing to check.
            let mut check = || Ok(());
            let mut patience = Patience::new(stall, &mut check);
            println!("ready");
            throughput::timed(total, a.warmup, |seq| {
                reader.pop(&mut dst, &mut patience)?;
                payload::check(&dst, seq)
            })?
        }
        Transport::CbZeroCopy | Transport::CbCopy => {
            let policy = a.policy.unwrap_or(Policy::Spin).wait_policy();
            let ring = CircularBuffer::builder(&a.name)
                .wait_policy(policy)
                .open()
                .map_err(|e| format!("cannot open the CircularBuffer: {e}"))?;
            if ring.node_size() != a.size || ring.node_count() != a.nodes {
                return Err(format!(
                    "the ring has {} nodes of {} bytes, expected {} of {}",
                    ring.node_count(),
                    ring.node_size(),
                    a.nodes,
                    a.size
                ));
            }
            let size = a.size;
            println!("ready");
            throughput::timed(total, a.warmup, |seq| {
                let mut waited = Duration::ZERO;
                loop {
                    let got = match a.transport {
                        Transport::CbZeroCopy => ring.read_with(Some(SLICE), |item| {
                            if item.len() == size {
                                dst.copy_from_slice(item);
                            }
                            item.len()
                        }),
                        _ => ring.read(&mut dst, Some(SLICE)),
                    };
                    match got {
                        Ok(len) if len == size => break,
                        Ok(len) => return Err(format!("an item of {len} bytes, expected {size}")),
                        Err(tachyon::Error::Timeout { .. }) => {
                            waited += SLICE;
                            if waited >= stall {
                                return Err(format!("no item for {stall:?} (is the writer stuck?)"));
                            }
                        }
                        Err(e) => return Err(e.to_string()),
                    }
                }
                payload::check(&dst, seq)
            })?
        }
    };
    println!("done {}", elapsed.as_nanos());
    Ok(())
}

/// GB/s bars of the headline configuration (1 MiB × 20 nodes if measured,
/// else the largest size and node count), with the memcpy of that size.
fn charts(settings: &Settings, samples: &[Sample]) -> Vec<crate::charts::Chart> {
    let res = Results::new(samples);
    let pick = |v: &[usize], want: usize| v.iter().copied().find(|&x| x == want).or(v.iter().copied().max());
    let procs = procs_chart(settings, &res);
    let (Some(size), Some(nodes)) = (pick(&settings.sizes, 1 << 20), pick(&settings.nodes, 20)) else {
        return procs.into_iter().collect();
    };
    let mut rows = vec![("memcpy, one core".to_owned(), Case::Memcpy { size })];
    for &transport in &settings.transports {
        if transport == Transport::RawRing {
            rows.push(("raw ring".to_owned(), raw_case(size, nodes)));
        } else {
            for &p in &settings.policies {
                let case = Case::Ring { transport, policy: Some(p), size, nodes };
                rows.push((format!("{}/{}", transport.name(), p.name()), case));
            }
        }
    }
    let values = rows.iter().map(|(_, c)| res.gbps(*c).map_or(0.0, |s| s.median)).collect();
    let mut out = vec![crate::charts::Chart::Bars {
        file: "bandwidth",
        title: format!(
            "Streaming bandwidth, {} items, {nodes} nodes (median of {} runs)",
            stats::bytes(size as u64),
            samples.iter().map(|s| s.rep + 1).max().unwrap_or(0)
        ),
        value_label: "GB/s (log scale; longer is better)".into(),
        categories: rows.into_iter().map(|(name, _)| name).collect(),
        series: vec![("GB/s".into(), values)],
    }];
    out.extend(procs);
    out
}

/// The measurements of one run of the suite, by case and repetition.
struct Results {
    gbps: HashMap<(Case, usize), f64>,
    items_per_sec: HashMap<(Case, usize), f64>,
}

impl Results {
    fn new(samples: &[Sample]) -> Self {
        let mut r = Results { gbps: HashMap::new(), items_per_sec: HashMap::new() };
        for s in samples {
            r.gbps.insert((s.case, s.rep), s.gbps());
            r.items_per_sec.insert((s.case, s.rep), s.items_per_sec());
        }
        r
    }

    fn of(map: &HashMap<(Case, usize), f64>, case: Case) -> Option<Spread> {
        let v: Vec<f64> = map.iter().filter(|((c, _), _)| *c == case).map(|(_, &x)| x).collect();
        Spread::of(&v)
    }

    fn gbps(&self, case: Case) -> Option<Spread> {
        Self::of(&self.gbps, case)
    }

    fn items_per_sec(&self, case: Case) -> Option<Spread> {
        Self::of(&self.items_per_sec, case)
    }

    /// `case ÷ reference` within each repetition (the two ran moments
    /// apart, so they share the machine's mood), over the repetitions.
    fn paired(&self, case: Case, reference: Case) -> Option<Spread> {
        let v: Vec<f64> = self
            .gbps
            .iter()
            .filter(|((c, _), _)| *c == case)
            .filter_map(|((_, rep), &x)| Some(x / self.gbps.get(&(reference, *rep))?))
            .collect();
        Spread::of(&v)
    }
}

fn raw_case(size: usize, nodes: usize) -> Case {
    Case::Ring { transport: Transport::RawRing, policy: None, size, nodes }
}

/// The markdown section for this group.
pub fn render(settings: &Settings, samples: &[Sample]) -> String {
    let res = Results::new(samples);
    let ratio = |r: Option<Spread>| r.map_or_else(|| "–".to_owned(), |r| format!("{:.2}", r.median));
    let has_raw = settings.transports.contains(&Transport::RawRing);

    let mut out = String::new();
    let _ = writeln!(
        out,
        "## Streaming bandwidth: CircularBuffer and topics (writer process → reader process)\n"
    );
    let _ = writeln!(
        out,
        "GB/s = 10^9 bytes of item payload delivered to the reader per second: the median of the \
         repetitions, their range in brackets. Every item is copied in by the writer and out by the \
         reader (a topic's loan-path reader reads it in place instead), and carries a sequence \
         number the reader checks. A topic has as many descriptors as the ring has nodes, \
         rounded up to a power of two (20 nodes: 32). The ratios are medians of \
         per-repetition ratios: each run divided by the memcpy or raw-ring run of the same \
         repetition, which ran moments before it.\n"
    );
    let _ = writeln!(
        out,
        "Settings: at most {} or {} items per ring run; CircularBuffer wait policies: {}.\n",
        stats::bytes(settings.volume),
        settings.max_items,
        settings.policies.iter().map(|p| p.name()).collect::<Vec<_>>().join(", "),
    );
    // The .NET library's configuration, for the headline.
    let (size, nodes) = (1 << 20, 20);
    let headline = Case::Ring { transport: Transport::CbZeroCopy, policy: Some(Policy::Spin), size, nodes };
    if let Some(g) = res.gbps(headline) {
        let _ = writeln!(
            out,
            "**Headline**: CircularBuffer with 20 × 1 MiB nodes (`write_with`/`read_with`, spin): \
             **{:.2} GB/s** = {} × the raw ring and {} × a one-core memcpy of the same run. \
             (The .NET SharedMemory library reported about 20 GB/s for this configuration on its \
             machine; the project aims at ≥ 0.8 × the raw ring.)\n",
            g.median,
            ratio(res.paired(headline, raw_case(size, nodes))),
            ratio(res.paired(headline, Case::Memcpy { size })),
        );
    }
    for transport in [Transport::TopicCopy, Transport::TopicLoan] {
        let case = Case::Ring { transport, policy: Some(Policy::Spin), size, nodes };
        if let Some(g) = res.gbps(case) {
            let _ = writeln!(
                out,
                "A {} with 1 MiB messages, 32 descriptors (spin): **{:.2} GB/s** = {} × the raw ring of \
                 20 × 1 MiB and {} × a one-core memcpy of the same run.\n",
                transport.describe(),
                g.median,
                ratio(res.paired(case, raw_case(size, nodes))),
                ratio(res.paired(case, Case::Memcpy { size })),
            );
        }
    }
    for &size in &settings.sizes {
        let memcpy = Case::Memcpy { size };
        let (items, _) = settings.items(size, 2);
        let _ = writeln!(
            out,
            "### {} items ({items} timed items per ring run, after a warm-up of two laps + 5 %)\n",
            stats::bytes(size as u64),
        );
        let _ = writeln!(
            out,
            "| nodes | transport | wait | GB/s | (min – max) | items/s | × memcpy | × raw ring |"
        );
        let _ = writeln!(out, "| ---: | --- | --- | ---: | --- | ---: | ---: | ---: |");
        let row = |out: &mut String, nodes: Option<usize>, case: Case, what: &str, wait: &str| {
            let Some(g) = res.gbps(case) else { return };
            let ips = res.items_per_sec(case).map_or(0.0, |s| s.median);
            let vs_memcpy = if case == memcpy { "1.00".to_owned() } else { ratio(res.paired(case, memcpy)) };
            let vs_raw = match nodes {
                Some(n) if has_raw => ratio(res.paired(case, raw_case(size, n))),
                _ => "–".to_owned(),
            };
            let _ = writeln!(
                out,
                "| {} | {what} | {wait} | {:.2} | ({:.2} – {:.2}) | {} | {vs_memcpy} | {vs_raw} |",
                nodes.map_or_else(|| "–".to_owned(), |n| n.to_string()),
                g.median,
                g.min,
                g.max,
                stats::si(ips),
            );
        };
        row(&mut out, None, memcpy, "memcpy, one core (reference)", "–");
        for &nodes in &settings.nodes {
            for &transport in &settings.transports {
                if transport == Transport::RawRing {
                    row(&mut out, Some(nodes), raw_case(size, nodes), transport.describe(), "spin");
                } else {
                    for &p in &settings.policies {
                        let case = Case::Ring { transport, policy: Some(p), size, nodes };
                        row(&mut out, Some(nodes), case, transport.describe(), p.name());
                    }
                }
            }
        }
        out.push('\n');

        // CircularBuffer ÷ raw ring at a glance.
        let cb: Vec<(Transport, Policy)> = settings
            .transports
            .iter()
            .filter(|&&t| t != Transport::RawRing)
            .flat_map(|&t| settings.policies.iter().map(move |&p| (t, p)))
            .collect();
        if !cb.is_empty() && has_raw {
            let _ = writeln!(
                out,
                "CircularBuffer and topics ÷ raw ring, {} items: median (min – max) of the per-repetition \
                 ratios; * = median below 0.8.\n",
                stats::bytes(size as u64)
            );
            let mut head = "| transport | wait |".to_owned();
            let mut rule = "| --- | --- |".to_owned();
            for n in &settings.nodes {
                let _ = write!(head, " {n} nodes |");
                rule.push_str(" ---: |");
            }
            let _ = writeln!(out, "{head}\n{rule}");
            for (t, p) in cb {
                let mut line = format!("| {} | {} |", t.describe(), p.name());
                for &nodes in &settings.nodes {
                    let case = Case::Ring { transport: t, policy: Some(p), size, nodes };
                    match res.paired(case, raw_case(size, nodes)) {
                        Some(r) => {
                            let mark = if r.median < 0.8 { "*" } else { "" };
                            let _ = write!(line, " {:.2}{mark} ({:.2} – {:.2}) |", r.median, r.min, r.max);
                        }
                        None => line.push_str(" – |"),
                    }
                }
                let _ = writeln!(out, "{line}");
            }
            out.push('\n');
        }
    }
    render_procs(settings, &res, &mut out);
    out
}

/// The N × M table: MB/s per writers × readers, nodes, item size,
/// transport and policy, with the ratio to 1 × 1.
fn render_procs(settings: &Settings, res: &Results, out: &mut String) {
    let cases: Vec<Case> = settings
        .sizes
        .iter()
        .flat_map(|&size| {
            settings.procs_nodes.iter().flat_map(move |&nodes| settings.procs_cases(size, nodes))
        })
        .filter(|&c| res.gbps(c).is_some())
        .collect();
    if cases.is_empty() {
        return;
    }
    let _ = writeln!(out, "### Several writers and readers (N writer × M reader processes)\n");
    let cpus = settings.cpus.as_ref().map_or(0, Vec::len);
    let _ = writeln!(
        out,
        "N writer processes and M reader processes on one ring; the readers compete (each item goes to \
         one of them). A topic has one partition of as many descriptors as the ring has nodes (rounded \
         up to a power of two). Every item is stamped with its writer and sequence number, every reader \
         checks every item, and the readers' counts and checksums together must equal those of the \
         items written. MB/s = 10^6 bytes of item payload delivered per second, from the first item \
         delivered to the last, all processes started first; {} or at most {} items per run. Placement: \
         {}. Medians over the repetitions, ranges in brackets; × 1×1 is the ratio to the 1×1 run of \
         the same ring, transport and wait policy, per repetition.\n",
        stats::bytes(settings.procs_volume),
        settings.max_items,
        match settings.cpus.as_ref() {
            Some(c) if !c.is_empty() =>
                format!("process k (writers first, then readers) pinned to CPU k mod {} of {c:?}", c.len()),
            _ => "not pinned".to_owned(),
        },
    );
    if cpus > 0 && settings.procs.iter().any(|s| (s.producers + s.consumers) as usize > cpus) {
        let _ = writeln!(
            out,
            "With more processes than the {cpus} CPUs, processes share CPUs: spinning ones take turns at the \
             scheduler's pace (measured as is; hybrid sleeps instead).\n"
        );
    }
    let _ =
        writeln!(out, "| writers × readers | nodes | item | transport | wait | MB/s | (min – max) | × 1×1 |");
    let _ = writeln!(out, "| --- | ---: | ---: | --- | --- | ---: | --- | ---: |");
    for case in cases {
        let Case::Procs { shape, transport, policy, size, nodes } = case else { continue };
        let Some(g) = res.gbps(case) else { continue };
        let one = Case::Procs { shape: Shape::ONE, transport, policy, size, nodes };
        let ratio = if settings.procs.contains(&Shape::ONE) { res.paired(case, one) } else { None };
        let _ = writeln!(
            out,
            "| {}×{} | {nodes} | {} | {} | {} | {:.0} | ({:.0} – {:.0}) | {} |",
            shape.producers,
            shape.consumers,
            stats::bytes(size as u64),
            transport.describe(),
            policy.name(),
            g.median * 1000.0,
            g.min * 1000.0,
            g.max * 1000.0,
            ratio.map_or_else(|| "–".to_owned(), |r| format!("{:.2}", r.median)),
        );
    }
    out.push('\n');
}

/// MB/s bars of the N × M runs of the largest item size and the first
/// N × M node count: one row per writers × readers, one bar per transport
/// and policy.
fn procs_chart(settings: &Settings, res: &Results) -> Option<crate::charts::Chart> {
    let size = settings.sizes.iter().copied().max()?;
    let nodes = settings.procs_nodes.first().copied()?;
    let mut series = Vec::new();
    for transport in settings.procs_transports() {
        for &policy in &settings.procs_policies {
            let values: Vec<f64> = settings
                .procs
                .iter()
                .map(|&shape| {
                    let case = Case::Procs { shape, transport, policy, size, nodes };
                    res.gbps(case).map_or(0.0, |s| s.median * 1000.0)
                })
                .collect();
            if values.iter().any(|&v| v > 0.0) {
                series.push((format!("{}/{}", transport.name(), policy.name()), values));
            }
        }
    }
    if series.is_empty() {
        return None;
    }
    Some(crate::charts::Chart::Bars {
        file: "bandwidth-vs-processes",
        title: format!(
            "Streaming bandwidth, N writers × M readers, {} items, {nodes} nodes",
            stats::bytes(size as u64)
        ),
        value_label: "MB/s (log scale; longer is better)".into(),
        categories: settings.procs.iter().map(|s| format!("{}×{}", s.producers, s.consumers)).collect(),
        series,
    })
}

/// One CSV line per sample:
/// `case,transport,policy,size,nodes,rep,items,bytes,elapsed_ns,gbps,writers,readers`.
pub fn csv(samples: &[Sample]) -> String {
    let mut out =
        "case,transport,policy,size,nodes,rep,items,bytes,elapsed_ns,gbps,writers,readers\n".to_owned();
    for s in samples {
        let (transport, policy, size, nodes, shape) = match s.case {
            Case::Memcpy { size } => ("memcpy", "", size, 0, Shape::ONE),
            Case::Ring { transport, policy, size, nodes } => {
                (transport.name(), policy.map_or("spin", Policy::name), size, nodes, Shape::ONE)
            }
            Case::Procs { shape, transport, policy, size, nodes } => {
                (transport.name(), policy.name(), size, nodes, shape)
            }
        };
        let _ = writeln!(
            out,
            "{},{transport},{policy},{size},{nodes},{},{},{},{},{:.4},{},{}",
            s.case,
            s.rep,
            s.items,
            s.bytes,
            s.elapsed.as_nanos(),
            s.gbps(),
            shape.producers,
            shape.consumers
        );
    }
    out
}

impl crate::suite::Group for Settings {
    type Case = Case;
    type Sample = Sample;

    fn name(&self) -> &'static str {
        "bandwidth"
    }

    fn cases(&self) -> Vec<Case> {
        Settings::cases(self)
    }

    fn warmup_case(&self) -> Option<Case> {
        Settings::cases(self).into_iter().find(|c| !matches!(c, Case::Memcpy { .. }))
    }

    fn run(&self, case: Case, rep: usize) -> Result<Sample, String> {
        run(case, self, rep)
    }

    fn progress(&self, s: &Sample) -> String {
        format!("{:>7.2} GB/s {:>9} items/s", s.gbps(), stats::si(s.items_per_sec()))
    }

    fn render(&self, samples: &[Sample]) -> String {
        render(self, samples)
    }

    fn csv(&self, samples: &[Sample]) -> String {
        csv(samples)
    }

    fn charts(&self, samples: &[Sample]) -> Vec<crate::charts::Chart> {
        charts(self, samples)
    }
}
