//! The Rust twin of `tests/c/cost.c`: loan, publish, receive and release of
//! a SIZE-byte message on one topic, COUNT times, in one process, with the
//! timeouts of the `pingpong` example. Prints the mean time per message;
//! the difference to `cost.c` is what the C boundary costs (see
//! docs/c-api.md, "Measured").
//!
//! ```text
//! cargo run --release -p tachyon-ffi --example cost -- [COUNT [SIZE]]   (defaults 1000000 256)
//! ```

use std::time::{Duration, Instant};
use tachyon_core::bus::{Key, Region, RegionConfig, TopicConfig};
use tachyon_core::{Error, Result};

const WAIT: Option<Duration> = Some(Duration::from_secs(10));

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let mut arg = |default: u64| -> Result<u64> {
        args.next().map_or(Ok(default), |a| {
            a.parse().map_err(|_| Error::InvalidArgument {
                what: format!("usage: cost [COUNT [SIZE]], not {a:?}"),
            })
        })
    };
    let count = arg(1_000_000)?.max(1);
    let size = arg(256)? as usize;
    let name = format!("rs-cost-{}", std::process::id());
    let region = Region::create(&name, RegionConfig::default().size(16 << 20).ring_arena(1 << 20))?;
    let topic = region.create_topic("t", TopicConfig::default().capacity(64))?;
    let t0 = Instant::now();
    for i in 0..count {
        let mut loan = topic.loan(size, WAIT)?;
        loan.fill(i as u8);
        loan.publish(Key(0), WAIT)?;
        drop(topic.receive(0, WAIT)?);
    }
    let ns = t0.elapsed().as_nanos() as f64 / count as f64;
    println!("Rust: {ns:.1} ns per message (loan, publish, receive, release)");
    drop(topic);
    drop(region);
    Region::remove(&name)
}
