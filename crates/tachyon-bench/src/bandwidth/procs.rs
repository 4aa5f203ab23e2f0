//! The bandwidth group's N × M runs: N writer processes and M reader
//! processes on one `CircularBuffer` (the readers compete: each item goes
//! to one of them), or on a topic of one partition (the scaling group's
//! N × M code, [`procs_run::run`]).
//!
//! The machinery is the scaling group's ([`procs_run::supervise`]): every
//! child opens the ring and says `ready`, waits at its start gate until
//! all are ready; writer `i` writes its share of the run's items, item `s`
//! stamped (i, s) in its first and last 8 bytes; every reader checks every
//! item (length, stamps, a writer and a sequence number that were written,
//! per writer a sequence number above the last one it saw) and reports its
//! count and an order-independent checksum, which this process compares
//! with those of every item written. Once the writers are done, this
//! process writes one end marker per reader behind all the items; a reader
//! stops at the first marker it takes. (Not `CircularBuffer::close`: a
//! reader that found the ring empty just before the last items and the
//! close came can get `Closed` with those items still queued.)
//! Bandwidth = all item bytes ÷ (last item delivered − first delivered).

use super::{unique_name, Settings, Transport};
use crate::payload;
use crate::peer::{self, retry};
use crate::policy::Policy;
use crate::scaling::procs::{self as nxm, Shape};
use crate::scaling::{procs_run, PeerArgs, ProcsSettings, Role};
use std::time::Duration;
use tachyon::CircularBuffer;

/// The transports an N × M run can use (several writers and readers).
pub const TRANSPORTS: [Transport; 3] = [Transport::CbZeroCopy, Transport::CbCopy, Transport::TopicCopy];

/// Runs one N × M case: the items delivered and the time from the first
/// delivered to the last.
pub fn run(
    shape: Shape,
    transport: Transport,
    policy: Policy,
    size: usize,
    nodes: usize,
    s: &Settings,
) -> Result<(u64, Duration), String> {
    let items = s.procs_items(size);
    if items >= nxm::MAX_MESSAGES {
        return Err(format!("at most {} items per N × M run", nxm::MAX_MESSAGES - 1));
    }
    match transport {
        Transport::TopicCopy => {
            // A topic of about `nodes` descriptors, as in the 1 × 1 runs,
            // and at least twice the writers (see `procs_run::run`).
            let capacity = nodes.max(2 * shape.producers as usize).next_power_of_two() as u32;
            let settings = ProcsSettings {
                shapes: vec![shape],
                partitions: vec![1],
                policies: vec![policy],
                size,
                messages: items,
                capacity,
                stall: s.stall,
                cpus: s.cpus.clone(),
            };
            let case = nxm::Case { shape, partitions: 1, policy, size };
            let sample = procs_run::run(case, &settings, 0)?;
            Ok((sample.count, sample.elapsed))
        }
        Transport::CbZeroCopy | Transport::CbCopy => {
            let name = unique_name();
            let ring = CircularBuffer::builder(&name)
                .node_count(nodes)
                .node_size(size)
                .wait_policy(policy.wait_policy())
                .create()
                .map_err(|e| format!("cannot create the CircularBuffer: {e}"))?;
            // Touch every node's pages before the children come.
            let mut buf = payload::buffer(size);
            for _ in 0..nodes {
                ring.write(&buf, Some(Duration::ZERO)).map_err(|e| format!("pre-faulting: {e}"))?;
            }
            for _ in 0..nodes {
                ring.read(&mut buf, Some(Duration::ZERO)).map_err(|e| format!("pre-faulting: {e}"))?;
            }
            let args = |role: &str, index: u32, k: usize| {
                let mut a = procs_run::child_args(shape, items, size, &name, s.stall, s.cpu(k), role, index);
                a.extend(["--ring".into(), transport.name().into(), "--policy".into(), policy.name().into()]);
                a
            };
            // The writers are done: one end marker per reader, behind every
            // item.
            payload::stamp(&mut buf, nxm::MARKER);
            let mut end = |check: &mut procs_run::Check| {
                for _ in 0..shape.consumers {
                    retry(|t| ring.write(&buf, t), s.stall, check, "an end marker: the ring stayed full")?;
                }
                Ok(())
            };
            procs_run::supervise(shape, items, s.stall, &args, &mut end)
        }
        _ => Err(format!("{} has one writer and one reader", transport.name())),
    }
}

