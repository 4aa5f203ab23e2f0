//! Helpers for tests that run real processes: the test binary re-executes
//! itself as a child, running one named role with named arguments
//! ([`Args`]).
#![allow(dead_code)]

pub mod chaos;
pub mod fleet;

use std::fmt::Display;
use std::future::Future;
use std::process::{Child, Command, Stdio};
use std::str::FromStr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};
use tachyon::bus::Region;
use tachyon::Segment;

/// Environment variable naming the role a child runs.
pub const ROLE_ENV: &str = "TACHYON_TEST_ROLE";
/// Environment variable carrying the role's arguments ([`Args`], one
/// `key=value` a line).
pub const ARG_ENV: &str = "TACHYON_TEST_ARG";

/// The named arguments the driver gives a child's role. A child reads each
/// by name; one that is missing or does not parse is a panic that says
/// which.
///
/// ```ignore
/// spawn(ENTRY, "writer", Args::name(&name).with("writer", 1));
/// // in the child:
/// let id: u64 = args.get("writer");
/// ```
///
/// Most roles take only the name of the thing under test: a bare name
/// converts into the argument `name` (`spawn(ENTRY, "echo", &name)`, read
/// with `args.str("name")`).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Args(Vec<(String, String)>);

impl Args {
    pub fn new() -> Args {
        Args::default()
    }

    /// Just the argument `name`: the name of the thing under test.
    pub fn name(name: &str) -> Args {
        Args::new().with("name", name)
    }

    /// These arguments and `key` = `value`.
    pub fn with(mut self, key: &str, value: impl Display) -> Args {
        let value = value.to_string();
        assert!(!key.is_empty() && !key.contains(['=', '\n']), "child argument name {key:?}");
        assert!(!value.contains('\n'), "child argument {key}={value:?}: no line breaks");
        assert!(self.0.iter().all(|(k, _)| k != key), "child argument {key} given twice");
        self.0.push((key.to_owned(), value));
        self
    }

    /// The value of `key`, as the driver wrote it.
    #[track_caller]
    pub fn str(&self, key: &str) -> &str {
        match self.0.iter().find(|(k, _)| k == key) {
            Some((_, v)) => v,
            None => panic!("child argument {key} missing; the driver gave {:?}", self.0),
        }
    }

    /// The value of `key`, parsed.
    #[track_caller]
    pub fn get<T: FromStr>(&self, key: &str) -> T
    where
        T::Err: Display,
    {
        let v = self.str(key);
        match v.parse() {
            Ok(value) => value,
            Err(e) => panic!("child argument {key}={v:?} is not a {}: {e}", std::any::type_name::<T>()),
        }
    }

    fn encode(&self) -> String {
        self.0.iter().map(|(k, v)| format!("{k}={v}\n")).collect()
    }

    fn decode(s: &str) -> Args {
        let pair = |line: &str| match line.split_once('=') {
            Some((k, v)) => (k.to_owned(), v.to_owned()),
            None => panic!("child argument {line:?} is not key=value"),
        };
        Args(s.lines().map(pair).collect())
    }
}

impl From<&str> for Args {
    fn from(name: &str) -> Args {
        Args::name(name)
    }
}

impl From<&String> for Args {
    fn from(name: &String) -> Args {
        Args::from(name.as_str())
    }
}

impl From<&Args> for Args {
    fn from(args: &Args) -> Args {
        args.clone()
    }
}

/// A name no other test (or run) uses.
pub fn unique(tag: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    format!("test-{tag}-{}-{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed))
}

/// The command that runs `role` with `args` in a child copy of this test
/// binary. `entry` is the name of the test function that dispatches roles.
pub fn child_command(entry: &str, role: &str, args: impl Into<Args>) -> Command {
    let mut cmd = Command::new(std::env::current_exe().expect("current exe"));
    cmd.args(["--exact", entry, "--nocapture", "--test-threads=1"])
        .env(ROLE_ENV, role)
        .env(ARG_ENV, args.into().encode())
        .stdin(Stdio::null());
    cmd
}

/// Like [`child_command`], but the child runs as `uid`/`gid`. The test
/// binary is copied to a world-readable temporary folder first, so that the
/// other user can execute it wherever the checkout lives.
pub fn child_command_as(entry: &str, role: &str, args: impl Into<Args>, uid: u32, gid: u32) -> Command {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    let dir = copied_binary_dir();
    std::fs::create_dir_all(&dir).expect("temp dir");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).expect("chmod dir");
    let exe = dir.join("test-binary");
    if !exe.exists() {
        std::fs::copy(std::env::current_exe().expect("current exe"), &exe).expect("copy test binary");
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).expect("chmod binary");
    }
    let mut cmd = Command::new(exe);
    cmd.args(["--exact", entry, "--nocapture", "--test-threads=1"])
        .env(ROLE_ENV, role)
        .env(ARG_ENV, args.into().encode())
        .current_dir(&dir)
        .stdin(Stdio::null())
        .uid(uid)
        .gid(gid);
    cmd
}

