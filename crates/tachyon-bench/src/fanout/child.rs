//! One child of a fan-out run (`tachyon-bench peer fanout ...`): the
//! producer, or one group's consumer (see [`super`]).

use crate::payload;
use crate::peer::{self, retry};
use crate::scaling::procs::{self, MARKER};
use crate::topics::KEY;
use clap::ValueEnum;
use std::time::Duration;
use tachyon::bus::{Key, Region, Topic};

/// Producer or consumer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Role {
    /// Sends every message.
    Producer,
    /// Takes one group's messages.
    Consumer,
}

/// The arguments of a child of a fan-out run.
#[derive(Debug, clap::Args)]
pub struct PeerArgs {
    /// Producer or consumer.
    #[arg(long, value_enum)]
    pub role: Role,
    /// The consumer's group (from 0).
    #[arg(long)]
    pub group: u32,
    /// Groups of the run.
    #[arg(long)]
    pub groups: u32,
    /// Messages of the run.
    #[arg(long)]
    pub messages: u64,
    /// Message bytes.
    #[arg(long)]
    pub size: usize,
    /// The region (its topic `data`).
    #[arg(long)]
    pub name: String,
    /// Longest wait for one message, in milliseconds.
    #[arg(long)]
    pub stall_ms: u64,
    /// The benchmark process; the child dies with it.
    #[arg(long)]
    pub parent: u32,
    /// CPU to pin to.
    #[arg(long)]
    pub cpu: Option<usize>,
}

/// A child: opens the topic, says `ready`, waits at its start gate, runs
/// its role, says `done ...`.
pub fn peer(a: PeerArgs) -> Result<(), String> {
    peer::start(a.parent, a.cpu)?;
    if !(1..=super::MAX_GROUPS).contains(&a.groups) || a.group >= a.groups || a.size < payload::MIN_ITEM {
        return Err("bad --groups, --group or --size".into());
    }
    let stall = Duration::from_millis(a.stall_ms);
    let region = Region::open(&a.name).map_err(|e| format!("cannot open the region {}: {e}", a.name))?;
    let topic = region.topic("data").map_err(|e| format!("cannot open topic data: {e}"))?;
    match a.role {
        Role::Producer => produce(&a, &topic, stall),
        Role::Consumer => consume(&a, &topic, stall),
    }
}

/// This thread's CPU time, in nanoseconds.
fn cpu_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// The monotonic clock, the same in every process, in nanoseconds.
fn now_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// Sends every message, `seq` stamped with producer 0's `seq`. A
/// `TACHYON_BENCH_FAULT` makes it die, stall or skip a message at that
/// `seq`, or, `dup:N`, send message N twice ([`procs::ProducerFault`]).
/// Says `done count first_ns last_ns cpu_ns`.
fn produce(a: &PeerArgs, topic: &Topic, stall: Duration) -> Result<(), String> {
    let fault = procs::ProducerFault::from_env();
    let mut buf = payload::buffer(a.size);
    // The parent's death kills us (PR_SET_PDEATHSIG): nothing to check.
    let mut check = || Ok(());
    println!("ready");
    peer::wait_for_go()?;
    let (first, cpu0) = (now_ns(), cpu_ns());
    for seq in 0..a.messages {
        payload::stamp(&mut buf, procs::stamp_of(0, seq));
        for _ in 0..fault.copies(seq) {
            retry(|t| topic.send(&buf, Key(KEY), t), stall, &mut check, "a group's ring stayed full")
                .map_err(|e| format!("the producer, message {seq}: {e}"))?;
        }
    }
    let (cpu, last) = (cpu_ns() - cpu0, now_ns());
    println!("done {} {first} {last} {cpu}", a.messages);
    Ok(())
}

/// Takes the group's messages until the end marker, checking every one;
/// says `done count checksum first_ns last_ns`.
fn consume(a: &PeerArgs, topic: &Topic, stall: Duration) -> Result<(), String> {
    let name = super::group_name(a.group);
    let group = topic.join_group(&name).map_err(|e| format!("cannot join group {name}: {e}"))?;
    let mut tally = procs::Tally::new(a.messages, 1, 1);
    let mut buf = payload::buffer(a.size);
    let mut check = || Ok(());
    let who = format!("group {}'s consumer", a.group);
    println!("ready");
    peer::wait_for_go()?;
    loop {
        let len = match group.recv_into(0, &mut buf, Some(Duration::ZERO)) {
            Ok(len) => len,
            Err(tachyon::Error::Timeout { .. }) => {
                tally.idle();
                retry(|t| group.recv_into(0, &mut buf, t), stall, &mut check, "no message came")
                    .map_err(|e| format!("{who}, after {} messages: {e}", tally.count()))?
            }
            Err(e) => return Err(format!("{who}: {e}")),
        };
        let at = |e: String| format!("{who}, after {} messages: {e}", tally.count());
        let stamp = procs::read_stamp(&buf[..len], a.size).map_err(at)?;
        if stamp == MARKER {
            // Taken right after the last message: no look found the ring
            // empty in between.
            tally.idle();
            break;
        }
        tally.take(stamp, 0).map_err(|e| format!("{who}: {e}"))?;
    }
    println!("{}", tally.done_line());
    Ok(())
}
