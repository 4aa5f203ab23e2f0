//! Damage costs what it touched: words another process scribbled on a
//! ring cell, a ring cursor, a free list, a chunk's state, a lock word or
//! a broadcast buffer's cursors are repaired or quarantined by the next
//! claimant, by `Region::open` or by `recover()`, and the channel goes on. Each test plants one kind of
//! damage through a raw handle on the segment and shows producers and
//! consumers work again, with the repair counted.
#![cfg(not(tachyon_loom))]

mod common;

use common::{unique, RemoveRegion};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tachyon::bus::{Key, Region, RegionConfig, TopicConfig};
use tachyon::{CircularBuffer, Kind, Segment};

const SHORT: Option<Duration> = Some(Duration::from_millis(200));

/// A tag that is neither 0, a tombstone nor a token.
const GARBAGE: u64 = 0x4000_0001;

fn region(name: &str) -> Region {
    Region::create(name, RegionConfig::default().size(8 << 20).ring_arena(1 << 20)).unwrap()
}

/// Raw words of a ring: a region's first topic's first partition, or a
/// `CircularBuffer`.
struct RawRing {
    seg: Segment,
    /// The cursors (tail, then head 64 bytes on, the repair count at 72).
    base: usize,
    /// The first cell (16 bytes each: word, length).
    cells: usize,
}

impl RawRing {
    fn of_region(name: &str) -> RawRing {
        let seg = Segment::builder(name).kind(Kind::REGION).open().unwrap();
        // The first topic entry's ring offset; its cells after the
        // partition's header.
        let map = tachyon::bus::RegionMap::new();
        let base =
            seg.get::<AtomicU64>(map.directory + map.entry_ring_off).unwrap().load(Ordering::SeqCst) as usize;
        RawRing { seg, base, cells: base + map.partition_header }
    }
    fn of_circular(name: &str) -> RawRing {
        // circular.rs: cursors at 64, cells at 320.
        RawRing { seg: Segment::builder(name).kind(Kind::CIRCULAR).open().unwrap(), base: 64, cells: 320 }
    }
    fn word(&self, off: usize) -> &AtomicU64 {
        self.seg.get::<AtomicU64>(off).unwrap()
    }
    fn tail(&self) -> &AtomicU64 {
        self.word(self.base)
    }
    fn head(&self) -> &AtomicU64 {
        self.word(self.base + 64)
    }
    fn cell(&self, i: usize) -> &AtomicU64 {
        self.word(self.cells + 16 * i)
    }
    fn repairs(&self) -> u64 {
        self.word(self.base + 72).load(Ordering::SeqCst)
    }
}

/// Sends and receives `count` messages through partition 0, in order.
fn flows(topic: &tachyon::bus::Topic, count: u64) {
    for i in 0..count {
        topic.send(&i.to_le_bytes(), Key(0), SHORT).unwrap_or_else(|e| panic!("send {i}: {e}"));
        let m = topic.receive(0, SHORT).unwrap_or_else(|e| panic!("receive {i}: {e}"));
        assert_eq!(&*m, &i.to_le_bytes());
    }
}

#[test]
fn a_ring_cell_with_a_garbage_tag_is_repaired_by_the_next_claimant() {
    let name = unique("heal-cell");
    let _cleanup = RemoveRegion(name.clone());
    let region = region(&name);
    let topic = region.create_topic("t", TopicConfig::default().capacity(4)).unwrap();
    flows(&topic, 4); // tail = head = 4: every cell free for its next lap
    let raw = RawRing::of_region(&name);
    // The cell the next writer needs, as the acceptance run found it: its
    // previous lap with a tag that is no token (blocked every send before).
    raw.cell(0).store((1 << 32) | GARBAGE, Ordering::SeqCst);
    // The cell after it: this lap's, garbage tag (a reader would have
    // reported it corrupt for ever).
    raw.cell(1).store((5 << 32) | GARBAGE, Ordering::SeqCst);
    // A fresh process's view: open the region again.
    let again = Region::open(&name).unwrap();
    let t2 = again.topic("t").unwrap();
    for i in 0..20u64 {
        t2.send(&i.to_le_bytes(), Key(0), SHORT).unwrap();
        assert_eq!(&*topic.receive(0, SHORT).unwrap(), &i.to_le_bytes());
    }
    assert!(raw.repairs() >= 2, "repairs {}", raw.repairs());
    assert!(topic.info().corrupt >= 2, "{:?}", topic.info());
    assert_eq!(t2.depth(0).unwrap(), 0);
}

#[test]
fn a_damaged_cell_behind_the_cursors_is_repaired_by_recovery() {
    let name = unique("heal-recover");
    let _cleanup = RemoveRegion(name.clone());
    let region = region(&name);
    let topic = region.create_topic("t", TopicConfig::default().capacity(8).partitions(2)).unwrap();
    flows(&topic, 3);
    let raw = RawRing::of_region(&name);
    // Cells nobody is at: a garbage tag, and a sequence of no lap of its cell.
    raw.cell(6).store((6 << 32) | GARBAGE, Ordering::SeqCst);
    raw.cell(7).store(0x1234_5674 << 32, Ordering::SeqCst);
    // A sequence of the right phase but a far lap: found by its claimant.
    raw.cell(5).store(0x1234_5675 << 32, Ordering::SeqCst);
    let found = region.recover().unwrap();
    assert_eq!(found.repaired, 2, "{found:?}");
    assert_eq!(region.recover().unwrap().repaired, 0);
    flows(&topic, 40); // five laps over the repaired cells
    assert_eq!(topic.info().corrupt, 3);
}

#[test]
fn damaged_cursors_are_moved_back_and_nothing_queued_is_lost() {
    let name = unique("heal-cursor");
    let _cleanup = RemoveRegion(name.clone());
    let region = region(&name);
    let topic = region.create_topic("t", TopicConfig::default().capacity(8)).unwrap();
    flows(&topic, 5);
    let raw = RawRing::of_region(&name);
    for (which, value) in [("tail", 0xdead_beef_1234u64), ("head", 0x7777_0000_0003), ("both", 3)] {
        // Three messages queued, then the damage.
        for i in 0..3u64 {
            topic.send(&i.to_le_bytes(), Key(0), SHORT).unwrap();
        }
        match which {
            "tail" => raw.tail().store(value, Ordering::SeqCst),
            "head" => raw.head().store(value, Ordering::SeqCst),
            _ => {
                raw.tail().store(0x5555_5555_5555, Ordering::SeqCst);
                raw.head().store(value, Ordering::SeqCst);
            }
        }
        let repairs = raw.repairs();
        topic.send(&3u64.to_le_bytes(), Key(0), SHORT).unwrap_or_else(|e| panic!("{which}: {e}"));
        for i in 0..4u64 {
            let m = topic.receive(0, SHORT).unwrap_or_else(|e| panic!("{which}: receive {i}: {e}"));
            assert_eq!(&*m, &i.to_le_bytes(), "{which}");
        }
        assert!(raw.repairs() > repairs, "{which}");
        flows(&topic, 20);
        assert_eq!(topic.depth(0).unwrap(), 0, "{which}");
    }
}

#[test]
fn a_circular_buffer_cell_with_a_garbage_tag_is_repaired() {
    let name = unique("heal-circular");
    let ring = CircularBuffer::create(&name, 3, 16).unwrap(); // not a power of two
    let mut buf = [0u8; 16];
    for i in 0..3u8 {
        ring.write(&[i], SHORT).unwrap();
        assert_eq!(ring.read(&mut buf, SHORT).unwrap(), 1);
    }
    let raw = RawRing::of_circular(&name);
    assert_eq!(raw.tail().load(Ordering::SeqCst), 3);
    // Writer side: the next cell holds its last lap's sequence, garbage tag.
    raw.cell(0).store((1 << 32) | GARBAGE, Ordering::SeqCst);
    // Reader side: this lap's sequence, garbage tag.
    raw.cell(1).store((4 << 32) | GARBAGE, Ordering::SeqCst);
    let peer = CircularBuffer::open(&name).unwrap();
    for i in 0..30u8 {
        peer.write(&[i], SHORT).unwrap();
        assert_eq!(ring.read(&mut buf, SHORT).unwrap(), 1);
        assert_eq!(buf[0], i);
    }
    assert!(raw.repairs() >= 2, "repairs {}", raw.repairs());
    assert_eq!(ring.try_read(&mut buf).unwrap(), None);
}

/// Roles run by a child copy of this test binary.
#[test]
fn child_entry() {
    let Some((role, args)) = common::role() else { return };
    let name = args.str("name");
    match role.as_str() {
        "rpc-owner" => {
            let _server = tachyon::RpcBuffer::create(name).unwrap();
            println!("ready");
            std::thread::sleep(common::LIMIT);
            std::process::exit(4);
        }
        "open-region" => {
            // Run with TACHYON_FAULT set: killed inside the open.
            let _ = Region::open(name);
            std::process::exit(3);
        }
        "producer" | "consumer" | "flipper" | "burst" => broad_role(&role, name),
        "holder" => holder_role(name),
        "rpc-packet-server" => rpc_packet_server(name),
        "lock-user" => lock_user(&args),
        "bc-writer" => {
            let bus = tachyon::BroadcastBuffer::open(name).unwrap();
            for i in 0..args.get::<u8>("items") {
                bus.write(&[i], Some(common::LIMIT)).unwrap_or_else(|e| panic!("item {i}: {e}"));
            }
        }
        other => panic!("unknown role {other}"),
    }
}

