//! Each crash window of the bus, hit exactly: a child process SIGKILLs
//! itself at a named point inside the library (`TACHYON_FAULT`, debug
//! builds only; see `platform/fault.rs`), and the test checks that recovery
//! returns every chunk and, on an at-least-once topic, delivers the message
//! again. The random-kill chaos test (tests/chaos.rs) covers the same
//! ground statistically; this covers it deterministically.
#![cfg(all(not(tachyon_loom), debug_assertions))]

mod common;

use common::{child_command, unique, RemoveRegion, LIMIT};
use std::time::Duration;
use tachyon::bus::{Delivery, Key, Recovered, Region, RegionConfig, Topic, TopicConfig};

const ENTRY: &str = "child_entry";
const SHORT: Option<Duration> = Some(Duration::from_millis(200));

fn region(name: &str) -> Region {
    Region::create(name, RegionConfig::default().size(8 << 20).ring_arena(1 << 20)).unwrap()
}

fn topic(region: &Region, delivery: Delivery, capacity: u32) -> Topic {
    region
        .create_topic("t", TopicConfig::default().partitions(1).capacity(capacity).delivery(delivery))
        .unwrap()
}

#[test]
fn child_entry() {
    let Some((role, args)) = common::role() else { return };
    let name = args.str("name");
    let region = Region::open(name).unwrap();
    let topic = region.topic("t").unwrap();
    match role.as_str() {
        // 3,000 bytes: a 4 KiB chunk, a class too small to be cached, so
        // that dropping the loan pushes it on the free list.
        "loan" => drop(topic.loan(3000, SHORT).unwrap()),
        // 100 bytes: a class of many small chunks, which a process keeps
        // and exchanges with the free list in batches (chains).
        "loan-small" => drop(topic.loan(100, SHORT).unwrap()),
        // More loans than any cache keeps, then all dropped: the cache
        // overflows and gives half of itself back in one chain push.
        "spill-small" => {
            let loans: Vec<_> = (0..2 * 32 + 1).map(|_| topic.loan(100, SHORT).unwrap()).collect();
            drop(loans);
        }
        "publish" => topic.send(b"never published", Key(0), SHORT).unwrap(),
        "receive" => drop(topic.receive(0, SHORT).unwrap()),
        "recover" => drop(region.recover().unwrap()),
        // Reports through its exit code what opening the region reclaimed.
        "open-and-report" => std::process::exit(10 + region.recovered_on_open().loans as i32),
        "loan-and-hang" => {
            let _loan = topic.loan(100, SHORT).unwrap();
            std::thread::sleep(LIMIT); // SIGKILLed here
        }
        other => panic!("unknown role {other}"),
    }
    // Reaching here means the fault point was not hit.
    std::process::exit(3);
}

/// Runs `role` in a child that must die by SIGKILL at `point`.
fn die_at(name: &str, role: &str, point: &str) {
    let mut child = child_command(ENTRY, role, name).env("TACHYON_FAULT", point).spawn().unwrap();
    common::wait_killed(&mut child, &format!("{role} at {point}"));
}

/// Recovery's counts of chunks: loans, held, unpublished, redelivered,
/// deferred (the attach slots it freed are checked apart).
fn counts(r: Recovered) -> [usize; 5] {
    [r.loans + r.cached, r.held, r.unpublished, r.redelivered, r.deferred]
}

fn recovered(loans: usize, held: usize, unpublished: usize, redelivered: usize) -> [usize; 5] {
    [loans, held, unpublished, redelivered, 0]
}

#[test]
fn a_pop_announced_and_not_completed_is_reclaimed() {
    let name = unique("cw-pop");
    let _c = RemoveRegion(name.clone());
    let region = region(&name);
    let topic = topic(&region, Delivery::AtMostOnce, 8);
    let initial = region.pool_stats().unwrap();
    die_at(&name, "loan", "pool-pop-announced");
    // The chunk is off the list, announced as the dead child's: recovery
    // completes the pop in its name and takes the chunk back.
    assert_eq!(counts(region.recover().unwrap()), recovered(1, 0, 0, 0));
    assert_eq!(region.pool_stats().unwrap(), initial);
    drop(topic.loan(100, SHORT).unwrap());
    assert_eq!(region.pool_stats().unwrap(), initial);
}

