//! `tachyon-bridge-probe`: small producer / consumer / RPC / ping programs
//! for trying a bridge by hand, for the bridge's tests and for its
//! benchmark (`tachyon-bench --group bridge`). Each prints one line per
//! event and a summary; every wait is bounded.

use std::io::Write;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use tachyon::bus::{Delivery, Key, Region, RegionConfig, Topic, TopicConfig};
use tachyon::RpcBuffer;
use zenoh::Wait;

#[derive(Parser, Debug)]
#[command(name = "tachyon-bridge-probe")]
struct Args {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(clap::Args, Debug, Clone)]
struct TopicArgs {
    /// Region name.
    #[arg(long, default_value = "bridge")]
    region: String,
    /// Topic name.
    #[arg(long)]
    topic: String,
    /// Partitions, when the topic is created here.
    #[arg(long, default_value_t = 4)]
    partitions: u32,
    /// Capacity per partition, when the topic is created here.
    #[arg(long, default_value_t = 1024)]
    capacity: u32,
    /// at-most-once or at-least-once, when the topic is created here.
    #[arg(long, default_value = "at-most-once")]
    delivery: String,
    /// Consumer-group slots per topic, when the region is created here.
    #[arg(long, default_value_t = 4)]
    max_groups: usize,
    /// Create the topic without its default group (only named groups read it).
    #[arg(long)]
    no_default_group: bool,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Publishes COUNT messages "KEY INDEX" (padded to SIZE bytes), key = INDEX % KEYS.
    Produce {
        #[command(flatten)]
        t: TopicArgs,
        #[arg(long)]
        count: u64,
        #[arg(long, default_value_t = 8)]
        keys: u64,
        #[arg(long, default_value_t = 0)]
        first: u64,
        #[arg(long, default_value_t = 0)]
        size: usize,
        /// Pause this many microseconds between messages.
        #[arg(long, default_value_t = 0)]
        pace_us: u64,
    },
    /// Receives until COUNT messages came or none came for IDLE_MS; prints
    /// "consume ready" once it reads (its group joined), then "msg KEY
    /// INDEX" per message (with --quiet only the summary).
    Consume {
        #[command(flatten)]
        t: TopicArgs,
        /// Read through this consumer group (default: the topic's default group).
        #[arg(long)]
        group: Option<String>,
        #[arg(long)]
        count: u64,
        #[arg(long, default_value_t = 10000)]
        idle_ms: u64,
        #[arg(long)]
        quiet: bool,
    },
    /// An RPC server on CHANNEL answering "pong: " + the request, until killed.
    RpcServer {
        #[arg(long)]
        channel: String,
    },
    /// One RPC call on CHANNEL; prints "reply TEXT" or "error KIND: TEXT".
    RpcCall {
        #[arg(long)]
        channel: String,
        #[arg(long)]
        message: String,
        #[arg(long, default_value_t = 10000)]
        timeout_ms: u64,
    },
    /// Round trips: publishes on TOPIC, waits for the echo on REPLY_TOPIC; prints p50.
    Ping {
        #[command(flatten)]
        t: TopicArgs,
        #[arg(long)]
        reply_topic: String,
        #[arg(long, default_value_t = 1000)]
        count: u64,
        #[arg(long, default_value_t = 1024)]
        size: usize,
    },
    /// Echoes every message of TOPIC onto REPLY_TOPIC, COUNT times.
    Pong {
        #[command(flatten)]
        t: TopicArgs,
        #[arg(long)]
        reply_topic: String,
        #[arg(long, default_value_t = 1000)]
        count: u64,
    },
    /// Zenoh alone: publishes COUNT messages of SIZE bytes on KEY.
    ZenohPub {
        #[command(flatten)]
        z: ZArgs,
        #[arg(long)]
        key: String,
        #[arg(long)]
        count: u64,
        #[arg(long, default_value_t = 1024)]
        size: usize,
    },
    /// Zenoh alone: receives COUNT messages on KEY; prints the rate.
    ZenohSub {
        #[command(flatten)]
        z: ZArgs,
        #[arg(long)]
        key: String,
        #[arg(long)]
        count: u64,
        #[arg(long, default_value_t = 20000)]
        idle_ms: u64,
    },
    /// Zenoh alone: round trips KEY -> REPLY_KEY; prints p50.
    ZenohPing {
        #[command(flatten)]
        z: ZArgs,
        #[arg(long)]
        key: String,
        #[arg(long)]
        reply_key: String,
        #[arg(long, default_value_t = 1000)]
        count: u64,
        #[arg(long, default_value_t = 1024)]
        size: usize,
    },
    /// Zenoh alone: a router (`--mode router` implied), for pub/sub
    /// clients that reach each other through one router per host; prints
    /// "router ready" and runs until killed or for SECS seconds.
    ZenohRouter {
        #[command(flatten)]
        z: ZArgs,
        #[arg(long, default_value_t = 600)]
        secs: u64,
    },
    /// Zenoh alone: echoes KEY onto REPLY_KEY.
    ZenohPong {
        #[command(flatten)]
        z: ZArgs,
        #[arg(long)]
        key: String,
        #[arg(long)]
        reply_key: String,
        #[arg(long, default_value_t = 1000)]
        count: u64,
    },
}

