//! Hello, zero-copy bus: publish one message and read it back.
//!
//! Creates a region (one persistent segment in /dev/shm) with a topic,
//! borrows a chunk of the region's payload pool, writes a greeting into it
//! in place and publishes it with a key. A second handle on the region, made
//! with `Region::open` exactly as another process would, receives a view of
//! the same bytes, prints it and releases it. A region outlives the
//! processes that use it, so the program removes it at the end.
//!
//! ```text
//! cargo run --release --example hello_ipc
//! ```

use std::time::Duration;
use tachyon::bus::{Key, Partitions, Region, RegionConfig, TopicConfig};
use tachyon::Result;

/// How long a loan, a publish or a receive may wait.
const WAIT: Option<Duration> = Some(Duration::from_secs(5));

fn main() -> Result<()> {
    // A name unique to this run, so that runs never collide.
    let name = format!("hello-ipc-{}", std::process::id());
    let region = Region::create(&name, RegionConfig::default().size(16 << 20).ring_arena(1 << 20))?;
    println!("created region {name:?} at {}", region.segment().path().display());
    let path = region.segment().path().to_path_buf();

    let outcome = hello(&region, &name);

    // Closing a region does not delete it: remove it, whether or not the
    // run went well.
    drop(region);
    let removed = Region::remove(&name);
    println!("removed the region; file still there: {}", path.exists());
    outcome.and(removed)
}

fn hello(region: &Region, name: &str) -> Result<()> {
    // The producer's side.
    let topic = region.create_topic("greetings", TopicConfig::default())?;
    let text = format!("hello from pid {}, through shared memory", std::process::id());
    let key = 42;
    let mut loan = topic.loan(text.len(), WAIT)?; // a writable chunk of the pool
    loan.copy_from_slice(text.as_bytes()); // the message is built in place
    loan.publish(Key(key), WAIT)?; // only a 16-byte descriptor moves
    println!("published {} bytes with key {key} to partition {}", text.len(), topic.partition_of(Key(key)));

    // The consumer's side: another process would do exactly this.
    let region2 = Region::open(name)?;
    let topic2 = region2.topic("greetings")?;
    // A subscription over all partitions: no need to know where the key went.
    let subscription = topic2.subscribe(Partitions::All)?;
    let message = subscription.receive(WAIT)?; // a view into shared memory
    println!("received {} bytes: {:?}", message.len(), String::from_utf8_lossy(&message));
    drop(message); // releases the chunk back to the pool

    let info = topic2.info();
    println!("topic {:?}: {} published, {} received", info.name, info.published, info.received);
    Ok(())
}
