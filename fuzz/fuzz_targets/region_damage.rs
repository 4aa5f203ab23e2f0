//! Structure-aware: a producer and a consumer on a region's topic while the
//! input scribbles on the region between their operations: the topic's
//! ring cells and cursors, chunk state words and links, free-list heads,
//! the topic's counters, its directory entry and the region's
//! configuration (each kept twice: the harness recovers before it hits the
//! second copy of either, as the reaper would between two hits). Then the
//! damage stops, `recover()` runs, and the topic must serve again: each
//! marker sent is received within a bounded number of receives, and a
//! fresh open of the region finds the topic; every error on the way is a
//! typed one.
#![no_main]

mod common;

use common::Input;
use libfuzzer_sys::fuzz_target;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;
use tachyon::bus::{Key, Region, RegionConfig, TopicConfig};
use tachyon::{Kind, Segment};

// Where the words are: `RegionMap` (the header, the directory, a
// partition); a chunk's metadata is 24 bytes (word, link, route, length,
// version). A directory entry (directory.rs, 256 bytes): the first copy of
// the fixed fields in words 0..4 and 8..17, counters in 4..8, the second
// copy in 17..30. The configuration words are in the header and again
// after the directory.
const CAPACITY: usize = 4;
const ENTRY_COPIES: [&[usize]; 2] = [&[0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 15, 16], &[17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29]];

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
    let map = tachyon::bus::RegionMap::new();
    // The configuration's words: max_topics, the lease, the recorded
    // configuration and its seal; its second copy after the directory.
    let config_copies: [Vec<usize>; 2] = [
        [map.max_topics, map.lease].into_iter().chain(map.config.clone().step_by(8)).collect(),
        (0..9).map(|w| map.config_copy(2) + 8 * w).collect(),
    ];
    let metas = u64_at(map.metas).load(Ordering::Relaxed) as usize;
    let chunks = u64_at(map.total_chunks).load(Ordering::Relaxed) as usize;
    let ring = u64_at(map.directory + map.entry_ring_off).load(Ordering::Relaxed) as usize;
    let cells = ring + map.partition_header;
    let mut n = 0u8;
    let mut held = Vec::new();
    // Which copy of the entry and of the configuration was hit since the
    // last recovery.
    let mut hit: [Option<usize>; 2] = [None, None];
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
                u64_at(cells + map.cell_bytes * cell).store(common::cell_word(op >> 3, pos, v), Ordering::Relaxed);
            }
            5 => {
                let Some(v) = input.u64() else { break };
                let at = match (op >> 3) & 3 {
                    0 => ring,                                             // tail
                    1 => ring + map.partition_head,                        // head
                    2 => cells + map.cell_bytes * (usize::from(op >> 5) % CAPACITY) + 8, // descriptor
                    _ => map.directory + 32 + 8 * (usize::from(op >> 5) % 4),      // a counter
                };
                u64_at(at).store(common::no_live_token(v), Ordering::Relaxed);
                // And now and then a word of one copy of the topic's entry
                // or of the configuration.
                if op & 0x80 != 0 {
                    let Some(w) = input.byte() else { break };
                    let (what, copy) = (usize::from(w & 1), usize::from((w >> 1) & 1));
                    if hit[what].is_some_and(|c| c != copy) {
                        region.recover().expect("recover between two hits");
                    }
                    hit[what] = Some(copy);
                    let words: &[usize] = if what == 0 { ENTRY_COPIES[copy] } else { &config_copies[copy] };
                    let word = words[usize::from(w >> 2) % words.len()];
                    let off = if what == 0 { map.directory + 8 * word } else { word };
                    u64_at(off).store(v, Ordering::Relaxed);
                }
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
                u64_at(map.free_lists + map.free_list_bytes * class).store(v, Ordering::Relaxed);
            }
        }
    }
    drop(held);
    // Healing: the damage has stopped.
    region.recover().expect("recover after the damage stopped");
    {
        let fresh = Region::open(&name).expect("a fresh open after the damage stopped");
        fresh.topic("t").expect("the topic in a fresh open");
    }
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
            (0..CAPACITY).map(|i| format!("{:x}", u64_at(cells + map.cell_bytes * i).load(Ordering::Relaxed))).collect();
        assert!(
            seen,
            "marker {marker} not received after the damage stopped: tail {:x} head {:x} cells {cells:?}",
            u64_at(ring).load(Ordering::Relaxed),
            u64_at(ring + map.partition_head).load(Ordering::Relaxed)
        );
    }
    drop((topic, raw, region));
    let _ = Region::remove(&name);
});
