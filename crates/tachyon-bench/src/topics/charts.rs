//! The topics group's charts: latency percentiles and throughput bars.

use super::case::{Case, Sample, Settings, Test};
use super::results::Results;
use crate::charts::Chart;
use crate::latency::Percentiles;
use crate::stats;

/// A chart row's label: `topic copy/spin`.
fn label(case: &Case) -> String {
    match case.policy {
        Some(p) => format!("{}/{}", case.via.short(), p.name()),
        None => case.via.short().to_owned(),
    }
}

/// Latency percentiles per transport, and throughput bars per message size.
pub(super) fn charts(settings: &Settings, samples: &[Sample]) -> Vec<Chart> {
    let res = Results::new(samples);
    let cases = settings.cases();
    let mut out = Vec::new();
    let lat: Vec<Case> = cases.iter().copied().filter(|c| c.test == Test::Latency).collect();
    if !lat.is_empty() {
        let pct = |f: fn(&Percentiles) -> f64| -> Vec<f64> {
            lat.iter()
                .map(|&c| res.spread(c, |s| s.rtt.map(|r| f(&r) / 1000.0)).map_or(0.0, |s| s.median))
                .collect()
        };
        out.push(Chart::Bars {
            file: "latency",
            title: format!(
                "Round trip, {} messages, between two processes (median of {} runs)",
                stats::bytes(settings.latency_size as u64),
                settings.common.reps
            ),
            value_label: "microseconds (log scale; shorter is better)".into(),
            categories: lat.iter().map(label).collect(),
            series: vec![
                ("p50".into(), pct(|r| r.p50)),
                ("p99".into(), pct(|r| r.p99)),
                ("p99.9".into(), pct(|r| r.p999)),
            ],
        });
    }
    let thr: Vec<Case> = cases
        .iter()
        .copied()
        .filter(|c| c.test == Test::Throughput && Some(&c.size) == settings.throughput_sizes.first())
        .collect();
    if !thr.is_empty() {
        let series = settings
            .throughput_sizes
            .iter()
            .map(|&size| {
                let v = thr
                    .iter()
                    .map(|&c| res.spread(Case { size, ..c }, |s| Some(s.rate())).map_or(0.0, |s| s.median))
                    .collect();
                (stats::bytes(size as u64), v)
            })
            .collect();
        out.push(Chart::Bars {
            file: "throughput",
            title: format!(
                "One-way throughput between two processes (median of {} runs)",
                settings.common.reps
            ),
            value_label: "messages per second (log scale; longer is better)".into(),
            categories: thr.iter().map(label).collect(),
            series,
        });
    }
    out
}
