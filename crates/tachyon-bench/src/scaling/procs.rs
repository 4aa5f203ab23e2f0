//! The scaling group's N × M processes: N producer processes and M
//! consumer processes on one topic of P partitions, 1 KiB messages on the
//! copy path (`send` / `recv_into`).
//!
//! * **Who sends what.** Producer `i` of `N` sends its share of the run's
//!   messages ([`share`]), message `s` stamped [`stamp_of`]`(i, s)` (first
//!   and last 8 bytes) with the key of partition `(s + i) % P` (the
//!   topics group's `partition_keys`), so every producer spreads over every
//!   partition.
//! * **Who takes what** ([`assignment`]). Consumers of one partition
//!   compete (each message goes to one of them): with `P ≥ M` consumer `j`
//!   owns partitions `j, j + M, ...`; with `P < M` consumer `j` shares
//!   partition `j % P` with the others of that partition. A consumer takes
//!   its partitions in turn.
//! * **The end.** Once every producer is done, this process sends one end
//!   marker per consumer of each partition ([`MARKER`], after all the data
//!   in the partition's FIFO); a consumer stops reading a partition at its
//!   first marker and is done when every partition of its gave it one.
//! * **Checks.** Every consumer checks every message: its length, its two
//!   stamps equal (not torn), a producer and a sequence number that exist,
//!   the partition it came from, and, per (producer, partition), a
//!   sequence number above the last one (a partition is a FIFO per
//!   producer, also when consumers compete). It reports its count and an
//!   order-independent checksum of the stamps ([`mix`], summed); this
//!   process compares their totals with those of every message sent:
//!   nothing lost, nothing delivered twice.
//! * **Timing.** Every child says `ready` once it has opened the topic,
//!   then waits at its start gate (stdin) until all are ready; the
//!   consumers are let go first, then the producers. A consumer reads the
//!   monotonic clock (the same in every process) at its first message and
//!   whenever it finds its partition empty or meets a marker after taking
//!   messages, which is at most one look after its last message (no clock
//!   read per message). Throughput = messages ÷ (latest consumer's last −
//!   earliest consumer's first).

use crate::charts::Chart;
use crate::peer::Fault;
use crate::policy::Policy;
use crate::stats::{self, Spread};
use std::fmt::Write as _;
use std::time::Duration;

/// The end marker's stamp (no producer's message has it).
pub const MARKER: u64 = u64::MAX;
/// Bits of a stamp that hold the sequence number; the producer is above.
const SEQ_BITS: u32 = 40;

/// Most producers (and consumers) of a case.
pub const MAX_PROCS: u32 = 64;

/// N producers × M consumers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Shape {
    /// Producer processes.
    pub producers: u32,
    /// Consumer processes.
    pub consumers: u32,
}

impl Shape {
    /// One of each: the reference of the ratios.
    pub const ONE: Shape = Shape { producers: 1, consumers: 1 };
}

impl std::fmt::Display for Shape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}x{}", self.producers, self.consumers)
    }
}

/// Parses `2x1` (producers × consumers).
pub fn parse_shape(s: &str) -> Result<Shape, String> {
    let (p, c) = s
        .trim()
        .split_once(['x', 'X', '×'])
        .ok_or_else(|| format!("{s:?} is not producers x consumers (e.g. 2x1)"))?;
    let n = |t: &str| match t.trim().parse::<u32>() {
        Ok(n) if (1..=MAX_PROCS).contains(&n) => Ok(n),
        _ => Err(format!("{s:?}: {t:?} is not a process count from 1 to {MAX_PROCS}")),
    };
    Ok(Shape { producers: n(p)?, consumers: n(c)? })
}

/// One configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Case {
    /// Producers and consumers.
    pub shape: Shape,
    /// Partitions of the topic.
    pub partitions: u32,
    /// The topic's wait policy.
    pub policy: Policy,
    /// Message bytes.
    pub size: usize,
}