/// A writer or a reader of an N × M run on a `CircularBuffer` (`peer
/// scaling --ring ...`).
pub fn child(a: &PeerArgs, transport: Transport, stall: Duration) -> Result<(), String> {
    let zero_copy = match transport {
        Transport::CbZeroCopy => true,
        Transport::CbCopy => false,
        _ => return Err(format!("--ring {} is not a CircularBuffer", transport.name())),
    };
    let ring = CircularBuffer::builder(&a.name)
        .wait_policy(a.policy.unwrap_or(Policy::Spin).wait_policy())
        .open()
        .map_err(|e| format!("cannot open the CircularBuffer: {e}"))?;
    if ring.node_size() != a.size {
        return Err(format!("the ring's nodes have {} bytes, expected {}", ring.node_size(), a.size));
    }
    let mut buf = payload::buffer(a.size);
    // The parent's death kills us (PR_SET_PDEATHSIG): nothing to check.
    let mut check = || Ok(());
    match a.role {
        Role::Producer if a.index < a.producers => {
            let share = nxm::share(a.messages, a.producers, a.index);
            let fault = nxm::ProducerFault::from_env();
            println!("ready");
            peer::wait_for_go()?;
            for seq in 0..share {
                payload::stamp(&mut buf, nxm::stamp_of(a.index, seq));
                for _ in 0..fault.copies(seq) {
                    let write = |t| {
                        if zero_copy {
                            ring.write_with(a.size, t, |node| node.copy_from_slice(&buf))
                        } else {
                            ring.write(&buf, t)
                        }
                    };
                    retry(write, stall, &mut check, "the ring stayed full")
                        .map_err(|e| format!("writer {}, item {seq}: {e}", a.index))?;
                }
            }
            println!("done {share}");
            Ok(())
        }
        Role::Consumer if a.index < a.consumers => {
            let mut tally = nxm::Tally::new(a.messages, a.producers, 1);
            // For the tests: `reader-die:N` makes reader 0 exit after N items.
            let die: Option<u64> = std::env::var(peer::FAULT_ENV)
                .ok()
                .and_then(|v| v.strip_prefix("reader-die:").and_then(|n| n.parse().ok()))
                .filter(|_| a.index == 0);
            println!("ready");
            peer::wait_for_go()?;
            loop {
                let len = match take(&ring, zero_copy, &mut buf, Some(Duration::ZERO)) {
                    Err(tachyon::Error::Timeout { .. }) => {
                        tally.idle();
                        retry(|t| take(&ring, zero_copy, &mut buf, t), stall, &mut check, "no item came")
                    }
                    r => r.map_err(|e| e.to_string()),
                };
                let (index, count) = (a.index, tally.count());
                let at = move |e: String| format!("reader {index}, after {count} items: {e}");
                let stamp = nxm::read_stamp(&buf[..len.map_err(at)?], a.size).map_err(at)?;
                if stamp == nxm::MARKER {
                    break;
                }
                tally.take(stamp, 0).map_err(at)?;
                if die == Some(tally.count()) {
                    std::process::exit(3);
                }
            }
            println!("{}", tally.done_line());
            Ok(())
        }
        _ => Err(format!("--index {} is out of range", a.index)),
    }
}

/// Takes one item into `buf`; its length.
fn take(
    ring: &CircularBuffer,
    zero_copy: bool,
    buf: &mut [u8],
    timeout: Option<Duration>,
) -> tachyon::Result<usize> {
    if zero_copy {
        ring.read_with(timeout, |item| {
            if item.len() == buf.len() {
                buf.copy_from_slice(item);
            }
            item.len()
        })
    } else {
        ring.read(buf, timeout)
    }
}
