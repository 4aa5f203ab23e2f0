//! The `bridge` group (not in the default run): 1 KiB messages across
//! `tachyon-bridge` between two network namespaces joined by a veth pair,
//! next to Zenoh's own pub/sub between the same two namespaces, in the
//! same run: peer to peer, and through a Zenoh router in each namespace
//! (the deployment with a daemon per host, the bridge's own shape).
//!
//! Every run makes its own pair of namespaces (a private
//! `TACHYON_SHM_DIR` each) and runs the processes of
//! `crates/tachyon-bridge` (`tachyon-bridge`, `tachyon-bridge-probe`),
//! found next to this binary: build them first with
//! `cargo build --release -p tachyon-bridge`. Needs root and `ip`
//! (iproute2). Every wait is bounded; everything made is removed, also
//! when a run fails.

use std::fmt::{self, Write as _};
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

use crate::stats::{si, Spread};
use crate::suite::Group;

/// What carries the messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// tachyon topic → bridge → Zenoh → bridge → tachyon topic.
    Bridge,
    /// A Zenoh publisher and subscriber, nothing else.
    Zenoh,
    /// A Zenoh publisher and subscriber in client mode, each connected to
    /// a Zenoh router in its namespace; the routers connect across.
    ZenohRouted,
}

/// What is measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Test {
    /// One-way messages per second at the receiver.
    Throughput,
    /// Round-trip p50 (ping → pong → ping).
    RoundTrip,
}

/// One configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Case {
    via: Via,
    test: Test,
}

impl fmt::Display for Case {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let via = match self.via {
            Via::Bridge => "tachyon-bridge",
            Via::Zenoh => "zenoh pub/sub",
            Via::ZenohRouted => "zenoh pub/sub via routers",
        };
        let test = match self.test {
            Test::Throughput => "throughput 1 KiB",
            Test::RoundTrip => "round trip 1 KiB",
        };
        write!(f, "{via}, {test}")
    }
}

/// One measurement.
#[derive(Debug, Clone)]
pub struct Sample {
    case: Case,
    rep: usize,
    /// msgs/s (throughput) or µs (round trip p50).
    value: f64,
}

/// The group's settings.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Messages per throughput run.
    pub messages: u64,
    /// Round trips per latency run.
    pub round_trips: u64,
}

const SIZE: usize = 1024;
const LIMIT: Duration = Duration::from_secs(120);

fn binary(name: &str) -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this binary: {e}"))?;
    let path = exe.parent().map(|d| d.join(name)).ok_or("no folder")?;
    if path.exists() {
        Ok(path)
    } else {
        Err(format!(
            "{} not found: build it first with `cargo build --release -p tachyon-bridge`",
            path.display()
        ))
    }
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip").args(args).output().map_err(|e| format!("ip: {e} (install iproute2)"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {} (the bridge group needs root)",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Two namespaces joined by a veth pair; removed when dropped, with the
/// processes started in them.
struct Hosts {
    ns: [String; 2],
    shm: [PathBuf; 2],
    dir: PathBuf,
    children: Vec<Child>,
}

impl Hosts {
    fn new(run: usize) -> Result<Hosts, String> {
        let tag = format!("{}r{run}", std::process::id());
        let ns = [format!("tybench{tag}a"), format!("tybench{tag}b")];
        let shm = [0, 1].map(|i| PathBuf::from(format!("/dev/shm/tachyon-bench-bridge-{tag}-{i}")));
        let dir = std::env::temp_dir().join(format!("tachyon-bench-bridge-{tag}"));
        let hosts = Hosts { ns: ns.clone(), shm, dir, children: Vec::new() };
        for d in hosts.shm.iter().chain([&hosts.dir]) {
            std::fs::create_dir_all(d).map_err(|e| format!("{}: {e}", d.display()))?;
        }
        let (va, vb) = (format!("tbv{tag}a"), format!("tbv{tag}b"));
        ip(&["netns", "add", &ns[0]])?;
        ip(&["netns", "add", &ns[1]])?;
        ip(&["link", "add", &va, "netns", &ns[0], "type", "veth", "peer", "name", &vb, "netns", &ns[1]])?;
        ip(&["-n", &ns[0], "addr", "add", "10.214.0.1/24", "dev", &va])?;
        ip(&["-n", &ns[1], "addr", "add", "10.214.0.2/24", "dev", &vb])?;
        for (n, v) in [(&ns[0], &va), (&ns[1], &vb)] {
            ip(&["-n", n, "link", "set", "lo", "up"])?;
            ip(&["-n", n, "link", "set", v, "up"])?;
        }
        Ok(hosts)
    }

