//! The scaling group's one-process runs: a producer thread and a consumer
//! thread of this process stream 1 KiB messages through one topic, each
//! thread on its own CPU (the writer's and the reader's of the placement).
//!
//! * **The handles.** *clone*: the consumer's handle is `topic.clone()` of
//!   the producer's, the way a program hands a topic to a thread. *own*:
//!   the consumer opens the topic again (`region.topic(name)`). A `Loan`
//!   and a `Message` each count on the handle they came from, so this
//!   shows whether two threads holding clones pass one count's line
//!   between their cores on every message (they do not: each clone is a
//!   handle of its own, and the two rows should match).
//! * **The paths.** The copy path (`send` / `recv_into`, no value, no
//!   count) and the loan path (`loan` + fill + `publish` / `receive`, the
//!   message read where it lies).
//! * **Checks and timing** as in the topics group: every message carries
//!   its sequence number in its first and last 8 bytes and the consumer
//!   checks each one; the consumer times the messages after the warm-up.
//!   Every wait is bounded, and a failing thread stops the other.

use crate::payload;
use crate::peer::retry;
use crate::pin;
use crate::policy::Policy;
use crate::stats::{self, Spread};
use crate::throughput;
use crate::topics::{publish_loan, region_config, unique_name, RemoveRegion, KEY};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;
use tachyon::bus::{Key, Region, Topic, TopicConfig};

/// Which data path the two threads use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Path {
    /// `send` / `recv_into`.
    Copy,
    /// `loan` + `publish` / `receive`.
    Loan,
}

impl Path {
    fn name(self) -> &'static str {
        match self {
            Path::Copy => "copy",
            Path::Loan => "loan",
        }
    }
}

/// Parses `copy` or `loan`.
pub fn parse_path(s: &str) -> Result<Path, String> {
    match s.trim() {
        "copy" => Ok(Path::Copy),
        "loan" => Ok(Path::Loan),
        other => Err(format!("{other:?} is not a one-process path (copy or loan)")),
    }
}

/// How the consumer thread got its handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Handle {
    /// `topic.clone()` of the producer's handle.
    Clone,
    /// The topic opened again from the region.
    Own,
}

impl Handle {
    fn name(self) -> &'static str {
        match self {
            Handle::Clone => "clone",
            Handle::Own => "own",
        }
    }
}

/// One configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Case {
    /// The data path.
    pub path: Path,
    /// The consumer's handle.
    pub handle: Handle,
    /// The topic's wait policy.
    pub policy: Policy,
    /// Message bytes.
    pub size: usize,
}

impl std::fmt::Display for Case {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "threads {}/{} {} {} handle",
            self.path.name(),
            self.policy.name(),
            stats::bytes(self.size as u64),
            self.handle.name()
        )
    }
}

/// One measurement: the messages timed (every one checked) and their
/// time, from the end of the warm-up to the last.
pub type Sample = super::procs::Sample<Case>;

/// What the user asked for.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The paths to run (none: no one-process runs).
    pub paths: Vec<Path>,
    /// Wait policy of the topic.
    pub policy: Policy,
    /// Message bytes.
    pub size: usize,
    /// Timed messages per run.
    pub messages: u64,
    /// Descriptors of the topic's one partition.
    pub capacity: u32,
    /// Longest a thread may make no progress before the run fails.
    pub stall: Duration,
    /// The two threads' CPUs, if pinned.
    pub placement: pin::Placement,
}

impl Settings {
    /// Every configuration, in the order one repetition runs them.
    pub fn cases(&self) -> Vec<Case> {
        let mut out = Vec::new();
        for &path in &self.paths {
            for handle in [Handle::Clone, Handle::Own] {
                out.push(Case { path, handle, policy: self.policy, size: self.size });
            }
        }
        out
    }

    /// Timed and warm-up messages of a run (as the topics group's
    /// throughput runs: two laps of the ring, plus 5 %).
    fn counts(&self) -> (u64, u64) {
        (self.messages, 2 * u64::from(self.capacity) + self.messages / 20)
    }

    fn median(&self, samples: &[Sample], case: Case) -> Option<Spread> {
        let v: Vec<f64> = samples.iter().filter(|s| s.case == case).map(Sample::rate).collect();
        Spread::of(&v)
    }

    /// The clone's rate ÷ the own handle's, within each repetition.
    fn paired(&self, samples: &[Sample], case: Case) -> Option<Spread> {
        let own = Case { handle: Handle::Own, ..case };
        let v: Vec<f64> = samples
            .iter()
            .filter(|s| s.case == case)
            .filter_map(|s| {
                let r = samples.iter().find(|r| r.case == own && r.rep == s.rep)?;
                Some(s.rate() / r.rate())
            })
            .collect();
        Spread::of(&v)
    }

    /// The report's section (empty when no path was asked for).
    pub fn render(&self, samples: &[Sample]) -> String {
        let mut out = String::new();
        if self.paths.is_empty() {
            return out;
        }
        let (count, warmup) = self.counts();
        let _ = writeln!(
            out,
            "### Throughput in one process: two threads, a clone of the handle or one of its own, {} \
             messages ({}; {count} timed messages per run, after {warmup})\n",
            stats::bytes(self.size as u64),
            self.policy.name()
        );
        let _ = writeln!(
            out,
            "A producer thread and a consumer thread of one process, on the writer's and the \
             reader's CPU, one partition. *clone*: the consumer's handle is `topic.clone()` of the \
             producer's; *own*: it opened the topic again. Loans and messages count on the handle \
             they came from: the two rows of a path should match. Medians over the repetitions, \
             ranges in brackets; the ratio is paired within each repetition.\n"
        );
        let _ = writeln!(out, "| path | consumer's handle | msgs/s | (min – max) | × own handle |");
        let _ = writeln!(out, "| --- | --- | ---: | --- | ---: |");
        for case in self.cases() {
            let m = self.median(samples, case);
            let ratio = match case.handle {
                Handle::Own => "1.00".to_owned(),
                Handle::Clone => {
                    self.paired(samples, case).map_or_else(|| "–".to_owned(), |s| format!("{:.2}", s.median))
                }
            };
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {ratio} |",
                case.path.name(),
                case.handle.name(),
                m.map_or_else(|| "–".to_owned(), |s| stats::si(s.median)),
                m.map_or_else(
                    || "–".to_owned(),
                    |s| format!("({} – {})", stats::si(s.min), stats::si(s.max))
                ),
            );
        }
        out.push('\n');
        out
    }
}

