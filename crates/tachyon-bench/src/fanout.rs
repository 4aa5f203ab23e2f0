//! The fanout group (issue #15): one producer process
//! publishing to a topic that 1, 2 and 4 consumer groups read, each group
//! by one consumer process, next to a pipe, a Unix socket and a plain topic
//! (its default group, one consumer) measured in the same run.
//!
//! * **What the producer does.** It sends the run's messages (`send`, the
//!   copy path: one copy into the chunk, none per group) to the topic's one
//!   partition, message `seq` stamped with `seq` (first and last 8 bytes).
//!   It reads the monotonic clock before its first send and after its last
//!   one, and its thread's CPU clock around the loop, and says `done count
//!   first_ns last_ns cpu_ns`.
//! * **What a group's consumer does.** It joins its group (which this
//!   process joined before any child started, so no message is published
//!   before a group exists) and takes the group's messages with
//!   `Group::recv_into`, checking each one's length, its two stamps and the
//!   order (one producer, one partition: strictly increasing); it counts
//!   them and sums an order-independent checksum of the stamps
//!   ([`procs::mix`]). After the producer is done this process publishes
//!   one end marker, which every group receives after all the data.
//! * **Checks.** Every group's count and checksum must equal those of the
//!   messages sent: a message lost or delivered twice in any group fails
//!   the run, naming the group.
//! * **Figures.** Per group: messages ÷ (its last − its first message).
//!   The producer: messages ÷ its send loop's wall time, and its CPU time
//!   per message. Both against the same figures with one group (paired per
//!   repetition), and the producer against the pipe of the same size.
//!
//! With N groups there are N + 1 processes of this run on the machine's
//! CPUs: on a 2-CPU machine spinning waits make no sense beyond two
//! processes (a spinning consumer takes the CPU its producer or another
//! consumer needs); the group runs hybrid (the library's default) unless
//! told otherwise.

mod child;

use crate::payload;
use crate::peer::{retry, Peer, STARTUP};
use crate::policy::Policy;
use crate::scaling::procs::{self, MARKER};
use crate::scaling::procs_run::{parse_done, Child, Children};
use crate::stats::{self, Spread};
use crate::suite::Group;
use crate::topics::{self, region_config, unique_name, RemoveRegion, Test, Via};
use std::fmt::Write as _;
use std::time::{Duration, Instant};
use tachyon::bus::{Key, Region, TopicConfig};

pub use child::{peer, PeerArgs};

/// Most consumer groups of a case.
pub const MAX_GROUPS: u32 = 16;

/// A fan-out run: one producer, `groups` groups of one consumer each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FanCase {
    /// Consumer groups (one consumer process each).
    pub groups: u32,
    /// Message bytes.
    pub size: usize,
    /// The topic's wait policy.
    pub policy: Policy,
}

impl std::fmt::Display for FanCase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = if self.groups == 1 { "" } else { "s" };
        write!(f, "fanout {} group{s}/{} {}", self.groups, self.policy.name(), stats::bytes(self.size as u64))
    }
}

/// A configuration of the group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Case {
    /// A one-way throughput run of the topics group's code (pipe, Unix
    /// socket, plain topic).
    Reference(topics::Case),
    /// A fan-out run.
    Fan(FanCase),
}

impl std::fmt::Display for Case {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Case::Reference(c) => c.fmt(f),
            Case::Fan(c) => c.fmt(f),
        }
    }
}

/// What one fan-out run measured.
#[derive(Debug, Clone)]
pub struct FanSample {
    /// What was measured.
    pub case: FanCase,
    /// Repetition (0-based).
    pub rep: usize,
    /// Messages sent (and received by every group).
    pub messages: u64,
    /// The producer's send loop, wall clock.
    pub producer: Duration,
    /// The producer's CPU time in its send loop.
    pub producer_cpu: Duration,
    /// Each group's first to last message.
    pub groups: Vec<Duration>,
    /// Nanoseconds per `send` in bursts of a ring's worth before the
    /// children start: the publish alone, nothing waiting, no other
    /// process running (the median of [`BURSTS`] bursts).
    pub burst_ns: f64,
}

