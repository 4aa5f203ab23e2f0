//! `tachyon-bench compare`: the same topics runs by several builds of the
//! benchmark, interleaved round by round, each build's figures divided by
//! the raw ring of its own run and paired with the first build's in the
//! same round.
//!
//! This is how a change is judged on a machine whose speed moves: a
//! build's number alone says little when the host's phase changes between
//! two runs, but its ratio to the raw ring measured in the same run, and
//! that ratio divided by the base build's in the same round, cancel most
//! of it. `--control` adds a byte-identical copy of the base: whatever
//! separates it from the base is the method's noise, the margin a change
//! has to beat. Rounds in which any run's probe saw the host in another
//! phase than usual (the report's rule: a probe over [`PHASE`] × the
//! usual probe or under its `1 / PHASE`) are left out, and the table says
//! how many were kept.
//!
//! ```text
//! tachyon-bench compare --rounds 8 --control target/ab/base target/ab/new -- \
//!     --group topics --reps 1 --messages 2000000 --topic-tests throughput \
//!     --topic-policies spin --topic-transports raw-ring,cb,copy --throughput-sizes 64,1024
//! ```

use crate::probe::{off_phase, usual, PHASE};
use crate::stats::Spread;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// `tachyon-bench compare`'s arguments.
#[derive(Debug, clap::Args)]
pub struct CompareArgs {
    /// Rounds; each runs every build once, in an order that turns by one
    /// build each round (no build always runs first).
    #[arg(long, default_value_t = 6)]
    rounds: usize,
    /// Also runs a byte-identical copy of the first build, as if it were
    /// another build: what separates it from the first is the noise.
    #[arg(long)]
    control: bool,
    /// Folder for every run's report and log, and `compare.md`.
    #[arg(long, default_value = "target/bench-compare")]
    out: PathBuf,
    /// The `tachyon-bench` binaries to compare; the first is the base.
    #[arg(required = true, value_name = "BIN")]
    bins: Vec<PathBuf>,
    /// What every build runs (after `--`): a topics group run, without
    /// `--out`; include `raw-ring` in `--topic-transports` for the ratios.
    #[arg(last = true, value_name = "ARGS")]
    args: Vec<String>,
}

/// One build under comparison.
struct Build {
    label: String,
    path: PathBuf,
}

/// One line of a run's `topics.csv`.
#[derive(Debug, Clone, PartialEq)]
struct Row {
    case: String,
    test: String,
    transport: String,
    size: u64,
    rep: u32,
    /// msgs/s for throughput, p50 ns for latency.
    value: f64,
    probe: Option<f64>,
}

impl Row {
    fn lower_is_better(&self) -> bool {
        self.test == "latency"
    }

    fn is_reference(&self) -> bool {
        self.transport == "raw-ring"
    }
}

/// Runs the comparison and prints its table (also written to
/// `OUT/compare.md`).
pub fn compare(args: CompareArgs) -> Result<(), String> {
    if args.rounds == 0 {
        return Err("--rounds: at least 1".into());
    }
    if let Some(a) = args.args.iter().find(|a| *a == "--out" || a.starts_with("--out=")) {
        return Err(format!("{a}: compare chooses each run's folder itself (see --out before `--`)"));
    }
    let mut builds = Vec::new();
    for path in &args.bins {
        if !path.is_file() {
            return Err(format!("{}: no such binary", path.display()));
        }
        let name =
            path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into());
        let taken = builds
            .iter()
            .filter(|b: &&Build| b.label == name || b.label.starts_with(&format!("{name}#")))
            .count();
        let label = if taken == 0 { name } else { format!("{name}#{}", taken + 1) };
        builds.push(Build { label, path: path.clone() });
    }
    std::fs::create_dir_all(&args.out).map_err(|e| format!("{}: {e}", args.out.display()))?;
    if args.control {
        let base = &builds[0];
        let copy = args.out.join(format!("{}-copy", base.label));
        std::fs::copy(&base.path, &copy)
            .map_err(|e| format!("copy {} to {}: {e}", base.path.display(), copy.display()))?;
        builds.push(Build { label: format!("{}-copy", base.label), path: copy });
    }
    if builds.len() < 2 {
        return Err("nothing to compare: give two binaries or more, or one with --control".into());
    }
    let mut runs: Vec<Vec<Vec<Row>>> = Vec::new(); // [round][build] -> rows
    for round in 0..args.rounds {
        let mut got: Vec<Option<Vec<Row>>> = vec![None; builds.len()];
        for k in 0..builds.len() {
            let i = (k + round) % builds.len();
            let b = &builds[i];
            eprintln!("compare: round {} of {}, {}", round + 1, args.rounds, b.label);
            got[i] =
                Some(run_one(b, &args.args, &args.out.join(format!("round-{}-{}", round + 1, b.label)))?);
        }
        runs.push(got.into_iter().map(Option::unwrap_or_default).collect());
    }
    let labels: Vec<&str> = builds.iter().map(|b| b.label.as_str()).collect();
    let table = render(&labels, &runs, &args.args);
    let file = args.out.join("compare.md");
    std::fs::write(&file, &table).map_err(|e| format!("{}: {e}", file.display()))?;
    print!("{table}");
    Ok(())
}

