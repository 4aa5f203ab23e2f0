//! Round-trip latency between two processes over the zero-copy bus.
//!
//! The parent creates a region with two topics, `ping` and `pong`, and
//! starts a copy of itself as the child. For each round it loans a chunk,
//! writes a sequence number and fills the rest of the SIZE-byte message,
//! publishes it on `ping` and waits for the answer on `pong`; the child
//! receives each ping (a view into shared memory), checks its sequence
//! number, and echoes the message back in a chunk of its own. The parent
//! checks the sequence number of every pong and times each round trip.
//! After a warm-up it prints the round-trip latency: p50, p99, p99.9, mean,
//! min and max, in nanoseconds.
//!
//! ```text
//! cargo run --release --example pingpong -- [SIZE [COUNT [spin|hybrid|futex]]]
//! cargo run --release --example pingpong -- 256 100000
//! cargo run --release --example pingpong -- 1024 100000 spin
//! ```
//!
//! SIZE is the message size in bytes (8 to 1048576, default 256), COUNT
//! the number of timed round trips (1 to 10000000, default 100000), and the
//! last argument the topics' wait policy (default hybrid). `spin` needs two
//! free CPUs to mean anything.

use std::io;
use std::process::{Child, Command};
use std::time::{Duration, Instant};
use tachyon::bus::{Key, Region, RegionConfig, TopicConfig, MAX_MESSAGE};
use tachyon::sync::WaitPolicy;
use tachyon::{Error, Result};

/// How long one loan, publish or receive may wait: a peer that stops
/// answering ends the run with an error instead of a hang.
const WAIT: Option<Duration> = Some(Duration::from_secs(10));
/// Untimed round trips before the measured ones.
const WARM_UP: u64 = 1000;
/// Most timed round trips (their samples are kept in memory: 8 bytes each).
const MAX_COUNT: u64 = 10_000_000;
/// Bytes of the sequence number at the start of every message.
const SEQ: usize = 8;

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("child") {
        return match args.as_slice() {
            [_, name, rounds] => child(name, parse(rounds, "round count", 1, u64::MAX)?),
            _ => {
                Err(Error::InvalidArgument { what: "child: expected a region name and a round count".into() })
            }
        };
    }
    if args.iter().any(|a| a == "-h" || a == "--help") {
        println!("usage: pingpong [SIZE [COUNT [spin|hybrid|futex]]]  (defaults: 256 100000 hybrid)");
        return Ok(());
    }
    let (size, count, policy) = parse_args(&args)?;

    let name = format!("pingpong-{}", std::process::id());
    let region = Region::create(&name, RegionConfig::default().size(16 << 20).ring_arena(1 << 20))?;
    let outcome = parent(&region, &name, size, count, policy);
    // A region is persistent: remove it whether or not the run went well.
    drop(region);
    let removed = Region::remove(&name);
    outcome.and(removed)
}

/// Reads `SIZE COUNT POLICY`, each optional.
fn parse_args(args: &[String]) -> Result<(usize, u64, WaitPolicy)> {
    if args.len() > 3 {
        return Err(Error::InvalidArgument {
            what: format!("expected at most 3 arguments (SIZE COUNT spin|hybrid|futex), got {}", args.len()),
        });
    }
    let size = match args.first() {
        Some(s) => parse(s, "SIZE (bytes per message)", SEQ as u64, MAX_MESSAGE as u64)? as usize,
        None => 256,
    };
    let count = match args.get(1) {
        Some(s) => parse(s, "COUNT (round trips)", 1, MAX_COUNT)?,
        None => 100_000,
    };
    let policy = match args.get(2).map(String::as_str) {
        None | Some("hybrid") => WaitPolicy::Hybrid,
        Some("spin") => WaitPolicy::Spin,
        Some("futex") => WaitPolicy::Futex,
        Some(other) => {
            return Err(Error::InvalidArgument {
                what: format!("the wait policy must be spin, hybrid or futex, not {other:?}"),
            })
        }
    };
    Ok((size, count, policy))
}

