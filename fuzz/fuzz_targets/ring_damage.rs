//! Structure-aware: a writer and a reader on a `CircularBuffer` while the
//! input scribbles on its mapping between their operations (cursors, cell
//! control words and lengths, as another process could). Then the damage
//! stops and the ring must heal: every item written from then on is read
//! back, in order, within a bounded number of reads; every error on the
//! way is a typed one. The ring has 2 or 4 nodes: a power of two, as a
//! ring whose cursors are both damaged must be to be rebuilt from its
//! cells (docs/CRASH-SAFETY.md, "Damage"); single faults heal either way
//! (tests/heal.rs runs a 3-node ring).
#![no_main]

mod common;

use common::Input;
use libfuzzer_sys::fuzz_target;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tachyon::{CircularBuffer, Kind, Segment};

// circular.rs: cursors at 64 (tail) and 128 (head), cells (16 bytes) at 320.
const TAIL: usize = 64;
const HEAD: usize = 128;
const CELLS: usize = 320;
const NODE: usize = 24;

fuzz_target!(|data: &[u8]| {
    common::private_dir();
    let mut input = Input(data);
    let Some(shape) = input.byte() else { return };
    let nodes = 2 << (shape & 1);
    let name = format!("ring-{}", std::process::id());
    let Ok(ring) = CircularBuffer::create(&name, nodes, NODE) else { return };
    let raw = Segment::builder(&name).kind(Kind::CIRCULAR).open().unwrap();
    let word = |off: usize| raw.get::<AtomicU64>(off).unwrap();
    let mut buf = [0u8; NODE];
    let mut n = 0u8;
    while let Some(op) = input.byte() {
        match op % 6 {
            0 | 1 => {
                n = n.wrapping_add(1);
                let _ = ring.try_write(&[n; 3][..usize::from(op >> 4) % 4]);
            }
            2 => {
                if let Ok(Some(len)) = ring.try_read(&mut buf) {
                    assert!(len <= NODE);
                }
            }
            3 => {
                // A cell's control word, as a word the protocol could hold
                // or not (see `cell_word`).
                let Some(raw_value) = input.u64() else { break };
                let cell = usize::from(op >> 3) % nodes;
                let pos = word(TAIL).load(Ordering::Relaxed);
                word(CELLS + 16 * cell).store(common::cell_word(op >> 3, pos, raw_value), Ordering::Relaxed);
            }
            4 => {
                let Some(v) = input.u64() else { break };
                let (at, v) = match (op >> 3) & 3 {
                    0 => (TAIL, v),
                    1 => (HEAD, v),
                    2 => (CELLS + 16 * (usize::from(op >> 5) % nodes) + 8, v), // an item length
                    _ => (CELLS + 16 * (usize::from(op >> 5) % nodes), common::no_live_token(v)),
                };
                word(at).store(v, Ordering::Relaxed);
            }
            _ => {
                // A small step of a cursor (a bit flip in its low bits).
                let at = if op & 8 != 0 { TAIL } else { HEAD };
                let w = word(at).load(Ordering::Relaxed);
                word(at).store(w ^ (1 << ((op >> 4) % 8)), Ordering::Relaxed);
            }
        }
    }
    // Healing: the damage has stopped. Each marker written must come back
    // within a bounded number of reads (damaged cells may yield stale
    // items or typed errors first); a write may wait for repairs.
    let wait = Some(Duration::from_millis(500)); // a bound, not a timing claim (loaded machines)
    for marker in 0..2 * nodes as u8 + 2 {
        let item = [0xA0, marker, 0x5A];
        let mut written = false;
        for _ in 0..4 * nodes {
            // No wait: a full ring is emptied by the read below.
            match ring.write(&item, Some(Duration::ZERO)) {
                Ok(()) => {
                    written = true;
                    break;
                }
                // Full of stale items: a read makes room.
                Err(tachyon::Error::Timeout { .. }) => {
                    let _ = ring.read(&mut buf, wait);
                }
                Err(e) => panic!("write after the damage stopped: {e}"),
            }
        }
        assert!(written, "no room for a write after the damage stopped");
        let mut seen = false;
        for _ in 0..4 * nodes + 4 {
            match ring.read(&mut buf, wait) {
                Ok(len) if buf[..len] == item => {
                    seen = true;
                    break;
                }
                Ok(_) | Err(tachyon::Error::Corrupt { .. }) | Err(tachyon::Error::BufferTooSmall { .. }) => {}
                Err(e) => panic!("read after the damage stopped: {e}"),
            }
        }
        assert!(seen, "marker {marker} not read back after the damage stopped");
    }
    drop(raw);
    drop(ring);
});
