//! `tyctl` and `tachyond` against real processes.
//!
//! Each test works in its own segment directory (`TACHYON_SHM_DIR`, under
//! /dev/shm), so the tools see only what the test made, and reaping never
//! touches anybody else's segments. Segments and regions are made by child
//! copies of this test binary running a role (`child_role`), some of which
//! are SIGKILLed to leave stale segments and held chunks behind.

use serde_json::Value;
use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};
use tachyon::bus::{Delivery, Key, Region, RegionConfig, RegionReport, TopicConfig};
use tachyon::segment::SegmentInfo;
use tachyon::sync::WaitPolicy;
use tachyon::Segment;

const ROLE_ENV: &str = "TACHYON_CLI_TEST_ROLE";
const ARG_ENV: &str = "TACHYON_CLI_TEST_ARG";
/// Generous bound on anything that should take milliseconds.
const LIMIT: Duration = Duration::from_secs(20);

/// The roles child processes run; does nothing in the parent.
#[test]
fn child_role() {
    let Ok(role) = std::env::var(ROLE_ENV) else { return };
    let arg = std::env::var(ARG_ENV).unwrap_or_default();
    match role.as_str() {
        // A region with a topic of 2 partitions and 3 queued messages; it
        // outlives this process (regions are persistent).
        "make-region" => {
            let config = RegionConfig::default().size(8 << 20).ring_arena(1 << 20);
            let region = Region::create(&arg, config).expect("create region");
            let topic = region
                .create_topic("quotes", TopicConfig::default().partitions(2).capacity(16))
                .expect("create topic");
            for key in 1..=3u64 {
                topic.send(b"quote", Key(key), Some(Duration::from_secs(5))).expect("send");
            }
        }
        // A region with a topic "orders" of 2 partitions (its default
        // group and the consumer groups "billing" and "audit") and a topic
        // "quotes" with inline slots of 64 bytes and light hand-overs; 4
        // messages to "orders", of which "billing" took one and the
        // default group two.
        "make-groups-region" => {
            let config = RegionConfig::default().size(8 << 20).ring_arena(1 << 20).max_groups(3);
            let region = Region::create(&arg, config).expect("create region");
            let orders = region
                .create_topic("orders", TopicConfig::default().partitions(2).capacity(16))
                .expect("create topic");
            let quotes = TopicConfig::default().inline_payload(64).light_handovers(true);
            region.create_topic("quotes", quotes).expect("create topic");
            let billing = orders.join_group("billing").expect("join billing");
            orders.join_group("audit").expect("join audit");
            for key in 1..=4u64 {
                orders.send(b"order", Key(key), Some(Duration::from_secs(5))).expect("send");
            }
            let p = (0..2).find(|&p| billing.depth(p).unwrap() > 0).expect("a partition with a message");
            drop(billing.try_receive(p).expect("receive").expect("a message"));
            for _ in 0..2 {
                let m = (0..2).find_map(|p| orders.try_receive(p).ok().flatten()).expect("a message");
                drop(m);
            }
        }
        // Holds a segment until stdin closes.
        "hold" => {
            let _seg = Segment::create(&arg, 4096).expect("create segment");
            println!("ready");
            let _ = std::io::stdin().read_to_end(&mut Vec::new());
        }
        // Creates a segment and, given `segment,region`, loans a chunk and
        // receives a message of the region's topic; then waits to be killed.
        "die" => {
            let (seg_name, region_name) = arg.split_once(',').unwrap_or((&arg, ""));
            let _seg = Segment::create(seg_name, 4096).expect("create segment");
            let region = (!region_name.is_empty()).then(|| Region::open(region_name).expect("open region"));
            let topic = region.as_ref().map(|r| r.topic("quotes").expect("topic"));
            let _loan = topic.as_ref().map(|t| t.loan(100, None).expect("loan"));
            let _msg = topic.as_ref().map(|t| {
                (0..t.partitions()).find_map(|p| t.try_receive(p).ok().flatten()).expect("a queued message")
            });
            println!("ready");
            loop {
                std::thread::sleep(Duration::from_secs(1));
            }
        }
        other => panic!("unknown role {other}"),
    }
    std::process::exit(0);
}

/// A private segment directory, removed (with everything in it) on drop.
struct Sandbox {
    dir: PathBuf,
}

