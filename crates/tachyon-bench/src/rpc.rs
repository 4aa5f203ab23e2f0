//! The rpc group: `RpcBuffer` request/response between two processes,
//! against a Unix domain socket request/response of the
//! same sizes measured in the same run.
//!
//! One run: this process creates the channel as its owner, starts the peer
//! (`tachyon-bench peer rpc ...`), which opens it with an echo handler, and
//! makes `warmup + calls` calls one after the other, each with a message
//! stamped with its sequence number. Every response must equal its request
//! byte for byte. Each call is timed (`Instant` before `request`, after it
//! returns) into an `hdrhistogram`; calls/s is the timed calls divided by
//! the time they took together.
//!
//! The Unix socket reference does the same over a `socketpair`: this
//! process writes a 4-byte little-endian length and the message in one
//! `write`, the peer reads the length and the message and writes both back
//! in one `write`, this process reads them and compares.
//!
//! The floor reference makes a call's copies and nothing else, through
//! two raw SPSC rings of two slots each (the topics group's raw ring, a
//! spinning cursor each way, no claims, no headers, no recovery): this
//! process copies the message into the request ring, the peer copies it
//! out (as the echo handler's `to_vec` does) and into the response ring
//! (as the channel copies a handler's response into its node), this
//! process copies it out (as `request` returns it in a `Vec`) and compares.
//! Four copies of the message and a compare per call, the ones `request`
//! makes with that handler; no allocation (both sides reuse one buffer).
//! Its calls/s bounds what `request` can reach on the machine: where it is
//! under a bar, the bar is out of reach of any channel that copies as
//! `request` must, and the copies' memory bandwidth is what is left.

use crate::kernel;
use crate::latency::{self, Percentiles};
use crate::payload;
use crate::peer::{self, Fault, Peer, Watchdog, STARTUP};
use crate::policy::Policy;
use crate::probe::Steadiness;
use crate::rawring::{self, Kind, Patience, RawRing};
use crate::stats::{self, Spread};
use crate::suite::{Common, Group};
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;
use tachyon::primitives::rpc::ResponseWriter;
use tachyon::RpcBuffer;

/// Bytes of a packet header (`tachyon::primitives::rpc::PACKET_HEADER`).
pub const HEADER: usize = tachyon::primitives::rpc::PACKET_HEADER;

/// A message size and the channel geometry it is sent through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Shape {
    /// Message bytes.
    pub msg: usize,
    /// Node (packet) size, header included.
    pub node: usize,
    /// Nodes per direction.
    pub nodes: usize,
    /// What the .NET SharedMemory library reported for it (calls/s, on a
    /// desktop of 2012).
    pub dotnet: &'static str,
}

/// The three configurations measured (those the .NET library's own
/// figures name): 1 KiB in one packet, 512,000 bytes split into 1 KiB
/// packets, and 512,000 bytes in one packet.
pub const SHAPES: [Shape; 3] = [
    // 1 KiB in one packet, the library's default node size.
    Shape { msg: 1024, node: 4096, nodes: 64, dotnet: "~10,000" },
    // 512,000 bytes in 1 KiB packets (517 packets of 992 payload bytes).
    Shape { msg: 512_000, node: 1024, nodes: 64, dotnet: "~500" },
    // 512,000 bytes in one packet of 512,064 bytes.
    Shape { msg: 512_000, node: 512_064, nodes: 8, dotnet: "~2,000" },
];

/// How the calls travel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Via {
    /// `RpcBuffer`, both ends with this wait policy, in this shape; the
    /// handler on a handler thread (the default) or, if `true`, on the
    /// peer's reader thread (`RpcBuilder::inline_handlers`).
    Rpc(Policy, Shape, bool),
    /// `RpcBuffer` with the in-place API: `request_with` (the response
    /// compared with the request where it lies, in its ring node) and the
    /// peer's `handler_in_place` (the request read in its ring node, the
    /// response written into its own).
    RpcInPlace(Policy, Shape),
    /// A Unix domain socket, messages of this size.
    Unix(usize),
    /// The floor: a call's four copies of a message of this size through
    /// two raw rings, spinning (see the module's documentation).
    Floor(usize),
}

/// The transports of the group, for `--rpc-transports`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, clap::ValueEnum)]
pub enum Transport {
    /// The reference: a Unix domain socket.
    Unix,
    /// `RpcBuffer`.
    Rpc,
    /// `RpcBuffer` with the handler on the reader thread
    /// (`RpcBuilder::inline_handlers`; 1 KiB calls only).
    RpcInline,
    /// `RpcBuffer` through `request_with` and an in-place handler
    /// (`handler_in_place`).
    RpcInPlace,
    /// A reference: the four copies a `request` call with the echo handler
    /// makes and its compare, through two raw rings, spinning; no channel
    /// (the floor of `request`'s calls/s).
    RawFloor,
}

/// One configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Case {
    /// How.
    pub via: Via,
}

impl Case {
    fn msg(&self) -> usize {
        match self.via {
            Via::Rpc(_, s, _) | Via::RpcInPlace(_, s) => s.msg,
            Via::Unix(m) | Via::Floor(m) => m,
        }
    }
}

