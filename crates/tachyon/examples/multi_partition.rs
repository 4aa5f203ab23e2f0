//! One consumer process per partition of a topic.
//!
//! The parent creates a region with a 4-partition topic `events` and starts
//! four copies of itself, each consuming one partition. It then publishes
//! 100000 messages with 1000 different keys (the key decides the partition:
//! one key always lands in the same one) and, when done, one stop message
//! per consumer on a third topic, `control`. Each consumer waits on its
//! partition (a [`Subscription`](tachyon::bus::Subscription) of one
//! partition) and on `control` at once, with a
//! [`WaitSet`](tachyon::WaitSet); it counts what it received, checks
//! that every message's key belongs to its partition, and once it took a
//! stop message drains its partition (everything published before the stop
//! is there by then), prints its count and reports count and checksum back
//! on a second topic, `results`. The parent checks every partition against what
//! it published there and that the counts add up to the total.
//!
//! ```text
//! cargo run --release --example multi_partition
//! ```

use std::collections::HashSet;
use std::time::{Duration, Instant};
use tachyon::bus::{Key, Region, RegionConfig, TopicConfig};
use tachyon::WaitSet;
use tachyon::{Error, Result};

mod support;
use support::{check_failed, field, Children};

const PARTITIONS: u32 = 4;
const MESSAGES: u64 = 100_000;
const KEYS: u64 = 1000;
/// Bytes per message: key, message number, and padding.
const SIZE: usize = 64;
/// How long one loan, publish or receive may wait: a process that stops
/// answering ends the run with an error instead of a hang.
const WAIT: Option<Duration> = Some(Duration::from_secs(10));

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [role, name, partition] = args.as_slice() {
        if role == "consumer" {
            let partition = partition
                .parse()
                .map_err(|_| Error::InvalidArgument { what: format!("bad partition {partition:?}") })?;
            return consumer(name, partition);
        }
    }
    let name = format!("multi-partition-{}", std::process::id());
    let region = Region::create(&name, RegionConfig::default().size(16 << 20).ring_arena(1 << 20))?;
    let outcome = producer(&region, &name);
    // A region is persistent: remove it whether or not the run went well.
    drop(region);
    let removed = Region::remove(&name);
    outcome.and(removed)
}

/// The parent: starts the consumers, publishes, checks their reports.
fn producer(region: &Region, name: &str) -> Result<()> {
    let events =
        region.create_topic("events", TopicConfig::default().partitions(PARTITIONS).capacity(1024))?;
    let results = region.create_topic("results", TopicConfig::default().partitions(1).capacity(16))?;
    let control = region.create_topic("control", TopicConfig::default().partitions(1).capacity(16))?;
    let mut consumers = Children::default();
    for p in 0..PARTITIONS {
        consumers.spawn(format!("the consumer of partition {p}"), &["consumer", name, &p.to_string()])?;
    }
    println!(
        "producer (pid {}): publishing {MESSAGES} messages with {KEYS} keys to {PARTITIONS} partitions",
        std::process::id()
    );

    // What each partition should receive: message count and sum of numbers.
    let mut expected = [(0u64, 0u64); PARTITIONS as usize];
    let started = Instant::now();
    for i in 0..MESSAGES {
        // Keys in a scrambled order, so that the partitions interleave.
        let key = i.wrapping_mul(7919) % KEYS;
        let mut loan = events.loan(SIZE, WAIT)?;
        loan[..8].copy_from_slice(&key.to_le_bytes());
        loan[8..16].copy_from_slice(&i.to_le_bytes());
        loan[16..].fill(0);
        loan.publish(Key(key), WAIT)?;
        let slot = &mut expected[events.partition_of(Key(key)) as usize];
        slot.0 += 1;
        slot.1 = slot.1.wrapping_add(i);
    }
    // One stop message per consumer: each takes one and stops.
    for _ in 0..PARTITIONS {
        control.send(b"stop", Key(0), WAIT)?;
    }
    let published = started.elapsed();

    // Each consumer reports (partition, count, sum of message numbers).
    let mut total = 0;
    let mut reported = [false; PARTITIONS as usize];
    for _ in 0..PARTITIONS {
        let report = results.receive(0, WAIT)?;
        let [p, count, sum] = [field(&report, 0)?, field(&report, 1)?, field(&report, 2)?];
        let Some(seen) = reported.get_mut(p as usize).filter(|seen| !**seen) else {
            return Err(check_failed(format!("a report for partition {p}, unknown or repeated")));
        };
        *seen = true;
        let (want_count, want_sum) = expected[p as usize];
        if (count, sum) != (want_count, want_sum) {
            return Err(check_failed(format!(
                "partition {p}: consumer got {count} messages (sum {sum}), {want_count} were published (sum {want_sum})"
            )));
        }
        total += count;
    }
    consumers.wait_all(Duration::from_secs(10))?;
    if total != MESSAGES {
        return Err(check_failed(format!(
            "the consumers got {total} messages in all, {MESSAGES} were published"
        )));
    }
    println!(
        "producer: all {PARTITIONS} consumers done; {total} of {MESSAGES} messages received, count and checksum right in every partition ({:.1} ms to publish)",
        published.as_secs_f64() * 1e3
    );
    Ok(())
}

/// A consumer: takes every message of `partition` until a stop message
/// comes on `control`, waiting on both at once.
fn consumer(name: &str, partition: u32) -> Result<()> {
    let region = Region::open(name)?;
    let events = region.topic("events")?;
    let control = region.topic("control")?;
    let results = region.topic("results")?;
    let mine = events.subscribe(partition)?;
    let mut set = WaitSet::new();
    let data = set.add_subscription(&mine);
    set.add_partition(&control, 0)?;
    let (mut count, mut sum) = (0u64, 0u64);
    let mut keys = HashSet::new();
    let mut take = |message: &[u8]| -> Result<()> {
        let key = field(message, 0)?;
        if events.partition_of(Key(key)) != partition {
            return Err(check_failed(format!(
                "partition {partition} received key {key}, which belongs to another"
            )));
        }
        keys.insert(key);
        count += 1;
        sum = sum.wrapping_add(field(message, 1)?);
        Ok(())
    };
    loop {
        // Ready is a hint: another consumer may take a stop message first.
        if set.wait(WAIT)? == data {
            while let Some(message) = mine.try_receive()? {
                take(&message)?; // `message` (a view into shared memory) is released here
            }
        } else if control.try_receive(0)?.is_some() {
            // Everything published before the stop is in the partition now.
            while let Some(message) = mine.try_receive()? {
                take(&message)?;
            }
            break;
        }
    }
    println!(
        "consumer of partition {partition} (pid {}): {count} messages, {} distinct keys",
        std::process::id(),
        keys.len()
    );
    let mut report = [0u8; 24];
    report[..8].copy_from_slice(&u64::from(partition).to_le_bytes());
    report[8..16].copy_from_slice(&count.to_le_bytes());
    report[16..].copy_from_slice(&sum.to_le_bytes());
    results.send(&report, Key(0), WAIT)
}
