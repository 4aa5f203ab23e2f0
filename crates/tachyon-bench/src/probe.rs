//! How long a cache line takes to cross between the benchmark's two CPUs
//! now: a probe taken before and after each run of the topics group. A
//! virtual machine's host sometimes places the two vCPUs far apart, for a
//! tenth of a second to seconds at a time (measured on the AMD EPYC guests
//! this project runs on: a line's round trip between two threads 60 – 95
//! ns, then 430 – 530 ns, and every transport slower with it, unequally),
//! and a run in such a phase says little about a quiet machine.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Timed round trips per probe (about 0.1 ms on a quiet machine).
pub const ROUND_TRIPS: u64 = 1000;
/// The longest one round trip may take before the probe gives up (the
/// other thread was not scheduled: no figure is better than a wrong one).
const LIMIT: Duration = Duration::from_millis(100);
/// The longest a whole probe may take (about 25 times a slow phase's):
/// beyond it the CPUs are busy with other work, which is not what the
/// probe tells, and a benchmark on a loaded machine must not crawl.
const TOTAL: Duration = Duration::from_millis(20);
/// Tells the echo thread to stop.
const STOP: u64 = u64::MAX;

/// A probe more than this many times the quickest one this process has
/// taken says the host had placed the two vCPUs far apart.
pub const SLOW: f64 = 3.0;

/// The quickest probe this process has taken (`f64` bits; 0: none yet).
static QUICKEST: AtomicU64 = AtomicU64::new(0);

/// Whether probe `ns` is slow next to the quickest probe taken so far
/// (which `ns` may be: a first probe is never slow).
pub fn slow(ns: f64) -> bool {
    let mut quickest = f64::from_bits(QUICKEST.load(Ordering::Relaxed));
    if quickest == 0.0 || ns < quickest {
        // Racing probes (there are none: runs are sequential) only lose
        // an update, never store a wrong minimum for long.
        QUICKEST.store(ns.to_bits(), Ordering::Relaxed);
        quickest = ns;
    }
    ns > quickest * SLOW
}

/// A word alone on its cache lines (the adjacent-line prefetcher pairs
/// lines, hence two).
#[repr(align(128))]
struct Line(AtomicU64);

/// Spins until `ready` holds, for at most [`LIMIT`]; false if it did not.
fn spin_until(mut ready: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    let mut turns = 0u32;
    while !ready() {
        turns = turns.wrapping_add(1);
        // A clock read costs as much as many turns.
        if turns % 1024 == 0 && start.elapsed() > LIMIT {
            return false;
        }
        std::hint::spin_loop();
    }
    true
}

/// Mean nanoseconds of a cache-line round trip between the calling thread
/// and a thread pinned to CPU `other`; `None` if there is no other CPU, a
/// round trip took longer than [`LIMIT`] or all of them longer than
/// [`TOTAL`].
pub fn line_round_trip(other: Option<usize>) -> Option<f64> {
    let other = other?;
    let line = Line(AtomicU64::new(0));
    let word = &line.0;
    std::thread::scope(|s| {
        s.spawn(|| {
            if crate::pin::pin_to(other).is_err() {
                word.store(STOP, Ordering::Release);
                return;
            }
            // Answers ping `2 k + 1` with `2 k + 2`.
            let mut ping = 1;
            loop {
                let mut seen = 0;
                if !spin_until(|| {
                    seen = word.load(Ordering::Acquire);
                    seen == ping || seen == STOP
                }) || seen == STOP
                {
                    return;
                }
                word.store(ping + 1, Ordering::Release);
                ping += 2;
            }
        });
        let mut start = Instant::now();
        // The first round trip waits for the thread to start: not timed.
        for k in 0..=ROUND_TRIPS {
            if k == 1 {
                start = Instant::now();
            } else if k % 64 == 0 && start.elapsed() > TOTAL {
                word.store(STOP, Ordering::Release);
                return None;
            }
            word.store(2 * k + 1, Ordering::Release);
            let mut seen = 0;
            if !spin_until(|| {
                seen = word.load(Ordering::Acquire);
                seen != 2 * k + 1
            }) || seen != 2 * k + 2
            {
                word.store(STOP, Ordering::Release);
                return None;
            }
        }
        let ns = start.elapsed().as_nanos() as f64 / ROUND_TRIPS as f64;
        word.store(STOP, Ordering::Release);
        Some(ns)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A probe is slow next to the quickest so far, which it may become
    /// itself (the only test here that feeds `slow`).
    #[test]
    fn a_probe_is_slow_only_next_to_a_quicker_one() {
        let q = 1000.0;
        assert!(!slow(q));
        assert!(!slow(q * 2.9));
        assert!(slow(q * 3.1));
        assert!(!slow(q / 2.0), "the new quickest");
        assert!(!slow(q));
        assert!(slow(q * 1.6), "over 3 × the new quickest");
    }

    /// Two threads (unpinned here: the probe pins the echo thread only)
    /// complete the probe with a positive time; no other CPU, no figure.
    #[test]
    fn a_probe_times_round_trips_or_says_none() {
        assert_eq!(line_round_trip(None), None);
        let cpus = crate::pin::allowed_cpus();
        let [.., _, cpu] = cpus[..] else { return }; // one CPU: the threads would take turns
        let ns = line_round_trip(Some(cpu));
        // A descheduled echo thread gives `None`, never a wrong figure.
        assert!(ns.is_none_or(|ns| ns > 0.0), "{ns:?}");
    }
}
