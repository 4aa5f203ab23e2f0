//! Inline payloads (`TopicConfig::inline_payload`): the copy path of a
//! message that fits a ring cell's slot takes no chunk. Real processes: a
//! producer process streaming messages of every length to a consumer
//! process (and to one with batch reads); a publisher and a consumer SIGKILLed with a message half in a
//! slot (debug builds: the fault points `inline-claimed`, `inline-written`
//! and `inline-read`), after which the partition goes on and the pool is
//! whole.
#![cfg(not(tachyon_loom))]

mod common;

use common::{child_command, spawn, unique, wait_child, RemoveRegion, LIMIT};
use std::time::{Duration, Instant};
use tachyon::bus::{
    Delivery, JoinFrom, Key, Partitions, Region, RegionConfig, Topic, TopicConfig, MAX_INLINE,
};
use tachyon::Error;

const ENTRY: &str = "child_entry";
const SLOT: u32 = 256;
const SHORT: Option<Duration> = Some(Duration::from_millis(200));

fn region(name: &str) -> Region {
    Region::create(name, RegionConfig::default().size(8 << 20).ring_arena(2 << 20)).unwrap()
}

fn topic(region: &Region, partitions: u32, capacity: u32) -> Topic {
    topic_with(region, partitions, capacity, SLOT)
}

fn topic_with(region: &Region, partitions: u32, capacity: u32, slot: u32) -> Topic {
    let cfg = TopicConfig::default().partitions(partitions).capacity(capacity).inline_payload(slot);
    region.create_topic("t", cfg).unwrap()
}

/// Message `seq` of `key`, `len` bytes (at least 16): key, seq, then a
/// pattern of both.
fn message(key: u64, seq: u64, len: usize) -> Vec<u8> {
    let mut m = vec![0u8; len.max(16)];
    m[..8].copy_from_slice(&key.to_le_bytes());
    m[8..16].copy_from_slice(&seq.to_le_bytes());
    for (i, b) in m.iter_mut().enumerate().skip(16) {
        *b = (key as usize * 31 + seq as usize * 7 + i) as u8;
    }
    m
}

fn words(m: &[u8]) -> (u64, u64) {
    (u64::from_le_bytes(m[..8].try_into().unwrap()), u64::from_le_bytes(m[8..16].try_into().unwrap()))
}

/// The length of message `i` of a stream through slots of `slot` bytes:
/// every length from 16 to the slot's in turn, and every seventh message
/// one byte past the slot (a chunk; often enough that some of them meet
/// the consumer's buffer of the slot's size, whatever the slot).
fn length_in(i: u64, slot: u32) -> usize {
    if i % 7 == 6 {
        slot as usize + 1
    } else {
        16 + (i as usize * 37) % (slot as usize - 16 + 1)
    }
}

#[test]
fn child_entry() {
    let Some((role, args)) = common::role() else { return };
    let region = Region::open(args.str("name")).unwrap();
    let topic = region.topic("t").unwrap();
    match role.as_str() {
        "producer" => {
            let n: u64 = args.get("n");
            let keys: u64 = args.get("keys");
            let slot: u32 = args.get("slot");
            let mut seq = vec![0u64; keys as usize];
            for i in 0..n {
                let k = i % keys;
                let m = message(k, seq[k as usize], length_in(i, slot));
                topic.send(&m, Key(k), Some(LIMIT)).unwrap();
                seq[k as usize] += 1;
            }
            return;
        }
        // Dies at the fault point its parent names (debug builds).
        "send-one" => topic.send(&message(0, 0, 100), Key(0), SHORT).unwrap(),
        "receive-one" => {
            let mut buf = Vec::new();
            topic.recv_into(0, &mut buf, SHORT).unwrap();
        }
        other => panic!("unknown role {other}"),
    }
    // Reaching here means the fault point was not hit.
    std::process::exit(3);
}

