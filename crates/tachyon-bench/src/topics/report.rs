//! The topics group's markdown section: latency and throughput tables and
//! the project's bars.

use super::case::{Case, Sample, Settings, Test, Via};
use super::results::{p50, Results};
use crate::latency::{self, Percentiles};
use crate::policy::Policy;
use crate::probe::Steadiness;
use crate::stats::{self, Spread};
use std::fmt::Write as _;

/// The markdown section for this group.
pub(super) fn render(settings: &Settings, samples: &[Sample]) -> String {
    let res = Results::new(samples);
    let med = |case: Case, f: fn(&Percentiles) -> f64| {
        res.spread(case, |s| s.rtt.map(|r| f(&r))).map_or_else(|| "–".to_owned(), |s| latency::us(s.median))
    };
    let cases = settings.cases();
    let mut out = String::new();
    let _ = writeln!(out, "## Round-trip latency and one-way throughput between two processes\n");
    let _ = writeln!(
        out,
        "Two processes, pinned to two CPUs when there are two. Topics have one partition of {} \
         descriptors; a CircularBuffer has {} nodes of the message size (one ring per direction \
         for latency). Copy path: `send`/`recv_into`. Loan path: the message is written into a \
         `loan` and `publish`ed; the receiver reads every byte of it in place (`receive`) and \
         drops it. In place: the same work through closures (`send_with`/`receive_with`), \
         with no `Loan` or `Message` value. Copy and read (throughput only): the copy path \
         whose receiver then reads every byte of its copy as the loan path's reads the message \
         in place, the same work with the bytes and one copy more. Every message carries its \
         sequence number, checked \
         by the receiver; a pong is compared with its ping byte for byte. References, same \
         bytes, same checks: a Unix domain socket pair, TCP over loopback with `TCP_NODELAY` \
         and pipes, with one blocking `write` and one blocking `read` per message; a raw \
         single-producer ring of memcpys that spins (for latency: a spinning flag and a memcpy \
         each way, the floor of any shared-memory transport); a bare cache line bounced \
         between the processes. Ratios are medians of per-repetition ratios to the reference \
         run of the same repetition. With `spin` both processes spin while they wait. The C \
         tachyon library reports about 1.0 µs p50 for a spin round trip and 3.96 M msgs/s for \
         1 KiB messages (about 2 × a pipe), on its own machine.\n",
        settings.capacity, settings.capacity
    );

    let test = Test::Latency;
    if cases.iter().any(|c| c.test == test) {
        let (count, warmup) = settings.counts(test);
        let _ = writeln!(
            out,
            "### Round-trip latency, {} messages ({count} timed round trips per run, after {warmup})\n",
            stats::bytes(settings.latency_size as u64)
        );
        let _ = writeln!(
            out,
            "Microseconds: medians over the repetitions of each run's percentile (hdrhistogram), \
             the p50's range in brackets. A round trip is timed from before the ping is written \
             to after the pong is read (and, on the loan path, released). RpcBuffer: a call \
             with the echo handler ({} warm-up calls). For the ratios lower is better.\n",
            10 + settings.round_trips / 10
        );
        let _ = writeln!(
            out,
            "| transport | wait | p50 µs | (min – max) | p99 µs | p99.9 µs | max µs | mean µs | \
             p50 × Unix socket | p50 × pipe | p50 × raw floor |"
        );
        let _ = writeln!(out, "| --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
        for &case in cases.iter().filter(|c| c.test == test) {
            let Some(p) = res.spread(case, p50) else { continue };
            let vs = |via: Via| versus(settings, &res, case, via, p50);
            let _ = writeln!(
                out,
                "| {} | {} | {} | ({} – {}) | {} | {} | {} | {} | {} | {} | {} |",
                case.via.describe(),
                case.wait(),
                latency::us(p.median),
                latency::us(p.min),
                latency::us(p.max),
                med(case, |r| r.p99),
                med(case, |r| r.p999),
                med(case, |r| r.max),
                med(case, |r| r.mean),
                vs(Via::Unix),
                vs(Via::Pipe),
                vs(Via::RawRing),
            );
        }
        out.push('\n');
    }

    let test = Test::Throughput;
    for &size in &settings.throughput_sizes {
        if !cases.iter().any(|c| c.test == test && c.size == size) {
            continue;
        }
        let (count, warmup) = settings.counts(test);
        let _ = writeln!(
            out,
            "### One-way throughput, {} messages ({count} timed messages per run, after {warmup})\n",
            stats::bytes(size as u64)
        );
        let _ = writeln!(
            out,
            "Messages per second delivered to and checked by the receiving process, timed by it: \
             median of the repetitions, range in brackets; GB/s = 10^9 payload bytes per second. \
             The copy-path and CircularBuffer receivers copy each message out (the copy-read \
             receiver then reads its copy, every byte); the loan-path and in-place receivers \
             read every byte in place. For the ratios higher is better.\n"
        );
        let _ = writeln!(
            out,
            "| transport | wait | msgs/s | (min – max) | GB/s | × Unix socket | × pipe | × raw ring |"
        );
        let _ = writeln!(out, "| --- | --- | ---: | --- | ---: | ---: | ---: | ---: |");
        let rate = |s: &Sample| Some(s.rate());
        for &case in cases.iter().filter(|c| c.test == test && c.size == size) {
            let Some(r) = res.spread(case, rate) else { continue };
            let g = res.spread(case, |s| Some(s.gbps())).map_or(0.0, |s| s.median);
            let vs = |via: Via| versus(settings, &res, case, via, rate);
            let _ = writeln!(
                out,
                "| {} | {} | {} | ({} – {}) | {:.2} | {} | {} | {} |",
                case.via.describe_in(test),
                case.wait(),
                stats::si(r.median),
                stats::si(r.min),
                stats::si(r.max),
                g,
                vs(Via::Unix),
                vs(Via::Pipe),
                vs(Via::RawRing),
            );
        }
        out.push('\n');
    }
    let steady = Steadiness::of(res.samples());
    out.push_str(&bars(settings, &res, &steady));
    out.push_str(&floors(settings, &res));
    let probed: Vec<&Sample> = res.samples().collect();
    out.push_str(&steady.render(&probed, "`--messages`, `--round-trips`"));
    out
}

/// Where the spin throughput goes, step by step from the raw SPSC ring:
/// each ratio divides one transport by the step before it, paired per
/// repetition.
fn floors(settings: &Settings, res: &Results<'_>) -> String {
    let spin = Some(Policy::Spin);
    // (transport, its wait policy), the step before it, what the step adds.
    type Step = ((Via, Option<Policy>), (Via, Option<Policy>), &'static str);
    let steps: [Step; 17] = [
        (
            (Via::LeasedRing, None),
            (Via::RawRing, None),
            "slot words, each side leasing its end: a load and a store of the slot's word, no locked instruction",
        ),
        (
            (Via::LeasedFencedRing, None),
            (Via::LeasedRing, None),
            "a full fence before each wake-up check (as tachyon's), not the light half of an asymmetric one",
        ),
        (
            (Via::MpmcRing, None),
            (Via::LeasedRing, None),
            "a claim per message instead of a lease: a CAS of the cursor per side",
        ),
        (
            (Via::CellClaimRing, None),
            (Via::MpmcRing, None),
            "the claim on the slot's word (the line the other side polls)",
        ),
        (
            (Via::CellClaimCasRing, None),
            (Via::CellClaimRing, None),
            "hand-overs by CAS from the claimed word instead of stores",
        ),
        (
            (Via::Cb, spin),
            (Via::CellClaimCasRing, None),
            "CircularBuffer: tokens, length words, wake-up checks, repair paths, its code",
        ),
        (
            (Via::CbLight, spin),
            (Via::Cb, spin),
            "light hand-overs: plain stores, the wake-up check's fence moved to sleepers (membarrier)",
        ),
        ((Via::Copy, spin), (Via::Cb, spin), "topic copy path: the chunk pool, chunk hand-offs, partitions"),
        (
            (Via::CopyLight, spin),
            (Via::Copy, spin),
            "light hand-overs on the topic's chunk path (`send` claims its cell before its copy)",
        ),
        (
            (Via::CopyInline, spin),
            (Via::Cb, spin),
            "topic copy path with inline slots: partitions, groups' checks, the topic's code (no chunks)",
        ),
        (
            (Via::CopyInlineLight, spin),
            (Via::CopyInline, spin),
            "light hand-overs on the topic with inline slots",
        ),
        (
            (Via::CopyInlineBatch, spin),
            (Via::CopyInline, spin),
            "batch reads: the consumer waits for a batch when it catches up with the producer mid-stream",
        ),
        (
            (Via::CbBatch, spin),
            (Via::Cb, spin),
            "batch reads on CircularBuffer",
        ),
        (
            (Via::ChunkPoolRing, None),
            (Via::CellClaimCasRing, None),
            "payload in pool chunks: 4 CASes of a chunk's state word per message, batched returns",
        ),
        (
            (Via::Copy, spin),
            (Via::ChunkPoolRing, None),
            "topic copy path over the floor of its chunk ownership: free lists, tokens, recovery, its code",
        ),
        (
            (Via::ChunkPoolHotRing, None),
            (Via::ChunkPoolRing, None),
            "chunks written again while the consumer's core still holds their lines (a pool of 128)",
        ),
        (
            (Via::Copy, spin),
            (Via::ChunkPoolHotRing, None),
            "topic copy path over that floor with its own reuse order: free lists, tokens, recovery, its code",
        ),
    ];
    let rate = |s: &Sample| Some(s.rate());
    let mut rows = String::new();
    for &size in &settings.throughput_sizes {
        let at = |via: Via, policy: Option<Policy>| Case::new(Test::Throughput, via, policy, size);
        for ((via, policy), (base, base_policy), what) in steps {
            if let Some(r) = res.paired(at(via, policy), at(base, base_policy), rate) {
                let _ = writeln!(
                    rows,
                    "| {} | {} ÷ {} | {what} | {:.2} | ({:.2} – {:.2}) |",
                    stats::bytes(size as u64),
                    via.short(),
                    base.short(),
                    r.median,
                    r.min,
                    r.max
                );
            }
        }
    }
    stats::table_section(
        "Where the spin throughput goes, step by step",
        "Each step divides a transport's messages per second by the step before it (paired per \
         repetition). From the ring's floor two ways lead to the topic: through `CircularBuffer`, and \
         through the chunk-pool ring; the product of either way's steps is about the topic's ratio to \
         the raw ring. The leased ring, the three MPMC rings and the chunk-pool ring are references \
         written in the benchmark, without recovery: what a ring costs whose ends are each leased to \
         one process at a time (per-slot words, no locked instruction per message; not a design \
         tachyon has), what a ring that several processes may write costs at least, \
         what it costs at least when every claim names its claimant, with hand-overs that cannot \
         overwrite a repair, and with the payload in pool chunks whose state words name their \
         holder, as a topic's do; the last, with a pool of 128 chunks, reuses each chunk while the \
         consumer's core still holds its lines, as a topic's caches and last-in-first-out free lists \
         do.",
        ["| size | step | what it adds | median ratio | (min – max) |", "| --- | --- | --- | ---: | --- |"],
        &rows,
    )
}

/// A median ratio as a table cell.
fn ratio(r: Option<Spread>) -> String {
    r.map_or_else(|| "–".to_owned(), |r| format!("{:.2}", r.median))
}

/// `f(case) ÷ f(reference)`, the reference being `via` on the same test
/// and size, as a table cell: `–` if `via` is not measured, `1.00` for the
/// reference itself.
fn versus(
    settings: &Settings,
    res: &Results<'_>,
    case: Case,
    via: Via,
    f: impl Fn(&Sample) -> Option<f64>,
) -> String {
    if !settings.transports.contains(&via) {
        "–".to_owned()
    } else if case.via == via {
        "1.00".to_owned()
    } else {
        ratio(res.paired(case, Case::new(case.test, via, None, case.size), f))
    }
}

/// A bar's ratio: a case, its reference, and what is compared.
type Pair = (Case, Case, fn(&Sample) -> Option<f64>);

/// The reference rings of a throughput bar's transport's design, written
/// in the benchmark without recovery code or checks: for a ring of items
/// (`CircularBuffer`, a topic's inline slots), Vyukov's MPMC ring, what any
/// ring that several processes may write and read with a claim per message
/// costs at least, with no crash safety at all; for a topic's chunk path,
/// that ring with claims that name their claimant and CAS hand-overs,
/// carrying chunks whose state words name their holder (the better of the
/// two reuse orders counts). `&[]` for transports without one.
fn design_refs(via: Via) -> &'static [Via] {
    match via {
        Via::Copy | Via::CopyLight => &[Via::ChunkPoolRing, Via::ChunkPoolHotRing],
        Via::CopyInline
        | Via::CopyInlineLight
        | Via::CopyInlineBatch
        | Via::Cb
        | Via::CbLight
        | Via::CbBatch => &[Via::MpmcRing],
        _ => &[],
    }
}

/// A bar's verdict from its judged ratio (`None`: not judged), its limit,
/// its direction, and its transport's design reference on the same scale
/// (`design_refs`, judged as the bar is), if measured: a bar that is not
/// met and that the reference misses too says so, since tuning the
/// transport does not reach what its design's bare protocol does not.
fn verdict(judged: Option<f64>, limit: f64, lower_is_better: bool, reference: Option<f64>) -> &'static str {
    let meets = |x: f64| if lower_is_better { x <= limit } else { x >= limit };
    match judged {
        None => "not judged (no steady pair)",
        Some(j) if meets(j) => "yes",
        Some(_) if reference.is_some_and(|r| !meets(r)) => "**no**: its design's reference misses it too",
        Some(_) => "**no**",
    }
}

