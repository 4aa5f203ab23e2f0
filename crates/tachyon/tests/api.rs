//! The Rust API as users write it: owned handles that live in structs and
//! move into threads and tokio tasks, typed messages (a `#[repr(C)]`
//! struct and a serde value) built in a loan and read in another process,
//! create-or-open with a clear incompatibility error.
#![cfg(not(tachyon_loom))]

mod common;

use common::{spawn, unique, wait_child, RemoveRegion, LIMIT};
use std::io::Write;
use std::time::Duration;
use tachyon::bus::{Key, Loan, Message, Region, RegionConfig, Topic, TopicConfig, ValueLoan};
use tachyon::Error;

const ENTRY: &str = "child_entry";
const WAIT: Option<Duration> = Some(Duration::from_secs(10));

#[derive(Clone, Copy, Debug, PartialEq, tachyon::bytemuck::Pod, tachyon::bytemuck::Zeroable)]
#[bytemuck(crate = "tachyon::bytemuck")]
#[repr(C)]
struct Quote {
    bid: f64,
    ask: f64,
    venue: u32,
    seq: u32,
}

#[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct Order {
    id: u64,
    symbol: String,
    legs: Vec<(String, i64)>,
}

fn order() -> Order {
    Order { id: 77, symbol: "ACME".into(), legs: vec![("buy".into(), 100), ("sell".into(), -40)] }
}

fn config() -> RegionConfig {
    RegionConfig::default().size(8 << 20).ring_arena(1 << 20)
}

#[test]
fn child_entry() {
    let Some((role, args)) = common::role() else { return };
    let name = args.str("name");
    let region = Region::open(name).unwrap();
    let topic = region.topic("typed").unwrap();
    match role.as_str() {
        "produce-typed" => {
            // A struct built in place.
            let mut q: ValueLoan<Quote> = topic.loan_value(WAIT).unwrap();
            q.bid = 99.5;
            q.ask = 100.25;
            q.venue = 3;
            q.seq = 1;
            q.publish(Key(1), WAIT).unwrap();
            // A struct copied in.
            topic.send_value(&Quote { bid: 1.0, ask: 2.0, venue: 4, seq: 2 }, Key(1), WAIT).unwrap();
            // A serde value written straight into the chunk: no length
            // computed by hand.
            let mut loan = topic.loan(4096, WAIT).unwrap();
            serde_json::to_writer(&mut loan, &order()).unwrap();
            loan.publish(Key(1), WAIT).unwrap();
        }
        "create-or-open" => {
            let same = Region::create_or_open(name, config()).unwrap();
            assert_eq!(same.config(), region.config());
            let err = Region::create_or_open(name, config().ring_arena(2 << 20)).unwrap_err();
            assert!(matches!(err, Error::Incompatible { field: "ring_arena", .. }), "{err}");
        }
        other => panic!("unknown role {other}"),
    }
}

#[test]
fn a_struct_and_a_serde_value_cross_processes_through_a_loan() {
    let name = unique("api-typed");
    let _cleanup = RemoveRegion(name.clone());
    let region = Region::create(&name, config()).unwrap();
    let topic = region.create_topic("typed", TopicConfig::default()).unwrap();
    let mut child = spawn(ENTRY, "produce-typed", &name);
    assert_eq!(wait_child(&mut child, LIMIT), Some(0));
    let p = topic.partition_of(Key(1));
    let first = topic.receive(p, WAIT).unwrap();
    assert_eq!(*first.value::<Quote>().unwrap(), Quote { bid: 99.5, ask: 100.25, venue: 3, seq: 1 });
    let second = topic.receive(p, WAIT).unwrap();
    assert_eq!(second.value::<Quote>().unwrap().seq, 2);
    let third = topic.receive(p, WAIT).unwrap();
    let got: Order = serde_json::from_slice(&third).unwrap();
    assert_eq!(got, order());
    // The wrong type is an error that says what was expected, not garbage.
    let err = third.value::<Quote>().unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { .. }), "{err}");
    assert!(err.to_string().contains(&format!("a message of {} bytes is not a", third.len())), "{err}");
    assert!(err.to_string().contains("(24 bytes)"), "{err}");
}

/// What a user writes: a publisher that owns its region and topic.
struct Publisher {
    region: Region,
    topic: Topic,
}

impl Publisher {
    fn new(name: &str) -> tachyon::Result<Publisher> {
        let region = Region::create_or_open(name, config())?;
        let topic = region.create_or_open_topic("ticks", TopicConfig::default().partitions(2))?;
        Ok(Publisher { region, topic })
    }

    fn tick(&self, n: u64) -> tachyon::Result<()> {
        self.topic.send(&n.to_le_bytes(), Key(n), None)
    }
}

