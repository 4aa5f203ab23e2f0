//! Error messages say what happened and what to do: one test per message
//! that a new user met and could not act on.
#![cfg(not(tachyon_loom))]

mod common;

use common::unique;
use std::time::Duration;
use tachyon::bus::{Key, Region, RegionConfig, TopicConfig, MAX_MESSAGE};
use tachyon::{Error, Segment, SharedArray};

const SHORT: Option<Duration> = Some(Duration::from_millis(20));

mod venue_a {
    #[derive(Clone, Copy, tachyon::bytemuck::Pod, tachyon::bytemuck::Zeroable)]
    #[bytemuck(crate = "tachyon::bytemuck")]
    #[repr(C)]
    pub struct Level {
        pub price: f64,
        pub size: f64,
    }
}

mod venue_b {
    #[derive(Clone, Copy, tachyon::bytemuck::Pod, tachyon::bytemuck::Zeroable)]
    #[bytemuck(crate = "tachyon::bytemuck")]
    #[repr(C)]
    pub struct Level {
        pub price: f64,
        pub size: f64,
    }
}

#[test]
fn a_type_mismatch_of_identical_structs_points_at_check_type_name() {
    let name = unique("err-type");
    let _a = SharedArray::<venue_a::Level>::create(&name, 4).unwrap();
    let err = SharedArray::<venue_b::Level>::open(&name).unwrap_err();
    assert!(matches!(err, Error::TypeMismatch { .. }), "{err}");
    let text = err.to_string();
    assert!(text.contains("check_type_name(false)"), "{text}");
    // And the way out works.
    SharedArray::<venue_b::Level>::builder(&name).check_type_name(false).open().unwrap();
}