impl FanSample {
    /// The producer's messages per second.
    pub fn producer_rate(&self) -> f64 {
        self.messages as f64 / self.producer.as_secs_f64().max(1e-12)
    }

    /// The producer's CPU nanoseconds per message.
    pub fn producer_cpu_ns(&self) -> f64 {
        self.producer_cpu.as_nanos() as f64 / self.messages.max(1) as f64
    }

    /// Each group's messages per second.
    pub fn group_rates(&self) -> impl Iterator<Item = f64> + '_ {
        self.groups.iter().map(|d| self.messages as f64 / d.as_secs_f64().max(1e-12))
    }

    /// The slowest group's messages per second.
    pub fn slowest_group(&self) -> f64 {
        self.group_rates().fold(f64::INFINITY, f64::min)
    }

    /// Nanoseconds per uncontended `send` (see [`FanSample::burst_ns`]).
    pub fn burst(&self) -> f64 {
        self.burst_ns
    }

    /// The mean of the groups' messages per second.
    pub fn mean_group(&self) -> f64 {
        self.group_rates().sum::<f64>() / f64::from(self.case.groups)
    }
}

/// A measurement of the group.
#[derive(Debug, Clone)]
pub enum Sample {
    /// Of a reference run.
    Reference(topics::Sample),
    /// Of a fan-out run.
    Fan(FanSample),
}

/// What the user asked for.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The topics settings of the reference runs (their messages are
    /// `messages`).
    pub topics: topics::Settings,
    /// Message sizes.
    pub sizes: Vec<usize>,
    /// Group counts of the fan-out runs.
    pub groups: Vec<u32>,
    /// Wait policies of the fan-out runs (and of the plain topic
    /// reference).
    pub policies: Vec<Policy>,
    /// Reference transports (pipe, unix, copy: the plain topic).
    pub references: Vec<Via>,
    /// Messages per run.
    pub messages: u64,
    /// Descriptors per group ring.
    pub capacity: u32,
    /// Longest wait for one message.
    pub stall: Duration,
    /// The CPUs process `k` (the producer, then the groups' consumers) is
    /// pinned to in turn (`k % len`); `None`: not pinned.
    pub cpus: Option<Vec<usize>>,
}

impl Settings {
    fn reference_cases(&self, size: usize) -> Vec<topics::Case> {
        let mut out = Vec::new();
        for &via in &self.references {
            if via.is_tachyon() {
                for &p in &self.policies {
                    out.push(topics::Case::new(Test::Throughput, via, Some(p), size));
                }
            } else {
                out.push(topics::Case::new(Test::Throughput, via, None, size));
            }
        }
        out
    }

    fn fan_cases(&self, size: usize) -> Vec<FanCase> {
        let mut out = Vec::new();
        for &policy in &self.policies {
            for &groups in &self.groups {
                out.push(FanCase { groups, size, policy });
            }
        }
        out
    }

    /// The CPU of process `k` (0: the producer; `1 + j`: group `j`'s
    /// consumer).
    fn cpu(&self, k: usize) -> Option<usize> {
        self.cpus.as_ref().filter(|c| !c.is_empty()).map(|c| c[k % c.len()])
    }

    fn describe_cpus(&self) -> String {
        match &self.cpus {
            Some(c) if !c.is_empty() => format!(
                "process k (the producer first, then group j's consumer as k = j + 1) pinned to CPU k \
                 mod {} of {c:?}",
                c.len()
            ),
            _ => "not pinned".to_owned(),
        }
    }
}

impl Group for Settings {
    type Case = Case;
    type Sample = Sample;