#[test]
fn opening_a_channel_whose_owner_was_sigkilled_removes_all_its_files() {
    let name = unique("heal-rpc-stale");
    let mut child = common::spawn("child_entry", "rpc-owner", &name);
    // The control segment and the two rings made for the first client.
    assert!(
        common::wait_for(common::LIMIT, || common::channel_files(&name).len() == 3),
        "{:?}",
        common::channel_files(&name)
    );
    common::kill(&mut child);
    let err = tachyon::RpcBuffer::open(&name).unwrap_err();
    assert!(matches!(err, tachyon::Error::NotFound { .. } | tachyon::Error::PeerDied), "{err}");
    // Right after the failed open, not eventually.
    assert_eq!(common::channel_files(&name), Vec::<String>::new());
}

#[test]
fn message_too_large_names_the_limit_and_the_fix_of_its_context() {
    use tachyon::Error;
    let text = |e: Error| match e {
        Error::MessageTooLarge { .. } => e.to_string(),
        other => panic!("expected MessageTooLarge, got {other:?}"),
    };
    // A bus topic: the 1 MiB class limit; there are no nodes to enlarge.
    let name = unique("heal-too-large");
    let _cleanup = RemoveRegion(name.clone());
    let region = region(&name);
    let topic = region.create_topic("t", TopicConfig::default()).unwrap();
    for e in [
        topic.loan((1 << 20) + 1, SHORT).unwrap_err(),
        topic.send(&vec![0; (1 << 20) + 1], Key(0), SHORT).unwrap_err(),
    ] {
        let t = text(e);
        assert!(t.contains("at most 1048576 bytes") && t.contains("1 MiB"), "{t}");
        assert!(!t.contains("node") && !t.contains("max_message"), "{t}");
    }
    // A ring: the node size.
    let ring_name = unique("heal-too-large-ring");
    let ring = CircularBuffer::create(&ring_name, 4, 16).unwrap();
    let t = text(ring.write(&[0; 17], SHORT).unwrap_err());
    assert!(t.contains("at most 16 bytes") && t.contains("larger nodes"), "{t}");
    // RPC: it splits messages over nodes already; the limit is max_message.
    let rpc_name = unique("heal-too-large-rpc");
    let server = tachyon::RpcBuffer::builder(&rpc_name).max_message(1000).create().unwrap();
    let client = tachyon::RpcBuffer::builder(&rpc_name)
        .handler(|_, m: &[u8]| Ok::<_, String>(m.to_vec()))
        .open()
        .unwrap();
    let t = text(server.request(&[0; 1001], SHORT).unwrap_err());
    assert!(t.contains("at most 1000 bytes") && t.contains("max_message") && !t.contains("node"), "{t}");
    drop((client, server));
}

/// A region's chunk metadata offset and a class's first chunk and chunk
/// count (`RegionMap`); 24 bytes of metadata per chunk (state word, then
/// the free-list link).
fn pool_words(raw: &Segment, class: usize) -> (usize, u64, u64) {
    let get = |off: usize| raw.get::<AtomicU64>(off).unwrap().load(Ordering::SeqCst);
    let map = tachyon::bus::RegionMap::new();
    (get(map.metas) as usize, get(map.class_first + 8 * class), get(map.class_count + 8 * class))
}

#[test]
fn a_damaged_free_list_is_rebuilt_and_untrusted_chunks_are_quarantined() {
    let name = unique("heal-free-list");
    let _cleanup = RemoveRegion(name.clone());
    {
        let region = region(&name);
        region.create_topic("t", TopicConfig::default()).unwrap();
    }
    let raw = Segment::builder(&name).kind(Kind::REGION).open().unwrap();
    let (metas, first0, count0) = pool_words(&raw, 0);
    let (_, first1, count1) = pool_words(&raw, 1);
    // Class 0: a head whose top is out of range (every open failed on it).
    raw.get::<AtomicU64>(tachyon::bus::RegionMap::new().free_lists)
        .unwrap()
        .store(0x00ff_fff0, Ordering::SeqCst);
    // ... and a chunk whose word says HELD by something that is no token.
    let bad = (first0 + 3) as usize;
    raw.get::<AtomicU64>(metas + 24 * bad).unwrap().store(3 << 30, Ordering::SeqCst);
    // Class 1: the head is fine, a link deep down points out of the class.
    let link = raw.get::<std::sync::atomic::AtomicU32>(metas + 24 * (first1 + 5) as usize + 8).unwrap();
    link.store(0xdead, Ordering::SeqCst);
    drop(raw);

    let region = Region::open(&name).expect("a damaged free list no longer fails the open");
    assert_eq!(region.recovered_on_open().quarantined, 1, "{:?}", region.recovered_on_open());
    let report = region.inspect().unwrap();
    assert_eq!(report.quarantined_chunks, 1);
    assert_eq!(report.pool[0].free as u64, count0 - 1);
    // Every chunk not quarantined is on the rebuilt list: loan them all
    // (64-byte loans take class 0 first), each a distinct chunk.
    let topic = region.topic("t").unwrap();
    let mut loans = Vec::new();
    for i in 0..count0 - 1 {
        let mut loan = topic.try_loan(64).unwrap();
        loan[..8].copy_from_slice(&i.to_le_bytes());
        loans.push(loan);
    }
    assert_eq!(region.pool_stats().unwrap()[0].free, 0);
    // Class 1 through its damaged link: every chunk, then the list is empty.
    for i in 0..count1 {
        let mut loan = topic.try_loan(256).unwrap_or_else(|e| panic!("class 1 loan {i}: {e}"));
        loan[..8].copy_from_slice(&(1000 + i).to_le_bytes());
        loans.push(loan);
    }
    assert_eq!(region.pool_stats().unwrap()[1].free, 0);
    for (i, loan) in loans.iter().enumerate() {
        let want = if (i as u64) < count0 - 1 { i as u64 } else { 1000 + i as u64 - (count0 - 1) };
        assert_eq!(&loan[..8], &want.to_le_bytes(), "two loans share a chunk");
    }
    drop(loans);
    let stats = region.pool_stats().unwrap();
    assert_eq!((stats[0].free as u64, stats[1].free as u64), (count0 - 1, count1));
    flows(&topic, 10);
    // The quarantined chunk stays out, also for a later open and recovery.
    assert_eq!(Region::open(&name).unwrap().recover().unwrap().quarantined, 0);
    assert_eq!(region.inspect().unwrap().quarantined_chunks, 1);
}

/// A process killed in the middle of a rebuild (after it stopped the list,
/// holding the control mutex) leaves what the next open rebuilds again.
#[test]
#[cfg(debug_assertions)] // fault-injection points exist in debug builds only
fn a_rebuild_killed_half_way_is_done_again_by_the_next_open() {
    let name = unique("heal-rebuild-killed");
    let _cleanup = RemoveRegion(name.clone());
    {
        let region = region(&name);
        region.create_topic("t", TopicConfig::default()).unwrap();
    }
    let raw = Segment::builder(&name).kind(Kind::REGION).open().unwrap();
    let (_, _, count0) = pool_words(&raw, 0);
    raw.get::<AtomicU64>(tachyon::bus::RegionMap::new().free_lists)
        .unwrap()
        .store(0x00ff_fff0, Ordering::SeqCst);
    let mut child = common::child_command("child_entry", "open-region", &name)
        .env("TACHYON_FAULT", "pool-rebuild-stopped")
        .spawn()
        .unwrap();
    let status = child.wait().unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(9), "killed at the fault point: {status:?}");
    // The list is left stopped (and the mutex held by the dead).
    assert_eq!(
        raw.get::<AtomicU64>(tachyon::bus::RegionMap::new().free_lists).unwrap().load(Ordering::SeqCst) >> 24
            & 3,
        3
    );
    drop(raw);
    let region = Region::open(&name).unwrap();
    assert_eq!(region.pool_stats().unwrap()[0].free as u64, count0);
    let topic = region.topic("t").unwrap();
    let loans: Vec<_> = (0..count0).map(|_| topic.try_loan(64).unwrap()).collect();
    assert_eq!(region.pool_stats().unwrap()[0].free, 0);
    drop(loans);
    flows(&topic, 10);
}

/// Found by the `ring_damage` fuzz target: a head one ahead of the tail
/// of an empty ring; the first item written must still be read.
#[test]
fn a_head_that_jumped_ahead_of_the_tail_is_moved_back() {
    let name = unique("heal-head-ahead");
    let ring = CircularBuffer::create(&name, 4, 24).unwrap();
    let raw = RawRing::of_circular(&name);
    raw.head().fetch_xor(1, Ordering::SeqCst);
    let mut buf = [0u8; 24];
    assert_eq!(ring.try_read(&mut buf).unwrap(), None);
    for i in 0..10u8 {
        ring.write(&[i], SHORT).unwrap();
        assert_eq!(ring.read(&mut buf, SHORT).unwrap_or_else(|e| panic!("item {i}: {e}")), 1);
        assert_eq!(buf[0], i);
    }
}

// The broad test: one process flips random words across a live region's
// ring arena, pool metadata and topic directory while others produce and
// consume; afterwards the region serves every topic again.

const BROAD_TOPICS: [(&str, u32, u32); 2] = [("a", 2, 8), ("b", 1, 4)];

/// `(region name, stop flag segment name, seed)` of a broad-test child.
fn broad_args(arg: &str) -> (String, String, u64) {
    let mut parts = arg.split(',');
    let region = parts.next().unwrap().to_owned();
    let side = parts.next().unwrap().to_owned();
    (region, side, parts.next().unwrap().parse().unwrap())
}

