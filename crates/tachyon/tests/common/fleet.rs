//! The chaos tests' processes (tests/chaos.rs, tests/chaos_primitives.rs):
//! what the driver tells a child ([`Task`]), the driver's children
//! ([`Fleet`], [`Proc`]), and the side segment both keep their books in
//! ([`Side`]). What differs per test (roles, the layout of the side
//! segment's words, the checks) stays in the test.

use super::Args;
use std::fmt::Display;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::time::Instant;
use tachyon::sync::{Liveness, Token};
use tachyon::Segment;

/// What the driver tells a chaos child (`target`: the region, ring or
/// channel under test; `side`: the bookkeeping segment).
pub struct Task {
    pub target: String,
    pub side: String,
    pub slot: usize,
    pub gen: u64,
    pub inc: u64,
    pub cap: u64,
    pub max_inc: u64,
    pub seed: u64,
    pub parent: u32,
}

impl Task {
    pub fn to_args(&self) -> Args {
        Args::new()
            .with("target", &self.target)
            .with("side", &self.side)
            .with("slot", self.slot)
            .with("gen", self.gen)
            .with("inc", self.inc)
            .with("cap", self.cap)
            .with("max_inc", self.max_inc)
            .with("seed", self.seed)
            .with("parent", self.parent)
    }

    #[track_caller]
    pub fn from_args(args: &Args) -> Task {
        Task {
            target: args.str("target").to_owned(),
            side: args.str("side").to_owned(),
            slot: args.get("slot"),
            gen: args.get("gen"),
            inc: args.get("inc"),
            cap: args.get("cap"),
            max_inc: args.get("max_inc"),
            seed: args.get("seed"),
            parent: args.get("parent"),
        }
    }
}

// ---------------------------------------------------------------------------
// The side segment

/// Bookkeeping shared by the driver and the children, in `AtomicU64`
/// words, so that it survives any child's death. Each test lays out its
/// own counters and bitmaps; the incarnation log starts at word `log_at`.
pub struct Side {
    seg: Segment,
    /// Sequence numbers (per producer or writer and key) the bitmaps hold.
    pub cap: u64,
    /// Entries of the incarnation log.
    pub max_inc: u64,
    log_at: usize,
}

impl Side {
    /// The driver's: a new segment of `words` words.
    pub fn create(name: &str, words: usize, cap: u64, max_inc: u64, log_at: usize) -> Side {
        Side { seg: Segment::create(name, words * 8).unwrap(), cap, max_inc, log_at }
    }

    /// A child's: the driver's segment, as `task` names it.
    pub fn open(task: &Task, log_at: usize) -> Side {
        Side { seg: Segment::open(&task.side).unwrap(), cap: task.cap, max_inc: task.max_inc, log_at }
    }

    pub fn word(&self, i: usize) -> &AtomicU64 {
        self.seg.get::<AtomicU64>(i * 8).expect("side word in range")
    }

    pub fn get(&self, i: usize) -> u64 {
        self.word(i).load(SeqCst)
    }

    /// Adds one to word `i`; the new value.
    pub fn add(&self, i: usize) -> u64 {
        self.word(i).fetch_add(1, SeqCst) + 1
    }

    /// Incarnation log: entry `inc` = role << 56 | slot << 48 | token.
    pub fn log(&self, inc: u64) -> &AtomicU64 {
        self.word(self.log_at + inc.min(self.max_inc - 1) as usize)
    }

    /// Who a token of `seg` is: the incarnation that logged it, if any
    /// (`roles`: the role names, by the role number in the log).
    pub fn who(&self, seg: &Segment, raw: u32, roles: &[&str]) -> String {
        if raw == 0 {
            return "nobody".into();
        }
        let Some(token) = Token::from_raw(raw) else { return format!("{raw:#x} (no token)") };
        let dead = if seg.is_dead(token) { "dead" } else { "alive" };
        for inc in 0..self.max_inc {
            let e = self.log(inc).load(SeqCst);
            if e != 0 && e as u32 == raw {
                let role = roles.get((e >> 56) as usize).copied().unwrap_or("?");
                return format!("{role} {} (incarnation {inc}, {dead})", (e >> 48) & 0xff);
            }
        }
        format!("token {raw:#x} (slot {}, {dead})", token.slot())
    }
}

