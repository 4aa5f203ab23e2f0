//! `tachyon-bridge`: forwards tachyon topics and RPC channels through Zenoh.
//! See `docs/bridge.md`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use tachyon_bridge::config::{InRoute, OutRoute, RpcCallRoute, RpcServeRoute};
use tachyon_bridge::{Bridge, BridgeError, Config};

/// Forwards tachyon topics and RpcBuffer channels to and from Zenoh.
///
/// Routes come from the configuration file and from the flags (added to
/// the file's). Runs until SIGTERM or SIGINT, then prints its counters.
#[derive(Parser, Debug)]
#[command(name = "tachyon-bridge", version)]
struct Args {
    /// The TOML configuration file (see docs/bridge.md).
    #[arg(long, short)]
    config: Option<PathBuf>,
    /// A name for logs.
    #[arg(long)]
    name: Option<String>,
    /// Zenoh endpoint to listen on (repeatable), e.g. tcp/0.0.0.0:7447.
    #[arg(long)]
    listen: Vec<String>,
    /// Zenoh endpoint to connect to (repeatable).
    #[arg(long)]
    connect: Vec<String>,
    /// Turn Zenoh multicast scouting on (off by default).
    #[arg(long)]
    multicast_scouting: bool,
    /// Zenoh link lease in milliseconds.
    #[arg(long)]
    lease_ms: Option<u64>,
    /// Outgoing route REGION/TOPIC=KEY (repeatable).
    #[arg(long = "out", value_name = "REGION/TOPIC=KEY")]
    outgoing: Vec<String>,
    /// The consumer group through which the out route of REGION/TOPIC (from
    /// the file or --out) reads it: REGION/TOPIC=GROUP (repeatable; default
    /// group name "tachyon-bridge").
    #[arg(long, value_name = "REGION/TOPIC=GROUP")]
    out_group: Vec<String>,
    /// The out route of REGION/TOPIC reads through the topic's default group,
    /// competing with local consumers (for regions without group slots;
    /// repeatable).
    #[arg(long, value_name = "REGION/TOPIC")]
    out_default_group: Vec<String>,
    /// Incoming route KEY=REGION/TOPIC (repeatable).
    #[arg(long = "in", value_name = "KEY=REGION/TOPIC")]
    incoming: Vec<String>,
    /// Serve a local RPC channel to Zenoh: CHANNEL=KEY (repeatable).
    #[arg(long, value_name = "CHANNEL=KEY")]
    rpc_serve: Vec<String>,
    /// Offer a Zenoh queryable as a local RPC channel: KEY=CHANNEL (repeatable).
    #[arg(long, value_name = "KEY=CHANNEL")]
    rpc_call: Vec<String>,
    /// Check the configuration and exit.
    #[arg(long)]
    check: bool,
}

fn split2<'a>(
    flag: &str,
    whole: &str,
    v: &'a str,
    sep: char,
    what: &str,
) -> Result<(&'a str, &'a str), BridgeError> {
    v.split_once(sep).ok_or_else(|| BridgeError::InvalidConfig {
        field: format!("--{flag} {whole}"),
        why: format!("write {what}"),
    })
}