fn broad_role(role: &str, arg: &str) {
    let (name, side, seed) = broad_args(arg);
    let stop = Segment::open(&side).unwrap();
    let stopped = || stop.get::<AtomicU64>(0).unwrap().load(Ordering::SeqCst) != 0;
    let mut rng = common::chaos::Rng(seed);
    match role {
        "flipper" | "burst" => {
            // Where the words are (`RegionMap`): the chunk metadata, the
            // ring arena, the free-list heads, the configuration (sealed),
            // the directory (entries of two sealed copies of the fixed
            // fields, with counters between them), the configuration's
            // second copy after it.
            // Two words are left alone so that the report stays readable:
            // each partition's repair counter and each topic's corrupt
            // counter (flipping them garbles numbers, nothing else).
            // The header and directory are hit at most once per 40 ms: two
            // copies survive damage to one between two recovery passes
            // (the test process recovers every 10 ms meanwhile, as the
            // reaper would), not damage to both.
            let raw = Segment::builder(&name).kind(Kind::REGION).open().unwrap();
            let get = |off: usize| raw.get::<AtomicU64>(off).unwrap().load(Ordering::SeqCst) as usize;
            let map = tachyon::bus::RegionMap::new();
            let (metas, chunks, arena, used) =
                (get(map.metas), get(map.total_chunks), get(map.arena), get(map.arena_used));
            let mut counters = vec![];
            let mut base = arena;
            for (_, partitions, capacity) in BROAD_TOPICS {
                let block = map.partition_block(capacity);
                for p in 0..partitions as usize {
                    counters.push(base + p * block + map.partition_repairs);
                }
                base += partitions as usize * block;
            }
            let burst = role == "burst";
            let deadline = std::time::Instant::now() + Duration::from_millis(if burst { 0 } else { 1500 });
            let mut flips = 0u64;
            let mut directory_flips = 0u64;
            let mut last_directory = std::time::Instant::now();
            let mut entry_hits: [Option<(usize, std::time::Instant)>; 2] = [None, None];
            let mut config_hit: Option<(usize, std::time::Instant)> = None;
            let copy = map.config_copy(BROAD_TOPICS.len());
            while std::time::Instant::now() < deadline || (burst && flips < 300) {
                let off = match rng.below(8) {
                    0..=3 => arena + 8 * rng.below(used as u64 / 8) as usize,
                    4 | 5 => metas + 8 * rng.below(chunks as u64 * 3) as usize,
                    6 => map.free_lists + 8 * rng.below(16) as usize,
                    _ if burst || last_directory.elapsed() < Duration::from_millis(40) => continue,
                    _ => {
                        last_directory = std::time::Instant::now();
                        directory_flips += 1;
                        match rng.below(4) {
                            // Any word of an entry but its corrupt counter
                            // and its unused tail (the last 16 bytes).
                            0 | 1 => {
                                let w = (0..map.entry_bytes / 8 - 2)
                                    .filter(|&w| w != map.entry_corrupt / 8)
                                    .collect::<Vec<_>>();
                                let (entry, word) =
                                    (rng.below(2) as usize, w[rng.below(w.len() as u64) as usize]);
                                // The second copy's words.
                                let copy = usize::from(word >= map.entry_copy2 / 8);
                                // Not the other copy of an entry hit less than
                                // 250 ms ago (a loaded machine may delay the
                                // repair that long): damage to both copies
                                // between two repairs is a loss, as documented.
                                if entry_hits[entry].is_some_and(|(c, at): (usize, std::time::Instant)| {
                                    c != copy && at.elapsed() < Duration::from_millis(250)
                                }) {
                                    continue;
                                }
                                entry_hits[entry] = Some((copy, std::time::Instant::now()));
                                map.directory + map.entry_bytes * entry + 8 * word
                            }
                            // The configuration's words, then its second
                            // copy: as for the entries, not the other copy
                            // of one hit less than 250 ms ago.
                            which => {
                                let copy_hit = usize::from(which == 3);
                                if config_hit.is_some_and(|(c, at): (usize, std::time::Instant)| {
                                    c != copy_hit && at.elapsed() < Duration::from_millis(250)
                                }) {
                                    continue;
                                }
                                config_hit = Some((copy_hit, std::time::Instant::now()));
                                if copy_hit == 0 {
                                    let words =
                                        [map.version, map.max_topics, map.metas, map.total_chunks, map.lease]
                                            .into_iter()
                                            .chain(map.config.clone().step_by(8))
                                            .collect::<Vec<_>>();
                                    words[rng.below(words.len() as u64) as usize]
                                } else {
                                    copy + 8 * rng.below(9) as usize
                                }
                            }
                        }
                    }
                };
                if counters.contains(&off) {
                    continue;
                }
                let w = raw.get::<AtomicU64>(off).unwrap();
                let new = match rng.below(3) {
                    0 => rng.next(),
                    _ => w.load(Ordering::SeqCst) ^ (1 << rng.below(64)),
                };
                // Not the token of a live attachment in a ring word: a
                // forged live claim cannot be told from a real one (a
                // documented limit; a bit flip of a full cell's tag makes
                // the token of slot 0, generation 1, often).
                let live = |v: u32| {
                    raw.attach_slots().iter().any(|a| {
                        a.alive
                            && raw
                                .slot_generation(a.slot)
                                .is_some_and(|g| v == tachyon::sync::Token::new(a.slot, g).raw())
                    })
                };
                if off >= arena && off < arena + used && (live(new as u32) || live((new >> 32) as u32)) {
                    continue;
                }
                w.store(new, Ordering::SeqCst);
                flips += 1;
                if !burst && flips % 16 == 0 {
                    std::thread::sleep(Duration::from_micros(200));
                }
            }
            println!("flips {flips}, of which in the header and directory {directory_flips}");
        }
        _ => {
            // Producers and consumers: any typed error is fine while the
            // damage goes on; a panic or a crash is not.
            let region = Region::open(&name).unwrap();
            let topics: Vec<_> = BROAD_TOPICS.iter().filter_map(|(t, ..)| region.topic(t).ok()).collect();
            let mut ok = 0u64;
            let mut errors = 0u64;
            while !stopped() {
                for topic in &topics {
                    let r = if role == "producer" {
                        topic.send(&rng.next().to_le_bytes(), Key(rng.next()), Some(Duration::from_millis(5)))
                    } else {
                        let p = rng.below(u64::from(topic.partitions())) as u32;
                        topic.receive(p, Some(Duration::from_millis(5))).map(drop)
                    };
                    match r {
                        Ok(()) => ok += 1,
                        Err(_) => errors += 1,
                    }
                }
            }
            println!("{role}: {ok} ok, {errors} errors");
        }
    }
    std::process::exit(0);
}