#[test]
fn a_pop_announced_is_completed_by_the_next_loan_then_reclaimed() {
    let name = unique("cw-pop-next");
    let _c = RemoveRegion(name.clone());
    let region = region(&name);
    let topic = topic(&region, Delivery::AtMostOnce, 8);
    let initial = region.pool_stats().unwrap();
    die_at(&name, "loan", "pool-pop-announced");
    // A loan of the same class completes the dead child's pop first (the
    // chunk becomes the dead child's), then takes the next chunk.
    let loan = topic.loan(100, SHORT).unwrap();
    drop(loan);
    assert_eq!(counts(region.recover().unwrap()), recovered(1, 0, 0, 0));
    assert_eq!(region.pool_stats().unwrap(), initial);
}

#[test]
fn a_push_announced_and_not_completed_is_completed() {
    let name = unique("cw-push");
    let _c = RemoveRegion(name.clone());
    let region = region(&name);
    let _topic = topic(&region, Delivery::AtMostOnce, 8);
    let initial = region.pool_stats().unwrap();
    die_at(&name, "loan", "pool-push-announced");
    // The chunk is on the list already; completing the push frees it, and
    // nothing is reclaimed (a second push would corrupt the list).
    assert_eq!(counts(region.recover().unwrap()), recovered(0, 0, 0, 0));
    assert_eq!(region.pool_stats().unwrap(), initial);
    assert_eq!(counts(region.recover().unwrap()), recovered(0, 0, 0, 0));
}

/// The class a loan of `bytes` takes its chunk from, in `stats`: its index.
fn class_for(stats: &[tachyon::bus::ClassStats; 8], bytes: usize) -> usize {
    stats.iter().position(|c| c.chunk_size >= bytes && c.chunks > 0).unwrap()
}

/// How many chunks one pop takes from `class`: half of what a process
/// keeps of it, one chunk in 64 of the class, 4 to 32 of 64-byte chunks
/// and 4 to 64 of larger ones (docs/bus.md).
fn batch_of(class: tachyon::bus::ClassStats) -> usize {
    let most = if class.chunk_size <= 64 { 32 } else { 64 };
    (class.chunks / 64).clamp(4, most) / 2
}

/// Every chunk of the class of 100-byte loans can be loaned at once, each
/// once, and then none of the class is left free: none lost, none on the
/// free list twice.
fn every_small_chunk_loans_once(topic: &Topic, chunks: usize) {
    let loans: Vec<_> = (0..chunks).map(|_| topic.loan(100, Some(Duration::ZERO)).unwrap()).collect();
    let distinct: std::collections::HashSet<_> = loans.iter().map(|l| l.as_ptr() as usize).collect();
    assert_eq!(distinct.len(), chunks, "a chunk handed out twice");
    let stats = topic.region().pool_stats().unwrap();
    assert_eq!(stats[class_for(&stats, 100)].free, 0, "a chunk of the class lost (free, not on its list)");
}

#[test]
fn a_chain_pop_announced_and_not_completed_is_reclaimed_whole() {
    let name = unique("cw-chain-pop");
    let _c = RemoveRegion(name.clone());
    let region = region(&name);
    let topic = topic(&region, Delivery::AtMostOnce, 8);
    let initial = region.pool_stats().unwrap();
    let class = initial[class_for(&initial, 100)];
    let batch = batch_of(class);
    assert!(batch > 1, "{class:?}: a class whose pops take a chain");
    die_at(&name, "loan-small", "pool-pop-announced");
    // The whole chain is off the list, announced as the dead child's:
    // recovery completes the pop in its name and takes every chunk back.
    assert_eq!(counts(region.recover().unwrap()), recovered(batch, 0, 0, 0));
    assert_eq!(region.pool_stats().unwrap(), initial);
    assert_eq!(counts(region.recover().unwrap()), recovered(0, 0, 0, 0));
    every_small_chunk_loans_once(&topic, class.chunks);
}

