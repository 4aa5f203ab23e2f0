//! The scaling group: how the loan path's round trip grows
//! with the payload, and how topic throughput changes with the number of
//! partitions. It runs the topics group's code ([`topics::run`]) on other
//! cases.
//!
//! * **Round trip vs payload size**: the loan path with the message built
//!   in place by writing its sequence stamps only (its first and last 8
//!   bytes), the receiver checking the stamps only: the payload itself is
//!   never copied or read, so the round trip should stay nearly flat from
//!   64 B to 1 MiB. Next to it, the raw shared-memory floor of the same
//!   size, which copies the whole payload each way, and the loan path that
//!   writes and reads every byte (what a user who fills the message pays).
//! * **Throughput vs partitions**: 1 KiB messages on the copy and loan
//!   paths through a topic of 1, 2 and 4 partitions; the producer sends
//!   message `seq` to partition `seq % partitions`, the one consumer takes
//!   the partitions in turn and checks every sequence number.
//! * **Throughput vs processes**: N producer processes × M consumer
//!   processes on one topic of 1 and 4 partitions, 1 KiB messages on the
//!   copy path, spin and hybrid; see [`procs`].
//! * **Throughput in one process**: a producer thread and a consumer
//!   thread, the consumer's handle a clone of the producer's or one of its
//!   own, copy and loan paths; see [`threads`].

pub(crate) mod procs;
mod procs_peer;
pub(crate) mod procs_run;
pub(crate) mod threads;

use crate::charts::{Chart, Series};
use crate::latency;
use crate::policy::Policy;
use crate::stats::{self, Spread};
use crate::suite::Group;
use crate::topics::{self, Case, Sample, Test, Via};
use std::fmt::Write as _;

pub use procs::{parse_shape, Settings as ProcsSettings, Shape};
pub use procs_peer::{peer, PeerArgs, Role};
pub use threads::{parse_path as parse_thread_path, Path as ThreadPath, Settings as ThreadsSettings};

/// A configuration of the group: a topics run, or an N × M processes run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ScalingCase {
    /// A run of the topics group's code.
    Topic(Case),
    /// N producers × M consumers.
    Procs(procs::Case),
    /// A producer and a consumer thread of this process.
    Threads(threads::Case),
}

impl std::fmt::Display for ScalingCase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ScalingCase::Topic(c) => c.fmt(f),
            ScalingCase::Procs(c) => c.fmt(f),
            ScalingCase::Threads(c) => c.fmt(f),
        }
    }
}

/// A measurement of the group.
#[derive(Debug, Clone, Copy)]
pub enum ScalingSample {
    /// Of a topics run.
    Topic(Sample),
    /// Of an N × M processes run.
    Procs(procs::Sample),
    /// Of a one-process run.
    Threads(threads::Sample),
}

/// What the user asked for.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The topics settings the runs use (round trips, messages, capacity,
    /// repetitions, stall timeout, placement).
    pub topics: topics::Settings,
    /// Payload sizes of the round trips.
    pub sizes: Vec<usize>,
    /// Partition counts of the throughput runs.
    pub partitions: Vec<u32>,
    /// Message size of the throughput runs.
    pub throughput_size: usize,
    /// Wait policy of the tachyon runs.
    pub policy: Policy,
    /// The N × M processes runs.
    pub procs: ProcsSettings,
    /// The one-process runs.
    pub threads: ThreadsSettings,
}

impl Settings {
    fn latency_cases(&self, size: usize) -> [Case; 3] {
        let p = Some(self.policy);
        [
            Case::new(Test::Latency, Via::RawRing, None, size),
            Case { stamps_only: true, ..Case::new(Test::Latency, Via::Loan, p, size) },
            Case::new(Test::Latency, Via::Loan, p, size),
        ]
    }

    fn throughput_cases(&self, partitions: u32) -> [Case; 2] {
        let p = Some(self.policy);
        let size = self.throughput_size;
        [
            Case { partitions, ..Case::new(Test::Throughput, Via::Copy, p, size) },
            Case { partitions, ..Case::new(Test::Throughput, Via::Loan, p, size) },
        ]
    }

    fn median(&self, samples: &[Sample], case: Case, f: impl Fn(&Sample) -> Option<f64>) -> Option<Spread> {
        let v: Vec<f64> = samples.iter().filter(|s| s.case == case).filter_map(f).collect();
        Spread::of(&v)
    }

