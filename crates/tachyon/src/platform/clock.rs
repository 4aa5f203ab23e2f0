//! The clock of an RPC call: its round trip (the statistics), its
//! deadline, a hybrid requester's spin budget.
//!
//! A blocking call reads the clock twice however quick it is: when it
//! starts (the round trip's start, and the deadline counted from it) and
//! when its response is read (the round trip). `std::time::Instant::now`
//! is `clock_gettime(CLOCK_MONOTONIC)`, whose vDSO read of the TSC is
//! ordered (`RDTSCP`, or `LFENCE; RDTSC`): about 30 ns on the virtual
//! machines this is measured on, and it waits for every load before it.
//! On a spinning round trip of 0.4 – 0.5 µs the two reads cost 85 ns
//! (measured: see `docs/benchmark-history.md`, 2026-12-04).
//!
//! [`quanta`] reads the TSC itself where the processor says that it ticks
//! at a constant rate in every power state (CPUID's invariant TSC), scaled
//! to nanoseconds by a calibration against `CLOCK_MONOTONIC` that runs
//! once per process (about a millisecond; at most 200 ms on a busy
//! machine), and falls back to `CLOCK_MONOTONIC` elsewhere: about 12 ns a
//! read, unordered. Deadlines and round trips are all taken by this one
//! clock, so they compare with each other; what they are compared with
//! outside (a caller's `Duration`) is a length, never an instant.

pub(crate) use quanta::Instant;

/// Runs the clock's one calibration now, if it has not run in this
/// process yet, so that no call pays it: an RPC end does when it starts.
pub(crate) fn calibrate() {
    let _ = Instant::now();
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// The clock agrees with the OS's monotonic clock on what a sleep
    /// took, by intervals nested in each other (so that a preemption
    /// between two reads only widens the outer one, whichever clock it
    /// is): an interval of this clock measured around one of the OS
    /// clock's is no shorter, and one measured inside it no longer (give
    /// or take a millisecond, far more than the calibration's error; a
    /// clock scaled wrongly would be off by tens), and it never runs
    /// backwards.
    #[test]
    fn the_clock_measures_what_the_monotonic_clock_measures() {
        calibrate();
        let slack = Duration::from_millis(1);
        let nap = || std::thread::sleep(Duration::from_millis(30));
        let q = Instant::now();
        let s = std::time::Instant::now();
        nap();
        let inner = s.elapsed();
        let outer = q.elapsed();
        assert!(outer + slack >= inner, "quanta {outer:?} around std {inner:?}");
        let s = std::time::Instant::now();
        let q = Instant::now();
        nap();
        let inner = q.elapsed();
        let outer = s.elapsed();
        assert!(inner <= outer + slack, "quanta {inner:?} inside std {outer:?}");
        let mut last = Instant::now();
        for _ in 0..100_000 {
            let now = Instant::now();
            assert!(now >= last, "{now:?} before {last:?}");
            last = now;
        }
    }
}