impl std::fmt::Display for Case {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.via {
            Via::Rpc(p, s, inline) => {
                let handlers = if inline { " inline" } else { "" };
                write!(f, "rpc{handlers}/{} {} msg, {} B nodes x {}", p.name(), label(s.msg), s.node, s.nodes)
            }
            Via::RpcInPlace(p, s) => {
                write!(f, "rpc in place/{} {} msg, {} B nodes x {}", p.name(), label(s.msg), s.node, s.nodes)
            }
            Via::Unix(m) => write!(f, "unix {} msg", label(m)),
            Via::Floor(m) => write!(f, "raw floor {} msg", label(m)),
        }
    }
}

/// What the user asked for.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Timed calls per run with 1 KiB messages.
    pub calls: u64,
    /// Timed calls per run with 512,000-byte messages.
    pub large_calls: u64,
    /// Wait policies of the RpcBuffer runs.
    pub policies: Vec<Policy>,
    /// Transports.
    pub transports: Vec<Transport>,
    /// Repetitions, stall timeout, placement.
    pub common: Common,
}

impl Settings {
    /// Timed calls and warm-up calls for messages of `msg` bytes.
    pub fn calls(&self, msg: usize) -> (u64, u64) {
        let calls = if msg <= 64 << 10 { self.calls } else { self.large_calls };
        (calls, 10 + calls / 10)
    }
}

/// One measurement.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    /// What was measured.
    pub case: Case,
    /// Repetition (0-based).
    pub rep: usize,
    /// Timed calls.
    pub calls: u64,
    /// Time the timed calls took together.
    pub elapsed: Duration,
    /// Their round trips.
    pub rtt: Percentiles,
    /// The slower of the cache-line probes taken just before and just
    /// after the run, mean ns per round trip (see `probe.rs`); `None`
    /// unpinned or when a probe gave up.
    pub probe: Option<f64>,
    /// How many earlier runs of this case and repetition were discarded
    /// because their probes said the machine was unsteady.
    pub retried: u32,
}

impl crate::probe::ProbedSample for Sample {
    fn probed(&self) -> (usize, Option<f64>, u32) {
        (self.rep, self.probe, self.retried)
    }
}

impl Sample {
    /// Calls per second.
    pub fn rate(&self) -> f64 {
        self.calls as f64 / self.elapsed.as_secs_f64().max(1e-12)
    }
}

/// `1 KiB`, `512,000 B`: the sizes as the issue and the .NET library give
/// them.
fn label(n: usize) -> String {
    if n % 1024 == 0 && n <= 64 << 10 {
        return stats::bytes(n as u64);
    }
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out + " B"
}

fn unique_name() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!("tachyon-bench-rpc-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed))
}

fn peer_args(settings: &Settings, via: &str) -> Vec<String> {
    let mut args: Vec<String> = vec![
        "peer".into(),
        "rpc".into(),
        "--via".into(),
        via.into(),
        "--parent".into(),
        std::process::id().to_string(),
    ];
    if let Some(cpu) = settings.common.placement.reader() {
        args.extend(["--cpu".into(), cpu.to_string()]);
    }
    args
}

/// Runs one repetition of one case between two probes of the machine's
/// cache-line round trip, again while they say it was unsteady
/// ([`crate::probe::run_probed`]), the socket's runs as well.
pub fn run(case: Case, settings: &Settings, rep: usize) -> Result<Sample, String> {
    let probed =
        crate::probe::run_probed(settings.common.placement.reader(), || run_only(case, settings, rep))?;
    Ok(Sample { probe: probed.probe, retried: probed.retried, ..probed.sample })
}

