//! Publishing through a loan, every wait bounded.

use super::shm::KEY;
use crate::peer::{self, retry};
use std::time::{Duration, Instant};
use tachyon::bus::{Key, Topic};

/// Publishes a message through a loan: `fill` writes it in place. Every
/// wait is bounded as in [`retry`]; a publish that times out gave its
/// chunk back, so the message is built again in a new loan.
#[inline]
pub(crate) fn publish_loan(
    topic: &Topic,
    len: usize,
    fill: impl FnMut(&mut [u8]),
    stall: Duration,
    check: &mut dyn FnMut() -> Result<(), String>,
) -> Result<(), String> {
    publish_loan_key(topic, len, KEY, fill, stall, check)
}

/// [`publish_loan`] with a key.
#[inline]
pub(super) fn publish_loan_key(
    topic: &Topic,
    len: usize,
    key: u64,
    mut fill: impl FnMut(&mut [u8]),
    stall: Duration,
    check: &mut dyn FnMut() -> Result<(), String>,
) -> Result<(), String> {
    // The clock is read only once a publish had to wait (as `retry` does):
    // a clock read per message would cost the loan path alone ~25 ns.
    let mut start = None;
    loop {
        let mut loan = retry(|t| topic.loan(len, t), stall, check, "no chunk came free in the pool")?;
        fill(&mut loan);
        match loan.publish(Key(key), Some(peer::SLICE)) {
            Ok(()) => return Ok(()),
            Err(tachyon::Error::Timeout { .. }) => {
                check()?;
                if start.get_or_insert_with(Instant::now).elapsed() >= stall {
                    return Err(format!("waited {stall:?}: the partition stayed full"));
                }
            }
            Err(e) => return Err(e.to_string()),
        }
    }
}