/// In one process: messages up to the slot's size travel in the ring and
/// take no chunk (the pool's free counts do not move while they are
/// queued); a larger one and a loan take chunks; all come out in order
/// through `recv_into` and `receive`, with their bytes.
#[test]
fn inline_messages_take_no_chunk_and_keep_their_order() {
    let name = unique("inline-basic");
    let _rm = RemoveRegion(name.clone());
    let region = region(&name);
    let topic = topic(&region, 1, 16);
    assert_eq!(topic.config().inline_payload_size(), SLOT);
    assert_eq!(topic.info().inline_payload, SLOT);
    let initial = region.pool_stats().unwrap();
    let lens = [0usize, 1, 63, 64, 65, 200, SLOT as usize];
    for (i, &len) in lens.iter().enumerate() {
        let m: Vec<u8> = (0..len).map(|b| (b + i) as u8).collect();
        topic.send(&m, Key(0), Some(Duration::ZERO)).unwrap();
    }
    assert_eq!(region.pool_stats().unwrap(), initial, "inline sends take no chunk");
    topic.send(&vec![7u8; SLOT as usize + 1], Key(0), Some(Duration::ZERO)).unwrap();
    let mut loan = topic.loan(10, Some(Duration::ZERO)).unwrap();
    loan.copy_from_slice(b"zero-copy!");
    loan.publish(Key(0), Some(Duration::ZERO)).unwrap();
    assert_ne!(region.pool_stats().unwrap(), initial, "a larger message and a loan are chunks");

    let mut buf = vec![1, 2, 3];
    for (i, &len) in lens.iter().enumerate() {
        let want: Vec<u8> = (0..len).map(|b| (b + i) as u8).collect();
        if i % 2 == 0 {
            assert_eq!(topic.recv_into(0, &mut buf, Some(Duration::ZERO)).unwrap(), len);
            assert_eq!(buf, want);
        } else {
            // `receive` copies it into a chunk of the receiver's own.
            let m = topic.receive(0, Some(Duration::ZERO)).unwrap();
            assert_eq!(&*m, &want[..]);
        }
    }
    assert_eq!(topic.recv_into(0, &mut buf, Some(Duration::ZERO)).unwrap(), SLOT as usize + 1);
    assert_eq!(&*topic.receive(0, Some(Duration::ZERO)).unwrap(), b"zero-copy!");
    assert!(topic.try_recv_into(0, &mut buf).unwrap().is_none());
    let info = topic.info();
    assert_eq!((info.published, info.received, info.corrupt, info.lost), (9, 9, 0, 0));
    // Every chunk back where it was (the receiver's cache counts as free).
    let free = |s: &[tachyon::bus::ClassStats]| s.iter().map(|c| c.free).sum::<usize>();
    assert_eq!(free(&region.pool_stats().unwrap()), free(&initial));
    // Another handle sees the slots (sealed in the directory entry).
    let other = Region::open(&name).unwrap().topic("t").unwrap();
    assert_eq!(other.config().inline_payload_size(), SLOT);
    other.send(b"across handles", Key(0), None).unwrap();
    assert_eq!(topic.recv_into(0, &mut buf, None).unwrap(), 14);
    assert_eq!(buf, b"across handles");
}

/// Sizes are rounded up to 64 bytes and bounded; at-least-once is refused;
/// opening with other slots is `Incompatible`; slots that do not fit the
/// ring arena are refused at creation.
#[test]
fn inline_configuration_is_checked() {
    assert_eq!(TopicConfig::default().inline_payload(100).inline_payload_size(), 128);
    assert_eq!(TopicConfig::default().inline_payload(0).inline_payload_size(), 0);
    assert_eq!(TopicConfig::default().inline_payload(MAX_INLINE).inline_payload_size(), MAX_INLINE);
    let too_big = TopicConfig::default().inline_payload(MAX_INLINE + 1).validate();
    assert!(matches!(too_big, Err(Error::InvalidArgument { .. })), "{too_big:?}");
    let again = TopicConfig::default().inline_payload(64).delivery(Delivery::AtLeastOnce).validate();
    assert!(matches!(again, Err(Error::InvalidArgument { .. })), "{again:?}");

    let name = unique("inline-cfg");
    let _rm = RemoveRegion(name.clone());
    let region = region(&name);
    let t = topic(&region, 1, 16);
    let other = region.create_or_open_topic("t", TopicConfig::default().partitions(1).capacity(16));
    assert!(matches!(other, Err(Error::Incompatible { .. })), "{other:?}");
    let same = region.create_or_open_topic("t", t.config()).unwrap();
    assert_eq!(same.config(), t.config());
    // 2 MiB of arena cannot hold 1024 slots of 4 KiB.
    let huge = region.create_topic("huge", TopicConfig::default().capacity(1024).inline_payload(4096));
    assert!(matches!(huge, Err(Error::NoSpace { .. })), "{huge:?}");
}