/// A bar's row: the measure, its ratio over every repetition, over the
/// steady ones, and as the bar is judged, the bar, its direction, and its
/// transport's design reference (`design_refs`), judged the same way.
struct Row {
    what: String,
    all: Option<Spread>,
    calm: Option<Spread>,
    judged: Option<f64>,
    limit: f64,
    lower_is_better: bool,
    design: Option<f64>,
}

/// The bars, each with the paired ratio of this run: over every
/// repetition, and over the pairs of steady runs (see [`Steadiness`]), on
/// which a bar is judged when the runs were probed.
fn bars(settings: &Settings, res: &Results<'_>, steady: &Steadiness) -> String {
    let lat = |via: Via, policy: Option<Policy>| Case::new(Test::Latency, via, policy, settings.latency_size);
    let thr = |via: Via, policy: Option<Policy>| Case::new(Test::Throughput, via, policy, 1024);
    let rate: fn(&Sample) -> Option<f64> = |s| Some(s.rate());
    let spin = Some(Policy::Spin);
    // A ratio as a bar is judged: over the steady pairs where the runs
    // were probed (another phase's ratio would pass or fail a bar for the
    // wrong reason), else over every pair.
    let judge = |case: Case, reference: Case, f: fn(&Sample) -> Option<f64>| match steady.usual {
        Some(_) => res.paired_in(case, reference, f, |s| !steady.unsteady(s)).map(|c| c.median),
        None => res.paired(case, reference, f).map(|c| c.median),
    };
    let mut rows: Vec<Row> = Vec::new();
    let mut bar = |what: String, pair: Pair, limit: f64, lower_is_better: bool| {
        let (case, reference, f) = pair;
        let all = res.paired(case, reference, f);
        let calm = steady.usual.and_then(|_| res.paired_in(case, reference, f, |s| !steady.unsteady(s)));
        // A throughput bar against the raw ring has a design reference
        // on its scale.
        let design = if case.test == Test::Throughput && reference.via == Via::RawRing {
            let at = |via: Via| Case::new(case.test, via, None, case.size);
            design_refs(case.via).iter().filter_map(|&v| judge(at(v), reference, f)).reduce(f64::max)
        } else {
            None
        };
        let judged = judge(case, reference, f);
        rows.push(Row { what, all, calm, judged, limit, lower_is_better, design });
    };
    for via in [Via::Copy, Via::Loan] {
        bar(
            format!("{} spin round trip p50 ÷ raw floor", via.short()),
            (lat(via, spin), lat(Via::RawRing, None), p50),
            2.0,
            true,
        );
        bar(
            format!("{} futex round trip p50 ÷ Unix socket", via.short()),
            (lat(via, Some(Policy::Futex)), lat(Via::Unix, None), p50),
            1.0,
            true,
        );
    }
    let thr64 = |via: Via, policy: Option<Policy>| Case::new(Test::Throughput, via, policy, 64);
    for via in [Via::Copy, Via::CopyLight, Via::CopyInline, Via::CopyInlineLight] {
        bar(
            format!("{} spin 1 KiB throughput ÷ raw ring", via.short()),
            (thr(via, spin), thr(Via::RawRing, None), rate),
            0.8,
            false,
        );
    }
    // Against the copy path as it stands (its receiver copies and reads
    // nothing more), and against the copy path whose receiver reads its
    // copy as these read in place: the same work with the bytes, one copy
    // more, which is what "the loan path does one copy less" compares.
    for copy in [Via::Copy, Via::CopyRead] {
        for via in [Via::Loan, Via::InPlace] {
            bar(
                format!("{} spin 1 KiB throughput ÷ {} spin 1 KiB throughput", via.short(), copy.short()),
                (thr(via, spin), thr(copy, spin), rate),
                1.0,
                false,
            );
        }
    }
    for (via, limit) in [
        (Via::Copy, 0.5),
        (Via::CopyLight, 0.5),
        (Via::CopyInline, 0.5),
        (Via::CopyInlineLight, 0.5),
        (Via::CopyInlineBatch, 0.5),
        (Via::Cb, 0.7),
        (Via::CbLight, 0.7),
        (Via::CbBatch, 0.7),
    ] {
        bar(
            format!("{} spin 64 B throughput ÷ raw ring", via.short()),
            (thr64(via, spin), thr64(Via::RawRing, None), rate),
            limit,
            false,
        );
    }
    for via in [Via::Copy, Via::CopyLight, Via::CopyInline, Via::CopyInlineLight, Via::Loan, Via::InPlace] {
        bar(
            format!("{} spin 1 KiB throughput ÷ pipe (C library: 2)", via.short()),
            (thr(via, spin), thr(Via::Pipe, None), rate),
            2.0,
            false,
        );
    }
    #[cfg(feature = "iceoryx2")]
    for via in [Via::Copy, Via::Loan] {
        bar(
            format!("{} spin round trip p50 ÷ iceoryx2", via.short()),
            (lat(via, spin), lat(Via::Iceoryx2, None), p50),
            0.5,
            true,
        );
    }
    for via in [Via::Rpc, Via::RpcInline] {
        for p in &settings.policies {
            bar(
                format!("{} {} round trip p50 ÷ topic copy {} round trip", via.short(), p.name(), p.name()),
                (lat(via, Some(*p)), lat(Via::Copy, Some(*p)), p50),
                if via == Via::RpcInline { 1.2 } else { 1.5 },
                true,
            );
        }
    }
    let mut out = String::new();
    let rows: Vec<Row> = rows.into_iter().filter(|r| r.all.is_some()).collect();
    if rows.is_empty() {
        return out;
    }
    let _ = writeln!(out, "### Against the project's bars\n");
    if steady.usual.is_some() {
        let _ = writeln!(
            out,
            "Each bar is judged on its pairs of runs that were both steady (\"How steady the \
             machine was\", below), and not at all where no pair was; the median over every \
             repetition is given beside it.\n"
        );
    }
    let _ = writeln!(
        out,
        "For a throughput bar against the raw ring, **its design's reference** on the same scale, \
         judged as the bar is: the bare protocol of the transport's design, written in the \
         benchmark with no recovery code and no checks. For `CircularBuffer` and a topic's inline \
         slots, Vyukov's MPMC ring (a ring any number of processes may write and read, as these \
         may, with a claim per message per side and no crash safety at all); for a topic's chunk \
         path, the chunk-pool ring (claims that name their claimant, CAS hand-overs, chunks whose \
         state words name their holder; the better of its two reuse orders). A bar that its \
         design's reference misses too is not reached by tuning the transport.\n"
    );
    let _ = writeln!(
        out,
        "| measure | median ratio | (min – max) | steady runs | bar | its design's reference | met |"
    );
    let _ = writeln!(out, "| --- | ---: | --- | ---: | ---: | ---: | --- |");
    let cell = |x: Option<f64>| x.map_or_else(|| "–".to_owned(), |x| format!("{x:.2}"));
    for row in rows {
        let Some(r) = row.all else { continue };
        let _ = writeln!(
            out,
            "| {} | {:.2} | ({:.2} – {:.2}) | {} | {} {} | {} | {} |",
            row.what,
            r.median,
            r.min,
            r.max,
            cell(row.calm.map(|c| c.median)),
            if row.lower_is_better { "≤" } else { "≥" },
            row.limit,
            cell(row.design),
            verdict(row.judged, row.limit, row.lower_is_better, row.design),
        );
    }
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::verdict;

    #[test]
    fn a_bar_its_design_reference_misses_too_says_so() {
        // Higher is better: met, missed, missed by the reference too.
        assert_eq!(verdict(Some(0.8), 0.8, false, Some(0.5)), "yes");
        assert_eq!(verdict(Some(0.6), 0.8, false, Some(0.9)), "**no**");
        assert_eq!(verdict(Some(0.6), 0.8, false, Some(0.7)), "**no**: its design's reference misses it too");
        assert_eq!(verdict(Some(0.6), 0.8, false, None), "**no**");
        // Lower is better.
        assert_eq!(verdict(Some(1.0), 1.0, true, None), "yes");
        assert_eq!(verdict(Some(1.1), 1.0, true, Some(0.9)), "**no**");
        assert_eq!(verdict(Some(1.1), 1.0, true, Some(1.05)), "**no**: its design's reference misses it too");
        // No steady pair: not judged, whatever the reference.
        assert_eq!(verdict(None, 0.8, false, Some(0.1)), "not judged (no steady pair)");
    }
}