/// One run of one repetition of one case.
fn run_only(case: Case, settings: &Settings, rep: usize) -> Result<Sample, String> {
    let (calls, warmup) = settings.calls(case.msg());
    let total = warmup + calls;
    let stall = settings.common.stall;
    let mut msg = payload::buffer(case.msg());
    let (elapsed, rtt) = match case.via {
        Via::Rpc(policy, shape, _) | Via::RpcInPlace(policy, shape) => {
            let in_place = matches!(case.via, Via::RpcInPlace(..));
            let name = unique_name();
            let rpc = RpcBuffer::builder(&name)
                .node_size(shape.node)
                .node_count(shape.nodes)
                .wait_policy(policy.wait_policy())
                .create()
                .map_err(|e| format!("cannot create the RpcBuffer: {e}"))?;
            let mut args = peer_args(settings, "rpc");
            args.extend(["--name".into(), name, "--policy".into(), policy.name().into()]);
            if matches!(case.via, Via::Rpc(_, _, true)) {
                args.push("--inline".into());
            }
            if in_place {
                args.push("--in-place".into());
            }
            let mut peer = Peer::spawn(&args)?;
            peer.expect("ready", STARTUP)?;
            let result = latency::timed(total, warmup, "call", |seq| {
                payload::stamp(&mut msg, seq);
                // In place: the response compared where it lies.
                let sent = if in_place {
                    rpc.request_with(&msg, Some(stall), |response| same(response, &msg, seq))
                } else {
                    rpc.request(&msg, Some(stall)).map(|response| same(&response, &msg, seq))
                };
                let checked = match sent {
                    Ok(r) => r,
                    Err(tachyon::Error::Timeout { .. }) => {
                        return Err(format!("no response within {stall:?} (is the peer stuck?)"))
                    }
                    Err(e) => {
                        // Say how the peer ended, if it did.
                        let how = peer.check_alive().err().unwrap_or_default();
                        return Err(if how.is_empty() { e.to_string() } else { format!("{e} ({how})") });
                    }
                };
                checked
            });
            let r = match result {
                Ok(r) => r,
                Err(e) => {
                    // Kill the peer first, so that closing our end removes
                    // the channel's segments (the last live user does).
                    drop(peer);
                    drop(rpc);
                    return Err(e);
                }
            };
            // Closing our end tells the peer to finish.
            drop(rpc);
            peer.expect("done", STARTUP)?;
            peer.finish(STARTUP)?;
            r
        }
        Via::Floor(size) => {
            let name = unique_name();
            let to = RawRing::create_kind(Kind::Spsc, &format!("{name}-a"), 2, size, FLOOR_DATA_OFF)?;
            let from = RawRing::create_kind(Kind::Spsc, &format!("{name}-b"), 2, size, FLOOR_DATA_OFF)?;
            let mut args = peer_args(settings, "floor");
            args.extend(["--name".into(), name, "--size".into(), size.to_string()]);
            args.extend([
                "--calls".into(),
                total.to_string(),
                "--stall-ms".into(),
                stall.as_millis().to_string(),
            ]);
            let mut peer = Peer::spawn(&args)?;
            peer.expect("ready", STARTUP)?;
            let mut response = payload::buffer(size);
            let r = {
                let mut writer = rawring::Writer::new(&to)?;
                let mut reader = rawring::Reader::new(&from)?;
                let mut check = || peer.check_alive();
                let mut patience = Patience::new(stall, &mut check);
                latency::timed(total, warmup, "call", |seq| {
                    payload::stamp(&mut msg, seq);
                    writer.push(&msg, &mut patience)?;
                    reader.pop(&mut response, &mut patience)?;
                    same(&response, &msg, seq)
                })
            };
            let r = r?;
            peer.expect("done", STARTUP)?;
            peer.finish(STARTUP)?;
            r
        }
        Via::Unix(size) => {
            let (link, ends) = kernel::link(kernel::Kind::Unix, true)?;
            let mut args = peer_args(settings, "unix");
            args.extend(ends.args.iter().cloned());
            let mut peer = Peer::spawn(&args)?;
            drop(ends);
            peer.expect("ready", STARTUP)?;
            let result = {
                let watchdog = Watchdog::start(peer.pid(), stall)?;
                let (mut tx, mut rx) = (&link.tx, link.rx.as_ref().ok_or("no receiving end")?);
                let mut framed = vec![0u8; 4 + size];
                framed[..4].copy_from_slice(&(size as u32).to_le_bytes());
                let mut response = vec![0u8; 4 + size];
                latency::timed(total, warmup, "call", |seq| {
                    payload::stamp(&mut framed[4..], seq);
                    tx.write_all(&framed).map_err(|e| watchdog.explain(e, stall, "writing the request"))?;
                    rx.read_exact(&mut response[..4])
                        .map_err(|e| watchdog.explain(e, stall, "reading the response"))?;
                    let len = u32::from_le_bytes([response[0], response[1], response[2], response[3]]);
                    if len as usize != size {
                        return Err(format!("a response of {len} bytes to a request of {size}"));
                    }
                    rx.read_exact(&mut response[4..])
                        .map_err(|e| watchdog.explain(e, stall, "reading the response"))?;
                    watchdog.progress(seq);
                    same(&response[4..], &framed[4..], seq)
                })
            };
            // End-of-file tells the peer to finish.
            drop(link);
            let r = result?;
            peer.expect("done", STARTUP)?;
            peer.finish(STARTUP)?;
            r
        }
    };
    Ok(Sample { case, rep, calls, elapsed, rtt, probe: None, retried: 0 })
}

/// Where the floor's slots start in their segments (as the topics group's
/// raw ring's).
const FLOOR_DATA_OFF: usize = 256;

/// Checks that a response equals its request.
fn same(response: &[u8], request: &[u8], seq: u64) -> Result<(), String> {
    if response == request {
        return Ok(());
    }
    if response.len() != request.len() {
        return Err(format!("a response of {} bytes to a request of {}", response.len(), request.len()));
    }
    payload::check(response, seq)?;
    Err(format!("response {seq} differs from its request"))
}

/// The rpc peer's arguments (`tachyon-bench peer rpc ...`).
#[derive(Debug, clap::Args)]
pub struct PeerArgs {
    /// `rpc`, `unix` or `floor`.
    #[arg(long)]
    pub via: String,
    /// The channel's name (`rpc`).
    #[arg(long)]
    pub name: Option<String>,
    /// Wait policy of this end (`rpc`).
    #[arg(long, value_enum)]
    pub policy: Option<Policy>,
    /// The socket (`unix`).
    #[arg(long)]
    pub fd_in: Option<i32>,
    /// The socket again (`unix`).
    #[arg(long)]
    pub fd_out: Option<i32>,
    /// The benchmark process; the peer dies with it.
    #[arg(long)]
    pub parent: u32,
    /// CPU to pin to.
    #[arg(long)]
    pub cpu: Option<usize>,
    /// Run the handler on the reader thread (`rpc`).
    #[arg(long)]
    pub inline: bool,
    /// Answer with an in-place handler (`handler_in_place`, `rpc`).
    #[arg(long)]
    pub in_place: bool,
    /// Message bytes (`floor`).
    #[arg(long)]
    pub size: Option<usize>,
    /// Calls to answer, warm-up included (`floor`).
    #[arg(long)]
    pub calls: Option<u64>,
    /// How long to wait for a request before giving up (`floor`).
    #[arg(long)]
    pub stall_ms: Option<u64>,
}