/// Parses a whole number from `min` to `max`.
fn parse(text: &str, what: &str, min: u64, max: u64) -> Result<u64> {
    match text.parse::<u64>() {
        Ok(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(Error::InvalidArgument {
            what: format!("{what} must be a whole number from {min} to {max}, not {text:?}"),
        }),
    }
}

fn parent(region: &Region, name: &str, size: usize, count: u64, policy: WaitPolicy) -> Result<()> {
    // One partition per direction; one message is in flight at a time.
    let config = TopicConfig::default().partitions(1).capacity(64).wait(policy);
    let ping = region.create_topic("ping", config)?;
    let pong = region.create_topic("pong", config)?;
    let rounds = WARM_UP + count;
    let mut child = Peer::spawn(&["child", name, &rounds.to_string()])?;
    println!(
        "pingpong: {size}-byte messages, {count} round trips (+{WARM_UP} warm-up), {} waiting, parent pid {}, child pid {}",
        format!("{policy:?}").to_lowercase(),
        std::process::id(),
        child.0.id()
    );

    let mut samples: Vec<u64> = Vec::with_capacity(count as usize);
    let started = Instant::now();
    for seq in 0..rounds {
        let t0 = Instant::now();
        let mut loan = ping.loan(size, WAIT)?;
        loan[..SEQ].copy_from_slice(&seq.to_le_bytes());
        loan[SEQ..].fill(seq as u8);
        loan.publish(Key(0), WAIT)?;
        let answer = pong.receive(0, WAIT)?;
        let got = seq_of(&answer)?;
        if got != seq || answer.len() != size {
            return Err(check_failed(format!(
                "round {seq}: the pong carries sequence number {got} and {} bytes, expected {seq} and {size}",
                answer.len()
            )));
        }
        drop(answer);
        if seq >= WARM_UP {
            samples.push(t0.elapsed().as_nanos() as u64);
        }
    }
    let elapsed = started.elapsed();
    child.wait(Duration::from_secs(10))?;

    samples.sort_unstable();
    let n = samples.len();
    let mean = samples.iter().map(|&s| u128::from(s)).sum::<u128>() / n.max(1) as u128;
    println!(
        "round trip (ns): p50 {}  p99 {}  p99.9 {}  mean {mean}  min {}  max {}",
        percentile(&samples, 500),
        percentile(&samples, 990),
        percentile(&samples, 999),
        samples.first().copied().unwrap_or(0),
        samples.last().copied().unwrap_or(0),
    );
    println!(
        "{rounds} round trips in {:.3} s: {:.0} round trips/s; every sequence number checked both ways",
        elapsed.as_secs_f64(),
        rounds as f64 / elapsed.as_secs_f64()
    );
    Ok(())
}

/// The child: answers `rounds` pings, each with a copy of the ping.
fn child(name: &str, rounds: u64) -> Result<()> {
    let region = Region::open(name)?;
    let ping = region.topic("ping")?;
    let pong = region.topic("pong")?;
    for seq in 0..rounds {
        let request = ping.receive(0, WAIT)?; // a view into shared memory
        let got = seq_of(&request)?;
        if got != seq {
            return Err(check_failed(format!("child: expected ping {seq}, got {got}")));
        }
        let mut loan = pong.loan(request.len(), WAIT)?;
        loan.copy_from_slice(&request);
        loan.publish(Key(0), WAIT)?;
        // `request` is dropped here: its chunk goes back to the pool.
    }
    Ok(())
}

/// The sequence number at the start of a message (whose bytes another
/// process wrote: a short message is an error, not a panic).
fn seq_of(message: &[u8]) -> Result<u64> {
    message
        .get(..SEQ)
        .and_then(|b| <[u8; SEQ]>::try_from(b).ok())
        .map(u64::from_le_bytes)
        .ok_or_else(|| check_failed(format!("a message of {} bytes has no sequence number", message.len())))
}

/// The value below which `per_mille` thousandths of the sorted samples lie
/// (nearest rank).
fn percentile(sorted: &[u64], per_mille: usize) -> u64 {
    let rank = (sorted.len() * per_mille).div_ceil(1000).max(1);
    sorted.get(rank - 1).copied().unwrap_or(0)
}

/// A failed check of this example's own (a lost, repeated or damaged
/// message).
fn check_failed(what: String) -> Error {
    Error::Io { context: "check failed".into(), source: io::Error::new(io::ErrorKind::InvalidData, what) }
}

/// The child process; killed if still running when dropped (the parent
/// failed half-way), so that nothing outlives the run.
struct Peer(Child);

impl Peer {
    /// Starts a copy of this program with `args`.
    fn spawn(args: &[&str]) -> Result<Peer> {
        let exe = std::env::current_exe()
            .map_err(|e| Error::Io { context: "cannot find this program's executable".into(), source: e })?;
        let child = Command::new(exe)
            .args(args)
            .spawn()
            .map_err(|e| Error::Io { context: "cannot start the child process".into(), source: e })?;
        Ok(Peer(child))
    }

    /// Waits up to `timeout` for the child to exit, successfully.
    fn wait(&mut self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            match self.0.try_wait() {
                Ok(Some(status)) if status.success() => return Ok(()),
                Ok(Some(status)) => {
                    return Err(Error::Io {
                        context: "the child failed".into(),
                        source: io::Error::other(status.to_string()),
                    })
                }
                Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
                Ok(None) => {
                    return Err(Error::Io {
                        context: format!("the child did not exit within {timeout:?}"),
                        source: io::ErrorKind::TimedOut.into(),
                    })
                }
                Err(e) => return Err(Error::Io { context: "cannot wait for the child".into(), source: e }),
            }
        }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}
