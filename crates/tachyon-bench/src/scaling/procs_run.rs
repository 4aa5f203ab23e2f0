//! One N × M run, this process's side: the region and the topic, the
//! children, their start gate, the end markers, the totals' check.

use super::procs::{self, Case, Sample, Settings, Shape, MARKER};
use crate::payload;
use crate::peer::{retry, Peer, STARTUP};
use crate::topics::{partition_keys, region_config, unique_name, RemoveRegion};
use std::time::{Duration, Instant};
use tachyon::bus::{Key, Region, Topic, TopicConfig};

/// A child process and what it is.
pub(crate) struct Child {
    who: String,
    peer: Peer,
    /// Its line of the current phase, once said.
    said: Option<String>,
    /// It said `done` (it may exit now).
    done: bool,
}

impl Child {
    /// A child called `who` (in error messages), not yet heard from.
    pub(crate) fn new(who: String, peer: Peer) -> Child {
        Child { who, peer, said: None, done: false }
    }
}

/// The children, supervised together: a child that exits or fails fails
/// the run at once, naming it.
pub(crate) struct Children(pub(crate) Vec<Child>);

impl Children {
    /// Waits until every child in `which` said a line starting with
    /// `word`, while checking that every other child that has not said
    /// `done` is alive; gives up at `deadline`. Returns the lines' rests.
    pub(crate) fn expect(
        &mut self,
        which: &[usize],
        word: &str,
        deadline: Instant,
    ) -> Result<Vec<String>, String> {
        for &k in which {
            self.0[k].said = None;
        }
        loop {
            let mut waiting = false;
            for &k in which {
                let c = &mut self.0[k];
                if c.said.is_some() {
                    continue;
                }
                waiting = true;
                match c.peer.poll_line(Duration::from_millis(5)) {
                    Ok(Some(line)) => match line.strip_prefix(word) {
                        Some(rest) => {
                            c.said = Some(rest.trim().to_owned());
                            c.done |= word == "done";
                        }
                        None => return Err(format!("{} said {line:?}, expected {word:?}", c.who)),
                    },
                    Ok(None) => {}
                    Err(e) => return Err(format!("{}: {e} before saying {word:?}", c.who)),
                }
            }
            if !waiting {
                return Ok(which.iter().map(|&k| self.0[k].said.take().unwrap_or_default()).collect());
            }
            self.check_others(which)?;
            if Instant::now() > deadline {
                let late: Vec<&str> = which
                    .iter()
                    .filter(|&&k| self.0[k].said.is_none())
                    .map(|&k| self.0[k].who.as_str())
                    .collect();
                return Err(format!("{} did not say {word:?} in time", late.join(", ")));
            }
        }
    }

    /// Opens every child's start gate.
    pub(crate) fn go_all(&mut self) -> Result<(), String> {
        for c in &mut self.0 {
            c.peer.go().map_err(|e| format!("{}: {e}", c.who))?;
        }
        Ok(())
    }

    /// Waits for every child to exit successfully.
    pub(crate) fn finish_all(&mut self) -> Result<(), String> {
        for c in self.0.drain(..) {
            c.peer.finish(STARTUP).map_err(|e| format!("{}: {e}", c.who))?;
        }
        Ok(())
    }

    /// Fails if a child not in `except` has exited before saying `done`.
    pub(crate) fn check_others(&mut self, except: &[usize]) -> Result<(), String> {
        for (k, c) in self.0.iter_mut().enumerate() {
            if !c.done && !except.contains(&k) {
                c.peer.check_alive().map_err(|e| format!("{}: {e}", c.who))?;
            }
        }
        Ok(())
    }
}

/// Fills every partition of `topic` and empties it again, so that the
/// pool's and the rings' pages are touched before the children come.
pub(crate) fn prefault(
    topic: &Topic,
    keys: &[u64],
    capacity: u32,
    size: usize,
    stall: Duration,
) -> Result<(), String> {
    let mut buf = payload::buffer(size);
    let mut none = || Ok(());
    for (p, &key) in keys.iter().enumerate() {
        for _ in 0..capacity {
            retry(
                |t| topic.send(&buf, Key(key), t),
                stall,
                &mut none,
                "pre-faulting: the partition stayed full",
            )?;
        }
        for _ in 0..capacity {
            retry(
                |t| topic.recv_into(p as u32, &mut buf, t),
                stall,
                &mut none,
                "pre-faulting: no message came",
            )?;
        }
    }
    Ok(())
}

/// The arguments of a child of an N × M run of `shape`: `role` number
/// `index`, pinned to `cpu`.
#[allow(clippy::too_many_arguments)]
pub fn child_args(
    shape: Shape,
    messages: u64,
    size: usize,
    name: &str,
    stall: Duration,
    cpu: Option<usize>,
    role: &str,
    index: u32,
) -> Vec<String> {
    let mut args: Vec<String> = vec![
        "peer".into(),
        "scaling".into(),
        "--role".into(),
        role.into(),
        "--index".into(),
        index.to_string(),
        "--producers".into(),
        shape.producers.to_string(),
        "--consumers".into(),
        shape.consumers.to_string(),
        "--messages".into(),
        messages.to_string(),
        "--size".into(),
        size.to_string(),
        "--name".into(),
        name.into(),
        "--stall-ms".into(),
        stall.as_millis().to_string(),
        "--parent".into(),
        std::process::id().to_string(),
    ];
    if let Some(cpu) = cpu {
        args.extend(["--cpu".into(), cpu.to_string()]);
    }
    args
}

/// What a consumer says when done: `count checksum first_ns last_ns`.
pub(crate) fn parse_done(who: &str, line: &str) -> Result<(u64, u64, u64, u64), String> {
    let v: Vec<u64> = line.split_whitespace().filter_map(|w| w.parse().ok()).collect();
    match v[..] {
        [count, sum, first, last] => Ok((count, sum, first, last)),
        _ => Err(format!("{who} reported {line:?}, not `count checksum first_ns last_ns`")),
    }
}

