//! A topics run through an `RpcBuffer`, by the rpc group's code.

use crate::policy::Policy;
use crate::topics::case::{Case, Sample, Settings, Test, Via};

/// `RpcBuffer` request/response of `size` bytes, measured by the rpc
/// group's code (one packet per message, the default node size or larger).
pub(super) fn rpc_run(case: Case, settings: &Settings, rep: usize) -> Result<Sample, String> {
    if case.test != Test::Latency {
        return Err("RpcBuffer is measured for latency only".into());
    }
    let policy = case.policy.unwrap_or(Policy::Hybrid);
    let shape = crate::rpc::Shape {
        msg: case.size,
        node: (case.size + crate::rpc::HEADER).max(4096),
        nodes: 64,
        dotnet: "–",
    };
    let rpc = crate::rpc::Settings {
        calls: settings.round_trips,
        large_calls: settings.round_trips,
        policies: vec![policy],
        transports: vec![crate::rpc::Transport::Rpc],
        common: settings.common,
    };
    let via = crate::rpc::Via::Rpc(policy, shape, case.via == Via::RpcInline);
    let s = crate::rpc::run(crate::rpc::Case { via }, &rpc, rep)?;
    Ok(Sample { case, rep, count: s.calls, elapsed: s.elapsed, rtt: Some(s.rtt), probe: None, retried: 0 })
}