    fn name(&self) -> &'static str {
        "fanout"
    }

    fn cases(&self) -> Vec<Case> {
        let mut out = Vec::new();
        for &size in &self.sizes {
            out.extend(self.reference_cases(size).into_iter().map(Case::Reference));
            out.extend(self.fan_cases(size).into_iter().map(Case::Fan));
        }
        out
    }

    fn warmup_case(&self) -> Option<Case> {
        // A fan-out run warms up the processes and the pages of the pool.
        let fan = self.cases().into_iter().find(|c| matches!(c, Case::Fan(_)));
        fan.or_else(|| self.cases().first().copied())
    }

    fn run(&self, case: Case, rep: usize) -> Result<Sample, String> {
        match case {
            Case::Reference(c) => topics::run(c, &self.topics, rep).map(Sample::Reference),
            Case::Fan(c) => run(c, self, rep).map(Sample::Fan),
        }
    }

    fn progress(&self, s: &Sample) -> String {
        match s {
            Sample::Reference(s) => format!("{:>9} msgs/s", stats::si(s.rate())),
            Sample::Fan(s) => format!(
                "{:>9} msgs/s producer, {:>9} msgs/s slowest group",
                stats::si(s.producer_rate()),
                stats::si(s.slowest_group())
            ),
        }
    }

    fn render(&self, samples: &[Sample]) -> String {
        render(self, samples)
    }

    fn csv(&self, samples: &[Sample]) -> String {
        let mut out = String::from(
            "case,kind,transport,policy,size,groups,rep,messages,elapsed_ns,per_sec,producer_cpu_ns,burst_ns_per_send,group_ns\n",
        );
        for s in samples {
            match s {
                Sample::Reference(s) => {
                    let c = s.case;
                    let _ = writeln!(
                        out,
                        "{c},reference,{},{},{},0,{},{},{},{:.1},,,",
                        c.via.name(),
                        c.policy.map_or("", Policy::name),
                        c.size,
                        s.rep,
                        s.count,
                        s.elapsed.as_nanos(),
                        s.rate()
                    );
                }
                Sample::Fan(s) => {
                    let c = s.case;
                    let groups: Vec<String> = s.groups.iter().map(|d| d.as_nanos().to_string()).collect();
                    let _ = writeln!(
                        out,
                        "{c},fanout,groups,{},{},{},{},{},{},{:.1},{},{:.1},{}",
                        c.policy.name(),
                        c.size,
                        c.groups,
                        s.rep,
                        s.messages,
                        s.producer.as_nanos(),
                        s.producer_rate(),
                        s.producer_cpu.as_nanos(),
                        s.burst_ns,
                        groups.join(";")
                    );
                }
            }
        }
        out
    }
}

fn fans(samples: &[Sample]) -> Vec<FanSample> {
    samples.iter().filter_map(|s| if let Sample::Fan(f) = s { Some(f.clone()) } else { None }).collect()
}

fn references(samples: &[Sample]) -> Vec<topics::Sample> {
    samples.iter().filter_map(|s| if let Sample::Reference(r) = s { Some(*r) } else { None }).collect()
}

fn spread_of(samples: &[FanSample], case: FanCase, f: impl Fn(&FanSample) -> f64) -> Option<Spread> {
    let v: Vec<f64> = samples.iter().filter(|s| s.case == case).map(f).collect();
    Spread::of(&v)
}

/// `f(case) ÷ f(1 group)` within each repetition, over the repetitions.
fn vs_one(samples: &[FanSample], case: FanCase, f: impl Fn(&FanSample) -> f64) -> Option<Spread> {
    let one = FanCase { groups: 1, ..case };
    let v: Vec<f64> = samples
        .iter()
        .filter(|s| s.case == case)
        .filter_map(|s| {
            let r = samples.iter().find(|r| r.case == one && r.rep == s.rep)?;
            Some(f(s) / f(r))
        })
        .collect();
    Spread::of(&v)
}

/// The producer's rate ÷ the pipe's rate of the same size, per repetition.
fn vs_pipe(fan: &[FanSample], refs: &[topics::Sample], case: FanCase) -> Option<Spread> {
    let pipe = topics::Case::new(Test::Throughput, Via::Pipe, None, case.size);
    let v: Vec<f64> = fan
        .iter()
        .filter(|s| s.case == case)
        .filter_map(|s| {
            let r = refs.iter().find(|r| r.case == pipe && r.rep == s.rep)?;
            Some(s.producer_rate() / r.rate())
        })
        .collect();
    Spread::of(&v)
}

