//! `tyctl`: the inspector of tachyon's shared-memory segments and regions.
//!
//! ```text
//! tyctl ls [--json]                                  segments and regions of this user
//! tyctl info REGION [--json]                         topics, partitions, groups, pool, processes
//! tyctl watch REGION [--interval MS] [--count N]     info, refreshed, with message rates
//! tyctl rm NAME...                                   remove segments or regions
//! tyctl reap [NAME] [--json]                         run recovery / remove stale segments once
//! ```
//!
//! See `docs/tools.md`.

use clap::{Parser, Subcommand};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::io::{self, IsTerminal, Write};
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};
use tachyon::bus::{Delivery, Region, RegionReport};
use tachyon::segment::name::SegmentName;
use tachyon::segment::{self, SegmentInfo, SegmentStatus};
use tachyon::sync::WaitPolicy;
use tachyon::Segment;
use tachyon_cli::reaper::{Event, Reaper};
use tachyon_cli::text::{self, clean, quoted, Align, Table};
use tachyon_cli::{signal, FileId};

/// Inspects tachyon's shared-memory segments and bus regions.
#[derive(Debug, Parser)]
#[command(name = "tyctl", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Lists this user's segments and regions, with their processes.
    Ls {
        /// Print one JSON document instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Shows a region: topics, partitions, consumer groups, pool, processes.
    Info {
        /// The region's name (e.g. `md` or `Global\md`).
        region: String,
        /// Print one JSON document instead of tables.
        #[arg(long)]
        json: bool,
    },
    /// Shows a region again and again, with message rates per topic.
    Watch {
        /// The region's name.
        region: String,
        /// Time between refreshes: 500ms, 2s; a bare number is milliseconds.
        #[arg(long, default_value = "1000", value_parser = signal::parse_interval)]
        interval: Duration,
        /// Stop after this many refreshes (default: until Ctrl-C).
        #[arg(long)]
        count: Option<u64>,
        /// Print one JSON document per refresh, one per line.
        #[arg(long)]
        json: bool,
    },
    /// Removes segments or regions by name, like `shm_unlink`: attached
    /// processes keep their memory, the name is gone.
    Rm {
        /// Names of segments or regions.
        #[arg(required = true)]
        names: Vec<String>,
    },
    /// Runs recovery once on a region (or on every region, after removing
    /// every stale segment) and reports what it reclaimed.
    Reap {
        /// A region or segment; all of them when left out.
        name: Option<String>,
        /// Print one JSON document instead of lines.
        #[arg(long)]
        json: bool,
    },
}

/// A failure to report: the message says what and, where it can, what to do.
struct Failure(String);

impl From<io::Error> for Failure {
    fn from(e: io::Error) -> Failure {
        Failure(format!("cannot write the output: {e}"))
    }
}

type Outcome = Result<ExitCode, Failure>;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Ls { json } => ls(json),
        Command::Info { region, json } => info(&region, json),
        Command::Watch { region, interval, count, json } => watch(&region, interval, count, json),
        Command::Rm { names } => rm(&names),
        Command::Reap { name, json } => reap(name.as_deref(), json),
    };
    match result {
        Ok(code) => code,
        Err(Failure(message)) => {
            eprintln!("tyctl: {message}");
            ExitCode::FAILURE
        }
    }
}

/// Writes `text` to stdout; a closed pipe (`tyctl ls | head`) ends quietly.
fn out(text: &str) -> Result<(), Failure> {
    let mut stdout = io::stdout().lock();
    match stdout.write_all(text.as_bytes()).and_then(|()| stdout.flush()) {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => std::process::exit(0),
        other => Ok(other?),
    }
}

/// `doc` as one line of JSON, newline included.
fn json_line(doc: &impl Serialize) -> Result<String, Failure> {
    let text = serde_json::to_string(doc).map_err(|e| Failure(format!("cannot write JSON: {e}")))?;
    Ok(text + "\n")
}

/// Writes `doc` as one line of JSON.
fn out_json(doc: &impl Serialize) -> Result<(), Failure> {
    out(&json_line(doc)?)
}

fn list() -> Result<Vec<SegmentInfo>, Failure> {
    segment::list().map_err(|e| Failure(format!("cannot list segments: {e}")))
}

