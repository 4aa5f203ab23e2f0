//! Subscriptions and async across real processes: a producer process, an
//! async consumer under tokio (current-thread and multi-thread) and under
//! `futures-executor`; cancelled receive futures lose nothing; a
//! subscription over 4 partitions under each wait policy; async rings,
//! broadcast readers and events.
#![cfg(not(tachyon_loom))]

mod common;

use common::{spawn, unique, wait_child, Args, RemoveRegion, LIMIT};
use futures_util::StreamExt;
use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;
use tachyon::bus::{Key, Partitions, Region, RegionConfig, Subscription, TopicConfig};
use tachyon::sync::WaitPolicy;

const ENTRY: &str = "child_entry";
const LONG: Option<Duration> = Some(Duration::from_secs(30));
const MESSAGES: u64 = 10_000;
const KEYS: u64 = 16;

/// Ends the whole test process if the calling test is still running after
/// `secs`: no test may hang, whatever executor it runs on. Dropping the
/// guard (at the end of the test, passed or panicked) disarms it, so that
/// one test's limit does not cut short the tests that run after it.
#[must_use = "the watchdog is disarmed when the guard drops"]
fn watchdog(secs: u64) -> std::sync::mpsc::Sender<()> {
    let (disarm, armed) = std::sync::mpsc::channel::<()>();
    let test = std::thread::current().name().unwrap_or("a test").to_owned();
    std::thread::spawn(move || {
        if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = armed.recv_timeout(Duration::from_secs(secs))
        {
            eprintln!("async_bus: {test} ran longer than {secs} s; failing");
            std::process::exit(101);
        }
    });
    disarm
}

fn region(name: &str, policy: WaitPolicy) -> Region {
    region_with(name, TopicConfig::default().wait(policy))
}

/// A region with topic "t" of `cfg`, with 4 partitions of 64.
fn region_with(name: &str, cfg: TopicConfig) -> Region {
    let r = Region::create(name, RegionConfig::default().size(16 << 20).ring_arena(1 << 20)).unwrap();
    r.create_topic("t", cfg.partitions(4).capacity(64)).unwrap();
    r
}

/// The message `seq` of `key`: key, sequence, checksum.
fn message(key: u64, seq: u64) -> [u8; 24] {
    let mut m = [0u8; 24];
    m[..8].copy_from_slice(&key.to_le_bytes());
    m[8..16].copy_from_slice(&seq.to_le_bytes());
    m[16..].copy_from_slice(&(key.wrapping_mul(31) ^ seq).to_le_bytes());
    m
}

/// Checks one received message against the order of its key.
struct Order {
    next: Vec<u64>,
    total: u64,
}

impl Order {
    fn new() -> Order {
        Order { next: vec![0; KEYS as usize], total: 0 }
    }
    fn check(&mut self, m: &[u8]) {
        assert_eq!(m.len(), 24);
        let word = |i: usize| u64::from_le_bytes(m[i * 8..i * 8 + 8].try_into().unwrap());
        let (key, seq) = (word(0), word(1));
        assert_eq!(word(2), key.wrapping_mul(31) ^ seq, "corrupt message");
        assert_eq!(seq, self.next[key as usize], "key {key}: out of order or lost");
        self.next[key as usize] += 1;
        self.total += 1;
    }
}

#[test]
fn child_entry() {
    let Some((role, args)) = common::role() else { return };
    let name = args.str("name");
    let n: u64 = args.get("n");
    match role.as_str() {
        "producer" => {
            let region = Region::open(name).unwrap();
            let topic = region.topic("t").unwrap();
            let mut seqs = [0u64; KEYS as usize];
            for i in 0..n {
                let key = i % KEYS;
                topic.send(&message(key, seqs[key as usize]), Key(key), LONG).unwrap();
                seqs[key as usize] += 1;
            }
        }
        "ring-writer" => {
            let ring = tachyon::CircularBuffer::open(name).unwrap();
            for i in 0..n {
                ring.write(&i.to_le_bytes(), LONG).unwrap();
            }
        }
        other => panic!("unknown role {other}"),
    }
}

