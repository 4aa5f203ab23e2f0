//! The chaos test of the primitives that share the ring's crash recovery:
//! `CircularBuffer` and `RpcBuffer` (two `CircularBuffer`s and a control
//! segment). A driver runs real processes (this test binary re-executed),
//! SIGKILLs a random one at a random moment, restarts it, and repeats.
//!
//! **`CircularBuffer`** (`chaos_circular_buffer`): writer and reader
//! processes on one MPMC ring. Checks:
//!
//! * after each kill, every surviving writer commits and every surviving
//!   reader receives within a generous bound (no stall: a dead writer's
//!   node becomes a tombstone, a dead reader's node is freed, by whoever
//!   waits on it);
//! * every item arrives intact (writer id, incarnation, per-writer sequence
//!   number, length and a checksum over the whole item);
//! * nothing is delivered twice;
//! * per-writer order as each reader sees it (`docs/rings.md`: "FIFO per
//!   writer as seen by each reader"; a writer is one process, so a new
//!   incarnation of a writer slot is another writer: reordering across
//!   incarnations is counted and shown, not failed on);
//! * at the end, after draining: every item a writer acknowledged (its
//!   `write` returned `Ok`, recorded in a side segment that outlives it)
//!   was delivered, except at most one per reader kill (the item a dead
//!   reader held is lost: at most once); an item delivered but never
//!   acknowledged needs a writer killed between commit and record (at most
//!   one per writer kill); an item whose writer died mid-write was never
//!   acknowledged, and its tombstone is never delivered;
//! * the ring is back to its full capacity: a single writer fills exactly
//!   `node_count` items (one more times out), and a reader drains them in
//!   order.
//!
//! **`RpcBuffer`** (`chaos_rpc_buffer`): an owner process (creates the
//! channel) and an opener process (joins it); both call the other with one
//! or several requests in flight (multi-packet messages, sync and async
//! requests) and both answer. The driver SIGKILLs one of them, mostly while
//! the pair works, sometimes while the restarted one is still creating or
//! joining. Checks:
//!
//! * after each kill of a working pair, the survivor learns it within a
//!   bound (never hangs; `docs/rpc.md` promises about 20 ms): a surviving
//!   opener gets `PeerDied` or `Closed`; a surviving owner (the server)
//!   sees its client gone (`is_connected`) — a `Timeout` (10 s) counts as
//!   a failure;
//! * every response a caller got is the right one for its request (each
//!   response is a checksummed function of its request's unique payload),
//!   and every request a handler got is intact;
//! * the documented recovery works after every kill: a surviving owner
//!   serves the restarted opener on the same channel (fresh rings) or,
//!   chosen at random per channel, closes it and creates a new one on the
//!   same name (retrying while the old files are still held); an opener
//!   whose owner died joins the new channel (retrying on `NotFound`,
//!   `Closed`, `PeerDied`, `ChannelBusy`, `Timeout`); the driver requires,
//!   within the bound, a successful call in each direction between the
//!   restarted end and the survivor (each response names the incarnation
//!   that answered);
//! * at the end, after both ends closed: nothing of the channel left in
//!   the segment directory (`/dev/shm`).
//!
//! The short form runs in the normal suite (some tens of kills per test).
//! The long form:
//!
//! ```text
//! TACHYON_CHAOS_KILLS=2000 cargo test --release -p tachyon-shm --test chaos_primitives -- --nocapture
//! ```
//!
//! Knobs (environment), as in `tests/chaos.rs`: `TACHYON_CHAOS_KILLS`
//! (kills per test; default 100 for the ring, 60 for rpc),
//! `TACHYON_CHAOS_SECS` (a time limit for each killing phase, default
//! 1800), `TACHYON_CHAOS_SEED` (replays the driver's choices of victim and
//! delay; the processes' timing still varies), `TACHYON_CHAOS_VICTIMS`
//! (`all`; for the ring `writers` or `readers`, also spelt `producers` and
//! `consumers`; for rpc `owner` or `opener`; a value meant for the other
//! test means `all`), `TACHYON_CHAOS_SEQ_CAP` (sequence numbers per ring
//! writer the bookkeeping holds; sized from the kill count),
//! `TACHYON_CHAOS_GDB=1` (on a failure, print every thread's stack of the
//! children still running, through `gdb`).
//!
//! Bookkeeping lives in a side segment of `AtomicU64`s that outlives every
//! child: a ring writer reserves each sequence number before writing it
//! and sets its bit in the acknowledged bitmap once `write` returned `Ok`;
//! a reader sets the item's bit in the delivered bitmap (a bit already set
//! is a duplicate).
#![cfg(not(tachyon_loom))]

mod common;

use common::chaos::{drained, env_u64, fail_on, mix, orphaned, reserved, seed_for, Rng};
use common::fleet::{report, Side, Task};

use common::{block_on, unique, wait_for};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tachyon::primitives::RpcBuffer;
use tachyon::sync::{Liveness, Token};
use tachyon::{CircularBuffer, Error};

const ENTRY: &str = "child_entry";
/// How long the survivors of a kill may take to make progress, and the
/// survivor of an rpc kill to notice it.
const PROGRESS_LIMIT: Duration = Duration::from_secs(10);
/// Progress slower than this after a kill is reported (not a failure).
const SLOW_PROGRESS: Duration = Duration::from_millis(500);
/// Bound for anything else a phase waits for.
const PHASE_LIMIT: Duration = Duration::from_secs(30);

// Exit codes of children.
const EXIT_OK: i32 = 0;
const EXIT_SEQ_FULL: i32 = 3;
const EXIT_ORPHAN: i32 = 4;
const EXIT_STUCK: i32 = 5;

// ---------------------------------------------------------------------------
// Small helpers

/// The byte at `i` of a checksummed body: depends on the position, so a
/// shifted or truncated copy does not pass.
fn body_byte(check: u64, i: usize) -> u8 {
    (check >> (8 * (i % 8))) as u8 ^ (i as u8).wrapping_mul(31)
}

fn words_of(bytes: &[u8]) -> impl Iterator<Item = u64> + '_ {
    bytes.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
}

/// Files in the segment directory whose name contains `tag`.
fn files_named(tag: &str) -> Vec<String> {
    let dir = tachyon::segment::name::dir();
    let Ok(entries) = std::fs::read_dir(&dir) else { return vec![format!("cannot list {}", dir.display())] };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str().map(str::to_owned))
        .filter(|n| n.contains(tag))
        .collect()
}

/// Where the incarnation log starts (both tests).
const LOG: usize = 64;
/// Role names, indexed by the role number in the incarnation log.
const ROLES: [&str; 5] = ["?", "writer", "reader", "owner", "opener"];

// ---------------------------------------------------------------------------
// Children

#[test]
fn child_entry() {
    let Some((role, args)) = common::role() else { return };
    let a = Task::from_args(&args);
    let side = Side::open(&a, LOG);
    let code = match role.as_str() {
        "writer" | "reader" => {
            let ring = CircularBuffer::open(&a.target).unwrap();
            let token = u64::from(ring.segment().token().raw());
            let r = if role == "writer" { 1 } else { 2 };
            side.log(a.inc).store(r << 56 | (a.slot as u64) << 48 | token, SeqCst);
            if role == "writer" {
                ring_writer(&ring, &side, &a)
            } else {
                ring_reader(&ring, &side, &a)
            }
        }
        "owner" | "opener" => rpc_end(role == "owner", Arc::new(side), &a),
        other => panic!("unknown role {other}"),
    };
    std::process::exit(code);
}