/// The file a name given on the command line refers to.
fn path_of(name: &str) -> Result<std::path::PathBuf, Failure> {
    SegmentName::parse(name).map(|n| n.path()).map_err(|e| Failure(e.to_string()))
}

// ---- ls ---------------------------------------------------------------------

fn ls(json: bool) -> Outcome {
    let infos = list()?;
    let now = text::now_unix_ns();
    let dir = segment::name::dir();
    if json {
        let segments = infos.iter().map(|info| SegmentJson { info, stale: info.is_stale() }).collect();
        out_json(&LsJson { dir: &dir, segments })?;
        return Ok(ExitCode::SUCCESS);
    }
    if infos.is_empty() {
        out(&format!("no tachyon segments in {}\n", clean(&dir.display().to_string())))?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut table = Table::new([
        ("NAME", Align::Left),
        ("KIND", Align::Left),
        ("SIZE", Align::Right),
        ("CREATOR", Align::Right),
        ("CREATED", Align::Left),
        ("PERSISTENT", Align::Left),
        ("STATE", Align::Left),
        ("PROCESSES", Align::Left),
    ]);
    let mut stale = 0;
    for info in &infos {
        let name = clean(&info.name);
        match &info.status {
            SegmentStatus::Valid { kind, creator, created_unix_ns, attachers, persistent, .. } => {
                let alive = attachers.iter().filter(|a| a.alive).count();
                let state = if info.is_stale() {
                    stale += 1;
                    "stale"
                } else if alive > 0 {
                    "in use"
                } else {
                    "idle"
                };
                const SHOWN: usize = 6;
                let mut procs: Vec<String> = attachers
                    .iter()
                    .take(SHOWN)
                    .map(|a| format!("{} {}", a.process.pid, if a.alive { "alive" } else { "dead" }))
                    .collect();
                if attachers.len() > SHOWN {
                    procs.push(format!("+{} more", attachers.len() - SHOWN));
                }
                if procs.is_empty() {
                    procs.push("-".to_owned());
                }
                table.row([
                    name,
                    kind.to_string(),
                    text::bytes(info.file_size),
                    creator.pid.to_string(),
                    text::ago(now, *created_unix_ns),
                    if *persistent { "yes" } else { "no" }.to_owned(),
                    state.to_owned(),
                    procs.join(", "),
                ]);
            }
            SegmentStatus::Invalid(reason) => table.row([
                name,
                "?".to_owned(),
                text::bytes(info.file_size),
                "-".to_owned(),
                "-".to_owned(),
                "-".to_owned(),
                "invalid".to_owned(),
                clean(reason),
            ]),
        }
    }
    let mut summary = format!(
        "{} in {}",
        text::count(infos.len(), "segment", "segments"),
        clean(&dir.display().to_string())
    );
    if stale > 0 {
        summary.push_str(&format!(
            "; {stale} stale (every attacher died): `tyctl reap` or tachyond removes them"
        ));
    }
    out(&format!("{}\n{summary}\n", table.render()))?;
    Ok(ExitCode::SUCCESS)
}

/// `tyctl ls --json`.
#[derive(Serialize)]
struct LsJson<'a> {
    dir: &'a Path,
    segments: Vec<SegmentJson<'a>>,
}

/// One segment: [`SegmentInfo`]'s fields, and whether it is stale.
#[derive(Serialize)]
struct SegmentJson<'a> {
    #[serde(flatten)]
    info: &'a SegmentInfo,
    stale: bool,
}

// ---- info and watch ------------------------------------------------------------

/// Messages per second of one topic, from two snapshots.
#[derive(Debug, Clone, Copy, Serialize)]
struct Rate {
    #[serde(rename = "published_per_sec")]
    published: f64,
    #[serde(rename = "received_per_sec")]
    received: f64,
}

struct Snapshot {
    at: Instant,
    counters: HashMap<String, (u64, u64)>,
}

impl Snapshot {
    fn of(report: &RegionReport) -> Snapshot {
        Snapshot {
            at: Instant::now(),
            counters: report
                .topics
                .iter()
                .map(|t| (t.info.name.clone(), (t.info.published, t.info.received)))
                .collect(),
        }
    }

