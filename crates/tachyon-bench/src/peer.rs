//! The peer process: this benchmark binary started again as
//! `tachyon-bench peer ...`, supervised so that nothing waits on it for
//! ever.
//!
//! The peer talks back on its stdout, one line per event (`ready`,
//! `done ...`); a thread forwards those lines to a channel the parent reads
//! with a timeout. Its stderr goes straight to the terminal. If anything
//! fails, dropping the [`Peer`] kills it.

use std::io::{BufRead, BufReader, Write as _};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long one bounded library call may wait before the caller checks on
/// its peer and tries again.
pub const SLICE: Duration = Duration::from_millis(100);
/// How long the peer may take to start and open what it uses.
pub const STARTUP: Duration = Duration::from_secs(10);

/// A running peer process.
pub struct Peer {
    child: Child,
    lines: Receiver<String>,
    exited: Option<ExitStatus>,
    gate: Option<ChildStdin>,
}

impl Peer {
    /// Starts `tachyon-bench` with `args`.
    pub fn spawn(args: &[String]) -> Result<Peer, String> {
        Peer::launch(args, false)
    }

    /// Starts `tachyon-bench` with `args` and a start gate: its stdin, on
    /// which it waits for the line that [`go`](Peer::go) writes.
    pub fn spawn_gated(args: &[String]) -> Result<Peer, String> {
        Peer::launch(args, true)
    }

    fn launch(args: &[String], gated: bool) -> Result<Peer, String> {
        let exe = std::env::current_exe().map_err(|e| format!("cannot find my own executable: {e}"))?;
        let mut child = Command::new(&exe)
            .args(args)
            .stdin(if gated { Stdio::piped() } else { Stdio::null() })
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("cannot start the peer {}: {e}", exe.display()))?;
        let stdout = child.stdout.take().ok_or("the peer has no stdout pipe")?;
        let gate = child.stdin.take();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Ok(Peer { child, lines, exited: None, gate })
    }

    /// Opens a gated peer's start gate (see [`spawn_gated`](Peer::spawn_gated)).
    pub fn go(&mut self) -> Result<(), String> {
        let gate = self.gate.as_mut().ok_or("the peer has no start gate")?;
        gate.write_all(b"go\n").and_then(|()| gate.flush()).map_err(|e| format!("cannot start the peer: {e}"))
    }

    /// The peer's next line if one comes within `timeout`, `None` if none
    /// does; fails if the peer's stdout closed (it exited).
    pub fn poll_line(&mut self, timeout: Duration) -> Result<Option<String>, String> {
        match self.lines.recv_timeout(timeout) {
            Ok(line) => Ok(Some(line)),
            Err(RecvTimeoutError::Timeout) => Ok(None),
            Err(RecvTimeoutError::Disconnected) => {
                let status = self.wait_exit(Duration::from_secs(1));
                Err(format!("the peer exited ({status})"))
            }
        }
    }

    /// The peer's exit status, waiting up to `timeout` for it.
    fn wait_exit(&mut self, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(s) = self.poll_exit() {
                return s.to_string();
            }
            if Instant::now() > deadline {
                return "its stdout closed".to_owned();
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// The peer's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Fails if the peer has exited (it must not before it says `done`).
    pub fn check_alive(&mut self) -> Result<(), String> {
        if let Some(status) = self.poll_exit() {
            return Err(format!("the peer exited early ({status})"));
        }
        Ok(())
    }

    fn poll_exit(&mut self) -> Option<ExitStatus> {
        if self.exited.is_none() {
            self.exited = self.child.try_wait().ok().flatten();
        }
        self.exited
    }

    /// Waits up to `timeout` for the peer's next line, which must start
    /// with `word`; returns the rest of it.
    pub fn expect(&mut self, word: &str, timeout: Duration) -> Result<String, String> {
        let line = match self.lines.recv_timeout(timeout) {
            Ok(line) => line,
            Err(RecvTimeoutError::Timeout) => {
                return Err(format!("the peer did not say {word:?} within {timeout:?}"));
            }
            Err(RecvTimeoutError::Disconnected) => {
                // Its stdout closed: it exited (or is about to).
                let status = self.wait_exit(Duration::from_secs(1));
                return Err(format!("the peer exited before saying {word:?} ({status})"));
            }
        };
        match line.strip_prefix(word) {
            Some(rest) => Ok(rest.trim().to_owned()),
            None => Err(format!("the peer said {line:?}, expected {word:?}")),
        }
    }

    /// Waits up to `timeout` for the peer to exit successfully.
    pub fn finish(mut self, timeout: Duration) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.poll_exit() {
                return if status.success() { Ok(()) } else { Err(format!("the peer failed ({status})")) };
            }
            if Instant::now() > deadline {
                return Err(format!("the peer did not exit within {timeout:?}"));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        if self.poll_exit().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A gated peer's wait at its start gate (see [`Peer::spawn_gated`]):
/// blocks until the benchmark process writes `go` on its stdin (if the
/// benchmark process dies, this process dies with it).
pub fn wait_for_go() -> Result<(), String> {
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).map_err(|e| format!("reading the start gate: {e}"))?;
    match line.trim() {
        "go" => Ok(()),
        "" => Err("the benchmark process closed the start gate".into()),
        other => Err(format!("the start gate said {other:?}, not \"go\"")),
    }
}

/// What every peer process does first: dies with the benchmark process
/// (`parent`) and pins itself to `cpu`, if given.
pub fn start(parent: u32, cpu: Option<usize>) -> Result<(), String> {
    die_with_parent(parent)?;
    if let Some(cpu) = cpu {
        crate::pin::pin_to(cpu)?;
    }
    Ok(())
}

/// Called first thing in the peer: die with the parent, so that a killed
/// benchmark leaves no spinning peer behind. Fails if the parent is
/// already gone.
pub fn die_with_parent(parent: u32) -> Result<(), String> {
    rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))
        .map_err(|e| format!("prctl(PR_SET_PDEATHSIG): {e}"))?;
    let ppid = rustix::process::getppid().map_or(0, |p| p.as_raw_nonzero().get() as u32);
    if ppid != parent {
        return Err(format!("the benchmark process {parent} is gone"));
    }
    Ok(())
}

