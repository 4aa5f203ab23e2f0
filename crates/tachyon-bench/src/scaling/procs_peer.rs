//! One child of an N × M run (`tachyon-bench peer scaling ...`): a
//! producer that sends its share, or a consumer that takes and checks its
//! partitions' messages until their end markers (see [`super::procs`]).

use super::procs::{self, MARKER};
use crate::payload;
use crate::peer::{self, retry, Fault};
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
}

/// A child: opens the topic, says `ready`, waits at its start gate, runs
/// its role, says `done ...`.
pub fn peer(a: PeerArgs) -> Result<(), String> {
    peer::start(a.parent, a.cpu)?;
    let ok = |n: u32| (1..=procs::MAX_PROCS).contains(&n);
    if !ok(a.producers) || !ok(a.consumers) || a.size < payload::MIN_ITEM {
        return Err("bad --producers, --consumers or --size".into());
    }
    let region = Region::open(&a.name).map_err(|e| format!("cannot open the region {}: {e}", a.name))?;
    let topic = region.topic("data").map_err(|e| format!("cannot open topic data: {e}"))?;
    let stall = Duration::from_millis(a.stall_ms);
    match a.role {
        Role::Producer if a.index < a.producers => produce(&a, &topic, stall),
        Role::Consumer if a.index < a.consumers => consume(&a, &topic, stall),
        _ => Err(format!("--index {} is out of range", a.index)),
    }
}

/// Sends this producer's share: message `seq` stamped with (producer,
/// `seq`), to partition `(seq + index) % partitions`. A `TACHYON_BENCH_FAULT`
/// makes it die, stall or skip a message at that `seq`, or, `dup:N`, send
/// message N twice.
fn produce(a: &PeerArgs, topic: &Topic, stall: Duration) -> Result<(), String> {
    let keys = partition_keys(topic);
    let p = topic.partitions();
    let share = procs::share(a.messages, a.producers, a.index);
    let fault = Fault::from_env();
    let dup: Option<u64> =
        std::env::var(peer::FAULT_ENV).ok().and_then(|v| v.strip_prefix("dup:").and_then(|n| n.parse().ok()));
    let mut buf = payload::buffer(a.size);
    // The parent's death kills us (PR_SET_PDEATHSIG): nothing to check.
    let mut check = || Ok(());
    println!("ready");
    peer::wait_for_go()?;
    for seq in 0..share {
        if fault.at(seq) {
            continue; // a lost message: the totals must not match
        }
        payload::stamp(&mut buf, procs::stamp_of(a.index, seq));
        let key = keys[procs::partition_of(a.index, seq, p) as usize];
        for _ in 0..1 + usize::from(dup == Some(seq)) {
            retry(|t| topic.send(&buf, Key(key), t), stall, &mut check, "the partition stayed full")
                .map_err(|e| format!("producer {}, message {seq}: {e}", a.index))?;
        }
    }
    println!("done {share}");
    Ok(())
}

/// The monotonic clock, the same in every process, in nanoseconds.
fn now_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// Takes this consumer's partitions in turn until each gave it an end
/// marker, checking every message; says `done count checksum first_ns
/// last_ns`.
fn consume(a: &PeerArgs, topic: &Topic, stall: Duration) -> Result<(), String> {
    let p = topic.partitions();
    let mut live = procs::assignment(a.index, a.consumers, p);
    let n = a.producers as usize;
    // The last sequence number seen per (producer, partition), plus one.
    let mut next = vec![0u64; n * p as usize];
    let shares: Vec<u64> = (0..a.producers).map(|i| procs::share(a.messages, a.producers, i)).collect();
    let mut buf = payload::buffer(a.size);
    let mut check = || Ok(());
    let (mut count, mut sum) = (0u64, 0u64);
    let (mut first, mut last) = (0u64, 0u64);
    // Messages taken since the clock was last read.
    let mut dirty = false;
    println!("ready");
    peer::wait_for_go()?;
    let mut k = 0;
    while !live.is_empty() {
        k %= live.len();
        let from = live[k];
        let len = match topic.try_recv_into(from, &mut buf) {
            Ok(Some(len)) => len,
            Ok(None) => {
                // Nothing here now: the last message taken was at most
                // one look ago.
                if dirty {
                    last = now_ns();
                    dirty = false;
                }
                retry(|t| topic.recv_into(from, &mut buf, t), stall, &mut check, "no message came")
                    .map_err(|e| format!("consumer {}, partition {from}: {e}", a.index))?
            }
            Err(e) => return Err(format!("consumer {}, partition {from}: {e}", a.index)),
        };
        let stamp = read_stamp(&buf[..len], a.size)
            .map_err(|e| format!("consumer {}, partition {from}, after {count} messages: {e}", a.index))?;
        if stamp == MARKER {
            if dirty {
                // Taken right after the last message: no look found the
                // partition empty in between.
                last = now_ns();
                dirty = false;
            }
            live.remove(k);
            continue;
        }
        let (i, seq) = procs::split_stamp(stamp);
        let bad = |why: String| {
            format!("consumer {}, partition {from}: message {seq} of producer {i}: {why}", a.index)
        };
        if i as usize >= n || seq >= shares[i as usize] {
            return Err(bad("no such message was sent".into()));
        }
        let want = procs::partition_of(i, seq, p);
        if want != from {
            return Err(bad(format!("it was sent to partition {want}")));
        }
        let slot = &mut next[i as usize * p as usize + from as usize];
        if seq < *slot {
            return Err(bad(format!("after its message {} (duplicated or reordered)", *slot - 1)));
        }
        *slot = seq + 1;
        count += 1;
        sum = sum.wrapping_add(procs::mix(stamp));
        if count == 1 {
            first = now_ns();
        }
        dirty = true;
        k += 1;
    }
    println!("done {count} {sum} {first} {last}");
    Ok(())
}

/// A message's stamp, once its length and its two stamps agree.
fn read_stamp(msg: &[u8], size: usize) -> Result<u64, String> {
    if msg.len() != size {
        return Err(format!("a message of {} bytes, not {size}", msg.len()));
    }
    let head = u64::from_le_bytes(msg[..8].try_into().unwrap_or_default());
    payload::check(msg, head).map(|()| head)
}