#[derive(clap::Args, Debug, Clone)]
struct ZArgs {
    /// Zenoh mode: peer, client (through a router) or router.
    #[arg(long, default_value = "peer")]
    mode: String,
    #[arg(long)]
    listen: Vec<String>,
    #[arg(long)]
    connect: Vec<String>,
}

type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

fn topic(t: &TopicArgs) -> Res<Topic> {
    let region = Region::create_or_open(
        &t.region,
        RegionConfig::default().size(32 << 20).ring_arena(1 << 20).max_groups(t.max_groups),
    )
    .or_else(|_| Region::open(&t.region))?;
    let delivery = if t.delivery == "at-least-once" { Delivery::AtLeastOnce } else { Delivery::AtMostOnce };
    let cfg = TopicConfig::default()
        .partitions(t.partitions)
        .capacity(t.capacity)
        .delivery(delivery)
        .default_group(!t.no_default_group);
    Ok(region.create_or_open_topic(&t.topic, cfg).or_else(|_| region.topic(&t.topic))?)
}

fn out(line: std::fmt::Arguments<'_>) {
    let mut o = std::io::stdout().lock();
    let _ = o.write_fmt(line);
    let _ = o.write_all(b"\n");
    let _ = o.flush();
}

fn session(z: &ZArgs) -> Res<zenoh::Session> {
    let mut c = tachyon_bridge::Config::default();
    c.zenoh.mode = z.mode.clone();
    c.zenoh.listen = z.listen.clone();
    c.zenoh.connect = z.connect.clone();
    zenoh::open(tachyon_bridge::zenoh_config(&c)?).wait()
}