/// Runs one repetition of an N × M case.
pub fn run(case: Case, s: &Settings, rep: usize) -> Result<Sample, String> {
    let (n, m, p) = (case.shape.producers, case.shape.consumers, case.partitions);
    if s.messages >= procs::MAX_MESSAGES {
        return Err(format!("at most {} messages per run", procs::MAX_MESSAGES - 1));
    }
    // A consumer takes its partitions in turn; the producers' counts per
    // partition differ by at most one each, which the rings must hold.
    if s.capacity < 2 * n {
        return Err(format!("--capacity must be at least twice the producers ({n})"));
    }
    let stall = s.stall;
    let cfg = TopicConfig::default().partitions(p).capacity(s.capacity).wait(case.policy.wait_policy());
    let name = unique_name();
    // One ring's worth of chunks more than the rings hold: the children's
    // per-process caches of free chunks and their messages in hand.
    let region = Region::create(&name, region_config(case.size, s.capacity, p as usize + 1, false))
        .map_err(|e| format!("cannot create the region: {e}"))?;
    let _remove = RemoveRegion(&name);
    let data = region.create_topic("data", cfg).map_err(|e| format!("cannot create topic data: {e}"))?;
    let keys = partition_keys(&data);
    prefault(&data, &keys, s.capacity, case.size, stall)?;

    let args = |role: &str, index: u32, k: usize| {
        child_args(case.shape, s.messages, case.size, &name, stall, s.cpu(k), role, index)
    };
    // The end markers, behind every message in each partition's FIFO.
    let mut marker = payload::buffer(case.size);
    payload::stamp(&mut marker, MARKER);
    let mut end = |check: &mut Check| {
        for (q, &key) in keys.iter().enumerate() {
            for _ in 0..procs::readers(q as u32, m, p) {
                retry(
                    |t| data.send(&marker, Key(key), t),
                    stall,
                    check,
                    "an end marker's partition stayed full",
                )?;
            }
        }
        Ok(())
    };
    let (count, elapsed) = supervise(case.shape, s.messages, stall, &args, &mut end)?;
    Ok(Sample { case, rep, count, elapsed })
}

/// What `end` gets from [`supervise`]: fails if a child died.
pub type Check<'a> = dyn FnMut() -> Result<(), String> + 'a;

/// Runs the children of an N × M run of `shape` (`args(role, index, k)`:
/// child `k`'s arguments; producers are `k = 0..n`, consumers `n..n + m`):
/// starts the consumers, then the producers, lets them all go once all are
/// ready, waits for the producers to have sent `messages` in all, calls
/// `end` (which tells the consumers the end; its argument checks the
/// children), waits for the consumers, and checks that their counts and
/// checksums add up to what was sent. Returns the messages delivered and
/// the time from the first delivered to the last.
pub fn supervise(
    shape: Shape,
    messages: u64,
    stall: Duration,
    args: &dyn Fn(&str, u32, usize) -> Vec<String>,
    end: &mut dyn FnMut(&mut Check) -> Result<(), String>,
) -> Result<(u64, Duration), String> {
    let (n, m) = (shape.producers, shape.consumers);
    // Consumers first (they wait for messages), then producers.
    let mut children = Vec::new();
    for j in 0..m {
        let peer = Peer::spawn_gated(&args("consumer", j, (n + j) as usize))?;
        children.push(Child { who: format!("consumer {j}"), peer, said: None, done: false });
    }
    for i in 0..n {
        let peer = Peer::spawn_gated(&args("producer", i, i as usize))?;
        children.push(Child { who: format!("producer {i}"), peer, said: None, done: false });
    }
    let mut children = Children(children);
    let consumers: Vec<usize> = (0..m as usize).collect();
    let producers: Vec<usize> = (m as usize..(m + n) as usize).collect();
    let all: Vec<usize> = (0..(m + n) as usize).collect();
    children.expect(&all, "ready", Instant::now() + STARTUP)?;
    children.go_all()?;

    // Every wait of a child is bounded by the stall timeout; this bound is
    // for a child that hangs anyway: a generous time per message (1 ms:
    // spinning processes that share CPUs move a few thousand a second).
    let deadline =
        Instant::now() + STARTUP + stall + Duration::from_millis(messages.min(procs::MAX_MESSAGES));
    let sent = children.expect(&producers, "done", deadline)?;
    let sent: u64 = sent.iter().map(|l| l.parse::<u64>().unwrap_or(0)).sum();
    if sent != messages {
        return Err(format!("the producers sent {sent} messages, not {messages}"));
    }
    end(&mut || children.check_others(&producers))?;
    let done = children.expect(&consumers, "done", Instant::now() + STARTUP + stall)?;
    children.finish_all()?;

    let (mut count, mut sum, mut first, mut last) = (0u64, 0u64, u64::MAX, 0u64);
    for (j, line) in done.iter().enumerate() {
        let (c, x, f, l) = parse_done(&format!("consumer {j}"), line)?;
        count += c;
        sum = sum.wrapping_add(x);
        if c > 0 {
            first = first.min(f);
            last = last.max(l);
        }
    }
    let (want_count, want_sum) = procs::expected(messages, n);
    if count != want_count {
        return Err(format!("the consumers received {count} messages, {want_count} were sent"));
    }
    if sum != want_sum {
        return Err(
            "the consumers' checksum differs from that of the messages sent (lost and duplicated)".into()
        );
    }
    if last <= first {
        return Err("the consumers' clocks gave no time span".into());
    }
    Ok((count, Duration::from_nanos(last - first)))
}
