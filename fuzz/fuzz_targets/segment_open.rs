//! Opening a segment another process wrote: the segment header and attach
//! slots, and each object's own header and layout on open (array, buffer,
//! ring, broadcast, RPC control block, region: configuration, layout,
//! topic directory, free lists, rings) and a first use of what opened.
//!
//! Input: a selector byte (which kind; bit 7: also cut the file short),
//! then patches (4-byte offset, 8-byte value) applied to a template of that
//! kind made by the library itself (marked persistent, so that the copy
//! opens without a live attacher). Any outcome but a panic, a hang or a
//! crash is fine: an error must be a typed `tachyon::Error`.
#![no_main]

mod common;

use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;
use std::time::Duration;
use tachyon::bus::{Key, Region, RegionConfig, TopicConfig};
use tachyon::{BroadcastBuffer, CircularBuffer, Overflow, RpcBuffer, Segment, SharedArray, SharedBuffer};

const NAMES: [&str; 7] = ["tpl-raw", "tpl-array", "tpl-buffer", "tpl-ring", "tpl-bcast", "tpl-rpc", "tpl-region"];

/// The bytes of a freshly made segment of each kind (index as `NAMES`).
fn templates() -> &'static Vec<(String, Vec<u8>)> {
    static T: OnceLock<Vec<(String, Vec<u8>)>> = OnceLock::new();
    T.get_or_init(|| {
        common::private_dir();
        let raw = Segment::create(NAMES[0], 64).unwrap();
        let array = SharedArray::<u64>::create(NAMES[1], 8).unwrap();
        array.set(1, 7).unwrap();
        let buffer = SharedBuffer::create(NAMES[2], 64).unwrap();
        let ring = CircularBuffer::create(NAMES[3], 4, 32).unwrap();
        ring.write(b"abc", None).unwrap();
        let bus = BroadcastBuffer::create(NAMES[4], 4, 32, Overflow::Overwrite).unwrap();
        bus.write(b"abc", None).unwrap();
        let rpc = RpcBuffer::builder(NAMES[5]).node_count(2).node_size(64).create().unwrap();
        let region = Region::create(NAMES[6], region_config()).unwrap();
        let topic = region.create_topic("t", TopicConfig::default().partitions(2).capacity(4)).unwrap();
        topic.send(b"abc", Key(1), None).unwrap();
        let out: Vec<(String, Vec<u8>)> = NAMES
            .iter()
            .map(|n| {
                let path = common::file_of(n);
                let mut bytes = std::fs::read(&path).unwrap();
                bytes[76] |= 1; // persistent: opens without a live attacher
                (path.file_name().unwrap().to_str().unwrap().to_owned(), bytes)
            })
            .collect();
        drop((raw, array, buffer, ring, bus, rpc, topic, region));
        let _ = Region::remove(NAMES[6]);
        out
    })
}

fn region_config() -> RegionConfig {
    RegionConfig::default().size(4 << 20).max_topics(2).ring_arena(4096).class_weights([1, 0, 0, 0, 0, 0, 0, 1])
}


fn exercise(kind: usize, name: &str) {
    let mut buf = [0u8; 64];
    match kind {
        0 => {
            if let Ok(seg) = Segment::open(name) {
                let _ = seg.read_bytes(0, &mut buf[..8]);
            }
        }
        1 => {
            if let Ok(a) = SharedArray::<u64>::open(name) {
                for i in 0..a.len().min(16) {
                    let _ = a.get(i);
                }
                let _ = a.set(0, 1);
            }
        }
        2 => {
            if let Ok(b) = SharedBuffer::open(name) {
                let _ = b.read_bytes(0, &mut buf[..16]);
                let _ = b.write_bytes(0, b"x");
            }
        }
        3 => {
            if let Ok(r) = CircularBuffer::open(name) {
                let _ = r.try_read(&mut buf);
                let _ = r.try_write(b"y");
                let _ = r.try_read(&mut buf);
            }
        }
        4 => {
            if let Ok(b) = BroadcastBuffer::open(name) {
                if let Ok(mut reader) = b.subscribe() {
                    let _ = reader.try_read(&mut buf);
                }
                let _ = b.try_write(b"y");
            }
        }
        5 => {
            let _ = RpcBuffer::builder(name).connect_timeout(Some(Duration::from_millis(1))).open();
        }
        _ => {
            if let Ok(region) = Region::open(name) {
                let _ = region.topics();
                let _ = region.inspect();
                let _ = region.recover();
                if let Ok(topic) = region.topic("t") {
                    let _ = topic.try_send(b"z", Key(1));
                    for p in 0..topic.partitions() {
                        let _ = topic.try_receive(p);
                    }
                }
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&sel, patches)) = data.split_first() else { return };
    let kind = usize::from(sel & 0x7f) % NAMES.len();
    let (file, template) = &templates()[kind];
    let mut bytes = template.clone();
    let (cut, patches) = if sel & 0x80 != 0 && patches.len() >= 4 {
        let n = u32::from_le_bytes(patches[..4].try_into().unwrap()) as usize % (bytes.len() + 1);
        (Some(n), &patches[4..])
    } else {
        (None, patches)
    };
    common::patch(&mut bytes, patches);
    if let Some(n) = cut {
        bytes.truncate(n);
    }
    let name = format!("case-{kind}");
    let path = common::private_dir().join(file.replace(NAMES[kind], &name));
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&path).unwrap();
    std::io::Write::write_all(&mut f, &bytes).unwrap();
    drop(f);
    exercise(kind, &name);
    let _ = std::fs::remove_file(&path);
});
