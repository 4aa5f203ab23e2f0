//! The library in one process: two `Bridge`s over 127.0.0.1, one region
//! each (in a private `TACHYON_SHM_DIR`), an at-most-once and an
//! at-least-once topic and an RPC channel across; and an at-most-once
//! route that batches (`batch`). Quick; the two-host tests with real
//! processes and namespaces are `tests/two_hosts.rs`.

use std::time::{Duration, Instant};

use tachyon::bus::{Delivery, Key, Region, RegionConfig, TopicConfig};
use tachyon::{Error, RpcBuffer};
use tachyon_bridge::{Bridge, Config};

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// Receives until `n` messages came (each bounded by 20 s) from every
/// partition; (key, index) pairs in arrival order per partition.
fn receive_all(topic: &tachyon::bus::Topic, n: usize) -> Vec<(u64, u64)> {
    let mut got = Vec::new();
    let mut buf = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while got.len() < n && Instant::now() < deadline {
        for p in 0..topic.partitions() {
            if let Ok(Some(_)) = topic.try_recv_into(p, &mut buf) {
                let text = String::from_utf8(buf.clone()).unwrap();
                let mut it = text.split(' ').map(|x| x.parse::<u64>().unwrap());
                got.push((it.next().unwrap(), it.next().unwrap()));
            }
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    got
}

fn check_order(got: &[(u64, u64)], n: u64, keys: u64) {
    assert_eq!(got.len() as u64, n, "messages arrived: {}", got.len());
    for k in 0..keys {
        let v: Vec<u64> = got.iter().filter(|(kk, _)| *kk == k).map(|(_, i)| *i).collect();
        let want: Vec<u64> = (0..n).filter(|i| i % keys == k).collect();
        assert_eq!(v, want, "key {k}");
    }
}

/// Both scenarios in one test, one after the other: they share the
/// process's `TACHYON_SHM_DIR`, set here and removed at the end.
#[test]
fn two_bridges_in_one_process() {
    let dir = std::path::PathBuf::from(format!("/dev/shm/tachyon-bridge-loopback-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::env::set_var("TACHYON_SHM_DIR", &dir);
    topics_and_rpc_cross();
    an_at_most_once_backlog_crosses_in_batches();
    let _ = std::fs::remove_dir_all(&dir);
}

/// Topics of both deliveries and an RPC channel, across.
fn topics_and_rpc_cross() {
    let tag = std::process::id();
    let (ra, rb) = (format!("lb-a-{tag}"), format!("lb-b-{tag}"));
    let (chan_a, chan_b) = (format!("lb-calc-a-{tag}"), format!("lb-calc-b-{tag}"));
    let port = free_port();

    // Group slots: the out routes read through a group of their own. "amo"
    // keeps its default group, read locally below (the bridge takes nothing
    // from it); only the bridge reads "alo".
    let region_a =
        Region::create(&ra, RegionConfig::default().size(8 << 20).ring_arena(1 << 20).max_groups(4)).unwrap();
    let amo = region_a.create_topic("amo", TopicConfig::default().partitions(4)).unwrap();
    let alo = region_a
        .create_topic(
            "alo",
            TopicConfig::default().partitions(4).delivery(Delivery::AtLeastOnce).default_group(false),
        )
        .unwrap();
    let server = RpcBuffer::builder(&chan_a)
        .handler(|_id, msg: &[u8]| Ok::<_, String>([&b"pong: "[..], msg].concat()))
        .create()
        .unwrap();

    let a = Bridge::start(
        &Config::from_toml(
            &format!(
                r#"
                name = "A"
                [zenoh]
                listen = ["tcp/127.0.0.1:{port}"]
                [[out]]
                region = "{ra}"
                topic = "amo"
                key = "lb{tag}/amo"
                [[out]]
                region = "{ra}"
                topic = "alo"
                key = "lb{tag}/alo"
                [[rpc_serve]]
                channel = "{chan_a}"
                key = "lb{tag}/rpc"
                "#
            ),
            "A",
        )
        .unwrap(),
    )
    .unwrap();
    let b = Bridge::start(
        &Config::from_toml(
            &format!(
                r#"
                name = "B"
                [zenoh]
                connect = ["tcp/127.0.0.1:{port}"]
                [[in]]
                key = "lb{tag}/amo"
                region = "{rb}"
                region_size = 8388608
                topic = "amo"
                partitions = 4
                [[in]]
                key = "lb{tag}/alo"
                region = "{rb}"
                topic = "alo"
                partitions = 4
                delivery = "at-least-once"
                [[rpc_call]]
                key = "lb{tag}/rpc"
                channel = "{chan_b}"
                timeout_ms = 3000
                "#
            ),
            "B",
        )
        .unwrap(),
    )
    .unwrap();
    assert_ne!(a.id(), b.id());

    let n = 400u64;
    for i in 0..n {
        let text = format!("{} {i}", i % 5);
        amo.send(text.as_bytes(), Key(i % 5), Some(Duration::from_secs(10))).unwrap();
        alo.send(text.as_bytes(), Key(i % 5), Some(Duration::from_secs(10))).unwrap();
    }
    let region_b = Region::open(&rb).unwrap();
    check_order(&receive_all(&region_b.topic("amo").unwrap(), n as usize), n, 5);
    check_order(&receive_all(&region_b.topic("alo").unwrap(), n as usize), n, 5);
    // The local consumer of A's default group got every message too.
    check_order(&receive_all(&amo, n as usize), n, 5);

    // The key's partition is the same on both sides (same partition count).
    amo.send(b"7 0", Key(7), None).unwrap();
    let far = region_b.topic("amo").unwrap();
    let msg = far.receive(far.partition_of(Key(7)), Some(Duration::from_secs(20))).unwrap();
    assert_eq!(&*msg, b"7 0");
    drop(msg);

    // RPC: a call through B's local channel reaches A's server.
    let client = RpcBuffer::open(&chan_b).unwrap();
    let mut reply = Err(Error::Closed);
    for _ in 0..50 {
        reply = client.request(b"hello", Some(Duration::from_secs(10)));
        if reply.is_ok() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(reply.unwrap(), b"pong: hello");
    // The server gone: the call fails (it does not hang).
    drop(server);
    let e = client.request(b"again", Some(Duration::from_secs(10))).unwrap_err();
    assert!(matches!(&e, Error::Remote(t) if t.contains("peer died")), "{e:?}");

    let sa = a.stop();
    let sb = b.stop();
    assert_eq!(sa.forwarded, 2 * n + 1);
    assert_eq!(sb.imported, 2 * n + 1);
    assert!(sa.batches_acked >= 1);
    assert_eq!((sa.rpc_served, sb.rpc_called), (1, 1));
    drop(client);
    drop((amo, alo, far, region_a, region_b));
    Region::remove(&ra).unwrap();
    Region::remove(&rb).unwrap();
}

/// An at-most-once route with `batch = 32` whose topic has a backlog when
/// the bridge starts: the backlog crosses in batches (several messages a
/// sample), every message once, in per-key order, and the far side
/// counts no gap and no duplicate.
fn an_at_most_once_backlog_crosses_in_batches() {
    let tag = std::process::id();
    let (ra, rb) = (format!("lbb-a-{tag}"), format!("lbb-b-{tag}"));
    let port = free_port();
    let region_a = Region::create(&ra, RegionConfig::default().size(8 << 20).ring_arena(1 << 20)).unwrap();
    let topic = region_a.create_topic("amo", TopicConfig::default().partitions(4)).unwrap();
    let n = 1000u64;
    for i in 0..n {
        topic.send(format!("{} {i}", i % 7).as_bytes(), Key(i % 7), Some(Duration::from_secs(10))).unwrap();
    }
    // The far side first: the out route takes nothing until a subscriber
    // matches, so the whole backlog is queued when it starts.
    let b = Bridge::start(
        &Config::from_toml(
            &format!(
                r#"
                [zenoh]
                listen = ["tcp/127.0.0.1:{port}"]
                [[in]]
                key = "lbb{tag}/amo"
                region = "{rb}"
                topic = "amo"
                partitions = 4
                "#
            ),
            "B",
        )
        .unwrap(),
    )
    .unwrap();
    let a = Bridge::start(
        &Config::from_toml(
            &format!(
                r#"
                [zenoh]
                connect = ["tcp/127.0.0.1:{port}"]
                [[out]]
                region = "{ra}"
                topic = "amo"
                key = "lbb{tag}/amo"
                default_group = true
                batch = 32
                "#
            ),
            "A",
        )
        .unwrap(),
    )
    .unwrap();
    let region_b = Region::open(&rb).unwrap();
    let far = region_b.topic("amo").unwrap();
    check_order(&receive_all(&far, n as usize), n, 7);
    let (sa, sb) = (a.stop(), b.stop());
    assert_eq!(sa.forwarded, n, "{sa}");
    assert!(sa.batches_put >= 1 && sa.batches_put < n, "{sa}");
    assert_eq!((sb.imported, sb.gaps, sb.duplicates, sb.malformed), (n, 0, 0, 0), "{sb}");
    drop((topic, far, region_a, region_b));
    Region::remove(&ra).unwrap();
    Region::remove(&rb).unwrap();
}