/// The rpc peer: answers every request with its own bytes until the
/// benchmark process closes its end (the floor's: for `--calls` calls),
/// then says `done`.
pub fn peer(a: PeerArgs) -> Result<(), String> {
    peer::start(a.parent, a.cpu)?;
    let fault = Fault::from_env();
    match a.via.as_str() {
        "rpc" => {
            let name = a.name.ok_or("--name is required")?;
            let builder = RpcBuffer::builder(&name)
                .wait_policy(a.policy.unwrap_or(Policy::Hybrid).wait_policy())
                .inline_handlers(a.inline);
            let builder = if fault == Fault::None && a.in_place {
                // Exactly the in-place handler a user would write.
                builder.handler_in_place(|_id, msg: &[u8], out: &mut ResponseWriter<'_>| {
                    out.extend_from_slice(msg);
                    Ok::<_, String>(())
                })
            } else if fault == Fault::None {
                // Exactly the handler a user would write.
                builder.handler(|_id, msg: &[u8]| Ok::<_, String>(msg.to_vec()))
            } else if a.in_place {
                let seen = AtomicU64::new(0);
                let previous = Mutex::new(Vec::new());
                builder.handler_in_place(move |_id, msg: &[u8], out: &mut ResponseWriter<'_>| {
                    let seq = seen.fetch_add(1, Ordering::Relaxed);
                    let mut prev = previous.lock().unwrap_or_else(|p| p.into_inner());
                    out.extend_from_slice(if fault.at(seq) { &prev } else { msg });
                    prev.clear();
                    prev.extend_from_slice(msg);
                    Ok::<_, String>(())
                })
            } else {
                let seen = AtomicU64::new(0);
                let previous = Mutex::new(Vec::new());
                builder.handler(move |_id, msg: &[u8]| {
                    let seq = seen.fetch_add(1, Ordering::Relaxed);
                    let mut prev = previous.lock().unwrap_or_else(|p| p.into_inner());
                    let answer = if fault.at(seq) { prev.clone() } else { msg.to_vec() };
                    *prev = msg.to_vec();
                    Ok::<_, String>(answer)
                })
            };
            let rpc = builder.open().map_err(|e| format!("cannot open the RpcBuffer {name}: {e}"))?;
            println!("ready");
            // The benchmark closes its end when it is done (noticed within
            // about 20 ms); if it dies, so do we (PR_SET_PDEATHSIG).
            rpc.wait_closed(None).map_err(|e| format!("waiting for the RpcBuffer {name} to close: {e}"))?;
            println!("done");
            Ok(())
        }
        "unix" => {
            let (rx, tx) = kernel::adopt(a.fd_in, a.fd_out)?;
            let (mut rx, mut tx) = (rx.ok_or("--fd-in is required")?, tx.ok_or("--fd-out is required")?);
            println!("ready");
            let mut buf = Vec::new();
            let mut prev = Vec::new();
            for seq in 0.. {
                let mut len = [0u8; 4];
                match rx.read_exact(&mut len) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
                    Err(e) => return Err(format!("reading request {seq}: {e}")),
                }
                let n = u32::from_le_bytes(len) as usize;
                buf.resize(4 + n, 0);
                rx.read_exact(&mut buf[4..]).map_err(|e| format!("reading request {seq}: {e}"))?;
                buf[..4].copy_from_slice(&len);
                if fault.at(seq) && prev.len() == buf.len() {
                    std::mem::swap(&mut buf, &mut prev);
                }
                tx.write_all(&buf).map_err(|e| format!("answering request {seq}: {e}"))?;
                if fault != Fault::None {
                    prev.clone_from(&buf);
                }
            }
            println!("done");
            Ok(())
        }
        "floor" => {
            let name = a.name.ok_or("--name is required")?;
            let size = a.size.ok_or("--size is required")?;
            let calls = a.calls.ok_or("--calls is required")?;
            let from = RawRing::open_kind(Kind::Spsc, &format!("{name}-a"), 2, size, FLOOR_DATA_OFF)?;
            let to = RawRing::open_kind(Kind::Spsc, &format!("{name}-b"), 2, size, FLOOR_DATA_OFF)?;
            let mut reader = rawring::Reader::new(&from)?;
            let mut writer = rawring::Writer::new(&to)?;
            // The parent's death kills us (PR_SET_PDEATHSIG): nothing to check.
            let mut check = || Ok(());
            let stall = Duration::from_millis(a.stall_ms.ok_or("--stall-ms is required")?);
            let mut patience = Patience::new(stall, &mut check);
            let mut buf = payload::buffer(size);
            println!("ready");
            for seq in 0..calls {
                // The copy out stands for the handler's `to_vec`, the copy
                // in for the channel's copy of its response into a node.
                reader.pop(&mut buf, &mut patience).map_err(|e| format!("call {seq}: {e}"))?;
                if fault.at(seq) {
                    payload::damage(&mut buf);
                }
                writer.push(&buf, &mut patience).map_err(|e| format!("call {seq}: {e}"))?;
            }
            println!("done");
            Ok(())
        }
        other => Err(format!("--via {other:?}: expected rpc, unix or floor")),
    }
}

impl crate::results::Keyed for Sample {
    type Case = Case;

    fn key(&self) -> (Case, usize) {
        (self.case, self.rep)
    }
}

/// The rpc group's samples by case and repetition.
type Results<'a> = crate::results::Results<'a, Sample>;

/// Calls per second, as a figure the results take.
fn calls_per_sec(s: &Sample) -> Option<f64> {
    Some(s.rate())
}