    /// Rates per topic from `self` (earlier) to `now`.
    fn rates(&self, now: &Snapshot) -> HashMap<String, Rate> {
        let secs = now.at.duration_since(self.at).as_secs_f64();
        if secs <= 0.0 {
            return HashMap::new();
        }
        now.counters
            .iter()
            .filter_map(|(name, &(published, received))| {
                let &(p0, r0) = self.counters.get(name)?;
                Some((
                    name.clone(),
                    Rate {
                        published: published.saturating_sub(p0) as f64 / secs,
                        received: received.saturating_sub(r0) as f64 / secs,
                    },
                ))
            })
            .collect()
    }
}

fn info(name: &str, json: bool) -> Outcome {
    let report = inspect(name)?;
    if json {
        out_json(&report_json(name, &report, None))?;
    } else {
        out(&report_text(name, &report, None))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// A snapshot through a read-only view: looking attaches nothing, runs no
/// recovery and changes nothing.
fn inspect(name: &str) -> Result<RegionReport, Failure> {
    Region::inspect_name(name).map_err(|e| match e {
        tachyon::Error::NotFound { .. } => {
            Failure(format!("no region named {} (see `tyctl ls`)", quoted(name)))
        }
        tachyon::Error::KindMismatch { found, .. } => {
            Failure(format!("{} is a {found}, not a region", quoted(name)))
        }
        e => Failure(format!("cannot inspect region {}: {e}", quoted(name))),
    })
}

fn watch(name: &str, interval: Duration, count: Option<u64>, json: bool) -> Outcome {
    signal::install().map_err(|e| Failure(format!("cannot catch signals: {e}")))?;
    let path = inspect(name)?.path;
    let file = FileId::of(&path);
    let clear = !json && io::stdout().is_terminal();
    let mut previous: Option<Snapshot> = None;
    let mut shown = 0u64;
    while count.is_none_or(|c| shown < c) {
        if shown > 0 && !signal::sleep(interval) {
            break;
        }
        if file.is_none() || FileId::of(&path) != file {
            return Err(Failure(format!(
                "region {} was removed or replaced; stopped watching",
                quoted(name)
            )));
        }
        let report = inspect(name)?;
        let snapshot = Snapshot::of(&report);
        let rates = previous.as_ref().map(|p| p.rates(&snapshot));
        let text = if json {
            json_line(&report_json(name, &report, Some(rates.as_ref())))?
        } else {
            let head = format!(
                "every {} (snapshot {}{}), Ctrl-C to stop\n\n",
                text::duration(interval),
                shown + 1,
                count.map(|c| format!(" of {c}")).unwrap_or_default()
            );
            let body = report_text(name, &report, Some(rates.as_ref()));
            if clear {
                format!("\x1b[H\x1b[2J{head}{body}")
            } else if shown > 0 {
                format!("\n{head}{body}")
            } else {
                format!("{head}{body}")
            }
        };
        out(&text)?;
        previous = Some(snapshot);
        shown += 1;
    }
    Ok(ExitCode::SUCCESS)
}

/// `rates`: `None` for `info`; `Some(None)` for the first refresh of
/// `watch` (no rate yet); `Some(Some(..))` after.
fn report_text(name: &str, report: &RegionReport, rates: Option<Option<&HashMap<String, Rate>>>) -> String {
    let now = text::now_unix_ns();
    let mut s = format!(
        "region {}  {}  {}  created by pid {}  lease {}\n",
        quoted(name),
        clean(&report.path.display().to_string()),
        text::bytes(report.size as u64),
        report.creator.pid,
        text::duration(report.lease)
    );

    s.push_str("\nTOPICS\n");
    if report.topics.is_empty() {
        s.push_str("(none)\n");
    } else {
        let mut columns = vec![
            ("TOPIC", Align::Left),
            ("PARTITIONS", Align::Right),
            ("CAPACITY", Align::Right),
            ("WAIT", Align::Left),
            ("DELIVERY", Align::Left),
            ("OPTIONS", Align::Left),
            ("PUBLISHED", Align::Right),
            ("RECEIVED", Align::Right),
            ("LOST", Align::Right),
            ("CORRUPT", Align::Right),
            ("DEPTH", Align::Right),
        ];
        if rates.is_some() {
            columns.extend([("PUB/S", Align::Right), ("RECV/S", Align::Right)]);
        }
        let mut table = Table::new(columns);
        for t in &report.topics {
            let depth: u64 = t.partitions.iter().map(|p| p.depth).sum();
            let mut row = vec![
                clean(&t.info.name),
                t.info.partitions.to_string(),
                t.info.capacity.to_string(),
                wait_name(t.info.wait).to_owned(),
                delivery_name(t.info.delivery).to_owned(),
                options(&t.info),
                t.info.published.to_string(),
                t.info.received.to_string(),
                t.info.lost.to_string(),
                t.info.corrupt.to_string(),
                depth.to_string(),
            ];
            if let Some(rates) = rates {
                match rates.and_then(|r| r.get(&t.info.name)) {
                    Some(r) => row.extend([format!("{:.1}", r.published), format!("{:.1}", r.received)]),
                    None => row.extend(["-".to_owned(), "-".to_owned()]),
                }
            }
            table.row(row);
        }
        s.push_str(&table.render());

        s.push_str("\nPARTITIONS\n");
        let mut table = Table::new([
            ("TOPIC", Align::Left),
            ("PARTITION", Align::Right),
            ("HEAD", Align::Right),
            ("TAIL", Align::Right),
            ("DEPTH", Align::Right),
        ]);
        for t in &report.topics {
            for (i, p) in t.partitions.iter().enumerate() {
                table.row([
                    clean(&t.info.name),
                    i.to_string(),
                    p.head.to_string(),
                    p.tail.to_string(),
                    p.depth.to_string(),
                ]);
            }
        }
        s.push_str(&table.render());
        groups_text(&mut s, report);
    }

    s.push_str("\nPOOL\n");
    let mut table = Table::new([
        ("CLASS", Align::Right),
        ("CHUNKS", Align::Right),
        ("FREE", Align::Right),
        ("IN USE", Align::Right),
        ("USED", Align::Right),
    ]);
    let (mut chunks, mut free, mut bytes, mut used) = (0usize, 0usize, 0u64, 0u64);
    for c in &report.pool {
        let in_use = c.chunks.saturating_sub(c.free);
        chunks += c.chunks;
        free += c.free.min(c.chunks);
        bytes += (c.chunks * c.chunk_size) as u64;
        used += (in_use * c.chunk_size) as u64;
        table.row([
            text::bytes(c.chunk_size as u64),
            c.chunks.to_string(),
            c.free.to_string(),
            in_use.to_string(),
            percent(in_use as u64, c.chunks as u64),
        ]);
    }
    table.row([
        "all".to_owned(),
        chunks.to_string(),
        free.to_string(),
        (chunks - free).to_string(),
        percent(used, bytes),
    ]);
    s.push_str(&table.render());
    s.push_str(&format!("{} of {} in use\n", text::bytes(used), text::bytes(bytes)));

    s.push_str("\nPROCESSES\n");
    let mut table = Table::new([
        ("SLOT", Align::Right),
        ("PID", Align::Right),
        ("STATE", Align::Left),
        ("HEARTBEAT", Align::Left),
        ("LOANS", Align::Right),
        ("UNRELEASED", Align::Right),
    ]);
    for p in &report.processes {
        table.row([
            p.slot.to_string(),
            p.process.pid.to_string(),
            if p.alive { "alive" } else { "dead" }.to_owned(),
            text::ago(now, p.heartbeat_unix_ns),
            p.loans.to_string(),
            p.held.to_string(),
        ]);
    }
    if table.is_empty() {
        s.push_str("(no process attached)\n");
    } else {
        s.push_str(&table.render());
    }
    s.push_str(&format!(
        "\norphaned chunks (held by dead processes whose slot was reused): {}\n",
        report.orphaned_chunks
    ));
    s.push_str(&format!(
        "damage repaired: {} ring cells or cursors (per topic: CORRUPT), {} header or directory words; quarantined chunks (never handed out): {}\n",
        report.ring_repairs, report.directory_repairs, report.quarantined_chunks
    ));
    if report.damaged_topics > 0 {
        s.push_str(&format!(
            "topics lost to damage (both copies of their directory entry): {}\n",
            report.damaged_topics
        ));
    }
    s
}

/// The GROUPS table: every consumer group of every topic (slot 0, the
/// default group, shown as `(default)`), its slot, generation and state,
/// its lag (the messages waiting in its rings, all partitions together and,
/// last, per partition), its member processes (live / recorded; `-` for
/// the default group, whose consumers are whoever receives), the messages
/// it missed (overrun topics) and its position (messages taken so far). Only when a topic has a named group or no default
/// group (a plain topic's one group is its PARTITIONS table already).
fn groups_text(s: &mut String, report: &RegionReport) {
    let plain = |t: &tachyon::bus::TopicReport| t.groups.len() == 1 && t.groups[0].slot == 0;
    if report.topics.iter().all(plain) {
        return;
    }
    s.push_str("\nGROUPS\n");
    let mut table = Table::new([
        ("TOPIC", Align::Left),
        ("GROUP", Align::Left),
        ("SLOT", Align::Right),
        ("GEN", Align::Right),
        ("STATE", Align::Left),
        ("LAG", Align::Right),
        ("MEMBERS", Align::Right),
        ("MISSED", Align::Right),
        ("POSITION", Align::Right),
        ("LAG PER PARTITION", Align::Left),
    ]);
    for t in &report.topics {
        if t.groups.is_empty() {
            table.row([
                clean(&t.info.name),
                "(none joined)".to_owned(),
                "-".to_owned(),
                "-".to_owned(),
                "-".to_owned(),
                "-".to_owned(),
                "-".to_owned(),
                "-".to_owned(),
                "-".to_owned(),
                "-".to_owned(),
            ]);
        }
        for g in &t.groups {
            let lag: u64 = g.partitions.iter().map(|p| p.depth).sum();
            let per: Vec<String> = g.partitions.iter().map(|p| p.depth.to_string()).collect();
            table.row([
                clean(&t.info.name),
                if g.slot == 0 { "(default)".to_owned() } else { clean(&g.name) },
                g.slot.to_string(),
                g.generation.to_string(),
                if g.draining { "draining" } else { "active" }.to_owned(),
                lag.to_string(),
                if g.slot == 0 { "-".to_owned() } else { format!("{}/{}", g.live_members, g.members.len()) },
                g.missed.to_string(),
                g.position.to_string(),
                per.join(" "),
            ]);
        }
    }
    s.push_str(&table.render());
}

fn wait_name(wait: Option<WaitPolicy>) -> &'static str {
    match wait {
        Some(WaitPolicy::Spin) => "spin",
        Some(WaitPolicy::Futex) => "futex",
        Some(WaitPolicy::Hybrid) => "hybrid",
        None => "?",
    }
}

/// A topic's options in one word of the TOPICS table: `inline=BYTES` for
/// inline slots, `light` for light hand-overs, comma-separated; `-` for
/// none.
fn options(info: &tachyon::bus::TopicInfo) -> String {
    let mut parts = Vec::new();
    if info.inline_payload > 0 {
        parts.push(format!("inline={}", info.inline_payload));
    }
    if info.light_handovers {
        parts.push("light".to_owned());
    }
    if parts.is_empty() {
        "-".to_owned()
    } else {
        parts.join(",")
    }
}

fn delivery_name(delivery: Option<Delivery>) -> &'static str {
    match delivery {
        Some(Delivery::AtMostOnce) => "at-most-once",
        Some(Delivery::AtLeastOnce) => "at-least-once",
        None => "?",
    }
}