fn build(args: &Args) -> Result<Config, BridgeError> {
    let mut c = match &args.config {
        Some(path) => Config::from_file(path)?,
        None => Config::default(),
    };
    if args.name.is_some() {
        c.name = args.name.clone();
    }
    c.zenoh.listen.extend(args.listen.iter().cloned());
    c.zenoh.connect.extend(args.connect.iter().cloned());
    c.zenoh.multicast_scouting |= args.multicast_scouting;
    if args.lease_ms.is_some() {
        c.zenoh.lease_ms = args.lease_ms;
    }
    // Routes from flags go through the same TOML parser as the file's, so
    // their defaults are the same.
    let mut extra = String::new();
    let q = |s: &str| format!("{s:?}");
    for v in &args.outgoing {
        let (rt, key) = split2("out", v, v, '=', "REGION/TOPIC=KEY")?;
        let (region, topic) = split2("out", v, rt, '/', "REGION/TOPIC=KEY")?;
        extra += &format!("[[out]]\nregion = {}\ntopic = {}\nkey = {}\n", q(region), q(topic), q(key));
    }
    for v in &args.incoming {
        let (key, rt) = split2("in", v, v, '=', "KEY=REGION/TOPIC")?;
        let (region, topic) = split2("in", v, rt, '/', "KEY=REGION/TOPIC")?;
        extra += &format!("[[in]]\nkey = {}\nregion = {}\ntopic = {}\n", q(key), q(region), q(topic));
    }
    for v in &args.rpc_serve {
        let (channel, key) = split2("rpc-serve", v, v, '=', "CHANNEL=KEY")?;
        extra += &format!("[[rpc_serve]]\nchannel = {}\nkey = {}\n", q(channel), q(key));
    }
    for v in &args.rpc_call {
        let (key, channel) = split2("rpc-call", v, v, '=', "KEY=CHANNEL")?;
        extra += &format!("[[rpc_call]]\nkey = {}\nchannel = {}\n", q(key), q(channel));
    }
    if !extra.is_empty() {
        #[derive(serde::Deserialize)]
        struct Routes {
            #[serde(default, rename = "out")]
            outgoing: Vec<OutRoute>,
            #[serde(default, rename = "in")]
            incoming: Vec<InRoute>,
            #[serde(default)]
            rpc_serve: Vec<RpcServeRoute>,
            #[serde(default)]
            rpc_call: Vec<RpcCallRoute>,
        }
        let r: Routes = toml::from_str(&extra)
            .map_err(|e| BridgeError::ParseConfig { origin: "from flags".into(), message: e.to_string() })?;
        c.outgoing.extend(r.outgoing);
        c.incoming.extend(r.incoming);
        c.rpc_serve.extend(r.rpc_serve);
        c.rpc_call.extend(r.rpc_call);
    }
    // Per-route group choices, for routes of the file or of --out.
    let mut chosen = std::collections::HashSet::new();
    let mut route_of = |flag: &str, whole: &str, rt: &str| -> Result<usize, BridgeError> {
        let (region, topic) = split2(flag, whole, rt, '/', "REGION/TOPIC")?;
        if !chosen.insert((region.to_owned(), topic.to_owned())) {
            return Err(BridgeError::InvalidConfig {
                field: format!("--{flag} {whole}"),
                why: format!("the group of {region}/{topic} is chosen by an earlier --out-group or --out-default-group"),
            });
        }
        c.outgoing.iter().position(|r| r.region == region && r.topic == topic).ok_or_else(|| {
            BridgeError::InvalidConfig {
                field: format!("--{flag} {whole}"),
                why: format!("no out route forwards {region}/{topic} (add one with --out or in the file)"),
            }
        })
    };
    let mut set = Vec::new();
    for v in &args.out_group {
        let (rt, group) = split2("out-group", v, v, '=', "REGION/TOPIC=GROUP")?;
        set.push((route_of("out-group", v, rt)?, Some(group.to_owned())));
    }
    for v in &args.out_default_group {
        set.push((route_of("out-default-group", v, v)?, None));
    }
    for (i, group) in set {
        let r = &mut c.outgoing[i];
        r.default_group = group.is_none();
        r.group = group;
    }
    c.validate()?;
    Ok(c)
}

fn main() -> ExitCode {
    let args = Args::parse();
    let config = match build(&args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("tachyon-bridge: {e}");
            return ExitCode::from(2);
        }
    };
    if args.check {
        println!("tachyon-bridge: configuration ok");
        return ExitCode::SUCCESS;
    }
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        if let Err(e) = signal_hook::flag::register(sig, Arc::clone(&stop)) {
            eprintln!("tachyon-bridge: cannot handle signal {sig}: {e}");
            return ExitCode::FAILURE;
        }
    }
    let name = config.display_name();
    let bridge = match Bridge::start(&config) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("tachyon-bridge[{name}]: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("tachyon-bridge[{name}]: ready (run id {:016x})", bridge.id());
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let stats = bridge.stop();
    println!("tachyon-bridge[{name}]: stopped: {stats}");
    ExitCode::SUCCESS
}
