//! The wait policy of a tachyon transport's two ends, as the command line
//! names it.

use clap::ValueEnum;
use tachyon::sync::WaitPolicy;

/// The wait policy of both ends of a `CircularBuffer`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, ValueEnum)]
pub enum Policy {
    /// `WaitPolicy::Spin`.
    Spin,
    /// `WaitPolicy::Hybrid`.
    Hybrid,
    /// `WaitPolicy::Futex`.
    Futex,
}

impl Policy {
    /// The library's policy.
    pub fn wait_policy(self) -> WaitPolicy {
        match self {
            Policy::Spin => WaitPolicy::Spin,
            Policy::Hybrid => WaitPolicy::Hybrid,
            Policy::Futex => WaitPolicy::Futex,
        }
    }

    /// `spin`, `hybrid`, `futex`.
    pub fn name(self) -> &'static str {
        match self {
            Policy::Spin => "spin",
            Policy::Hybrid => "hybrid",
            Policy::Futex => "futex",
        }
    }
}
