//! The chaos test of the bus: producer and consumer processes on a topic
//! with four partitions while a driver SIGKILLs a random one of them at a
//! random moment, restarts it, and repeats; once on an at-most-once topic,
//! once on an at-least-once one. Checks:
//!
//! * after each kill, the survivors make progress on every partition within
//!   a generous bound (no stall: dead claimants of ring cells are repaired by
//!   whoever waits on them, dead holders' chunks return to the pool);
//! * at the end, after draining and one `Region::recover()`: no chunk leaked
//!   (every size class back to its full free count; a pool audit walks the
//!   free lists and describes every chunk missing); every message
//!   acknowledged as published was delivered (at most once: except at most
//!   one per consumer killed, as a consumer holds one message at a time; at
//!   least once: all of them); nothing was delivered twice (at least once:
//!   at most one duplicate per consumer killed); per-key order held for
//!   what each consumer saw (at least once: a message delivered again comes
//!   after the ones published meanwhile); every payload arrived intact.
//!
//! The same with consumer groups (`chaos_groups_*`): a topic without its
//! default group, two groups of two consumer processes each; every group
//! is checked as above on its own (each must see every acknowledged
//! message, in order per key, its losses and duplicates bounded by the
//! kills of its own consumers), and the pool is full at the end (a chunk
//! goes back once both groups released it).
//!
//! The short form runs in the normal suite. The long form:
//!
//! ```text
//! TACHYON_CHAOS_KILLS=5000 cargo test --release -p tachyon-shm --test chaos -- --nocapture
//! TACHYON_CHAOS_KILLS=1000 cargo test --release -p tachyon-shm --test chaos chaos_groups -- --nocapture
//! ```
//!
//! Knobs (environment): `TACHYON_CHAOS_KILLS` (kills per test, default
//! 200: some 10 s in a debug build), `TACHYON_CHAOS_SECS` (a time limit for the killing phase, default
//! 1800), `TACHYON_CHAOS_SEED` (replays the driver's choices of victim and
//! delay; the processes' timing still varies), `TACHYON_CHAOS_VICTIMS`
//! (`all`, `producers` or `consumers`), `TACHYON_CHAOS_SEQ_CAP` (sequence
//! numbers per producer and key the bookkeeping holds; sized from the kill
//! count), `TACHYON_CHAOS_GDB=1` (on a failure, print every thread's stack
//! of the children still running, through `gdb`).
//!
//! Bookkeeping lives in a side segment of `AtomicU64`s. Each producer slot
//! numbers messages per key across its incarnations (the incarnation is in
//! each message too): an incarnation reserves a sequence number (so that no
//! later incarnation reuses it) before publishing it, and sets its bit in
//! the acknowledged bitmap once `send` or `publish` returned `Ok`. Consumers
//! set a bit in their group's delivered bitmap per message received (a bit
//! already set is a duplicate).
#![cfg(not(tachyon_loom))]

mod common;

use common::chaos::{drained, env_u64, fail_on, mix, orphaned, reserved, seed_for, Rng};
use common::fleet::{report, Side, Task};

use common::{unique, wait_for, RemoveRegion};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::SeqCst};
use std::time::{Duration, Instant};
use tachyon::bus::{Delivery, Group, Key, Message, Region, RegionConfig, Topic, TopicConfig};
use tachyon::sync::{Liveness, Token};
use tachyon::Error;

const ENTRY: &str = "child_entry";
const TOPIC: &str = "chaos";
const PARTITIONS: u32 = 4;
const PRODUCERS: usize = 2;
/// Consumer processes per group.
const CONSUMERS: usize = 2;
/// Consumer groups of the groups tests (named `g0`, `g1`).
const GROUPS: usize = 2;
/// Keys in use: two per partition.
const KEYS: usize = 8;
/// How long the survivors of a kill may take to make progress.
const PROGRESS_LIMIT: Duration = Duration::from_secs(10);
/// Progress slower than this after a kill is reported (not a failure).
const SLOW_PROGRESS: Duration = Duration::from_millis(500);
/// Bound for anything else a phase waits for.
const PHASE_LIMIT: Duration = Duration::from_secs(30);
/// Timeout of a producer's loan or publish; it retries after one.
const PUBLISH_TIMEOUT: Option<Duration> = Some(Duration::from_millis(100));
const HEADER: usize = 48;

// Exit codes of children.
const EXIT_OK: i32 = 0;
const EXIT_SEQ_FULL: i32 = 3;
const EXIT_ORPHAN: i32 = 4;

// Counters in the side segment (word indices).
const STOP_PRODUCERS: usize = 0;
const STOP_CONSUMERS: usize = 1;
const BAD: usize = 5;
const ACKED: usize = 6;
const ERRORS: usize = 7;
/// Counters per group (the default group is group 0): `GROUP_WORDS * g +`
/// one of the next four.
const GROUP_WORDS: usize = 8;
const DELIVERED: usize = 8;
const DUPLICATES: usize = 9;
const ORDER: usize = 10;
/// Messages delivered per partition: `PER_PARTITION + p`.
const PER_PARTITION: usize = 12;
/// Next sequence number per (producer slot, key): `NEXT + slot * KEYS + k`.
const NEXT: usize = DELIVERED + GROUP_WORDS * GROUPS;
/// Incarnation log: `LOG + inc` = role << 56 | slot << 48 | token.
const LOG: usize = NEXT + PRODUCERS * KEYS;