/// Starts a producer process of `n` messages on topic "t" of `name`.
fn producer(name: &str, n: u64) -> std::process::Child {
    spawn(ENTRY, "producer", Args::name(name).with("n", n))
}

async fn consume_stream(mut sub: Subscription, n: u64) -> Order {
    let mut order = Order::new();
    while order.total < n {
        let msg = sub.next().await.expect("an endless stream").unwrap();
        order.check(&msg);
    }
    order
}

#[test]
fn async_consumer_under_tokio_current_thread() {
    current_thread_consumer("async-cur", TopicConfig::default().wait(WaitPolicy::Hybrid));
}

/// A subscription's stream of a topic with light hand-overs
/// (`TopicConfig::light_handovers`), futex waits, the producer in another
/// process: the producer notifies without a fence, and the pending
/// future's poll runs the `membarrier` barrier after it registers; every
/// message arrives, in order per key.
#[test]
fn async_consumer_of_a_light_topic() {
    let cfg = TopicConfig::default().wait(WaitPolicy::Futex).inline_payload(64).light_handovers(true);
    current_thread_consumer("async-light", cfg);
}

/// A producer process streams to a subscription consumed by an async task
/// on a current-thread tokio runtime, through topic "t" of `cfg`.
fn current_thread_consumer(tag: &str, cfg: TopicConfig) {
    let _watchdog = watchdog(240);
    let name = unique(tag);
    let _c = RemoveRegion(name.clone());
    let region = region_with(&name, cfg);
    let sub = region.topic("t").unwrap().subscribe(Partitions::All).unwrap();
    let mut child = producer(&name, MESSAGES);
    let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
    let order = rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(120), consume_stream(sub, MESSAGES))
            .await
            .expect("timed out")
    });
    assert_eq!(order.total, MESSAGES);
    assert_eq!(wait_child(&mut child, LIMIT), Some(0));
}

#[test]
fn async_consumer_under_tokio_multi_thread() {
    let _watchdog = watchdog(240);
    let name = unique("async-multi");
    let _c = RemoveRegion(name.clone());
    let region = region(&name, WaitPolicy::Futex);
    let topic = region.topic("t").unwrap();
    let mut child = producer(&name, MESSAGES);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_time().build().unwrap();
    // Receives in a spawned task (the future is Send + 'static), with
    // receive_async on a subscription moved into the task.
    let sub = topic.subscribe(Partitions::All).unwrap();
    let order = rt.block_on(async move {
        let task = tokio::spawn(async move {
            let mut order = Order::new();
            while order.total < MESSAGES {
                let msg = sub.receive_async().await.unwrap();
                order.check(&msg);
            }
            order
        });
        tokio::time::timeout(Duration::from_secs(120), task).await.expect("timed out").unwrap()
    });
    assert_eq!(order.total, MESSAGES);
    assert_eq!(wait_child(&mut child, LIMIT), Some(0));
}

#[test]
fn async_consumer_under_futures_executor() {
    let _watchdog = watchdog(240);
    let name = unique("async-fx");
    let _c = RemoveRegion(name.clone());
    let region = region(&name, WaitPolicy::Hybrid);
    let sub = region.topic("t").unwrap().subscribe(Partitions::All).unwrap();
    let mut child = producer(&name, MESSAGES);
    let order = futures_executor::block_on(consume_stream(sub, MESSAGES));
    assert_eq!(order.total, MESSAGES);
    assert_eq!(wait_child(&mut child, LIMIT), Some(0));
}

