//! Chunks survive a SIGKILL: what a killed process held comes back to the
//! pool.
//!
//! The parent creates a region with two topics, `orders` (2 partitions,
//! at-most-once delivery) and `jobs` (1 partition, at-least-once), and
//! starts a copy of itself as a child. The child publishes two orders into
//! each partition and one job, receives one order from each partition and
//! the job *without releasing them*, takes three loans (64 B, 3000 B,
//! 100 kB) it never publishes, says it is ready, and waits. The parent
//! SIGKILLs it: nothing of the child's runs after that.
//!
//! The parent then shows which chunks are not free, opens the region again
//! as any process would (opening runs recovery) and prints what recovery
//! reclaimed: the three loans, the two orders the child held (lost: that is
//! at-most-once delivery) and the job (published again: at-least-once). It
//! consumes what is left in the topics (the two orders the child published
//! and nobody received, and the job once more) and checks that every chunk
//! of every size class is free again. It removes the region at the end and
//! exits with status 1 if anything was lost.
//!
//! ```text
//! cargo run --example crash_recovery
//! ```
//!
//! `tests/examples.rs` runs the same code (`run` and `child`) with the test
//! binary as the child.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use tachyon::bus::{ClassStats, Delivery, Key, Recovered, Region, RegionConfig, Topic, TopicConfig};
use tachyon::{Error, Result};

/// What the child prints once it holds everything.
pub const READY: &str = "crash_recovery child: ready";
/// How long a loan, publish or receive may wait.
const WAIT: Option<Duration> = Some(Duration::from_secs(10));
/// How long the parent waits for the child to be ready.
const READY_WAIT: Duration = Duration::from_secs(30);
/// How long a child waits to be killed before it gives up (bounded, so
/// that an orphan ends).
const CHILD_LIMIT: Duration = Duration::from_secs(60);
/// Loans the child takes and never publishes.
const LOAN_SIZES: [usize; 3] = [64, 3000, 100_000];

#[allow(dead_code)] // tests/examples.rs includes this file and calls `run` and `child`
fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let outcome = match args.as_slice() {
        [role, name] if role == "child" => child(name).map(|()| true),
        [] => run(|name| {
            let mut cmd = Command::new(std::env::current_exe()?);
            cmd.args(["child", name]);
            Ok(cmd)
        })
        .map(|report| report.nothing_lost()),
        _ => Err(Error::InvalidArgument { what: "usage: crash_recovery (no arguments)".into() }),
    };
    match outcome {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("crash_recovery: {e}");
            ExitCode::FAILURE
        }
    }
}

/// What the parent found.
#[derive(Debug)]
pub struct Report {
    /// What opening the region after the kill reclaimed.
    pub recovered: Recovered,
    /// Messages left in the topics after the kill: (orders, jobs).
    pub drained: (usize, usize),
    /// Chunks not free at the end (0 when nothing was lost).
    pub lost_chunks: usize,
}

impl Report {
    /// Every chunk came back, and recovery and the topics say what the
    /// child's actions predict.
    pub fn nothing_lost(&self) -> bool {
        let r = &self.recovered;
        self.lost_chunks == 0
            // Its loans; and whatever free chunks it kept for its next
            // loans (a pop takes a batch), which come back too.
            && r.loans == LOAN_SIZES.len()
            && r.held == 2
            && r.redelivered == 1
            && r.unpublished == 0
            && self.drained == (2, 1)
    }
}

/// The parent: creates the region, runs the child made by `command(name)`,
/// kills it, recovers and checks. Removes the region however it ends.
pub fn run(command: impl Fn(&str) -> std::io::Result<Command>) -> Result<Report> {
    let name = format!("crash-recovery-{}", std::process::id());
    let region = Region::create(&name, RegionConfig::default().size(16 << 20).ring_arena(1 << 20))?;
    println!("created region {name:?}");
    let outcome = crash_and_recover(&region, &name, command);
    drop(region);
    let removed = Region::remove(&name);
    println!("removed the region");
    let report = outcome?;
    removed?;
    if report.nothing_lost() {
        println!("OK: nothing was lost");
    } else {
        println!("FAILED: {report:?}");
    }
    Ok(report)
}