// ---------------------------------------------------------------------------
// CircularBuffer: items and bookkeeping

const RING_NODES: usize = 16;
/// Not a multiple of 64: nodes are padded.
const RING_NODE_SIZE: usize = 200;
const WRITERS: usize = 2;
const READERS: usize = 2;
/// The writer slot of the driver's own items (capacity check).
const DRIVER_SLOT: u64 = 0xff;
/// An item: slot, incarnation, seq, length, check; then the body.
const ITEM_HEADER: usize = 40;
const WRITE_TIMEOUT: Option<Duration> = Some(Duration::from_millis(100));
const READ_TIMEOUT: Option<Duration> = Some(Duration::from_millis(20));

// Ring side words.
const R_STOP_WRITERS: usize = 0;
const R_STOP_READERS: usize = 1;
const R_DELIVERED: usize = 2;
const R_DUPLICATES: usize = 3;
const R_ORDER: usize = 4;
const R_BAD: usize = 5;
const R_ACKED: usize = 6;
const R_ERRORS: usize = 7;
/// Items of one writer slot seen out of order across its incarnations
/// (shown, not failed on: the docs promise order per writer process).
const R_CROSS: usize = 8;
/// Acknowledged per writer slot: `R_ACKED_BY + slot`.
const R_ACKED_BY: usize = 16;
/// Delivered per reader slot: `R_DELIVERED_BY + slot`.
const R_DELIVERED_BY: usize = 32;
/// Next sequence number per writer slot: `R_NEXT + slot`.
const R_NEXT: usize = 48;

fn ring_side_words(cap: u64, max_inc: u64) -> usize {
    LOG + max_inc as usize + 2 * WRITERS * (cap as usize / 64)
}

/// Word and mask of the bit of (slot, seq) in bitmap 0 (acked) or 1
/// (delivered).
fn ring_bit(side: &Side, map: usize, slot: usize, seq: u64) -> (&AtomicU64, u64) {
    let words_per_map = WRITERS * (side.cap as usize / 64);
    let bit = slot as u64 * side.cap + seq;
    let i = LOG + side.max_inc as usize + map * words_per_map + (bit / 64) as usize;
    (side.word(i), 1 << (bit % 64))
}

fn item_header(slot: u64, gen: u64, seq: u64) -> [u64; 5] {
    let h = mix(slot << 56 ^ seq ^ 0x5eed);
    // Mostly small, sometimes a full node, now and then empty of body.
    let len = match h % 8 {
        0 => RING_NODE_SIZE,
        1 => ITEM_HEADER,
        _ => ITEM_HEADER + (h >> 8) as usize % (RING_NODE_SIZE - ITEM_HEADER + 1),
    } as u64;
    let check = mix(slot ^ mix(gen ^ mix(seq ^ mix(len))));
    [slot, gen, seq, len, check]
}

fn make_item(slot: u64, gen: u64, seq: u64) -> Vec<u8> {
    let h = item_header(slot, gen, seq);
    let mut v: Vec<u8> = h.iter().flat_map(|w| w.to_le_bytes()).collect();
    v.extend((ITEM_HEADER..h[3] as usize).map(|i| body_byte(h[4], i)));
    v
}

/// Checks an item; `(slot, gen, seq)` if intact.
fn check_item(item: &[u8], cap: u64) -> Result<(u64, u64, u64), String> {
    if item.len() < ITEM_HEADER {
        return Err(format!("{} bytes, shorter than a header", item.len()));
    }
    let w: Vec<u64> = words_of(&item[..ITEM_HEADER]).collect();
    let (slot, gen, seq) = (w[0], w[1], w[2]);
    if slot >= WRITERS as u64 && slot != DRIVER_SLOT || seq >= cap {
        return Err(format!("header {w:?} names no writer or sequence number"));
    }
    if w[..] != item_header(slot, gen, seq)[..] || item.len() as u64 != w[3] {
        return Err(format!("header {w:?} or length {} damaged", item.len()));
    }
    if let Some(i) = (ITEM_HEADER..item.len()).find(|&i| item[i] != body_byte(w[4], i)) {
        return Err(format!("header {w:?}: body damaged at byte {i}"));
    }
    Ok((slot, gen, seq))
}

