//! Structure-aware: a producer and a consumer on a region's topic while the
//! input scribbles on the region between their operations: the topic's
//! ring cells and cursors, chunk state words and links, free-list heads,
//! the topic's counters. Then the damage stops, `recover()` runs, and the
//! topic must serve again: each marker sent is received within a bounded
//! number of receives; every error on the way is a typed one.
#![no_main]

mod common;

use common::Input;
use libfuzzer_sys::fuzz_target;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;
use tachyon::bus::{Key, Region, RegionConfig, TopicConfig};
use tachyon::{Kind, Segment};

// region.rs: chunk metadata offset at 40 (24 bytes per chunk: word, link,
// route, length, version), free-list heads at 256 (16 bytes per class),
// topic directory at 2048 (entry: ring offset at 16, counters at 32..64).
const CAPACITY: usize = 4;

fuzz_target!(|data: &[u8]| {
    common::private_dir();
    let mut input = Input(data);
    let name = format!("region-{}", std::process::id());
    let _ = Region::remove(&name);
    let config = RegionConfig::default()
        .size(4 << 20)
        .max_topics(2)
        .ring_arena(4096)
        .class_weights([1, 0, 0, 0, 0, 0, 0, 4000]); // a handful of chunks: quick to create
    let Ok(region) = Region::create(&name, config) else { return };
    let topic = region.create_topic("t", TopicConfig::default().capacity(CAPACITY as u32)).unwrap();
    let raw = Segment::builder(&name).kind(Kind::REGION).open().unwrap();
    let u64_at = |off: usize| raw.get::<AtomicU64>(off).unwrap();
    let metas = u64_at(40).load(Ordering::Relaxed) as usize;
    let chunks = u64_at(48).load(Ordering::Relaxed) as usize;
    let ring = u64_at(2048 + 16).load(Ordering::Relaxed) as usize;
    let mut n = 0u8;
    let mut held = Vec::new();
    while let Some(op) = input.byte() {
        match op % 8 {
            0 | 1 => {
                n = n.wrapping_add(1);
                let _ = topic.try_send(&[n; 5], Key(0));
            }
            2 => match topic.try_receive(0) {
                Ok(Some(m)) if op & 8 != 0 => held.push(m),
                _ => {}
            },
            3 => {
                held.pop();
            }
            4 => {
                let Some(v) = input.u64() else { break };
                let cell = usize::from(op >> 3) % CAPACITY;
                let pos = u64_at(ring).load(Ordering::Relaxed);
                u64_at(ring + 192 + 16 * cell).store(common::cell_word(op >> 3, pos, v), Ordering::Relaxed);
            }
            5 => {
                let Some(v) = input.u64() else { break };
                let at = match (op >> 3) & 3 {
                    0 => ring,                                             // tail
                    1 => ring + 64,                                        // head
                    2 => ring + 192 + 16 * (usize::from(op >> 5) % CAPACITY) + 8, // descriptor
                    _ => 2048 + 32 + 8 * (usize::from(op >> 5) % 4),      // a counter
                };
                u64_at(at).store(common::no_live_token(v), Ordering::Relaxed);
            }
            6 => {
                // A chunk's state word, or its free-list link.
                let Some(v) = input.u64() else { break };
                let chunk = usize::from(op >> 4) % chunks;
                if op & 8 != 0 {
                    u64_at(metas + 24 * chunk).store(v, Ordering::Relaxed);
                } else {
                    raw.get::<AtomicU32>(metas + 24 * chunk + 8).unwrap().store(v as u32, Ordering::Relaxed);
                }
            }
            _ => {
                let Some(v) = input.u64() else { break };
                let class = if op & 8 != 0 { 7 } else { 0 };
                u64_at(256 + 16 * class).store(v, Ordering::Relaxed);
            }
        }
    }
    drop(held);
    // Healing: the damage has stopped.
    region.recover().expect("recover after the damage stopped");
    let wait = Some(Duration::from_millis(500)); // a bound, not a timing claim (loaded machines)
    for marker in 0..2 * CAPACITY as u8 + 2 {
        let item = [0xA0, marker, 0x5A];
        let mut sent = false;
        for _ in 0..4 * CAPACITY {
            // No wait: a full partition is emptied by the receive below.
            match topic.send(&item, Key(0), Some(Duration::ZERO)) {
                Ok(()) => {
                    sent = true;
                    break;
                }
                Err(tachyon::Error::Timeout { .. }) | Err(tachyon::Error::PoolExhausted { .. }) => {
                    let _ = topic.receive(0, wait);
                    let _ = region.recover();
                }
                Err(tachyon::Error::Corrupt { .. }) => {}
                Err(e) => panic!("send after the damage stopped: {e}"),
            }
        }
        assert!(sent, "no send after the damage stopped");
        let mut seen = false;
        for _ in 0..4 * CAPACITY + 4 {
            match topic.receive(0, wait) {
                Ok(m) if *m == item => {
                    seen = true;
                    break;
                }
                Ok(_) | Err(tachyon::Error::Corrupt { .. }) => {}
                Err(tachyon::Error::Timeout { .. }) => break,
                Err(e) => panic!("receive after the damage stopped: {e}"),
            }
        }
        let cells: Vec<String> =
            (0..CAPACITY).map(|i| format!("{:x}", u64_at(ring + 192 + 16 * i).load(Ordering::Relaxed))).collect();
        assert!(
            seen,
            "marker {marker} not received after the damage stopped: tail {:x} head {:x} cells {cells:?}",
            u64_at(ring).load(Ordering::Relaxed),
            u64_at(ring + 64).load(Ordering::Relaxed)
        );
    }
    drop((topic, raw, region));
    let _ = Region::remove(&name);
});