/// The CSV lines of the one-process runs, in the scaling group's columns
/// (the topics group's, then `producers,consumers`: 1,1).
pub fn csv_lines(samples: &[Sample], out: &mut String) {
    for s in samples {
        let c = s.case;
        let _ = writeln!(
            out,
            "{c},throughput,{},{},{},1,false,{},{},{},{:.1},{:.4},,,,,,,,1,1",
            c.path.name(),
            c.policy.name(),
            c.size,
            s.rep,
            s.count,
            s.elapsed.as_nanos(),
            s.rate(),
            (s.count * c.size as u64) as f64 / s.elapsed.as_nanos().max(1) as f64,
        );
    }
}

/// Which thread failed first (0: neither): the other one's bounded waits
/// check it and stop, and the run reports the first one's error.
struct Failed(AtomicU8);

const PRODUCER: u8 = 1;
const CONSUMER: u8 = 2;

impl Failed {
    /// For the thread `me`'s waits: an error once the other one failed.
    fn check(&self, me: u8) -> Result<(), String> {
        match self.0.load(Ordering::Relaxed) {
            0 => Ok(()),
            _ => Err(format!("the {} thread failed", if me == PRODUCER { "consumer" } else { "producer" })),
        }
    }

    /// Records that `me` failed, unless the other thread failed first.
    fn note<T>(&self, me: u8, r: Result<T, String>) -> Result<T, String> {
        if r.is_err() {
            let _ = self.0.compare_exchange(0, me, Ordering::Relaxed, Ordering::Relaxed);
        }
        r
    }

    /// The thread that failed first, if one did.
    fn first(&self) -> u8 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Runs `case` once: the producer on this thread, the consumer on a
/// scoped thread pinned to the reader's CPU.
pub fn run(case: Case, settings: &Settings, rep: usize) -> Result<Sample, String> {
    let (count, warmup) = settings.counts();
    let total = count + warmup;
    let name = unique_name();
    let region = Region::create(&name, region_config(case.size, settings.capacity, 1, false))
        .map_err(|e| format!("create region {name}: {e}"))?;
    let _remove = RemoveRegion(&name);
    let cfg =
        TopicConfig::default().partitions(1).capacity(settings.capacity).wait(case.policy.wait_policy());
    let producer = region.create_topic("data", cfg).map_err(|e| format!("create topic: {e}"))?;
    let consumer: Topic = match case.handle {
        Handle::Clone => producer.clone(),
        Handle::Own => region.topic("data").map_err(|e| format!("open topic: {e}"))?,
    };
    let stall = settings.stall;
    let failed = Failed(AtomicU8::new(0));
    let reader_cpu = settings.placement.reader();
    let elapsed = std::thread::scope(|s| {
        let reader = s.spawn(|| {
            let r = (|| {
                if let Some(cpu) = reader_cpu {
                    pin::pin_to(cpu)?;
                }
                let mut check = || failed.check(CONSUMER);
                let mut buf = vec![0u8; case.size];
                throughput::timed(total, warmup, |seq| match case.path {
                    Path::Copy => {
                        retry(|t| consumer.recv_into(0, &mut buf, t), stall, &mut check, "no message came")?;
                        payload::check(&buf, seq)
                    }
                    Path::Loan => {
                        let msg = retry(|t| consumer.receive(0, t), stall, &mut check, "no message came")?;
                        std::hint::black_box(payload::fold(&msg));
                        payload::check(&msg, seq)
                    }
                })
            })();
            failed.note(CONSUMER, r)
        });
        let sent = (|| {
            let mut check = || failed.check(PRODUCER);
            let template = payload::buffer(case.size);
            let mut buf = template.clone();
            for seq in 0..total {
                match case.path {
                    Path::Copy => {
                        payload::stamp(&mut buf, seq);
                        retry(
                            |t| producer.send(&buf, Key(KEY), t),
                            stall,
                            &mut check,
                            "the partition stayed full",
                        )?;
                    }
                    Path::Loan => {
                        publish_loan(&producer, case.size, payload::build(&template, seq), stall, &mut check)?
                    }
                }
            }
            Ok(())
        })();
        let sent = failed.note(PRODUCER, sent).map_err(|e| format!("producer: {e}"));
        let read = reader.join().map_err(|_| "the consumer thread panicked".to_owned())?;
        let read = read.map_err(|e| format!("consumer: {e}"));
        // The first failure is the cause; the other thread only stopped.
        match (failed.first(), sent, read) {
            (CONSUMER, _, Err(e)) | (_, Err(e), _) | (_, Ok(()), Err(e)) => Err(e),
            (_, Ok(()), Ok(elapsed)) => Ok(elapsed),
        }
    })?;
    drop(consumer);
    drop(producer);
    drop(region);
    Ok(Sample { case, rep, count, elapsed })
}
