//! `tachyon-bench`: measures tachyon's transports between two real
//! processes, pinned to two cores, against references measured in the same
//! run, and writes a markdown report.
//!
//! ```text
//! cargo run --release -p tachyon-bench                # every group
//! cargo run --release -p tachyon-bench -- --group rpc # one group
//! cargo run --release -p tachyon-bench -- --help      # sizes, counts, reps, ...
//! tachyon-bench compare --control BASE NEW -- --group topics ...  # two builds, A/B
//! ```
//!
//! Groups:
//!
//! * `bandwidth`: `CircularBuffer` streaming bandwidth, against a
//!   single-core memcpy and a raw SPSC ring of memcpys, and with N writer
//!   × M reader processes ([`bandwidth`]).
//! * `rpc`: `RpcBuffer` request/response rate and round-trip latency,
//!   against a Unix domain socket ([`rpc`]).
//! * `topics`: topic round-trip latency and one-way throughput, copy and
//!   loan paths, spin / hybrid / futex, against a Unix domain socket, a
//!   pipe and a raw shared-memory ring ([`topics`]).
//! * `async`: an awaited topic receive (tokio) against the blocking
//!   receive and a tokio `UnixStream`, round trips ([`asynch`]).
//! * `fanout`: one producer process, 1, 2 and 4 consumer groups of one
//!   consumer process each, against a pipe, a Unix
//!   socket and a plain topic ([`fanout`]).
//!
//! * `bridge` (only when asked for, not in `all`): 1 KiB throughput and
//!   round trip across `tachyon-bridge` between two network namespaces,
//!   next to Zenoh's own pub/sub ([`bridge`]; needs root, `ip` and
//!   `cargo build --release -p tachyon-bridge` first).
//!
//! The binary starts itself again as the peer process (`tachyon-bench peer
//! ...`, hidden from `--help`). Every wait is bounded: a peer that dies or
//! stalls fails the run with an error naming the configuration. See
//! `docs/BENCHMARK.md`.

mod asynch;
mod bandwidth;
mod bridge;
mod charts;
mod compare;
mod fanout;
#[cfg(feature = "iceoryx2")]
mod iceoryx;
mod kernel;
mod latency;
mod machine;
mod payload;
mod peer;
mod pin;
mod policy;
mod probe;
mod rawring;
mod results;
mod rpc;
mod scaling;
mod stats;
mod suite;
mod throughput;
mod topics;

use bandwidth::Transport;
use clap::{Parser, Subcommand, ValueEnum};
use policy::Policy;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use suite::{Common, Group as _, Progress};

/// Measures tachyon between two real processes against references measured
/// in the same run, and writes a markdown report.
#[derive(Debug, Parser)]
#[command(name = "tachyon-bench", version, args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    peer: Option<Command>,
    #[command(flatten)]
    suite: SuiteArgs,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Runs several builds of this benchmark on the same topics runs,
    /// interleaved, and pairs each build's ratios with the first's.
    Compare(compare::CompareArgs),
    /// Internal: the peer process started by the suite.
    #[command(hide = true)]
    Peer {
        #[command(subcommand)]
        role: PeerRole,
    },
}

#[derive(Debug, Subcommand)]
enum PeerRole {
    /// Reads, checks and times the items of one ring run.
    Reader(bandwidth::ReaderArgs),
    /// Answers the requests of one RPC run.
    Rpc(rpc::PeerArgs),
    /// Echoes or consumes the messages of one topics run.
    Topics(topics::PeerArgs),
    /// A producer or a consumer of one N × M scaling run.
    Scaling(scaling::PeerArgs),
    /// The producer or a group's consumer of one fan-out run.
    Fanout(fanout::PeerArgs),
}