/// The environment variable that makes a peer misbehave, for the tests
/// that check the benchmark fails cleanly: `die:N` (exit at message N),
/// `stall:N` (stop at message N), `lose:N` (lose message N: a reader
/// skips it; an echoing peer answers it with a damaged or stale message).
pub const FAULT_ENV: &str = "TACHYON_BENCH_FAULT";

/// A fault injected through [`FAULT_ENV`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Behave.
    None,
    /// Exit with status 3 at message N.
    Die(u64),
    /// Sleep for ever at message N.
    Stall(u64),
    /// Lose message N.
    Lose(u64),
}

impl Fault {
    /// The fault the environment asks for.
    pub fn from_env() -> Fault {
        let Ok(v) = std::env::var(FAULT_ENV) else { return Fault::None };
        let Some((kind, at)) = v.split_once(':') else { return Fault::None };
        let Ok(at) = at.parse() else { return Fault::None };
        match kind {
            "die" => Fault::Die(at),
            "stall" => Fault::Stall(at),
            "lose" => Fault::Lose(at),
            _ => Fault::None,
        }
    }

    /// Dies or stalls if that is the fault at message `seq`; true if
    /// message `seq` is to be lost.
    #[inline]
    pub fn at(self, seq: u64) -> bool {
        match self {
            Fault::None => false,
            Fault::Die(n) if n == seq => std::process::exit(3),
            Fault::Stall(n) if n == seq => loop {
                std::thread::sleep(Duration::from_secs(3600));
            },
            Fault::Lose(n) => n == seq,
            _ => false,
        }
    }
}

/// Calls a bounded library operation with a [`SLICE`] timeout until it
/// succeeds; between tries it runs `check` (e.g. "is the peer alive?") and
/// it fails after `stall` without success with "waited ...: {what}".
/// `Timeout` and `PoolExhausted` count as "not yet"; other errors fail.
#[inline]
pub fn retry<R>(
    mut op: impl FnMut(Option<Duration>) -> tachyon::Result<R>,
    stall: Duration,
    check: &mut dyn FnMut() -> Result<(), String>,
    what: &str,
) -> Result<R, String> {
    match op(Some(SLICE)) {
        Ok(r) => Ok(r),
        Err(e) => retry_slow(op, e, stall, check, what),
    }
}

#[cold]
fn retry_slow<R>(
    mut op: impl FnMut(Option<Duration>) -> tachyon::Result<R>,
    first: tachyon::Error,
    stall: Duration,
    check: &mut dyn FnMut() -> Result<(), String>,
    what: &str,
) -> Result<R, String> {
    let start = Instant::now();
    let mut err = first;
    loop {
        match err {
            tachyon::Error::Timeout { .. } | tachyon::Error::PoolExhausted { .. } => {}
            e => return Err(e.to_string()),
        }
        check()?;
        if start.elapsed() >= stall {
            return Err(format!("waited {stall:?}: {what}"));
        }
        match op(Some(SLICE)) {
            Ok(r) => return Ok(r),
            Err(e) => err = e,
        }
    }
}

/// Kills a peer that makes no progress for too long, so that this process,
/// blocked in a plain `read` on a pipe or socket (which has no timeout),
/// sees end-of-file instead of waiting for ever. The caller bumps
/// [`progress`](Watchdog::progress) as it goes. Dropping the watchdog stops
/// it; drop it before the peer is reaped (its pid could then be reused).
pub struct Watchdog {
    progress: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    fired: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Watchdog {
    /// Watches peer `pid`: SIGKILLs it once `progress` has not moved for
    /// `stall`.
    pub fn start(pid: u32, stall: Duration) -> Result<Watchdog, String> {
        let progress = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let fired = Arc::new(AtomicBool::new(false));
        let (p, s, f) = (progress.clone(), stop.clone(), fired.clone());
        let pid = rustix::process::Pid::from_raw(pid as i32).ok_or("the peer has no pid")?;
        let thread = std::thread::Builder::new()
            .name("tachyon-bench-watchdog".into())
            .spawn(move || {
                let mut last = p.load(Ordering::Relaxed);
                let mut since = Instant::now();
                while !s.load(Ordering::Relaxed) {
                    std::thread::park_timeout(Duration::from_millis(20));
                    let now = p.load(Ordering::Relaxed);
                    if now != last {
                        last = now;
                        since = Instant::now();
                    } else if since.elapsed() >= stall && !s.load(Ordering::Relaxed) {
                        f.store(true, Ordering::SeqCst);
                        let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
                        return;
                    }
                }
            })
            .map_err(|e| format!("cannot start the watchdog thread: {e}"))?;
        Ok(Watchdog { progress, stop, fired, thread: Some(thread) })
    }

    /// Records progress (message `n` done).
    #[inline]
    pub fn progress(&self, n: u64) {
        self.progress.store(n + 1, Ordering::Relaxed);
    }

    /// Explains an I/O error: if the watchdog killed the peer, that the
    /// peer (or this side) made no progress for the stall timeout.
    pub fn explain(&self, e: std::io::Error, stall: Duration, what: &str) -> String {
        if self.fired.load(Ordering::SeqCst) {
            format!("no progress for {stall:?}, the peer was killed: {what}")
        } else {
            format!("{e} ({what})")
        }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}
