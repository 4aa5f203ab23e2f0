//! The Rust side of the C <-> Rust test: the same orders as the C program
//! `tests/c/readme.c` (`struct order { uint64_t user_id, seq; double
//! price; }`, keyed by user, 97 users, topic "orders" of 8 partitions), on
//! one region.
//!
//! ```text
//! rust_peer produce NAME N   # then: readme consume NAME N   (Rust -> C)
//! rust_peer consume NAME N   # after: readme produce NAME N  (C -> Rust)
//! ```

use std::time::{Duration, Instant};
use tachyon_core::bus::{Key, Region, RegionConfig, Topic, TopicConfig};
use tachyon_core::{Error, Result};

const KEYS: u64 = 97;
const WAIT: Option<Duration> = Some(Duration::from_secs(30));
/// `sizeof(struct order)` in C.
const ORDER: usize = 24;

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let run = || -> Result<()> {
        match args.as_slice() {
            [mode, name, n] => {
                let n: u64 = n.parse().map_err(|_| Error::InvalidArgument { what: format!("N: {n:?}") })?;
                match mode.as_str() {
                    "produce" => produce(name, n),
                    "consume" => consume(name, n),
                    _ => Err(Error::InvalidArgument { what: format!("mode {mode:?}") }),
                }
            }
            _ => Err(Error::InvalidArgument { what: "usage: rust_peer produce|consume NAME N".into() }),
        }
    };
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rust_peer: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn produce(name: &str, n: u64) -> Result<()> {
    // The C side's ty_region_conf_default with size 64 MiB: the same
    // configuration, so that either side may create the region.
    let region = Region::create_or_open(name, RegionConfig::default().size(64 << 20))?;
    let topic = region.create_or_open_topic("orders", TopicConfig::default().partitions(8).capacity(1024))?;
    let mut seq = [0u64; KEYS as usize];
    for i in 0..n {
        let user = i % KEYS;
        seq[user as usize] += 1;
        let mut loan = topic.loan(ORDER, WAIT)?;
        loan[0..8].copy_from_slice(&user.to_ne_bytes());
        loan[8..16].copy_from_slice(&seq[user as usize].to_ne_bytes());
        loan[16..24].copy_from_slice(&(i as f64).to_ne_bytes());
        loan.publish(Key(user), WAIT)?;
    }
    Ok(())
}

fn open_retrying(name: &str) -> Result<Topic> {
    let start = Instant::now();
    loop {
        match Region::open(name).and_then(|r| r.topic("orders")) {
            Err(Error::NotFound { .. } | Error::TopicNotFound { .. })
                if start.elapsed() < WAIT.unwrap_or_default() =>
            {
                std::thread::sleep(Duration::from_millis(10))
            }
            other => return other,
        }
    }
}

fn consume(name: &str, n: u64) -> Result<()> {
    let topic = open_retrying(name)?;
    let parts = topic.partitions();
    let mut expected = vec![0u64; parts as usize];
    for i in 0..n {
        expected[topic.partition_of(Key(i % KEYS)) as usize] += 1;
    }
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..parts)
            .map(|p| {
                let topic = &topic;
                let want = expected[p as usize];
                s.spawn(move || -> Result<()> {
                    let mut last = [0u64; KEYS as usize];
                    for _ in 0..want {
                        let msg = topic.receive(p, WAIT)?;
                        let word = |i: usize| -> Result<u64> {
                            let b = msg.get(i * 8..i * 8 + 8).ok_or(Error::InvalidArgument {
                                what: format!("a message of {} bytes is not an order", msg.len()),
                            })?;
                            Ok(u64::from_ne_bytes(b.try_into().unwrap_or_default()))
                        };
                        let (user, seq) = (word(0)?, word(1)?);
                        let bad = |what: String| Err(Error::InvalidArgument { what });
                        if msg.len() != ORDER || user >= KEYS || topic.partition_of(Key(user)) != p {
                            return bad(format!(
                                "partition {p}: bad order (user {user}, {} bytes)",
                                msg.len()
                            ));
                        }
                        if seq != last[user as usize] + 1 {
                            return bad(format!("user {user}: seq {seq} after {}", last[user as usize]));
                        }
                        last[user as usize] = seq;
                    }
                    Ok(())
                })
            })
            .collect();
        handles.into_iter().try_for_each(|h| h.join().unwrap_or(Err(Error::Closed)))
    })?;
    println!("rust_peer: {n} orders from {parts} partitions, per-key order kept");
    Ok(())
}