impl std::fmt::Display for Case {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "procs {} copy/{} {} x{} partitions",
            self.shape,
            self.policy.name(),
            stats::bytes(self.size as u64),
            self.partitions
        )
    }
}

/// One measurement (of an N × M run, or of a one-process run: `C` is
/// [`threads::Case`](super::threads::Case) there).
#[derive(Debug, Clone, Copy)]
pub struct Sample<C = Case> {
    /// What was measured.
    pub case: C,
    /// Repetition (0-based).
    pub rep: usize,
    /// Messages delivered (all of them, checked).
    pub count: u64,
    /// Their time: from the first message delivered to the last, or from
    /// the end of the warm-up to the last.
    pub elapsed: Duration,
}

impl<C> Sample<C> {
    /// Messages per second.
    pub fn rate(&self) -> f64 {
        self.count as f64 / self.elapsed.as_secs_f64().max(1e-12)
    }
}

/// What the user asked for.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Producers × consumers.
    pub shapes: Vec<Shape>,
    /// Partition counts.
    pub partitions: Vec<u32>,
    /// Wait policies.
    pub policies: Vec<Policy>,
    /// Message bytes.
    pub size: usize,
    /// Messages per run, over all producers.
    pub messages: u64,
    /// Descriptors per partition.
    pub capacity: u32,
    /// Longest wait for one message.
    pub stall: Duration,
    /// The CPUs process `k` (producers first, then consumers) is pinned to
    /// in turn (`k % len`); `None`: not pinned.
    pub cpus: Option<Vec<usize>>,
}

impl Settings {
    /// Every case, in the order one repetition runs them.
    pub fn cases(&self) -> Vec<Case> {
        let mut out = Vec::new();
        for &policy in &self.policies {
            for &partitions in &self.partitions {
                for &shape in &self.shapes {
                    out.push(Case { shape, partitions, policy, size: self.size });
                }
            }
        }
        out
    }

    /// The CPU of process `k` (producers `0..N`, consumers `N..N + M`).
    pub fn cpu(&self, k: usize) -> Option<usize> {
        self.cpus.as_ref().filter(|c| !c.is_empty()).map(|c| c[k % c.len()])
    }

    fn describe_cpus(&self) -> String {
        match &self.cpus {
            Some(c) if !c.is_empty() => format!(
                "process k (producers first, then consumers) pinned to CPU k mod {} of {c:?}",
                c.len()
            ),
            _ => "not pinned".to_owned(),
        }
    }

    /// The report's section.
    pub fn render(&self, samples: &[Sample]) -> String {
        let mut out = String::new();
        if self.shapes.is_empty() || samples.is_empty() {
            return out;
        }
        let _ = writeln!(
            out,
            "### Scaling: processes ({}, copy path; {} messages per run)\n",
            stats::bytes(self.size as u64),
            self.messages
        );
        let cpus = self.cpus.as_ref().map_or(0, Vec::len);
        let _ = writeln!(
            out,
            "N producer and M consumer processes on one topic of P partitions. Each producer sends its \
             share, spread over every partition; consumers own partitions when P ≥ M (consumer j takes \
             j, j + M, ...) and compete for them when P < M (consumer j takes partition j mod P). \
             Every consumer checks every message's stamps, partition and per-producer order; the \
             counts and checksums of the consumers together must equal those of the messages sent. \
             msgs/s = all messages ÷ (last delivered − first delivered), all processes started \
             first. Placement: {}.{} Medians over the repetitions, ranges in brackets; × 1×1 is the \
             ratio to the 1×1 case of the same partitions and wait policy, per repetition.\n",
            self.describe_cpus(),
            if cpus > 0 && self.shapes.iter().any(|s| (s.producers + s.consumers) as usize > cpus) {
                format!(
                    " With more processes than the {cpus} CPUs, processes share CPUs: spinning ones take \
                     turns at the scheduler's pace (measured as is; hybrid sleeps instead)."
                )
            } else {
                String::new()
            }
        );
        let _ = writeln!(out, "| producers × consumers | partitions | wait | msgs/s | (min – max) | × 1×1 |");
        let _ = writeln!(out, "| --- | ---: | --- | ---: | --- | ---: |");
        for case in self.cases() {
            let s = spread(samples, case);
            let one = Case { shape: Shape::ONE, ..case };
            let ratio = if self.shapes.contains(&Shape::ONE) { paired(samples, case, one) } else { None };
            let _ = writeln!(
                out,
                "| {}×{} | {} | {} | {} | {} | {} |",
                case.shape.producers,
                case.shape.consumers,
                case.partitions,
                case.policy.name(),
                s.map_or_else(|| "–".to_owned(), |s| stats::si(s.median)),
                s.map_or_else(
                    || "–".to_owned(),
                    |s| format!("({} – {})", stats::si(s.min), stats::si(s.max))
                ),
                ratio.map_or_else(|| "–".to_owned(), |r| format!("{:.2}", r.median)),
            );
        }
        out.push('\n');
        out
    }

