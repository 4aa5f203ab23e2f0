//! How long a cache line takes to cross between the benchmark's two CPUs
//! now: a probe taken before and after each run of the topics and rpc
//! groups, and what the probes say of a group's runs. A
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

/// How many times a run whose probes say the machine was slow is run
/// again (the last run counts whatever its probes say).
pub const RETRIES: u32 = 2;

/// A run's result with what its probes said: the slower of the probes
/// taken just before and just after it (`None` unpinned or when a probe
/// gave up), and how many earlier runs were discarded as slow.
pub struct Probed<S> {
    /// What the run measured.
    pub sample: S,
    /// The slower of its two probes, mean ns per round trip.
    pub probe: Option<f64>,
    /// Runs discarded before it because their probes were slow.
    pub retried: u32,
}

/// Runs `run` between two probes of the cache-line round trip to CPU
/// `other`; again, up to [`RETRIES`] times, while the probes say the host
/// had placed the two vCPUs far apart. What every group with bars does
/// for each of its runs, references included.
pub fn run_probed<S>(
    other: Option<usize>,
    mut run: impl FnMut() -> Result<S, String>,
) -> Result<Probed<S>, String> {
    let mut retried = 0;
    loop {
        let before = line_round_trip(other);
        let sample = run()?;
        let after = line_round_trip(other);
        let probe = before.zip(after).map(|(b, a)| b.max(a));
        if retried == RETRIES || !probe.is_some_and(slow) {
            return Ok(Probed { sample, probe, retried });
        }
        retried += 1;
    }
}

/// A sample taken between two probes (see [`run_probed`]).
pub trait ProbedSample {
    /// Its repetition (0-based), the slower of its probes (ns; `None` if
    /// not probed), and how many runs were discarded before it as slow.
    fn probed(&self) -> (usize, Option<f64>, u32);

    /// Its repetition.
    fn rep(&self) -> usize {
        self.probed().0
    }

    /// The slower of its probes.
    fn probe(&self) -> Option<f64> {
        self.probed().1
    }
}

/// How steady the machine was while a group's runs ran: their probes. A
/// virtual machine's two vCPUs are sometimes placed far apart, for a
/// tenth of a second to seconds at a time, and such a phase does not slow
/// every transport alike, so a ratio with a run of a slow phase in it
/// says little about a quiet machine.
pub struct Steadiness {
    /// The quickest probe of the group (ns), if any was taken.
    pub best: Option<f64>,
}

impl Steadiness {
    /// The steadiness of `samples`.
    pub fn of<'a, S: ProbedSample + 'a>(samples: impl IntoIterator<Item = &'a S>) -> Steadiness {
        let best = samples.into_iter().filter_map(|s| s.probe()).fold(f64::NAN, f64::min);
        Steadiness { best: (best > 0.0).then_some(best) }
    }

    /// Whether `s` ran in a slow phase (unknown: no).
    pub fn slow(&self, s: &impl ProbedSample) -> bool {
        self.best.zip(s.probe()).is_some_and(|(best, p)| p > best * SLOW)
    }

    /// The report's section "How steady the machine was": a row per
    /// repetition. `shorter` names the options that make the group's runs
    /// shorter. Empty if nothing was probed.
    pub fn render<'a, S: ProbedSample + 'a>(&self, samples: &[&'a S], shorter: &str) -> String {
        use std::fmt::Write as _;
        let Some(best) = self.best else { return String::new() };
        let reps = samples.iter().map(|s| s.rep() + 1).max().unwrap_or(0);
        let mut out = String::new();
        let _ = writeln!(out, "### How steady the machine was\n");
        let _ = writeln!(
            out,
            "Before and after each run both processes' CPUs bounce a cache line {ROUND_TRIPS} \
             times (mean round trip, the slower of the two probes). A run is slow when that took \
             more than {SLOW} × the quickest probe of the group ({} µs): on a virtual machine, \
             the host placing the two vCPUs far apart for a while (a tenth of a second to \
             seconds), not the code. Such a phase slows transports unequally (those that move \
             more lines across per message most), so the bars above are judged on the pairs of \
             runs that were both steady. A run found slow is run again, up to {RETRIES} times, \
             and the last run counts. A phase can also begin and end within a run, which the \
             probes do not see: short runs ({shorter}) and more `--reps` make the steady figures \
             cleaner.\n",
            crate::latency::us(best)
        );
        let _ = writeln!(out, "| repetition | runs | run again | probe µs (min – max) | slow runs |");
        let _ = writeln!(out, "| ---: | ---: | ---: | --- | ---: |");
        let mut slow_runs = 0;
        let mut runs = 0;
        for rep in 0..reps {
            let of_rep = || samples.iter().filter(|s| s.rep() == rep);
            let probes: Vec<(f64, bool)> =
                of_rep().filter_map(|s| Some((s.probe()?, self.slow(*s)))).collect();
            let (lo, hi) = probes.iter().fold((f64::MAX, 0.0f64), |(lo, hi), &(p, _)| (lo.min(p), hi.max(p)));
            let slow = probes.iter().filter(|p| p.1).count();
            let again: u32 = of_rep().map(|s| s.probed().2).sum();
            runs += probes.len();
            slow_runs += slow;
            if probes.is_empty() {
                continue;
            }
            let _ = writeln!(
                out,
                "| {} | {} | {again} | {} – {} | {} |",
                rep + 1,
                probes.len(),
                crate::latency::us(lo),
                crate::latency::us(hi),
                if slow > 0 { format!("**{slow}**") } else { "0".to_owned() }
            );
        }
        let _ = writeln!(
            out,
            "\n{slow_runs} of {runs} runs ran while the machine was slow{}\n",
            if slow_runs * 2 > runs { ": run again on a quieter machine." } else { "." }
        );
        out
    }
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
