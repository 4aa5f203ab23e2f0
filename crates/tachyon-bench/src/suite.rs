//! What every group of the benchmark provides, and the loop that runs a
//! group: one unrecorded warm-up run, then the repetitions, each running
//! every configuration of the group once (interleaved, so a noisy moment
//! of the host hits all configurations alike).

use std::fmt::Display;
use std::time::{Duration, Instant};

use crate::pin::Placement;

/// Settings every group shares.
#[derive(Debug, Clone, Copy)]
pub struct Common {
    /// Repetitions of every configuration.
    pub reps: usize,
    /// Longest a transport may make no progress before the run fails.
    pub stall: Duration,
    /// Where this process and its peer run.
    pub placement: Placement,
}

/// A group of measurements.
pub trait Group {
    /// One configuration.
    type Case: Copy + Display;
    /// One measurement of a configuration.
    type Sample;

    /// The group's name (`--group`, the CSV file's name).
    fn name(&self) -> &'static str;
    /// Every configuration, in the order one repetition runs them.
    fn cases(&self) -> Vec<Self::Case>;
    /// The configuration run once, unrecorded, before the repetitions.
    fn warmup_case(&self) -> Option<Self::Case> {
        self.cases().first().copied()
    }
    /// Measures `case` once.
    fn run(&self, case: Self::Case, rep: usize) -> Result<Self::Sample, String>;
    /// The progress line's figures for a sample.
    fn progress(&self, sample: &Self::Sample) -> String;
    /// The group's section of the markdown report.
    fn render(&self, samples: &[Self::Sample]) -> String;
    /// Every sample as CSV, with a header line.
    fn csv(&self, samples: &[Self::Sample]) -> String;
    /// The group's charts.
    fn charts(&self, _samples: &[Self::Sample]) -> Vec<crate::charts::Chart> {
        Vec::new()
    }
}

/// Counts runs across groups for the progress bar.
pub struct Progress {
    /// Runs done.
    pub done: usize,
    /// Runs in all.
    pub total: usize,
    /// When the suite started.
    pub started: Instant,
}

impl Progress {
    /// A progress bar with the estimated time left: `[#####-----]  12/120
    /// 10 %  1m05s left`.
    pub fn bar(&self) -> String {
        const WIDTH: usize = 24;
        let total = self.total.max(1);
        let filled = (self.done * WIDTH / total).min(WIDTH);
        let elapsed = self.started.elapsed().as_secs_f64();
        let left = if self.done == 0 {
            "?".to_owned()
        } else {
            let secs = (elapsed / self.done as f64 * (total - self.done.min(total)) as f64).round() as u64;
            format!("{}m{:02}s", secs / 60, secs % 60)
        };
        format!(
            "[{}{}] {:>3}/{} {:>3} % {:>6} left",
            "#".repeat(filled),
            "-".repeat(WIDTH - filled),
            self.done,
            self.total,
            self.done * 100 / total,
            left
        )
    }
}

/// Runs a group: a warm-up run, then `reps` repetitions of every case.
pub fn measure<G: Group>(g: &G, reps: usize, progress: &mut Progress) -> Result<Vec<G::Sample>, String> {
    let cases = g.cases();
    // One unrecorded run first: a vCPU that has been idle for a while runs
    // slowly until the host gives it a core again.
    if let Some(case) = g.warmup_case() {
        eprintln!("{} {} warm-up {case}", progress.bar(), g.name());
        g.run(case, 0).map_err(|e| format!("{case}, warm-up run: {e}"))?;
    }
    let mut samples = Vec::with_capacity(cases.len() * reps);
    for rep in 0..reps {
        for &case in &cases {
            let sample = g.run(case, rep).map_err(|e| format!("{case}, repetition {}: {e}", rep + 1))?;
            progress.done += 1;
            eprintln!(
                "{} {} rep {} {:<44} {}",
                progress.bar(),
                g.name(),
                rep + 1,
                case.to_string(),
                g.progress(&sample)
            );
            samples.push(sample);
        }
    }
    Ok(samples)
}