fn render(s: &Settings, samples: &[Sample]) -> String {
    let fan = fans(samples);
    let refs = references(samples);
    let mut out = String::from("## Fan-out: consumer groups\n\n");
    let procs = s.groups.iter().max().map_or(2, |g| g + 1);
    let cpus = s.cpus.as_ref().map_or(0, Vec::len);
    let _ = writeln!(
        out,
        "One producer process sends {} messages (`send`, the copy path: one copy into the chunk, none \
         per group) to a topic of one partition without its default group; N consumer groups read \
         it, each group by one consumer process (`Group::recv_into`). Every group must receive \
         every message once, in order: each consumer checks each message's stamps and order and \
         reports its count and an order-independent checksum, compared with what was sent. *per \
         group*: messages ÷ (the group's last − first message), the slowest group and the mean of \
         the groups. *producer*: messages ÷ the wall time of its send loop (it waits whenever the \
         slowest group's ring is full, so it runs at the slowest group's pace), and the CPU time \
         of its thread per message (waits included: hybrid spins a little before it sleeps). × 1 \
         group: the ratio to the 1-group run of the same size and wait policy, per repetition; × \
         pipe: the producer's rate ÷ the pipe's of the same size. The references (pipe, Unix \
         socket, the plain topic: its default group, one consumer process) are the topics group's \
         one-way throughput runs, {} messages after a warm-up. Placement: {}.{} Medians over the \
         repetitions, ranges in brackets.\n",
        s.messages,
        s.topics.counts(Test::Throughput).0,
        s.describe_cpus(),
        if cpus > 0 && procs as usize > cpus {
            format!(
                " With {procs} processes on {cpus} CPUs they share the CPUs: spinning waits make no \
                 sense beyond {cpus} processes (a spinning consumer holds the CPU another process \
                 needs), so the fan-out runs wait hybrid (or futex) unless asked otherwise."
            )
        } else {
            String::new()
        }
    );
    let si = |s: Option<Spread>| s.map_or_else(|| "–".to_owned(), |s| stats::si(s.median));
    let range = |s: Option<Spread>| {
        s.map_or_else(|| "–".to_owned(), |s| format!("({} – {})", stats::si(s.min), stats::si(s.max)))
    };
    let x = |s: Option<Spread>| s.map_or_else(|| "–".to_owned(), |s| format!("{:.2}", s.median));
    let ns = |s: Option<Spread>| s.map_or_else(|| "–".to_owned(), |s| format!("{:.0}", s.median));
    for &size in &s.sizes {
        let _ = writeln!(out, "### {} messages\n", stats::bytes(size as u64));
        let _ = writeln!(
            out,
            "| transport | wait | groups | per group msgs/s, slowest | (min – max) | mean of groups | producer \
             msgs/s | (min – max) | producer × 1 group | producer × pipe |"
        );
        let _ = writeln!(out, "| --- | --- | ---: | ---: | --- | ---: | ---: | --- | ---: | ---: |");
        for case in s.reference_cases(size) {
            let v: Vec<f64> = refs.iter().filter(|r| r.case == case).map(topics::Sample::rate).collect();
            let r = Spread::of(&v);
            let _ = writeln!(
                out,
                "| {} | {} | – | {} | {} | – | {} | {} | – | – |",
                case.via.describe_in(Test::Throughput),
                case.wait(),
                si(r),
                range(r),
                si(r),
                range(r),
            );
        }
        for case in s.fan_cases(size) {
            let slowest = spread_of(&fan, case, FanSample::slowest_group);
            let producer = spread_of(&fan, case, FanSample::producer_rate);
            let _ = writeln!(
                out,
                "| topic, consumer groups | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                case.policy.name(),
                case.groups,
                si(slowest),
                range(slowest),
                si(spread_of(&fan, case, FanSample::mean_group)),
                si(producer),
                range(producer),
                x(vs_one(&fan, case, FanSample::producer_rate)),
                x(vs_pipe(&fan, &refs, case)),
            );
        }
        out.push('\n');
        let _ = writeln!(
            out,
            "What one publish costs the producer, {} messages: *uncontended*: ns per `send` in bursts of \
             {} (a ring's worth: nothing waits) before the consumers start, the median of {BURSTS} \
             bursts; *in the run*: the producer thread's CPU ns per message during the run (its waits \
             for the slowest group included).\n",
            stats::bytes(size as u64),
            s.capacity
        );
        let _ = writeln!(
            out,
            "| wait | groups | uncontended ns/send | (min – max) | × 1 group | in the run, CPU ns/msg | × 1 group |"
        );
        let _ = writeln!(out, "| --- | ---: | ---: | --- | ---: | ---: | ---: |");
        for case in s.fan_cases(size) {
            let burst = spread_of(&fan, case, FanSample::burst);
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} | {} |",
                case.policy.name(),
                case.groups,
                ns(burst),
                burst.map_or_else(|| "–".to_owned(), |s| format!("({:.0} – {:.0})", s.min, s.max)),
                x(vs_one(&fan, case, FanSample::burst)),
                ns(spread_of(&fan, case, FanSample::producer_cpu_ns)),
                x(vs_one(&fan, case, FanSample::producer_cpu_ns)),
            );
        }
        out.push('\n');
    }
    out
}