/// The markdown section for this group.
pub fn render(settings: &Settings, samples: &[Sample]) -> String {
    let res = Results::new(samples);
    let ratio = |r: Option<Spread>| r.map_or_else(|| "–".to_owned(), |r| format!("{:.2}", r.median));
    let mut out = String::new();
    let _ = writeln!(out, "## RPC: request/response between two processes (RpcBuffer)\n");
    let (calls, _) = settings.calls(1024);
    let (large, _) = settings.calls(512_000);
    let _ = writeln!(
        out,
        "One call = `request(&msg, timeout)` on the owner, the opener's echo handler \
         (`Ok(msg.to_vec())`) in the peer process, the response back; in place: \
         `request_with(&msg, timeout, |response| ...)` (the response compared with the request in \
         its ring node, when the caller reads it itself) and the in-place echo handler (`out.extend_from_slice(request)`: the request read in its ring \
         node, the response written into its own). Calls are made one after \
         the other from one thread. Every response is compared with its request (a sequence number \
         inside). {calls} timed calls per run of 1 KiB, {large} of 512,000 bytes, after a \
         warm-up of 10 % + 10. calls/s: median of the repetitions (range in brackets); p50 / p99: \
         medians of the repetitions' percentiles (hdrhistogram). The Unix socket reference \
         echoes a length-prefixed message of the same size over a `socketpair` with blocking \
         reads and writes. The floor makes the four copies of the message that a `request` with \
         that handler makes (into shared memory, out of it as the handler's `to_vec`, into shared \
         memory again as the response, out of it as `request`'s result) and the compare, through \
         two raw rings with a spinning cursor each way: no headers, no claims, no allocation. \
         Ratios are medians of per-repetition ratios to the Unix socket run of \
         the same repetition and message size. The .NET SharedMemory library reported its figures \
         on a desktop of 2012; they are not from this machine.\n"
    );
    let _ = writeln!(
        out,
        "| message | nodes | packets | transport | wait | calls/s | (min – max) | p50 µs | p99 µs | \
         calls/s × Unix socket | p50 × Unix socket | .NET calls/s |"
    );
    let _ =
        writeln!(out, "| ---: | --- | ---: | --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |");
    let mut sizes: Vec<usize> = SHAPES.iter().map(|s| s.msg).collect();
    sizes.dedup();
    for msg in sizes {
        let unix = Case { via: Via::Unix(msg) };
        let row =
            |out: &mut String, case: Case, nodes: String, packets: String, what: &str, wait: &str, dotnet| {
                let Some(rate) = res.spread(case, calls_per_sec) else { return };
                let p50 = res.spread(case, |s| Some(s.rtt.p50)).map_or(0.0, |s| s.median);
                let p99 = res.spread(case, |s| Some(s.rtt.p99)).map_or(0.0, |s| s.median);
                let (vs_rate, vs_p50) = if case == unix {
                    ("1.00".to_owned(), "1.00".to_owned())
                } else {
                    (
                        ratio(res.paired(case, unix, calls_per_sec)),
                        ratio(res.paired(case, unix, |s| Some(s.rtt.p50))),
                    )
                };
                let _ = writeln!(
                    out,
                    "| {} | {nodes} | {packets} | {what} | {wait} | {} | ({} – {}) | {} | {} | {vs_rate} | \
                 {vs_p50} | {dotnet} |",
                    label(msg),
                    stats::si(rate.median),
                    stats::si(rate.min),
                    stats::si(rate.max),
                    latency::us(p50),
                    latency::us(p99),
                );
            };
        row(&mut out, unix, "–".into(), "–".into(), "Unix socket (reference)", "–", "–");
        row(
            &mut out,
            Case { via: Via::Floor(msg) },
            format!("2 × {}", label(msg)),
            "–".into(),
            "raw shared memory: a `request`'s four copies and its compare, nothing else (reference, floor)",
            "spin",
            "–",
        );
        for shape in SHAPES.iter().filter(|s| s.msg == msg) {
            for &p in &settings.policies {
                for (via, what) in [
                    (Via::Rpc(p, *shape, false), "RpcBuffer"),
                    (Via::Rpc(p, *shape, true), "RpcBuffer, inline handler"),
                    (Via::RpcInPlace(p, *shape), "RpcBuffer, in place (`request_with`, `handler_in_place`)"),
                ] {
                    let case = Case { via };
                    if !samples.iter().any(|s| s.case == case) {
                        continue;
                    }
                    let packets = msg.div_ceil(shape.node - HEADER).max(1);
                    row(
                        &mut out,
                        case,
                        format!("{} × {}", shape.nodes, label(shape.node)),
                        packets.to_string(),
                        what,
                        p.name(),
                        shape.dotnet,
                    );
                }
            }
        }
    }
    out.push('\n');
    let steady = Steadiness::of(samples);
    out.push_str(&bars(settings, &res, &steady));
    let probed: Vec<&Sample> = samples.iter().collect();
    out.push_str(&steady.render(&probed, "`--rpc-calls`, `--rpc-large-calls`"));
    out
}