fn copied_binary_dir() -> std::path::PathBuf {
    std::env::temp_dir().join(format!("tachyon-test-bin-{}", std::process::id()))
}

/// Spawns `cmd`, retrying while the kernel says its executable is busy
/// (`ETXTBSY`): a binary copied just now (see [`child_command_as`]) can
/// still be open for writing in a child that another test thread forked
/// meanwhile, until that child execs (files are close-on-exec).
pub fn spawn_retrying(cmd: &mut Command) -> Child {
    let deadline = Instant::now() + LIMIT;
    loop {
        match cmd.spawn() {
            Ok(child) => return child,
            Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => panic!("spawn child: {e}"),
        }
    }
}

/// Removes the copy made by [`child_command_as`].
pub fn remove_copied_binary() {
    let _ = std::fs::remove_dir_all(copied_binary_dir());
}

/// Starts `role` in a child process.
pub fn spawn(entry: &str, role: &str, args: impl Into<Args>) -> Child {
    child_command(entry, role, args).spawn().expect("spawn child")
}

/// The role and its arguments if this process is a child.
pub fn role() -> Option<(String, Args)> {
    let role = std::env::var(ROLE_ENV).ok()?;
    Some((role, Args::decode(&std::env::var(ARG_ENV).unwrap_or_default())))
}

/// Polls `cond` until it holds or `limit` passes; returns whether it held.
pub fn wait_for(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Waits for a child to exit, killing it if it takes longer than `limit`.
/// Returns its exit code (None if killed by a signal).
pub fn wait_child(child: &mut Child, limit: Duration) -> Option<i32> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return status.code();
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("child did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Waits (up to [`LIMIT`]) for a child that must die by SIGKILL, as one
/// run with `TACHYON_FAULT` does at its fault point; `what` names it in
/// the failure.
pub fn wait_killed(child: &mut Child, what: &str) {
    use std::os::unix::process::ExitStatusExt;
    let deadline = Instant::now() + LIMIT;
    let status = loop {
        if let Some(s) = child.try_wait().expect("try_wait") {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what}: the child did not finish");
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    assert_eq!(status.signal(), Some(9), "{what}: the child must die by SIGKILL ({status:?})");
}

/// SIGKILLs a child and reaps it.
pub fn kill(child: &mut Child) {
    child.kill().expect("SIGKILL child");
    child.wait().expect("reap child");
}

/// Generous limit for anything a child should do quickly.
pub const LIMIT: Duration = Duration::from_secs(20);

/// Removes a (persistent) region when the test ends, however it ends.
pub struct RemoveRegion(pub String);

impl Drop for RemoveRegion {
    fn drop(&mut self) {
        let _ = Region::remove(&self.0);
    }
}

/// Word `i` of a segment of `AtomicU64` counters and flags shared with
/// children.
pub fn counter(seg: &Segment, i: usize) -> &AtomicU64 {
    seg.get::<AtomicU64>(i * 8).unwrap()
}

/// The files of channel `name` (control segment and rings) in the segment
/// directory now.
pub fn channel_files(name: &str) -> Vec<String> {
    tachyon::segment::list()
        .unwrap()
        .into_iter()
        .map(|i| i.name)
        .filter(|n| n == name || n.starts_with(&format!("{name}.")))
        .collect()
}

/// A minimal executor: polls on this thread, parks between wake-ups.
pub fn block_on<F: Future>(fut: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut fut = std::pin::pin!(fut);
    loop {
        if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::park_timeout(Duration::from_millis(100));
    }
}
