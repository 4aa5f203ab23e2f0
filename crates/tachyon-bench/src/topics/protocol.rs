//! What the benchmark process and the topics peer say to each other: the
//! peer's command line, the echo a pong must be, the peer's `done` report.

use super::case::{Case, Settings, Test, Via};
use crate::payload;
use crate::peer::{Peer, STARTUP};
use crate::policy::Policy;
use std::time::Duration;

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

impl PeerArgs {
    /// `--name`, which every transport but the kernel's needs.
    pub(super) fn required_name(&self) -> Result<String, String> {
        self.name.clone().ok_or_else(|| "--name is required".to_owned())
    }
}