fn crash_and_recover(
    region: &Region,
    name: &str,
    command: impl Fn(&str) -> std::io::Result<Command>,
) -> Result<Report> {
    let orders =
        region.create_topic("orders", TopicConfig::default().partitions(2).delivery(Delivery::AtMostOnce))?;
    let jobs =
        region.create_topic("jobs", TopicConfig::default().partitions(1).delivery(Delivery::AtLeastOnce))?;

    // The child: started, ready, killed.
    let mut cmd = command(name).map_err(|e| failed("cannot make the child's command", e))?;
    let mut child =
        KillOnDrop(cmd.stdout(Stdio::piped()).spawn().map_err(|e| failed("cannot start the child", e))?);
    wait_ready(&mut child.0)?;
    println!("child {} holds 2 received orders, 1 received job and {} loans", child.0.id(), LOAN_SIZES.len());
    print_busy("pool before the kill", &region.pool_stats()?);
    child.0.kill().map_err(|e| failed("cannot SIGKILL the child", e))?;
    let status = child.0.wait().map_err(|e| failed("cannot reap the child", e))?;
    println!("child killed: {status}");
    if status.signal() != Some(libc::SIGKILL) {
        return Err(Error::InvalidArgument {
            what: format!("the child was not killed by SIGKILL: {status}"),
        });
    }
    print_busy("pool after the kill", &region.pool_stats()?);

    // Any process opening the region runs recovery.
    let reopened = Region::open(name)?;
    let recovered = reopened.recovered_on_open();
    println!(
        "recovery on open reclaimed {} chunks: {} loans, {} cached, {} held messages (lost, at-most-once), \
         {} redelivered (at-least-once), {} unpublished; {} attach slots freed",
        recovered.total(),
        recovered.loans,
        recovered.cached,
        recovered.held,
        recovered.redelivered,
        recovered.unpublished,
        recovered.slots
    );
    drop(reopened);

    // What the child published and nobody consumed is still there.
    let drained = (drain(&orders)?, drain(&jobs)?);
    let stats = region.pool_stats()?;
    let mut lost_chunks = 0;
    for class in &stats {
        lost_chunks += class.chunks - class.free;
        if class.free != class.chunks {
            println!(
                "LOST: class {} B: {} of {} chunks not free",
                class.chunk_size,
                class.chunks - class.free,
                class.chunks
            );
        }
    }
    let total: usize = stats.iter().map(|c| c.chunks).sum();
    if lost_chunks == 0 {
        println!("every chunk is back in the pool: {total} of {total}, in every size class");
    }
    Ok(Report { recovered, drained, lost_chunks })
}

/// Prints the classes with chunks that are not free.
fn print_busy(when: &str, stats: &[ClassStats; 8]) {
    let busy: Vec<String> = stats
        .iter()
        .filter(|c| c.free != c.chunks)
        .map(|c| format!("{} x {} B", c.chunks - c.free, c.chunk_size))
        .collect();
    if busy.is_empty() {
        println!("{when}: every chunk free");
    } else {
        println!("{when}: not free: {}", busy.join(", "));
    }
}

/// Receives and releases everything left in `topic`; returns how many.
fn drain(topic: &Topic) -> Result<usize> {
    let mut n = 0;
    for partition in 0..topic.partitions() {
        loop {
            match topic.receive(partition, Some(Duration::from_millis(50))) {
                Ok(message) => {
                    println!(
                        "  {} partition {partition}: {:?}",
                        topic.info().name,
                        String::from_utf8_lossy(&message)
                    );
                    n += 1;
                }
                Err(Error::Timeout { .. }) => break,
                Err(e) => return Err(e),
            }
        }
    }
    Ok(n)
}

/// Waits (bounded) until the child prints [`READY`].
fn wait_ready(child: &mut Child) -> Result<()> {
    let stdout = child.stdout.take().ok_or_else(|| failed("child", std::io::ErrorKind::BrokenPipe))?;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let ready =
            BufReader::new(stdout).lines().map_while(|l| l.ok()).any(|l| l.trim_end().ends_with(READY));
        let _ = tx.send(ready);
    });
    match rx.recv_timeout(READY_WAIT) {
        Ok(true) => Ok(()),
        Ok(false) | Err(mpsc::RecvTimeoutError::Disconnected) => {
            Err(failed("the child ended before it was ready", std::io::ErrorKind::UnexpectedEof))
        }
        Err(mpsc::RecvTimeoutError::Timeout) => {
            Err(Error::Timeout { what: "the child to be ready", waited: Some(READY_WAIT) })
        }
    }
}

/// An error of this example's own, with what it was doing.
fn failed(context: &str, source: impl Into<std::io::Error>) -> Error {
    Error::Io { context: context.into(), source: source.into() }
}

/// Kills the child if the parent fails half-way, so that nothing outlives
/// the run.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// The child: takes loans and receives messages, keeps them all, says it is
/// ready and waits to be killed.
pub fn child(name: &str) -> Result<()> {
    let region = Region::open(name)?;
    let orders = region.topic("orders")?;
    let jobs = region.topic("jobs")?;
    for partition in 0..orders.partitions() {
        let key = (0..1 << 20)
            .find(|&k| orders.partition_of(Key(k)) == partition)
            .ok_or_else(|| Error::InvalidArgument { what: format!("no key for partition {partition}") })?;
        for i in 0..2 {
            publish(&orders, key, &format!("order {i} for partition {partition}"))?;
        }
    }
    publish(&jobs, 0, "job 1")?;

    let mut held = Vec::new();
    for partition in 0..orders.partitions() {
        held.push(orders.receive(partition, WAIT)?);
    }
    held.push(jobs.receive(0, WAIT)?);
    let loans = LOAN_SIZES.iter().map(|&size| orders.loan(size, WAIT)).collect::<Result<Vec<_>>>()?;

    let mut out = std::io::stdout().lock();
    writeln!(out, "{READY}").and_then(|()| out.flush()).map_err(|e| failed("stdout", e))?;
    drop(out);

    let parent = std::os::unix::process::parent_id();
    let deadline = Instant::now() + CHILD_LIMIT;
    while Instant::now() < deadline && std::os::unix::process::parent_id() == parent {
        std::thread::sleep(Duration::from_millis(10));
    }
    drop((held, loans));
    Err(Error::Timeout { what: "the parent's SIGKILL", waited: Some(CHILD_LIMIT) })
}

fn publish(topic: &Topic, key: u64, text: &str) -> Result<()> {
    let mut loan = topic.loan(text.len(), WAIT)?;
    loan.copy_from_slice(text.as_bytes());
    loan.publish(Key(key), WAIT)
}