/// Counts an event in `counter`; the first few of each kind are printed.
pub fn report(side: &Side, counter: usize, who: &str, what: &str) {
    if side.word(counter).fetch_add(1, SeqCst) < 20 {
        eprintln!("chaos: {who}: {what}");
    }
}

// ---------------------------------------------------------------------------
// The driver's children

/// A child of the driver; `R` names its role.
pub struct Proc<R> {
    pub child: Child,
    pub role: R,
    pub slot: usize,
    pub gen: u64,
    pub inc: u64,
    pub started: Instant,
}

/// The children; any still running when the driver ends (or panics) are
/// killed.
pub struct Fleet<R> {
    pub procs: Vec<Proc<R>>,
    /// The test function that dispatches the roles.
    entry: &'static str,
    pub target: String,
    side: String,
    cap: u64,
    max_inc: u64,
    seed: u64,
    pub incarnations: u64,
}

impl<R: Copy + Display> Fleet<R> {
    pub fn new(entry: &'static str, target: &str, side: &str, cap: u64, max_inc: u64, seed: u64) -> Fleet<R> {
        Fleet {
            procs: Vec::new(),
            entry,
            target: target.to_owned(),
            side: side.to_owned(),
            cap,
            max_inc,
            seed,
            incarnations: 0,
        }
    }

    /// Starts the next incarnation of `role` in `slot`, generation `gen`.
    pub fn spawn(&mut self, role: R, slot: usize, gen: u64) -> Proc<R> {
        let inc = self.incarnations;
        self.incarnations += 1;
        let task = Task {
            target: self.target.clone(),
            side: self.side.clone(),
            slot,
            gen,
            inc,
            cap: self.cap,
            max_inc: self.max_inc,
            seed: self.seed,
            parent: std::process::id(),
        };
        // The children's test-harness chatter goes nowhere; their
        // diagnostics and panics (stderr) show.
        let child = super::child_command(self.entry, &role.to_string(), task.to_args())
            .stdout(Stdio::null())
            .spawn()
            .expect("spawn child");
        Proc { child, role, slot, gen, inc, started: Instant::now() }
    }

    /// A child that ended by itself: `(index, exit code)`.
    pub fn exited(&mut self) -> Option<(usize, Option<i32>)> {
        for (i, p) in self.procs.iter_mut().enumerate() {
            if let Some(status) = p.child.try_wait().expect("try_wait") {
                return Some((i, status.code()));
            }
        }
        None
    }

    /// A line per child: who, and whether it still runs (with
    /// `TACHYON_CHAOS_GDB=1`, a running child's stacks too).
    pub fn report(&mut self) -> String {
        let mut s = String::new();
        for p in &mut self.procs {
            let state = match p.child.try_wait() {
                Ok(Some(st)) => format!("exited: {st}"),
                Ok(None) => "running".into(),
                Err(e) => format!("unknown: {e}"),
            };
            s += &format!(
                "  {} {} gen {} (incarnation {}, pid {}, up {:.1?}): {state}\n",
                p.role,
                p.slot,
                p.gen,
                p.inc,
                p.child.id(),
                p.started.elapsed()
            );
            if state == "running" && std::env::var_os("TACHYON_CHAOS_GDB").is_some() {
                s += &backtraces(p.child.id());
            }
        }
        s
    }
}

impl<R> Drop for Fleet<R> {
    fn drop(&mut self) {
        for p in &mut self.procs {
            let _ = p.child.kill();
            let _ = p.child.wait();
        }
    }
}

/// Every thread's stack of a stuck child, through gdb
/// (`TACHYON_CHAOS_GDB=1`; diagnostics).
fn backtraces(pid: u32) -> String {
    let out = Command::new("gdb")
        .args(["-p", &pid.to_string(), "-batch", "-ex", "thread apply all bt"])
        .stdin(Stdio::null())
        .output();
    match out {
        Ok(o) => String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter(|l| l.starts_with('#') || l.starts_with("Thread"))
            .map(|l| format!("      {l}\n"))
            .collect(),
        Err(e) => format!("      (gdb: {e})\n"),
    }
}