/// The name of group `j` of a run.
pub fn group_name(j: u32) -> String {
    format!("fanout-{j}")
}

/// The arguments of a child of a fan-out run: `role` (`producer`, or
/// `consumer` of group `group`), pinned to `cpu`.
fn child_args(
    case: FanCase,
    s: &Settings,
    name: &str,
    role: &str,
    group: u32,
    cpu: Option<usize>,
) -> Vec<String> {
    let mut args: Vec<String> = vec![
        "peer".into(),
        "fanout".into(),
        "--role".into(),
        role.into(),
        "--group".into(),
        group.to_string(),
        "--groups".into(),
        case.groups.to_string(),
        "--messages".into(),
        s.messages.to_string(),
        "--size".into(),
        case.size.to_string(),
        "--name".into(),
        name.into(),
        "--stall-ms".into(),
        s.stall.as_millis().to_string(),
        "--parent".into(),
        std::process::id().to_string(),
    ];
    if let Some(cpu) = cpu {
        args.extend(["--cpu".into(), cpu.to_string()]);
    }
    args
}

/// Bursts of the uncontended publish measurement.
const BURSTS: usize = 5;

/// Fills the topic's rings and empties them through every group
/// [`BURSTS`] times, before any child runs: the pool's and the rings'
/// pages are touched, and the bursts' sends (a ring's worth each, so
/// nothing waits, nobody else running) are timed. Returns the median
/// burst's nanoseconds per `send`.
fn prefault_and_burst(
    groups: &[tachyon::bus::Group],
    topic: &tachyon::bus::Topic,
    s: &Settings,
    size: usize,
) -> Result<f64, String> {
    let mut buf = payload::buffer(size);
    let mut none = || Ok(());
    let mut per_send = Vec::with_capacity(BURSTS);
    for _ in 0..BURSTS {
        let start = Instant::now();
        for _ in 0..s.capacity {
            retry(
                |t| topic.send(&buf, Key(topics::KEY), t),
                s.stall,
                &mut none,
                "pre-faulting: the ring stayed full",
            )?;
        }
        per_send.push(start.elapsed().as_nanos() as f64 / f64::from(s.capacity));
        for g in groups {
            for _ in 0..s.capacity {
                retry(|t| g.recv_into(0, &mut buf, t), s.stall, &mut none, "pre-faulting: no message came")?;
            }
        }
    }
    Ok(Spread::of(&per_send).map_or(0.0, |s| s.median))
}