fn p50(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

fn run(cmd: Cmd) -> Res<()> {
    match cmd {
        Cmd::Produce { t, count, keys, first, size, pace_us } => {
            let topic = topic(&t)?;
            let start = Instant::now();
            for i in first..first + count {
                let k = i % keys.max(1);
                let mut text = format!("{k} {i}").into_bytes();
                if text.len() < size {
                    text.resize(size, b' ');
                }
                topic.send(&text, Key(k), Some(Duration::from_secs(30)))?;
                if pace_us > 0 {
                    std::thread::sleep(Duration::from_micros(pace_us));
                }
            }
            let secs = start.elapsed().as_secs_f64();
            out(format_args!("produced {count} in {secs:.3} s"));
        }
        Cmd::Consume { t, group, count, idle_ms, quiet } => {
            let topic = topic(&t)?;
            let group = group.map(|g| topic.join_group(&g)).transpose()?;
            out(format_args!("consume ready"));
            let got = Arc::new(AtomicU64::new(0));
            let first_at: Arc<std::sync::Mutex<Option<Instant>>> = Arc::default();
            let last_at: Arc<std::sync::Mutex<Option<Instant>>> = Arc::default();
            // Idle: no message on any partition for idle_ms (each thread
            // waits in short slices, so that the end is noticed at once).
            let started = Instant::now();
            let last_ms = AtomicU64::new(0);
            std::thread::scope(|s| {
                for p in 0..topic.partitions() {
                    let (topic, group, got, first_at, last_at, last_ms) =
                        (&topic, &group, &got, &first_at, &last_at, &last_ms);
                    s.spawn(move || {
                        let mut buf = Vec::new();
                        while got.load(Ordering::Relaxed) < count {
                            let now_ms = started.elapsed().as_millis() as u64;
                            if now_ms.saturating_sub(last_ms.load(Ordering::Relaxed)) > idle_ms {
                                break;
                            }
                            let wait = Some(Duration::from_millis(50));
                            let r = match group {
                                Some(g) => g.recv_into(p, &mut buf, wait),
                                None => topic.recv_into(p, &mut buf, wait),
                            };
                            match r {
                                Ok(_) => {
                                    let now = Instant::now();
                                    first_at.lock().unwrap().get_or_insert(now);
                                    *last_at.lock().unwrap() = Some(now);
                                    got.fetch_add(1, Ordering::Relaxed);
                                    last_ms.store(started.elapsed().as_millis() as u64, Ordering::Relaxed);
                                    if !quiet {
                                        let text = String::from_utf8_lossy(&buf);
                                        out(format_args!("msg {}", text.trim_end()));
                                    }
                                }
                                Err(e) if e.is_timeout() => {}
                                Err(e) => {
                                    out(format_args!("error {e}"));
                                    break;
                                }
                            }
                        }
                    });
                }
            });
            let n = got.load(Ordering::Relaxed);
            let span = match (*first_at.lock().unwrap(), *last_at.lock().unwrap()) {
                (Some(a), Some(b)) => b - a,
                _ => Duration::ZERO,
            };
            let rate = if span.is_zero() { 0.0 } else { (n.saturating_sub(1)) as f64 / span.as_secs_f64() };
            out(format_args!("consumed {n} rate {rate:.0} msgs/s"));
        }
        Cmd::RpcServer { channel } => {
            let server = RpcBuffer::builder(&channel)
                .handler(|_id, msg: &[u8]| Ok::<_, String>([&b"pong: "[..], msg].concat()))
                .create()?;
            out(format_args!("rpc-server ready"));
            server.serve()?;
        }
        Cmd::RpcCall { channel, message, timeout_ms } => {
            let deadline = Instant::now() + Duration::from_millis(timeout_ms);
            let client = loop {
                match RpcBuffer::open(&channel) {
                    Ok(c) => break c,
                    Err(e) if Instant::now() < deadline => {
                        let _ = e;
                        std::thread::sleep(Duration::from_millis(50));
                    }
                    Err(e) => return Err(e.into()),
                }
            };
            match client.request(message.as_bytes(), Some(Duration::from_millis(timeout_ms))) {
                Ok(r) => out(format_args!("reply {}", String::from_utf8_lossy(&r))),
                Err(e) => out(format_args!("error {e}")),
            }
        }
        Cmd::Ping { t, reply_topic, count, size } => {
            let req = topic(&t)?;
            let rep = topic(&TopicArgs { topic: reply_topic, ..t })?;
            let msg = vec![7u8; size];
            let mut rtts = Vec::with_capacity(count as usize);
            let mut buf = Vec::new();
            for i in 0..count {
                let start = Instant::now();
                req.send(&msg, Key(i), Some(Duration::from_secs(10)))?;
                let p = rep.partition_of(Key(i));
                rep.recv_into(p, &mut buf, Some(Duration::from_secs(10)))?;
                rtts.push(start.elapsed());
            }
            out(format_args!("ping p50 {:.1} us", p50(rtts).as_secs_f64() * 1e6));
        }
        Cmd::Pong { t, reply_topic, count } => {
            let req = topic(&t)?;
            let rep = topic(&TopicArgs { topic: reply_topic, ..t })?;
            out(format_args!("pong ready"));
            let mut buf = Vec::new();
            let mut done = 0;
            // A request in partition p is answered in partition p: keys are
            // chosen so (the bridge carries partitions, not keys).
            let keys: Vec<Key> = (0..rep.partitions())
                .map(|p| (0u64..).map(Key).find(|k| rep.partition_of(*k) == p).unwrap_or(Key(0)))
                .collect();
            'outer: while done < count {
                for p in 0..req.partitions() {
                    match req.recv_into(p, &mut buf, Some(Duration::ZERO)) {
                        Ok(_) => {
                            rep.send(&buf, keys[p as usize % keys.len()], Some(Duration::from_secs(10)))?;
                            done += 1;
                            if done >= count {
                                break 'outer;
                            }
                        }
                        Err(e) if e.is_timeout() => {}
                        Err(e) => return Err(e.into()),
                    }
                }
                std::thread::yield_now();
            }
        }
        Cmd::ZenohPub { z, key, count, size } => {
            let s = session(&z)?;
            let publisher =
                s.declare_publisher(key).congestion_control(zenoh::qos::CongestionControl::Block).wait()?;
            // Wait (bounded) for a subscriber.
            let deadline = Instant::now() + Duration::from_secs(20);
            while !publisher.matching_status().wait()?.matching() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            let msg = vec![7u8; size];
            for _ in 0..count {
                publisher.put(msg.clone()).wait()?;
            }
            out(format_args!("published {count}"));
            std::thread::sleep(Duration::from_millis(500));
        }
        Cmd::ZenohSub { z, key, count, idle_ms } => {
            let s = session(&z)?;
            let sub = s.declare_subscriber(key).with(zenoh::handlers::FifoChannel::new(1 << 14)).wait()?;
            out(format_args!("zenoh-sub ready"));
            let mut n = 0u64;
            let mut first = None;
            let mut last = Instant::now();
            while n < count {
                match sub.recv_timeout(Duration::from_millis(idle_ms))? {
                    Some(_) => {
                        last = Instant::now();
                        first.get_or_insert(last);
                        n += 1;
                    }
                    None => break,
                }
            }
            let span = first.map(|f| last - f).unwrap_or_default();
            let rate = if span.is_zero() { 0.0 } else { (n.saturating_sub(1)) as f64 / span.as_secs_f64() };
            out(format_args!("consumed {n} rate {rate:.0} msgs/s"));
        }
        Cmd::ZenohPing { z, key, reply_key, count, size } => {
            let s = session(&z)?;
            let sub = s.declare_subscriber(reply_key).with(zenoh::handlers::FifoChannel::new(16)).wait()?;
            let publisher = s.declare_publisher(key).wait()?;
            let deadline = Instant::now() + Duration::from_secs(20);
            while !publisher.matching_status().wait()?.matching() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            std::thread::sleep(Duration::from_millis(300));
            let msg = vec![7u8; size];
            let mut rtts = Vec::with_capacity(count as usize);
            for _ in 0..count {
                let start = Instant::now();
                publisher.put(msg.clone()).wait()?;
                if sub.recv_timeout(Duration::from_secs(10))?.is_none() {
                    return Err("no echo within 10 s".into());
                }
                rtts.push(start.elapsed());
            }
            out(format_args!("ping p50 {:.1} us", p50(rtts).as_secs_f64() * 1e6));
        }
        Cmd::ZenohRouter { mut z, secs } => {
            z.mode = "router".to_owned();
            let _s = session(&z)?;
            out(format_args!("router ready"));
            std::thread::sleep(Duration::from_secs(secs));
        }
        Cmd::ZenohPong { z, key, reply_key, count } => {
            let s = session(&z)?;
            let sub = s.declare_subscriber(key).with(zenoh::handlers::FifoChannel::new(16)).wait()?;
            let publisher = s.declare_publisher(reply_key).wait()?;
            out(format_args!("pong ready"));
            for _ in 0..count {
                match sub.recv_timeout(Duration::from_secs(30))? {
                    Some(sample) => publisher.put(sample.payload().clone()).wait()?,
                    None => break,
                }
            }
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(args.cmd) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tachyon-bridge-probe: {e}");
            ExitCode::FAILURE
        }
    }
}
