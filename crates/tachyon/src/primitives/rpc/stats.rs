//! Counters and round-trip latency of one RPC end.

use hdrhistogram::Histogram;
use std::sync::atomic::{
    AtomicU64,
    Ordering::{Acquire, Relaxed, Release},
};
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

// Each counter counts up for the life of the end and is never written
// back: a reset moves the baseline (`Stats::base`) that snapshots subtract,
// so that a counter which only the reader role updates (see
// `Stats::add_as_reader`) has one writer at a time.
macro_rules! counters {
    ($($name:ident),*) => {
        #[derive(Default)]
        pub(crate) struct Counters { $(pub $name: AtomicU64,)* }
        impl Counters {
            fn snapshot(&self, base: &Counters, s: &mut RpcStats) {
                $(
                    // SYNC: Acquire pairs with the Release store of `copy_to`: the reset's
                    // load of the counter happens before the load below, which so reads
                    // that value or a later (larger) one.
                    let b = base.$name.load(Acquire);
                    s.$name = self.$name.load(Relaxed).saturating_sub(b);
                )*
            }
            fn copy_to(&self, base: &Counters) {
                // SYNC: Release, see `snapshot`.
                $(base.$name.store(self.$name.load(Relaxed), Release);)*
            }
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
    /// The counters at the last reset (see `counters!`).
    base: Counters,
    /// Round trips in nanoseconds, 1 ns to 1 hour, 3 significant digits.
    latency: Mutex<Histogram<u64>>,
}

fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("valid histogram bounds")
}

impl Stats {
    pub(crate) fn new() -> Self {
        Stats { c: Counters::default(), base: Counters::default(), latency: Mutex::new(new_histogram()) }
    }

    pub(crate) fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Relaxed);
    }

    /// [`add`](Self::add) for a counter that only the holder of the
    /// reader role updates (under the `reading` lock, whose hand-over
    /// orders one holder's update before the next's): a plain load and
    /// store instead of a locked read-modify-write, several nanoseconds of
    /// every call's round trip. Resets do not write counters (see
    /// `counters!`), so nothing else stores to these.
    pub(crate) fn add_as_reader(counter: &AtomicU64, n: u64) {
        counter.store(counter.load(Relaxed).wrapping_add(n), Relaxed);
    }

    pub(crate) fn record(&self, rtt: Duration) {
        let ns = (rtt.as_nanos() as u64).clamp(1, 3_600_000_000_000);
        let mut h = self.latency.lock().unwrap_or_else(|p| p.into_inner());
        let _ = h.record(ns);
    }

    pub(crate) fn snapshot(&self) -> RpcStats {
        let mut s = RpcStats::default();
        self.c.snapshot(&self.base, &mut s);
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
        self.c.copy_to(&self.base);
        self.latency.lock().unwrap_or_else(|p| p.into_inner()).reset();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reset_moves_the_baseline_and_loses_no_later_count() {
        let s = Stats::new();
        Stats::add(&s.c.requests_sent, 2);
        Stats::add_as_reader(&s.c.packets_received, 5);
        s.record(Duration::from_micros(3));
        s.reset();
        assert_eq!(s.snapshot(), RpcStats::default());
        // Counters go on from where they were; snapshots subtract.
        Stats::add(&s.c.requests_sent, 1);
        Stats::add_as_reader(&s.c.packets_received, 1);
        Stats::add_as_reader(&s.c.bytes_received, 7);
        s.record(Duration::from_micros(9));
        let after = s.snapshot();
        assert_eq!((after.requests_sent, after.packets_received, after.bytes_received), (1, 1, 7));
        assert_eq!(after.latency.count, 1);
        assert_eq!(s.c.requests_sent.load(Relaxed), 3, "the counter itself was never written back");
        s.reset();
        s.reset();
        assert_eq!(s.snapshot(), RpcStats::default());
    }
}