/// Per-partition futures (Topic::receive_async), one task per partition.
#[test]
fn async_topic_receive_per_partition() {
    let _watchdog = watchdog(240);
    let name = unique("async-part");
    let _c = RemoveRegion(name.clone());
    let region = region(&name, WaitPolicy::Hybrid);
    let topic = region.topic("t").unwrap();
    let n = 4_000;
    let mut child = producer(&name, n);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_time().build().unwrap();
    let total = rt.block_on(async {
        let remaining = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(n));
        let tasks: Vec<_> = (0..4)
            .map(|p| {
                let topic = topic.clone();
                let remaining = remaining.clone();
                tokio::spawn(async move {
                    let mut got = 0u64;
                    // Stop once every message is in: the other tasks' receives
                    // are cancelled by the timeout (and must take nothing).
                    while remaining.load(std::sync::atomic::Ordering::SeqCst) > 0 {
                        if let Ok(m) =
                            tokio::time::timeout(Duration::from_millis(50), topic.receive_async(p)).await
                        {
                            m.unwrap();
                            got += 1;
                            remaining.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                        }
                    }
                    got
                })
            })
            .collect();
        let mut total = 0;
        for t in tasks {
            total += tokio::time::timeout(Duration::from_secs(120), t).await.expect("timed out").unwrap();
        }
        total
    });
    assert_eq!(total, n);
    assert_eq!(wait_child(&mut child, LIMIT), Some(0));
    for p in 0..4 {
        assert_eq!(topic.depth(p).unwrap(), 0);
    }
}

/// Polls `fut` once with a waker that does nothing, then drops it: a
/// receive cancelled right after it registered (or resolved).
fn poll_once<F: Future>(fut: F) -> Option<F::Output> {
    let mut fut = pin!(fut);
    match fut.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(v) => Some(v),
        Poll::Pending => None,
    }
}

/// Receive futures cancelled midway (dropped while pending, by a timeout,
/// or by `select!` losing) take no message: every one of 10,000 messages
/// from another process is received exactly once, in order per key.
#[test]
fn cancelled_receives_lose_nothing() {
    let _watchdog = watchdog(240);
    let name = unique("async-cancel");
    let _c = RemoveRegion(name.clone());
    let region = region(&name, WaitPolicy::Hybrid);
    let topic = region.topic("t").unwrap();
    let sub = topic.subscribe(Partitions::All).unwrap();
    let mut child = producer(&name, MESSAGES);
    let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
    let (order, cancelled) = rt.block_on(async {
        let mut order = Order::new();
        let mut cancelled = 0u64;
        let mut round = 0u64;
        while order.total < MESSAGES {
            round += 1;
            match round % 3 {
                // Polled once and dropped (registered with the waiter thread
                // if nothing was there).
                0 => match poll_once(sub.receive_async()) {
                    Some(m) => order.check(&m.unwrap()),
                    None => cancelled += 1,
                },
                // Dropped by a timeout.
                1 => match tokio::time::timeout(Duration::from_micros(50), sub.receive_async()).await {
                    Ok(m) => order.check(&m.unwrap()),
                    Err(_) => cancelled += 1,
                },
                // Raced against a per-partition receive in select!: the
                // loser is dropped.
                _ => {
                    tokio::select! {
                        m = sub.receive_async() => order.check(&m.unwrap()),
                        m = topic.receive_async((round / 3 % 4) as u32) => order.check(&m.unwrap()),
                        _ = tokio::time::sleep(Duration::from_secs(60)) => panic!("nothing for 60 s"),
                    }
                }
            }
        }
        (order, cancelled)
    });
    assert_eq!(order.total, MESSAGES);
    assert_eq!(wait_child(&mut child, LIMIT), Some(0));
    // Nothing left behind: no message, no sleeper registration.
    assert!(sub.try_receive().unwrap().is_none());
    eprintln!("cancelled receive futures: {cancelled}");
}