#[test]
fn a_region_flipped_at_random_serves_every_topic_again() {
    let name = unique("heal-broad");
    let _cleanup = RemoveRegion(name.clone());
    let side = unique("heal-broad-stop");
    let stop = Segment::create(&side, 64).unwrap();
    let region =
        Region::create(&name, RegionConfig::default().size(8 << 20).ring_arena(64 << 10).max_topics(2))
            .unwrap();
    for (t, partitions, capacity) in BROAD_TOPICS {
        region.create_topic(t, TopicConfig::default().partitions(partitions).capacity(capacity)).unwrap();
    }
    let seed = std::env::var("TACHYON_HEAL_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| std::process::id() as u64);
    println!("seed {seed} (TACHYON_HEAL_SEED replays the flipper)");
    let arg = |i: u64| format!("{name},{side},{}", seed.wrapping_add(i));
    let mut workers: Vec<_> = (0..2)
        .flat_map(|i| {
            [
                common::spawn("child_entry", "producer", &arg(10 + i)),
                common::spawn("child_entry", "consumer", &arg(20 + i)),
            ]
        })
        .collect();
    let mut flipper = common::spawn("child_entry", "flipper", &arg(0));
    // Meanwhile this process recovers every 10 ms, as the reaper would.
    let mut directory = 0;
    let started = std::time::Instant::now();
    let status = loop {
        if let Some(status) = flipper.try_wait().unwrap() {
            break status.code();
        }
        assert!(started.elapsed() < common::LIMIT, "the flipper did not finish");
        directory += region.recover().map_or(0, |r| r.directory);
        std::thread::sleep(Duration::from_millis(10));
    };
    assert_eq!(status, Some(0), "the flipper");
    println!("header and directory repairs during the damage: {directory}");
    stop.get::<AtomicU64>(0).unwrap().store(1, Ordering::SeqCst);
    for w in &mut workers {
        // None of them crashed, panicked or hung on the damage.
        assert_eq!(common::wait_child(w, common::LIMIT), Some(0), "a producer or consumer");
    }

    // A last burst with nobody working, so that recovery finds damage.
    let mut burst = common::spawn("child_entry", "burst", &arg(1));
    assert_eq!(common::wait_child(&mut burst, common::LIMIT), Some(0), "the burst");

    // The damage has stopped: recovery reports what it repaired, and every
    // partition of every topic serves again.
    let found = region.recover().unwrap();
    println!("recover: {found:?}");
    assert!(found.repaired + found.quarantined > 0, "{found:?}");
    let dump = || {
        let raw = Segment::builder(&name).kind(Kind::REGION).open().unwrap();
        let get = |off: usize| raw.get::<AtomicU64>(off).unwrap().load(Ordering::SeqCst);
        let map = tachyon::bus::RegionMap::new();
        let (arena, mut base) = (get(map.arena) as usize, 0);
        for (t2, partitions, capacity) in BROAD_TOPICS {
            let block = map.partition_block(capacity);
            for p2 in 0..partitions as usize {
                let at = arena + base + p2 * block;
                let cells: Vec<String> = (0..capacity as usize)
                    .map(|i| format!("{:x}", get(at + map.partition_header + map.cell_bytes * i)))
                    .collect();
                println!(
                    "{t2}/{p2}: tail {:x} head {:x} cells {cells:?}",
                    get(at),
                    get(at + map.partition_head)
                );
            }
            base += partitions as usize * block;
        }
    };
    for (t, partitions, _) in BROAD_TOPICS {
        let topic = region.topic(t).unwrap();
        let mut keys = vec![None; partitions as usize];
        for k in 0..1000u64 {
            keys[topic.partition_of(Key(k)) as usize].get_or_insert(k);
        }
        for (p, key) in keys.into_iter().enumerate() {
            for marker in 0..12u64 {
                let item = [t.as_bytes()[0], p as u8, marker as u8, 0x5a];
                let mut sent = false;
                let mut errors = vec![];
                for _ in 0..50 {
                    match topic.send(&item, Key(key.unwrap()), SHORT) {
                        Ok(()) => {
                            sent = true;
                            break;
                        }
                        // Full of what the workers left, or chunks of the
                        // dead still held: make room, reclaim.
                        Err(e) => {
                            errors.push(e.to_string());
                            let _ = topic.receive(p as u32, SHORT);
                            let _ = region.recover();
                        }
                    }
                }
                if !sent {
                    dump();
                }
                assert!(sent, "topic {t} partition {p}: no send after the damage stopped: {errors:?}");
                let mut seen = false;
                let mut got = vec![];
                for _ in 0..50 {
                    match topic.receive(p as u32, SHORT) {
                        Ok(m) if *m == item => {
                            seen = true;
                            break;
                        }
                        Ok(m) => got.push(format!("{:x?}", &m[..m.len().min(8)])),
                        Err(e) => got.push(e.to_string()),
                    }
                }
                if !seen {
                    println!("receives: {got:?}");
                }
                if !seen {
                    dump();
                }
                assert!(seen, "topic {t} partition {p}: marker {marker} not received");
            }
        }
    }
    let report = Region::inspect_name(&name).unwrap();
    let corrupt: u64 = report.topics.iter().map(|t| t.info.corrupt).sum();
    println!(
        "after: ring repairs {}, quarantined chunks {}, corrupt counters {corrupt}",
        report.ring_repairs, report.quarantined_chunks
    );
    // What `tyctl info` shows: every topic, the repairs in their CORRUPT
    // counters and in the total.
    assert_eq!(report.topics.len(), BROAD_TOPICS.len());
    assert!(report.ring_repairs > 0 && corrupt >= report.ring_repairs, "{report:?}");
    assert!(report.directory_repairs > 0, "{report:?}");
    assert_eq!(report.damaged_topics, 0, "{report:?}");
}

/// Found by the `ring_damage` fuzz target: an item whose length word was
/// overwritten with more than a node holds was refused as too long by
/// every read, for ever; it is dropped as damage now.
#[test]
fn an_item_length_past_the_node_size_is_dropped_not_refused_for_ever() {
    let name = unique("heal-len");
    let ring = CircularBuffer::create(&name, 4, 24).unwrap();
    let raw = RawRing::of_circular(&name);
    ring.write(b"", SHORT).unwrap();
    ring.write(b"b", SHORT).unwrap();
    raw.word(320 + 8).store(0x0d0d_0d0d_0d0d_0d0d, Ordering::SeqCst); // cell 0's length
    let mut buf = [0u8; 24];
    assert_eq!(ring.read(&mut buf, SHORT).unwrap(), 1);
    assert_eq!(buf[0], b'b');
    ring.write(b"c", SHORT).unwrap();
    raw.word(320 + 16 * 2 + 8).store(25, Ordering::SeqCst); // one past the node size
    ring.write(b"d", SHORT).unwrap();
    assert_eq!(ring.read_with(SHORT, |item| item.to_vec()).unwrap(), b"d");
    assert_eq!(raw.repairs(), 2);
}

/// Found by the `region_damage` fuzz target: a free-list head damaged into
/// a valid *empty* list hid every chunk of the class (loans failed with
/// `PoolExhausted` for ever); recovery sees FREE chunks no list holds and
/// rebuilds the list.
#[test]
fn a_head_damaged_into_an_empty_list_is_rebuilt_by_recovery() {
    let name = unique("heal-empty-head");
    let _cleanup = RemoveRegion(name.clone());
    let region = region(&name);
    let topic = region.create_topic("t", TopicConfig::default()).unwrap();
    let raw = Segment::builder(&name).kind(Kind::REGION).open().unwrap();
    let (_, _, count0) = pool_words(&raw, 0);
    raw.get::<AtomicU64>(tachyon::bus::RegionMap::new().free_lists)
        .unwrap()
        .store(0x4b4b_2b3b_0000_0000, Ordering::SeqCst); // empty, no announcement
    assert!(topic.try_loan(64).is_ok(), "a larger class still lends");
    region.recover().unwrap();
    assert_eq!(region.pool_stats().unwrap()[0].free as u64, count0);
    let loans: Vec<_> = (0..count0).map(|_| topic.try_loan(64).unwrap()).collect();
    assert_eq!(region.pool_stats().unwrap()[0].free, 0);
    drop(loans);
}

/// A segment header's fixed part (magic, version, kind, sizes, creator)
/// is sealed and kept twice: a damaged byte in either copy is read past
/// and repaired by the next `open`; damage to both is refused.
#[test]
fn a_damaged_segment_header_is_read_and_repaired_from_its_second_copy() {
    use std::os::unix::fs::FileExt;
    let name = unique("heal-seghdr");
    let ring = CircularBuffer::create(&name, 4, 64).unwrap();
    let path = Segment::builder(&name).kind(Kind::CIRCULAR).open().unwrap().path().to_owned();
    let file = std::fs::OpenOptions::new().read(true).write(true).open(&path).unwrap();
    let header = || {
        let mut b = [0u8; 512];
        file.read_exact_at(&mut b, 0).unwrap();
        b
    };
    let good = header();
    // segment/header.rs: kind at 12, total size at 16, data offset at 24,
    // slots at 44, the first copy's seal at 336, the second copy at 344.
    for at in [0, 9, 12, 16, 24, 44, 336, 344 + 12, 344 + 16, 424] {
        file.write_at(&[good[at] ^ 0x21], at as u64).unwrap();
        let other = CircularBuffer::open(&name).unwrap_or_else(|e| panic!("byte {at}: {e}"));
        assert_eq!(header(), good, "byte {at}: repaired by the open");
        other.write(b"x", SHORT).unwrap();
        let mut buf = [0u8; 64];
        assert_eq!(ring.read(&mut buf, SHORT).unwrap(), 1);
    }
    // Both copies of the kind damaged: refused (typed), not guessed.
    file.write_at(&[good[12] ^ 1], 12).unwrap();
    file.write_at(&[good[344 + 12] ^ 1], 344 + 12).unwrap();
    assert!(CircularBuffer::open(&name).is_err());
    file.write_at(&good, 0).unwrap();
    CircularBuffer::open(&name).unwrap();
}

/// A wait cell whose sleeper count another process erased: the notifier
/// sees nobody and skips the wake-up; the sleeper still notices its
/// condition (it never sleeps unbounded), so a wait without a timeout
/// returns instead of hanging for ever.
#[test]
fn a_waiter_whose_registration_was_erased_still_wakes() {
    use std::sync::atomic::AtomicU32;
    use tachyon::sync::{WaitCell, WaitPolicy};
    let name = unique("heal-wait");
    let seg = Segment::create(&name, 64).unwrap();
    let other = Segment::open(&name).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let cell = other.get::<WaitCell>(0).unwrap();
        let flag = other.get::<AtomicU32>(8).unwrap();
        let r = cell.wait_until(WaitPolicy::Futex, None, || (flag.load(Ordering::SeqCst) != 0).then_some(()));
        let _ = tx.send(r);
    });
    // WaitCell (sync/wait.rs): the futex word at 0, the sleeper count at 4.
    let sleepers = seg.get::<AtomicU32>(4).unwrap();
    let deadline = std::time::Instant::now() + common::LIMIT;
    while sleepers.load(Ordering::SeqCst) == 0 {
        assert!(std::time::Instant::now() < deadline, "the waiter never registered");
        std::thread::sleep(Duration::from_millis(1));
    }
    sleepers.store(0, Ordering::SeqCst); // the damage
    seg.get::<AtomicU32>(8).unwrap().store(1, Ordering::SeqCst);
    seg.get::<WaitCell>(0).unwrap().notify_all(); // sees no sleeper: no wake
    let r = rx.recv_timeout(Duration::from_secs(10)).expect("the waiter hangs");
    r.unwrap();
    // And its leaving did not wrap the erased count below zero.
    assert_eq!(sleepers.load(Ordering::SeqCst), 0);
}

