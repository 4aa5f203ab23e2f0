//! The benchmark binary end to end, on tiny settings: it runs, writes its
//! report, and fails cleanly (never hangs, never passes) when the reader
//! peer dies, stalls or loses an item. No test looks at a time.

use std::path::PathBuf;
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_tachyon-bench");

fn out_dir(test: &str) -> PathBuf {
    std::env::temp_dir().join(format!("tachyon-bench-test-{}-{test}", std::process::id()))
}

/// Runs a tiny suite: 1 KiB items, 2 nodes, one repetition.
fn run(test: &str, extra: &[&str], fault: Option<&str>) -> (Output, PathBuf) {
    let out = out_dir(test);
    let mut cmd = Command::new(BIN);
    cmd.args(["--sizes", "1KiB", "--nodes", "2", "--reps", "1", "--max-items", "2000", "--stall-secs", "1"])
        .arg("--out")
        .arg(&out)
        .args(extra);
    if let Some(f) = fault {
        cmd.env("TACHYON_BENCH_FAULT", f);
    }
    (cmd.output().expect("run tachyon-bench"), out)
}

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
    let csv = std::fs::read_to_string(dir.join("samples.csv")).expect("samples.csv");
    // Header, memcpy, raw ring, 2 CircularBuffer paths × 2 policies.
    assert_eq!(csv.lines().count(), 1 + 1 + 1 + 4, "{csv}");
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

#[test]
fn bad_arguments_are_refused() {
    for args in [&["--nodes", "1"][..], &["--sizes", "8"], &["--cpus", "0,0"], &["--reps", "0"]] {
        let o = Command::new(BIN).args(args).output().expect("run tachyon-bench");
        assert!(!o.status.success(), "{args:?} accepted");
    }
}