impl Sandbox {
    fn new(tag: &str) -> Sandbox {
        let dir = PathBuf::from(format!("/dev/shm/tachyon-cli-test-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).expect("create the test's segment directory");
        Sandbox { dir }
    }

    fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new(program);
        cmd.env("TACHYON_SHM_DIR", &self.dir)
            .env_remove("JOURNAL_STREAM")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null());
        cmd
    }

    fn tyctl(&self, args: &[&str]) -> Run {
        let mut cmd = self.command(env!("CARGO_BIN_EXE_tyctl"));
        cmd.args(args);
        run(cmd)
    }

    fn tachyond(&self, args: &[&str]) -> Command {
        let mut cmd = self.command(env!("CARGO_BIN_EXE_tachyond"));
        cmd.args(args);
        cmd
    }

    /// A child copy of this test binary running `role`.
    fn role(&self, role: &str, arg: &str) -> Command {
        let exe = std::env::current_exe().expect("current exe");
        let mut cmd = self.command(exe.to_str().expect("utf-8 path"));
        cmd.args(["--exact", "child_role", "--nocapture", "--test-threads=1"])
            .env(ROLE_ENV, role)
            .env(ARG_ENV, arg);
        cmd
    }

    /// Runs `role` to its end.
    fn run_role(&self, role: &str, arg: &str) {
        let r = run(self.role(role, arg));
        assert!(r.status.success(), "role {role} failed: {}", r.stderr);
    }

    /// Starts `role` and waits until it printed `ready`.
    fn start_role(&self, role: &str, arg: &str, stdin: Stdio) -> Guard {
        let mut child = self.role(role, arg).stdin(stdin).stdout(Stdio::piped()).spawn().expect("spawn role");
        let lines = lines_of(child.stdout.take().expect("stdout"));
        // The harness prints "test child_role ... " before the role's output.
        if wait_line(&lines, |l| l.ends_with("ready")).is_none() {
            let _ = child.kill();
            let _ = child.wait();
            panic!("role {role} did not get ready");
        }
        Guard(child)
    }

    fn ls(&self) -> Vec<Value> {
        let r = self.tyctl(&["ls", "--json"]);
        assert!(r.status.success(), "tyctl ls failed: {}", r.stderr);
        let doc: Value = serde_json::from_str(&r.stdout).expect("ls --json is JSON");
        assert_eq!(doc["dir"].as_str().map(PathBuf::from), Some(self.dir.clone()));
        // Each entry is a `SegmentInfo` (plus `stale`), and reads back as one.
        let typed: Vec<SegmentInfo> = serde_json::from_value(doc["segments"].clone()).expect("SegmentInfo");
        let segments = doc["segments"].as_array().expect("segments").clone();
        assert_eq!(typed.len(), segments.len());
        for (info, s) in typed.iter().zip(&segments) {
            assert_eq!(
                (info.name.as_str(), info.is_stale()),
                (s["name"].as_str().unwrap_or(""), s["stale"] == true)
            );
        }
        segments
    }