#[test]
fn a_chain_push_announced_and_not_completed_is_completed_not_reclaimed() {
    let name = unique("cw-chain-push");
    let _c = RemoveRegion(name.clone());
    let region = region(&name);
    let topic = topic(&region, Delivery::AtMostOnce, 8);
    let initial = region.pool_stats().unwrap();
    let c = class_for(&initial, 100);
    die_at(&name, "spill-small", "pool-push-announced");
    // Not free now: the child's loans and the announced chain, whose words
    // are the dead child's until the push completes (kept chunks count as
    // free).
    let busy = initial[c].free - region.pool_stats().unwrap()[c].free;
    let r = region.recover().unwrap();
    // The loans and the kept chunks are reclaimed; the chain (half a
    // cache, a pop's batch; route 0 like a loan's, once out of the cache)
    // is freed by completing the push, not reclaimed chunk by chunk.
    let half = batch_of(initial[c]);
    assert!(r.cached > 0 && busy - r.loans == half, "{busy} busy, {half} spilled: {r:?}");
    assert_eq!(region.pool_stats().unwrap(), initial);
    assert_eq!(counts(region.recover().unwrap()), recovered(0, 0, 0, 0));
    every_small_chunk_loans_once(&topic, initial[c].chunks);
}

#[test]
fn a_producer_dead_between_queueing_and_committing_loses_only_its_own_message() {
    let name = unique("cw-publish");
    let _c = RemoveRegion(name.clone());
    let region = region(&name);
    let topic = topic(&region, Delivery::AtLeastOnce, 8);
    let initial = region.pool_stats().unwrap();
    die_at(&name, "publish", "publish-queued");
    // Its message's chunk, and the rest of the batch its loan popped
    // (kept for its next loans).
    let kept = batch_of(initial[class_for(&initial, b"never published".len())]) - 1;
    assert_eq!(counts(region.recover().unwrap()), recovered(kept, 0, 1, 0));
    assert_eq!(region.pool_stats().unwrap(), initial);
    assert!(matches!(topic.try_receive(0), Ok(None)), "send never returned: nothing published");
}

/// A consumer dies at `point` holding the only message; on an
/// at-least-once topic recovery delivers it again, on an at-most-once one
/// it is lost and counted.
fn consumer_dies_at(point: &str, delivery: Delivery) {
    let name = unique("cw-receive");
    let _c = RemoveRegion(name.clone());
    let region = region(&name);
    let topic = topic(&region, delivery, 8);
    let initial = region.pool_stats().unwrap();
    topic.send(b"the only message", Key(7), SHORT).unwrap();
    die_at(&name, "receive", point);
    let r = region.recover().unwrap();
    assert_eq!(r.slots, 1, "the dead consumer's attach slot is freed");
    let r = counts(r);
    match delivery {
        Delivery::AtLeastOnce => {
            assert_eq!(r, recovered(0, 0, 0, 1), "{point}");
            let msg = topic.receive(0, SHORT).unwrap();
            assert_eq!(&*msg, b"the only message");
            drop(msg);
            assert_eq!(topic.info().lost, 0);
        }
        Delivery::AtMostOnce => {
            assert_eq!(r, recovered(0, 1, 0, 0), "{point}");
            assert!(matches!(topic.try_receive(0), Ok(None)));
            assert_eq!(topic.info().lost, 1);
        }
    }
    assert_eq!(region.pool_stats().unwrap(), initial, "{point}");
    assert_eq!(region.recover().unwrap(), Recovered::default());
}

#[test]
fn a_consumer_dead_after_claiming_before_taking_the_chunk() {
    consumer_dies_at("receive-claimed", Delivery::AtLeastOnce);
    consumer_dies_at("receive-claimed", Delivery::AtMostOnce);
}

#[test]
fn a_consumer_dead_after_taking_the_chunk_before_freeing_the_cell() {
    consumer_dies_at("receive-held", Delivery::AtLeastOnce);
    consumer_dies_at("receive-held", Delivery::AtMostOnce);
}