    /// `f(case) ÷ f(reference)` within each repetition, over the repetitions.
    fn paired(
        &self,
        samples: &[Sample],
        case: Case,
        reference: Case,
        f: impl Fn(&Sample) -> Option<f64>,
    ) -> Option<Spread> {
        let v: Vec<f64> = samples
            .iter()
            .filter(|s| s.case == case)
            .filter_map(|s| {
                let r = samples.iter().find(|r| r.case == reference && r.rep == s.rep)?;
                Some(f(s)? / f(r)?)
            })
            .collect();
        Spread::of(&v)
    }
}

fn p50(s: &Sample) -> Option<f64> {
    s.rtt.map(|r| r.p50)
}

fn p99(s: &Sample) -> Option<f64> {
    s.rtt.map(|r| r.p99)
}

fn rate(s: &Sample) -> Option<f64> {
    Some(s.rate())
}

fn split(samples: &[ScalingSample]) -> (Vec<Sample>, Vec<procs::Sample>, Vec<threads::Sample>) {
    let mut topic = Vec::new();
    let mut procs = Vec::new();
    let mut threads = Vec::new();
    for s in samples {
        match s {
            ScalingSample::Topic(s) => topic.push(*s),
            ScalingSample::Procs(s) => procs.push(*s),
            ScalingSample::Threads(s) => threads.push(*s),
        }
    }
    (topic, procs, threads)
}

impl Group for Settings {
    type Case = ScalingCase;
    type Sample = ScalingSample;

