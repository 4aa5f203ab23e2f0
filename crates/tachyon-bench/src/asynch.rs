//! The async group: the round trip of a small message when
//! the receiving side awaits it (`Topic::receive_async` on a tokio
//! current-thread runtime), against the same round trip received blocking
//! (`Topic::recv_into`), and against a tokio `UnixStream` round trip (and a
//! blocking Unix socket), all measured in the same run.
//!
//! Each case is a ping-pong with the topics group's echo peer (another
//! process, blocking): this process sends a ping stamped with its sequence
//! number and waits for the pong, which it compares with the ping byte for
//! byte. Timed here per round trip into an `hdrhistogram`.
//!
//! What the async receive costs over the blocking one: its wake-up goes
//! through the process's waiter thread (`futex_waitv` on the pong
//! partition's word, then the task's `Waker`, then the runtime's own
//! unpark), where a blocking receive is woken by the producer's futex wake
//! directly. A stalled peer fails the run through a watchdog thread (no
//! timer in the measured loop).

use crate::kernel::{self, Kind};
use crate::latency::{self, Percentiles};
use crate::payload;
use crate::peer::{Peer, STARTUP};
use crate::policy::Policy;
use crate::stats::{self, Spread};
use crate::suite::Group;
use crate::topics::{self, Test, Via};
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tachyon::bus::{Key, Region, TopicConfig};

/// Descriptors per partition (a ping-pong has one message in flight).
const CAPACITY: u32 = 64;

/// One configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Case {
    /// Reference: a blocking Unix domain socket.
    Unix,
    /// Reference: a tokio `UnixStream` (current-thread runtime).
    TokioUnix,
    /// A topic, the pong received blocking.
    Blocking(Policy),
    /// A topic, the pong awaited (`receive_async`, current-thread tokio).
    Async(Policy),
}

impl std::fmt::Display for Case {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Case::Unix => write!(f, "unix socket, blocking"),
            Case::TokioUnix => write!(f, "tokio UnixStream"),
            Case::Blocking(p) => write!(f, "topic/{}, blocking receive", p.name()),
            Case::Async(p) => write!(f, "topic/{}, receive_async", p.name()),
        }
    }
}

/// What the user asked for.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Round trips, message size, stall, placement (as the topics group).
    pub topics: topics::Settings,
    /// Policies of the topic cases (spin is left out: an async wait on a
    /// spinning topic is a busy poll).
    pub policies: Vec<Policy>,
}

/// One measurement.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    /// What was measured.
    pub case: Case,
    /// Repetition (0-based).
    pub rep: usize,
    /// The round trips.
    pub rtt: Percentiles,
}

/// Ends the whole run if `progress` stops moving for `stall`: the measured
/// loops have no timer of their own.
struct Stall {
    progress: Arc<AtomicU64>,
    done: Arc<AtomicU64>,
}

impl Stall {
    fn start(stall: Duration, what: String) -> Stall {
        let progress = Arc::new(AtomicU64::new(0));
        let done = Arc::new(AtomicU64::new(0));
        let (p, d) = (progress.clone(), done.clone());
        std::thread::spawn(move || {
            let mut last = (0, Instant::now());
            while d.load(Ordering::Relaxed) == 0 {
                std::thread::sleep(Duration::from_millis(50));
                let now = p.load(Ordering::Relaxed);
                if now != last.0 {
                    last = (now, Instant::now());
                } else if last.1.elapsed() >= stall {
                    eprintln!(
                        "tachyon-bench: {what}: no progress for {stall:?} (round trip {now}); giving up"
                    );
                    std::process::exit(1);
                }
            }
        });
        Stall { progress, done }
    }

    fn tick(&self, n: u64) {
        self.progress.store(n + 1, Ordering::Relaxed);
    }
}

impl Drop for Stall {
    fn drop(&mut self) {
        self.done.store(1, Ordering::Relaxed);
    }
}

fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| format!("tokio: {e}"))
}

/// Records round trip `seq` (if past the warm-up) that started at `t0`.
fn record(hist: &mut hdrhistogram::Histogram<u64>, seq: u64, warmup: u64, t0: Instant) {
    if seq >= warmup {
        latency::record(hist, t0.elapsed());
    }
}