/// Runs one repetition of a fan-out case.
pub fn run(case: FanCase, s: &Settings, rep: usize) -> Result<FanSample, String> {
    let g = case.groups;
    if !(1..=MAX_GROUPS).contains(&g) {
        return Err(format!("1 to {MAX_GROUPS} groups per run, not {g}"));
    }
    if s.messages >= procs::MAX_MESSAGES {
        return Err(format!("at most {} messages per run", procs::MAX_MESSAGES - 1));
    }
    let cfg = TopicConfig::default()
        .partitions(1)
        .capacity(s.capacity)
        .wait(case.policy.wait_policy())
        .default_group(false);
    let name = unique_name();
    // Rings for every group slot (the unused default one included); the
    // pool holds what one group's ring holds and more: a chunk is shared by
    // every group, never copied.
    let slots = g as usize + 1;
    let region = Region::create(&name, region_config(case.size, s.capacity, slots, false).max_groups(slots))
        .map_err(|e| format!("cannot create the region: {e}"))?;
    let _remove = RemoveRegion(&name);
    let data = region.create_topic("data", cfg).map_err(|e| format!("cannot create topic data: {e}"))?;
    // Every group exists before any child starts.
    let groups = (0..g)
        .map(|j| data.join_group(&group_name(j)))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("cannot join the groups: {e}"))?;
    let burst_ns = prefault_and_burst(&groups, &data, s, case.size)?;

    let mut kids = Vec::new();
    for j in 0..g {
        let peer = Peer::spawn_gated(&child_args(case, s, &name, "consumer", j, s.cpu(1 + j as usize)))?;
        kids.push(Child::new(format!("group {j}'s consumer"), peer));
    }
    let peer = Peer::spawn_gated(&child_args(case, s, &name, "producer", 0, s.cpu(0)))?;
    kids.push(Child::new("the producer".into(), peer));
    let mut children = Children(kids);
    let consumers: Vec<usize> = (0..g as usize).collect();
    let producer = [g as usize];
    let all: Vec<usize> = (0..=g as usize).collect();
    children.expect(&all, "ready", Instant::now() + STARTUP)?;
    children.go_all()?;

    // Every wait of a child is bounded by the stall timeout; this bound is
    // for a child that hangs anyway (1 ms per message is far more than any
    // run takes).
    let deadline =
        Instant::now() + STARTUP + s.stall + Duration::from_millis(s.messages.min(procs::MAX_MESSAGES));
    let said = children.expect(&producer, "done", deadline)?;
    let v: Vec<u64> = said[0].split_whitespace().filter_map(|w| w.parse().ok()).collect();
    let [sent, first, last, cpu] = v[..] else {
        return Err(format!("the producer reported {:?}, not `count first_ns last_ns cpu_ns`", said[0]));
    };
    if sent != s.messages {
        return Err(format!("the producer sent {sent} messages, not {}", s.messages));
    }
    // The end marker, behind every message in every group's ring.
    let mut marker = payload::buffer(case.size);
    payload::stamp(&mut marker, MARKER);
    retry(
        |t| data.send(&marker, Key(topics::KEY), t),
        s.stall,
        &mut || children.check_others(&producer),
        "the end marker: a group's ring stayed full",
    )?;
    let done = children.expect(&consumers, "done", Instant::now() + STARTUP + s.stall)?;
    children.finish_all()?;

    let (want_count, want_sum) = procs::expected(s.messages, 1);
    let mut spans = vec![Duration::ZERO; g as usize];
    for (j, line) in done.iter().enumerate() {
        let who = format!("group {j}'s consumer");
        let (count, sum, first, last) = parse_done(&who, line)?;
        if count != want_count {
            return Err(format!("group {j} received {count} messages, {want_count} were sent"));
        }
        if sum != want_sum {
            return Err(format!(
                "group {j}: the checksum differs from that of the messages sent (lost and duplicated)"
            ));
        }
        if last <= first {
            return Err(format!("group {j}: its consumer's clock gave no time span"));
        }
        spans[j] = Duration::from_nanos(last - first);
    }
    if last <= first {
        return Err("the producer's clock gave no time span".into());
    }
    Ok(FanSample {
        case,
        rep,
        messages: sent,
        producer: Duration::from_nanos(last - first),
        producer_cpu: Duration::from_nanos(cpu),
        groups: spans,
        burst_ns,
    })
}

/// Parses a group count of `--fanout-groups`.
pub fn parse_groups(s: &str) -> Result<u32, String> {
    match s.trim().parse::<u32>() {
        Ok(n) if (1..=MAX_GROUPS).contains(&n) => Ok(n),
        _ => Err(format!("{s:?} is not a group count from 1 to {MAX_GROUPS}")),
    }
}