/// Runs one build with `args` into `dir` and reads its topics CSV.
fn run_one(b: &Build, args: &[String], dir: &Path) -> Result<Vec<Row>, String> {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let log = dir.join("run.log");
    let file = std::fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
    let err = file.try_clone().map_err(|e| format!("{}: {e}", log.display()))?;
    let status = Command::new(&b.path)
        .args(args)
        .arg("--out")
        .arg(dir)
        .stdin(Stdio::null())
        .stdout(file)
        .stderr(err)
        .status()
        .map_err(|e| format!("{}: cannot start {}: {e}", b.label, b.path.display()))?;
    if !status.success() {
        return Err(format!("{}: the run failed ({status}); its output is in {}", b.label, log.display()));
    }
    let csv = dir.join("topics.csv");
    let text = std::fs::read_to_string(&csv).map_err(|e| {
        format!(
            "{}: no {} ({e}): compare reads the topics group's results; run it with --group topics",
            b.label,
            csv.display()
        )
    })?;
    parse(&text).map_err(|e| format!("{}: {e}", csv.display()))
}

/// Parses a topics CSV (the columns of `topics::csv::csv`, found by name).
fn parse(text: &str) -> Result<Vec<Row>, String> {
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().ok_or("empty file")?.split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).ok_or(format!("no column `{name}`"));
    let (case, test, transport, size, rep, per_sec, p50, probe) = (
        col("case")?,
        col("test")?,
        col("transport")?,
        col("size")?,
        col("rep")?,
        col("per_sec")?,
        col("p50_ns")?,
        col("probe_ns")?,
    );
    let mut rows = Vec::new();
    for (n, line) in lines.enumerate().filter(|(_, l)| !l.is_empty()) {
        let f: Vec<&str> = line.split(',').collect();
        let bad = |what: &str| format!("line {}: {what}", n + 2);
        if f.len() != header.len() {
            return Err(bad("not as many fields as the header"));
        }
        let num = |i: usize| f[i].parse::<f64>().map_err(|_| bad(&format!("`{}` is not a number", f[i])));
        let test_name = f[test].to_owned();
        let value = if test_name == "latency" { num(p50)? } else { num(per_sec)? };
        rows.push(Row {
            case: f[case].to_owned(),
            test: test_name,
            transport: f[transport].to_owned(),
            size: f[size].parse().map_err(|_| bad("bad size"))?,
            rep: f[rep].parse().map_err(|_| bad("bad rep"))?,
            value,
            probe: if f[probe].is_empty() { None } else { Some(num(probe)?) },
        });
    }
    Ok(rows)
}