/// Consumer groups through subscriptions: two groups of one topic, one
/// consumed as a `Stream` under tokio with receives cancelled by timeouts,
/// the other with `receive_async` under `futures-executor` with receives
/// polled once and dropped; a producer process sends 10,000 messages.
/// Each group gets every message once, in order per key, and the pool is
/// full again at the end (every group released every chunk).
#[test]
fn groups_async_under_two_executors_with_cancellations() {
    let _watchdog = watchdog(240);
    let name = unique("async-groups");
    let _c = RemoveRegion(name.clone());
    let cfg = RegionConfig::default().size(16 << 20).ring_arena(2 << 20).max_groups(3);
    let region = Region::create(&name, cfg).unwrap();
    let topic = region
        .create_topic(
            "t",
            TopicConfig::default().partitions(4).capacity(64).wait(WaitPolicy::Hybrid).default_group(false),
        )
        .unwrap();
    let initial = region.pool_stats().unwrap();
    // Joined before the producer starts: both see every message.
    let tokio_sub = topic.join_group("tokio").unwrap().subscribe(Partitions::All).unwrap();
    let fx_sub = topic.join_group("fx").unwrap().subscribe(Partitions::All).unwrap();
    assert_eq!(tokio_sub.group().unwrap().name(), "tokio");
    let mut child = producer(&name, MESSAGES);
    let (tokio_order, fx_order) = std::thread::scope(|s| {
        let t = s.spawn(|| {
            let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
            rt.block_on(async {
                let mut sub = tokio_sub;
                let mut order = Order::new();
                let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
                while order.total < MESSAGES {
                    assert!(tokio::time::Instant::now() < deadline, "timed out");
                    match tokio::time::timeout(Duration::from_micros(100), sub.next()).await {
                        Ok(m) => order.check(&m.expect("an endless stream").unwrap()),
                        Err(_) => continue,
                    }
                }
                order
            })
        });
        let f = s.spawn(|| {
            futures_executor::block_on(async {
                let mut order = Order::new();
                let mut round = 0u64;
                while order.total < MESSAGES {
                    round += 1;
                    if round % 2 == 0 {
                        if let Some(m) = poll_once(fx_sub.receive_async()) {
                            order.check(&m.unwrap());
                        }
                    } else {
                        order.check(&fx_sub.receive_async().await.unwrap());
                    }
                }
                (order, fx_sub)
            })
        });
        (t.join().unwrap(), f.join().unwrap())
    });
    let (fx_order, fx_sub) = fx_order;
    assert_eq!(tokio_order.total, MESSAGES);
    assert_eq!(fx_order.total, MESSAGES);
    assert_eq!(wait_child(&mut child, LIMIT), Some(0));
    assert!(fx_sub.try_receive().unwrap().is_none());
    assert_eq!(region.pool_stats().unwrap(), initial, "every chunk back in the pool");
}

/// A pending loan (pool exhausted) dropped takes no chunk; a pending
/// publish (partition full) dropped returns its chunk: the pool is full
/// again at the end.
#[test]
fn cancelled_loans_and_publishes_leak_nothing() {
    let _watchdog = watchdog(120);
    let name = unique("async-loan");
    let _c = RemoveRegion(name.clone());
    let region = Region::create(&name, RegionConfig::default().size(8 << 20).ring_arena(1 << 20)).unwrap();
    let topic = region.create_topic("t", TopicConfig::default().capacity(2)).unwrap();
    let free_before: usize = region.pool_stats().unwrap().iter().map(|c| c.free).sum();
    // Fill the partition; a third publish must wait.
    topic.send(b"a", Key(0), None).unwrap();
    topic.send(b"b", Key(0), None).unwrap();
    let loan = topic.try_loan(8).unwrap();
    assert!(poll_once(loan.publish_async(Key(0))).is_none(), "the partition is full");
    // Exhaust the class of 64-byte chunks with loans held here.
    let mut held = Vec::new();
    while let Ok(l) = topic.try_loan(64) {
        held.push(l);
        assert!(held.len() < 1 << 20);
    }
    assert!(poll_once(topic.loan_async(64)).is_none(), "the pool is exhausted");
    // A pending loan is woken by a chunk coming back.
    let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
    let loan = rt.block_on(async {
        let pending = topic.loan_async(64);
        drop(held.pop());
        tokio::time::timeout(Duration::from_secs(20), pending).await.expect("woken").unwrap()
    });
    drop(loan);
    drop(held);
    // A pending publish is woken by a receive making room.
    rt.block_on(async {
        let loan = topic.loan_async(8).await.unwrap();
        let publish = loan.publish_async(Key(0));
        drop(topic.receive(0, None).unwrap());
        tokio::time::timeout(Duration::from_secs(20), publish).await.expect("woken").unwrap()
    });
    while topic.try_receive(0).unwrap().is_some() {}
    let free_after: usize = region.pool_stats().unwrap().iter().map(|c| c.free).sum();
    assert_eq!(free_after, free_before, "chunks leaked");
}