/// The bars for calls (calls/s of 1 KiB and of 512,000 bytes in
/// one packet ≥ 2 × the Unix socket's, a figure the issue measured with
/// spinning waits; with futex waits, where every hop sleeps and is woken as
/// a socket's does, the futex bar: parity with the socket), each
/// with the median of its per-repetition ratios, over every repetition and
/// over the pairs of steady runs, on which it is judged when the runs were
/// probed (see [`Steadiness`]); empty without the socket reference.
fn bars(settings: &Settings, res: &Results<'_>, steady: &Steadiness) -> String {
    let mut rows = String::new();
    for (shape, what) in [(SHAPES[0], "1 KiB calls"), (SHAPES[2], "512,000 B calls in one packet")] {
        let unix = Case { via: Via::Unix(shape.msg) };
        for &p in &settings.policies {
            let bar = if p == Policy::Futex { 1.0 } else { 2.0 };
            for (via, how) in
                [(Via::Rpc(p, shape, false), "`request`"), (Via::RpcInPlace(p, shape), "in place")]
            {
                let case = Case { via };
                let Some(r) = res.paired(case, unix, calls_per_sec) else { continue };
                let calm = judged(res, steady, case, unix);
                // The floor bounds `request` (its copies are `request`'s),
                // not the in-place calls, which copy less.
                let floor = match via {
                    Via::Rpc(..) => judged(res, steady, Case { via: Via::Floor(shape.msg) }, unix),
                    _ => None,
                };
                let met = match calm {
                    None => "not judged (no steady pair)",
                    Some(j) if j >= bar => "yes",
                    Some(_) if floor.is_some_and(|f| f < bar) => "**no**: its floor misses it too",
                    Some(_) => "**no**",
                };
                let _ = writeln!(
                    rows,
                    "| RpcBuffer {} {what}, {how}: calls/s ÷ Unix socket | {:.2} | ({:.2} – {:.2}) | {} | ≥ {bar} | {} | {met} |",
                    p.name(),
                    r.median,
                    r.min,
                    r.max,
                    match (steady.usual, calm) {
                        (Some(_), Some(c)) => format!("{c:.2}"),
                        _ => "–".to_owned(),
                    },
                    floor.map_or_else(|| "–".to_owned(), |f| format!("{f:.2}")),
                );
            }
        }
    }
    let judged = if steady.usual.is_some() {
        "Each bar is judged on the median of its ratios over the pairs of runs that were both \
         steady (\"How steady the machine was\", below), and not at all where no pair was; the \
         median over every repetition is given beside it."
    } else {
        "Each bar is judged on the median of the per-repetition ratios (the runs were not \
         probed: a slow phase counts)."
    };
    stats::table_section(
        "Against the project's bars",
        &format!(
            "{judged} The bar of 2 × the Unix socket is the issue's, measured there with spinning \
             waits; with futex waits every hop sleeps and is woken, as the socket's do, and the \
             bar is the issue's futex bar, parity. Beside a `request` bar, **its floor** on the \
             same scale, judged as the bar is: the floor reference's calls/s, the four copies \
             and the compare of a `request` and nothing else. A bar its floor misses is out of \
             reach of any channel that copies as `request` must: what is left is the copies' \
             memory bandwidth."
        ),
        [
            "| measure | median ratio | (min – max) | steady runs | bar | its floor | met |",
            "| --- | ---: | --- | ---: | ---: | ---: | --- |",
        ],
        &rows,
    )
}

/// `case`'s calls/s ÷ `unix`'s, the median of the per-repetition ratios
/// it is judged on: over the pairs of steady runs where the runs were
/// probed (another phase's ratio would pass or fail a bar for the wrong
/// reason; `None` without such a pair), else over every pair.
fn judged(res: &Results<'_>, steady: &Steadiness, case: Case, unix: Case) -> Option<f64> {
    let r = if steady.usual.is_some() {
        res.paired_in(case, unix, calls_per_sec, |s| !steady.unsteady(s))
    } else {
        res.paired(case, unix, calls_per_sec)
    };
    r.map(|r| r.median)
}

/// One CSV line per sample.
pub fn csv(samples: &[Sample]) -> String {
    let mut out = "case,transport,policy,msg_size,node_size,nodes,rep,calls,elapsed_ns,calls_per_sec,\
                   p50_ns,p99_ns,p999_ns,max_ns,mean_ns,probe_ns,retried\n"
        .to_owned();
    for s in samples {
        let (transport, policy, node, nodes) = match s.case.via {
            Via::Rpc(p, shape, false) => ("rpc", p.name(), shape.node, shape.nodes),
            Via::Rpc(p, shape, true) => ("rpc-inline", p.name(), shape.node, shape.nodes),
            Via::RpcInPlace(p, shape) => ("rpc-in-place", p.name(), shape.node, shape.nodes),
            Via::Unix(_) => ("unix", "", 0, 0),
            Via::Floor(m) => ("raw-floor", "spin", m, 2),
        };
        let _ = writeln!(
            out,
            "{},{transport},{policy},{},{node},{nodes},{},{},{},{:.1},{},{},{},{},{:.1},{},{}",
            s.case,
            s.case.msg(),
            s.rep,
            s.calls,
            s.elapsed.as_nanos(),
            s.rate(),
            s.rtt.p50,
            s.rtt.p99,
            s.rtt.p999,
            s.rtt.max,
            s.rtt.mean,
            s.probe.map_or_else(String::new, |p| format!("{p:.1}")),
            s.retried
        );
    }
    out
}

impl Group for Settings {
    type Case = Case;
    type Sample = Sample;