/// Every object keeps its unchanging header words (its geometry) a second
/// time, sealed, in the segment header: words damaged in the object's own
/// header are restored by the next `open`, which then works as before.
#[test]
fn damaged_object_headers_are_restored_from_the_segment_header() {
    use tachyon::{BroadcastBuffer, RpcBuffer, SharedArray, SharedBuffer};
    let damage = |name: &str, kind: Kind, offsets: &[usize]| -> Vec<u64> {
        let raw = Segment::builder(name).kind(kind).open().unwrap();
        offsets
            .iter()
            .map(|&off| raw.get::<AtomicU64>(off).unwrap().swap(0xdead_beef_dead_beef, Ordering::SeqCst))
            .collect()
    };
    let check = |name: &str, kind: Kind, offsets: &[usize], old: &[u64]| {
        let raw = Segment::builder(name).kind(kind).open().unwrap();
        for (&off, &want) in offsets.iter().zip(old) {
            assert_eq!(
                raw.get::<AtomicU64>(off).unwrap().load(Ordering::SeqCst),
                want,
                "{kind:?} word {off}"
            );
        }
    };
    let mut buf = [0u8; 64];

    // CircularBuffer (circular.rs): node count at 0, node size at 8.
    let name = unique("heal-obj-ring");
    let ring = CircularBuffer::create(&name, 4, 64).unwrap();
    let old = damage(&name, Kind::CIRCULAR, &[0, 8]);
    let other = CircularBuffer::open(&name).unwrap();
    check(&name, Kind::CIRCULAR, &[0, 8], &old);
    other.write(b"ring", SHORT).unwrap();
    assert_eq!(ring.read(&mut buf, SHORT).unwrap(), 4);

    // BroadcastBuffer (broadcast.rs): node count, node size, overflow.
    let name = unique("heal-obj-bc");
    let bus = BroadcastBuffer::builder(&name).node_count(4).node_size(64).create().unwrap();
    let old = damage(&name, Kind::BROADCAST, &[0, 8, 16]);
    let other = BroadcastBuffer::open(&name).unwrap();
    check(&name, Kind::BROADCAST, &[0, 8, 16], &old);
    assert_eq!((other.node_count(), other.node_size()), (4, 64));
    drop(bus);

    // SharedBuffer (buffer.rs): size at 0.
    let name = unique("heal-obj-buf");
    let b = SharedBuffer::create(&name, 100).unwrap();
    let old = damage(&name, Kind::BUFFER, &[0]);
    assert_eq!(SharedBuffer::open(&name).unwrap().len(), 100);
    check(&name, Kind::BUFFER, &[0], &old);
    drop(b);

    // SharedArray (array.rs): length, element size, alignment, type.
    let name = unique("heal-obj-array");
    let a = SharedArray::<u64>::create(&name, 10).unwrap();
    let old = damage(&name, Kind::ARRAY, &[0, 8, 16, 24]);
    assert_eq!(SharedArray::<u64>::open(&name).unwrap().len(), 10);
    check(&name, Kind::ARRAY, &[0, 8, 16, 24], &old);
    drop(a);

    // RpcBuffer (rpc/control.rs): the control block's node count, node size,
    // protocol version and the server's largest message.
    let name = unique("heal-obj-rpc");
    let server =
        RpcBuffer::builder(&name).handler(|_, msg: &[u8]| Ok::<_, String>(msg.to_vec())).create().unwrap();
    let old = damage(&name, Kind::RPC, &[0, 8, 16, 80]);
    let client = RpcBuffer::open(&name).unwrap();
    check(&name, Kind::RPC, &[0, 8, 16, 80], &old);
    assert_eq!(client.request(b"rpc", Some(Duration::from_secs(5))).unwrap(), b"rpc");
    drop((client, server));
}

/// A broadcast node whose word or length another process damaged costs
/// that item only: the read that meets it says so (`Corrupt`) and steps
/// over it, the next read goes on and counts it in `missed`.
#[test]
fn a_damaged_broadcast_node_costs_one_item() {
    use tachyon::{BroadcastBuffer, Error, Overflow};
    let name = unique("heal-bc-node");
    let bus = BroadcastBuffer::create(&name, 8, 64, Overflow::Block).unwrap();
    let mut reader = bus.subscribe().unwrap();
    for item in [b"a", b"b", b"c", b"d", b"e"] {
        bus.write(item, SHORT).unwrap();
    }
    // broadcast.rs: the node words and lengths (16 bytes a node) after the
    // 128 16-byte reader entries from 320.
    let raw = Segment::builder(&name).kind(Kind::BROADCAST).open().unwrap();
    let cells = 320 + 128 * 16;
    raw.get::<AtomicU64>(cells + 16).unwrap().store(3, Ordering::SeqCst); // item 1: "being written"
    raw.get::<AtomicU64>(cells + 16 * 3 + 8).unwrap().store(65, Ordering::SeqCst); // item 3: too long
    let mut buf = [0u8; 64];
    let mut read = || reader.read(&mut buf, SHORT).map(|r| (buf[..r.len].to_vec(), r.missed));
    assert_eq!(read().unwrap(), (b"a".to_vec(), 0));
    assert!(matches!(read(), Err(Error::Corrupt { .. })));
    assert_eq!(read().unwrap(), (b"c".to_vec(), 1));
    assert!(matches!(read(), Err(Error::Corrupt { .. })));
    assert_eq!(read().unwrap(), (b"e".to_vec(), 1));
    // And the buffer goes on.
    bus.write(b"f", SHORT).unwrap();
    assert_eq!(read().unwrap(), (b"f".to_vec(), 0));
}

/// Both cursors of a ring whose node count is not a power of two damaged
/// at once: rebuilt from the cells (their positions recovered from each
/// cell's 32-bit sequence and its index), nothing queued lost, in order.
#[test]
fn both_cursors_of_a_ring_of_any_size_are_rebuilt() {
    for nodes in [3usize, 5, 6, 7, 12] {
        let name = unique("heal-cursors-any");
        let ring = CircularBuffer::create(&name, nodes, 16).unwrap();
        let raw = RawRing::of_circular(&name);
        let mut buf = [0u8; 16];
        let mut next = 0u64;
        let mut expect = 0u64;
        // Several laps, so that cells hold positions of different laps.
        for round in 0..4 {
            let queued = 1 + (round * 2) % nodes;
            for _ in 0..queued {
                ring.write(&next.to_le_bytes(), SHORT).unwrap();
                next += 1;
            }
            // Read all but one, so that one item is queued at the damage.
            while expect + 1 < next {
                assert_eq!(ring.read(&mut buf, SHORT).unwrap(), 8);
                assert_eq!(u64::from_le_bytes(buf[..8].try_into().unwrap()), expect, "{nodes} nodes");
                expect += 1;
            }
            let repairs = raw.repairs();
            raw.tail().store(0x5555_5555_5555 + round as u64, Ordering::SeqCst);
            raw.head().store(0x1234_5678_9abc, Ordering::SeqCst);
            ring.write(&next.to_le_bytes(), SHORT)
                .unwrap_or_else(|e| panic!("{nodes} nodes, round {round}: {e}"));
            next += 1;
            while expect < next {
                let n = ring
                    .read(&mut buf, SHORT)
                    .unwrap_or_else(|e| panic!("{nodes} nodes, round {round}: {e}"));
                assert_eq!(n, 8);
                assert_eq!(
                    u64::from_le_bytes(buf[..8].try_into().unwrap()),
                    expect,
                    "{nodes} nodes, round {round}"
                );
                expect += 1;
            }
            assert!(raw.repairs() > repairs, "{nodes} nodes, round {round}: no repair counted");
            assert_eq!(ring.try_read(&mut buf).unwrap(), None, "{nodes} nodes");
        }
    }
}

/// A free-list link damaged into another valid-looking link (skipping
/// chunks) or into 0 (cutting the list short) keeps the list working but
/// loses the chunks it no longer reaches; recovery walks the list, finds
/// them missing and rebuilds it: every chunk can be lent again.
#[test]
fn a_free_list_link_damaged_into_a_valid_one_is_found_and_rebuilt() {
    let name = unique("heal-link");
    let _cleanup = RemoveRegion(name.clone());
    let region = region(&name);
    let topic = region.create_topic("t", TopicConfig::default()).unwrap();
    let raw = Segment::builder(&name).kind(Kind::REGION).open().unwrap();
    // Class 0 (64-byte loans) gets a link that skips five chunks, class 1
    // (256-byte loans) one cut to 0. Each list was pushed in reverse at
    // create: chunk i links to chunk i + 1 (links are index + 1).
    for (what, class, size, at, skip_to) in [("skip", 0, 64, 2u64, Some(8u64)), ("cut", 1, 256, 4, None)] {
        let (metas, first, count) = pool_words(&raw, class);
        let link = raw.get::<std::sync::atomic::AtomicU32>(metas + 24 * (first + at) as usize + 8).unwrap();
        assert_eq!(link.load(Ordering::SeqCst) as u64, first + at + 2, "{what}: the list as created");
        link.store(skip_to.map_or(0, |to| (first + to + 1) as u32), Ordering::SeqCst);
        let found = region.recover().unwrap();
        assert_eq!(found.quarantined, 0, "{what}: {found:?}");
        // Every chunk of the class can be lent, each once.
        let loans: Vec<_> = (0..count)
            .map(|i| topic.try_loan(size).unwrap_or_else(|e| panic!("{what}: loan {i} of {count}: {e}")))
            .collect();
        let mut chunks: Vec<_> = loans.iter().map(|l| l.as_ptr() as usize).collect();
        chunks.sort_unstable();
        chunks.dedup();
        assert_eq!(chunks.len() as u64, count, "{what}");
    }
}

