//! A topic's chunk path in one thread, for instruction counts that do not
//! depend on the machine's noise (`valgrind --tool=callgrind`).
//!
//! Two handles of one region, each with its own chunk cache, so that the
//! chunks go back and forth through the shared free lists in chains as
//! they do between a producer process and a consumer process; a spin
//! topic of 1,024 cells; `ROUNDS` rounds of 512 `send`s of `SIZE` bytes,
//! then 512 `recv_into`s (with a third argument `slice`:
//! `recv_into_slice`s, the C face's `ty_recv`). The instructions of one
//! message (send and receive) are the difference of two runs with
//! different `ROUNDS`, divided by the difference in messages: the set-up
//! (creating the region, attaching, recovery on open) cancels out.
//!
//! ```text
//! cargo build --release -p tachyon-bench --example chunk_loop
//! valgrind --tool=callgrind --callgrind-out-file=cg20.out target/release/examples/chunk_loop 20 64
//! valgrind --tool=callgrind --callgrind-out-file=cg60.out target/release/examples/chunk_loop 60 64
//! # (total of cg60.out - total of cg20.out) / (40 * 512) = instructions a message
//! ```

use std::time::Duration;
use tachyon::bus::{Key, Region, RegionConfig, TopicConfig};
use tachyon::sync::WaitPolicy;

/// Messages each way per round: fewer than the topic's 1,024 cells, so
/// that a round's sends never wait for room.
const BURST: usize = 512;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: chunk_loop ROUNDS SIZE [vec|slice] (e.g. 20 64)";
    let rounds: usize = args.next().ok_or(usage)?.parse()?;
    let size: usize = args.next().ok_or(usage)?.parse()?;
    let into_slice = match args.next().as_deref() {
        None | Some("vec") => false,
        Some("slice") => true,
        Some(_) => return Err(usage.into()),
    };
    if size == 0 || size > tachyon::bus::MAX_MESSAGE {
        return Err(format!("SIZE must be 1 to {} bytes", tachyon::bus::MAX_MESSAGE).into());
    }
    let name = format!("chunk-loop-{}", std::process::id());
    let outcome = run(&name, rounds, size, into_slice);
    let removed = Region::remove(&name);
    let total = outcome?;
    removed?;
    println!("{rounds} rounds of {BURST} messages of {size} B each way: {total} bytes received");
    Ok(())
}

/// The loop itself, receiving into a `Vec` (`recv_into`) or a buffer of
/// fixed size (`recv_into_slice`); the bytes received, which the caller
/// prints (so that the receives cannot be optimized away).
fn run(name: &str, rounds: usize, size: usize, into_slice: bool) -> tachyon::Result<usize> {
    let producer = Region::create(name, RegionConfig::default().size(64 << 20).ring_arena(4 << 20))?;
    let sending =
        producer.create_topic("loop", TopicConfig::default().capacity(1024).wait(WaitPolicy::Spin))?;
    // A handle of its own, as another process would open the region.
    let consumer = Region::open(name)?;
    let receiving = consumer.topic("loop")?;
    let data = vec![0xA5u8; size];
    let mut buf = Vec::with_capacity(size);
    let mut fixed = vec![0u8; size];
    let wait = Some(Duration::from_secs(5));
    let mut total = 0;
    for _ in 0..rounds {
        for _ in 0..BURST {
            sending.send(&data, Key(0), wait)?;
        }
        for _ in 0..BURST {
            total += if into_slice {
                receiving.recv_into_slice(0, &mut fixed, wait)?
            } else {
                receiving.recv_into(0, &mut buf, wait)?
            };
        }
    }
    Ok(total)
}
