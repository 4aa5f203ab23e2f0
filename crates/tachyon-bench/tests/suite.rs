//! The benchmark binary end to end, on tiny settings: every group runs and
//! writes its report, and fails cleanly (never hangs, never passes) when
//! the peer dies, stalls or loses or damages a message. No test looks at a
//! time.

use std::path::PathBuf;
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_tachyon-bench");

fn out_dir(test: &str) -> PathBuf {
    std::env::temp_dir().join(format!("tachyon-bench-test-{}-{test}", std::process::id()))
}

/// Runs a tiny bandwidth suite: 1 KiB items, 2 nodes, one repetition,
/// one writer and one reader.
fn run(test: &str, extra: &[&str], fault: Option<&str>) -> (Output, PathBuf) {
    let tiny = [
        "--group",
        "bandwidth",
        "--sizes",
        "1KiB",
        "--nodes",
        "2",
        "--max-items",
        "2000",
        "--bw-procs",
        "none",
    ];
    run_group(test, &[&tiny[..], extra].concat(), fault)
}

/// Runs the binary with one repetition, a 1 s stall timeout and `args`.
fn run_group(test: &str, args: &[&str], fault: Option<&str>) -> (Output, PathBuf) {
    let out = out_dir(test);
    let mut cmd = Command::new(BIN);
    cmd.args(["--reps", "1", "--stall-secs", "1"]).arg("--out").arg(&out).args(args);
    if let Some(f) = fault {
        cmd.env("TACHYON_BENCH_FAULT", f);
    }
    (cmd.output().expect("run tachyon-bench"), out)
}

/// A tiny rpc group: 30 calls of 1 KiB, 2 of 512,000 bytes.
const TINY_RPC: [&str; 6] = ["--group", "rpc", "--rpc-calls", "30", "--rpc-large-calls", "2"];

