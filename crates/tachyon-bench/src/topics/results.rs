//! The topics group's samples by case and repetition (the shared
//! [`crate::results::Results`]), and the round trips' p50.

use super::case::{Case, Sample};

impl crate::results::Keyed for Sample {
    type Case = Case;

    fn key(&self) -> (Case, usize) {
        (self.case, self.rep)
    }
}

/// The topics group's samples by case and repetition.
pub(super) type Results<'a> = crate::results::Results<'a, Sample>;

pub(super) fn p50(s: &Sample) -> Option<f64> {
    s.rtt.map(|r| r.p50)
}
