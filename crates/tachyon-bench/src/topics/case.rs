//! What the topics group measures: transports, tests, cases, the settings
//! that choose them and the samples they give.

use crate::latency::Percentiles;
use crate::policy::Policy;
use crate::stats;
use crate::suite::Common;
use clap::ValueEnum;
use std::time::Duration;

/// The pattern of the transports through a topic ([`Via::is_topic`]),
/// written once for the matches that dispatch on them.
macro_rules! topic_via {
    () => {
        Via::Copy
            | Via::CopyRead
            | Via::CopyLight
            | Via::CopyInline
            | Via::CopyInlineLight
            | Via::CopyInlineBatch
            | Via::Loan
            | Via::InPlace
    };
}
pub(super) use topic_via;

/// A way of moving messages between the two processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, ValueEnum)]
pub enum Via {
    /// Reference: the raw SPSC ring of memcpys, spinning (for latency: a
    /// spinning flag and a memcpy each way, the floor).
    RawRing,
    /// Reference: the same ring run by Vyukov's bounded MPMC protocol (a
    /// compare-and-swap per claim per side, no crash attribution): the
    /// floor of any ring that several processes may write.
    MpmcRing,
    /// Reference: the MPMC ring claiming each slot by a compare-and-swap of
    /// its word (then of the cursor), as a ring whose every claim names
    /// its claimant must; no recovery. The floor of tachyon's ring.
    CellClaimRing,
    /// Reference: the cell-claim ring handing each slot over by a
    /// compare-and-swap from the claimed word, as tachyon's ring does.
    CellClaimCasRing,
    /// Reference: the cell-claim ring with CAS hand-overs carrying the
    /// index of a pool chunk that holds the payload, each chunk's state
    /// word moved by four CASes per message, free chunks returned in
    /// batches: the floor of a topic's ownership of chunks.
    ChunkPoolRing,
    /// Reference: the chunk-pool ring with a pool of 128 chunks, each
    /// reused within about a hundred messages, its lines still in the
    /// consumer's cache (as a topic reuses chunks): the floor of a topic's
    /// ownership of chunks with the topic's reuse order.
    ChunkPoolHotRing,
    /// Reference: the MPMC ring's slot words without claims, each side
    /// holding a lease of its end for the whole run: per message a load
    /// and a store of the slot's word, a busy word set and cleared around
    /// it, a look at whether the lease is wanted and one at whether the
    /// other side sleeps (each behind a compiler fence only: the light
    /// halves of asymmetric fences), its position stored to a line of its
    /// own. The floor of a ring whose writer and reader hold leases (not a
    /// design tachyon has).
    LeasedRing,
    /// Reference: the leased ring with a full fence before each look at
    /// whether the other side sleeps, as tachyon's wake-up checks have.
    LeasedFencedRing,
    /// Reference, latency only: one cache line bounced between the two
    /// processes, no payload.
    Flag,
    /// Reference: a Unix domain socket pair.
    Unix,
    /// Reference: pipes.
    Pipe,
    /// Reference: TCP over loopback, `TCP_NODELAY`.
    Tcp,
    /// A topic, `send` / `recv_into`.
    Copy,
    /// [`Via::Copy`] whose receiver then reads its copy as the loan and
    /// in-place receivers read a message where it lies (every byte, a
    /// 64-bit XOR fold): the copy path doing the same work with the bytes
    /// as they do, which the loan path's bar is measured against
    /// (throughput only).
    CopyRead,
    /// [`Via::Copy`] on a topic with light hand-overs
    /// (`TopicConfig::light_handovers`): chunks, `send` claiming its cell
    /// before its copy.
    CopyLight,
    /// A topic with inline slots of the message's size
    /// (`TopicConfig::inline_payload`), `send` / `recv_into`: the copy path
    /// without chunks.
    CopyInline,
    /// [`Via::CopyInline`] on a topic with light hand-overs
    /// (`TopicConfig::light_handovers`).
    CopyInlineLight,
    /// [`Via::CopyInline`] whose consumer's handle has batch reads
    /// (`Topic::with_batch_reads`; throughput only).
    CopyInlineBatch,
    /// A topic, `loan` / `publish` / `receive`.
    Loan,
    /// A topic, `send_with` / `receive_with`: built and read in place, as
    /// with a loan, without a `Loan` or `Message` value.
    InPlace,
    /// `CircularBuffer` `write` / `read` (a pair, one per direction, for
    /// latency).
    Cb,
    /// [`Via::Cb`] through rings with light hand-overs
    /// (`CircularBufferBuilder::light_handovers`).
    CbLight,
    /// [`Via::Cb`] whose reader's handle has batch reads
    /// (`CircularBufferBuilder::batch_reads`; throughput only).
    CbBatch,
    /// `RpcBuffer` request/response (latency only).
    Rpc,
    /// `RpcBuffer` request/response, the handler on the peer's reader
    /// thread (`RpcBuilder::inline_handlers`; latency only).
    RpcInline,
    /// iceoryx2 publish-subscribe (cargo feature `iceoryx2`), polling.
    #[cfg(feature = "iceoryx2")]
    Iceoryx2,
}