    fn name(&self) -> &'static str {
        "scaling"
    }

    fn cases(&self) -> Vec<ScalingCase> {
        let mut out = Vec::new();
        for &size in &self.sizes {
            out.extend(self.latency_cases(size).map(ScalingCase::Topic));
        }
        for &p in &self.partitions {
            out.extend(self.throughput_cases(p).map(ScalingCase::Topic));
        }
        out.extend(self.procs.cases().into_iter().map(ScalingCase::Procs));
        out.extend(self.threads.cases().into_iter().map(ScalingCase::Threads));
        out
    }

    fn run(&self, case: ScalingCase, rep: usize) -> Result<ScalingSample, String> {
        match case {
            ScalingCase::Topic(c) => topics::run(c, &self.topics, rep).map(ScalingSample::Topic),
            ScalingCase::Procs(c) => procs_run::run(c, &self.procs, rep).map(ScalingSample::Procs),
            ScalingCase::Threads(c) => threads::run(c, &self.threads, rep).map(ScalingSample::Threads),
        }
    }

    fn progress(&self, s: &ScalingSample) -> String {
        match s {
            ScalingSample::Topic(s) => match s.rtt {
                Some(r) => format!("p50 {:>8} µs  p99 {:>8} µs", latency::us(r.p50), latency::us(r.p99)),
                None => format!("{:>9} msgs/s {:>6.2} GB/s", stats::si(s.rate()), s.gbps()),
            },
            ScalingSample::Procs(s) => format!("{:>9} msgs/s", stats::si(s.rate())),
            ScalingSample::Threads(s) => format!("{:>9} msgs/s", stats::si(s.rate())),
        }
    }

    fn render(&self, samples: &[ScalingSample]) -> String {
        let (samples, procs, threads) = split(samples);
        let samples = &samples[..];
        let mut out = String::from("## Scaling\n\n");
        let us = |s: Option<Spread>| s.map_or_else(|| "–".to_owned(), |s| latency::us(s.median));
        let x = |s: Option<Spread>| s.map_or_else(|| "–".to_owned(), |s| format!("{:.2}", s.median));
        if !self.sizes.is_empty() {
            let (count, warmup) = self.topics.counts(Test::Latency);
            let _ = writeln!(
                out,
                "### Round trip vs payload size, loan path ({}; {count} timed round trips per run, after \
                 {warmup})\n",
                self.policy.name()
            );
            let _ = writeln!(
                out,
                "*Loan, in place*: the ping and the pong are built in their loans by writing their \
                 sequence stamps only (first and last 8 bytes) and the receivers check the stamps \
                 only: the payload is never copied or read, so this should stay nearly flat. \
                 *Loan, every byte*: the ping is copied into its loan, the echo copies the ping into \
                 the pong's loan, the pinger compares the pong with its ping. *Raw floor*: a \
                 spinning flag and a memcpy of the whole payload each way. Microseconds, medians \
                 over the repetitions.\n"
            );
            let _ = writeln!(
                out,
                "| payload | loan, in place p50 | p99 | × its 64 B p50 | loan, every byte p50 | raw floor p50 \
                 | in place × raw floor |"
            );
            let _ = writeln!(out, "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
            let first = self.sizes.first().map(|&s| self.latency_cases(s)[1]);
            for &size in &self.sizes {
                let [raw, in_place, every] = self.latency_cases(size);
                let vs_first = first.and_then(|f| self.paired(samples, in_place, f, p50));
                let _ = writeln!(
                    out,
                    "| {} | {} | {} | {} | {} | {} | {} |",
                    stats::bytes(size as u64),
                    us(self.median(samples, in_place, p50)),
                    us(self.median(samples, in_place, p99)),
                    x(vs_first),
                    us(self.median(samples, every, p50)),
                    us(self.median(samples, raw, p50)),
                    x(self.paired(samples, in_place, raw, p50)),
                );
            }
            out.push('\n');
        }
        if !self.partitions.is_empty() {
            let (count, warmup) = self.topics.counts(Test::Throughput);
            let _ = writeln!(
                out,
                "### Throughput vs partitions, {} messages ({}; {count} timed messages per run, after \
                 {warmup})\n",
                stats::bytes(self.throughput_size as u64),
                self.policy.name()
            );
            let _ = writeln!(
                out,
                "One producer process, one consumer process; message `seq` goes to partition `seq % \
                 partitions`, the consumer takes the partitions in turn and checks every sequence \
                 number. Medians over the repetitions, ranges in brackets.\n"
            );
            let _ = writeln!(
                out,
                "| partitions | copy path msgs/s | (min – max) | × 1 partition | loan path msgs/s | (min – max) \
                 | × 1 partition |"
            );
            let _ = writeln!(out, "| ---: | ---: | --- | ---: | ---: | --- | ---: |");
            let one = self.throughput_cases(1);
            let range = |s: Option<Spread>| {
                s.map_or_else(|| "–".to_owned(), |s| format!("({} – {})", stats::si(s.min), stats::si(s.max)))
            };
            let si = |s: Option<Spread>| s.map_or_else(|| "–".to_owned(), |s| stats::si(s.median));
            for &p in &self.partitions {
                let [copy, loan] = self.throughput_cases(p);
                let (c, l) = (self.median(samples, copy, rate), self.median(samples, loan, rate));
                let _ = writeln!(
                    out,
                    "| {p} | {} | {} | {} | {} | {} | {} |",
                    si(c),
                    range(c),
                    x(self.paired(samples, copy, one[0], rate)),
                    si(l),
                    range(l),
                    x(self.paired(samples, loan, one[1], rate)),
                );
            }
            out.push('\n');
        }
        out.push_str(&self.procs.render(&procs));
        out.push_str(&self.threads.render(&threads));
        out
    }

    /// The topics group's columns, then `producers,consumers`.
    fn csv(&self, samples: &[ScalingSample]) -> String {
        let (topic, procs, threads) = split(samples);
        let mut out = String::new();
        for (k, line) in topics::csv(&topic).lines().enumerate() {
            let extra = if k == 0 { "producers,consumers" } else { "1,1" };
            let _ = writeln!(out, "{line},{extra}");
        }
        procs::csv_lines(&procs, &mut out);
        threads::csv_lines(&threads, &mut out);
        out
    }

    fn charts(&self, samples: &[ScalingSample]) -> Vec<Chart> {
        let (samples, procs, _) = split(samples);
        let samples = &samples[..];
        let mut out: Vec<Chart> = self.procs.chart(&procs).into_iter().collect();
        if self.sizes.len() < 2 {
            return out;
        }
        let line = |name: &str, pick: fn(&Self, usize) -> Case| Series {
            name: name.to_owned(),
            points: self
                .sizes
                .iter()
                .filter_map(|&size| {
                    let m = self.median(samples, pick(self, size), p50)?;
                    Some((size as f64, m.median / 1000.0))
                })
                .collect(),
        };
        out.insert(
            0,
            Chart::Lines {
                file: "latency-vs-size",
                title: format!("Round trip p50 vs payload size ({})", self.policy.name()),
                x_label: "payload bytes".into(),
                y_label: "round trip p50, µs".into(),
                series: vec![
                    line("topic loan, built in place", |s, size| s.latency_cases(size)[1]),
                    line("topic loan, every byte", |s, size| s.latency_cases(size)[2]),
                    line("raw floor (memcpy each way)", |s, size| s.latency_cases(size)[0]),
                ],
            },
        );
        out
    }
}
