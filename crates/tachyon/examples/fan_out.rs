//! Consumer groups: one producer, three groups, each group in its own
//! process; every group receives every message.
//!
//! The parent creates a region with a 2-partition topic `orders` without
//! its default group, joins the groups `billing`, `audit` and `search` (so
//! that they exist before the first message), and starts one copy of
//! itself per group. It publishes 100000 messages with 64 keys, then one
//! end marker per partition, which every group receives after all the
//! data. Each child joins its group, takes the group's messages from both
//! partitions until it has both markers, and checks them: the count, a
//! checksum of the message numbers, no message twice, and per-key order.
//! It prints its count and exits non-zero on any mismatch; the parent
//! fails if a child does, and checks that every chunk is back in the pool
//! (the payload was written once and shared by the three groups, never
//! copied per group).
//!
//! ```text
//! cargo run --release --example fan_out
//! ```

use std::time::{Duration, Instant};
use tachyon::bus::{Key, Region, RegionConfig, TopicConfig};
use tachyon::Result;

mod support;
use support::{check_failed, field, Children};

const GROUPS: [&str; 3] = ["billing", "audit", "search"];
const PARTITIONS: u32 = 2;
const MESSAGES: u64 = 100_000;
const KEYS: u64 = 64;
/// Bytes per message: key, its number within the key, the message number,
/// and padding.
const SIZE: usize = 64;
/// The message number of an end marker.
const END: u64 = u64::MAX;
/// How long one publish or receive may wait: a process that stops
/// answering ends the run with an error instead of a hang.
const WAIT: Option<Duration> = Some(Duration::from_secs(10));

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [role, name, group] = args.as_slice() {
        if role == "group" {
            return member(name, group);
        }
    }
    let name = format!("fan-out-{}", std::process::id());
    let config = RegionConfig::default().size(16 << 20).ring_arena(1 << 20).max_groups(GROUPS.len() + 1);
    let region = Region::create(&name, config)?;
    let outcome = producer(&region, &name);
    // A region is persistent: remove it whether or not the run went well.
    drop(region);
    let removed = Region::remove(&name);
    outcome.and(removed)
}

/// The parent: joins the groups, starts their processes, publishes, waits
/// for every group to have checked everything.
fn producer(region: &Region, name: &str) -> Result<()> {
    // No default group: every message goes to the named groups only.
    let orders = region.create_topic(
        "orders",
        TopicConfig::default().partitions(PARTITIONS).capacity(1024).default_group(false),
    )?;
    for group in GROUPS {
        orders.join_group(group)?;
    }
    let initial = region.pool_stats()?;
    let mut children = Children::default();
    for group in GROUPS {
        children.spawn(format!("group {group}"), &["group", name, group])?;
    }
    println!(
        "producer (pid {}): publishing {MESSAGES} messages with {KEYS} keys to {} groups",
        std::process::id(),
        GROUPS.len()
    );
    let started = Instant::now();
    let mut per_key = [0u64; KEYS as usize];
    for i in 0..MESSAGES {
        let key = i.wrapping_mul(7919) % KEYS;
        let mut msg = [0u8; SIZE];
        msg[..8].copy_from_slice(&key.to_le_bytes());
        msg[8..16].copy_from_slice(&per_key[key as usize].to_le_bytes());
        msg[16..24].copy_from_slice(&i.to_le_bytes());
        per_key[key as usize] += 1;
        orders.send(&msg, Key(key), WAIT)?;
    }
    // One end marker per partition, behind the data in every group's ring.
    for p in 0..PARTITIONS {
        let key = (0..).find(|&k| orders.partition_of(Key(k)) == p).unwrap_or(0);
        let mut end = [0u8; SIZE];
        end[16..24].copy_from_slice(&END.to_le_bytes());
        orders.send(&end, Key(key), WAIT)?;
    }
    let published = started.elapsed();
    children.wait_all(Duration::from_secs(60))?;
    if region.pool_stats()? != initial {
        return Err(check_failed("chunks are still held after every group released its messages".into()));
    }
    println!(
        "producer: all {} groups received all {MESSAGES} messages, checked; every chunk is back in the pool ({:.1} ms to publish)",
        GROUPS.len(),
        published.as_secs_f64() * 1e3
    );
    Ok(())
}

/// A group's process: takes the group's messages from every partition
/// until each gave it an end marker, checking them.
fn member(name: &str, group: &str) -> Result<()> {
    let region = Region::open(name)?;
    let orders = region.topic("orders")?;
    // The parent joined it already: this joins the same group.
    let mine = orders.join_group(group)?;
    let mut seen = vec![false; MESSAGES as usize];
    let mut next = [0u64; KEYS as usize];
    let (mut count, mut sum) = (0u64, 0u64);
    let mut ended = [false; PARTITIONS as usize];
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut p = 0;
    while ended.contains(&false) {
        if Instant::now() > deadline {
            return Err(check_failed(format!("group {group}: not every end marker came within 60 s")));
        }
        p = (p + 1) % PARTITIONS;
        if ended[p as usize] {
            continue;
        }
        let Some(message) = mine.try_receive(p)? else {
            std::thread::yield_now();
            continue;
        };
        let [key, n, i] = [field(&message, 0)?, field(&message, 1)?, field(&message, 2)?];
        if i == END {
            ended[p as usize] = true;
            continue;
        }
        if i >= MESSAGES || key >= KEYS || orders.partition_of(Key(key)) != p {
            return Err(check_failed(format!(
                "group {group}: message {i} with key {key} from partition {p}"
            )));
        }
        if std::mem::replace(&mut seen[i as usize], true) {
            return Err(check_failed(format!("group {group}: message {i} received twice")));
        }
        if n != next[key as usize] {
            return Err(check_failed(format!(
                "group {group}: key {key}: message {n} after {} (order)",
                next[key as usize]
            )));
        }
        next[key as usize] = n + 1;
        count += 1;
        sum = sum.wrapping_add(i);
        // `message` (a view into shared memory) is released here: the
        // chunk goes back to the pool once the last group releases it.
    }
    let want_sum = (0..MESSAGES).fold(0u64, u64::wrapping_add);
    println!("group {group:<7} (pid {}): {count} messages received", std::process::id());
    if (count, sum) != (MESSAGES, want_sum) {
        return Err(check_failed(format!(
            "group {group}: {count} messages (sum {sum}), {MESSAGES} were published (sum {want_sum})"
        )));
    }
    Ok(())
}
