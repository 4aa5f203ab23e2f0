//! Two hosts on one machine: two network namespaces joined by a veth pair,
//! each with its own shared-memory directory (`TACHYON_SHM_DIR`), a
//! `tachyon-bridge` process in each, producers, consumers and RPC ends as
//! `tachyon-bridge-probe` processes. Where namespaces cannot be made (not
//! root, no `ip`), the same tests run over loopback with two shared-memory
//! directories, and say so loudly.
//!
//! Every wait is bounded; no assertion is about time.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::{channel, Receiver};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const BRIDGE: &str = env!("CARGO_BIN_EXE_tachyon-bridge");
const PROBE: &str = env!("CARGO_BIN_EXE_tachyon-bridge-probe");

static NEXT: AtomicU32 = AtomicU32::new(0);

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Side {
    A,
    B,
}

/// The two hosts of one test.
struct Hosts {
    /// Namespace names, or None in loopback mode.
    ns: Option<[String; 2]>,
    veth: [String; 2],
    addr: [String; 2],
    port: u16,
    shm: [PathBuf; 2],
    dir: PathBuf,
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip").args(args).output().map_err(|e| format!("ip {}: {e}", args.join(" ")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()))
    }
}

impl Hosts {
    fn new(test: &str) -> Hosts {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        let tag = format!("{pid}{n}");
        let dir = std::env::temp_dir().join(format!("tachyon-bridge-test-{tag}"));
        std::fs::create_dir_all(&dir).unwrap();
        // .ci/test-bridge sets the prefix, so that its trap can remove
        // what a killed run left behind.
        let prefix = std::env::var("TACHYON_BRIDGE_NETNS_PREFIX").unwrap_or_else(|_| "tyb".into());
        let ns = [format!("{prefix}{tag}a"), format!("{prefix}{tag}b")];
        let shm =
            [0, 1].map(|i| PathBuf::from(format!("/dev/shm/tachyon-bridge-{prefix}{tag}-{}", ["a", "b"][i])));
        for d in &shm {
            std::fs::create_dir_all(d).unwrap();
        }
        let veth = [format!("tv{tag}a"), format!("tv{tag}b")];
        let octet = (n % 250) + 1;
        let addr = [format!("10.213.{octet}.1"), format!("10.213.{octet}.2")];
        let mut hosts = Hosts { ns: Some(ns.clone()), veth, addr, port: 7447, shm, dir };
        if let Err(why) = hosts.make_namespaces() {
            eprintln!(
                "\n!!!!! {test}: NETWORK NAMESPACES UNAVAILABLE ({why}).\n!!!!! RUNNING OVER LOOPBACK \
                 (127.0.0.1) WITH TWO SHARED-MEMORY DIRECTORIES INSTEAD; the link cut is emulated by \
                 stopping the far bridge (SIGSTOP / SIGCONT).\n"
            );
            let _ = ip(&["netns", "del", &ns[0]]);
            let _ = ip(&["netns", "del", &ns[1]]);
            hosts.ns = None;
            hosts.addr = ["127.0.0.1".into(), "127.0.0.1".into()];
            hosts.port = 20000 + ((pid.wrapping_mul(131) + n * 17) % 20000) as u16;
        } else {
            eprintln!("{test}: two network namespaces {} and {} joined by a veth pair", ns[0], ns[1]);
        }
        hosts
    }

    fn make_namespaces(&self) -> Result<(), String> {
        let Some([a, b]) = &self.ns else { return Err("not asked".into()) };
        if std::env::var_os("TACHYON_BRIDGE_FORCE_LOOPBACK").is_some() {
            return Err("TACHYON_BRIDGE_FORCE_LOOPBACK is set".into());
        }
        let [va, vb] = &self.veth;
        ip(&["netns", "add", a])?;
        ip(&["netns", "add", b])?;
        ip(&["link", "add", va, "netns", a, "type", "veth", "peer", "name", vb, "netns", b])?;
        ip(&["-n", a, "addr", "add", &format!("{}/24", self.addr[0]), "dev", va])?;
        ip(&["-n", b, "addr", "add", &format!("{}/24", self.addr[1]), "dev", vb])?;
        for (n, v) in [(a, va), (b, vb)] {
            ip(&["-n", n, "link", "set", "lo", "up"])?;
            ip(&["-n", n, "link", "set", v, "up"])?;
        }
        Ok(())
    }

