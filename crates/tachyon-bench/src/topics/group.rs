//! The topics group's place in the suite: its `Group` implementation.

use super::case::{Case, Sample, Settings};
use super::charts::charts;
use super::csv::csv;
use super::report::render;
use super::run::run;
use crate::charts::Chart;
use crate::latency;
use crate::stats;
use crate::suite::Group;

impl Group for Settings {
    type Case = Case;
    type Sample = Sample;

    fn name(&self) -> &'static str {
        "topics"
    }

    fn cases(&self) -> Vec<Case> {
        Settings::cases(self)
    }

    fn warmup_case(&self) -> Option<Case> {
        let cases = self.cases();
        cases.iter().find(|c| c.via.is_topic()).or_else(|| cases.first()).copied()
    }

    fn run(&self, case: Case, rep: usize) -> Result<Sample, String> {
        run(case, self, rep)
    }

    fn progress(&self, s: &Sample) -> String {
        match s.rtt {
            Some(r) => format!(
                "p50 {:>8} µs  p99 {:>8} µs  p99.9 {:>8} µs",
                latency::us(r.p50),
                latency::us(r.p99),
                latency::us(r.p999)
            ),
            None => format!("{:>9} msgs/s {:>6.2} GB/s", stats::si(s.rate()), s.gbps()),
        }
    }

    fn render(&self, samples: &[Sample]) -> String {
        render(self, samples)
    }

    fn csv(&self, samples: &[Sample]) -> String {
        csv(samples)
    }

    fn charts(&self, samples: &[Sample]) -> Vec<Chart> {
        charts(self, samples)
    }
}
