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
//! Useful, never required: the library recovers by itself. See
//! `docs/tools.md` and `docs/tachyond.service.example`.

use clap::Parser;
use std::collections::HashMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, SystemTime};
use tachyon_cli::reaper::{Event, Reaper};
use tachyon_cli::{signal, text};

/// Removes stale tachyon segments and returns the pool chunks of dead
/// processes, logging each reclaim to stderr.
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

/// Log lines on stderr: an RFC 3339 time stamp, or, under systemd (which
/// stamps lines itself), a `<N>` priority prefix that the journal reads.
struct Log {
    journal: bool,
}

impl Log {
    fn new() -> Log {
        Log { journal: std::env::var_os("JOURNAL_STREAM").is_some() }
    }

    fn line(&self, level: Level, message: &str) {
        let tag = match level {
            Level::Info => "",
            Level::Warning => "warning: ",
            Level::Error => "error: ",
        };
        if self.journal {
            let priority = match level {
                Level::Info => 6,
                Level::Warning => 4,
                Level::Error => 3,
            };
            eprintln!("<{priority}>{tag}{message}");
        } else {
            eprintln!("{} tachyond: {tag}{message}", text::rfc3339(SystemTime::now()));
        }
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