/// Holds a loan and a received message while the parent damages its
/// attach-slot record; `name` is `region,side`. Side words: 0 = progress
/// (1: holding, 2: beat), 8 = the parent's go (1: beat, 2: finish).
fn holder_role(arg: &str) {
    let (name, side) = arg.split_once(',').unwrap();
    let side = Segment::open(side).unwrap();
    let word = |off: usize| side.get::<AtomicU64>(off).unwrap();
    let wait_go = |v: u64| assert!(common::wait_for(common::LIMIT, || word(8).load(Ordering::SeqCst) >= v));
    let region = Region::open(name).unwrap();
    let topic = region.topic("t").unwrap();
    let mut loan = topic.loan(64, SHORT).unwrap();
    loan[..6].copy_from_slice(b"mine!!");
    loan.truncate(6);
    let held = topic.receive(0, SHORT).unwrap();
    word(0).store(1, Ordering::SeqCst);
    wait_go(1);
    region.heartbeat(); // restores its own slot record
    word(0).store(2, Ordering::SeqCst);
    wait_go(2);
    assert_eq!(&held[..], b"first");
    drop(held);
    loan.publish(Key(0), SHORT).unwrap();
    std::process::exit(0);
}

/// Another process damages a live process's attach-slot record (its
/// generation and state words, which say which attachment holds the
/// slot): the live process is still seen alive (the kernel's generation
/// lock says so), so recovery takes nothing from it, and its next
/// heartbeat restores the record.
#[test]
fn a_live_process_whose_slot_record_was_damaged_keeps_what_it_holds() {
    use std::os::unix::fs::FileExt;
    let name = unique("heal-slot");
    let _cleanup = RemoveRegion(name.clone());
    let side_name = unique("heal-slot-side");
    let side = Segment::create(&side_name, 64).unwrap();
    let word = |off: usize| side.get::<AtomicU64>(off).unwrap();
    let region = region(&name);
    let topic = region.create_topic("t", TopicConfig::default()).unwrap();
    let full = region.pool_stats().unwrap();
    topic.send(b"first", Key(0), SHORT).unwrap();
    let mut child = common::spawn("child_entry", "holder", &format!("{name},{side_name}"));
    assert!(common::wait_for(common::LIMIT, || word(0).load(Ordering::SeqCst) == 1), "the holder never held");
    let pid = child.id();
    let slot = region.segment().attach_slots().into_iter().find(|a| a.process.pid == pid).unwrap().slot;
    // segment/header.rs: the slot table at 512, 32 bytes a slot: state,
    // then generation (u32 each).
    let file = std::fs::OpenOptions::new().read(true).write(true).open(region.segment().path()).unwrap();
    let at = 512 + 32 * slot as u64;
    let mut before = [0u8; 8];
    file.read_exact_at(&mut before, at).unwrap();
    file.write_at(&[0u8; 4], at).unwrap(); // state: FREE
    file.write_at(&0x0012_3457u32.to_le_bytes(), at + 4).unwrap(); // another generation
                                                                   // Recovery takes nothing from the live holder (before: its loan back
                                                                   // to the pool while it writes, its message lost or delivered twice).
    let found = region.recover().unwrap();
    assert_eq!((found.total(), found.loans, found.held), (0, 0, 0), "{found:?}");
    // Its heartbeat restores the record.
    word(8).store(1, Ordering::SeqCst);
    assert!(common::wait_for(common::LIMIT, || word(0).load(Ordering::SeqCst) == 2));
    let mut after = [0u8; 8];
    file.read_exact_at(&mut after, at).unwrap();
    assert_eq!(after, before, "the slot record restored");
    word(8).store(2, Ordering::SeqCst);
    assert_eq!(common::wait_child(&mut child, common::LIMIT), Some(0), "the holder");
    assert_eq!(&*topic.receive(0, SHORT).unwrap(), &b"mine!!"[..]);
    region.recover().unwrap();
    assert_eq!(region.pool_stats().unwrap(), full);
}

// RPC packet headers: a request queued in its session's ring, damaged
// there before the server reads it (the server's process is stopped
// meanwhile, so that nothing reads the ring while the test writes it).

/// Nodes per direction of the packet tests' channel.
const RPC_NODES: usize = 16;
/// Bytes per node: 32 of header, 32 of payload a packet.
const RPC_NODE: usize = 64;

/// The server of the packet tests: `RPC_NODES` nodes of `RPC_NODE` bytes,
/// at most 4096 bytes a message, partial messages given up after 1 s (twice
/// its default timeout). It echoes, answers "stats" with its counters of
/// dropped packets and errors, and ends on "bye".
fn rpc_packet_server(name: &str) {
    use std::sync::atomic::AtomicBool;
    use std::sync::{Arc, Mutex};
    let cell: Arc<Mutex<Option<tachyon::RpcBuffer>>> = Arc::default();
    let bye = Arc::new(AtomicBool::new(false));
    let server = tachyon::RpcBuffer::builder(name)
        .node_count(RPC_NODES)
        .node_size(RPC_NODE)
        .max_message(4096)
        .default_timeout(Duration::from_millis(500))
        .handler({
            let (cell, bye) = (Arc::clone(&cell), Arc::clone(&bye));
            move |_id, msg: &[u8]| match msg {
                b"stats" => {
                    let server = cell.lock().unwrap();
                    // Not yet stored: an empty answer, and the client asks
                    // again (an error would count in the very `errors` it
                    // asks for).
                    let Some(s) = server.as_ref().map(|s| s.stats()) else { return Ok(Vec::new()) };
                    Ok::<_, &str>(
                        [s.corrupt_packets, s.errors].iter().flat_map(|v| v.to_le_bytes()).collect(),
                    )
                }
                b"bye" => {
                    bye.store(true, Ordering::SeqCst);
                    Ok(b"bye".to_vec())
                }
                _ => Ok(msg.to_vec()),
            }
        })
        .create()
        .unwrap();
    *cell.lock().unwrap() = Some(server);
    // Bounded, in case the test process died (it kills this one on its way
    // out otherwise).
    assert!(common::wait_for(Duration::from_secs(300), || bye.load(Ordering::SeqCst)), "no bye");
    let server = cell.lock().unwrap().take().unwrap();
    drop(server); // sends the answer to "bye" first
    std::process::exit(0);
}

/// A child process the test stops (SIGSTOP) and continues; continued and
/// killed if the test ends early, so that no stopped process is left.
struct Stoppable(std::process::Child);

impl Stoppable {
    fn signal(&self, signal: rustix::process::Signal) {
        rustix::process::kill_process(rustix::process::Pid::from_child(&self.0), signal).unwrap();
    }

    /// Stops the child and returns once every thread of it is stopped
    /// (`kill` only queues the signal).
    fn stop(&self) {
        self.signal(rustix::process::Signal::STOP);
        let tasks = format!("/proc/{}/task", self.0.id());
        let all_stopped = || {
            std::fs::read_dir(&tasks).unwrap().all(|t| {
                let stat = std::fs::read_to_string(t.unwrap().path().join("stat")).unwrap_or_default();
                // "pid (comm) S ...": the state after the last ')'.
                let state = stat.rsplit_once(')').map_or("", |(_, rest)| rest.trim_start());
                state.starts_with(['T', 't'])
            })
        };
        assert!(common::wait_for(common::LIMIT, all_stopped), "the server did not stop");
    }

    fn resume(&self) {
        self.signal(rustix::process::Signal::CONT);
    }
}

impl Drop for Stoppable {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            self.resume();
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// What one damaged request costs its caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cost {
    /// Nothing answers it: `Timeout`.
    Timeout,
    /// The server refuses it as too large: `Remote` (and counts an error).
    Refused,
    /// The server answers another id: `Timeout`, and the client drops the
    /// answer (`discarded_responses`).
    Misaddressed,
}

/// One damage to plant: in packet `packet` of a request of `len` bytes,
/// header word `word` (8 bytes each; see `rpc/packet.rs`: 0 = version,
/// type, count; 1 = message id; 2 = response-to; 3 = total length,
/// index) becomes `set(word)`. The server drops `dropped` packets for it
/// (counted in its `corrupt_packets`).
struct PacketDamage {
    what: &'static str,
    len: usize,
    packet: usize,
    word: usize,
    set: fn(u64) -> u64,
    cost: Cost,
    dropped: u64,
}

/// The low half of a header word (the count in word 0, the total length in
/// word 3).
const LOW: u64 = 0xffff_ffff;

const fn damage(
    what: &'static str,
    len: usize,
    packet: usize,
    word: usize,
    set: fn(u64) -> u64,
    cost: Cost,
    dropped: u64,
) -> PacketDamage {
    PacketDamage { what, len, packet, word, set, cost, dropped }
}