// ---------------------------------------------------------------------------
// Small helpers

/// Two keys per partition, the same in every process.
fn keys_of(topic: &Topic) -> [u64; KEYS] {
    let mut keys = [0u64; KEYS];
    let mut per = [0usize; PARTITIONS as usize];
    let mut n = 0;
    let mut k = 0u64;
    while n < KEYS {
        let p = topic.partition_of(Key(k)) as usize;
        if per[p] < KEYS / PARTITIONS as usize {
            per[p] += 1;
            keys[n] = k;
            n += 1;
        }
        k += 1;
    }
    keys
}

/// The length of message `seq` of producer slot `slot` and key index `k`:
/// mostly small (the 64 B to 4 KiB classes), one in 64 large (64 KiB to
/// 256 KiB: the scarce top classes, so that loans sometimes wait for the
/// pool).
fn msg_len(slot: u64, k: u64, seq: u64) -> usize {
    let h = mix(slot << 56 ^ k << 48 ^ seq);
    if h % 64 == 0 {
        (64 << 10) + (h >> 8) as usize % (192 << 10)
    } else {
        HEADER + (h >> 8) as usize % 3000
    }
}

/// Header words: slot, incarnation's generation, key index, seq, length,
/// check. The rest of the message is one byte value derived from the check.
fn header(slot: u64, gen: u64, k: u64, seq: u64) -> [u64; 6] {
    let len = msg_len(slot, k, seq) as u64;
    let check = mix(slot ^ mix(gen ^ mix(k ^ mix(seq ^ mix(len)))));
    [slot, gen, k, seq, len, check]
}

fn header_bytes(h: &[u64; 6]) -> [u8; HEADER] {
    let mut b = [0u8; HEADER];
    for (i, w) in h.iter().enumerate() {
        b[i * 8..i * 8 + 8].copy_from_slice(&w.to_le_bytes());
    }
    b
}

fn pad_byte(check: u64) -> u8 {
    (check >> 24) as u8
}

// ---------------------------------------------------------------------------
// The side segment

/// Role names, indexed by the role number in the incarnation log.
const ROLES: [&str; 3] = ["?", "producer", "consumer"];

/// Words of the side segment: counters, the incarnation log, then the
/// acked bitmap and one delivered bitmap per group.
fn side_words(cap: u64, max_inc: u64) -> usize {
    LOG + max_inc as usize + (1 + GROUPS) * (PRODUCERS * KEYS) * (cap as usize / 64)
}

/// Counter `counter` (`DELIVERED`, `DUPLICATES`, `ORDER`, `PER_PARTITION +
/// p`) of group `g`.
fn of(g: usize, counter: usize) -> usize {
    counter + GROUP_WORDS * g
}

/// The next sequence number of producer slot `slot` and key index `k`.
fn next_seq(side: &Side, slot: usize, k: usize) -> &AtomicU64 {
    side.word(NEXT + slot * KEYS + k)
}

/// Word and mask of the bit of (slot, k, seq) in bitmap 0 (acked) or
/// `1 + g` (delivered to group `g`).
fn bit(side: &Side, map: usize, slot: usize, k: usize, seq: u64) -> (&AtomicU64, u64) {
    let words_per_map = PRODUCERS * KEYS * (side.cap as usize / 64);
    let bit = (slot * KEYS + k) as u64 * side.cap + seq;
    let i = LOG + side.max_inc as usize + map * words_per_map + (bit / 64) as usize;
    (side.word(i), 1 << (bit % 64))
}

/// Messages delivered per partition to group `g`.
fn parts(side: &Side, g: usize) -> [u64; PARTITIONS as usize] {
    std::array::from_fn(|p| side.get(of(g, PER_PARTITION + p)))
}

/// Messages delivered per partition to each of `groups` groups.
fn all_parts(side: &Side, groups: usize) -> Vec<u64> {
    (0..groups).flat_map(|g| parts(side, g)).collect()
}

/// The consumer groups of a test: 1 (the topic's default group) or
/// `GROUPS` named ones.
fn groups_of(topic: &Topic) -> usize {
    if topic.config().default_group_enabled() {
        1
    } else {
        GROUPS
    }
}

/// Where a consumer receives from: the topic's default group or a named
/// group.
enum Source {
    Topic(Topic),
    Group(Group),
}

impl Source {
    fn try_receive(&self, p: u32) -> tachyon::Result<Option<Message>> {
        match self {
            Source::Topic(t) => t.try_receive(p),
            Source::Group(g) => g.try_receive(p),
        }
    }
    fn receive(&self, p: u32, timeout: Option<Duration>) -> tachyon::Result<Message> {
        match self {
            Source::Topic(t) => t.receive(p, timeout),
            Source::Group(g) => g.receive(p, timeout),
        }
    }
    fn depth(&self, p: u32) -> tachyon::Result<usize> {
        match self {
            Source::Topic(t) => t.depth(p),
            Source::Group(g) => g.depth(p),
        }
    }
}