/// An overrunning topic drops its oldest inline messages (nothing to give
/// back to the pool) and counts them missed.
#[test]
fn overrun_drops_the_oldest_inline_message() {
    let name = unique("inline-overrun");
    let _rm = RemoveRegion(name.clone());
    let region = region(&name);
    let cfg = TopicConfig::default().capacity(4).overrun(true).inline_payload(64);
    let topic = region.create_topic("t", cfg).unwrap();
    let initial = region.pool_stats().unwrap();
    for i in 0..10u64 {
        topic.send(&message(0, i, 16), Key(0), Some(Duration::ZERO)).unwrap();
    }
    assert_eq!(topic.missed(), 6);
    let mut buf = Vec::new();
    for want in 6..10 {
        topic.recv_into(0, &mut buf, Some(Duration::ZERO)).unwrap();
        assert_eq!(words(&buf), (0, want));
    }
    assert_eq!(region.pool_stats().unwrap(), initial);
}

/// A named group changes the path: while one is joined, sends go in chunks
/// shared by the groups; a group joined from the oldest gets a copy of the
/// inline messages queued before it, in order, ahead of the live ones.
#[test]
fn groups_get_inline_messages_as_chunks() {
    let name = unique("inline-groups");
    let _rm = RemoveRegion(name.clone());
    let region =
        Region::create(&name, RegionConfig::default().size(8 << 20).ring_arena(2 << 20).max_groups(3))
            .unwrap();
    let topic = topic(&region, 1, 16);
    let initial = region.pool_stats().unwrap();
    for i in 0..3u64 {
        topic.send(&message(0, i, 40), Key(0), None).unwrap();
    }
    assert_eq!(region.pool_stats().unwrap(), initial, "inline: no chunk");
    let replay = topic.join_group_from("replay", JoinFrom::Oldest).unwrap();
    topic.send(&message(0, 3, 40), Key(0), None).unwrap();
    for want in 0..4 {
        let m = replay.receive(0, Some(Duration::ZERO)).unwrap();
        assert_eq!(&*m, &message(0, want, 40)[..]);
    }
    let mut buf = Vec::new();
    for want in 0..4 {
        topic.recv_into(0, &mut buf, Some(Duration::ZERO)).unwrap();
        assert_eq!(buf, message(0, want, 40));
    }
    assert_eq!(replay.missed(), 0);
    drop(replay);
    let free = |s: &[tachyon::bus::ClassStats]| s.iter().map(|c| c.free).sum::<usize>();
    assert_eq!(free(&region.pool_stats().unwrap()), free(&initial), "every copy back in the pool");
}

/// A producer process streams 40,000 messages of every length from 16
/// bytes to one past the slot over 4 keys and 2 partitions; this process
/// receives them all, through `recv_into` and `receive` by turns, each
/// key's in order and with its bytes; no chunk is lost.
#[test]
fn a_producer_process_streams_to_a_consumer_process() {
    stream_between_processes(SLOT);
}

/// The same through slots of 1 KiB, which lie a cache line further apart
/// than their size (layout 6, `RegionMap::inline_slot_stride`): every
/// slot of both rings, lap after lap, carries its message whole.
#[test]
fn slots_of_a_kibibyte_carry_every_length_between_processes() {
    assert_eq!(tachyon::bus::RegionMap::new().inline_slot_stride(1024), 1088);
    stream_between_processes(1024);
}