fn ring_writer(ring: &CircularBuffer, side: &Side, a: &Task) -> i32 {
    let mut rng = Rng(a.seed ^ mix(a.inc + 1));
    let slot = a.slot as u64;
    let who = format!("writer {}/{}", a.slot, a.gen);
    let mut n = 0u64;
    loop {
        if side.get(R_STOP_WRITERS) != 0 || (n % 256 == 0 && orphaned(a.parent)) {
            return if orphaned(a.parent) { EXIT_ORPHAN } else { EXIT_OK };
        }
        let next = side.word(R_NEXT + a.slot);
        let seq = next.load(SeqCst);
        if seq >= side.cap {
            return EXIT_SEQ_FULL;
        }
        // Reserve it first: a later incarnation never reuses it, whether or
        // not this one dies before, during or after writing it.
        next.store(seq + 1, SeqCst);
        let item = make_item(slot, a.gen, seq);
        loop {
            let r = if rng.below(2) == 0 {
                ring.write(&item, WRITE_TIMEOUT)
            } else {
                // Zero-copy, a byte at a time, and now and then pausing
                // half-way (holding the node): a kill often lands mid-item.
                let pause = hold_pause(&mut rng);
                ring.write_with(item.len(), WRITE_TIMEOUT, |node| {
                    for (i, (d, s)) in node.iter_mut().zip(&item).enumerate() {
                        if i == item.len() / 2 {
                            pause();
                        }
                        *d = *s;
                    }
                })
            };
            match r {
                Ok(()) => break,
                Err(Error::Timeout { .. }) => {
                    if side.get(R_STOP_WRITERS) != 0 || orphaned(a.parent) {
                        return EXIT_OK;
                    }
                }
                Err(e) => {
                    report(side, R_ERRORS, &who, &format!("writing seq {seq}: {e}"));
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        }
        let (w, m) = ring_bit(side, 0, a.slot, seq);
        w.fetch_or(m, SeqCst);
        side.add(R_ACKED);
        side.add(R_ACKED_BY + a.slot);
        n += 1;
    }
}

fn ring_reader(ring: &CircularBuffer, side: &Side, a: &Task) -> i32 {
    let mut rng = Rng(a.seed ^ mix(a.inc + 1));
    let who = format!("reader {}/{}", a.slot, a.gen);
    // The last (incarnation, seq) this reader saw per writer slot.
    let mut last = [None::<(u64, u64)>; WRITERS];
    let mut buf = vec![0u8; RING_NODE_SIZE];
    let mut rounds = 0u64;
    loop {
        if side.get(R_STOP_READERS) != 0 {
            return EXIT_OK;
        }
        rounds += 1;
        if rounds % 256 == 0 && orphaned(a.parent) {
            return EXIT_ORPHAN;
        }
        let r = if rng.below(2) == 0 {
            ring.read(&mut buf, READ_TIMEOUT).map(|n| check_item(&buf[..n], side.cap))
        } else {
            // Checked in place, holding the node, now and then a while.
            let pause = hold_pause(&mut rng);
            ring.read_with(READ_TIMEOUT, |item| {
                let checked = check_item(item, side.cap);
                pause();
                checked
            })
        };
        match r {
            Ok(Ok((slot, gen, seq))) if slot < WRITERS as u64 => {
                record_item(side, &who, a.slot, &mut last, (slot as usize, gen, seq))
            }
            Ok(Ok(other)) => report(side, R_BAD, &who, &format!("the driver's item {other:?} in the chaos")),
            Ok(Err(what)) => report(side, R_BAD, &who, &what),
            Err(Error::Timeout { .. }) => {}
            Err(e) => {
                report(side, R_ERRORS, &who, &format!("reading: {e}"));
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
}

/// What a process does half-way through a node it holds: mostly nothing,
/// one time in 16 it yields or sleeps up to 2 ms, so that kills land there
/// (and the ring's repair of dead claimants is exercised) often.
fn hold_pause(rng: &mut Rng) -> impl Fn() {
    let r = rng.below(64);
    move || match r {
        0 => std::thread::yield_now(),
        1..=3 => std::thread::sleep(Duration::from_micros(r * 700)),
        _ => {}
    }
}

/// Records an intact item as delivered: order, duplicates, counters.
fn record_item(
    side: &Side,
    who: &str,
    reader: usize,
    last: &mut [Option<(u64, u64)>; WRITERS],
    (slot, gen, seq): (usize, u64, u64),
) {
    match last[slot] {
        Some((g, s)) if g == gen && s >= seq => {
            report(side, R_ORDER, who, &format!("order: writer {slot}/{gen}: seq {seq} after {s}"))
        }
        Some((g, s)) if g != gen && s >= seq => report(
            side,
            R_CROSS,
            who,
            &format!("writer slot {slot}: seq {seq} (gen {gen}) after {s} (gen {g})"),
        ),
        _ => {}
    }
    last[slot] = Some((gen, seq));
    let (word, mask) = ring_bit(side, 1, slot, seq);
    if word.fetch_or(mask, SeqCst) & mask != 0 {
        report(side, R_DUPLICATES, who, &format!("duplicate: writer {slot}/{gen} seq {seq}"));
    }
    side.add(R_DELIVERED);
    side.add(R_DELIVERED_BY + reader);
}

// ---------------------------------------------------------------------------
// The driver's fleet of children: roles are named by their strings.

type Fleet = common::fleet::Fleet<&'static str>;
type Proc = common::fleet::Proc<&'static str>;

/// Which roles the driver may kill, from `TACHYON_CHAOS_VICTIMS`; `pick`
/// maps a value to the roles it names in this test (`None`: not this
/// test's value, so all).
fn victims(all: &[&'static str], pick: impl Fn(&str) -> Option<&'static str>) -> Vec<&'static str> {
    match std::env::var("TACHYON_CHAOS_VICTIMS") {
        Ok(v) if v != "all" => match pick(&v) {
            Some(role) => vec![role],
            None => {
                println!("note: TACHYON_CHAOS_VICTIMS={v:?} is not for this test: killing every role");
                all.to_vec()
            }
        },
        _ => all.to_vec(),
    }
}

// ---------------------------------------------------------------------------
// The CircularBuffer driver

/// The ring's cursors and the words of its cells (diagnostics; reads the
/// layout `src/primitives/circular.rs` documents).
fn ring_report(ring: &CircularBuffer, side: &Side) -> String {
    let seg = ring.segment();
    let word = |off: usize| seg.get::<AtomicU64>(off).map(|w| w.load(SeqCst)).unwrap_or(u64::MAX);
    let mut s = format!("  ring: tail {}, head {}, len {}\n", word(64), word(128), ring.len());
    for i in 0..ring.node_count() {
        let w = word(320 + 16 * i);
        let (seq, tag) = ((w >> 32) as u32, w as u32);
        let holder = match tag {
            0 => "free/full".to_string(),
            0x8000_0000 => "tombstone".to_string(),
            t => side.who(seg, t, &ROLES),
        };
        s += &format!("    cell {i}: seq {seq}, len {}, {holder}\n", word(320 + 16 * i + 8));
    }
    s
}

fn ring_state(ring: &CircularBuffer, side: &Side, fleet: &mut Fleet) -> String {
    let per = |base: usize, n: usize| (0..n).map(|i| side.get(base + i)).collect::<Vec<_>>();
    format!(
        "  acked {} {:?}, delivered {} {:?}, duplicates {}, order {}, bad {}, errors {}\n{}{}",
        side.get(R_ACKED),
        per(R_ACKED_BY, WRITERS),
        side.get(R_DELIVERED),
        per(R_DELIVERED_BY, READERS),
        side.get(R_DUPLICATES),
        side.get(R_ORDER),
        side.get(R_BAD),
        side.get(R_ERRORS),
        ring_report(ring, side),
        fleet.report()
    )
}

/// The end-of-test tally of the bitmaps.
#[derive(Default)]
struct Tally {
    acked: u64,
    delivered: u64,
    /// Acknowledged and never delivered: (slot, seq).
    lost: Vec<(usize, u64)>,
    /// Delivered and never acknowledged.
    unacked: Vec<(usize, u64)>,
    /// Bits set at sequence numbers no writer reserved.
    beyond: u64,
}

fn ring_tally(side: &Side) -> Tally {
    let mut t = Tally::default();
    for slot in 0..WRITERS {
        let next = side.get(R_NEXT + slot);
        for base in (0..side.cap).step_by(64) {
            let (a, d) =
                (ring_bit(side, 0, slot, base).0.load(SeqCst), ring_bit(side, 1, slot, base).0.load(SeqCst));
            if a | d == 0 {
                continue;
            }
            let valid = reserved(next, base);
            t.beyond += u64::from(((a | d) & !valid).count_ones());
            let (a, d) = (a & valid, d & valid);
            t.acked += u64::from(a.count_ones());
            t.delivered += u64::from(d.count_ones());
            for (diff, list) in [(a & !d, &mut t.lost), (d & !a, &mut t.unacked)] {
                (0..64).filter(|b| diff & (1 << b) != 0).for_each(|b| list.push((slot, base + b)));
            }
        }
    }
    t
}

/// Whether the ring holds exactly `node_count` items again: the driver
/// writes that many (repairing any node a dead process still holds), one
/// more times out, and it reads them back in order. Problems, if any.
fn capacity_check(ring: &CircularBuffer, cap: u64) -> Vec<String> {
    let mut problems = Vec::new();
    let n = ring.node_count() as u64;
    for round in 0..2u64 {
        for i in 0..n {
            if let Err(e) = ring.write(&make_item(DRIVER_SLOT, round, i), Some(PHASE_LIMIT)) {
                problems.push(format!("capacity round {round}: write {i} of {n} failed: {e}"));
                return problems;
            }
        }
        match ring.write(b"one too many", Some(Duration::from_millis(100))) {
            Err(Error::Timeout { .. }) => {}
            other => problems.push(format!("capacity round {round}: item {n}+1 of a full ring: {other:?}")),
        }
        let mut buf = vec![0u8; RING_NODE_SIZE];
        for i in 0..n {
            match ring.read(&mut buf, Some(PHASE_LIMIT)) {
                Ok(len) if buf[..len] == make_item(DRIVER_SLOT, round, i)[..] => {}
                Ok(len) => problems.push(format!(
                    "capacity round {round}: read {i}: {:?} instead of the driver's item {i}",
                    check_item(&buf[..len], cap)
                )),
                Err(e) => problems.push(format!("capacity round {round}: read {i} of {n} failed: {e}")),
            }
        }
        match ring.read(&mut buf, Some(Duration::from_millis(50))) {
            Err(Error::Timeout { .. }) => {}
            other => problems.push(format!("capacity round {round}: a read of the drained ring: {other:?}")),
        }
    }
    problems
}

/// The `CircularBuffer` chaos test.
#[test]
fn chaos_circular_buffer() {
    let label = "chaos (circular buffer)";
    let kills_wanted = env_u64("TACHYON_CHAOS_KILLS", 100);
    let time_limit = Duration::from_secs(env_u64("TACHYON_CHAOS_SECS", 1800));
    let roles = victims(&["writer", "reader"], |v| match v {
        "writers" | "writer" | "producers" => Some("writer"),
        "readers" | "reader" | "consumers" => Some("reader"),
        _ => None,
    });
    let seed = seed_for(1);
    // A release build moves some 10^5 items per writer per kill cycle.
    let cap = env_u64("TACHYON_CHAOS_SEQ_CAP", ((kills_wanted + 20) * 65536).clamp(1 << 20, 1 << 28))
        .div_ceil(64)
        * 64;
    let max_inc = kills_wanted + (WRITERS + READERS) as u64 + 1;
    println!(
        "{label}: seed {seed} (replay: TACHYON_CHAOS_SEED={seed}), {kills_wanted} kills, time limit \
         {time_limit:?}, {cap} sequence numbers per writer, {WRITERS} writers, {READERS} readers, \
         {RING_NODES} nodes of {RING_NODE_SIZE} bytes"
    );
    let started = Instant::now();
    let mut rng = Rng(seed);

    let name = unique("chaos-ring");
    let ring = CircularBuffer::create(&name, RING_NODES, RING_NODE_SIZE).unwrap();
    let side_name = unique("chaos-ring-side");
    let side = Side::create(&side_name, ring_side_words(cap, max_inc), cap, max_inc, LOG);
    let mut fleet = Fleet::new(ENTRY, &name, &side_name, cap, max_inc, seed);
    let mut gens = [0u64; WRITERS + READERS];
    for slot in 0..WRITERS {
        let p = fleet.spawn("writer", slot, 0);
        fleet.procs.push(p);
    }
    for slot in 0..READERS {
        let p = fleet.spawn("reader", slot, 0);
        fleet.procs.push(p);
    }
    let fail = |why: String, fleet: &mut Fleet| -> ! {
        panic!("{label} (seed {seed}): {why}\n{}", ring_state(&ring, &side, fleet));
    };
    let counter_of =
        |p: &Proc| if p.role == "writer" { R_ACKED_BY + p.slot } else { R_DELIVERED_BY + p.slot };
    // Everybody is up and items flow.
    if !wait_for(PHASE_LIMIT, || {
        (0..WRITERS).all(|s| side.get(R_ACKED_BY + s) > 0)
            && (0..READERS).all(|s| side.get(R_DELIVERED_BY + s) > 0)
    }) {
        fail("no traffic from every writer to every reader after start".into(), &mut fleet);
    }

    // The killing phase.
    let (mut writer_kills, mut reader_kills) = (0u64, 0u64);
    let mut seq_full = false;
    let mut slowest = Duration::ZERO;
    let mut slow = 0u64;
    while writer_kills + reader_kills < kills_wanted && started.elapsed() < time_limit {
        let kill_no = writer_kills + reader_kills + 1;
        // A broken promise ends the killing; the end phase reports it all.
        if side.get(R_ERRORS) + side.get(R_BAD) + side.get(R_DUPLICATES) + side.get(R_ORDER) != 0 {
            println!("{label}: problems seen before kill #{kill_no}; ending the killing phase");
            break;
        }
        let victim = loop {
            let i = rng.below(fleet.procs.len() as u64) as usize;
            if roles.contains(&fleet.procs[i].role) {
                break i;
            }
        };
        // Mostly anywhere within 100 ms; sometimes within a few ms, which
        // often lands in a fresh process's start (open, first claims).
        let delay = if rng.below(4) == 0 { rng.below(5) } else { 1 + rng.below(100) };
        std::thread::sleep(Duration::from_millis(delay));
        if let Some((i, code)) = fleet.exited() {
            let p = &fleet.procs[i];
            if p.role == "writer" && code == Some(EXIT_SEQ_FULL) {
                seq_full = true;
                println!("{label}: writer {} used up its sequence numbers; ending the killing phase", p.slot);
                break;
            }
            let why = format!("{} {} gen {} exited by itself ({code:?})", p.role, p.slot, p.gen);
            fail(why, &mut fleet);
        }
        let mut dead = fleet.procs.swap_remove(victim);
        let before: Vec<u64> = fleet.procs.iter().map(|p| side.get(counter_of(p))).collect();
        common::kill(&mut dead.child);
        if dead.role == "writer" {
            writer_kills += 1;
        } else {
            reader_kills += 1;
        }
        // Every survivor goes on without the dead one.
        let t = Instant::now();
        let progressed = wait_for(PROGRESS_LIMIT, || {
            fleet.procs.iter().zip(&before).all(|(p, &then)| side.get(counter_of(p)) > then)
        });
        if !progressed {
            let why = format!(
                "a survivor made no progress within {PROGRESS_LIMIT:?} after killing {} {} gen {} \
                 (kill #{kill_no}); counters of the survivors before the kill: {before:?}",
                dead.role, dead.slot, dead.gen
            );
            fail(why, &mut fleet);
        }
        slowest = slowest.max(t.elapsed());
        if t.elapsed() > SLOW_PROGRESS {
            slow += 1;
            println!(
                "{label}: kill #{kill_no} ({} {} gen {}): the survivors took {:.1?} to make progress",
                dead.role,
                dead.slot,
                dead.gen,
                t.elapsed()
            );
        }
        let g = if dead.role == "writer" { &mut gens[dead.slot] } else { &mut gens[WRITERS + dead.slot] };
        *g += 1;
        let p = fleet.spawn(dead.role, dead.slot, *g);
        fleet.procs.push(p);
    }
    let chaos_time = started.elapsed();

    // Stop the writers, drain, stop the readers.
    side.word(R_STOP_WRITERS).store(1, SeqCst);
    for i in 0..fleet.procs.len() {
        if fleet.procs[i].role == "writer" {
            let code = common::wait_child(&mut fleet.procs[i].child, PHASE_LIMIT);
            if code != Some(EXIT_OK) && code != Some(EXIT_SEQ_FULL) {
                let why = format!("writer {} ended with {code:?}", fleet.procs[i].slot);
                fail(why, &mut fleet);
            }
        }
    }
    if !drained(PHASE_LIMIT, || side.get(R_DELIVERED), || ring.is_empty()) {
        fail("the ring did not drain".into(), &mut fleet);
    }
    side.word(R_STOP_READERS).store(1, SeqCst);
    for i in 0..fleet.procs.len() {
        if fleet.procs[i].role == "reader" {
            let code = common::wait_child(&mut fleet.procs[i].child, PHASE_LIMIT);
            if code != Some(EXIT_OK) {
                let why = format!("reader {} ended with {code:?}", fleet.procs[i].slot);
                fail(why, &mut fleet);
            }
        }
    }
    let final_state = ring_state(&ring, &side, &mut fleet);
    // Positions the chaos used (from the cursors; diagnostics): each held
    // an item delivered, a dead writer's tombstone, or a dead reader's item.
    let cursor = |off: usize| ring.segment().get::<AtomicU64>(off).map_or(0, |w| w.load(SeqCst));
    let positions = cursor(64).max(cursor(128));
    fleet.procs.clear();

    // Anything the readers left is read here (there should be nothing).
    let mut last = [None::<(u64, u64)>; WRITERS];
    let mut leftover = 0u64;
    let mut buf = vec![0u8; RING_NODE_SIZE];
    while let Ok(n) = ring.read(&mut buf, Some(Duration::from_millis(100))) {
        leftover += 1;
        match check_item(&buf[..n], cap) {
            Ok((slot, gen, seq)) if slot < WRITERS as u64 => {
                record_item(&side, "the driver", READERS, &mut last, (slot as usize, gen, seq))
            }
            other => report(&side, R_BAD, "the driver", &format!("left in the ring: {other:?}")),
        }
        if leftover > RING_NODES as u64 {
            break;
        }
    }
    let capacity = capacity_check(&ring, cap);

    let t = ring_tally(&side);
    let kills = writer_kills + reader_kills;
    println!(
        "{label}: {kills} kills ({writer_kills} writers, {reader_kills} readers) in {chaos_time:.1?}, {} \
         incarnations; slowest return of progress after a kill {slowest:.1?}, {slow} over {SLOW_PROGRESS:?}",
        fleet.incarnations
    );
    println!(
        "{label}: {} items acknowledged, {} delivered, {} acknowledged and not delivered (lost with dead \
         readers), {} delivered and not acknowledged (writer killed between commit and record); \
         duplicates {}, order violations {}, reordered across a writer slot's incarnations {}, damaged {}, \
         errors {}, {leftover} left after the readers stopped; {positions} ring positions used, so {} \
         tombstones of dead writers or items dead readers held",
        t.acked,
        t.delivered,
        t.lost.len(),
        t.unacked.len(),
        side.get(R_DUPLICATES),
        side.get(R_ORDER),
        side.get(R_CROSS),
        side.get(R_BAD),
        side.get(R_ERRORS),
        positions.saturating_sub(side.get(R_DELIVERED))
    );
    println!(
        "{label}: capacity after the chaos: {}",
        if capacity.is_empty() { "all nodes usable (twice filled and drained in order)" } else { "PROBLEMS" }
    );
    if seq_full {
        println!("{label}: note: stopped early, sequence numbers used up (raise TACHYON_CHAOS_SEQ_CAP)");
    }

    let mut problems = capacity;
    for (what, counter) in [
        ("damaged items", R_BAD),
        ("errors", R_ERRORS),
        ("duplicates", R_DUPLICATES),
        ("order violations", R_ORDER),
    ] {
        if side.get(counter) != 0 {
            problems.push(format!("{} {what}", side.get(counter)));
        }
    }
    if t.beyond != 0 {
        problems.push(format!("{} bits set beyond the reserved sequence numbers", t.beyond));
    }
    // A reader holds one item at a time, so each reader kill loses at most
    // one; a writer kill leaves at most one item delivered unacknowledged.
    if t.lost.len() as u64 > reader_kills {
        problems.push(format!(
            "{} acknowledged items never delivered, more than the {reader_kills} reader kills; first \
             (writer slot, seq): {:?}",
            t.lost.len(),
            &t.lost[..t.lost.len().min(20)]
        ));
    }
    if t.unacked.len() as u64 > writer_kills {
        problems.push(format!(
            "{} items delivered and never acknowledged, more than the {writer_kills} writer kills: {:?}",
            t.unacked.len(),
            &t.unacked[..t.unacked.len().min(20)]
        ));
    }
    if leftover != 0 {
        problems.push(format!("{leftover} items left in the ring after draining"));
    }
    drop(ring);
    drop(side);
    let files = files_named(&name);
    if !files.is_empty() {
        problems.push(format!("files left in the segment directory: {files:?}"));
    }
    println!("{label}: total time {:.1?}", started.elapsed());
    fail_on(&problems, label, seed, &final_state);
}

// ---------------------------------------------------------------------------
// RpcBuffer: messages and the two ends

const RPC_NODES: usize = 8;
/// Small nodes: many messages span several packets.
const RPC_NODE_SIZE: usize = 256;
/// The deadline of every call: a live peer answers long before.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// A request: role, incarnation, seq, length, check; then the body.
const MSG_HEADER: usize = 40;
const MAX_MSG: usize = 1500;

// Rpc side words; per role (0 owner, 1 opener) at `base + role`.
const P_STOP: usize = 0;
const P_BAD: usize = 1;
const P_ERRORS: usize = 2;
const P_TIMEOUTS: usize = 3;
/// Successful calls made.
const P_OK: usize = 8;
/// `PeerDied` or `Closed` seen (opener); the client's departure seen
/// (owner).
const P_GONE: usize = 10;
/// Channels joined or created.
const P_CONNECTS: usize = 12;
/// The last successful call: caller's incarnation << 32 | the answering
/// end's incarnation.
const P_LAST_OK: usize = 14;
/// Requests handled.
const P_HANDLED: usize = 16;
/// Channel ends seen as `PeerDied` (the rest of `P_GONE`: `Closed`).
const P_DIED: usize = 18;
/// What each end is doing (diagnostics): `PH_*`.
const P_PHASE: usize = 20;
/// The last error a connect attempt got (diagnostics): 1 `AlreadyExists`,
/// 2 `NotFound`, 3 `Closed`, 4 another, 5 `PeerDied`, 6 `ChannelBusy`,
/// 7 `Timeout`.
const P_CONNECT_ERR: usize = 22;
/// Connect attempts (diagnostics).
const P_CONNECT_TRIES: usize = 24;
const PH_CONNECTING: u64 = 1;
const PH_CALLING: u64 = 2;
const PH_CLOSING: u64 = 3;

fn request_header(role: u64, inc: u64, seq: u64) -> [u64; 5] {
    let h = mix(role << 60 ^ inc << 32 ^ seq ^ 0xca11);
    let len = match h % 4 {
        0 => MSG_HEADER,
        _ => MSG_HEADER + (h >> 8) as usize % (MAX_MSG - MSG_HEADER + 1),
    } as u64;
    let check = mix(role ^ mix(inc ^ mix(seq ^ mix(len))));
    [role, inc, seq, len, check]
}

fn make_request(role: u64, inc: u64, seq: u64) -> Vec<u8> {
    let h = request_header(role, inc, seq);
    let mut v: Vec<u8> = h.iter().flat_map(|w| w.to_le_bytes()).collect();
    v.extend((MSG_HEADER..h[3] as usize).map(|i| body_byte(h[4], i)));
    v
}

fn check_request(msg: &[u8]) -> Result<(), String> {
    if msg.len() < MSG_HEADER {
        return Err(format!("a {}-byte request", msg.len()));
    }
    let w: Vec<u64> = words_of(&msg[..MSG_HEADER]).collect();
    if w[0] > 1 || w[..] != request_header(w[0], w[1], w[2])[..] || msg.len() as u64 != w[3] {
        return Err(format!("request header {w:?} or length {} damaged", msg.len()));
    }
    if let Some(i) = (MSG_HEADER..msg.len()).find(|&i| msg[i] != body_byte(w[4], i)) {
        return Err(format!("request {w:?}: body damaged at byte {i}"));
    }
    Ok(())
}

/// The response of incarnation `inc` to a request: `inc`, the request
/// reversed, then a check word of both. A response to any other request
/// differs.
fn response_to(request: &[u8], inc: u64) -> Vec<u8> {
    let mut v = inc.to_le_bytes().to_vec();
    v.extend(request.iter().rev());
    let check = v.iter().fold(0x9e37_79b9u64, |h, &b| mix(h ^ u64::from(b)));
    v.extend_from_slice(&check.to_le_bytes());
    v
}

/// Which incarnation answered, if `response` is the right one for `request`.
fn check_response(request: &[u8], response: &[u8]) -> Option<u64> {
    let inc = u64::from_le_bytes(response.get(..8)?.try_into().ok()?);
    (response == response_to(request, inc)).then_some(inc)
}

/// Creates (owner) or joins (opener) the channel, retrying what the
/// documented recovery says to retry: the owner while the last channel's
/// files are still held (`AlreadyExists`), the opener until a new channel
/// exists or takes it (`NotFound`, `Closed`, `PeerDied`, `ChannelBusy`,
/// `Timeout`). `Ok(None)` if told to stop.
fn connect(owner: bool, side: &Arc<Side>, a: &Task, who: &str) -> Result<Option<RpcBuffer>, i32> {
    let role = usize::from(!owner);
    let started = Instant::now();
    loop {
        if side.get(P_STOP) != 0 {
            return Ok(None);
        }
        if orphaned(a.parent) {
            return Err(EXIT_ORPHAN);
        }
        let handler_side = Arc::clone(side);
        let handler_who = who.to_owned();
        let inc = a.inc;
        let b =
            RpcBuffer::builder(&a.target).default_timeout(REQUEST_TIMEOUT).handler(move |_id, msg: &[u8]| {
                handler_side.add(P_HANDLED + role);
                match check_request(msg) {
                    Ok(()) => Ok(response_to(msg, inc)),
                    Err(what) => {
                        report(&handler_side, P_BAD, &handler_who, &format!("handler: {what}"));
                        Err(what)
                    }
                }
            });
        side.add(P_CONNECT_TRIES + role);
        let r = if owner { b.node_count(RPC_NODES).node_size(RPC_NODE_SIZE).create() } else { b.open() };
        let code = match &r {
            Ok(_) => 0,
            Err(Error::AlreadyExists { .. }) => 1,
            Err(Error::NotFound { .. }) => 2,
            Err(Error::Closed) => 3,
            Err(Error::PeerDied) => 5,
            Err(Error::ChannelBusy { .. }) => 6,
            Err(Error::Timeout { .. }) => 7,
            Err(_) => 4,
        };
        side.word(P_CONNECT_ERR + role).store(code, SeqCst);
        match r {
            Ok(rpc) => return Ok(Some(rpc)),
            Err(Error::AlreadyExists { .. }) if owner => {}
            // No server now, or one that is closing or dead (its files
            // not yet removed), or one still letting the last opener go.
            Err(
                Error::NotFound { .. }
                | Error::Closed
                | Error::PeerDied
                | Error::ChannelBusy { .. }
                | Error::Timeout { .. },
            ) if !owner => {}
            Err(e) => {
                report(side, P_ERRORS, who, &format!("{}: {e}", if owner { "create" } else { "open" }));
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        if started.elapsed() > PHASE_LIMIT {
            report(side, P_ERRORS, who, &format!("no channel within {PHASE_LIMIT:?}"));
            return Err(EXIT_STUCK);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// One end: connect, call and answer until the channel ends, connect
/// again; until told to stop.
///
/// The owner is the channel's server: it outlives its clients. A watcher
/// thread tells when its client left (the driver waits for that before it
/// starts the next opener); the owner then either serves the next opener
/// on the same channel or, chosen at random per channel, closes it and
/// creates a new one, so both paths are exercised.
fn rpc_end(owner: bool, side: Arc<Side>, a: &Task) -> i32 {
    let role = usize::from(!owner);
    let who = format!("{} gen {}", if owner { "owner" } else { "opener" }, a.gen);
    let mut rng = Rng(a.seed ^ mix(a.inc + 1));
    let mut seq = 0u64;
    loop {
        side.word(P_PHASE + role).store(PH_CONNECTING, SeqCst);
        let rpc = match connect(owner, &side, a, &who) {
            Ok(Some(rpc)) => rpc,
            Ok(None) => return EXIT_OK,
            Err(code) => return code,
        };
        side.add(P_CONNECTS + role);
        side.word(P_PHASE + role).store(PH_CALLING, SeqCst);
        let stay = owner && rng.below(2) == 0;
        let watching = AtomicBool::new(owner);
        let ended = std::thread::scope(|s| {
            if owner {
                s.spawn(|| watch_client(&rpc, &side, stay, &watching));
            }
            let ended = call_until_gone(&rpc, owner, &side, a, &who, &mut rng, &mut seq);
            watching.store(false, SeqCst);
            ended
        });
        if let Some(code) = ended {
            return code; // dropping `rpc` closes this end
        }
        side.word(P_PHASE + role).store(PH_CLOSING, SeqCst);
        // The channel is over: drop this end, make or join a new one.
    }
}

/// The owner's watcher: counts each departure of its client (a SIGKILLed
/// opener, in this test) and, unless the owner `stay`s, closes the
/// channel then. Closes it too when the test stops, so that no request
/// waits for a client that will not come.
/// Set by a call of the owner that went through: the channel was
/// connected then. The watcher polls `is_connected` every millisecond, but
/// on a loaded machine it can miss a whole short connection (the test
/// kills an end 0 to 4 ms after the pair worked): this flag says it was
/// connected since the watcher's last look.
static CONNECTED_SEEN: AtomicBool = AtomicBool::new(false);

fn watch_client(rpc: &RpcBuffer, side: &Side, stay: bool, watching: &AtomicBool) {
    let mut was = false;
    while watching.load(SeqCst) {
        if side.get(P_STOP) != 0 {
            rpc.close();
            return;
        }
        let seen = CONNECTED_SEEN.swap(false, SeqCst);
        let now = rpc.is_connected();
        if (was || seen) && !now {
            side.add(P_GONE);
            if !stay {
                rpc.close();
                return;
            }
        }
        was = now;
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Calls (and answers, on the handler threads) until the channel is over
/// for this end: `Some(exit code)` to end the process, `None` to connect
/// again.
fn call_until_gone(
    rpc: &RpcBuffer,
    owner: bool,
    side: &Side,
    a: &Task,
    who: &str,
    rng: &mut Rng,
    seq: &mut u64,
) -> Option<i32> {
    let role = usize::from(!owner);
    loop {
        if side.get(P_STOP) != 0 {
            return Some(EXIT_OK);
        }
        if orphaned(a.parent) {
            return Some(EXIT_ORPHAN);
        }
        // One request, or a few in flight at once.
        let batch = 1 + rng.below(3);
        let requests: Vec<Vec<u8>> = (0..batch)
            .map(|_| {
                *seq += 1;
                make_request(role as u64, a.inc, *seq)
            })
            .collect();
        let results: Vec<tachyon::Result<Vec<u8>>> = if batch == 1 {
            vec![rpc.request(&requests[0], Some(REQUEST_TIMEOUT))]
        } else {
            let futures: Vec<_> = requests.iter().map(|r| rpc.request_async(r)).collect();
            futures.into_iter().map(block_on).collect()
        };
        let (mut gone, mut died) = (false, false);
        for (request, result) in requests.iter().zip(results) {
            match result {
                Ok(response) if check_response(request, &response).is_some() => {
                    let peer = check_response(request, &response).unwrap_or_default();
                    // A call went through: connected (for the watcher, who
                    // may not have looked while it was; before the test
                    // sees it in the side counters below).
                    CONNECTED_SEEN.store(true, SeqCst);
                    side.add(P_OK + role);
                    side.word(P_LAST_OK + role).store(a.inc << 32 | peer, SeqCst);
                }
                Ok(response) => {
                    let head: Vec<u64> = words_of(&request[..MSG_HEADER]).collect();
                    let what = format!("request {head:?}: a wrong response of {} bytes", response.len());
                    report(side, P_BAD, who, &what);
                }
                Err(Error::PeerDied) => (gone, died) = (true, true),
                Err(Error::Closed) => gone = true,
                Err(Error::Timeout { .. }) => report(side, P_TIMEOUTS, who, "a request timed out"),
                Err(e) => report(side, P_ERRORS, who, &format!("request: {e}")),
            }
        }
        if owner {
            // The server's requests to a client that left fail; the
            // watcher counts the departure. The channel is over only once
            // the watcher closed it.
            if rpc.closed().is_some() {
                return None;
            }
        } else if gone {
            if died {
                side.add(P_DIED + role);
            }
            side.add(P_GONE + role);
            return None;
        }
    }
}

// ---------------------------------------------------------------------------
// The RpcBuffer driver

fn rpc_state(side: &Side, fleet: &mut Fleet) -> String {
    let pair = |base: usize| [side.get(base), side.get(base + 1)];
    format!(
        "  (owner, opener): ok calls {:?}, handled {:?}, connects {:?}, last ok call (caller, callee) {:?}, \
         gone {:?} (peer died {:?}); bad {}, errors {}, timeouts {}\n  files: {:?}\n{}",
        pair(P_OK),
        pair(P_HANDLED),
        pair(P_CONNECTS),
        [0, 1].map(|r| (side.get(P_LAST_OK + r) >> 32, side.get(P_LAST_OK + r) & 0xffff_ffff)),
        pair(P_GONE),
        pair(P_DIED),
        side.get(P_BAD),
        side.get(P_ERRORS),
        side.get(P_TIMEOUTS),
        files_named(&fleet.target),
        fleet.report()
    ) + &format!(
        "  phases {:?} (1 connecting, 2 calling, 3 closing), connect attempts {:?}, last connect error {:?} \
         (1 AlreadyExists, 2 NotFound, 3 Closed, 4 other, 5 PeerDied, 6 ChannelBusy, 7 Timeout)\n{}",
        pair(P_PHASE),
        pair(P_CONNECT_TRIES),
        pair(P_CONNECT_ERR),
        channel_report(&fleet.target)
    )
}

/// The channel's files: attachers, and the control segment's tokens and
/// flags (read from the file, without attaching; diagnostics).
fn channel_report(name: &str) -> String {
    let mut s = String::new();
    let Ok(list) = tachyon::segment::list() else { return "  cannot list segments\n".into() };
    for info in list.iter().filter(|i| i.name.starts_with(name)) {
        s += &format!("  {}: ", info.name);
        if let tachyon::segment::SegmentStatus::Valid { attachers, .. } = &info.status {
            let a: Vec<String> = attachers
                .iter()
                .map(|a| {
                    format!(
                        "slot {} pid {} {}",
                        a.slot,
                        a.process.pid,
                        if a.alive { "alive" } else { "dead" }
                    )
                })
                .collect();
            s += &format!("attachers [{}]", a.join(", "));
        }
        if info.name == name {
            if let Ok(bytes) = std::fs::read(&info.path) {
                let u32_at =
                    |o: usize| bytes.get(o..o + 4).map_or(0, |b| u32::from_le_bytes(b.try_into().unwrap()));
                let data =
                    bytes.get(24..32).map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap())) as usize;
                let token = |raw: u32| {
                    Token::from_raw(raw).map_or(format!("{raw:#x}"), |t| format!("slot {}", t.slot()))
                };
                s += &format!(
                    "; owner {}, opener {}, owner closed {}, opener closed {}",
                    token(u32_at(data + 64)),
                    token(u32_at(data + 68)),
                    u32_at(data + 72),
                    u32_at(data + 76)
                );
            }
        }
        s += "\n";
    }
    s
}

/// The `RpcBuffer` chaos test.
#[test]
fn chaos_rpc_buffer() {
    let label = "chaos (rpc buffer)";
    let kills_wanted = env_u64("TACHYON_CHAOS_KILLS", 60);
    let time_limit = Duration::from_secs(env_u64("TACHYON_CHAOS_SECS", 1800));
    let roles = victims(&["owner", "opener"], |v| match v {
        "owner" | "owners" | "client" => Some("owner"),
        "opener" | "openers" | "server" => Some("opener"),
        _ => None,
    });
    let seed = seed_for(2);
    let max_inc = kills_wanted + 3;
    println!(
        "{label}: seed {seed} (replay: TACHYON_CHAOS_SEED={seed}), {kills_wanted} kills, time limit \
         {time_limit:?}, {RPC_NODES} nodes of {RPC_NODE_SIZE} bytes per direction"
    );
    let started = Instant::now();
    let mut rng = Rng(seed);
    let name = unique("chaos-rpc");
    let side_name = unique("chaos-rpc-side");
    let side = Side::create(&side_name, LOG + max_inc as usize, 0, max_inc, LOG);
    let mut fleet = Fleet::new(ENTRY, &name, &side_name, 0, max_inc, seed);
    let p = fleet.spawn("owner", 0, 0);
    fleet.procs.push(p);
    let p = fleet.spawn("opener", 1, 0);
    fleet.procs.push(p);
    let fail = |why: String, fleet: &mut Fleet| -> ! {
        panic!("{label} (seed {seed}): {why}\n{}", rpc_state(&side, fleet));
    };
    // A successful call in each direction between the two incarnations
    // running now.
    let works = |fleet: &Fleet| {
        let inc = [fleet.procs[0].inc, fleet.procs[1].inc];
        (0..2).all(|r| side.get(P_LAST_OK + r) == inc[r] << 32 | inc[1 - r])
    };
    if !wait_for(PHASE_LIMIT, || works(&fleet)) {
        fail("the first pair never worked".into(), &mut fleet);
    }

    let (mut owner_kills, mut opener_kills, mut early_kills) = (0u64, 0u64, 0u64);
    let mut gens = [0u64; 2];
    let mut slowest_notice = Duration::ZERO;
    let mut slowest_recovery = Duration::ZERO;
    let mut notice_total = Duration::ZERO;
    let mut noticed = 0u64;
    // When the last kill was, and which end was restarted then.
    let mut last_kill: Option<(Instant, usize)> = None;
    // Waits until the restarted end and the survivor work together.
    let mut recovered = |last_kill: Option<(Instant, usize)>, fleet: &mut Fleet, what: &str| {
        if !wait_for(PROGRESS_LIMIT, || works(fleet)) {
            let why = format!("no new pair worked within {PROGRESS_LIMIT:?} {what}");
            panic!("{label} (seed {seed}): {why}\n{}", rpc_state(&side, fleet));
        }
        if let Some((at, _)) = last_kill {
            slowest_recovery = slowest_recovery.max(at.elapsed());
            if at.elapsed() > SLOW_PROGRESS {
                let pair = |base: usize| [side.get(base), side.get(base + 1)];
                println!(
                    "{label}: a new pair took {:.1?} to work {what}; (owner, opener) connect attempts so far \
                     {:?}, last connect errors {:?} (1 AlreadyExists, 2 NotFound, 3 Closed)",
                    at.elapsed(),
                    pair(P_CONNECT_TRIES),
                    pair(P_CONNECT_ERR)
                );
            }
        }
    };
    while owner_kills + opener_kills < kills_wanted && started.elapsed() < time_limit {
        let kill_no = owner_kills + opener_kills + 1;
        if side.get(P_BAD) + side.get(P_ERRORS) + side.get(P_TIMEOUTS) != 0 {
            println!("{label}: problems seen before kill #{kill_no}; ending the killing phase");
            break;
        }
        // Now and then kill the restarted end while it is still starting,
        // creating or joining; otherwise wait for the new pair to work and
        // kill one end of it.
        let early = last_kill.is_some() && rng.below(6) == 0;
        if !early {
            recovered(last_kill, &mut fleet, &format!("after kill #{}", kill_no - 1));
        }
        let victim = match last_kill.filter(|_| early) {
            Some((_, restarted)) => restarted,
            None => loop {
                let i = rng.below(2) as usize;
                if roles.contains(&fleet.procs[i].role) {
                    break i;
                }
            },
        };
        let delay = if early || rng.below(5) == 0 { rng.below(4) } else { 1 + rng.below(60) };
        std::thread::sleep(Duration::from_millis(delay));
        if let Some((i, code)) = fleet.exited() {
            let p = &fleet.procs[i];
            let why = format!("{} gen {} exited by itself ({code:?})", p.role, p.gen);
            fail(why, &mut fleet);
        }
        let survivor = 1 - victim;
        let gone_before = side.get(P_GONE + survivor);
        let role = fleet.procs[victim].role;
        common::kill(&mut fleet.procs[victim].child);
        let killed_at = Instant::now();
        if role == "owner" {
            owner_kills += 1;
        } else {
            opener_kills += 1;
        }
        if early {
            early_kills += 1;
        } else {
            // The survivor of a working pair is told, promptly.
            if !wait_for(PROGRESS_LIMIT, || side.get(P_GONE + survivor) > gone_before) {
                let why = format!(
                    "the {} was not told within {PROGRESS_LIMIT:?} that its peer died (kill #{kill_no}, {role} \
                     killed)",
                    fleet.procs[survivor].role
                );
                fail(why, &mut fleet);
            }
            let took = killed_at.elapsed();
            slowest_notice = slowest_notice.max(took);
            notice_total += took;
            noticed += 1;
            if took > SLOW_PROGRESS {
                println!("{label}: kill #{kill_no} ({role}): the survivor took {took:.1?} to notice");
            }
        }
        gens[victim] += 1;
        let p = fleet.spawn(role, victim, gens[victim]);
        fleet.procs[victim] = p;
        last_kill = Some((killed_at, victim));
    }
    let chaos_time = started.elapsed();
    recovered(last_kill, &mut fleet, "after the last kill");

    // Both ends close; nothing of the channel may be left.
    side.word(P_STOP).store(1, SeqCst);
    for i in 0..2 {
        let code = common::wait_child(&mut fleet.procs[i].child, PHASE_LIMIT);
        if code != Some(EXIT_OK) {
            let why = format!("{} ended with {code:?}", fleet.procs[i].role);
            fail(why, &mut fleet);
        }
    }
    let final_state = rpc_state(&side, &mut fleet);
    fleet.procs.clear();
    let left = files_named(&name);
    let kills = owner_kills + opener_kills;
    let pair = |base: usize| [side.get(base), side.get(base + 1)];
    println!(
        "{label}: {kills} kills ({owner_kills} owners, {opener_kills} openers; {early_kills} while starting or \
         connecting) in {chaos_time:.1?}"
    );
    println!(
        "{label}: the survivor was told its peer died in {:.1?} on average, {slowest_notice:.1?} at most \
         ({noticed} kills of a working pair); a new pair worked {slowest_recovery:.1?} at most after a kill",
        notice_total.checked_div(noticed as u32).unwrap_or_default()
    );
    println!(
        "{label}: (owner, opener): {:?} calls answered correctly, {:?} requests handled, {:?} channels \
         joined, {:?} ends of channel seen ({:?} PeerDied, the rest Closed); wrong responses or damaged \
         requests {}, errors {}, timeouts {}; files left: {left:?}",
        pair(P_OK),
        pair(P_HANDLED),
        pair(P_CONNECTS),
        pair(P_GONE),
        pair(P_DIED),
        side.get(P_BAD),
        side.get(P_ERRORS),
        side.get(P_TIMEOUTS)
    );
    let mut problems = Vec::new();
    for (what, counter) in
        [("wrong responses or damaged requests", P_BAD), ("errors", P_ERRORS), ("timeouts", P_TIMEOUTS)]
    {
        if side.get(counter) != 0 {
            problems.push(format!("{} {what}", side.get(counter)));
        }
    }
    if !left.is_empty() {
        problems.push(format!("files left in the segment directory after both ends closed: {left:?}"));
    }
    drop(side);
    let side_left = files_named(&side_name);
    if !side_left.is_empty() {
        problems.push(format!("side segment left: {side_left:?}"));
    }
    println!("{label}: total time {:.1?}", started.elapsed());
    fail_on(&problems, label, seed, &final_state);
}