/// Group `g` of the test's topic (the default group in a test without
/// named groups).
fn source(topic: &Topic, g: usize) -> Source {
    if groups_of(topic) == 1 {
        Source::Topic(topic.clone())
    } else {
        Source::Group(topic.join_group(&format!("g{g}")).unwrap())
    }
}

// ---------------------------------------------------------------------------
// Children

#[test]
fn child_entry() {
    let Some((role, args)) = common::role() else { return };
    let a = Task::from_args(&args);
    let side = Side::open(&a, LOG);
    let region = Region::open(&a.target).unwrap();
    let topic = region.topic(TOPIC).unwrap();
    let token = u64::from(region.segment().token().raw());
    let code = match role.as_str() {
        "producer" => {
            side.log(a.inc).store(1 << 56 | (a.slot as u64) << 48 | token, SeqCst);
            producer(&topic, &side, &a)
        }
        "consumer" => {
            side.log(a.inc).store(2 << 56 | (a.slot as u64) << 48 | token, SeqCst);
            consumer(&topic, &side, &a)
        }
        other => panic!("unknown role {other}"),
    };
    std::process::exit(code);
}

fn producer(topic: &Topic, side: &Side, a: &Task) -> i32 {
    let keys = keys_of(topic);
    let mut rng = Rng(a.seed ^ mix(a.inc + 1));
    let slot = a.slot as u64;
    let mut n = 0u64;
    loop {
        if side.get(STOP_PRODUCERS) != 0 || (n % 256 == 0 && orphaned(a.parent)) {
            return if orphaned(a.parent) { EXIT_ORPHAN } else { EXIT_OK };
        }
        let k = rng.below(KEYS as u64) as usize;
        let key = keys[k];
        let next = next_seq(side, a.slot, k);
        let seq = next.load(SeqCst);
        if seq >= side.cap {
            return EXIT_SEQ_FULL;
        }
        // Reserve it first: a later incarnation never reuses it, whether or
        // not this one dies before, during or after publishing it.
        next.store(seq + 1, SeqCst);
        let h = header(slot, a.gen, k as u64, seq);
        let len = h[4] as usize;
        let head = header_bytes(&h);
        let pad = pad_byte(h[5]);
        let mut message = Vec::new();
        loop {
            let r = if n % 2 == 0 {
                // The copy path.
                if message.is_empty() {
                    message.extend_from_slice(&head);
                    message.resize(len, pad);
                }
                topic.send(&message, Key(key), PUBLISH_TIMEOUT)
            } else {
                // The loan path: built in place.
                match topic.loan(len, PUBLISH_TIMEOUT) {
                    Ok(mut loan) => {
                        loan[..HEADER].copy_from_slice(&head);
                        loan[HEADER..].fill(pad);
                        loan.publish(Key(key), PUBLISH_TIMEOUT)
                    }
                    Err(e) => Err(e),
                }
            };
            match r {
                Ok(()) => break,
                // Nothing was published; try the same message again.
                Err(Error::Timeout { .. } | Error::PoolExhausted { .. }) => {
                    if side.get(STOP_PRODUCERS) != 0 || orphaned(a.parent) {
                        return EXIT_OK;
                    }
                }
                // Nothing was published (a repaired claim included): count
                // it, and try the same message again.
                Err(e) => {
                    let who = format!("producer {}/{}", a.slot, a.gen);
                    report(side, ERRORS, &who, &format!("publishing key {k} seq {seq}: {e}"));
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        }
        let (w, m) = bit(side, 0, a.slot, k, seq);
        w.fetch_or(m, SeqCst);
        side.add(ACKED);
        n += 1;
    }
}

fn consumer(topic: &Topic, side: &Side, a: &Task) -> i32 {
    let keys = keys_of(topic);
    // The last sequence number this consumer saw per (producer slot, key).
    let mut last = vec![None::<u64>; PRODUCERS * KEYS];
    let g = a.slot / CONSUMERS;
    let from = source(topic, g);
    let who = format!("consumer {}/{} of group {g}", a.slot, a.gen);
    let mut p = 0u32;
    let mut rounds = 0u64;
    loop {
        if side.get(STOP_CONSUMERS) != 0 {
            return EXIT_OK;
        }
        rounds += 1;
        if rounds % 256 == 0 && orphaned(a.parent) {
            return EXIT_ORPHAN;
        }
        let mut got_any = false;
        for _ in 0..PARTITIONS {
            p = (p + 1) % PARTITIONS;
            let r = match from.try_receive(p) {
                // Nothing ready but something claimed: a producer is filling
                // the cell, or died doing so. Wait a little; a blocked
                // receive repairs a dead claimant's cell.
                Ok(None) if from.depth(p).unwrap_or(0) > 0 => {
                    from.receive(p, Some(Duration::from_millis(3))).map(Some)
                }
                r => r,
            };
            match r {
                Ok(Some(msg)) => {
                    got_any = true;
                    // One message in hand at a time: receive, record, drop.
                    record(topic, side, g, &who, &keys, p, &msg, &mut last);
                    drop(msg);
                }
                Ok(None) | Err(Error::Timeout { .. }) => {}
                // The library drops a corrupt descriptor and goes on; so
                // does the consumer, counting it (the driver fails on it).
                Err(e) => report(side, ERRORS, &who, &format!("receiving from partition {p}: {e}")),
            }
        }
        if !got_any {
            p = (p + 1) % PARTITIONS;
            match from.receive(p, Some(Duration::from_millis(5))) {
                Ok(msg) => {
                    record(topic, side, g, &who, &keys, p, &msg, &mut last);
                    drop(msg);
                }
                Err(Error::Timeout { .. }) => {}
                Err(e) => report(side, ERRORS, &who, &format!("receiving from partition {p}: {e}")),
            }
        }
    }
}

/// Checks a received message and records it as delivered to group `g`.
#[allow(clippy::too_many_arguments)]
fn record(
    topic: &Topic,
    side: &Side,
    g: usize,
    who: &str,
    keys: &[u64; KEYS],
    p: u32,
    msg: &Message,
    last: &mut [Option<u64>],
) {
    if msg.len() < HEADER {
        report(side, BAD, who, &format!("a {}-byte message on partition {p} ({msg:?})", msg.len()));
        return;
    }
    let w: Vec<u64> = msg[..HEADER].chunks(8).map(|c| u64::from_le_bytes(c.try_into().unwrap())).collect();
    let (slot, gen, k, seq) = (w[0], w[1], w[2], w[3]);
    let ok = slot < PRODUCERS as u64
        && k < KEYS as u64
        && seq < side.cap
        && w[..] == header(slot, gen, k, seq)[..]
        && msg.len() == w[4] as usize
        && topic.partition_of(Key(keys[k as usize])) == p
        && msg[HEADER..] == vec![pad_byte(w[5]); msg.len() - HEADER][..];
    if !ok {
        let what = format!("damaged or misrouted message on partition {p} ({msg:?}): header {w:?}");
        report(side, BAD, who, &what);
        return;
    }
    let (slot, k) = (slot as usize, k as usize);
    let i = slot * KEYS + k;
    if let Some(before) = last[i].filter(|&l| l >= seq) {
        report(side, of(g, ORDER), who, &format!("order: producer {slot} key {k}: seq {seq} after {before}"));
    }
    last[i] = Some(seq);
    let (word, mask) = bit(side, 1 + g, slot, k, seq);
    if word.fetch_or(mask, SeqCst) & mask != 0 {
        report(side, of(g, DUPLICATES), who, &format!("duplicate: producer {slot}/{gen} key {k} seq {seq}"));
    }
    side.add(of(g, DELIVERED));
    side.add(of(g, PER_PARTITION + p as usize));
}

// ---------------------------------------------------------------------------
// The driver

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Producer,
    Consumer,
}

impl Role {
    fn name(self) -> &'static str {
        match self {
            Role::Producer => "producer",
            Role::Consumer => "consumer",
        }
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

type Fleet = common::fleet::Fleet<Role>;

#[derive(Default)]
struct Kills {
    producers: u64,
    /// Per group.
    consumers: [u64; GROUPS],
}

impl Kills {
    fn total(&self) -> u64 {
        self.producers + self.consumers.iter().sum::<u64>()
    }
}

fn state_report(region: &Region, topic: &Topic, side: &Side, fleet: &mut Fleet) -> String {
    let mut s = String::new();
    for g in 0..groups_of(topic) {
        let from = source(topic, g);
        let depths: Vec<String> = (0..PARTITIONS)
            .map(|p| from.depth(p).map_or_else(|e| e.to_string(), |d| d.to_string()))
            .collect();
        s += &format!("  group {g}: depth per partition: {depths:?}\n");
        s += &format!("  group {g}: delivered per partition: {:?}\n", parts(side, g));
        s += &format!(
            "  group {g}: delivered {}, duplicates {}, order {}\n",
            side.get(of(g, DELIVERED)),
            side.get(of(g, DUPLICATES)),
            side.get(of(g, ORDER)),
        );
    }
    s += &format!("  acked {}, bad {}, errors {}\n", side.get(ACKED), side.get(BAD), side.get(ERRORS));
    s += &format!("  topic: {:?}\n", topic.info());
    if let Ok(stats) = region.pool_stats() {
        let free: Vec<String> = stats.iter().map(|c| format!("{}/{}", c.free, c.chunks)).collect();
        s += &format!("  pool free/chunks per class: {free:?}\n");
    }
    s += &fleet.report();
    s
}

/// The checks at the end, from the bitmaps.
#[derive(Default)]
struct Tally {
    acked: u64,
    delivered: u64,
    /// Acknowledged and never delivered: (slot, key index, seq).
    lost: Vec<(usize, usize, u64)>,
    /// Delivered and never acknowledged (a producer died between publishing
    /// and recording the acknowledgement).
    unacked: Vec<(usize, usize, u64)>,
    /// Bits set at sequence numbers no producer reserved.
    beyond: u64,
}

/// The books of group `g`.
fn tally(side: &Side, g: usize) -> Tally {
    let mut t = Tally::default();
    let words = side.cap / 64;
    for slot in 0..PRODUCERS {
        for k in 0..KEYS {
            let next = next_seq(side, slot, k).load(SeqCst);
            for wi in 0..words {
                let base = wi * 64;
                let (aw, _) = bit(side, 0, slot, k, base);
                let (dw, _) = bit(side, 1 + g, slot, k, base);
                let (a, d) = (aw.load(SeqCst), dw.load(SeqCst));
                if a | d == 0 {
                    continue;
                }
                let valid = reserved(next, base);
                t.beyond += u64::from(((a | d) & !valid).count_ones());
                let (a, d) = (a & valid, d & valid);
                t.acked += u64::from(a.count_ones());
                t.delivered += u64::from(d.count_ones());
                for (diff, list) in [(a & !d, &mut t.lost), (d & !a, &mut t.unacked)] {
                    (0..64).filter(|b| diff & (1 << b) != 0).for_each(|b| list.push((slot, k, base + b)));
                }
            }
        }
    }
    t
}

/// Which processes the driver may kill (`TACHYON_CHAOS_VICTIMS`).
fn victims() -> (bool, bool) {
    match std::env::var("TACHYON_CHAOS_VICTIMS").as_deref() {
        Ok("producers") => (true, false),
        Ok("consumers") => (false, true),
        Ok("all") | Err(_) => (true, true),
        Ok(other) => panic!("TACHYON_CHAOS_VICTIMS={other:?}: use all, producers or consumers"),
    }
}

/// The at-most-once test: a dead consumer's message is lost.
#[test]
fn chaos_at_most_once() {
    chaos(Delivery::AtMostOnce, false);
}

/// The at-least-once test: a dead consumer's message is published again.
#[test]
fn chaos_at_least_once() {
    chaos(Delivery::AtLeastOnce, false);
}

/// Two consumer groups, at most once.
#[test]
fn chaos_groups_at_most_once() {
    chaos(Delivery::AtMostOnce, true);
}

/// Two consumer groups, at least once.
#[test]
fn chaos_groups_at_least_once() {
    chaos(Delivery::AtLeastOnce, true);
}

fn chaos(delivery: Delivery, named_groups: bool) {
    let label = match (delivery, named_groups) {
        (Delivery::AtMostOnce, false) => "chaos (at most once)",
        (Delivery::AtLeastOnce, false) => "chaos (at least once)",
        (Delivery::AtMostOnce, true) => "chaos (groups, at most once)",
        (Delivery::AtLeastOnce, true) => "chaos (groups, at least once)",
    };
    let groups = if named_groups { GROUPS } else { 1 };
    let consumers = CONSUMERS * groups;
    let kills_wanted = env_u64("TACHYON_CHAOS_KILLS", 200);
    let time_limit = Duration::from_secs(env_u64("TACHYON_CHAOS_SECS", 1800));
    let (kill_producers, kill_consumers) = victims();
    let seed = seed_for(delivery as u64 + 2 * u64::from(named_groups));
    // Generous: a release build publishes some 2 000 messages per producer
    // and key per kill cycle.
    let cap = env_u64("TACHYON_CHAOS_SEQ_CAP", ((kills_wanted + 20) * 4096).clamp(1 << 16, 1 << 25))
        .div_ceil(64)
        * 64;
    let max_inc = kills_wanted + (PRODUCERS + consumers) as u64;
    println!(
        "{label}: seed {seed} (replay: TACHYON_CHAOS_SEED={seed}), {kills_wanted} kills, \
         time limit {time_limit:?}, {cap} sequence numbers per producer and key"
    );
    let started = Instant::now();
    let mut rng = Rng(seed);

    let name = unique("chaos");
    let _remove = RemoveRegion(name.clone());
    let mut rcfg = RegionConfig::default().size(16 << 20).ring_arena(1 << 20);
    let mut config = TopicConfig::default().partitions(PARTITIONS).capacity(64).delivery(delivery);
    if named_groups {
        rcfg = rcfg.max_groups(GROUPS + 1).ring_arena(2 << 20);
        config = config.default_group(false);
    }
    let region = Region::create(&name, rcfg).unwrap();
    let topic = region.create_topic(TOPIC, config).unwrap();
    // The groups join before anything is published: each sees every message.
    let joined: Vec<Source> = (0..groups).map(|g| source(&topic, g)).collect();
    let initial = region.pool_stats().unwrap();
    let side_name = unique("chaos-side");
    let side = Side::create(&side_name, side_words(cap, max_inc), cap, max_inc, LOG);
    // The pool audit reads the region's internals: check that it
    // understands this layout on the fresh pool.
    let fresh = audit_pool(&region, &topic, &side);
    assert!(
        fresh.missing == [0; 8] && fresh.lost.is_empty(),
        "the pool audit does not understand this region's layout: {} {:?}",
        fresh.summary(),
        fresh.lost
    );
    let mut fleet = Fleet::new(ENTRY, &name, &side_name, cap, max_inc, seed);
    let mut gens = vec![0u64; PRODUCERS + consumers];
    for slot in 0..PRODUCERS {
        let p = fleet.spawn(Role::Producer, slot, 0);
        fleet.procs.push(p);
    }
    for slot in 0..consumers {
        let p = fleet.spawn(Role::Consumer, slot, 0);
        fleet.procs.push(p);
    }
    let fail = |why: String, fleet: &mut Fleet| -> ! {
        let report = state_report(&region, &topic, &side, fleet);
        panic!("{label} (seed {seed}): {why}\n{report}");
    };
    // Everybody is up and messages flow on every partition.
    if !wait_for(PHASE_LIMIT, || all_parts(&side, groups).iter().all(|&n| n > 0)) {
        fail("no traffic on every partition after start".into(), &mut fleet);
    }

    // The killing phase.
    let mut kills = Kills::default();
    let mut seq_full = false;
    let mut slowest_progress = Duration::ZERO;
    let mut slow = 0u64;
    while kills.total() < kills_wanted && started.elapsed() < time_limit {
        // A broken promise ends the killing; the end phase reports it all.
        let strict: u64 = (0..groups).map(|g| side.get(of(g, DUPLICATES)) + side.get(of(g, ORDER))).sum();
        let broken =
            side.get(ERRORS) + side.get(BAD) + if delivery == Delivery::AtMostOnce { strict } else { 0 };
        if broken != 0 {
            println!("{label}: problems seen after kill #{}; ending the killing phase", kills.total());
            break;
        }
        let victim = loop {
            let i = rng.below(fleet.procs.len() as u64) as usize;
            match fleet.procs[i].role {
                Role::Producer if kill_producers => break i,
                Role::Consumer if kill_consumers => break i,
                _ => {}
            }
        };
        // Mostly anywhere within 100 ms; sometimes within a few ms, which
        // often lands in a fresh process's start (open, recovery).
        let delay = if rng.below(4) == 0 { rng.below(5) } else { 1 + rng.below(100) };
        std::thread::sleep(Duration::from_millis(delay));
        if let Some((i, code)) = fleet.exited() {
            let p = &fleet.procs[i];
            if p.role == Role::Producer && code == Some(EXIT_SEQ_FULL) {
                seq_full = true;
                println!(
                    "{label}: producer {} used up its sequence numbers; ending the killing phase",
                    p.slot
                );
                break;
            }
            let why = format!("{} {} gen {} exited by itself ({code:?})", p.role.name(), p.slot, p.gen);
            fail(why, &mut fleet);
        }
        let before = all_parts(&side, groups);
        let acked_before = side.get(ACKED);
        let mut dead = fleet.procs.swap_remove(victim);
        common::kill(&mut dead.child);
        match dead.role {
            Role::Producer => kills.producers += 1,
            Role::Consumer => kills.consumers[dead.slot / CONSUMERS] += 1,
        }
        // The survivors go on, on every partition of every group, without
        // the dead one.
        let t = Instant::now();
        let progressed = wait_for(PROGRESS_LIMIT, || {
            side.get(ACKED) > acked_before
                && all_parts(&side, groups).iter().zip(&before).all(|(now, then)| now > then)
        });
        if !progressed {
            let why = format!(
                "no progress on every partition within {PROGRESS_LIMIT:?} after killing {} {} gen {} \
                 (kill #{}); delivered per group and partition before the kill: {before:?}",
                dead.role.name(),
                dead.slot,
                dead.gen,
                kills.total()
            );
            fail(why, &mut fleet);
        }
        slowest_progress = slowest_progress.max(t.elapsed());
        if t.elapsed() > SLOW_PROGRESS {
            slow += 1;
            println!(
                "{label}: kill #{} ({} {} gen {}): the survivors took {:.1?} to make progress; {:?}",
                kills.total(),
                dead.role.name(),
                dead.slot,
                dead.gen,
                t.elapsed(),
                topic.info()
            );
        }
        let g = match dead.role {
            Role::Producer => &mut gens[dead.slot],
            Role::Consumer => &mut gens[PRODUCERS + dead.slot],
        };
        *g += 1;
        let p = fleet.spawn(dead.role, dead.slot, *g);
        fleet.procs.push(p);
    }
    let chaos_time = started.elapsed();

    // Stop the producers, drain, stop the consumers.
    side.word(STOP_PRODUCERS).store(1, SeqCst);
    for i in 0..fleet.procs.len() {
        if fleet.procs[i].role == Role::Producer {
            let code = common::wait_child(&mut fleet.procs[i].child, PHASE_LIMIT);
            if code != Some(EXIT_OK) && code != Some(EXIT_SEQ_FULL) {
                let why = format!("producer {} ended with {code:?}", fleet.procs[i].slot);
                fail(why, &mut fleet);
            }
        }
    }
    let empty = || joined.iter().all(|from| (0..PARTITIONS).all(|p| from.depth(p).is_ok_and(|d| d == 0)));
    let delivered = || (0..groups).map(|g| side.get(of(g, DELIVERED))).sum();
    if !drained(PHASE_LIMIT, delivered, empty) {
        fail("the rings did not drain".into(), &mut fleet);
    }
    side.word(STOP_CONSUMERS).store(1, SeqCst);
    for i in 0..fleet.procs.len() {
        if fleet.procs[i].role == Role::Consumer {
            let code = common::wait_child(&mut fleet.procs[i].child, PHASE_LIMIT);
            if code != Some(EXIT_OK) {
                let why = format!("consumer {} ended with {code:?}", fleet.procs[i].slot);
                fail(why, &mut fleet);
            }
        }
    }
    let final_report = state_report(&region, &topic, &side, &mut fleet);
    fleet.procs.clear();

    // Recovery, once: every chunk is back.
    let recovered = region.recover().unwrap();
    // Anything recovery published again (at least once) is delivered here.
    let keys = keys_of(&topic);
    let mut late = 0;
    for (g, from) in joined.iter().enumerate() {
        let mut last = vec![None::<u64>; PRODUCERS * KEYS];
        for p in 0..PARTITIONS {
            while let Ok(Some(msg)) = from.try_receive(p) {
                record(&topic, &side, g, "the driver", &keys, p, &msg, &mut last);
                late += 1;
            }
        }
    }
    let again = region.recover().unwrap();
    let after = region.pool_stats().unwrap();
    let audit = audit_pool(&region, &topic, &side);
    let leftover = joined
        .iter()
        .map(|from| (0..PARTITIONS).map(|p| from.depth(p).unwrap_or(usize::MAX)).sum::<usize>())
        .sum::<usize>();

    let total_kills = kills.total();
    println!(
        "{label}: {total_kills} kills ({} producers, {:?} consumers per group) in {chaos_time:.1?}, {} \
         incarnations; slowest return of progress after a kill {slowest_progress:.1?} ({slow} over \
         {SLOW_PROGRESS:?})",
        kills.producers,
        &kills.consumers[..groups],
        fleet.incarnations
    );
    let mut problems = Vec::new();
    let check_counter = |problems: &mut Vec<String>, what: &str, counter: usize, allowed: u64| {
        if side.get(counter) > allowed {
            problems.push(format!("{} {what} (at most {allowed} allowed)", side.get(counter)));
        }
    };
    check_counter(&mut problems, "damaged messages", BAD, 0);
    check_counter(&mut problems, "errors", ERRORS, 0);
    // Every acknowledged message delivered to every group (but for one per
    // kill of the group's consumers), nothing twice, order per key,
    // payloads intact.
    for g in 0..groups {
        let t = tally(&side, g);
        let killed = kills.consumers[g];
        let who = if named_groups { format!("group g{g}") } else { "the topic".to_string() };
        println!(
            "{label}: {who}: {} messages acknowledged, {} delivered, {} acknowledged and not delivered (lost \
             with dead consumers), {} delivered and not acknowledged (producer killed between publish and \
             ack); duplicates {}, order violations {}",
            t.acked,
            t.delivered,
            t.lost.len(),
            t.unacked.len(),
            side.get(of(g, DUPLICATES)),
            side.get(of(g, ORDER)),
        );
        match delivery {
            Delivery::AtMostOnce => {
                check_counter(&mut problems, &format!("duplicates in {who}"), of(g, DUPLICATES), 0);
                check_counter(&mut problems, &format!("order violations in {who}"), of(g, ORDER), 0);
            }
            // A message published again comes after those published
            // meanwhile, and its first consumer may have recorded it before
            // dying: one duplicate and one order violation per consumer kill
            // at most.
            Delivery::AtLeastOnce => {
                check_counter(&mut problems, &format!("duplicates in {who}"), of(g, DUPLICATES), killed);
                check_counter(&mut problems, &format!("order violations in {who}"), of(g, ORDER), killed);
            }
        }
        if t.beyond != 0 {
            problems.push(format!("{who}: {} bits set beyond the reserved sequence numbers", t.beyond));
        }
        // At most once, a consumer holds one message at a time, so each
        // consumer kill loses at most one; at least once, nothing
        // acknowledged is lost.
        let may_lose = if delivery == Delivery::AtLeastOnce { 0 } else { killed };
        if t.lost.len() as u64 > may_lose {
            problems.push(format!(
                "{who}: {} acknowledged messages never delivered, more than the {may_lose} allowed ({killed} \
                 consumer kills); first (producer slot, key index, seq): {:?}",
                t.lost.len(),
                &t.lost[..t.lost.len().min(20)]
            ));
        }
        if t.unacked.len() as u64 > kills.producers {
            problems.push(format!(
                "{who}: {} messages delivered and never acknowledged, more than the {} producer kills: {:?}",
                t.unacked.len(),
                kills.producers,
                &t.unacked[..t.unacked.len().min(20)]
            ));
        }
    }
    println!("{label}: {:?}", topic.info());
    println!(
        "{label}: final recover {recovered:?}, then {again:?}; {late} messages delivered after it, \
         {leftover} left in the rings"
    );
    println!("{label}: pool audit: {}", audit.summary());
    println!("{label}: total time {:.1?}", started.elapsed());
    if seq_full {
        println!("{label}: note: stopped early, sequence numbers used up (raise TACHYON_CHAOS_SEQ_CAP)");
    }
    if leftover != 0 {
        problems.push(format!("{leftover} messages left in the rings after draining"));
    }
    if again.total() != 0 {
        problems.push(format!("a second recover still found {again:?}"));
    }
    // Every size class back to its full free count.
    if !audit.lost.is_empty() || audit.missing != [0; 8] || after != initial {
        problems.push(format!(
            "chunks leaked: {}; pool_stats {:?} (initially {:?}): {}",
            audit.summary(),
            after.map(|c| c.free),
            initial.map(|c| c.free),
            audit.lost.join("; ")
        ));
    }
    // At least once, a message a dead consumer held is never dropped.
    let dropped = if delivery == Delivery::AtLeastOnce { topic.info().lost } else { 0 };
    if dropped != 0 {
        problems.push(format!("{dropped} messages dropped on an at-least-once topic (TopicInfo::lost)"));
    }
    fail_on(&problems, label, seed, &final_report);
}

// ---------------------------------------------------------------------------
// Pool audit (diagnostics): which chunks are not on a free list after the
// final recovery, and in what state. Finds the region's words through
// `RegionMap` (the `testing` feature); a chunk's metadata as `bus/pool.rs`
// documents it.

/// Bytes of a chunk's metadata: state word (u64), link, route, length,
/// publication count (u32 each).
const META: usize = 24;
const STATE_NAMES: [&str; 4] = ["FREE", "LOANED", "QUEUED", "HELD"];

#[derive(Debug, Default)]
struct Audit {
    /// Per class: chunks not on the free list.
    missing: [usize; 8],
    /// What each missing chunk is (state, holder, ring cells naming it).
    lost: Vec<String>,
}

impl Audit {
    fn summary(&self) -> String {
        format!("chunks missing from the free lists per class {:?}", self.missing)
    }
}

fn audit_pool(region: &Region, topic: &Topic, side: &Side) -> Audit {
    let mut audit = Audit::default();
    let seg = region.segment();
    let word = |off: usize| seg.get::<AtomicU64>(off).map(|w| w.load(SeqCst));
    let map = tachyon::bus::RegionMap::new();
    let (Ok(metas), Ok(total)) = (word(map.metas), word(map.total_chunks)) else {
        audit.lost.push("cannot read the region layout".into());
        return audit;
    };
    let (metas, total) = (metas as usize, total as usize);
    // A chunk's state word and free-list link.
    let meta = |i: usize| -> Option<(u64, u32)> {
        let w = seg.get::<AtomicU64>(metas + META * i).ok()?.load(SeqCst);
        let next = seg.get::<AtomicU32>(metas + META * i + 8).ok()?.load(SeqCst);
        Some((w, next))
    };
    let mut listed = vec![false; total];
    let range = |c: usize| {
        let first = word(map.class_first + 8 * c).unwrap_or(0) as usize;
        first..first + word(map.class_count + 8 * c).unwrap_or(0) as usize
    };
    let class_of = |i: usize| (0..8).find(|&c| range(c).contains(&i)).unwrap_or(0);
    let mut cached = [0usize; 8];
    for c in 0..8 {
        let Ok(head) = word(map.free_lists + map.free_list_bytes * c) else { continue };
        let (first, count) = (range(c).start, range(c).len());
        if (head >> 24) & 3 != 0 {
            audit.lost.push(format!("free list {c} still has an announced operation: head {head:#x}"));
        }
        let mut top = (head & 0xFF_FFFF) as u32;
        let mut n = 0;
        while top != 0 && n <= count {
            let i = top as usize - 1;
            if i < first || i >= first + count || listed[i] {
                audit.lost.push(format!("free list {c} is damaged at chunk {i}"));
                break;
            }
            listed[i] = true;
            n += 1;
            top = meta(i).map_or(0, |m| m.1);
        }
        audit.missing[c] = count - n.min(count);
    }
    // Ring cells naming each chunk (chunk -> cells), to say more about a
    // chunk that is missing.
    let mut cells: std::collections::HashMap<u32, Vec<String>> = Default::default();
    let ring_off = word(map.directory + map.entry_ring_off).unwrap_or(0) as usize;
    let cap = topic.capacity();
    let block = map.partition_block(cap as u32);
    // Every group slot's rings (slot 0, the default group's, first).
    let slots = region.config().max_groups.max(1);
    for p in 0..PARTITIONS as usize * slots {
        for idx in 0..cap {
            let at = ring_off + p * block + map.partition_header + map.cell_bytes * idx;
            let (Ok(w), Ok(l)) = (word(at), word(at + 8)) else { continue };
            let (seq, tag) = ((w >> 32) as u32, w as u32);
            if u64::from(seq.wrapping_sub(1)) % cap as u64 == idx as u64 && tag != 0x8000_0000 {
                let what = if tag == 0 {
                    "unread".to_string()
                } else {
                    format!("read by {}", side.who(region.segment(), tag, &ROLES))
                };
                cells.entry((l >> 40) as u32).or_default().push(format!(
                    "group slot {} partition {} cell {idx} ({what})",
                    p / PARTITIONS as usize,
                    p % PARTITIONS as usize
                ));
            }
        }
    }
    for i in (0..total).filter(|&i| !listed[i]) {
        let Some((w, _)) = meta(i) else { continue };
        let name = STATE_NAMES[((w >> 30) & 3) as usize];
        let holder = w as u32 & 0x3FFF_FFFF;
        // Kept free by a live process for its next loan (LOANED with the
        // route u32::MAX): not lost.
        let route = seg.get::<AtomicU32>(metas + META * i + 12).map_or(0, |r| r.load(SeqCst));
        let alive = Token::from_raw(holder).is_some_and(|t| !region.segment().is_dead(t));
        if name == "LOANED" && route == u32::MAX && alive {
            cached[class_of(i)] += 1;
            continue;
        }
        let mut desc = format!("chunk {i}: {name}, holder {}", side.who(region.segment(), holder, &ROLES));
        if let Some(c) = cells.get(&(i as u32)) {
            desc += &format!(", named by {}", c.join(", "));
        }
        audit.lost.push(desc);
    }
    for (missing, cached) in audit.missing.iter_mut().zip(cached) {
        *missing -= cached.min(*missing);
    }
    audit
}