fn stream_between_processes(slot: u32) {
    let name = unique(&format!("inline-stream-{slot}"));
    let _rm = RemoveRegion(name.clone());
    let region = region(&name);
    let topic = topic_with(&region, 2, 64, slot);
    let initial = region.pool_stats().unwrap();
    const N: u64 = 40_000;
    const KEYS: u64 = 4;
    let args = common::Args::name(&name).with("n", N).with("keys", KEYS).with("slot", slot);
    let mut child = spawn(ENTRY, "producer", args);
    // A quarter of the messages are taken through a subscription to both
    // partitions, copied out of their slots.
    let sub = topic.subscribe(Partitions::All).unwrap();
    let mut next = [0u64; KEYS as usize];
    let mut buf = Vec::new();
    // A buffer of the slot's size: the one message length in the stream
    // that is longer (a chunk) stays queued until a larger buffer comes.
    let (mut small, mut large) = (vec![0u8; slot as usize], vec![0u8; slot as usize + 1]);
    let mut too_long = 0u64;
    let deadline = Instant::now() + LIMIT;
    let mut got = 0u64;
    while got < N {
        assert!(Instant::now() < deadline, "received {got} of {N}");
        for p in 0..2 {
            // The partition the message came from (a subscription's may be
            // the other one).
            let mut from = p;
            let m = if got % 4 == 3 {
                match sub.try_recv_into(&mut buf).unwrap() {
                    Some((q, n)) => {
                        assert_eq!(n, buf.len());
                        from = q;
                        buf.clone()
                    }
                    None => continue,
                }
            } else if got % 4 == 0 {
                match topic.receive(p, Some(Duration::ZERO)) {
                    Ok(m) => m.to_vec(),
                    Err(Error::Timeout { .. }) => continue,
                    Err(e) => panic!("{e}"),
                }
            } else if got % 4 == 1 {
                match topic.try_recv_into_slice(p, &mut small) {
                    Ok(Some(n)) => small[..n].to_vec(),
                    Ok(None) => continue,
                    Err(Error::BufferTooSmall { item, buffer }) => {
                        assert_eq!((item, buffer), (slot as usize + 1, slot as usize));
                        too_long += 1;
                        let n = topic.try_recv_into_slice(p, &mut large).unwrap().expect("still queued");
                        large[..n].to_vec()
                    }
                    Err(e) => panic!("{e}"),
                }
            } else {
                match topic.try_recv_into(p, &mut buf).unwrap() {
                    Some(_) => buf.clone(),
                    None => continue,
                }
            };
            let (k, seq) = words(&m);
            assert_eq!(topic.partition_of(Key(k)), from);
            assert_eq!(seq, next[k as usize], "key {k} in order");
            let i = seq * KEYS + k;
            assert_eq!(m, message(k, seq, length_in(i, slot)), "message {i}'s bytes");
            next[k as usize] += 1;
            got += 1;
        }
    }
    assert_eq!(wait_child(&mut child, LIMIT), Some(0));
    assert!(too_long > 0, "no message was longer than the fixed buffer");
    let info = topic.info();
    assert_eq!((info.published, info.received, info.corrupt), (N, N, 0));
    let free = |s: &[tachyon::bus::ClassStats]| s.iter().map(|c| c.free).sum::<usize>();
    assert_eq!(free(&region.pool_stats().unwrap()), free(&initial));
}

/// A consumer with batch reads (`Topic::with_batch_reads`) takes a
/// producer process's stream of small inline messages, waiting for
/// batches whenever it catches up with the producer: every message
/// arrives, whole and in order, and the counts agree.
#[test]
fn a_batch_reader_takes_a_producer_processs_stream_whole_and_in_order() {
    let name = unique("inline-batch");
    let _rm = RemoveRegion(name.clone());
    let region = region(&name);
    let topic = topic_with(&region, 1, 256, 64);
    let reader = region.topic("t").unwrap().with_batch_reads(true);
    assert!(reader.batch_reads() && !topic.batch_reads());
    const N: u64 = 200_000;
    let mut child =
        spawn(ENTRY, "producer", common::Args::name(&name).with("n", N).with("keys", 1).with("slot", 64));
    let mut buf = Vec::new();
    for seq in 0..N {
        let n = reader.recv_into(0, &mut buf, Some(LIMIT)).unwrap();
        assert_eq!(n, buf.len());
        assert_eq!(words(&buf), (0, seq), "in order");
        assert_eq!(buf, message(0, seq, length_in(seq, 64)), "message {seq}'s bytes");
    }
    assert_eq!(wait_child(&mut child, LIMIT), Some(0));
    let info = topic.info();
    assert_eq!((info.published, info.received, info.corrupt), (N, N, 0));
}

