//! `tachyond`: the reaper daemon. Every interval it lists the user's
//! segments, removes the stale ones (every attacher dead, not persistent)
//! and runs recovery on every region, logging each reclaim to stderr.
//!
//! ```text
//! tachyond                   # foreground, a pass every second, until SIGTERM / SIGINT
//! tachyond --interval 250ms  # more often
//! tachyond --once            # one pass, then exit (tests, cron)
//! ```
//!
//! Logs go to stderr through `tracing-subscriber`, with the library's own
//! `tracing` events (what recovery reclaimed, locks taken over from dead
//! holders, corruption); `RUST_LOG` filters them (default `info`).
//!
//! Useful, never required: the library recovers by itself. See
//! `docs/tools.md` and `docs/tachyond.service.example`.

use clap::Parser;
use std::collections::HashMap;
use std::fmt;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, SystemTime};
use tachyon_cli::reaper::{Event, Reaper};
use tachyon_cli::{signal, text};
use tracing_subscriber::filter::{EnvFilter, LevelFilter};
use tracing_subscriber::fmt::format::{FormatEvent, FormatFields, Writer};
use tracing_subscriber::fmt::time::FormatTime;
use tracing_subscriber::fmt::FmtContext;
use tracing_subscriber::registry::LookupSpan;

/// Removes stale tachyon segments and returns the pool chunks of dead
/// processes, logging each reclaim to stderr (filtered by RUST_LOG,
/// default `info`).
#[derive(Debug, Parser)]
#[command(name = "tachyond", version)]
struct Args {
    /// Time between passes: 500ms, 2s, 1m; a bare number is milliseconds.
    #[arg(long, default_value = "1s", value_parser = signal::parse_interval)]
    interval: Duration,
    /// Run one pass and exit: 0 if it went through, 1 if something failed.
    #[arg(long)]
    once: bool,
    /// Also log a summary line after every pass.
    #[arg(short, long)]
    verbose: bool,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Level {
    Info,
    Warning,
    Error,
}

/// The `tracing` target of tachyond's own lines; the library's events have
/// theirs (`tachyon::recovery`, `tachyon::lock`, ...).
const TARGET: &str = "tachyond";

/// Log lines on stderr, through a `tracing` subscriber that also shows the
/// library's events: an RFC 3339 time stamp, the level and the target; or,
/// under systemd (which stamps lines itself), a `<N>` priority prefix that
/// the journal reads. `RUST_LOG` filters (default `info`).
struct Log;

impl Log {
    fn new() -> Log {
        let filter = EnvFilter::builder().with_default_directive(LevelFilter::INFO.into()).from_env_lossy();
        // No colour codes, whatever features the build unified (a
        // workspace build with tachyon-bridge turns tracing-subscriber's
        // `ansi` on through zenoh): the lines go to files and the journal.
        let builder =
            tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(false);
        if std::env::var_os("JOURNAL_STREAM").is_some() {
            builder.event_format(Journal).init();
        } else {
            builder.with_timer(Rfc3339Millis).init();
        }
        Log
    }

    fn line(&self, level: Level, message: &str) {
        match level {
            Level::Info => tracing::info!(target: TARGET, "{message}"),
            Level::Warning => tracing::warn!(target: TARGET, "{message}"),
            Level::Error => tracing::error!(target: TARGET, "{message}"),
        }
    }
}

/// Time stamps in RFC 3339, UTC, with milliseconds (by `humantime`).
struct Rfc3339Millis;

impl FormatTime for Rfc3339Millis {
    fn format_time(&self, w: &mut Writer<'_>) -> fmt::Result {
        write!(w, "{}", humantime::format_rfc3339_millis(SystemTime::now()))
    }
}

/// Lines for the journal: `<N>` (the syslog priority of the level), the
/// target unless it is tachyond's own, the message and fields.
struct Journal;

impl<S, N> FormatEvent<S, N> for Journal
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut w: Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> fmt::Result {
        let meta = event.metadata();
        let priority = match *meta.level() {
            tracing::Level::ERROR => 3,
            tracing::Level::WARN => 4,
            tracing::Level::INFO => 6,
            _ => 7,
        };
        write!(w, "<{priority}>")?;
        if meta.target() != TARGET {
            write!(w, "{}: ", meta.target())?;
        }
        ctx.field_format().format_fields(w.by_ref(), event)?;
        writeln!(w)
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    let log = Log::new();
    if let Err(e) = signal::install() {
        log.line(Level::Error, &format!("cannot catch SIGTERM and SIGINT: {e}"));
        return ExitCode::FAILURE;
    }
    let dir = tachyon::segment::name::dir();
    if !args.once {
        log.line(
            Level::Info,
            &format!(
                "started (pid {}): reaping {} every {}",
                std::process::id(),
                text::clean(&dir.display().to_string()),
                text::duration(args.interval)
            ),
        );
    }
    // A daemon keeps the regions it opened (see the reaper module); one
    // pass has no use for that.
    let mut reaper = if args.once { Reaper::once(false) } else { Reaper::holding() };
    // Problems already logged, per file: logged again only when they change.
    let mut known: HashMap<PathBuf, String> = HashMap::new();
    let mut listing_error: Option<String> = None;
    loop {
        let mut failed = false;
        match reaper.pass(None) {
            Ok(pass) => {
                listing_error = None;
                let mut problems = HashMap::new();
                for event in &pass.events {
                    match event {
                        // Dead slots stay in a region's table until reused,
                        // so one-shot runs (cron) would repeat this note
                        // every time.
                        Event::Opened { dead, .. } if args.once && !args.verbose && !dead.is_empty() => {}
                        Event::Failed { .. } | Event::Invalid { .. } => {
                            failed |= event.is_failure();
                            let line = event.describe();
                            if known.get(event.path()) != Some(&line) {
                                let level = if event.is_failure() { Level::Warning } else { Level::Info };
                                log.line(level, &line);
                            }
                            problems.insert(event.path().to_path_buf(), line);
                        }
                        _ => log.line(Level::Info, &event.describe()),
                    }
                }
                known = problems;
                if args.verbose {
                    let reclaimed = pass.events.iter().filter(|e| e.reclaimed()).count();
                    log.line(
                        Level::Info,
                        &format!(
                            "pass: {} and {} checked, {}, {} held open",
                            text::count(pass.segments, "segment", "segments"),
                            text::count(pass.regions, "region", "regions"),
                            text::count(reclaimed, "reclaim", "reclaims"),
                            text::count(reaper.held_regions(), "region", "regions"),
                        ),
                    );
                }
            }
            Err(e) => {
                failed = true;
                let message = format!("cannot list segments: {e}");
                if listing_error.as_ref() != Some(&message) {
                    log.line(Level::Error, &message);
                }
                listing_error = Some(message);
            }
        }
        if args.once {
            return if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS };
        }
        if !signal::sleep(args.interval) {
            break;
        }
    }
    log.line(Level::Info, "stopping: signal received, pass finished");
    ExitCode::SUCCESS
}