fn topic_case(case: Case, s: &Settings) -> Result<Percentiles, String> {
    let (policy, awaited) = match case {
        Case::Blocking(p) => (p, false),
        Case::Async(p) => (p, true),
        _ => unreachable!("topic cases only"),
    };
    let t = &s.topics;
    let (count, warmup) = t.counts(Test::Latency);
    let total = count + warmup;
    let size = t.latency_size;
    let stall = t.common.stall;
    let name = topics::unique_name();
    let region = Region::create(&name, topics::region_config(size, CAPACITY, 2, true))
        .map_err(|e| format!("cannot create the region: {e}"))?;
    let _remove = topics::RemoveRegion(&name);
    let cfg = TopicConfig::default().capacity(CAPACITY).wait(policy.wait_policy());
    let ping = region.create_topic("ping", cfg).map_err(|e| e.to_string())?;
    let pong = region.create_topic("pong", cfg).map_err(|e| e.to_string())?;
    let from = pong.partition_of(Key(topics::KEY));
    let tcase = topics::Case::new(Test::Latency, Via::Copy, Some(policy), size);
    let mut args =
        topics::peer_args(tcase, &topics::Settings { capacity: CAPACITY, ..t.clone() }, count, warmup);
    args.extend(["--name".into(), name.clone()]);
    let mut peer = Peer::spawn(&args)?;
    peer.expect("ready", STARTUP)?;
    let watch = Stall::start(stall, case.to_string());
    let mut buf = payload::buffer(size);
    let rtt = if awaited {
        runtime()?.block_on(async {
            let mut hist = latency::histogram()?;
            for seq in 0..total {
                let t0 = Instant::now();
                payload::stamp(&mut buf, seq);
                ping.send(&buf, Key(topics::KEY), Some(stall)).map_err(|e| format!("ping {seq}: {e}"))?;
                let msg = pong.receive_async(from).await.map_err(|e| format!("pong {seq}: {e}"))?;
                topics::same(&msg, &buf, seq)?;
                drop(msg);
                record(&mut hist, seq, warmup, t0);
                watch.tick(seq);
            }
            Ok::<_, String>(Percentiles::of(&hist))
        })?
    } else {
        let mut got = Vec::with_capacity(size);
        latency::timed(total, warmup, "round trip", |seq| {
            payload::stamp(&mut buf, seq);
            ping.send(&buf, Key(topics::KEY), Some(stall)).map_err(|e| e.to_string())?;
            pong.recv_into(from, &mut got, Some(stall)).map_err(|e| e.to_string())?;
            watch.tick(seq);
            topics::same(&got, &buf, seq)
        })?
        .1
    };
    drop(watch);
    topics::collect(peer, stall)?;
    Ok(rtt)
}

fn unix_case(case: Case, s: &Settings) -> Result<Percentiles, String> {
    let t = &s.topics;
    let (count, warmup) = t.counts(Test::Latency);
    let total = count + warmup;
    let size = t.latency_size;
    let stall = t.common.stall;
    let (link, ends) = kernel::link(Kind::Unix, true)?;
    let tcase = topics::Case::new(Test::Latency, Via::Unix, None, size);
    let mut args = topics::peer_args(tcase, t, count, warmup);
    args.extend(ends.args.iter().cloned());
    let mut peer = Peer::spawn(&args)?;
    drop(ends);
    peer.expect("ready", STARTUP)?;
    let watch = Stall::start(stall, case.to_string());
    let mut buf = payload::buffer(size);
    let mut got = payload::buffer(size);
    let rtt = if case == Case::TokioUnix {
        drop(link.rx);
        let std_stream = std::os::unix::net::UnixStream::from(std::os::fd::OwnedFd::from(link.tx));
        std_stream.set_nonblocking(true).map_err(|e| format!("O_NONBLOCK: {e}"))?;
        let rt = runtime()?;
        rt.block_on(async {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let mut stream =
                tokio::net::UnixStream::from_std(std_stream).map_err(|e| format!("tokio: {e}"))?;
            let mut hist = latency::histogram()?;
            for seq in 0..total {
                let t0 = Instant::now();
                payload::stamp(&mut buf, seq);
                stream.write_all(&buf).await.map_err(|e| format!("writing ping {seq}: {e}"))?;
                stream.read_exact(&mut got).await.map_err(|e| format!("reading pong {seq}: {e}"))?;
                topics::same(&got, &buf, seq)?;
                record(&mut hist, seq, warmup, t0);
                watch.tick(seq);
            }
            drop(stream); // end-of-file for the peer
            Ok::<_, String>(Percentiles::of(&hist))
        })?
    } else {
        let mut tx = &link.tx;
        let mut rx = link.rx.as_ref().ok_or("no receiving end")?;
        let r = latency::timed(total, warmup, "round trip", |seq| {
            payload::stamp(&mut buf, seq);
            tx.write_all(&buf).map_err(|e| format!("writing the ping: {e}"))?;
            rx.read_exact(&mut got).map_err(|e| format!("reading the pong: {e}"))?;
            watch.tick(seq);
            topics::same(&got, &buf, seq)
        })?
        .1;
        drop(link);
        r
    };
    drop(watch);
    topics::collect(peer, stall)?;
    Ok(rtt)
}