    fn idx(side: Side) -> usize {
        match side {
            Side::A => 0,
            Side::B => 1,
        }
    }

    fn command(&self, side: Side, program: &str) -> Command {
        let i = Hosts::idx(side);
        let mut c = match &self.ns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", &ns[i], program]);
                c
            }
            None => Command::new(program),
        };
        c.env("TACHYON_SHM_DIR", &self.shm[i]);
        c
    }

    /// Starts a bridge on `side` with `routes` (TOML); A listens, B connects.
    fn bridge(&self, side: Side, routes: &str) -> Proc {
        let i = Hosts::idx(side);
        let zenoh = match side {
            Side::A => format!("listen = [\"tcp/{}:{}\"]", self.addr[0], self.port),
            Side::B => format!("connect = [\"tcp/{}:{}\"]", self.addr[0], self.port),
        };
        let toml = format!("name = \"{side:?}\"\n[zenoh]\n{zenoh}\nlease_ms = 2000\n{routes}");
        let path = self.dir.join(format!("{side:?}.toml"));
        std::fs::write(&path, toml).unwrap();
        let mut c = self.command(side, BRIDGE);
        c.arg("--config").arg(&path);
        let p = Proc::spawn(c, &format!("bridge {side:?}"));
        p.wait_line(|l| l.contains("ready"), Duration::from_secs(30))
            .unwrap_or_else(|| panic!("bridge {side:?} did not start (shm {:?})", self.shm[i]));
        p
    }

    fn probe(&self, side: Side, args: &[&str]) -> Proc {
        let mut c = self.command(side, PROBE);
        c.args(args);
        Proc::spawn(c, &format!("probe {side:?} {}", args[0]))
    }

    /// Runs a probe to its end (bounded) and returns its output.
    fn run(&self, side: Side, args: &[&str], limit: Duration) -> Vec<String> {
        let mut p = self.probe(side, args);
        let status = p.wait_exit(limit);
        assert!(status.is_some_and(|s| s.success()), "probe {args:?} on {side:?}: {status:?}");
        p.lines()
    }

    fn set_link(&self, up: bool, far: &mut Proc) {
        match &self.ns {
            Some(ns) => {
                ip(&["-n", &ns[0], "link", "set", &self.veth[0], if up { "up" } else { "down" }]).unwrap()
            }
            None => far.signal(if up { "CONT" } else { "STOP" }),
        }
    }

    /// Bytes sent on A's end of the link (None in loopback mode).
    fn tx_bytes(&self) -> Option<u64> {
        let ns = self.ns.as_ref()?;
        let path = format!("/sys/class/net/{}/statistics/tx_bytes", self.veth[0]);
        let out = Command::new("ip").args(["netns", "exec", &ns[0], "cat", &path]).output().ok()?;
        String::from_utf8_lossy(&out.stdout).trim().parse().ok()
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        if let Some(ns) = &self.ns {
            for n in ns {
                let _ = ip(&["netns", "del", n]);
            }
        }
        for d in &self.shm {
            let _ = std::fs::remove_dir_all(d);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A child process whose stdout lines are collected; killed when dropped.
struct Proc {
    child: Child,
    what: String,
    rx: Mutex<Receiver<String>>,
    all: Arc<Mutex<Vec<String>>>,
}

impl Proc {
    fn spawn(mut c: Command, what: &str) -> Proc {
        c.stdout(Stdio::piped()).stderr(Stdio::inherit()).stdin(Stdio::null());
        let mut child = c.spawn().unwrap_or_else(|e| panic!("{what}: {e}"));
        let stdout = child.stdout.take().unwrap();
        let all = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = channel();
        let sink = Arc::clone(&all);
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                sink.lock().unwrap().push(line.clone());
                let _ = tx.send(line);
            }
        });
        Proc { child, what: what.into(), rx: Mutex::new(rx), all }
    }

    fn wait_line(&self, pred: impl Fn(&str) -> bool, limit: Duration) -> Option<String> {
        let deadline = Instant::now() + limit;
        let rx = self.rx.lock().unwrap();
        loop {
            let left = deadline.checked_duration_since(Instant::now())?;
            match rx.recv_timeout(left) {
                Ok(l) if pred(&l) => return Some(l),
                Ok(_) => {}
                Err(_) => return None,
            }
        }
    }

    fn count_lines(&self, prefix: &str) -> usize {
        self.all.lock().unwrap().iter().filter(|l| l.starts_with(prefix)).count()
    }

    fn wait_exit(&mut self, limit: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + limit;
        loop {
            if let Ok(Some(s)) = self.child.try_wait() {
                // Let the reader thread drain the pipe.
                std::thread::sleep(Duration::from_millis(50));
                return Some(s);
            }
            if Instant::now() >= deadline {
                eprintln!("{}: still running after {limit:?}", self.what);
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn signal(&self, sig: &str) {
        let _ = Command::new("kill").args([&format!("-{sig}"), &self.child.id().to_string()]).status();
    }

    fn kill(&mut self) {
        self.signal("KILL");
        let _ = self.wait_exit(Duration::from_secs(10));
    }

    /// SIGTERM, wait, and the "stopped: ..." counters.
    fn stop(&mut self) -> HashMap<String, u64> {
        self.signal("TERM");
        assert!(self.wait_exit(Duration::from_secs(20)).is_some(), "{} did not stop on SIGTERM", self.what);
        let lines = self.lines();
        let line = lines
            .iter()
            .find(|l| l.contains("stopped:"))
            .unwrap_or_else(|| panic!("{}: no counters", self.what));
        line.split("stopped:")
            .nth(1)
            .unwrap()
            .split_whitespace()
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.parse().unwrap()))
            .collect()
    }

    fn lines(&self) -> Vec<String> {
        self.all.lock().unwrap().clone()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.signal("CONT");
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Parses "msg KEY INDEX" lines: per key, the indices in arrival order.
fn by_key(lines: &[String]) -> HashMap<u64, Vec<u64>> {
    let mut m: HashMap<u64, Vec<u64>> = HashMap::new();
    for l in lines {
        if let Some(rest) = l.strip_prefix("msg ") {
            let mut it = rest.split_whitespace().map(|x| x.parse::<u64>().unwrap());
            let (k, i) = (it.next().unwrap(), it.next().unwrap());
            m.entry(k).or_default().push(i);
        }
    }
    m
}

fn assert_in_order_exactly(lines: &[String], indices: std::ops::Range<u64>, keys: u64) {
    let m = by_key(lines);
    let mut total = 0;
    for (k, v) in &m {
        assert!(v.windows(2).all(|w| w[0] < w[1]), "key {k}: out of order or duplicated: {v:?}");
        total += v.len();
    }
    for i in indices.clone() {
        let k = i % keys;
        assert!(m.get(&k).is_some_and(|v| v.contains(&i)), "message {i} (key {k}) missing");
    }
    assert_eq!(total as u64, indices.end - indices.start, "extra messages");
}

const SECS: fn(u64) -> Duration = Duration::from_secs;

impl Hosts {
    /// Starts a consumer probe on `side` (through `group`, or the topic's
    /// default group) and waits until it reads: a group gets only what is
    /// published after it joined.
    fn consumer(&self, side: Side, region: &str, topic: &str, group: Option<&str>, count: u64) -> Proc {
        let count = count.to_string();
        let mut args =
            vec!["consume", "--region", region, "--topic", topic, "--count", &count, "--idle-ms", "15000"];
        if let Some(g) = group {
            args.extend(["--group", g]);
        }
        let p = self.probe(side, &args);
        assert!(p.wait_line(|l| l == "consume ready", SECS(30)).is_some(), "consumer {args:?} did not start");
        p
    }
}

/// Every message crosses, per-key order holds, and each crosses once
/// however many local consumers read it on the far side: one in route
/// feeds one topic that two consumer groups (two processes) read, each
/// getting every message, and a second in route on the same key feeds
/// another region.
#[test]
fn topics_cross_in_per_key_order_once() {
    let h = Hosts::new("topics_cross_in_per_key_order_once");
    // The topic exists before the bridge joins its group (a group gets what
    // is published after it joined); only the bridge reads it here.
    h.run(Side::A, &["produce", "--topic", "q", "--no-default-group", "--count", "0"], SECS(30));
    let _a = h.bridge(Side::A, "[[out]]\nregion = \"bridge\"\ntopic = \"q\"\nkey = \"t/q\"\n");
    let _b = h.bridge(
        Side::B,
        "[[in]]\nkey = \"t/q\"\nregion = \"g\"\ntopic = \"q\"\npartitions = 4\nmax_groups = 4\ndefault_group = false\n\
         [[in]]\nkey = \"t/q\"\nregion = \"r2\"\ntopic = \"q\"\npartitions = 4\n",
    );
    let n = 2000u64;
    let consumers = [
        ("group audit", h.consumer(Side::B, "g", "q", Some("audit"), n)),
        ("group billing", h.consumer(Side::B, "g", "q", Some("billing"), n)),
        ("region r2", h.consumer(Side::B, "r2", "q", None, n)),
    ];
    let tx0 = h.tx_bytes();
    h.run(
        Side::A,
        &[
            "produce",
            "--topic",
            "q",
            "--no-default-group",
            "--count",
            &n.to_string(),
            "--keys",
            "8",
            "--size",
            "1024",
        ],
        SECS(60),
    );
    for (what, mut c) in consumers {
        assert!(c.wait_exit(SECS(90)).is_some(), "{what}: consumer did not end");
        eprintln!("{what}: {} messages", c.count_lines("msg"));
        assert_in_order_exactly(&c.lines(), 0..n, 8);
    }
    if let (Some(t0), Some(t1)) = (tx0, h.tx_bytes()) {
        let sent = t1 - t0;
        eprintln!(
            "A's link sent {sent} bytes for {n} messages of 1 KiB delivered to two groups of one topic and to a \
             second region"
        );
        assert!(sent < n * 1024 * 3 / 2, "{sent} bytes: the messages crossed more than once");
    } else {
        eprintln!("!!!!! loopback mode: the bytes on the link are not measured");
    }
}

/// The near side: the out route reads through a consumer group of its own,
/// so a local consumer of the topic's default group and a local consumer
/// group each still get every message, and so does the far side. The first
/// 200 are published before the bridge starts (queued for the default
/// group): the bridge's group, created from the oldest, forwards them too
/// (the far side gets all 1,000; a group joined from now would miss them).
#[test]
fn local_consumers_and_the_bridge_each_get_every_message() {
    let h = Hosts::new("local_consumers_and_the_bridge_each_get_every_message");
    // 200 messages queued for the default group before the bridge starts:
    // its group, created from the oldest, forwards them too.
    let early = 200u64;
    h.run(Side::A, &["produce", "--topic", "q", "--count", &early.to_string(), "--keys", "8"], SECS(30));
    let _b =
        h.bridge(Side::B, "[[in]]\nkey = \"t/near\"\nregion = \"bridge\"\ntopic = \"q\"\npartitions = 4\n");
    let n = 1000u64;
    let across = h.consumer(Side::B, "bridge", "q", None, n);
    let mut a = h.bridge(Side::A, "[[out]]\nregion = \"bridge\"\ntopic = \"q\"\nkey = \"t/near\"\n");
    let consumers = [
        ("A, the default group", h.consumer(Side::A, "bridge", "q", None, n)),
        ("B, across the bridge", across),
    ];
    let audit = h.consumer(Side::A, "bridge", "q", Some("audit"), n - early);
    let rest = (n - early).to_string();
    h.run(
        Side::A,
        &["produce", "--topic", "q", "--count", &rest, "--first", &early.to_string(), "--keys", "8"],
        SECS(60),
    );
    let mut audit = audit;
    assert!(audit.wait_exit(SECS(90)).is_some(), "A, group audit: consumer did not end");
    assert_in_order_exactly(&audit.lines(), early..n, 8);
    for (what, mut c) in consumers {
        assert!(c.wait_exit(SECS(90)).is_some(), "{what}: consumer did not end");
        eprintln!("{what}: {} messages", c.count_lines("msg"));
        assert_in_order_exactly(&c.lines(), 0..n, 8);
    }
    let sa = a.stop();
    assert_eq!(sa["forwarded"], n, "A's bridge forwarded each message once");
}

/// A region without group slots: an out route that would read through a
/// group of its own is refused at start with a message that says what to
/// do; told to use the topic's default group, it starts.
#[test]
fn a_region_without_group_slots_is_refused_clearly() {
    let shm = PathBuf::from(format!("/dev/shm/tachyon-bridge-nogroups-{}", std::process::id()));
    std::fs::create_dir_all(&shm).unwrap();
    let status = Command::new(PROBE)
        .env("TACHYON_SHM_DIR", &shm)
        .args(["produce", "--region", "plain", "--topic", "q", "--max-groups", "0", "--count", "0"])
        .status()
        .unwrap();
    assert!(status.success());
    let mut c = Command::new(BRIDGE);
    c.env("TACHYON_SHM_DIR", &shm).args(["--name", "nogroups", "--out", "plain/q=t/nogroups"]);
    c.stderr(Stdio::piped()).stdout(Stdio::null()).stdin(Stdio::null());
    let mut child = c.spawn().unwrap();
    let deadline = Instant::now() + SECS(30);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    eprintln!("{err}");
    assert_eq!(status.and_then(|s| s.code()), Some(1), "the bridge did not refuse the route: {err}");
    assert!(
        err.contains("out[0]") && err.contains("max_groups") && err.contains("default_group = true"),
        "the message does not say what to do: {err}"
    );
    // Told to read through the default group, it starts.
    let mut c = Command::new(BRIDGE);
    c.env("TACHYON_SHM_DIR", &shm).args([
        "--name",
        "nogroups",
        "--out",
        "plain/q=t/nogroups",
        "--out-default-group",
        "plain/q",
    ]);
    let mut p = Proc::spawn(c, "bridge without group slots");
    assert!(p.wait_line(|l| l.contains("ready"), SECS(30)).is_some(), "the bridge did not start");
    let stats = p.stop();
    assert_eq!(stats["forwarded"], 0);
    let _ = std::fs::remove_dir_all(&shm);
}

/// At-least-once: the sending bridge is SIGKILLed mid-stream and
/// restarted, then the receiving one, then the sending one again while
/// the link is down; no message is lost (duplicates are allowed).
#[test]
fn at_least_once_loses_nothing_when_the_bridge_is_killed() {
    let h = Hosts::new("at_least_once_loses_nothing_when_the_bridge_is_killed");
    let routes_a = "[[out]]\nregion = \"bridge\"\ntopic = \"alo\"\nkey = \"t/alo\"\nmax_batch = 16\n";
    let routes_b =
        "[[in]]\nkey = \"t/alo\"\nregion = \"bridge\"\ntopic = \"alo\"\npartitions = 4\ndelivery = \"at-least-once\"\n";
    // The topic exists before the bridge starts, at-least-once.
    // Only the bridge reads it (no default group): what is published while
    // the bridge is down waits in the bridge's group, which keeps its
    // position for the region's group lease (30 s).
    h.run(
        Side::A,
        &["produce", "--topic", "alo", "--delivery", "at-least-once", "--no-default-group", "--count", "0"],
        SECS(30),
    );
    let mut a = h.bridge(Side::A, routes_a);
    let mut b = h.bridge(Side::B, routes_b);
    let n = 6000u64;
    let c = h.probe(Side::B, &["consume", "--topic", "alo", "--count", "1000000", "--idle-ms", "15000"]);
    let mut p = h.probe(
        Side::A,
        &[
            "produce",
            "--topic",
            "alo",
            "--delivery",
            "at-least-once",
            "--count",
            &n.to_string(),
            "--keys",
            "8",
            "--pace-us",
            "500",
        ],
    );
    let wait_for = |count: usize| {
        let deadline = Instant::now() + SECS(60);
        while c.count_lines("msg") < count && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    // Kill the sending bridge once a part has crossed, restart it.
    wait_for(800);
    a.kill();
    let at_kill_a = c.count_lines("msg");
    let mut a2 = h.bridge(Side::A, routes_a);
    // Then the receiving bridge.
    wait_for(at_kill_a + 800);
    b.kill();
    let at_kill_b = c.count_lines("msg");
    let mut b2 = h.bridge(Side::B, routes_b);
    // Then the sending bridge again, while the link is down and a batch
    // is waiting for its acknowledgement.
    wait_for(at_kill_b + 800);
    h.set_link(false, &mut b2);
    std::thread::sleep(Duration::from_millis(300));
    a2.kill();
    let at_kill_a2 = c.count_lines("msg");
    h.set_link(true, &mut b2);
    let _a3 = h.bridge(Side::A, routes_a);
    eprintln!(
        "killed bridge A after {at_kill_a} messages crossed, bridge B after {at_kill_b}, \
         A again (link down) after {at_kill_a2}"
    );
    assert!(at_kill_a2 < n as usize, "the kills were not mid-stream: the test proves nothing");
    assert!(p.wait_exit(SECS(60)).is_some_and(|s| s.success()));
    let mut c = c;
    assert!(c.wait_exit(SECS(120)).is_some());
    let m = by_key(&c.lines());
    let mut dups = 0;
    for i in 0..n {
        let v = m.get(&(i % 8)).cloned().unwrap_or_default();
        let times = v.iter().filter(|x| **x == i).count();
        assert!(times >= 1, "message {i} lost");
        dups += times - 1;
    }
    eprintln!("at-least-once across three SIGKILLs: all {n} arrived, {dups} duplicates");
}

/// At-most-once: the sending bridge is SIGKILLed mid-stream and
/// restarted; nothing arrives twice, per-key order holds, and everything
/// published after the restart arrives.
#[test]
fn at_most_once_never_duplicates_when_the_bridge_is_killed() {
    let h = Hosts::new("at_most_once_never_duplicates_when_the_bridge_is_killed");
    let routes_a = "[[out]]\nregion = \"bridge\"\ntopic = \"amo\"\nkey = \"t/amo\"\n";
    h.run(Side::A, &["produce", "--topic", "amo", "--no-default-group", "--count", "0"], SECS(30));
    let mut a = h.bridge(Side::A, routes_a);
    let _b =
        h.bridge(Side::B, "[[in]]\nkey = \"t/amo\"\nregion = \"bridge\"\ntopic = \"amo\"\npartitions = 4\n");
    let n = 3000u64;
    let c = h.probe(Side::B, &["consume", "--topic", "amo", "--count", "1000000", "--idle-ms", "15000"]);
    let mut p = h.probe(
        Side::A,
        &["produce", "--topic", "amo", "--count", &n.to_string(), "--keys", "8", "--pace-us", "300"],
    );
    let deadline = Instant::now() + SECS(60);
    while c.count_lines("msg") < 500 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    a.kill();
    let at_kill = c.count_lines("msg");
    assert!(at_kill < n as usize, "the kill was not mid-stream: the test proves nothing");
    let _a2 = h.bridge(Side::A, routes_a);
    assert!(p.wait_exit(SECS(60)).is_some_and(|s| s.success()));
    // After the restart, a second batch: all of it must arrive.
    h.run(
        Side::A,
        &["produce", "--topic", "amo", "--count", "500", "--first", &n.to_string(), "--keys", "8"],
        SECS(60),
    );
    let mut c = c;
    assert!(c.wait_exit(SECS(120)).is_some());
    let m = by_key(&c.lines());
    let mut got = 0;
    for (k, v) in &m {
        assert!(v.windows(2).all(|w| w[0] < w[1]), "key {k}: duplicated or out of order: {v:?}");
        got += v.len();
    }
    for i in n..n + 500 {
        assert!(
            m.get(&(i % 8)).is_some_and(|v| v.contains(&i)),
            "message {i}, published after the restart, missing"
        );
    }
    eprintln!("at-most-once across a SIGKILL: {got} of {} arrived, none twice", n + 500);
}

/// A bridge stopped and started again within the region's group lease
/// goes on where it left: its group kept its position, so the messages
/// published while no bridge ran are forwarded by the next one, once each
/// and in order. The topic has no default group: were the group not kept,
/// those messages would have gone to nobody.
#[test]
fn a_restarted_bridge_resumes_its_group() {
    let h = Hosts::new("a_restarted_bridge_resumes_its_group");
    let routes_a = "[[out]]\nregion = \"bridge\"\ntopic = \"q\"\nkey = \"t/resume\"\n";
    h.run(Side::A, &["produce", "--topic", "q", "--no-default-group", "--count", "0"], SECS(30));
    let mut a = h.bridge(Side::A, routes_a);
    let _b =
        h.bridge(Side::B, "[[in]]\nkey = \"t/resume\"\nregion = \"bridge\"\ntopic = \"q\"\npartitions = 4\n");
    let c = h.consumer(Side::B, "bridge", "q", None, 1000);
    h.run(Side::A, &["produce", "--topic", "q", "--count", "500", "--keys", "8"], SECS(60));
    let deadline = Instant::now() + SECS(60);
    while c.count_lines("msg") < 500 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(c.count_lines("msg"), 500, "the first part did not all cross");
    let first = a.stop();
    assert_eq!(first["forwarded"], 500);
    // No bridge runs: these wait in its group.
    h.run(Side::A, &["produce", "--topic", "q", "--count", "500", "--first", "500", "--keys", "8"], SECS(60));
    let mut a2 = h.bridge(Side::A, routes_a);
    let mut c = c;
    assert!(c.wait_exit(SECS(90)).is_some());
    assert_in_order_exactly(&c.lines(), 0..1000, 8);
    assert_eq!(a2.stop()["forwarded"], 500, "the restarted bridge forwarded what was published meanwhile");
}

/// An RPC call crosses and returns; with the far server gone, and then the
/// far bridge gone, a call fails (peer died or timeout) and does not hang.
#[test]
fn rpc_crosses_and_fails_when_the_far_end_is_gone() {
    let h = Hosts::new("rpc_crosses_and_fails_when_the_far_end_is_gone");
    let mut server = h.probe(Side::A, &["rpc-server", "--channel", "calc"]);
    assert!(server.wait_line(|l| l.contains("ready"), SECS(30)).is_some());
    let mut a =
        h.bridge(Side::A, "[[rpc_serve]]\nchannel = \"calc\"\nkey = \"rpc/calc\"\ntimeout_ms = 3000\n");
    let _b = h.bridge(Side::B, "[[rpc_call]]\nkey = \"rpc/calc\"\nchannel = \"calc\"\ntimeout_ms = 3000\n");
    // The first call may come before the bridges have met: try a few times.
    let mut reply = String::new();
    for _ in 0..20 {
        let out = h.run(
            Side::B,
            &["rpc-call", "--channel", "calc", "--message", "hello", "--timeout-ms", "10000"],
            SECS(30),
        );
        reply = out.last().cloned().unwrap_or_default();
        if reply.starts_with("reply") {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(reply, "reply pong: hello");

    server.kill();
    let out = h.run(
        Side::B,
        &["rpc-call", "--channel", "calc", "--message", "x", "--timeout-ms", "10000"],
        SECS(30),
    );
    let line = out.last().cloned().unwrap_or_default();
    assert!(line.starts_with("error") && line.contains("peer died"), "{line}");

    a.kill();
    let out = h.run(
        Side::B,
        &["rpc-call", "--channel", "calc", "--message", "y", "--timeout-ms", "10000"],
        SECS(30),
    );
    let line = out.last().cloned().unwrap_or_default();
    assert!(line.starts_with("error") && (line.contains("peer died") || line.contains("timeout")), "{line}");
}

/// The link goes down and comes back: at-least-once messages published
/// meanwhile all arrive, once each and in per-key order; at-most-once
/// traffic resumes.
#[test]
fn link_cut_and_restored() {
    let h = Hosts::new("link_cut_and_restored");
    let t0 = Instant::now();
    let phase =
        |what: &str| eprintln!("link_cut_and_restored: {what} at {:.1} s", t0.elapsed().as_secs_f64());
    h.run(
        Side::A,
        &["produce", "--topic", "alo", "--delivery", "at-least-once", "--no-default-group", "--count", "0"],
        SECS(30),
    );
    h.run(Side::A, &["produce", "--topic", "amo", "--no-default-group", "--count", "0"], SECS(30));
    let _a = h.bridge(
        Side::A,
        "[[out]]\nregion = \"bridge\"\ntopic = \"alo\"\nkey = \"t/alo\"\n[[out]]\nregion = \"bridge\"\ntopic = \"amo\"\nkey = \"t/amo\"\n",
    );
    let mut b = h.bridge(
        Side::B,
        "[[in]]\nkey = \"t/alo\"\nregion = \"bridge\"\ntopic = \"alo\"\npartitions = 4\ndelivery = \"at-least-once\"\n\
         [[in]]\nkey = \"t/amo\"\nregion = \"bridge\"\ntopic = \"amo\"\npartitions = 4\n",
    );
    let alo = h.probe(Side::B, &["consume", "--topic", "alo", "--count", "1500", "--idle-ms", "30000"]);
    h.run(
        Side::A,
        &["produce", "--topic", "alo", "--delivery", "at-least-once", "--count", "500", "--keys", "4"],
        SECS(60),
    );
    assert!(alo.wait_line(|l| l == "msg 3 499", SECS(60)).is_some(), "the first part did not cross");

    phase("first part crossed");
    h.set_link(false, &mut b);
    h.run(
        Side::A,
        &[
            "produce",
            "--topic",
            "alo",
            "--delivery",
            "at-least-once",
            "--count",
            "500",
            "--first",
            "500",
            "--keys",
            "4",
        ],
        SECS(60),
    );
    // Long enough for the Zenoh lease (2 s) to expire: the session is lost
    // and must be made again.
    std::thread::sleep(SECS(4));
    h.set_link(true, &mut b);
    phase("link restored");
    h.run(
        Side::A,
        &[
            "produce",
            "--topic",
            "alo",
            "--delivery",
            "at-least-once",
            "--count",
            "500",
            "--first",
            "1000",
            "--keys",
            "4",
        ],
        SECS(60),
    );
    let mut alo = alo;
    assert!(alo.wait_exit(SECS(120)).is_some());
    phase("at-least-once all in");
    assert_in_order_exactly(&alo.lines(), 0..1500, 4);

    // At-most-once traffic resumes after the cut.
    let amo = h.probe(Side::B, &["consume", "--topic", "amo", "--count", "300", "--idle-ms", "30000"]);
    h.run(Side::A, &["produce", "--topic", "amo", "--count", "300", "--keys", "4"], SECS(60));
    let mut amo = amo;
    assert!(amo.wait_exit(SECS(90)).is_some());
    assert_in_order_exactly(&amo.lines(), 0..300, 4);
}

/// Two bridges forward one topic both ways: what A sends, B does not send
/// back (no loop), and every message is accounted for once.
#[test]
fn two_bridges_both_ways_make_no_loop() {
    let h = Hosts::new("two_bridges_both_ways_make_no_loop");
    let routes = "[[out]]\nregion = \"bridge\"\ntopic = \"q\"\nkey = \"t/both\"\n\
                  [[in]]\nkey = \"t/both\"\nregion = \"bridge\"\ntopic = \"q\"\npartitions = 4\n";
    h.run(Side::A, &["produce", "--topic", "q", "--no-default-group", "--count", "0"], SECS(30));
    h.run(Side::B, &["produce", "--topic", "q", "--count", "0"], SECS(30));
    let mut a = h.bridge(Side::A, routes);
    let mut b = h.bridge(Side::B, routes);
    let n = 1000u64;
    // The consumer asks for one more than is sent: it ends 8 s after the
    // last message, by when B's bridge has seen every message too (its
    // `echoes` are counted as it takes them).
    let c =
        h.probe(Side::B, &["consume", "--topic", "q", "--count", &(n + 1).to_string(), "--idle-ms", "8000"]);
    h.run(Side::A, &["produce", "--topic", "q", "--count", &n.to_string(), "--keys", "4"], SECS(60));
    let mut c = c;
    assert!(c.wait_exit(SECS(90)).is_some());
    let consumed = c.count_lines("msg") as u64;
    let sa = a.stop();
    let sb = b.stop();
    eprintln!("A: {sa:?}\nB: {sb:?}\nconsumer on B: {consumed}");
    assert_eq!(sa["forwarded"], n, "A forwards each message once");
    assert_eq!(sa["imported"], 0, "nothing came back to A");
    assert_eq!(sb["imported"], n);
    assert_eq!(sb["forwarded"], 0, "B sent nothing back");
    // B's bridge reads through a group of its own: B's consumer (the
    // default group) gets every message, and B's bridge sees every one and
    // recognises it as its own import.
    assert_eq!(consumed, n, "B's consumer gets every message");
    assert_eq!(sb["echoes"], n, "B's bridge recognises every message it imported");
}

#[test]
fn a_bad_configuration_names_the_field() {
    let dir = std::env::temp_dir().join(format!("tachyon-bridge-badconf-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("bad.toml");
    std::fs::write(&path, "[[in]]\nkey = \"t/q\"\nregion = \"r\"\ntopic = \"q\"\npartitions = 3\n").unwrap();
    let out = Command::new(BRIDGE).arg("--config").arg(&path).arg("--check").output().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("in[0].partitions"), "{err}");
    let out = Command::new(BRIDGE).args(["--out", "nonsense", "--check"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--out nonsense"));
    // A group for a route that does not exist; a group given twice.
    let out =
        Command::new(BRIDGE).args(["--out", "md/q=k", "--out-group", "md/x=g", "--check"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--out-group md/x=g"));
    let out = Command::new(BRIDGE)
        .args(["--out", "md/q=k", "--out-group", "md/q=g", "--out-default-group", "md/q", "--check"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--out-default-group md/q"));
    let out =
        Command::new(BRIDGE).args(["--out", "md/q=k", "--out-group", "md/q=g", "--check"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
}
