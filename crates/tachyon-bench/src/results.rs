//! A group's samples looked up by case and repetition: spreads and paired
//! ratios (the topics and rpc groups').

use crate::stats::Spread;
use std::collections::HashMap;
use std::hash::Hash;

/// A sample of one case in one repetition.
pub trait Keyed {
    /// What was measured.
    type Case: Copy + Eq + Hash;
    /// Its case and repetition.
    fn key(&self) -> (Self::Case, usize);
}

/// The measurements of one run of a group, by case and repetition.
pub struct Results<'a, S: Keyed> {
    by: HashMap<(S::Case, usize), &'a S>,
}

impl<'a, S: Keyed> Results<'a, S> {
    /// The samples of a run of the group.
    pub fn new(samples: &'a [S]) -> Self {
        Results { by: samples.iter().map(|s| (s.key(), s)).collect() }
    }

    /// `f` over the repetitions of `case` (`None` where `f` has nothing).
    pub fn spread(&self, case: S::Case, f: impl Fn(&S) -> Option<f64>) -> Option<Spread> {
        let v: Vec<f64> = self.by.iter().filter(|((c, _), _)| *c == case).filter_map(|(_, s)| f(s)).collect();
        Spread::of(&v)
    }

    /// `f(case) ÷ f(reference)` within each repetition, over the repetitions.
    pub fn paired(&self, case: S::Case, reference: S::Case, f: impl Fn(&S) -> Option<f64>) -> Option<Spread> {
        self.paired_in(case, reference, f, |_| true)
    }

    /// [`paired`](Self::paired) over the pairs whose two samples `keep`
    /// keeps.
    pub fn paired_in(
        &self,
        case: S::Case,
        reference: S::Case,
        f: impl Fn(&S) -> Option<f64>,
        keep: impl Fn(&S) -> bool,
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
    pub fn samples(&self) -> impl Iterator<Item = &'a S> + '_ {
        self.by.values().copied()
    }
}