/// A tiny topics group: 100 round trips, 1000 messages, 64 descriptors.
const TINY_TOPICS: [&str; 8] =
    ["--group", "topics", "--round-trips", "100", "--messages", "1000", "--capacity", "64"];

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn a_tiny_suite_runs_and_writes_its_report() {
    let (o, dir) = run("ok", &["--policies", "spin,hybrid"], None);
    assert!(o.status.success(), "{}", stderr(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    for want in
        ["# tachyon-bench report", "| CPU |", "memcpy, one core", "raw SPSC ring", "`write_with`/`read_with`"]
    {
        assert!(stdout.contains(want), "report lacks {want:?}:\n{stdout}");
    }
    let report = std::fs::read_to_string(dir.join("report.md")).expect("report.md");
    assert_eq!(report, stdout);
    let csv = std::fs::read_to_string(dir.join("bandwidth.csv")).expect("bandwidth.csv");
    // Header, memcpy, raw ring, 2 CircularBuffer paths and 2 topic paths
    // × 2 policies.
    assert_eq!(csv.lines().count(), 1 + 1 + 1 + 4 + 4, "{csv}");
    assert!(stdout.contains("topic `send`/`recv_into`"), "{stdout}");
    assert!(dir.join("bandwidth.png").exists() && dir.join("bandwidth.svg").exists());
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_dead_reader_fails_the_run_and_names_the_configuration() {
    let (o, _) = run("die", &["--transports", "cb-zero-copy", "--policies", "spin"], Some("die:100"));
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(e.contains("cb-zero-copy/spin 1 KiB x 2") && e.contains("exit"), "{e}");
}

#[test]
fn a_lost_item_fails_the_run() {
    for transport in ["raw-ring", "cb-copy"] {
        let (o, _) = run("lose", &["--transports", transport], Some("lose:100"));
        assert!(!o.status.success());
        let e = stderr(&o);
        assert!(e.contains("expected item 100") && e.contains(transport), "{e}");
    }
}

#[test]
fn a_stalled_reader_fails_the_run_after_the_stall_timeout() {
    for transport in ["raw-ring", "cb-zero-copy"] {
        let (o, _) = run("stall", &["--transports", transport, "--policies", "hybrid"], Some("stall:100"));
        assert!(!o.status.success());
        let e = stderr(&o);
        assert!(e.contains(transport) && e.contains("full"), "{e}");
    }
}

/// The bandwidth group's N × M runs alone: 1 KiB items, 4 nodes, 1000
/// items per run.
const TINY_BW_PROCS: [&str; 16] = [
    "--group",
    "bandwidth",
    "--sizes",
    "1KiB",
    "--nodes",
    "none",
    "--bw-procs-nodes",
    "4",
    "--max-items",
    "1000",
    "--bw-procs-policies",
    "spin,hybrid",
    "--transports",
    "cb-zero-copy,cb-copy,topic-copy",
    "--bw-procs",
    "1x1,2x1,1x2,2x2",
];

#[test]
fn tiny_writers_by_readers_runs_check_every_item_and_write_their_table() {
    let (o, dir) = run_group("bw-procs-ok", &TINY_BW_PROCS, None);
    assert!(o.status.success(), "{}", stderr(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    for want in [
        "Several writers and readers (N writer × M reader processes)",
        "| 1×1 | 4 | 1 KiB | CircularBuffer `write_with`/`read_with` | spin |",
        "| 2×2 | 4 | 1 KiB | CircularBuffer `write`/`read` | hybrid |",
        "| 1×2 | 4 | 1 KiB | topic `send`/`recv_into` | hybrid |",
    ] {
        assert!(stdout.contains(want), "report lacks {want:?}:\n{stdout}");
    }
    assert!(!stdout.contains("raw SPSC ring"), "{stdout}");
    let csv = std::fs::read_to_string(dir.join("bandwidth.csv")).expect("bandwidth.csv");
    // Header, memcpy; 3 transports × 2 policies × 4 shapes.
    assert_eq!(csv.lines().count(), 1 + 1 + 3 * 2 * 4, "{csv}");
    assert!(csv.contains("cb-copy/hybrid 1 KiB x 4, 2x1 procs,cb-copy,hybrid,1024,4,0,1000,"), "{csv}");
    assert!(dir.join("bandwidth-vs-processes.png").exists());
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_writers_by_readers_run_fails_cleanly_on_a_lost_or_duplicated_item_a_dead_or_a_stalled_writer() {
    for transport in ["cb-copy", "cb-zero-copy"] {
        let args = [
            &TINY_BW_PROCS[..10],
            &["--bw-procs-policies", "hybrid", "--transports", transport, "--bw-procs", "2x2"],
        ]
        .concat();
        // Each writer skips its item 100: the totals do not match.
        let (o, _) = run_group("bw-procs-lose", &args, Some("lose:100"));
        assert!(!o.status.success());
        let e = stderr(&o);
        assert!(
            e.contains(&format!("{transport}/hybrid 1 KiB x 4, 2x2 procs"))
                && e.contains("received 998 messages, 1000 were sent"),
            "{e}"
        );
        // Each writer writes its item 100 twice: the reader that gets both
        // or the totals notice.
        let (o, _) = run_group("bw-procs-dup", &args, Some("dup:100"));
        assert!(!o.status.success());
        let e = stderr(&o);
        assert!(
            e.contains("duplicated or reordered") || e.contains("received 1002 messages, 1000 were sent"),
            "{e}"
        );
        let (o, _) = run_group("bw-procs-die", &args, Some("die:100"));
        assert!(!o.status.success());
        let e = stderr(&o);
        assert!(e.contains("producer") && e.contains("exit status: 3"), "{e}");
        // The readers wait for the stall timeout (1 s), fail, and fail the run.
        let (o, _) = run_group("bw-procs-stall", &args, Some("stall:100"));
        assert!(!o.status.success());
        let e = stderr(&o);
        assert!(e.contains("reader") && e.contains("no item came"), "{e}");
        // Reader 0 exits after 100 items.
        let (o, _) = run_group("bw-procs-reader-die", &args, Some("reader-die:100"));
        assert!(!o.status.success());
        let e = stderr(&o);
        assert!(e.contains("consumer 0") && e.contains("exit status: 3"), "{e}");
    }
}

#[test]
fn bad_arguments_are_refused() {
    for args in [
        &["--nodes", "1"][..],
        &["--bw-procs-nodes", "1"],
        &["--bw-procs", "0x1"],
        &["--sizes", "8"],
        &["--cpus", "0,0"],
        &["--reps", "0"],
        &["--capacity", "100"],
        &["--latency-size", "2MiB"],
        &["--rpc-calls", "0"],
        &["--group", "nonsense"],
    ] {
        let o = Command::new(BIN).args(args).output().expect("run tachyon-bench");
        assert!(!o.status.success(), "{args:?} accepted");
    }
}

/// Checks a group's CSV columns of probes: last, each run's cache-line
/// probe (empty where a probe gave up, or unpinned) and how many times the
/// run was repeated because its probe was unsteady (at most twice); where
/// there are probes, the report says how steady the machine was. Whether
/// there were.
fn probed_runs(csv: &str, stdout: &str) -> bool {
    assert!(csv.lines().next().is_some_and(|h| h.ends_with(",mean_ns,probe_ns,retried")), "{csv}");
    let probes: Vec<f64> = csv.lines().skip(1).filter_map(|l| l.rsplit(',').nth(1)?.parse().ok()).collect();
    assert!(probes.iter().all(|&p| p > 0.0), "{probes:?}");
    let retried: Vec<u32> =
        csv.lines().skip(1).map(|l| l.rsplit(',').next().unwrap().parse().unwrap()).collect();
    assert!(retried.iter().all(|&r| r <= 2), "{retried:?}");
    assert_eq!(!probes.is_empty(), stdout.contains("### How steady the machine was"), "{stdout}");
    if !probes.is_empty() {
        assert!(
            stdout.contains("| repetition | runs | run again | probe µs (min – max) | unsteady runs |"),
            "{stdout}"
        );
    }
    !probes.is_empty()
}

#[test]
fn a_tiny_rpc_group_runs_and_writes_its_report() {
    let (o, dir) = run_group("rpc-ok", &TINY_RPC, None);
    assert!(o.status.success(), "{}", stderr(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    for want in [
        "## RPC",
        "RpcBuffer",
        "RpcBuffer, inline handler",
        "RpcBuffer, in place",
        "Unix socket (reference)",
        "a `request`'s four copies and its compare, nothing else (reference, floor)",
        "512,000 B",
        "64 × 1 KiB",
        "8 × 512,064 B",
    ] {
        assert!(stdout.contains(want), "report lacks {want:?}:\n{stdout}");
    }
    let csv = std::fs::read_to_string(dir.join("rpc.csv")).expect("rpc.csv");
    // Header, a Unix socket run and a floor run per message size, three
    // RpcBuffer shapes with three wait policies each, the 1 KiB shape with
    // inline handlers with each policy, and the three shapes in place with
    // each.
    assert_eq!(csv.lines().count(), 1 + 2 * 2 + 3 * 3 + 3 + 3 * 3, "{csv}");
    assert_eq!(csv.lines().filter(|l| l.contains(",raw-floor,spin,")).count(), 2, "{csv}");
    assert_eq!(csv.lines().filter(|l| l.contains(",rpc-in-place,")).count(), 3 * 3, "{csv}");
    // As in the topics group: each run's probe and how often it was run
    // again; the bars table has a column of the steady pairs' ratio
    // ("–" where nothing was probed), and one of the floor's.
    probed_runs(&csv, &stdout);
    assert!(
        stdout.contains("| measure | median ratio | (min – max) | steady runs | bar | its floor | met |"),
        "{stdout}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_tiny_topics_group_runs_and_writes_its_report() {
    let (o, dir) = run_group("topics-ok", &TINY_TOPICS, None);
    assert!(o.status.success(), "{}", stderr(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    for want in [
        "## Round-trip latency and one-way throughput",
        "Round-trip latency, 256 B",
        "One-way throughput, 64 B",
        "One-way throughput, 1 KiB",
        "pipe",
        "TCP loopback",
        "bare cache-line",
        "loan path",
        "in place: `send_with`/`receive_with`",
        "the copy then read: `send`/`recv_into` + a fold of the copy",
        "topic loan spin 1 KiB throughput ÷ topic copy + read spin 1 KiB throughput",
        "CircularBuffer",
        "RpcBuffer",
        "on the reader thread",
        "Against the project's bars",
        "Where the spin throughput goes, step by step",
        "| 64 B | leased ring ÷ raw shm |",
        "| 1 KiB | raw MPMC ring ÷ leased ring |",
        "| 64 B | leased ring, fenced wake-up checks ÷ leased ring |",
        "| 64 B | cell-claim ring ÷ raw MPMC ring |",
        "| 1 KiB | CircularBuffer ÷ cell-claim ring, CAS hand-overs |",
        "| 1 KiB | chunk-pool ring ÷ cell-claim ring, CAS hand-overs |",
        "| 64 B | topic copy ÷ chunk-pool ring |",
        "| 1 KiB | chunk-pool ring, hot reuse ÷ chunk-pool ring |",
        "| 1 KiB | topic copy ÷ chunk-pool ring, hot reuse |",
        "| 64 B | topic copy inline light ÷ topic copy inline |",
        "| 64 B | topic copy inline batch reads ÷ topic copy inline |",
        "| 64 B | CircularBuffer batch reads ÷ CircularBuffer |",
        "the consumer's batch reads (`Topic::with_batch_reads`)",
        "![latency](latency.svg)",
    ] {
        assert!(stdout.contains(want), "report lacks {want:?}:\n{stdout}");
    }
    let csv = std::fs::read_to_string(dir.join("topics.csv")).expect("topics.csv");
    if probed_runs(&csv, &stdout) {
        assert!(
            stdout.contains(
                "| measure | median ratio | (min – max) | steady runs | bar | its design's reference | met |"
            ),
            "{stdout}"
        );
    }
    // Header; latency: raw ring, the three MPMC rings, the two chunk-pool
    // rings, the two leased rings, flag, Unix socket, pipe, TCP, then
    // copy and copy with inline slots (each with and without light
    // hand-overs), loan, in place, CircularBuffer (with and without light
    // hand-overs), RpcBuffer and RpcBuffer with inline handlers × 3
    // policies; throughput, for 64 B and 1 KiB: raw ring, the three MPMC
    // rings, the two chunk-pool rings, the two leased rings, Unix socket,
    // pipe, TCP, then the copy, the copy read after it (throughput
    // only), the light copy, the three copies with inline slots (plain,
    // light, and batch reads: throughput only), loan, in place and the
    // three CircularBuffers (plain, light, and batch reads: throughput
    // only) × 3 policies.
    assert_eq!(csv.lines().count(), 1 + (12 + 30) + 2 * (11 + 33), "{csv}");
    for chart in ["latency", "throughput"] {
        for ext in ["svg", "png"] {
            let file = dir.join(format!("{chart}.{ext}"));
            assert!(std::fs::metadata(&file).is_ok_and(|m| m.len() > 1000), "{}", file.display());
        }
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_dead_rpc_peer_fails_the_run_promptly() {
    let args = [&TINY_RPC[..], &["--rpc-policies", "hybrid"]].concat();
    let (o, _) = run_group("rpc-die", &args, Some("die:5"));
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(e.contains("rpc/hybrid 1 KiB msg") && e.contains("call 5") && e.contains("exit"), "{e}");
}

#[test]
fn a_wrong_response_fails_the_run() {
    for (transport, named) in
        [("rpc", "rpc"), ("rpc-in-place", "rpc in place"), ("unix", "unix"), ("raw-floor", "raw floor")]
    {
        let args = [&TINY_RPC[..], &["--rpc-transports", transport, "--rpc-policies", "futex"]].concat();
        let (o, _) = run_group("rpc-lose", &args, Some("lose:7"));
        assert!(!o.status.success());
        let e = stderr(&o);
        assert!(e.contains(named) && e.contains("call 7"), "{e}");
        assert!(e.contains("response 7 differs") || e.contains("expected item 7"), "{e}");
    }
}

#[test]
fn a_damaged_pong_fails_the_run() {
    for transport in
        ["copy", "copy-inline-light", "loan", "raw-ring", "pipe", "tcp", "cb", "cb-light", "flag"]
    {
        let args =
            [&TINY_TOPICS[..], &["--topic-tests", "latency", "--topic-transports", transport]].concat();
        let (o, _) = run_group("topics-lose", &args, Some("lose:50"));
        assert!(!o.status.success());
        let e = stderr(&o);
        assert!(e.contains(&format!("latency {transport}")) && e.contains("pong 50 differs"), "{e}");
    }
}

#[test]
fn a_lost_topic_message_fails_the_run() {
    let args = [&TINY_TOPICS[..], &["--topic-tests", "throughput", "--topic-transports", "loan"]].concat();
    let (o, _) = run_group("topics-lost", &args, Some("lose:50"));
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(e.contains("throughput loan") && e.contains("expected item 50"), "{e}");
}

#[test]
fn a_stalled_topics_peer_fails_the_run_after_the_stall_timeout() {
    // A topic consumer that stops: the producer's partition fills up.
    let args = [&TINY_TOPICS[..], &["--topic-tests", "throughput", "--topic-transports", "copy"]].concat();
    let (o, _) =
        run_group("topics-stall", &[&args[..], &["--topic-policies", "futex"]].concat(), Some("stall:10"));
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(e.contains("throughput copy/futex") && e.contains("stayed full"), "{e}");
    // A pipe reader that stops: the writer blocks in write(2) until the
    // watchdog kills the peer.
    let args = [&TINY_TOPICS[..], &["--topic-tests", "throughput", "--topic-transports", "pipe"]].concat();
    let (o, _) = run_group("topics-stall-pipe", &args, Some("stall:10"));
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(e.contains("throughput pipe") && e.contains("no progress"), "{e}");
    // An echo that stops: no pong comes.
    let args = [&TINY_TOPICS[..], &["--topic-tests", "latency", "--topic-transports", "loan"]].concat();
    let (o, _) = run_group(
        "topics-stall-echo",
        &[&args[..], &["--topic-policies", "spin"]].concat(),
        Some("stall:10"),
    );
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(e.contains("latency loan/spin") && e.contains("no pong came"), "{e}");
}

#[test]
fn a_tiny_scaling_group_runs_and_draws_its_chart() {
    let args = [
        "--group",
        "scaling",
        "--scaling-sizes",
        "64,64KiB",
        "--scaling-round-trips",
        "50",
        "--messages",
        "1000",
        "--capacity",
        "64",
        "--scaling-partitions",
        "1,4",
        "--scaling-procs",
        "none",
        "--scaling-threads",
        "none",
    ];
    let (o, dir) = run_group("scaling-ok", &args, None);
    assert!(o.status.success(), "{}", stderr(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    for want in ["Round trip vs payload size", "| 64 KiB |", "Throughput vs partitions", "| 4 |"] {
        assert!(stdout.contains(want), "report lacks {want:?}:\n{stdout}");
    }
    let csv = std::fs::read_to_string(dir.join("scaling.csv")).expect("scaling.csv");
    // Header; per size: raw floor, loan in place, loan every byte; per
    // partition count: copy, loan.
    assert_eq!(csv.lines().count(), 1 + 2 * 3 + 2 * 2, "{csv}");
    assert!(dir.join("latency-vs-size.png").exists() && dir.join("latency-vs-size.svg").exists());
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_lost_message_in_the_scaling_group_fails_the_run() {
    let args = [
        "--group",
        "scaling",
        "--scaling-sizes",
        "64",
        "--scaling-round-trips",
        "50",
        "--messages",
        "1000",
        "--capacity",
        "64",
        "--scaling-partitions",
        "2",
    ];
    let (o, _) = run_group("scaling-lose", &args, Some("lose:50"));
    assert!(!o.status.success());
    let e = stderr(&o);
    // The first case, the raw floor at 64 B, fails on its 50th round trip.
    assert!(e.contains("pong 50 differs") || e.contains("expected item 50"), "{e}");
}

/// Every row of `csv` has as many columns as its header.
fn assert_rows_have_the_headers_columns(csv: &str) {
    let columns = |line: &str| line.split(',').count();
    let header = csv.lines().next().unwrap_or_default();
    assert!(csv.lines().all(|l| columns(l) == columns(header)), "every row has the header's columns:\n{csv}");
}

/// The scaling group's one-process runs alone: 1000 messages of 1 KiB, 64
/// descriptors, a producer and a consumer thread.
const TINY_THREADS: [&str; 12] = [
    "--group",
    "scaling",
    "--scaling-sizes",
    "none",
    "--scaling-partitions",
    "none",
    "--scaling-procs",
    "none",
    "--messages",
    "1000",
    "--capacity",
    "64",
];

#[test]
fn tiny_one_process_runs_check_every_message_and_write_their_table() {
    let (o, dir) = run_group("threads-ok", &TINY_THREADS, None);
    assert!(o.status.success(), "{}", stderr(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    for want in [
        "Throughput in one process",
        "| copy | clone |",
        "| copy | own |",
        "| loan | clone |",
        "| loan | own |",
    ] {
        assert!(stdout.contains(want), "report lacks {want:?}:\n{stdout}");
    }
    let csv = std::fs::read_to_string(dir.join("scaling.csv")).expect("scaling.csv");
    // Header; 2 paths × 2 handles.
    assert_eq!(csv.lines().count(), 1 + 2 * 2, "{csv}");
    assert_rows_have_the_headers_columns(&csv);
    assert!(
        csv.contains("threads loan/spin 1 KiB clone handle,throughput,loan,spin,1024,1,false,0,1000,"),
        "{csv}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_lost_message_in_a_one_process_run_fails_it() {
    let args = [&TINY_THREADS[..], &["--scaling-threads", "loan"]].concat();
    let (o, _) = run_group("threads-lose", &args, Some("lose:100"));
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(e.contains("threads loan/spin") && e.contains("expected item 100"), "{e}");
}

/// The scaling group's N × M processes runs alone: 1000 messages of 1 KiB,
/// 64 descriptors per partition.
const TINY_PROCS: [&str; 14] = [
    "--group",
    "scaling",
    "--scaling-sizes",
    "none",
    "--scaling-partitions",
    "none",
    "--scaling-threads",
    "none",
    "--messages",
    "1000",
    "--capacity",
    "64",
    "--scaling-procs",
    "1x1,2x1,1x2,2x2",
];

#[test]
fn tiny_n_by_m_process_runs_check_every_message_and_write_their_table() {
    let (o, dir) = run_group("procs-ok", &TINY_PROCS, None);
    assert!(o.status.success(), "{}", stderr(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    for want in [
        "Scaling: processes (1 KiB, copy path",
        "| 1×1 | 1 | spin |",
        "| 2×2 | 4 | hybrid |",
        "| 1×2 | 1 | hybrid |",
    ] {
        assert!(stdout.contains(want), "report lacks {want:?}:\n{stdout}");
    }
    assert!(!stdout.contains("Throughput vs partitions"), "{stdout}");
    let csv = std::fs::read_to_string(dir.join("scaling.csv")).expect("scaling.csv");
    // Header; 4 shapes × 2 partition counts × 2 policies.
    assert_eq!(csv.lines().count(), 1 + 4 * 2 * 2, "{csv}");
    assert!(csv.lines().next().is_some_and(|h| h.ends_with(",producers,consumers")), "{csv}");
    assert_rows_have_the_headers_columns(&csv);
    assert!(
        csv.contains("procs 2x1 copy/hybrid 1 KiB x4 partitions,throughput,copy,hybrid,1024,4,"),
        "{csv}"
    );
    assert!(dir.join("throughput-vs-processes.png").exists());
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn an_n_by_m_run_fails_cleanly_on_a_lost_or_duplicated_message_a_dead_or_a_stalled_producer() {
    let args =
        [&TINY_PROCS[..12], &["--scaling-procs", "2x2", "--scaling-procs-policies", "hybrid"]].concat();
    // Each producer skips its message 100: the totals do not match.
    let (o, _) = run_group("procs-lose", &args, Some("lose:100"));
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(
        e.contains("procs 2x2 copy/hybrid") && e.contains("received 998 messages, 1000 were sent"),
        "{e}"
    );
    // Each producer sends its message 100 twice: with 4 partitions each
    // consumer owns its own and sees the duplicate itself; with 1 they
    // compete, and the one that gets it or the totals notice.
    for partitions in ["4", "1"] {
        let dup = [&args[..], &["--scaling-procs-partitions", partitions]].concat();
        let (o, _) = run_group("procs-dup", &dup, Some("dup:100"));
        assert!(!o.status.success());
        let e = stderr(&o);
        assert!(
            e.contains("duplicated or reordered") || e.contains("received 1002 messages, 1000 were sent"),
            "{e}"
        );
        if partitions == "4" {
            assert!(e.contains("message 100 of producer"), "{e}");
        }
    }
    let (o, _) = run_group("procs-die", &args, Some("die:100"));
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(e.contains("producer") && e.contains("exit status: 3"), "{e}");
    // The consumers wait for the stall timeout (1 s), fail, and fail the run.
    let (o, _) = run_group("procs-stall", &args, Some("stall:100"));
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(e.contains("consumer") && e.contains("no message came"), "{e}");
}

/// A tiny async group: 100 round trips per case.
const TINY_ASYNC: [&str; 4] = ["--group", "async", "--round-trips", "100"];

#[test]
fn a_tiny_async_group_runs_and_writes_its_report() {
    let (o, dir) = run_group("async-ok", &TINY_ASYNC, None);
    assert!(o.status.success(), "{}", stderr(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    for want in [
        "## async: awaited receive vs blocking receive vs tokio UnixStream",
        "| tokio UnixStream |",
        "| topic/hybrid, receive_async |",
        "| topic/futex, blocking receive |",
    ] {
        assert!(stdout.contains(want), "report lacks {want:?}:\n{stdout}");
    }
    let csv = std::fs::read_to_string(dir.join("async.csv")).expect("async.csv");
    // Header; Unix socket, tokio UnixStream; blocking and async × hybrid, futex.
    assert_eq!(csv.lines().count(), 1 + 2 + 4, "{csv}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_damaged_pong_fails_the_async_run() {
    let (o, _) = run_group("async-lose", &TINY_ASYNC, Some("lose:50"));
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(e.contains("pong 50 differs"), "{e}");
}

/// A tiny fanout group: 1000 messages of 64 B, 1 and 3 consumer groups,
/// 64 descriptors per group ring.
const TINY_FANOUT: [&str; 10] = [
    "--group",
    "fanout",
    "--fanout-messages",
    "1000",
    "--fanout-sizes",
    "64",
    "--fanout-groups",
    "1,3",
    "--capacity",
    "64",
];

#[test]
fn a_tiny_fanout_group_checks_every_group_and_writes_its_table() {
    let (o, dir) = run_group("fanout-ok", &TINY_FANOUT, None);
    assert!(o.status.success(), "{}", stderr(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    for want in [
        "## Fan-out: consumer groups",
        "### 64 B messages",
        "| pipe, write/read (reference) | kernel |",
        "| Unix socket, write/read (reference) | kernel |",
        "| topic, copy path: `send`/`recv_into` | hybrid |",
        "| topic, consumer groups | hybrid | 1 |",
        "| topic, consumer groups | hybrid | 3 |",
        "uncontended ns/send",
    ] {
        assert!(stdout.contains(want), "report lacks {want:?}:\n{stdout}");
    }
    let csv = std::fs::read_to_string(dir.join("fanout.csv")).expect("fanout.csv");
    // Header; 3 references and 2 fan-out runs.
    assert_eq!(csv.lines().count(), 1 + 3 + 2, "{csv}");
    assert!(csv.contains("fanout 3 groups/hybrid 64 B,fanout,groups,hybrid,64,3,0,1000,"), "{csv}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_fanout_run_fails_cleanly_on_a_lost_or_duplicated_message_a_dead_or_a_stalled_producer() {
    let args =
        [&TINY_FANOUT[..6], &["--capacity", "64", "--fanout-references", "none", "--fanout-groups", "2"]]
            .concat();
    // The producer skips its message 100: every group misses it.
    let (o, _) = run_group("fanout-lose", &args, Some("lose:100"));
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(
        e.contains("fanout 2 groups/hybrid 64 B") && e.contains("received 999 messages, 1000 were sent"),
        "{e}"
    );
    // The producer sends its message 100 twice: every group sees it twice.
    let (o, _) = run_group("fanout-dup", &args, Some("dup:100"));
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(e.contains("group") && e.contains("duplicated or reordered"), "{e}");
    let (o, _) = run_group("fanout-die", &args, Some("die:100"));
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(e.contains("producer") && e.contains("exit status: 3"), "{e}");
    // The consumers wait for the stall timeout (1 s), fail, and fail the run.
    let (o, _) = run_group("fanout-stall", &args, Some("stall:100"));
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(e.contains("consumer") && e.contains("no message came"), "{e}");
}

/// `compare` on a tiny topics run: the binary against itself and a copy of
/// itself, two rounds; every run's report kept, the table written.
#[test]
fn compare_runs_builds_in_rounds_and_writes_the_paired_table() {
    let out = out_dir("compare");
    let tiny = [
        "--group",
        "topics",
        "--reps",
        "1",
        "--stall-secs",
        "5",
        "--messages",
        "2000",
        "--round-trips",
        "100",
        "--topic-tests",
        "throughput,latency",
        "--topic-policies",
        "spin",
        "--topic-transports",
        "raw-ring,cb",
        "--throughput-sizes",
        "64",
    ];
    let o = Command::new(BIN)
        .args(["compare", "--rounds", "2", "--control", "--out"])
        .arg(&out)
        .args([BIN, "--"])
        .args(tiny)
        .output()
        .expect("run tachyon-bench compare");
    assert!(o.status.success(), "{}", stderr(&o));
    let table = String::from_utf8_lossy(&o.stdout);
    assert!(table.contains("## Builds compared"), "{table}");
    assert!(table.contains(", 2 rounds, "), "{table}");
    assert!(table.contains("| case | tachyon-bench | tachyon-bench-copy |"), "{table}");
    // A round whose probes caught the host off its usual phase is left out (the
    // header says how many were kept); with none kept every cell is "–".
    let kept: usize = table
        .split(", 2 rounds, ")
        .nth(1)
        .and_then(|rest| rest.split(" kept").next()?.parse().ok())
        .unwrap_or_else(|| panic!("no count of kept rounds:\n{table}"));
    assert!(kept <= 2, "{table}");
    for case in ["throughput cb/spin 64 B", "throughput raw-ring 64 B", "latency cb/spin 256 B"] {
        let row = table
            .lines()
            .find(|l| l.starts_with(&format!("| {case} |")))
            .unwrap_or_else(|| panic!("{case}:\n{table}"));
        if kept > 0 {
            // The copy's cell pairs it with the base: "figure · ratio (won of rounds)".
            assert!(row.contains(" · ") && row.contains(" of "), "{row}");
        } else {
            assert!(row.ends_with("| – | – |"), "{row}");
        }
    }
    assert_eq!(std::fs::read_to_string(out.join("compare.md")).expect("compare.md"), table);
    for round in 1..=2 {
        for build in ["tachyon-bench", "tachyon-bench-copy"] {
            let run = out.join(format!("round-{round}-{build}"));
            assert!(run.join("topics.csv").is_file(), "{}", run.display());
            assert!(run.join("run.log").is_file(), "{}", run.display());
        }
    }
    let _ = std::fs::remove_dir_all(&out);
}

/// `compare` refuses what it cannot do, and names a build whose run fails.
#[test]
fn compare_refuses_bad_arguments_and_names_a_failed_run() {
    let out = out_dir("compare-bad");
    let cmp = |args: &[&str]| {
        let o =
            Command::new(BIN).arg("compare").arg("--out").arg(&out).args(args).output().expect("run compare");
        assert!(!o.status.success(), "{args:?} accepted");
        stderr(&o)
    };
    assert!(cmp(&[BIN, "--", "--group", "topics"]).contains("nothing to compare"));
    assert!(cmp(&["/no/such/tachyon-bench", BIN]).contains("no such binary"));
    assert!(cmp(&["--control", BIN, "--", "--out", "x"]).contains("chooses each run's folder"));
    assert!(cmp(&["--rounds", "0", "--control", BIN]).contains("at least 1"));
    // A run that fails (a capacity that is no power of two): its build and
    // its log are named.
    let e = cmp(&["--control", BIN, "--", "--group", "topics", "--capacity", "100"]);
    assert!(e.contains("tachyon-bench: the run failed") && e.contains("run.log"), "{e}");
    // A run of another group writes no topics.csv.
    let e = cmp(&[
        "--control",
        BIN,
        "--",
        "--group",
        "rpc",
        "--reps",
        "1",
        "--rpc-calls",
        "10",
        "--rpc-large-calls",
        "1",
        "--rpc-policies",
        "spin",
    ]);
    assert!(e.contains("run it with --group topics"), "{e}");
    let _ = std::fs::remove_dir_all(&out);
}
