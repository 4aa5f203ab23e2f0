//! Per-key FIFO across processes: messages with one key arrive in the order
//! they were published.
//!
//! The parent creates a region with a 4-partition topic `orders` and starts
//! one consumer process per partition and two producer processes. Each
//! producer publishes 50000 messages for 8 keys (account ids 1001 to 1008,
//! picked in a pseudo-random order), each message carrying the producer's
//! id, the key and that key's next sequence number (1, 2, 3, ... per
//! producer and key), then an end marker for every key (so that the
//! markers reach every partition that has keys, behind the key's messages). The two
//! producers run at the same time, so their messages interleave in the
//! rings. A key always maps to the same partition, and a partition is a
//! FIFO ring, so each consumer must see, for every (producer, key), the
//! sequence numbers 1, 2, 3, ... with none missing, repeated or out of
//! order. A consumer that sees anything else says so and exits with a
//! non-zero code; the parent then fails too. When every check passed the
//! parent prints "per-key FIFO held for N messages".
//!
//! ```text
//! cargo run --release --example key_ordering
//! ```

use std::collections::{HashMap, HashSet};
use std::time::Duration;
use tachyon::bus::{Key, Region, RegionConfig, TopicConfig};
use tachyon::{Error, Result};

mod support;
use support::{check_failed, field, Children};

const PARTITIONS: u32 = 4;
const PRODUCERS: u64 = 2;
const PER_PRODUCER: u64 = 50_000;
/// The keys: account ids 1001 to 1008.
const KEYS: [u64; 8] = [1001, 1002, 1003, 1004, 1005, 1006, 1007, 1008];
/// A data message: producer, key, sequence number (little-endian u64s).
const DATA: usize = 24;
/// An end marker: the producer and the key.
const END: usize = 16;
/// How long one loan, publish or receive may wait: a process that stops
/// answering ends the run with an error instead of a hang.
const WAIT: Option<Duration> = Some(Duration::from_secs(10));

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [role, name, n] if role == "consumer" => consumer(name, number(n)?),
        [role, name, n] if role == "producer" => producer(name, number(n)?),
        _ => {
            let name = format!("key-ordering-{}", std::process::id());
            let region = Region::create(&name, RegionConfig::default().size(16 << 20).ring_arena(1 << 20))?;
            let outcome = parent(&region, &name);
            // A region is persistent: remove it whether or not the run went well.
            drop(region);
            let removed = Region::remove(&name);
            outcome.and(removed)
        }
    }
}

fn number<T: std::str::FromStr>(text: &str) -> Result<T> {
    text.parse().map_err(|_| Error::InvalidArgument { what: format!("expected a number, not {text:?}") })
}

/// The parent: starts consumers and producers, collects the consumers'
/// reports.
fn parent(region: &Region, name: &str) -> Result<()> {
    let orders =
        region.create_topic("orders", TopicConfig::default().partitions(PARTITIONS).capacity(256))?;
    let results = region.create_topic("results", TopicConfig::default().partitions(1).capacity(16))?;
    let mut children = Children::default();
    for p in 0..PARTITIONS {
        children.spawn(format!("the consumer of partition {p}"), &["consumer", name, &p.to_string()])?;
    }
    for id in 0..PRODUCERS {
        children.spawn(format!("producer {id}"), &["producer", name, &id.to_string()])?;
    }
    let by_partition: Vec<Vec<u64>> = (0..PARTITIONS)
        .map(|p| KEYS.iter().copied().filter(|&k| orders.partition_of(Key(k)) == p).collect())
        .collect();
    println!(
        "parent (pid {}): {PRODUCERS} producers x {PER_PRODUCER} messages, {} keys over {PARTITIONS} partitions: {by_partition:?}",
        std::process::id(),
        KEYS.len(),
    );

    // Each consumer reports (partition, messages, violations).
    let (mut total, mut violations) = (0, 0);
    let mut reported = HashSet::new();
    for _ in 0..PARTITIONS {
        let report = results.receive(0, WAIT)?;
        let [p, count, bad] = [field(&report, 0)?, field(&report, 1)?, field(&report, 2)?];
        if p >= u64::from(PARTITIONS) || !reported.insert(p) {
            return Err(check_failed(format!("a report for partition {p}, unknown or repeated")));
        }
        total += count;
        violations += bad;
    }
    if violations > 0 {
        return Err(check_failed(format!(
            "{violations} per-key order violations (see the consumers' messages)"
        )));
    }
    children.wait_all(Duration::from_secs(10))?;
    if total != PRODUCERS * PER_PRODUCER {
        return Err(check_failed(format!(
            "the consumers got {total} messages, {} were published",
            PRODUCERS * PER_PRODUCER
        )));
    }
    println!("per-key FIFO held for {total} messages");
    Ok(())
}

