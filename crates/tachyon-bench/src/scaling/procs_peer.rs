//! One child of an N × M run (`tachyon-bench peer scaling ...`): a
//! producer that sends its share, or a consumer that takes and checks its
//! partitions' messages until their end markers (see [`super::procs`]).
//! With `--ring`, a writer or reader of the bandwidth group's N × M runs
//! on a `CircularBuffer` instead ([`crate::bandwidth::procs`]).

use super::procs::{self, MARKER};
use crate::payload;
use crate::peer::{self, retry};
use crate::topics::partition_keys;
use clap::ValueEnum;
use std::time::Duration;
use tachyon::bus::{Key, Region, Topic};

/// Producer or consumer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Role {
    /// Sends its share of the messages.
    Producer,
    /// Takes its partitions' messages.
    Consumer,
}

/// The arguments of a child of an N × M run.
#[derive(Debug, clap::Args)]
pub struct PeerArgs {
    /// Producer or consumer.
    #[arg(long, value_enum)]
    pub role: Role,
    /// Which producer or consumer (from 0).
    #[arg(long)]
    pub index: u32,
    /// Producers of the run.
    #[arg(long)]
    pub producers: u32,
    /// Consumers of the run.
    #[arg(long)]
    pub consumers: u32,
    /// Messages of the run, over all producers.
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
    /// A `CircularBuffer` of this name and API instead of a topic (the
    /// bandwidth group's N × M runs).
    #[arg(long, value_enum)]
    pub ring: Option<crate::bandwidth::Transport>,
    /// The `CircularBuffer`'s wait policy.
    #[arg(long, value_enum)]
    pub policy: Option<crate::policy::Policy>,
}

/// A child: opens the topic, says `ready`, waits at its start gate, runs
/// its role, says `done ...`.
pub fn peer(a: PeerArgs) -> Result<(), String> {
    peer::start(a.parent, a.cpu)?;
    let ok = |n: u32| (1..=procs::MAX_PROCS).contains(&n);
    if !ok(a.producers) || !ok(a.consumers) || a.size < payload::MIN_ITEM {
        return Err("bad --producers, --consumers or --size".into());
    }
    let stall = Duration::from_millis(a.stall_ms);
    if let Some(ring) = a.ring {
        return crate::bandwidth::procs::child(&a, ring, stall);
    }
    let region = Region::open(&a.name).map_err(|e| format!("cannot open the region {}: {e}", a.name))?;
    let topic = region.topic("data").map_err(|e| format!("cannot open topic data: {e}"))?;
    match a.role {
        Role::Producer if a.index < a.producers => produce(&a, &topic, stall),
        Role::Consumer if a.index < a.consumers => consume(&a, &topic, stall),
        _ => Err(format!("--index {} is out of range", a.index)),
    }
}

/// Sends this producer's share: message `seq` stamped with (producer,
/// `seq`), to partition `(seq + index) % partitions`. A `TACHYON_BENCH_FAULT`
/// makes it die, stall or skip a message at that `seq`, or, `dup:N`, send
/// message N twice ([`procs::ProducerFault`]).
fn produce(a: &PeerArgs, topic: &Topic, stall: Duration) -> Result<(), String> {
    let keys = partition_keys(topic);
    let p = topic.partitions();
    let share = procs::share(a.messages, a.producers, a.index);
    let fault = procs::ProducerFault::from_env();
    let mut buf = payload::buffer(a.size);
    // The parent's death kills us (PR_SET_PDEATHSIG): nothing to check.
    let mut check = || Ok(());
    println!("ready");
    peer::wait_for_go()?;
    for seq in 0..share {
        payload::stamp(&mut buf, procs::stamp_of(a.index, seq));
        let key = keys[procs::partition_of(a.index, seq, p) as usize];
        for _ in 0..fault.copies(seq) {
            retry(|t| topic.send(&buf, Key(key), t), stall, &mut check, "the partition stayed full")
                .map_err(|e| format!("producer {}, message {seq}: {e}", a.index))?;
        }
    }
    println!("done {share}");
    Ok(())
}

/// Takes this consumer's partitions in turn until each gave it an end
/// marker, checking every message; says `done count checksum first_ns
/// last_ns`.
fn consume(a: &PeerArgs, topic: &Topic, stall: Duration) -> Result<(), String> {
    let p = topic.partitions();
    let mut live = procs::assignment(a.index, a.consumers, p);
    // One lane per (producer, partition).
    let mut tally = procs::Tally::new(a.messages, a.producers, p as usize);
    let mut buf = payload::buffer(a.size);
    let mut check = || Ok(());
    println!("ready");
    peer::wait_for_go()?;
    let mut k = 0;
    while !live.is_empty() {
        k %= live.len();
        let from = live[k];
        let len = match topic.try_recv_into(from, &mut buf) {
            Ok(Some(len)) => len,
            Ok(None) => {
                tally.idle();
                retry(|t| topic.recv_into(from, &mut buf, t), stall, &mut check, "no message came")
                    .map_err(|e| format!("consumer {}, partition {from}: {e}", a.index))?
            }
            Err(e) => return Err(format!("consumer {}, partition {from}: {e}", a.index)),
        };
        let at = |e: String| {
            format!("consumer {}, partition {from}, after {} messages: {e}", a.index, tally.count())
        };
        let stamp = procs::read_stamp(&buf[..len], a.size).map_err(at)?;
        if stamp == MARKER {
            // Taken right after the last message: no look found the
            // partition empty in between.
            tally.idle();
            live.remove(k);
            continue;
        }
        let (i, seq) = procs::split_stamp(stamp);
        let want = procs::partition_of(i, seq, p);
        if i < a.producers && want != from {
            return Err(format!(
                "consumer {}, partition {from}: message {seq} of producer {i}: it was sent to partition {want}",
                a.index
            ));
        }
        tally
            .take(stamp, from as usize)
            .map_err(|e| format!("consumer {}, partition {from}: {e}", a.index))?;
        k += 1;
    }
    println!("{}", tally.done_line());
    Ok(())
}