/// `recv_into_slice` takes a message that fits its buffer, inline or in a
/// chunk, straight out; one that does not stays queued, in order, untouched
/// and uncounted, until a buffer large enough comes. No chunk is lost on
/// the way, for the default group and a named one.
#[test]
fn a_fixed_buffer_leaves_a_longer_message_queued() {
    let name = unique("inline-slice");
    let _rm = RemoveRegion(name.clone());
    let region =
        Region::create(&name, RegionConfig::default().size(8 << 20).ring_arena(2 << 20).max_groups(2))
            .unwrap();
    let inline = topic(&region, 1, 16);
    let plain = region.create_topic("plain", TopicConfig::default().capacity(16)).unwrap();
    let free = |s: &[tachyon::bus::ClassStats]| s.iter().map(|c| c.free).sum::<usize>();
    let initial = free(&region.pool_stats().unwrap());
    let lens = [10usize, 100, SLOT as usize + 44, 0, 5];
    let body = |i: usize, len: usize| (0..len).map(|b| (b * 3 + i) as u8).collect::<Vec<u8>>();
    for t in [&inline, &plain] {
        for (i, &len) in lens.iter().enumerate() {
            t.send(&body(i, len), Key(0), None).unwrap();
        }
        let mut small = [0u8; 64];
        let mut large = vec![0u8; 1024];
        for (i, &len) in lens.iter().enumerate() {
            if len > small.len() {
                for _ in 0..2 {
                    let e = t.recv_into_slice(0, &mut small, None).unwrap_err();
                    assert!(matches!(e, Error::BufferTooSmall { item, buffer: 64 } if item == len), "{e:?}");
                }
                assert_eq!(t.depth(0).unwrap(), lens.len() - i, "still queued");
                // Exactly its length is enough.
                let n = t.recv_into_slice(0, &mut large[..len], None).unwrap();
                assert_eq!(&large[..n], &body(i, len)[..]);
            } else {
                let n = t.recv_into_slice(0, &mut small, Some(Duration::ZERO)).unwrap();
                assert_eq!(&small[..n], &body(i, len)[..]);
            }
        }
        assert_eq!(t.try_recv_into_slice(0, &mut small).unwrap(), None);
        let info = t.info();
        assert_eq!((info.published, info.received, info.corrupt), (5, 5, 0));
    }
    // A named group's ring: the same, through the group's shared chunks.
    let audit = plain.join_group("audit").unwrap();
    plain.send(&[9u8; 200], Key(0), None).unwrap();
    let mut small = [0u8; 16];
    let e = audit.recv_into_slice(0, &mut small, None).unwrap_err();
    assert!(matches!(e, Error::BufferTooSmall { item: 200, buffer: 16 }), "{e:?}");
    let mut large = [0u8; 200];
    assert_eq!(audit.recv_into_slice(0, &mut large, None).unwrap(), 200);
    assert_eq!(large, [9u8; 200]);
    let n = plain.recv_into_slice(0, &mut large, None).unwrap();
    assert_eq!(n, 200, "the default group gets it too");
    drop(audit);
    assert_eq!(free(&region.pool_stats().unwrap()), initial);
}

/// Every chunk of the pool loaned out.
fn loan_all(topic: &Topic, loans: &mut Vec<tachyon::bus::Loan>) {
    loop {
        match topic.loan(SLOT as usize, Some(Duration::ZERO)) {
            Ok(l) => loans.push(l),
            Err(Error::PoolExhausted { .. }) => return,
            Err(e) => panic!("{e}"),
        }
    }
}