/// One blocking receive over 4 partitions gets every message of keys
/// spread over them, in order per key, under each wait policy.
#[test]
fn subscription_over_four_partitions_under_each_policy() {
    let _watchdog = watchdog(240);
    for policy in [WaitPolicy::Futex, WaitPolicy::Hybrid, WaitPolicy::Spin] {
        let name = unique("sub-policy");
        let _c = RemoveRegion(name.clone());
        let region = region(&name, policy);
        let sub = region.topic("t").unwrap().subscribe(Partitions::All).unwrap();
        let n = 4_000;
        let mut child = producer(&name, n);
        let mut order = Order::new();
        let mut per_partition = [0u64; 4];
        while order.total < n {
            let msg = sub.receive(LONG).unwrap();
            order.check(&msg);
            let key = u64::from_le_bytes(msg[..8].try_into().unwrap());
            per_partition[sub.topic().partition_of(Key(key)) as usize] += 1;
        }
        assert_eq!(wait_child(&mut child, LIMIT), Some(0));
        assert!(per_partition.iter().all(|&c| c > 0), "{policy:?}: {per_partition:?}");
        assert!(sub.try_receive().unwrap().is_none());
    }
}

/// An async ring reader in this process, a blocking writer in another.
#[test]
fn async_ring_reader_across_processes() {
    async_ring_reader(false);
}

/// The same through a ring with light hand-overs: the writer notifies
/// without a fence, the pending future runs the `membarrier` barrier
/// after it registers.
#[test]
fn async_ring_reader_across_processes_light() {
    async_ring_reader(true);
}

fn async_ring_reader(light: bool) {
    let _watchdog = watchdog(120);
    let name = unique("async-ring");
    let ring = tachyon::CircularBuffer::builder(&name)
        .node_count(8)
        .node_size(16)
        .light_handovers(light)
        .create()
        .unwrap();
    let n = 5_000u64;
    let mut child = spawn(ENTRY, "ring-writer", Args::name(&name).with("n", n));
    let got = futures_executor::block_on(async {
        let mut buf = [0u8; 16];
        for i in 0..n {
            let len = ring.read_async(&mut buf).await.unwrap();
            assert_eq!(u64::from_le_bytes(buf[..len].try_into().unwrap()), i);
        }
        n
    });
    assert_eq!(got, n);
    assert_eq!(wait_child(&mut child, LIMIT), Some(0));
}