#[test]
fn a_dead_consumers_claim_repaired_by_a_blocked_producer_keeps_the_message() {
    let name = unique("cw-wrap");
    let _c = RemoveRegion(name.clone());
    let region = region(&name);
    let topic = topic(&region, Delivery::AtLeastOnce, 2);
    let initial = region.pool_stats().unwrap();
    topic.send(b"first", Key(0), SHORT).unwrap();
    topic.send(b"second", Key(0), SHORT).unwrap();
    die_at(&name, "receive", "receive-claimed");
    // The ring is full and its tail cell is the dead consumer's: the
    // producer waits, finds it dead, takes over its claim and adopts the
    // message before freeing the cell.
    topic.send(b"third", Key(0), Some(Duration::from_secs(5))).unwrap();
    let full = counts(region.recover().unwrap());
    assert_eq!(full, [0, 0, 0, 0, 1], "the partition is full: deferred");
    let mut got = vec![];
    for _ in 0..2 {
        got.push(topic.receive(0, SHORT).unwrap().to_vec());
    }
    assert_eq!(region.recover().unwrap().redelivered, 1);
    got.push(topic.receive(0, SHORT).unwrap().to_vec());
    got.sort();
    assert_eq!(got, [b"first".to_vec(), b"second".to_vec(), b"third".to_vec()]);
    assert_eq!(region.pool_stats().unwrap(), initial);
}

#[test]
fn a_recoverer_dead_in_the_middle_of_a_redelivery() {
    let name = unique("cw-redeliver");
    let _c = RemoveRegion(name.clone());
    let region = region(&name);
    let topic = topic(&region, Delivery::AtLeastOnce, 8);
    let initial = region.pool_stats().unwrap();
    topic.send(b"delivered once", Key(0), SHORT).unwrap();
    die_at(&name, "receive", "receive-held");
    // A second process recovers the dead consumer's message and dies with
    // it QUEUED again, its descriptor not yet in the ring.
    die_at(&name, "recover", "redeliver-queued");
    assert_eq!(counts(region.recover().unwrap()), recovered(0, 0, 0, 1), "published again, not dropped");
    // The cell the dead recoverer claimed is tombstoned by the waiting
    // receive; the message comes after it.
    let msg = topic.receive(0, Some(Duration::from_secs(5))).unwrap();
    assert_eq!(&*msg, b"delivered once");
    drop(msg);
    assert_eq!(topic.info().lost, 0);
    assert_eq!(region.pool_stats().unwrap(), initial);
}

/// Runs `role` in a child with `TACHYON_FAULT=fault` and returns its exit
/// code.
fn run_with(name: &str, role: &str, fault: &str) -> Option<i32> {
    let mut child = child_command(ENTRY, role, name).env("TACHYON_FAULT", fault).spawn().unwrap();
    common::wait_child(&mut child, LIMIT)
}

#[test]
fn where_the_kernel_cannot_tell_a_stale_heartbeat_past_the_lease_means_dead() {
    use std::sync::atomic::{AtomicU64, Ordering};
    let name = unique("cw-lease");
    let _c = RemoveRegion(name.clone());
    let config = RegionConfig::default().size(8 << 20).ring_arena(1 << 20).lease(Duration::from_secs(60));
    let region = Region::create(&name, config).unwrap();
    let _topic = topic(&region, Delivery::AtMostOnce, 8);
    let initial = region.pool_stats().unwrap();
    let mut holder = child_command(ENTRY, "loan-and-hang", &name).spawn().unwrap();
    let holder_slot =
        || Region::inspect_name(&name).unwrap().processes.iter().find(|p| p.loans == 1).map(|p| p.slot);
    assert!(common::wait_for(LIMIT, || holder_slot().is_some()), "the child loaned a chunk");
    let dead = holder_slot().unwrap();
    holder.kill().unwrap();
    holder.wait().unwrap();
    // The holder's heartbeat, in the region's process table (512 + 8 x slot).
    let raw = tachyon::Segment::builder(&name).kind(tachyon::Kind::REGION).open().unwrap();
    let beat = raw.get::<AtomicU64>(512 + 8 * dead).unwrap();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64;
    // In a process whose kernel cannot tell (every OFD query fails), a
    // holder with a fresh heartbeat is alive...
    beat.store(now, Ordering::SeqCst);
    assert_eq!(run_with(&name, "open-and-report", "liveness-unknown"), Some(10), "within the lease: alive");
    assert_ne!(region.pool_stats().unwrap(), initial);
    // ...and one whose heartbeat is older than the lease is dead.
    beat.store(now - 120_000_000_000, Ordering::SeqCst);
    assert_eq!(run_with(&name, "open-and-report", "liveness-unknown"), Some(11), "past the lease: dead");
    assert_eq!(region.pool_stats().unwrap(), initial);
    assert_eq!(region.lease(), Duration::from_secs(60));
}