impl Group for Settings {
    type Case = Case;
    type Sample = Sample;

    fn name(&self) -> &'static str {
        "async"
    }

    fn cases(&self) -> Vec<Case> {
        let mut out = vec![Case::Unix, Case::TokioUnix];
        for &p in &self.policies {
            out.push(Case::Blocking(p));
            out.push(Case::Async(p));
        }
        out
    }

    fn warmup_case(&self) -> Option<Case> {
        self.cases().into_iter().find(|c| matches!(c, Case::Async(_)))
    }

    fn run(&self, case: Case, rep: usize) -> Result<Sample, String> {
        let rtt = match case {
            Case::Unix | Case::TokioUnix => unix_case(case, self)?,
            Case::Blocking(_) | Case::Async(_) => topic_case(case, self)?,
        };
        Ok(Sample { case, rep, rtt })
    }

    fn progress(&self, s: &Sample) -> String {
        format!(
            "p50 {:>8} µs  p99 {:>8} µs  p99.9 {:>8} µs",
            latency::us(s.rtt.p50),
            latency::us(s.rtt.p99),
            latency::us(s.rtt.p999)
        )
    }

    fn render(&self, samples: &[Sample]) -> String {
        let spread = |case: Case, f: fn(&Percentiles) -> f64| {
            let v: Vec<f64> = samples.iter().filter(|s| s.case == case).map(|s| f(&s.rtt)).collect();
            Spread::of(&v)
        };
        let p50 = |p: &Percentiles| p.p50;
        let ratio = |case: Case, reference: Case| match (spread(case, p50), spread(reference, p50)) {
            (Some(a), Some(b)) if b.median > 0.0 => format!("{:.2}×", a.median / b.median),
            _ => "–".into(),
        };
        let t = &self.topics;
        let mut out = String::from("## async: awaited receive vs blocking receive vs tokio UnixStream\n\n");
        let _ = writeln!(
            out,
            "Round trips of {} messages ({} timed per run, median of the runs' percentiles, range in \
             brackets). The peer is another process echoing blocking; only this side's receive changes. \
             async cases run on a tokio current-thread runtime. Ratios compare p50s.\n",
            stats::bytes(t.latency_size as u64),
            t.round_trips
        );
        out.push_str("| case | p50 µs | p99 µs | p99.9 µs | vs blocking receive | vs tokio UnixStream |\n");
        out.push_str("| --- | ---: | ---: | ---: | ---: | ---: |\n");
        let cell = |s: Option<Spread>| match s {
            Some(s) => format!("{} [{}–{}]", latency::us(s.median), latency::us(s.min), latency::us(s.max)),
            None => "–".into(),
        };
        for case in self.cases() {
            let vs_blocking = match case {
                Case::Async(p) => ratio(case, Case::Blocking(p)),
                Case::TokioUnix => ratio(case, Case::Unix),
                _ => "–".into(),
            };
            let vs_tokio = if case == Case::TokioUnix { "–".into() } else { ratio(case, Case::TokioUnix) };
            let _ = writeln!(
                out,
                "| {case} | {} | {} | {} | {vs_blocking} | {vs_tokio} |",
                cell(spread(case, p50)),
                cell(spread(case, |p| p.p99)),
                cell(spread(case, |p| p.p999)),
            );
        }
        out.push('\n');
        out
    }

    fn csv(&self, samples: &[Sample]) -> String {
        let mut out = String::from("case,rep,count,p50_ns,p99_ns,p999_ns,max_ns,mean_ns\n");
        for s in samples {
            let r = s.rtt;
            let _ = writeln!(
                out,
                "\"{}\",{},{},{},{},{},{},{:.1}",
                s.case, s.rep, r.count, r.p50, r.p99, r.p999, r.max, r.mean
            );
        }
        out
    }
}