    fn name(&self) -> &'static str {
        "rpc"
    }

    fn cases(&self) -> Vec<Case> {
        let mut out = Vec::new();
        let mut sizes: Vec<usize> = SHAPES.iter().map(|s| s.msg).collect();
        sizes.dedup();
        for msg in sizes {
            // The reference first, then the RpcBuffer runs it is paired with.
            if self.transports.contains(&Transport::Unix) {
                out.push(Case { via: Via::Unix(msg) });
            }
            if self.transports.contains(&Transport::RawFloor) {
                out.push(Case { via: Via::Floor(msg) });
            }
            for shape in SHAPES.iter().filter(|s| s.msg == msg) {
                for &p in &self.policies {
                    if self.transports.contains(&Transport::Rpc) {
                        out.push(Case { via: Via::Rpc(p, *shape, false) });
                    }
                    if self.transports.contains(&Transport::RpcInline) && msg <= 64 << 10 {
                        out.push(Case { via: Via::Rpc(p, *shape, true) });
                    }
                    if self.transports.contains(&Transport::RpcInPlace) {
                        out.push(Case { via: Via::RpcInPlace(p, *shape) });
                    }
                }
            }
        }
        out
    }

    fn warmup_case(&self) -> Option<Case> {
        self.cases()
            .into_iter()
            .find(|c| matches!(c.via, Via::Rpc(..) | Via::RpcInPlace(..)))
            .or_else(|| self.cases().first().copied())
    }

    fn run(&self, case: Case, rep: usize) -> Result<Sample, String> {
        run(case, self, rep)
    }

    fn progress(&self, s: &Sample) -> String {
        format!(
            "{:>9} calls/s  p50 {:>8} µs  p99 {:>8} µs",
            stats::si(s.rate()),
            latency::us(s.rtt.p50),
            latency::us(s.rtt.p99)
        )
    }

    fn render(&self, samples: &[Sample]) -> String {
        render(self, samples)
    }

    fn csv(&self, samples: &[Sample]) -> String {
        csv(samples)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels() {
        assert_eq!(label(1024), "1 KiB");
        assert_eq!(label(4096), "4 KiB");
        assert_eq!(label(512_000), "512,000 B");
        assert_eq!(label(512_064), "512,064 B");
        assert_eq!(label(999), "999 B");
    }

    /// A sample of `case` in repetition `rep` whose calls took `secs` in all.
    fn sample(case: Case, rep: usize, calls: u64, secs: f64) -> Sample {
        let rtt = Percentiles { count: calls, p50: 1.0, p99: 1.0, p999: 1.0, max: 1.0, mean: 1.0 };
        Sample { case, rep, calls, elapsed: Duration::from_secs_f64(secs), rtt, probe: None, retried: 0 }
    }

    fn settings() -> Settings {
        Settings {
            calls: 1000,
            large_calls: 100,
            policies: vec![Policy::Spin, Policy::Futex],
            transports: vec![Transport::Unix, Transport::Rpc, Transport::RpcInPlace],
            common: Common {
                reps: 2,
                stall: Duration::from_secs(1),
                placement: crate::pin::Placement::Free("test"),
            },
        }
    }

    #[test]
    fn the_call_bars_are_judged_on_the_per_repetition_ratios_to_the_socket() {
        let settings = settings();
        let spin = Policy::Spin;
        let (small, large) = (SHAPES[0], SHAPES[2]);
        let mut samples = Vec::new();
        for rep in 0..2 {
            // 1 KiB: the socket 1,000 calls/s, RpcBuffer 3,000 and 5,000: ratios 3 and 5.
            samples.push(sample(Case { via: Via::Unix(1024) }, rep, 1000, 1.0));
            samples.push(sample(
                Case { via: Via::Rpc(spin, small, false) },
                rep,
                1000,
                1.0 / (3.0 + 2.0 * rep as f64),
            ));
            // 512,000 B: `request` 1.5 × the socket, in place 4 ×, the
            // floor 1.8 ×.
            samples.push(sample(Case { via: Via::Unix(512_000) }, rep, 100, 1.0));
            samples.push(sample(Case { via: Via::Floor(512_000) }, rep, 180, 1.0));
            samples.push(sample(Case { via: Via::Rpc(spin, large, false) }, rep, 150, 1.0));
            samples.push(sample(Case { via: Via::RpcInPlace(spin, large) }, rep, 400, 1.0));
            // Futex, 1 KiB: 1.5 × the socket, judged against parity.
            samples.push(sample(Case { via: Via::Rpc(Policy::Futex, small, false) }, rep, 1500, 1.0));
        }
        // Not probed (no steady column): judged on every repetition.
        let steady = Steadiness::of(&samples);
        assert!(steady.usual.is_none());
        let out = bars(&settings, &Results::new(&samples), &steady);
        assert!(out.contains("a slow phase counts"), "{out}");
        // No floor of 1 KiB was measured: "–" in its column.
        assert!(out.contains("| RpcBuffer spin 1 KiB calls, `request`: calls/s ÷ Unix socket | 4.00 | (3.00 – 5.00) | – | ≥ 2 | – | yes |"), "{out}");
        // A missed bar whose floor misses it too says so.
        assert!(out.contains("| RpcBuffer spin 512,000 B calls in one packet, `request`: calls/s ÷ Unix socket | 1.50 | (1.50 – 1.50) | – | ≥ 2 | 1.80 | **no**: its floor misses it too |"), "{out}");
        // The floor is `request`'s, not the in-place calls'.
        assert!(
            out.contains(
                "| RpcBuffer spin 512,000 B calls in one packet, in place: calls/s ÷ Unix socket | 4.00 | (4.00 – 4.00) | – | ≥ 2 | – | yes |"
            ),
            "{out}"
        );
        assert!(out.contains("| RpcBuffer futex 1 KiB calls, `request`: calls/s ÷ Unix socket | 1.50 | (1.50 – 1.50) | – | ≥ 1 | – | yes |"), "{out}");
        // A floor over the bar leaves a miss a plain miss.
        let faster: Vec<Sample> = samples
            .iter()
            .map(|s| if s.case.via == Via::Floor(512_000) { Sample { calls: 300, ..*s } } else { *s })
            .collect();
        let out = bars(&settings, &Results::new(&faster), &steady);
        assert!(out.contains("| RpcBuffer spin 512,000 B calls in one packet, `request`: calls/s ÷ Unix socket | 1.50 | (1.50 – 1.50) | – | ≥ 2 | 3.00 | **no** |"), "{out}");
        // 1 KiB in place was not measured: no row.
        assert!(!out.contains("1 KiB calls, in place"), "{out}");
        // Without the socket there is nothing to judge.
        let alone: Vec<Sample> =
            samples.into_iter().filter(|s| !matches!(s.case.via, Via::Unix(_))).collect();
        assert_eq!(bars(&settings, &Results::new(&alone), &steady), "");
    }

    /// Probed runs: a bar is judged on the pairs whose two runs were both
    /// steady, and not at all where no pair was; the median over every
    /// repetition stays beside it. The report then says how steady the
    /// machine was.
    #[test]
    fn the_call_bars_are_judged_on_the_steady_pairs_when_probed() {
        let settings = settings();
        let (spin, large) = (Policy::Spin, SHAPES[2]);
        let probed = |case: Case, rep: usize, calls: u64, probe: f64| Sample {
            probe: Some(probe),
            ..sample(case, rep, calls, 1.0)
        };
        let unix = Case { via: Via::Unix(512_000) };
        let request = Case { via: Via::Rpc(spin, large, false) };
        let in_place = Case { via: Via::RpcInPlace(spin, large) };
        let floor = Case { via: Via::Floor(large.msg) };
        let mut samples = Vec::new();
        // `request`: 2.5 × the socket in repetitions 0 and 1, 0.4 × in
        // repetition 2, whose RpcBuffer run was unsteady (probe 500 ns
        // against 60). In repetition 1 the socket's run was unsteady
        // (400 ns): repetition 0 is the one steady pair. In place: 4 ×
        // throughout, the same pair. The floor: 3 × in the steady pair,
        // 0.5 × in the unsteady repetition 2.
        for (rep, socket_probe, request_calls, request_probe, in_place_probe, floor_calls, floor_probe) in [
            (0, 60.0, 250, 62.0, 61.0, 300, 62.5),
            (1, 400.0, 250, 63.0, 65.0, 300, 61.5),
            (2, 61.0, 40, 500.0, 480.0, 50, 470.0),
        ] {
            samples.push(probed(unix, rep, 100, socket_probe));
            samples.push(probed(request, rep, request_calls, request_probe));
            samples.push(probed(in_place, rep, 400, in_place_probe));
            samples.push(probed(floor, rep, floor_calls, floor_probe));
        }
        let steady = Steadiness::of(&samples);
        assert_eq!(steady.usual, Some(61.0), "the tenth percentile of 12: the second quickest");
        let out = bars(&settings, &Results::new(&samples), &steady);
        assert!(out.contains("pairs of runs that were both steady"), "{out}");
        assert!(
            out.contains("| RpcBuffer spin 512,000 B calls in one packet, `request`: calls/s ÷ Unix socket | 2.50 | (0.40 – 2.50) | 2.50 | ≥ 2 | 3.00 | yes |"),
            "{out}"
        );
        assert!(
            out.contains("| RpcBuffer spin 512,000 B calls in one packet, in place: calls/s ÷ Unix socket | 4.00 | (4.00 – 4.00) | 4.00 | ≥ 2 | – | yes |"),
            "{out}"
        );
        // Only unsteady pairs: not judged, whatever the ratio.
        let slow: Vec<Sample> = samples
            .iter()
            .map(|s| if s.rep == 0 { Sample { probe: Some(490.0), ..*s } } else { *s })
            .collect();
        let steady_slow = Steadiness::of(&slow);
        let out = bars(&settings, &Results::new(&slow), &steady_slow);
        assert!(
            out.contains("| RpcBuffer spin 512,000 B calls in one packet, in place: calls/s ÷ Unix socket | 4.00 | (4.00 – 4.00) | – | ≥ 2 | – | not judged (no steady pair) |"),
            "{out}"
        );
        // The steadiness section: a row per repetition, its unsteady runs
        // named.
        let all: Vec<&Sample> = samples.iter().collect();
        let section = steady.render(&all, "`--rpc-calls`");
        assert!(section.contains("| 1 | 4 | 0 | 0.06 – 0.06 | 0 |"), "{section}");
        assert!(section.contains("| 2 | 4 | 0 | 0.06 – 0.40 | **1** |"), "{section}");
        assert!(section.contains("| 3 | 4 | 0 | 0.06 – 0.50 | **3** |"), "{section}");
        assert!(section.contains("4 of 12 runs ran while the machine was off its usual phase."), "{section}");
    }

    #[test]
    fn packets_per_message() {
        assert_eq!(512_000usize.div_ceil(SHAPES[1].node - HEADER), 517);
        assert_eq!(512_000usize.div_ceil(SHAPES[2].node - HEADER), 1);
        assert_eq!(1024usize.div_ceil(SHAPES[0].node - HEADER), 1);
    }
}
