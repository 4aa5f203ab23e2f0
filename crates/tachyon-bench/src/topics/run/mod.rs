//! One repetition of one topics case: the transport's run.

mod cb;
mod flag;
#[cfg(feature = "iceoryx2")]
mod iceoryx;
mod kernel;
mod raw;
mod rpc;
mod topic;

use super::case::{topic_via, Case, Sample, Settings, Via};
use cb::cb_run;
use flag::flag_run;
#[cfg(feature = "iceoryx2")]
use iceoryx::iceoryx_run;
use kernel::kernel_run;
use raw::raw_run;
use rpc::rpc_run;
pub(crate) use topic::partition_keys;
use topic::topic_run;

/// Runs one repetition of one case between two probes of the machine's
/// cache-line round trip, again while they say it was unsteady
/// ([`crate::probe::run_probed`]): the same for every transport,
/// references included.
pub fn run(case: Case, settings: &Settings, rep: usize) -> Result<Sample, String> {
    let probed =
        crate::probe::run_probed(settings.common.placement.reader(), || run_only(case, settings, rep))?;
    Ok(Sample { probe: probed.probe, retried: probed.retried, ..probed.sample })
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
        topic_via!() => topic_run(case, settings, count, warmup)?,
        Via::RawRing
        | Via::MpmcRing
        | Via::CellClaimRing
        | Via::CellClaimCasRing
        | Via::ChunkPoolRing
        | Via::ChunkPoolHotRing
        | Via::LeasedRing
        | Via::LeasedFencedRing => raw_run(case, settings, count, warmup)?,
        Via::Flag => flag_run(case, settings, count, warmup)?,
        Via::Cb | Via::CbLight | Via::CbBatch => cb_run(case, settings, count, warmup)?,
        Via::Unix | Via::Pipe | Via::Tcp => kernel_run(case, settings, count, warmup)?,
        Via::Rpc | Via::RpcInline => unreachable!("handled above"),
        #[cfg(feature = "iceoryx2")]
        Via::Iceoryx2 => iceoryx_run(case, settings, count, warmup)?,
    };
    Ok(Sample { case, rep, count, elapsed, rtt, probe: None, retried: 0 })
}