/// Groups of measurements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Group {
    /// Every group (but `bridge`).
    All,
    /// CircularBuffer streaming bandwidth vs memcpy and a raw ring.
    Bandwidth,
    /// RpcBuffer calls/s and round trips vs a Unix domain socket.
    Rpc,
    /// Round trips and throughput of topics, CircularBuffer, RpcBuffer vs
    /// a Unix socket, a pipe, TCP, raw shared memory.
    Topics,
    /// Loan-path round trip vs payload size; throughput vs partitions and
    /// vs N producer × M consumer processes.
    Scaling,
    /// Awaited topic receive vs blocking receive vs tokio UnixStream.
    Async,
    /// One producer, 1, 2, 4 consumer groups (one process each) vs a
    /// pipe, a Unix socket and a plain topic.
    Fanout,
    /// Topics across tachyon-bridge between two network namespaces vs
    /// Zenoh pub/sub (not in `all`; needs root and the tachyon-bridge
    /// binaries: `cargo build --release -p tachyon-bridge`).
    Bridge,
}

#[derive(Debug, clap::Args)]
struct SuiteArgs {
    /// Groups to run.
    #[arg(long = "group", value_enum, value_delimiter = ',', default_value = "all")]
    groups: Vec<Group>,

    /// Repetitions of every configuration; the report gives the median and
    /// the range. Repetitions are interleaved: each one runs every
    /// configuration of a group once, so a noisy moment hits them all alike.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
    reps: u32,

    /// Do not pin this process and its peer to two CPUs.
    #[arg(long)]
    no_pin: bool,

    /// This process's and the peer's CPU (default: the first two this
    /// process may use).
    #[arg(long, value_delimiter = ',', num_args = 1)]
    cpus: Option<Vec<usize>>,

    /// Seconds a transport may make no progress before the run fails.
    #[arg(long, default_value_t = 10)]
    stall_secs: u64,

    /// Folder for report.md, one CSV file per group and the charts (SVG
    /// and PNG).
    #[arg(long, default_value = "target/bench-report")]
    out: PathBuf,

    /// bandwidth: item (= node) sizes: bytes, or with a unit (KiB, MiB).
    #[arg(long, value_delimiter = ',', default_value = "1KiB,1MiB", value_parser = parse_size)]
    sizes: Vec<usize>,

