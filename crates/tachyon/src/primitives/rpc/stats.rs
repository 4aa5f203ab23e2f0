//! Counters and round-trip latency of one RPC end.

use hdrhistogram::Histogram;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::Duration;

/// Counters of one [`RpcBuffer`](super::RpcBuffer) end, as returned by
/// [`RpcBuffer::stats`](super::RpcBuffer::stats).
#[derive(Debug, Clone, Default, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct RpcStats {
    /// Requests this end sent.
    pub requests_sent: u64,
    /// Responses (and error responses) this end received for them.
    pub responses_received: u64,
    /// Requests from the peer that this end handled.
    pub requests_handled: u64,
    /// Responses (and error responses) this end sent.
    pub responses_sent: u64,
    /// One-way notifications sent.
    pub notifications_sent: u64,
    /// One-way notifications received.
    pub notifications_received: u64,
    /// Errors: handler errors and panics here, error responses received.
    pub errors: u64,
    /// Requests of this end that timed out.
    pub timeouts: u64,
    /// Responses that came after their request had given up (timed out or
    /// was cancelled), and were dropped.
    pub discarded_responses: u64,
    /// Packets dropped as invalid (and incomplete messages given up).
    pub corrupt_packets: u64,
    /// Packets written.
    pub packets_sent: u64,
    /// Packets read.
    pub packets_received: u64,
    /// Payload bytes written.
    pub bytes_sent: u64,
    /// Payload bytes read.
    pub bytes_received: u64,
    /// Round trips of this end's requests.
    pub latency: Latency,
}

/// Round-trip latency summary of completed requests.
#[derive(Debug, Clone, Default, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Latency {
    /// Completed requests measured.
    pub count: u64,
    /// Fastest.
    pub min: Duration,
    /// Slowest.
    pub max: Duration,
    /// Mean.
    pub mean: Duration,
    /// Median.
    pub p50: Duration,
    /// 99th percentile.
    pub p99: Duration,
}

macro_rules! counters {
    ($($name:ident),*) => {
        #[derive(Default)]
        pub(crate) struct Counters { $(pub $name: AtomicU64,)* }
        impl Counters {
            fn snapshot(&self, s: &mut RpcStats) { $(s.$name = self.$name.load(Relaxed);)* }
            fn reset(&self) { $(self.$name.store(0, Relaxed);)* }
        }
    };
}

counters!(
    requests_sent,
    responses_received,
    requests_handled,
    responses_sent,
    notifications_sent,
    notifications_received,
    errors,
    timeouts,
    discarded_responses,
    corrupt_packets,
    packets_sent,
    packets_received,
    bytes_sent,
    bytes_received
);

pub(crate) struct Stats {
    pub c: Counters,
    /// Round trips in nanoseconds, 1 ns to 1 hour, 3 significant digits.
    latency: Mutex<Histogram<u64>>,
}

fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("valid histogram bounds")
}

impl Stats {
    pub(crate) fn new() -> Self {
        Stats { c: Counters::default(), latency: Mutex::new(new_histogram()) }
    }

    pub(crate) fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Relaxed);
    }

    pub(crate) fn record(&self, rtt: Duration) {
        let ns = (rtt.as_nanos() as u64).clamp(1, 3_600_000_000_000);
        let mut h = self.latency.lock().unwrap_or_else(|p| p.into_inner());
        let _ = h.record(ns);
    }

    pub(crate) fn snapshot(&self) -> RpcStats {
        let mut s = RpcStats::default();
        self.c.snapshot(&mut s);
        let h = self.latency.lock().unwrap_or_else(|p| p.into_inner());
        if !h.is_empty() {
            s.latency = Latency {
                count: h.len(),
                min: Duration::from_nanos(h.min()),
                max: Duration::from_nanos(h.max()),
                mean: Duration::from_nanos(h.mean() as u64),
                p50: Duration::from_nanos(h.value_at_quantile(0.5)),
                p99: Duration::from_nanos(h.value_at_quantile(0.99)),
            };
        }
        s
    }

    pub(crate) fn reset(&self) {
        self.c.reset();
        self.latency.lock().unwrap_or_else(|p| p.into_inner()).reset();
    }
}