    /// A bar chart: one row per shape, one bar per partitions and policy.
    pub fn chart(&self, samples: &[Sample]) -> Option<Chart> {
        if samples.is_empty() {
            return None;
        }
        let mut series = Vec::new();
        for &policy in &self.policies {
            for &partitions in &self.partitions {
                let values = self
                    .shapes
                    .iter()
                    .map(|&shape| {
                        let case = Case { shape, partitions, policy, size: self.size };
                        spread(samples, case).map_or(0.0, |s| s.median)
                    })
                    .collect();
                let p = if partitions == 1 { "partition" } else { "partitions" };
                series.push((format!("{partitions} {p}, {}", policy.name()), values));
            }
        }
        Some(Chart::Bars {
            file: "throughput-vs-processes",
            title: format!(
                "Topic throughput, N producers × M consumers ({}, copy path)",
                stats::bytes(self.size as u64)
            ),
            value_label: "msgs/s".into(),
            categories: self.shapes.iter().map(|s| format!("{}×{}", s.producers, s.consumers)).collect(),
            series,
        })
    }
}

fn spread(samples: &[Sample], case: Case) -> Option<Spread> {
    let v: Vec<f64> = samples.iter().filter(|s| s.case == case).map(Sample::rate).collect();
    Spread::of(&v)
}

/// `rate(case) ÷ rate(reference)` within each repetition, over the
/// repetitions.
fn paired(samples: &[Sample], case: Case, reference: Case) -> Option<Spread> {
    let v: Vec<f64> = samples
        .iter()
        .filter(|s| s.case == case)
        .filter_map(|s| {
            let r = samples.iter().find(|r| r.case == reference && r.rep == s.rep)?;
            Some(s.rate() / r.rate())
        })
        .collect();
    Spread::of(&v)
}

/// Producer `i`'s share of `total` messages among `n` producers.
pub fn share(total: u64, n: u32, i: u32) -> u64 {
    total / u64::from(n) + u64::from(u64::from(i) < total % u64::from(n))
}

/// The stamp of producer `i`'s message `seq`.
pub fn stamp_of(producer: u32, seq: u64) -> u64 {
    (u64::from(producer) << SEQ_BITS) | seq
}

/// A stamp's producer and sequence number.
pub fn split_stamp(stamp: u64) -> (u32, u64) {
    ((stamp >> SEQ_BITS) as u32, stamp & ((1 << SEQ_BITS) - 1))
}

/// Largest number of messages in a run (sequence numbers fit their bits).
pub const MAX_MESSAGES: u64 = 1 << SEQ_BITS;

/// The partition producer `i` sends its message `seq` to.
pub fn partition_of(producer: u32, seq: u64, partitions: u32) -> u32 {
    ((seq + u64::from(producer)) % u64::from(partitions)) as u32
}