    /// bandwidth: node counts of the one-writer one-reader rings (`none`
    /// for none: only the N × M runs).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "2,4,8,20,50",
        value_parser = |s: &str| or_none(s, parse_nodes)
    )]
    nodes: Vec<OrNone<usize>>,

    /// bandwidth: transports to measure (the raw ring is the reference for
    /// the ratios).
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "raw-ring,cb-zero-copy,cb-copy,topic-copy,topic-loan"
    )]
    transports: Vec<Transport>,

    /// bandwidth: wait policies of the CircularBuffer and topic runs (both
    /// ends).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "spin,hybrid")]
    policies: Vec<Policy>,

    /// bandwidth: payload per ring run (then capped by --max-items).
    #[arg(long, default_value = "2GiB", value_parser = parse_volume)]
    volume: u64,

    /// bandwidth: most items per ring run (caps small items).
    #[arg(long, default_value_t = 500_000)]
    max_items: u64,

    /// bandwidth: writer × reader processes of the N × M runs, e.g. 2x1
    /// (`none` for none), on the transports of --transports that have
    /// several writers and readers (cb-zero-copy, cb-copy, topic-copy).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "1x1,2x1,1x2,2x2",
        value_parser = |s: &str| or_none(s, scaling::parse_shape)
    )]
    bw_procs: Vec<OrNone<scaling::Shape>>,

    /// bandwidth: node counts of the N × M runs.
    #[arg(long, value_delimiter = ',', default_value = "20")]
    bw_procs_nodes: Vec<usize>,

    /// bandwidth: wait policies of the N × M runs (hybrid is the library's
    /// default; spinning processes on shared CPUs take turns at the
    /// scheduler's pace).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "hybrid")]
    bw_procs_policies: Vec<Policy>,

    /// bandwidth: payload per N × M run (then capped by --max-items).
    #[arg(long, default_value = "256MiB", value_parser = parse_volume)]
    bw_procs_volume: u64,

    /// rpc: timed calls per run with 1 KiB messages.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    rpc_calls: u64,

    /// rpc: timed calls per run with 512,000-byte messages.
    #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u64).range(1..))]
    rpc_large_calls: u64,

    /// rpc: transports (the Unix socket is the reference for the ratios; the
    /// raw floor bounds `request`'s).
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "unix,raw-floor,rpc,rpc-inline,rpc-in-place"
    )]
    rpc_transports: Vec<rpc::Transport>,

    /// rpc: wait policies of the RpcBuffer runs (both ends; hybrid is the
    /// library's default).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "spin,hybrid,futex")]
    rpc_policies: Vec<Policy>,

    /// topics: timed round trips per latency run.
    #[arg(long, default_value_t = 50_000, value_parser = clap::value_parser!(u64).range(1..))]
    round_trips: u64,

    /// topics: timed messages per throughput run.
    #[arg(long, default_value_t = 200_000, value_parser = clap::value_parser!(u64).range(1..))]
    messages: u64,

    /// topics: message size of the round trips.
    #[arg(long, default_value = "256", value_parser = parse_message_size)]
    latency_size: usize,

    /// topics: message sizes of the throughput runs.
    #[arg(
        long,
        alias = "throughput-size",
        value_delimiter = ',',
        default_value = "64,1KiB",
        value_parser = parse_message_size
    )]
    throughput_sizes: Vec<usize>,

    /// topics: which measurements.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "latency,throughput")]
    topic_tests: Vec<topics::Test>,

    /// topics: wait policies of the tachyon transports (both ends).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "spin,hybrid,futex")]
    topic_policies: Vec<Policy>,

    /// topics: descriptors per partition (and raw-ring and CircularBuffer
    /// slots).
    #[arg(long, default_value_t = 1024)]
    capacity: u32,

    /// topics: transports (the Unix socket, the pipe and the raw ring are
    /// the references for the ratios; flag and rpc measure latency only).
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = TOPIC_TRANSPORTS
    )]
    topic_transports: Vec<topics::Via>,

    /// scaling: payload sizes of the loan-path round trips (`none` for
    /// none).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "64,256,1KiB,4KiB,16KiB,64KiB,256KiB,1MiB",
        value_parser = |s: &str| or_none(s, parse_message_size)
    )]
    scaling_sizes: Vec<OrNone<usize>>,

    /// scaling: timed round trips per run.
    #[arg(long, default_value_t = 5_000, value_parser = clap::value_parser!(u64).range(1..))]
    scaling_round_trips: u64,

    /// scaling: partition counts of the throughput runs with one producer
    /// and one consumer (powers of two; `none` for none).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "1,2,4",
        value_parser = |s: &str| or_none(s, parse_count)
    )]
    scaling_partitions: Vec<OrNone<u32>>,

    /// scaling: producer × consumer processes of the N × M runs, e.g. 2x1
    /// (`none` for none).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "1x1,2x1,1x2,2x2",
        value_parser = |s: &str| or_none(s, scaling::parse_shape)
    )]
    scaling_procs: Vec<OrNone<scaling::Shape>>,

    /// scaling: partition counts of the N × M runs (powers of two).
    #[arg(long, value_delimiter = ',', default_value = "1,4")]
    scaling_procs_partitions: Vec<u32>,

    /// scaling: wait policies of the N × M runs (hybrid is the library's
    /// default).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "spin,hybrid")]
    scaling_procs_policies: Vec<Policy>,

    /// scaling: data paths of the one-process runs (a producer and a
    /// consumer thread, the consumer's handle a clone or its own): `copy`,
    /// `loan` (`none` for none).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "copy,loan",
        value_parser = |s: &str| or_none(s, scaling::parse_thread_path)
    )]
    scaling_threads: Vec<OrNone<scaling::ThreadPath>>,

    /// fanout: consumer groups of the runs (one consumer process each).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "1,2,4",
        value_parser = |s: &str| or_none(s, fanout::parse_groups)
    )]
    fanout_groups: Vec<OrNone<u32>>,

    /// fanout: message sizes.
    #[arg(long, value_delimiter = ',', default_value = "64,1KiB", value_parser = parse_message_size)]
    fanout_sizes: Vec<usize>,

    /// fanout: wait policies of the group runs and the plain topic (hybrid
    /// is the library's default; spinning makes no sense with more
    /// processes than CPUs).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "hybrid")]
    fanout_policies: Vec<Policy>,

    /// fanout: messages per run.
    #[arg(long, default_value_t = 50_000, value_parser = clap::value_parser!(u64).range(1..))]
    fanout_messages: u64,

    /// fanout: reference transports, one-way (pipe, unix; copy: a plain
    /// topic's default group).
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "pipe,unix,copy",
        value_parser = |s: &str| or_none(s, |s| topics::Via::from_str(s, true))
    )]
    fanout_references: Vec<OrNone<topics::Via>>,

    /// bridge: messages per throughput run.
    #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u64).range(1..))]
    bridge_messages: u64,

    /// bridge: round trips per latency run.
    #[arg(long, default_value_t = 2_000, value_parser = clap::value_parser!(u64).range(1..))]
    bridge_round_trips: u64,

    /// scaling: wait policy of both ends.
    #[arg(long, value_enum, default_value = "spin")]
    scaling_policy: Policy,
}