#[test]
fn owned_handles_live_in_structs_and_move_into_threads() {
    fn send_sync<T: Send + Sync + 'static>() {}
    fn send<T: Send + 'static>() {}
    send_sync::<Region>();
    send_sync::<Topic>();
    send_sync::<Message>();
    send_sync::<Loan>();
    send::<ValueLoan<Quote>>();

    let name = unique("api-owned");
    let _cleanup = RemoveRegion(name.clone());
    let publisher = Publisher::new(&name).unwrap();
    // A topic moved into a thread, a region clone into another.
    let consumer = publisher.topic.clone();
    let reader = std::thread::spawn(move || {
        let mut seen = Vec::new();
        while seen.len() < 10 {
            for p in 0..consumer.partitions() {
                if let Ok(m) = consumer.receive(p, Some(Duration::from_millis(5))) {
                    seen.push(u64::from_le_bytes(m[..8].try_into().unwrap()));
                }
            }
        }
        seen.sort_unstable();
        seen
    });
    let region = publisher.region.clone();
    let inspector = std::thread::spawn(move || region.topics().unwrap().len());
    for n in 0..10 {
        publisher.tick(n).unwrap();
    }
    assert_eq!(reader.join().unwrap(), (0..10).collect::<Vec<_>>());
    assert_eq!(inspector.join().unwrap(), 1);
    // A topic outlives the Region value it came from, and a message its
    // Topic value.
    let Publisher { region, topic } = publisher;
    drop(region);
    topic.send(b"still mapped", Key(5), None).unwrap();
    let msg = topic.receive(topic.partition_of(Key(5)), WAIT).unwrap();
    drop(topic);
    assert_eq!(&*msg, b"still mapped");
    // A message moved to another thread and released there.
    std::thread::spawn(move || assert_eq!(msg.len(), 12)).join().unwrap();
}

