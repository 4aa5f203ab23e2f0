//! Round-trip latency: an `hdrhistogram` per run, summarised as
//! percentiles in nanoseconds.

use hdrhistogram::Histogram;
use std::time::{Duration, Instant};

/// A histogram of nanoseconds from 1 ns to an hour, 3 significant digits.
pub fn histogram() -> Result<Histogram<u64>, String> {
    Histogram::new_with_bounds(1, 3_600_000_000_000, 3).map_err(|e| format!("histogram: {e}"))
}

/// Records one round trip.
#[inline]
pub fn record(h: &mut Histogram<u64>, d: Duration) {
    h.saturating_record(d.as_nanos().clamp(1, u128::from(u64::MAX)) as u64);
}

/// Times `total` round trips of `one(seq)` (`what` names one in errors)
/// and records the last `total - warmup`: how long those took in all, and
/// their percentiles.
pub fn timed(
    total: u64,
    warmup: u64,
    what: &str,
    mut one: impl FnMut(u64) -> Result<(), String>,
) -> Result<(Duration, Percentiles), String> {
    let mut hist = histogram()?;
    let mut start = Instant::now();
    for seq in 0..total {
        if seq == warmup {
            start = Instant::now();
        }
        let t0 = Instant::now();
        one(seq).map_err(|e| format!("{what} {seq}: {e}"))?;
        if seq >= warmup {
            record(&mut hist, t0.elapsed());
        }
    }
    Ok((start.elapsed(), Percentiles::of(&hist)))
}

/// What the report gives of one run's histogram, in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Percentiles {
    /// Round trips recorded.
    pub count: u64,
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// Largest.
    pub max: f64,
    /// Mean.
    pub mean: f64,
}

impl Percentiles {
    /// Summarises `h`.
    pub fn of(h: &Histogram<u64>) -> Percentiles {
        Percentiles {
            count: h.len(),
            p50: h.value_at_quantile(0.50) as f64,
            p99: h.value_at_quantile(0.99) as f64,
            p999: h.value_at_quantile(0.999) as f64,
            max: h.max() as f64,
            mean: h.mean(),
        }
    }
}

/// Nanoseconds as microseconds with two decimals: `1.23`.
pub fn us(ns: f64) -> String {
    format!("{:.2}", ns / 1000.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_of_a_known_histogram() {
        let mut h = histogram().unwrap();
        for ns in 1..=1000u64 {
            record(&mut h, Duration::from_nanos(ns));
        }
        let p = Percentiles::of(&h);
        assert_eq!(p.count, 1000);
        assert!((p.p50 - 500.0).abs() <= 1.0, "{p:?}");
        assert!((p.p99 - 990.0).abs() <= 1.0, "{p:?}");
        assert!((p.mean - 500.5).abs() < 1.0, "{p:?}");
        assert_eq!(p.max, 1000.0);
        assert_eq!(us(1500.0), "1.50");
    }
}