/// Single-packet requests, then the second and last packets of
/// three-packet ones (80 bytes: 32 + 32 + 16) mid-reassembly.
const PACKET_DAMAGE: [PacketDamage; 14] = [
    damage("version", 20, 0, 0, |w| (w & !0xff) | 9, Cost::Timeout, 1),
    damage("type", 20, 0, 0, |w| (w & !0xff00) | (7 << 8), Cost::Timeout, 1),
    damage("count 0", 20, 0, 0, |w| w & LOW, Cost::Timeout, 1),
    damage("index past the count", 20, 0, 3, |w| (w & LOW) | (1 << 32), Cost::Timeout, 1),
    damage("length past the payload", 20, 0, 3, |w| (w & !LOW) | 30, Cost::Timeout, 1),
    damage("length past the maximum", 20, 0, 3, |w| (w & !LOW) | 0x7fff_ffff, Cost::Refused, 0),
    damage("message id", 20, 0, 1, |w| w ^ (1 << 40), Cost::Misaddressed, 0),
    damage("2nd packet's count", 80, 1, 0, |w| (w & LOW) | (9 << 32), Cost::Timeout, 2),
    damage("2nd packet's index 0", 80, 1, 3, |w| w & LOW, Cost::Timeout, 2),
    damage("2nd packet's index 2", 80, 1, 3, |w| (w & LOW) | (2 << 32), Cost::Timeout, 2),
    damage("2nd packet's length", 80, 1, 3, |w| (w & !LOW) | 95, Cost::Timeout, 2),
    damage("2nd packet's length past the maximum", 80, 1, 3, |w| (w & !LOW) | 0x7fff_ffff, Cost::Timeout, 2),
    damage("2nd packet's message id", 80, 1, 1, |w| w ^ (1 << 40), Cost::Timeout, 2),
    // The partial message waits for a packet that never comes: given up
    // (and counted) when it is older than twice the server's default
    // timeout.
    damage("last packet's version", 80, 2, 0, |w| (w & !0xff) | 9, Cost::Timeout, 2),
];

/// A request whose packet header was damaged in the ring, before the
/// server read it, costs that request only: its caller gets a typed error
/// (`Timeout`, or `Remote` for a length past the maximum), the server
/// counts the dropped packets in `corrupt_packets`, a message damaged
/// mid-reassembly is dropped whole (a partial one left waiting is given
/// up after a while, and counted), and the next calls on the same channel
/// are answered.
#[test]
fn a_damaged_rpc_packet_header_costs_that_request_only() {
    use tachyon::{Error, RpcBuffer};
    const LONG: Option<Duration> = Some(common::LIMIT);
    let name = unique("heal-rpc-packet");
    let server = Stoppable(common::spawn("child_entry", "rpc-packet-server", &name));
    let mut client = None;
    assert!(
        common::wait_for(common::LIMIT, || {
            client = RpcBuffer::builder(&name).default_timeout(Duration::from_millis(300)).open().ok();
            client.is_some()
        }),
        "the server never came up"
    );
    let client = client.unwrap();
    // (corrupt_packets, errors) of the server; asked again while it has
    // not stored its handle yet.
    let stats = || {
        let mut got = None;
        let answered = common::wait_for(common::LIMIT, || {
            got = client.request(b"stats", LONG).ok().filter(|b| b.len() == 16);
            got.is_some()
        });
        assert!(answered, "no stats");
        let b = got.unwrap();
        (u64::from_le_bytes(b[..8].try_into().unwrap()), u64::from_le_bytes(b[8..16].try_into().unwrap()))
    };
    let works = |what: &str| {
        for len in [5, 100] {
            let msg: Vec<u8> = (0..len).map(|i| i as u8 ^ what.len() as u8).collect();
            let answer = client.request(&msg, LONG).unwrap_or_else(|e| panic!("after {what}: {e}"));
            assert_eq!(answer, msg, "after {what}");
        }
    };
    works("nothing");
    let (mut corrupt, mut errors) = stats();
    assert_eq!((corrupt, errors), (0, 0));

    // The ring the client writes its requests into (`rpc/session.rs`:
    // `NAME.rpc<session>.p2o`), and where its nodes are (`circular.rs`:
    // cells from 320, 16 bytes each; nodes from the next 64-byte line).
    let rings: Vec<String> =
        common::channel_files(&name).into_iter().filter(|f| f.ends_with(".p2o")).collect();
    assert_eq!(rings.len(), 1, "{rings:?}");
    let raw = RawRing::of_circular(&rings[0]);
    assert_eq!(raw.word(0).load(Ordering::SeqCst), RPC_NODES as u64);
    assert_eq!(raw.word(8).load(Ordering::SeqCst), RPC_NODE as u64);
    let nodes = (320 + 16 * RPC_NODES).next_multiple_of(64);
    let header = |pos: u64, word: usize| raw.word(nodes + (pos as usize % RPC_NODES) * RPC_NODE + 8 * word);

    for d in &PACKET_DAMAGE {
        let what = d.what;
        let discarded = client.stats().discarded_responses;
        server.stop();
        let tail = raw.tail().load(Ordering::SeqCst);
        let msg = vec![0x5a; d.len];
        // A request meant to time out waits the client's default 300 ms
        // (`request_async`); the one whose error must come back waits as
        // long as a loaded machine may take to resume the server (a
        // blocking `request` of its own on another thread).
        let result = std::thread::scope(|s| {
            let call = match d.cost {
                Cost::Refused => Err(s.spawn(|| client.request(&msg, LONG))),
                _ => Ok(client.request_async(&msg)),
            };
            // Queued, unread: the request's packets, as the client wrote them.
            let count = d.len.div_ceil(RPC_NODE - 32) as u64;
            let queued =
                common::wait_for(common::LIMIT, || raw.tail().load(Ordering::SeqCst) == tail + count);
            assert!(queued, "{what}: tail {} of {}", raw.tail().load(Ordering::SeqCst), tail + count);
            let pos = tail + d.packet as u64;
            assert_eq!(header(pos, 0).load(Ordering::SeqCst), 2 | 1 << 8 | count << 32, "{what}");
            assert_eq!(
                header(pos, 3).load(Ordering::SeqCst),
                d.len as u64 | (d.packet as u64) << 32,
                "{what}"
            );
            let word = header(pos, d.word);
            word.store((d.set)(word.load(Ordering::SeqCst)), Ordering::SeqCst);
            server.resume();
            match call {
                Ok(pending) => common::block_on(pending),
                Err(thread) => thread.join().unwrap(),
            }
        });
        match d.cost {
            Cost::Timeout | Cost::Misaddressed => {
                assert!(matches!(result, Err(Error::Timeout { .. })), "{what}: {result:?}")
            }
            Cost::Refused => assert!(matches!(result, Err(Error::Remote(_))), "{what}: {result:?}"),
        }
        if d.cost == Cost::Misaddressed {
            // The answer to an id nobody asked: dropped by the client.
            let dropped =
                common::wait_for(common::LIMIT, || client.stats().discarded_responses == discarded + 1);
            assert!(dropped, "{what}: {:?}", client.stats());
        }
        // The channel goes on, at once: the next calls are answered.
        works(what);
        // The server counted the dropped packets (a partial message left
        // waiting: once it gave it up).
        let want = (corrupt + d.dropped, errors + u64::from(d.cost == Cost::Refused));
        let mut got = stats();
        if got.0 < want.0 {
            let given_up = common::wait_for(common::LIMIT, || {
                got = stats();
                got.0 >= want.0
            });
            assert!(given_up, "{what}: server (corrupt_packets, errors) {got:?}, want {want:?}");
        }
        assert_eq!(got, want, "{what}: server (corrupt_packets, errors)");
        (corrupt, errors) = got;
    }
    assert_eq!(client.request(b"bye", LONG).unwrap(), b"bye");
    let mut server = server;
    assert_eq!(common::wait_child(&mut server.0, common::LIMIT), Some(0), "the server");
}

/// The server's own words in an RPC control block (its token, its close
/// flag), which only it writes: damaged by another process, they kept
/// every client away for as long as the server lived (each open failed
/// with `PeerDied` or `Closed`). The server restores them at its next
/// tick; the client connected at the damage loses at most its connection
/// (typed), and the next client is served.
#[test]
fn damaged_rpc_server_words_are_restored_by_the_server() {
    use std::sync::atomic::AtomicU32;
    use tachyon::{Error, RpcBuffer};
    const LONG: Option<Duration> = Some(common::LIMIT);
    let name = unique("heal-rpc-control");
    let server =
        RpcBuffer::builder(&name).handler(|_, msg: &[u8]| Ok::<_, String>(msg.to_vec())).create().unwrap();
    let open = || RpcBuffer::builder(&name).connect_timeout(LONG).open();
    let raw = Segment::builder(&name).kind(Kind::RPC).open().unwrap();
    // rpc/control.rs: the server's token at 64, its close flag at 72.
    for (what, off, value) in
        [("token", 64, 0), ("token", 64, 0x4000_0001), ("close flag", 72, 1), ("close flag", 72, 0xdead)]
    {
        let word = raw.get::<AtomicU32>(off).unwrap();
        let client = open().unwrap_or_else(|e| panic!("{what} {value:#x}: {e}"));
        assert_eq!(client.request(b"before", LONG).unwrap(), b"before");
        let good = word.swap(value, Ordering::SeqCst);
        assert!(
            common::wait_for(common::LIMIT, || word.load(Ordering::SeqCst) == good),
            "{what} {value:#x}: not restored"
        );
        // The client connected meanwhile: answered, or told (typed) that
        // its connection is over if it looked in between.
        match client.request(b"during", LONG) {
            Ok(answer) => assert_eq!(answer, b"during"),
            Err(e) => assert!(matches!(e, Error::Closed | Error::PeerDied), "{what} {value:#x}: {e}"),
        }
        drop(client);
        let next = open().unwrap_or_else(|e| panic!("{what} {value:#x}: the next client: {e}"));
        assert_eq!(next.request(b"after", LONG).unwrap(), b"after", "{what} {value:#x}");
    }
    drop(server);
}

// Lock words that are no token: the writer word of the `RwLock` of a
// `SharedArray` (at 256 of its data area) and of a `SharedBuffer` (at 64),
// and the writers' turn (`Mutex`) of a `BroadcastBuffer` (at 64).

/// Holder bits that name no attachment (slot 3, generation 0), with the
/// lock's CONTENDED flag set as well.
const NO_TOKEN: [u32; 2] = [3, 0x8000_007f];