#[tokio::test]
async fn a_topic_moves_into_a_tokio_task_and_a_message_out_of_it() {
    let name = unique("api-tokio");
    let _cleanup = RemoveRegion(name.clone());
    let region = Region::create(&name, config()).unwrap();
    let topic = region.create_topic("events", TopicConfig::default()).unwrap();
    let consumer = topic.clone();
    let task = tokio::spawn(async move {
        for _ in 0..2000 {
            if let Some(msg) = consumer.try_receive(0)? {
                return Ok(msg); // the zero-copy view leaves the task
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        Err(Error::InvalidArgument { what: "no message in 10 s".into() })
    });
    let producer = tokio::spawn(async move {
        let mut loan = topic.loan(64, None)?;
        write!(loan, "event {}", 42).map_err(Error::from)?;
        loan.publish(Key(0), None)
    });
    producer.await.unwrap().unwrap();
    let msg: Message = task.await.unwrap().unwrap();
    assert_eq!(&*msg, b"event 42");
}

#[test]
fn create_or_open_opens_what_matches_and_names_what_differs() {
    let name = unique("api-coo");
    let _cleanup = RemoveRegion(name.clone());
    let region = Region::create_or_open(&name, config()).unwrap();
    region.create_or_open_topic("typed", TopicConfig::default()).unwrap();
    // Another process opens the same region through create_or_open.
    let mut child = spawn(ENTRY, "create-or-open", &name);
    assert_eq!(wait_child(&mut child, LIMIT), Some(0));
    let again = Region::create_or_open(&name, config()).unwrap();
    assert_eq!(again.config(), region.config());
    let err = Region::create_or_open(&name, config().max_topics(8)).unwrap_err();
    assert!(matches!(err, Error::Incompatible { field: "max_topics", .. }), "{err}");
    assert!(err.to_string().contains("max_topics = 64, not 8"), "{err}");
    assert!(err.to_string().contains("open it as it is, or remove it"), "{err}");
    let err = region.create_or_open_topic("typed", TopicConfig::default().capacity(64)).unwrap_err();
    assert!(matches!(err, Error::Incompatible { field: "capacity", .. }), "{err}");
    assert!(err.to_string().contains("capacity = 1024, not 64"), "{err}");
}

#[test]
fn a_loan_writes_what_fits_and_publishes_what_was_written() {
    let name = unique("api-write");
    let _cleanup = RemoveRegion(name.clone());
    let region = Region::create(&name, config()).unwrap();
    let topic = region.create_topic("t", TopicConfig::default()).unwrap();
    let mut loan = topic.loan(8, None).unwrap();
    assert_eq!(loan.len(), 8);
    loan.write_all(b"1234").unwrap();
    assert_eq!(&*loan, b"1234");
    let err = loan.write_all(b"56789").unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::WriteZero);
    assert_eq!(&*loan, b"12345678");
    loan.truncate(6);
    loan.publish(Key(0), None).unwrap();
    assert_eq!(&*topic.receive(0, WAIT).unwrap(), b"123456");
    // Chunks are 64-byte aligned, so any Pod type up to that alignment can
    // be viewed in place.
    let loan = topic.loan(100, None).unwrap();
    assert_eq!(loan.as_ptr() as usize % tachyon::bus::CHUNK_ALIGN, 0);
    drop(loan);
    // `?` on an io::Error in a function returning tachyon::Result.
    fn io_fails() -> tachyon::Result<()> {
        std::fs::read("/surely/not/here")?;
        Ok(())
    }
    assert!(matches!(io_fails(), Err(Error::Io { .. })));
}

/// The raw interface for bindings: indices and addresses checked where
/// they can be (a wrong one is `InvalidArgument`, nothing moves), and the
/// pool whole after loans and messages went through it.
#[test]
fn raw_interface_checks_what_it_can() {
    let name = unique("raw");
    let region = Region::create(&name, config()).unwrap();
    let topic = region.create_topic("raw", TopicConfig::default()).unwrap();
    let free_before: usize = region.pool_stats().unwrap().iter().map(|c| c.free).sum();

    let loan = topic.loan_raw(100, WAIT).unwrap();
    assert_eq!(loan.len, 100);
    assert_eq!(loan.ptr.as_ptr() as usize % tachyon::bus::CHUNK_ALIGN, 0);
    assert_eq!(topic.chunk_index(loan.ptr.as_ptr()), Some(loan.index));
    assert_eq!(topic.chunk_index(std::ptr::null()), None);
    assert_eq!(topic.chunk_index(loan.ptr.as_ptr().wrapping_add(64)), None, "inside a 256-byte chunk");
    let past = topic.chunk_count() as u32;
    // SAFETY: indices from this region's raw calls, each given back once;
    // the bad ones are refused before anything moves.
    unsafe {
        assert!(matches!(topic.publish_raw(past, 1, Key(1), WAIT), Err(Error::InvalidArgument { .. })));
        assert!(matches!(
            topic.publish_raw(loan.index, 257, Key(1), WAIT),
            Err(Error::InvalidArgument { .. })
        ));
        assert!(matches!(topic.release_raw(past), Err(Error::InvalidArgument { .. })));
        loan.ptr.as_ptr().copy_from_nonoverlapping(b"raw bytes".as_ptr(), 9);
        topic.publish_raw(loan.index, 9, Key(1), WAIT).unwrap();
    }
    let msg = topic.receive_raw(topic.partition_of(Key(1)), WAIT).unwrap();
    // SAFETY: received, not released yet.
    assert_eq!(unsafe { std::slice::from_raw_parts(msg.ptr.as_ptr(), msg.len) }, b"raw bytes");
    assert_eq!(topic.try_receive_raw(topic.partition_of(Key(1))).unwrap(), None);
    // SAFETY: received through this region, released once; the loan below
    // given back once.
    unsafe {
        topic.release_raw(msg.index).unwrap();
        let again = topic.loan_raw(8, WAIT).unwrap();
        topic.unloan_raw(again.index).unwrap();
    }
    drop(topic);
    let free_after: usize = region.pool_stats().unwrap().iter().map(|c| c.free).sum();
    assert_eq!(free_before, free_after, "every chunk back");
    drop(region);
    Region::remove(&name).unwrap();
}

/// `ReceiveStop` wakes a receive blocked for ever, under every wait
/// policy; a message already there is still received; a stop stays
/// stopped.
#[test]
fn receive_until_is_woken_by_its_stop() {
    use tachyon::bus::ReceiveStop;
    use tachyon::sync::WaitPolicy;
    let name = unique("recv-stop");
    let region = Region::create(&name, config()).unwrap();
    for (i, policy) in [WaitPolicy::Futex, WaitPolicy::Hybrid, WaitPolicy::Spin].into_iter().enumerate() {
        let topic = region.create_topic(&format!("t{i}"), TopicConfig::default().wait(policy)).unwrap();
        let stop = ReceiveStop::new();
        std::thread::scope(|s| {
            // Bounded: a stop that failed to wake it ends in `Timeout`,
            // which fails the assertion below instead of hanging the test.
            let waiter = s.spawn(|| topic.receive_until(0, WAIT, &stop).map(|m| m.to_vec()));
            // Let it block (nothing asserts it did: a stop that comes first
            // must end it too).
            std::thread::sleep(Duration::from_millis(30));
            stop.stop();
            let r = waiter.join().unwrap();
            assert!(matches!(r, Err(Error::Interrupted)), "{policy:?}: {r:?}");
        });
        topic.send(b"queued", Key(0), None).unwrap();
        assert_eq!(&*topic.receive_until(0, None, &stop).unwrap(), b"queued", "{policy:?}");
        assert!(matches!(topic.receive_until(0, WAIT, &stop), Err(Error::Interrupted)));
        // Another stop, not stopped: a plain timed receive.
        let other = ReceiveStop::new();
        assert!(topic.receive_until(0, Some(Duration::from_millis(5)), &other).unwrap_err().is_timeout());
    }
    drop(region);
    Region::remove(&name).unwrap();
}