/// What a run says of one case: the median over its repetitions of the
/// case's value divided by the raw ring's of the same test, size and
/// repetition (`ratio`), or the value itself where the run has no raw
/// ring (`ratio` false).
fn figure(rows: &[Row], case: &str) -> Option<(f64, bool)> {
    let mine: Vec<&Row> = rows.iter().filter(|r| r.case == case).collect();
    let first = mine.first()?;
    let reference = |r: &Row| {
        rows.iter().find(|x| x.is_reference() && x.test == r.test && x.size == r.size && x.rep == r.rep)
    };
    if first.is_reference() || mine.iter().any(|r| reference(r).is_none()) {
        return Spread::of(&mine.iter().map(|r| r.value).collect::<Vec<_>>()).map(|s| (s.median, false));
    }
    let ratios: Vec<f64> = mine.iter().filter_map(|r| reference(r).map(|x| r.value / x.value)).collect();
    Spread::of(&ratios).map(|s| (s.median, true))
}

/// A run's absolute figure for one case: the median over its repetitions
/// (msgs/s for throughput, p50 ns for round trips).
fn absolute(rows: &[Row], case: &str) -> Option<f64> {
    let values: Vec<f64> = rows.iter().filter(|r| r.case == case).map(|r| r.value).collect();
    Spread::of(&values).map(|s| s.median)
}

/// Whether every run of a round was steady: no probe off the phase of the
/// whole comparison's usual probe (see [`usual`]; runs without probes
/// count as steady).
fn steady(round: &[Vec<Row>], usual: Option<f64>) -> bool {
    let Some(u) = usual else { return true };
    round.iter().flatten().all(|r| r.probe.is_none_or(|p| !off_phase(p, u)))
}

/// The comparison's markdown table: each build's figures ÷ the raw ring
/// of its own run, paired with the base's in the same round; then the
/// same pairs on the absolute figures.
fn render(labels: &[&str], runs: &[Vec<Vec<Row>>], args: &[String]) -> String {
    let usual = usual(runs.iter().flatten().flatten().filter_map(|r| r.probe));
    let kept: Vec<&Vec<Vec<Row>>> = runs.iter().filter(|round| steady(round, usual)).collect();
    // Cases in the order the first run of the base listed them.
    let mut cases: Vec<(String, bool)> = Vec::new();
    for r in runs.iter().flat_map(|round| round.iter().flatten()) {
        if !cases.iter().any(|(c, _)| *c == r.case) {
            cases.push((r.case.clone(), r.lower_is_better()));
        }
    }
    let mut out = String::new();
    let _ = writeln!(out, "## Builds compared\n");
    let _ = writeln!(
        out,
        "`tachyon-bench {}`, {} rounds, {} kept (a round is left out when one of its runs had a probe \
         over {PHASE} × the usual probe or under 1/{PHASE} of it; the usual probe, the tenth \
         percentile of all, {}). Each cell: the median over the kept rounds of the run's figure ÷ the raw \
         ring of the same run (msgs/s for throughput, p50 for round trips; the raw ring's own rows: its \
         figure), then, for each build after the first, the median of its figure ÷ the base's in the \
         same round, and in how many rounds it did better than the base. For throughput above 1 is \
         faster, for round trips below 1 is.\n",
        args.join(" "),
        runs.len(),
        kept.len(),
        usual.map_or("no probes".to_owned(), |u| format!("{u:.1} ns")),
    );
    table(&mut out, labels, &cases, &kept, figure);
    let _ = writeln!(
        out,
        "\n### Paired on the absolute figures\n\n\
         The same rounds, each build's absolute figure (msgs/s, p50) ÷ the base's in the same round. \
         The raw ring's code is part of each build: a change elsewhere can move it, and its speed \
         with it (its 1 KiB stream by 5 – 8 % between two builds of 2026-12-05 whose raw ring was the \
         same code), which the table above divides into every figure. Here it cannot; but a change \
         of the host's speed between two runs of a round, which the table above cancels, stays. \
         Where the two tables agree, the change is the build's.\n"
    );
    table(&mut out, labels, &cases, &kept, |rows, case| absolute(rows, case).map(|v| (v, false)));
    out
}