/// The topics group's transports by default (with iceoryx2 when built in).
#[cfg(not(feature = "iceoryx2"))]
const TOPIC_TRANSPORTS: &str =
    "raw-ring,mpmc-ring,cell-claim-ring,cell-claim-cas-ring,chunk-pool-ring,chunk-pool-hot-ring,leased-ring,leased-fenced-ring,flag,unix,pipe,tcp,copy,copy-read,copy-light,copy-inline,copy-inline-light,copy-inline-batch,loan,in-place,cb,cb-light,cb-batch,rpc,rpc-inline";
#[cfg(feature = "iceoryx2")]
const TOPIC_TRANSPORTS: &str =
    "raw-ring,mpmc-ring,cell-claim-ring,cell-claim-cas-ring,chunk-pool-ring,chunk-pool-hot-ring,leased-ring,leased-fenced-ring,flag,unix,pipe,tcp,copy,copy-read,copy-light,copy-inline,copy-inline-light,copy-inline-batch,loan,in-place,cb,cb-light,cb-batch,rpc,rpc-inline,iceoryx2";

fn parse_size(s: &str) -> Result<usize, String> {
    let n = stats::parse_bytes(s)?;
    if n < payload::MIN_ITEM as u64 || n > u64::from(u32::MAX) {
        return Err(format!("{s}: item sizes must be {} B to 4 GiB", payload::MIN_ITEM));
    }
    Ok(n as usize)
}

fn parse_message_size(s: &str) -> Result<usize, String> {
    let n = stats::parse_bytes(s)?;
    if n < payload::MIN_ITEM as u64 || n > tachyon::bus::MAX_MESSAGE as u64 {
        return Err(format!("{s}: topic messages must be {} B to 1 MiB", payload::MIN_ITEM));
    }
    Ok(n as usize)
}

/// An item of a list that may be `none` (an empty list).
#[derive(Debug, Clone, Copy)]
struct OrNone<T>(Option<T>);

fn or_none<T>(s: &str, parse: impl Fn(&str) -> Result<T, String>) -> Result<OrNone<T>, String> {
    if s.trim() == "none" {
        return Ok(OrNone(None));
    }
    parse(s).map(|t| OrNone(Some(t)))
}

/// The items of a list that may say `none`.
fn some<T: Copy>(v: &[OrNone<T>]) -> Vec<T> {
    v.iter().filter_map(|t| t.0).collect()
}

fn parse_nodes(s: &str) -> Result<usize, String> {
    s.trim().parse().map_err(|_| format!("{s:?} is not a node count"))
}

fn parse_count(s: &str) -> Result<u32, String> {
    s.trim().parse().map_err(|_| format!("{s:?} is not a count"))
}

fn parse_volume(s: &str) -> Result<u64, String> {
    stats::parse_bytes(s)
}

fn main() {
    let cli = Cli::parse();
    let (who, result) = match cli.peer {
        Some(Command::Peer { role: PeerRole::Reader(args) }) => {
            ("tachyon-bench reader peer", bandwidth::reader(args))
        }
        Some(Command::Peer { role: PeerRole::Rpc(args) }) => ("tachyon-bench rpc peer", rpc::peer(args)),
        Some(Command::Peer { role: PeerRole::Topics(args) }) => {
            ("tachyon-bench topics peer", topics::peer(args))
        }
        Some(Command::Peer { role: PeerRole::Scaling(args) }) => {
            ("tachyon-bench scaling peer", scaling::peer(args))
        }
        Some(Command::Peer { role: PeerRole::Fanout(args) }) => {
            ("tachyon-bench fanout peer", fanout::peer(args))
        }
        Some(Command::Compare(args)) => ("tachyon-bench compare", compare::compare(args)),
        None => ("tachyon-bench", suite(cli.suite)),
    };
    if let Err(e) = result {
        eprintln!("{who}: {e}");
        std::process::exit(1);
    }
}

