//! Helpers shared by the bus examples that run several processes.
#![allow(dead_code)] // each example uses what it needs

use std::io;
use std::process::{Child, Command};
use std::time::{Duration, Instant};
use tachyon::{Error, Result};

/// The `i`-th little-endian u64 of a message (whose bytes another process
/// wrote: a short message is an error, not a panic).
pub fn field(message: &[u8], i: usize) -> Result<u64> {
    message
        .get(8 * i..8 * i + 8)
        .and_then(|b| <[u8; 8]>::try_from(b).ok())
        .map(u64::from_le_bytes)
        .ok_or_else(|| check_failed(format!("a message of {} bytes has no field {i}", message.len())))
}

/// A failed check of an example's own (a lost, repeated or misrouted
/// message).
pub fn check_failed(what: String) -> Error {
    Error::Io { context: "check failed".into(), source: io::Error::new(io::ErrorKind::InvalidData, what) }
}

/// The child processes of this run. Any still running when this is
/// dropped (the parent failed half-way) are killed, so that nothing
/// outlives the run.
#[derive(Default)]
pub struct Children(Vec<(String, Child)>);

impl Children {
    /// Starts a copy of this program with `args`.
    pub fn spawn(&mut self, label: String, args: &[&str]) -> Result<()> {
        let exe = std::env::current_exe()
            .map_err(|e| Error::Io { context: "cannot find this program's executable".into(), source: e })?;
        let child = Command::new(exe)
            .args(args)
            .spawn()
            .map_err(|e| Error::Io { context: format!("cannot start {label}"), source: e })?;
        self.0.push((label, child));
        Ok(())
    }

    /// Waits up to `timeout` in all for every child to exit successfully.
    pub fn wait_all(&mut self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        for (label, child) in &mut self.0 {
            loop {
                match child.try_wait() {
                    Ok(Some(status)) if status.success() => break,
                    Ok(Some(status)) => {
                        return Err(Error::Io {
                            context: format!("{label} failed"),
                            source: io::Error::other(status.to_string()),
                        })
                    }
                    Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
                    Ok(None) => {
                        return Err(Error::Io {
                            context: format!("{label} did not exit within {timeout:?}"),
                            source: io::ErrorKind::TimedOut.into(),
                        })
                    }
                    Err(e) => {
                        return Err(Error::Io { context: format!("cannot wait for {label}"), source: e })
                    }
                }
            }
        }
        Ok(())
    }
}

impl Drop for Children {
    fn drop(&mut self) {
        for (_, child) in &mut self.0 {
            if let Ok(None) = child.try_wait() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}