impl Via {
    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Via::RawRing => "raw-ring",
            Via::MpmcRing => "mpmc-ring",
            Via::CellClaimRing => "cell-claim-ring",
            Via::CellClaimCasRing => "cell-claim-cas-ring",
            Via::ChunkPoolRing => "chunk-pool-ring",
            Via::ChunkPoolHotRing => "chunk-pool-hot-ring",
            Via::LeasedRing => "leased-ring",
            Via::LeasedFencedRing => "leased-fenced-ring",
            Via::Flag => "flag",
            Via::Unix => "unix",
            Via::Pipe => "pipe",
            Via::Tcp => "tcp",
            Via::Copy => "copy",
            Via::CopyRead => "copy-read",
            Via::CopyLight => "copy-light",
            Via::CopyInline => "copy-inline",
            Via::CopyInlineLight => "copy-inline-light",
            Via::CopyInlineBatch => "copy-inline-batch",
            Via::Loan => "loan",
            Via::InPlace => "in-place",
            Via::Cb => "cb",
            Via::CbLight => "cb-light",
            Via::CbBatch => "cb-batch",
            Via::Rpc => "rpc",
            Via::RpcInline => "rpc-inline",
            #[cfg(feature = "iceoryx2")]
            Via::Iceoryx2 => "iceoryx2",
        }
    }

    /// The label in tables.
    pub fn describe(self) -> &'static str {
        match self {
            Via::RawRing => "raw shared memory: spinning flag + memcpy each way (reference, floor)",
            Via::MpmcRing => "raw MPMC ring (Vyukov): a CAS of the cursor per claim per side (reference)",
            Via::CellClaimRing => {
                "raw MPMC ring claiming the slot's word, as a claim that names its claimant (reference)"
            }
            Via::CellClaimCasRing => "the same, each hand-over a CAS from the claimed word (reference)",
            Via::ChunkPoolRing => {
                "the same carrying pool chunks: 4 CASes of a chunk's state word per message, batched returns \
                 (reference)"
            }
            Via::ChunkPoolHotRing => {
                "the same with a pool of 128 chunks: each reused while the consumer's core still holds its \
                 lines, as a topic reuses them (reference)"
            }
            Via::LeasedRing => {
                "the MPMC ring's slot words, no claims: each side leases its end (reference, not a tachyon design)"
            }
            Via::LeasedFencedRing => "the same, a full fence before each wake-up check (reference)",
            Via::Flag => "bare cache-line ping-pong, no payload (reference)",
            Via::Unix => "Unix socket, write/read (reference)",
            Via::Pipe => "pipe, write/read (reference)",
            Via::Tcp => "TCP loopback, TCP_NODELAY, write/read (reference)",
            Via::Copy => "topic, copy path: `send`/`recv_into`",
            Via::CopyRead => "topic, copy path, the copy then read: `send`/`recv_into` + a fold of the copy",
            Via::CopyLight => "topic, copy path, light hand-overs (`TopicConfig::light_handovers`)",
            Via::CopyInline => "topic with inline slots, copy path: `send`/`recv_into`, no chunks",
            Via::CopyInlineLight => {
                "topic with inline slots, copy path, light hand-overs (`TopicConfig::light_handovers`)"
            }
            Via::CopyInlineBatch => {
                "topic with inline slots, copy path, the consumer's batch reads (`Topic::with_batch_reads`)"
            }
            Via::Loan => "topic, loan path: `loan`+`publish`/`receive`",
            Via::InPlace => "topic, in place: `send_with`/`receive_with`",
            Via::Cb => "CircularBuffer `write`/`read`",
            Via::CbLight => "CircularBuffer with light hand-overs `write`/`read`",
            Via::CbBatch => "CircularBuffer `write`/`read`, the reader's batch reads (`batch_reads`)",
            Via::Rpc => "RpcBuffer `request` (echo handler)",
            Via::RpcInline => "RpcBuffer `request` (echo handler on the reader thread: `inline_handlers`)",
            #[cfg(feature = "iceoryx2")]
            Via::Iceoryx2 => "iceoryx2 0.10 publish-subscribe, loan + copy, polling (comparison)",
        }
    }

    /// The label in tables of `test`.
    pub fn describe_in(self, test: Test) -> &'static str {
        match (self, test) {
            (Via::RawRing, Test::Throughput) => "raw SPSC ring of memcpys, spinning (reference)",
            _ => self.describe(),
        }
    }

    /// A short label for charts.
    pub fn short(self) -> &'static str {
        match self {
            Via::RawRing => "raw shm",
            Via::MpmcRing => "raw MPMC ring",
            Via::CellClaimRing => "cell-claim ring",
            Via::CellClaimCasRing => "cell-claim ring, CAS hand-overs",
            Via::ChunkPoolRing => "chunk-pool ring",
            Via::ChunkPoolHotRing => "chunk-pool ring, hot reuse",
            Via::LeasedRing => "leased ring",
            Via::LeasedFencedRing => "leased ring, fenced wake-up checks",
            Via::Flag => "cache line",
            Via::Unix => "unix socket",
            Via::Pipe => "pipe",
            Via::Tcp => "tcp",
            Via::Copy => "topic copy",
            Via::CopyRead => "topic copy + read",
            Via::CopyLight => "topic copy light",
            Via::CopyInline => "topic copy inline",
            Via::CopyInlineLight => "topic copy inline light",
            Via::CopyInlineBatch => "topic copy inline batch reads",
            Via::Loan => "topic loan",
            Via::InPlace => "topic in place",
            Via::Cb => "CircularBuffer",
            Via::CbLight => "CircularBuffer light",
            Via::CbBatch => "CircularBuffer batch reads",
            Via::Rpc => "RpcBuffer",
            Via::RpcInline => "RpcBuffer inline",
            #[cfg(feature = "iceoryx2")]
            Via::Iceoryx2 => "iceoryx2",
        }
    }

    /// A tachyon transport, run with each wait policy.
    pub fn is_tachyon(self) -> bool {
        self.is_topic() || matches!(self, Via::Cb | Via::CbLight | Via::CbBatch | Via::Rpc | Via::RpcInline)
    }

    /// A transport through a topic (run by `topic_run` and
    /// `topic::serve`).
    pub(super) fn is_topic(self) -> bool {
        matches!(self, topic_via!())
    }

    /// A topic's copy path (`send` / `recv_into`), with or without inline
    /// slots, light hand-overs or batch reads, or a read of the copy.
    pub(crate) fn copies(self) -> bool {
        self.is_topic() && !matches!(self, Via::Loan | Via::InPlace)
    }

    /// A topic's inline slots (`TopicConfig::inline_payload`).
    pub(crate) fn inline(self) -> bool {
        matches!(self, Via::CopyInline | Via::CopyInlineLight | Via::CopyInlineBatch)
    }

    /// The consumer's handle has batch reads.
    pub(crate) fn batch_reads(self) -> bool {
        matches!(self, Via::CopyInlineBatch | Via::CbBatch)
    }

    pub(super) fn is_kernel(self) -> bool {
        matches!(self, Via::Unix | Via::Pipe | Via::Tcp)
    }

    /// Whether it measures `test`.
    pub fn does(self, test: Test) -> bool {
        match test {
            Test::Latency => !matches!(self, Via::CopyRead | Via::CopyInlineBatch | Via::CbBatch),
            Test::Throughput => !matches!(self, Via::Flag | Via::Rpc | Via::RpcInline),
        }
    }
}