fn suite(args: SuiteArgs) -> Result<(), String> {
    if cfg!(debug_assertions) {
        eprintln!("tachyon-bench: warning: a debug build; run with --release for meaningful numbers");
    }
    for (flag, list) in [("--nodes", &some(&args.nodes)), ("--bw-procs-nodes", &args.bw_procs_nodes)] {
        if let Some(&n) = list.iter().find(|&&n| !(2..=1 << 20).contains(&n)) {
            return Err(format!("{flag}: {n} is not a node count from 2 to 1048576"));
        }
    }
    if !args.capacity.is_power_of_two() || !(2..=tachyon::bus::MAX_CAPACITY).contains(&args.capacity) {
        return Err(format!("--capacity: {} is not a power of two from 2 to 1048576", args.capacity));
    }
    for (flag, list) in [
        ("--scaling-partitions", &some(&args.scaling_partitions)),
        ("--scaling-procs-partitions", &args.scaling_procs_partitions),
    ] {
        if let Some(&p) = list.iter().find(|&&p| !p.is_power_of_two() || p > tachyon::bus::MAX_PARTITIONS) {
            return Err(format!(
                "{flag}: {p} is not a power of two from 1 to {}",
                tachyon::bus::MAX_PARTITIONS
            ));
        }
    }
    if let Some(s) = some(&args.scaling_procs).into_iter().find(|s| 2 * s.producers > args.capacity) {
        return Err(format!("--scaling-procs: {s} needs a --capacity of at least twice its producers"));
    }
    let wants =
        |g: Group| args.groups.contains(&g) || (args.groups.contains(&Group::All) && g != Group::Bridge);
    sweep_stale_segments();
    let machine = machine::Machine::probe();
    let allowed = pin::allowed_cpus();
    let placement = pin::Placement::choose(args.no_pin, args.cpus.as_deref())?;
    if let pin::Placement::Pinned { writer, .. } = placement {
        pin::pin_to(writer)?;
    }
    let common =
        Common { reps: args.reps as usize, stall: Duration::from_secs(args.stall_secs.max(1)), placement };
    // The N × M runs: process k on CPU k mod n, of the two of --cpus, or of
    // every CPU this process could use before it pinned itself.
    let procs_cpus = match placement {
        pin::Placement::Pinned { writer, reader } if args.cpus.is_some() => Some(vec![writer, reader]),
        pin::Placement::Pinned { .. } => Some(allowed),
        pin::Placement::Free(_) => None,
    };
    let bandwidth = bandwidth::Settings {
        sizes: args.sizes.clone(),
        nodes: some(&args.nodes),
        transports: dedup(&args.transports),
        policies: dedup(&args.policies),
        volume: args.volume,
        max_items: args.max_items,
        stall: common.stall,
        placement,
        procs: in_order(&some(&args.bw_procs)),
        procs_nodes: dedup(&args.bw_procs_nodes),
        procs_policies: dedup(&args.bw_procs_policies),
        procs_volume: args.bw_procs_volume,
        cpus: procs_cpus.clone(),
    };
    let rpc = rpc::Settings {
        calls: args.rpc_calls,
        large_calls: args.rpc_large_calls,
        policies: dedup(&args.rpc_policies),
        transports: dedup(&args.rpc_transports),
        common,
    };
    let topics = topics::Settings {
        round_trips: args.round_trips,
        messages: args.messages,
        latency_size: args.latency_size,
        throughput_sizes: dedup(&args.throughput_sizes),
        policies: dedup(&args.topic_policies),
        transports: dedup(&args.topic_transports),
        tests: dedup(&args.topic_tests),
        capacity: args.capacity,
        common,
    };
    let scaling = scaling::Settings {
        topics: topics::Settings {
            round_trips: args.scaling_round_trips,
            messages: args.messages,
            capacity: args.capacity,
            ..topics.clone()
        },
        sizes: dedup(&some(&args.scaling_sizes)),
        partitions: dedup(&some(&args.scaling_partitions)),
        throughput_size: 1024,
        policy: args.scaling_policy,
        procs: scaling::ProcsSettings {
            shapes: in_order(&some(&args.scaling_procs)),
            partitions: dedup(&args.scaling_procs_partitions),
            policies: dedup(&args.scaling_procs_policies),
            size: 1024,
            messages: args.messages,
            capacity: args.capacity,
            stall: common.stall,
            cpus: procs_cpus.clone(),
        },
        threads: scaling::ThreadsSettings {
            paths: in_order(&some(&args.scaling_threads)),
            policy: args.scaling_policy,
            size: 1024,
            messages: args.messages,
            capacity: args.capacity,
            stall: common.stall,
            placement,
        },
    };

    let asynch = asynch::Settings {
        topics: topics.clone(),
        policies: {
            let p: Vec<_> = dedup(&args.topic_policies).into_iter().filter(|&p| p != Policy::Spin).collect();
            if p.is_empty() {
                vec![Policy::Hybrid]
            } else {
                p
            }
        },
    };
    let fanout_refs = dedup(&some(&args.fanout_references));
    if let Some(v) =
        fanout_refs.iter().find(|v| !matches!(v, topics::Via::Pipe | topics::Via::Unix | topics::Via::Copy))
    {
        return Err(format!("--fanout-references: {} is not pipe, unix or copy", v.name()));
    }
    let fanout = fanout::Settings {
        topics: topics::Settings {
            messages: args.fanout_messages,
            policies: dedup(&args.fanout_policies),
            ..topics.clone()
        },
        sizes: dedup(&args.fanout_sizes),
        groups: in_order(&some(&args.fanout_groups)),
        policies: dedup(&args.fanout_policies),
        references: fanout_refs,
        messages: args.fanout_messages,
        capacity: args.capacity,
        stall: common.stall,
        cpus: procs_cpus.clone(),
    };
    let bridge = bridge::Settings { messages: args.bridge_messages, round_trips: args.bridge_round_trips };

    let mut progress = Progress { done: 0, total: 0, started: Instant::now() };
    if wants(Group::Bandwidth) {
        progress.total += bandwidth.cases().len() * common.reps;
    }
    if wants(Group::Rpc) {
        progress.total += rpc.cases().len() * common.reps;
    }
    if wants(Group::Topics) {
        progress.total += topics.cases().len() * common.reps;
    }
    if wants(Group::Scaling) {
        progress.total += scaling.cases().len() * common.reps;
    }
    if wants(Group::Async) {
        progress.total += asynch.cases().len() * common.reps;
    }
    if wants(Group::Fanout) {
        progress.total += fanout.cases().len() * common.reps;
    }
    if wants(Group::Bridge) {
        progress.total += bridge.cases().len() * common.reps;
    }
    let started = Instant::now();
    let mut sections = Vec::new();
    let mut csvs = Vec::new();
    let mut charts = Vec::new();
    let mut run = |g: &dyn Fn(&mut Progress) -> Result<Output, String>| -> Result<(), String> {
        let (section, csv, group_charts) = g(&mut progress)?;
        sections.push(section);
        csvs.push(csv);
        charts.extend(group_charts);
        Ok(())
    };
    if wants(Group::Topics) {
        run(&|p| measure(&topics, common.reps, p))?;
    }
    if wants(Group::Scaling) {
        run(&|p| measure(&scaling, common.reps, p))?;
    }
    if wants(Group::Async) {
        run(&|p| measure(&asynch, common.reps, p))?;
    }
    if wants(Group::Fanout) {
        run(&|p| measure(&fanout, common.reps, p))?;
    }
    if wants(Group::Bandwidth) {
        run(&|p| measure(&bandwidth, common.reps, p))?;
    }
    if wants(Group::Rpc) {
        run(&|p| measure(&rpc, common.reps, p))?;
    }
    if wants(Group::Bridge) {
        run(&|p| measure(&bridge, common.reps, p))?;
    }

    std::fs::create_dir_all(&args.out).map_err(|e| format!("cannot create {}: {e}", args.out.display()))?;
    let mut report = header(&common, &machine, started.elapsed());
    for s in sections {
        report.push_str(&s);
    }
    if !charts.is_empty() {
        report.push_str("## Charts\n\nEach as SVG and PNG in the report's folder.\n\n");
        for chart in &charts {
            let [svg, _png] = charts::write(chart, &args.out)?;
            report.push_str(&format!("![{}]({svg})\n\n", chart.file()));
        }
    }
    print!("{report}");
    let write = |file: &str, text: &str| {
        let path = args.out.join(file);
        std::fs::write(&path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))
    };
    write("report.md", &report)?;
    for (group, csv) in csvs {
        write(&format!("{group}.csv"), &csv)?;
    }
    eprintln!("tachyon-bench: report written to {}", args.out.join("report.md").display());
    Ok(())
}

