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
        self.paired_in(case, reference, f, |_| true)
    }

    /// [`paired`](Self::paired) over the pairs whose two samples `keep`
    /// keeps.
    pub(super) fn paired_in(
        &self,
        case: Case,
        reference: Case,
        f: impl Fn(&Sample) -> Option<f64>,
        keep: impl Fn(&Sample) -> bool,
    ) -> Option<Spread> {
        let v: Vec<f64> = self
            .by
            .iter()
            .filter(|((c, _), s)| *c == case && keep(s))
            .filter_map(|((_, rep), s)| {
                let r = self.by.get(&(reference, *rep)).filter(|r| keep(r))?;
                Some(f(s)? / f(r)?)
            })
            .collect();
        Spread::of(&v)
    }

    /// Every sample, in no particular order.
    pub(super) fn samples(&self) -> impl Iterator<Item = &'a Sample> + '_ {
        self.by.values().copied()
    }
}

pub(super) fn p50(s: &Sample) -> Option<f64> {
    s.rtt.map(|r| r.p50)
}
