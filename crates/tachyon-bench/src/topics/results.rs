//! The topics group's samples looked up by case and repetition: spreads
//! and paired ratios.

use super::case::{Case, Sample};
use crate::stats::Spread;
use std::collections::HashMap;

/// The measurements of one run of the group, by case and repetition.
pub(super) struct Results<'a> {
    by: HashMap<(Case, usize), &'a Sample>,
}

impl<'a> Results<'a> {
    pub(super) fn new(samples: &'a [Sample]) -> Self {
        Results { by: samples.iter().map(|s| ((s.case, s.rep), s)).collect() }
    }

    pub(super) fn spread(&self, case: Case, f: impl Fn(&Sample) -> Option<f64>) -> Option<Spread> {
        let v: Vec<f64> = self.by.iter().filter(|((c, _), _)| *c == case).filter_map(|(_, s)| f(s)).collect();
        Spread::of(&v)
    }

    /// `f(case) ÷ f(reference)` within each repetition, over the repetitions.
    pub(super) fn paired(
        &self,
        case: Case,
        reference: Case,
        f: impl Fn(&Sample) -> Option<f64>,
    ) -> Option<Spread> {
        let v: Vec<f64> = self
            .by
            .iter()
            .filter(|((c, _), _)| *c == case)
            .filter_map(|((_, rep), s)| Some(f(s)? / f(self.by.get(&(reference, *rep))?)?))
            .collect();
        Spread::of(&v)
    }
}

pub(super) fn p50(s: &Sample) -> Option<f64> {
    s.rtt.map(|r| r.p50)
}
