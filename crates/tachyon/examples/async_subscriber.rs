//! An async consumer on tokio: a subscription over every partition of a
//! topic as a `Stream`, fed by a producer process.
//!
//! The parent creates a region with a 4-partition topic `ticks`, starts a
//! copy of itself as the producer (blocking `send`s, 16 keys spread over the
//! partitions, a sequence number per key) and consumes on a tokio runtime:
//! `subscription.next().await` for every message, each wait bounded by
//! `tokio::time::timeout` (a receive cancelled by it loses nothing). It
//! checks that every key's messages come in order, none missing, and
//! prints the count. No runtime is built into tachyon: the futures are
//! woken by tachyon's own waiter thread, so the same code runs on any
//! executor.
//!
//! ```text
//! cargo run --release --example async_subscriber
//! ```

use futures_util::StreamExt;
use std::time::{Duration, Instant};
use tachyon::bus::{Key, Partitions, Region, RegionConfig, TopicConfig};
use tachyon::{Error, Result};

mod support;
use support::{check_failed, field, Children};

const MESSAGES: u64 = 100_000;
const KEYS: u64 = 16;
/// How long the producer's sends and the consumer's receives may wait.
const WAIT: Duration = Duration::from_secs(10);

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [role, name] = args.as_slice() {
        if role == "producer" {
            return producer(name);
        }
    }
    let name = format!("async-subscriber-{}", std::process::id());
    let region = Region::create(&name, RegionConfig::default().size(16 << 20).ring_arena(1 << 20))?;
    let outcome = consume(&region, &name);
    // A region is persistent: remove it whether or not the run went well.
    drop(region);
    let removed = Region::remove(&name);
    outcome.and(removed)
}

/// The parent: starts the producer, consumes on tokio, checks.
fn consume(region: &Region, name: &str) -> Result<()> {
    let ticks = region.create_topic("ticks", TopicConfig::default().partitions(4).capacity(256))?;
    let mut subscription = ticks.subscribe(Partitions::All)?;
    let mut children = Children::default();
    children.spawn("the producer".into(), &["producer", name])?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .map_err(|e| Error::Io { context: "cannot start tokio".into(), source: e })?;
    let started = Instant::now();
    let received = runtime.block_on(async {
        let mut next = [0u64; KEYS as usize];
        for n in 0..MESSAGES {
            let message = tokio::time::timeout(WAIT, subscription.next())
                .await
                .map_err(|_| check_failed(format!("no message for {WAIT:?} after {n}")))?
                .expect("a subscription is an endless stream")?;
            let (key, seq) = (field(&message, 0)?, field(&message, 1)?);
            let want =
                next.get_mut(key as usize).ok_or_else(|| check_failed(format!("unknown key {key}")))?;
            if seq != *want {
                return Err(check_failed(format!("key {key}: #{seq} came when #{want} was due")));
            }
            *want += 1;
        }
        Ok::<_, Error>(MESSAGES)
    })?;
    children.wait_all(WAIT)?;
    println!(
        "async consumer (tokio, pid {}): {received} messages from 4 partitions through one subscription stream, every key in order ({:.1} ms)",
        std::process::id(),
        started.elapsed().as_secs_f64() * 1e3
    );
    Ok(())
}

/// The producer: blocking sends, keys in turn, a sequence number per key.
fn producer(name: &str) -> Result<()> {
    let region = Region::open(name)?;
    let ticks = region.topic("ticks")?;
    let mut next = [0u64; KEYS as usize];
    for i in 0..MESSAGES {
        let key = i % KEYS;
        let mut message = [0u8; 16];
        message[..8].copy_from_slice(&key.to_le_bytes());
        message[8..].copy_from_slice(&next[key as usize].to_le_bytes());
        ticks.send(&message, Key(key), Some(WAIT))?;
        next[key as usize] += 1;
    }
    println!("producer (pid {}): sent {MESSAGES} messages with {KEYS} keys", std::process::id());
    Ok(())
}