/// A producer: per-key sequence numbers, then an end marker per key.
fn producer(name: &str, id: u64) -> Result<()> {
    let region = Region::open(name)?;
    let orders = region.topic("orders")?;
    let mut next = [1u64; KEYS.len()];
    // A small xorshift generator: each producer picks keys in its own order.
    let mut state = 0x9e37_79b9_7f4a_7c15 ^ (id + 1);
    for _ in 0..PER_PRODUCER {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let k = (state % KEYS.len() as u64) as usize;
        let mut loan = orders.loan(DATA, WAIT)?;
        loan[..8].copy_from_slice(&id.to_le_bytes());
        loan[8..16].copy_from_slice(&KEYS[k].to_le_bytes());
        loan[16..].copy_from_slice(&next[k].to_le_bytes());
        loan.publish(Key(KEYS[k]), WAIT)?;
        next[k] += 1;
    }
    for key in KEYS {
        let mut end = [0u8; END];
        end[..8].copy_from_slice(&id.to_le_bytes());
        end[8..].copy_from_slice(&key.to_le_bytes());
        orders.send(&end, Key(key), WAIT)?;
    }
    println!(
        "producer {id} (pid {}): published {PER_PRODUCER} messages, per key {:?}",
        std::process::id(),
        next.map(|n| n - 1)
    );
    Ok(())
}

/// A consumer: checks the order of every (producer, key) stream of its
/// partition until every producer's end marker of every key of the
/// partition has come.
fn consumer(name: &str, partition: u32) -> Result<()> {
    let region = Region::open(name)?;
    let orders = region.topic("orders")?;
    let results = region.topic("results")?;
    let mut last: HashMap<(u64, u64), u64> = HashMap::new();
    let mine = orders.subscribe(partition)?;
    // The keys that map here (none is possible: then nothing comes).
    let keys_here = KEYS.iter().filter(|&&k| orders.partition_of(Key(k)) == partition).count() as u64;
    let mut ended = HashSet::new();
    let (mut count, mut violations) = (0u64, 0u64);
    while (ended.len() as u64) < PRODUCERS * keys_here {
        let message = mine.receive(WAIT)?; // a view into shared memory
        let producer = field(&message, 0)?;
        if producer >= PRODUCERS {
            return Err(check_failed(format!(
                "a message from unknown producer {producer} in partition {partition}"
            )));
        }
        match message.len() {
            END => {
                ended.insert((producer, field(&message, 1)?));
            }
            DATA => {
                let (key, seq) = (field(&message, 1)?, field(&message, 2)?);
                count += 1;
                let previous = last.insert((producer, key), seq).unwrap_or(0);
                let problem = if orders.partition_of(Key(key)) != partition {
                    Some(format!("key {key} belongs to partition {}", orders.partition_of(Key(key))))
                } else if ended.contains(&(producer, key)) {
                    Some(format!("producer {producer} sent key {key} #{seq} after its end marker"))
                } else if seq != previous + 1 {
                    Some(format!("producer {producer}, key {key}: #{seq} came after #{previous}"))
                } else {
                    None
                };
                if let Some(problem) = problem {
                    violations += 1;
                    eprintln!("consumer of partition {partition}: ORDER VIOLATED: {problem}");
                }
            }
            other => {
                return Err(check_failed(format!("a message of {other} bytes in partition {partition}")))
            }
        }
        // `message` is dropped here: its chunk goes back to the pool.
    }
    let mut report = [0u8; 24];
    report[..8].copy_from_slice(&u64::from(partition).to_le_bytes());
    report[8..16].copy_from_slice(&count.to_le_bytes());
    report[16..].copy_from_slice(&violations.to_le_bytes());
    results.send(&report, Key(0), WAIT)?;
    if violations > 0 {
        return Err(check_failed(format!("{violations} order violations in partition {partition}")));
    }
    println!(
        "consumer of partition {partition} (pid {}): {count} messages in {} (producer, key) streams, each in order",
        std::process::id(),
        last.len()
    );
    Ok(())
}
