//! A Rust peer on a bus region another program made: it sends, receives or
//! echoes messages on one topic. The Python tests (`bindings/python/tests`)
//! run it to check that a Rust producer and a Python consumer (and the
//! reverse) work on one region.
//!
//! ```text
//! cargo run --example bus_peer -- send    REGION TOPIC COUNT   # "rust-<i>", key i
//! cargo run --example bus_peer -- receive REGION TOPIC COUNT   # prints one line per message
//! cargo run --example bus_peer -- create  REGION TOPIC PARTITIONS  # "ready" to each partition
//! cargo run --example bus_peer -- array   ARRAY  -     SCALE       # a[i] = i * SCALE (f64)
//! ```
//!
//! `receive` prints each message as a line, `<partition> <bytes as text>`,
//! taking them from every partition in turn; every wait is bounded (10 s).

use std::io::Write;
use std::time::{Duration, Instant};
use tachyon::bus::{Key, Region, RegionConfig, TopicConfig};
use tachyon::{Error, Result};

/// How long any wait may take.
const WAIT: Duration = Duration::from_secs(10);

fn usage() -> Error {
    Error::InvalidArgument {
        what: "usage: bus_peer send|receive REGION TOPIC COUNT, or bus_peer create REGION TOPIC PARTITIONS"
            .into(),
    }
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [mode, region, topic, n] = &args[..] else { return Err(usage()) };
    let n: u32 = n.parse().map_err(|_| usage())?;
    match mode.as_str() {
        "send" => send(region, topic, n),
        "receive" => receive(region, topic, n),
        "create" => create(region, topic, n),
        "array" => array(region, n),
        _ => Err(usage()),
    }
}

/// Opens REGION and TOPIC, made by another process.
fn open(region: &str, topic: &str) -> Result<tachyon::bus::Topic> {
    Region::open(region)?.topic(topic)
}

fn send(region: &str, topic: &str, count: u32) -> Result<()> {
    let topic = open(region, topic)?;
    for i in 0..u64::from(count) {
        let text = format!("rust-{i}");
        // Half of the messages built in place, half copied.
        if i % 2 == 0 {
            let mut loan = topic.loan(text.len(), Some(WAIT))?;
            loan.copy_from_slice(text.as_bytes());
            loan.publish(Key(i), Some(WAIT))?;
        } else {
            topic.send(text.as_bytes(), Key(i), Some(WAIT))?;
        }
    }
    Ok(())
}

fn receive(region: &str, topic: &str, count: u32) -> Result<()> {
    let topic = open(region, topic)?;
    let out = std::io::stdout();
    let mut out = out.lock();
    let deadline = Instant::now() + WAIT;
    let mut got = 0;
    while got < count {
        let mut any = false;
        for p in 0..topic.partitions() {
            if let Some(msg) = topic.try_receive(p)? {
                writeln!(out, "{p} {}", String::from_utf8_lossy(&msg))?;
                got += 1;
                any = true;
            }
        }
        if !any {
            if Instant::now() > deadline {
                return Err(Error::Timeout { what: "the messages asked for", waited: Some(WAIT) });
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    out.flush()?;
    Ok(())
}

/// Creates a 16 MiB region with a topic of PARTITIONS partitions and
/// sends one message "ready" to each partition (for a consumer in another
/// language to find).
fn create(region: &str, topic: &str, partitions: u32) -> Result<()> {
    let config = RegionConfig::default().size(16 << 20).ring_arena(1 << 20);
    let region = Region::create_or_open(region, config)?;
    let topic = region.create_or_open_topic(topic, TopicConfig::default().partitions(partitions))?;
    for p in 0..partitions {
        let key = (0..1u64 << 20).find(|&k| topic.partition_of(Key(k)) == p).ok_or_else(usage)?;
        topic.send(b"ready", Key(key), Some(WAIT))?;
    }
    Ok(())
}

/// Opens the `SharedArray<f64>` ARRAY (made by another process) and sets
/// element i to i * SCALE under its write lock.
fn array(name: &str, scale: u32) -> Result<()> {
    let array = tachyon::SharedArray::<f64>::open(name)?;
    let mut all = array.write_lock_timeout(Some(WAIT))?;
    for (i, x) in all.iter_mut().enumerate() {
        *x = i as f64 * f64::from(scale);
    }
    Ok(())
}