/// What is measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, ValueEnum)]
pub enum Test {
    /// Ping-pong round trips.
    Latency,
    /// One-way stream.
    Throughput,
}

impl Test {
    /// `latency`, `throughput`.
    pub fn name(self) -> &'static str {
        match self {
            Test::Latency => "latency",
            Test::Throughput => "throughput",
        }
    }
}

/// One configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Case {
    /// Latency or throughput.
    pub test: Test,
    /// How.
    pub via: Via,
    /// The tachyon transport's wait policy (tachyon transports only).
    pub policy: Option<Policy>,
    /// Message bytes.
    pub size: usize,
    /// Partitions of the topic (throughput; 1 elsewhere).
    pub partitions: u32,
    /// Loan path only: the message is built in place by writing its
    /// sequence stamps only, and the receiver checks the stamps only: what
    /// the loan path costs apart from touching the payload.
    pub stamps_only: bool,
}

impl Case {
    /// A case of one partition that touches its whole payload.
    pub fn new(test: Test, via: Via, policy: Option<Policy>, size: usize) -> Case {
        Case { test, via, policy, size, partitions: 1, stamps_only: false }
    }

    /// The wait column: the policy, `spin` for the raw references,
    /// `kernel` for the kernel's.
    pub fn wait(&self) -> &'static str {
        match self.policy {
            Some(p) => p.name(),
            None if self.via.is_kernel() => "kernel",
            None => "spin",
        }
    }
}