/// A subscription's copy receives (`recv_into`, `recv_into_slice`) take
/// inline messages straight out of their slots: they work with every chunk
/// loaned out. They say which partition each came from; a message too long
/// for a fixed buffer stays first in its partition and the next call looks
/// there first. A named group's subscription copies its shared chunks out.
#[test]
fn a_subscription_copies_inline_messages_without_a_chunk() {
    let name = unique("inline-sub");
    let _rm = RemoveRegion(name.clone());
    let region =
        Region::create(&name, RegionConfig::default().size(8 << 20).ring_arena(2 << 20).max_groups(2))
            .unwrap();
    let topic = topic(&region, 2, 16);
    let free = |s: &[tachyon::bus::ClassStats]| s.iter().map(|c| c.free).sum::<usize>();
    let initial = free(&region.pool_stats().unwrap());
    let key_of = |p: u32| (0u64..).map(Key).find(|&k| topic.partition_of(k) == p).unwrap();
    let (k0, k1) = (key_of(0), key_of(1));
    topic.send(&[1; 10], k0, None).unwrap();
    topic.send(&[2; SLOT as usize + 44], k0, None).unwrap(); // a chunk
    topic.send(&[3; 5], k0, None).unwrap();
    topic.send(&[4; 20], k1, None).unwrap();
    topic.send(&[5; 30], k1, None).unwrap();
    let mut loans = Vec::new();
    loan_all(&topic, &mut loans);
    assert!(matches!(topic.try_receive(0), Err(Error::PoolExhausted { .. })), "receive needs a chunk");
    let sub = topic.subscribe(Partitions::All).unwrap();
    let (mut small, mut large) = ([0u8; 16], [0u8; 64]);
    assert_eq!(sub.try_recv_into_slice(&mut small).unwrap(), Some((0, 10)));
    assert_eq!(small[..10], [1; 10]);
    // Partition 1's first is too long for 16 bytes: it stays, and the next
    // look starts there.
    let e = sub.recv_into_slice(&mut small, None).unwrap_err();
    assert!(matches!(e, Error::BufferTooSmall { item: 20, buffer: 16 }), "{e:?}");
    assert_eq!(topic.depth(1).unwrap(), 2);
    assert_eq!(sub.recv_into_slice(&mut large, SHORT).unwrap(), (1, 20));
    assert_eq!(large[..20], [4; 20]);
    let mut buf = Vec::new();
    // The chunk message, copied out of its chunk, which goes back.
    assert_eq!(sub.try_recv_into(&mut buf).unwrap(), Some((0, SLOT as usize + 44)));
    assert_eq!(buf, vec![2; SLOT as usize + 44]);
    loan_all(&topic, &mut loans);
    assert_eq!(sub.recv_into(&mut buf, SHORT).unwrap(), (1, 30));
    assert_eq!(buf, [5; 30]);
    assert_eq!(sub.recv_into(&mut buf, SHORT).unwrap(), (0, 5));
    assert_eq!(buf, [3; 5]);
    assert_eq!(sub.try_recv_into(&mut buf).unwrap(), None);
    assert_eq!(sub.try_recv_into_slice(&mut large).unwrap(), None);
    let e = sub.recv_into(&mut buf, Some(Duration::from_millis(20))).unwrap_err();
    assert!(matches!(e, Error::Timeout { .. }), "{e:?}");
    drop(loans);
    let info = topic.info();
    assert_eq!((info.published, info.received, info.corrupt), (5, 5, 0));
    // A named group's subscription (its messages travel in shared chunks).
    let audit = topic.join_group("audit").unwrap();
    let audit_sub = audit.subscribe(Partitions::All).unwrap();
    topic.send(&[6; 100], k1, None).unwrap();
    let e = audit_sub.try_recv_into_slice(&mut large).unwrap_err();
    assert!(matches!(e, Error::BufferTooSmall { item: 100, buffer: 64 }), "{e:?}");
    assert_eq!(audit_sub.recv_into(&mut buf, SHORT).unwrap(), (1, 100));
    assert_eq!(buf, [6; 100]);
    assert_eq!(audit.try_recv_into(1, &mut buf).unwrap(), None);
    assert_eq!(sub.try_recv_into(&mut buf).unwrap(), Some((1, 100)), "the default group gets it too");
    drop((audit_sub, audit));
    assert_eq!(free(&region.pool_stats().unwrap()), initial);
}

