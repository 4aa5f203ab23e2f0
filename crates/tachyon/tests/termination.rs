//! What SIGTERM does to a process's segments, with and without
//! `tachyon::cleanup_on_termination()` (cargo feature `signals`), with real
//! processes: a child copy of this test binary creates a segment, says
//! "ready" on its stdout and waits; the parent sends SIGTERM.
#![cfg(not(tachyon_loom))]

mod common;

use common::{child_command, unique, LIMIT};
use std::io::{BufRead, BufReader};
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, ExitStatus, Stdio};
use std::time::Instant;
use tachyon::segment::name::SegmentName;
use tachyon::{Error, Segment};

const ENTRY: &str = "child_entry";
const READY: &str = "child ready";

/// Dispatches the roles children run; does nothing in the parent.
#[test]
fn child_entry() {
    let Some((role, args)) = common::role() else { return };
    let name = args.str("name");
    if role == "cleanup" {
        #[cfg(feature = "signals")]
        tachyon::cleanup_on_termination().expect("install the cleanup");
        #[cfg(not(feature = "signals"))]
        panic!("role cleanup needs the signals feature");
    } else {
        assert_eq!(role, "plain");
    }
    let _seg = Segment::create(name, 4096).expect("create the segment");
    println!("{READY}");
    // Wait for the parent's signal; a bounded wait, so that an orphan ends.
    std::thread::sleep(LIMIT);
    std::process::exit(1);
}

/// Starts `role` on segment `name` and returns once the child said it is
/// ready.
fn start(role: &str, name: &str) -> Child {
    let mut child = child_command(ENTRY, role, name).stdout(Stdio::piped()).spawn().expect("spawn child");
    let stdout = child.stdout.take().expect("child stdout");
    let ready = BufReader::new(stdout).lines().map_while(|l| l.ok()).any(|l| l.trim_end().ends_with(READY));
    assert!(ready, "the child ended before it was ready");
    child
}

/// Sends SIGTERM to `child` and waits (bounded) for its end.
fn terminate(child: &mut Child) -> ExitStatus {
    let pid = rustix::process::Pid::from_child(child);
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).expect("send SIGTERM");
    let deadline = Instant::now() + LIMIT;
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the child did not end within {LIMIT:?} of SIGTERM");
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

#[test]
fn without_the_helper_sigterm_leaves_the_file_until_the_next_open() {
    let name = unique("sigterm-plain");
    let path = SegmentName::parse(&name).expect("valid name").path();
    let mut child = start("plain", &name);
    assert!(path.exists(), "the child created {}", path.display());

    let status = terminate(&mut child);
    assert_eq!(status.signal(), Some(libc::SIGTERM), "the child died of SIGTERM: {status:?}");
    assert!(path.exists(), "no cleanup ran, so the file stays: {}", path.display());

    // The next open finds nobody attached, removes the stale file and says so.
    assert!(matches!(Segment::open(&name), Err(Error::NotFound { .. })));
    assert!(!path.exists(), "the open removed the stale file");
}

#[cfg(feature = "signals")]
#[test]
fn with_the_helper_sigterm_removes_the_file_and_still_kills() {
    let name = unique("sigterm-cleanup");
    let path = SegmentName::parse(&name).expect("valid name").path();
    let mut child = start("cleanup", &name);
    assert!(path.exists(), "the child created {}", path.display());

    let status = terminate(&mut child);
    assert_eq!(status.signal(), Some(libc::SIGTERM), "the child still died of SIGTERM: {status:?}");
    assert_eq!(status.code(), None, "a death by signal, not an exit: {status:?}");
    assert!(!path.exists(), "the helper removed {} before the process ended", path.display());
}