/// Removes the segments an interrupted earlier run left in `/dev/shm` (a
/// Ctrl-C skips the destructors that would have removed them): the rings
/// nobody is attached to, and the benchmark's persistent topic regions
/// nobody is attached to.
fn sweep_stale_segments() {
    let Ok(segments) = tachyon::segment::list() else { return };
    let orphan = |s: &tachyon::segment::SegmentInfo| match &s.status {
        tachyon::segment::SegmentStatus::Valid { attachers, .. } => !attachers.iter().any(|a| a.alive),
        tachyon::segment::SegmentStatus::Invalid(_) => false,
    };
    let stale: Vec<_> = segments
        .iter()
        .filter(|s| s.name.starts_with("tachyon-bench-") && (s.is_stale() || orphan(s)))
        .collect();
    let removed = stale.iter().filter(|s| tachyon::Segment::remove(&s.name).is_ok()).count();
    if removed > 0 {
        eprintln!("tachyon-bench: removed {removed} segment(s) left by an interrupted run");
    }
}

/// A group's report section, its CSV (group name, text) and its charts.
type Output = (String, (&'static str, String), Vec<charts::Chart>);

/// Runs a group and renders what it measured.
fn measure<G: suite::Group>(g: &G, reps: usize, progress: &mut Progress) -> Result<Output, String> {
    let samples = suite::measure(g, reps, progress)?;
    Ok((g.render(&samples), (g.name(), g.csv(&samples)), g.charts(&samples)))
}

/// The items in the order given (a table's rows), without repeats.
fn in_order<T: PartialEq + Copy>(v: &[T]) -> Vec<T> {
    let mut out: Vec<T> = Vec::new();
    for &t in v {
        if !out.contains(&t) {
            out.push(t);
        }
    }
    out
}

fn dedup<T: Ord + Copy>(v: &[T]) -> Vec<T> {
    let mut out = v.to_vec();
    out.sort();
    out.dedup();
    out
}

fn header(common: &Common, m: &machine::Machine, took: Duration) -> String {
    let command: String = std::env::args().skip(1).map(|a| format!(" {a}")).collect();
    let mut out = String::from("# tachyon-bench report\n\n");
    out.push_str("| | |\n| --- | --- |\n");
    let mut fact = |k: &str, v: String| out.push_str(&format!("| {k} | {v} |\n"));
    fact("date", machine::utc_now());
    fact("CPU", m.cpu.clone());
    fact("logical CPUs", format!("{} online, {} usable by this process", m.online, m.allowed));
    fact("virtualised", if m.virtualised { "yes (hypervisor flag)".into() } else { "no".into() });
    fact("kernel", m.kernel.clone());
    fact("clock source", m.clocksource.clone());
    fact("placement", common.placement.describe());
    fact(
        "command",
        format!(
            "`tachyon-bench{command}` ({} build)",
            if cfg!(debug_assertions) { "debug" } else { "release" }
        ),
    );
    fact(
        "method",
        format!(
            "{} repetitions, interleaved within each group, after one unrecorded warm-up run per \
             group; stall timeout {} s; {:.0} s in all",
            common.reps,
            common.stall.as_secs(),
            took.as_secs_f64()
        ),
    );
    out.push('\n');
    out
}