fn percent(part: u64, whole: u64) -> String {
    if whole == 0 {
        "-".to_owned()
    } else {
        format!("{:.1}%", part as f64 * 100.0 / whole as f64)
    }
}

/// `tyctl info --json` and each line of `tyctl watch --json`: the region's
/// name, the time, [`RegionReport`]'s fields and, for `watch`, the rates
/// per topic (`null` on the first refresh).
#[derive(Serialize)]
struct InfoJson<'a> {
    region: &'a str,
    unix_ns: u64,
    #[serde(flatten)]
    report: &'a RegionReport,
    #[serde(skip_serializing_if = "Option::is_none")]
    rates: Option<Option<BTreeMap<&'a str, Rate>>>,
}

fn report_json<'a>(
    name: &'a str,
    report: &'a RegionReport,
    rates: Option<Option<&'a HashMap<String, Rate>>>,
) -> InfoJson<'a> {
    let rates = rates.map(|r| r.map(|r| r.iter().map(|(topic, rate)| (topic.as_str(), *rate)).collect()));
    InfoJson { region: name, unix_ns: text::now_unix_ns(), report, rates }
}

// ---- rm -------------------------------------------------------------------------

fn rm(names: &[String]) -> Outcome {
    let infos = list()?;
    let mut failed = false;
    for name in names {
        let found = path_of(name).ok().and_then(|p| infos.iter().find(|i| i.path == p));
        match Segment::remove(name) {
            Ok(()) => {
                let mut line = format!("removed {}", quoted(name));
                if let Some(SegmentStatus::Valid { kind, attachers, .. }) = found.map(|i| &i.status) {
                    line.push_str(&format!(" ({kind})"));
                    let live: Vec<u32> =
                        attachers.iter().filter(|a| a.alive).map(|a| a.process.pid).collect();
                    if !live.is_empty() {
                        line.push_str(&format!(
                            "; still attached, keeping their memory until they close it: {}",
                            text::pids(live)
                        ));
                    }
                }
                out(&format!("{line}\n"))?;
            }
            Err(tachyon::Error::NotFound { .. }) => {
                eprintln!("tyctl: no segment or region named {} (see `tyctl ls`)", quoted(name));
                failed = true;
            }
            Err(e) => {
                eprintln!("tyctl: cannot remove {}: {e}", quoted(name));
                failed = true;
            }
        }
    }
    Ok(if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS })
}

