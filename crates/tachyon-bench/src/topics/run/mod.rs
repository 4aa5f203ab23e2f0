//! One repetition of one topics case: the transport's run.

mod cb;
mod flag;
#[cfg(feature = "iceoryx2")]
mod iceoryx;
mod kernel;
mod raw;
mod rpc;
mod topic;

use super::case::{Case, Sample, Settings, Via};
use cb::cb_run;
use flag::flag_run;
#[cfg(feature = "iceoryx2")]
use iceoryx::iceoryx_run;
use kernel::kernel_run;
use raw::raw_run;
use rpc::rpc_run;
pub(crate) use topic::partition_keys;
use topic::topic_run;

/// How many times a run whose probes say the machine was slow is run
/// again (the last run counts whatever its probes say).
const RETRIES: u32 = 2;

/// Runs one repetition of one case, between two probes of the machine's
/// cache-line round trip; again, up to [`RETRIES`] times, while the
/// probes say the host had placed the two vCPUs far apart (see
/// `probe.rs`): the same for every transport, references included.
pub fn run(case: Case, settings: &Settings, rep: usize) -> Result<Sample, String> {
    let other = settings.common.placement.reader();
    let mut retried = 0;
    loop {
        let before = crate::probe::line_round_trip(other);
        let mut sample = run_only(case, settings, rep)?;
        let after = crate::probe::line_round_trip(other);
        sample.probe = before.zip(after).map(|(b, a)| b.max(a));
        sample.retried = retried;
        if retried == RETRIES || !sample.probe.is_some_and(crate::probe::slow) {
            return Ok(sample);
        }
        retried += 1;
    }
}

fn run_only(case: Case, settings: &Settings, rep: usize) -> Result<Sample, String> {
    let (count, warmup) = settings.counts(case.test);
    if matches!(case.via, Via::Rpc | Via::RpcInline) {
        return rpc_run(case, settings, rep);
    }
    if case.stamps_only && case.via != Via::Loan {
        return Err("only the loan path can leave the payload untouched".into());
    }
    let (elapsed, rtt) = match case.via {
        Via::Copy | Via::CopyLight | Via::CopyInline | Via::CopyInlineLight | Via::Loan | Via::InPlace => {
            topic_run(case, settings, count, warmup)?
        }
        Via::RawRing
        | Via::MpmcRing
        | Via::CellClaimRing
        | Via::CellClaimCasRing
        | Via::ChunkPoolRing
        | Via::ChunkPoolHotRing
        | Via::LeasedRing
        | Via::LeasedFencedRing => raw_run(case, settings, count, warmup)?,
        Via::Flag => flag_run(case, settings, count, warmup)?,
        Via::Cb | Via::CbLight => cb_run(case, settings, count, warmup)?,
        Via::Unix | Via::Pipe | Via::Tcp => kernel_run(case, settings, count, warmup)?,
        Via::Rpc | Via::RpcInline => unreachable!("handled above"),
        #[cfg(feature = "iceoryx2")]
        Via::Iceoryx2 => iceoryx_run(case, settings, count, warmup)?,
    };
    Ok(Sample { case, rep, count, elapsed, rtt, probe: None, retried: 0 })
}