/// The partitions consumer `j` of `m` reads, of `p`: its own ones (`j, j +
/// m, ...`) when `p ≥ m`, else the one it shares, `j % p`.
pub fn assignment(j: u32, m: u32, p: u32) -> Vec<u32> {
    if p >= m {
        (j..p).step_by(m as usize).collect()
    } else {
        vec![j % p]
    }
}

/// How many consumers of `m` read partition `partition` of `p` (the end
/// markers it gets).
pub fn readers(partition: u32, m: u32, p: u32) -> u32 {
    (0..m).filter(|&j| assignment(j, m, p).contains(&partition)).count() as u32
}

/// A stamp's term in the order-independent checksum (SplitMix64's
/// finalizer: two stamps that differ give unrelated terms).
pub fn mix(stamp: u64) -> u64 {
    let mut z = stamp.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The count and checksum of every message `n` producers send.
pub fn expected(total: u64, n: u32) -> (u64, u64) {
    let mut sum = 0u64;
    for i in 0..n {
        for seq in 0..share(total, n, i) {
            sum = sum.wrapping_add(mix(stamp_of(i, seq)));
        }
    }
    (total, sum)
}

/// What a consumer keeps of the messages it took: their count, their
/// checksum, the clock at its first and (about) its last, and per lane
/// (producer, or producer and partition) the next sequence number it may
/// see, so that a message duplicated or reordered in its lane fails.
pub struct Tally {
    shares: Vec<u64>,
    lanes: usize,
    next: Vec<u64>,
    count: u64,
    sum: u64,
    first: u64,
    last: u64,
    /// Messages taken since the clock was last read.
    dirty: bool,
}

impl Tally {
    /// For a run of `messages` from `producers` producers, each over
    /// `lanes` lanes.
    pub fn new(messages: u64, producers: u32, lanes: usize) -> Tally {
        Tally {
            shares: (0..producers).map(|i| share(messages, producers, i)).collect(),
            lanes,
            next: vec![0; producers as usize * lanes],
            count: 0,
            sum: 0,
            first: 0,
            last: 0,
            dirty: false,
        }
    }

    /// Messages taken so far.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Checks and counts the message stamped `stamp` that came through
    /// `lane`; the error says what is wrong with it.
    pub fn take(&mut self, stamp: u64, lane: usize) -> Result<(), String> {
        let (i, seq) = split_stamp(stamp);
        let bad = |why: String| format!("message {seq} of producer {i}: {why}");
        if i as usize >= self.shares.len() || seq >= self.shares[i as usize] {
            return Err(bad("no such message was sent".into()));
        }
        let slot = &mut self.next[i as usize * self.lanes + lane];
        if seq < *slot {
            return Err(bad(format!("after its message {} (duplicated or reordered)", *slot - 1)));
        }
        *slot = seq + 1;
        self.count += 1;
        self.sum = self.sum.wrapping_add(mix(stamp));
        if self.count == 1 {
            self.first = now_ns();
        }
        self.dirty = true;
        Ok(())
    }

    /// The source was found empty, or ended: the last message taken was at
    /// most one look ago, so the clock now is its time.
    pub fn idle(&mut self) {
        if self.dirty {
            self.last = now_ns();
            self.dirty = false;
        }
    }

    /// The consumer's `done` line: `done count checksum first_ns last_ns`.
    pub fn done_line(&mut self) -> String {
        self.idle();
        format!("done {} {} {} {}", self.count, self.sum, self.first, self.last)
    }
}

/// The monotonic clock, the same in every process, in nanoseconds.
fn now_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// A producer's injected fault (`TACHYON_BENCH_FAULT`, for the tests): it
/// dies, stalls or skips a message at that `seq`, or, `dup:N`, sends
/// message N twice.
pub struct ProducerFault {
    fault: Fault,
    dup: Option<u64>,
}

impl ProducerFault {
    /// The fault the environment asks for.
    pub fn from_env() -> ProducerFault {
        let dup = std::env::var(crate::peer::FAULT_ENV)
            .ok()
            .and_then(|v| v.strip_prefix("dup:").and_then(|n| n.parse().ok()));
        ProducerFault { fault: Fault::from_env(), dup }
    }

    /// How many times to send message `seq` (dies or stalls there if asked).
    #[inline]
    pub fn copies(&self, seq: u64) -> usize {
        if self.fault.at(seq) {
            0 // a lost message: the totals must not match
        } else {
            1 + usize::from(self.dup == Some(seq))
        }
    }
}

/// A message's stamp, once its length and its two stamps agree.
pub fn read_stamp(msg: &[u8], size: usize) -> Result<u64, String> {
    if msg.len() != size {
        return Err(format!("a message of {} bytes, not {size}", msg.len()));
    }
    let head = u64::from_le_bytes(msg[..8].try_into().unwrap_or_default());
    crate::payload::check(msg, head).map(|()| head)
}

/// CSV lines (the scaling group's columns) of the samples.
pub fn csv_lines(samples: &[Sample], out: &mut String) {
    for s in samples {
        let c = s.case;
        let _ = writeln!(
            out,
            "{c},throughput,copy,{},{},{},false,{},{},{},{:.1},{:.4},,,,,,,,{},{}",
            c.policy.name(),
            c.size,
            c.partitions,
            s.rep,
            s.count,
            s.elapsed.as_nanos(),
            s.rate(),
            (s.count * c.size as u64) as f64 / s.elapsed.as_nanos().max(1) as f64,
            c.shape.producers,
            c.shape.consumers,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_parse() {
        assert_eq!(parse_shape("2x1"), Ok(Shape { producers: 2, consumers: 1 }));
        assert_eq!(parse_shape(" 1X2 "), Ok(Shape { producers: 1, consumers: 2 }));
        assert!(parse_shape("2").is_err());
        assert!(parse_shape("0x1").is_err());
        assert!(parse_shape("1x999").is_err());
    }

    #[test]
    fn every_partition_is_read_and_owned_ones_by_one_consumer() {
        for m in 1..=4 {
            for p in [1, 2, 4, 8] {
                let mut seen = vec![0u32; p as usize];
                for j in 0..m {
                    let a = assignment(j, m, p);
                    assert!(!a.is_empty(), "consumer {j} of {m}, {p} partitions");
                    for q in a {
                        seen[q as usize] += 1;
                    }
                }
                for (q, &n) in seen.iter().enumerate() {
                    assert!(n >= 1, "partition {q} of {p} unread by {m} consumers");
                    if p >= m {
                        assert_eq!(n, 1, "partition {q} of {p}, {m} consumers");
                    }
                    assert_eq!(readers(q as u32, m, p), n);
                }
            }
        }
        assert_eq!(assignment(1, 2, 4), vec![1, 3]);
        assert_eq!(assignment(1, 2, 1), vec![0]);
    }

    #[test]
    fn shares_add_up_and_stamps_round_trip() {
        for n in 1..=5 {
            assert_eq!((0..n).map(|i| share(1001, n, i)).sum::<u64>(), 1001);
        }
        assert_eq!(split_stamp(stamp_of(3, 12345)), (3, 12345));
        assert_ne!(split_stamp(MARKER).0, 0);
        // Every producer spreads over every partition.
        for i in 0..2 {
            let mut hit = [false; 4];
            for s in 0..4 {
                hit[partition_of(i, s, 4) as usize] = true;
            }
            assert!(hit.iter().all(|&h| h));
        }
    }

    #[test]
    fn the_checksum_sees_a_loss_and_a_duplicate() {
        let (n, sum) = expected(100, 2);
        assert_eq!(n, 100);
        let sent: Vec<u64> = (0..2).flat_map(|i| (0..50).map(move |s| stamp_of(i, s))).collect();
        let total = |v: &[u64]| v.iter().fold(0u64, |a, &s| a.wrapping_add(mix(s)));
        assert_eq!(total(&sent), sum);
        let mut dup = sent.clone();
        dup[7] = dup[8]; // one lost, another twice: same count
        assert_ne!(total(&dup), sum);
    }
}