    /// `tyctl info NAME --json`, read back as the library's `RegionReport`.
    fn info(&self, name: &str) -> RegionReport {
        let r = self.tyctl(&["info", name, "--json"]);
        assert!(r.status.success(), "{}", r.stderr);
        let doc: Value = serde_json::from_str(&r.stdout).expect("info --json is JSON");
        assert_eq!(doc["region"], name);
        assert!(doc["unix_ns"].as_u64().is_some_and(|t| t > 0), "{doc}");
        serde_json::from_value(doc).expect("info --json is a RegionReport")
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A child process that is killed and reaped when dropped, so that a
/// failing test leaves no process behind.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        if self.0.try_wait().ok().flatten().is_none() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

impl std::ops::Deref for Guard {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for Guard {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

/// A finished command.
struct Run {
    pid: u32,
    status: ExitStatus,
    stdout: String,
    stderr: String,
}

/// Runs `cmd` to its end, killing it if it takes longer than [`LIMIT`].
fn run(mut cmd: Command) -> Run {
    let child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn");
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(LIMIT) {
        Ok(output) => {
            let output = output.expect("wait");
            Run {
                pid,
                status: output.status,
                stdout: String::from_utf8(output.stdout).expect("utf-8 stdout"),
                stderr: String::from_utf8(output.stderr).expect("utf-8 stderr"),
            }
        }
        Err(_) => {
            signal(pid, libc::SIGKILL);
            panic!("{cmd:?} did not finish within {LIMIT:?}");
        }
    }
}

fn signal(pid: u32, sig: libc::c_int) {
    // SAFETY: kill(2) has no memory-safety preconditions; `pid` is a child
    // of this process that has not been reaped yet.
    let rc = unsafe { libc::kill(pid as libc::pid_t, sig) };
    assert_eq!(rc, 0, "kill({pid}, {sig})");
}

/// The lines of a child's output, as they come.
fn lines_of(stream: impl Read + Send + 'static) -> Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stream).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// Waits (up to [`LIMIT`]) for a line that satisfies `pred`.
fn wait_line(lines: &Receiver<String>, mut pred: impl FnMut(&str) -> bool) -> Option<String> {
    let deadline = Instant::now() + LIMIT;
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        match lines.recv_timeout(left) {
            Ok(line) if pred(&line) => return Some(line),
            Ok(_) => {}
            Err(_) => return None,
        }
    }
    None
}

/// Waits (up to [`LIMIT`]) for a child to exit; kills it and fails if not.
fn wait_exit(child: &mut Child) -> ExitStatus {
    let deadline = Instant::now() + LIMIT;
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("child {} did not exit within {LIMIT:?}", child.id());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn kill(mut child: Guard) -> u32 {
    let pid = child.id();
    child.kill().expect("SIGKILL");
    child.wait().expect("reap");
    pid
}

fn find<'a>(segments: &'a [Value], name: &str) -> Option<&'a Value> {
    segments.iter().find(|s| s["name"] == name)
}

/// What the header of a listed segment says (`status.valid`).
fn header(segment: &Value) -> &Value {
    &segment["status"]["valid"]
}

/// Chunks in use in a region's pool.
fn in_use(report: &RegionReport) -> usize {
    report.pool.iter().map(|c| c.chunks - c.free).sum()
}

fn no_panic(r: &Run) {
    assert!(!r.stderr.contains("panicked") && !r.stderr.contains("RUST_BACKTRACE"), "{}", r.stderr);
}

#[test]
fn ls_and_info_show_a_region_and_a_segment() {
    let sb = Sandbox::new("ls");
    sb.run_role("make-region", "md");
    let mut holder = sb.start_role("hold", "seg", Stdio::piped());

    let segments = sb.ls();
    assert_eq!(segments.len(), 2, "{segments:?}");
    let md = find(&segments, "md").expect("md listed");
    assert_eq!(header(md)["kind"], "region");
    assert_eq!(header(md)["persistent"], true);
    assert_eq!(md["stale"], false);
    assert!(md["scope"]["user"].is_u64(), "{md}");
    assert!(header(md)["creator"]["pid"].as_u64().is_some_and(|p| p > 0));
    let seg = find(&segments, "seg").expect("seg listed");
    assert_eq!(header(seg)["kind"], "raw segment");
    assert_eq!(header(seg)["persistent"], false);
    assert_eq!(seg["stale"], false);
    assert!(header(seg)["data_size"].as_u64().is_some_and(|s| s >= 4096));
    let attachers = header(seg)["attachers"].as_array().expect("attachers");
    assert!(
        attachers.iter().any(|a| a["process"]["pid"] == holder.id() && a["alive"] == true),
        "{attachers:?}"
    );

    let r = sb.tyctl(&["ls"]);
    assert!(r.status.success(), "{}", r.stderr);
    assert!(r.stdout.starts_with("NAME "), "{}", r.stdout);
    assert!(r.stdout.contains("region") && r.stdout.contains("raw segment"), "{}", r.stdout);
    assert!(r.stdout.contains(&format!("{} alive", holder.id())), "{}", r.stdout);

    let r = sb.tyctl(&["info", "md", "--json"]);
    assert!(r.status.success(), "{}", r.stderr);
    let doc: Value = serde_json::from_str(&r.stdout).expect("info --json is JSON");
    // Enumerations are written in kebab case, a duration as secs and nanos.
    assert_eq!(doc["topics"][0]["info"]["wait"], "hybrid");
    assert_eq!(doc["topics"][0]["info"]["delivery"], "at-most-once");
    assert_eq!(doc["lease"], serde_json::json!({"secs": 10, "nanos": 0}));
    let info = sb.info("md");
    let topic = &info.topics[0];
    assert_eq!(topic.info.name, "quotes");
    assert_eq!((topic.info.partitions, topic.info.capacity), (2, 16));
    assert_eq!(
        (topic.info.published, topic.info.received, topic.info.corrupt, topic.info.lost),
        (3, 0, 0, 0)
    );
    assert_eq!(topic.partitions.iter().map(|p| p.depth).sum::<u64>(), 3);
    assert_eq!(topic.info.wait, Some(WaitPolicy::Hybrid));
    assert_eq!(topic.info.delivery, Some(Delivery::AtMostOnce));
    assert_eq!(info.lease, Duration::from_secs(10));
    assert_eq!(topic.partitions.len(), 2);
    for p in &topic.partitions {
        assert_eq!(p.tail - p.head, p.depth, "{p:?}");
    }
    assert_eq!(info.pool[0].chunk_size, 64);
    assert_eq!(in_use(&info), 3, "three queued messages hold three chunks");
    assert!(info.processes.iter().all(|p| p.process.pid != r.pid), "tyctl does not list itself: {info:?}");
    assert_eq!(info.orphaned_chunks, 0);

    let r = sb.tyctl(&["info", "md"]);
    assert!(r.status.success(), "{}", r.stderr);
    for part in ["TOPICS", "quotes", "PARTITIONS", "POOL", "PROCESSES", "orphaned chunks", "at-most-once"] {
        assert!(r.stdout.contains(part), "{part} missing from:\n{}", r.stdout);
    }
    // Looking attached nothing: md still has no attacher, live or dead.
    let md = find(&sb.ls(), "md").expect("md listed").clone();
    assert_eq!(header(&md)["attachers"].as_array().map(Vec::len), Some(0), "{md}");

    drop(holder.stdin.take());
    assert!(wait_exit(&mut holder).success());
    let r = sb.tyctl(&["rm", "md"]);
    assert!(r.status.success(), "{}", r.stderr);
    assert!(r.stdout.contains("removed \"md\" (region)"), "{}", r.stdout);
    assert!(sb.ls().is_empty(), "the holder's segment went with it, md was removed");
}

#[test]
fn errors_are_messages_with_a_failing_status() {
    let sb = Sandbox::new("errors");
    let mut holder = sb.start_role("hold", "raw", Stdio::piped());
    for (args, message) in [
        (&["info", "nosuch"][..], "no region named \"nosuch\""),
        (&["info", "raw"][..], "\"raw\" is a raw segment, not a region"),
        (&["watch", "nosuch", "--count", "1"][..], "no region named"),
        (&["rm", "nosuch"][..], "no segment or region named \"nosuch\""),
        (&["reap", "nosuch"][..], "no segment or region named \"nosuch\""),
        (&["info", "bad\\name"][..], "invalid name"),
    ] {
        let r = sb.tyctl(args);
        assert_eq!(r.status.code(), Some(1), "{args:?}: {}", r.stderr);
        assert!(r.stderr.starts_with("tyctl: ") && r.stderr.contains(message), "{args:?}: {}", r.stderr);
        no_panic(&r);
    }
    for args in [&[][..], &["watch", "x", "--interval", "0"][..], &["frobnicate"][..]] {
        let r = sb.tyctl(args);
        assert_eq!(r.status.code(), Some(2), "usage errors exit 2: {args:?}: {}", r.stderr);
        no_panic(&r);
    }
    let r = run(sb.tachyond(&["--interval", "soon"]));
    assert_eq!(r.status.code(), Some(2), "{}", r.stderr);
    drop(holder.stdin.take());
    assert!(wait_exit(&mut holder).success());
}

#[test]
fn a_misspelt_subcommand_gets_a_suggestion() {
    let sb = Sandbox::new("suggest");
    let r = sb.tyctl(&["lss"]);
    assert_eq!(r.status.code(), Some(2), "{}", r.stderr);
    assert!(r.stderr.contains("similar subcommand exists: 'ls'"), "{}", r.stderr);
    let r = run(sb.tachyond(&["--onse"]));
    assert_eq!(r.status.code(), Some(2), "{}", r.stderr);
    assert!(r.stderr.contains("'--once'"), "{}", r.stderr);
}

/// Whether tachyond's line says it reclaimed what the `die` role held: one
/// loan, one message, and the rest of the batch its loan popped ("N
/// chunks: 1 loan, K chunks kept for next loans, 1 unreleased message
/// (lost)", N = K + 2), naming the dead holder `pid`.
fn reclaimed_a_loan_a_message_and_kept_chunks(line: &str, pid: u32) -> bool {
    let number_after =
        |what: &str| -> Option<usize> { line.split(what).nth(1)?.split(' ').next()?.parse().ok() };
    let kept = line.split(": 1 loan, ").nth(1).and_then(|rest| rest.split(' ').next()?.parse::<usize>().ok());
    kept.is_some_and(|k| k > 0 && number_after("reclaimed ") == Some(k + 2))
        && line.contains("chunks kept for next loans, 1 unreleased message (lost)")
        && line.contains(&format!("dead holders: pid {pid} (1 loaned, 1 held)"))
}

#[test]
fn tachyond_logs_the_library_recovery_event() {
    let sb = Sandbox::new("trace");
    sb.run_role("make-region", "md");
    let pid = kill(sb.start_role("die", "dead-seg,md", Stdio::null()));
    let mut cmd = sb.tachyond(&["--once"]);
    cmd.env("RUST_LOG", "info");
    let r = run(cmd);
    assert!(r.status.success(), "{}", r.stderr);
    no_panic(&r);
    // The library's own event (opening the region runs recovery), with
    // what it reclaimed as fields...
    let event = r.stderr.lines().find(|l| l.contains("INFO tachyon::recovery:")).unwrap_or_else(|| {
        panic!("no recovery event:\n{}", r.stderr);
    });
    for field in ["loans=1", "held=1", "slots=1", "region=", "md"] {
        assert!(event.contains(field), "{field} missing: {event}");
    }
    // The loan popped a batch: the rest of it, kept for the dead
    // process's next loans, comes back too.
    let field = |name: &str| -> usize {
        let at = event.find(&format!(" {name}=")).unwrap_or_else(|| panic!("no {name}: {event}"));
        event[at + name.len() + 2..].split(' ').next().and_then(|v| v.parse().ok()).expect(name)
    };
    assert!(field("cached") > 0 && field("total") == 2 + field("cached"), "{event}");
    // ... beside tachyond's own line, which names the dead holder.
    let line = r.stderr.lines().find(|l| l.contains("INFO tachyond: region \"md\": reclaimed"));
    assert!(line.is_some_and(|l| reclaimed_a_loan_a_message_and_kept_chunks(l, pid)), "{}", r.stderr);
    // A healthy region is no corruption.
    assert!(!r.stderr.contains("tachyon::corrupt"), "{}", r.stderr);

    // RUST_LOG filters the library's events out.
    sb.run_role("make-region", "md2");
    kill(sb.start_role("die", "dead-seg2,md2", Stdio::null()));
    let mut cmd = sb.tachyond(&["--once"]);
    cmd.env("RUST_LOG", "info,tachyon::recovery=off");
    let r = run(cmd);
    assert!(r.status.success(), "{}", r.stderr);
    assert!(!r.stderr.contains("tachyon::recovery"), "{}", r.stderr);
    assert!(r.stderr.contains("region \"md2\": reclaimed"), "{}", r.stderr);
    for name in ["md", "md2"] {
        assert!(sb.tyctl(&["rm", name]).status.success());
    }
}

#[test]
fn stale_segments_are_reaped_and_logged() {
    let sb = Sandbox::new("stale");
    let a = kill(sb.start_role("die", "left-a", Stdio::null()));
    let b = kill(sb.start_role("die", "left-b", Stdio::null()));

    let segments = sb.ls();
    for (name, pid) in [("left-a", a), ("left-b", b)] {
        let s = find(&segments, name).expect("listed");
        assert_eq!(s["stale"], true, "{s}");
        let attachers = header(s)["attachers"].as_array().expect("attachers");
        assert!(attachers.iter().any(|x| x["process"]["pid"] == pid && x["alive"] == false), "{s}");
    }
    let r = sb.tyctl(&["ls"]);
    assert!(r.stdout.contains("stale") && r.stdout.contains(&format!("{a} dead")), "{}", r.stdout);

    // `tyctl reap NAME` removes just that one.
    let r = sb.tyctl(&["reap", "left-a", "--json"]);
    assert!(r.status.success(), "{}", r.stderr);
    let doc: Value = serde_json::from_str(&r.stdout).expect("reap --json is JSON");
    assert_eq!(doc["removed"][0]["name"], "left-a", "{doc}");
    assert_eq!(doc["removed"][0]["dead_attachers"][0]["pid"], a, "{doc}");
    assert_eq!(doc["removed"].as_array().map(Vec::len), Some(1), "{doc}");
    let left: Vec<Value> = sb.ls();
    assert!(find(&left, "left-a").is_none() && find(&left, "left-b").is_some());

    // `tachyond --once` removes the other and says so, with the dead pid.
    let r = run(sb.tachyond(&["--once"]));
    assert!(r.status.success(), "{}", r.stderr);
    let line =
        r.stderr.lines().find(|l| l.contains("removed stale segment \"left-b\"")).unwrap_or_else(|| {
            panic!("no removal logged:\n{}", r.stderr);
        });
    assert!(line.contains(&format!("pid {b}")), "{line}");
    assert!(sb.ls().is_empty());

    // Nothing left: a quiet pass.
    let r = run(sb.tachyond(&["--once"]));
    assert!(r.status.success() && r.stderr.is_empty(), "{}", r.stderr);
    let r = sb.tyctl(&["reap"]);
    assert!(r.status.success(), "{}", r.stderr);
    assert!(r.stdout.contains("0 segments checked"), "{}", r.stdout);
}

#[test]
fn info_only_looks_and_reap_reclaims_and_frees_the_dead_slot() {
    let sb = Sandbox::new("look");
    sb.run_role("make-region", "md");
    let pid = kill(sb.start_role("die", "dead-seg,md", Stdio::null()));
    let dead_rows = || sb.info("md").processes.into_iter().filter(|p| !p.alive).collect::<Vec<_>>();
    // `info` attaches nothing and recovers nothing: the dead process and
    // what it held stay visible, look after look.
    for _ in 0..2 {
        let dead = dead_rows();
        assert_eq!(dead.len(), 1, "{dead:?}");
        assert_eq!((dead[0].process.pid, dead[0].loans, dead[0].held), (pid, 1, 1));
    }
    let r = sb.tyctl(&["reap", "md", "--json"]);
    assert!(r.status.success(), "{}", r.stderr);
    let doc: Value = serde_json::from_str(&r.stdout).expect("JSON");
    let recovered = &doc["recovered"][0];
    assert_eq!((recovered["loans"].as_u64(), recovered["held"].as_u64()), (Some(1), Some(1)), "{doc}");
    assert_eq!(recovered["slots"], 1, "{doc}");
    assert!(recovered["dead_holders"].as_array().unwrap().iter().any(|h| h["pid"] == pid), "{doc}");
    assert!(dead_rows().is_empty(), "the dead process's slot was freed");
    assert!(sb.tyctl(&["rm", "md"]).status.success());
}

#[test]
fn daemon_recovers_a_dead_consumer_and_stops_on_sigterm() {
    let sb = Sandbox::new("daemon");
    sb.run_role("make-region", "md");
    let mut daemon =
        Guard(sb.tachyond(&["--interval", "50ms"]).stderr(Stdio::piped()).spawn().expect("spawn tachyond"));
    let log = lines_of(daemon.stderr.take().expect("stderr"));
    let mut seen: Vec<String> = Vec::new();
    let mut expect = |what: &str| {
        if let Some(line) = seen.iter().find(|l| l.contains(what)) {
            return line.clone();
        }
        let found = wait_line(&log, |l| {
            seen.push(l.to_owned());
            l.contains(what)
        });
        found.unwrap_or_else(|| panic!("tachyond never logged {what:?}; it logged:\n{}", seen.join("\n")))
    };
    expect("region \"md\""); // "watching region" (or, with dead attachers, "region "md": opened; ...")

    // A process that loaned a chunk and received a message dies.
    let pid = kill(sb.start_role("die", "dead-seg,md", Stdio::null()));
    let line = expect("region \"md\": reclaimed");
    assert!(reclaimed_a_loan_a_message_and_kept_chunks(&line, pid), "{line}");
    let line = expect("removed stale segment \"dead-seg\"");
    assert!(line.contains(&format!("pid {pid}")), "{line}");

    // The pool is whole again: two queued messages left.
    let info = sb.info("md");
    assert_eq!(in_use(&info), 2, "{info:?}");
    assert_eq!(info.topics[0].info.lost, 1, "the dead consumer's message is counted lost: {info:?}");
    let daemon_row = info.processes.iter().find(|p| p.process.pid == daemon.id());
    assert!(daemon_row.is_some_and(|p| p.alive), "the daemon holds the region open: {info:?}");

    signal(daemon.id(), libc::SIGTERM);
    let status = wait_exit(&mut daemon);
    assert_eq!(status.code(), Some(0), "SIGTERM is a clean exit");
    expect("stopping");

    let r = sb.tyctl(&["rm", "md"]);
    assert!(r.status.success(), "{}", r.stderr);
}

#[test]
fn watch_refreshes_with_rates_and_stops_on_ctrl_c() {
    let sb = Sandbox::new("watch");
    sb.run_role("make-region", "md");

    let r = sb.tyctl(&["watch", "md", "--count", "2", "--interval", "50", "--json"]);
    assert!(r.status.success(), "{}", r.stderr);
    let docs: Vec<Value> = r.stdout.lines().map(|l| serde_json::from_str(l).expect("a JSON line")).collect();
    assert_eq!(docs.len(), 2, "{}", r.stdout);
    assert!(docs[0]["rates"].is_null(), "no rate from one snapshot: {}", docs[0]);
    let rate = &docs[1]["rates"]["quotes"];
    assert_eq!(rate["published_per_sec"].as_f64(), Some(0.0), "nothing published meanwhile: {}", docs[1]);
    assert_eq!(rate["received_per_sec"].as_f64(), Some(0.0));
    for doc in docs {
        let report: RegionReport = serde_json::from_value(doc).expect("each line is a RegionReport");
        assert_eq!(report.topics[0].info.name, "quotes");
    }

    let r = sb.tyctl(&["watch", "md", "--count", "2", "--interval", "50"]);
    assert!(r.status.success(), "{}", r.stderr);
    assert_eq!(r.stdout.matches("PUB/S").count(), 2, "{}", r.stdout);
    assert!(r.stdout.contains("snapshot 2 of 2"), "{}", r.stdout);

    // Without --count it runs until Ctrl-C, then exits cleanly.
    let mut watch = Guard(
        sb.command(env!("CARGO_BIN_EXE_tyctl"))
            .args(["watch", "md", "--interval", "50", "--json"])
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn watch"),
    );
    let lines = lines_of(watch.stdout.take().expect("stdout"));
    assert!(wait_line(&lines, |l| l.starts_with('{')).is_some(), "watch printed nothing");
    signal(watch.id(), libc::SIGINT);
    assert_eq!(wait_exit(&mut watch).code(), Some(0), "Ctrl-C is a clean exit");

    let r = sb.tyctl(&["rm", "md"]);
    assert!(r.status.success(), "{}", r.stderr);
}

/// The library's `serde` feature, as tyctl uses it: each type reads back
/// as it was written, in the documented forms.
#[test]
fn library_types_round_trip_through_serde() {
    fn round_trip<T>(value: &T) -> String
    where
        T: serde::Serialize + serde::de::DeserializeOwned + PartialEq + std::fmt::Debug,
    {
        let text = serde_json::to_string(value).expect("serialize");
        let back: T = serde_json::from_str(&text).expect("deserialize");
        assert_eq!(&back, value, "{text}");
        text
    }
    use tachyon::bus::{ClassStats, Recovered};
    use tachyon::primitives::rpc::RpcStats;
    use tachyon::Kind;
    assert_eq!(round_trip(&Kind::REGION), r#""region""#);
    assert_eq!(round_trip(&Kind::from_raw(99)), "99", "an unknown kind is its number");
    assert_eq!(round_trip(&WaitPolicy::Spin), r#""spin""#);
    assert_eq!(round_trip(&Delivery::AtLeastOnce), r#""at-least-once""#);
    let recovered = Recovered { loans: 2, held: 1, slots: 1, ..Default::default() };
    assert!(round_trip(&recovered).contains(r#""loans":2"#));
    round_trip(&ClassStats { chunk_size: 64, chunks: 10, free: 9 });
    let mut stats = RpcStats { requests_sent: 3, ..Default::default() };
    stats.latency.p99 = Duration::from_micros(1500);
    assert!(round_trip(&stats).contains(r#""p99":{"secs":0,"nanos":1500000}"#));
    assert!(serde_json::from_str::<Kind>(r#""no such kind""#).is_err());
}

#[test]
fn info_shows_each_topics_consumer_groups_and_their_lag() {
    let sb = Sandbox::new("groups");
    sb.run_role("make-groups-region", "gr");
    let info = sb.info("gr");
    let orders = info.topics.iter().find(|t| t.info.name == "orders").expect("orders");
    let groups: Vec<(&str, usize, u64)> = orders
        .groups
        .iter()
        .map(|g| (g.name.as_str(), g.slot, g.partitions.iter().map(|p| p.depth).sum()))
        .collect();
    assert_eq!(groups, [("", 0, 2), ("billing", 1, 3), ("audit", 2, 4)], "{:?}", orders.groups);
    assert!(orders.groups.iter().all(|g| !g.draining && g.partitions.len() == 2), "{:?}", orders.groups);
    // The JSON names them too.
    let r = sb.tyctl(&["info", "gr", "--json"]);
    let doc: Value = serde_json::from_str(&r.stdout).expect("info --json is JSON");
    let names: Vec<&str> = doc["topics"]
        .as_array()
        .expect("topics")
        .iter()
        .flat_map(|t| t["groups"].as_array().expect("groups").iter())
        .filter_map(|g| g["name"].as_str())
        .collect();
    assert!(names.contains(&"billing") && names.contains(&"audit"), "{names:?}");

    let r = sb.tyctl(&["info", "gr"]);
    assert!(r.status.success(), "{}", r.stderr);
    let text = &r.stdout;
    let table = text.split("\nGROUPS\n").nth(1).expect("a GROUPS table").split("\n\n").next().unwrap_or("");
    assert!(table.starts_with("TOPIC "), "{text}");
    let row = |group: &str| {
        table
            .lines()
            .find(|l| l.split_whitespace().nth(1) == Some(group))
            .unwrap_or_else(|| panic!("no row for {group} in:\n{table}"))
            .split_whitespace()
            .collect::<Vec<_>>()
    };
    // TOPIC GROUP SLOT GEN STATE LAG MEMBERS MISSED POSITION, then the lag
    // per partition.
    let billing = row("billing");
    assert_eq!((billing[0], billing[2], billing[4], billing[5]), ("orders", "1", "active", "3"), "{table}");
    let (live, recorded) = billing[6].split_once('/').expect("MEMBERS is live/recorded");
    assert!(live.parse::<usize>().unwrap() <= recorded.parse::<usize>().unwrap(), "{table}");
    assert_eq!(billing[7], "0", "nothing missed:\n{table}");
    assert!(billing[8].parse::<u64>().is_ok(), "POSITION is a count:\n{table}");
    assert_eq!(billing[9..].iter().map(|d| d.parse::<u64>().unwrap()).sum::<u64>(), 3, "{table}");
    let audit = row("audit");
    assert_eq!((audit[2], audit[5], audit.len()), ("2", "4", 11), "{table}");
    assert_eq!(audit[9..].iter().map(|d| d.parse::<u64>().unwrap()).sum::<u64>(), 4, "{table}");
    assert_eq!(table.lines().filter(|l| l.contains("(default)")).count(), 2, "orders and quotes:\n{table}");

    // TOPICS names each topic's options: TOPIC PARTITIONS CAPACITY WAIT
    // DELIVERY OPTIONS ...
    let topics = text.split("\nTOPICS\n").nth(1).expect("a TOPICS table").split("\n\n").next().unwrap_or("");
    let options = |topic: &str| {
        let row = topics.lines().find(|l| l.split_whitespace().next() == Some(topic));
        row.and_then(|l| l.split_whitespace().nth(5)).unwrap_or_else(|| panic!("no {topic} in:\n{topics}"))
    };
    assert_eq!(options("TOPIC"), "OPTIONS", "{topics}");
    assert_eq!((options("orders"), options("quotes")), ("-", "inline=64,light"), "{topics}");
    let quotes = info.topics.iter().find(|t| t.info.name == "quotes").expect("quotes");
    assert_eq!((quotes.info.inline_payload, quotes.info.light_handovers), (64, true));

    // A region without groups has no GROUPS table.
    sb.run_role("make-region", "plain");
    let r = sb.tyctl(&["info", "plain"]);
    assert!(r.status.success() && !r.stdout.contains("GROUPS"), "{}", r.stdout);
}