/// One table of `render`: per case, the base's figure by `figure_of`,
/// and each other build's with its pairing to the base's.
fn table(
    out: &mut String,
    labels: &[&str],
    cases: &[(String, bool)],
    kept: &[&Vec<Vec<Row>>],
    figure_of: impl Fn(&[Row], &str) -> Option<(f64, bool)>,
) {
    let _ = writeln!(out, "| case | {} |", labels.join(" | "));
    let _ = writeln!(out, "| --- |{}", " ---: |".repeat(labels.len()));
    for (case, lower) in cases {
        let mut cells = Vec::new();
        for b in 0..labels.len() {
            let figures: Vec<(f64, bool)> =
                kept.iter().filter_map(|round| figure_of(&round[b], case)).collect();
            let Some(mid) = Spread::of(&figures.iter().map(|f| f.0).collect::<Vec<_>>()) else {
                cells.push("–".to_owned());
                continue;
            };
            let shown = if figures.iter().all(|f| f.1) {
                format!("{:.3}", mid.median)
            } else if *lower {
                format!("{:.0} ns", mid.median)
            } else {
                crate::stats::si(mid.median) + "/s"
            };
            if b == 0 {
                cells.push(shown);
                continue;
            }
            let pairs: Vec<(f64, f64)> = kept
                .iter()
                .filter_map(|round| Some((figure_of(&round[b], case)?.0, figure_of(&round[0], case)?.0)))
                .collect();
            let paired = Spread::of(&pairs.iter().map(|(x, base)| x / base).collect::<Vec<_>>());
            let won = pairs.iter().filter(|(x, base)| if *lower { x < base } else { x > base }).count();
            match paired {
                Some(p) => cells.push(format!("{shown} · {:.3} ({won} of {})", p.median, pairs.len())),
                None => cells.push(shown),
            }
        }
        let _ = writeln!(out, "| {case} | {} |", cells.join(" | "));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str =
        "case,test,transport,policy,size,partitions,stamps_only,rep,count,elapsed_ns,per_sec,\
                          gbps,p50_ns,p99_ns,p999_ns,max_ns,mean_ns,probe_ns,retried";

    /// A topics CSV of one run: the raw ring's and `cb`'s throughput at
    /// 64 B (msgs/s), and their round trips' p50 (ns), with `probe`.
    fn csv(raw: f64, cb: f64, raw_p50: u64, cb_p50: u64, probe: f64) -> String {
        format!(
            "{HEADER}\n\
             throughput raw-ring 64 B,throughput,raw-ring,,64,1,false,0,100,1,{raw},0,,,,,,{probe},0\n\
             throughput cb/spin 64 B,throughput,cb,spin,64,1,false,0,100,1,{cb},0,,,,,,{probe},0\n\
             latency raw-ring 256 B,latency,raw-ring,,256,1,false,0,100,1,1,0,{raw_p50},1,1,1,1,{probe},0\n\
             latency cb/spin 256 B,latency,cb,spin,256,1,false,0,100,1,1,0,{cb_p50},1,1,1,1,{probe},0\n"
        )
    }

    #[test]
    fn a_topics_csv_is_read_by_its_column_names() {
        let rows = parse(&csv(20e6, 10e6, 160, 320, 65.0)).unwrap();
        assert_eq!(rows.len(), 4);
        assert_eq!(rows[1].case, "throughput cb/spin 64 B");
        assert_eq!(rows[1].value, 10e6);
        assert_eq!(rows[3].value, 320.0);
        assert!(rows[3].lower_is_better() && !rows[1].lower_is_better());
        assert_eq!(rows[0].probe, Some(65.0));
        assert!(parse("").is_err());
        assert!(parse("case,test\nx,y\n").unwrap_err().contains("no column"));
        let short = format!("{HEADER}\nthroughput cb/spin 64 B,throughput\n");
        assert!(parse(&short).unwrap_err().contains("line 2"));
    }

    #[test]
    fn a_figure_is_the_ratio_to_the_raw_ring_of_the_same_run() {
        let rows = parse(&csv(20e6, 10e6, 160, 320, 65.0)).unwrap();
        assert_eq!(figure(&rows, "throughput cb/spin 64 B"), Some((0.5, true)));
        assert_eq!(figure(&rows, "latency cb/spin 256 B"), Some((2.0, true)));
        assert_eq!(figure(&rows, "throughput raw-ring 64 B"), Some((20e6, false)));
        assert_eq!(figure(&rows, "no such case"), None);
        // Without a raw ring in the run: the figure itself.
        let alone: Vec<Row> = rows.into_iter().filter(|r| !r.is_reference()).collect();
        assert_eq!(figure(&alone, "throughput cb/spin 64 B"), Some((10e6, false)));
    }

    #[test]
    fn builds_are_paired_round_by_round_and_slow_rounds_are_left_out() {
        let run = |raw, cb, cb_p50, probe| parse(&csv(raw, cb, 160, cb_p50, probe)).unwrap();
        let runs = vec![
            // Round 1: the host fast; the new build streams 10 % more.
            vec![run(20e6, 10e6, 320, 65.0), run(20e6, 11e6, 300, 66.0)],
            // Round 2: the host slower, both builds alike in ratio.
            vec![run(10e6, 5e6, 320, 70.0), run(10e6, 5.5e6, 300, 68.0)],
            // Round 3: one run in the slow phase (probe over 3 x 65):
            // left out, whatever it measured.
            vec![run(20e6, 1e6, 3200, 400.0), run(20e6, 19e6, 10, 66.0)],
        ];
        let table = render(&["base", "new"], &runs, &["--group".into(), "topics".into()]);
        assert!(table.contains("3 rounds, 2 kept"), "{table}");
        assert!(table.contains("| throughput cb/spin 64 B | 0.500 | 0.550 · 1.100 (2 of 2) |"), "{table}");
        // Round trips: lower is better, and the new build won both rounds.
        assert!(table.contains("| latency cb/spin 256 B | 2.000 | 1.875 · 0.938 (2 of 2) |"), "{table}");
        assert!(
            table.contains("| throughput raw-ring 64 B | 15.00 M/s | 15.00 M/s · 1.000 (0 of 2) |"),
            "{table}"
        );
    }

    #[test]
    fn the_absolute_pairing_does_not_divide_by_a_raw_ring_that_moved_with_the_build() {
        let run = |raw, cb, probe| parse(&csv(raw, cb, 160, 320, probe)).unwrap();
        // The new build's raw ring streams 10 % slower (its code placed
        // elsewhere), its `cb` exactly as fast as the base's.
        let runs = vec![
            vec![run(20e6, 10e6, 65.0), run(18e6, 10e6, 66.0)],
            vec![run(20e6, 10e6, 65.0), run(18e6, 10e6, 66.0)],
        ];
        let table = render(&["base", "new"], &runs, &[]);
        let (by_ratio, absolute) = table.split_once("### Paired on the absolute figures").unwrap();
        // Divided by its own raw ring, `cb` looks 11 % faster...
        assert!(by_ratio.contains("| throughput cb/spin 64 B | 0.500 | 0.556 · 1.111 (2 of 2) |"), "{table}");
        // ... and paired on the absolute figures it is the same.
        assert!(
            absolute.contains("| throughput cb/spin 64 B | 10.00 M/s | 10.00 M/s · 1.000 (0 of 2) |"),
            "{table}"
        );
        assert!(absolute.contains("| latency cb/spin 256 B | 320 ns | 320 ns · 1.000 (0 of 2) |"), "{table}");
        assert!(
            absolute.contains("| throughput raw-ring 64 B | 20.00 M/s | 18.00 M/s · 0.900 (0 of 2) |"),
            "{table}"
        );
    }

    #[test]
    fn a_round_without_probes_counts_as_steady() {
        let rows = parse(&csv(20e6, 10e6, 160, 320, 65.0).replace(",65,", ",,")).unwrap();
        assert!(rows.iter().all(|r| r.probe.is_none()));
        assert!(steady(&[rows.clone(), rows], Some(10.0)));
    }

    /// A round is left out when one of its runs' probes is far from the
    /// usual one on either side: a far phase, or a nearer one.
    #[test]
    fn a_round_off_the_usual_phase_is_left_out() {
        let at = |probe: &str| {
            parse(&csv(20e6, 10e6, 160, 320, 65.0).replace(",65,", &format!(",{probe},"))).unwrap()
        };
        assert!(steady(&[at("65"), at("150")], Some(65.0)));
        assert!(!steady(&[at("65"), at("200")], Some(65.0)), "far apart");
        assert!(!steady(&[at("20"), at("65")], Some(65.0)), "nearer than usual");
    }
}