/// Runs `role` in a child that must die by SIGKILL at `point`.
fn die_at(name: &str, role: &str, point: &str) {
    let mut child = child_command(ENTRY, role, name).env("TACHYON_FAULT", point).spawn().unwrap();
    common::wait_killed(&mut child, &format!("{role} at {point}"));
}

/// A publisher killed with its cell claimed (before or after its bytes are
/// in the slot) publishes nothing: the next consumer repairs the cell (a
/// tombstone), the messages after it flow, no chunk is involved.
#[test]
#[cfg(debug_assertions)]
fn a_publisher_killed_inside_its_slot_publishes_nothing() {
    for point in ["inline-claimed", "inline-written"] {
        let name = unique("inline-kill-pub");
        let _rm = RemoveRegion(name.clone());
        let region = region(&name);
        let topic = topic(&region, 1, 4);
        let initial = region.pool_stats().unwrap();
        die_at(&name, "send-one", point);
        topic.send(b"after", Key(0), None).unwrap();
        let mut buf = Vec::new();
        assert_eq!(topic.recv_into(0, &mut buf, Some(LIMIT)).unwrap(), 5, "{point}");
        assert_eq!(buf, b"after");
        assert!(topic.try_recv_into(0, &mut buf).unwrap().is_none(), "{point}: nothing else");
        // The ring goes round with the repaired cell in it.
        for i in 0..10u64 {
            topic.send(&message(0, i, 100), Key(0), Some(Duration::ZERO)).unwrap();
            topic.recv_into(0, &mut buf, Some(Duration::ZERO)).unwrap();
            assert_eq!(words(&buf), (0, i));
        }
        assert_eq!(topic.info().published, 11, "{point}");
        region.recover().unwrap();
        assert_eq!(region.pool_stats().unwrap(), initial, "{point}");
    }
}

/// A group joined from the oldest while a publisher lies dead in a cell it
/// claimed (killed before its second look, the cell's length word still an
/// earlier lap's inline descriptor) copies the backlog and misses nothing:
/// the dead publisher's message was never published, to any group.
#[test]
#[cfg(debug_assertions)]
fn a_join_from_the_oldest_counts_no_dead_inline_publisher_as_missed() {
    let name = unique("inline-kill-join");
    let _rm = RemoveRegion(name.clone());
    let region =
        Region::create(&name, RegionConfig::default().size(8 << 20).ring_arena(2 << 20).max_groups(2))
            .unwrap();
    let topic = topic(&region, 1, 4);
    // A lap of inline messages: every cell's length word is an inline
    // descriptor now.
    let mut buf = Vec::new();
    for i in 0..4 {
        topic.send(&message(0, i, 40), Key(0), None).unwrap();
        topic.recv_into(0, &mut buf, None).unwrap();
    }
    topic.send(b"queued", Key(0), None).unwrap();
    die_at(&name, "send-one", "inline-claimed");
    let late = topic.join_group_from("late", JoinFrom::Oldest).unwrap();
    assert_eq!(late.missed(), 0, "the dead publisher's message was never published");
    assert_eq!(late.recv_into(0, &mut buf, Some(LIMIT)).unwrap(), 6);
    assert_eq!(buf, b"queued");
    assert_eq!(late.try_recv_into(0, &mut buf).unwrap(), None);
    assert_eq!(topic.recv_into(0, &mut buf, Some(LIMIT)).unwrap(), 6);
    assert_eq!(topic.try_recv_into(0, &mut buf).unwrap(), None, "the dead cell is a tombstone");
}

