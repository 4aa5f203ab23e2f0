//! Pinning the two peers to two different CPUs.

use rustix::thread::{sched_getaffinity, sched_setaffinity, CpuSet};

/// The CPUs this process may run on, in increasing order.
pub fn allowed_cpus() -> Vec<usize> {
    match sched_getaffinity(None) {
        Ok(set) => (0..CpuSet::MAX_CPU).filter(|&c| set.is_set(c)).collect(),
        Err(_) => Vec::new(),
    }
}

/// Restricts the calling thread (the process's main thread, before it
/// starts others) to `cpu`.
pub fn pin_to(cpu: usize) -> Result<(), String> {
    if cpu >= CpuSet::MAX_CPU {
        return Err(format!("CPU {cpu} is out of range (at most {})", CpuSet::MAX_CPU - 1));
    }
    let mut set = CpuSet::new();
    set.set(cpu);
    sched_setaffinity(None, &set).map_err(|e| format!("cannot pin to CPU {cpu}: {e}"))
}

/// Where the writer (this process) and the reader (the peer) run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// Writer on the first CPU, reader on the second.
    Pinned { writer: usize, reader: usize },
    /// Left to the scheduler, and why.
    Free(&'static str),
}

impl Placement {
    /// Chooses the two CPUs: `wanted` if given, else the first two this
    /// process may use; no pinning with `--no-pin` or a single CPU.
    pub fn choose(no_pin: bool, wanted: Option<&[usize]>) -> Result<Placement, String> {
        if no_pin {
            return Ok(Placement::Free("--no-pin"));
        }
        let allowed = allowed_cpus();
        let (writer, reader) = match wanted {
            Some([w, r]) => {
                if w == r {
                    return Err(format!("--cpus needs two different CPUs, not {w} twice"));
                }
                for c in [w, r] {
                    if !allowed.contains(c) {
                        return Err(format!(
                            "--cpus: this process may not run on CPU {c} (allowed: {allowed:?})"
                        ));
                    }
                }
                (*w, *r)
            }
            Some(other) => return Err(format!("--cpus needs exactly two CPUs, not {}", other.len())),
            None => match allowed[..] {
                [w, r, ..] => (w, r),
                _ => return Ok(Placement::Free("only one CPU available")),
            },
        };
        Ok(Placement::Pinned { writer, reader })
    }

    /// The reader's CPU, if pinned.
    pub fn reader(self) -> Option<usize> {
        match self {
            Placement::Pinned { reader, .. } => Some(reader),
            Placement::Free(_) => None,
        }
    }

    /// One line for the report.
    pub fn describe(self) -> String {
        match self {
            Placement::Pinned { writer, reader } => {
                format!(
                    "this process (writer, caller, pinger; memcpy) on CPU {writer}, the peer process \
                     (reader, handler, echo) on CPU {reader}; threads inherit their process's CPU"
                )
            }
            Placement::Free(why) => format!("not pinned ({why})"),
        }
    }
}