#[test]
fn a_name_with_a_backslash_is_escaped_once() {
    let err = Segment::create("foo\\bar", 4096).unwrap_err();
    assert!(matches!(err, Error::InvalidName { .. }), "{err}");
    let text = err.to_string();
    assert!(text.contains(r#""foo\\bar""#), "{text}");
    assert!(!text.contains(r"\\\\"), "escaped twice: {text}");
}

#[test]
fn a_held_lock_says_what_waited_and_for_how_long() {
    let name = unique("err-lock");
    let array = SharedArray::<u64>::create(&name, 4).unwrap();
    let other = SharedArray::<u64>::open(&name).unwrap();
    let _guard = array.write_lock().unwrap();
    let err = other.write_lock_timeout(SHORT).unwrap_err();
    assert!(matches!(err, Error::Timeout { waited: SHORT, .. }), "{err}");
    let text = err.to_string();
    assert!(text.contains("timed out after 20ms waiting for the write lock"), "{text}");
    assert!(text.contains("wait longer"), "{text}");
}

#[test]
fn bus_errors_say_what_to_do() {
    let name = unique("err-bus");
    let region = Region::create(&name, RegionConfig::default().size(8 << 20).ring_arena(1 << 20)).unwrap();
    let topic = region.create_topic("t", TopicConfig::default().capacity(2)).unwrap();
    // Too large for any chunk: what to do on a bus topic (no "nodes" here).
    let err = topic.send(&vec![0; MAX_MESSAGE + 1], Key(0), SHORT).unwrap_err();
    assert!(matches!(err, Error::MessageTooLarge { .. }), "{err}");
    assert!(err.to_string().contains("split the message"), "{err}");
    assert!(!err.to_string().contains("nodes"), "{err}");
    // An empty partition: try_ says None, a timed receive says what it
    // waited for.
    assert!(topic.try_receive(0).unwrap().is_none());
    let err = topic.receive(0, SHORT).unwrap_err();
    assert!(err.is_timeout());
    assert!(err.to_string().contains("after 20ms waiting for a message in the topic's partition"), "{err}");
    // A full partition: try_ is Full, a timed send says what it waited for.
    topic.send(b"1", Key(0), SHORT).unwrap();
    topic.send(b"2", Key(0), SHORT).unwrap();
    let err = topic.try_send(b"3", Key(0)).unwrap_err();
    assert!(matches!(err, Error::Full { .. }), "{err}");
    let err = topic.send(b"3", Key(0), SHORT).unwrap_err();
    assert!(err.to_string().contains("waiting for room in the topic's partition"), "{err}");
    drop(topic);
    drop(region);
    Region::remove(&name).unwrap();
    // The region is gone: the not-found says how to make one.
    let err = Region::open(&name).unwrap_err();
    assert!(err.to_string().contains("create it first (or use create_or_open)"), "{err}");
}

/// `Some(Duration::MAX)` is a common way to say "for ever": every timed
/// wait takes it as no deadline, where adding it to the clock panicked
/// (a topic's receive, send and loan, `CircularBuffer`,
/// `BroadcastBuffer`, an RPC client's connect). Each wait here ends when
/// another thread gives it what it waits for.
#[test]
fn a_timeout_too_long_to_add_is_a_wait_for_ever_not_a_panic() {
    use tachyon::primitives::{BroadcastBuffer, CircularBuffer, Overflow, RpcBuffer};
    const EVER: Option<Duration> = Some(Duration::MAX);
    let later = || std::thread::sleep(Duration::from_millis(50));

    let name = unique("err-ever");
    let region = Region::create(&name, RegionConfig::default().size(8 << 20).ring_arena(1 << 20)).unwrap();
    let topic = region.create_topic("t", TopicConfig::default().capacity(2)).unwrap();
    std::thread::scope(|s| {
        // A receive from an empty partition.
        s.spawn(|| {
            later();
            topic.send(b"m", Key(0), SHORT).unwrap();
        });
        assert_eq!(&*topic.receive(0, EVER).unwrap(), b"m");
    });
    std::thread::scope(|s| {
        // A send into a full partition.
        topic.send(b"1", Key(0), SHORT).unwrap();
        topic.send(b"2", Key(0), SHORT).unwrap();
        s.spawn(|| {
            later();
            drop(topic.receive(0, SHORT).unwrap());
        });
        topic.send(b"3", Key(0), EVER).unwrap();
    });
    while topic.try_receive(0).unwrap().is_some() {}
    // A loan from a pool with no chunk of its class left.
    let mut held = Vec::new();
    while let Ok(l) = topic.try_loan(4096) {
        held.push(l);
    }
    assert!(!held.is_empty());
    std::thread::scope(|s| {
        s.spawn(|| {
            later();
            held.pop();
        });
        drop(topic.loan(4096, EVER).unwrap());
    });
    drop(held);
    drop(topic);
    drop(region);
    Region::remove(&name).unwrap();

    let name = unique("err-ever-cb");
    let cb = CircularBuffer::create(&name, 4, 64).unwrap();
    std::thread::scope(|s| {
        s.spawn(|| {
            later();
            cb.write(b"item", SHORT).unwrap();
        });
        let mut buf = [0u8; 64];
        assert_eq!(cb.read(&mut buf, EVER).unwrap(), 4);
    });

    let name = unique("err-ever-bc");
    let bus = BroadcastBuffer::create(&name, 4, 64, Overflow::Block).unwrap();
    let mut reader = bus.subscribe().unwrap();
    std::thread::scope(|s| {
        s.spawn(|| {
            later();
            bus.write(b"item", SHORT).unwrap();
        });
        let mut buf = [0u8; 64];
        assert_eq!(reader.read(&mut buf, EVER).unwrap().len, 4);
    });

    let name = unique("err-ever-rpc");
    let server =
        RpcBuffer::builder(&name).handler(|_id, msg: &[u8]| Ok::<_, String>(msg.to_vec())).create().unwrap();
    let client = RpcBuffer::builder(&name).connect_timeout(EVER).open().unwrap();
    assert_eq!(client.request(b"ever", EVER).unwrap(), b"ever");
    drop((client, server));
}