    /// Starts `program args` in namespace `side` (0 or 1); its stdout lines.
    fn start(&mut self, side: usize, program: &PathBuf, args: &[&str]) -> Result<Receiver<String>, String> {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns[side]]).arg(program).args(args);
        c.env("TACHYON_SHM_DIR", &self.shm[side])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .stdin(Stdio::null());
        let mut child = c.spawn().map_err(|e| format!("{}: {e}", program.display()))?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        self.children.push(child);
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Ok(rx)
    }

    fn bridge(&mut self, side: usize, routes: &str) -> Result<(), String> {
        let zenoh = if side == 0 {
            "listen = [\"tcp/10.214.0.1:7447\"]"
        } else {
            "connect = [\"tcp/10.214.0.1:7447\"]"
        };
        let path = self.dir.join(format!("{side}.toml"));
        std::fs::write(&path, format!("[zenoh]\n{zenoh}\n{routes}")).map_err(|e| e.to_string())?;
        let bin = binary("tachyon-bridge")?;
        let rx = self.start(side, &bin, &["--config", &path.display().to_string()])?;
        wait_for(&rx, "ready", Duration::from_secs(30)).map(|_| ())
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        for n in &self.ns {
            let _ = ip(&["netns", "del", n]);
        }
        for d in self.shm.iter().chain([&self.dir]) {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

fn wait_for(rx: &Receiver<String>, what: &str, limit: Duration) -> Result<String, String> {
    let deadline = Instant::now() + limit;
    loop {
        let left =
            deadline.checked_duration_since(Instant::now()).ok_or(format!("no {what:?} within {limit:?}"))?;
        match rx.recv_timeout(left) {
            Ok(l) if l.contains(what) => return Ok(l),
            Ok(_) => {}
            Err(_) => return Err(format!("no {what:?} within {limit:?} (or the process ended)")),
        }
    }
}

/// The number after `word` in `line`.
fn figure(line: &str, word: &str) -> Result<f64, String> {
    let mut it = line.split_whitespace();
    while let Some(w) = it.next() {
        if w == word {
            return it.next().and_then(|x| x.parse().ok()).ok_or(format!("cannot read {line:?}"));
        }
    }
    Err(format!("cannot read {line:?}"))
}

/// The rate of a "consumed N rate R msgs/s" line, which must count every
/// message.
fn rate_of_all(line: &str, messages: u64) -> Result<f64, String> {
    let got = figure(line, "consumed")?;
    if got as u64 != messages {
        return Err(format!("{got} of {messages} messages arrived"));
    }
    figure(line, "rate")
}

impl Settings {
    fn run_case(&self, case: Case, run: usize) -> Result<f64, String> {
        let probe = binary("tachyon-bridge-probe")?;
        let mut h = Hosts::new(run)?;
        let n = |x: u64| x.to_string();
        // Zenoh alone: peer to peer, or clients of a router per namespace.
        let (z_a, z_b): (&[&str], &[&str]) = if case.via == Via::ZenohRouted {
            let local = "tcp/127.0.0.1:7450";
            let rb =
                h.start(1, &probe, &["zenoh-router", "--listen", "tcp/10.214.0.2:7449", "--listen", local])?;
            wait_for(&rb, "ready", Duration::from_secs(30))?;
            let ra =
                h.start(0, &probe, &["zenoh-router", "--connect", "tcp/10.214.0.2:7449", "--listen", local])?;
            wait_for(&ra, "ready", Duration::from_secs(30))?;
            (&["--mode", "client", "--connect", local], &["--mode", "client", "--connect", local])
        } else {
            (&["--connect", "tcp/10.214.0.2:7448"], &["--listen", "tcp/10.214.0.2:7448"])
        };
        let topic =
            |name: &str| ["--topic".to_owned(), name.to_owned(), "--partitions".to_owned(), "1".to_owned()];
        match (case.via, case.test) {
            // The out routes read through the topics' default groups
            // (`default_group = true`): the bridge is the topic's only
            // consumer, as when the figures in docs/bridge.md were measured,
            // and it may start before the topic exists (a group of its own
            // would miss what was published before it joined).
            (Via::Bridge, Test::Throughput) => {
                h.bridge(
                    0,
                    "[[out]]\nregion = \"bridge\"\ntopic = \"tp\"\nkey = \"bench/tp\"\ndefault_group = true\nbatch = 64\n",
                )?;
                h.bridge(
                    1,
                    "[[in]]\nkey = \"bench/tp\"\nregion = \"bridge\"\ntopic = \"tp\"\npartitions = 1\n",
                )?;
                let t = topic("tp");
                let mut args: Vec<&str> = vec!["consume", "--quiet", "--idle-ms", "20000"];
                args.extend(t.iter().map(String::as_str));
                let count = n(self.messages);
                args.extend(["--count", &count]);
                let rx = h.start(1, &probe, &args)?;
                let size = SIZE.to_string();
                let mut pargs: Vec<&str> = vec!["produce", "--keys", "1", "--size", &size, "--count", &count];
                pargs.extend(t.iter().map(String::as_str));
                h.start(0, &probe, &pargs)?;
                rate_of_all(&wait_for(&rx, "consumed", LIMIT)?, self.messages)
            }
            (Via::Zenoh | Via::ZenohRouted, Test::Throughput) => {
                let count = n(self.messages);
                let mut sargs = vec!["zenoh-sub", "--key", "bench/ztp", "--count", &count];
                sargs.extend(z_b);
                let rx = h.start(1, &probe, &sargs)?;
                wait_for(&rx, "ready", Duration::from_secs(30))?;
                let size = SIZE.to_string();
                let mut pargs = vec!["zenoh-pub", "--key", "bench/ztp", "--count", &count, "--size", &size];
                pargs.extend(z_a);
                h.start(0, &probe, &pargs)?;
                rate_of_all(&wait_for(&rx, "consumed", LIMIT)?, self.messages)
            }
            (Via::Bridge, Test::RoundTrip) => {
                h.bridge(
                    0,
                    "[[out]]\nregion = \"bridge\"\ntopic = \"ping\"\nkey = \"bench/ping\"\ndefault_group = true\n\
                     [[in]]\nkey = \"bench/pong\"\nregion = \"bridge\"\ntopic = \"pong\"\npartitions = 1\n",
                )?;
                h.bridge(
                    1,
                    "[[out]]\nregion = \"bridge\"\ntopic = \"pong\"\nkey = \"bench/pong\"\ndefault_group = true\n\
                     [[in]]\nkey = \"bench/ping\"\nregion = \"bridge\"\ntopic = \"ping\"\npartitions = 1\n",
                )?;
                let count = n(self.round_trips);
                let t = topic("ping");
                let mut bargs: Vec<&str> = vec!["pong", "--reply-topic", "pong", "--count", &count];
                bargs.extend(t.iter().map(String::as_str));
                let pong = h.start(1, &probe, &bargs)?;
                wait_for(&pong, "ready", Duration::from_secs(30))?;
                let size = SIZE.to_string();
                let mut aargs: Vec<&str> =
                    vec!["ping", "--reply-topic", "pong", "--count", &count, "--size", &size];
                aargs.extend(t.iter().map(String::as_str));
                let ping = h.start(0, &probe, &aargs)?;
                figure(&wait_for(&ping, "p50", LIMIT)?, "p50")
            }
            (Via::Zenoh | Via::ZenohRouted, Test::RoundTrip) => {
                let count = n(self.round_trips);
                let mut bargs = vec![
                    "zenoh-pong",
                    "--key",
                    "bench/zping",
                    "--reply-key",
                    "bench/zpong",
                    "--count",
                    &count,
                ];
                bargs.extend(z_b);
                let pong = h.start(1, &probe, &bargs)?;
                wait_for(&pong, "ready", Duration::from_secs(30))?;
                let size = SIZE.to_string();
                let mut aargs = vec![
                    "zenoh-ping",
                    "--key",
                    "bench/zping",
                    "--reply-key",
                    "bench/zpong",
                    "--count",
                    &count,
                    "--size",
                    &size,
                ];
                aargs.extend(z_a);
                let ping = h.start(0, &probe, &aargs)?;
                figure(&wait_for(&ping, "p50", LIMIT)?, "p50")
            }
        }
    }
}

impl Group for Settings {
    type Case = Case;
    type Sample = Sample;

    fn name(&self) -> &'static str {
        "bridge"
    }

    fn cases(&self) -> Vec<Case> {
        let mut v = Vec::new();
        for test in [Test::Throughput, Test::RoundTrip] {
            for via in [Via::Zenoh, Via::ZenohRouted, Via::Bridge] {
                v.push(Case { via, test });
            }
        }
        v
    }

    fn run(&self, case: Case, rep: usize) -> Result<Sample, String> {
        static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let run = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let value = self.run_case(case, run)?;
        Ok(Sample { case, rep, value })
    }

    fn progress(&self, s: &Sample) -> String {
        match s.case.test {
            Test::Throughput => format!("{:>9} msgs/s", si(s.value)),
            Test::RoundTrip => format!("p50 {:>8.1} µs", s.value),
        }
    }

    fn render(&self, samples: &[Sample]) -> String {
        let med = |case: Case| {
            let v: Vec<f64> = samples.iter().filter(|s| s.case == case).map(|s| s.value).collect();
            Spread::of(&v)
        };
        let mut out = String::new();
        let _ = writeln!(
            out,
            "## Bridge: tachyon topics across two network namespaces (tachyon-bridge over Zenoh)\n"
        );
        let _ = writeln!(
            out,
            "Two network namespaces joined by a veth pair, a private `TACHYON_SHM_DIR` each. \
             tachyon-bridge: a producer publishes 1 KiB messages into a topic in namespace A, the \
             bridge there forwards them (at-most-once route, one Zenoh publisher, reliable, \
             congestion control Block; `batch = 64` for the throughput runs: what is queued goes \
             in one sample, up to 64 messages) to the bridge in namespace B, which publishes them into a \
             topic there; the consumer's rate from its first to its last message, {} messages per \
             run. Round trip: ping topic A → B, a pong process echoes into a reply topic B → A, {} \
             round trips one after the other, p50. Zenoh pub/sub: a Zenoh publisher in A and a \
             subscriber in B (a pong in B for the round trip), TCP, same sizes and counts, no \
             tachyon: peer to peer, and via routers (publisher and subscriber in client mode, each \
             connected to a Zenoh router in its namespace, the two routers connected across: a \
             daemon per host, the same number of processes and hops as the bridge's). Median of \
             the repetitions, range in brackets.\n",
            self.messages, self.round_trips
        );
        let _ = writeln!(
            out,
            "| measurement | zenoh pub/sub | zenoh via routers | tachyon-bridge | bridge ÷ zenoh | bridge ÷ \
             zenoh via routers |"
        );
        let _ = writeln!(out, "| --- | ---: | ---: | ---: | ---: | ---: |");
        for test in [Test::Throughput, Test::RoundTrip] {
            let z = med(Case { via: Via::Zenoh, test });
            let zr = med(Case { via: Via::ZenohRouted, test });
            let b = med(Case { via: Via::Bridge, test });
            let show = |s: Option<Spread>| match (s, test) {
                (Some(s), Test::Throughput) => {
                    format!("{} msgs/s ({} – {})", si(s.median), si(s.min), si(s.max))
                }
                (Some(s), Test::RoundTrip) => format!("{:.0} µs ({:.0} – {:.0})", s.median, s.min, s.max),
                (None, _) => "–".into(),
            };
            let ratio = |z: Option<Spread>| match (z, b) {
                (Some(z), Some(b)) if z.median > 0.0 => format!("{:.2}", b.median / z.median),
                _ => "–".into(),
            };
            let name = match test {
                Test::Throughput => "throughput, 1 KiB",
                Test::RoundTrip => "round trip p50, 1 KiB",
            };
            let _ = writeln!(
                out,
                "| {name} | {} | {} | {} | {} | {} |",
                show(z),
                show(zr),
                show(b),
                ratio(z),
                ratio(zr)
            );
        }
        out.push('\n');
        out
    }

    fn csv(&self, samples: &[Sample]) -> String {
        let mut out = "via,test,rep,value\n".to_owned();
        for s in samples {
            let _ = writeln!(out, "{:?},{:?},{},{:.3}", s.case.via, s.case.test, s.rep, s.value);
        }
        out
    }
}