/// A consumer killed while copying a message out of its slot loses that
/// one message (counted lost: inline slots are at-most-once); the next
/// receive takes its claim over and the stream goes on.
#[test]
#[cfg(debug_assertions)]
fn a_consumer_killed_inside_a_slot_loses_one_message() {
    let name = unique("inline-kill-recv");
    let _rm = RemoveRegion(name.clone());
    let region = region(&name);
    let topic = topic(&region, 1, 4);
    let initial = region.pool_stats().unwrap();
    topic.send(&message(0, 0, 100), Key(0), None).unwrap();
    topic.send(&message(0, 1, 100), Key(0), None).unwrap();
    die_at(&name, "receive-one", "inline-read");
    let mut buf = Vec::new();
    topic.recv_into(0, &mut buf, Some(LIMIT)).unwrap();
    assert_eq!(words(&buf), (0, 1));
    // The dead claim is taken over by this receive or by recovery.
    region.recover().unwrap();
    let info = topic.info();
    assert_eq!((info.published, info.received, info.lost), (2, 1, 1));
    for i in 2..12u64 {
        topic.send(&message(0, i, 100), Key(0), Some(Duration::ZERO)).unwrap();
        topic.recv_into(0, &mut buf, Some(Duration::ZERO)).unwrap();
        assert_eq!(words(&buf), (0, i));
    }
    assert_eq!(region.pool_stats().unwrap(), initial);
}

/// A descriptor that says "inline" with a length past the slot, or on a
/// topic without slots, is damage: reported corrupt, dropped, the next
/// message received.
#[test]
fn a_bad_inline_descriptor_is_reported_and_dropped() {
    const INLINE_CHUNK: u32 = (1 << 24) - 2;
    let name = unique("inline-bad");
    let _rm = RemoveRegion(name.clone());
    let region = region(&name);
    let with = topic(&region, 1, 8);
    let without = region.create_topic("plain", TopicConfig::default().capacity(8)).unwrap();
    for (t, len) in [(&with, SLOT + 1), (&without, 10)] {
        t.publish_raw_descriptor(0, INLINE_CHUNK, len).unwrap();
        t.send(b"next", Key(0), None).unwrap();
        // A fixed buffer shorter than the length it claims leaves it queued.
        let mut short = [0u8; 4];
        let e = t.recv_into_slice(0, &mut short, Some(Duration::ZERO)).unwrap_err();
        assert!(matches!(e, Error::BufferTooSmall { item, buffer: 4 } if item == len as usize), "{e:?}");
        let mut buf = Vec::new();
        let bad = t.recv_into(0, &mut buf, Some(Duration::ZERO));
        assert!(matches!(bad, Err(Error::Corrupt { .. })), "{bad:?}");
        assert_eq!(t.recv_into(0, &mut buf, Some(Duration::ZERO)).unwrap(), 4);
        assert_eq!(buf, b"next");
        assert_eq!(t.info().corrupt, 1);
    }
}

/// A receive that fails after its claim (here: a descriptor naming a chunk
/// that is not queued) gives the chunk it took for an inline message back
/// once: afterwards every loan gets a chunk of its own, and the pool is
/// whole.
#[test]
fn a_failed_receive_gives_its_spare_chunk_back_once() {
    let name = unique("inline-spare");
    let _rm = RemoveRegion(name.clone());
    let region = region(&name);
    let topic = topic(&region, 1, 8);
    let free = |s: &[tachyon::bus::ClassStats]| s.iter().map(|c| c.free).sum::<usize>();
    let initial = free(&region.pool_stats().unwrap());
    for _ in 0..3 {
        topic.publish_raw_descriptor(0, 3, 10).unwrap(); // a free chunk, not queued
        let bad = topic.receive(0, Some(Duration::ZERO));
        assert!(matches!(bad, Err(Error::Corrupt { .. })), "{bad:?}");
    }
    let loans: Vec<_> = (0..200).map(|_| topic.loan(SLOT as usize, Some(Duration::ZERO)).unwrap()).collect();
    let mut at: Vec<usize> = loans.iter().map(|l| l.as_ptr() as usize).collect();
    at.sort_unstable();
    at.dedup();
    assert_eq!(at.len(), loans.len(), "a chunk loaned twice");
    drop(loans);
    assert_eq!(free(&region.pool_stats().unwrap()), initial);
}
