//! `tachyon-bench`: measures tachyon's transports between two real
//! processes, pinned to two cores, against references measured in the same
//! run, and writes a markdown report.
//!
//! ```text
//! cargo run --release -p tachyon-bench                # the default suite
//! cargo run --release -p tachyon-bench -- --help      # sizes, nodes, reps, ...
//! ```
//!
//! Groups (one today):
//!
//! * `bandwidth`: `CircularBuffer` streaming bandwidth, against a
//!   single-core memcpy and a raw SPSC ring of memcpys ([`bandwidth`]).
//!
//! The binary starts itself again as the peer process (`tachyon-bench peer
//! reader ...`, hidden from `--help`). Every wait is bounded: a peer that
//! dies or stalls fails the run with an error naming the configuration.
//! See `docs/BENCHMARK.md`.

mod bandwidth;
mod machine;
mod payload;
mod peer;
mod pin;
mod rawring;
mod stats;

use bandwidth::{Policy, Transport};
use clap::{Parser, Subcommand, ValueEnum};
use std::path::PathBuf;
use std::time::{Duration, Instant};

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
}

/// Groups of measurements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Group {
    /// CircularBuffer streaming bandwidth vs memcpy and a raw ring.
    Bandwidth,
}

#[derive(Debug, clap::Args)]
struct SuiteArgs {
    /// Groups to run.
    #[arg(long = "group", value_enum, value_delimiter = ',', default_value = "bandwidth")]
    groups: Vec<Group>,

    /// Item (= node) sizes: bytes, or with a unit (KiB, MiB).
    #[arg(long, value_delimiter = ',', default_value = "1KiB,1MiB", value_parser = parse_size)]
    sizes: Vec<usize>,

    /// Node counts of the rings.
    #[arg(long, value_delimiter = ',', default_value = "2,4,8,20,50")]
    nodes: Vec<usize>,

    /// Transports to measure (the raw ring is the reference for the ratios).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "raw-ring,cb-zero-copy,cb-copy")]
    transports: Vec<Transport>,

    /// Wait policies of the CircularBuffer runs (both ends).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "spin,hybrid")]
    policies: Vec<Policy>,

    /// Repetitions of every configuration; the report gives the median and
    /// the range. Repetitions are interleaved: each one runs every
    /// configuration once, so a noisy moment hits them all alike.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
    reps: u32,

    /// Payload per ring run (then capped by --max-items).
    #[arg(long, default_value = "2GiB", value_parser = parse_volume)]
    volume: u64,

    /// Most items per ring run (caps small items).
    #[arg(long, default_value_t = 500_000)]
    max_items: u64,

    /// Do not pin the writer and the reader to two CPUs.
    #[arg(long)]
    no_pin: bool,

    /// The writer's and the reader's CPU (default: the first two this
    /// process may use).
    #[arg(long, value_delimiter = ',', num_args = 1)]
    cpus: Option<Vec<usize>>,

    /// Seconds a ring may stay full or empty before the run fails.
    #[arg(long, default_value_t = 10)]
    stall_secs: u64,

    /// Folder for report.md and samples.csv.
    #[arg(long, default_value = "target/bench-report")]
    out: PathBuf,
}

fn parse_size(s: &str) -> Result<usize, String> {
    let n = stats::parse_bytes(s)?;
    if n < payload::MIN_ITEM as u64 || n > u64::from(u32::MAX) {
        return Err(format!("{s}: item sizes must be {} B to 4 GiB", payload::MIN_ITEM));
    }
    Ok(n as usize)
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
    if let Some(&n) = args.nodes.iter().find(|&&n| !(2..=1 << 20).contains(&n)) {
        return Err(format!("--nodes: {n} is not a node count from 2 to 1048576"));
    }
    sweep_stale_segments();
    let machine = machine::Machine::probe();
    let placement = pin::Placement::choose(args.no_pin, args.cpus.as_deref())?;
    if let pin::Placement::Pinned { writer, .. } = placement {
        pin::pin_to(writer)?;
    }
    let settings = bandwidth::Settings {
        sizes: args.sizes.clone(),
        nodes: args.nodes.clone(),
        transports: dedup(&args.transports),
        policies: dedup(&args.policies),
        volume: args.volume,
        max_items: args.max_items,
        stall: Duration::from_secs(args.stall_secs.max(1)),
        placement,
    };
    let cases = if args.groups.contains(&Group::Bandwidth) { settings.cases() } else { Vec::new() };
    let runs = cases.len() * args.reps as usize;
    let started = Instant::now();
    // One unrecorded run first: a vCPU that has been idle for a while runs
    // slowly until the host gives it a core again.
    if let Some(&case) = cases.iter().find(|c| matches!(c, bandwidth::Case::Ring { .. })) {
        bandwidth::run(case, &settings, 0).map_err(|e| format!("{case}, warm-up run: {e}"))?;
    }
    let mut samples = Vec::with_capacity(runs);
    for rep in 0..args.reps as usize {
        for &case in &cases {
            let sample = bandwidth::run(case, &settings, rep)
                .map_err(|e| format!("{case}, repetition {}: {e}", rep + 1))?;
            eprintln!(
                "[{:>3}/{runs}] rep {} {case:<34} {:>7.2} GB/s {:>9} items/s",
                samples.len() + 1,
                rep + 1,
                sample.gbps(),
                stats::si(sample.items_per_sec())
            );
            samples.push(sample);
        }
    }

    let report = render(&args, &settings, &machine, &samples, started.elapsed());
    print!("{report}");
    std::fs::create_dir_all(&args.out).map_err(|e| format!("cannot create {}: {e}", args.out.display()))?;
    let write = |file: &str, text: &str| {
        let path = args.out.join(file);
        std::fs::write(&path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))
    };
    write("report.md", &report)?;
    write("samples.csv", &bandwidth::csv(&samples))?;
    eprintln!("tachyon-bench: report written to {}", args.out.join("report.md").display());
    Ok(())
}

/// Removes the rings an interrupted earlier run left in `/dev/shm` (a
/// Ctrl-C skips the destructors that would have removed them).
fn sweep_stale_segments() {
    let Ok(segments) = tachyon::segment::list() else { return };
    let stale: Vec<_> =
        segments.iter().filter(|s| s.name.starts_with("tachyon-bench-") && s.is_stale()).collect();
    let removed = stale.iter().filter(|s| tachyon::Segment::remove(&s.name).is_ok()).count();
    if removed > 0 {
        eprintln!("tachyon-bench: removed {removed} segment(s) left by an interrupted run");
    }
}

fn dedup<T: Ord + Copy>(v: &[T]) -> Vec<T> {
    let mut out = v.to_vec();
    out.sort();
    out.dedup();
    out
}

fn render(
    args: &SuiteArgs,
    settings: &bandwidth::Settings,
    m: &machine::Machine,
    samples: &[bandwidth::Sample],
    took: Duration,
) -> String {
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
    fact("placement", settings.placement.describe());
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
            "{} repetitions, interleaved, after one unrecorded warm-up run; ≤ {} or ≤ {} items per \
             ring run; CircularBuffer wait policies: {}; stall timeout {} s; {:.0} s in all",
            args.reps,
            stats::bytes(settings.volume),
            settings.max_items,
            settings.policies.iter().map(|p| format!("{p:?}").to_lowercase()).collect::<Vec<_>>().join(", "),
            settings.stall.as_secs(),
            took.as_secs_f64()
        ),
    );
    out.push('\n');
    if args.groups.contains(&Group::Bandwidth) {
        out.push_str(&bandwidth::render(settings, samples));
    }
    out
}