// ---- reap -----------------------------------------------------------------------

fn reap(name: Option<&str>, json: bool) -> Outcome {
    let only = name.map(path_of).transpose()?;
    if let (Some(name), Some(path)) = (name, &only) {
        if !list()?.iter().any(|i| &i.path == path) {
            return Err(Failure(format!("no segment or region named {} (see `tyctl ls`)", quoted(name))));
        }
    }
    let pass = Reaper::once(true)
        .pass(only.as_deref())
        .map_err(|e| Failure(format!("cannot list segments: {e}")))?;
    let failed = pass.events.iter().any(Event::is_failure);
    if json {
        let of = |kind: &str| pass.events.iter().filter(|e| e.kind() == kind).collect();
        out_json(&ReapJson {
            segments: pass.segments,
            regions: pass.regions,
            removed: of("removed"),
            recovered: of("recovered"),
            kept: of("kept"),
            opened: of("opened"),
            invalid: of("invalid"),
            failed: of("failed"),
        })?;
    } else {
        let mut s = String::new();
        for event in &pass.events {
            let line = event.describe();
            if event.is_failure() {
                eprintln!("tyctl: {line}");
            } else {
                s.push_str(&line);
                s.push('\n');
            }
        }
        let removed = pass.events.iter().filter(|e| matches!(e, Event::Removed { .. })).count();
        let chunks: usize = pass
            .events
            .iter()
            .map(|e| match e {
                Event::Recovered { recovered, .. } => recovered.total(),
                _ => 0,
            })
            .sum();
        s.push_str(&format!(
            "{} checked: {} removed, {} returned to pools in {}\n",
            text::count(pass.segments, "segment", "segments"),
            removed,
            text::count(chunks, "chunk", "chunks"),
            text::count(pass.regions, "region", "regions"),
        ));
        out(&s)?;
    }
    Ok(if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS })
}

/// `tyctl reap --json`: counts, and the pass's events by kind.
#[derive(Serialize)]
struct ReapJson<'a> {
    segments: usize,
    regions: usize,
    removed: Vec<&'a Event>,
    recovered: Vec<&'a Event>,
    kept: Vec<&'a Event>,
    opened: Vec<&'a Event>,
    invalid: Vec<&'a Event>,
    failed: Vec<&'a Event>,
}
