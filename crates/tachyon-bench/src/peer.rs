//! The peer process: this benchmark binary started again as
//! `tachyon-bench peer ...`, supervised so that nothing waits on it for
//! ever.
//!
//! The peer talks back on its stdout, one line per event (`ready`,
//! `done ...`); a thread forwards those lines to a channel the parent reads
//! with a timeout. Its stderr goes straight to the terminal. If anything
//! fails, dropping the [`Peer`] kills it.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

/// A running peer process.
pub struct Peer {
    child: Child,
    lines: Receiver<String>,
    exited: Option<ExitStatus>,
}

impl Peer {
    /// Starts `tachyon-bench` with `args`.
    pub fn spawn(args: &[String]) -> Result<Peer, String> {
        let exe = std::env::current_exe().map_err(|e| format!("cannot find my own executable: {e}"))?;
        let mut child = Command::new(&exe)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("cannot start the peer {}: {e}", exe.display()))?;
        let stdout = child.stdout.take().ok_or("the peer has no stdout pipe")?;
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Ok(Peer { child, lines, exited: None })
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
                let deadline = Instant::now() + Duration::from_secs(1);
                let status = loop {
                    if let Some(s) = self.poll_exit() {
                        break s.to_string();
                    }
                    if Instant::now() > deadline {
                        break "its stdout closed".to_owned();
                    }
                    std::thread::sleep(Duration::from_millis(5));
                };
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