impl std::fmt::Display for Case {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.test.name(), self.via.name())?;
        if let Some(p) = self.policy {
            write!(f, "/{}", p.name())?;
        }
        write!(f, " {}", stats::bytes(self.size as u64))?;
        if self.partitions > 1 {
            write!(f, " x{} partitions", self.partitions)?;
        }
        if self.stamps_only {
            write!(f, " stamps-only")?;
        }
        Ok(())
    }
}

/// What the user asked for.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Timed round trips per latency run.
    pub round_trips: u64,
    /// Timed messages per throughput run.
    pub messages: u64,
    /// Message size of the latency runs.
    pub latency_size: usize,
    /// Message sizes of the throughput runs.
    pub throughput_sizes: Vec<usize>,
    /// Wait policies of the topic runs.
    pub policies: Vec<Policy>,
    /// Transports.
    pub transports: Vec<Via>,
    /// Latency, throughput or both.
    pub tests: Vec<Test>,
    /// Descriptors per partition, and raw-ring and CircularBuffer slots
    /// for throughput.
    pub capacity: u32,
    /// Repetitions, stall timeout, placement.
    pub common: Common,
}

impl Settings {
    /// Timed messages (round trips) and warm-up messages of a run.
    pub fn counts(&self, test: Test) -> (u64, u64) {
        match test {
            Test::Latency => (self.round_trips, 100 + self.round_trips / 10),
            // Two laps of the ring, plus 5 %.
            Test::Throughput => (self.messages, 2 * u64::from(self.capacity) + self.messages / 20),
        }
    }

    /// Every case, in the order one repetition runs them.
    pub fn cases(&self) -> Vec<Case> {
        let mut out = Vec::new();
        for &test in &self.tests {
            let sizes = match test {
                Test::Latency => vec![self.latency_size],
                Test::Throughput => self.throughput_sizes.clone(),
            };
            for size in sizes {
                // The references first, then what they are paired with.
                for &via in self.transports.iter().filter(|v| v.does(test)) {
                    if via.is_tachyon() {
                        for &p in &self.policies {
                            out.push(Case::new(test, via, Some(p), size));
                        }
                    } else {
                        out.push(Case::new(test, via, None, size));
                    }
                }
            }
        }
        out
    }
}

/// One measurement.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    /// What was measured.
    pub case: Case,
    /// Repetition (0-based).
    pub rep: usize,
    /// Timed messages (throughput) or round trips (latency).
    pub count: u64,
    /// Time they took.
    pub elapsed: Duration,
    /// Round trips (latency only).
    pub rtt: Option<Percentiles>,
    /// The slower of the cache-line probes taken just before and just
    /// after the run, mean ns per round trip (see `probe.rs`); `None`
    /// unpinned or when a probe gave up.
    pub probe: Option<f64>,
    /// How many earlier runs of this case and repetition were discarded
    /// because their probes said the machine was unsteady.
    pub retried: u32,
}

/// What one run measured: the time of its timed part, and its round trips
/// (latency only).
pub(super) type Measured = (Duration, Option<Percentiles>);

impl crate::probe::ProbedSample for Sample {
    fn probed(&self) -> (usize, Option<f64>, u32) {
        (self.rep, self.probe, self.retried)
    }
}

impl Sample {
    /// Messages (or round trips) per second.
    pub fn rate(&self) -> f64 {
        self.count as f64 / self.elapsed.as_secs_f64().max(1e-12)
    }

    /// Payload bytes per nanosecond = GB/s.
    pub fn gbps(&self) -> f64 {
        (self.count * self.case.size as u64) as f64 / self.elapsed.as_nanos().max(1) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every transport has a label of its own: a report's rows, and the
    /// scripts that read them, tell them apart by it.
    #[test]
    fn every_transport_has_its_own_label() {
        let mut seen = std::collections::HashSet::new();
        for via in Via::value_variants() {
            assert!(seen.insert(via.describe()), "{via:?} shares its label: {}", via.describe());
        }
    }
}
