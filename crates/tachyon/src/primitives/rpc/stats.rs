//! Counters and round-trip latency of one RPC end.

use hdrhistogram::Histogram;
use std::sync::atomic::{
    AtomicU64,
    Ordering::{Acquire, Relaxed, Release},
};
use crate::sync::deferred::Deferred;
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
    /// A round trip recorded by the holder of the reader role and not yet
    /// in `latency`; see [`record_as_reader`](Self::record_as_reader).
    late: Deferred,
}

fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("valid histogram bounds")
}

impl Stats {
    pub(crate) fn new() -> Self {
        Stats {
            c: Counters::default(),
            base: Counters::default(),
            latency: Mutex::new(new_histogram()),
            late: Deferred::new(),
        }
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

    #[cfg(test)]
    pub(crate) fn record(&self, rtt: Duration) {
        self.record_ns(nanos(rtt));
    }

    fn record_ns(&self, ns: u64) {
        let mut h = self.latency.lock().unwrap_or_else(|p| p.into_inner());
        let _ = h.record(ns);
    }

    /// Records a round trip, by the holder of the reader role (every
    /// response is read under it): at the end of a call, where the caller
    /// waits for it, only a load and a plain store; the round trip goes
    /// into the histogram at the next [`settle`](Self::settle) (the next
    /// caller in the lane settles while it waits for its response), the
    /// next snapshot, or the next call of this. The histogram's lock and
    /// record, some 30 – 50 ns, so leave the round trip's critical path.
    ///
    /// Each round trip is counted exactly once (see [`Deferred`]: the
    /// role's lock orders the puts), and a snapshot counts every call that
    /// returned before it: a round trip is taken out of `late` only under
    /// the histogram's lock and recorded before that lock is given back.
    pub(crate) fn record_as_reader(&self, rtt: Duration) {
        // Empty `late` first (under the lock), so that `put` finds it empty
        // (only role holders put, and this one holds the role).
        self.settle();
        self.late.put(nanos(rtt), |old| self.record_ns(old));
    }

    /// Moves a round trip left by [`record_as_reader`](Self::record_as_reader)
    /// into the histogram, if one is there.
    pub(crate) fn settle(&self) {
        if !self.late.is_empty() {
            let mut h = self.latency.lock().unwrap_or_else(|p| p.into_inner());
            Self::settle_into(&self.late, &mut h);
        }
    }

    /// [`settle`](Self::settle) with the histogram's lock held.
    fn settle_into(late: &Deferred, h: &mut Histogram<u64>) {
        if let Some(ns) = late.take() {
            let _ = h.record(ns);
        }
    }

    pub(crate) fn snapshot(&self) -> RpcStats {
        let mut s = RpcStats::default();
        self.c.snapshot(&self.base, &mut s);
        let mut h = self.latency.lock().unwrap_or_else(|p| p.into_inner());
        Self::settle_into(&self.late, &mut h);
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
        let mut h = self.latency.lock().unwrap_or_else(|p| p.into_inner());
        self.late.take();
        h.reset();
    }
}

/// A round trip in the histogram's unit and range (1 ns to 1 hour; never
/// 0, which `Stats::late` reads as none).
fn nanos(rtt: Duration) -> u64 {
    (rtt.as_nanos() as u64).clamp(1, 3_600_000_000_000)
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

    #[test]
    fn round_trips_recorded_by_the_reader_count_once_whoever_settles_them() {
        let s = Stats::new();
        let count = |s: &Stats| s.snapshot().latency.count;
        // Left for later, then taken by a snapshot.
        s.record_as_reader(Duration::from_micros(2));
        assert_eq!(count(&s), 1);
        assert_eq!(count(&s), 1, "a snapshot took it once, and only once");
        // Two in a row: the second takes the first in.
        s.record_as_reader(Duration::from_micros(3));
        s.record_as_reader(Duration::from_micros(4));
        // Settled by the next caller's wait, then a snapshot finds the rest.
        s.settle();
        s.settle();
        let l = s.snapshot().latency;
        assert_eq!(l.count, 3);
        assert!(l.max >= Duration::from_micros(4) && l.max < Duration::from_nanos(4_010), "{l:?}");
        // One left when the statistics are reset is reset with them.
        s.record_as_reader(Duration::from_micros(5));
        s.reset();
        assert_eq!(count(&s), 0);
        // A zero round trip still counts (stored as 1 ns).
        s.record_as_reader(Duration::ZERO);
        assert_eq!(count(&s), 1);
    }

    #[test]
    fn a_snapshot_racing_the_reader_loses_and_doubles_no_round_trip() {
        let s = std::sync::Arc::new(Stats::new());
        let reader = {
            let s = std::sync::Arc::clone(&s);
            std::thread::spawn(move || {
                for i in 1..=3_000u64 {
                    s.record_as_reader(Duration::from_nanos(i));
                    if i % 3 == 0 {
                        s.settle();
                    }
                }
            })
        };
        let mut seen = 0;
        while !reader.is_finished() {
            let c = s.snapshot().latency.count;
            assert!(c >= seen, "the count went back: {seen} -> {c}");
            seen = c;
            std::thread::yield_now();
        }
        reader.join().unwrap();
        assert_eq!(s.snapshot().latency.count, 3_000);
    }
}
