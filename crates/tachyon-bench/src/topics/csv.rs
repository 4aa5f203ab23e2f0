//! The topics group's CSV file.

use super::case::Sample;
use crate::policy::Policy;
use std::fmt::Write as _;

/// One CSV line per sample.
pub fn csv(samples: &[Sample]) -> String {
    let mut out = "case,test,transport,policy,size,partitions,stamps_only,rep,count,elapsed_ns,per_sec,gbps,\
                   p50_ns,p99_ns,p999_ns,max_ns,mean_ns,probe_ns,retried\n"
        .to_owned();
    for s in samples {
        let c = s.case;
        let _ = write!(
            out,
            "{c},{},{},{},{},{},{},{},{},{},{:.1},{:.4}",
            c.test.name(),
            c.via.name(),
            c.policy.map_or("", Policy::name),
            c.size,
            c.partitions,
            c.stamps_only,
            s.rep,
            s.count,
            s.elapsed.as_nanos(),
            s.rate(),
            s.gbps()
        );
        match s.rtt {
            Some(r) => {
                let _ = write!(out, ",{},{},{},{},{:.1}", r.p50, r.p99, r.p999, r.max, r.mean);
            }
            None => out.push_str(",,,,,"),
        }
        match s.probe {
            Some(ns) => {
                let _ = write!(out, ",{ns:.1}");
            }
            None => out.push(','),
        }
        let _ = writeln!(out, ",{}", s.retried);
    }
    out
}