/// Plants `value` in the lock words of the three objects.
fn damage_lock_words(array: &str, buffer: &str, bc: &str, value: u32) {
    for (name, kind, off) in
        [(array, Kind::ARRAY, 256), (buffer, Kind::BUFFER, 64), (bc, Kind::BROADCAST, 64)]
    {
        let raw = Segment::builder(name).kind(kind).open().unwrap();
        raw.get::<std::sync::atomic::AtomicU32>(off).unwrap().store(value, Ordering::SeqCst);
    }
}

/// A child process that uses the three objects whose lock words are
/// damaged: it gets each lock (told the data may be half-updated where the
/// guard says so) and does its work.
fn lock_user(args: &common::Args) {
    use tachyon::{BroadcastBuffer, SharedArray, SharedBuffer};
    let array = SharedArray::<u64>::open(args.str("array")).unwrap();
    let mut guard = array.write_lock().unwrap();
    assert!(guard.owner_died(), "a damaged lock word is reported as a holder that died");
    guard[0] = args.get("value");
    drop(guard);
    SharedBuffer::open(args.str("buffer")).unwrap().write_bytes(0, b"heal").unwrap();
    BroadcastBuffer::open(args.str("bc")).unwrap().write(b"lock", SHORT).unwrap();
}

/// A lock word damaged into holder bits that are no token is taken over by
/// the next locker (reported as `owner_died`), in another process, and the
/// objects work again; before, every call returned `Corrupt` until the
/// object was recreated.
#[test]
fn a_lock_word_that_is_no_token_is_taken_over_by_the_next_locker() {
    use tachyon::{BroadcastBuffer, Overflow, SharedArray, SharedBuffer};
    let (array_name, buffer_name, bc_name) =
        (unique("heal-lock-array"), unique("heal-lock-buffer"), unique("heal-lock-bc"));
    let array = SharedArray::<u64>::create(&array_name, 4).unwrap();
    let buffer = SharedBuffer::create(&buffer_name, 64).unwrap();
    let bus = BroadcastBuffer::create(&bc_name, 4, 16, Overflow::Block).unwrap();
    let mut reader = bus.subscribe().unwrap();
    let mut buf = [0u8; 16];
    for (round, value) in NO_TOKEN.into_iter().enumerate() {
        // Another process does the work over the damage.
        damage_lock_words(&array_name, &buffer_name, &bc_name, value);
        let args = common::Args::name(&array_name)
            .with("array", &array_name)
            .with("buffer", &buffer_name)
            .with("bc", &bc_name)
            .with("value", 40 + round);
        let mut child = common::spawn("child_entry", "lock-user", args);
        assert_eq!(common::wait_child(&mut child, common::LIMIT), Some(0), "the lock user, {value:#x}");
        let guard = array.read_lock().unwrap();
        assert!(!guard.owner_died(), "the child's normal release cleared the report");
        assert_eq!(guard[0], 40 + round as u64);
        drop(guard);
        let mut bytes = [0u8; 4];
        buffer.read_bytes(0, &mut bytes).unwrap();
        assert_eq!(&bytes, b"heal");
        let got = reader.read(&mut buf, SHORT).unwrap();
        assert_eq!(&buf[..got.len], b"lock");

        // And in this process, through the readers' side of the rw-locks.
        damage_lock_words(&array_name, &buffer_name, &bc_name, value);
        assert!(array.read_lock().unwrap().owner_died(), "a reader clears the damaged word");
        assert!(array.write_lock().unwrap().owner_died(), "until a writer releases normally");
        assert!(!array.read_lock().unwrap().owner_died());
        buffer.write_bytes(0, b"more").unwrap();
        buffer.read_bytes(0, &mut bytes).unwrap();
        assert_eq!(&bytes, b"more");
        bus.write(b"again", SHORT).unwrap();
        let got = reader.read(&mut buf, SHORT).unwrap();
        assert_eq!(&buf[..got.len], b"again");
    }
}

// A `BroadcastBuffer`'s words (broadcast.rs): `tail` at 128, the reader
// entries (owner, then cursor at 8) 16 bytes each from 320.

/// The raw `tail` of a broadcast buffer, and a reader entry's cursor.
fn bc_word(name: &str, off: usize) -> (Segment, usize) {
    (Segment::builder(name).kind(Kind::BROADCAST).open().unwrap(), off)
}

/// `tail` moved back (another process wrote a smaller value): a reader
/// that finds it behind its own cursor moves it forward again, from its
/// cursor and the node words that witness the items written, and items
/// written by another process reach it again. Before, readers saw nothing
/// until the writers had written up to the old position again.
#[test]
fn a_broadcast_tail_moved_back_is_moved_forward_again() {
    use tachyon::{BroadcastBuffer, Error, Overflow};
    let name = unique("heal-bc-tail");
    let bus = BroadcastBuffer::create(&name, 8, 16, Overflow::Block).unwrap();
    let mut reader = bus.subscribe().unwrap();
    // A reader that lags: it is at 96 when the damage comes.
    let mut lagging = bus.subscribe().unwrap();
    let mut buf = [0u8; 16];
    for i in 0..100u64 {
        bus.write(&[i as u8], SHORT).unwrap();
        assert_eq!(reader.read(&mut buf, SHORT).unwrap().len, 1);
        if i < 96 {
            lagging.read(&mut buf, SHORT).unwrap();
        }
    }
    let (raw, off) = bc_word(&name, 128);
    let tail = raw.get::<AtomicU64>(off).unwrap();
    for round in 0..2u8 {
        let real = bus.written();
        tail.store(3, Ordering::SeqCst);
        if round == 1 {
            // A writer came first: it wrote at the damaged position (that
            // item is lost to readers past it, and nothing else).
            bus.write(b"stale", SHORT).unwrap();
        }
        // The reader finds `tail` behind it, repairs it, then waits.
        assert!(matches!(reader.read(&mut buf, SHORT), Err(Error::Timeout { .. })));
        assert_eq!(bus.written(), real, "round {round}: moved forward to where the writers were");
        // Another process writes; both readers get its items.
        let mut child = common::spawn("child_entry", "bc-writer", common::Args::name(&name).with("items", 2));
        assert_eq!(common::wait_child(&mut child, common::LIMIT), Some(0), "the writer");
        for want in 0..2u8 {
            let got = reader.read(&mut buf, SHORT).unwrap();
            assert_eq!((got.len, buf[0], got.missed), (1, want, 0), "round {round}");
        }
        if round == 0 {
            // The lagging reader reads on from 96, nothing missed.
            for want in [96u8, 97, 98, 99, 0, 1] {
                let got = lagging.read(&mut buf, SHORT).unwrap();
                assert_eq!((buf[0], got.missed), (want, 0));
            }
        }
    }
}

/// A reader entry's cursor damaged low (`Overflow::Block`): writers would
/// wait for that reader, and the reader, waiting for an item, never stored
/// its cursor again. Now a reader stores its entry (cursor and owner) again
/// before and while it waits, and a writer in another process goes on.
#[test]
fn a_broadcast_reader_entry_damaged_is_stored_again_by_its_reader() {
    use tachyon::{BroadcastBuffer, Overflow};
    const LONG: Option<Duration> = Some(common::LIMIT);
    let name = unique("heal-bc-cursor");
    let bus = BroadcastBuffer::create(&name, 4, 16, Overflow::Block).unwrap();
    let mut reader = bus.subscribe().unwrap();
    let mut buf = [0u8; 16];
    for i in 0..4u8 {
        bus.write(&[i], SHORT).unwrap();
        assert_eq!(reader.read(&mut buf, SHORT).unwrap().len, 1);
    }
    // The only reader has entry 0: its cursor (4) damaged to 0.
    let (raw, off) = bc_word(&name, 320 + 8);
    raw.get::<AtomicU64>(off).unwrap().store(0, Ordering::SeqCst);
    assert!(matches!(bus.try_write(b"x"), Err(tachyon::Error::Full { .. })), "the damage blocks writers");
    // A writer in another process (it waits for room), while this reader
    // waits for items.
    let mut child = common::spawn("child_entry", "bc-writer", common::Args::name(&name).with("items", 6));
    for want in 0..6u8 {
        let got = reader.read(&mut buf, LONG).unwrap_or_else(|e| panic!("item {want}: {e}"));
        assert_eq!((got.len, buf[0], got.missed), (1, want, 0));
    }
    assert_eq!(common::wait_child(&mut child, common::LIMIT), Some(0), "the writer");
    assert_eq!(raw.get::<AtomicU64>(off).unwrap().load(Ordering::SeqCst), 10);

    // The entry's owner word damaged into no token: a blocked writer would
    // drop the entry, and overwrite what the reader has not read. The
    // reader, about to wait, takes its entry back.
    let owner = raw.get::<std::sync::atomic::AtomicU32>(320).unwrap();
    let me = owner.swap(3, Ordering::SeqCst);
    assert!(matches!(reader.read(&mut buf, SHORT), Err(tachyon::Error::Timeout { .. })));
    assert_eq!(owner.load(Ordering::SeqCst), me, "taken back");
    let mut child = common::spawn("child_entry", "bc-writer", common::Args::name(&name).with("items", 6));
    for want in 0..6u8 {
        let got = reader.read(&mut buf, LONG).unwrap_or_else(|e| panic!("item {want}: {e}"));
        assert_eq!((got.len, buf[0], got.missed), (1, want, 0));
    }
    assert_eq!(common::wait_child(&mut child, common::LIMIT), Some(0), "the writer");
}