#[test]
fn async_broadcast_and_event() {
    let _watchdog = watchdog(120);
    let name = unique("async-bc");
    let bus = tachyon::BroadcastBuffer::create(&name, 4, 16, tachyon::Overflow::Block).unwrap();
    let mut readers: Vec<_> = (0..2).map(|_| bus.subscribe().unwrap()).collect();
    let event = std::sync::Arc::new(tachyon::sync::Event::new(tachyon::sync::EventMode::AutoReset));
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_time().build().unwrap();
    rt.block_on(async {
        let writer = {
            let bus = bus.clone();
            let event = event.clone();
            tokio::spawn(async move {
                for i in 0..1000u64 {
                    // Blocking-mode buffer: wait while a reader lags.
                    while let Err(tachyon::Error::Full { .. }) = bus.try_write(&i.to_le_bytes()) {
                        tokio::time::sleep(Duration::from_micros(100)).await;
                    }
                }
                event.set();
            })
        };
        for i in 0..1000u64 {
            for r in readers.iter_mut() {
                let mut buf = [0u8; 16];
                let got = tokio::time::timeout(Duration::from_secs(20), r.read_async(&mut buf))
                    .await
                    .expect("timed out")
                    .unwrap();
                assert_eq!(u64::from_le_bytes(buf[..got.len].try_into().unwrap()), i);
            }
        }
        tokio::time::timeout(Duration::from_secs(20), event.wait_async()).await.expect("event");
        writer.await.unwrap();
    });
    assert!(!event.is_set());
}

/// A cancelled event wait, woken by an auto-reset set, passes the set on.
#[test]
fn cancelled_event_wait_passes_the_set_on() {
    let _watchdog = watchdog(60);
    let event = tachyon::sync::Event::new(tachyon::sync::EventMode::AutoReset);
    std::thread::scope(|s| {
        let mut first = Box::pin(event.wait_async());
        assert!(first.as_mut().poll(&mut Context::from_waker(Waker::noop())).is_pending());
        let blocked = s.spawn(|| event.wait(Some(Duration::from_secs(30))));
        std::thread::sleep(Duration::from_millis(20));
        event.set();
        drop(first); // cancelled without passing: the blocked thread gets the set
        blocked.join().unwrap().unwrap();
    });
}

/// The stream and a ring write future in one select loop.
#[test]
fn async_ring_writer_waits_for_room() {
    let _watchdog = watchdog(60);
    let name = unique("async-ring-w");
    let ring = tachyon::CircularBuffer::create(&name, 2, 16).unwrap();
    ring.try_write(b"1").unwrap();
    ring.try_write(b"2").unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
    rt.block_on(async {
        assert!(poll_once(ring.write_async(b"x")).is_none(), "full");
        let mut buf = [0u8; 16];
        let write = ring.write_async(b"3");
        let (w, r) = tokio::join!(write, async {
            tokio::time::sleep(Duration::from_millis(5)).await;
            ring.read_async(&mut buf).await
        });
        w.unwrap();
        assert_eq!(r.unwrap(), 1);
    });
    let mut buf = [0u8; 16];
    let mut items = Vec::new();
    while let Some(n) = ring.try_read(&mut buf).unwrap() {
        items.push(buf[..n].to_vec());
    }
    assert_eq!(items, vec![b"2".to_vec(), b"3".to_vec()]);
}

/// A wait set over a subscription and an idle topic: every wake-up names
/// the subscription, and waiting then receiving gets every message a
/// producer process sends.
#[test]
fn wait_set_across_processes() {
    let _watchdog = watchdog(120);
    let name = unique("waitset");
    let _c = RemoveRegion(name.clone());
    let region = region(&name, WaitPolicy::Futex);
    let idle = region.create_topic("u", TopicConfig::default()).unwrap();
    let sub = region.topic("t").unwrap().subscribe(Partitions::All).unwrap();
    let mut set = tachyon::WaitSet::new();
    let idle_id = set.add_partition(&idle, 0).unwrap();
    let sub_id = set.add_subscription(&sub);
    let n = 2_000;
    let mut child = producer(&name, n);
    let mut order = Order::new();
    while order.total < n {
        let ready = set.wait(LONG).unwrap();
        assert_eq!(ready, sub_id);
        assert_ne!(ready, idle_id);
        while let Some(m) = sub.try_receive().unwrap() {
            order.check(&m);
        }
    }
    assert_eq!(wait_child(&mut child, LIMIT), Some(0));
}
