//! One-way throughput: the receiving peer times a stream of items after
//! its warm-up.

use crate::peer::Fault;
use std::time::{Duration, Instant};

/// Runs `one(seq)` for `seq` in `0..total`; times the items after the
/// first `warmup`. A `lose:N` fault (see [`Fault`]) skips item N, so the
/// check of the next one must fail.
pub fn timed(
    total: u64,
    warmup: u64,
    mut one: impl FnMut(u64) -> Result<(), String>,
) -> Result<Duration, String> {
    let fault = Fault::from_env();
    let mut start = Instant::now();
    for seq in 0..total {
        if fault.at(seq) {
            one(seq)?; // a lost item: the next check must fail
        }
        one(seq).map_err(|e| format!("reader, item {seq}: {e}"))?;
        if seq + 1 == warmup {
            start = Instant::now();
        }
    }
    Ok(start.elapsed())
}
